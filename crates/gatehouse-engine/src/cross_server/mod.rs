//! Cross-server rules (issue 5): the calls of every wrap process of one
//! client session, judged together. Pure: the host loads the session's
//! recent calls (and what its store keeps of their results) and hands them
//! to [`decide`], then records what the decision says, in one transaction.
//!
//! Order of the rules (DESIGN §3, first block wins): shadowing,
//! read-then-send, cross-server flow, burst (with cool-down), rate limit.
//! An alert does not stop the chain; a later block replaces it.

pub mod batch;
pub mod classify;
pub mod taint;
pub mod typosquat;

#[cfg(test)]
mod tests;

pub use classify::{classify, ToolClass};
pub use taint::{ArgMarks, Link, TaintKey};

use crate::Severity;

/// `off` / `linked` / `strict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowMode {
    /// The rule is off.
    Off,
    /// Block when the call carries data of the earlier read; else alert.
    Linked,
    /// Block on the sequence alone.
    Strict,
}

/// One sequence rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSettings {
    pub mode: FlowMode,
    /// How far back an earlier read counts.
    pub window_ms: i64,
}

impl FlowSettings {
    /// How far back the rule looks: its window, or 0 when it is off.
    pub fn reach_ms(&self) -> i64 {
        if self.mode == FlowMode::Off {
            0
        } else {
            self.window_ms
        }
    }
}

/// More than `max_calls` calls of one server within `window_ms` → blocked
/// for `cooldown_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BurstSettings {
    pub max_calls: u32,
    pub window_ms: i64,
    pub cooldown_ms: i64,
}

/// Token bucket per (session, server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSettings {
    pub per_minute: u32,
    pub burst: u32,
}

impl RateSettings {
    /// Milliseconds for an empty bucket to refill.
    fn refill_ms(&self) -> i64 {
        let per = i64::from(self.per_minute.max(1));
        (i64::from(self.burst) * 60_000 + per - 1) / per
    }
}

/// The rules for one server, resolved by the host from the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossRules {
    pub read_then_send: FlowSettings,
    /// Mode `Off` when the policy turns it off or the server is trusted.
    pub flow: FlowSettings,
    pub burst: Option<BurstSettings>,
    pub rate: Option<RateSettings>,
    /// How long the session's other servers may look back at this server's
    /// calls: the longest sequence window of the policy, whatever this
    /// server's own checks (a trusted server's flow is off, but another
    /// server's flow rule still links to its reads). 0: none.
    pub session_reads_ms: i64,
}

impl Default for CrossRules {
    fn default() -> Self {
        CrossRules {
            read_then_send: FlowSettings {
                mode: FlowMode::Linked,
                window_ms: 30_000,
            },
            flow: FlowSettings {
                mode: FlowMode::Linked,
                window_ms: 30_000,
            },
            burst: Some(BurstSettings {
                max_calls: 20,
                window_ms: 5_000,
                cooldown_ms: 10_000,
            }),
            rate: Some(RateSettings {
                per_minute: 100,
                burst: 20,
            }),
            session_reads_ms: 30_000,
        }
    }
}

impl CrossRules {
    /// How far back [`decide`] needs the session's calls. The rate limit is
    /// computed from the recorded calls over twice its refill time.
    pub fn window_ms(&self) -> i64 {
        let mut w = self
            .session_reads_ms
            .max(self.read_then_send.reach_ms())
            .max(self.flow.reach_ms())
            .max(1);
        if let Some(b) = &self.burst {
            w = w.max(b.window_ms);
        }
        if let Some(r) = &self.rate {
            w = w.max(2 * r.refill_ms());
        }
        w
    }

    /// How far back [`decide`] needs the session's calls to judge a call of
    /// `class`: other servers' reads for the sequence rule that applies, and
    /// the server's own calls for burst and rate limit. Loading only these
    /// gives the same decision as loading the whole window.
    pub fn lookback(&self, class: ToolClass) -> Lookback {
        let send_rule = class == ToolClass::Send && self.read_then_send.mode != FlowMode::Off;
        let sequence = if send_rule {
            Some(self.read_then_send.window_ms)
        } else if self.flow.mode != FlowMode::Off {
            Some(self.flow.window_ms)
        } else {
            None
        };
        let burst = self.burst.map(|b| b.window_ms);
        let rate = self.rate.map(|r| 2 * r.refill_ms());
        Lookback {
            other_reads_ms: sequence,
            own_ms: burst.max(rate),
        }
    }

