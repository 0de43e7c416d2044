//! Binding: a client assertion (`private_key_jwt`, RFC 7523 §2.2 and §3) ↔ the client whose
//! keys signed it, for this server, now, once. [`verify`] checks, in this order and before
//! any signature check where it can: the size ([`MAX_ASSERTION_BYTES`], before parsing), the
//! header's `alg` against [`ALLOWED_ALGS`] (never `none`, never HMAC: a symmetric key or an
//! `HS*` alg is refused before any verification, so a public key cannot be used as an HMAC
//! secret), the key named by `kid` (its `kty`, curve, `alg` and `use` must fit the `alg`),
//! the signature, then `iss` = `sub` = the client id, `aud` = our issuer or token endpoint,
//! `exp` (required), `nbf` and `iat` with [`SKEW_SECS`] of skew, a lifetime of at most
//! [`MAX_LIFETIME_SECS`], and a `jti`. [`consume`] then records the `jti` with an atomic
//! put-if-absent in the store (every replica shares it), kept until `exp` plus the skew, and
//! only then is the client authenticated.
//!
//! Every failure is the same `invalid_client` to the caller; the reason is only logged.

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;

use crate::clock::UnixTime;
use crate::store::{Store, StoreError, used_assertions};

/// `client_assertion_type` for a JWT client assertion (RFC 7523 §2.2).
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// Largest assertion read; checked before anything is parsed.
pub const MAX_ASSERTION_BYTES: usize = 8 * 1024;
/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const SKEW_SECS: u64 = 60;
/// Longest lifetime an assertion may claim (`exp` − `iat`, or `exp` − now without `iat`).
pub const MAX_LIFETIME_SECS: u64 = 300;
/// Signature algorithms accepted (and advertised in
/// `token_endpoint_auth_signing_alg_values_supported`).
pub const ALLOWED_ALGS: [&str; 3] = ["ES256", "RS256", "EdDSA"];
/// Shortest RSA modulus accepted, bytes (2048 bits).
const MIN_RSA_MODULUS_BYTES: usize = 256;
/// Longest `jti` accepted.
const MAX_JTI_LEN: usize = 256;

/// Why an assertion was refused (logged; the caller only sees `invalid_client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AssertionError {
    /// Larger than [`MAX_ASSERTION_BYTES`].
    #[error("assertion too large")]
    TooLarge,
    /// Not a compact JWS with a readable header and claims.
    #[error("malformed assertion")]
    Malformed,
    /// `alg` is not in [`ALLOWED_ALGS`] (`none` and `HS*` included).
    #[error("algorithm not allowed")]
    Algorithm,
    /// No key with that `kid` (or, without a `kid`, not exactly one fitting key).
    #[error("unknown key")]
    UnknownKey,
    /// The named key does not fit the `alg` (type, curve, `alg`, `use`, size), or is symmetric.
    #[error("key does not fit the algorithm")]
    KeyMismatch,
    /// The signature did not verify.
    #[error("bad signature")]
    Signature,
    /// `iss` or `sub` is not the client id.
    #[error("issuer or subject is not the client")]
    Issuer,
    /// `aud` names neither our issuer nor our token endpoint.
    #[error("wrong audience")]
    Audience,
    /// No `exp`, or it passed (beyond the skew).
    #[error("expired")]
    Expired,
    /// `nbf` or `iat` is in the future (beyond the skew).
    #[error("not yet valid")]
    NotYetValid,
    /// Claims a lifetime longer than [`MAX_LIFETIME_SECS`].
    #[error("lifetime too long")]
    TooLong,
    /// No usable `jti`.
    #[error("no jti")]
    NoJti,
    /// The `jti` was used before.
    #[error("replayed jti")]
    Replayed,
}

/// What the assertion must match.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The client being authenticated.
    pub client_id: &'a str,
    /// Our issuer.
    pub issuer: &'a str,
    /// Our token endpoint URL.
    pub token_endpoint: &'a str,
    /// The injected clock's time.
    pub now: UnixTime,
}

/// An assertion whose signature and claims passed, not yet checked for replay. Only
/// [`verify`] makes one; only [`consume`] takes it.
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::client_assertion::Verified;
/// // Private fields: an assertion cannot be declared verified outside this module.
/// let forged = Verified { client_id: "c".into(), jti: "j".into(), keep_until: 0 };
/// ```
#[derive(Debug)]
pub struct Verified {
    client_id: String,
    jti: String,
    keep_until: UnixTime,
}

