//! Validation: one file's raw options → a `Layer` (typed, compiled, still
//! optional so layering can tell "unset" from "set to the default").

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;

use crate::diag::{sanitize_message, Diagnostic, KeyPath, Locator};
use crate::matching::{compile_glob, CommandList, GlobKind, Globs};
use crate::policy::{
    ArgMatch, ArgRule, CustomPattern, EnvValue, NameMatch, RateOverride, ServerEntry, ToolRule,
};
use crate::raw::*;

/// One validated policy file.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    /// Scalar options, range-checked; merged key by key.
    pub raw: RawPolicy,
    pub server_allow: Option<Globs>,
    pub server_deny: Option<Globs>,
    pub commands: Option<CommandList>,
    pub blocked_tools: Option<Globs>,
    pub tool_allow: Option<Vec<ToolRule>>,
    pub tool_deny: Option<Vec<ToolRule>>,
    pub rules: Vec<ArgRule>,
    pub servers: Vec<(String, ServerEntry)>,
    pub custom_patterns: Vec<CustomPattern>,
    pub rate_overrides: Vec<(String, RateOverride)>,
    pub classification: Vec<(String, Globs, ToolClass)>,
}

struct Checker<'a> {
    file: &'a str,
    locator: &'a Locator<'a>,
    errors: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn err(&mut self, path: &KeyPath, message: impl Into<String>) {
        let d = self
            .locator
            .diagnostic(self.file, path, false, message.into());
        self.errors.push(d);
    }
    fn err_key(&mut self, path: &KeyPath, message: impl Into<String>) {
        let d = self
            .locator
            .diagnostic(self.file, path, true, message.into());
        self.errors.push(d);
    }
    fn range(&mut self, path: &KeyPath, value: Option<u64>, min: u64, max: u64) {
        if let Some(v) = value {
            if v < min || v > max {
                self.err(path, format!("{v} is out of range; allowed {min}..={max}"));
            }
        }
    }
    fn globs(&mut self, path: &KeyPath, patterns: &[String], kind: GlobKind) -> Option<Globs> {
        match Globs::new(patterns, kind) {
            Ok(g) => Some(g),
            Err((i, e)) => {
                self.err(&path.index(i), e);
                None
            }
        }
    }
}

/// Parses and validates one file. `file` is how diagnostics name it.
pub(crate) fn parse_layer(file: &str, text: &str) -> Result<Layer, Vec<Diagnostic>> {
    let locator = Locator::new(text);
    let raw: RawPolicy = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let (line, column) = e
                .span()
                .map_or((0, 0), |s| crate::diag::line_col(text, s.start));
            let message = sanitize_message(e.message());
            // Name the key: "expected u64" alone does not say which one.
            let message = match e.span().and_then(|s| locator.path_at(s.start)) {
                Some(path) => format!("`{path}`: {message}"),
                None => message,
            };
            return Err(vec![Diagnostic {
                file: file.to_owned(),
                line,
                column,
                message,
            }]);
        }
    };
    let mut c = Checker {
        file,
        locator: &locator,
        errors: Vec::new(),
    };
    let root = KeyPath::default();
    let layer = check(&mut c, &root, raw);
    if c.errors.is_empty() {
        Ok(layer)
    } else {
        c.errors.sort_by_key(|d| (d.line, d.column));
        Err(c.errors)
    }
}

