//! Tool pins: which definition of each tool a person (or first sight) trusted,
//! and the judgement of a newly listed definition against them.

use std::collections::HashMap;

use crate::settings::OnChange;

/// Stored state of one tool's pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinState {
    Trusted,
    Held,
    Quarantined,
    Rejected,
}

/// One pin as loaded from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinEntry {
    /// The approved hash (None when never approved, e.g. a held new tool).
    pub approved_hash: Option<String>,
    pub state: PinState,
    /// The hash waiting for a decision, when held or quarantined.
    pub pending_hash: Option<String>,
}

/// All pins of one server, by tool name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PinTable {
    pub pins: HashMap<String, PinEntry>,
}

impl PinTable {
    pub fn get(&self, tool: &str) -> Option<&PinEntry> {
        self.pins.get(tool)
    }

    pub fn is_empty(&self) -> bool {
        self.pins.is_empty()
    }
}

/// What to do with one listed tool definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolJudgement {
    /// Pinned hash matches (or was just approved): expose.
    Expose,
    /// First sight in a trusting session: pin and expose.
    TrustFirst,
    /// Changed against its pin, exposed per `on_change` (alert/allow).
    ExposeChanged {
        previous: Option<String>,
        repin: bool,
    },
    /// Withhold until approved; the reason says why.
    Hold {
        reason: &'static str,
        previous: Option<String>,
    },
    /// Withhold: the scanner flagged it and nobody approved this hash.
    Quarantine,
}

/// Judges one definition. `flagged` means a high/critical scanner finding.
pub fn judge(
    pin: Option<&PinEntry>,
    hash: &str,
    flagged: bool,
    trust_first_sight: bool,
    on_change: OnChange,
    lock_tool_list: bool,
) -> ToolJudgement {
    let approved = pin.and_then(|p| p.approved_hash.as_deref());
    if approved == Some(hash) && pin.is_some_and(|p| p.state != PinState::Rejected) {
        return ToolJudgement::Expose;
    }
    if flagged {
        return ToolJudgement::Quarantine;
    }
    let previous = approved.map(str::to_string);
    match pin {
        None if trust_first_sight => ToolJudgement::TrustFirst,
        None => ToolJudgement::Hold {
            reason: if lock_tool_list {
                "tool list locked"
            } else {
                "new tool"
            },
            previous: None,
        },
        Some(p) if p.state == PinState::Rejected && p.pending_hash.as_deref() == Some(hash) => {
            ToolJudgement::Hold {
                reason: "rejected definition",
                previous,
            }
        }
        Some(_) if approved.is_none() => ToolJudgement::Hold {
            reason: "not yet approved",
            previous,
        },
        Some(_) if lock_tool_list => ToolJudgement::Hold {
            reason: "tool list locked",
            previous,
        },
        Some(_) => match on_change {
            OnChange::Block => ToolJudgement::Hold {
                reason: "definition changed",
                previous,
            },
            OnChange::Alert => ToolJudgement::ExposeChanged {
                previous,
                repin: false,
            },
            OnChange::Allow => ToolJudgement::ExposeChanged {
                previous,
                repin: true,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(hash: &str) -> PinEntry {
        PinEntry {
            approved_hash: Some(hash.into()),
            state: PinState::Trusted,
            pending_hash: None,
        }
    }

    fn check(pin: Option<PinEntry>, hash: &str, flagged: bool, first: bool, expect: ToolJudgement) {
        let got = judge(pin.as_ref(), hash, flagged, first, OnChange::Block, false);
        assert_eq!(
            got, expect,
            "pin {pin:?} hash {hash} flagged {flagged} first {first}"
        );
    }

    #[test]
    fn judgements() {
        check(
            Some(trusted("h1")),
            "h1",
            false,
            false,
            ToolJudgement::Expose,
        );
        check(None, "h1", false, true, ToolJudgement::TrustFirst);
        check(
            None,
            "h1",
            false,
            false,
            ToolJudgement::Hold {
                reason: "new tool",
                previous: None,
            },
        );
        check(
            Some(trusted("h1")),
            "h2",
            false,
            false,
            ToolJudgement::Hold {
                reason: "definition changed",
                previous: Some("h1".into()),
            },
        );
        // A flagged definition is quarantined even at first sight...
        check(None, "h1", true, true, ToolJudgement::Quarantine);
        // ...unless a person approved exactly this hash after reading the findings.
        check(
            Some(trusted("h1")),
            "h1",
            true,
            false,
            ToolJudgement::Expose,
        );
    }

    #[test]
    fn on_change_alert_exposes_without_repinning() {
        let pin = trusted("h1");
        assert_eq!(
            judge(Some(&pin), "h2", false, false, OnChange::Alert, false),
            ToolJudgement::ExposeChanged {
                previous: Some("h1".into()),
                repin: false
            }
        );
        assert_eq!(
            judge(Some(&pin), "h2", false, false, OnChange::Alert, true),
            ToolJudgement::Hold {
                reason: "tool list locked",
                previous: Some("h1".into())
            },
            "a locked tool list refuses changes whatever on_change says"
        );
    }
}
