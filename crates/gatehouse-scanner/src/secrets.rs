//! Credential values in text, and their redaction.
//!
//! A credential found in text is described by type, prefix, length and a
//! keyed fingerprint (HMAC-SHA-256 under the scanner's key, first 8 bytes in
//! hex) so two findings of the same secret can be correlated without storing
//! it. The value itself never leaves this module.

use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, Input, MatchKind};
use regex::Regex;
use sha2::{Digest, Sha256};

pub struct SecretPattern {
    pub kind: &'static str,
    pub regex: &'static str,
    /// Characters of the value that may be shown (a public, fixed prefix).
    pub prefix_len: usize,
    /// Every match holds one of these, so a text that holds none is not
    /// searched with `regex` (none listed: always searched).
    pub literals: &'static [&'static str],
}

pub const SECRET_PATTERNS: &[SecretPattern] = &[
    SecretPattern {
        kind: "aws_access_key_id",
        regex: r"\b(AKIA|ASIA)[0-9A-Z]{16}\b",
        prefix_len: 4,
        literals: &["AKIA", "ASIA"],
    },
    // A secret access key has no prefix of its own: it is found by its
    // label (`aws_secret_access_key=…`, `"SecretAccessKey": "…"`), and only
    // the value (the `value` group) is the credential.
    SecretPattern {
        kind: "aws_secret_access_key",
        regex: r#"(?i)\b(?:aws_?)?secret_?access_?key["']?\s*[:=]\s*["']?(?P<value>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|\z)"#,
        prefix_len: 0,
        // `(?i)` folds `s` and `k` to `ſ` and the Kelvin sign, but `c`, `r`,
        // `e` and `t` only within ASCII: every match holds `cret` in one of
        // its 16 ASCII spellings.
        literals: &[
            "cret", "creT", "crEt", "crET", "cRet", "cReT", "cREt", "cRET", //
            "Cret", "CreT", "CrEt", "CrET", "CRet", "CReT", "CREt", "CRET",
        ],
    },
    SecretPattern {
        kind: "github_token",
        regex: r"\bgh[pousr]_[A-Za-z0-9]{30,255}\b",
        prefix_len: 4,
        literals: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
    },
    SecretPattern {
        kind: "github_pat",
        regex: r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
        prefix_len: 11,
        literals: &["github_pat_"],
    },
    SecretPattern {
        kind: "slack_token",
        regex: r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
        prefix_len: 5,
        literals: &["xox"],
    },
    SecretPattern {
        kind: "anthropic_key",
        regex: r"\bsk-ant-[A-Za-z0-9_-]{20,}",
        prefix_len: 7,
        literals: &["sk-"],
    },
    SecretPattern {
        kind: "openai_key",
        regex: r"\bsk-(proj-)?[A-Za-z0-9_-]{20,}",
        prefix_len: 3,
        literals: &["sk-"],
    },
    SecretPattern {
        kind: "stripe_key",
        regex: r"\b[sr]k_live_[A-Za-z0-9]{16,}",
        prefix_len: 8,
        literals: &["k_live_"],
    },
    SecretPattern {
        kind: "google_api_key",
        regex: r"\bAIza[0-9A-Za-z_-]{35}\b",
        prefix_len: 4,
        literals: &["AIza"],
    },
    SecretPattern {
        kind: "private_key",
        regex: r"-----BEGIN ((RSA|EC|DSA|OPENSSH|ENCRYPTED|PGP) )?PRIVATE KEY( BLOCK)?-----[\s\S]{0,8192}?(-----END[ A-Z]*-----|\z)",
        prefix_len: 0,
        literals: &["-----BEGIN "],
    },
    SecretPattern {
        kind: "salesforce_session",
        regex: r"\b00D[0-9A-Za-z]{12,15}![0-9A-Za-z._]{40,}",
        prefix_len: 3,
        literals: &["00D"],
    },
    SecretPattern {
        kind: "bearer_token",
        regex: r"\b[Bb]earer\s+[A-Za-z0-9._~+/!-]{40,}=*",
        prefix_len: 0,
        literals: &["earer"],
    },
    SecretPattern {
        kind: "jwt",
        regex: r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{20,}",
        prefix_len: 3,
        literals: &["eyJ"],
    },
];