/// A client authenticated by an assertion used for the first time. Only [`consume`] makes
/// one.
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::client_assertion::Asserted;
/// // Private field: a client cannot be declared authenticated by an assertion it never sent.
/// let forged = Asserted { client_id: "https://app.example/client.json".into() };
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::client_assertion::Asserted;
/// fn read(a: &Asserted) -> &str {
///     a.client_id()
/// }
/// ```
#[derive(Debug)]
pub struct Asserted {
    client_id: String,
}

impl Asserted {
    /// The authenticated client.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }
}

#[derive(Debug, Deserialize)]
struct Claims {
    iss: Option<String>,
    sub: Option<String>,
    #[serde(default)]
    aud: Value,
    exp: Option<u64>,
    nbf: Option<u64>,
    iat: Option<u64>,
    jti: Option<String>,
}

/// The `sub` an assertion claims, unverified: only to find which client's keys to check it
/// with when the request has no `client_id` (RFC 7521 §4.2 makes it optional).
pub fn claimed_client(assertion: &str) -> Option<String> {
    if assertion.len() > MAX_ASSERTION_BYTES {
        return None;
    }
    // The payload only, base64url JSON; nothing here is trusted.
    let payload = assertion.split('.').nth(1)?;
    let bytes = crate::crypto::b64url_decode(payload)?;
    serde_json::from_slice::<Claims>(&bytes)
        .ok()
        .and_then(|c| c.sub)
}

/// The algorithms behind [`ALLOWED_ALGS`], in the same order: one list, read by the header
/// check, the key-set check and the metadata.
const ALGS: [Algorithm; 3] = [Algorithm::ES256, Algorithm::RS256, Algorithm::EdDSA];

fn allowed(alg: Algorithm) -> bool {
    ALGS.contains(&alg)
}

/// The header checks alone (size, parseable header, allowed `alg`), for the caller to run
/// before it spends a fetch on the client's document or keys: `alg: none`, `HS*` or garbage
/// costs no outbound request. [`verify`] runs them again.
pub fn precheck(assertion: &str) -> Result<(), AssertionError> {
    if assertion.len() > MAX_ASSERTION_BYTES {
        return Err(AssertionError::TooLarge);
    }
    let header = jsonwebtoken::decode_header(assertion).map_err(|_| AssertionError::Malformed)?;
    if !allowed(header.alg) {
        return Err(AssertionError::Algorithm);
    }
    Ok(())
}

/// The RSA modulus's length in bytes, leading zero bytes left out (padding them in must not
/// make a short key look long).
fn rsa_modulus_bytes(n: &str) -> usize {
    crate::crypto::b64url_decode(n.trim_end_matches('='))
        .map(|b| b.iter().skip_while(|&&x| x == 0).count())
        .unwrap_or(0)
}

/// Whether `jwk` may verify `alg`: the right key type (and curve), an `alg` member equal to
/// it if present, `use` = `sig` if present, RSA of at least 2048 bits. Symmetric keys never.
pub fn key_fits(jwk: &Jwk, alg: Algorithm) -> bool {
    let type_fits = match (&jwk.algorithm, alg) {
        (AlgorithmParameters::EllipticCurve(p), Algorithm::ES256) => p.curve == EllipticCurve::P256,
        (AlgorithmParameters::RSA(p), Algorithm::RS256) => {
            rsa_modulus_bytes(&p.n) >= MIN_RSA_MODULUS_BYTES
        }
        (AlgorithmParameters::OctetKeyPair(p), Algorithm::EdDSA) => {
            p.curve == EllipticCurve::Ed25519
        }
        _ => false,
    };
    let alg_fits = match jwk.common.key_algorithm {
        None => true,
        Some(KeyAlgorithm::ES256) => alg == Algorithm::ES256,
        Some(KeyAlgorithm::RS256) => alg == Algorithm::RS256,
        Some(KeyAlgorithm::EdDSA) => alg == Algorithm::EdDSA,
        Some(_) => false,
    };
    let use_fits = matches!(
        jwk.common.public_key_use,
        None | Some(PublicKeyUse::Signature)
    );
    type_fits && alg_fits && use_fits
}

