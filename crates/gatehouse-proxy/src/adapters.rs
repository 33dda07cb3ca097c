//! Glue between the engine's seams and the crates that answer them: the
//! scanner behind [`Inspector`], the typed policy behind [`CallPolicy`].

use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use gatehouse_config::{Decision, Policy, ServerRef};
use gatehouse_engine::settings::{CallPolicy, ToolRule};
use gatehouse_engine::{Finding, Inspector, Severity};
use gatehouse_scanner::{ListedKind, Report, Scanner};
use serde_json::Value;

/// The scanner as the engine's inspector. Compiling its rules takes tens of
/// milliseconds, so it is built on its own thread while the server starts;
/// the first scan that needs it waits for it. If it cannot be built, scanning
/// is off and stderr says so once.
pub struct ScannerInspector {
    building: Mutex<Option<JoinHandle<Result<Scanner, String>>>>,
    scanner: OnceLock<Option<Scanner>>,
}

impl ScannerInspector {
    pub fn build_in_background(
        build: impl FnOnce() -> Result<Scanner, String> + Send + 'static,
    ) -> Self {
        Self {
            building: Mutex::new(Some(std::thread::spawn(build))),
            scanner: OnceLock::new(),
        }
    }

    fn scanner(&self) -> Option<&Scanner> {
        self.scanner
            .get_or_init(|| {
                let handle = self.building.lock().ok()?.take()?;
                match handle.join() {
                    Ok(Ok(scanner)) => Some(scanner),
                    Ok(Err(err)) => {
                        eprintln!("gatehouse: scanner unavailable ({err}); scanning off");
                        None
                    }
                    Err(_) => {
                        eprintln!("gatehouse: scanner failed to build; scanning off");
                        None
                    }
                }
            })
            .as_ref()
    }

    fn with(&self, scan: impl FnOnce(&Scanner) -> Report) -> Vec<Finding> {
        self.scanner()
            .map(|s| findings(scan(s)))
            .unwrap_or_default()
    }
}

fn findings(report: Report) -> Vec<Finding> {
    report
        .findings
        .into_iter()
        // Info means "recorded, no action": not a finding for the engine.
        .filter(|f| f.severity > gatehouse_scanner::Severity::Info)
        .map(|f| Finding {
            rule: f.rule_id,
            family: f.family.as_str().to_string(),
            severity: Severity::parse(f.severity.as_str()).unwrap_or(Severity::High),
            path: f.path,
            context: f.context,
        })
        .collect()
}

impl Inspector for ScannerInspector {
    fn scan_tool(&self, tool: &Value) -> Vec<Finding> {
        self.with(|s| s.scan_tool(tool))
    }
    fn scan_instructions(&self, text: &str) -> Vec<Finding> {
        self.with(|s| s.scan_instructions(text))
    }
    fn scan_listed(&self, list_method: &str, item: &Value) -> Vec<Finding> {
        let kind = match list_method {
            "prompts/list" => ListedKind::Prompt,
            "resources/templates/list" => ListedKind::ResourceTemplate,
            _ => ListedKind::Resource,
        };
        self.with(|s| s.scan_listed(kind, item))
    }
    fn scan_result(&self, method: &str, result: &Value) -> Vec<Finding> {
        self.with(|s| s.scan_result(method, result))
    }
    fn scan_server_request(&self, method: &str, params: &Value) -> Vec<Finding> {
        self.with(|s| s.scan_server_request(method, params))
    }
    fn spotlight(&self, text: &str, nonce: &str) -> String {
        gatehouse_scanner::wrap_with_nonce(text, nonce)
    }
}

/// The typed policy, bound to one server.
pub struct BoundPolicy {
    pub policy: Policy,
    pub server_name: String,
    pub server_id: String,
}

impl BoundPolicy {
    fn server(&self) -> ServerRef<'_> {
        ServerRef::new(&self.server_name, &self.server_id)
    }
}

impl CallPolicy for BoundPolicy {
    fn tool_exposed(&self, tool: &str) -> bool {
        self.policy.tool_exposed(self.server(), tool)
    }

    fn tool_decision(&self, tool: &str, hash: Option<&str>, arguments: &Value) -> ToolRule {
        match self
            .policy
            .tool_decision(self.server(), tool, hash, arguments)
        {
            Decision::Allow => ToolRule::Allow,
            Decision::Audit { rule, reason } => ToolRule::Audit { rule, reason },
            Decision::Block { rule, reason } => ToolRule::Block { rule, reason },
        }
    }
}
