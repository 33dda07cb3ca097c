//! Seeding `server_policy.allowed_commands` at protect time (pure: text in,
//! text out). The seed is a commented-out line listing every command that
//! protected servers launch, so turning the command allowlist on (removing
//! the `# `) breaks nothing. An active list is never edited; the commands it
//! would refuse are reported instead.

use crate::matching::glob_escape;
use crate::{check_text, PolicyError};

/// The comment line that marks the seed; the next line is the seed itself.
pub const SEED_MARKER: &str =
    "## Seeded by `gatehouse protect`: the commands protected servers launch.";
const SEED_HELP: &str = "## Uncomment the next line (and a commented `[server_policy]` header above) to allow only these.";
const SEED_PREFIX: &str = "# allowed_commands = ";

/// What [`seed_allowed_commands`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandSeed {
    /// The new policy text, when the seed changed. Parsing it gives exactly
    /// the same effective policy as before (the seed is a comment).
    pub text: Option<String>,
    /// The patterns the seed now lists (empty when an active list exists).
    pub seeded: Vec<String>,
    /// Commands an active `allowed_commands` refuses: wrap will refuse the
    /// servers launching them until a person adds them.
    pub refused: Vec<String>,
}

/// The allowlist pattern for a launch command as a client config names it:
/// a bare name stays a name (`npx`), anything with a separator is a path
/// pattern for exactly that path. Glob metacharacters are escaped.
pub fn command_pattern(command: &str) -> String {
    glob_escape(command)
}

/// Adds `commands` (argv\[0\] of every protected server) to the commented
/// seed line of `text` (the local `policy.toml`, named `name` in errors),
/// creating the seed under the `[server_policy]` header, or at the end.
/// When the file already has an active `allowed_commands`, nothing is
/// written and the commands it refuses are returned. An invalid file is an
/// error: protect leaves it alone.
pub fn seed_allowed_commands(
    name: &str,
    text: &str,
    commands: &[String],
) -> Result<CommandSeed, PolicyError> {
    let before = check_text(name, text)?.policy;
    if before.has_command_allowlist() {
        let mut refused: Vec<String> = commands
            .iter()
            .filter(|c| !before.command_allowed(c, None))
            .cloned()
            .collect();
        refused.sort();
        refused.dedup();
        return Ok(CommandSeed {
            refused,
            ..CommandSeed::default()
        });
    }

    let lines: Vec<&str> = text.lines().collect();
    let existing = lines
        .iter()
        .position(|l| l.trim_end() == SEED_MARKER)
        .and_then(|i| {
            let seed = *lines.get(i + 2)?;
            seed.starts_with(SEED_PREFIX).then_some((i + 2, seed))
        });
    let mut patterns: Vec<String> = existing
        .map(|(_, l)| parse_seed(&l[2..]))
        .unwrap_or_default();
    patterns.extend(commands.iter().map(|c| command_pattern(c)));
    patterns.sort();
    patterns.dedup();
    let seed_line = format!("{SEED_PREFIX}{}", toml_array(&patterns));

    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    match existing {
        Some((_, old)) if old == seed_line => {
            return Ok(CommandSeed {
                seeded: patterns,
                ..CommandSeed::default()
            })
        }
        Some((i, _)) => out[i] = seed_line,
        None if patterns.is_empty() => return Ok(CommandSeed::default()),
        None => {
            let block = [SEED_MARKER.to_owned(), SEED_HELP.to_owned(), seed_line];
            let header = lines
                .iter()
                .position(|l| l.trim() == "[server_policy]")
                .or_else(|| lines.iter().position(|l| l.trim() == "# [server_policy]"));
            match header {
                Some(h) => {
                    out.splice(h + 1..h + 1, block);
                }
                None => {
                    if out.last().is_some_and(|l| !l.trim().is_empty()) {
                        out.push(String::new());
                    }
                    out.push("# [server_policy]".to_owned());
                    out.extend(block);
                }
            }
        }
    }
    let mut new_text = out.join("\n");
    if text.ends_with('\n') || text.is_empty() {
        new_text.push('\n');
    }
    // The seed is a comment: the effective policy must not change.
    let after = check_text(name, &new_text)?.policy;
    if after.to_toml() != before.to_toml() {
        return Ok(CommandSeed::default());
    }
    Ok(CommandSeed {
        text: Some(new_text),
        seeded: patterns,
        refused: Vec::new(),
    })
}

/// The patterns of a seed line (`allowed_commands = [...]`); an unreadable
/// line (edited by hand) counts as empty and is rewritten.
fn parse_seed(line: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Seed {
        allowed_commands: Vec<String>,
    }
    toml::from_str::<Seed>(line)
        .map(|s| s.allowed_commands)
        .unwrap_or_default()
}

fn toml_array(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|i| crate::render::toml_string(i))
        .collect();
    format!("[{}]", quoted.join(", "))
}
