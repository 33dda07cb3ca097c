//! Browser end-to-end: a real control plane (in-process `serve`, real TCP,
//! real SQLite) driven by headless Debian Chromium through Playwright
//! (`ui/e2e/run.mjs`). Proves: sign-in through a one-time link (and its
//! refusal on reuse), an event appearing live, approving a held tool in the
//! diff view, answering and declining input requests, protecting a client
//! from the Clients page (real gatehouse-clients edits), the corpus's
//! script-bearing frames rendered inertly, axe-core with no serious
//! findings in both themes, and tab order reaching approve/decline.
//! Screenshots land in `$GATEHOUSE_E2E_ARTIFACTS/seeded` (default
//! `artifacts/screenshots/`). The same dashboard against the real binary and
//! real wraps is `tests/e2e/dashboard.rs`.
//!
//! Needs `npm ci && npm run build` (so the real dashboard is embedded) and
//! `/usr/bin/chromium`. Without them the test is skipped with a message,
//! unless `GATEHOUSE_E2E=1`, which turns a missing prerequisite into a failure.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gatehouse_store::{Action, NewConsent, NewEvent, Severity};
use serde_json::{json, Value};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

fn corpus_frames() -> Option<PathBuf> {
    let dir = std::env::var_os("GATEHOUSE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("tests/corpus"))
        .join("frames");
    dir.is_dir().then_some(dir)
}

fn prerequisites() -> Result<(), String> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        return Err(format!(
            "{chromium} not found (apt-get install -y chromium)"
        ));
    }
    if !repo_root().join("node_modules/playwright-core").is_dir() {
        return Err("node_modules missing (npm ci)".into());
    }
    if !gatehouse_server::assets::DASHBOARD_BUILT {
        return Err("dashboard not embedded (npm run build, then rebuild)".into());
    }
    if corpus_frames().is_none() {
        return Err("corpus frames not found (set GATEHOUSE_CORPUS)".into());
    }
    Ok(())
}

