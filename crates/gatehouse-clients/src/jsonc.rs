//! A small lossless JSONC reader: parses JSON with `//` and `/* */`
//! comments and trailing commas into nodes that carry byte spans into the
//! original text, so rewrites are span edits that leave everything else —
//! comments, commas, key order, indentation — exactly as it was.

use std::ops::Range;

/// A parsed value with its byte span in the source.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `{…}`.
    Object {
        span: Range<usize>,
        members: Vec<Member>,
    },
    /// `[…]`.
    Array {
        span: Range<usize>,
        items: Vec<Node>,
    },
    /// A string; `value` is decoded, `span` includes the quotes.
    String { span: Range<usize>, value: String },
    /// Any number, kept as text.
    Number { span: Range<usize> },
    /// `true` / `false`.
    Bool { span: Range<usize>, value: bool },
    /// `null`.
    Null { span: Range<usize> },
}

/// One `"key": value` of an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Decoded key.
    pub key: String,
    /// Span of the key, quotes included.
    pub key_span: Range<usize>,
    /// The value.
    pub value: Node,
}

/// Where and why parsing failed (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {msg}")]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
    /// What was expected.
    pub msg: String,
}

impl Node {
    /// The node's byte span.
    pub fn span(&self) -> Range<usize> {
        match self {
            Node::Object { span, .. }
            | Node::Array { span, .. }
            | Node::String { span, .. }
            | Node::Number { span }
            | Node::Bool { span, .. }
            | Node::Null { span } => span.clone(),
        }
    }

    /// Member `key` of an object (the last one, as JSON parsers do).
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.member(key).map(|m| &m.value)
    }

    /// The member itself, for its key span.
    pub fn member(&self, key: &str) -> Option<&Member> {
        match self {
            Node::Object { members, .. } => members.iter().rev().find(|m| m.key == key),
            _ => None,
        }
    }

    /// The decoded string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::String { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Members, if an object.
    pub fn members(&self) -> &[Member] {
        match self {
            Node::Object { members, .. } => members,
            _ => &[],
        }
    }

    /// Items, if an array.
    pub fn items(&self) -> &[Node] {
        match self {
            Node::Array { items, .. } => items,
            _ => &[],
        }
    }
}

/// Parses a whole document.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        pos: 0,
    };
    if text.starts_with('\u{feff}') {
        p.pos = 3;
    }
    p.ws()?;
    let node = p.value(0)?;
    p.ws()?;
    if p.pos != p.s.len() {
        return Err(p.err("unexpected text after the document"));
    }
    Ok(node)
}

/// 1-based line and column of byte `offset`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Encodes `s` as a JSON string literal (quotes included).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

const MAX_DEPTH: usize = 256;

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, msg: &str) -> ParseError {
        let (line, col) = line_col(self.text, self.pos);
        ParseError {
            line,
            col,
            msg: msg.to_owned(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn ws(&mut self) -> Result<(), ParseError> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'/') if self.s.get(self.pos + 1) == Some(&b'/') => {
                    while !matches!(self.peek(), None | Some(b'\n')) {
                        self.pos += 1;
                    }
                }
                Some(b'/') if self.s.get(self.pos + 1) == Some(&b'*') => {
                    let start = self.pos;
                    self.pos += 2;
                    loop {
                        match self.peek() {
                            None => {
                                self.pos = start;
                                return Err(self.err("unterminated /* comment"));
                            }
                            Some(b'*') if self.s.get(self.pos + 1) == Some(&b'/') => {
                                self.pos += 2;
                                break;
                            }
                            _ => self.pos += 1,
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        let start = self.pos;
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => {
                let value = self.string()?;
                Ok(Node::String {
                    span: start..self.pos,
                    value,
                })
            }
            Some(b't') => self.word(
                "true",
                Node::Bool {
                    span: start..start + 4,
                    value: true,
                },
            ),
            Some(b'f') => self.word(
                "false",
                Node::Bool {
                    span: start..start + 5,
                    value: false,
                },
            ),
            Some(b'n') => self.word(
                "null",
                Node::Null {
                    span: start..start + 4,
                },
            ),
            Some(b'-' | b'0'..=b'9') => {
                while matches!(
                    self.peek(),
                    Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                ) {
                    self.pos += 1;
                }
                Ok(Node::Number {
                    span: start..self.pos,
                })
            }
            None => Err(self.err("unexpected end of file, expected a value")),
            _ => Err(self.err("expected a value")),
        }
    }

    fn word(&mut self, w: &str, node: Node) -> Result<Node, ParseError> {
        if self.s[self.pos..].starts_with(w.as_bytes()) {
            self.pos += w.len();
            Ok(node)
        } else {
            Err(self.err("expected a value"))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Node, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut members = Vec::new();
        loop {
            self.ws()?;
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Node::Object {
                        span: start..self.pos,
                        members,
                    });
                }
                Some(b'"') => {}
                None => return Err(self.err("unexpected end of file inside an object")),
                _ => return Err(self.err("expected a quoted key or '}'")),
            }
            let key_start = self.pos;
            let key = self.string()?;
            let key_span = key_start..self.pos;
            self.ws()?;
            if self.peek() != Some(b':') {
                return Err(self.err("expected ':' after the key"));
            }
            self.pos += 1;
            self.ws()?;
            let value = self.value(depth + 1)?;
            members.push(Member {
                key,
                key_span,
                value,
            });
            self.ws()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                None => return Err(self.err("unexpected end of file inside an object")),
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Node, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.ws()?;
            if self.peek() == Some(b']') {
                self.pos += 1;
                return Ok(Node::Array {
                    span: start..self.pos,
                    items,
                });
            }
            if self.peek().is_none() {
                return Err(self.err("unexpected end of file inside an array"));
            }
            items.push(self.value(depth + 1)?);
            self.ws()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {}
                None => return Err(self.err("unexpected end of file inside an array")),
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let open = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while !matches!(self.peek(), None | Some(b'"' | b'\\' | b'\n')) {
                self.pos += 1;
            }
            out.push_str(&self.text[run_start..self.pos]);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let Some(c) = self.peek() else {
                        self.pos = open;
                        return Err(self.err("unterminated string"));
                    };
                    self.pos += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&hi)
                                && self.s[self.pos..].starts_with(b"\\u")
                            {
                                self.pos += 2;
                                let lo = self.hex4()?;
                                char::from_u32(
                                    0x10000
                                        + ((hi - 0xD800) << 10)
                                        + (lo.wrapping_sub(0xDC00) & 0x3FF),
                                )
                            } else {
                                char::from_u32(hi)
                            };
                            out.push(c.unwrap_or('\u{fffd}'));
                        }
                        _ => {
                            self.pos -= 1;
                            return Err(self.err("invalid escape in string"));
                        }
                    }
                }
                _ => {
                    self.pos = open;
                    return Err(self.err("unterminated string"));
                }
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        let v = u32::from_str_radix(digits, 16).map_err(|_| self.err("invalid \\u escape"))?;
        self.pos += 4;
        Ok(v)
    }
}

