//! Atomic, mode-preserving, symlink-following writes.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::ClientError;

/// `sha256:<hex>` of a text.
pub fn sha256(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The file a path finally names (symlinks followed), or the path itself
/// when it does not exist yet.
pub fn resolve_target(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ClientError + '_ {
    move |source| ClientError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How many names the file at `path` (through symlinks) has; 1 when it
/// cannot be told (no such file, not Unix).
pub fn hard_links(path: &Path) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(resolve_target(path)).map_or(1, |m| m.nlink())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        1
    }
}

/// Replaces the file at `path` (through symlinks) with `new`, atomically:
/// a temp file with the target's mode in the same directory; just before the
/// rename the target is re-read and must still equal `expected`; after the
/// rename the content is read back and compared. A file with more than one
/// hard link is written in place instead, so every name keeps reading the
/// same text (protect refuses such files; an unprotect must not leave a
/// name wrapped).
pub fn atomic_write(path: &Path, expected: &str, new: &str) -> Result<(), ClientError> {
    let target = resolve_target(path);
    if hard_links(&target) > 1 {
        write_in_place(&target, expected, new)?;
    } else {
        replace_by_rename(&target, expected, new)?;
    }
    let written = std::fs::read_to_string(&target).map_err(io_err(&target))?;
    if written != new {
        return Err(ClientError::Verify { path: target });
    }
    Ok(())
}

/// A temp file with the target's mode and owner, renamed over it once the
/// target still holds `expected`.
fn replace_by_rename(target: &Path, expected: &str, new: &str) -> Result<(), ClientError> {
    let dir = target.parent().ok_or_else(|| {
        ClientError::Refused(format!("{}: no parent directory", target.display()))
    })?;
    let meta = std::fs::metadata(target).map_err(io_err(target))?;
    // Until the rename, the file itself is untouched: a failure says so.
    let mut tmp = tempfile::Builder::new()
        .prefix(".gatehouse-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(write_err(target))?;
    tmp.write_all(new.as_bytes()).map_err(write_err(target))?;
    tmp.as_file().sync_all().map_err(write_err(target))?;
    std::fs::set_permissions(tmp.path(), meta.permissions()).map_err(write_err(target))?;
    #[cfg(unix)]
    {
        // `sudo gatehouse protect` must not leave the person's config owned
        // by root. Without the right to give it away (not root), the owner
        // is ours already or the chown changes nothing anyway.
        use std::os::unix::fs::MetadataExt;
        let _ = std::os::unix::fs::chown(tmp.path(), Some(meta.uid()), Some(meta.gid()));
    }
    still_holds(target, expected)?;
    tmp.persist(target)
        .map_err(|e| write_err(target)(e.error))?;
    // The rename itself on disk before anything (an unprotect deleting the
    // keyring's copies) relies on it.
    #[cfg(unix)]
    let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// Rewrites `target` in its own inode (truncate, write, sync) once it still
/// holds `expected`.
fn write_in_place(target: &Path, expected: &str, new: &str) -> Result<(), ClientError> {
    still_holds(target, expected)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(target)
        .map_err(write_err(target))?;
    file.write_all(new.as_bytes()).map_err(write_err(target))?;
    file.sync_all().map_err(write_err(target))
}

/// The target still holds what the rewrite was planned from (its client did
/// not change it meanwhile).
fn still_holds(target: &Path, expected: &str) -> Result<(), ClientError> {
    let current = std::fs::read_to_string(target).map_err(io_err(target))?;
    if current != expected {
        return Err(ClientError::Concurrent {
            path: target.to_path_buf(),
        });
    }
    Ok(())
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> ClientError + '_ {
    move |source| ClientError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// A lock directory held while writing (removed on drop).
#[derive(Debug)]
pub struct DirLock(PathBuf);

impl DirLock {
    /// Takes `<target><suffix>` as a lock directory, like the client does.
    pub fn acquire(path: &Path, suffix: &str) -> Result<DirLock, ClientError> {
        let target = resolve_target(path);
        let mut name = target.clone().into_os_string();
        name.push(suffix);
        let lock = PathBuf::from(name);
        match std::fs::create_dir(&lock) {
            Ok(()) => Ok(DirLock(lock)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(ClientError::Refused(format!(
                    "{} is locked by its client ({} exists); try again in a moment",
                    target.display(),
                    lock.display()
                )))
            }
            Err(source) => Err(ClientError::Io { path: lock, source }),
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Creates `dir` (and its parents) and makes it private (0700).
pub fn create_private_dir(dir: &Path) -> Result<(), ClientError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(dir))?;
    }
    Ok(())
}

/// Writes a private (0600) file, creating private parent directories.
pub fn write_private(path: &Path, content: &str) -> Result<(), ClientError> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".gatehouse-")
        .tempfile_in(dir)
        .map_err(io_err(path))?;
    tmp.write_all(content.as_bytes()).map_err(io_err(path))?;
    tmp.as_file().sync_all().map_err(io_err(path))?;
    tmp.persist(path).map_err(|e| ClientError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn keeps_the_owner_when_it_may() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        std::fs::write(&file, "old").unwrap();
        // Only root can give a file away (the CI runs as root).
        if std::os::unix::fs::chown(&file, Some(4321), Some(4321)).is_err() {
            eprintln!("keeps_the_owner_when_it_may: SKIPPED: not root");
            return;
        }
        atomic_write(&file, "old", "new").unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4321, 4321), "owner kept");
    }

    /// Every name of a hard-linked file reads the new text (a rename would
    /// have left the other name with the old one); a race is still caught.
    #[cfg(unix)]
    #[test]
    fn a_hard_linked_file_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        let other = dir.path().join("dotfiles.json");
        std::fs::write(&file, "old").unwrap();
        std::fs::hard_link(&file, &other).unwrap();
        assert_eq!(hard_links(&file), 2);
        atomic_write(&file, "old", "new").unwrap();
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "new");
        assert_eq!(hard_links(&file), 2, "still one file");
        let err = atomic_write(&file, "stale", "newer").unwrap_err();
        assert!(matches!(err, ClientError::Concurrent { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "new");
    }

    #[test]
    fn keeps_mode_follows_symlinks_and_detects_races() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, "old").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
            let link = dir.path().join("link.json");
            std::os::unix::fs::symlink(&real, &link).unwrap();
            atomic_write(&link, "old", "new").unwrap();
            assert!(
                std::fs::symlink_metadata(&link)
                    .unwrap()
                    .file_type()
                    .is_symlink(),
                "the symlink stays a symlink"
            );
            assert_eq!(
                std::fs::read_to_string(&real).unwrap(),
                "new",
                "the write goes through to the target"
            );
            assert_eq!(
                std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
                0o640,
                "mode is kept"
            );
        }
        #[cfg(not(unix))]
        atomic_write(&real, "old", "new").unwrap();
        let err = atomic_write(&real, "stale", "newer").unwrap_err();
        assert!(
            matches!(err, ClientError::Concurrent { .. }),
            "a changed file must not be overwritten: {err}"
        );
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
    }
}