fn check(c: &mut Checker<'_>, root: &KeyPath, raw: RawPolicy) -> Layer {
    let mut layer = Layer {
        raw: RawPolicy::default(),
        server_allow: None,
        server_deny: None,
        commands: None,
        blocked_tools: None,
        tool_allow: None,
        tool_deny: None,
        rules: Vec::new(),
        servers: Vec::new(),
        custom_patterns: Vec::new(),
        rate_overrides: Vec::new(),
        classification: Vec::new(),
    };
    if let Some(base) = &raw.base {
        if base.trim().is_empty() {
            c.err(&root.key("base"), "empty path");
        }
    }
    if let Some(sp) = &raw.server_policy {
        check_server_policy(c, &root.key("server_policy"), sp, &mut layer);
    }
    if let Some(tp) = &raw.tool_policy {
        check_tool_policy(c, &root.key("tool_policy"), tp, &mut layer);
    }
    if let Some(rules) = &raw.rules {
        let mut ids = BTreeSet::new();
        for (i, rule) in rules.iter().enumerate() {
            let path = root.key("rules").index(i);
            if let Some(r) = check_rule(c, &path, rule) {
                if !ids.insert(r.id.clone()) {
                    c.err(&path.key("id"), format!("duplicate rule id `{}`", r.id));
                }
                layer.rules.push(r);
            }
        }
    }
    if let Some(servers) = &raw.servers {
        for (key, server) in servers {
            let path = root.key("servers").key(key);
            if key.trim().is_empty() {
                c.err_key(&path, "empty server name");
                continue;
            }
            if let Some(entry) = check_server(c, &path, server) {
                layer.servers.push((key.clone(), entry));
            }
        }
    }
    if let Some(tl) = &raw.tool_lists {
        let p = root.key("tool_lists");
        c.range(
            &p.key("refresh_coalesce_secs"),
            tl.refresh_coalesce_secs,
            1,
            3600,
        );
        c.range(
            &p.key("max_tools_per_server"),
            tl.max_tools_per_server,
            1,
            10_000,
        );
    }
    if let Some(sc) = &raw.scanner {
        let p = root.key("scanner");
        let mut ids = BTreeSet::new();
        for (i, cp) in sc.custom_patterns.iter().flatten().enumerate() {
            let path = p.key("custom_patterns").index(i);
            if let Some(pattern) = check_custom_pattern(c, &path, cp) {
                if !ids.insert(pattern.id.clone()) {
                    c.err(
                        &path.key("id"),
                        format!("duplicate pattern id `{}`", pattern.id),
                    );
                }
                layer.custom_patterns.push(pattern);
            }
        }
    }
    if let Some(l) = &raw.limits {
        let p = root.key("limits");
        c.range(&p.key("max_frame_bytes"), l.max_frame_bytes, 1024, 1 << 30);
        c.range(&p.key("scan_budget_ms"), l.scan_budget_ms, 1, 10_000);
        c.range(&p.key("db_busy_ms"), l.db_busy_ms, 1, 50);
        c.range(
            &p.key("event_retention_days"),
            l.event_retention_days,
            1,
            3650,
        );
        c.range(&p.key("db_max_mb"), l.db_max_mb, 16, 1 << 20);
    }
    if let Some(cs) = &raw.cross_server {
        check_cross_server(c, &root.key("cross_server"), cs, &mut layer);
    }
    layer.raw = raw;
    layer
}

fn check_list_mode(
    c: &mut Checker<'_>,
    path: &KeyPath,
    mode: Option<RawListMode>,
    has_allow: bool,
    has_deny: bool,
) {
    match mode.unwrap_or(RawListMode::None) {
        RawListMode::None => {
            if has_allow {
                c.err_key(
                    &path.key("allow"),
                    "has no effect unless mode = \"allowlist\"",
                );
            }
            if has_deny {
                c.err_key(
                    &path.key("deny"),
                    "has no effect unless mode = \"denylist\" or \"allowlist\"",
                );
            }
        }
        RawListMode::Denylist => {
            if has_allow {
                c.err_key(&path.key("allow"), "has no effect in mode = \"denylist\"");
            }
        }
        RawListMode::Allowlist => {
            if !has_allow {
                c.err_key(
                    &path.key("mode"),
                    "mode = \"allowlist\" needs an `allow` list",
                );
            }
        }
    }
}

fn check_server_policy(
    c: &mut Checker<'_>,
    path: &KeyPath,
    sp: &RawServerPolicy,
    layer: &mut Layer,
) {
    check_list_mode(
        c,
        path,
        sp.mode,
        sp.allow.is_some(),
        sp.deny.as_ref().is_some_and(|d| !d.is_empty()),
    );
    if let Some(allow) = &sp.allow {
        layer.server_allow = c.globs(&path.key("allow"), allow, GlobKind::Name);
    }
    if let Some(deny) = &sp.deny {
        layer.server_deny = c.globs(&path.key("deny"), deny, GlobKind::Name);
    }
    if let Some(cmds) = &sp.allowed_commands {
        let p = path.key("allowed_commands");
        if cmds.is_empty() {
            c.err(
                &p,
                "an empty list refuses every server; remove the key to allow any command",
            );
        }
        match CommandList::new(cmds) {
            Ok(list) => layer.commands = Some(list),
            Err((i, e)) => c.err(&p.index(i), e),
        }
    }
}

fn check_tool_policy(c: &mut Checker<'_>, path: &KeyPath, tp: &RawToolPolicy, layer: &mut Layer) {
    check_list_mode(
        c,
        path,
        tp.mode,
        tp.allow.is_some(),
        tp.deny.as_ref().is_some_and(|d| !d.is_empty()),
    );
    if let Some(blocked) = &tp.blocked_tools {
        layer.blocked_tools = c.globs(&path.key("blocked_tools"), blocked, GlobKind::Name);
    }
    let rules = |c: &mut Checker<'_>, key: &str, list: &Option<Vec<RawToolRule>>| {
        list.as_ref().map(|list| {
            list.iter()
                .enumerate()
                .filter_map(|(i, r)| check_tool_rule(c, &path.key(key).index(i), r))
                .collect::<Vec<_>>()
        })
    };
    layer.tool_allow = rules(c, "allow", &tp.allow);
    layer.tool_deny = rules(c, "deny", &tp.deny);
}

