//! `gatehouse-store` owns the one SQLite database, `$GATEHOUSE_HOME/gatehouse.db`,
//! that every Gatehouse process shares: many short-lived `gatehouse wrap`
//! processes and one control plane. It opens it (WAL, a bounded busy wait,
//! 0700 home and 0600 files), runs the embedded add-only migrations under an
//! exclusive file lock, refuses a schema newer than this binary, and offers
//! one async module per table. Key types: [`Store`], [`StoreOptions`],
//! [`StoreError`], [`MacKey`], and the plain row types of each module
//! ([`Server`], [`Pin`], [`Event`], [`WindowSnapshot`], …), which are
//! distinct from the engine's types.
//!
//! **Invariant:** the store never decides policy and never reads a secret:
//! callers pass time (`now_ms`), MAC keys and already-redacted evidence in;
//! every row read back is parsed as untrusted input (a bad row is an error or
//! a failed MAC, never a panic and never trust).
//!
//! # Schema (migrations `0001`–`0006`; all tables `STRICT`)
//! | table | key | what it holds |
//! |---|---|---|
//! | `meta` | `key` | key/value: last good policy, install id, the global pause (deadline + MAC, [`PauseRecord`]), … |
//! | `servers` | `id` (opaque, from protect) | origin, display name, client, config path, scope, entry name, `command_hash` (identity), argv, cwd, launch pin (exe path + hash, script hash, package spec), first/last seen |
//! | `server_modes` | `server_id` | normal / paused / restricted + MAC |
//! | `tools` | (`server_id`, `name`, `hash`) | every distinct definition seen, with `hash_version`; never deleted by resets |
//! | `pins` | (`server_id`, `name`) | state trusted/held/quarantined/rejected, approved hash + version, pending hash, findings, `pinned_at_ms`, MAC |
//! | `events` | `id` (AUTOINCREMENT) | time, type, server, tool, action, rule, severity, reason, evidence, session, `count`, `agg_key`; indexed by time and by (server/tool/type/action/severity, time) |
//! | `consent_requests` | `id` | kind, server, tool, payload, state, created/expires/answered, sealed answer, requester key |
//! | `ui_sessions` | `id` | token hash (unique), label, created, last seen, revoked |
//! | `call_window` | rowid | session, server, tool, category, time, outcome, opaque detail and result blobs; indexed (session, time) |
//! | `rate_buckets` | (`session`, `server_id`) | tokens, updated, cool-down end |
//! | `session_tools` (0002) | (`session`, `name`, `server_id`) | tool names each server of a session exposes |
//! | `package_approvals` (0006) | (`server_id`, `package`) | packages a person approved although they look like a typosquat, MAC'd |
//! | `secret_fingerprints` (0003) | (`server_id`, `name`) | keyed fingerprints of vault secrets for the egress guard, never values |
//!
//! # Concurrency
//! Writers that read-then-write use `BEGIN IMMEDIATE`, so the check and the
//! write see one state. The busy wait is `StoreOptions::busy_timeout`
//! (50 ms by default, the hot-path budget); past it a call returns
//! [`StoreError::Busy`] having written nothing, and the caller applies the
//! fail-open/closed rule of DESIGN §8.

mod calls;
mod consent;
mod db;
mod error;
mod events;
mod fingerprints;
pub mod home;
mod launch_approvals;
mod mac;
mod maintenance;
mod members;
mod meta;
mod modes;
mod package_approvals;
mod pause;
mod pins;
#[cfg(test)]
mod query_plans;
mod rate_buckets;
mod servers;
#[cfg(test)]
mod test_support;
mod tools;
mod ui_sessions;
mod util;

pub use calls::{
    CallCheck, CallDecision, CallId, CheckOutcome, ExposingServer, NewCall, WindowEntry,
    WindowLoad, WindowSnapshot,
};
pub use consent::{ConsentKind, ConsentRequest, ConsentState, NewConsent};
pub use db::{Store, StoreOptions, DB_FILE, LOCK_FILE, SCHEMA_VERSION};
pub use error::{Result, StoreError};
pub use events::{
    event_types, Action, Event, EventFilter, NewEvent, PruneReport, RetentionPolicy, Severity,
};
pub use fingerprints::StoredFingerprint;
pub use launch_approvals::{LaunchApproval, LaunchCheck};
pub use mac::MacKey;
pub use maintenance::{MaintenancePolicy, MaintenanceReport, MAINTENANCE_LAST_RUN_KEY};
pub use members::{LocalCall, SessionMember};
pub use modes::{ModeRecord, ServerMode};
pub use pause::{Pause, PauseRecord};
pub use pins::{HoldState, Pin, PinState};
pub use rate_buckets::BucketState;
pub use servers::{Identity, LaunchPin, NewServer, Server, ServerOrigin};
pub use tools::{SeenTool, ToolDefinition};
pub use ui_sessions::UiSession;

/// Current time in unix milliseconds, for callers that have no clock of
/// their own to pass in. The store itself never reads the clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
