//! The tray menu as data: [`build`] turns the current state into a tree of
//! [`MenuNode`]s, and every clickable node carries the id of a [`MenuAction`]
//! that [`MenuAction::parse`] reads back. The Tauri glue only translates the
//! tree into native items, so everything here is testable without a display.

use crate::state::{human_minutes, Protection, PAUSE_CHOICES_MIN};

/// One AI client as the menu shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClientItem {
    /// Stable id (`cursor`, `claude-desktop`, …), used in menu ids and commands.
    pub id: String,
    /// Display name ("Cursor").
    pub name: String,
    /// All of its MCP servers run behind `gatehouse wrap`.
    pub protected: bool,
    /// Number of MCP server entries found in its configs.
    pub servers: usize,
    /// How many of them run behind `gatehouse wrap` (a client can be partly
    /// protected; uninstall restores every wrapped entry).
    #[serde(default)]
    pub wrapped: usize,
}

/// What a menu click asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MenuAction {
    OpenDashboard,
    /// Protect the client when unprotected, unprotect it when protected.
    ToggleClient(String),
    ProtectAll,
    /// Pause protection (audit-only) for this many minutes.
    Pause(u32),
    Resume,
    ToggleAutostart,
    /// Show the uninstall page (it offers to unprotect every client first).
    Uninstall,
    Quit,
}

impl MenuAction {
    /// The menu item id that encodes this action.
    pub fn id(&self) -> String {
        match self {
            MenuAction::OpenDashboard => "open-dashboard".into(),
            MenuAction::ToggleClient(id) => format!("client:{id}"),
            MenuAction::ProtectAll => "protect-all".into(),
            MenuAction::Pause(min) => format!("pause:{min}"),
            MenuAction::Resume => "resume".into(),
            MenuAction::ToggleAutostart => "autostart".into(),
            MenuAction::Uninstall => "uninstall".into(),
            MenuAction::Quit => "quit".into(),
        }
    }

    /// Reads an id produced by [`MenuAction::id`]; anything else is `None`.
    pub fn parse(id: &str) -> Option<Self> {
        Some(match id {
            "open-dashboard" => MenuAction::OpenDashboard,
            "protect-all" => MenuAction::ProtectAll,
            "resume" => MenuAction::Resume,
            "autostart" => MenuAction::ToggleAutostart,
            "uninstall" => MenuAction::Uninstall,
            "quit" => MenuAction::Quit,
            _ => {
                if let Some(client) = id.strip_prefix("client:").filter(|c| !c.is_empty()) {
                    MenuAction::ToggleClient(client.to_string())
                } else if let Some(min) = id.strip_prefix("pause:") {
                    let min: u32 = min.parse().ok().filter(|m| *m > 0)?;
                    MenuAction::Pause(min)
                } else {
                    return None;
                }
            }
        })
    }
}

/// A node of the menu tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MenuNode {
    Item {
        id: String,
        label: String,
        enabled: bool,
    },
    Check {
        id: String,
        label: String,
        checked: bool,
    },
    Submenu {
        label: String,
        children: Vec<MenuNode>,
    },
    Separator,
}

/// Everything the menu depends on.
#[derive(Clone, Debug)]
pub struct MenuInput<'a> {
    pub clients: &'a [ClientItem],
    pub protection: Protection,
    pub now_ms: i64,
    pub autostart: bool,
    pub attention: u32,
}

/// Builds the tray menu.
pub fn build(input: &MenuInput<'_>) -> Vec<MenuNode> {
    let mut menu = Vec::new();
    let open_label = match input.attention {
        0 => "Open dashboard".to_string(),
        n => format!("Open dashboard ({n} need attention)"),
    };
    menu.push(item(MenuAction::OpenDashboard, open_label, true));
    menu.push(MenuNode::Separator);

    let clients: Vec<MenuNode> = if input.clients.is_empty() {
        vec![MenuNode::Item {
            id: "no-clients".into(),
            label: "No AI clients detected".into(),
            enabled: false,
        }]
    } else {
        input
            .clients
            .iter()
            .map(|c| MenuNode::Check {
                id: MenuAction::ToggleClient(c.id.clone()).id(),
                label: client_label(c),
                checked: c.protected,
            })
            .collect()
    };
    menu.push(MenuNode::Submenu {
        label: "Protect".into(),
        children: clients,
    });
    let any_unprotected = input.clients.iter().any(|c| !c.protected);
    menu.push(item(MenuAction::ProtectAll, "Protect all", any_unprotected));
    menu.push(MenuNode::Separator);

    match input.protection.minutes_left(input.now_ms) {
        None => menu.push(MenuNode::Submenu {
            label: "Pause protection (audit only)".into(),
            children: PAUSE_CHOICES_MIN
                .iter()
                .map(|&min| item(MenuAction::Pause(min), pause_label(min), true))
                .collect(),
        }),
        Some(left) => menu.push(item(
            MenuAction::Resume,
            format!(
                "Resume protection (resumes by itself in {})",
                human_minutes(left)
            ),
            true,
        )),
    }
    menu.push(MenuNode::Check {
        id: MenuAction::ToggleAutostart.id(),
        label: "Start at login".into(),
        checked: input.autostart,
    });
    menu.push(MenuNode::Separator);
    menu.push(item(MenuAction::Uninstall, "Uninstall Gatehouse…", true));
    menu.push(item(MenuAction::Quit, "Quit Gatehouse", true));
    menu
}

fn item(action: MenuAction, label: impl Into<String>, enabled: bool) -> MenuNode {
    MenuNode::Item {
        id: action.id(),
        label: label.into(),
        enabled,
    }
}

