//! gatehouse-engine: the decision chain that every relaying process hosts
//! (DESIGN §3). A [`Relay`] takes parsed frames from either side and returns
//! [`Output`]s: bytes to forward or answer with, events to record, and pin
//! changes to persist. The caller (gatehouse-proxy) does all I/O.
//!
//! Key types: [`Relay`], [`Settings`], [`PinTable`], [`Inspector`],
//! [`EngineEvent`], [`Output`].
//!
//! **Invariant:** no I/O, no async runtime, no clock, no randomness: time,
//! nonces and stored state are passed in; the same inputs give the same
//! outputs.

pub mod cross_server;
pub mod env;
pub mod inspect;
pub mod launch;
pub mod pins;
pub mod relay;
pub mod sensitive;
pub mod settings;
pub mod verdict;

pub use inspect::{Finding, Inspector, NoInspector};
pub use pins::{PinEntry, PinState, PinTable, ToolJudgement};
pub use relay::{Relay, ServerInfo};
pub use settings::{OnChange, ResultAction, SensitiveElicitation, Settings, ToolRule};
pub use verdict::{
    call_blocked_after_relay, Action, EngineEvent, InputRequest, Output, Passed, Peer, PinUpdate,
    Severity,
};
