//! [`KeyringVault`]: the OS keyring (macOS Keychain, Windows Credential
//! Manager, Linux Secret Service) through the `keyring` crate.
//!
//! Layout: service `gatehouse`, user `<server_id>/<name>`; per server one
//! index entry `<server_id>/#names` listing the names (keyrings cannot
//! list). Every operation runs on a worker thread and gives up after at most
//! 3 s with [`VaultError::Timeout`], so a locked keyring waiting on an unlock
//! prompt never hangs a client's server start. An unreachable backend is
//! [`VaultError::Unavailable`]; there is no plain-text fallback.

use std::collections::BTreeSet;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use crate::{validate_name, validate_new_name, validate_server_id, Secret, Vault, VaultError};

/// The keyring service every Gatehouse entry lives under.
pub const SERVICE: &str = "gatehouse";

/// The longest a keyring call may take before it is abandoned.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3);

/// Windows Credential Manager holds at most 2,560 bytes per credential
/// blob (`CRED_MAX_CREDENTIAL_BLOB_SIZE`); the password is stored as UTF-16.
pub const WINDOWS_BLOB_LIMIT: usize = 2560;

/// Most chunks one secret may span (40 KB on Windows); beyond that the
/// secret is refused with [`VaultError::TooLarge`].
pub const MAX_CHUNKS: usize = 16;

const INDEX_SUFFIX: &str = "#names";

/// The raw keyring operations, one credential per `user`. The real
/// implementation talks to the OS; tests substitute a map, a hanging or a
/// failing store.
pub trait KeyStore: Send + Sync + 'static {
    /// Reads one credential; `Ok(None)` when absent.
    fn get(&self, user: &str) -> Result<Option<String>, VaultError>;
    /// Creates or replaces one credential.
    fn set(&self, user: &str, value: &str) -> Result<(), VaultError>;
    /// Removes one credential; `Ok(false)` when it was absent.
    fn delete(&self, user: &str) -> Result<bool, VaultError>;
}

/// The OS keyring via the `keyring` crate.
#[derive(Debug, Clone)]
pub struct OsKeyStore {
    service: String,
}

impl OsKeyStore {
    /// Entries under `service` (normally [`SERVICE`]).
    pub fn new(service: &str) -> Self {
        Self {
            service: service.to_owned(),
        }
    }

    fn entry(&self, user: &str) -> Result<keyring::Entry, VaultError> {
        keyring::Entry::new(&self.service, user).map_err(map_keyring_error)
    }
}

impl KeyStore for OsKeyStore {
    fn get(&self, user: &str) -> Result<Option<String>, VaultError> {
        match self.entry(user)?.get_password() {
            Ok(v) => Ok(Some(v)),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(e) => Err(map_keyring_error(e)),
        }
    }

    fn set(&self, user: &str, value: &str) -> Result<(), VaultError> {
        self.entry(user)?
            .set_password(value)
            .map_err(map_keyring_error)
    }

    fn delete(&self, user: &str) -> Result<bool, VaultError> {
        match self.entry(user)?.delete_credential() {
            Ok(()) => Ok(true),
            Err(keyring::Error::NoEntry) => Ok(false),
            Err(e) => Err(map_keyring_error(e)),
        }
    }
}

/// Maps keyring errors to [`VaultError`] without ever formatting a stored
/// value (`BadEncoding` carries the raw bytes; it is never shown).
fn map_keyring_error(err: keyring::Error) -> VaultError {
    match err {
        keyring::Error::PlatformFailure(e) => VaultError::Unavailable(e.to_string()),
        keyring::Error::NoStorageAccess(e) => VaultError::Unavailable(format!(
            "keyring refused access (locked or no default collection): {e}"
        )),
        keyring::Error::NoEntry => VaultError::Backend("no such entry".into()),
        keyring::Error::BadEncoding(_) => VaultError::Backend("stored value is not UTF-8".into()),
        keyring::Error::TooLong(attr, max) => VaultError::TooLarge {
            what: attr,
            max: max as usize,
        },
        keyring::Error::Invalid(attr, reason) => {
            VaultError::Backend(format!("invalid {attr}: {reason}"))
        }
        keyring::Error::Ambiguous(_) => {
            VaultError::Backend("more than one matching keyring entry".into())
        }
        _ => VaultError::Backend("unexpected keyring error".into()),
    }
}