fn client_label(c: &ClientItem) -> String {
    match c.servers {
        1 => format!("{} (1 server)", c.name),
        n => format!("{} ({n} servers)", c.name),
    }
}

fn pause_label(min: u32) -> String {
    let text = format!("For {}", human_minutes(i64::from(min)));
    if min == crate::state::DEFAULT_PAUSE_MIN {
        format!("{text} (default)")
    } else {
        text
    }
}

/// Every action id reachable in `nodes`, depth first (handy for tests and
/// for checking that a click refers to an item that is really shown).
pub fn action_ids(nodes: &[MenuNode]) -> Vec<String> {
    let mut out = Vec::new();
    for node in nodes {
        match node {
            MenuNode::Item { id, enabled, .. } if *enabled => out.push(id.clone()),
            MenuNode::Check { id, .. } => out.push(id.clone()),
            MenuNode::Submenu { children, .. } => out.extend(action_ids(children)),
            _ => {}
        }
    }
    out
}

/// A plain-text rendering, one line per node, for tests and docs.
pub fn render(nodes: &[MenuNode]) -> String {
    fn go(nodes: &[MenuNode], depth: usize, out: &mut String) {
        for node in nodes {
            let pad = "  ".repeat(depth);
            match node {
                MenuNode::Item { label, enabled, .. } => {
                    let off = if *enabled { "" } else { " (disabled)" };
                    out.push_str(&format!("{pad}{label}{off}\n"));
                }
                MenuNode::Check { label, checked, .. } => {
                    let mark = if *checked { "[x]" } else { "[ ]" };
                    out.push_str(&format!("{pad}{mark} {label}\n"));
                }
                MenuNode::Submenu { label, children } => {
                    out.push_str(&format!("{pad}{label} >\n"));
                    go(children, depth + 1, out);
                }
                MenuNode::Separator => out.push_str(&format!("{pad}---\n")),
            }
        }
    }
    let mut out = String::new();
    go(nodes, 0, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;

    fn clients() -> Vec<ClientItem> {
        vec![
            ClientItem {
                id: "cursor".into(),
                name: "Cursor".into(),
                protected: true,
                servers: 3,
                wrapped: 3,
            },
            ClientItem {
                id: "claude-desktop".into(),
                name: "Claude Desktop".into(),
                protected: false,
                servers: 1,
                wrapped: 0,
            },
        ]
    }

    fn check(input: MenuInput<'_>, expect: &str) {
        let got = render(&build(&input));
        assert_eq!(got, expect, "menu for {input:?}");
    }

    #[test]
    fn active_with_clients() {
        check(
            MenuInput {
                clients: &clients(),
                protection: Protection::Active,
                now_ms: T0,
                autostart: true,
                attention: 0,
            },
            "Open dashboard
---
Protect >
  [x] Cursor (3 servers)
  [ ] Claude Desktop (1 server)
Protect all
---
Pause protection (audit only) >
  For 1 h (default)
  For 15 min
  For 4 h
  For 8 h
[x] Start at login
---
Uninstall Gatehouse…
Quit Gatehouse
",
        );
    }

    #[test]
    fn paused_without_clients_and_attention() {
        check(
            MenuInput {
                clients: &[],
                protection: Protection::paused_for(T0, 60),
                now_ms: T0 + 15 * 60_000,
                autostart: false,
                attention: 2,
            },
            "Open dashboard (2 need attention)
---
Protect >
  No AI clients detected (disabled)
Protect all (disabled)
---
Resume protection (resumes by itself in 45 min)
[ ] Start at login
---
Uninstall Gatehouse…
Quit Gatehouse
",
        );
    }

    #[test]
    fn expired_pause_offers_pause_again() {
        let nodes = build(&MenuInput {
            clients: &[],
            protection: Protection::paused_for(T0, 15),
            now_ms: T0 + 15 * 60_000,
            autostart: false,
            attention: 0,
        });
        let ids = action_ids(&nodes);
        assert!(
            ids.contains(&"pause:60".to_string()) && !ids.contains(&"resume".to_string()),
            "a pause past its deadline is over, so the menu must offer Pause, got {ids:?}"
        );
    }

    #[test]
    fn protect_all_disabled_when_everything_is_protected() {
        let mut all = clients();
        all.iter_mut().for_each(|c| c.protected = true);
        let nodes = build(&MenuInput {
            clients: &all,
            protection: Protection::Active,
            now_ms: T0,
            autostart: false,
            attention: 0,
        });
        assert!(
            !action_ids(&nodes).contains(&"protect-all".to_string()),
            "Protect all has nothing to do"
        );
    }

    #[test]
    fn every_shown_id_parses_back() {
        let nodes = build(&MenuInput {
            clients: &clients(),
            protection: Protection::Active,
            now_ms: T0,
            autostart: false,
            attention: 1,
        });
        for id in action_ids(&nodes) {
            let action = MenuAction::parse(&id)
                .unwrap_or_else(|| panic!("menu shows id {id:?} that no action owns"));
            assert_eq!(action.id(), id, "id round trip");
        }
    }

    #[test]
    fn parse_rejects_junk() {
        for id in [
            "",
            "client:",
            "pause:",
            "pause:0",
            "pause:-5",
            "pause:x",
            "Quit",
            "no-clients",
        ] {
            assert_eq!(MenuAction::parse(id), None, "{id:?} must not parse");
        }
        assert_eq!(
            MenuAction::parse("client:vs-code"),
            Some(MenuAction::ToggleClient("vs-code".into()))
        );
        assert_eq!(MenuAction::parse("pause:15"), Some(MenuAction::Pause(15)));
    }
}
