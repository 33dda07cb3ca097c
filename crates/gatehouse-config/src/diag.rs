//! Errors and warnings that point at `file:line:column`.

use std::fmt;
use std::path::PathBuf;

/// One segment of a key path inside a policy document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// Where in the document a value lives: `["tool_policy", "allow", 2, "tool"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    pub fn key(&self, key: &str) -> KeyPath {
        let mut segs = self.0.clone();
        segs.push(Seg::Key(key.to_owned()));
        KeyPath(segs)
    }
    pub fn index(&self, index: usize) -> KeyPath {
        let mut segs = self.0.clone();
        segs.push(Seg::Index(index));
        KeyPath(segs)
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A message about one place in one policy file. Messages never contain
/// values from the file that could be secrets (env values, quoted strings
/// in type errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file as the person named it (or `<base>`/`<local>` for texts without a path).
    pub file: String,
    /// 1-based line; 0 when the position is unknown.
    pub line: usize,
    /// 1-based column (in characters); 0 when the position is unknown.
    pub column: usize,
    /// What is wrong and, where useful, how to fix it.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.column, self.message
            )
        }
    }
}

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A policy file (local or base) could not be read.
    #[error("cannot read policy file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// One or more files are not valid policy.
    #[error("invalid policy:\n{}", render(.0))]
    Invalid(Vec<Diagnostic>),
}

impl PolicyError {
    /// The diagnostics of an invalid policy (empty for I/O errors).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            PolicyError::Invalid(d) => d,
            PolicyError::Io { .. } => &[],
        }
    }
}

fn render(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("  {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// 1-based (line, column) of a byte offset; the column counts characters.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// Resolves key paths to byte spans in one document (parsed lazily, once).
pub(crate) struct Locator<'t> {
    text: &'t str,
    doc: Option<toml_edit::ImDocument<&'t str>>,
}

impl<'t> Locator<'t> {
    pub fn new(text: &'t str) -> Self {
        Locator {
            text,
            doc: toml_edit::ImDocument::parse(text).ok(),
        }
    }

    /// Span of the value at `path`, or of the deepest existing ancestor.
    /// With `key = true` the span of the last key itself (for "unknown key"-like errors).
    pub fn span(&self, path: &KeyPath, want_key: bool) -> Option<std::ops::Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut best: Option<std::ops::Range<usize>> = None;
        let mut cur = Node::Table(doc.as_table());
        for seg in &path.0 {
            let next = match (cur, seg) {
                (Node::Table(t), Seg::Key(k)) => t
                    .get_key_value(k)
                    .map(|(key, item)| (key.span(), Node::from_item(item), item.span())),
                (Node::Inline(t), Seg::Key(k)) => t
                    .get_key_value(k)
                    .map(|(key, item)| (key.span(), Node::from_item(item), item.span())),
                (Node::Tables(a), Seg::Index(i)) => {
                    a.get(*i).map(|t| (None, Node::Table(t), t.span()))
                }
                (Node::Array(a), Seg::Index(i)) => a.get(*i).map(|v| {
                    let node = match v {
                        toml_edit::Value::InlineTable(t) => Node::Inline(t),
                        toml_edit::Value::Array(a) => Node::Array(a),
                        _ => Node::Leaf,
                    };
                    (None, node, v.span())
                }),
                _ => None,
            };
            let Some((key_span, node, value_span)) = next else {
                break;
            };
            best = if want_key {
                key_span.or(value_span).or(best)
            } else {
                value_span.or(key_span).or(best)
            };
            cur = node;
        }
        best
    }

    pub fn diagnostic(
        &self,
        file: &str,
        path: &KeyPath,
        want_key: bool,
        message: String,
    ) -> Diagnostic {
        let (line, column) = self
            .span(path, want_key)
            .map_or((0, 0), |span| line_col(self.text, span.start));
        let message = if path.0.is_empty() {
            message
        } else {
            format!("`{path}`: {message}")
        };
        Diagnostic {
            file: file.to_owned(),
            line,
            column,
            message,
        }
    }
}

#[derive(Clone, Copy)]
enum Node<'a> {
    Table(&'a toml_edit::Table),
    Inline(&'a toml_edit::InlineTable),
    Tables(&'a toml_edit::ArrayOfTables),
    Array(&'a toml_edit::Array),
    Leaf,
}

impl<'a> Node<'a> {
    fn from_item(item: &'a toml_edit::Item) -> Node<'a> {
        match item {
            toml_edit::Item::Table(t) => Node::Table(t),
            toml_edit::Item::ArrayOfTables(a) => Node::Tables(a),
            toml_edit::Item::Value(toml_edit::Value::InlineTable(t)) => Node::Inline(t),
            toml_edit::Item::Value(toml_edit::Value::Array(a)) => Node::Array(a),
            _ => Node::Leaf,
        }
    }
}

/// Removes quoted values from serde/toml messages: a secret pasted where a
/// table was expected must not come back in an error.
pub(crate) fn sanitize_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find('"') {
        out.push_str(&rest[..start]);
        match rest[start + 1..].find('"') {
            Some(end) => {
                out.push_str("\"…\"");
                rest = &rest[start + 1 + end + 1..];
            }
            None => {
                out.push_str("\"…");
                rest = "";
            }
        }
    }
    out.push_str(rest);
    // Unknown enum values are values, not names: drop them.
    if let Some(after) = out.strip_prefix("unknown variant `") {
        if let Some(end) = after.find('`') {
            out = format!("unknown value{}", &after[end + 1..]);
        }
    }
    // Backtick-quoted values (unknown variants/fields) are names, but cap them.
    let mut capped = String::with_capacity(out.len());
    for (i, part) in out.split('`').enumerate() {
        if i > 0 {
            capped.push('`');
        }
        if i % 2 == 1 && part.chars().count() > 40 {
            capped.extend(part.chars().take(40));
            capped.push('…');
        } else {
            capped.push_str(part);
        }
    }
    capped.trim_end().to_owned()
}
