//! Keeps a server's own secrets out of what Gatehouse records. The scanner
//! redacts a credential it knows by shape or by label; a secret only the
//! vault knows (a database password, a custom token) would reach the events
//! table as it came whenever a finding's context held it. The values wrap
//! injected into the server are cut from each event before it is written.

use gatehouse_engine::EngineEvent;
use gatehouse_vault::Secret;
use serde_json::Value;

/// What stands in for a cut value.
pub(crate) const CUT: &str = "[vault secret]";

/// Shorter values are not cut: they would match ordinary text everywhere.
const MIN_LEN: usize = 6;

/// The injected values to cut, longest first (a value holding another is
/// cut whole).
#[derive(Default)]
pub(crate) struct Scrubber {
    values: Vec<Secret<String>>,
}

impl Scrubber {
    pub(crate) fn new(values: impl IntoIterator<Item = Secret<String>>) -> Scrubber {
        let mut values: Vec<Secret<String>> = values
            .into_iter()
            .filter(|v| v.expose().len() >= MIN_LEN)
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.expose().len()));
        values.dedup();
        Scrubber { values }
    }

    /// The event with every injected value cut from its text.
    pub(crate) fn scrub(&self, event: &mut EngineEvent) {
        if self.values.is_empty() {
            return;
        }
        self.cut(&mut event.reason);
        if let Some(tool) = &mut event.tool {
            self.cut(tool);
        }
        self.cut_all(&mut event.evidence);
    }

    fn cut_all(&self, value: &mut Value) {
        // Evidence is a few levels deep; a stack keeps it iterative anyway.
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            match v {
                Value::String(s) => self.cut(s),
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => stack.extend(map.values_mut()),
                _ => {}
            }
        }
    }

    fn cut(&self, text: &mut String) {
        for value in &self.values {
            if text.contains(value.expose().as_str()) {
                *text = text.replace(value.expose().as_str(), CUT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_engine::{Action, Severity};
    use serde_json::json;

    #[test]
    fn injected_values_are_cut_from_reason_tool_and_evidence() {
        let scrubber =
            Scrubber::new(["pw", "S3cr3t-db-pass", "S3cr3t"].map(|v| Secret::new(v.to_string())));
        let mut event = EngineEvent::new("x", Severity::High, Action::Block, "r")
            .reason("connect failed for app:S3cr3t-db-pass@db (pw)")
            .evidence(json!([{"context": "password S3cr3t here", "n": 1}]));
        scrubber.scrub(&mut event);
        assert_eq!(
            event.reason,
            "connect failed for app:[vault secret]@db (pw)"
        );
        assert_eq!(
            event.evidence,
            json!([{"context": "password [vault secret] here", "n": 1}])
        );
    }
}
