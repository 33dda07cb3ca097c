//! Discovery: which clients are installed, their config files, servers,
//! protection state, plain-text secrets (names only) and blockers.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::doc::{ConfigDoc, ParseFailure};
use crate::entry::EntryKind;
use crate::home::HomeDirs;
use crate::table::{ClientSpec, CLIENTS};

/// A config file to look at.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// Its client.
    pub client: &'static ClientSpec,
    /// Path as found.
    pub path: PathBuf,
    /// The project root for project-scope files.
    pub project: Option<PathBuf>,
}

impl ConfigFile {
    /// Whether Claude Code's `projects[*]` sections belong to this file.
    pub fn per_project(&self) -> bool {
        self.client.per_project_sections && self.project.is_none()
    }

    /// Parses `text` (this file's content) and refuses duplicate keys where
    /// Gatehouse would edit.
    pub fn parse(&self, text: &str) -> Result<ConfigDoc, ParseFailure> {
        let doc = ConfigDoc::parse(self.client.format, text)?;
        doc.check_unique_keys(self.client.servers_key, self.per_project())?;
        Ok(doc)
    }
}

/// A server as `gatehouse clients` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DetectedServer {
    /// Entry name.
    pub name: String,
    /// `user`, `project`, `local:<project>`.
    pub scope: String,
    /// `stdio`, `remote`, `extension`, `unknown`.
    pub transport: &'static str,
    /// The opaque id when wrapped by Gatehouse.
    pub protected: Option<String>,
    /// Names of plain-text secrets (never values).
    pub secrets: Vec<String>,
    /// The entry uses `envFile` (reported, not rewritten).
    pub env_file: bool,
    /// Why it cannot be wrapped.
    pub blocker: Option<String>,
}

/// One config file's findings.
#[derive(Debug, Clone, Serialize)]
pub struct DetectedFile {
    /// Path.
    pub path: PathBuf,
    /// `file:line:col: message` when it does not parse.
    pub error: Option<String>,
    /// Servers in file order.
    pub servers: Vec<DetectedServer>,
}

/// One client's findings.
#[derive(Debug, Clone, Serialize)]
pub struct DetectedClient {
    /// Client key.
    pub key: &'static str,
    /// Human name.
    pub name: &'static str,
    /// Config files that exist.
    pub files: Vec<DetectedFile>,
    /// What prevents wrapping for the whole client (sandboxed builds, managed policy).
    pub blockers: Vec<String>,
    /// How the client picks up a changed config.
    pub reload: &'static str,
}

impl DetectedClient {
    /// Server entries across its config files.
    pub fn server_count(&self) -> usize {
        self.files.iter().map(|f| f.servers.len()).sum()
    }

    /// Server entries that already run behind `gatehouse wrap`.
    pub fn protected_count(&self) -> usize {
        self.files
            .iter()
            .flat_map(|f| &f.servers)
            .filter(|s| s.protected.is_some())
            .count()
    }

    /// Every server entry is wrapped (and there is at least one).
    pub fn is_protected(&self) -> bool {
        let servers = self.server_count();
        servers > 0 && self.protected_count() == servers
    }
}

fn read_json(path: &Path) -> Option<crate::jsonc::Node> {
    let text = std::fs::read_to_string(path).ok()?;
    crate::jsonc::parse(&text).ok()
}

