//! One control plane per user: an exclusive lock on `control.lock` in
//! `GATEHOUSE_HOME`, and a 0600 `control.json` saying where it listens and
//! holding a per-run CLI secret. The CLI proves it can read that file by
//! answering a challenge with an HMAC of the secret, so the secret itself
//! never crosses the socket.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fs4::fs_std::FileExt;

use crate::auth::{cli_mac, verify_control_proof};

/// Name of the lock file in `GATEHOUSE_HOME`.
pub const LOCK_FILE: &str = "control.lock";
/// Name of the control file in `GATEHOUSE_HOME`.
pub const CONTROL_FILE: &str = "control.json";

/// Errors finding, locking or talking to the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Filesystem trouble with the lock or control file.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Which file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The home directory belongs to another user (the whole message).
    #[error("{0}")]
    ForeignHome(String),
    /// No control plane is running for this home.
    #[error("no control plane is running for {0} (start one with `gatehouse up`)")]
    NotRunning(PathBuf),
    /// `control.json` exists but does not parse.
    #[error("control file {0} is malformed")]
    Malformed(PathBuf),
    /// The running control plane answered unexpectedly.
    #[error("control plane at port {port} refused: {reason}")]
    Refused {
        /// Its port.
        port: u16,
        /// A safe description.
        reason: String,
    },
}

/// Contents of `control.json`.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct ControlInfo {
    /// Format version.
    pub version: u32,
    /// Process id of the control plane.
    pub pid: u32,
    /// Loopback port it listens on.
    pub port: u16,
    /// Per-run secret the CLI uses to answer challenges (never sent).
    pub cli_secret: String,
}

impl std::fmt::Debug for ControlInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlInfo")
            .field("pid", &self.pid)
            .field("port", &self.port)
            .field("cli_secret", &"<redacted>")
            .finish()
    }
}

impl ControlInfo {
    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.host())
    }

    /// `127.0.0.1:PORT`, the Host the CLI sends.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Held while this process is the control plane; dropping it removes
/// `control.json` and releases the lock.
#[derive(Debug)]
pub struct ControlLock {
    file: File,
    home: PathBuf,
    published: bool,
}

/// Outcome of [`acquire`].
#[derive(Debug)]
pub enum Acquired {
    /// This process is now the control plane.
    Mine(ControlLock),
    /// Another process holds the lock; its control file (if readable yet).
    Running(Option<ControlInfo>),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ControlError {
    let path = path.to_path_buf();
    move |source| ControlError::Io { what, path, source }
}

/// Why `home` cannot be made ready: a directory of another user says so
/// (not "creating …", which it is not).
fn home_error(home: &Path, e: std::io::Error) -> ControlError {
    match gatehouse_store::home::foreign_dir(&e) {
        Some(foreign) => ControlError::ForeignHome(foreign.to_string()),
        None => io("creating", home)(e),
    }
}

/// Tries to become the control plane for `home` (created 0700 if missing).
pub fn acquire(home: &Path) -> Result<Acquired, ControlError> {
    gatehouse_store::home::ensure_private_dir(home).map_err(|e| home_error(home, e))?;
    let path = home.join(LOCK_FILE);
    let file = open_private(&path, false).map_err(io("opening", &path))?;
    match FileExt::try_lock_exclusive(&file) {
        Ok(true) => Ok(Acquired::Mine(ControlLock {
            file,
            home: home.to_path_buf(),
            published: false,
        })),
        Ok(false) => Ok(Acquired::Running(read_control(home).ok())),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            Ok(Acquired::Running(read_control(home).ok()))
        }
        Err(e) => Err(io("locking", &path)(e)),
    }
}

fn open_private(path: &Path, truncate: bool) -> std::io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(truncate);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let file = opts.open(path)?;
    gatehouse_store::home::make_private_file(path)?;
    Ok(file)
}

impl ControlLock {
    /// Atomically writes `control.json` (0600) for this running instance.
    pub fn publish(&mut self, info: &ControlInfo) -> Result<(), ControlError> {
        let path = self.home.join(CONTROL_FILE);
        let tmp = self
            .home
            .join(format!("{CONTROL_FILE}.{}.tmp", std::process::id()));
        let body = serde_json::to_vec_pretty(info).expect("ControlInfo serializes");
        let mut f = open_private(&tmp, true).map_err(io("writing", &tmp))?;
        f.write_all(&body)
            .and_then(|_| f.sync_all())
            .map_err(io("writing", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("renaming", &path))?;
        self.published = true;
        Ok(())
    }

    /// The home this lock guards.
    pub fn home(&self) -> &Path {
        &self.home
    }
}

impl Drop for ControlLock {
    fn drop(&mut self) {
        if self.published {
            let _ = std::fs::remove_file(self.home.join(CONTROL_FILE));
        }
        let _ = FileExt::unlock(&self.file);
    }
}

/// File in `GATEHOUSE_HOME` holding the per-install MAC key (0600).
pub use gatehouse_store::home::INSTALL_KEY_FILE;

/// Loads the per-install MAC key for pins and modes, creating it (32
/// random bytes, 0600, first writer wins) if missing. `gatehouse wrap`
/// must use the same key, or approvals made here will not verify there.
pub fn install_key(home: &Path) -> Result<gatehouse_store::MacKey, ControlError> {
    gatehouse_store::home::install_key(home)
        .map(gatehouse_store::MacKey::new)
        .map_err(io("reading or creating", &home.join(INSTALL_KEY_FILE)))
}

/// Reads `control.json` from `home`.
pub fn read_control(home: &Path) -> Result<ControlInfo, ControlError> {
    let path = home.join(CONTROL_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ControlError::NotRunning(home.to_path_buf()))
        }
        Err(e) => return Err(io("reading", &path)(e)),
    };
    serde_json::from_slice(&bytes).map_err(|_| ControlError::Malformed(path))
}