/// A text replacement: `range` of the original becomes `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// Byte range in the original text (empty for an insertion).
    pub range: Range<usize>,
    /// Replacement.
    pub text: String,
}

/// Applies non-overlapping edits. At one offset, a replacement applies
/// before an insertion, so the insertion lands in front of it.
pub fn apply_edits(text: &str, edits: &[Edit]) -> String {
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by(|a, b| {
        b.range
            .start
            .cmp(&a.range.start)
            .then(b.range.end.cmp(&a.range.end))
    });
    let mut out = text.to_owned();
    for e in sorted {
        out.replace_range(e.range.clone(), &e.text);
    }
    out
}

/// The whitespace that starts the line containing `offset`, if only
/// whitespace precedes `offset` on that line.
pub fn line_indent(text: &str, offset: usize) -> Option<&str> {
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let prefix = &text[line_start..offset];
    prefix
        .bytes()
        .all(|b| b == b' ' || b == b'\t')
        .then_some(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_jsonc_with_spans() {
        let text = "// lead\n{\n  \"a\": [1, \"x\\n\", true, null,], /* c */\n  \"b\": {\"c\": -1.5e3},\n}\n";
        let doc = parse(text).unwrap();
        let a = doc.get("a").unwrap();
        assert_eq!(&text[a.span()], "[1, \"x\\n\", true, null,]");
        assert_eq!(a.items()[1].as_str(), Some("x\n"));
        assert_eq!(
            &text[doc.get("b").unwrap().get("c").unwrap().span()],
            "-1.5e3"
        );
        assert_eq!(&text[doc.member("b").unwrap().key_span.clone()], "\"b\"");
    }

    fn check_error(text: &str, expect: &str) {
        let err = parse(text).unwrap_err();
        assert_eq!(err.to_string(), expect, "error position for {text:?}");
    }

    #[test]
    fn errors_name_line_and_column() {
        check_error("{\n  \"a\": 1\n  \"b\": 2\n}", "3:3: expected ',' or '}'");
        check_error("{\"a\": }", "1:7: expected a value");
        check_error("{\"a\": \"x", "1:7: unterminated string");
        check_error("{} x", "1:4: unexpected text after the document");
        check_error("/* open", "1:1: unterminated /* comment");
        check_error("", "1:1: unexpected end of file, expected a value");
    }

    #[test]
    fn surrogate_pairs_and_quote_round_trip() {
        let doc = parse(r#""\ud83d\ude00 \u00e9""#).unwrap();
        assert_eq!(doc.as_str(), Some("😀 é"));
        for s in ["plain", "q\"b\\s", "tab\tnl\n", "\u{1}"] {
            assert_eq!(
                parse(&quote(s)).unwrap().as_str(),
                Some(s),
                "quote must round-trip {s:?}"
            );
        }
    }

    #[test]
    fn edits_apply_back_to_front() {
        let out = apply_edits(
            "abcdef",
            &[
                Edit {
                    range: 1..1,
                    text: "X".into(),
                },
                Edit {
                    range: 1..3,
                    text: "Y".into(),
                },
                Edit {
                    range: 5..6,
                    text: "Z".into(),
                },
            ],
        );
        assert_eq!(out, "aXYdeZ");
    }
}
