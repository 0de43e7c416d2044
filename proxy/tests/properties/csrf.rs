//! CSRF tokens.

use proptest::prelude::*;
use proptest::sample::select;

use mcp_oauth_proxy::crypto;
use mcp_oauth_proxy::csrf;

use crate::generators::*;

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn csrf_token_verifies_only_for_its_purpose_and_subject(
        k in any::<[u8; 32]>(),
        ((p1, s1, _), (p2, s2, _)) in binding_pair(),
        other_key in any::<[u8; 32]>(),
    ) {
        let k = key(k);
        let t = csrf::token(&k, &p1, &s1);
        prop_assert!(csrf::verify(&k, &p1, &s1, Some(&t)));
        prop_assert_eq!(csrf::verify(&k, &p2, &s2, Some(&t)), (&p1, &s1) == (&p2, &s2));
        prop_assert!(!csrf::verify(&k, &p1, &s1, None));
        let other = key(other_key);
        prop_assume!(other.secret() != k.secret());
        prop_assert!(!csrf::verify(&other, &p1, &s1, Some(&t)));
    }

    #[test]
    fn csrf_token_edits_and_arbitrary_strings_never_verify(
        k in any::<[u8; 32]>(),
        p in binding_part(),
        s in binding_part(),
        e in edit(),
        j in prop_oneof![junk(), any::<[u8; 32]>().prop_map(|b| crypto::b64url(&b))],
    ) {
        let k = key(k);
        let t = csrf::token(&k, &p, &s);
        let edited = apply(&t, &e);
        prop_assume!(edited != t);
        prop_assert!(!csrf::verify(&k, &p, &s, Some(&edited)));
        prop_assert!(!csrf::verify(&k, &p, &s, Some(&j)));
    }

    #[test]
    fn csrf_same_origin_never_admits_a_cross_site_post(
        site in prop::option::of(prop_oneof![select(vec!["same-origin", "same-site", "cross-site", "none", "Same-Origin"]).prop_map(str::to_owned), junk()]),
        origin in prop::option::of(prop_oneof![select(vec!["https://mcp.example.com", "https://evil.example", "null", "https://MCP.example.com", "https://mcp.example.com/"]).prop_map(str::to_owned), junk()]),
    ) {
        let ours = "https://mcp.example.com";
        if csrf::same_origin(site.as_deref(), origin.as_deref(), ours) {
            prop_assert!(site.is_some() || origin.is_some());
            prop_assert!(site.as_deref().is_none_or(|s| s == "same-origin"));
            prop_assert!(origin.as_deref().is_none_or(|o| o == ours));
        }
    }
}
