//! The typed, merged policy and its pure evaluation API.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use regex::Regex;
use serde_json::Value;

use crate::diag::KeyPath;
use crate::layer::Layer;
use crate::matching::{any_string, path_value_matches, CommandList, GlobKind, Globs};
pub use crate::raw::{
    AllowDecline, Elicitation, FlowMode, ListMode, Mode, OnChange, OnLaunchChange, ResultAction,
    RuleDecision, SamplingContext, SensitiveFields, Severity, ToolClass, Trust,
};

/// The verdict of a policy check. Ordered by restrictiveness:
/// `Allow` < `Audit` < `Block`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing in the policy objects.
    Allow,
    /// Pass, but record an audit event.
    Audit {
        /// Which rule fired, e.g. `rules.block-ssh`.
        rule: String,
        /// Why, for the person and the event.
        reason: String,
    },
    /// Refuse.
    Block {
        /// Which rule fired, e.g. `tool_policy.blocked_tools`.
        rule: String,
        /// Why, for the person, the event and the answer to the client.
        reason: String,
    },
}

impl Decision {
    /// 0 allow, 1 audit, 2 block.
    pub fn rank(&self) -> u8 {
        match self {
            Decision::Allow => 0,
            Decision::Audit { .. } => 1,
            Decision::Block { .. } => 2,
        }
    }
    /// Whether this is a `Block`.
    pub fn is_block(&self) -> bool {
        matches!(self, Decision::Block { .. })
    }
    /// The rule name, if any.
    pub fn rule(&self) -> Option<&str> {
        match self {
            Decision::Allow => None,
            Decision::Audit { rule, .. } | Decision::Block { rule, .. } => Some(rule),
        }
    }
    /// The more restrictive of two decisions; on a tie, `self` (the earlier) is kept.
    pub fn stricter(self, other: Decision) -> Decision {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
    fn block(rule: impl Into<String>, reason: impl Into<String>) -> Decision {
        Decision::Block {
            rule: rule.into(),
            reason: reason.into(),
        }
    }
}

/// How the engine names a server: its display name (from the client's
/// config entry) and, when known, the opaque id Gatehouse assigned at protect
/// time. Globs match either; `[servers."KEY"]` tables match either exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRef<'a> {
    /// Display name, e.g. `github`.
    pub name: &'a str,
    /// Opaque server id, e.g. `srv_7f3a…`.
    pub id: Option<&'a str>,
}

impl<'a> ServerRef<'a> {
    /// A server known by name and id.
    pub fn new(name: &'a str, id: &'a str) -> Self {
        ServerRef { name, id: Some(id) }
    }
    fn matches_globs(&self, g: &Globs) -> bool {
        g.is_match(self.name) || self.id.is_some_and(|id| g.is_match(id))
    }
    fn is_key(&self, key: &str) -> bool {
        key == self.name || self.id == Some(key)
    }
}

impl<'a> From<&'a str> for ServerRef<'a> {
    fn from(name: &'a str) -> Self {
        ServerRef { name, id: None }
    }
}

/// A per-server environment value.
#[derive(Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// `vault:NAME`: the secret `NAME` stored for this server in the keyring.
    Vault(String),
    /// A plain, non-secret value (secret-looking literals are rejected).
    Literal(String),
}

impl fmt::Debug for EnvValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvValue::Vault(name) => write!(f, "Vault({name:?})"),
            EnvValue::Literal(v) => write!(f, "Literal(<{} bytes>)", v.len()),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ToolRule {
    pub server: Globs,
    pub tool: Globs,
    pub content_hash: Option<String>,
}

