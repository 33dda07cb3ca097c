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

    /// Every problem as a diagnostic: an unreadable file (a missing base,
    /// say) is one at line 0 naming the file and the OS error — never its
    /// contents.
    pub fn to_diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            PolicyError::Invalid(d) => d.clone(),
            PolicyError::Io { path, source } => vec![Diagnostic {
                file: path.display().to_string(),
                line: 0,
                column: 0,
                message: format!("cannot read this policy file: {source}"),
            }],
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

    /// The key path of the value whose span holds `offset` (the innermost
    /// one), or of the table holding the key at `offset`: what a serde error
    /// positioned there is about. `None` when the offset is at the top level
    /// or the text does not parse.
    pub fn path_at(&self, offset: usize) -> Option<KeyPath> {
        let doc = self.doc.as_ref()?;
        let path = find_in_table(doc.as_table(), &KeyPath::default(), offset)?;
        (!path.0.is_empty()).then_some(path)
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

fn contains(span: Option<std::ops::Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|s| s.contains(&offset))
}

fn find_in_table(table: &toml_edit::Table, path: &KeyPath, offset: usize) -> Option<KeyPath> {
    for (key, item) in table.iter() {
        let here = path.key(key);
        if let Some(found) = find_in_item(item, &here, offset) {
            return Some(found);
        }
        let key_span = table.key(key).and_then(|k| k.span());
        if contains(key_span, offset) {
            return Some(path.clone());
        }
    }
    None
}

fn find_in_item(item: &toml_edit::Item, path: &KeyPath, offset: usize) -> Option<KeyPath> {
    match item {
        // A `[table]`'s span is only its header: look inside regardless.
        toml_edit::Item::Table(t) => find_in_table(t, path, offset),
        toml_edit::Item::ArrayOfTables(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, t)| find_in_table(t, &path.index(i), offset)),
        toml_edit::Item::Value(v) => find_in_value(v, path, offset),
        toml_edit::Item::None => None,
    }
}

fn find_in_value(value: &toml_edit::Value, path: &KeyPath, offset: usize) -> Option<KeyPath> {
    if !contains(value.span(), offset) {
        return None;
    }
    let inner = match value {
        toml_edit::Value::InlineTable(t) => t.iter().find_map(|(k, v)| {
            find_in_value(v, &path.key(k), offset).or_else(|| {
                contains(t.key(k).and_then(|key| key.span()), offset).then(|| path.clone())
            })
        }),
        toml_edit::Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_in_value(v, &path.index(i), offset)),
        _ => None,
    };
    Some(inner.unwrap_or_else(|| path.clone()))
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

/// Removes values from serde/toml messages: a secret pasted where a table
/// or a number was expected must not come back in an error. serde's
/// `invalid type: integer `12345`, expected a string` (and `invalid value:
/// …`) keeps only the kind: `invalid type: integer, expected a string`.
pub(crate) fn sanitize_message(message: &str) -> String {
    let message = strip_unexpected_literal(message);
    // toml's words for a non-string where an enum (a fixed word) belongs.
    let message = message.replace("wanted string or table", "invalid type, expected a string");
    let message = message.as_str();
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

/// `invalid type: <kind> <literal>, expected …` → `invalid type: <kind>, expected …`
/// (also for `invalid value:`). serde quotes the literal with backticks
/// (numbers, booleans, characters) or as a Rust string literal (strings,
/// inner quotes escaped), so the literal ends at its closing quote, not at
/// the first `, expected` (which a string may contain).
fn strip_unexpected_literal(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        let Some(at) = message.find(prefix) else {
            continue;
        };
        let start = at + prefix.len();
        let rest = &message[start..];
        let Some(quote) = rest.find(['`', '"']) else {
            return message.to_owned();
        };
        if rest.find(", expected").is_some_and(|e| e < quote) {
            // No literal (`unit value`, `sequence`): nothing to strip.
            return message.to_owned();
        }
        let kind = rest[..quote].trim_end();
        let open = rest.as_bytes()[quote];
        let mut escaped = false;
        let mut close = None;
        for (i, b) in rest.bytes().enumerate().skip(quote + 1) {
            if open == b'"' && b == b'\\' && !escaped {
                escaped = true;
                continue;
            }
            if b == open && !escaped {
                close = Some(i);
                break;
            }
            escaped = false;
        }
        // An unterminated literal: drop everything after the kind.
        let after = close.map_or("", |c| &rest[c + 1..]);
        return format!("{}{kind}{after}", &message[..start]);
    }
    message.to_owned()
}
