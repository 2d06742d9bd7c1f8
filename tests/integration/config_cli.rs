//! The CLI as a person runs it: config file, environment overrides, output formats, errors.

use std::process::Command;

use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

#[tokio::test]
async fn query_with_config_file_env_override_and_formats() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a,b", "active": true}, {"id": 2, "name": "c"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("querygate.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: http://127.0.0.1:1\n",
            fixture_registry().display()
        ),
    )
    .unwrap();
    let url = mock.url();
    let run = move |format: &'static str| {
        let mut cmd = querygate_command();
        cmd.args([
            "--config",
            config.to_str().unwrap(),
            "query",
            "--output",
            format,
        ])
        .arg("SELECT id, name, active FROM testapi.items.items WHERE org = 'acme' ORDER BY id")
        .env("QUERYGATE_PROVIDERS__TESTAPI__BASE_URL", &url)
        .env("TESTAPI_KEY", SECRET);
        cmd
    };
    let (json_out, csv_out, table_out) = tokio::task::spawn_blocking(move || {
        (
            run("json").output().unwrap(),
            run("csv").output().unwrap(),
            run("table").output().unwrap(),
        )
    })
    .await
    .unwrap();
    assert!(
        json_out.status.success(),
        "{}",
        String::from_utf8_lossy(&json_out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(
        rows,
        json!([{"id": 1, "name": "a,b", "active": true}, {"id": 2, "name": "c", "active": null}])
    );
    assert_eq!(
        String::from_utf8_lossy(&csv_out.stdout),
        "id,name,active\r\n1,\"a,b\",true\r\n2,c,\r\n"
    );
    let table = String::from_utf8_lossy(&table_out.stdout).to_string();
    assert!(
        table.contains("| 2  | c    |        |") && table.ends_with("(2 rows)\n"),
        "{table}"
    );
    for out in [&json_out, &csv_out, &table_out] {
        assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(SECRET));
    }
    assert_eq!(
        mock.requests()[0].headers["x-api-key"],
        SECRET,
        "default tenant reads the process environment"
    );
}

#[tokio::test]
async fn config_errors_name_the_key_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "upstream:\n  timout: 5s\n").unwrap();
    let out = tokio::task::spawn_blocking(move || {
        querygate_command()
            .args(["--config", config.to_str().unwrap(), "providers"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("timout"), "{stderr}");
}

#[tokio::test]
async fn providers_command_and_query_errors() {
    let out = tokio::task::spawn_blocking(|| {
        let list = querygate_command()
            .args(["providers", "--output", "csv"])
            .env("QUERYGATE_REGISTRY__ROOT", fixture_registry())
            .output()
            .unwrap();
        let bad = querygate_command()
            .args(["query", "SELECT * FROM nope.a.b"])
            .env("QUERYGATE_REGISTRY__ROOT", fixture_registry())
            .output()
            .unwrap();
        (list, bad)
    })
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.0.stdout),
        "name,version,versions\r\ntestapi,v1,v1\r\n"
    );
    assert_eq!(out.1.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.1.stderr).contains("provider 'nope' is not installed"));
}