impl ToolRule {
    fn matches_name(&self, server: &ServerRef<'_>, tool: &str) -> bool {
        server.matches_globs(&self.server) && self.tool.is_match(tool)
    }
    fn hash_ok(&self, hash: Option<&str>) -> bool {
        match &self.content_hash {
            None => true,
            Some(want) => hash.is_some_and(|h| h.eq_ignore_ascii_case(want)),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum NameMatch {
    /// `tool_name` (one pattern) or `tool_name_any` (several).
    Glob(Globs),
    Regex(Regex),
}

#[derive(Debug, Clone)]
pub(crate) enum ArgMatch {
    Any,
    Anywhere(Globs),
    ByArgument(Vec<(String, Globs)>),
}

#[derive(Debug, Clone)]
pub(crate) struct ArgRule {
    pub id: String,
    pub server: Option<Globs>,
    pub names: NameMatch,
    pub args: ArgMatch,
    pub decision: RuleDecision,
    pub reason: String,
}

impl ArgRule {
    fn matches(&self, server: &ServerRef<'_>, tool: &str, arguments: &Value) -> bool {
        if let Some(s) = &self.server {
            if !server.matches_globs(s) {
                return false;
            }
        }
        let name_ok = match &self.names {
            NameMatch::Glob(g) => g.is_match(tool),
            NameMatch::Regex(r) => r.is_match(tool),
        };
        name_ok
            && match &self.args {
                ArgMatch::Any => true,
                ArgMatch::Anywhere(g) => any_string(arguments, |s| path_value_matches(g, s)),
                ArgMatch::ByArgument(list) => list.iter().all(|(name, g)| {
                    arguments
                        .get(name)
                        .is_some_and(|v| any_string(v, |s| path_value_matches(g, s)))
                }),
            }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ServerEntry {
    pub trust: Option<Trust>,
    pub tool_allowlist: Vec<Globs>,
    pub env: BTreeMap<String, EnvValue>,
    pub pass_env: Option<BTreeSet<String>>,
}

/// A scanner pattern added by the policy.
#[derive(Debug, Clone)]
pub struct CustomPattern {
    /// Unique id, reported in findings.
    pub id: String,
    /// The compiled regex (validated at load time).
    pub regex: Regex,
    /// Attack family, e.g. `exfiltration`.
    pub family: String,
    /// Severity of a match.
    pub severity: Severity,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RateOverride {
    pub calls_per_minute: Option<u64>,
    pub burst: Option<u64>,
}

/// Tool-list handling.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolListSettings {
    /// After first sight, list changes are refused.
    pub lock_tool_list: bool,
    /// Refreshes after `notifications/tools/list_changed` are coalesced to one per server per this period (trailing refresh kept).
    pub refresh_coalesce: Duration,
    /// Tools beyond this many per server are withheld with an event.
    pub max_tools_per_server: u32,
}

/// Pinning of tool definitions and launch commands.
#[derive(Debug, Clone, PartialEq)]
pub struct PinningSettings {
    /// What a changed tool definition does.
    pub on_change: OnChange,
    /// Pin tools at first sight (otherwise new tools are held for approval).
    pub auto_trust_first: bool,
    /// Pin the launch command (and binary) of each server.
    pub launch_pinning: bool,
    /// What a changed launch command does.
    pub on_launch_change: OnLaunchChange,
}

/// Scanner switches.
#[derive(Debug, Clone)]
pub struct ScannerSettings {
    /// Scan tool definitions, prompts, resources and `instructions`.
    pub definitions: bool,
    /// Scan results (`tools/call`, `resources/read`, `prompts/get`, `tasks/result`).
    pub outputs: bool,
    /// What a high/critical finding in a result does (lower severities always alert).
    pub result_action: ResultAction,
    /// Wrap results in delimiters the model is told not to obey.
    pub spotlight_results: bool,
    /// Extra patterns.
    pub custom_patterns: Vec<CustomPattern>,
}

impl ScannerSettings {
    /// The action for a result finding of `severity`: `result_action` for high and critical, `Alert` otherwise.
    pub fn result_action_for(&self, severity: Severity) -> ResultAction {
        if severity >= Severity::High {
            self.result_action
        } else {
            ResultAction::Alert
        }
    }
}

/// Server→client request handling (restricted servers are always declined).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSettings {
    /// `elicitation/create`.
    pub elicitation: Elicitation,
    /// Elicitations asking for password/token/key-like fields.
    pub elicitation_sensitive_fields: SensitiveFields,
    /// `sampling/createMessage`.
    pub sampling: AllowDecline,
    /// Sampling with `includeContext = "allServers"`.
    pub sampling_include_context: SamplingContext,
    /// `roots/list`.
    pub roots: AllowDecline,
}

/// Resource limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest frame accepted; larger ones are dropped with an event.
    pub max_frame_bytes: u64,
    /// Scanner time budget per message (over it: DESIGN §8).
    pub scan_budget: Duration,
    /// Database busy wait on the hot path (≤ 50 ms).
    pub db_busy: Duration,
    /// Event retention.
    pub event_retention_days: u32,
    /// Database size cap.
    pub db_max_bytes: u64,
}

/// One cross-server sequence rule.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRule {
    /// off / linked / strict.
    pub mode: FlowMode,
    /// How far back a read counts.
    pub window: Duration,
    /// Only calls of the same LLM turn (when the turn is known); `flow` only.
    pub same_turn_only: bool,
}

/// Burst rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Burst {
    /// On/off.
    pub enabled: bool,
    /// More than this many calls from one server within `window` trips it.
    pub max_calls: u32,
    /// The counting window.
    pub window: Duration,
    /// How long further calls are blocked.
    pub cooldown: Duration,
}

/// A token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Refill rate.
    pub calls_per_minute: u32,
    /// Bucket size.
    pub burst: u32,
}

/// Typosquatting checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Typosquat {
    /// Compare server ids (low-severity event).
    pub server_names: bool,
    /// Normalized Levenshtein similarity at or above which names are similar.
    pub server_threshold: f64,
    /// Compare launched packages (high, held for approval).
    pub packages: bool,
    /// Threshold for packages.
    pub package_threshold: f64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct LayerRate {
    pub calls_per_minute: Option<u64>,
    pub burst: Option<u64>,
    pub overrides: Vec<(String, RateOverride)>,
}

/// The `[cross_server]` section. Shadowing detection is always on.
#[derive(Debug, Clone)]
pub struct CrossServer {
    /// Read on server A, then send on server B.
    pub read_then_send: FlowRule,
    /// Read on A, then write/send/compute/unknown on B.
    pub flow: FlowRule,
    /// Per-server bursts.
    pub burst: Burst,
    /// Whether the per-(session, server) token bucket applies.
    pub rate_limit_enabled: bool,
    /// Typosquatting.
    pub typosquat: Typosquat,
    pub(crate) rate_layers: Vec<LayerRate>,
    pub(crate) classification: Vec<(String, Globs, ToolClass)>,
}