/// Whether a key may appear in a client's key set at all: a public key of a type some allowed
/// algorithm uses. (Private members such as `d` are not read by the JWK type, and a key
/// set holding them is refused where it is parsed.)
pub fn key_allowed(jwk: &Jwk) -> bool {
    ALGS.into_iter().any(|a| key_fits(jwk, a))
}

/// Checks the assertion against the client's keys. `Err(UnknownKey)` is the one failure
/// worth a refetch of the keys (at most once, see `clients`).
pub fn verify(
    assertion: &str,
    keys: &JwkSet,
    expected: &Expected<'_>,
) -> Result<Verified, AssertionError> {
    // The header is read first and on its own: `alg: none` does not even parse as an
    // `Algorithm`, and `HS*` stops here, before any key is looked at.
    precheck(assertion)?;
    let header = jsonwebtoken::decode_header(assertion).map_err(|_| AssertionError::Malformed)?;
    let jwk = match header.kid.as_deref() {
        Some(kid) => keys.find(kid).ok_or(AssertionError::UnknownKey)?,
        None => {
            let mut fitting = keys.keys.iter().filter(|k| key_fits(k, header.alg));
            match (fitting.next(), fitting.next()) {
                (Some(k), None) => k,
                _ => return Err(AssertionError::UnknownKey),
            }
        }
    };
    if !key_fits(jwk, header.alg) {
        return Err(AssertionError::KeyMismatch);
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|_| AssertionError::KeyMismatch)?;
    // Signature only: the claims are checked below against the injected clock.
    let mut v = Validation::new(header.alg);
    v.required_spec_claims.clear();
    v.validate_exp = false;
    v.validate_nbf = false;
    v.validate_aud = false;
    v.leeway = 0;
    let data = jsonwebtoken::decode::<Claims>(assertion, &key, &v).map_err(|e| match e.kind() {
        jsonwebtoken::errors::ErrorKind::InvalidSignature => AssertionError::Signature,
        _ => AssertionError::Malformed,
    })?;
    check_claims(&data.claims, expected)
}

fn check_claims(c: &Claims, e: &Expected<'_>) -> Result<Verified, AssertionError> {
    if c.iss.as_deref() != Some(e.client_id) || c.sub.as_deref() != Some(e.client_id) {
        return Err(AssertionError::Issuer);
    }
    let ours = |a: &Value| {
        a.as_str()
            .is_some_and(|a| a == e.issuer || a == e.token_endpoint)
    };
    let aud_ok = match &c.aud {
        Value::Array(list) => list.iter().any(ours),
        one => ours(one),
    };
    if !aud_ok {
        return Err(AssertionError::Audience);
    }
    let now = e.now.0;
    let exp = c.exp.ok_or(AssertionError::Expired)?;
    if now > exp.saturating_add(SKEW_SECS) {
        return Err(AssertionError::Expired);
    }
    for t in [c.nbf, c.iat].into_iter().flatten() {
        if t > now.saturating_add(SKEW_SECS) {
            return Err(AssertionError::NotYetValid);
        }
    }
    let from = c.iat.unwrap_or(now);
    if exp.saturating_sub(from) > MAX_LIFETIME_SECS {
        return Err(AssertionError::TooLong);
    }
    let jti = c
        .jti
        .as_deref()
        .filter(|j| !j.is_empty() && j.len() <= MAX_JTI_LEN)
        .ok_or(AssertionError::NoJti)?;
    Ok(Verified {
        client_id: e.client_id.to_owned(),
        jti: jti.to_owned(),
        // One second past the last one the assertion is accepted in: a stored record counts
        // as gone once its expiry is reached, and at `exp + SKEW_SECS` itself it is still
        // accepted, so the record must outlive that second.
        keep_until: UnixTime(exp.saturating_add(SKEW_SECS + 1)),
    })
}

/// Why [`consume`] did not authenticate.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// The `jti` was used before.
    #[error("replayed jti")]
    Replayed,
    /// Storage failed (our side).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Records the assertion's `jti` (durable before this returns); the client is authenticated
