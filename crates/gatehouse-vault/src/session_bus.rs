//! Linux: finding the D-Bus session bus (and through it the Secret Service)
//! when a client starts `gatehouse wrap` with a minimal environment.
//!
//! Claude Desktop passes its MCP servers only `HOME, LOGNAME, PATH, SHELL,
//! TERM, USER` plus the entry's `env`; without `DBUS_SESSION_BUS_ADDRESS`
//! the keyring is unreachable and the server would start without its
//! secrets. `gatehouse protect` and `gatehouse up` remember the address of
//! the person's session in `$GATEHOUSE_HOME/session-bus` (0600; an address
//! is a socket path, not a secret: the bus authenticates by uid); wrap uses,
//! in order, `$XDG_RUNTIME_DIR/bus`, `/run/user/<uid>/bus`, then that file —
//! each only when its socket exists.

use std::io;
use std::path::{Path, PathBuf};

/// The file under `GATEHOUSE_HOME` holding the remembered address.
pub const HINT_FILE: &str = "session-bus";

const VAR: &str = "DBUS_SESSION_BUS_ADDRESS";

/// Remembers this process's session bus address (when it has one) for wrap
/// processes started without it. Unchanged files are not rewritten.
pub fn remember(home: &Path) -> io::Result<()> {
    let Some(address) = std::env::var(VAR).ok().filter(|a| usable(a)) else {
        return Ok(());
    };
    let path = home.join(HINT_FILE);
    if std::fs::read_to_string(&path).is_ok_and(|old| old.trim() == address) {
        return Ok(());
    }
    let tmp = home.join(format!("{HINT_FILE}.{}.tmp", std::process::id()));
    write_private(&tmp, &address)?;
    std::fs::rename(&tmp, &path)
}

#[cfg(unix)]
fn write_private(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

#[cfg(not(unix))]
fn write_private(path: &Path, text: &str) -> io::Result<()> {
    std::fs::write(path, text)
}

/// The session bus address for a process that has none, or `None` when it
/// has one already or none can be found. `uid` is the caller's user id.
pub fn locate(home: &Path, uid: Option<u32>) -> Option<String> {
    if std::env::var_os(VAR).is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let mut sockets: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        sockets.push(PathBuf::from(dir).join("bus"));
    }
    if let Some(uid) = uid {
        sockets.push(PathBuf::from(format!("/run/user/{uid}/bus")));
    }
    if let Some(found) = sockets.iter().find(|s| s.exists()) {
        return Some(format!("unix:path={}", found.display()));
    }
    let remembered = std::fs::read_to_string(home.join(HINT_FILE)).ok()?;
    let remembered = remembered.trim();
    usable(remembered).then(|| remembered.to_owned())
}

/// An address worth trying: every `unix:path=` socket it names exists
/// (abstract sockets cannot be checked and are taken as they are).
fn usable(address: &str) -> bool {
    !address.is_empty()
        && address.len() < 4096
        && !address.contains('\n')
        && address.split(';').all(|part| {
            part.strip_prefix("unix:")
                .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix("path=")))
                .is_none_or(|p| Path::new(p).exists())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_addresses() {
        let dir = tempfile_dir();
        let sock = dir.join("bus");
        std::fs::write(&sock, "").unwrap();
        assert!(usable(&format!("unix:path={},guid=ab", sock.display())));
        assert!(!usable(&format!(
            "unix:path={}/gone,guid=ab",
            dir.display()
        )));
        assert!(usable("unix:abstract=/tmp/dbus-x,guid=1"));
        assert!(!usable(""));
        assert!(!usable("unix:path=/x\nunix:path=/y"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "gatehouse-bus-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