/// How one pattern is searched.
enum Finder {
    Regex(Regex),
    /// The private-key pattern, searched in two steps with the same
    /// leftmost-first result as its `regex`: compiled whole, its
    /// `[\s\S]{0,8192}?` is ~65,000 NFA states (≈ 20 MB with its search
    /// cache, more than everything else the scanner holds).
    PrivateKey {
        header: Regex,
        end: Regex,
    },
}

/// The `{0,8192}` of the private-key pattern: characters of key body
/// before the END line (or the end of the text).
const KEY_BODY_MAX_CHARS: usize = 8192;
/// Matches of one pattern looked at per string for findings.
const MAX_MATCHES: usize = 32;
/// … and for evidence ([`find_all_secrets`]): every token of a large dump,
/// bounded so an adversarial text cannot make the overlap check quadratic
/// without end.
const EVIDENCE_MAX_MATCHES: usize = 1024;

impl Finder {
    fn matches(&self, text: &str, max: usize) -> Vec<std::ops::Range<usize>> {
        match self {
            Finder::Regex(re) if re.capture_names().any(|n| n == Some("value")) => re
                .captures_iter(text)
                .filter_map(|c| c.name("value"))
                .take(max)
                .map(|m| m.range())
                .collect(),
            Finder::Regex(re) => re.find_iter(text).take(max).map(|m| m.range()).collect(),
            Finder::PrivateKey { header, end } => {
                let mut out = Vec::new();
                let mut at = 0;
                while out.len() < max {
                    let Some(h) = header.find_at(text, at) else {
                        break;
                    };
                    // The last position the END line may start at.
                    let limit = text[h.end()..]
                        .char_indices()
                        .nth(KEY_BODY_MAX_CHARS)
                        .map_or(text.len(), |(i, _)| h.end() + i);
                    let stop = match end.find_at(text, h.end()) {
                        Some(e) if e.start() <= limit => Some(e.end()),
                        _ if limit == text.len() => Some(text.len()),
                        _ => None,
                    };
                    match stop {
                        Some(stop) => {
                            out.push(h.start()..stop);
                            at = stop;
                        }
                        // No match starting here; the header begins with
                        // ASCII `-`, so the next byte is a char boundary.
                        None => at = h.start() + 1,
                    }
                }
                out
            }
        }
    }
}

// Candidate patterns are bits of a `u32`.
const _: () = assert!(SECRET_PATTERNS.len() <= 32);
const ALL_PATTERNS: u32 = u32::MAX >> (32 - SECRET_PATTERNS.len());
/// After this many literals found, every pattern is searched: a text
/// packed with one literal (`xoxoxo…`) would otherwise cost a search per
/// occurrence, more than the patterns' own search.
const LITERAL_HITS_MAX: usize = 64;

/// The patterns' finders, and one search for all their literals.
struct Compiled {
    /// Each pattern's finder (by index), compiled the first time the
    /// literal search picks the pattern: most text holds no credential
    /// literal, and compiled patterns are memory every wrap would keep.
    finders: Vec<OnceLock<Option<Finder>>>,
    literals: AhoCorasick,
    /// The patterns (bits of [`SECRET_PATTERNS`] indices) each literal of
    /// `literals` is one of.
    owners: Vec<u32>,
    /// The patterns without literals: always searched.
    unlisted: u32,
}

fn compiled() -> &'static Compiled {
    static RE: OnceLock<Compiled> = OnceLock::new();
    RE.get_or_init(|| {
        let finders = SECRET_PATTERNS.iter().map(|_| OnceLock::new()).collect();
        let mut words: Vec<&str> = Vec::new();
        let mut owners: Vec<u32> = Vec::new();
        for (i, p) in SECRET_PATTERNS.iter().enumerate() {
            for word in p.literals {
                match words.iter().position(|w| w == word) {
                    Some(at) => owners[at] |= 1 << i,
                    None => {
                        words.push(word);
                        owners.push(1 << i);
                    }
                }
            }
        }
        let literals = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .build(&words)
            .expect("static literals");
        let unlisted = SECRET_PATTERNS
            .iter()
            .enumerate()
            .filter(|(_, p)| p.literals.is_empty())
            .fold(0u32, |bits, (i, _)| bits | 1 << i);
        Compiled {
            finders,
            literals,
            owners,
            unlisted,
        }
    })
}

