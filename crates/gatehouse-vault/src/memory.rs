//! In-memory vault for tests and for fixture homes.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::{validate_name, validate_new_name, validate_server_id, Secret, Vault, VaultError};

/// A [`Vault`] in a `Mutex<BTreeMap>`. Not for production: nothing persists.
/// [`MemoryVault::unavailable`] simulates a machine with no reachable keyring.
#[derive(Debug, Default)]
pub struct MemoryVault {
    entries: Mutex<BTreeMap<(String, String), Secret<String>>>,
    unavailable: Option<String>,
}

impl MemoryVault {
    /// An empty, working vault.
    pub fn new() -> Self {
        Self::default()
    }

    /// A vault whose every call fails with [`VaultError::Unavailable`].
    pub fn unavailable(reason: &str) -> Self {
        Self {
            entries: Mutex::default(),
            unavailable: Some(reason.to_owned()),
        }
    }

    /// Stores an entry as a version without today's name rules could have
    /// (syntax only: a [`crate::reserved`] name is accepted), to test what
    /// readers do with one.
    pub fn insert_legacy(
        &self,
        server_id: &str,
        name: &str,
        value: Secret<String>,
    ) -> Result<(), VaultError> {
        self.check(server_id, Some(name))?;
        self.lock()
            .insert((server_id.to_owned(), name.to_owned()), value);
        Ok(())
    }

    /// Number of stored secrets, across servers.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Secret<String>>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check(&self, server_id: &str, name: Option<&str>) -> Result<(), VaultError> {
        if let Some(reason) = &self.unavailable {
            return Err(VaultError::Unavailable(reason.clone()));
        }
        validate_server_id(server_id)?;
        if let Some(name) = name {
            validate_name(name)?;
        }
        Ok(())
    }
}

impl Vault for MemoryVault {
    fn get(&self, server_id: &str, name: &str) -> Result<Option<Secret<String>>, VaultError> {
        self.check(server_id, Some(name))?;
        Ok(self
            .lock()
            .get(&(server_id.to_owned(), name.to_owned()))
            .cloned())
    }

    fn set(&self, server_id: &str, name: &str, value: Secret<String>) -> Result<(), VaultError> {
        self.check(server_id, Some(name))?;
        validate_new_name(name)?;
        self.lock()
            .insert((server_id.to_owned(), name.to_owned()), value);
        Ok(())
    }

    fn delete(&self, server_id: &str, name: &str) -> Result<bool, VaultError> {
        self.check(server_id, Some(name))?;
        Ok(self
            .lock()
            .remove(&(server_id.to_owned(), name.to_owned()))
            .is_some())
    }

    fn list(&self, server_id: &str) -> Result<Vec<String>, VaultError> {
        self.check(server_id, None)?;
        Ok(self
            .lock()
            .keys()
            .filter(|(s, _)| s == server_id)
            .map(|(_, n)| n.clone())
            .collect())
    }
}
