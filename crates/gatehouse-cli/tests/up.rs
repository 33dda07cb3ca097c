//! `gatehouse up` / `gatehouse dashboard` as a person runs them: `--open`
//! hands the URL opener a private redirect page, never the sign-in token,
//! and an internal error behind a 500 is logged on stderr.
#![cfg(unix)]

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A private `HOME` with `GATEHOUSE_HOME` below it and a `bin/` of stand-in
/// desktop tools first on `PATH`.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let s = Sandbox {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        std::fs::create_dir(s.bin()).unwrap();
        // The URL opener records its arguments; the default browser is no snap.
        s.tool(
            "xdg-open",
            &format!("printf '%s\\n' \"$@\" >> '{}'", s.opened().display()),
        );
        s.tool(
            "open",
            &format!("printf '%s\\n' \"$@\" >> '{}'", s.opened().display()),
        );
        s.tool("xdg-settings", "echo firefox.desktop");
        s
    }

    fn tool(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.bin().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn opened(&self) -> PathBuf {
        self.dir.path().join("opened.txt")
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("gh")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut path = std::ffi::OsString::from(self.bin());
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_default());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        cmd.args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.dir.path())
            .env("GATEHOUSE_HOME", self.home());
        cmd
    }

    /// What the opener was given, one argument a line (waits up to 10 s).
    fn wait_opened(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = std::fs::read_to_string(self.opened()).unwrap_or_default();
            if !got.is_empty() || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A running `gatehouse up`, its stdout and stderr lines as they come.
struct Up {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    port: u16,
    link_token: String,
}

impl Up {
    fn start(sandbox: &Sandbox, extra: &[&str]) -> Up {
        let mut args = vec!["up", "--port", "0"];
        args.extend_from_slice(extra);
        let mut child = sandbox
            .command(&args)
            .env("GATEHOUSE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gatehouse up");
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        let line = stdout
            .recv_timeout(Duration::from_secs(30))
            .expect("`gatehouse up` prints its sign-in link");
        let (port, link_token) = parse_link(&line);
        Up {
            child,
            stdout,
            stderr,
            port,
            link_token,
        }
    }

    /// stderr lines until one contains `needle` (waits up to `limit`).
    fn stderr_until(&self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        let mut seen = String::new();
        while !seen.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    seen.push_str(&line);
                    seen.push('\n');
                }
                Err(_) => break,
            }
        }
        seen
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.stdout;
    }
}

fn lines(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// `Dashboard: http://127.0.0.1:PORT/signin#t=TOKEN` → (PORT, TOKEN).
fn parse_link(line: &str) -> (u16, String) {
    let url = line
        .strip_prefix("Dashboard: http://127.0.0.1:")
        .unwrap_or_else(|| panic!("not a sign-in line: {line}"));
    let (port, token) = url.split_once("/signin#t=").expect("a sign-in link");
    (port.parse().unwrap(), token.to_owned())
}

/// One HTTP/1.1 request: (status, body).
fn http(port: u16, method: &str, path: &str, bearer: Option<&str>, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n\
         {auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

fn sign_in(up: &Up) -> String {
    let (status, body) = http(
        up.port,
        "POST",
        "/api/auth/signin",
        None,
        &format!("{{\"token\":\"{}\"}}", up.link_token),
    );
    assert_eq!(status, 200, "sign-in with the printed link: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["token"].as_str().unwrap().to_owned()
}

/// The page the opener got: a private file that holds the link the
/// opener itself never saw.
fn check_page(sandbox: &Sandbox, opened: &str, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        !opened.contains(token),
        "the opener's command line must not hold the sign-in token: {opened}"
    );
    let page = PathBuf::from(opened.trim());
    assert!(
        page.starts_with(sandbox.home().join("signin")),
        "the page is in GATEHOUSE_HOME/signin: {}",
        page.display()
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!("/signin#t={token}")),
        "the page leads to the sign-in link"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&page), 0o600, "only this user can read the page");
    assert_eq!(mode(page.parent().unwrap()), 0o700);
    page
}

#[test]
fn up_open_hands_the_opener_a_private_page_not_the_token() {
    let sandbox = Sandbox::new();
    let up = Up::start(&sandbox, &["--open"]);
    let opened = sandbox.wait_opened();
    let page = check_page(&sandbox, &opened, &up.link_token);
    // The link still works once, as the browser would use it.
    sign_in(&up);
    let mut up = up;
    let term = Command::new("kill")
        .args(["-TERM", &up.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while up.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !page.exists(),
        "`gatehouse up` removes its redirect page when it stops"
    );
    drop(up);

    // `gatehouse dashboard --open` against a running control plane.
    let sandbox = Sandbox::new();
    let up = Up::start(&sandbox, &[]);
    let out = sandbox
        .command(&["dashboard", "--open"])
        .output()
        .expect("run gatehouse dashboard");
    assert!(out.status.success(), "{out:?}");
    let (_, token) = parse_link(String::from_utf8_lossy(&out.stdout).trim());
    let opened = sandbox.wait_opened();
    check_page(&sandbox, &opened, &token);
    drop(up);
}

#[test]
fn an_internal_error_is_logged_not_returned() {
    let sandbox = Sandbox::new();
    let up = Up::start(&sandbox, &[]);
    let session = sign_in(&up);
    let policy = sandbox.home().join("policy.toml");
    std::fs::remove_file(&policy).unwrap();
    std::fs::create_dir(&policy).unwrap();
    let (status, body) = http(up.port, "GET", "/api/policy", Some(&session), "");
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("\"internal\"") && !body.contains("directory"),
        "the client gets the code, not the details: {body}"
    );
    let log = up.stderr_until("reading policy", Duration::from_secs(10));
    assert!(
        log.contains("ERROR") && log.contains("reading policy"),
        "the details of a 500 are logged on stderr:\n{log}"
    );
}
