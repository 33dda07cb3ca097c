//! gatehouse-protocol (being built).

pub mod identity;
