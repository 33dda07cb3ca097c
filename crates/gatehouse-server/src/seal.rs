//! Answers to input requests travel through the database sealed to a key
//! the waiting `gatehouse wrap` published with the request
//! (`consent_requests.requester_key`, an X25519 public key): an anonymous
//! `crypto_box` sealed box (X25519 + XSalsa20-Poly1305). Only ciphertext
//! rests in the database, and only the waiting process can open it.

use crypto_box::aead::OsRng;
use crypto_box::{PublicKey, SecretKey};

/// Sealing failures (no detail: inputs may be sensitive).
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The published key is not a 32-byte X25519 public key.
    #[error("requester key is not a 32-byte public key")]
    BadKey,
    /// Encryption or decryption failed.
    #[error("sealed box operation failed")]
    Crypto,
}

/// Seals `plaintext` to the requester's public key.
pub fn seal(requester_key: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
    let bytes: [u8; 32] = requester_key.try_into().map_err(|_| SealError::BadKey)?;
    PublicKey::from(bytes)
        .seal(&mut OsRng, plaintext)
        .map_err(|_| SealError::Crypto)
}

/// Opens a sealed answer with the requester's secret key (what wrap does).
pub fn open(secret_key: &[u8; 32], sealed: &[u8]) -> Result<Vec<u8>, SealError> {
    SecretKey::from(*secret_key)
        .unseal(sealed)
        .map_err(|_| SealError::Crypto)
}

/// A fresh key pair `(secret, public)` — what a waiting wrap publishes.
pub fn keypair() -> ([u8; 32], [u8; 32]) {
    let secret = SecretKey::generate(&mut OsRng);
    let public = *secret.public_key().as_bytes();
    (secret.to_bytes(), public)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_only_the_owner_opens() {
        let (sk, pk) = keypair();
        let sealed = seal(&pk, b"{\"action\":\"accept\"}").unwrap();
        assert!(
            !sealed.windows(6).any(|w| w == b"accept"),
            "ciphertext must not contain the plain text"
        );
        assert_eq!(open(&sk, &sealed).unwrap(), b"{\"action\":\"accept\"}");
        let (other, _) = keypair();
        assert!(
            open(&other, &sealed).is_err(),
            "another key must not open it"
        );
        assert!(matches!(seal(&pk[..31], b"x"), Err(SealError::BadKey)));
    }
}
