//! The seam to the scanner: the engine asks an [`Inspector`] for findings
//! and decides what they mean.

use serde_json::Value;

use crate::verdict::Severity;

/// One scanner finding, as the engine needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub rule: String,
    pub family: String,
    pub severity: Severity,
    pub path: String,
    /// Short context, invisible characters made visible, secrets redacted.
    pub context: String,
}

impl Finding {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "rule": self.rule,
            "family": self.family,
            "severity": self.severity.as_str(),
            "path": self.path,
            "context": self.context,
        })
    }
}

/// Finds hidden instructions in what servers send.
pub trait Inspector {
    fn scan_tool(&self, tool: &Value) -> Vec<Finding>;
    fn scan_instructions(&self, text: &str) -> Vec<Finding>;
    /// Items of `prompts/list`, `resources/list`, `resources/templates/list`.
    fn scan_listed(&self, list_method: &str, item: &Value) -> Vec<Finding>;
    /// Results of `tools/call`, `resources/read`, `prompts/get`, `tasks/result`.
    fn scan_result(&self, method: &str, result: &Value) -> Vec<Finding>;
    /// The `error` object of an answer: hosts hand a failed call's message
    /// to the model as they would its result.
    fn scan_error(&self, error: &Value) -> Vec<Finding>;
    /// `sampling/createMessage`, `elicitation/create` params.
    fn scan_server_request(&self, method: &str, params: &Value) -> Vec<Finding>;
    /// A server→client notification's params (log messages, progress).
    fn scan_notification(&self, method: &str, params: &Value) -> Vec<Finding>;
    /// Optional output spotlighting: `text` wrapped in markers carrying
    /// `nonce`, look-alike markers inside defused. Identity by default.
    fn spotlight(&self, text: &str, _nonce: &str) -> String {
        text.to_string()
    }
}

/// An inspector that finds nothing (scanning switched off).
pub struct NoInspector;

impl Inspector for NoInspector {
    fn scan_tool(&self, _: &Value) -> Vec<Finding> {
        Vec::new()
    }
    fn scan_instructions(&self, _: &str) -> Vec<Finding> {
        Vec::new()
    }
    fn scan_listed(&self, _: &str, _: &Value) -> Vec<Finding> {
        Vec::new()
    }
    fn scan_result(&self, _: &str, _: &Value) -> Vec<Finding> {
        Vec::new()
    }
    fn scan_error(&self, _: &Value) -> Vec<Finding> {
        Vec::new()
    }
    fn scan_server_request(&self, _: &str, _: &Value) -> Vec<Finding> {
        Vec::new()
    }
    fn scan_notification(&self, _: &str, _: &Value) -> Vec<Finding> {
        Vec::new()
    }
}

/// Highest severity among findings.
pub fn max_severity(findings: &[Finding]) -> Option<Severity> {
    findings.iter().map(|f| f.severity).max()
}

pub fn findings_json(findings: &[Finding]) -> Value {
    Value::Array(findings.iter().map(Finding::to_json).collect())
}
