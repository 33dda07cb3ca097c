//! Native notifications as data: which events notify ([`Notice`]), how their
//! server-supplied text is cleaned ([`sanitize`]), how they read
//! ([`render`]), and the rate limit of at most one notification per kind per
//! window with the rest folded into "+N more" ([`Coalescer`]). Pure; the
//! D-Bus / OS delivery lives in `app.rs`.

use std::collections::BTreeMap;

/// Rate-limit window per kind.
pub const WINDOW_MS: i64 = 10_000;

/// Longest server name / detail shown, in characters.
pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DETAIL_CHARS: usize = 200;

/// What a notification is about; each kind is rate limited on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoticeKind {
    /// A high or critical block.
    Block,
    /// A tool definition changed and waits for approval.
    ToolChanged,
    /// A tool was quarantined on first sight.
    ToolQuarantined,
    /// A server asks the person for input (elicitation).
    InputRequest,
    /// A server is held before it starts: its launch changed, or its
    /// package looks like a typosquat.
    ServerHeld,
}

impl NoticeKind {
    /// Dashboard route listing every item of this kind (used for "+N more").
    /// Routes are the dashboard's own (`ui/src/main.ts`: `/events` with its
    /// filter query, `/consent`).
    pub fn list_route(self) -> &'static str {
        match self {
            NoticeKind::Block => "/events?severity=high&action=block",
            NoticeKind::ToolChanged
            | NoticeKind::ToolQuarantined
            | NoticeKind::InputRequest
            | NoticeKind::ServerHeld => "/consent",
        }
    }
}

/// Severity of a recorded decision, as far as notifications care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

/// Only high and critical blocks interrupt the person.
pub fn block_notifies(severity: Severity) -> bool {
    severity >= Severity::High
}

/// One thing worth a notification. `server` and `detail` may come from a
/// server and are untrusted until [`render`] cleans them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    /// Display name of the server concerned.
    pub server: String,
    /// Short reason, tool name, or question.
    pub detail: String,
    /// Dashboard route that shows this item (clicking opens it).
    pub route: String,
}

/// A notification ready for the OS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub kind: NoticeKind,
    pub summary: String,
    pub body: String,
    /// Dashboard route to open on click.
    pub route: String,
}

/// Removes what a server could use to spoof or hide text: control
/// characters (newlines and tabs become spaces), bidi embeddings, overrides,
/// isolates and marks, zero-width characters and other invisible format
/// characters. Collapses whitespace and cuts to `max_chars` with "…".
pub fn sanitize(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut pending_space = false;
    let mut count = 0usize;
    for c in text.chars() {
        if is_hidden(c) {
            continue;
        }
        if c.is_whitespace() || c.is_control() {
            pending_space = !out.is_empty();
            continue;
        }
        if count == max_chars {
            out.push('…');
            return out;
        }
        if pending_space {
            if count + 1 == max_chars {
                out.push('…');
                return out;
            }
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        out.push(c);
        count += 1;
    }
    out
}

/// Invisible characters that never belong in a notification.
fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{00AD}'                  // soft hyphen
        | '\u{061C}'                // arabic letter mark
        | '\u{115F}' | '\u{1160}'   // hangul fillers
        | '\u{180E}'                // mongolian vowel separator
        | '\u{200B}'..='\u{200F}'   // zero width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}'   // LRE RLE PDF LRO RLO
        | '\u{2060}'..='\u{2064}'   // word joiner, invisible operators
        | '\u{2066}'..='\u{206F}'   // LRI RLI FSI PDI and deprecated format chars
        | '\u{3164}'                // hangul filler
        | '\u{FE00}'..='\u{FE0F}'   // variation selectors
        | '\u{FEFF}'                // BOM / ZWNBSP
        | '\u{FFF9}'..='\u{FFFB}'   // interlinear annotations
        | '\u{E0000}'..='\u{E007F}' // tag characters
    ) || (c.is_control() && !c.is_whitespace() && c != '\n' && c != '\t' && c != '\r')
}

