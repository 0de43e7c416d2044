//! The only module that draws randomness or compares secrets. Tokens are 32 random bytes,
//! stored as SHA-256 hashes; MACs are HMAC-SHA256 under per-purpose keys; GitHub tokens are
//! sealed with AES-256-GCM with the record id as associated data.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Errors from the crypto layer. Deliberately vague: callers map them to "invalid".
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CryptoError {
    /// The OS random source failed.
    #[error("random source unavailable")]
    Random,
    /// A sealed value did not open (wrong key, wrong associated data, or tampered).
    #[error("sealed value did not open")]
    Open,
    /// A key had the wrong length or encoding.
    #[error("bad key material")]
    Key,
}

/// `N` bytes from the operating system's CSPRNG.
#[allow(clippy::disallowed_methods)] // the one sanctioned randomness source
pub fn random_bytes<const N: usize>() -> Result<[u8; N], CryptoError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|_| CryptoError::Random)?;
    Ok(buf)
}

/// 32 random bytes as unpadded base64url (43 characters).
pub fn random_token() -> Result<String, CryptoError> {
    Ok(b64url(&random_bytes::<32>()?))
}

/// Unpadded base64url.
pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes unpadded base64url.
pub fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s).ok()
}

/// Standard padded base64, for key files.
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    STANDARD.decode(s.trim()).ok()
}

/// Standard padded base64.
pub fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// SHA-256 of a secret, hex, used as its storage key (a leaked database holds no usable secret).
pub fn hash_secret(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    hex(&digest)
}

/// SHA-256 raw digest.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

/// Plain HMAC-SHA256 of `data` under a key of any length, as lowercase hex: the webhook
/// signature, which receivers recompute with any standard HMAC library.
pub fn hmac_sha256_hex(key: &[u8], data: &[u8]) -> String {
    // HMAC accepts keys of every length, so this cannot fail; an empty tag never verifies.
    let Ok(mut m) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        return String::new();
    };
    m.update(data);
    hex(&m.finalize().into_bytes())
}

/// A random value in `0..=max` (retry jitter; not for secrets).
pub fn random_below(max: u64) -> u64 {
    match random_bytes::<8>() {
        Ok(b) => u64::from_le_bytes(b) % max.saturating_add(1).max(1),
        Err(_) => 0,
    }
}

/// Constant-time equality for secrets, MACs and hashes.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// A 32-byte key used for exactly one purpose. Never printed.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl Key {
    /// From raw bytes (must be 32).
    pub fn from_slice(bytes: &[u8]) -> Result<Key, CryptoError> {
        let arr: [u8; 32] = bytes.try_into().map_err(|_| CryptoError::Key)?;
        Ok(Key(arr))
    }
    /// A fresh random key.
    pub fn generate() -> Result<Key, CryptoError> {
        Ok(Key(random_bytes::<32>()?))
    }
    /// The key material, for writing a generated key file.
    pub fn secret(&self) -> &[u8; 32] {
        &self.0
    }

    /// HMAC-SHA256 over `parts`, each length-prefixed so that ("ab","c") and ("a","bc") differ.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        // An HMAC key of any length is valid, so this cannot fail; fall back to an all-zero
        // tag that can never verify against a real one rather than panicking.
        let Ok(mut m) = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0) else {
            return [0u8; 32];
        };
        for p in parts {
            m.update(&(p.len() as u64).to_be_bytes());
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    /// Checks a MAC in constant time.
    pub fn verify_mac(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        ct_eq(&self.mac(parts), tag)
    }

    /// AES-256-GCM seal with a random nonce; output is nonce || ciphertext.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let cipher = Aes256Gcm::new_from_slice(&self.0).map_err(|_| CryptoError::Key)?;
        let nonce_bytes = random_bytes::<12>()?;
        let nonce = Nonce::from(nonce_bytes);
        let ct = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .map_err(|_| CryptoError::Open)?;
        let mut out = Vec::with_capacity(12 + ct.len());
        out.extend_from_slice(&nonce_bytes);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Opens what `seal` produced, with the same associated data.
    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let cipher = Aes256Gcm::new_from_slice(&self.0).map_err(|_| CryptoError::Key)?;
        let (nonce, ct) = sealed.split_at_checked(12).ok_or(CryptoError::Open)?;
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| CryptoError::Open)?;
        cipher
            .decrypt(&Nonce::from(nonce), Payload { msg: ct, aad })
            .map_err(|_| CryptoError::Open)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key([redacted])")
    }
}

/// S256 PKCE challenge of a verifier: BASE64URL(SHA256(ascii(verifier))).
pub fn pkce_s256(verifier: &str) -> String {
    b64url(&sha256(verifier.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_43_chars_and_distinct() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
    }

    #[test]
    fn mac_is_length_prefixed() {
        let k = Key::generate().unwrap();
        assert_ne!(k.mac(&[b"ab", b"c"]), k.mac(&[b"a", b"bc"]));
        let tag = k.mac(&[b"x"]);
        assert!(k.verify_mac(&[b"x"], &tag));
        assert!(!k.verify_mac(&[b"y"], &tag));
    }

    #[test]
    fn sealed_value_does_not_open_under_other_associated_data() {
        let k = Key::generate().unwrap();
        let sealed = k.seal(b"gho_secret", b"grant:1").unwrap();
        assert_eq!(k.open(&sealed, b"grant:1").unwrap(), b"gho_secret");
        assert_eq!(k.open(&sealed, b"grant:2"), Err(CryptoError::Open));
        let other = Key::generate().unwrap();
        assert_eq!(other.open(&sealed, b"grant:1"), Err(CryptoError::Open));
    }

    #[test]
    fn pkce_matches_rfc7636_appendix_b() {
        assert_eq!(
            pkce_s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn key_debug_is_redacted() {
        let k = Key::generate().unwrap();
        assert_eq!(format!("{k:?}"), "Key([redacted])");
    }
}