/// [`Vault`] over a [`KeyStore`] with a names index, a per-call timeout and,
/// where the backend has a size limit (Windows), chunking.
#[derive(Clone)]
pub struct KeyringVault {
    store: Arc<dyn KeyStore>,
    timeout: Duration,
    /// Largest stored string, in UTF-16 bytes, before a value is chunked.
    chunk_limit: Option<usize>,
}

impl std::fmt::Debug for KeyringVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyringVault")
            .field("timeout", &self.timeout)
            .field("chunk_limit", &self.chunk_limit)
            .finish_non_exhaustive()
    }
}

impl Default for KeyringVault {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyringVault {
    /// The OS keyring, service [`SERVICE`], 3 s timeout, chunking on Windows.
    pub fn new() -> Self {
        Self::with_service(SERVICE)
    }

    /// The OS keyring under another service name (integration tests).
    pub fn with_service(service: &str) -> Self {
        let chunk_limit = if cfg!(windows) {
            Some(WINDOWS_BLOB_LIMIT)
        } else {
            None
        };
        Self::with_store(Arc::new(OsKeyStore::new(service)), chunk_limit)
    }

    /// Any [`KeyStore`]; `chunk_limit` in UTF-16 bytes per stored string.
    pub fn with_store(store: Arc<dyn KeyStore>, chunk_limit: Option<usize>) -> Self {
        Self {
            store,
            timeout: MAX_TIMEOUT,
            chunk_limit,
        }
    }

    /// Shortens the per-operation timeout (never above [`MAX_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// Checks that the backend answers (reads one index entry).
    pub fn probe(&self) -> Result<(), VaultError> {
        self.run(|store, _| store.get(&index_user("gatehouse-probe")).map(|_| ()))
    }

    /// Runs `op` on a worker thread; abandons it after the timeout.
    fn run<R: Send + 'static>(
        &self,
        op: impl FnOnce(&dyn KeyStore, Option<usize>) -> Result<R, VaultError> + Send + 'static,
    ) -> Result<R, VaultError> {
        let store = Arc::clone(&self.store);
        let chunk_limit = self.chunk_limit;
        let (tx, rx) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("gatehouse-keyring".into())
            .spawn(move || {
                let _ = tx.send(op(store.as_ref(), chunk_limit));
            })
            .map_err(|e| {
                VaultError::Unavailable(format!("cannot start the keyring worker: {e}"))
            })?;
        match rx.recv_timeout(self.timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(VaultError::Timeout(self.timeout)),
            Err(RecvTimeoutError::Disconnected) => {
                Err(VaultError::Backend("the keyring worker failed".into()))
            }
        }
    }
}

fn value_user(server_id: &str, name: &str) -> String {
    format!("{server_id}/{name}")
}

fn index_user(server_id: &str) -> String {
    format!("{server_id}/{INDEX_SUFFIX}")
}

fn chunk_user(server_id: &str, name: &str, i: usize) -> String {
    format!("{server_id}/{name}#{i}")
}

fn utf16_bytes(s: &str) -> usize {
    s.encode_utf16().count() * 2
}

/// Splits `value` into pieces of at most `limit` UTF-16 bytes, on char
/// boundaries.
pub(crate) fn split_utf16(value: &str, limit: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut size = 0;
    for (i, c) in value.char_indices() {
        let w = c.len_utf16() * 2;
        if size + w > limit && i > start {
            pieces.push(&value[start..i]);
            start = i;
            size = 0;
        }
        size += w;
    }
    if start < value.len() || pieces.is_empty() {
        pieces.push(&value[start..]);
    }
    pieces
}

