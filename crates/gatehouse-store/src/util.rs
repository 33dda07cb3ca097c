//! Small helpers shared by the table modules.

use crate::error::{corrupt, Result};

/// Checks that `text` is well-formed JSON without building a value.
pub(crate) fn check_json(table: &'static str, column: &'static str, text: &str) -> Result<()> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|_| corrupt(table, format!("{column} is not valid JSON")))
}

/// Rejects negative times and counts read back from the database.
pub(crate) fn non_negative(table: &'static str, column: &'static str, value: i64) -> Result<i64> {
    if value < 0 {
        return Err(corrupt(table, format!("{column} is negative")));
    }
    Ok(value)
}
