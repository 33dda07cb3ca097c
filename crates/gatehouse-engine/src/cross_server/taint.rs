//! Taint marks: what is kept of a read's result so a later call of another
//! server can be checked for carrying its data, without keeping the data.
//!
//! A result is reduced to keyed 64-bit hashes of
//! - every 16-byte window of its text (all string leaves), so a copied
//!   substring of ≥ 16 bytes is found; past [`MAX_GRAMS`] windows only the
//!   hashes whose low bits are zero are kept (1 in 2, 4, …): a copied run of
//!   16 + n bytes is then missed with probability about (1 − 1/p)^(n+1);
//! - its distinctive tokens (passwords, keys, ids: see [`is_distinctive`])
//!   and the distinctive pieces of its tokens (`DB_PASSWORD=x`: `=` splits
//!   tokens; `ab_x`: `_-+/.~` split pieces).
//!
//! Windows that carry no information (mostly spaces, punctuation or a URL's
//! origin such as `https://github.com/`, or few distinct bytes: [`Window`])
//! are not hashed on either side.
//!
//! The hashes are keyed with a per-install key passed in by the host, so a
//! reader of the database cannot test guesses without that key (a speed
//! bump, as the key is readable by same-user code — DESIGN §6). With the
//! key, overlapping windows give more than guesses: from a known 15-byte
//! prefix (`"password": "`) the text that follows can be recovered a byte
//! at a time (256 tries each) while its marks are in the window's look-back
//! — the marks of a read are as sensitive as the read, for as long as they
//! are kept, to whoever holds `install.key` and the database. Arguments are
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

    /// Hashes of every informative GRAM-byte window of `text` (see
    /// [`Window`]), in order.
    fn grams(&self, text: &[u8], out: impl FnMut(u64)) {
        if text.len() < GRAM {
            return;
        }
        let origins = url_origins(text);
        if origins.is_empty() {
            // Most texts: every byte is data, and the loop has registers
            // to spare without the cursors.
            return self.roll(text, |_, _| true, out);
        }
        // Whether the byte at a position is data (a monotonic cursor over
        // the origins: one for the byte entering the window, one leaving).
        let data = |next: &mut usize, pos: usize| {
            while origins.get(*next).is_some_and(|o| o.end <= pos) {
                *next += 1;
            }
            origins.get(*next).is_none_or(|o| o.start > pos)
        };
        self.roll(text, data, out)
    }

    /// [`Self::grams`] with `data(cursor, position)` telling data bytes.
    fn roll(
        &self,
        text: &[u8],
        mut data: impl FnMut(&mut usize, usize) -> bool,
        mut out: impl FnMut(u64),
    ) {
        let mut pow = 1u64; // mul^(GRAM-1)
        for _ in 1..GRAM {
            pow = pow.wrapping_mul(self.mul);
        }
        let (mut entering, mut leaving) = (0, 0);
        let mut window = Window::default();
        let mut h = 0u64;
        for (i, &b) in text.iter().enumerate() {
            let new = (b, data(&mut entering, i));
            if i >= GRAM {
                let old = text[i - GRAM];
                let old = (old, data(&mut leaving, i - GRAM));
                // A byte replaced by the same byte leaves the counts as they
                // are (runs of one byte are common: indentation, rules).
                if old != new {
                    window.remove(old.0, old.1);
                    window.add(new.0, new.1);
                }
                h = h.wrapping_sub((u64::from(old.0) + 1).wrapping_mul(pow));
            } else {
                window.add(new.0, new.1);
            }
            h = h.wrapping_mul(self.mul).wrapping_add(u64::from(b) + 1);
            if i + 1 >= GRAM && window.informative() {
                out(self.finish(h));
            }
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

/// Fewest alphanumeric bytes (ASCII letters and digits, or any byte of a
/// non-ASCII character) in a window that counts as data.
pub const MIN_ALNUM: u32 = 8;
/// Fewest distinct bytes in a window that counts as data.
pub const MIN_DISTINCT: u32 = 6;

/// Byte counts of the current window. A window carries information when at
/// least half of it is alphanumeric data and it holds at least
/// [`MIN_DISTINCT`] different bytes: runs of spaces, `-`, `=` or
/// `|---|---|` (indentation, markdown rules and tables), a repeated
/// character or a short repeated pattern are no evidence that data was
/// copied. Letters of a URL's origin are not data ([`url_origins`]).
struct Window {
    counts: [u8; 256],
    distinct: u32,
    alnum: u32,
}

impl Default for Window {
    fn default() -> Window {
        Window {
            counts: [0; 256],
            distinct: 0,
            alnum: 0,
        }
    }
}

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b >= 0x80
}

impl Window {
    fn add(&mut self, b: u8, data: bool) {
        let n = &mut self.counts[usize::from(b)];
        self.distinct += u32::from(*n == 0);
        *n += 1;
        self.alnum += u32::from(data && alnum(b));
    }

    fn remove(&mut self, b: u8, data: bool) {
        let n = &mut self.counts[usize::from(b)];
        *n -= 1;
        self.distinct -= u32::from(*n == 0);
        self.alnum -= u32::from(data && alnum(b));
    }

    fn informative(&self) -> bool {
        self.alnum >= MIN_ALNUM && self.distinct >= MIN_DISTINCT
    }
}

/// The origins (`scheme://host[:port]/`) of the URLs in `text`, as byte
/// ranges in order. Well-known boilerplate such as `https://github.com/`
/// says where, not what, so its letters are not data: a window needs
/// [`MIN_ALNUM`] alphanumerics outside origins (`com/acme/widgets` has).
/// A user name before `@` ends the origin, so `postgres://admin:secret@…`
/// keeps its secret as data.
fn url_origins(text: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = memchr::memmem::find(&text[from..], b"://") {
        let sep = from + at;
        let start = text[..sep]
            .iter()
            .rposition(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))
            .map_or(0, |p| p + 1);
        let host_len =
            |from: usize, ok: fn(&u8) -> bool| text[from..].iter().take_while(|b| ok(b)).count();
        let mut end = sep + 3;
        end += host_len(end, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.')
        });
        if text.get(end) == Some(&b':') {
            let digits = host_len(end + 1, u8::is_ascii_digit);
            if digits > 0 {
                end += 1 + digits;
            }
        }
        if text.get(end) == Some(&b'/') {
            end += 1;
        }
        if start < sep {
            out.push(start..end);
        }
        from = end.max(sep + 3);
    }
    out
}

fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        // Keys too: data can ride in a key as well as in a value.
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k);
            strings(v, out)
        }),
        _ => {}
    }
}

/// Characters inside a token. `=` is not one: `DB_PASSWORD=Wq7mT2xLp9Rk`
/// and `?p=Wq7mT2xLp9Rk` hold the token `Wq7mT2xLp9Rk` (base64 has `=` only
/// as trailing padding, which tokens drop anyway).
fn token_char(c: char) -> bool {
    if c.is_ascii() {
        token_byte(c as u8)
    } else {
        c.is_alphanumeric()
    }
}

/// [`token_char`] for an ASCII byte.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'/' | b'.' | b'~')
}

/// The pieces of a token between its inner separators (`_-+/.~`), when it
/// has any: `_Wq7mT2xLp9Rk`, `Wq7mT2xLp9Rk_x` and `e.com/c/Wq7mT2xLp9Rk`
/// all hold the piece `Wq7mT2xLp9Rk`.
fn pieces(token: &str) -> impl Iterator<Item = &str> {
    // A token without separators is not walked a second time.
    let separated = if token.is_ascii() {
        token.bytes().any(|b| !b.is_ascii_alphanumeric())
    } else {
        token.contains(|c: char| !c.is_alphanumeric())
    };
    let split = if separated { token } else { "" };
    split
        .split(|c: char| !c.is_alphanumeric())
        .filter(|p| !p.is_empty())
}

/// Labels after which the next token is a secret whatever it looks like.
const SECRET_LABELS: &[&str] = &[
    "password", "passwd", "pwd", "pass", "secret", "token", "apikey", "api_key", "api-key", "key",
    "pin", "otp",
];

