//! The normalized view of a string and the hidden layers under it.
//!
//! [`normalize`] folds what an attacker uses to dodge plain matching —
//! compatibility forms (NFKC: full-width, mathematical letters), case, Latin
//! diacritics, Cyrillic/Greek look-alikes inside Latin words, invisible
//! characters and terminal escapes — into lowercase text with single spaces,
//! keeping a map back to the raw string for evidence (sparse: anchors where
//! the folding skips or expands a character, not an offset per byte).
//!
//! [`hidden_layers`] extracts what the raw text carries but does not show:
//! Unicode TAG payloads, right-to-left overridden runs, and one layer of
//! base64 / base32 / percent / hex / ROT13 encoding (base64 twice).
//!
//! Everything here is linear in the input length.

use std::ops::Range;

use base64::Engine as _;
use unicode_normalization::UnicodeNormalization as _;

/// Lowercased, folded text plus a map from its bytes back to the raw string.
#[derive(Debug, Clone)]
pub struct View<'a> {
    pub text: String,
    /// Where `text` came from in `raw`; `None` = identity.
    map: Option<Vec<Anchor>>,
    raw: &'a str,
}

/// Normalized byte `norm` (a char start) came from the raw char at `raw`.
/// Every normalized char comes from one raw char; from an anchor up to the
/// next, consecutive normalized chars come from consecutive raw chars, so
/// only where that breaks (a raw char skipped or expanded into several) and
/// every [`ANCHOR_SPACING`] bytes is one stored — not an offset per byte.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    norm: u32,
    raw: u32,
}

/// Most normalized bytes between anchors: bounds the walk of a lookup.
const ANCHOR_SPACING: usize = 256;

/// Byte length of the char starting at `i` in `s`.
fn char_len_at(s: &str, i: usize) -> usize {
    s[i..].chars().next().map_or(1, char::len_utf8)
}

impl View<'_> {
    /// Raw byte offset corresponding to normalized byte offset `i`: the
    /// start of the raw char its normalized char came from.
    pub fn raw_offset(&self, i: usize) -> usize {
        let Some(anchors) = &self.map else {
            return i.min(self.raw.len());
        };
        if i >= self.text.len() {
            return self.raw.len();
        }
        let mut char_start = i;
        while !self.text.is_char_boundary(char_start) {
            char_start -= 1;
        }
        // The first anchor is at 0, so one is at or before any char.
        let k = anchors.partition_point(|a| a.norm as usize <= char_start) - 1;
        let (mut norm, mut raw) = (anchors[k].norm as usize, anchors[k].raw as usize);
        while norm < char_start {
            norm += char_len_at(&self.text, norm);
            raw += char_len_at(self.raw, raw);
        }
        raw
    }

    /// Raw byte range for a normalized range.
    pub fn raw_range(&self, r: Range<usize>) -> Range<usize> {
        let start = self.raw_offset(r.start);
        let end = if r.end == 0 {
            start
        } else {
            // end is exclusive: map the last byte, then step to its char end.
            self.raw_offset(r.end - 1) + 1
        };
        start..end.max(start)
    }
}

/// True for characters that render as nothing (or only steer rendering).
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{E0000}'..='\u{E007F}'
        | '\u{E0100}'..='\u{E01EF}'
        | '\u{1D173}'..='\u{1D17A}')
}

/// Blank characters used to pad text out of view (beyond ASCII whitespace).
pub fn is_blank(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\u{2800}' | '\u{3164}' | '\u{115F}' | '\u{1160}' | '\u{FFA0}'
        )
}

fn confusable(c: char) -> Option<char> {
    Some(match c {
        // Cyrillic (lowercase; input is lowercased first)
        'а' => 'a',
        'в' => 'b',
        'е' | 'ё' => 'e',
        'к' => 'k',
        'м' => 'm',
        'н' => 'h',
        'о' => 'o',
        'р' => 'p',
        'с' => 'c',
        'т' => 't',
        'у' => 'y',
        'х' => 'x',
        'ѕ' => 's',
        'і' | 'ї' => 'i',
        'ј' => 'j',
        'һ' => 'h',
        'ԁ' => 'd',
        'ԛ' => 'q',
        'ԝ' => 'w',
        'ɡ' => 'g',
        'ı' => 'i',
        'ɑ' => 'a',
        // Greek
        'α' => 'a',
        'β' => 'b',
        'γ' => 'y',
        'ε' => 'e',
        'η' => 'n',
        'ι' => 'i',
        'κ' => 'k',
        'μ' => 'u',
        'ν' => 'v',
        'ο' => 'o',
        'ρ' => 'p',
        'ς' => 's',
        'τ' => 't',
        'υ' => 'u',
        'χ' => 'x',
        'ω' => 'w',
        'ϲ' => 'c',
        _ => return None,
    })
}

fn is_latin_extended(c: char) -> bool {
    matches!(c, '\u{00C0}'..='\u{024F}' | '\u{1E00}'..='\u{1EFF}')
}