impl CrossServer {
    /// Every class the policy assigns to `tool` (empty: no override). When a
    /// tool matches overrides of several classes the engine should treat it
    /// as each of them, since layers may only add risk.
    pub fn classification_override(&self, tool: &str) -> Vec<ToolClass> {
        let set: BTreeSet<ToolClass> = self
            .classification
            .iter()
            .filter(|(_, g, _)| g.is_match(tool))
            .map(|(_, _, c)| *c)
            .collect();
        set.into_iter().collect()
    }

    /// The rate limit for a server: per layer its override (or that layer's
    /// default), then the strictest across layers.
    pub fn rate_limit_for<'a>(&self, server: impl Into<ServerRef<'a>>) -> RateLimit {
        let server = server.into();
        let mut cpm: Option<u64> = None;
        let mut burst: Option<u64> = None;
        let layered = self.rate_layers.len() > 1;
        for (i, layer) in self.rate_layers.iter().enumerate() {
            let floor = layered && i == 0;
            let (layer_cpm, layer_burst) = if floor {
                (
                    layer.calls_per_minute.or(Some(defaults::RATE_CPM)),
                    layer.burst.or(Some(defaults::RATE_BURST)),
                )
            } else {
                (layer.calls_per_minute, layer.burst)
            };
            let matching: Vec<&RateOverride> = layer
                .overrides
                .iter()
                .filter(|(k, _)| server.is_key(k))
                .map(|(_, o)| o)
                .collect();
            let o_cpm = matching.iter().filter_map(|o| o.calls_per_minute).min();
            let o_burst = matching.iter().filter_map(|o| o.burst).min();
            if let Some(v) = o_cpm.or(layer_cpm) {
                cpm = Some(cpm.map_or(v, |c| c.min(v)));
            }
            if let Some(v) = o_burst.or(layer_burst) {
                burst = Some(burst.map_or(v, |b| b.min(v)));
            }
        }
        RateLimit {
            calls_per_minute: to_u32(cpm.unwrap_or(defaults::RATE_CPM)),
            burst: to_u32(burst.unwrap_or(defaults::RATE_BURST)),
        }
    }
}

fn to_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Everything the engine needs to know about one server.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Effective trust (strictest of every matching entry).
    pub trust: Trust,
    /// Environment to add: `vault:` references and plain values.
    pub env: BTreeMap<String, EnvValue>,
    /// Extra variable names passed through from Gatehouse's environment.
    pub pass_env: BTreeSet<String>,
    /// The token bucket for this server.
    pub rate_limit: RateLimit,
    /// Whether the token bucket applies (off for `trusted`).
    pub rate_limited: bool,
    /// Whether the burst rule applies (off for `trusted`).
    pub burst_checked: bool,
    /// Whether `cross_server.flow` applies to calls on this server (off for `trusted`; `read_then_send` always applies).
    pub flow_checked: bool,
    /// Whether new tools are pinned at first sight (`auto_trust_first`, or `trusted`).
    pub pin_at_first_sight: bool,
    /// Whether `elicitation/create` may be shown (to the client or the inbox).
    pub may_elicit: bool,
    /// Whether every `elicitation/create` goes to the dashboard inbox.
    pub elicit_via_inbox: bool,
    /// Whether `sampling/createMessage` may reach the client.
    pub may_sample: bool,
    /// Whether `roots/list` may be answered.
    pub may_list_roots: bool,
}

pub(crate) mod defaults {
    pub const MODE: super::Mode = super::Mode::Enforce;
    pub const REFRESH_SECS: u64 = 5;
    pub const MAX_TOOLS: u64 = 256;
    pub const MAX_FRAME: u64 = 64 * 1024 * 1024;
    pub const SCAN_BUDGET_MS: u64 = 25;
    pub const DB_BUSY_MS: u64 = 50;
    pub const RETENTION_DAYS: u64 = 30;
    pub const DB_MAX_MB: u64 = 1024;
    pub const FLOW_WINDOW: u64 = 30;
    pub const BURST_MAX: u64 = 20;
    pub const BURST_WINDOW: u64 = 5;
    pub const BURST_COOLDOWN: u64 = 10;
    pub const RATE_CPM: u64 = 100;
    pub const RATE_BURST: u64 = 20;
    pub const SIMILARITY: f64 = 0.85;
}

/// The effective policy: every layer merged, defaults applied, patterns compiled.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) mode: Mode,
    pub(crate) fail_closed: bool,
    pub(crate) server_deny: Globs,
    pub(crate) server_allow: Vec<Globs>,
    pub(crate) commands: Vec<CommandList>,
    pub(crate) blocked_tools: Globs,
    pub(crate) tool_deny: Vec<ToolRule>,
    pub(crate) tool_allow: Vec<Vec<ToolRule>>,
    pub(crate) rules: Vec<ArgRule>,
    /// (layer, key, entry), in layer order.
    pub(crate) servers: Vec<(usize, String, ServerEntry)>,
    /// Whether a base was merged (its effective values are the floor).
    pub(crate) layered: bool,
    /// Tool-list handling.
    pub tool_lists: ToolListSettings,
    /// Pinning.
    pub pinning: PinningSettings,
    /// Scanner switches.
    pub scanner: ScannerSettings,
    /// Server→client requests.
    pub requests: RequestSettings,
    /// Limits.
    pub limits: Limits,
    /// Cross-server rules.
    pub cross_server: CrossServer,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::from_layers(&[]).0
    }
}

