//! A client's public keys for `private_key_jwt`: inline (`jwks`) or at a URL (`jwks_uri`),
//! the pure part. What a usable key set is; the directory fetches and caches `jwks_uri`s
//! through the same SSRF-safe fetcher as documents.

use std::sync::Arc;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde_json::Value;
use url::Url;

use crate::bindings::client_assertion;

/// The largest key set read from a `jwks_uri` (a few RSA keys fit comfortably).
pub const MAX_JWKS_BYTES: usize = 16 * 1024;
/// Most keys kept from one set.
const MAX_KEYS: usize = 16;
/// Members that only private or symmetric keys have (RFC 7518 §6.2.2, §6.3.2, §6.4.1).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// Where a client's keys are.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// Given with the client (`jwks`), already checked.
    Inline(Arc<JwkSet>),
    /// To be fetched (`jwks_uri`), already checked as a URL.
    Uri(Url),
}

/// Why a key set was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    /// Not a JSON object with a `keys` array.
    #[error("not a key set")]
    NotASet,
    /// A key holds private or symmetric key material.
    #[error("private or symmetric key material")]
    PrivateMaterial,
    /// No key of a type an allowed algorithm uses.
    #[error("no usable key")]
    NoUsableKey,
}

impl JwksError {
    /// A readable reason.
    pub fn description(self) -> &'static str {
        match self {
            JwksError::NotASet => "the client's jwks is not a JSON Web Key Set",
            JwksError::PrivateMaterial => {
                "the client's jwks holds private or symmetric key material"
            }
            JwksError::NoUsableKey => {
                "the client's jwks has no ES256 (P-256), RS256 (2048+ bits) or EdDSA (Ed25519) signing key"
            }
        }
    }
}

/// Checks a key set: any private or symmetric key material refuses the whole set (whoever
/// published it leaked it); public keys no allowed algorithm uses (encryption keys, other
/// curves) are left out; at least one usable key must remain.
pub fn parse_set(v: &Value) -> Result<JwkSet, JwksError> {
    let keys = v
        .get("keys")
        .and_then(Value::as_array)
        .ok_or(JwksError::NotASet)?;
    let mut usable = Vec::new();
    for k in keys {
        let obj = k.as_object().ok_or(JwksError::NotASet)?;
        if obj.get("kty").and_then(Value::as_str) == Some("oct")
            || PRIVATE_MEMBERS.iter().any(|m| obj.contains_key(*m))
        {
            return Err(JwksError::PrivateMaterial);
        }
        if let Ok(jwk) = serde_json::from_value::<Jwk>(k.clone())
            && client_assertion::key_allowed(&jwk)
            && usable.len() < MAX_KEYS
        {
            usable.push(jwk);
        }
    }
    if usable.is_empty() {
        return Err(JwksError::NoUsableKey);
    }
    Ok(JwkSet { keys: usable })
}

/// [`parse_set`] of a fetched body.
pub fn parse_body(body: &[u8]) -> Result<JwkSet, JwksError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| JwksError::NotASet)?;
    parse_set(&v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ec() -> Value {
        let kp = rcgen::KeyPair::generate().unwrap();
        let enc = jsonwebtoken::EncodingKey::from_ec_der(&kp.serialize_der());
        serde_json::to_value(Jwk::from_encoding_key(&enc, jsonwebtoken::Algorithm::ES256).unwrap())
            .unwrap()
    }

    #[test]
    fn private_or_symmetric_material_refuses_the_set() {
        let mut private = ec();
        private["d"] = json!("AAAA");
        assert_eq!(
            parse_set(&json!({"keys": [ec(), private]})).unwrap_err(),
            JwksError::PrivateMaterial
        );
        assert_eq!(
            parse_set(&json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})).unwrap_err(),
            JwksError::PrivateMaterial
        );
    }

    #[test]
    fn unusable_public_keys_are_left_out() {
        let mut enc_key = ec();
        enc_key["use"] = json!("enc");
        let short_rsa = json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"});
        let set = parse_set(&json!({"keys": [enc_key.clone(), short_rsa.clone(), ec()]})).unwrap();
        assert_eq!(set.keys.len(), 1);
        assert_eq!(
            parse_set(&json!({"keys": [enc_key, short_rsa]})).unwrap_err(),
            JwksError::NoUsableKey
        );
        assert_eq!(
            parse_set(&json!({"keys": "x"})).unwrap_err(),
            JwksError::NotASet
        );
        assert_eq!(parse_body(b"<html>").unwrap_err(), JwksError::NotASet);
    }
}
