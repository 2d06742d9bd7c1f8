//! The container image's defaults as the Dockerfile states them (`ENV`, `WORKDIR`, `VOLUME`,
//! `CMD`, read from the file, not copied here) and the `docker run` examples of
//! docs/deployment.md, run with the binary in a temporary folder laid out like the image:
//! the image's command alone fails closed (exit 2, no authentication), the documented trial
//! run starts and writes its audit records in `/var/lib/querygate/audit` and nowhere else
//! but its volumes, and the documented JWT configuration is accepted on the image's listen
//! address. Docker itself is not needed; the only change to what the image runs is the
//! listen address (127.0.0.1:0 instead of 0.0.0.0:8765: tests bind loopback only).

use std::path::{Path, PathBuf};

use tokio::io::AsyncBufReadExt as _;

use crate::mcp_support::{collect_lines, install_crypto_provider, terminate};
use crate::support::identity::raw_call;

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The run stage of the Dockerfile.
#[derive(Debug, Default)]
struct Image {
    env: Vec<(String, String)>,
    workdir: String,
    volumes: Vec<String>,
    cmd: Vec<String>,
}

/// Logical lines (continuations joined, comments dropped) of `text`.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if current.is_empty() && (line.starts_with('#') || line.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    lines
}

fn image() -> Image {
    let text = repo_file("Dockerfile");
    let lines = logical_lines(&text);
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    let mut image = Image::default();
    for line in &lines[last_from + 1..] {
        let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        match instruction {
            "ENV" => {
                for pair in rest.split_whitespace() {
                    let (key, value) = pair.split_once('=').expect("ENV key=value");
                    image
                        .env
                        .push((key.to_owned(), value.trim_matches('"').to_owned()));
                }
            }
            "WORKDIR" => image.workdir = rest.to_owned(),
            "VOLUME" => image
                .volumes
                .extend(serde_json::from_str::<Vec<String>>(rest).expect("VOLUME as JSON")),
            "CMD" => image.cmd = serde_json::from_str(rest).expect("CMD as JSON"),
            _ => {}
        }
    }
    assert!(
        !image.cmd.is_empty() && !image.workdir.is_empty(),
        "{image:?}"
    );
    image
}

/// One `docker run` example of docs/deployment.md.
#[derive(Debug, Default)]
struct DockerRun {
    read_only: bool,
    env: Vec<(String, String)>,
    /// Mount targets (`-v` and `--tmpfs`).
    mounts: Vec<String>,
    /// `-v` sources that are files of the host (`$PWD/…`), by target.
    host_files: Vec<(String, String)>,
}

fn docker_runs() -> Vec<DockerRun> {
    let doc = repo_file("docs/deployment.md");
    let mut runs = Vec::new();
    for block in doc.split("```sh\n").skip(1) {
        let block = block.split("```").next().unwrap();
        for line in logical_lines(block) {
            let Some(rest) = line.strip_prefix("docker run ") else {
                continue;
            };
            let mut run = DockerRun::default();
            let words: Vec<String> = rest
                .split_whitespace()
                .map(|w| w.trim_matches('"').to_owned())
                .collect();
            let mut i = 0;
            while i < words.len() {
                match words[i].as_str() {
                    "--read-only" => run.read_only = true,
                    "--tmpfs" => {
                        i += 1;
                        run.mounts.push(words[i].clone());
                    }
                    "-e" => {
                        i += 1;
                        let (k, v) = words[i].split_once('=').unwrap();
                        run.env.push((k.to_owned(), v.to_owned()));
                    }
                    "-v" => {
                        i += 1;
                        let mut parts = words[i].split(':');
                        let source = parts.next().unwrap();
                        let target = parts.next().unwrap().to_owned();
                        if source.starts_with('$') || source.starts_with('/') {
                            run.host_files.push((target.clone(), source.to_owned()));
                        }
                        run.mounts.push(target);
                    }
                    "-p" => i += 1,
                    _ => {}
                }
                i += 1;
            }
            runs.push(run);
        }
    }
    runs
}

/// The YAML block of docs/deployment.md that follows `marker`.
fn yaml_after(marker: &str) -> String {
    let doc = repo_file("docs/deployment.md");
    let after = doc.split_once(marker).expect("marker in the docs").1;
    let block = after.split_once("```yaml\n").expect("a YAML block").1;
    block.split_once("```").unwrap().0.to_owned()
}

/// A folder standing for the image's root filesystem.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new(image: &Image, run: &DockerRun) -> Root {
        let root = Root {
            dir: tempfile::tempdir().unwrap(),
        };
        let folders = image
            .volumes
            .iter()
            .chain(&run.mounts)
            .chain([&image.workdir])
            .filter(|p| !run.host_files.iter().any(|(target, _)| target == *p));
        for path in folders {
            std::fs::create_dir_all(root.at(path)).unwrap();
        }
        root
    }

    /// `path` of the image, in this folder.
    fn at(&self, path: &str) -> PathBuf {
        self.dir.path().join(path.trim_start_matches('/'))
    }

    /// The environment of the image and the example, its absolute paths in this folder.
    fn env(&self, image: &Image, run: &DockerRun) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = image
            .env
            .iter()
            .chain(&run.env)
            .map(|(k, v)| {
                let v = if v.starts_with('/') {
                    self.at(v).display().to_string()
                } else {
                    v.clone()
                };
                (k.clone(), v)
            })
            .collect();
        env.push(("TMPDIR".into(), self.at("/tmp").display().to_string()));
        env
    }

    /// Every file under this folder, as image paths.
    fn files(&self) -> Vec<String> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    walk(&entry.path(), out);
                } else {
                    out.push(entry.path());
                }
            }
        }
        let mut files = Vec::new();
        walk(self.dir.path(), &mut files);
        files
            .iter()
            .map(|f| format!("/{}", f.strip_prefix(self.dir.path()).unwrap().display()))
            .collect()
    }
}

