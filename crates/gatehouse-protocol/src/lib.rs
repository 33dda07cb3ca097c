//! gatehouse-protocol (being built).
