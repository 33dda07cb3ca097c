//! `GATEHOUSE_HOME`: the one place that decides where Gatehouse keeps its
//! state, for the CLI, `gatehouse wrap` and the app alike.

use std::io;
use std::path::{Path, PathBuf};

/// Environment variable that overrides the default home.
pub const HOME_ENV: &str = "GATEHOUSE_HOME";

/// Resolves the home directory: an explicit `--home` wins, then
/// `$GATEHOUSE_HOME`, then the per-OS data directory.
pub fn resolve(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_path_buf();
    }
    if let Some(dir) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    default_home()
}

#[cfg(target_os = "linux")]
fn default_home() -> PathBuf {
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(data).join("gatehouse");
    }
    user_home().join(".local/share/gatehouse")
}

#[cfg(target_os = "macos")]
fn default_home() -> PathBuf {
    user_home().join("Library/Application Support/Gatehouse")
}

#[cfg(windows)]
fn default_home() -> PathBuf {
    std::env::var_os("LOCALAPPDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| user_home().join("AppData").join("Local"))
        .join("Gatehouse")
}

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
fn default_home() -> PathBuf {
    user_home().join(".gatehouse")
}

fn user_home() -> PathBuf {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Creates `dir` (and parents) and makes it private to this user (0700 on
/// Unix). A directory that exists but belongs to another user (only its
/// owner may change its mode) is a [`ForeignDir`] error that says so.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| foreign_or(dir, e))?;
    }
    Ok(())
}

/// A home directory that another user owns: Gatehouse cannot make it
/// private, so it will not use it.
#[derive(Debug, thiserror::Error)]
#[error("{} belongs to another user and cannot be used as a Gatehouse home; choose a directory of your own (--home or GATEHOUSE_HOME)", .0.display())]
pub struct ForeignDir(pub PathBuf);

/// The [`ForeignDir`] inside an error from [`ensure_private_dir`], if any.
pub fn foreign_dir(err: &io::Error) -> Option<&ForeignDir> {
    err.get_ref()?.downcast_ref::<ForeignDir>()
}

/// A refused mode change on an existing directory means it is not ours.
fn foreign_or(dir: &Path, err: io::Error) -> io::Error {
    if err.kind() == io::ErrorKind::PermissionDenied {
        io::Error::new(err.kind(), ForeignDir(dir.to_path_buf()))
    } else {
        err
    }
}

/// Makes an existing file readable and writable by this user only (0600 on Unix).
pub fn make_private_file(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// File in `GATEHOUSE_HOME` holding the per-install key (32 random bytes).
pub const INSTALL_KEY_FILE: &str = "install.key";

/// The per-install key that MACs approval rows, shared by wrap, the CLI and
/// the control plane: read from `install.key` (0600), created on first use.
/// Of processes racing to create it, the first link wins and the others
/// re-read the winner's key. A file is a speed bump against same-user code,
/// not a barrier (DESIGN §6).
pub fn install_key(home: &Path) -> io::Result<[u8; 32]> {
    ensure_private_dir(home)?;
    let path = home.join(INSTALL_KEY_FILE);
    for _ in 0..3 {
        if let Ok(bytes) = std::fs::read(&path) {
            if let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice()) {
                return Ok(key);
            }
        }
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| io::Error::other(e.to_string()))?;
        let tmp = home.join(format!("{INSTALL_KEY_FILE}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, key)?;
        make_private_file(&tmp)?;
        // hard_link fails if another process created the key first.
        let linked = std::fs::hard_link(&tmp, &path).is_ok();
        let _ = std::fs::remove_file(&tmp);
        if linked {
            return Ok(key);
        }
    }
    Err(io::Error::other(format!(
        "{} is not a 32-byte key",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_home_wins() {
        assert_eq!(resolve(Some(Path::new("/x/y"))), PathBuf::from("/x/y"));
    }

    #[test]
    fn install_key_is_created_once_and_reused() {
        let tmp = std::env::temp_dir().join(format!("gh-key-test-{}", std::process::id()));
        let first = install_key(&tmp).unwrap();
        let second = install_key(&tmp).unwrap();
        std::fs::remove_dir_all(&tmp).unwrap();
        assert_eq!(first, second, "every process must see the same install key");
        assert_ne!(first, [0u8; 32]);
    }

    #[test]
    fn a_directory_of_another_user_is_named_as_such() {
        // What chmod on a directory this user does not own fails with.
        let eperm = io::Error::from(io::ErrorKind::PermissionDenied);
        let err = foreign_or(Path::new("/tmp/x/gh"), eperm);
        let text = err.to_string();
        assert!(
            text.contains("/tmp/x/gh belongs to another user") && !text.contains("creating"),
            "{text}"
        );
        assert!(foreign_dir(&err).is_some());
        let other = foreign_or(Path::new("/x"), io::Error::from(io::ErrorKind::NotFound));
        assert!(foreign_dir(&other).is_none(), "other errors pass unchanged");
    }

    #[cfg(unix)]
    #[test]
    fn private_dir_is_0700() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = std::env::temp_dir().join(format!("gh-home-test-{}", std::process::id()));
        ensure_private_dir(&tmp).unwrap();
        let mode = std::fs::metadata(&tmp).unwrap().permissions().mode() & 0o777;
        std::fs::remove_dir_all(&tmp).unwrap();
        assert_eq!(
            mode, 0o700,
            "GATEHOUSE_HOME must not be readable by other users"
        );
    }
}
