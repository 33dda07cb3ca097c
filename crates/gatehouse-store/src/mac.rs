//! HMAC-SHA256 over the rows that grant trust (pins, server modes).
//!
//! The key is a per-install secret the caller fetches from the keyring and
//! passes in; the store never persists it. Fields are encoded with a domain
//! tag and length prefixes so no two different rows share an encoding.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Per-install MAC key. `Debug` never shows the bytes.
#[derive(Clone)]
pub struct MacKey([u8; 32]);

impl MacKey {
    /// Key length in bytes.
    pub const LEN: usize = 32;

    /// Wraps 32 key bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Wraps a key given as a slice; `None` unless it is exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(bytes).ok().map(Self)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length; 32 bytes cannot fail.
        <HmacSha256 as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }
}

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(<redacted>)")
    }
}

/// One field of a MAC'd row.
pub(crate) enum Field<'a> {
    Str(&'a str),
    OptStr(Option<&'a str>),
    Int(i64),
}

/// Builds the MAC of a row: `domain` names the table and layout version.
pub(crate) fn compute(key: &MacKey, domain: &str, fields: &[Field<'_>]) -> Vec<u8> {
    let mut mac = key.mac();
    feed(&mut mac, domain, fields);
    mac.finalize().into_bytes().to_vec()
}

/// Constant-time check of a stored MAC.
pub(crate) fn verify(key: &MacKey, domain: &str, fields: &[Field<'_>], tag: &[u8]) -> bool {
    let mut mac = key.mac();
    feed(&mut mac, domain, fields);
    mac.verify_slice(tag).is_ok()
}

fn feed(mac: &mut HmacSha256, domain: &str, fields: &[Field<'_>]) {
    put_bytes(mac, domain.as_bytes());
    for field in fields {
        match field {
            Field::Str(s) => {
                mac.update(b"s");
                put_bytes(mac, s.as_bytes());
            }
            Field::OptStr(None) => mac.update(b"n"),
            Field::OptStr(Some(s)) => {
                mac.update(b"s");
                put_bytes(mac, s.as_bytes());
            }
            Field::Int(i) => {
                mac.update(b"i");
                mac.update(&i.to_be_bytes());
            }
        }
    }
}

fn put_bytes(mac: &mut HmacSha256, bytes: &[u8]) {
    mac.update(&(bytes.len() as u64).to_be_bytes());
    mac.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted() {
        let key = MacKey::new([0x41; 32]);
        let shown = format!("{key:?}");
        assert_eq!(
            shown, "MacKey(<redacted>)",
            "key bytes must never be printed"
        );
    }

    #[test]
    fn from_slice_requires_32_bytes() {
        assert!(
            MacKey::from_slice(&[1; 31]).is_none(),
            "short key must be refused"
        );
        assert!(
            MacKey::from_slice(&[1; 33]).is_none(),
            "long key must be refused"
        );
        assert!(MacKey::from_slice(&[1; 32]).is_some());
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let key = MacKey::new([7; 32]);
        let a = compute(&key, "d", &[Field::Str("ab"), Field::Str("c")]);
        let b = compute(&key, "d", &[Field::Str("a"), Field::Str("bc")]);
        assert_ne!(a, b, "moving bytes between fields must change the MAC");
        let none = compute(&key, "d", &[Field::OptStr(None)]);
        let empty = compute(&key, "d", &[Field::OptStr(Some(""))]);
        assert_ne!(none, empty, "absent and empty must differ");
        assert!(verify(&key, "d", &[Field::Str("ab"), Field::Str("c")], &a));
        assert!(
            !verify(
                &MacKey::new([8; 32]),
                "d",
                &[Field::Str("ab"), Field::Str("c")],
                &a
            ),
            "another install's key must not verify"
        );
        assert!(
            !verify(&key, "e", &[Field::Str("ab"), Field::Str("c")], &a),
            "a MAC from one table must not verify for another"
        );
    }
}