const PLAIN_TAG: &str = "v1:";
const CHUNK_TAG: &str = "c1:";

fn read_value(
    store: &dyn KeyStore,
    limit: Option<usize>,
    server_id: &str,
    name: &str,
) -> Result<Option<String>, VaultError> {
    let Some(stored) = store.get(&value_user(server_id, name))? else {
        return Ok(None);
    };
    if limit.is_none() {
        return Ok(Some(stored));
    }
    if let Some(plain) = stored.strip_prefix(PLAIN_TAG) {
        return Ok(Some(plain.to_owned()));
    }
    let count: usize = stored
        .strip_prefix(CHUNK_TAG)
        .and_then(|n| n.parse().ok())
        .filter(|n| (1..=MAX_CHUNKS).contains(n))
        .ok_or_else(|| VaultError::Backend("stored entry has an unknown format".into()))?;
    let mut value = String::new();
    for i in 0..count {
        let piece = store
            .get(&chunk_user(server_id, name, i))?
            .ok_or_else(|| VaultError::Backend(format!("chunk {i} of {count} is missing")))?;
        value.push_str(&piece);
    }
    Ok(Some(value))
}

fn delete_chunks(store: &dyn KeyStore, server_id: &str, name: &str) -> Result<(), VaultError> {
    for i in 0..MAX_CHUNKS {
        if !store.delete(&chunk_user(server_id, name, i))? {
            break;
        }
    }
    Ok(())
}

fn write_value(
    store: &dyn KeyStore,
    limit: Option<usize>,
    server_id: &str,
    name: &str,
    value: &str,
) -> Result<(), VaultError> {
    let Some(limit) = limit else {
        return store.set(&value_user(server_id, name), value);
    };
    let tagged = format!("{PLAIN_TAG}{value}");
    if utf16_bytes(&tagged) <= limit {
        store.set(&value_user(server_id, name), &tagged)?;
        return delete_chunks(store, server_id, name);
    }
    let pieces = split_utf16(value, limit);
    if pieces.len() > MAX_CHUNKS {
        return Err(VaultError::TooLarge {
            what: "secret".into(),
            max: limit * MAX_CHUNKS,
        });
    }
    delete_chunks(store, server_id, name)?;
    for (i, piece) in pieces.iter().enumerate() {
        store.set(&chunk_user(server_id, name, i), piece)?;
    }
    store.set(
        &value_user(server_id, name),
        &format!("{CHUNK_TAG}{}", pieces.len()),
    )
}