/// Length of an ANSI/ECMA-48 escape sequence starting at `bytes[0] == 0x1B`.
pub fn escape_len(bytes: &[u8]) -> usize {
    debug_assert!(bytes.first() == Some(&0x1b));
    match bytes.get(1) {
        None => 1,
        Some(b'[') => {
            // CSI: parameters/intermediates then one final byte 0x40..=0x7E.
            let mut i = 2;
            while i < bytes.len() && i < 64 {
                if (0x40..=0x7e).contains(&bytes[i]) {
                    return i + 1;
                }
                if !(0x20..=0x3f).contains(&bytes[i]) {
                    return i;
                }
                i += 1;
            }
            i.min(bytes.len())
        }
        Some(b']') | Some(b'P') | Some(b'X') | Some(b'^') | Some(b'_') => {
            // OSC/DCS/SOS/PM/APC: until BEL or ST (ESC \), bounded.
            let mut i = 2;
            while i < bytes.len() && i < 4096 {
                if bytes[i] == 0x07 {
                    return i + 1;
                }
                if bytes[i] == 0x1b {
                    return if bytes.get(i + 1) == Some(&b'\\') {
                        i + 2
                    } else {
                        i
                    };
                }
                i += 1;
            }
            i.min(bytes.len())
        }
        Some(_) => 2,
    }
}

struct Builder<'a> {
    raw: &'a str,
    out: String,
    anchors: Vec<Anchor>,
    /// The raw char after the one the last normalized char came from.
    next_raw: usize,
    word_start: usize,
    word_has_ascii: bool,
    word_has_confusable: bool,
    last_space: bool,
    /// The raw offset of every normalized byte, kept alongside the anchors
    /// so tests can check the two agree.
    #[cfg(test)]
    byte_map: Vec<u32>,
}

impl Builder<'_> {
    fn push(&mut self, c: char, raw: usize) {
        let at = self.out.len();
        let follows = raw == self.next_raw
            && self
                .anchors
                .last()
                .is_some_and(|a| at - (a.norm as usize) < ANCHOR_SPACING);
        if !follows {
            self.anchors.push(Anchor {
                norm: at as u32,
                raw: raw as u32,
            });
        }
        self.next_raw = raw + char_len_at(self.raw, raw);
        self.out.push(c);
        #[cfg(test)]
        self.byte_map.resize(self.out.len(), raw as u32);
        self.last_space = false;
    }

    fn letter(&mut self, c: char, raw: usize) {
        if c.is_ascii_alphabetic() {
            self.word_has_ascii = true;
        } else if confusable(c).is_some() {
            self.word_has_confusable = true;
        }
        self.push(c, raw);
    }

    fn end_word(&mut self) {
        if self.word_has_ascii && self.word_has_confusable {
            // Look-alikes fold one char to one char, each still from its raw
            // char: only the anchors inside the word move.
            let word = &self.out[self.word_start..];
            let mut folded = String::with_capacity(word.len());
            let mut anchor = self
                .anchors
                .partition_point(|a| (a.norm as usize) < self.word_start);
            #[cfg(test)]
            let mut word_map = Vec::new();
            for (i, c) in word.char_indices() {
                if let Some(a) = self.anchors.get_mut(anchor) {
                    if a.norm as usize == self.word_start + i {
                        a.norm = (self.word_start + folded.len()) as u32;
                        anchor += 1;
                    }
                }
                let f = confusable(c).unwrap_or(c);
                #[cfg(test)]
                word_map.extend(std::iter::repeat_n(
                    self.byte_map[self.word_start + i],
                    f.len_utf8(),
                ));
                folded.push(f);
            }
            #[cfg(test)]
            {
                self.byte_map.truncate(self.word_start);
                self.byte_map.extend(word_map);
            }
            self.out.truncate(self.word_start);
            self.out.push_str(&folded);
        }
        self.word_start = self.out.len();
        self.word_has_ascii = false;
        self.word_has_confusable = false;
    }

    fn space(&mut self, raw: usize, newline: bool) {
        self.end_word();
        if !self.last_space {
            self.push(if newline { '\n' } else { ' ' }, raw);
            self.last_space = true;
            self.word_start = self.out.len();
        } else if newline && self.out.ends_with(' ') {
            // A run that contains a line break keeps it (line-start rules).
            self.out.pop();
            self.out.push('\n');
        }
    }
}

/// Builds the normalized view of `raw`.
pub fn normalize(raw: &str) -> View<'_> {
    let bytes = raw.as_bytes();
    // Fast path: printable ASCII without escapes or runs of blanks keeps offsets.
    // Checked a block at a time, each block without a branch per byte.
    let simple = bytes.chunks(64).all(|block| {
        block.iter().fold(true, |simple, &b| {
            simple & ((0x20..0x7f).contains(&b) | (b == b'\n') | (b == b'\r') | (b == b'\t'))
        })
    });
    if simple {
        // Byte for byte (all ASCII here), not char by char.
        let folded: Vec<u8> = bytes
            .iter()
            .map(|&b| {
                if b.is_ascii_whitespace() {
                    b' '
                } else {
                    b.to_ascii_lowercase()
                }
            })
            .collect();
        let text = String::from_utf8(folded).unwrap_or_default();
        return View {
            text,
            map: None,
            raw,
        };
    }
    let folded = fold(raw);
    View {
        text: folded.out,
        map: Some(folded.anchors),
        raw,
    }
}

