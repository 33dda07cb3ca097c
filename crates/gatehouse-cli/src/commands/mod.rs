//! One module per subcommand. Each exposes clap argument types and `run*`
//! functions returning the process exit code.

pub mod clients;
pub mod events;
pub mod inventory;
pub mod pins;
pub mod policy;
pub mod scan;
pub mod store_access;
pub mod up;
pub mod vault;
pub mod wrap;