/// Project roots the clients themselves record: Claude Code's `projects`
/// keys, and the folders VS Code and Cursor have open or recently opened
/// (`User/globalStorage/storage.json`). Only directories that exist.
pub fn recorded_projects(dirs: &HomeDirs) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(root) = read_json(&dirs.home.join(".claude.json")) {
        out.extend(
            root.get("projects")
                .map(|p| {
                    p.members()
                        .iter()
                        .map(|m| PathBuf::from(&m.key))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        );
    }
    for editor in ["Code", "Code - Insiders", "Cursor", "Windsurf"] {
        let Some(root) = read_json(
            &dirs
                .config
                .join(editor)
                .join("User")
                .join("globalStorage")
                .join("storage.json"),
        ) else {
            continue;
        };
        let folders = root
            .get("backupWorkspaces")
            .and_then(|b| b.get("folders"))
            .map(|f| f.items().to_vec())
            .unwrap_or_default();
        let uris = folders.iter().filter_map(|f| {
            f.get("folderUri")
                .and_then(crate::jsonc::Node::as_str)
                .map(str::to_owned)
        });
        let assoc = root
            .get("profileAssociations")
            .and_then(|p| p.get("workspaces"))
            .map(|w| {
                w.members()
                    .iter()
                    .map(|m| m.key.clone())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        out.extend(uris.chain(assoc).filter_map(|u| file_uri_path(&u)));
    }
    let mut unique: Vec<PathBuf> = Vec::new();
    for p in out {
        if p.is_dir() && !unique.contains(&p) {
            unique.push(p);
        }
    }
    unique
}

/// `file:///home/me/x%20y` → `/home/me/x y`; `file:///c%3A/x` → `c:/x`.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let raw = rest.as_bytes();
    let mut bytes = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let Some(b) = rest
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                bytes.push(b);
                i += 3;
                continue;
            }
        }
        bytes.push(raw[i]);
        i += 1;
    }
    let path = String::from_utf8(bytes).ok()?;
    let path = if path.len() > 3 && path.as_bytes()[2] == b':' {
        path[1..].to_owned()
    } else {
        path
    };
    Some(PathBuf::from(path))
}

/// Config files of `client` that exist: user files, then project files for
/// each root in `projects`.
pub fn config_files(
    client: &'static ClientSpec,
    dirs: &HomeDirs,
    projects: &[PathBuf],
) -> Vec<ConfigFile> {
    let mut out: Vec<ConfigFile> = Vec::new();
    for path in (client.user_files)(dirs) {
        if path.is_file() {
            out.push(ConfigFile {
                client,
                path,
                project: None,
            });
        }
    }
    if let Some(rel) = client.project_file {
        for root in projects {
            let path = rel.split('/').fold(root.clone(), |p, c| p.join(c));
            let dup = out.iter().any(|f| {
                crate::fsutil::resolve_target(&f.path) == crate::fsutil::resolve_target(&path)
            });
            if path.is_file() && !dup {
                out.push(ConfigFile {
                    client,
                    path,
                    project: Some(root.clone()),
                });
            }
        }
    }
    out
}

/// Client-wide blockers.
pub fn client_blockers(client: &ClientSpec, dirs: &HomeDirs) -> Vec<String> {
    let mut out = Vec::new();
    for id in client.sandboxed_as {
        if dirs.home.join(".var").join("app").join(id).is_dir() {
            out.push(format!("{} is installed as the Flatpak {id}: its sandbox cannot start the host's gatehouse binary", client.name));
        }
        if dirs.home.join("snap").join(id).is_dir() {
            out.push(format!(
                "{} is installed as the Snap {id}: its confinement may prevent starting gatehouse",
                client.name
            ));
        }
    }
    if client.key == "claude-code" {
        let managed: &[&[&str]] = match dirs.os {
            crate::home::Os::Linux => &[&["etc", "claude-code"]],
            crate::home::Os::MacOs => &[&["Library", "Application Support", "ClaudeCode"]],
            crate::home::Os::Windows => &[&["Program Files", "ClaudeCode"]],
        };
        for parts in managed {
            let dir = dirs.system(parts);
            if dir.join("managed-mcp.json").is_file() {
                out.push("a managed managed-mcp.json is in force: it replaces user MCP configs; ask the administrator to wrap its servers".into());
            }
            if std::fs::read_to_string(dir.join("managed-settings.json"))
                .is_ok_and(|t| t.contains("allowedMcpServers"))
            {
                out.push("managed allowedMcpServers matches server commands exactly: wrapped servers would be blocked unless the gatehouse command is allowed".into());
            }
        }
    }
    out
}