/// The folding of [`normalize`], char by char.
fn fold(raw: &str) -> Builder<'_> {
    let bytes = raw.as_bytes();
    let mut b = Builder {
        raw,
        out: String::with_capacity(raw.len()),
        anchors: Vec::new(),
        next_raw: 0,
        word_start: 0,
        word_has_ascii: false,
        word_has_confusable: false,
        last_space: false,
        #[cfg(test)]
        byte_map: Vec::new(),
    };
    let mut i = 0;
    while i < raw.len() {
        let c = match raw[i..].chars().next() {
            Some(c) => c,
            None => break,
        };
        let clen = c.len_utf8();
        if c == '\u{1b}' {
            i += escape_len(&bytes[i..]).max(1);
            while i < raw.len() && !raw.is_char_boundary(i) {
                i += 1;
            }
            continue;
        }
        if is_invisible(c) {
            i += clen;
            continue;
        }
        if is_blank(c) || c.is_control() {
            b.space(i, c == '\n');
            i += clen;
            continue;
        }
        if c.is_ascii() {
            if c.is_ascii_alphanumeric() {
                b.letter(c.to_ascii_lowercase(), i);
            } else {
                b.end_word();
                b.push(c, i);
                b.word_start = b.out.len();
            }
            i += clen;
            continue;
        }
        if ('\u{0300}'..='\u{036F}').contains(&c) {
            i += clen;
            continue;
        }
        let mut any = false;
        for n in std::iter::once(c).nfkc() {
            for l in n.to_lowercase() {
                let l = if is_latin_extended(l) {
                    let mut base = l;
                    unicode_normalization::char::decompose_canonical(l, |d| {
                        if d.is_ascii() && base == l {
                            base = d;
                        }
                    });
                    base
                } else {
                    l
                };
                if ('\u{0300}'..='\u{036F}').contains(&l) {
                    continue;
                }
                any = true;
                if is_blank(l) {
                    b.space(i, false);
                } else if l.is_alphanumeric() {
                    b.letter(l, i);
                } else {
                    b.end_word();
                    b.push(l, i);
                    b.word_start = b.out.len();
                }
            }
        }
        if !any {
            b.end_word();
        }
        i += clen;
    }
    b.end_word();
    b
}

/// How a hidden layer was carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    TagCharacters,
    VariationSelectors,
    BidiReversed,
    Base64,
    Base32,
    Percent,
    HexEscape,
    Rot13,
}

impl LayerKind {
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::TagCharacters => "tag_characters",
            LayerKind::VariationSelectors => "variation_selectors",
            LayerKind::BidiReversed => "bidi_reversed",
            LayerKind::Base64 => "base64",
            LayerKind::Base32 => "base32",
            LayerKind::Percent => "percent",
            LayerKind::HexEscape => "hex",
            LayerKind::Rot13 => "rot13",
        }
    }
}

/// Text recovered from a hidden or encoded carrier inside the raw string.
#[derive(Debug, Clone)]
pub struct Layer {
    pub kind: LayerKind,
    pub text: String,
    /// Where the carrier sits in the raw string.
    pub raw_span: Range<usize>,
}

const MAX_LAYERS: usize = 32;

/// Extracts hidden and encoded layers of `raw` (bounded count, linear time).
pub fn hidden_layers(raw: &str) -> Vec<Layer> {
    let mut layers = Vec::new();
    invisible_layers(raw, &mut layers);
    encoded_layers(raw, &mut layers, 0);
    // Encodings disguised with invisibles, full-width forms or look-alikes:
    // decode a case-preserving folded copy too.
    if !raw.is_ascii() {
        let folded = fold_raw(raw);
        if folded != raw {
            let mut extra = Vec::new();
            encoded_layers(&folded, &mut extra, 0);
            for mut l in extra {
                l.raw_span = 0..raw.len();
                layers.push(l);
            }
        }
    }
    // One more layer under whatever was decoded (base64 inside percent, ...).
    let decoded: Vec<String> = layers
        .iter()
        .filter(|l| {
            matches!(
                l.kind,
                LayerKind::Percent | LayerKind::HexEscape | LayerKind::Base32 | LayerKind::Base64
            )
        })
        .map(|l| l.text.clone())
        .collect();
    for text in &decoded {
        // Invisible carriers inside a decoded layer.
        let mut hidden = Vec::new();
        invisible_layers(text, &mut hidden);
        layers.extend(hidden.into_iter().map(|mut l| {
            l.raw_span = 0..raw.len();
            l
        }));
        let mut inner = Vec::new();
        encoded_layers(text, &mut inner, 1);
        layers.extend(inner.into_iter().map(|mut l| {
            l.raw_span = 0..raw.len();
            l
        }));
    }
    if names_rot13(raw) {
        layers.push(Layer {
            kind: LayerKind::Rot13,
            text: rot13(raw),
            raw_span: 0..raw.len(),
        });
    }
    layers.truncate(MAX_LAYERS);
    layers
}

/// Full-width ASCII to ASCII, look-alikes to Latin (case kept), invisibles
/// dropped: what an encoded blob looked like before it was disguised.
fn fold_raw(raw: &str) -> String {
    raw.chars()
        .filter(|c| !is_invisible(*c))
        .map(|c| match c as u32 {
            0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            _ => {
                let lower: Vec<char> = c.to_lowercase().collect();
                match (lower.as_slice(), confusable(lower[0])) {
                    ([l], Some(f)) if c != *l => f.to_ascii_uppercase(),
                    (_, Some(f)) => f,
                    _ => c,
                }
            }
        })
        .collect()
}