fn name_glob(c: &mut Checker<'_>, path: &KeyPath, pattern: &str) -> Option<Globs> {
    one_glob(c, path, pattern, GlobKind::Name)
}

fn one_glob(c: &mut Checker<'_>, path: &KeyPath, pattern: &str, kind: GlobKind) -> Option<Globs> {
    match Globs::new(std::slice::from_ref(&pattern.to_owned()), kind) {
        Ok(g) => Some(g),
        Err((_, e)) => {
            c.err(path, e);
            None
        }
    }
}

fn check_tool_rule(c: &mut Checker<'_>, path: &KeyPath, r: &RawToolRule) -> Option<ToolRule> {
    let server_src = r.server.clone().unwrap_or_else(|| "*".to_owned());
    let server = name_glob(c, &path.key("server"), &server_src);
    let Some(tool_src) = r.tool.clone() else {
        c.err(
            path,
            "missing `tool` (a tool-name glob; use \"*\" for every tool)",
        );
        return None;
    };
    let tool = name_glob(c, &path.key("tool"), &tool_src);
    let content_hash = match &r.content_hash {
        Some(h) => match normalize_hash(h) {
            Some(h) => Some(h),
            None => {
                c.err(
                    &path.key("content_hash"),
                    "expected \"sha256:\" followed by 64 hex digits",
                );
                None
            }
        },
        None => None,
    };
    Some(ToolRule {
        server: server?,
        tool: tool?,
        content_hash,
    })
}

/// `sha256:<64 hex>`, lower-cased.
pub(crate) fn normalize_hash(h: &str) -> Option<String> {
    let hex = h.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("sha256:{}", hex.to_ascii_lowercase()))
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn compile_regex(pattern: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| match e {
            regex::Error::Syntax(s) => {
                format!(
                    "invalid regex: {}",
                    s.lines().last().unwrap_or("syntax error").trim()
                )
            }
            regex::Error::CompiledTooBig(_) => "regex too large".to_owned(),
            _ => "invalid regex".to_owned(),
        })
}

fn check_rule(c: &mut Checker<'_>, path: &KeyPath, r: &RawRule) -> Option<ArgRule> {
    let id = match &r.id {
        Some(id) if valid_id(id) => Some(id.clone()),
        Some(_) => {
            c.err(
                &path.key("id"),
                "ids use letters, digits, `_`, `-`, `.` (at most 64)",
            );
            None
        }
        None => {
            c.err(path, "missing `id`");
            None
        }
    };
    let server = r
        .server
        .as_deref()
        .map(|s| name_glob(c, &path.key("server"), s));
    let set = [
        r.tool_name.is_some(),
        r.tool_name_regex.is_some(),
        r.tool_name_any.is_some(),
    ];
    let names = match set.iter().filter(|b| **b).count() {
        1 => {
            if let Some(t) = &r.tool_name {
                name_glob(c, &path.key("tool_name"), t).map(NameMatch::Glob)
            } else if let Some(re) = &r.tool_name_regex {
                match compile_regex(&format!("^(?:{re})$")) {
                    Ok(re) => Some(NameMatch::Regex(re)),
                    Err(e) => {
                        c.err(&path.key("tool_name_regex"), e);
                        None
                    }
                }
            } else {
                let any = r.tool_name_any.as_deref().unwrap_or_default();
                if any.is_empty() {
                    c.err(&path.key("tool_name_any"), "empty list matches no tool");
                }
                c.globs(&path.key("tool_name_any"), any, GlobKind::Name)
                    .map(NameMatch::Glob)
            }
        }
        0 => {
            c.err(
                path,
                "needs one of `tool_name`, `tool_name_regex`, `tool_name_any`",
            );
            None
        }
        _ => {
            c.err(
                path,
                "set only one of `tool_name`, `tool_name_regex`, `tool_name_any`",
            );
            None
        }
    };
    let args = match &r.argument_patterns {
        None => Some(ArgMatch::Any),
        Some(RawArgumentPatterns::Anywhere(list)) => {
            let p = path.key("argument_patterns");
            if list.is_empty() {
                c.err(&p, "empty list; remove the key to match any arguments");
            }
            c.globs(&p, list, GlobKind::Path).map(ArgMatch::Anywhere)
        }
        Some(RawArgumentPatterns::ByArgument(map)) => {
            let p = path.key("argument_patterns");
            if map.is_empty() {
                c.err(&p, "empty table; remove the key to match any arguments");
            }
            let mut out = Vec::new();
            let mut ok = true;
            for (name, pats) in map {
                let pats = match pats {
                    RawOneOrMany::One(s) => vec![s.clone()],
                    RawOneOrMany::Many(v) => v.clone(),
                };
                if pats.is_empty() {
                    c.err(&p.key(name), "empty list matches nothing");
                    ok = false;
                }
                let g = match &map[name] {
                    RawOneOrMany::One(s) => one_glob(c, &p.key(name), s, GlobKind::Path),
                    RawOneOrMany::Many(_) => c.globs(&p.key(name), &pats, GlobKind::Path),
                };
                match g {
                    Some(g) => out.push((name.clone(), g)),
                    None => ok = false,
                }
            }
            ok.then_some(ArgMatch::ByArgument(out))
        }
    };
    let decision = match r.decision {
        Some(d) => Some(RuleDecision::from(d)),
        None => {
            c.err(path, "missing `decision` (allow, audit or block)");
            None
        }
    };
    let server = match server {
        Some(Some(g)) => Some(g),
        Some(None) => return None,
        None => None,
    };
    let id = id?;
    let reason = r
        .reason
        .clone()
        .unwrap_or_else(|| format!("matched rule `{id}`"));
    Some(ArgRule {
        id,
        server,
        names: names?,
        args: args?,
        decision: decision?,
        reason,
    })
}