/// A local setting that was looser than a base and therefore ignored.
#[derive(Debug, Clone)]
pub(crate) struct Loosening {
    pub layer: usize,
    pub path: KeyPath,
    pub message: String,
}

struct Merger {
    layer: usize,
    notes: Vec<Loosening>,
}

impl Merger {
    fn note(&mut self, path: &str, message: String) {
        let mut kp = KeyPath::default();
        for part in path.split('.') {
            kp = kp.key(part);
        }
        self.notes.push(Loosening {
            layer: self.layer,
            path: kp,
            message,
        });
    }

    /// Folds `new` into `acc`, keeping the stricter value; `max_is_stricter`
    /// says which end of `Ord` is strict.
    fn pick<T: Ord + Copy + fmt::Display>(
        &mut self,
        acc: &mut Option<T>,
        new: Option<T>,
        max_is_stricter: bool,
        path: &str,
    ) {
        let Some(new) = new else { return };
        *acc = Some(match *acc {
            None => new,
            Some(old) => {
                let stricter = if max_is_stricter {
                    old.max(new)
                } else {
                    old.min(new)
                };
                if stricter != new {
                    self.note(
                        path,
                        format!(
                            "`{new}` is looser than the base's `{old}`; the base value applies"
                        ),
                    );
                }
                stricter
            }
        });
    }
    fn max<T: Ord + Copy + fmt::Display>(
        &mut self,
        acc: &mut Option<T>,
        new: Option<T>,
        path: &str,
    ) {
        self.pick(acc, new, true, path);
    }
    fn min<T: Ord + Copy + fmt::Display>(
        &mut self,
        acc: &mut Option<T>,
        new: Option<T>,
        path: &str,
    ) {
        self.pick(acc, new, false, path);
    }
    fn min_f64(&mut self, acc: &mut Option<f64>, new: Option<f64>, path: &str) {
        let Some(new) = new else { return };
        *acc = Some(match *acc {
            None => new,
            Some(old) if new > old => {
                self.note(
                    path,
                    format!("`{new}` is looser than the base's `{old}`; the base value applies"),
                );
                old
            }
            Some(_) => new,
        });
    }
}

fn secs(v: u64) -> Duration {
    Duration::from_secs(v)
}