/// Escapes the markup subset that Linux notification servers interpret in
/// the body (`<b>`, `<a href>`, entities).
pub fn escape_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// Text of a notification; `more` other notices of the same kind were folded
/// into it. The server's name is always in the summary.
pub fn render(notice: &Notice, more: usize) -> Rendered {
    let server = match sanitize(&notice.server, MAX_NAME_CHARS) {
        s if s.is_empty() => "(unnamed server)".to_string(),
        s => s,
    };
    let detail = sanitize(&notice.detail, MAX_DETAIL_CHARS);
    let summary = match notice.kind {
        NoticeKind::Block => format!("Gatehouse blocked {server}"),
        NoticeKind::ToolChanged => format!("{server} changed a tool — review needed"),
        NoticeKind::ToolQuarantined => format!("{server}: tool quarantined"),
        NoticeKind::InputRequest => format!("{server} is asking for input"),
        NoticeKind::ServerHeld => format!("Gatehouse held {server} — approval needed"),
    };
    let mut body = detail;
    if more > 0 {
        if !body.is_empty() {
            body.push('\n');
        }
        body.push_str(&format!("+{more} more"));
    }
    let route = if more > 0 {
        notice.kind.list_route().to_string()
    } else {
        safe_route(&notice.route, notice.kind)
    };
    Rendered {
        kind: notice.kind,
        summary,
        body,
        route,
    }
}

/// A click may only open a dashboard path: anything that is not a plain
/// absolute path (scheme, `//host`, backslashes, controls) falls back to
/// the kind's list.
fn safe_route(route: &str, kind: NoticeKind) -> String {
    let ok = route.starts_with('/')
        && !route.starts_with("//")
        && !route.contains('\\')
        && route.chars().all(|c| !c.is_control() && !c.is_whitespace());
    if ok {
        route.to_string()
    } else {
        kind.list_route().to_string()
    }
}

#[derive(Debug, Default)]
struct KindState {
    last_sent_ms: Option<i64>,
    pending: Vec<Notice>,
}

/// At most one notification per kind per [`WINDOW_MS`]; what arrives inside
/// the window waits and goes out as one notification ("+N more") when the
/// window has passed.
#[derive(Debug)]
pub struct Coalescer {
    window_ms: i64,
    kinds: BTreeMap<NoticeKind, KindState>,
}

impl Default for Coalescer {
    fn default() -> Self {
        Self::new(WINDOW_MS)
    }
}

impl Coalescer {
    pub fn new(window_ms: i64) -> Self {
        Self {
            window_ms,
            kinds: BTreeMap::new(),
        }
    }

    /// Offers a notice: returns it rendered when it may be shown now,
    /// otherwise keeps it for [`Coalescer::due`].
    pub fn offer(&mut self, notice: Notice, now_ms: i64) -> Option<Rendered> {
        let window = self.window_ms;
        let state = self.kinds.entry(notice.kind).or_default();
        let free = state
            .last_sent_ms
            .is_none_or(|last| now_ms - last >= window);
        if free && state.pending.is_empty() {
            state.last_sent_ms = Some(now_ms);
            return Some(render(&notice, 0));
        }
        state.pending.push(notice);
        None
    }

    /// Notifications whose window has passed: one per kind, the first
    /// waiting notice with "+N more" for the others.
    pub fn due(&mut self, now_ms: i64) -> Vec<Rendered> {
        let window = self.window_ms;
        let mut out = Vec::new();
        for state in self.kinds.values_mut() {
            if state.pending.is_empty() {
                continue;
            }
            if state
                .last_sent_ms
                .is_some_and(|last| now_ms - last < window)
            {
                continue;
            }
            let more = state.pending.len() - 1;
            out.push(render(&state.pending[0], more));
            state.pending.clear();
            state.last_sent_ms = Some(now_ms);
        }
        out
    }