impl Compiled {
    /// Pattern `i`'s finder; `None` only if it does not compile, which
    /// `every_pattern_compiles` rules out.
    fn finder(&self, i: usize) -> Option<&Finder> {
        self.finders[i]
            .get_or_init(|| {
                let p = &SECRET_PATTERNS[i];
                Some(if p.kind == "private_key" {
                    Finder::PrivateKey {
                        header: Regex::new(PRIVATE_KEY_HEADER).ok()?,
                        end: Regex::new(PRIVATE_KEY_END).ok()?,
                    }
                } else {
                    Finder::Regex(Regex::new(p.regex).ok()?)
                })
            })
            .as_ref()
    }

    /// The patterns (bits of indices) that may match in `text`: those
    /// without literals, and those with one of theirs in it (all of them
    /// after [`LITERAL_HITS_MAX`] literals). A literal may begin inside
    /// another's match, so each search resumes one byte after the last
    /// match began.
    fn candidates(&self, text: &str) -> u32 {
        let mut found = self.unlisted;
        let mut at = 0;
        let mut hits = 0;
        while let Some(m) = self.literals.find(Input::new(text).span(at..text.len())) {
            hits += 1;
            if hits > LITERAL_HITS_MAX {
                return ALL_PATTERNS;
            }
            found |= self.owners[m.pattern().as_usize()];
            if found == ALL_PATTERNS {
                break;
            }
            at = m.start() + 1;
        }
        found
    }
}

/// The two halves of the private-key pattern around its key body.
const PRIVATE_KEY_HEADER: &str =
    r"-----BEGIN ((RSA|EC|DSA|OPENSSH|ENCRYPTED|PGP) )?PRIVATE KEY( BLOCK)?-----";
const PRIVATE_KEY_END: &str = r"-----END[ A-Z]*-----";

/// One credential value located in a string.
#[derive(Debug, Clone)]
pub struct SecretMatch {
    pub kind: &'static str,
    pub range: std::ops::Range<usize>,
    pub placeholder: bool,
}

/// Known documentation values and obvious placeholders are not leaks.
fn is_placeholder(value: &str) -> bool {
    let upper = value.to_ascii_uppercase();
    upper.contains("EXAMPLE")
        || upper.contains("XXXXXXXX")
        || upper.contains("YOUR")
        || upper.contains("REDACTED")
}

pub fn find_secrets(text: &str) -> Vec<SecretMatch> {
    find_with(text, compiled().candidates(text), MAX_MATCHES)
}

/// The credentials in `text` up to [`EVIDENCE_MAX_MATCHES`] per pattern,
/// past the cap of [`find_secrets`]: what evidence hides (a `.env` dump
/// with 40 tokens next to a finding shows none of them).
pub fn find_all_secrets(text: &str) -> Vec<SecretMatch> {
    find_with(text, compiled().candidates(text), EVIDENCE_MAX_MATCHES)
}

/// The credentials that only appear once invisible characters are taken
/// out (`ghp_A1b2<U+200B>C3d4…`: wikis break long words that way), as
/// ranges of `text` that include the invisibles. For evidence: a finding
/// next to such a token must not show its halves.
pub fn find_across_invisibles(text: &str) -> Vec<SecretMatch> {
    if text.is_ascii() {
        return Vec::new();
    }
    // The byte offset in `text` of every byte kept.
    let mut kept = String::with_capacity(text.len());
    let mut from: Vec<usize> = Vec::with_capacity(text.len());
    for (at, c) in text.char_indices() {
        if crate::normalize::is_invisible(c) {
            continue;
        }
        kept.push(c);
        from.extend(at..at + c.len_utf8());
    }
    if kept.len() == text.len() {
        return Vec::new();
    }
    find_secrets(&kept)
        .into_iter()
        .map(|m| SecretMatch {
            range: from[m.range.start]..from[m.range.end - 1] + 1,
            ..m
        })
        .filter(|m| {
            text[m.range.clone()]
                .chars()
                .any(crate::normalize::is_invisible)
        })
        .collect()
}

