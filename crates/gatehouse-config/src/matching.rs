//! Compiled matchers: name globs, path globs over argument values, commands.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::Value;

/// A list of glob patterns compiled into one set, keeping the source text.
#[derive(Debug, Clone)]
pub(crate) struct Globs {
    pub patterns: Vec<String>,
    set: GlobSet,
}

/// How `*` treats `/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GlobKind {
    /// Names (servers, tools): `*` matches anything.
    Name,
    /// Paths (argument values, commands): `*` stops at `/`, `**` crosses it.
    Path,
}

pub(crate) fn compile_glob(pattern: &str, kind: GlobKind) -> Result<Glob, String> {
    if pattern.is_empty() {
        return Err("empty pattern (use \"*\" to match everything)".to_owned());
    }
    GlobBuilder::new(pattern)
        .literal_separator(kind == GlobKind::Path)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("invalid glob: {}", e.kind()))
}

impl Globs {
    pub fn empty() -> Globs {
        Globs {
            patterns: Vec::new(),
            set: GlobSet::empty(),
        }
    }

    /// Compiles `patterns`; on failure returns the index and reason of the first bad one.
    pub fn new(patterns: &[String], kind: GlobKind) -> Result<Globs, (usize, String)> {
        let mut builder = GlobSetBuilder::new();
        for (i, p) in patterns.iter().enumerate() {
            builder.add(compile_glob(p, kind).map_err(|e| (i, e))?);
        }
        let set = builder
            .build()
            .map_err(|e| (0, format!("invalid glob set: {e}")))?;
        Ok(Globs {
            patterns: patterns.to_vec(),
            set,
        })
    }

    pub fn is_match(&self, text: &str) -> bool {
        self.set.is_match(text)
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The first pattern that matches, for reasons.
    pub fn first_match(&self, text: &str) -> Option<&str> {
        self.set
            .matches(text)
            .first()
            .map(|&i| self.patterns[i].as_str())
    }

    /// Union with another list (denylists).
    pub fn union(&self, other: &Globs, kind: GlobKind) -> Globs {
        let mut all = self.patterns.clone();
        for p in &other.patterns {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        // Both inputs compiled already, so this cannot fail; fall back to self if it did.
        Globs::new(&all, kind).unwrap_or_else(|_| self.clone())
    }
}

/// Escapes glob metacharacters so `name` matches only itself.
pub fn glob_escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!' => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// Whether a command-allowlist pattern is a path pattern (contains a separator).
pub(crate) fn is_path_pattern(pattern: &str) -> bool {
    pattern.contains('/')
}

/// Command allowlist: name patterns match bare commands (resolved via PATH)
/// by name; path patterns match a command given as a path, or the resolved
/// path of a bare command. `/tmp/x/npx` is *not* allowed by the name `npx`.
#[derive(Debug, Clone)]
pub(crate) struct CommandList {
    pub patterns: Vec<String>,
    names: Globs,
    paths: Globs,
}

impl CommandList {
    pub fn new(patterns: &[String]) -> Result<CommandList, (usize, String)> {
        let (mut names, mut paths) = (Vec::new(), Vec::new());
        let mut index = Vec::new();
        for (i, p) in patterns.iter().enumerate() {
            let normalized = p.replace('\\', "/");
            if is_path_pattern(&normalized) {
                paths.push(normalized);
                index.push((true, i));
            } else {
                names.push(normalized);
                index.push((false, i));
            }
        }
        let map_err = |is_path: bool, (j, e): (usize, String)| {
            let original = index
                .iter()
                .filter(|(p, _)| *p == is_path)
                .nth(j)
                .map_or(0, |(_, i)| *i);
            (original, e)
        };
        let names = Globs::new(&names, GlobKind::Name).map_err(|e| map_err(false, e))?;
        let paths = Globs::new(&paths, GlobKind::Path).map_err(|e| map_err(true, e))?;
        Ok(CommandList {
            patterns: patterns.to_vec(),
            names,
            paths,
        })
    }

    pub fn allows(&self, command: &str, resolved: Option<&str>) -> bool {
        let command = command.replace('\\', "/");
        if command.contains('/') {
            if self.paths.is_match(&command) {
                return true;
            }
        } else if command_names(&command)
            .iter()
            .any(|n| self.names.is_match(n))
        {
            return true;
        }
        resolved.is_some_and(|r| self.paths.is_match(&r.replace('\\', "/")))
    }
}

/// `npx` and, for Windows launchers, `npx.cmd` → `npx`.
fn command_names(command: &str) -> Vec<String> {
    let mut names = vec![command.to_owned()];
    let lower = command.to_ascii_lowercase();
    for ext in [".exe", ".cmd", ".bat"] {
        if let Some(stem) = lower.strip_suffix(ext) {
            names.push(command[..stem.len()].to_owned());
        }
    }
    names
}

/// Calls `visit` with every string value in `value` (depth-first, iterative
/// so deeply nested arguments cannot overflow the stack). Stops early when
/// `visit` returns true; returns whether it did.
pub(crate) fn any_string(value: &Value, mut visit: impl FnMut(&str) -> bool) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) if visit(s) => return true,
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Object(map) => stack.extend(map.values().rev()),
            _ => {}
        }
    }
    false
}