    /// Whether a call still matters to the session once the wrap of a
    /// server alone in it exits (`age_ms` old): a read while a sequence
    /// rule can still link a later call of another server to it, any call
    /// while it counts toward this server's burst or rate limit after a
    /// restart. Only these are written at exit.
    pub fn outlives_exit(&self, class: ToolClass, age_ms: i64) -> bool {
        let own = self.lookback(class).own_ms;
        (class.leaves_marks() && age_ms < self.session_reads_ms)
            || own.is_some_and(|ms| age_ms < ms)
    }

    /// Whether a call of `class` needs the taint marks of other servers'
    /// reads (only linked-mode sequence rules read them).
    pub fn needs_marks(&self, class: ToolClass) -> bool {
        match class {
            // A read is judged by links alone (see `decide`), in either mode.
            ToolClass::Read => self.flow.mode != FlowMode::Off,
            ToolClass::Send => {
                self.read_then_send.mode == FlowMode::Linked
                    || (self.read_then_send.mode == FlowMode::Off
                        && self.flow.mode == FlowMode::Linked)
            }
            _ => self.flow.mode == FlowMode::Linked,
        }
    }
}

/// What [`decide`] needs loaded for one call (see [`CrossRules::lookback`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookback {
    /// Other servers' reads this far back (None: not needed).
    pub other_reads_ms: Option<i64>,
    /// The calling server's own calls this far back (None: not needed).
    pub own_ms: Option<i64>,
}

/// The call being judged.
#[derive(Clone, Debug)]
pub struct CallFacts {
    pub server_id: String,
    pub tool: String,
    pub class: ToolClass,
    pub args: ArgMarks,
}

/// A recorded call of the session (this server's or another's).
#[derive(Clone, Copy, Debug)]
pub struct Prior<'a> {
    pub server_id: &'a str,
    pub tool: &'a str,
    pub class: ToolClass,
    pub time_ms: i64,
    /// Taint marks of its result, when attached and loaded.
    pub marks: Option<&'a [u8]>,
}

/// Another server of the session exposing the called tool's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShadowPeer {
    pub server_id: String,
    /// Same launch-command hash: the same server, not a shadow.
    pub same_command: bool,
    /// When that server's pin of the name was made (None: not pinned).
    pub pinned_ms: Option<i64>,
}

/// What shadowing needs: this server's pin time of the name and the peers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShadowFacts {
    pub own_pinned_ms: Option<i64>,
    pub peers: Vec<ShadowPeer>,
}

/// Pins of one name made this close together were made in one start-up:
/// neither server is older, the person chooses.
pub const SHADOW_TIE_MS: i64 = 30_000;

/// Burst cool-down state kept for a (session, server).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// Rate-limit tokens left when written (informational).
    pub tokens: f64,
    pub updated_ms: i64,
    pub cooldown_until_ms: i64,
}

/// An earlier call a finding refers to, redacted (no arguments, no result).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Related {
    pub server_id: String,
    pub tool: String,
    pub class: ToolClass,
    pub age_ms: i64,
    pub link: Option<Link>,
}

/// Why a call is blocked or alerted on.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossFinding {
    /// `cross_server.read_then_send`, `.flow`, `.shadowing`, `.burst`, `.rate_limit`.
    pub rule: &'static str,
    pub severity: Severity,
    pub reason: String,
    pub related: Vec<Related>,
    /// When the call could succeed again (bursts, rate limit).
    pub retry_after_ms: Option<i64>,
    /// Held for a person to decide (shadowing ties).
    pub hold: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum CrossVerdict {
    Allow,
    /// Passed, with a finding to report.
    Alert(CrossFinding),
    /// Would be blocked, but the server is in audit-only mode.
    Audit(CrossFinding),
    Block(CrossFinding),
}

/// The decision and what to record.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossDecision {
    pub verdict: CrossVerdict,
    /// Record the call in the session window (it passed).
    pub record: bool,
    /// Write this cool-down state for the calling server.
    pub bucket: Option<Bucket>,
}

impl CrossDecision {
    /// Audit-only: a block is recorded as audited and the call passes.
    pub fn audited(self) -> CrossDecision {
        match self.verdict {
            CrossVerdict::Block(f) => CrossDecision {
                verdict: CrossVerdict::Audit(f),
                record: true,
                bucket: None,
            },
            _ => self,
        }
    }

    /// `allow`, `alert`, `audit` or `block`: the outcome recorded with the call.
    pub fn outcome(&self) -> &'static str {
        match self.verdict {
            CrossVerdict::Allow => "allow",
            CrossVerdict::Alert(_) => "alert",
            CrossVerdict::Audit(_) => "audit",
            CrossVerdict::Block(_) => "block",
        }
    }
}

