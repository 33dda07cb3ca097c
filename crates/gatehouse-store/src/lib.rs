//! gatehouse-store: SQLite state shared by every Gatehouse process (being built).

pub mod home;
