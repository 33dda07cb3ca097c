//! `{{vault:NAME}}` placeholders in a server's argv, expanded by
//! `gatehouse wrap` just before it spawns the server. The expanded argv is
//! visible to other local processes (`ps`, `/proc/<pid>/cmdline`); prefer env
//! secrets where the server accepts them.

use std::ops::Range;

use crate::{Secret, Vault, VaultError};

const OPEN: &str = "{{vault:";
const CLOSE: &str = "}}";

/// The placeholder text for `name`.
pub fn placeholder(name: &str) -> String {
    format!("{OPEN}{name}{CLOSE}")
}

/// Every well-formed placeholder in `s`: its byte range and the name.
/// Names are `[A-Za-z0-9_.-]+`; anything else is left as literal text.
pub fn find_placeholders(s: &str) -> Vec<(Range<usize>, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(pos) = s[from..].find(OPEN) {
        let start = from + pos;
        let name_start = start + OPEN.len();
        let Some(close) = s[name_start..].find(CLOSE) else {
            break;
        };
        let name = &s[name_start..name_start + close];
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if valid {
            let end = name_start + close + CLOSE.len();
            out.push((start..end, name));
            from = end;
        } else {
            from = name_start;
        }
    }
    out
}

/// Names referenced by placeholders anywhere in `args`, in order, deduplicated.
pub fn placeholder_names(args: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for arg in args {
        for (_, name) in find_placeholders(arg) {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Why expansion failed. Carries names, never values.
#[derive(Debug, thiserror::Error)]
pub enum PlaceholderError {
    /// The vault has no secret of that name for this server.
    #[error("no vault secret {name:?} for server {server_id}")]
    Missing { server_id: String, name: String },
    /// The vault itself failed.
    #[error(transparent)]
    Vault(#[from] VaultError),
}

/// Replaces every `{{vault:NAME}}` in `args` with the server's secret. The
/// result is secret as a whole: it is for `Command::args` and nothing else.
pub fn expand_placeholders(
    args: &[String],
    vault: &dyn Vault,
    server_id: &str,
) -> Result<Secret<Vec<String>>, PlaceholderError> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        let found = find_placeholders(arg);
        if found.is_empty() {
            out.push(arg.clone());
            continue;
        }
        let mut expanded = String::with_capacity(arg.len());
        let mut last = 0;
        for (range, name) in found {
            let value = vault
                .get(server_id, name)?
                .ok_or_else(|| PlaceholderError::Missing {
                    server_id: server_id.to_owned(),
                    name: name.to_owned(),
                })?;
            expanded.push_str(&arg[last..range.start]);
            expanded.push_str(value.expose());
            last = range.end;
        }
        expanded.push_str(&arg[last..]);
        out.push(expanded);
    }
    Ok(Secret::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryVault;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finds_only_well_formed_placeholders() {
        let names = |s: &str| {
            find_placeholders(s)
                .into_iter()
                .map(|(_, n)| n.to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("{{vault:A}}"), vec!["A"]);
        assert_eq!(names("x{{vault:A}}y{{vault:B_2}}"), vec!["A", "B_2"]);
        assert_eq!(names("{{vault:}}"), Vec::<String>::new());
        assert_eq!(
            names("{{vault:a b}}"),
            Vec::<String>::new(),
            "spaces are not part of names"
        );
        assert_eq!(
            names("{{vault:{{vault:C}}"),
            vec!["C"],
            "a broken opener does not swallow the next"
        );
        assert_eq!(names("{{vault:A"), Vec::<String>::new());
    }

    #[test]
    fn expands_from_the_servers_own_secrets() {
        let vault = MemoryVault::new();
        vault
            .set("srv_a", "PW", Secret::new("s3cret".into()))
            .unwrap();
        vault
            .set("srv_b", "PW", Secret::new("other".into()))
            .unwrap();
        let args = v(&[
            "-y",
            "postgresql://me:{{vault:PW}}@db/app",
            "--api-key",
            "{{vault:PW}}",
        ]);
        let out = expand_placeholders(&args, &vault, "srv_a").unwrap();
        assert_eq!(
            out.expose(),
            &v(&["-y", "postgresql://me:s3cret@db/app", "--api-key", "s3cret"])
        );
        let err = expand_placeholders(&v(&["{{vault:NOPE}}"]), &vault, "srv_a").unwrap_err();
        assert!(
            matches!(err, PlaceholderError::Missing { .. }),
            "missing names are an error, got {err:?}"
        );
        assert_eq!(placeholder_names(&args), vec!["PW"]);
        assert_eq!(placeholder("X"), "{{vault:X}}");
    }
}