fn read_index(store: &dyn KeyStore, server_id: &str) -> Result<BTreeSet<String>, VaultError> {
    Ok(store
        .get(&index_user(server_id))?
        .map(|s| {
            s.lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default())
}

fn write_index(
    store: &dyn KeyStore,
    server_id: &str,
    names: &BTreeSet<String>,
) -> Result<(), VaultError> {
    if names.is_empty() {
        store.delete(&index_user(server_id)).map(|_| ())
    } else {
        let joined: Vec<&str> = names.iter().map(String::as_str).collect();
        store.set(&index_user(server_id), &joined.join("\n"))
    }
}

impl Vault for KeyringVault {
    fn get(&self, server_id: &str, name: &str) -> Result<Option<Secret<String>>, VaultError> {
        validate_server_id(server_id)?;
        validate_name(name)?;
        let (s, n) = (server_id.to_owned(), name.to_owned());
        Ok(self
            .run(move |store, limit| read_value(store, limit, &s, &n))?
            .map(Secret::new))
    }

    fn set(&self, server_id: &str, name: &str, value: Secret<String>) -> Result<(), VaultError> {
        validate_server_id(server_id)?;
        validate_new_name(name)?;
        let (s, n) = (server_id.to_owned(), name.to_owned());
        self.run(move |store, limit| {
            write_value(store, limit, &s, &n, value.expose())?;
            let mut names = read_index(store, &s)?;
            if names.insert(n) {
                write_index(store, &s, &names)?;
            }
            Ok(())
        })
    }

    fn delete(&self, server_id: &str, name: &str) -> Result<bool, VaultError> {
        validate_server_id(server_id)?;
        validate_name(name)?;
        let (s, n) = (server_id.to_owned(), name.to_owned());
        self.run(move |store, _| {
            let existed = store.delete(&value_user(&s, &n))?;
            delete_chunks(store, &s, &n)?;
            let mut names = read_index(store, &s)?;
            if names.remove(&n) {
                write_index(store, &s, &names)?;
            }
            Ok(existed)
        })
    }

    fn list(&self, server_id: &str) -> Result<Vec<String>, VaultError> {
        validate_server_id(server_id)?;
        let s = server_id.to_owned();
        self.run(move |store, _| Ok(read_index(store, &s)?.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Instant;

    #[derive(Default)]
    struct MapStore(Mutex<BTreeMap<String, String>>);

    impl KeyStore for MapStore {
        fn get(&self, user: &str) -> Result<Option<String>, VaultError> {
            Ok(self.0.lock().unwrap().get(user).cloned())
        }
        fn set(&self, user: &str, value: &str) -> Result<(), VaultError> {
            self.0.lock().unwrap().insert(user.into(), value.into());
            Ok(())
        }
        fn delete(&self, user: &str) -> Result<bool, VaultError> {
            Ok(self.0.lock().unwrap().remove(user).is_some())
        }
    }

    struct HangingStore;
    impl KeyStore for HangingStore {
        fn get(&self, _: &str) -> Result<Option<String>, VaultError> {
            std::thread::sleep(Duration::from_secs(30));
            Ok(None)
        }
        fn set(&self, _: &str, _: &str) -> Result<(), VaultError> {
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        }
        fn delete(&self, _: &str) -> Result<bool, VaultError> {
            std::thread::sleep(Duration::from_secs(30));
            Ok(false)
        }
    }

    fn secret(s: &str) -> Secret<String> {
        Secret::new(s.to_owned())
    }

    #[test]
    fn round_trip_with_names_index() {
        let store = Arc::new(MapStore::default());
        let v = KeyringVault::with_store(store.clone(), None);
        v.set("srv_a", "GITHUB_TOKEN", secret("ghp_abc")).unwrap();
        v.set("srv_a", "OTHER", secret("x")).unwrap();
        v.set("srv_b", "GITHUB_TOKEN", secret("ghp_other")).unwrap();
        assert_eq!(
            v.get("srv_a", "GITHUB_TOKEN").unwrap().unwrap().expose(),
            "ghp_abc"
        );
        assert_eq!(
            v.list("srv_a").unwrap(),
            vec!["GITHUB_TOKEN", "OTHER"],
            "index must list both names"
        );
        assert!(v.delete("srv_a", "OTHER").unwrap());
        assert!(
            !v.delete("srv_a", "OTHER").unwrap(),
            "second delete finds nothing"
        );
        assert_eq!(v.list("srv_a").unwrap(), vec!["GITHUB_TOKEN"]);
        assert!(
            store.0.lock().unwrap().contains_key("srv_a/GITHUB_TOKEN"),
            "layout is <server>/<name>"
        );
        assert!(v.get("srv_a", "OTHER").unwrap().is_none());
        assert_eq!(
            v.get("srv_b", "GITHUB_TOKEN").unwrap().unwrap().expose(),
            "ghp_other",
            "servers are separate"
        );
    }

    #[test]
    fn reserved_names_are_never_stored_but_can_be_removed() {
        let store = Arc::new(MapStore::default());
        let v = KeyringVault::with_store(store.clone(), None);
        let err = v
            .set("srv_a", "PYTHONPATH", secret("/tmp/attacker"))
            .unwrap_err();
        assert!(
            matches!(err, VaultError::ReservedName { .. }),
            "a loader/interpreter setting is not a secret: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("PYTHONPATH") && msg.contains("Python") && !msg.contains("attacker"),
            "the error names the name and why, never the value: {msg}"
        );
        assert!(store.0.lock().unwrap().is_empty(), "nothing was written");
        // An entry stored before the rule (by an older version) can be removed.
        store
            .0
            .lock()
            .unwrap()
            .insert("srv_a/LD_PRELOAD".into(), "/tmp/x.so".into());
        store
            .0
            .lock()
            .unwrap()
            .insert(index_user("srv_a"), "LD_PRELOAD".into());
        assert_eq!(v.list("srv_a").unwrap(), vec!["LD_PRELOAD"]);
        assert!(v.delete("srv_a", "LD_PRELOAD").unwrap());
        assert!(v.list("srv_a").unwrap().is_empty());
    }

    #[test]
    fn hanging_backend_times_out() {
        let v = KeyringVault::with_store(Arc::new(HangingStore), None)
            .with_timeout(Duration::from_millis(200));
        let start = Instant::now();
        let err = v.get("srv_a", "TOKEN").unwrap_err();
        assert!(
            matches!(err, VaultError::Timeout(_)),
            "expected a timeout, got {err:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the call must return promptly"
        );
    }

    #[test]
    fn timeout_is_capped_at_three_seconds() {
        let v = KeyringVault::new().with_timeout(Duration::from_secs(60));
        assert_eq!(v.timeout, MAX_TIMEOUT);
    }

    #[test]
    fn large_values_are_chunked_when_the_backend_has_a_limit() {
        let store = Arc::new(MapStore::default());
        let v = KeyringVault::with_store(store.clone(), Some(WINDOWS_BLOB_LIMIT));
        let big: String = (0..3000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .chain("é😀".chars())
            .collect();
        v.set("srv_a", "PEM", secret(&big)).unwrap();
        {
            let map = store.0.lock().unwrap();
            for (user, value) in map.iter() {
                assert!(
                    utf16_bytes(value) <= WINDOWS_BLOB_LIMIT,
                    "{user} is over the per-entry limit"
                );
            }
            assert_eq!(map.get("srv_a/PEM").map(String::as_str), Some("c1:3"));
        }
        assert_eq!(
            v.get("srv_a", "PEM").unwrap().unwrap().expose(),
            &big,
            "chunks reassemble exactly"
        );
        v.set("srv_a", "PEM", secret("small")).unwrap();
        assert!(
            !store.0.lock().unwrap().contains_key("srv_a/PEM#0"),
            "old chunks are removed on overwrite"
        );
        assert_eq!(v.get("srv_a", "PEM").unwrap().unwrap().expose(), "small");
        let huge = "x".repeat(WINDOWS_BLOB_LIMIT * MAX_CHUNKS);
        assert!(matches!(
            v.set("srv_a", "HUGE", secret(&huge)),
            Err(VaultError::TooLarge { .. })
        ));
    }

    #[test]
    fn split_respects_char_boundaries() {
        for (input, limit) in [("abcdef", 4), ("😀😀😀", 4), ("a😀b", 4), ("", 4)] {
            let pieces = split_utf16(input, limit);
            assert_eq!(pieces.concat(), input, "pieces must reassemble {input:?}");
            assert!(
                pieces.iter().all(|p| utf16_bytes(p) <= limit),
                "{pieces:?} exceeds {limit}"
            );
        }
    }

    #[test]
    fn names_are_validated() {
        let v = KeyringVault::with_store(Arc::new(MapStore::default()), None);
        for (server, name) in [
            ("srv/a", "X"),
            ("srv_a", "A/B"),
            ("srv_a", "#names"),
            ("", "X"),
            ("srv_a", "A\nB"),
        ] {
            assert!(
                v.set(server, name, secret("v")).is_err(),
                "{server:?}/{name:?} must be rejected"
            );
        }
    }
}