impl Policy {
    /// Merges validated layers (base first, local last). Returns the policy
    /// and the local settings that were ignored because they would loosen.
    pub(crate) fn from_layers(layers: &[Layer]) -> (Policy, Vec<Loosening>) {
        let mut m = Merger {
            layer: 0,
            notes: Vec::new(),
        };
        let (mut mode, mut fail_closed) = (None, None);
        let (mut lock, mut refresh, mut max_tools) = (None, None, None);
        let (mut on_change, mut auto_first, mut launch, mut on_launch) = (None, None, None, None);
        let (mut defs, mut outs, mut result_action, mut spotlight) = (None, None, None, None);
        let (mut elicit, mut sensitive, mut sampling, mut ctx, mut roots) =
            (None, None, None, None, None);
        let (mut frame, mut budget, mut busy, mut retention, mut db_max) =
            (None, None, None, None, None);
        let (mut rts_mode, mut rts_window) = (None, None);
        let (mut flow_mode, mut flow_window, mut same_turn) = (None, None, None);
        let (mut burst_on, mut burst_max, mut burst_window, mut cooldown) =
            (None, None, None, None);
        let mut rate_on = None;
        let (mut ty_names, mut ty_nt, mut ty_pkgs, mut ty_pt) = (None, None, None, None);

        let mut server_deny = Globs::empty();
        let mut server_allow = Vec::new();
        let mut commands = Vec::new();
        let mut blocked = Globs::empty();
        let mut tool_deny = Vec::new();
        let mut tool_allow = Vec::new();
        let mut rules = Vec::new();
        let mut servers: Vec<(usize, String, ServerEntry)> = Vec::new();
        let mut custom: Vec<CustomPattern> = Vec::new();
        let mut rate_layers = Vec::new();
        let mut classification = Vec::new();
        let mut had_server_allow = false;
        let mut had_tool_allow = false;

        for (i, layer) in layers.iter().enumerate() {
            m.layer = i;
            if i == 1 {
                // With a base, the base's *effective* values (defaults filled
                // in) are the floor: a local file cannot loosen a key the
                // base left at its default.
                macro_rules! floor {
                    ($($var:ident = $value:expr),+ $(,)?) => { $( $var = $var.or(Some($value)); )+ };
                }
                use defaults as d;
                floor!(
                    mode = d::MODE,
                    fail_closed = false,
                    lock = false,
                    refresh = d::REFRESH_SECS,
                    max_tools = d::MAX_TOOLS,
                    on_change = OnChange::Block,
                    auto_first = true,
                    launch = true,
                    on_launch = OnLaunchChange::Hold,
                    defs = true,
                    outs = true,
                    result_action = ResultAction::Block,
                    spotlight = false,
                    elicit = Elicitation::Allow,
                    sensitive = SensitiveFields::Route,
                    sampling = AllowDecline::Allow,
                    ctx = SamplingContext::Strip,
                    roots = AllowDecline::Allow,
                    frame = d::MAX_FRAME,
                    budget = d::SCAN_BUDGET_MS,
                    busy = d::DB_BUSY_MS,
                    retention = d::RETENTION_DAYS,
                    db_max = d::DB_MAX_MB,
                    rts_mode = FlowMode::Linked,
                    rts_window = d::FLOW_WINDOW,
                    flow_mode = FlowMode::Linked,
                    flow_window = d::FLOW_WINDOW,
                    same_turn = true,
                    burst_on = true,
                    burst_max = d::BURST_MAX,
                    burst_window = d::BURST_WINDOW,
                    cooldown = d::BURST_COOLDOWN,
                    rate_on = true,
                    ty_names = true,
                    ty_pkgs = true,
                    ty_nt = d::SIMILARITY,
                    ty_pt = d::SIMILARITY,
                );
            }
            let r = &layer.raw;
            m.max(&mut mode, r.mode.map(Mode::from), "mode");
            m.max(&mut fail_closed, r.fail_closed, "fail_closed");

            if let Some(sp) = &r.server_policy {
                if had_server_allow
                    && sp
                        .mode
                        .is_some_and(|md| ListMode::from(md) != ListMode::Allowlist)
                {
                    m.note(
                        "server_policy.mode",
                        "does not lift the base's allowlist; both apply".to_owned(),
                    );
                }
            }
            if let Some(g) = &layer.server_deny {
                server_deny = server_deny.union(g, GlobKind::Name);
            }
            if let Some(g) = &layer.server_allow {
                server_allow.push(g.clone());
                had_server_allow = true;
            }
            commands.extend(layer.commands.clone());
            if let Some(tp) = &r.tool_policy {
                if had_tool_allow
                    && tp
                        .mode
                        .is_some_and(|md| ListMode::from(md) != ListMode::Allowlist)
                {
                    m.note(
                        "tool_policy.mode",
                        "does not lift the base's allowlist; both apply".to_owned(),
                    );
                }
            }
            if let Some(g) = &layer.blocked_tools {
                blocked = blocked.union(g, GlobKind::Name);
            }
            tool_deny.extend(layer.tool_deny.iter().flatten().cloned());
            if let Some(a) = &layer.tool_allow {
                tool_allow.push(a.clone());
                had_tool_allow = true;
            }
            rules.extend(layer.rules.iter().cloned());
            for (key, entry) in &layer.servers {
                if let Some(new) = entry.trust {
                    let old = servers
                        .iter()
                        .filter(|(_, k, _)| k == key)
                        .filter_map(|(_, _, e)| e.trust)
                        .max();
                    let old = if i > 0 {
                        Some(old.unwrap_or(Trust::Untrusted))
                    } else {
                        old
                    };
                    if let Some(old) = old.filter(|o| *o > new) {
                        m.note(
                            &format!("servers.{key}.trust"),
                            format!(
                                "`{new}` is looser than the base's `{old}`; the base value applies"
                            ),
                        );
                    }
                }
                servers.push((i, key.clone(), entry.clone()));
            }

            if let Some(t) = &r.tool_lists {
                m.max(&mut lock, t.lock_tool_list, "tool_lists.lock_tool_list");
                m.max(
                    &mut refresh,
                    t.refresh_coalesce_secs,
                    "tool_lists.refresh_coalesce_secs",
                );
                m.min(
                    &mut max_tools,
                    t.max_tools_per_server,
                    "tool_lists.max_tools_per_server",
                );
            }
            if let Some(p) = &r.pinning {
                m.max(
                    &mut on_change,
                    p.on_change.map(OnChange::from),
                    "pinning.on_change",
                );
                m.min(
                    &mut auto_first,
                    p.auto_trust_first,
                    "pinning.auto_trust_first",
                );
                m.max(&mut launch, p.launch_pinning, "pinning.launch_pinning");
                m.max(
                    &mut on_launch,
                    p.on_launch_change.map(OnLaunchChange::from),
                    "pinning.on_launch_change",
                );
            }
            if let Some(s) = &r.scanner {
                m.max(&mut defs, s.definitions, "scanner.definitions");
                m.max(&mut outs, s.outputs, "scanner.outputs");
                m.max(
                    &mut result_action,
                    s.result_action.map(ResultAction::from),
                    "scanner.result_action",
                );
                m.max(
                    &mut spotlight,
                    s.spotlight_results,
                    "scanner.spotlight_results",
                );
            }
            for p in &layer.custom_patterns {
                if custom.iter().any(|c| c.id == p.id) {
                    m.note(
                        "scanner.custom_patterns",
                        format!(
                            "pattern `{}` is already defined by the base; the base's applies",
                            p.id
                        ),
                    );
                } else {
                    custom.push(p.clone());
                }
            }
            if let Some(q) = &r.requests {
                m.max(
                    &mut elicit,
                    q.elicitation.map(Elicitation::from),
                    "requests.elicitation",
                );
                m.max(
                    &mut sensitive,
                    q.elicitation_sensitive_fields.map(SensitiveFields::from),
                    "requests.elicitation_sensitive_fields",
                );
                m.max(
                    &mut sampling,
                    q.sampling.map(AllowDecline::from),
                    "requests.sampling",
                );
                m.max(
                    &mut ctx,
                    q.sampling_include_context.map(SamplingContext::from),
                    "requests.sampling_include_context",
                );
                m.max(
                    &mut roots,
                    q.roots.map(AllowDecline::from),
                    "requests.roots",
                );
            }
            if let Some(l) = &r.limits {
                m.min(&mut frame, l.max_frame_bytes, "limits.max_frame_bytes");
                m.max(&mut budget, l.scan_budget_ms, "limits.scan_budget_ms");
                m.max(&mut busy, l.db_busy_ms, "limits.db_busy_ms");
                m.max(
                    &mut retention,
                    l.event_retention_days,
                    "limits.event_retention_days",
                );
                m.max(&mut db_max, l.db_max_mb, "limits.db_max_mb");
            }
            let mut layer_rate = LayerRate::default();
            if let Some(cs) = &r.cross_server {
                if let Some(f) = &cs.read_then_send {
                    m.max(
                        &mut rts_mode,
                        f.mode.map(FlowMode::from),
                        "cross_server.read_then_send.mode",
                    );
                    m.max(
                        &mut rts_window,
                        f.window_secs,
                        "cross_server.read_then_send.window_secs",
                    );
                }
                if let Some(f) = &cs.flow {
                    m.max(
                        &mut flow_mode,
                        f.mode.map(FlowMode::from),
                        "cross_server.flow.mode",
                    );
                    m.max(
                        &mut flow_window,
                        f.window_secs,
                        "cross_server.flow.window_secs",
                    );
                    m.min(
                        &mut same_turn,
                        f.same_turn_only,
                        "cross_server.flow.same_turn_only",
                    );
                }
                if let Some(b) = &cs.burst {
                    m.max(&mut burst_on, b.enabled, "cross_server.burst.enabled");
                    m.min(&mut burst_max, b.max_calls, "cross_server.burst.max_calls");
                    m.max(
                        &mut burst_window,
                        b.window_secs,
                        "cross_server.burst.window_secs",
                    );
                    m.max(
                        &mut cooldown,
                        b.cooldown_secs,
                        "cross_server.burst.cooldown_secs",
                    );
                }
                if let Some(rl) = &cs.rate_limit {
                    m.max(&mut rate_on, rl.enabled, "cross_server.rate_limit.enabled");
                    layer_rate.calls_per_minute = rl.calls_per_minute;
                    layer_rate.burst = rl.burst;
                    layer_rate.overrides = layer.rate_overrides.clone();
                }
                if let Some(t) = &cs.typosquat {
                    m.max(
                        &mut ty_names,
                        t.server_names,
                        "cross_server.typosquat.server_names",
                    );
                    m.min_f64(
                        &mut ty_nt,
                        t.server_threshold,
                        "cross_server.typosquat.server_threshold",
                    );
                    m.max(&mut ty_pkgs, t.packages, "cross_server.typosquat.packages");
                    m.min_f64(
                        &mut ty_pt,
                        t.package_threshold,
                        "cross_server.typosquat.package_threshold",
                    );
                }
            }
            rate_layers.push(layer_rate);
            classification.extend(layer.classification.iter().cloned());
        }

        use defaults as d;
        let policy = Policy {
            mode: mode.unwrap_or(d::MODE),
            fail_closed: fail_closed.unwrap_or(false),
            server_deny,
            server_allow,
            commands,
            blocked_tools: blocked,
            tool_deny,
            tool_allow,
            rules,
            servers,
            layered: layers.len() > 1,
            tool_lists: ToolListSettings {
                lock_tool_list: lock.unwrap_or(false),
                refresh_coalesce: secs(refresh.unwrap_or(d::REFRESH_SECS)),
                max_tools_per_server: to_u32(max_tools.unwrap_or(d::MAX_TOOLS)),
            },
            pinning: PinningSettings {
                on_change: on_change.unwrap_or(OnChange::Block),
                auto_trust_first: auto_first.unwrap_or(true),
                launch_pinning: launch.unwrap_or(true),
                on_launch_change: on_launch.unwrap_or(OnLaunchChange::Hold),
            },
            scanner: ScannerSettings {
                definitions: defs.unwrap_or(true),
                outputs: outs.unwrap_or(true),
                result_action: result_action.unwrap_or(ResultAction::Block),
                spotlight_results: spotlight.unwrap_or(false),
                custom_patterns: custom,
            },
            requests: RequestSettings {
                elicitation: elicit.unwrap_or(Elicitation::Allow),
                elicitation_sensitive_fields: sensitive.unwrap_or(SensitiveFields::Route),
                sampling: sampling.unwrap_or(AllowDecline::Allow),
                sampling_include_context: ctx.unwrap_or(SamplingContext::Strip),
                roots: roots.unwrap_or(AllowDecline::Allow),
            },
            limits: Limits {
                max_frame_bytes: frame.unwrap_or(d::MAX_FRAME),
                scan_budget: Duration::from_millis(budget.unwrap_or(d::SCAN_BUDGET_MS)),
                db_busy: Duration::from_millis(busy.unwrap_or(d::DB_BUSY_MS)),
                event_retention_days: to_u32(retention.unwrap_or(d::RETENTION_DAYS)),
                db_max_bytes: db_max.unwrap_or(d::DB_MAX_MB) * 1024 * 1024,
            },
            cross_server: CrossServer {
                read_then_send: FlowRule {
                    mode: rts_mode.unwrap_or(FlowMode::Linked),
                    window: secs(rts_window.unwrap_or(d::FLOW_WINDOW)),
                    same_turn_only: false,
                },
                flow: FlowRule {
                    mode: flow_mode.unwrap_or(FlowMode::Linked),
                    window: secs(flow_window.unwrap_or(d::FLOW_WINDOW)),
                    same_turn_only: same_turn.unwrap_or(true),
                },
                burst: Burst {
                    enabled: burst_on.unwrap_or(true),
                    max_calls: to_u32(burst_max.unwrap_or(d::BURST_MAX)),
                    window: secs(burst_window.unwrap_or(d::BURST_WINDOW)),
                    cooldown: secs(cooldown.unwrap_or(d::BURST_COOLDOWN)),
                },
                rate_limit_enabled: rate_on.unwrap_or(true),
                typosquat: Typosquat {
                    server_names: ty_names.unwrap_or(true),
                    server_threshold: ty_nt.unwrap_or(d::SIMILARITY),
                    packages: ty_pkgs.unwrap_or(true),
                    package_threshold: ty_pt.unwrap_or(d::SIMILARITY),
                },
                rate_layers,
                classification,
            },
        };
        (policy, m.notes)
    }

