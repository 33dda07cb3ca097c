//! gatehouse-proxy: `gatehouse wrap`, the stdio relay. It starts the real
//! server in an isolated environment, feeds every frame of both directions
//! through the engine's [`gatehouse_engine::Relay`], and performs what the
//! engine decides: forward, answer, record events, persist pins, notice
//! approvals by polling the database, and wait for input requests answered
//! in the dashboard inbox (`inbox`).
//!
//! Key types: [`WrapOptions`], [`run_wrap`], [`lines::LineReader`].
//!
//! **Invariant:** stdout carries only protocol frames; the child's stderr is
//! passed through untouched and never read; secret values never reach logs,
//! events or errors; the child never outlives wrap on Linux.

pub mod adapters;
mod busy;
pub mod child;
mod control;
pub mod cross;
pub mod egress;
mod inbox;
mod launch;
pub mod lines;
pub mod maintenance;
pub mod memory;
mod outbox;
mod pause;
mod presence;
mod ready;
mod scrub;
pub mod session;
mod stdio;
pub mod wrap;

pub use inbox::DEFAULT_TIMEOUT as DEFAULT_INBOX_TIMEOUT;
pub use wrap::{run_wrap, WrapError, WrapOptions};