#[tokio::test]
async fn home_and_relative_paths_resolve_against_the_config_folder() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let folder = home.path().join(".config/querygate");
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(fixture_registry(), folder.join("registry")).unwrap();
    std::fs::write(
        folder.join("config.yaml"),
        "registry:\n  root: registry\ncredentials:\n  env_file: ~/secrets/querygate.env\n",
    )
    .unwrap();
    let (home_path, work_path) = (home.path().to_owned(), work.path().to_owned());
    let out = tokio::task::spawn_blocking(move || {
        querygate_command()
            .args([
                "--config",
                "~/.config/querygate/config.yaml",
                "providers",
                "--output",
                "csv",
            ])
            .env("HOME", &home_path)
            .current_dir(&work_path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "name,version,versions\r\ntestapi,v1,v1\r\n"
    );
    // The absent env file was created under the home folder, nothing under the working one.
    assert!(home.path().join("secrets/querygate.env").is_file());
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn settings_for_no_installed_provider_are_warned_about_without_colours() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("querygate.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {}\n  url: null\nproviders:\n  testap:\n    base_url: http://127.0.0.1:1\n",
            fixture_registry().display()
        ),
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        querygate_command()
            .args(["--config", config.to_str().unwrap(), "query"])
            .arg("SELECT id FROM testapi.items.items WHERE org = 'acme'")
            .env("TESTAPI_KEY", SECRET)
            .env("QUERYGATE_UPSTREAM__CONNECT_TIMEOUT", "1s")
            .env("QUERYGATE_UPSTREAM__RETRY__ATTEMPTS", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "providers.testap in the configuration names no installed provider; its settings apply to nothing"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "'testapi' runs without configured settings while providers.testap names no installed provider: is it a typo?"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe: {stderr:?}"
    );
}

#[tokio::test]
async fn a_provider_without_settings_is_warned_about_once_per_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("querygate.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {}\n  url: null\nproviders:\n  testap:\n    base_url: http://127.0.0.1:1\naudit:\n  enabled: false\n",
            fixture_registry().display()
        ),
    )
    .unwrap();
    let call = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"run_select_query","arguments":{{"sql":"SELECT id FROM testapi.items.items WHERE org = 'acme'"}}}}}}"#
        )
    };
    let input = format!(
        "{}\n{}\n{}\n{}\n",
        crate::support::stdio::INITIALIZE,
        crate::support::stdio::INITIALIZED,
        call(2),
        call(3)
    );
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = querygate_command()
            .args(["--config", config.to_str().unwrap(), "stdio"])
            .env("TESTAPI_KEY", SECRET)
            .env("QUERYGATE_UPSTREAM__CONNECT_TIMEOUT", "1s")
            .env("QUERYGATE_UPSTREAM__RETRY__ATTEMPTS", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        // Both calls answered before stdin closes (EOF ends the session).
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut answered = 0;
        let mut line = String::new();
        while answered < 3 {
            line.clear();
            assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0);
            answered += usize::from(line.contains(r#""id":"#));
        }
        drop(stdin);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr
            .matches("'testapi' runs without configured settings while providers.testap names no installed provider")
            .count(),
        1,
        "{stderr}"
    );
}

#[tokio::test]
async fn a_fifo_env_file_is_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("creds.env");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let config = dir.path().join("querygate.yaml");
    std::fs::write(&config, "credentials:\n  env_file: creds.env\n").unwrap();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = querygate_command()
            .args(["--config", config.to_str().unwrap(), "providers"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let exited = crate::support::wait::try_eventually_blocking(
            std::time::Duration::from_secs(30),
            std::time::Duration::from_millis(50),
            || child.try_wait().unwrap().is_some(),
        );
        if exited.is_err() {
            child.kill().unwrap();
            panic!("querygate blocked on the FIFO");
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("creds.env") && stderr.contains("not a regular file"),
        "{stderr}"
    );
}

/// `providers.<name>.auth.credentialsfilepath` is a path of the configuration like every
/// other: relative to the configuration file's folder, not to the working directory (which is
/// wherever the client started querygate).
#[tokio::test]
async fn a_relative_key_file_of_a_provider_auth_is_read_from_the_config_folder() {
    use crate::mcp_support::{call, modern_client, start_yaml, text_of};
    let server = start_yaml(|mock_url, dir| {
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let pem = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/auth/sa-test-key.pem"),
        )
        .unwrap();
        let key = json!({
            "type": "service_account",
            "private_key": pem,
            "client_email": "reader@test-project.iam.gserviceaccount.com",
            "token_uri": format!("{mock_url}/token"),
        });
        std::fs::write(dir.join("keys/sa.json"), key.to_string()).unwrap();
        format!(
            "registry:\n  root: {}\n  url: null\nproviders:\n  testapi:\n    base_url: {mock_url}\n    auth:\n      type: service_account\n      credentialsfilepath: keys/sa.json\ncredentials:\n  process_env: false\naudit:\n  file:\n    dir: {}\ntenants:\n  - id: default\n    mode: read_only\nserver:\n  listen: 127.0.0.1:0\n",
            fixture_registry().display(),
            dir.join("audit").display()
        )
    })
    .await;
    assert!(
        !std::env::current_dir()
            .unwrap()
            .join("keys/sa.json")
            .exists(),
        "the working directory must not hold the key"
    );
    server.mock.route(
        "POST /token",
        Reply::json(json!({"access_token": "ya29.relative", "expires_in": 3599})),
    );
    server
        .mock
        .route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let client = modern_client(&server.url).await;
    let result = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT name FROM testapi.items.single"}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    let sent = server
        .mock
        .requests()
        .into_iter()
        .find(|r| r.path == "/single")
        .expect("the query reached the upstream");
    assert_eq!(sent.headers["authorization"], "Bearer ya29.relative");
}

