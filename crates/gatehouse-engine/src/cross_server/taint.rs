//! Taint marks: what is kept of a read's result so a later call of another
//! server can be checked for carrying its data, without keeping the data.
//!
//! A result is reduced to keyed 64-bit hashes of
//! - every 16-byte window of its text (all string leaves), so a copied
//!   substring of ≥ 16 bytes is found; past [`MAX_GRAMS`] windows only the
//!   hashes whose low bits are zero are kept (1 in 2, 4, …): a copied run of
//!   16 + n bytes is then missed with probability about (1 − 1/p)^(n+1);
//! - its distinctive tokens (passwords, keys, ids: see [`is_distinctive`]).
//!
//! The hashes are keyed with a per-install key passed in by the host, so a
//! reader of the database cannot test guesses without that key (a speed
//! bump, as the key is readable by same-user code — DESIGN §6). Arguments are
//! hashed the same way as written and after one layer of decoding (base64,
//! hex, percent-encoding, a JSON string holding more strings).

use serde_json::Value;

/// Bytes in one substring window: the "≥ 16 characters".
pub const GRAM: usize = 16;
/// Most window hashes kept per result (64 KiB of marks).
pub const MAX_GRAMS: usize = 8192;
/// Most token hashes kept per result.
pub const MAX_TOKENS: usize = 1024;
const VERSION: u8 = 1;

/// The per-install key for taint hashes.
#[derive(Clone)]
pub struct TaintKey {
    mul: u64,
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for TaintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaintKey(<redacted>)")
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl TaintKey {
    pub fn new(key: &[u8; 32]) -> TaintKey {
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&key[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        TaintKey {
            mul: splitmix(word(0)) | 1,
            k0: word(1) ^ word(3).rotate_left(17),
            k1: word(2),
        }
    }

    fn finish(&self, h: u64) -> u64 {
        splitmix(splitmix(h ^ self.k0) ^ self.k1)
    }

    /// Hashes of every GRAM-byte window of `text`, in order.
    fn grams(&self, text: &[u8], mut out: impl FnMut(u64)) {
        if text.len() < GRAM {
            return;
        }
        let mut pow = 1u64; // mul^(GRAM-1)
        for _ in 1..GRAM {
            pow = pow.wrapping_mul(self.mul);
        }
        let mut h = 0u64;
        for &b in &text[..GRAM] {
            h = h.wrapping_mul(self.mul).wrapping_add(u64::from(b) + 1);
        }
        out(self.finish(h));
        for i in GRAM..text.len() {
            let old = u64::from(text[i - GRAM]) + 1;
            h = h.wrapping_sub(old.wrapping_mul(pow));
            h = h
                .wrapping_mul(self.mul)
                .wrapping_add(u64::from(text[i]) + 1);
            out(self.finish(h));
        }
    }

    fn token(&self, token: &str) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in token.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.finish(h ^ (token.len() as u64).rotate_left(56))
    }
}

fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

fn token_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '+' | '/' | '=' | '.' | '~')
}

/// Labels after which the next token is a secret whatever it looks like.
const SECRET_LABELS: &[&str] = &[
    "password", "passwd", "pwd", "pass", "secret", "token", "apikey", "api_key", "api-key", "key",
    "pin", "otp",
];

/// Tokens of a text, each with whether a secret label precedes it.
fn tokens(text: &str) -> impl Iterator<Item = (&str, bool)> {
    let mut labelled = false;
    text.split(|c: char| !token_char(c)).filter_map(move |raw| {
        let tok = raw.trim_matches(|c: char| matches!(c, '.' | '/' | '=' | '-' | '~'));
        if tok.is_empty() {
            return None;
        }
        let this = (tok, labelled);
        labelled = SECRET_LABELS.iter().any(|l| is_label(tok, l));
        Some(this)
    })
}

/// `tok` is the label `l` (lowercase ASCII) or ends with `_` + `l`, ASCII
/// case ignored; without allocating (this runs for every token of a result).
fn is_label(tok: &str, l: &str) -> bool {
    let (t, l) = (tok.as_bytes(), l.as_bytes());
    if t.len() == l.len() {
        return t.eq_ignore_ascii_case(l);
    }
    t.len() > l.len()
        && t[t.len() - l.len()..].eq_ignore_ascii_case(l)
        && t[t.len() - l.len() - 1] == b'_'
}

