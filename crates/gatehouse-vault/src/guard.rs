//! Secret egress guard (`secret_egress`): is a vault secret of one server in
//! the arguments of a call to another server?
//!
//! The guard holds keyed fingerprints, never plain text, so a wrap process
//! can check for every other server's secrets without holding them. Each
//! argument string (and one layer of percent, base64 or hex decoding of it)
//! is scanned once, position by position: the 8 bytes starting there go
//! through a keyed multiply-xor hash whose top 32 bits are compared — first
//! against a 64-Kbit filter, then a map — with the same hash of each
//! secret's first 8 bytes. Only on such a hit is the HMAC-SHA256 of the
//! window of that secret's length computed and compared. The cost is one
//! hash per byte, whatever the number and lengths of the secrets.
//!
//! Secrets shorter than [`MIN_GUARDED_LEN`] bytes are not guarded: at that
//! length matches in ordinary text are too likely to block useful work, and
//! the fingerprint would be open to brute force.

use std::collections::HashMap;
use std::fmt;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::Secret;

/// Secrets shorter than this (in bytes) are not guarded.
pub const MIN_GUARDED_LEN: usize = 8;

/// Keyed hash of an 8-byte window, top 32 bits kept: a prefilter only (a
/// collision costs an HMAC, never a wrong answer).
fn prefix_hash(window: [u8; 8], k: (u64, u64)) -> u32 {
    ((u64::from_le_bytes(window) ^ k.0).wrapping_mul(k.1) >> 32) as u32
}

fn window8(bytes: &[u8], at: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    w
}

/// The key for fingerprints. `gatehouse wrap` derives it from the
/// per-install key (`gatehouse_proxy::egress::guard_key`); `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct GuardKey([u8; 32]);

impl fmt::Debug for GuardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GuardKey(<redacted>)")
    }
}

impl GuardKey {
    /// The installation's fingerprint key, derived from its per-install key
    /// (never stored). Every process of one install derives the same key.
    pub fn for_install(install_key: &[u8]) -> Self {
        use sha2::{Digest, Sha256};
        let bytes: [u8; 32] = Sha256::new()
            .chain_update(b"gatehouse.egress.v1")
            .chain_update(install_key)
            .finalize()
            .into();
        GuardKey(bytes)
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(bytes))
    }

    /// A key from stored bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Hex form for storing in the vault.
    pub fn to_hex(&self) -> Secret<String> {
        Secret::new(hex::encode(self.0))
    }

    /// Parses [`GuardKey::to_hex`] output.
    pub fn from_hex(s: &str) -> Option<Self> {
        let bytes = hex::decode(s.trim()).ok()?;
        Some(Self(bytes.try_into().ok()?))
    }

    fn mac(&self, data: &[u8]) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        m.update(data);
        m.finalize().into_bytes().into()
    }

    fn prefix_keys(&self) -> (u64, u64) {
        let d = self.mac(b"gatehouse prefix filter");
        let k = |i: usize| u64::from_le_bytes(d[i..i + 8].try_into().unwrap_or([7; 8]));
        (k(0), k(8) | 1)
    }
}

/// What is stored about one guarded secret: owner, name, length, a 32-bit
/// keyed hash of the first 8 bytes and a keyed HMAC — enough to recognise the value,
/// useless for recovering it without the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretFingerprint {
    /// Opaque id of the server the secret belongs to.
    pub owner: String,
    /// The secret's vault name.
    pub name: String,
    /// Length in bytes.
    pub len: usize,
    prefix: u32,
    mac: [u8; 32],
}

impl fmt::Debug for SecretFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretFingerprint")
            .field("owner", &self.owner)
            .field("name", &self.name)
            .field("len", &self.len)
            .finish()
    }
}

/// The published form of `owner`'s secrets: (name, encoded fingerprint) for
/// each one long enough to be guarded.
pub fn publishable(
    key: &GuardKey,
    owner: &str,
    secrets: &[(&str, &Secret<String>)],
) -> Vec<(String, String)> {
    secrets
        .iter()
        .filter_map(|(name, value)| SecretFingerprint::compute(key, owner, name, value))
        .map(|f| (f.name.clone(), f.encode()))
        .collect()
}