    /// When [`Coalescer::due`] will next have something, if anything waits.
    pub fn next_due_ms(&self) -> Option<i64> {
        self.kinds
            .values()
            .filter(|s| !s.pending.is_empty())
            .map(|s| s.last_sent_ms.map_or(i64::MIN, |l| l + self.window_ms))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_sanitize(input: &str, max: usize, expect: &str) {
        assert_eq!(sanitize(input, max), expect, "sanitize({input:?}, {max})");
    }

    #[test]
    fn sanitize_strips_controls_and_bidi() {
        check_sanitize("github", 64, "github");
        check_sanitize("  git\nhub\t\x07x  ", 64, "git hub x");
        // RLO would show "gnp.exe" reversed; the override is removed, the text stays in order
        check_sanitize("evil\u{202E}gnp.exe", 64, "evilgnp.exe");
        check_sanitize("a\u{2066}b\u{2069}c\u{200F}d\u{061C}e", 64, "abcde");
        check_sanitize("zero\u{200B}width\u{FEFF}\u{2060}", 64, "zerowidth");
        check_sanitize("\u{1b}[31mred\u{1b}[0m", 64, "[31mred[0m");
        check_sanitize("tag\u{E0041}\u{E0042}s", 64, "tags");
        check_sanitize("\u{0085}next\u{2028}line", 64, "next line");
        check_sanitize("", 64, "");
        check_sanitize(" \n\t ", 64, "");
    }

    #[test]
    fn sanitize_cuts_long_text() {
        check_sanitize("abcdefghij", 5, "abcde…");
        check_sanitize("abcde", 5, "abcde");
        check_sanitize("abcd efgh", 5, "abcd…");
        check_sanitize("ééééééé", 3, "ééé…");
    }

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            escape_markup("<a href='x'>click</a> & more"),
            "&lt;a href='x'&gt;click&lt;/a&gt; &amp; more"
        );
    }

    fn notice(kind: NoticeKind, server: &str, detail: &str) -> Notice {
        Notice {
            kind,
            server: server.into(),
            detail: detail.into(),
            route: "/events/7".into(),
        }
    }

    #[test]
    fn render_names_the_server() {
        let cases = [
            (NoticeKind::Block, "Gatehouse blocked github"),
            (
                NoticeKind::ToolChanged,
                "github changed a tool — review needed",
            ),
            (NoticeKind::ToolQuarantined, "github: tool quarantined"),
            (NoticeKind::InputRequest, "github is asking for input"),
            (
                NoticeKind::ServerHeld,
                "Gatehouse held github — approval needed",
            ),
        ];
        for (kind, summary) in cases {
            let r = render(&notice(kind, "git\u{202E}hub", "x"), 0);
            assert_eq!(r.summary, summary, "summary for {kind:?}");
            assert_eq!(r.route, "/events/7", "a single notice opens its own item");
        }
        let nameless = render(&notice(NoticeKind::Block, "\u{200B}", "x"), 0);
        assert_eq!(nameless.summary, "Gatehouse blocked (unnamed server)");
    }

    #[test]
    fn render_refuses_foreign_routes() {
        for route in [
            "https://evil.example/",
            "//evil.example",
            "/a\\b",
            "/a b",
            "events",
        ] {
            let mut n = notice(NoticeKind::Block, "s", "d");
            n.route = route.into();
            assert_eq!(
                render(&n, 0).route,
                NoticeKind::Block.list_route(),
                "route {route:?} must not be opened"
            );
        }
    }

    #[test]
    fn only_high_and_critical_blocks_notify() {
        assert!(!block_notifies(Severity::Medium));
        assert!(block_notifies(Severity::High));
        assert!(block_notifies(Severity::Critical));
    }

    #[test]
    fn one_per_kind_per_window_then_plus_n_more() {
        let mut c = Coalescer::new(10_000);
        let t = 1_000_000;
        let first = c.offer(notice(NoticeKind::Block, "a", "1"), t);
        assert_eq!(
            first.map(|r| r.body),
            Some("1".to_string()),
            "first goes out at once"
        );
        assert_eq!(
            c.offer(notice(NoticeKind::Block, "b", "2"), t + 1_000),
            None
        );
        assert_eq!(
            c.offer(notice(NoticeKind::Block, "c", "3"), t + 2_000),
            None
        );
        assert_eq!(
            c.offer(notice(NoticeKind::Block, "d", "4"), t + 3_000),
            None
        );
        // another kind has its own budget
        assert!(c
            .offer(notice(NoticeKind::InputRequest, "e", "?"), t + 3_000)
            .is_some());
        assert_eq!(c.next_due_ms(), Some(t + 10_000));
        assert!(c.due(t + 9_999).is_empty(), "window not over yet");
        let due = c.due(t + 10_000);
        assert_eq!(due.len(), 1, "one coalesced notification, got {due:?}");
        assert_eq!(due[0].summary, "Gatehouse blocked b");
        assert_eq!(due[0].body, "2\n+2 more");
        assert_eq!(due[0].route, NoticeKind::Block.list_route());
        assert!(c.due(t + 30_000).is_empty(), "nothing left");
        // the flush started a new window
        assert_eq!(
            c.offer(notice(NoticeKind::Block, "f", "6"), t + 15_000),
            None
        );
        assert_eq!(c.due(t + 20_000).len(), 1);
        assert!(c
            .offer(notice(NoticeKind::Block, "g", "7"), t + 30_000)
            .is_some());
    }

    #[test]
    fn a_quiet_kind_is_not_delayed() {
        let mut c = Coalescer::default();
        assert!(c
            .offer(notice(NoticeKind::ToolChanged, "a", ""), 0)
            .is_some());
        assert!(c
            .offer(notice(NoticeKind::ToolChanged, "a", ""), WINDOW_MS)
            .is_some());
        assert_eq!(c.next_due_ms(), None);
    }
}
