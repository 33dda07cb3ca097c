//! `gatehouse pins list | trust | diff | reset | trust-launch | trust-package`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use super::events::printable;
use super::store_access::{existing_home, mac_key, open, runtime};

#[derive(clap::Subcommand)]
pub enum PinsCommand {
    /// Every pin with its state (same as `gatehouse tools`).
    List {
        /// Only this server id (see `gatehouse servers`).
        #[arg(long, value_name = "ID")]
        server: Option<String>,
        /// One JSON object per line (shape version `v`).
        #[arg(long)]
        json: bool,
        /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data
        /// directory); it must hold a database.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Approve a tool definition: exactly --hash, or the held one waiting
    /// (a quarantined one only with --hash, after review).
    Trust {
        /// Server id (see `gatehouse servers`).
        #[arg(long, value_name = "ID")]
        server: String,
        /// Tool name (see `gatehouse tools`).
        #[arg(long)]
        tool: String,
        /// The definition hash to approve: it must be the one waiting, if one
        /// waits (see `gatehouse pins diff`); required for a quarantined tool.
        #[arg(long)]
        hash: Option<String>,
        /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data
        /// directory); it must hold a database.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Show the approved and the waiting definition as a unified diff
    /// (`-` approved, `+` waiting).
    Diff {
        /// Server id (see `gatehouse servers`).
        #[arg(long, value_name = "ID")]
        server: String,
        /// Tool name (see `gatehouse tools`).
        #[arg(long)]
        tool: String,
        /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data
        /// directory); it must hold a database.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Approve a server's changed launch (executable, script or package)
    /// held under `pinning.on_launch_change = "hold"`: exactly
    /// --fingerprint, or the one waiting. Takes effect at its next start.
    TrustLaunch {
        /// Server id (see `gatehouse servers`).
        #[arg(long, value_name = "ID")]
        server: String,
        /// The launch fingerprint to approve (default: the one waiting).
        #[arg(long)]
        fingerprint: Option<String>,
        /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data
        /// directory); it must hold a database.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Run a package held as a likely typosquat (exactly --package, or the one waiting).
    TrustPackage {
        /// Server id (see `gatehouse servers`).
        #[arg(long, value_name = "ID")]
        server: String,
        /// The held package to run (default: the one waiting).
        #[arg(long)]
        package: Option<String>,
        /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data
        /// directory); it must hold a database.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Forget a pin: the next sight pins again.
    Reset {
        /// Server id (see `gatehouse servers`).
        #[arg(long, value_name = "ID")]
        server: String,
        /// Tool name (see `gatehouse tools`).
        #[arg(long)]
        tool: String,
        /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data
        /// directory); it must hold a database.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
}

pub fn run(cmd: PinsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PinsCommand::List { server, json, home } => {
            super::inventory::run_tools(super::inventory::ToolsArgs { server, json, home })
        }
        PinsCommand::Trust {
            server,
            tool,
            hash,
            home,
        } => trust(&server, &tool, hash, home),
        PinsCommand::Diff { server, tool, home } => diff(&server, &tool, home),
        PinsCommand::TrustLaunch {
            server,
            fingerprint,
            home,
        } => trust_launch(&server, fingerprint.as_deref(), home),
        PinsCommand::TrustPackage {
            server,
            package,
            home,
        } => trust_package(&server, package, home),
        PinsCommand::Reset { server, tool, home } => {
            let home = existing_home(home.as_deref())?;
            let removed = runtime()?.block_on(async {
                anyhow::Ok(open(&home).await?.reset_pin(&server, &tool).await?)
            })?;
            if removed {
                outln!("Reset {tool} on {server}: its next definition is pinned at first sight of a trusting session or held.");
                Ok(ExitCode::SUCCESS)
            } else {
                anyhow::bail!("no pin for tool {tool:?} on server {server:?}")
            }
        }
    }
}

fn trust(
    server: &str,
    tool: &str,
    hash: Option<String>,
    home: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    use gatehouse_store::{PinState, StoreError};
    let explicit_home = home.clone();
    let home = existing_home(home.as_deref())?;
    let key = mac_key(&home)?;
    runtime()?.block_on(async {
        let store = open(&home).await?;
        let pin = store
            .get_pin(&key, server, tool)
            .await?
            .with_context(|| format!("no pin for tool {tool:?} on server {server:?}"))?;
        let command = |sub: &str, hash: Option<&str>| {
            let mut words = vec![
                "gatehouse".to_owned(),
                "pins".to_owned(),
                sub.to_owned(),
                "--server".to_owned(),
                shell_word(server),
                "--tool".to_owned(),
                shell_word(tool),
            ];
            if let Some(hash) = hash {
                words.extend(["--hash".to_owned(), shell_word(hash)]);
            }
            if let Some(dir) = &explicit_home {
                words.extend(["--home".to_owned(), shell_word(&dir.to_string_lossy())]);
            }
            words.join(" ")
        };
        let (hash, defaulted) = match hash {
            Some(h) => (h, false),
            None => {
                let Some(waiting) = pin.pending_hash.clone() else {
                    anyhow::bail!("nothing waits for approval for {tool:?}; pass --hash to approve a specific version");
                };
                // Never approve unseen what the scanner flagged, nor what an
                // unverifiable row claims waits: the person names the hash.
                let findings = finding_lines(pin.findings_json.as_deref());
                if pin.state == PinState::Quarantined || !findings.is_empty() || !pin.mac_valid {
                    let why = if pin.mac_valid {
                        "is quarantined: its waiting definition has scanner findings"
                    } else {
                        "has a pin record that failed its integrity check"
                    };
                    eprintln!(
                        "gatehouse: refused: {} on {server} {why}; nothing was approved.",
                        printable(tool)
                    );
                    for line in &findings {
                        eprintln!("  {line}");
                    }
                    eprintln!("Review it:  {}", command("diff", None));
                    eprintln!(
                        "Approve exactly that version after review:  {}",
                        command("trust", Some(&waiting))
                    );
                    return Ok(ExitCode::from(1));
                }
                (waiting, true)
            }
        };
        let approved = store
            .approve_waiting_tool(&key, server, tool, &hash, gatehouse_store::now_ms())
            .await;
        match approved {
            Ok(_) => {}
            Err(StoreError::NotWaiting { .. }) => anyhow::bail!(
                "not the waiting version: {hash} is not what {tool:?} on {server} waits with ({}); \
                 the waiting one stays waiting (`{}` shows it)",
                pin.pending_hash.as_deref().unwrap_or("another definition"),
                command("diff", None)
            ),
            Err(StoreError::UnknownTool { .. }) => {
                anyhow::bail!("tool {tool:?} was never seen on server {server:?}")
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("approving {hash} for {tool:?} (only a hash Gatehouse has seen can be approved)")
                })
            }
        }
        outln!("Approved {} on {server} at {hash}. Running sessions are told to re-list.", printable(tool));
        if defaulted {
            outln!(
                "That is the definition that was waiting (no --hash given); view it with: {}",
                command("diff", None)
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// One line per scanner finding of a quarantined definition: rule id and
/// severity, made safe for a terminal.
fn finding_lines(findings_json: Option<&str>) -> Vec<String> {
    let Some(findings) =
        findings_json.and_then(|f| serde_json::from_str::<serde_json::Value>(f).ok())
    else {
        return Vec::new();
    };
    findings
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let rule = f["rule"].as_str().unwrap_or("(unnamed rule)");
            match f["severity"].as_str() {
                Some(sev) => format!("finding: {} ({})", printable(rule), printable(sev)),
                None => format!("finding: {}", printable(rule)),
            }
        })
        .collect()
}

/// `word` as one shell word a person can paste (single-quoted unless plain).
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@+=".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", printable(&word.replace('\'', r"'\''")))
    }
}

fn trust_launch(
    server: &str,
    fingerprint: Option<&str>,
    home: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let home = existing_home(home.as_deref())?;
    let key = mac_key(&home)?;
    runtime()?.block_on(async {
        let store = open(&home).await?;
        let waiting = store
            .launch_approval(&key, server)
            .await?
            .and_then(|a| a.pending_json.zip(a.pending));
        let Some((what, pending)) = waiting else {
            anyhow::bail!("no changed launch waits for approval for server {server:?}");
        };
        let approved = store
            .approve_launch(&key, server, fingerprint, gatehouse_store::now_ms())
            .await
            .with_context(|| format!("approving the launch {pending} of {server:?}"))?;
        let now = gatehouse_store::now_ms();
        store
            .settle_consents(gatehouse_store::ConsentKind::HeldLaunch, server, now)
            .await?;
        outln!("Approved the launch of {server} at {approved}: {what}. It gets its secrets and tools at its next start.");
        Ok(ExitCode::SUCCESS)
    })
}

fn trust_package(
    server: &str,
    package: Option<String>,
    home: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    use gatehouse_store::{ConsentKind, ConsentState};
    let home = existing_home(home.as_deref())?;
    let key = mac_key(&home)?;
    runtime()?.block_on(async {
        let store = open(&home).await?;
        let waiting: Vec<String> = store
            .list_consents(Some(ConsentState::Pending), u32::MAX)
            .await?
            .into_iter()
            .filter(|c| c.kind == ConsentKind::HeldPackage && c.server_id == server)
            .filter_map(|c| {
                let p: serde_json::Value = serde_json::from_str(&c.payload_json).ok()?;
                p["package"].as_str().map(str::to_owned)
            })
            .collect();
        let package = match (package, waiting.as_slice()) {
            (Some(p), _) => p,
            (None, [only]) => only.clone(),
            (None, []) => anyhow::bail!("no package of server {server:?} is held"),
            (None, many) => anyhow::bail!(
                "several packages of server {server:?} are held ({}); name one with --package",
                many.join(", ")
            ),
        };
        let now = gatehouse_store::now_ms();
        store.approve_package(&key, server, &package, now).await?;
        store
            .settle_consents(ConsentKind::HeldPackage, server, now)
            .await?;
        outln!("Approved package {package} for {server}: it starts at its next launch.");
        Ok(ExitCode::SUCCESS)
    })
}

fn diff(server: &str, tool: &str, home: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let home = existing_home(home.as_deref())?;
    let key = mac_key(&home)?;
    runtime()?.block_on(async {
        let store = open(&home).await?;
        let pin = store
            .get_pin(&key, server, tool)
            .await?
            .with_context(|| format!("no pin for tool {tool:?} on server {server:?}"))?;
        let old = match pin.approved_hash.as_deref() {
            Some(h) => store.tool_definition(server, tool, h).await?,
            None => None,
        };
        let new = match pin.pending_hash.as_deref() {
            Some(h) => store.tool_definition(server, tool, h).await?,
            None => None,
        };
        let pretty = |d: &Option<gatehouse_store::ToolDefinition>| {
            d.as_ref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(&d.definition_json).ok())
                .map(|v| serde_json::to_string_pretty(&v).unwrap_or_default())
                .unwrap_or_default()
        };
        let (a, b) = (pretty(&old), pretty(&new));
        if pin.pending_hash.is_none() {
            // Not a diff against nothing: that would read as a removal.
            outln!(
                "approved {}",
                pin.approved_hash.as_deref().unwrap_or("(none)")
            );
            outln!("Nothing waits for approval. The approved definition:");
            for line in a.lines() {
                outln!("  {}", printable(line));
            }
            return Ok(ExitCode::SUCCESS);
        }
        outln!(
            "--- approved {}",
            pin.approved_hash.as_deref().unwrap_or("(none)")
        );
        outln!(
            "+++ waiting  {}",
            pin.pending_hash.as_deref().unwrap_or("(none)")
        );
        for line in line_diff(&a, &b) {
            outln!("{}", printable(&line));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A minimal line diff (longest common subsequence), enough for tool JSON.
fn line_diff(a: &str, b: &str) -> Vec<String> {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(format!(" {}", a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals first, as unified diffs show a changed line.
            out.push(format!("-{}", a[i]));
            i += 1;
        } else {
            out.push(format!("+{}", b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::line_diff;

    #[test]
    fn diff_marks_changes() {
        assert_eq!(
            line_diff("a\nb\nc", "a\nx\nc"),
            vec![" a", "-b", "+x", " c"],
            "the old line, then the new one (unified diff order)"
        );
        assert_eq!(
            line_diff("a\nb\nc\nd", "a\nx\ny\nd"),
            vec![" a", "-b", "-c", "+x", "+y", " d"]
        );
        assert_eq!(line_diff("", "n"), vec!["+n"]);
        assert_eq!(line_diff("o", ""), vec!["-o"]);
        assert_eq!(line_diff("k\no", "k"), vec![" k", "-o"]);
    }
}