/// Whether `raw` says "rot13", "rot-13" or "rot 13" (any case): one pass.
fn names_rot13(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    // Only where an `r` or `R` is (memchr).
    memchr::memchr2_iter(b'r', b'R', bytes).any(|i| {
        let rest = &bytes[i..];
        if rest.len() < 5 || !rest[..3].eq_ignore_ascii_case(b"rot") {
            return false;
        }
        let tail = match rest[3] {
            b'-' | b' ' => &rest[4..],
            _ => &rest[3..],
        };
        tail.starts_with(b"13")
    })
}

fn rot13(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' => (((c as u8 - b'a') + 13) % 26 + b'a') as char,
            'A'..='Z' => (((c as u8 - b'A') + 13) % 26 + b'A') as char,
            _ => c,
        })
        .collect()
}

/// TAG characters (U+E0000..U+E007F) spell ASCII invisibly. Emoji flag tag
/// sequences (black flag + tag letters + cancel tag) are legitimate and skipped.
/// Tag characters, variation-selector runs and right-to-left overrides:
/// none of them is ASCII, so ASCII text (most tool output) skips the walks.
fn invisible_layers(raw: &str, out: &mut Vec<Layer>) {
    if raw.is_ascii() {
        return;
    }
    tag_layer(raw, out);
    variation_selector_layer(raw, out);
    bidi_layer(raw, out);
}

fn tag_layer(raw: &str, out: &mut Vec<Layer>) {
    let mut text = String::new();
    let mut span: Option<Range<usize>> = None;
    let mut prev: Option<char> = None;
    let mut in_flag = false;
    for (i, c) in raw.char_indices() {
        if ('\u{E0000}'..='\u{E007F}').contains(&c) {
            if !in_flag && matches!(prev, Some('\u{1F3F4}')) {
                in_flag = true;
            }
            if in_flag {
                if c == '\u{E007F}' {
                    in_flag = false;
                }
            } else {
                let v = c as u32 - 0xE0000;
                if (0x20..0x7f).contains(&v) {
                    text.push(v as u8 as char);
                }
                let s = span.get_or_insert(i..i);
                s.end = i + c.len_utf8();
            }
        } else {
            in_flag = false;
        }
        prev = Some(c);
    }
    if let Some(raw_span) = span {
        out.push(Layer {
            kind: LayerKind::TagCharacters,
            text,
            raw_span,
        });
    }
}

/// Runs of variation selectors can carry bytes ("emoji smuggling").
fn variation_selector_layer(raw: &str, out: &mut Vec<Layer>) {
    let mut run = 0usize;
    let mut start = 0usize;
    let mut bytes: Vec<u8> = Vec::new();
    let mut best: Option<(Range<usize>, Vec<u8>)> = None;
    for (i, c) in raw.char_indices() {
        let v = match c {
            '\u{FE00}'..='\u{FE0F}' => Some(c as u32 - 0xFE00),
            '\u{E0100}'..='\u{E01EF}' => Some(c as u32 - 0xE0100 + 16),
            _ => None,
        };
        if let Some(v) = v {
            if run == 0 {
                start = i;
                bytes.clear();
            }
            run += 1;
            bytes.push(v as u8);
            if run >= 4 {
                best = Some((start..i + c.len_utf8(), bytes.clone()));
            }
        } else {
            run = 0;
        }
    }
    if let Some((raw_span, bytes)) = best {
        // Nibble pairs are a common packing; keep whatever is printable.
        let text: String = bytes
            .chunks(2)
            .filter(|p| p.len() == 2)
            .map(|p| ((p[0] & 0x0f) << 4 | (p[1] & 0x0f)) as char)
            .filter(|c| c.is_ascii_graphic() || *c == ' ')
            .collect();
        out.push(Layer {
            kind: LayerKind::VariationSelectors,
            text,
            raw_span,
        });
    }
}

/// Text after a right-to-left override is displayed reversed; recover the
/// reading order a person would see.
fn bidi_layer(raw: &str, out: &mut Vec<Layer>) {
    let mut search = 0;
    while let Some(pos) = raw[search..].find('\u{202E}') {
        let start = search + pos;
        let body_start = start + '\u{202E}'.len_utf8();
        let end = raw[body_start..]
            .find(['\u{202C}', '\u{2069}', '\n'])
            .map(|e| body_start + e)
            .unwrap_or(raw.len());
        let text: String = raw[body_start..end].chars().rev().collect();
        out.push(Layer {
            kind: LayerKind::BidiReversed,
            text,
            raw_span: start..end,
        });
        search = end.max(body_start);
        if out.len() >= MAX_LAYERS || search >= raw.len() {
            break;
        }
    }
}

fn printable_ratio(s: &str) -> f32 {
    if s.is_empty() {
        return 0.0;
    }
    let total = s.chars().count();
    let good = s
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .count();
    good as f32 / total as f32
}

fn looks_like_text(bytes: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(bytes).ok()?;
    if s.chars().count() < 8 || printable_ratio(s) < 0.95 {
        return None;
    }
    // Natural-language-ish: has spaces or path/URL punctuation and letters.
    let letters = s.chars().filter(|c| c.is_alphabetic()).count();
    if letters * 4 < s.chars().count() {
        return None;
    }
    Some(s.to_string())
}

