//! gatehouse-clients owns AI-client MCP configs: the per-client table
//! ([`table::CLIENTS`]), discovery ([`discover::detect`]), protect /
//! unprotect / repair as span edits that keep everything Gatehouse does not
//! own ([`protect::Protector`], [`doc::ConfigDoc`]), backups and identity
//! records ([`state`]), changes made through a running client's own CLI
//! ([`client_cli`]), and the config watcher the control plane hosts
//! ([`watch`]).
//!
//! **Invariant:** a config is only ever changed by an atomic, verified write
//! of a span-edited copy of its current text; a file that does not parse is
//! never written; secret values never reach backups, diffs, state or errors.

pub mod client_cli;
pub mod discover;
pub mod doc;
pub mod entry;
pub mod fsutil;
pub mod home;
pub mod jsonc;
pub mod protect;
pub mod state;
pub mod table;
pub mod watch;

use std::path::PathBuf;

pub use discover::{detect, ConfigFile, DetectedClient};
pub use home::{HomeDirs, Os};
pub use protect::{FileReport, Options, Protector, ServerRegistry};
pub use state::ProtectedServer;
pub use table::{client, ClientSpec, CLIENTS};

/// Why a config operation failed. Names files and positions, never values.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The file does not parse; it was left untouched.
    #[error("{}:{line}:{col}: cannot parse ({msg}); file left untouched", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        col: usize,
        msg: String,
    },
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Writing the new content failed before it replaced the file.
    #[error("could not write {}: {source}; the file was left as it was", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file changed between reading and writing.
    #[error("{} changed while Gatehouse was rewriting it; nothing was written, run again", path.display())]
    Concurrent { path: PathBuf },
    /// The written file does not read back as written.
    #[error("{}: the written content did not verify", path.display())]
    Verify { path: PathBuf },
    /// The vault (OS keyring) failed; nothing was written.
    #[error("the OS keyring failed, nothing was written: {0}")]
    Vault(#[from] gatehouse_vault::VaultError),
    /// Gatehouse declined (client running, git-tracked file without --yes, …).
    #[error("{0}")]
    Refused(String),
    /// Gatehouse's own state is unreadable.
    #[error("gatehouse state: {0}")]
    State(String),
}