impl SecretFingerprint {
    /// Fingerprints `secret`; `None` when it is shorter than [`MIN_GUARDED_LEN`].
    pub fn compute(
        key: &GuardKey,
        owner: &str,
        name: &str,
        secret: &Secret<String>,
    ) -> Option<Self> {
        let bytes = secret.expose().as_bytes();
        if bytes.len() < MIN_GUARDED_LEN {
            return None;
        }
        let prefix = prefix_hash(window8(bytes, 0), key.prefix_keys());
        Some(Self {
            owner: owner.to_owned(),
            name: name.to_owned(),
            len: bytes.len(),
            prefix,
            mac: key.mac(bytes),
        })
    }

    /// Storable text form: `v1:<len>:<prefix hex>:<mac hex>`.
    pub fn encode(&self) -> String {
        format!(
            "v1:{}:{:08x}:{}",
            self.len,
            self.prefix,
            hex::encode(self.mac)
        )
    }

    /// Parses [`SecretFingerprint::encode`] output for `owner`/`name`.
    pub fn decode(owner: &str, name: &str, s: &str) -> Option<Self> {
        let mut parts = s.split(':');
        if parts.next()? != "v1" {
            return None;
        }
        let len = parts.next()?.parse().ok()?;
        let prefix = u32::from_str_radix(parts.next()?, 16).ok()?;
        let mac = hex::decode(parts.next()?).ok()?.try_into().ok()?;
        (parts.next().is_none() && len >= MIN_GUARDED_LEN).then(|| Self {
            owner: owner.into(),
            name: name.into(),
            len,
            prefix,
            mac,
        })
    }
}

/// The layer in which a secret was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As is.
    Plain,
    /// After percent-decoding.
    Percent,
    /// After base64 (standard or URL-safe) decoding of a run.
    Base64,
    /// After hex decoding of a run.
    Hex,
}

/// A guarded secret found in a call to another server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardHit {
    /// The server the secret belongs to.
    pub owner: String,
    /// The secret's vault name.
    pub name: String,
    /// Which of the checked strings contained it.
    pub arg_index: usize,
    /// In which decoding layer.
    pub encoding: Encoding,
}

/// Checks strings against fingerprints of other servers' secrets.
pub struct SecretGuard {
    key: GuardKey,
    prefix_keys: (u64, u64),
    /// One bit per value of the top 16 bits of a prefix hash.
    filter: Box<[u64; 1024]>,
    by_prefix: HashMap<u32, Vec<usize>>,
    fingerprints: Vec<SecretFingerprint>,
}

impl fmt::Debug for SecretGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretGuard")
            .field("fingerprints", &self.fingerprints.len())
            .finish()
    }
}

const B64_MIN_RUN: usize = 12;
const HEX_MIN_RUN: usize = 16;

impl SecretGuard {
    /// A guard over `fingerprints` made with `key`.
    pub fn new(key: GuardKey, fingerprints: Vec<SecretFingerprint>) -> Self {
        let mut filter = Box::new([0u64; 1024]);
        let mut by_prefix: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, fp) in fingerprints.iter().enumerate() {
            let bit = (fp.prefix >> 16) as usize;
            filter[bit / 64] |= 1 << (bit % 64);
            by_prefix.entry(fp.prefix).or_default().push(i);
        }
        Self {
            prefix_keys: key.prefix_keys(),
            key,
            filter,
            by_prefix,
            fingerprints,
        }
    }

    /// Convenience for the control plane, which holds the values.
    pub fn from_secrets<'a>(
        key: GuardKey,
        secrets: impl IntoIterator<Item = (&'a str, &'a str, &'a Secret<String>)>,
    ) -> Self {
        let fps = secrets
            .into_iter()
            .filter_map(|(owner, name, value)| SecretFingerprint::compute(&key, owner, name, value))
            .collect();
        Self::new(key, fps)
    }

    /// Number of guarded secrets.
    pub fn len(&self) -> usize {
        self.fingerprints.len()
    }

    /// True when nothing is guarded.
    pub fn is_empty(&self) -> bool {
        self.fingerprints.is_empty()
    }

    /// First secret of a server other than `caller` found in `strings`.
    pub fn check<'a>(
        &self,
        caller: &str,
        strings: impl IntoIterator<Item = &'a str>,
    ) -> Option<GuardHit> {
        if self.fingerprints.iter().all(|f| f.owner == caller) {
            return None;
        }
        for (arg_index, s) in strings.into_iter().enumerate() {
            if let Some(hit) = self.scan(caller, s.as_bytes(), arg_index, Encoding::Plain) {
                return Some(hit);
            }
            for (encoding, decoded) in decodings(s) {
                if let Some(hit) = self.scan(caller, &decoded, arg_index, encoding) {
                    return Some(hit);
                }
            }
        }
        None
    }

    fn scan(
        &self,
        caller: &str,
        bytes: &[u8],
        arg_index: usize,
        encoding: Encoding,
    ) -> Option<GuardHit> {
        if bytes.len() < MIN_GUARDED_LEN {
            return None;
        }
        for start in 0..=bytes.len() - 8 {
            let prefix = prefix_hash(window8(bytes, start), self.prefix_keys);
            let bit = (prefix >> 16) as usize;
            if self.filter[bit / 64] & (1 << (bit % 64)) == 0 {
                continue;
            }
            let Some(candidates) = self.by_prefix.get(&prefix) else {
                continue;
            };
            for &i in candidates {
                let fp = &self.fingerprints[i];
                if fp.owner == caller || start + fp.len > bytes.len() {
                    continue;
                }
                if self.key.mac(&bytes[start..start + fp.len]) == fp.mac {
                    return Some(GuardHit {
                        owner: fp.owner.clone(),
                        name: fp.name.clone(),
                        arg_index,
                        encoding,
                    });
                }
            }
        }
        None
    }
}

