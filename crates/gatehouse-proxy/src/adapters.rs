//! Glue between the engine's seams and the crates that answer them: the
//! scanner behind [`Inspector`], the typed policy behind [`CallPolicy`].

use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gatehouse_config::{Decision, Policy, ServerRef};
use gatehouse_engine::settings::{CallPolicy, ToolRule};
use gatehouse_engine::{Finding, Inspector, Severity};
use gatehouse_scanner::{ListedKind, Report, Scanner};
use serde_json::Value;

/// The scanner as the engine's inspector. Compiling its rules takes tens of
/// milliseconds, so it is built on its own thread while the server starts;
/// the first scan that needs it waits for it. If it cannot be built, scanning
/// is off and stderr says so once.
///
/// Each scan is timed against the policy's per-message budget
/// (`limits.scan_budget_ms`). The scanner is linear-time and is not
/// interrupted; a scan over budget adds a `scan.budget_exceeded` finding:
/// low (forward and alert) or, with `fail_closed`, high (block) — DESIGN §8.
/// A scan that walked only part of a value (`scan.incomplete`) is raised to
/// high under `fail_closed` the same way.
/// Unoptimized builds (the test suite's) scan about 20× slower than the
/// release build the budget is meant for.
const BUILD_SLOWDOWN: u32 = if cfg!(debug_assertions) { 20 } else { 1 };

pub struct ScannerInspector {
    building: Mutex<Option<JoinHandle<Result<Scanner, String>>>>,
    /// Starts a build that waits for [`ScannerStart::start`] (first use
    /// starts it too).
    go: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    scanner: OnceLock<Option<Scanner>>,
    budget: Duration,
    fail_closed: bool,
}

/// Starts a [`ScannerInspector::build_when_started`] build.
pub struct ScannerStart(std::sync::mpsc::Sender<()>);

impl ScannerStart {
    pub fn start(self) {
        let _ = self.0.send(());
    }
}

impl ScannerInspector {
    pub fn build_in_background(
        build: impl FnOnce() -> Result<Scanner, String> + Send + 'static,
        budget: Duration,
        fail_closed: bool,
    ) -> Self {
        let (inspector, start) = Self::build_when_started(build, budget, fail_closed);
        start.start();
        inspector
    }

    /// Builds on its own thread once started: wrap starts it once the
    /// server is spawned and the relay is set up, so compiling does not
    /// compete with the start-up checks for the CPU, and overlaps the
    /// server's own start-up instead.
    pub fn build_when_started(
        build: impl FnOnce() -> Result<Scanner, String> + Send + 'static,
        budget: Duration,
        fail_closed: bool,
    ) -> (Self, ScannerStart) {
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let building = std::thread::spawn(move || {
            // Every sender gone unstarted: the scanner is not needed.
            wait.recv().map_err(|_| "not started".to_string())?;
            let scanner = build();
            // Compiling the rules leaves megabytes of freed temporaries.
            crate::memory::release_free_memory();
            scanner
        });
        let inspector = Self {
            building: Mutex::new(Some(building)),
            go: Mutex::new(Some(go.clone())),
            scanner: OnceLock::new(),
            budget,
            fail_closed,
        };
        (inspector, ScannerStart(go))
    }

    fn scanner(&self) -> Option<&Scanner> {
        self.scanner
            .get_or_init(|| {
                if let Some(go) = self.go.lock().ok()?.take() {
                    let _ = go.send(());
                }
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
        let Some(scanner) = self.scanner() else {
            return Vec::new();
        };
        let started = Instant::now();
        let compiling = scanner.compile_time();
        let mut found = findings(scan(scanner));
        if self.fail_closed {
            for f in found.iter_mut().filter(|f| f.rule == "scan.incomplete") {
                f.severity = f.severity.max(Severity::High);
            }
        }
        // Rules compiled on first use during this scan are not scanning
        // time (they used to be compiled before the first scan).
        let took = started
            .elapsed()
            .saturating_sub(scanner.compile_time().saturating_sub(compiling));
        if took > self.budget * BUILD_SLOWDOWN {
            found.push(Finding {
                rule: "scan.budget_exceeded".into(),
                family: "scanner".into(),
                severity: if self.fail_closed {
                    Severity::High
                } else {
                    Severity::Low
                },
                path: String::new(),
                context: format!(
                    "scanning took {} ms, over the {} ms budget",
                    took.as_millis(),
                    self.budget.as_millis()
                ),
            });
        }
        found
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
    fn scan_error(&self, error: &Value) -> Vec<Finding> {
        self.with(|s| s.scan_error(error))
    }
    fn scan_server_request(&self, method: &str, params: &Value) -> Vec<Finding> {
        self.with(|s| s.scan_server_request(method, params))
    }
    fn scan_notification(&self, method: &str, params: &Value) -> Vec<Finding> {
        self.with(|s| s.scan_notification(method, params))
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

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_scanner::ScannerConfig;

    fn inspector(budget: Duration, fail_closed: bool) -> ScannerInspector {
        ScannerInspector::build_in_background(
            || Scanner::new(ScannerConfig::default()).map_err(|e| e.to_string()),
            budget,
            fail_closed,
        )
    }

    fn budget_finding(i: &ScannerInspector) -> Option<Severity> {
        i.scan_instructions("Lists the files of a directory.")
            .iter()
            .find(|f| f.rule == "scan.budget_exceeded")
            .map(|f| f.severity)
    }

    #[test]
    fn a_scan_over_budget_alerts_or_blocks_per_fail_closed() {
        assert_eq!(
            budget_finding(&inspector(Duration::ZERO, false)),
            Some(Severity::Low)
        );
        assert_eq!(
            budget_finding(&inspector(Duration::ZERO, true)),
            Some(Severity::High)
        );
        assert_eq!(
            budget_finding(&inspector(Duration::from_secs(60), true)),
            None
        );
    }

    #[test]
    fn a_result_scanned_in_part_blocks_only_when_failing_closed() {
        let mut deep = serde_json::json!("text");
        for _ in 0..70 {
            deep = serde_json::json!({ "d": deep });
        }
        let result = serde_json::json!({"content": [], "structuredContent": deep});
        let incomplete = |fail_closed| {
            inspector(Duration::from_secs(60), fail_closed)
                .scan_result("tools/call", &result)
                .iter()
                .find(|f| f.rule == "scan.incomplete")
                .map(|f| f.severity)
        };
        assert_eq!(incomplete(false), Some(Severity::Medium));
        assert_eq!(incomplete(true), Some(Severity::High));
    }
}
