//! Protection state and how the tray shows it. Pure: time is passed in as
//! milliseconds since the Unix epoch.

/// Pause lengths offered in the tray menu, in minutes; the first is the default.
pub const PAUSE_CHOICES_MIN: [u32; 4] = [60, 15, 240, 480];

/// The default pause length (1 h).
pub const DEFAULT_PAUSE_MIN: u32 = PAUSE_CHOICES_MIN[0];

/// Whether wrapped servers are enforcing or only recording (audit-only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Every verdict is enforced.
    Active,
    /// Audit-only until the deadline; afterwards protection resumes by itself.
    Paused { until_ms: i64 },
}

impl Protection {
    /// A pause of `minutes` starting at `now_ms`.
    pub fn paused_for(now_ms: i64, minutes: u32) -> Self {
        Protection::Paused {
            until_ms: now_ms.saturating_add(i64::from(minutes) * 60_000),
        }
    }

    /// The state as of `now_ms`: a pause whose deadline has passed is over.
    pub fn at(self, now_ms: i64) -> Self {
        match self {
            Protection::Paused { until_ms } if until_ms > now_ms => self,
            _ => Protection::Active,
        }
    }

    /// Whole minutes (rounded up) until a pause ends; `None` when active.
    pub fn minutes_left(self, now_ms: i64) -> Option<i64> {
        match self.at(now_ms) {
            Protection::Paused { until_ms } => Some((until_ms - now_ms + 59_999) / 60_000),
            Protection::Active => None,
        }
    }
}

/// What the tray needs to know to draw itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrayStatus {
    pub protection: Protection,
    /// Pending consent requests plus recent high/critical blocks.
    pub attention: u32,
}

/// The icon the tray shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrayLook {
    Protected,
    /// Something needs the person; carries the count shown in the badge.
    Attention(u32),
    Paused,
}

/// Attention wins over paused: it asks for an action, and the tooltip still
/// says that protection is paused.
pub fn look(status: TrayStatus, now_ms: i64) -> TrayLook {
    if status.attention > 0 {
        return TrayLook::Attention(status.attention);
    }
    match status.protection.at(now_ms) {
        Protection::Active => TrayLook::Protected,
        Protection::Paused { .. } => TrayLook::Paused,
    }
}

/// Name of the tray icon file under `icons/tray/` (without `.png`).
pub fn icon_name(look: TrayLook) -> &'static str {
    match look {
        TrayLook::Protected => "protected",
        TrayLook::Paused => "paused",
        TrayLook::Attention(0) => "attention",
        TrayLook::Attention(1) => "attention-1",
        TrayLook::Attention(2) => "attention-2",
        TrayLook::Attention(3) => "attention-3",
        TrayLook::Attention(4) => "attention-4",
        TrayLook::Attention(5) => "attention-5",
        TrayLook::Attention(6) => "attention-6",
        TrayLook::Attention(7) => "attention-7",
        TrayLook::Attention(8) => "attention-8",
        TrayLook::Attention(9) => "attention-9",
        TrayLook::Attention(_) => "attention-9plus",
    }
}

/// Tooltip (and, on Linux, the label next to the icon is [`title`]).
pub fn tooltip(status: TrayStatus, now_ms: i64) -> String {
    let mode = match status.protection.minutes_left(now_ms) {
        None => "protected".to_string(),
        Some(min) => format!("paused, audit only — resumes in {}", human_minutes(min)),
    };
    match status.attention {
        0 => format!("Gatehouse — {mode}"),
        1 => format!("Gatehouse — {mode} — 1 item needs attention"),
        n => format!("Gatehouse — {mode} — {n} items need attention"),
    }
}

/// The short label shown beside the icon where the platform supports it.
pub fn title(look: TrayLook) -> Option<String> {
    match look {
        TrayLook::Attention(n) if n > 0 => Some(n.to_string()),
        _ => None,
    }
}

/// "45 min", "1 h", "1 h 30 min".
pub fn human_minutes(min: i64) -> String {
    let (h, m) = (min / 60, min % 60);
    match (h, m) {
        (0, m) => format!("{m} min"),
        (h, 0) => format!("{h} h"),
        (h, m) => format!("{h} h {m} min"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;

    fn check_look(protection: Protection, attention: u32, now: i64, expect: TrayLook) {
        let status = TrayStatus {
            protection,
            attention,
        };
        assert_eq!(
            look(status, now),
            expect,
            "look({status:?}) at t0+{}ms",
            now - T0
        );
    }

    #[test]
    fn looks() {
        let paused = Protection::paused_for(T0, DEFAULT_PAUSE_MIN);
        check_look(Protection::Active, 0, T0, TrayLook::Protected);
        check_look(paused, 0, T0, TrayLook::Paused);
        check_look(paused, 0, T0 + 59 * 60_000, TrayLook::Paused);
        // the pause resumes by itself at the deadline
        check_look(paused, 0, T0 + 60 * 60_000, TrayLook::Protected);
        check_look(paused, 2, T0, TrayLook::Attention(2));
        check_look(Protection::Active, 12, T0, TrayLook::Attention(12));
    }

    #[test]
    fn icon_names_cover_every_count() {
        let cases = [
            (TrayLook::Protected, "protected"),
            (TrayLook::Paused, "paused"),
            (TrayLook::Attention(1), "attention-1"),
            (TrayLook::Attention(9), "attention-9"),
            (TrayLook::Attention(10), "attention-9plus"),
            (TrayLook::Attention(u32::MAX), "attention-9plus"),
        ];
        for (look, expect) in cases {
            assert_eq!(icon_name(look), expect, "icon for {look:?}");
        }
    }

    #[test]
    fn default_pause_is_one_hour() {
        assert_eq!(DEFAULT_PAUSE_MIN, 60, "the issue asks for a 1 h default");
        assert_eq!(
            Protection::paused_for(T0, DEFAULT_PAUSE_MIN),
            Protection::Paused {
                until_ms: T0 + 3_600_000
            }
        );
    }

    #[test]
    fn tooltips() {
        let check = |protection, attention, now, expect: &str| {
            let got = tooltip(
                TrayStatus {
                    protection,
                    attention,
                },
                now,
            );
            assert_eq!(got, expect);
        };
        let paused = Protection::paused_for(T0, 90);
        check(Protection::Active, 0, T0, "Gatehouse — protected");
        check(
            Protection::Active,
            1,
            T0,
            "Gatehouse — protected — 1 item needs attention",
        );
        check(
            paused,
            3,
            T0,
            "Gatehouse — paused, audit only — resumes in 1 h 30 min — 3 items need attention",
        );
        // 1 ms into the last minute still says "1 min", never "0 min"
        check(
            paused,
            0,
            T0 + 89 * 60_000 + 1,
            "Gatehouse — paused, audit only — resumes in 1 min",
        );
        check(paused, 0, T0 + 90 * 60_000, "Gatehouse — protected");
    }

    #[test]
    fn title_only_for_attention() {
        assert_eq!(title(TrayLook::Attention(4)).as_deref(), Some("4"));
        assert_eq!(title(TrayLook::Paused), None);
        assert_eq!(title(TrayLook::Protected), None);
    }
}