/// A password, key or id: long enough and not a plain word. Labelled tokens
/// (`password: hunter2x`) count from 6 characters.
pub fn is_distinctive(token: &str, labelled: bool) -> bool {
    // One pass over the token (a result's token can be megabytes long).
    let (mut len, mut letters, mut digits, mut upper, mut lower) = (0, 0, 0, 0, 0);
    for c in token.chars() {
        len += 1;
        letters += usize::from(c.is_alphabetic());
        digits += usize::from(c.is_ascii_digit());
        upper += usize::from(c.is_uppercase());
        lower += usize::from(c.is_lowercase());
    }
    if labelled && len >= 6 {
        return true;
    }
    if len < 8 {
        return false;
    }
    let mixed_case = upper > 0 && lower > 0 && upper + lower == letters && upper > 1;
    (letters > 0 && digits > 0) || (len >= 20 && mixed_case) || (len >= 12 && digits == len)
}

/// The window hashes a result keeps: every distinct one whose low `shift`
/// bits are zero, `shift` the smallest that keeps at most [`MAX_GRAMS`].
/// Built while hashing, so a large result never holds all of its window
/// hashes at once (8 bytes per byte of text).
struct Sample {
    shift: u8,
    kept: Vec<u64>,
}

impl Sample {
    fn new() -> Sample {
        Sample {
            shift: 0,
            kept: Vec::new(),
        }
    }

    fn mask(&self) -> u64 {
        (1u64 << self.shift) - 1
    }

    fn add(&mut self, h: u64) {
        if h & self.mask() != 0 {
            return;
        }
        self.kept.push(h);
        if self.kept.len() >= 4 * MAX_GRAMS {
            self.settle();
        }
    }

    /// Deduplicates, then raises the shift until what is kept fits. A
    /// hash dropped at a shift is dropped at every larger one, so the
    /// result does not depend on when this runs.
    fn settle(&mut self) {
        self.kept.sort_unstable();
        self.kept.dedup();
        while self.kept.len() > MAX_GRAMS && self.shift < 32 {
            self.shift += 1;
            let mask = self.mask();
            self.kept.retain(|h| h & mask == 0);
        }
    }

    fn finish(mut self) -> (u8, Vec<u64>) {
        self.settle();
        self.kept.truncate(MAX_GRAMS);
        (self.shift, self.kept)
    }
}

/// Keeps the `max` smallest distinct values, sorted (the same set whether
/// applied once at the end or again as values arrive).
fn smallest_distinct(values: &mut Vec<u64>, max: usize) {
    values.sort_unstable();
    values.dedup();
    values.truncate(max);
}

/// Taint marks of one result, as stored (opaque bytes).
pub fn result_marks(key: &TaintKey, result: &Value) -> Vec<u8> {
    let mut texts = Vec::new();
    strings(result, &mut texts);
    let mut sample = Sample::new();
    let mut toks = Vec::new();
    for text in &texts {
        key.grams(text.as_bytes(), |h| sample.add(h));
        for (tok, labelled) in tokens(text) {
            if is_distinctive(tok, labelled) {
                toks.push(key.token(tok));
                if toks.len() >= 4 * MAX_TOKENS {
                    smallest_distinct(&mut toks, MAX_TOKENS);
                }
            }
        }
    }
    let (shift, grams) = sample.finish();
    smallest_distinct(&mut toks, MAX_TOKENS);
    let mut out = Vec::with_capacity(6 + 8 * (toks.len() + grams.len()));
    out.push(VERSION);
    out.push(shift);
    out.extend_from_slice(&(toks.len() as u32).to_le_bytes());
    for h in toks.iter().chain(&grams) {
        out.extend_from_slice(&h.to_le_bytes());
    }
    out
}

struct Marks<'a> {
    tokens: &'a [u8],
    grams: &'a [u8],
}

fn parse_marks(bytes: &[u8]) -> Option<Marks<'_>> {
    if bytes.len() < 6 || bytes[0] != VERSION {
        return None;
    }
    let n = u32::from_le_bytes(bytes[2..6].try_into().ok()?) as usize;
    let body = &bytes[6..];
    if !body.len().is_multiple_of(8) || n * 8 > body.len() {
        return None;
    }
    let (tokens, grams) = body.split_at(n * 8);
    Some(Marks { tokens, grams })
}

fn contains(sorted: &[u8], h: u64) -> bool {
    let n = sorted.len() / 8;
    let at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&sorted[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match at(mid).cmp(&h) {
            std::cmp::Ordering::Equal => return true,
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
        }
    }
    false
}