/// Asks the running control plane for a fresh one-time sign-in URL by
/// answering its challenge with `HMAC(cli_secret, nonce)`.
pub fn request_signin_url(info: &ControlInfo) -> Result<String, ControlError> {
    let (status, body) = http(info, "GET", "/api/cli/challenge", None)?;
    if status != 200 {
        return Err(ControlError::Refused {
            port: info.port,
            reason: format!("challenge status {status}"),
        });
    }
    let nonce = body["nonce"].as_str().unwrap_or_default().to_owned();
    let mac = cli_mac(&info.cli_secret, &nonce);
    let req = serde_json::json!({ "nonce": nonce, "mac": mac });
    let (status, body) = http(info, "POST", "/api/cli/signin-link", Some(&req))?;
    match body["url"].as_str() {
        Some(url) if status == 200 => {
            // Whatever listens there must know the secret too, and answer
            // with a path of its own origin.
            let proof = body["proof"].as_str().unwrap_or_default();
            if !url.starts_with("/signin#")
                || !verify_control_proof(&info.cli_secret, &info.host(), &nonce, url, proof)
            {
                return Err(ControlError::Refused {
                    port: info.port,
                    reason: "what listens there could not prove it is this user's control plane"
                        .into(),
                });
            }
            Ok(format!("{}{}", info.base_url(), url))
        }
        _ => Err(ControlError::Refused {
            port: info.port,
            reason: body["error"]["code"]
                .as_str()
                .unwrap_or("unexpected answer")
                .to_owned(),
        }),
    }
}

/// Minimal HTTP/1.1 client for the loopback control API (no dependencies).
fn http(
    info: &ControlInfo,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, serde_json::Value), ControlError> {
    let refused = |reason: &str| ControlError::Refused {
        port: info.port,
        reason: reason.to_owned(),
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, info.port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|_| refused("not reachable"))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let host = info.host();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream
        .write_all(req.as_bytes())
        .map_err(|_| refused("write failed"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|_| refused("read failed"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| refused("malformed response"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| refused("malformed status"))?;
    let json = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    Ok((status, json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_of_another_user_says_so() {
        let home = Path::new("/tmp/x/gh");
        let foreign = std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            gatehouse_store::home::ForeignDir(home.to_path_buf()),
        );
        let text = home_error(home, foreign).to_string();
        assert!(
            text.starts_with("/tmp/x/gh belongs to another user") && !text.contains("creating"),
            "{text}"
        );
        let other = home_error(home, std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(
            other.to_string().starts_with("creating /tmp/x/gh: "),
            "{other}"
        );
    }

    #[test]
    fn second_acquire_sees_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let Acquired::Mine(mut lock) = acquire(dir.path()).unwrap() else {
            panic!("first acquire must win an empty home");
        };
        let info = ControlInfo {
            version: 1,
            pid: 7,
            port: 4242,
            cli_secret: "x".into(),
        };
        lock.publish(&info).unwrap();
        match acquire(dir.path()).unwrap() {
            Acquired::Running(Some(found)) => {
                assert_eq!(found.port, 4242, "second start must find the first's port")
            }
            other => panic!("second acquire must not win: {other:?}"),
        }
        drop(lock);
        assert!(
            !dir.path().join(CONTROL_FILE).exists(),
            "control.json is removed on exit"
        );
        assert!(
            matches!(acquire(dir.path()).unwrap(), Acquired::Mine(_)),
            "lock is released on drop"
        );
    }

    #[cfg(unix)]
    #[test]
    fn control_file_is_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let Acquired::Mine(mut lock) = acquire(dir.path()).unwrap() else {
            panic!("must acquire")
        };
        lock.publish(&ControlInfo {
            version: 1,
            pid: 1,
            port: 1,
            cli_secret: "x".into(),
        })
        .unwrap();
        let mode = std::fs::metadata(dir.path().join(CONTROL_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(
            mode, 0o600,
            "control.json holds the CLI secret and must be private"
        );
    }

    #[test]
    fn install_key_is_stable_and_private() {
        let dir = tempfile::tempdir().unwrap();
        install_key(dir.path()).unwrap();
        let first = std::fs::read(dir.path().join(INSTALL_KEY_FILE)).unwrap();
        install_key(dir.path()).unwrap();
        let second = std::fs::read(dir.path().join(INSTALL_KEY_FILE)).unwrap();
        assert_eq!(first.len(), 32, "the key file holds 32 raw bytes");
        assert_eq!(first, second, "an existing key is reused, never replaced");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(INSTALL_KEY_FILE))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600, "the install key is private");
        }
    }

    #[test]
    fn debug_redacts_secret() {
        let info = ControlInfo {
            version: 1,
            pid: 1,
            port: 1,
            cli_secret: "canary-secret".into(),
        };
        assert!(
            !format!("{info:?}").contains("canary"),
            "Debug must not print the CLI secret"
        );
    }
}
