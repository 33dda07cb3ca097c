//! The knobs the engine needs, already resolved for one server by the host
//! from the policy (gatehouse-config) and its identity checks.

use serde_json::Value;

/// What to do when a pinned tool's definition changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnChange {
    /// Hold the changed tool until a person approves the new hash.
    Block,
    /// Expose the new definition, record an alert, keep the old pin.
    Alert,
    /// Expose and re-pin silently (an event is still recorded).
    Allow,
}

/// What to do with a result carrying a high/critical finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultAction {
    Alert,
    Block,
}

/// What happens to an input request asking for a password-, token- or
/// key-like field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SensitiveElicitation {
    /// Forward to the client (with the identity prefix and an alert).
    Warn,
    /// Send to the dashboard inbox, where it can only be declined.
    Inbox,
    /// Decline at once.
    Decline,
}

/// Sampling that asks for every server's context (`includeContext:
/// "allServers"`). `"thisServer"` and `"none"` always pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplingContext {
    /// Forward unchanged (with an event).
    Allow,
    /// Rewrite `includeContext` to `"thisServer"` (DESIGN §3 "strip").
    Strip,
    /// Decline the request with an error to the server.
    Decline,
}

/// A per-call policy decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolRule {
    Allow,
    Audit { rule: String, reason: String },
    Block { rule: String, reason: String },
}

/// Tool-level policy, answered by the host's typed policy.
pub trait CallPolicy {
    /// May this tool appear in lists at all (restricted allowlists, blocked tools)?
    fn tool_exposed(&self, tool: &str) -> bool;
    /// Decision for one call with its arguments.
    fn tool_decision(&self, tool: &str, hash: Option<&str>, arguments: &Value) -> ToolRule;
}

/// Allows everything: used when no policy applies.
pub struct AllowAll;

impl CallPolicy for AllowAll {
    fn tool_exposed(&self, _: &str) -> bool {
        true
    }
    fn tool_decision(&self, _: &str, _: Option<&str>, _: &Value) -> ToolRule {
        ToolRule::Allow
    }
}

/// Everything the engine needs to know about its server and policy.
pub struct Settings {
    /// Record decisions but never block (policy mode audit, or paused).
    pub audit_only: bool,
    /// Trust and pin tools the first time they are seen. The host sets this
    /// only for a server's first session, never for a fresh database while
    /// protected configs exist, never after an identity mismatch.
    pub trust_first_sight: bool,
    pub on_change: OnChange,
    /// After first sight, refuse any change to the tool list.
    pub lock_tool_list: bool,
    pub max_tools: usize,
    pub scan_definitions: bool,
    pub scan_results: bool,
    /// Wrap the text of allowed `tools/call` results in per-call nonce
    /// markers (`Inspector::spotlight`). Off by default.
    pub spotlight_results: bool,
    pub result_action: ResultAction,
    /// `restricted` trust: never allowed to elicit, sample or list roots.
    pub restricted: bool,
    /// `requests.elicitation` is not `"decline"` (restricted aside).
    pub elicitation_allowed: bool,
    /// `requests.sampling = "allow"` (restricted aside).
    pub sampling_allowed: bool,
    /// `requests.roots = "allow"` (restricted aside).
    pub roots_allowed: bool,
    /// `requests.sampling_include_context`.
    pub sampling_context: SamplingContext,
    /// Elicitation requests asking for sensitive fields.
    pub sensitive_elicitation: SensitiveElicitation,
    /// Policy sends every input request to the dashboard inbox.
    pub elicitation_inbox: bool,
    /// The server's launch changed and waits for approval
    /// (`pinning.on_launch_change = "hold"`): every tool is withheld and
    /// every call is blocked with this reason (which names the approval
    /// command). `None` for an approved launch.
    pub launch_held: Option<String>,
    /// Minimum spacing of forwarded `notifications/tools/list_changed`.
    pub list_changed_interval_ms: u64,
    /// How the server is named to people ("github (npx server-github)").
    pub server_label: String,
    pub policy: Box<dyn CallPolicy + Send>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            audit_only: false,
            trust_first_sight: true,
            on_change: OnChange::Block,
            lock_tool_list: false,
            max_tools: 256,
            scan_definitions: true,
            scan_results: true,
            spotlight_results: false,
            result_action: ResultAction::Block,
            restricted: false,
            elicitation_allowed: true,
            sampling_allowed: true,
            roots_allowed: true,
            sampling_context: SamplingContext::Strip,
            sensitive_elicitation: SensitiveElicitation::Decline,
            elicitation_inbox: false,
            launch_held: None,
            list_changed_interval_ms: 5_000,
            server_label: "server".into(),
            policy: Box::new(AllowAll),
        }
    }
}