    /// Audit-only: decisions are recorded, nothing is blocked. The decision
    /// functions below still return `Block`; the engine records it as
    /// "would block" and relays.
    pub fn is_audit_only(&self) -> bool {
        self.mode == Mode::Audit
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// DESIGN §8: block rather than relay when Gatehouse cannot check.
    pub fn fail_closed(&self) -> bool {
        self.fail_closed
    }

    /// Server policy, evaluated on `initialize`: denylist, every allowlist,
    /// every command allowlist. `command` is argv\[0\] as configured,
    /// `resolved_command` its absolute path after PATH lookup, if known.
    pub fn server_decision<'a>(
        &self,
        server: impl Into<ServerRef<'a>>,
        command: &str,
        resolved_command: Option<&str>,
    ) -> Decision {
        let server = server.into();
        let pattern = self
            .server_deny
            .first_match(server.name)
            .or_else(|| server.id.and_then(|id| self.server_deny.first_match(id)));
        if let Some(p) = pattern {
            return Decision::block(
                "server_policy.deny",
                format!("server `{}` matches the denied pattern `{p}`", server.name),
            );
        }
        if self.server_allow.iter().any(|g| !server.matches_globs(g)) {
            return Decision::block(
                "server_policy.allow",
                format!("server `{}` is not in the server allowlist", server.name),
            );
        }
        if !self.command_allowed(command, resolved_command) {
            return Decision::block(
                "server_policy.allowed_commands",
                format!(
                    "command `{command}` of server `{}` is not in allowed_commands",
                    server.name
                ),
            );
        }
        Decision::Allow
    }

