//! gatehouse-engine (being built).
