//! Per-client knowledge in one table: where each client keeps its MCP
//! config, in which format, under which key. Adding a client is adding an
//! entry to [`CLIENTS`] (and a fixture home under `tests/fixtures/`).

use std::path::{Path, PathBuf};

use crate::home::{HomeDirs, Os};

/// File format of a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Strict JSON (the client parses with `JSON.parse`); comments are still
    /// tolerated on read and kept on write.
    Json,
    /// JSON with comments and trailing commas.
    Jsonc,
    /// TOML (Codex).
    Toml,
}

/// One AI client.
#[derive(Debug)]
pub struct ClientSpec {
    /// Stable key used on the command line and in records (`cursor`).
    pub key: &'static str,
    /// Human name.
    pub name: &'static str,
    /// Format of its files.
    pub format: Format,
    /// Key of the server map (`mcpServers`, `servers`, `context_servers`, `mcp_servers`).
    pub servers_key: &'static str,
    /// User-level config files for the OS in `HomeDirs`.
    pub user_files: fn(&HomeDirs) -> Vec<PathBuf>,
    /// Project config file, relative to a project root.
    pub project_file: Option<&'static str>,
    /// Whether `~/.claude.json`-style per-project sections (`projects[path].mcpServers`) exist.
    pub per_project_sections: bool,
    /// The client rewrites this file itself while running: do not write while it runs.
    pub owns_file_while_running: bool,
    /// The client's own CLI that changes this file safely while the client
    /// runs (Claude Code: `claude mcp add-json` / `remove`), looked up on `PATH`.
    pub own_cli: Option<&'static str>,
    /// Process names (Linux `/proc/*/comm` or argv[0] basename) of the running client.
    pub process_names: &'static [&'static str],
    /// Flatpak application ids and Snap names of sandboxed builds.
    pub sandboxed_as: &'static [&'static str],
    /// Extra note for `gatehouse clients` (how it reloads).
    pub reload: &'static str,
    /// The client takes a lock directory `<file><suffix>` while writing
    /// (Cline: `.lock`); Gatehouse takes the same lock.
    pub lock_suffix: Option<&'static str>,
}

fn join(base: &Path, parts: &[&str]) -> PathBuf {
    parts.iter().fold(base.to_path_buf(), |p, c| p.join(c))
}

fn cursor_files(d: &HomeDirs) -> Vec<PathBuf> {
    vec![join(&d.home, &[".cursor", "mcp.json"])]
}

fn claude_desktop_files(d: &HomeDirs) -> Vec<PathBuf> {
    // macOS: ~/Library/Application Support/Claude; Windows: %APPDATA%\Claude;
    // Linux has no official build; community builds use ~/.config/Claude.
    vec![join(&d.config, &["Claude", "claude_desktop_config.json"])]
}

fn claude_code_files(d: &HomeDirs) -> Vec<PathBuf> {
    vec![d.home.join(".claude.json")]
}

fn vscode_files(d: &HomeDirs) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for product in ["Code", "Code - Insiders", "VSCodium"] {
        let user = join(&d.config, &[product, "User"]);
        out.push(user.join("mcp.json"));
        if let Ok(profiles) = std::fs::read_dir(user.join("profiles")) {
            let mut dirs: Vec<PathBuf> = profiles
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("mcp.json"))
                .collect();
            dirs.sort();
            out.extend(dirs);
        }
    }
    out
}

fn windsurf_files(d: &HomeDirs) -> Vec<PathBuf> {
    vec![join(&d.home, &[".codeium", "windsurf", "mcp_config.json"])]
}

fn gemini_files(d: &HomeDirs) -> Vec<PathBuf> {
    vec![join(&d.home, &[".gemini", "settings.json"])]
}

fn codex_files(d: &HomeDirs) -> Vec<PathBuf> {
    let base = d.var("CODEX_HOME").unwrap_or_else(|| d.home.join(".codex"));
    vec![base.join("config.toml")]
}

fn zed_files(d: &HomeDirs) -> Vec<PathBuf> {
    match d.os {
        Os::Windows => vec![join(&d.config, &["Zed", "settings.json"])],
        // Zed uses ~/.config/zed on macOS too.
        Os::MacOs => vec![join(&d.home, &[".config", "zed", "settings.json"])],
        Os::Linux => vec![join(&d.config, &["zed", "settings.json"])],
    }
}

