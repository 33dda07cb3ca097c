//! gatehouse-scanner (being built).