const MAX_RELATED: usize = 5;

fn related(call_now: i64, p: &Prior<'_>, link: Option<Link>) -> Related {
    Related {
        server_id: p.server_id.to_string(),
        tool: p.tool.to_string(),
        class: p.class,
        age_ms: call_now - p.time_ms,
        link,
    }
}

fn secs(ms: i64) -> i64 {
    (ms + 999) / 1000
}

/// How long ago a related call was, for a reason: whole seconds, and
/// "less than 1 s" below one (a read 3 ms earlier is not "1 s" ago).
fn age(ms: i64) -> String {
    if ms < 1000 {
        "less than 1 s".to_string()
    } else {
        format!("{} s", ms / 1000)
    }
}

/// The server's own most recent calls (redacted, newest first), for the
/// findings of the limits on its calls.
fn own_related(call_now: i64, own: &[&Prior<'_>], since_ms: i64) -> Vec<Related> {
    let mut rel: Vec<Related> = own
        .iter()
        .filter(|p| p.time_ms >= since_ms && p.time_ms <= call_now)
        .map(|p| related(call_now, p, None))
        .collect();
    rel.sort_by_key(|r| r.age_ms);
    rel.truncate(MAX_RELATED);
    rel
}

/// Judges one call against the session's recent calls (`prior`, any order),
/// the calling server's stored cool-down, and shadowing facts.
pub fn decide(
    rules: &CrossRules,
    call: &CallFacts,
    now_ms: i64,
    prior: &[Prior<'_>],
    bucket: Option<Bucket>,
    shadow: &ShadowFacts,
) -> CrossDecision {
    let block = |f: CrossFinding| CrossDecision {
        verdict: CrossVerdict::Block(f),
        record: false,
        bucket: None,
    };
    if let Some(f) = shadowing(call, shadow) {
        return block(f);
    }
    let mut alert = None;
    let send_rule = call.class == ToolClass::Send && rules.read_then_send.mode != FlowMode::Off;
    if send_rule {
        match sequence(call, now_ms, prior, rules.read_then_send, true) {
            Some(Seq::Block(f)) => return block(f),
            Some(Seq::Alert(f)) => alert = Some(f),
            None => {}
        }
    } else if rules.flow.mode != FlowMode::Off {
        match sequence(call, now_ms, prior, rules.flow, false) {
            Some(Seq::Block(f)) => return block(f),
            Some(Seq::Alert(f)) => alert = Some(f),
            None => {}
        }
    }
    let own: Vec<&Prior<'_>> = prior
        .iter()
        .filter(|p| p.server_id == call.server_id)
        .collect();
    if let Some(b) = &rules.burst {
        let rel = || own_related(now_ms, &own, now_ms - b.window_ms.max(b.cooldown_ms));
        if let Some(until) = bucket.map(|b| b.cooldown_until_ms).filter(|u| *u > now_ms) {
            return block(burst_finding(call, until - now_ms, b, true, rel()));
        }
        let recent = own
            .iter()
            .filter(|p| p.time_ms > now_ms - b.window_ms)
            .count();
        if recent >= b.max_calls as usize {
            let until = now_ms + b.cooldown_ms;
            return CrossDecision {
                verdict: CrossVerdict::Block(burst_finding(call, b.cooldown_ms, b, false, rel())),
                record: false,
                bucket: (b.cooldown_ms > 0).then_some(Bucket {
                    tokens: 0.0,
                    updated_ms: now_ms,
                    cooldown_until_ms: until,
                }),
            };
        }
    }
    if let Some(r) = &rules.rate {
        let level = bucket_level(r, now_ms, &own);
        if level < 1.0 {
            let per_ms = f64::from(r.per_minute.max(1)) / 60_000.0;
            let wait = ((1.0 - level) / per_ms).ceil() as i64;
            return block(CrossFinding {
                rule: "cross_server.rate_limit",
                severity: Severity::Medium,
                reason: format!(
                    "{} calls of {} exceed its rate limit ({} per minute, burst {}); retry in {} s",
                    call.server_id,
                    call.tool,
                    r.per_minute,
                    r.burst,
                    secs(wait)
                ),
                related: own_related(now_ms, &own, now_ms - 2 * r.refill_ms()),
                retry_after_ms: Some(wait),
                hold: false,
            });
        }
    }
    CrossDecision {
        verdict: alert.map_or(CrossVerdict::Allow, CrossVerdict::Alert),
        record: true,
        bucket: None,
    }
}

fn burst_finding(
    call: &CallFacts,
    left_ms: i64,
    b: &BurstSettings,
    cooling: bool,
    related: Vec<Related>,
) -> CrossFinding {
    let what = if cooling {
        "is cooling down after a burst"
    } else {
        "made a burst"
    };
    CrossFinding {
        rule: "cross_server.burst",
        severity: Severity::High,
        reason: format!(
            "{} {what} (more than {} calls in {} s); calls blocked for {} s more",
            call.server_id,
            b.max_calls,
            secs(b.window_ms),
            secs(left_ms)
        ),
        related,
        retry_after_ms: Some(left_ms),
        hold: false,
    }
}

/// Token-bucket level now, from the server's recorded calls (each took one
/// token): min over each call time s of burst + rate·(now − s) − calls since s.
fn bucket_level(r: &RateSettings, now_ms: i64, own: &[&Prior<'_>]) -> f64 {
    let burst = f64::from(r.burst);
    let per_ms = f64::from(r.per_minute.max(1)) / 60_000.0;
    let horizon = now_ms - 2 * r.refill_ms();
    let mut times: Vec<i64> = own
        .iter()
        .map(|p| p.time_ms)
        .filter(|t| *t >= horizon && *t <= now_ms)
        .collect();
    times.sort_unstable();
    let n = times.len();
    let mut level = burst;
    for (i, t) in times.iter().enumerate() {
        let since = (n - i) as f64;
        level = level.min(burst + per_ms * (now_ms - t) as f64 - since);
    }
    level
}

enum Seq {
    Block(CrossFinding),
    Alert(CrossFinding),
}

fn sequence(
    call: &CallFacts,
    now_ms: i64,
    prior: &[Prior<'_>],
    rule: FlowSettings,
    send: bool,
) -> Option<Seq> {
    // Other servers' calls whose results left marks (reads, commands,
    // tools of unknown kind): a link to any of them is a flow. Only reads
    // count as the sequence alone, and not before a read: a read after a
    // read is what a session does all day, while one that carries another
    // server's data (a fetch whose URL holds it) is a flow in either mode.
    let sources: Vec<&Prior<'_>> = prior
        .iter()
        .filter(|p| {
            p.server_id != call.server_id
                && (p.class == ToolClass::Read || (p.class.leaves_marks() && p.marks.is_some()))
                && p.time_ms >= now_ms - rule.window_ms
                && p.time_ms <= now_ms
        })
        .collect();
    if sources.is_empty() {
        return None;
    }
    let mut rel: Vec<Related> = sources
        .iter()
        .rev()
        .map(|p| {
            let link = p.marks.and_then(|m| call.args.link(m));
            related(now_ms, p, link)
        })
        .collect();
    rel.sort_by_key(|r| (r.link.is_none(), r.age_ms));
    let linked = rel.iter().find(|r| r.link.is_some()).cloned();
    if linked.is_none() {
        rel.retain(|r| r.class == ToolClass::Read && call.class != ToolClass::Read);
        if rel.is_empty() {
            return None;
        }
    }
    rel.truncate(MAX_RELATED);
    let (rule_id, sev, what) = if send {
        ("cross_server.read_then_send", Severity::Critical, "sends")
    } else {
        ("cross_server.flow", Severity::High, "passes")
    };
    let kind = call.class.as_str();
    if let Some(l) = linked {
        let how = l.link.map_or("", Link::as_str);
        return Some(Seq::Block(CrossFinding {
            rule: rule_id,
            severity: sev,
            reason: format!(
                "{} ({kind}) {what} data read {} ago from {} by {} (matched a {how} of its result)",
                call.tool,
                age(l.age_ms),
                l.server_id,
                l.tool
            ),
            related: rel,
            retry_after_ms: None,
            hold: false,
        }));
    }
    let first = &rel[0];
    let reason = format!(
        "{} ({kind}) of {} follows a read by {} on {} {} earlier",
        call.tool,
        call.server_id,
        first.tool,
        first.server_id,
        age(first.age_ms)
    );
    if rule.mode == FlowMode::Strict {
        return Some(Seq::Block(CrossFinding {
            rule: rule_id,
            severity: sev,
            reason: format!("{reason} (strict mode)"),
            related: rel,
            retry_after_ms: None,
            hold: false,
        }));
    }
    Some(Seq::Alert(CrossFinding {
        rule: rule_id,
        severity: if send {
            Severity::Medium
        } else {
            Severity::Low
        },
        reason: format!("{reason}; no data of that read found in the call"),
        related: rel,
        retry_after_ms: None,
        hold: false,
    }))
}

fn shadowing(call: &CallFacts, facts: &ShadowFacts) -> Option<CrossFinding> {
    let own = facts.own_pinned_ms.unwrap_or(i64::MAX);
    for peer in facts.peers.iter().filter(|p| !p.same_command) {
        let other = peer.pinned_ms.unwrap_or(i64::MAX);
        let tie = own != i64::MAX && other != i64::MAX && (own - other).abs() < SHADOW_TIE_MS
            || own == other;
        let rel = vec![Related {
            server_id: peer.server_id.clone(),
            tool: call.tool.clone(),
            class: call.class,
            age_ms: 0,
            link: None,
        }];
        if tie {
            return Some(CrossFinding {
                rule: "cross_server.shadowing",
                severity: Severity::Critical,
                reason: tie_reason(&call.server_id, &peer.server_id, &call.tool),
                related: rel,
                retry_after_ms: None,
                hold: true,
            });
        }
        if other < own {
            return Some(CrossFinding {
                rule: "cross_server.shadowing",
                severity: Severity::Critical,
                reason: format!(
                    "the tool {} belongs to {}, which exposed it first; {} shadows it",
                    call.tool, peer.server_id, call.server_id
                ),
                related: rel,
                retry_after_ms: None,
                hold: false,
            });
        }
    }
    None
}

/// The reason of a shadowing tie. It names what resolves one: a tool the
/// tool policy denies (without a content hash) is withheld from that
/// server's list, so that server no longer exposes the name. A `[[rules]]`
/// block does not: it refuses the calls but the tool is still listed (and
/// may be allowed for other arguments), so the name is still shadowed.
fn tie_reason(server: &str, peer: &str, tool: &str) -> String {
    format!(
        "{server} and {peer} both expose the tool {tool} and neither is older; \
         held until a person chooses: deny it on one of them in policy.toml's \
         [tool_policy] (deny = [{{ server = \"{peer}\", tool = \"{tool}\" }}], with mode \
         \"denylist\" or \"allowlist\"), which withholds it from that server's tool list; \
         a [[rules]] block refuses its calls but leaves it listed, so it does not settle a tie"
    )
}

/// The answer a blocked call gets (DESIGN §4): an `isError` result naming
/// the rule and the reason (with the remaining cool-down for bursts).
pub fn blocked_answer(
    id: &gatehouse_protocol::RequestId,
    server_id: &str,
    tool: &str,
    finding: &CrossFinding,
) -> Vec<u8> {
    serde_json::to_vec(&blocked_value(id, server_id, tool, finding)).unwrap_or_default()
}

/// [`blocked_answer`] as a value (an element of a batch reply).
pub fn blocked_value(
    id: &gatehouse_protocol::RequestId,
    server_id: &str,
    tool: &str,
    finding: &CrossFinding,
) -> serde_json::Value {
    crate::relay::blocked_call_result(id, server_id, tool, finding.rule, &finding.reason)
}

/// The event for a decision: `mcp_cross_server_blocked` for blocks (and
/// audited blocks), `mcp_cross_server_alert` for alerts; evidence names the
/// related earlier calls (server, tool, class, age, how linked) and never
/// their data.
pub fn decision_event(tool: &str, verdict: &CrossVerdict) -> Option<crate::EngineEvent> {
    use crate::{Action, EngineEvent};
    let (kind, action, f) = match verdict {
        CrossVerdict::Allow => return None,
        CrossVerdict::Alert(f) => ("mcp_cross_server_alert", Action::Alert, f),
        CrossVerdict::Audit(f) => ("mcp_cross_server_blocked", Action::Audit, f),
        CrossVerdict::Block(f) if f.hold => ("mcp_cross_server_blocked", Action::Hold, f),
        CrossVerdict::Block(f) => ("mcp_cross_server_blocked", Action::Block, f),
    };
    let related: Vec<serde_json::Value> = f
        .related
        .iter()
        .map(|r| {
            serde_json::json!({
                "server": r.server_id,
                "tool": r.tool,
                "class": r.class.as_str(),
                "age_ms": r.age_ms,
                "linked": r.link.map(Link::as_str),
            })
        })
        .collect();
    let mut evidence = serde_json::json!({ "related": related });
    if let Some(ms) = f.retry_after_ms {
        evidence["retry_after_ms"] = ms.into();
    }
    let reason = if matches!(verdict, CrossVerdict::Audit(_)) {
        format!("audit-only: would block: {}", f.reason)
    } else {
        f.reason.clone()
    };
    Some(
        EngineEvent::new(kind, f.severity, action, f.rule)
            .tool(tool)
            .reason(reason)
            .evidence(evidence),
    )
}