/// Lexical path normalization for matching: `\` → `/`, `//` → `/`,
/// `./` dropped, `a/../` folded. Matching uses both the raw value and this.
pub(crate) fn normalize_path(value: &str) -> String {
    let replaced = value.replace('\\', "/");
    let absolute = replaced.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in replaced.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            _ => parts.push(part),
        }
    }
    let mut out = if absolute {
        String::from("/")
    } else {
        String::new()
    };
    out.push_str(&parts.join("/"));
    if replaced.ends_with('/') && !parts.is_empty() {
        out.push('/');
    }
    out
}

/// Whether a value matches a path-glob set, raw or normalized.
pub(crate) fn path_value_matches(globs: &Globs, value: &str) -> bool {
    if globs.is_match(value) {
        return true;
    }
    let normalized = normalize_path(value);
    normalized != value && globs.is_match(&normalized)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_globs(p: &[&str]) -> Globs {
        let v: Vec<String> = p.iter().map(|s| s.to_string()).collect();
        Globs::new(&v, GlobKind::Path).expect("valid globs")
    }

    #[test]
    fn ssh_glob_matches_evasions() {
        let g = path_globs(&["**/.ssh/**"]);
        for v in [
            "/home/u/.ssh/id_rsa",
            "~/.ssh/id_rsa",
            ".ssh/config",
            "/home/u//.ssh//id_rsa",
            "/home/u/./.ssh/id_rsa",
            "/home/u/x/../.ssh/id_rsa",
            "C:\\Users\\u\\.ssh\\id_rsa",
            "file:///home/u/.ssh/id_rsa",
        ] {
            assert!(path_value_matches(&g, v), "{v} should match **/.ssh/**");
        }
        for v in ["/home/u/ssh/id_rsa", "/home/u/.sshx/id", "notes about .ssh"] {
            assert!(
                !path_value_matches(&g, v),
                "{v} should not match **/.ssh/**"
            );
        }
    }

    #[test]
    fn star_does_not_cross_separator_in_paths() {
        let g = path_globs(&["/etc/*"]);
        assert!(g.is_match("/etc/passwd"));
        assert!(
            !g.is_match("/etc/ssl/private/key"),
            "* must stop at / in path globs"
        );
    }

    #[test]
    fn commands_by_name_and_path() {
        let c = CommandList::new(&["npx".into(), "/usr/local/bin/*".into()]).expect("valid");
        assert!(c.allows("npx", None));
        assert!(
            c.allows("npx.cmd", None),
            "Windows launcher suffix is the same name"
        );
        assert!(
            !c.allows("/tmp/evil/npx", None),
            "a path is not allowed by a bare name"
        );
        assert!(c.allows("/usr/local/bin/node", None));
        assert!(
            c.allows("node", Some("/usr/local/bin/node")),
            "resolved path matches a path pattern"
        );
        assert!(!c.allows("node", Some("/usr/bin/node")));
    }

    #[test]
    fn escape_makes_literal() {
        let g =
            Globs::new(&[glob_escape("a*[b]?")], GlobKind::Name).expect("escaped glob compiles");
        assert!(g.is_match("a*[b]?"));
        assert!(!g.is_match("axx[b]z"));
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let mut v = Value::String("/home/u/.ssh/id".into());
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        let g = path_globs(&["**/.ssh/**"]);
        assert!(any_string(&v, |s| path_value_matches(&g, s)));
        // Drop iteratively-ish: serde_json's drop is recursive; leak-free unwrap to avoid overflow in drop.
        let mut cur = v;
        while let Value::Array(mut items) = cur {
            cur = items.pop().unwrap_or(Value::Null);
        }
    }
}