/// The credentials of the patterns in `candidates` (bits of indices).
fn find_with(text: &str, candidates: u32, max: usize) -> Vec<SecretMatch> {
    let mut out: Vec<SecretMatch> = Vec::new();
    let compiled = compiled();
    for (i, pattern) in SECRET_PATTERNS.iter().enumerate() {
        if candidates & (1 << i) == 0 {
            continue;
        }
        let Some(finder) = compiled.finder(i) else {
            continue;
        };
        for m in finder.matches(text, max) {
            if out
                .iter()
                .any(|o| o.range.start < m.end && m.start < o.range.end)
            {
                continue;
            }
            out.push(SecretMatch {
                kind: pattern.kind,
                placeholder: is_placeholder(&text[m.clone()]),
                range: m,
            });
        }
    }
    out.sort_by_key(|m| m.range.start);
    out
}

/// A value after a label that names it a secret (`password: …`,
/// `"api_key": "…"`, `POSTGRES_PASSWORD=…`, `"dbPassword": "…"`): not a
/// credential pattern of its own (its shape says nothing), but never shown
/// in evidence. The label may end an identifier; a quoted value runs to its
/// closing quote (a passphrase has spaces), a bare one to a delimiter. JSON
/// inside a JSON string quotes with `\"` (`{\"db_password\":\"…\"}`); an
/// `Authorization` value's scheme (`Bearer `, `Basic `) is not the secret.
const LABELLED_VALUE: &str = r#"(?i)(?:password|passwd|pwd|passphrase|secret|api[_-]?key|access[_-]?key|auth[_-]?token|access[_-]?token|refresh[_-]?token|token|credentials?|authorization)(?:\\?["'])?\s*[:=]\s*(?:(?:bearer|basic|token)\s+)?(?:"(?P<dq>(?:[^"\\]|\\.){4,})"|'(?P<sq>[^']{4,})'|\\"(?P<eq>[^"\\]{4,})\\"|(?P<bare>[^\s"'<>,;]{4,}))"#;

/// The password of a URL's user information (`postgres://app:PASS@db/…`).
const URL_PASSWORD: &str = r#"(?i)\b[a-z][a-z0-9+.-]*://[^\s/:@"'<>]+:(?P<pw>[^\s/@"'<>]{3,})@"#;

/// Every labelled secret value in `text` (no cap: evidence hides them all).
fn labelled_values(text: &str) -> Vec<std::ops::Range<usize>> {
    static RE: OnceLock<Option<(Regex, Regex)>> = OnceLock::new();
    let Some((labelled, url)) = RE.get_or_init(|| {
        Some((
            Regex::new(LABELLED_VALUE).ok()?,
            Regex::new(URL_PASSWORD).ok()?,
        ))
    }) else {
        return Vec::new();
    };
    let mut found: Vec<std::ops::Range<usize>> = labelled
        .captures_iter(text)
        .filter_map(|c| {
            c.name("dq")
                .or(c.name("sq"))
                .or(c.name("eq"))
                .or(c.name("bare"))
        })
        .map(|m| m.range())
        .collect();
    found.extend(
        url.captures_iter(text)
            .filter_map(|c| c.name("pw"))
            .map(|m| m.range()),
    );
    found
}

/// Whether `text` holds a credential or a value labelled as a secret (a
/// decoded layer that does makes its carrier an `encoded_secret`).
pub fn holds_secret(text: &str) -> bool {
    !find_secrets(text).is_empty() || !labelled_values(text).is_empty()
}