/// What a call's arguments carry, hashed; computed once per call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArgMarks {
    grams: Vec<u64>,
    tokens: Vec<u64>,
}

/// How a call was linked to an earlier result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// A substring of ≥ 16 bytes of the result.
    Substring,
    /// A distinctive token of the result.
    Token,
}

impl Link {
    pub fn as_str(self) -> &'static str {
        match self {
            Link::Substring => "substring",
            Link::Token => "token",
        }
    }
}

impl ArgMarks {
    /// Hashes the string leaves of `arguments`, as written and decoded once.
    pub fn of(key: &TaintKey, arguments: &Value) -> ArgMarks {
        let mut texts = Vec::new();
        strings(arguments, &mut texts);
        let mut marks = ArgMarks::default();
        for text in texts {
            marks.add(key, text);
            for decoded in decodings(text) {
                marks.add(key, &decoded);
            }
        }
        marks.grams.sort_unstable();
        marks.grams.dedup();
        marks.tokens.sort_unstable();
        marks.tokens.dedup();
        marks
    }

    fn add(&mut self, key: &TaintKey, text: &str) {
        key.grams(text.as_bytes(), |h| self.grams.push(h));
        // Any token of an argument may be a result's distinctive token.
        for (tok, _) in tokens(text) {
            if tok.len() >= 6 {
                self.tokens.push(key.token(tok));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.grams.is_empty() && self.tokens.is_empty()
    }

    /// Whether these arguments carry data of the result with `marks`.
    pub fn link(&self, marks: &[u8]) -> Option<Link> {
        let marks = parse_marks(marks)?;
        if self.grams.iter().any(|h| contains(marks.grams, *h)) {
            return Some(Link::Substring);
        }
        if self.tokens.iter().any(|h| contains(marks.tokens, *h)) {
            return Some(Link::Token);
        }
        None
    }
}

/// One layer of decoding of an argument string (each that applies).
pub fn decodings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = text.trim();
    if trimmed.contains('%') {
        if let Some(d) = percent_decode(trimmed).filter(|d| d != trimmed) {
            out.push(d);
        }
    }
    if trimmed.len() >= 12 {
        if let Some(d) = base64_decode(trimmed) {
            out.push(d);
        }
        if let Some(d) = hex_decode(trimmed) {
            out.push(d);
        }
    }
    // Also decode tokens inside a longer text ("see aGVsbG8gd29ybGQ= there").
    for tok in trimmed.split(|c: char| {
        c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '=' | '&' | '?' | ':')
    }) {
        if tok.len() >= 12 && tok.len() < trimmed.len() {
            if let Some(d) = base64_decode(tok).or_else(|| hex_decode(tok)) {
                out.push(d);
            }
        }
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') || trimmed.starts_with('"') {
        if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
            let mut inner = Vec::new();
            strings(&v, &mut inner);
            out.extend(inner.into_iter().map(str::to_owned));
        }
    }
    out
}

fn printable(bytes: Vec<u8>) -> Option<String> {
    let text = String::from_utf8(bytes).ok()?;
    let ok = text
        .chars()
        .filter(|c| !c.is_control() || c.is_whitespace())
        .count();
    (ok * 10 >= text.chars().count() * 9 && !text.is_empty()).then_some(text)
}

fn base64_decode(text: &str) -> Option<String> {
    let body = text.trim_end_matches('=');
    let mut bits = 0u32;
    let mut nbits = 0;
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for c in body.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    printable(out)
}

fn hex_decode(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .ok()?;
    printable(bytes)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod label_tests {
    use super::{is_label, SECRET_LABELS};

    /// The same answer as lowercasing the token and comparing.
    #[test]
    fn labels_match_like_lowercased_comparison() {
        for tok in [
            "password",
            "PASSWORD",
            "db_Password",
            "dbpassword",
            "_key",
            "key",
            "KEY_",
            "ké_key",
            "x_KEY",
            "pin",
            "spin",
            "my_pin",
            "é",
            "_",
            "token_x",
            "api-key",
            "API_KEY",
        ] {
            let lower = tok.to_ascii_lowercase();
            for l in SECRET_LABELS {
                let expected = lower == *l || lower.ends_with(&format!("_{l}"));
                assert_eq!(is_label(tok, l), expected, "{tok:?} vs label {l:?}");
            }
        }
    }
}
