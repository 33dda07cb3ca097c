//! The file format: serde structs that mirror `policy.toml` one to one.
//!
//! Every field is optional so a layer says only what it sets; unknown keys are
//! errors (`deny_unknown_fields`). Nothing here is interpreted: validation in
//! `layer.rs` turns these into typed, compiled values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Declares a raw (serde) enum and its typed twin with conversions both ways.
/// The typed enum derives `Ord` in declaration order: loosest first, strictest last.
macro_rules! policy_enum {
    ($(#[$meta:meta])* $raw:ident => $typed:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub(crate) enum $raw { $(#[serde(rename = $text)] $variant),+ }

        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $typed { $($(#[$vmeta])* $variant),+ }

        impl From<$raw> for $typed {
            fn from(value: $raw) -> Self { match value { $($raw::$variant => $typed::$variant),+ } }
        }
        impl From<$typed> for $raw {
            fn from(value: $typed) -> Self { match value { $($typed::$variant => $raw::$variant),+ } }
        }
        impl $typed {
            /// The spelling used in `policy.toml`.
            pub fn as_str(self) -> &'static str { match self { $($typed::$variant => $text),+ } }
        }
        impl std::fmt::Display for $typed {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

policy_enum!(
    /// Whether decisions are enforced or only recorded. Stricter: `enforce`.
    RawMode => Mode { /// Decisions are recorded, nothing is blocked.
        Audit = "audit", /// Decisions are enforced.
        Enforce = "enforce" }
);
policy_enum!(
    /// How a list policy (servers or tools) is applied.
    RawListMode => ListMode { /// No list filtering.
        None = "none", /// Listed entries are refused; everything else passes.
        Denylist = "denylist", /// Only listed entries pass (listed denies still apply).
        Allowlist = "allowlist" }
);
policy_enum!(
    /// What an argument rule decides. Stricter: `block` > `audit` > `allow`.
    RawRuleDecision => RuleDecision { /// Pass silently (never overrides a stricter match).
        Allow = "allow", /// Pass and record an audit event.
        Audit = "audit", /// Refuse the call.
        Block = "block" }
);
policy_enum!(
    /// Per-server trust. Stricter: `restricted` > `untrusted` > `trusted`.
    RawTrust => Trust { /// The operator vouches for the server; see `ServerSettings` for what it skips.
        Trusted = "trusted", /// The default: every check applies.
        Untrusted = "untrusted", /// Only `tool_allowlist` tools are exposed; never elicits, samples or lists roots.
        Restricted = "restricted" }
);
policy_enum!(
    /// What happens when a pinned tool definition changes. Stricter: `block`.
    RawOnChange => OnChange { /// Accept the change silently (the new definition is still scanned).
        Allow = "allow", /// Accept and emit an alert.
        Alert = "alert", /// Hold the tool until a person approves the change.
        Block = "block" }
);
policy_enum!(
    /// What happens when a server's launch command changes. Stricter: `hold`.
    RawOnLaunchChange => OnLaunchChange { /// Start it and emit an alert.
        Alert = "alert", /// Start it without secrets or trust until a person approves.
        Hold = "hold" }
);
policy_enum!(
    /// What a high or critical finding in a result does. Stricter: `block`.
    RawResultAction => ResultAction { /// Forward the result and emit an alert.
        Alert = "alert", /// Replace the result with an error naming the finding.
        Block = "block" }
);
policy_enum!(
    /// Scanner severities, lowest first.
    RawSeverity => Severity { /// Informational.
        Low = "low", /// Suspicious.
        Medium = "medium", /// Strong evidence.
        High = "high", /// Near-certain attack.
        Critical = "critical" }
);
policy_enum!(
    /// Whether servers may send `elicitation/create`. Stricter: `decline`.
    RawAllowDecline => AllowDecline { /// Forward (with the server-identity prefix).
        Allow = "allow", /// Answer with a decline; the client never sees it.
        Decline = "decline" }
);
policy_enum!(
    /// Where `elicitation/create` goes. Stricter: `route`, then `decline`.
    RawElicitation => Elicitation { /// To the client, with the server-identity prefix.
        Allow = "allow", /// To the person in the dashboard inbox (never to the client).
        Route = "route", /// Answered with a decline; nobody sees it.
        Decline = "decline" }
);
policy_enum!(
    /// Elicitations that ask for sensitive fields (password, token, key, …). Stricter: `decline`.
    RawSensitiveFields => SensitiveFields { /// Forward with a warning naming the server.
        Warn = "warn", /// Route to the person in the dashboard instead of the client.
        Route = "route", /// Decline.
        Decline = "decline" }
);
policy_enum!(
    /// Sampling requests with `includeContext` other than `none`/`thisServer`. Stricter: `decline`.
    RawSamplingContext => SamplingContext { /// Forward unchanged.
        Allow = "allow", /// Downgrade `includeContext` to `thisServer`.
        Strip = "strip", /// Decline the request.
        Decline = "decline" }
);
policy_enum!(
    /// Cross-server rule mode. Stricter: `strict` > `linked` > `off`.
    RawFlowMode => FlowMode { /// Rule disabled.
        Off = "off", /// Block when data from the read is carried into the call; otherwise alert.
        Linked = "linked", /// Block on the sequence alone.
        Strict = "strict" }
);
policy_enum!(
    /// A tool's effect class, used by cross-server rules.
    RawToolClass => ToolClass { /// Reads data.
        Read = "read", /// Modifies data.
        Write = "write", /// Sends data out.
        Send = "send", /// Executes code.
        Compute = "compute", /// Says nothing about its effect.
        Unknown = "unknown" }
);

/// `policy.toml`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub base: Option<String>,
    pub mode: Option<RawMode>,
    pub fail_closed: Option<bool>,
    pub server_policy: Option<RawServerPolicy>,
    pub tool_policy: Option<RawToolPolicy>,
    pub rules: Option<Vec<RawRule>>,
    pub servers: Option<BTreeMap<String, RawServer>>,
    pub tool_lists: Option<RawToolLists>,
    pub pinning: Option<RawPinning>,
    pub scanner: Option<RawScanner>,
    pub requests: Option<RawRequests>,
    pub limits: Option<RawLimits>,
    pub cross_server: Option<RawCrossServer>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServerPolicy {
    pub mode: Option<RawListMode>,
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
    pub allowed_commands: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolPolicy {
    pub mode: Option<RawListMode>,
    pub blocked_tools: Option<Vec<String>>,
    pub allow: Option<Vec<RawToolRule>>,
    pub deny: Option<Vec<RawToolRule>>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolRule {
    pub server: Option<String>,
    pub tool: Option<String>,
    pub content_hash: Option<String>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub id: Option<String>,
    pub server: Option<String>,
    pub tool_name: Option<String>,
    pub tool_name_regex: Option<String>,
    pub tool_name_any: Option<Vec<String>>,
    pub argument_patterns: Option<RawArgumentPatterns>,
    pub decision: Option<RawRuleDecision>,
    pub reason: Option<String>,
}

/// Either globs over every string value in the arguments, or a table from
/// top-level argument name to glob(s) (every named argument must match).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawArgumentPatterns {
    Anywhere(Vec<String>),
    ByArgument(BTreeMap<String, RawOneOrMany>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawOneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub trust: Option<RawTrust>,
    pub tool_allowlist: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub pass_env: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolLists {
    pub lock_tool_list: Option<bool>,
    pub refresh_coalesce_secs: Option<u64>,
    pub max_tools_per_server: Option<u64>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPinning {
    pub on_change: Option<RawOnChange>,
    pub auto_trust_first: Option<bool>,
    pub launch_pinning: Option<bool>,
    pub on_launch_change: Option<RawOnLaunchChange>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScanner {
    pub definitions: Option<bool>,
    pub outputs: Option<bool>,
    pub result_action: Option<RawResultAction>,
    pub spotlight_results: Option<bool>,
    pub custom_patterns: Option<Vec<RawCustomPattern>>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCustomPattern {
    pub id: Option<String>,
    pub regex: Option<String>,
    pub family: Option<String>,
    pub severity: Option<RawSeverity>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRequests {
    pub elicitation: Option<RawElicitation>,
    pub elicitation_sensitive_fields: Option<RawSensitiveFields>,
    pub sampling: Option<RawAllowDecline>,
    pub sampling_include_context: Option<RawSamplingContext>,
    pub roots: Option<RawAllowDecline>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub max_frame_bytes: Option<u64>,
    pub scan_budget_ms: Option<u64>,
    pub db_busy_ms: Option<u64>,
    pub event_retention_days: Option<u64>,
    pub db_max_mb: Option<u64>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCrossServer {
    pub read_then_send: Option<RawFlowRule>,
    pub flow: Option<RawFlowRule>,
    pub burst: Option<RawBurst>,
    pub rate_limit: Option<RawRateLimit>,
    pub typosquat: Option<RawTyposquat>,
    pub classification: Option<BTreeMap<String, RawToolClass>>,
    /// Accepted by the parser only to reject it with a clear message.
    #[serde(skip_serializing)]
    pub shadowing: Option<toml::Value>,
    /// Accepted by the parser only to reject it with a clear message.
    #[serde(skip_serializing)]
    pub shadow_tool: Option<toml::Value>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFlowRule {
    pub mode: Option<RawFlowMode>,
    pub window_secs: Option<u64>,
    pub same_turn_only: Option<bool>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBurst {
    pub enabled: Option<bool>,
    pub max_calls: Option<u64>,
    pub window_secs: Option<u64>,
    pub cooldown_secs: Option<u64>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRateLimit {
    pub enabled: Option<bool>,
    pub calls_per_minute: Option<u64>,
    pub burst: Option<u64>,
    pub per_server: Option<BTreeMap<String, RawRateOverride>>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRateOverride {
    pub calls_per_minute: Option<u64>,
    pub burst: Option<u64>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTyposquat {
    pub server_names: Option<bool>,
    pub server_threshold: Option<f64>,
    pub packages: Option<bool>,
    pub package_threshold: Option<f64>,
}
