//! gatehouse-protocol: newline-delimited JSON-RPC framing for MCP, a lossless
//! message view (original bytes plus a parsed view), and the canonical JSON
//! form (RFC 8785) that tool pins hash.
//!
//! Key types: [`Frame`], [`Message`], [`MessageKind`], [`RequestId`];
//! [`peek`] reads the id of a frame that is not parsed whole.
//!
//! **Invariant:** no I/O, no async runtime, no clock; parsing never panics
//! and never rejects valid JSON (deep nesting, lone surrogate escapes,
//! numbers beyond the double range); answers Gatehouse writes echo a
//! request's id as it was written.

pub mod canonical;
pub mod frame;
pub mod identity;
pub mod message;
pub mod peek;
pub mod split;

pub use canonical::{canonical_json, tool_hash, HASH_VERSION};
pub use frame::{json_value, json_value_owned, parse_frame, prepare_thread, Frame, FrameBody};
pub use message::{Message, MessageKind, RequestId};
pub use peek::{peek, Peek, PeekKind};
pub use split::Raw;
