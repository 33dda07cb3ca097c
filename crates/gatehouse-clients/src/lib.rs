//! gatehouse-clients (being built).