const SENSITIVE_SUFFIXES: &[&str] = &[
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIALS",
    "CREDENTIAL",
    "PAT",
    "AUTH",
];
const SECRET_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "sk-",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "glpat-",
    "npm_",
];

pub(crate) fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn sensitive_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SENSITIVE_SUFFIXES
        .iter()
        .any(|s| upper == *s || upper.ends_with(&format!("_{s}")))
}

/// A policy `env` value that is a secret written out: by its name, by its
/// shape (what `gatehouse protect` would move to the keyring), or a URL
/// carrying a password. The policy file's text is kept in the database as
/// the last good policy, so none may pass.
fn plain_text_secret(name: &str, value: &str) -> bool {
    use gatehouse_vault::detect;
    sensitive_name(name)
        || SECRET_PREFIXES.iter().any(|p| value.starts_with(p))
        || detect::env_secret(name, value).is_some()
        || detect::connection_password(value).is_some()
}

fn check_server(c: &mut Checker<'_>, path: &KeyPath, s: &RawServer) -> Option<ServerEntry> {
    let mut ok = true;
    let tool_allowlist = match &s.tool_allowlist {
        Some(list) => {
            let g = c.globs(&path.key("tool_allowlist"), list, GlobKind::Name);
            ok &= g.is_some();
            g
        }
        // A restricted entry without a list exposes nothing, also when merged
        // with a layer that does list tools.
        None if s.trust == Some(RawTrust::Restricted) => Some(Globs::empty()),
        None => None,
    };
    let mut env = BTreeMap::new();
    for (name, value) in s.env.iter().flatten() {
        let p = path.key("env").key(name);
        if !valid_env_name(name) {
            c.err_key(&p, "not a valid environment variable name");
            ok = false;
            continue;
        }
        if let Some(reference) = value.strip_prefix("vault:") {
            if !valid_id(reference) {
                c.err(
                    &p,
                    "vault reference must be `vault:NAME` (letters, digits, `_`, `-`, `.`)",
                );
                ok = false;
            } else {
                env.insert(name.clone(), EnvValue::Vault(reference.to_owned()));
            }
        } else if plain_text_secret(name, value) {
            // Never echo the value: it may be a real secret.
            c.err(
                &p,
                format!(
                    "looks like a secret in plain text; store it with `gatehouse vault set` and write `{name} = \"vault:{name}\"`"
                ),
            );
            ok = false;
        } else {
            env.insert(name.clone(), EnvValue::Literal(value.clone()));
        }
    }
    let mut pass_env = None;
    if let Some(names) = &s.pass_env {
        for (i, n) in names.iter().enumerate() {
            if !valid_env_name(n) {
                c.err(
                    &path.key("pass_env").index(i),
                    "not a valid environment variable name",
                );
                ok = false;
            }
        }
        pass_env = Some(names.iter().cloned().collect::<BTreeSet<_>>());
    }
    ok.then(|| ServerEntry {
        trust: s.trust.map(Trust::from),
        tool_allowlist: tool_allowlist.into_iter().collect(),
        env,
        pass_env,
    })
}