/// What evidence hides in `text`: the credentials `found` in it, values
/// labelled as secrets (`labelled_secret`) and `carriers` — spans that hold
/// a credential in encoded form (`encoded_secret`) — overlapping spans
/// merged into one, for [`redact_shown`].
pub fn evidence_spans(
    text: &str,
    found: &[SecretMatch],
    carriers: &[std::ops::Range<usize>],
) -> Vec<SecretMatch> {
    let extra = |kind: &'static str, range: std::ops::Range<usize>| SecretMatch {
        kind,
        range,
        placeholder: false,
    };
    let mut all: Vec<SecretMatch> = found.to_vec();
    all.extend(
        labelled_values(text)
            .into_iter()
            .map(|r| extra("labelled_secret", r)),
    );
    all.extend(carriers.iter().map(|r| extra("encoded_secret", r.clone())));
    all.sort_by_key(|m| m.range.start);
    let mut merged: Vec<SecretMatch> = Vec::with_capacity(all.len());
    for m in all {
        match merged.last_mut() {
            Some(last) if m.range.start < last.range.end => {
                if m.range.end > last.range.end {
                    last.range.end = m.range.end;
                    last.kind = m.kind;
                }
            }
            _ => merged.push(m),
        }
    }
    merged
}

/// HMAC-SHA-256(key, value), first 8 bytes as hex.
pub fn fingerprint(key: &[u8], value: &[u8]) -> String {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut ipad = [0x36u8; BLOCK];
    let mut opad = [0x5cu8; BLOCK];
    for i in 0..BLOCK {
        ipad[i] ^= k[i];
        opad[i] ^= k[i];
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(value)
        .finalize();
    let outer = Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize();
    outer[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The evidence string that stands in for a credential value.
pub fn describe(key: &[u8], kind: &str, value: &str) -> String {
    let prefix_len = SECRET_PATTERNS
        .iter()
        .find(|p| p.kind == kind)
        .map(|p| p.prefix_len)
        .unwrap_or(0);
    let prefix: String = value.chars().take(prefix_len).collect();
    format!(
        "<redacted {kind} prefix={prefix:?} len={} fp={}>",
        value.chars().count(),
        fingerprint(key, value.as_bytes())
    )
}

/// Replaces every credential value in `text` with its description.
#[cfg(test)]
pub fn redact(key: &[u8], text: &str) -> String {
    let whole = std::iter::once(0..text.len()).collect::<Vec<_>>();
    redact_shown(
        key,
        text,
        &whole,
        &evidence_spans(text, &find_secrets(text), &[]),
    )
}

/// The `shown` byte ranges of `text` (in order, joined by `…`), with every
/// part of a credential in `found` (located in the whole of `text`) replaced
/// by the description of the whole value, once, however the ranges cut it.
pub fn redact_shown(
    key: &[u8],
    text: &str,
    shown: &[std::ops::Range<usize>],
    found: &[SecretMatch],
) -> String {
    let mut out = String::new();
    let mut described = None;
    for (n, range) in shown.iter().enumerate() {
        if n > 0 {
            out.push('…');
        }
        let mut at = range.start;
        while at < range.end {
            let next = found
                .iter()
                .enumerate()
                .find(|(_, m)| m.range.end > at && m.range.start < range.end);
            let Some((i, m)) = next else {
                out.push_str(&text[at..range.end]);
                break;
            };
            out.push_str(&text[at..m.range.start.max(at)]);
            if described != Some(i) {
                out.push_str(&describe(key, m.kind, &text[m.range.clone()]));
                described = Some(i);
            }
            at = m.range.end.min(range.end);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts with one credential of every kind, some inside others or in
    /// odd spellings, and the corpus's outputs and definitions.
    fn credential_texts() -> Vec<String> {
        let mut texts: Vec<String> = [
            "AKIAIOSFODNN7REALKEY and ASIAABCDEFGHIJKLMNOP",
            "aws_secret_access_key = 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",
            "\u{17f}ecret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALKEYabc",
            "SECRETACCESSKEY=\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALKEYabc\"",
            "SeCrEt_AcCe\u{17f}s_\u{212a}ey: wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALKEYabc",
            "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 gho_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
            "ghs_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8,ghu_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
            "ghr_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
            "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789",
            "xoxb-123456789012-abcdefghij xoxp-1234-5678-abcdefghijkl",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz sk-proj-abcdefghijklmnopqrstuvwx",
            "xsk-ant-sk-abcdefghijklmnopqrstuvwxyz1234",
            "sk_live_abcdefghijklmnop1234 rk_live_ABCDEFGHIJKLMNOP5678",
            "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----",
            "00D5e000000abcd!AQ0AQabcdefghijklmnopqrstuvwxyz0123456789ABCDEF",
            "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH==",
            "bearer  abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH.x",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnopqrstuvwxyz",
            "eyJghp_eyJ.eyJabcdefghij.eyJabcdefghij.abcdefghijklmnopqrstuvwxyz",
            "no credential here, only prose about a secret and a bearer of news",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus");
        for file in ["tool-outputs.jsonl", "tool-definitions.jsonl"] {
            let text = std::fs::read_to_string(corpus.join(file)).expect("the corpus");
            texts.extend(text.lines().map(str::to_string));
        }
        texts
    }

    #[test]
    fn every_pattern_compiles() {
        for (i, p) in SECRET_PATTERNS.iter().enumerate() {
            assert!(
                compiled().finder(i).is_some(),
                "{} does not compile",
                p.kind
            );
        }
    }

    /// A pattern's literals are in every one of its matches, so skipping
    /// a pattern whose literals are absent never hides a credential.
    #[test]
    fn every_match_holds_one_of_its_pattern_literals() {
        let patterns: Vec<(&SecretPattern, Regex)> = SECRET_PATTERNS
            .iter()
            .filter(|p| !p.literals.is_empty())
            .map(|p| (p, Regex::new(p.regex).unwrap()))
            .collect();
        let mut checked = 0;
        for text in credential_texts() {
            for (p, re) in &patterns {
                for m in re.find_iter(&text) {
                    assert!(
                        p.literals.iter().any(|l| m.as_str().contains(l)),
                        "{}: {:?} holds none of {:?}",
                        p.kind,
                        m.as_str(),
                        p.literals
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 20, "only {checked} matches were checked");
    }

    /// The AWS secret-key pattern's literals: `cret` in every ASCII
    /// spelling, and no other character that `(?i)` folds to its letters.
    #[test]
    fn the_caseless_label_literal_is_spelled_every_way() {
        let aws = SECRET_PATTERNS
            .iter()
            .find(|p| p.kind == "aws_secret_access_key")
            .unwrap();
        let mut spellings: Vec<String> = vec![String::new()];
        for c in "cret".chars() {
            spellings = spellings
                .iter()
                .flat_map(|s| [format!("{s}{c}"), format!("{s}{}", c.to_ascii_uppercase())])
                .collect();
        }
        let mut listed: Vec<&str> = aws.literals.to_vec();
        listed.sort_unstable();
        spellings.sort_unstable();
        assert_eq!(listed, spellings);
        let hir = regex_syntax::parse("(?i)[cret]").unwrap();
        let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(class)) =
            hir.kind()
        else {
            panic!("a Unicode class: {hir:?}");
        };
        let folded: String = class.iter().flat_map(|r| r.start()..=r.end()).collect();
        assert_eq!(folded, "CERTcert");
        let folded_label =
            "SeCrEt_AcCe\u{17f}s_\u{212a}ey: wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALKEYabc";
        assert!(find_secrets(folded_label)
            .iter()
            .any(|m| m.kind == "aws_secret_access_key"));
    }

    #[test]
    fn the_literal_search_finds_what_every_pattern_finds() {
        let texts = credential_texts();
        let mut found = 0;
        for text in &texts {
            let all = find_with(text, u32::MAX, MAX_MATCHES);
            let filtered = find_secrets(text);
            let ranges = |v: &[SecretMatch]| {
                v.iter()
                    .map(|m| (m.kind, m.range.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ranges(&filtered), ranges(&all), "in {text:?}");
            found += all.len();
        }
        // Every kind is found somewhere in the texts.
        for p in SECRET_PATTERNS {
            assert!(
                texts
                    .iter()
                    .any(|t| find_secrets(t).iter().any(|m| m.kind == p.kind)),
                "no text holds a {}",
                p.kind
            );
        }
        assert!(found >= 20, "only {found} credentials found");
    }

    /// Patterns without literals are always searched; a text without any
    /// literal skips every other one.
    #[test]
    fn candidates_follow_the_literals() {
        let always = SECRET_PATTERNS
            .iter()
            .enumerate()
            .filter(|(_, p)| p.literals.is_empty())
            .fold(0u32, |bits, (i, _)| bits | 1 << i);
        assert_eq!(compiled().candidates(&"x".repeat(1000)), always);
        let both = compiled().candidates("a sk-ant-x b");
        let index = |kind: &str| SECRET_PATTERNS.iter().position(|p| p.kind == kind).unwrap();
        assert_eq!(
            both,
            always | 1 << index("openai_key") | 1 << index("anthropic_key")
        );
        let jwt = always | 1 << index("jwt");
        let few = "eyJ ".repeat(LITERAL_HITS_MAX);
        assert_eq!(compiled().candidates(&few), jwt);
        let packed = format!("{few}eyJ");
        assert_eq!(compiled().candidates(&packed), ALL_PATTERNS);
    }

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?"
        let fp = fingerprint(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(fp, "5bdcc146bf60754e", "HMAC-SHA-256 must follow RFC 2104");
    }

    #[test]
    fn redaction_hides_value_keeps_shape() {
        let token = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8";
        let out = redact(b"k", &format!("token: {token} end"));
        assert!(
            !out.contains(token),
            "value must not survive redaction: {out}"
        );
        assert!(
            out.contains("github_token")
                && out.contains("prefix=\"ghp_\"")
                && out.contains("len=40"),
            "{out}"
        );
    }

    /// The two-step private-key search finds exactly what the pattern's
    /// regex finds.
    #[test]
    fn private_key_search_matches_its_regex() {
        let spec = SECRET_PATTERNS
            .iter()
            .find(|p| p.kind == "private_key")
            .expect("a private_key pattern");
        assert_eq!(
            spec.regex,
            format!("{PRIVATE_KEY_HEADER}[\\s\\S]{{0,8192}}?({PRIVATE_KEY_END}|\\z)"),
            "the halves must stay in step with the documented pattern"
        );
        let whole = Regex::new(spec.regex).unwrap();
        let key = SECRET_PATTERNS
            .iter()
            .position(|p| p.kind == "private_key")
            .unwrap();
        let finder = compiled().finder(key).unwrap();
        let body = |n: usize, c: &str| c.repeat(n);
        let cases = vec![
            "-----BEGIN PRIVATE KEY-----abc-----END PRIVATE KEY----- tail".to_string(),
            "x -----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----".to_string(),
            "-----BEGIN OPENSSH PRIVATE KEY-----unterminated".to_string(),
            "-----BEGIN PGP PRIVATE KEY BLOCK----------END------".to_string(),
            "-----BEGIN PRIVATE KEY-----BEGIN PRIVATE KEY-----x".to_string(),
            "-----BEGIN EC PRIVATE KEY-----a-----END x-----END EC-----b".to_string(),
            format!(
                "-----BEGIN PRIVATE KEY-----{}-----END-----",
                body(8192, "a")
            ),
            format!(
                "-----BEGIN PRIVATE KEY-----{}-----END-----",
                body(8193, "a")
            ),
            format!("-----BEGIN PRIVATE KEY-----{}", body(8192, "é")),
            format!("-----BEGIN PRIVATE KEY-----{}", body(8193, "é")),
            format!(
                "-----BEGIN PRIVATE KEY-----{}-----BEGIN DSA PRIVATE KEY-----k",
                body(9000, "b")
            ),
            format!(
                "{}-----BEGIN PRIVATE KEY-----{}-----END PRIVATE KEY-----",
                "-----BEGIN PRIVATE KEY-----a-----END-----".repeat(40),
                body(8191, "ü")
            ),
            "no key here".to_string(),
        ];
        for text in &cases {
            let expected: Vec<_> = whole.find_iter(text).take(32).map(|m| m.range()).collect();
            assert_eq!(
                finder.matches(text, MAX_MATCHES),
                expected,
                "for {:.80}…",
                text
            );
        }
    }

    #[test]
    fn documentation_key_is_placeholder() {
        let m = find_secrets("AKIAIOSFODNN7EXAMPLE");
        assert!(
            m.len() == 1 && m[0].placeholder,
            "AWS docs key is a placeholder: {m:?}"
        );
    }
}