fn cline_files(d: &HomeDirs) -> Vec<PathBuf> {
    const FILE: &str = "cline_mcp_settings.json";
    let current = if let Some(p) = d.var("CLINE_MCP_SETTINGS_PATH") {
        p
    } else if let Some(dir) = d.var("CLINE_DATA_DIR") {
        join(&dir, &["settings", FILE])
    } else if let Some(dir) = d.var("CLINE_DIR") {
        join(&dir, &["data", "settings", FILE])
    } else {
        join(&d.home, &[".cline", "data", "settings", FILE])
    };
    let mut out = vec![current];
    for editor in ["Code", "Cursor", "Windsurf"] {
        out.push(join(
            &d.config,
            &[
                editor,
                "User",
                "globalStorage",
                "saoudrizwan.claude-dev",
                "settings",
                FILE,
            ],
        ));
    }
    out
}

/// Every client Gatehouse knows.
pub static CLIENTS: &[ClientSpec] = &[
    ClientSpec {
        key: "cursor",
        name: "Cursor",
        format: Format::Json,
        servers_key: "mcpServers",
        user_files: cursor_files,
        project_file: Some(".cursor/mcp.json"),
        per_project_sections: false,
        owns_file_while_running: false,
        own_cli: None,
        process_names: &["cursor", "Cursor"],
        sandboxed_as: &[],
        reload: "toggle the server in Settings › MCP or reload the window",
        lock_suffix: None,
    },
    ClientSpec {
        key: "claude-desktop",
        name: "Claude Desktop",
        format: Format::Json,
        servers_key: "mcpServers",
        user_files: claude_desktop_files,
        project_file: None,
        per_project_sections: false,
        owns_file_while_running: true,
        own_cli: None,
        process_names: &["Claude", "claude-desktop"],
        sandboxed_as: &[],
        reload: "quit Claude Desktop completely (tray/menu bar) and start it again",
        lock_suffix: None,
    },
    ClientSpec {
        key: "claude-code",
        name: "Claude Code",
        format: Format::Json,
        servers_key: "mcpServers",
        user_files: claude_code_files,
        project_file: Some(".mcp.json"),
        per_project_sections: true,
        owns_file_while_running: true,
        own_cli: Some("claude"),
        process_names: &["claude"],
        sandboxed_as: &[],
        reload: "start a new Claude Code session",
        lock_suffix: None,
    },
    ClientSpec {
        key: "vscode",
        name: "VS Code",
        format: Format::Jsonc,
        servers_key: "servers",
        user_files: vscode_files,
        project_file: Some(".vscode/mcp.json"),
        per_project_sections: false,
        owns_file_while_running: false,
        own_cli: None,
        process_names: &["code", "code-insiders", "codium"],
        sandboxed_as: &["com.visualstudio.code", "com.vscodium.codium", "code"],
        reload: "restart the server from the MCP list (VS Code asks to trust the changed config)",
        lock_suffix: None,
    },
    ClientSpec {
        key: "windsurf",
        name: "Windsurf",
        format: Format::Json,
        servers_key: "mcpServers",
        user_files: windsurf_files,
        project_file: None,
        per_project_sections: false,
        owns_file_while_running: false,
        own_cli: None,
        process_names: &["windsurf"],
        sandboxed_as: &[],
        reload: "press refresh in the Cascade MCP panel",
        lock_suffix: None,
    },
    ClientSpec {
        key: "gemini",
        name: "Gemini CLI",
        format: Format::Jsonc,
        servers_key: "mcpServers",
        user_files: gemini_files,
        project_file: Some(".gemini/settings.json"),
        per_project_sections: false,
        owns_file_while_running: false,
        own_cli: None,
        process_names: &["gemini"],
        sandboxed_as: &[],
        reload: "restart gemini",
        lock_suffix: None,
    },
    ClientSpec {
        key: "codex",
        name: "Codex CLI",
        format: Format::Toml,
        servers_key: "mcp_servers",
        user_files: codex_files,
        project_file: Some(".codex/config.toml"),
        per_project_sections: false,
        owns_file_while_running: false,
        own_cli: None,
        process_names: &["codex"],
        sandboxed_as: &[],
        reload: "start a new codex session",
        lock_suffix: None,
    },
    ClientSpec {
        key: "zed",
        name: "Zed",
        format: Format::Jsonc,
        servers_key: "context_servers",
        user_files: zed_files,
        project_file: Some(".zed/settings.json"),
        per_project_sections: false,
        owns_file_while_running: false,
        own_cli: None,
        process_names: &["zed", "zed-editor"],
        sandboxed_as: &["dev.zed.Zed", "zed"],
        reload: "Zed restarts context servers when settings change",
        lock_suffix: None,
    },
    ClientSpec {
        key: "cline",
        name: "Cline",
        format: Format::Json,
        servers_key: "mcpServers",
        user_files: cline_files,
        project_file: None,
        per_project_sections: false,
        owns_file_while_running: false,
        own_cli: None,
        process_names: &[],
        sandboxed_as: &[],
        reload: "Cline reconnects changed servers by itself",
        lock_suffix: Some(".lock"),
    },
];

