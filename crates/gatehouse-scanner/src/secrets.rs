//! Credential values in text, and their redaction.
//!
//! A credential found in text is described by type, prefix, length and a
//! keyed fingerprint (HMAC-SHA-256 under the scanner's key, first 8 bytes in
//! hex) so two findings of the same secret can be correlated without storing
//! it. The value itself never leaves this module.

use std::sync::OnceLock;

use regex::Regex;
use sha2::{Digest, Sha256};

pub struct SecretPattern {
    pub kind: &'static str,
    pub regex: &'static str,
    /// Characters of the value that may be shown (a public, fixed prefix).
    pub prefix_len: usize,
}

pub const SECRET_PATTERNS: &[SecretPattern] = &[
    SecretPattern {
        kind: "aws_access_key_id",
        regex: r"\b(AKIA|ASIA)[0-9A-Z]{16}\b",
        prefix_len: 4,
    },
    SecretPattern {
        kind: "github_token",
        regex: r"\bgh[pousr]_[A-Za-z0-9]{30,255}\b",
        prefix_len: 4,
    },
    SecretPattern {
        kind: "github_pat",
        regex: r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
        prefix_len: 11,
    },
    SecretPattern {
        kind: "slack_token",
        regex: r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
        prefix_len: 5,
    },
    SecretPattern {
        kind: "anthropic_key",
        regex: r"\bsk-ant-[A-Za-z0-9_-]{20,}",
        prefix_len: 7,
    },
    SecretPattern {
        kind: "openai_key",
        regex: r"\bsk-(proj-)?[A-Za-z0-9_-]{20,}",
        prefix_len: 3,
    },
    SecretPattern {
        kind: "stripe_key",
        regex: r"\b[sr]k_live_[A-Za-z0-9]{16,}",
        prefix_len: 8,
    },
    SecretPattern {
        kind: "google_api_key",
        regex: r"\bAIza[0-9A-Za-z_-]{35}\b",
        prefix_len: 4,
    },
    SecretPattern {
        kind: "private_key",
        regex: r"-----BEGIN ((RSA|EC|DSA|OPENSSH|ENCRYPTED|PGP) )?PRIVATE KEY( BLOCK)?-----[\s\S]{0,8192}?(-----END[ A-Z]*-----|\z)",
        prefix_len: 0,
    },
    SecretPattern {
        kind: "salesforce_session",
        regex: r"\b00D[0-9A-Za-z]{12,15}![0-9A-Za-z._]{40,}",
        prefix_len: 3,
    },
    SecretPattern {
        kind: "bearer_token",
        regex: r"\b[Bb]earer\s+[A-Za-z0-9._~+/!-]{40,}=*",
        prefix_len: 0,
    },
    SecretPattern {
        kind: "jwt",
        regex: r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{20,}",
        prefix_len: 3,
    },
];

fn compiled() -> &'static Vec<(usize, Regex)> {
    static RE: OnceLock<Vec<(usize, Regex)>> = OnceLock::new();
    RE.get_or_init(|| {
        SECRET_PATTERNS
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Regex::new(p.regex).ok().map(|r| (i, r)))
            .collect()
    })
}

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
    let mut out: Vec<SecretMatch> = Vec::new();
    for (i, re) in compiled() {
        for m in re.find_iter(text).take(32) {
            if out
                .iter()
                .any(|o| o.range.start < m.end() && m.start() < o.range.end)
            {
                continue;
            }
            out.push(SecretMatch {
                kind: SECRET_PATTERNS[*i].kind,
                range: m.range(),
                placeholder: is_placeholder(m.as_str()),
            });
        }
    }
    out.sort_by_key(|m| m.range.start);
    out
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
pub fn redact(key: &[u8], text: &str) -> String {
    let found = find_secrets(text);
    if found.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for m in found {
        if m.range.start < last {
            continue;
        }
        out.push_str(&text[last..m.range.start]);
        out.push_str(&describe(key, m.kind, &text[m.range.clone()]));
        last = m.range.end;
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn documentation_key_is_placeholder() {
        let m = find_secrets("AKIAIOSFODNN7EXAMPLE");
        assert!(
            m.len() == 1 && m[0].placeholder,
            "AWS docs key is a placeholder: {m:?}"
        );
    }
}