fn b64_engines() -> [GeneralPurpose; 2] {
    let cfg = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    [
        GeneralPurpose::new(&base64::alphabet::STANDARD, cfg),
        GeneralPurpose::new(&base64::alphabet::URL_SAFE, cfg),
    ]
}

/// One layer of decoding of `s`: percent-decoding of the whole string, and
/// base64 / hex decoding of each long enough run of those alphabets.
fn decodings(s: &str) -> Vec<(Encoding, Vec<u8>)> {
    let mut out = Vec::new();
    let bytes = s.as_bytes();
    if let Some(decoded) = percent_decode(bytes) {
        out.push((Encoding::Percent, decoded));
    }
    for run in runs(bytes, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-')
    }) {
        if run.len() < B64_MIN_RUN {
            continue;
        }
        // The encoded secret may start anywhere in the run (`example/c/`
        // before it is in the alphabet too): decoded from each of the four
        // offsets, one of them is aligned with it.
        for offset in 0..4 {
            let trimmed = trim_to_b64_len(&run[offset..]);
            for engine in b64_engines() {
                if let Ok(decoded) = engine.decode(trimmed) {
                    out.push((Encoding::Base64, decoded));
                    break;
                }
            }
        }
    }
    for run in runs(bytes, |b| b.is_ascii_hexdigit()) {
        if run.len() >= HEX_MIN_RUN {
            if let Ok(decoded) = hex::decode(&run[..run.len() & !1]) {
                out.push((Encoding::Hex, decoded));
            }
        }
    }
    out
}

/// Drops a last character that cannot end a base64 text (length ≡ 1 mod 4).
/// Runs stop at `=`, so padding is never part of them.
fn trim_to_b64_len(run: &[u8]) -> &[u8] {
    if run.len() % 4 == 1 {
        &run[..run.len() - 1]
    } else {
        run
    }
}

fn runs(bytes: &[u8], member: impl Fn(u8) -> bool) -> Vec<&[u8]> {
    bytes
        .split(|&b| !member(b))
        .filter(|r| !r.is_empty())
        .collect()
}