/// Looks a client up by key (or a few aliases).
pub fn client(key: &str) -> Option<&'static ClientSpec> {
    let key = key.to_ascii_lowercase();
    let key = match key.as_str() {
        "claude" | "claude_desktop" | "claudedesktop" => "claude-desktop",
        "claude_code" | "claudecode" => "claude-code",
        "code" | "vs-code" => "vscode",
        "gemini-cli" => "gemini",
        "codex-cli" => "codex",
        other => other,
    };
    CLIENTS.iter().find(|c| c.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paths relative to the fixture root, with `/` separators.
    fn rel(d: &HomeDirs, root: &Path, paths: Vec<PathBuf>) -> Vec<String> {
        let _ = d;
        paths
            .iter()
            .map(|p| {
                p.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/")
            })
            .collect()
    }

    fn check(os: Os, key: &str, expect: &[&str]) {
        let root = Path::new("/fx");
        let d = HomeDirs::fixture(root, os);
        let spec = client(key).unwrap();
        let got = rel(&d, root, (spec.user_files)(&d));
        let expect: Vec<String> = expect.iter().map(|s| s.to_string()).collect();
        assert_eq!(got, expect, "{key} user files on {os:?}");
    }

    #[test]
    fn user_paths_per_os() {
        check(Os::Linux, "cursor", &["home/.cursor/mcp.json"]);
        check(Os::Windows, "cursor", &["home/.cursor/mcp.json"]);
        check(
            Os::MacOs,
            "claude-desktop",
            &["home/Library/Application Support/Claude/claude_desktop_config.json"],
        );
        check(
            Os::Windows,
            "claude-desktop",
            &["home/AppData/Roaming/Claude/claude_desktop_config.json"],
        );
        check(
            Os::Linux,
            "claude-desktop",
            &["home/.config/Claude/claude_desktop_config.json"],
        );
        check(Os::Linux, "claude-code", &["home/.claude.json"]);
        check(
            Os::MacOs,
            "vscode",
            &[
                "home/Library/Application Support/Code/User/mcp.json",
                "home/Library/Application Support/Code - Insiders/User/mcp.json",
                "home/Library/Application Support/VSCodium/User/mcp.json",
            ],
        );
        check(
            Os::Windows,
            "vscode",
            &[
                "home/AppData/Roaming/Code/User/mcp.json",
                "home/AppData/Roaming/Code - Insiders/User/mcp.json",
                "home/AppData/Roaming/VSCodium/User/mcp.json",
            ],
        );
        check(
            Os::Windows,
            "windsurf",
            &["home/.codeium/windsurf/mcp_config.json"],
        );
        check(Os::MacOs, "gemini", &["home/.gemini/settings.json"]);
        check(Os::Linux, "codex", &["home/.codex/config.toml"]);
        check(Os::Linux, "zed", &["home/.config/zed/settings.json"]);
        check(Os::MacOs, "zed", &["home/.config/zed/settings.json"]);
        check(
            Os::Windows,
            "zed",
            &["home/AppData/Roaming/Zed/settings.json"],
        );
        check(
            Os::Linux,
            "cline",
            &[
                "home/.cline/data/settings/cline_mcp_settings.json",
                "home/.config/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
                "home/.config/Cursor/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
                "home/.config/Windsurf/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
            ],
        );
    }

    #[test]
    fn env_overrides_move_files() {
        let root = Path::new("/fx");
        let mut d = HomeDirs::fixture(root, Os::Linux);
        d.env.insert("CODEX_HOME".into(), "/fx/codex-home".into());
        d.env.insert("CLINE_DATA_DIR".into(), "/fx/cline".into());
        assert_eq!(
            (client("codex").unwrap().user_files)(&d)[0],
            Path::new("/fx/codex-home/config.toml")
        );
        assert_eq!(
            (client("cline").unwrap().user_files)(&d)[0],
            Path::new("/fx/cline/settings/cline_mcp_settings.json")
        );
    }

    #[test]
    fn aliases_resolve() {
        for (alias, key) in [
            ("Claude", "claude-desktop"),
            ("claude_code", "claude-code"),
            ("code", "vscode"),
            ("ZED", "zed"),
        ] {
            assert_eq!(client(alias).map(|c| c.key), Some(key), "alias {alias}");
        }
        assert!(client("notepad").is_none());
    }
}