/// A table of which byte values `$member` holds (built at compile time).
macro_rules! byte_table {
    (|$b:ident| $member:expr) => {{
        let mut table = [false; 256];
        let mut i = 0;
        while i < 256 {
            let $b = i as u8;
            table[i] = $member;
            i += 1;
        }
        table
    }};
}

/// Bytes of either base64 alphabet, by value.
static B64_BYTES: [bool; 256] =
    byte_table!(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'));
/// Hex digits, by value.
static HEX_BYTES: [bool; 256] = byte_table!(|b| b.is_ascii_hexdigit());
/// ASCII whitespace (`is_blank` within ASCII), by value.
pub(crate) static ASCII_BLANK_BYTES: [bool; 256] =
    byte_table!(|b| matches!(b, b' ' | b'\t'..=b'\r'));

/// The maximal runs of at least `min` (≥ 1) bytes of `bytes` whose values
/// `table` holds, in order. Every output's bytes are searched like this,
/// three times (base64, hex, padding), so not every byte is looked at: a
/// long enough run covers one of every `min`-th byte after a byte outside
/// it, and only those bytes, and the runs through them, are read. Text of
/// short words is passed over a word at a time.
pub(crate) fn long_runs<'a>(
    bytes: &'a [u8],
    table: &'static [bool; 256],
    min: usize,
) -> impl Iterator<Item = std::ops::Range<usize>> + 'a {
    debug_assert!(min >= 1);
    // The byte to look at next: runs starting after the last byte known to
    // be outside one (or at 0) reach it when they are long enough.
    let mut probe = min - 1;
    std::iter::from_fn(move || {
        while probe < bytes.len() {
            if !table[usize::from(bytes[probe])] {
                probe += min;
                continue;
            }
            let start = probe - run_back(&bytes[..probe], table);
            let end = probe + run_ahead(&bytes[probe..], table);
            probe = end + min;
            if end - start >= min {
                return Some(start..end);
            }
        }
        None
    })
}

/// Bytes a long run is measured by: whole blocks, each read without a
/// branch per byte (base64 blobs, ids and hashes make long runs). A run
/// shorter than one, such as a word, is walked byte by byte.
const RUN_BLOCK: usize = 16;

/// How many bytes at the start of `bytes` `table` holds.
fn run_ahead(bytes: &[u8], table: &[bool; 256]) -> usize {
    let member = |b: &&u8| table[usize::from(**b)];
    let mut n = bytes.iter().take(RUN_BLOCK).take_while(member).count();
    if n == RUN_BLOCK {
        n += bytes[n..]
            .chunks_exact(RUN_BLOCK)
            .take_while(|block| all_members(block, table))
            .count()
            * RUN_BLOCK;
        n += bytes[n..].iter().take_while(member).count();
    }
    n
}

/// How many bytes at the end of `bytes` `table` holds.
fn run_back(bytes: &[u8], table: &[bool; 256]) -> usize {
    let member = |b: &&u8| table[usize::from(**b)];
    let mut n = bytes
        .iter()
        .rev()
        .take(RUN_BLOCK)
        .take_while(member)
        .count();
    if n == RUN_BLOCK {
        let rest = &bytes[..bytes.len() - n];
        let whole = rest
            .rchunks_exact(RUN_BLOCK)
            .take_while(|block| all_members(block, table))
            .count()
            * RUN_BLOCK;
        n += whole;
        n += rest[..rest.len() - whole]
            .iter()
            .rev()
            .take_while(member)
            .count();
    }
    n
}

fn all_members(block: &[u8], table: &[bool; 256]) -> bool {
    block
        .iter()
        .fold(true, |all, &b| all & table[usize::from(b)])
}

fn encoded_layers(raw: &str, out: &mut Vec<Layer>, depth: usize) {
    let bytes = raw.as_bytes();
    // base64 runs (also catches base32 alphabets, tried second)
    for std::ops::Range { start, end: i } in long_runs(bytes, &B64_BYTES, 20) {
        if out.len() >= MAX_LAYERS {
            break;
        }
        let mut end = i;
        while end < bytes.len() && bytes[end] == b'=' && end - i < 2 {
            end += 1;
        }
        let run = &raw[start..i];
        let padded_run = &raw[start..end];
        if let Some(text) = decode_b64(run) {
            let nested = depth == 0 && text.len() >= 8;
            out.push(Layer {
                kind: LayerKind::Base64,
                text: text.clone(),
                raw_span: start..end,
            });
            if nested {
                let mut inner = Vec::new();
                encoded_layers(&text, &mut inner, depth + 1);
                for mut l in inner {
                    l.raw_span = start..end;
                    out.push(l);
                }
            }
        } else if let Some(text) = decode_b32(padded_run) {
            out.push(Layer {
                kind: LayerKind::Base32,
                text,
                raw_span: start..end,
            });
        }
    }
    // percent-encoding runs: at least three escapes in one token
    percent_layers(raw, out);
    hex_layers(raw, out);
}

/// A base64 run without its padding and, at a length ≡ 1 (mod 4), which
/// cannot decode, without its stray last char.
fn b64_body(run: &str) -> &str {
    let trimmed = run.trim_end_matches('=');
    if trimmed.len() % 4 == 1 {
        &trimmed[..trimmed.len() - 1]
    } else {
        trimmed
    }
}

