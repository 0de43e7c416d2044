//! PKCE (RFC 7636) with S256 only: `plain` is refused, a challenge is required from every
//! client, and a verifier is accepted only when a challenge was bound to the code.

use super::error::{ErrorCode, OAuthError};
use crate::crypto;

/// A validated S256 code challenge (43 base64url characters).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct CodeChallenge(String);

impl CodeChallenge {
    /// Validates `code_challenge` and `code_challenge_method` from /authorize.
    pub fn parse(
        challenge: Option<&str>,
        method: Option<&str>,
    ) -> Result<CodeChallenge, OAuthError> {
        let Some(challenge) = challenge else {
            return Err(OAuthError::new(
                ErrorCode::InvalidRequest,
                "code_challenge is required (PKCE S256)",
            ));
        };
        match method {
            Some("S256") => {}
            // RFC 7636 defaults a missing method to `plain`, which this server refuses.
            None | Some("plain") => {
                return Err(OAuthError::new(
                    ErrorCode::InvalidRequest,
                    "code_challenge_method must be S256",
                ));
            }
            Some(_) => {
                return Err(OAuthError::new(
                    ErrorCode::InvalidRequest,
                    "unsupported code_challenge_method",
                ));
            }
        }
        let ok = challenge.len() == 43
            && challenge
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(OAuthError::new(
                ErrorCode::InvalidRequest,
                "code_challenge must be 43 base64url characters",
            ));
        }
        Ok(CodeChallenge(challenge.to_owned()))
    }

    /// Checks a `code_verifier` (RFC 7636 §4.1 syntax) against this challenge.
    pub fn verify(&self, verifier: Option<&str>) -> Result<(), OAuthError> {
        let Some(v) = verifier else {
            return Err(OAuthError::new(
                ErrorCode::InvalidGrant,
                "code_verifier is required",
            ));
        };
        let syntax = (43..=128).contains(&v.len())
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
        if !syntax || !crypto::ct_eq(crypto::pkce_s256(v).as_bytes(), self.0.as_bytes()) {
            return Err(OAuthError::new(
                ErrorCode::InvalidGrant,
                "code_verifier does not match the code_challenge",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    const C: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    #[test]
    fn plain_and_missing_method_are_refused() {
        assert_eq!(
            CodeChallenge::parse(Some(C), Some("plain"))
                .unwrap_err()
                .code,
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            CodeChallenge::parse(Some(C), None).unwrap_err().code,
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            CodeChallenge::parse(None, Some("S256")).unwrap_err().code,
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn malformed_s256_challenges_are_refused() {
        for bad in [
            &C[..42],
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw+cM=",
            &"A".repeat(2000),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw/c",
            "",
        ] {
            assert_eq!(
                CodeChallenge::parse(Some(bad), Some("S256"))
                    .unwrap_err()
                    .code,
                ErrorCode::InvalidRequest,
                "{bad}"
            );
        }
    }

    #[test]
    fn s256_round_trip_and_wrong_verifier() {
        let c = CodeChallenge::parse(Some(C), Some("S256")).unwrap();
        c.verify(Some(V)).unwrap();
        let wrong = V.replace('d', "e");
        assert_eq!(
            c.verify(Some(&wrong)).unwrap_err().code,
            ErrorCode::InvalidGrant
        );
        assert_eq!(c.verify(None).unwrap_err().code, ErrorCode::InvalidGrant);
        // A verifier equal to the challenge (a `plain` downgrade attempt) fails.
        assert!(c.verify(Some(C)).is_err());
    }
}
