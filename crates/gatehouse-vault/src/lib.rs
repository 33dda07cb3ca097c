//! gatehouse-vault owns server secrets: the [`Secret`] type that cannot be
//! printed or serialized, the [`Vault`] trait with the OS keyring
//! ([`KeyringVault`]) and an in-memory ([`MemoryVault`]) implementation,
//! secret detection in client configs ([`detect`]), `{{vault:NAME}}`
//! placeholders ([`placeholder`]), the secret egress guard ([`guard`]), the
//! names a secret may never carry into an environment ([`reserved`]) and,
//! on Linux, finding the session bus for a minimal environment ([`session_bus`]).
//!
//! Secrets are keyed by the opaque server id Gatehouse assigns on protect,
//! never by a display name.
//!
//! **Invariant:** a secret value never appears in an error, a `Debug` or
//! `Display` output, or any serialized form; a keyring that cannot be reached
//! is an error, never a plain-text fallback.

pub mod detect;
pub mod guard;
mod keyring_vault;
mod memory;
pub mod placeholder;
pub mod reserved;
mod secret;
pub mod session_bus;

use std::time::Duration;

pub use guard::{publishable, GuardHit, GuardKey, SecretFingerprint, SecretGuard, MIN_GUARDED_LEN};
pub use keyring_vault::{
    KeyStore, KeyringVault, OsKeyStore, MAX_TIMEOUT, SERVICE, WINDOWS_BLOB_LIMIT,
};
pub use memory::MemoryVault;
pub use placeholder::{expand_placeholders, placeholder, placeholder_names, PlaceholderError};
pub use reserved::reserved_env_name;
pub use secret::Secret;

/// Why a vault call failed. Messages carry names and reasons, never values.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The keyring did not answer in time (often: locked, waiting for an
    /// unlock prompt nobody sees).
    #[error("the OS keyring did not answer within {0:?}; it may be locked and waiting for an unlock prompt")]
    Timeout(Duration),
    /// No keyring backend is reachable.
    #[error("no OS keyring is reachable: {0}")]
    Unavailable(String),
    /// The value exceeds what the backend stores.
    #[error("the {what} is larger than the keyring backend accepts (at most {max} bytes)")]
    TooLarge { what: String, max: usize },
    /// A server id or secret name that cannot be used as a key.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        what: &'static str,
        value: String,
        reason: &'static str,
    },
    /// A secret name that a loader, interpreter or shell reads as code or
    /// start options ([`reserved`]): never stored, never injected.
    #[error("the secret name {name:?} is refused: {reader} reads it, so a secret with this name would decide what code the server runs; store the value under another name")]
    ReservedName { name: String, reader: &'static str },
    /// Any other backend failure.
    #[error("keyring error: {0}")]
    Backend(String),
}

/// Per-server secret storage.
pub trait Vault: Send + Sync {
    /// The secret `name` of `server_id`, if stored.
    fn get(&self, server_id: &str, name: &str) -> Result<Option<Secret<String>>, VaultError>;
    /// Stores (or replaces) a secret.
    fn set(&self, server_id: &str, name: &str, value: Secret<String>) -> Result<(), VaultError>;
    /// Removes a secret; `Ok(false)` when there was none.
    fn delete(&self, server_id: &str, name: &str) -> Result<bool, VaultError>;
    /// Names of the server's secrets, sorted.
    fn list(&self, server_id: &str) -> Result<Vec<String>, VaultError>;
}

/// Server ids: 1–64 of `[A-Za-z0-9_-]`.
pub fn validate_server_id(id: &str) -> Result<(), VaultError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then_some(()).ok_or(VaultError::InvalidName {
        what: "server id",
        value: id.chars().take(64).collect(),
        reason: "use 1-64 letters, digits, '_' or '-'",
    })
}

/// A name for a new secret: [`validate_name`], and not [`reserved`]. Every
/// way a secret is stored (the CLI, the API, protect) goes through
/// [`Vault::set`], which checks this; reading, listing and deleting check
/// only [`validate_name`], so an entry stored before this rule can still be
/// removed.
pub fn validate_new_name(name: &str) -> Result<(), VaultError> {
    validate_name(name)?;
    match reserved_env_name(name) {
        Some(reader) => Err(VaultError::ReservedName {
            name: name.to_owned(),
            reader,
        }),
        None => Ok(()),
    }
}

/// Secret names: 1–128 of `[A-Za-z0-9_.-]`, not starting with '.' or '-'.
pub fn validate_name(name: &str) -> Result<(), VaultError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    ok.then_some(()).ok_or(VaultError::InvalidName {
        what: "secret name",
        value: name.chars().take(128).collect(),
        reason: "use 1-128 letters, digits, '_', '.' or '-'",
    })
}