    /// Whether any layer sets `server_policy.allowed_commands`.
    pub fn has_command_allowlist(&self) -> bool {
        !self.commands.is_empty()
    }

    /// Whether every layer's `allowed_commands` allows `command` (argv\[0\]
    /// as configured; `resolved_command` its absolute path, if known).
    /// True when no layer sets the list.
    pub fn command_allowed(&self, command: &str, resolved_command: Option<&str>) -> bool {
        self.commands
            .iter()
            .all(|c| c.allows(command, resolved_command))
    }

    /// Tool policy and argument rules for one `tools/call`. Every check
    /// runs; the most restrictive result wins, and among equals the first in
    /// this order: blocked_tools, restricted trust, tool denylist, tool
    /// allowlists (with content hashes), argument rules in file order.
    /// `content_hash` is the tool's current definition hash (`sha256:…`).
    pub fn tool_decision<'a>(
        &self,
        server: impl Into<ServerRef<'a>>,
        tool: &str,
        content_hash: Option<&str>,
        arguments: &Value,
    ) -> Decision {
        let server = server.into();
        let mut decision = self.exposure_decision(&server, tool, content_hash, true);
        if decision.is_block() {
            return decision;
        }
        for rule in &self.rules {
            if rule.decision == RuleDecision::Allow || !rule.matches(&server, tool, arguments) {
                continue;
            }
            let rule_name = format!("rules.{}", rule.id);
            let d = match rule.decision {
                RuleDecision::Block => Decision::block(rule_name, rule.reason.clone()),
                RuleDecision::Audit => Decision::Audit {
                    rule: rule_name,
                    reason: rule.reason.clone(),
                },
                RuleDecision::Allow => Decision::Allow,
            };
            decision = decision.stricter(d);
            if decision.is_block() {
                break;
            }
        }
        decision
    }

    /// Whether `tool` may appear in this server's tool list: not blocked, not
    /// denied by a hash-free rule, in every tool allowlist (names only; hashes
    /// are checked per call), and in the allowlist of a restricted server.
    pub fn tool_exposed<'a>(&self, server: impl Into<ServerRef<'a>>, tool: &str) -> bool {
        let server = server.into();
        !self
            .exposure_decision(&server, tool, None, false)
            .is_block()
    }

    fn exposure_decision(
        &self,
        server: &ServerRef<'_>,
        tool: &str,
        hash: Option<&str>,
        check_hash: bool,
    ) -> Decision {
        if let Some(p) = self.blocked_tools.first_match(tool) {
            return Decision::block(
                "tool_policy.blocked_tools",
                format!("tool `{tool}` matches blocked tool `{p}`"),
            );
        }
        let (trust, allowlists) = self.entries(server);
        let allowlisted = !allowlists.is_empty() && allowlists.iter().all(|g| g.is_match(tool));
        if trust == Trust::Restricted && !allowlisted {
            return Decision::block(
                "trust.restricted",
                format!(
                    "server `{}` is restricted and `{tool}` is not in its tool_allowlist",
                    server.name
                ),
            );
        }
        for rule in &self.tool_deny {
            let applies = match (&rule.content_hash, check_hash) {
                (None, _) => true,
                (Some(_), true) => rule.hash_ok(hash),
                (Some(_), false) => false,
            };
            if applies && rule.matches_name(server, tool) {
                return Decision::block(
                    "tool_policy.deny",
                    format!(
                        "tool `{tool}` of server `{}` is denied by the tool policy",
                        server.name
                    ),
                );
            }
        }
        for layer in &self.tool_allow {
            let named: Vec<&ToolRule> = layer
                .iter()
                .filter(|r| r.matches_name(server, tool))
                .collect();
            if named.is_empty() {
                return Decision::block(
                    "tool_policy.allow",
                    format!(
                        "tool `{tool}` of server `{}` is not in the tool allowlist",
                        server.name
                    ),
                );
            }
            if check_hash && !named.iter().any(|r| r.hash_ok(hash)) {
                return Decision::block(
                    "tool_policy.content_hash",
                    format!(
                        "tool `{tool}` of server `{}` does not have the content hash the policy pins",
                        server.name
                    ),
                );
            }
        }
        Decision::Allow
    }

    /// (trust, allowlists) folded over every matching `[servers."KEY"]` entry.
    fn entries(&self, server: &ServerRef<'_>) -> (Trust, Vec<&Globs>) {
        let mut trust: Option<Trust> = None;
        let mut lists = Vec::new();
        let base_says = self
            .servers
            .iter()
            .any(|(layer, key, e)| *layer == 0 && server.is_key(key) && e.trust.is_some());
        if self.layered && !base_says {
            // The base left this server at the default: that is the floor.
            trust = Some(Trust::Untrusted);
        }
        for (_, key, e) in &self.servers {
            if server.is_key(key) {
                if let Some(t) = e.trust {
                    trust = Some(trust.map_or(t, |old| old.max(t)));
                }
                lists.extend(e.tool_allowlist.iter());
            }
        }
        (trust.unwrap_or(Trust::Untrusted), lists)
    }

    /// Effective trust of a server.
    pub fn trust<'a>(&self, server: impl Into<ServerRef<'a>>) -> Trust {
        self.entries(&server.into()).0
    }

    /// Everything per-server: trust and what it switches, env, pass_env, rate limit.
    pub fn server_settings<'a>(&self, server: impl Into<ServerRef<'a>>) -> ServerSettings {
        let server = server.into();
        let (trust, _) = self.entries(&server);
        // Earlier layers first; within a layer the id-keyed entry before the name-keyed one.
        let mut matching: Vec<&(usize, String, ServerEntry)> = self
            .servers
            .iter()
            .filter(|(_, k, _)| server.is_key(k))
            .collect();
        matching.sort_by_key(|(layer, key, _)| (*layer, Some(key.as_str()) != server.id));
        let mut env = BTreeMap::new();
        let mut pass_env: Option<BTreeSet<String>> = None;
        for (_, _, e) in matching {
            for (k, v) in &e.env {
                env.entry(k.clone()).or_insert_with(|| v.clone());
            }
            if let Some(p) = &e.pass_env {
                pass_env = Some(match pass_env {
                    None => p.clone(),
                    Some(acc) => acc.intersection(p).cloned().collect(),
                });
            }
        }
        let trusted = trust == Trust::Trusted;
        let restricted = trust == Trust::Restricted;
        ServerSettings {
            trust,
            env,
            pass_env: pass_env.unwrap_or_default(),
            rate_limit: self.cross_server.rate_limit_for(server),
            rate_limited: self.cross_server.rate_limit_enabled && !trusted,
            burst_checked: self.cross_server.burst.enabled && !trusted,
            flow_checked: self.cross_server.flow.mode != FlowMode::Off && !trusted,
            pin_at_first_sight: self.pinning.auto_trust_first || trusted,
            may_elicit: !restricted && self.requests.elicitation != Elicitation::Decline,
            elicit_via_inbox: self.requests.elicitation == Elicitation::Route,
            may_sample: !restricted && self.requests.sampling == AllowDecline::Allow,
            may_list_roots: !restricted && self.requests.roots == AllowDecline::Allow,
        }
    }
}