/// Every corpus frame as an event whose evidence is the raw frame.
async fn insert_frames(store: &gatehouse_store::Store) -> usize {
    let dir = corpus_frames().expect("checked");
    let mut n = 0;
    for bucket in ["attacks", "warn", "benign"] {
        let mut files: Vec<_> = std::fs::read_dir(dir.join(bucket))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for f in files {
            let case: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            let text = case["message"].to_string();
            let mut ev = NewEvent::new(
                common::T0 + n as i64,
                "mcp_output_inspection",
                Action::Alert,
                Severity::High,
                &format!("frame:{}", case["id"].as_str().unwrap_or("?")),
            );
            ev.server_id = Some("srv-files".into());
            ev.tool = Some("read_file".into());
            // A distinct rule per frame, so the store's flood aggregation keeps one row each.
            ev.rule = Some(format!("corpus:{}", case["id"].as_str().unwrap_or("?")));
            ev.evidence_json = Some(json!({ "frame": text, "name": case["name"] }).to_string());
            store.insert_event(&ev).await.unwrap();
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_headless_chromium() {
    if let Err(why) = prerequisites() {
        if std::env::var("GATEHOUSE_E2E").as_deref() == Ok("1") {
            panic!("browser e2e prerequisites missing: {why}");
        }
        eprintln!("SKIPPED dashboard_in_headless_chromium: {why}");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let store = common::open_store(home.path()).await;
    common::seed(&store).await;
    let frames = insert_frames(&store).await;
    assert!(frames >= 50, "the corpus has its frames");
    // An input request the person answers in the browser.
    let (sk, pk) = gatehouse_server::seal::keypair();
    let city = store
        .create_consent(&NewConsent {
            kind: gatehouse_store::ConsentKind::Elicitation,
            server_id: "srv-files".into(),
            tool: None,
            payload_json: json!({ "message": "Which city should I use?\u{200B}", "mode": "form", "requestedSchema": { "type": "object", "properties": { "city": { "type": "string", "title": "City" } }, "required": ["city"] } }).to_string(),
            created_ms: common::now(),
            expires_ms: Some(common::now() + 600_000),
            requester_key: Some(pk.to_vec()),
        })
        .await
        .unwrap();
    // One whose field title a bidi override makes read as "password".
    store
        .create_consent(&NewConsent {
            kind: gatehouse_store::ConsentKind::Elicitation,
            server_id: "srv-files".into(),
            tool: None,
            payload_json: json!({ "message": "Confirm the value", "mode": "form", "requestedSchema": { "type": "object", "properties": { "v": { "type": "string", "title": "\u{202E}drowssap\u{202C}" } } } }).to_string(),
            created_ms: common::now(),
            expires_ms: Some(common::now() + 600_000),
            requester_key: Some(pk.to_vec()),
        })
        .await
        .unwrap();
    let web = common::consent_id(&store, "srv-web", "elicitation").await;

    let mut config = common::config_for(home.path(), store.clone());
    config.poll_interval = std::time::Duration::from_millis(100);
    // A Cursor config the person protects from the Clients page (real
    // gatehouse-clients edits; an in-memory vault stands in for the keyring).
    let user = tempfile::tempdir().unwrap();
    let cursor_cfg = user.path().join(".cursor/mcp.json");
    std::fs::create_dir_all(cursor_cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cursor_cfg,
        r#"{ "mcpServers": { "github": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": { "GITHUB_TOKEN": "ghp_canary0123456789abcdefghijklmnopqrstuv" } } } }"#,
    )
    .unwrap();
    config.client_dirs = Some(common::linux_user_dirs(user.path()));
    let vault = std::sync::Arc::new(gatehouse_vault::MemoryVault::new());
    config.vault = Some(vault.clone());
    config.gatehouse_exe = Some("/opt/gatehouse/bin/gatehouse".into());
    let handle = gatehouse_server::serve(config).await.unwrap();
    let shots = std::env::var_os("GATEHOUSE_E2E_ARTIFACTS")
        .map(|d| PathBuf::from(d).join("seeded"))
        .unwrap_or_else(|| repo_root().join("artifacts/screenshots"));
    std::fs::create_dir_all(&shots).unwrap();

    let mut child = Command::new("node")
        .arg(repo_root().join("ui/e2e/run.mjs"))
        .current_dir(repo_root())
        .env("GATEHOUSE_URL", handle.signin_url())
        .env("SCREENSHOT_DIR", &shots)
        .env("FRAME_COUNT", frames.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node runs");
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The script asks for live events over stdout ("need:event:<marker>");
    // we insert them into the database like a wrap process would, and answer.
    let mut summary = String::new();
    while let Some(line) = rx.recv().await {
        if let Some(marker) = line.strip_prefix("need:event:") {
            let mut ev = NewEvent::new(
                common::now(),
                "mcp_tool_call_intercepted",
                Action::Block,
                Severity::Critical,
                marker,
            );
            ev.server_id = Some("srv-files".into());
            ev.tool = Some("read_file".into());
            ev.rule = Some("e2e".into());
            ev.evidence_json = Some(
                json!({ "snippet": "<img src=x onerror=window.__pwned=1>\u{200B}" }).to_string(),
            );
            store.insert_event(&ev).await.unwrap();
            writeln!(stdin, "ok").unwrap();
            stdin.flush().unwrap();
        } else {
            summary.push_str(&line);
            summary.push('\n');
        }
    }
    reader.join().unwrap();
    let status = child.wait().unwrap();
    eprintln!("{summary}");
    assert!(status.success(), "browser script failed:\n{summary}");

    // What the person did in the browser reached the database.
    let pin = store
        .get_pin(&common::mac_key(), "srv-files", "read_file")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pin.state.as_str(), "trusted", "approved in the diff view");
    assert_eq!(
        pin.approved_hash.as_deref(),
        Some(common::hash_of("v2").as_str()),
        "exactly the version shown was approved"
    );
    let sealed = store
        .take_consent_answer(city)
        .await
        .unwrap()
        .expect("the input request was answered");
    let answer: Value =
        serde_json::from_slice(&gatehouse_server::seal::open(&sk, &sealed).unwrap()).unwrap();
    assert_eq!(
        answer,
        json!({ "action": "accept", "content": { "city": "Bergen" } }),
        "the waiting process receives the answer"
    );
    let protected = std::fs::read_to_string(&cursor_cfg).unwrap();
    assert!(
        protected.contains("/opt/gatehouse/bin/gatehouse") && !protected.contains("ghp_canary"),
        "protected from the Clients page: the entry runs behind wrap, the secret left the file: {protected}"
    );
    let github = store
        .list_servers()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.entry_name.as_deref() == Some("github"))
        .expect("the wrapped entry's identity is recorded");
    use gatehouse_vault::Vault;
    assert_eq!(
        vault.list(&github.id).unwrap(),
        vec!["GITHUB_TOKEN".to_string()],
        "the secret moved into the vault"
    );
    let web = store.get_consent(web).await.unwrap().unwrap();
    assert_eq!(
        web.state.as_str(),
        "declined",
        "the sensitive-field request was declined"
    );
    handle.shutdown().await;
}