/// The runs of [`token_char`]s in `text`, in order: `text.split(|c|
/// !token_char(c))` without its empty pieces, reading ASCII byte by byte.
struct Runs<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Runs<'a> {
    /// Whether the character at byte `at` is a token character, and its
    /// length.
    #[inline(always)]
    fn class(&self, at: usize) -> (bool, usize) {
        let b = self.text.as_bytes()[at];
        if b.is_ascii() {
            return (token_byte(b), 1);
        }
        let c = self.text[at..].chars().next().unwrap_or_default();
        (token_char(c), c.len_utf8())
    }
}

impl<'a> Iterator for Runs<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let len = self.text.len();
        while self.at < len {
            let (inside, width) = self.class(self.at);
            if inside {
                break;
            }
            self.at += width;
        }
        let start = self.at;
        while self.at < len {
            let (inside, width) = self.class(self.at);
            if !inside {
                break;
            }
            self.at += width;
        }
        (start < self.at).then(|| &self.text[start..self.at])
    }
}

/// Tokens of a text, each with whether a secret label precedes it.
fn tokens(text: &str) -> impl Iterator<Item = (&str, bool)> {
    let mut labelled = false;
    Runs { text, at: 0 }.filter_map(move |raw| {
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

/// Fewest characters of a distinctive token.
const MIN_DISTINCTIVE: usize = 8;
/// Fewest characters of a distinctive token after a secret label.
const MIN_LABELLED: usize = 6;

/// Whether `token` has too few bytes to be distinctive (a byte count is
/// never below the character count): most tokens are short words.
fn too_short(token: &str, labelled: bool) -> bool {
    token.len()
        < if labelled {
            MIN_LABELLED
        } else {
            MIN_DISTINCTIVE
        }
}

/// A password, key or id: long enough and not a plain word. Labelled tokens
/// (`password: hunter2x`) count from 6 characters.
pub fn is_distinctive(token: &str, labelled: bool) -> bool {
    if too_short(token, labelled) {
        return false;
    }
    // One pass over the token (a result's token can be megabytes long);
    // an ASCII token is counted byte by byte, without decoding UTF-8.
    let (len, letters, digits, upper, lower) = if token.is_ascii() {
        tally_ascii(token.as_bytes())
    } else {
        tally(token.chars())
    };
    if labelled && len >= MIN_LABELLED {
        return true;
    }
    if len < MIN_DISTINCTIVE {
        return false;
    }
    let mixed_case = upper > 0 && lower > 0 && upper + lower == letters && upper > 1;
    (letters > 0 && digits > 0) || (len >= 20 && mixed_case) || (len >= 12 && digits == len)
}

/// [`tally`] of ASCII text: its letters are exactly its upper- and
/// lowercase ones. Counted in byte-wide lanes, 255 bytes at a time, which
/// the compiler vectorizes.
fn tally_ascii(bytes: &[u8]) -> (usize, usize, usize, usize, usize) {
    let (mut digits, mut upper, mut lower) = (0, 0, 0);
    for chunk in bytes.chunks(255) {
        let (mut d, mut u, mut l) = (0u8, 0u8, 0u8);
        for &b in chunk {
            d += u8::from(b.is_ascii_digit());
            u += u8::from(b.is_ascii_uppercase());
            l += u8::from(b.is_ascii_lowercase());
        }
        digits += usize::from(d);
        upper += usize::from(u);
        lower += usize::from(l);
    }
    (bytes.len(), upper + lower, digits, upper, lower)
}

/// Characters, letters, ASCII digits, upper- and lowercase letters.
fn tally(chars: impl Iterator<Item = char>) -> (usize, usize, usize, usize, usize) {
    let (mut len, mut letters, mut digits, mut upper, mut lower) = (0, 0, 0, 0, 0);
    for c in chars {
        len += 1;
        letters += usize::from(c.is_alphabetic());
        digits += usize::from(c.is_ascii_digit());
        upper += usize::from(c.is_uppercase());
        lower += usize::from(c.is_lowercase());
    }
    (len, letters, digits, upper, lower)
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
        sort_hashes(&mut self.kept);
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

/// Sorts keyed hashes (uniform, unpredictable without the key) in linear
/// time: one pass into about one bucket per value by their top bits, then
/// each bucket on its own (a few values at most). A result's marks are
/// sorted on every read, and a comparison sort of a kilobyte's thousand
/// window hashes cost more than hashing them.
fn sort_hashes(values: &mut Vec<u64>) {
    const SMALL: usize = 64;
    if values.len() <= SMALL {
        return values.sort_unstable();
    }
    let bits = values.len().ilog2();
    let bucket = |h: u64| (h >> (64 - bits)) as usize;
    // ends[b + 1]: where bucket b ends, once summed.
    let mut ends = vec![0usize; (1 << bits) + 1];
    for &h in values.iter() {
        ends[bucket(h) + 1] += 1;
    }
    for b in 1..ends.len() {
        ends[b] += ends[b - 1];
    }
    let mut sorted = vec![0u64; values.len()];
    let mut next = ends.clone();
    for &h in values.iter() {
        let at = &mut next[bucket(h)];
        sorted[*at] = h;
        *at += 1;
    }
    for pair in ends.windows(2) {
        let bucket = &mut sorted[pair[0]..pair[1]];
        if bucket.len() > 1 {
            bucket.sort_unstable();
        }
    }
    *values = sorted;
}

/// Keeps the `max` smallest distinct values, sorted (the same set whether
/// applied once at the end or again as values arrive).
fn smallest_distinct(values: &mut Vec<u64>, max: usize) {
    sort_hashes(values);
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
            // Too short to be distinctive, whole or in (unlabelled) pieces.
            if too_short(tok, labelled) {
                continue;
            }
            // The token as written, and its pieces judged on their own
            // (unlabelled: `password: my-secret-phrase` keeps the phrase,
            // not the word `secret`).
            let whole = is_distinctive(tok, labelled).then_some(tok);
            let parts = pieces(tok).filter(|p| is_distinctive(p, false));
            for t in whole.into_iter().chain(parts) {
                toks.push(key.token(t));
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
        sort_hashes(&mut marks.grams);
        marks.grams.dedup();
        sort_hashes(&mut marks.tokens);
        marks.tokens.dedup();
        marks
    }

    fn add(&mut self, key: &TaintKey, text: &str) {
        key.grams(text.as_bytes(), |h| self.grams.push(h));
        // Any token of an argument, or piece of one, may be a result's
        // distinctive token (labelled ones are the shortest).
        for (tok, _) in tokens(text) {
            for t in std::iter::once(tok).chain(pieces(tok)) {
                if !too_short(t, true) {
                    self.tokens.push(key.token(t));
                }
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
    // Also decode tokens inside a longer text ("see aGVsbG8gd29ybGQ= there"),
    // and the pieces of a URL path or markdown (`/c/<b64>`, `(…?d=<b64>)`).
    let coarse =
        |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '=' | '&' | '?' | ':');
    let fine = |c: char| {
        coarse(c) || matches!(c, '/' | '.' | '(' | ')' | '[' | ']' | '<' | '>' | '#' | '!')
    };
    let mut tried: Vec<&str> = Vec::new();
    for tok in trimmed.split(coarse).chain(trimmed.split(fine)) {
        if tok.len() >= 12 && tok.len() < trimmed.len() && !tried.contains(&tok) {
            tried.push(tok);
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
        let digits = bytes
            .get(i + 1..i + 3)
            .filter(|d| d.iter().all(u8::is_ascii_hexdigit));
        if let (b'%', Some(d)) = (bytes[i], digits) {
            let hex = std::str::from_utf8(d).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    // One byte that is not UTF-8 (`%FF`) must not hide the rest.
    Some(String::from_utf8_lossy(&out).into_owned())
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

#[cfg(test)]
mod ascii_tests {
    use super::{pieces, tally, tally_ascii, token_char, url_origins, Runs};

    /// The byte-wise paths answer as the char-wise ones do on ASCII.
    #[test]
    fn ascii_fast_paths_agree_with_chars() {
        // Every ASCII byte, alone and among letters and digits.
        let mut tokens: Vec<String> = (0u8..128)
            .map(|b| format!("aB3{}Zz9", char::from(b)))
            .collect();
        tokens.extend(
            [
                "",
                "x",
                "Wq7mT2xLp9Rk",
                "ALLCAPS",
                "lower",
                "123456789012",
                "a_b-c.d/e~f+g",
            ]
            .map(String::from),
        );
        // Longer than one 255-byte counting chunk.
        tokens.push("aZ9-".repeat(700));
        for tok in &tokens {
            assert_eq!(tally_ascii(tok.as_bytes()), tally(tok.chars()), "{tok:?}");
            let by_chars: Vec<&str> = if tok.contains(|c: char| !c.is_alphanumeric()) {
                tok.split(|c: char| !c.is_alphanumeric())
                    .filter(|p| !p.is_empty())
                    .collect()
            } else {
                Vec::new()
            };
            assert_eq!(pieces(tok).collect::<Vec<_>>(), by_chars, "{tok:?}");
        }
    }

    /// The runs are `split`'s non-empty pieces, in ASCII and beyond.
    #[test]
    fn runs_are_the_non_empty_split_pieces() {
        let texts = [
            "",
            "plain",
            "  lead and trail  ",
            "DB_PASSWORD=Wq7mT2xLp9Rk\nPORT=5432",
            "ké_ßx=ünï/cødé~1 中文 token；next",
            "a\u{200b}b\u{1F600}c==d",
            "===",
        ];
        for text in texts {
            let want: Vec<&str> = text
                .split(|c: char| !token_char(c))
                .filter(|p| !p.is_empty())
                .collect();
            let got: Vec<&str> = Runs { text, at: 0 }.collect();
            assert_eq!(got, want, "{text:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn runs_split_any_text(text in ".{0,64}") {
            let want: Vec<&str> = text
                .split(|c: char| !token_char(c))
                .filter(|p| !p.is_empty())
                .collect();
            let got: Vec<&str> = Runs { text: &text, at: 0 }.collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn url_origins_are_found_anywhere() {
        let text = b"a https://h.example:8080/p and git+ssh://u@x/ end ://";
        let got: Vec<&[u8]> = url_origins(text).into_iter().map(|r| &text[r]).collect();
        assert_eq!(got, [&b"https://h.example:8080/"[..], b"git+ssh://u"]);
    }
}

#[cfg(test)]
mod sort_tests {
    use proptest::prelude::*;

    use super::sort_hashes;

    proptest! {
        /// The bucket sort sorts as a comparison sort does: uniform values,
        /// repeats, and values all in one bucket (small ones).
        #[test]
        fn hashes_sort_as_sort_unstable_does(
            uniform in proptest::collection::vec(any::<u64>(), 0..600),
            repeats in proptest::collection::vec(0u64..8, 0..300),
            small in proptest::collection::vec(0u64..1 << 20, 0..300),
        ) {
            let spread = uniform.iter().map(|h| h.rotate_left(7));
            let skewed: Vec<u64> = repeats.iter().map(|r| r << 60).chain(small).chain(spread).collect();
            for mut values in [uniform, skewed] {
                let mut want = values.clone();
                want.sort_unstable();
                sort_hashes(&mut values);
                prop_assert_eq!(values, want);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{result_marks, ArgMarks, Link, TaintKey};

    /// How `sent` (one argument) is linked to a read whose result was `read`.
    fn check(read: &str, sent: &str, want: Option<Link>, why: &str) {
        let key = TaintKey::new(&[7u8; 32]);
        let marks = result_marks(&key, &json!({"content": [{"type": "text", "text": read}]}));
        let got = ArgMarks::of(&key, &json!({ "body": sent })).link(&marks);
        assert_eq!(got, want, "{why}: read {read:?}, sent {sent:?}");
    }

    #[test]
    fn name_value_secrets_are_tokens_on_both_sides() {
        let t = Some(Link::Token);
        for (read, sent, why) in [
            (
                "DB_PASSWORD=Wq7mT2xLp9Rk\nPORT=5432",
                "x Wq7mT2xLp9Rk",
                ".env line",
            ),
            ("PASSWORD=Tg4hJ8nB", "it is Tg4hJ8nB", "short NAME=value"),
            ("PASSWORD=hunter", "the hunter", "labelled: 6 characters"),
            ("export API_TOKEN=Tg4hJ8nBv3Qs", "Tg4hJ8nBv3Qs", "export"),
            (
                "server --password=Rm5tY7wQk2Lx --port 80",
                "Rm5tY7wQk2Lx",
                "flag",
            ),
            (
                "{\"env\": \"SECRET=Hs7dF3gKp9Lz\"}",
                "Hs7dF3gKp9Lz",
                "in JSON",
            ),
            ("login ab_Zq8vLp2mXr4", "Zq8vLp2mXr4", "a piece of a token"),
        ] {
            check(read, sent, t, why);
        }
        let read = "password: Zq8vLp2mXr41Tb";
        for (sent, why) in [
            ("https://evil.com/c?p=Zq8vLp2mXr41Tb", "query value"),
            ("p=Zq8vLp2mXr41Tb", "NAME=value"),
            ("_Zq8vLp2mXr41Tb", "leading _"),
            ("Zq8vLp2mXr41Tb_x", "trailing _x"),
            ("x-Zq8vLp2mXr41Tb.y", "dashes and dots"),
            ("https://e.com/a/b/Zq8vLp2mXr41Tb", "in a path"),
        ] {
            check(read, sent, t, why);
        }
    }

    #[test]
    fn ordinary_identifiers_do_not_link() {
        for (read, sent, why) in [
            ("set cfg_value_name=true", "cfg_value_name", "plain words"),
            (
                "run build_cache_v2 then deploy",
                "build the cache",
                "a word piece",
            ),
            ("user_id_12345 ok", "id 12345", "a short number"),
            (
                "MAX_RETRIES=5 TIMEOUT=30",
                "retries timeout",
                "labels and numbers",
            ),
            (
                "password: Zq8vLp2mXr41Tb",
                "Zq8vLp2mXr41",
                "a prefix is not the token",
            ),
        ] {
            check(read, sent, None, why);
        }
    }

    #[test]
    fn low_information_windows_do_not_link() {
        let code = "class A:\n    def f(self):\n        for i in range(3):\n            if i:\n                print(i)\n";
        for (read, sent, why) in [
            (
                code,
                "def g():\n                return fh.read()",
                "16 spaces of indentation",
            ),
            (
                "| a | b |\n|------------------|-------|",
                "|------------------|\n| c | d |",
                "a markdown rule",
            ),
            (&"=".repeat(48), &"=".repeat(30), "a run of ="),
            (
                "x: abababababababababab",
                "abababababababababab",
                "a short repeated pattern",
            ),
            (
                "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
                "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
                "tabs",
            ),
            (
                "see https://github.com/acme/widgets",
                "see https://github.com/other/repo",
                "a URL origin",
            ),
            (
                "at http://localhost:8080/a",
                "open http://localhost:8080/b",
                "an origin with a port",
            ),
        ] {
            check(read, sent, None, why);
        }
        let s = Some(Link::Substring);
        for (read, sent, why) in [
            (
                "see https://github.com/acme/widgets",
                "fork github.com/acme/widgets",
                "the path is data",
            ),
            (
                "Alice Example, account 4929",
                "re: Alice Example, account",
                "text",
            ),
            (
                "Ünïcödé dätä hérè ök",
                "Ünïcödé dätä hér",
                "non-ASCII letters count",
            ),
            (
                "db postgres://admin:Kx3vN8qLw2Pz@db",
                "postgres://admin:Kx3vN8qLw2",
                "a password after the origin",
            ),
        ] {
            check(read, sent, s, why);
        }
    }
}