fn check_custom_pattern(
    c: &mut Checker<'_>,
    path: &KeyPath,
    p: &RawCustomPattern,
) -> Option<CustomPattern> {
    let id = match &p.id {
        Some(id) if valid_id(id) => Some(id.clone()),
        Some(_) => {
            c.err(
                &path.key("id"),
                "ids use letters, digits, `_`, `-`, `.` (at most 64)",
            );
            None
        }
        None => {
            c.err(path, "missing `id`");
            None
        }
    };
    let regex = match &p.regex {
        Some(r) => match compile_regex(r) {
            Ok(re) => Some(re),
            Err(e) => {
                c.err(&path.key("regex"), e);
                None
            }
        },
        None => {
            c.err(path, "missing `regex`");
            None
        }
    };
    let family = match &p.family {
        Some(f)
            if !f.is_empty()
                && f.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
        {
            Some(f.clone())
        }
        Some(_) => {
            c.err(
                &path.key("family"),
                "families are lower-case words (`a-z`, `0-9`, `_`)",
            );
            None
        }
        None => {
            c.err(path, "missing `family` (e.g. \"exfiltration\")");
            None
        }
    };
    let severity = match p.severity {
        Some(s) => Some(Severity::from(s)),
        None => {
            c.err(path, "missing `severity` (low, medium, high or critical)");
            None
        }
    };
    Some(CustomPattern {
        id: id?,
        regex: regex?,
        family: family?,
        severity: severity?,
    })
}

fn check_cross_server(c: &mut Checker<'_>, path: &KeyPath, cs: &RawCrossServer, layer: &mut Layer) {
    for key in ["shadowing", "shadow_tool"] {
        let present = if key == "shadowing" {
            cs.shadowing.is_some()
        } else {
            cs.shadow_tool.is_some()
        };
        if present {
            c.err_key(
                &path.key(key),
                "shadowing detection is always on and cannot be configured; remove this key",
            );
        }
    }
    if let Some(r) = &cs.read_then_send {
        let p = path.key("read_then_send");
        c.range(&p.key("window_secs"), r.window_secs, 1, 3600);
        if r.same_turn_only.is_some() {
            c.err_key(
                &p.key("same_turn_only"),
                "only applies to `cross_server.flow`",
            );
        }
    }
    if let Some(r) = &cs.flow {
        c.range(&path.key("flow").key("window_secs"), r.window_secs, 1, 3600);
    }
    if let Some(b) = &cs.burst {
        let p = path.key("burst");
        c.range(&p.key("max_calls"), b.max_calls, 1, 10_000);
        c.range(&p.key("window_secs"), b.window_secs, 1, 3600);
        c.range(&p.key("cooldown_secs"), b.cooldown_secs, 0, 3600);
    }
    if let Some(r) = &cs.rate_limit {
        let p = path.key("rate_limit");
        c.range(&p.key("calls_per_minute"), r.calls_per_minute, 1, 100_000);
        c.range(&p.key("burst"), r.burst, 1, 100_000);
        for (name, o) in r.per_server.iter().flatten() {
            let sp = p.key("per_server").key(name);
            c.range(&sp.key("calls_per_minute"), o.calls_per_minute, 1, 100_000);
            c.range(&sp.key("burst"), o.burst, 1, 100_000);
            if o.calls_per_minute.is_none() && o.burst.is_none() {
                c.err_key(&sp, "sets neither `calls_per_minute` nor `burst`");
            }
            layer.rate_overrides.push((
                name.clone(),
                RateOverride {
                    calls_per_minute: o.calls_per_minute,
                    burst: o.burst,
                },
            ));
        }
    }
    if let Some(t) = &cs.typosquat {
        let p = path.key("typosquat");
        for (key, v) in [
            ("server_threshold", t.server_threshold),
            ("package_threshold", t.package_threshold),
        ] {
            if let Some(v) = v {
                if !(0.5..1.0).contains(&v) {
                    c.err(
                        &p.key(key),
                        "must be at least 0.5 and below 1.0 (1.0 would never fire)",
                    );
                }
            }
        }
    }
    for (glob, class) in cs.classification.iter().flatten() {
        let p = path.key("classification").key(glob);
        match compile_glob(glob, GlobKind::Name) {
            Ok(_) => {
                if let Ok(g) = Globs::new(std::slice::from_ref(glob), GlobKind::Name) {
                    layer
                        .classification
                        .push((glob.clone(), g, ToolClass::from(*class)));
                }
            }
            Err(e) => c.err_key(&p, e),
        }
    }
}