/// only if no assertion of this client used it before, on any replica.
pub async fn consume(
    store: &dyn Store,
    v: Verified,
    now: UnixTime,
) -> Result<Asserted, ConsumeError> {
    let keep_until = v.keep_until.max(now.plus(SKEW_SECS));
    if used_assertions::first_use(store, &v.client_id, &v.jti, now, keep_until).await? {
        Ok(Asserted {
            client_id: v.client_id,
        })
    } else {
        Err(ConsumeError::Replayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    const CLIENT: &str = "https://app.example/oauth/client.json";
    const ISS: &str = "https://proxy.example";
    const TOKEN: &str = "https://proxy.example/token";
    const NOW: u64 = 1_800_000_000;

    fn ec_key() -> (EncodingKey, Jwk) {
        let kp = rcgen::KeyPair::generate().unwrap();
        let enc = EncodingKey::from_ec_der(&kp.serialize_der());
        let mut jwk = Jwk::from_encoding_key(&enc, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some("k1".to_owned());
        (enc, jwk)
    }

    fn expected(now: u64) -> Expected<'static> {
        Expected {
            client_id: CLIENT,
            issuer: ISS,
            token_endpoint: TOKEN,
            now: UnixTime(now),
        }
    }

    fn claims() -> Value {
        json!({"iss": CLIENT, "sub": CLIENT, "aud": TOKEN, "iat": NOW, "exp": NOW + 60, "jti": "j1"})
    }

    fn sign(enc: &EncodingKey, kid: Option<&str>, c: &Value) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&h, c, enc).unwrap()
    }

    fn set(keys: Vec<Jwk>) -> JwkSet {
        JwkSet { keys }
    }

    fn b64(v: &Value) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    }

    #[test]
    fn a_good_assertion_verifies_and_keeps_its_jti_until_exp_plus_skew() {
        let (enc, jwk) = ec_key();
        let v = verify(
            &sign(&enc, Some("k1"), &claims()),
            &set(vec![jwk]),
            &expected(NOW),
        )
        .unwrap();
        assert_eq!(v.client_id, CLIENT);
        assert_eq!(v.jti, "j1");
        assert_eq!(v.keep_until, UnixTime(NOW + 60 + SKEW_SECS + 1));
    }

    #[test]
    fn the_advertised_algorithms_are_the_accepted_ones() {
        assert_eq!(
            ALGS.map(|a| format!("{a:?}")),
            ALLOWED_ALGS.map(str::to_owned)
        );
        assert!(ALGS.into_iter().all(allowed));
    }

    #[test]
    fn a_short_rsa_modulus_padded_with_zero_bytes_is_refused() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let long = b64.decode(RFC_7515_N).unwrap();
        assert_eq!(long.len(), 256);
        let short: Vec<u8> = std::iter::repeat_n(0u8, 128)
            .chain(long[..128].iter().copied())
            .collect();
        let padded: Jwk =
            serde_json::from_value(json!({"kty": "RSA", "n": b64.encode(&short), "e": "AQAB"}))
                .unwrap();
        assert!(
            !key_fits(&padded, Algorithm::RS256),
            "a 1024-bit key in 256 bytes"
        );
        assert!(!key_allowed(&padded));
    }

    #[test]
    fn audience_may_be_the_issuer_or_a_list_holding_one_of_ours() {
        let (enc, jwk) = ec_key();
        let keys = set(vec![jwk]);
        for aud in [json!(ISS), json!(["https://other.example", TOKEN])] {
            let mut c = claims();
            c["aud"] = aud;
            assert!(verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).is_ok());
        }
        for aud in [
            json!("https://other.example/token"),
            json!([]),
            json!(null),
            json!(7),
        ] {
            let mut c = claims();
            c["aud"] = aud;
            assert_eq!(
                verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).unwrap_err(),
                AssertionError::Audience
            );
        }
    }

    #[test]
    fn time_claims_with_bounded_skew_and_lifetime() {
        let (enc, jwk) = ec_key();
        let keys = set(vec![jwk]);
        let tok = sign(&enc, Some("k1"), &claims());
        // exp = NOW+60: fine until NOW+60+skew.
        assert!(verify(&tok, &keys, &expected(NOW + 60 + SKEW_SECS)).is_ok());
        assert_eq!(
            verify(&tok, &keys, &expected(NOW + 61 + SKEW_SECS)).unwrap_err(),
            AssertionError::Expired
        );
        // iat in the future beyond the skew.
        assert_eq!(
            verify(&tok, &keys, &expected(NOW - SKEW_SECS - 1)).unwrap_err(),
            AssertionError::NotYetValid
        );
        let mut c = claims();
        c["nbf"] = json!(NOW + 120);
        assert_eq!(
            verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).unwrap_err(),
            AssertionError::NotYetValid
        );
        let mut c = claims();
        c["exp"] = json!(NOW + MAX_LIFETIME_SECS + 1);
        assert_eq!(
            verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).unwrap_err(),
            AssertionError::TooLong
        );
        let mut c = claims();
        c.as_object_mut().unwrap().remove("iat");
        c["exp"] = json!(NOW + MAX_LIFETIME_SECS + 1);
        assert_eq!(
            verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).unwrap_err(),
            AssertionError::TooLong
        );
        let mut c = claims();
        c.as_object_mut().unwrap().remove("exp");
        assert_eq!(
            verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).unwrap_err(),
            AssertionError::Expired
        );
    }

    #[test]
    fn issuer_subject_and_jti_are_required() {
        let (enc, jwk) = ec_key();
        let keys = set(vec![jwk]);
        for (k, v) in [
            ("iss", json!("https://evil.example/c.json")),
            ("sub", json!("https://evil.example/c.json")),
        ] {
            let mut c = claims();
            c[k] = v;
            assert_eq!(
                verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).unwrap_err(),
                AssertionError::Issuer
            );
        }
        for jti in [json!(null), json!(""), json!("x".repeat(300))] {
            let mut c = claims();
            c["jti"] = jti;
            assert_eq!(
                verify(&sign(&enc, Some("k1"), &c), &keys, &expected(NOW)).unwrap_err(),
                AssertionError::NoJti
            );
        }
    }

    #[test]
    fn none_and_hmac_are_refused_before_any_key_is_used() {
        let (_, jwk) = ec_key();
        let keys = set(vec![jwk.clone()]);
        let payload = b64(&claims());
        let none = format!("{}.{payload}.", b64(&json!({"alg": "none", "kid": "k1"})));
        assert!(verify(&none, &keys, &expected(NOW)).is_err());
        // HS256 with the public key's JSON as the secret (the classic confusion).
        let secret = serde_json::to_vec(&jwk).unwrap();
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some("k1".to_owned());
        let hs = jsonwebtoken::encode(&h, &claims(), &EncodingKey::from_secret(&secret).unwrap())
            .unwrap();
        assert_eq!(
            verify(&hs, &keys, &expected(NOW)).unwrap_err(),
            AssertionError::Algorithm
        );
        // A symmetric key in the set is never used, whatever the alg.
        let oct: Jwk =
            serde_json::from_value(json!({"kty": "oct", "k": "c2VjcmV0", "kid": "k1"})).unwrap();
        assert!(!key_allowed(&oct));
        let (enc, _) = ec_key();
        assert_eq!(
            verify(
                &sign(&enc, Some("k1"), &claims()),
                &set(vec![oct]),
                &expected(NOW)
            )
            .unwrap_err(),
            AssertionError::KeyMismatch
        );
    }

    #[test]
    fn keys_must_fit_and_signatures_must_verify() {
        let (enc, jwk) = ec_key();
        let (other, _) = ec_key();
        let keys = set(vec![jwk.clone()]);
        assert_eq!(
            verify(&sign(&enc, Some("k2"), &claims()), &keys, &expected(NOW)).unwrap_err(),
            AssertionError::UnknownKey
        );
        assert_eq!(
            verify(&sign(&other, Some("k1"), &claims()), &keys, &expected(NOW)).unwrap_err(),
            AssertionError::Signature
        );
        // Without a kid: the one fitting key.
        assert!(verify(&sign(&enc, None, &claims()), &keys, &expected(NOW)).is_ok());
        let mut enc_use = jwk.clone();
        enc_use.common.public_key_use = Some(PublicKeyUse::Encryption);
        assert_eq!(
            verify(
                &sign(&enc, Some("k1"), &claims()),
                &set(vec![enc_use]),
                &expected(NOW)
            )
            .unwrap_err(),
            AssertionError::KeyMismatch
        );
        let mut rs_alg = jwk;
        rs_alg.common.key_algorithm = Some(KeyAlgorithm::RS256);
        assert_eq!(
            verify(
                &sign(&enc, Some("k1"), &claims()),
                &set(vec![rs_alg]),
                &expected(NOW)
            )
            .unwrap_err(),
            AssertionError::KeyMismatch
        );
    }

    #[test]
    fn eddsa_verifies_and_oversize_is_refused_unparsed() {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        // ring writes PKCS#8 v2 (seed and public key); the crate reads v1: the same seed.
        let v2 = kp.serialize_der();
        let mut v1 = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        v1.extend_from_slice(&v2[16..48]);
        let enc = EncodingKey::from_ed_der(&v1);
        let mut jwk = Jwk::from_encoding_key(&enc, Algorithm::EdDSA).unwrap();
        jwk.common.key_id = Some("ed".to_owned());
        let mut h = Header::new(Algorithm::EdDSA);
        h.kid = Some("ed".to_owned());
        let tok = jsonwebtoken::encode(&h, &claims(), &enc).unwrap();
        assert!(verify(&tok, &set(vec![jwk]), &expected(NOW)).is_ok());
        let big = "a".repeat(MAX_ASSERTION_BYTES + 1);
        assert_eq!(
            verify(&big, &set(vec![]), &expected(NOW)).unwrap_err(),
            AssertionError::TooLarge
        );
        assert_eq!(claimed_client(&big), None);
    }

    /// RFC 7515 Appendix A.2: the published RS256 example (public key of RFC 7517 A.1). Its
    /// claims are not an assertion's (`iss` "joe"), so a passing signature shows as `Issuer`.
    /// RFC 7515 A.2's RSA modulus (2048 bits).
    const RFC_7515_N: &str = "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ";

    #[test]
    fn rs256_verifies_the_rfc_7515_example_signature() {
        let jwk: Jwk =
            serde_json::from_value(json!({"kty": "RSA", "n": RFC_7515_N, "e": "AQAB"})).unwrap();
        assert!(key_fits(&jwk, Algorithm::RS256));
        let keys = set(vec![jwk]);
        let token = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw";
        assert_eq!(
            verify(token, &keys, &expected(NOW)).unwrap_err(),
            AssertionError::Issuer,
            "the signature verified"
        );
        let tampered = token.replace(".cC4h", ".cC4i");
        assert_eq!(
            verify(&tampered, &keys, &expected(NOW)).unwrap_err(),
            AssertionError::Signature
        );
    }

    #[tokio::test]
    async fn a_jti_authenticates_once() {
        let clock = crate::clock::ManualClock::new(UnixTime(NOW));
        let store = crate::store::SledStore::temporary(clock).unwrap();
        let (enc, jwk) = ec_key();
        let keys = set(vec![jwk]);
        let tok = sign(&enc, Some("k1"), &claims());
        let v = verify(&tok, &keys, &expected(NOW)).unwrap();
        assert_eq!(
            consume(&store, v, UnixTime(NOW)).await.unwrap().client_id(),
            CLIENT
        );
        let again = verify(&tok, &keys, &expected(NOW)).unwrap();
        assert!(matches!(
            consume(&store, again, UnixTime(NOW)).await.unwrap_err(),
            ConsumeError::Replayed
        ));
    }

    #[tokio::test]
    async fn a_used_assertion_is_refused_in_the_last_second_it_is_still_accepted() {
        let clock = crate::clock::ManualClock::new(UnixTime(NOW));
        let store = crate::store::SledStore::temporary(clock.clone()).unwrap();
        let (enc, jwk) = ec_key();
        let keys = set(vec![jwk]);
        let tok = sign(&enc, Some("k1"), &claims());
        let v = verify(&tok, &keys, &expected(NOW)).unwrap();
        consume(&store, v, UnixTime(NOW)).await.unwrap();
        // exp = NOW+60: the last accepted second is NOW+60+skew; its jti must still be known.
        let last = NOW + 60 + SKEW_SECS;
        clock.advance(last - NOW);
        let again = verify(&tok, &keys, &expected(last)).unwrap();
        assert!(matches!(
            consume(&store, again, UnixTime(last)).await.unwrap_err(),
            ConsumeError::Replayed
        ));
    }
}
