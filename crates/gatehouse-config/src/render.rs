//! Policy → TOML text: the effective policy for `policy show`, and locked
//! policies generated from what was observed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::matching::{glob_escape, Globs};
use crate::policy::{ArgMatch, NameMatch, Policy, ToolRule};
use crate::raw::*;

fn list(g: &Globs) -> Vec<String> {
    g.patterns.clone()
}

fn tool_rules(rules: &[ToolRule]) -> Vec<RawToolRule> {
    rules
        .iter()
        .map(|r| RawToolRule {
            server: r.server.patterns.first().cloned(),
            tool: r.tool.patterns.first().cloned(),
            content_hash: r.content_hash.clone(),
        })
        .collect()
}

impl Policy {
    /// The effective policy as `policy.toml` text. For a single layer,
    /// parsing this text gives back the same policy. When several layers
    /// each set an allowlist (all of which must hold), the extra lists are
    /// listed in comments at the end, since one file holds one list per key.
    pub fn to_toml(&self) -> String {
        let mut extra: Vec<String> = Vec::new();
        let server_policy = RawServerPolicy {
            mode: Some(if !self.server_allow.is_empty() {
                RawListMode::Allowlist
            } else if !self.server_deny.is_empty() {
                RawListMode::Denylist
            } else {
                RawListMode::None
            }),
            allow: self.server_allow.first().map(list),
            deny: (!self.server_deny.is_empty()).then(|| list(&self.server_deny)),
            allowed_commands: self.commands.first().map(|c| c.patterns.clone()),
        };
        for g in self.server_allow.iter().skip(1) {
            extra.push(format!(
                "server_policy.allow (also required) = {:?}",
                g.patterns
            ));
        }
        for c in self.commands.iter().skip(1) {
            extra.push(format!(
                "server_policy.allowed_commands (also required) = {:?}",
                c.patterns
            ));
        }
        let tool_policy = RawToolPolicy {
            mode: Some(if !self.tool_allow.is_empty() {
                RawListMode::Allowlist
            } else if !self.tool_deny.is_empty() {
                RawListMode::Denylist
            } else {
                RawListMode::None
            }),
            blocked_tools: Some(list(&self.blocked_tools)),
            allow: self.tool_allow.first().map(|r| tool_rules(r)),
            deny: (!self.tool_deny.is_empty()).then(|| tool_rules(&self.tool_deny)),
        };
        for layer in self.tool_allow.iter().skip(1) {
            let entries: Vec<String> = layer
                .iter()
                .map(|r| {
                    format!(
                        "{}/{}{}",
                        r.server.patterns.join(","),
                        r.tool.patterns.join(","),
                        r.content_hash
                            .as_deref()
                            .map(|h| format!("@{h}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            extra.push(format!("tool_policy.allow (also required) = {entries:?}"));
        }
        let rules: Vec<RawRule> = self
            .rules
            .iter()
            .map(|r| {
                let (tool_name, tool_name_regex, tool_name_any) = match &r.names {
                    NameMatch::Glob(g) if g.patterns.len() == 1 => {
                        (g.patterns.first().cloned(), None, None)
                    }
                    NameMatch::Glob(g) => (None, None, Some(list(g))),
                    NameMatch::Regex(re) => {
                        let src = re.as_str();
                        let inner = src
                            .strip_prefix("^(?:")
                            .and_then(|s| s.strip_suffix(")$"))
                            .unwrap_or(src);
                        (None, Some(inner.to_owned()), None)
                    }
                };
                let argument_patterns = match &r.args {
                    ArgMatch::Any => None,
                    ArgMatch::Anywhere(g) => Some(RawArgumentPatterns::Anywhere(list(g))),
                    ArgMatch::ByArgument(v) => Some(RawArgumentPatterns::ByArgument(
                        v.iter()
                            .map(|(k, g)| (k.clone(), RawOneOrMany::Many(list(g))))
                            .collect(),
                    )),
                };
                RawRule {
                    id: Some(r.id.clone()),
                    server: r.server.as_ref().and_then(|g| g.patterns.first().cloned()),
                    tool_name,
                    tool_name_regex,
                    tool_name_any,
                    argument_patterns,
                    decision: Some(r.decision.into()),
                    reason: Some(r.reason.clone()),
                }
            })
            .collect();

        let mut servers: BTreeMap<String, RawServer> = BTreeMap::new();
        for (_, key, e) in &self.servers {
            let s = servers.entry(key.clone()).or_default();
            if let Some(t) = e.trust {
                let t = s.trust.map_or(t, |old| Trust::from(old).max(t));
                s.trust = Some(t.into());
            }
            for g in &e.tool_allowlist {
                if s.tool_allowlist.is_none() {
                    s.tool_allowlist = Some(list(g));
                } else {
                    extra.push(format!(
                        "servers.{key}.tool_allowlist (also required) = {:?}",
                        g.patterns
                    ));
                }
            }
            for (name, v) in &e.env {
                let text = match v {
                    crate::policy::EnvValue::Vault(r) => format!("vault:{r}"),
                    crate::policy::EnvValue::Literal(l) => l.clone(),
                };
                s.env
                    .get_or_insert_with(BTreeMap::new)
                    .entry(name.clone())
                    .or_insert(text);
            }
            if let Some(p) = &e.pass_env {
                s.pass_env = Some(match s.pass_env.take() {
                    None => p.iter().cloned().collect(),
                    Some(acc) => acc.into_iter().filter(|n| p.contains(n)).collect(),
                });
            }
        }

        let cs = &self.cross_server;
        let mut per_server: BTreeMap<String, RawRateOverride> = BTreeMap::new();
        for layer in &cs.rate_layers {
            for (key, _) in &layer.overrides {
                let eff = cs.rate_limit_for(key.as_str());
                per_server.insert(
                    key.clone(),
                    RawRateOverride {
                        calls_per_minute: Some(u64::from(eff.calls_per_minute)),
                        burst: Some(u64::from(eff.burst)),
                    },
                );
            }
        }
        let default_rate = cs.rate_limit_for("");
        let classification: BTreeMap<String, RawToolClass> = cs
            .classification
            .iter()
            .map(|(k, _, c)| (k.clone(), RawToolClass::from(*c)))
            .collect();

        let raw = RawPolicy {
            base: None,
            mode: Some(self.mode.into()),
            fail_closed: Some(self.fail_closed),
            server_policy: Some(server_policy),
            tool_policy: Some(tool_policy),
            rules: (!rules.is_empty()).then_some(rules),
            servers: (!servers.is_empty()).then_some(servers),
            tool_lists: Some(RawToolLists {
                lock_tool_list: Some(self.tool_lists.lock_tool_list),
                refresh_coalesce_secs: Some(self.tool_lists.refresh_coalesce.as_secs()),
                max_tools_per_server: Some(u64::from(self.tool_lists.max_tools_per_server)),
            }),
            pinning: Some(RawPinning {
                on_change: Some(self.pinning.on_change.into()),
                auto_trust_first: Some(self.pinning.auto_trust_first),
                launch_pinning: Some(self.pinning.launch_pinning),
                on_launch_change: Some(self.pinning.on_launch_change.into()),
            }),
            scanner: Some(RawScanner {
                definitions: Some(self.scanner.definitions),
                outputs: Some(self.scanner.outputs),
                result_action: Some(self.scanner.result_action.into()),
                spotlight_results: Some(self.scanner.spotlight_results),
                custom_patterns: (!self.scanner.custom_patterns.is_empty()).then(|| {
                    self.scanner
                        .custom_patterns
                        .iter()
                        .map(|p| RawCustomPattern {
                            id: Some(p.id.clone()),
                            regex: Some(p.regex.as_str().to_owned()),
                            family: Some(p.family.clone()),
                            severity: Some(p.severity.into()),
                        })
                        .collect()
                }),
            }),
            requests: Some(RawRequests {
                elicitation: Some(self.requests.elicitation.into()),
                elicitation_sensitive_fields: Some(
                    self.requests.elicitation_sensitive_fields.into(),
                ),
                sampling: Some(self.requests.sampling.into()),
                sampling_include_context: Some(self.requests.sampling_include_context.into()),
                roots: Some(self.requests.roots.into()),
            }),
            limits: Some(RawLimits {
                max_frame_bytes: Some(self.limits.max_frame_bytes),
                scan_budget_ms: Some(
                    u64::try_from(self.limits.scan_budget.as_millis()).unwrap_or(u64::MAX),
                ),
                db_busy_ms: Some(
                    u64::try_from(self.limits.db_busy.as_millis()).unwrap_or(u64::MAX),
                ),
                event_retention_days: Some(u64::from(self.limits.event_retention_days)),
                db_max_mb: Some(self.limits.db_max_bytes / (1024 * 1024)),
            }),
            cross_server: Some(RawCrossServer {
                read_then_send: Some(RawFlowRule {
                    mode: Some(cs.read_then_send.mode.into()),
                    window_secs: Some(cs.read_then_send.window.as_secs()),
                    same_turn_only: None,
                }),
                flow: Some(RawFlowRule {
                    mode: Some(cs.flow.mode.into()),
                    window_secs: Some(cs.flow.window.as_secs()),
                    same_turn_only: Some(cs.flow.same_turn_only),
                }),
                burst: Some(RawBurst {
                    enabled: Some(cs.burst.enabled),
                    max_calls: Some(u64::from(cs.burst.max_calls)),
                    window_secs: Some(cs.burst.window.as_secs()),
                    cooldown_secs: Some(cs.burst.cooldown.as_secs()),
                }),
                rate_limit: Some(RawRateLimit {
                    enabled: Some(cs.rate_limit_enabled),
                    calls_per_minute: Some(u64::from(default_rate.calls_per_minute)),
                    burst: Some(u64::from(default_rate.burst)),
                    per_server: (!per_server.is_empty()).then_some(per_server),
                }),
                typosquat: Some(RawTyposquat {
                    server_names: Some(cs.typosquat.server_names),
                    server_threshold: Some(cs.typosquat.server_threshold),
                    packages: Some(cs.typosquat.packages),
                    package_threshold: Some(cs.typosquat.package_threshold),
                }),
                classification: (!classification.is_empty()).then_some(classification),
                shadowing: None,
                shadow_tool: None,
            }),
        };
        let mut out = String::from(
            "# Effective Gatehouse policy (all layers merged, defaults filled in).\n\n",
        );
        match toml::to_string(&raw) {
            Ok(text) => out.push_str(&text),
            Err(e) => {
                let _ = writeln!(out, "# cannot render policy: {e}");
            }
        }
        if !extra.is_empty() {
            out.push_str(
                "\n# Further allowlists from other layers; a value must satisfy each of them:\n",
            );
            for line in extra {
                let _ = writeln!(out, "#   {line}");
            }
        }
        out
    }
}

/// A locked policy from what was observed: a server allowlist, a tool
/// allowlist pinned to each tool's content hash, and the tools that were
/// blocked as commented-out allow entries for a person to review.
/// `servers`: (server name, [(tool, content hash)]); `blocked`: (server, tool).
pub fn generate_locked_policy(
    servers: &[(String, Vec<(String, String)>)],
    blocked: &[(String, String)],
) -> String {
    let mut out = String::new();
    out.push_str("# Locked Gatehouse policy generated from observed servers and tools.\n");
    out.push_str("# Only these servers and these exact tool definitions are allowed;\n");
    out.push_str("# a changed definition no longer matches its content_hash and is blocked.\n\n");
    out.push_str("mode = \"enforce\"\n\n[server_policy]\nmode = \"allowlist\"\nallow = [");
    let mut names: Vec<&String> = servers.iter().map(|(s, _)| s).collect();
    names.sort();
    names.dedup();
    let quoted: Vec<String> = names.iter().map(|n| toml_string(&glob_escape(n))).collect();
    out.push_str(&quoted.join(", "));
    out.push_str("]\n\n[tool_policy]\nmode = \"allowlist\"\nallow = [\n");
    for (server, tools) in servers {
        let mut tools = tools.clone();
        tools.sort();
        for (tool, hash) in tools {
            let _ = writeln!(
                out,
                "  {{ server = {}, tool = {}, content_hash = {} }},",
                toml_string(&glob_escape(server)),
                toml_string(&glob_escape(&tool)),
                toml_string(&hash)
            );
        }
    }
    out.push_str("]\n");
    if !blocked.is_empty() {
        out.push_str("\n# --- Blocked while observed; review, then move a line into `allow` above to allow it ---\n");
        for (server, tool) in blocked {
            let _ = writeln!(
                out,
                "#  {{ server = {}, tool = {} }},",
                toml_string(&glob_escape(server)),
                toml_string(&glob_escape(tool))
            );
        }
    }
    out
}

/// A TOML basic string.
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