/// Looks at one file.
pub fn inspect_file(file: &ConfigFile) -> DetectedFile {
    let text = match std::fs::read_to_string(&file.path) {
        Ok(t) => t,
        Err(e) => {
            return DetectedFile {
                path: file.path.clone(),
                error: Some(format!("{}: {e}", file.path.display())),
                servers: vec![],
            }
        }
    };
    let doc = match file.parse(&text) {
        Ok(d) => d,
        Err(e) => {
            return DetectedFile {
                path: file.path.clone(),
                error: Some(format!(
                    "{}:{}:{}: {}",
                    file.path.display(),
                    e.line,
                    e.col,
                    e.msg
                )),
                servers: vec![],
            }
        }
    };
    let servers = doc
        .entries(
            file.client.servers_key,
            file.client.per_project_sections && file.project.is_none(),
        )
        .into_iter()
        .map(|e| DetectedServer {
            scope: e.scope_label(file.project.is_some()),
            transport: match e.kind {
                EntryKind::Stdio { .. } => "stdio",
                EntryKind::Remote { .. } => "remote",
                EntryKind::Extension => "extension",
                EntryKind::Unknown => "unknown",
            },
            protected: e.wrapped.as_ref().map(|w| w.server_id.clone()),
            secrets: e.secret_names(),
            env_file: e.env_file,
            blocker: e.blocker(),
            name: e.name,
        })
        .collect();
    DetectedFile {
        path: file.path.clone(),
        error: None,
        servers,
    }
}

/// Every client with at least one config file, plus clients with blockers.
pub fn detect(dirs: &HomeDirs, extra_projects: &[PathBuf]) -> Vec<DetectedClient> {
    let projects = all_projects(dirs, extra_projects);
    CLIENTS
        .iter()
        .filter_map(|client| {
            let files: Vec<DetectedFile> = config_files(client, dirs, &projects)
                .iter()
                .map(inspect_file)
                .collect();
            let blockers = client_blockers(client, dirs);
            (!files.is_empty() || !blockers.is_empty()).then_some(DetectedClient {
                key: client.key,
                name: client.name,
                files,
                blockers,
                reload: client.reload,
            })
        })
        .collect()
}

/// Recorded projects plus the ones given, deduplicated.
pub fn all_projects(dirs: &HomeDirs, extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = recorded_projects(dirs);
    for p in extra {
        let p = std::path::absolute(p).unwrap_or_else(|_| p.clone());
        if !out.iter().any(|o| same(o, &p)) {
            out.push(p);
        }
    }
    out
}

fn same(a: &Path, b: &Path) -> bool {
    crate::fsutil::resolve_target(a) == crate::fsutil::resolve_target(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::home::Os;

    #[test]
    fn file_uris() {
        for (uri, expect) in [
            ("file:///home/me/src/api", Some("/home/me/src/api")),
            ("file:///home/me/my%20proj", Some("/home/me/my proj")),
            ("file:///c%3A/Users/me/proj", Some("c:/Users/me/proj")),
            ("vscode-remote://ssh-remote%2Bbox/home/me", None),
        ] {
            assert_eq!(file_uri_path(uri), expect.map(PathBuf::from), "{uri}");
        }
    }

    #[test]
    fn editor_recent_folders_are_project_roots() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = HomeDirs::fixture(tmp.path(), Os::Linux);
        let proj = tmp.path().join("work").join("my proj");
        std::fs::create_dir_all(&proj).unwrap();
        let storage = dirs.config.join("Code/User/globalStorage/storage.json");
        std::fs::create_dir_all(storage.parent().unwrap()).unwrap();
        let uri = format!("file://{}", proj.to_string_lossy().replace(' ', "%20"));
        let gone = "file:///nonexistent/folder";
        std::fs::write(&storage, format!(r#"{{"backupWorkspaces":{{"folders":[{{"folderUri":"{uri}"}},{{"folderUri":"{gone}"}}]}},"profileAssociations":{{"workspaces":{{"{uri}":"__default__profile__"}}}}}}"#)).unwrap();
        assert_eq!(
            recorded_projects(&dirs),
            vec![proj],
            "existing folders, once each"
        );
    }
}
