//! The control plane over real TCP under connections that never finish:
//! headers that never come are timed out, idle keep-alive connections are
//! closed, a cap bounds how many are served at once, and none of this cuts
//! an event stream short.

mod common;

use std::time::Duration;

use gatehouse_server::{ConnectionLimits, ServerHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

const HEADER_TIMEOUT: Duration = Duration::from_millis(800);
const CAP: usize = 4;

async fn start(home: &std::path::Path) -> (ServerHandle, gatehouse_store::Store) {
    let store = common::open_store(home).await;
    let mut config = common::config_for(home, store.clone());
    config.poll_interval = Duration::from_millis(20);
    config.limits = ConnectionLimits {
        header_read_timeout: HEADER_TIMEOUT,
        max_connections: CAP,
    };
    (gatehouse_server::serve(config).await.unwrap(), store)
}

async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port)).await.unwrap()
}

/// How long until the server closes `s` (EOF or reset), reading and
/// discarding whatever it sends; `None` if it is still open after `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        let left = limit.checked_sub(start.elapsed())?;
        match timeout(left, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// One `GET /api/health` on a new connection: the status line.
async fn health(port: u16) -> String {
    let mut s = connect(port).await;
    let req =
        format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn headers_that_never_come_are_timed_out() {
    let home = tempfile::tempdir().unwrap();
    let (handle, _store) = start(home.path()).await;
    let port = handle.port();
    let limit = HEADER_TIMEOUT * 4;

    let mut silent = connect(port).await;
    let mut partial = connect(port).await;
    partial
        .write_all(format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX: ").as_bytes())
        .await
        .unwrap();
    let took = closed_within(&mut silent, limit).await;
    assert!(
        took.is_some_and(|t| t >= HEADER_TIMEOUT / 2),
        "a connection that sends nothing is closed after the header timeout, not before: {took:?}"
    );
    assert!(
        closed_within(&mut partial, limit).await.is_some(),
        "a header that never ends is timed out too"
    );

    // After a response, waiting for the next request is bounded the same way.
    let mut idle = connect(port).await;
    idle.write_all(
        format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        closed_within(&mut idle, limit).await.is_some(),
        "an idle keep-alive connection is closed"
    );
    handle.shutdown().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once_and_slots_come_back() {
    let home = tempfile::tempdir().unwrap();
    let (handle, _store) = start(home.path()).await;
    let port = handle.port();

    let mut held = Vec::new();
    for _ in 0..CAP - 1 {
        held.push(connect(port).await);
    }
    // Let the server accept them all before counting on the last slot.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        health(port).await,
        "HTTP/1.1 200 OK",
        "a request on the last free slot is served"
    );
    held.push(connect(port).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut over = connect(port).await;
    let took = closed_within(&mut over, HEADER_TIMEOUT / 2).await;
    assert!(
        took.is_some(),
        "with every slot taken a new connection is closed at once, not queued"
    );
    // The held connections time out and give their slots back.
    for s in &mut held {
        assert!(closed_within(s, HEADER_TIMEOUT * 4).await.is_some());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        health(port).await,
        "HTTP/1.1 200 OK",
        "freed slots serve again"
    );
    handle.shutdown().await;
}

#[tokio::test]
async fn an_event_stream_outlives_the_header_timeout() {
    let home = tempfile::tempdir().unwrap();
    let (handle, store) = start(home.path()).await;
    let port = handle.port();
    let state = handle.state().clone();
    let signed = state
        .auth
        .redeem_signin(&state.auth.mint_signin(), "t")
        .unwrap();
    let ticket = state.auth.mint_ticket(&signed.session.id);

    let mut s = connect(port).await;
    s.write_all(
        format!(
            "GET /api/events/stream?ticket={ticket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "the stream opens"
    );
    tokio::time::sleep(HEADER_TIMEOUT * 3).await;
    let ev = gatehouse_store::NewEvent::new(
        common::now(),
        "mcp_tool_call_intercepted",
        gatehouse_store::Action::Block,
        gatehouse_store::Severity::High,
        "late event",
    );
    store.insert_event(&ev).await.unwrap();
    let mut got = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !got.contains("late event") && Instant::now() < deadline {
        match timeout(Duration::from_millis(500), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
    }
    assert!(
        got.contains("late event"),
        "a stream is not cut by the header timeout: {got}"
    );
    drop(s);
    handle.shutdown().await;
}

/// Another local user's connections are closed at once and take no slot:
/// holding more connections than the cap does not lock the owner out.
/// (Needs root, to act as `nobody` through `setpriv`; CI runs as root.)
#[cfg(target_os = "linux")]
#[tokio::test]
async fn another_users_connections_take_no_slot() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: acting as another user needs root");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (handle, _store) = start(home.path()).await;
    let port = handle.port();
    // As nobody: open twice the cap and hold them; the owner asks at once,
    // well inside the header timeout that would free their slots.
    let script = r#"
for i in $(seq 1 "$2"); do exec {fd}<>"/dev/tcp/127.0.0.1/$1" || exit 1; done
echo open
sleep 3
"#;
    let mut other = tokio::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/bin/bash", "-c", script, "bash"])
        .args([port.to_string(), (2 * CAP).to_string()])
        .current_dir("/")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv");
    let mut out = tokio::io::BufReader::new(other.stdout.take().unwrap());
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line)
        .await
        .unwrap();
    assert_eq!(line.trim(), "open", "nobody's connects went through");
    assert_eq!(
        health(port).await,
        "HTTP/1.1 200 OK",
        "the owner is served while another user holds connections"
    );
    let _ = other.wait().await;
    handle.shutdown().await;
}
