//! gatehouse-proxy (being built).
