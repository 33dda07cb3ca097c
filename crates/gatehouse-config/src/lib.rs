//! gatehouse-config (being built).