/// `--listen localhost:8765` (and `server.listen: localhost:…`) names the loopback address
/// by its host name, as people write it: resolved, served, and still loopback (no `auth`
/// needed).
#[tokio::test]
async fn a_listen_address_may_name_its_host() {
    use crate::mcp_support::{call, install_crypto_provider, modern_client, test_config};
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let (url, mut child, _) = serve_on(&config, "localhost:0").await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let client = modern_client(&url).await;
    let info = call(&client, "server_info", serde_json::json!({})).await;
    assert_eq!(info.structured_content.unwrap()["transport"], "http");
    drop(client);
    child.kill().await.unwrap();

    // The same name in the configuration file passes its check.
    let yaml = std::fs::read_to_string(&config)
        .unwrap()
        .replace("listen: 127.0.0.1:0", "listen: localhost:8765");
    std::fs::write(&config, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || {
        querygate_command()
            .args(["--config", config.to_str().unwrap(), "providers"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A configuration error names the file, and says "with environment overrides" only when a
/// `QUERYGATE_*__*` variable was applied to it.
#[tokio::test]
async fn a_config_error_mentions_environment_overrides_only_when_there_are_some() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "upstream:\n  timout: 5s\n").unwrap();
    let shown = config.display().to_string();
    let (plain, overridden) = tokio::task::spawn_blocking(move || {
        let run = |overrides: &[(&str, &str)]| {
            querygate_command()
                .args(["--config", config.to_str().unwrap(), "providers"])
                .envs(overrides.iter().copied())
                .output()
                .unwrap()
        };
        (
            run(&[("QUERYGATE_CONFIG_NOTE", "not an override")]),
            run(&[("QUERYGATE_UPSTREAM__PAGE_LIMIT", "3")]),
        )
    })
    .await
    .unwrap();
    let plain = String::from_utf8_lossy(&plain.stderr).to_string();
    assert!(
        plain.starts_with(&format!("error: invalid configuration ({shown}): upstream")),
        "{plain}"
    );
    let overridden = String::from_utf8_lossy(&overridden.stderr).to_string();
    assert!(
        overridden.starts_with(&format!(
            "error: invalid configuration ({shown} with environment overrides): upstream"
        )),
        "{overridden}"
    );
}

/// Every problem of a file is reported in one run: keys that do not parse (an unknown key, a
/// value of the wrong type) and values the checks refuse, each with its key.
#[tokio::test]
async fn every_problem_of_a_config_file_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(
        &config,
        "upstream:\n  timout: 5s\n  page_limit: many\nserver:\n  max_rows: 0\ntenants:\n  - id: default\n    mode: wide_open\n",
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        querygate_command()
            .args(["--config", config.to_str().unwrap(), "providers"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for key in [
        "upstream.timout: unknown field",
        "upstream.page_limit: must be a whole number",
        "tenants[0].mode: unknown variant `wide_open`",
        "server.max_rows: must be greater than 0",
    ] {
        assert!(stderr.contains(key), "{key} missing from: {stderr}");
    }
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Starts `querygate --config CONFIG serve --listen LISTEN`: the URL it announces, the child,
/// and the stderr lines before the announcement.
async fn serve_on(
    config: &std::path::Path,
    listen: &str,
) -> (String, tokio::process::Child, Vec<String>) {
    use crate::support::served::{serve_command, spawn_announced};
    let served = spawn_announced(serve_command(config).args(["--listen", listen])).await;
    (served.url, served.child, served.before)
}

/// The warning that approvals are sealed with a per-process key shows where another replica
/// could be asked to redeem one (here: an address beyond loopback), not on every local start.
#[tokio::test]
async fn the_approval_key_warning_shows_only_where_replicas_may_share_approvals() {
    use crate::mcp_support::test_config;
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "safe", "  allow_unauthenticated: true\n");
    let warning = "approval.key_files is empty";
    let (_, mut local, lines) = serve_on(&config, "127.0.0.1:0").await;
    local.kill().await.unwrap();
    assert!(!lines.iter().any(|l| l.contains(warning)), "{lines:?}");
    let (_, mut exposed, lines) = serve_on(&config, "0.0.0.0:0").await;
    exposed.kill().await.unwrap();
    assert!(lines.iter().any(|l| l.contains(warning)), "{lines:?}");
}

#[test]
fn a_command_whose_reader_went_away_exits_quietly() {
    // The pipe's reading end is closed before the command starts: its first write to
    // stdout answers EPIPE, as `querygate approvals list | head` does once head has read.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = crate::support::querygate_command()
        .args(["policy", "check", "--schema"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
