//! PKCE.

use proptest::prelude::*;
use proptest::sample::select;

use mcp_oauth_proxy::crypto;
use mcp_oauth_proxy::oauth::error::ErrorCode;
use mcp_oauth_proxy::oauth::pkce::CodeChallenge;

use crate::generators::*;

fn is_b64url(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn verifier() -> BoxedStrategy<String> {
    "[A-Za-z0-9._~-]{43,128}".boxed()
}

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn code_challenge_accepts_only_s256_with_43_base64url_chars(
        challenge in prop::option::of(prop_oneof![
            "[A-Za-z0-9_-]{43}",
            "[A-Za-z0-9_+/=.~-]{40,46}",
            verifier().prop_map(|v| crypto::pkce_s256(&v)),
            junk(),
        ]),
        method in prop::option::of(prop_oneof![
            4 => select(vec!["S256", "plain", "s256", "S256 ", "SHA256", ""]).prop_map(str::to_owned),
            1 => junk(),
        ]),
    ) {
        let ok = method.as_deref() == Some("S256")
            && challenge.as_deref().is_some_and(|c| c.len() == 43 && is_b64url(c));
        match CodeChallenge::parse(challenge.as_deref(), method.as_deref()) {
            Ok(_) => prop_assert!(ok),
            Err(e) => {
                prop_assert!(!ok);
                prop_assert_eq!(e.code, ErrorCode::InvalidRequest);
            }
        }
    }

    #[test]
    fn pkce_verify_accepts_exactly_the_matching_verifier(
        v in verifier(),
        other in prop_oneof![verifier(), junk()],
        e in edit(),
    ) {
        let c = CodeChallenge::parse(Some(&crypto::pkce_s256(&v)), Some("S256")).unwrap();
        prop_assert!(c.verify(Some(&v)).is_ok());
        prop_assert_eq!(c.verify(Some(&other)).is_ok(), other == v);
        let edited = apply(&v, &e);
        prop_assert_eq!(c.verify(Some(&edited)).is_ok(), edited == v);
        prop_assert_eq!(c.verify(None).unwrap_err().code, ErrorCode::InvalidGrant);
        // a `plain` downgrade: the challenge itself as the verifier
        prop_assert!(c.verify(Some(&crypto::pkce_s256(&v))).is_err());
    }

    #[test]
    fn pkce_verify_refuses_malformed_verifiers_even_when_the_hash_matches(v in prop_oneof![junk(), "[A-Za-z0-9._~-]{0,140}"]) {
        let c = CodeChallenge::parse(Some(&crypto::pkce_s256(&v)), Some("S256")).unwrap();
        let well_formed = (43..=128).contains(&v.len())
            && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
        prop_assert_eq!(c.verify(Some(&v)).is_ok(), well_formed);
    }
}
