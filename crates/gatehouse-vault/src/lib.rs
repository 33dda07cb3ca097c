//! gatehouse-vault (being built).