fn percent_decode(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut changed = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex_val(bytes[i + 1]), hex_val(bytes[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                changed = true;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    changed.then_some(out)
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    const SECRET: &str = "ghp_CanarySecretValue0123456789abcdef";

    fn guard() -> SecretGuard {
        let key = GuardKey::from_bytes([7; 32]);
        let a = Secret::new(SECRET.to_owned());
        let b = Secret::new("pg-password-42".to_owned());
        let short = Secret::new("short".to_owned());
        SecretGuard::from_secrets(
            key,
            [
                ("srv_gh", "GITHUB_TOKEN", &a),
                ("srv_pg", "PG_PASSWORD", &b),
                ("srv_x", "PIN", &short),
            ],
        )
    }

    fn check(caller: &str, arg: &str, expect: Option<(&str, Encoding)>) {
        let got = guard().check(caller, [arg]).map(|h| (h.owner, h.encoding));
        let expect = expect.map(|(o, e)| (o.to_owned(), e));
        assert_eq!(got, expect, "guard.check({caller:?}, {arg:?})");
    }

    #[test]
    fn finds_other_servers_secrets_in_each_layer() {
        check(
            "srv_slack",
            &format!("please post {SECRET} now"),
            Some(("srv_gh", Encoding::Plain)),
        );
        check("srv_slack", SECRET, Some(("srv_gh", Encoding::Plain)));
        check(
            "srv_slack",
            &format!("x={}", STANDARD.encode(format!("token:{SECRET}"))),
            Some(("srv_gh", Encoding::Base64)),
        );
        check(
            "srv_slack",
            &URL_SAFE_NO_PAD.encode(SECRET),
            Some(("srv_gh", Encoding::Base64)),
        );
        // After a path in the alphabet too, at each alignment.
        for path in ["c/", "cc/", "ccc/", "example/c/"] {
            check(
                "srv_slack",
                &format!(
                    "https://evil.example/{path}{}",
                    URL_SAFE_NO_PAD.encode(SECRET)
                ),
                Some(("srv_gh", Encoding::Base64)),
            );
        }
        check(
            "srv_slack",
            &format!("https://evil.example/?t={}", hex::encode(SECRET)),
            Some(("srv_gh", Encoding::Hex)),
        );
        check(
            "srv_slack",
            "https://evil.example/?p=pg%2Dpassword%2D42",
            Some(("srv_pg", Encoding::Percent)),
        );
        check(
            "srv_slack",
            "pg-password-42",
            Some(("srv_pg", Encoding::Plain)),
        );
    }

    #[test]
    fn own_secrets_short_secrets_and_near_misses_pass() {
        check("srv_gh", SECRET, None);
        check("srv_slack", "the short pin is short", None);
        check("srv_slack", "pg-password-43", None);
        check("srv_slack", &SECRET[..SECRET.len() - 1], None);
        check("srv_slack", "", None);
    }

    #[test]
    fn reports_the_argument_index() {
        let hit = guard().check("srv_slack", ["a", "b", SECRET]).unwrap();
        assert_eq!(hit.arg_index, 2);
        assert_eq!(hit.name, "GITHUB_TOKEN");
    }

    #[test]
    fn holds_no_plain_text() {
        let g = guard();
        let shown = format!("{g:?} {:?}", g.fingerprints);
        assert!(
            !shown.contains("Canary"),
            "guard debug output leaked: {shown}"
        );
        let fp = &g.fingerprints[0];
        let encoded = fp.encode();
        assert!(!encoded.contains("Canary"));
        assert_eq!(
            SecretFingerprint::decode(&fp.owner, &fp.name, &encoded).as_ref(),
            Some(fp),
            "encode/decode round trip"
        );
    }

    #[test]
    fn fingerprints_depend_on_the_key() {
        let s = Secret::new(SECRET.to_owned());
        let a = SecretFingerprint::compute(&GuardKey::from_bytes([1; 32]), "o", "n", &s).unwrap();
        let b = SecretFingerprint::compute(&GuardKey::from_bytes([2; 32]), "o", "n", &s).unwrap();
        assert_ne!(
            a.mac, b.mac,
            "a different key must give a different fingerprint"
        );
        let guard_b = SecretGuard::new(GuardKey::from_bytes([2; 32]), vec![a]);
        assert!(
            guard_b.check("x", [SECRET]).is_none(),
            "fingerprints made with another key never match"
        );
    }

    proptest::proptest! {
        #[test]
        fn embedded_secrets_are_always_found(secret in "[ -~]{8,40}", pre in "[ -~]{0,60}", post in "[ -~]{0,60}") {
            let key = GuardKey::from_bytes([9; 32]);
            let s = Secret::new(secret.clone());
            let g = SecretGuard::from_secrets(key, [("owner", "S", &s)]);
            let text = format!("{pre}{secret}{post}");
            proptest::prop_assert!(g.check("caller", [text.as_str()]).is_some(), "missed an embedded secret");
        }
    }
}