fn decode_b64(run: &str) -> Option<String> {
    let cut = b64_body(run);
    // The run's alphabet: `-` and `_` are URL-safe only, `+` and `/`
    // standard only, and a run with neither decodes the same either way.
    let engine = if memchr::memchr2(b'-', b'_', cut.as_bytes()).is_some() {
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
    } else {
        &base64::engine::general_purpose::STANDARD_NO_PAD
    };
    // Most long runs are ids, hashes or binary, which decode to invalid
    // UTF-8 within a few bytes: their first quads tell, without decoding
    // the rest. (Quads decode on their own, so these bytes start the whole
    // decoding; a sequence cut at the prefix's end is not yet invalid.)
    if cut.len() > B64_PROBE {
        let head = engine.decode(&cut[..B64_PROBE]).ok()?;
        if std::str::from_utf8(&head).is_err_and(|e| e.error_len().is_some()) {
            return None;
        }
    }
    looks_like_text(&engine.decode(cut).ok()?)
}

/// Characters of a long base64 run decoded first, to reject binary early
/// (a multiple of four: whole quads).
const B64_PROBE: usize = 64;

fn decode_b32(run: &str) -> Option<String> {
    let body = run.trim_end_matches('=');
    if body.len() < 24
        || !body
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
    {
        return None;
    }
    let mut bits: u64 = 0;
    let mut nbits = 0;
    let mut out = Vec::with_capacity(body.len() * 5 / 8);
    for b in body.bytes() {
        let v = if b.is_ascii_uppercase() {
            b - b'A'
        } else {
            b - b'2' + 26
        } as u64;
        bits = (bits << 5) | v;
        nbits += 5;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    looks_like_text(&out)
}

fn hexval(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn percent_layers(raw: &str, out: &mut Vec<Layer>) {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() && out.len() < MAX_LAYERS {
        // Straight to the next `%` (memchr) rather than byte by byte.
        match memchr::memchr(b'%', &bytes[i..]) {
            Some(at) => i += at,
            None => break,
        }
        // token boundaries: expand over non-space
        let mut start = i;
        while start > 0 && !bytes[start - 1].is_ascii_whitespace() {
            start -= 1;
        }
        let mut end = i;
        while end < bytes.len() && !bytes[end].is_ascii_whitespace() {
            end += 1;
        }
        let token = &bytes[start..end];
        let mut decoded = Vec::with_capacity(token.len());
        let mut escapes = 0;
        let mut j = 0;
        while j < token.len() {
            if token[j] == b'%' {
                if let (Some(h), Some(l)) = (
                    token.get(j + 1).and_then(|&b| hexval(b)),
                    token.get(j + 2).and_then(|&b| hexval(b)),
                ) {
                    decoded.push(h << 4 | l);
                    escapes += 1;
                    j += 3;
                    continue;
                }
            }
            decoded.push(token[j]);
            j += 1;
        }
        if escapes >= 3 {
            if let Ok(s) = String::from_utf8(decoded) {
                out.push(Layer {
                    kind: LayerKind::Percent,
                    text: s,
                    raw_span: start..end,
                });
            }
        }
        i = end.max(i + 1);
    }
}

fn hex_layers(raw: &str, out: &mut Vec<Layer>) {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i + 3 < bytes.len() && out.len() < MAX_LAYERS {
        if bytes[i] != b'\\' {
            // Straight to the next backslash (memchr): only `\x` starts one.
            match memchr::memchr(b'\\', &bytes[i..]) {
                Some(at) => i += at,
                None => break,
            }
            continue;
        }
        if !(bytes[i + 1] == b'x' || bytes[i + 1] == b'X') {
            i += 1;
            continue;
        }
        let start = i;
        let mut decoded = Vec::new();
        while bytes.get(i) == Some(&b'\\') && matches!(bytes.get(i + 1), Some(b'x') | Some(b'X')) {
            match (
                bytes.get(i + 2).and_then(|&b| hexval(b)),
                bytes.get(i + 3).and_then(|&b| hexval(b)),
            ) {
                (Some(h), Some(l)) => {
                    decoded.push(h << 4 | l);
                    i += 4;
                }
                _ => break,
            }
        }
        if decoded.len() >= 4 {
            if let Some(text) = looks_like_text(&decoded) {
                out.push(Layer {
                    kind: LayerKind::HexEscape,
                    text,
                    raw_span: start..i,
                });
            }
        }
        i = i.max(start + 1);
    }
    // Bare hex strings of printable text (not digests: those decode to binary).
    for std::ops::Range { start, end: i } in long_runs(bytes, &HEX_BYTES, 24) {
        if out.len() >= MAX_LAYERS {
            break;
        }
        let run = &bytes[start..i];
        if run.len().is_multiple_of(2) {
            let decoded: Vec<u8> = run
                .chunks(2)
                .filter_map(|p| Some(hexval(p[0])? << 4 | hexval(p[1])?))
                .collect();
            if let Some(text) = looks_like_text(&decoded) {
                out.push(Layer {
                    kind: LayerKind::HexEscape,
                    text,
                    raw_span: start..i,
                });
            }
        }
    }
}

#[cfg(test)]
mod rot13_tests {
    use super::names_rot13;

    #[test]
    fn rot13_is_named_in_each_spelling_and_case() {
        for yes in ["rot13", "ROT-13 this", "a Rot 13 b", "xrot13"] {
            assert!(names_rot13(yes), "{yes}");
        }
        for no in ["rot", "rot1", "rot-1 3", "rotl3", "rot_13", "r o t 13", ""] {
            assert!(!names_rot13(no), "{no}");
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// `decode_b64` as it was: both alphabets tried in turn.
    fn decode_b64_both(run: &str) -> Option<String> {
        let cut = b64_body(run);
        [
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ]
        .into_iter()
        .find_map(|e| looks_like_text(&e.decode(cut).ok()?))
    }

    proptest! {
        /// Decoding once, in the run's own alphabet, finds what trying both
        /// found: text encoded either way, with padding, a stray last char,
        /// or characters of both alphabets.
        #[test]
        fn one_alphabet_decodes_as_both_did(
            text in "[ -~]{8,60}",
            url_safe in any::<bool>(),
            tail in "[=+/_-]{0,3}",
        ) {
            let engine = if url_safe {
                &base64::engine::general_purpose::URL_SAFE
            } else {
                &base64::engine::general_purpose::STANDARD
            };
            let run = engine.encode(text.as_bytes()) + &tail;
            prop_assert_eq!(decode_b64(&run), decode_b64_both(&run));
        }

        /// A run measured block by block is the run a byte-by-byte walk
        /// measures, from either end (runs long enough for whole blocks).
        #[test]
        fn runs_measured_by_blocks_are_walked_runs(bytes in proptest::collection::vec(
            prop_oneof![30 => Just(b'a'), 30 => Just(b'7'), 1 => Just(b' '), 1 => any::<u8>()],
            0..200,
        )) {
            for table in [&B64_BYTES, &HEX_BYTES] {
                let member = |b: &&u8| table[usize::from(**b)];
                prop_assert_eq!(
                    run_ahead(&bytes, table),
                    bytes.iter().take_while(member).count()
                );
                prop_assert_eq!(
                    run_back(&bytes, table),
                    bytes.iter().rev().take_while(member).count()
                );
            }
        }

        /// `long_runs` finds exactly the maximal runs of `min` bytes or more
        /// that a byte-by-byte walk finds.
        #[test]
        fn long_runs_are_the_long_maximal_runs(bytes in proptest::collection::vec(
            prop_oneof![
                3 => Just(b'a'), 3 => Just(b'x'), 3 => Just(b'7'),
                1 => Just(b'='), 1 => Just(b' '), 1 => any::<u8>(),
            ], 0..120,
        ), min in 1usize..24) {
            for (table, member) in [
                (&B64_BYTES, (|b: u8| b.is_ascii_alphanumeric() || b"+/-_".contains(&b)) as fn(u8) -> bool),
                (&HEX_BYTES, |b: u8| b.is_ascii_hexdigit()),
            ] {
                let mut walked = Vec::new();
                let mut i = 0;
                while i < bytes.len() {
                    let start = i;
                    while i < bytes.len() && member(bytes[i]) {
                        i += 1;
                    }
                    if start < i {
                        if i - start >= min {
                            walked.push(start..i);
                        }
                    } else {
                        i += 1;
                    }
                }
                prop_assert_eq!(long_runs(&bytes, table, min).collect::<Vec<_>>(), walked);
            }
        }

        /// The early look at a long run's first quads rejects only what the
        /// whole decoding rejects: text and binary, in both alphabets, and
        /// text whose multi-byte characters straddle the probe's end.
        #[test]
        fn the_probe_rejects_only_what_decoding_rejects(
            text in "[ -~é€😀]{0,80}",
            binary in proptest::collection::vec(any::<u8>(), 0..120),
            binary_first in any::<bool>(),
            url_safe in any::<bool>(),
        ) {
            let engine = if url_safe {
                &base64::engine::general_purpose::URL_SAFE_NO_PAD
            } else {
                &base64::engine::general_purpose::STANDARD_NO_PAD
            };
            for bytes in [text.as_bytes().to_vec(), if binary_first {
                [binary.as_slice(), text.as_bytes()].concat()
            } else {
                [text.as_bytes(), binary.as_slice()].concat()
            }] {
                let run = engine.encode(&bytes);
                prop_assert_eq!(decode_b64(&run), decode_b64_both(&run));
            }
        }
    }

    fn check(input: &str, expect: &str) {
        let v = normalize(input);
        assert_eq!(v.text, expect, "normalized view of {input:?}");
    }

    #[test]
    fn folds_evasions() {
        check("Ignore Previous", "ignore previous");
        check("I\u{200B}g\u{200B}n\u{200B}o\u{200B}r\u{200B}e", "ignore");
        check("ｉｇｎｏｒｅ ｐｒｅｖｉｏｕｓ", "ignore previous");
        check("ign\u{043E}r\u{0435} prev", "ignore prev");
        check("D\u{03B9}sreg\u{03B1}rd", "disregard");
        check("\u{1D408}\u{1D40C}\u{1D40F}", "imp");
        check("Ignore\nall\n\n  previous\u{200B}", "ignore\nall\nprevious");
        check("a\u{1b}[8mhidden\u{1b}[28m b", "ahidden b");
        check("caf\u{00E9} r\u{00E9}sum\u{00E9}", "cafe resume");
        check("Привет мир", "привет мир");
        check("inter\u{00AD}nation", "internation");
    }

    #[test]
    fn raw_offsets_map_back() {
        let raw = "xx \u{200B}IGNORE\u{200B} yy";
        let v = normalize(raw);
        let pos = v.text.find("ignore").expect("folded word present");
        let r = v.raw_range(pos..pos + 6);
        assert_eq!(&raw[r], "IGNORE", "map must point at the raw word");
    }

    /// Every normalized byte's raw offset, by the anchors and by a map of
    /// every byte (what the view stored before anchors).
    fn assert_anchors_match_byte_map(raw: &str) {
        let folded = fold(raw);
        let byte_map = folded.byte_map.clone();
        assert_eq!(byte_map.len(), folded.out.len(), "{raw:?}");
        let view = View {
            text: folded.out,
            map: Some(folded.anchors),
            raw,
        };
        for (i, &expected) in byte_map.iter().enumerate() {
            assert_eq!(
                view.raw_offset(i),
                expected as usize,
                "byte {i} of {:?} from {raw:?}",
                view.text
            );
        }
        assert_eq!(view.raw_offset(view.text.len()), raw.len());
    }

    #[test]
    fn anchors_match_a_byte_map() {
        let long_word = "a".repeat(ANCHOR_SPACING * 2 + 3);
        let cases = [
            "",
            "xx \u{200B}IGNORE\u{200B} yy",
            "ign\u{043E}r\u{0435} prev and \u{0441}\u{0430}t",
            "\u{FB01}ne \u{FDFA} \u{FF49}\u{FF47}\u{FF4E} e\u{301}\u{301} \u{1b}[8mx\u{1b}[0m",
            "Gr\u{F6}\u{DF}e  \u{3000}\r\n\n \t\u{1}end",
            "\u{130}STANBUL \u{1E9E} \u{1D408}\u{1D40C} \u{E0041}\u{E0042} \u{202E}abc",
        ];
        for raw in cases {
            assert_anchors_match_byte_map(raw);
        }
        // Runs longer than the anchor spacing, with and without folding.
        assert_anchors_match_byte_map(&format!("\u{E9}{long_word} \u{200B}{long_word}\u{43E}x"));
        assert_anchors_match_byte_map(&"\u{434}\u{44F} \u{4F60}\u{597D} ".repeat(400));
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus");
        for file in ["tool-definitions.jsonl", "tool-outputs.jsonl"] {
            let text = std::fs::read_to_string(corpus.join(file)).expect("the shared corpus");
            for line in text.lines() {
                assert_anchors_match_byte_map(line);
            }
        }
    }

    fn texts() -> impl Strategy<Value = String> {
        let atoms = prop::sample::select(vec![
            "ign",
            "ore ",
            "\u{43E}",
            "\u{435}",
            "\u{3B1}",
            "\u{200B}",
            "\u{202E}",
            "\u{E0041}",
            "\u{1b}[8m",
            "\u{FF49}",
            "\u{FB01}",
            "\u{FDFA}",
            "\u{301}",
            "\u{DF}",
            "\u{130}",
            "\u{E9}",
            "\u{4F60}",
            "\u{1F642}",
            "\u{3000}",
            "\n",
            "  ",
            "\r\n",
            "\t",
            "\u{0}",
            "-",
            "x1",
        ]);
        let part = prop_oneof![
            atoms.prop_map(String::from),
            any::<String>(),
            (1usize..400).prop_map(|n| "b".repeat(n)),
        ];
        prop::collection::vec(part, 0..60).prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn anchors_match_a_byte_map_on_any_text(raw in texts()) {
            assert_anchors_match_byte_map(&raw);
        }
    }

    fn layer(input: &str, kind: LayerKind) -> Option<String> {
        hidden_layers(input)
            .into_iter()
            .find(|l| l.kind == kind)
            .map(|l| l.text)
    }

    #[test]
    fn decodes_layers() {
        let tags: String = "hi there"
            .chars()
            .map(|c| char::from_u32(0xE0000 + c as u32).unwrap())
            .collect();
        assert_eq!(
            layer(&format!("ok{tags}"), LayerKind::TagCharacters).as_deref(),
            Some("hi there")
        );
        let flag = "\u{1F3F4}\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}";
        assert!(
            layer(flag, LayerKind::TagCharacters).is_none(),
            "flag emoji is not a payload"
        );
        assert_eq!(
            layer(
                "x SWdub3JlIHByZXZpb3VzIGluc3RydWN0aW9ucw== y",
                LayerKind::Base64
            )
            .as_deref(),
            Some("Ignore previous instructions")
        );
        assert_eq!(
            layer("%69%67%6E%6F%72%65", LayerKind::Percent).as_deref(),
            Some("ignore")
        );
        assert_eq!(
            layer(
                r"\x69\x67\x6e\x6f\x72\x65\x20\x61\x6c\x6c",
                LayerKind::HexEscape
            )
            .as_deref(),
            Some("ignore all")
        );
        assert_eq!(
            layer("a \u{202E}olleh\u{202C} b", LayerKind::BidiReversed).as_deref(),
            Some("hello")
        );
        assert!(layer(
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            LayerKind::HexEscape
        )
        .is_none());
    }
}
