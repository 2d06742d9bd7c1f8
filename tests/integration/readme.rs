//! What the README tells a newcomer to paste works as written: the `curl` lines against the
//! served binary, the desktop client configurations, and the credential variables of the
//! GitHub example and of the query library against the current github provider document.

use std::path::Path;

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Mock;
use crate::support::*;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The fenced blocks of `lang` in `text`.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}\n");
    text.split(&fence)
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block.to_owned()))
        .collect()
}

/// The words of a shell command line written with single quotes only (as the README's
/// `curl` lines are), with `\`-newline continuations joined.
fn shell_words(line: &str) -> Vec<String> {
    let line = line.replace("\\\n", " ");
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut in_word = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quotes in {line}");
    if in_word {
        words.push(word);
    }
    words
}

/// Each `curl` command of the README's shell blocks, continuation lines joined.
fn curl_commands() -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    for block in blocks(&readme(), "sh") {
        let joined = block.replace("\\\n", " ");
        for line in joined
            .lines()
            .filter(|l| l.trim_start().starts_with("curl "))
        {
            commands.push(shell_words(line));
        }
    }
    commands
}

#[tokio::test]
async fn the_readme_curl_lines_work_against_the_served_binary() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let (url, _child, _stderr) = spawn_serve(&config).await;
    let commands = curl_commands();
    assert!(
        commands.len() >= 2,
        "the README shows an initialize and a tools/call: {commands:?}"
    );
    install_crypto_provider();
    let http = reqwest::Client::new();
    let mut methods = Vec::new();
    for words in &commands {
        let mut request = None;
        let mut headers = Vec::new();
        let mut body = None;
        let mut args = words[1..].iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "-s" => {}
                "-H" => headers.push(args.next().unwrap().clone()),
                "-d" => body = Some(args.next().unwrap().clone()),
                other if other.starts_with("http") => request = Some(other.to_owned()),
                other => panic!("an option this test does not know: {other} in {words:?}"),
            }
        }
        let target = request.expect("a URL");
        assert_eq!(target, "http://127.0.0.1:8765/mcp", "the default address");
        let body = body.expect("a body");
        let sent: Value = serde_json::from_str(&body).expect("the body is JSON");
        methods.push(sent["method"].as_str().unwrap().to_owned());
        let mut builder = http.post(&url).body(body);
        for header in headers {
            let (name, value) = header.split_once(": ").unwrap();
            builder = builder.header(name, value);
        }
        let response = builder.send().await.unwrap();
        assert_eq!(response.status(), 200, "{words:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["id"], sent["id"], "{answer}");
        assert!(answer.get("error").is_none(), "{answer}");
        if sent["method"] == "tools/call" {
            assert_eq!(answer["result"]["isError"], false, "{answer}");
            let text = answer["result"]["content"][0]["text"].as_str().unwrap();
            assert!(text.contains("testapi"), "{text}");
        }
    }
    assert_eq!(methods, ["initialize", "tools/call"]);
}

#[tokio::test]
async fn the_readme_desktop_configurations_start_a_working_server() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let configs: Vec<Value> = blocks(&readme(), "json")
        .iter()
        .filter(|b| b.contains("mcpServers"))
        .map(|b| serde_json::from_str(b).expect("the block is JSON"))
        .collect();
    assert_eq!(configs.len(), 2, "a stdio and an HTTP configuration");
    let stdio = &configs[0]["mcpServers"]["querygate"];
    let http = &configs[1]["mcpServers"]["querygate"];
    assert_eq!(http["type"], "http");
    let default = querygate::config::Config::load(&querygate::config::Sources {
        file: None,
        env: Default::default(),
    })
    .unwrap();
    assert_eq!(
        http["url"],
        format!("http://{}/mcp", default.server.listen),
        "the URL `querygate serve` serves by default"
    );

    // The stdio entry, run as a client runs it (no shell), in a fresh home whose config file
    // holds only the line the README names.
    assert_eq!(stdio["command"], "querygate");
    let args: Vec<String> = serde_json::from_value(stdio["args"].clone()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let folder = home.path().join(".config/querygate");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("config.yaml"),
        "credentials:\n  env_file: ~/.config/querygate/credentials.env\n",
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
        .args(&args)
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir("/")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "desktop", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}}),
    ] {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), stdout.next_line())
            .await
            .expect("an answer")
            .unwrap()
            .expect("the server keeps running");
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert!(
        answers[0]["result"]["serverInfo"].is_object(),
        "{}",
        answers[0]
    );
    assert_eq!(answers[1]["result"]["isError"], false, "{}", answers[1]);
    assert_eq!(
        answers[1]["result"]["structuredContent"]["transport"],
        "stdio"
    );
    assert!(
        folder.join("credentials.env").is_file(),
        "the env file is created beside the config"
    );
}

/// The variables the current github provider document reads (`config.auth`), from the
/// registry snapshot under `QUERYGATE_COMPAT_REGISTRY/current`.
fn current_github_auth_vars(root: &Path) -> Vec<String> {
    let archive = std::fs::File::open(root.join("current/registry-src.tar.gz")).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().into_owned();
        if path.starts_with("src/github") && path.ends_with("provider.yaml") {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            let document: Value = serde_norway::from_str(&text).unwrap();
            let auth = &document["config"]["auth"];
            return ["credentialsenvvar", "username_var", "password_var"]
                .iter()
                .filter_map(|key| auth[key].as_str().map(str::to_owned))
                .collect();
        }
    }
    panic!("no github provider.yaml in the current registry snapshot");
}

#[test]
fn the_github_example_and_the_library_name_the_variables_github_reads() {
    let Some(root) = compat_registry() else {
        return;
    };
    let vars = current_github_auth_vars(&root);
    assert_eq!(vars, ["STACKQL_GITHUB_USERNAME", "STACKQL_GITHUB_PASSWORD"]);
    let readme = readme();
    for var in &vars {
        assert!(readme.contains(&format!("{var}=")), "the README sets {var}");
    }
    assert!(
        !readme.contains("GITHUB_CREDS"),
        "a variable github no longer reads"
    );
    let queries = Path::new(env!("CARGO_MANIFEST_DIR")).join("content/library/queries/github");
    let mut checked = 0;
    for folder in std::fs::read_dir(&queries).unwrap() {
        for file in std::fs::read_dir(folder.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let entry: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(entry["auth"], json!(vars), "{}", path.display());
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[test]
fn the_instructions_send_the_model_to_list_methods_for_parameters() {
    let discovery = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("content/instructions/00-discovery.md"),
    )
    .unwrap();
    let step = discovery
        .split("2. **Drill down only on a miss.**")
        .nth(1)
        .and_then(|rest| rest.split("\n3. ").next())
        .unwrap();
    // DESCRIBE lists columns only (name, type, description): the parameters are in
    // list_methods and describe_method.
    assert!(
        !step.contains("lists its columns and the parameters"),
        "{step}"
    );
    assert!(step.contains("`list_methods`"), "{step}");
}

#[test]
fn the_readme_says_how_serve_authenticates() {
    let readme = readme();
    assert!(
        !readme.contains("no authentication yet"),
        "stale: serve authenticates"
    );
    for key in ["auth.mtls", "auth.jwt", "server.allow_unauthenticated"] {
        assert!(readme.contains(key), "the README names {key}");
    }
}