fn command(root: &Root, image: &Image, env: &[(String, String)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_querygate"));
    cmd.env_clear()
        .envs(env.iter().cloned())
        .current_dir(root.at(&image.workdir))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn the_image_command_alone_fails_closed_without_authentication() {
    let image = image();
    assert_eq!(image.cmd, ["serve", "--listen", "0.0.0.0:8765"]);
    let run = DockerRun {
        read_only: true,
        ..Default::default()
    };
    let root = Root::new(&image, &run);
    let out = command(&root, &image, &root.env(&image, &run))
        .args(&image.cmd)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("0.0.0.0:8765 is not a loopback address and no authentication is configured"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_documented_trial_run_serves_and_audits_where_documented() {
    install_crypto_provider();
    let image = image();
    let runs = docker_runs();
    let run = runs
        .iter()
        .find(|r| {
            r.env
                .iter()
                .any(|(k, v)| k == "QUERYGATE_SERVER__ALLOW_UNAUTHENTICATED" && v == "true")
        })
        .expect("a documented run with the explicit opt-out");
    assert!(
        run.read_only && run.mounts.contains(&"/tmp".to_owned()),
        "{run:?}"
    );
    let root = Root::new(&image, run);
    // The image's command, listening on loopback instead of every address.
    let mut args = image.cmd.clone();
    let listen = args.iter().position(|a| a == "--listen").unwrap() + 1;
    args[listen] = "127.0.0.1:0".into();
    let mut child = command(&root, &image, &root.env(&image, run))
        .args(&args)
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let url = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("querygate: serving MCP at ") {
                return url.to_owned();
            }
            seen.push(line);
        }
        panic!("serve exited: {seen:?}");
    })
    .await
    .expect("serve announces its address");
    let audit_dir = root.at("/var/lib/querygate/audit");
    assert!(
        seen.iter()
            .any(|l| l.contains("audit records go to")
                && l.contains(&audit_dir.display().to_string())),
        "{seen:?}"
    );
    let response = raw_call(&reqwest::Client::new(), &url, None).await.unwrap();
    assert_eq!(response.status(), 200);
    terminate(&child);
    let status = child.wait().await.unwrap();
    let rest = collect_lines(stderr).await.unwrap();
    assert!(status.success(), "{rest:?}");

    // The record is in the documented folder, a volume of the image; nothing was written
    // outside the image's volumes and the example's mounts.
    let records: Vec<_> = querygate::audit::location::files_of(
        &querygate::audit::FileLocation::Dir(audit_dir.clone()),
    )
    .unwrap()
    .iter()
    .flat_map(|f| {
        std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .map(|l| querygate::audit::format::parse_line(l).unwrap().stored)
            .collect::<Vec<_>>()
    })
    .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].record.tool, "server_info");
    assert!(
        image
            .volumes
            .contains(&"/var/lib/querygate/audit".to_owned())
    );
    let writable: Vec<&String> = image.volumes.iter().chain(&run.mounts).collect();
    for file in root.files() {
        assert!(
            writable
                .iter()
                .any(|w| file.starts_with(&format!("{}/", w.trim_end_matches('/')))),
            "{file} is outside the image's volumes and mounts {writable:?}"
        );
    }
}

#[tokio::test]
async fn the_documented_jwt_configuration_is_accepted_on_the_image_listen_address() {
    let image = image();
    let runs = docker_runs();
    let run = runs
        .iter()
        .find(|r| r.env.iter().any(|(k, _)| k == "QUERYGATE_CONFIG"))
        .expect("a documented run with a configuration file");
    assert!(
        run.read_only && run.mounts.contains(&"/tmp".to_owned()),
        "{run:?}"
    );
    assert!(
        run.mounts.contains(&"/var/lib/querygate/audit".to_owned()),
        "the documented run keeps its audit records in a named volume: {run:?}"
    );
    let root = Root::new(&image, run);
    let (target, _) = run
        .host_files
        .iter()
        .find(|(t, _)| t.ends_with("config.yaml"))
        .unwrap();
    let config = root.at(target);
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, yaml_after("where `config.yaml`")).unwrap();
    let listen = &image.cmd[image.cmd.iter().position(|a| a == "--listen").unwrap() + 1];
    let mut env = root.env(&image, run);
    env.push(("QUERYGATE_SERVER__LISTEN".into(), listen.clone()));
    let out = command(&root, &image, &env)
        .arg("providers")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
