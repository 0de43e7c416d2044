//! Scopes.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::sample::select;

use mcp_oauth_proxy::bindings::consent_scope;
use mcp_oauth_proxy::oauth::error::ErrorCode;
use mcp_oauth_proxy::oauth::scope::ScopeSet;

use crate::generators::*;

const SCOPES: &[&str] = &[
    "repo",
    "read:user",
    "user:email",
    "gist",
    "a",
    "b!",
    "x~",
    "admin:org",
];

fn scope_set() -> BoxedStrategy<BTreeSet<&'static str>> {
    prop::collection::btree_set(select(SCOPES), 0..6).boxed()
}

fn to_scope_set(s: &BTreeSet<&str>) -> ScopeSet {
    ScopeSet::from_list(s.iter().copied())
}

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn scope_covers_is_set_inclusion_reflexive_and_transitive(a in scope_set(), b in scope_set(), c in scope_set()) {
        // Also the chain a ⊆ a∪b ⊆ a∪b∪c, so transitivity is exercised on every case.
        let ab: BTreeSet<&str> = a.union(&b).copied().collect();
        let abc: BTreeSet<&str> = ab.union(&c).copied().collect();
        for (x, y) in [(&a, &b), (&b, &c), (&a, &c), (&ab, &a), (&abc, &ab), (&abc, &a)] {
            prop_assert_eq!(to_scope_set(x).covers(&to_scope_set(y)), y.is_subset(x));
        }
        for s in [&a, &b, &c] {
            prop_assert!(to_scope_set(s).covers(&to_scope_set(s)));
        }
        let (sa, sb, sc) = (to_scope_set(&a), to_scope_set(&b), to_scope_set(&c));
        if sc.covers(&sb) && sb.covers(&sa) {
            prop_assert!(sc.covers(&sa));
        }
        prop_assert!(to_scope_set(&abc).covers(&to_scope_set(&ab)) && to_scope_set(&ab).covers(&sa));
        prop_assert!(to_scope_set(&abc).covers(&sa));
    }

    #[test]
    fn scope_parse_accepts_only_scope_tokens_and_round_trips(s in prop_oneof![junk(), "[ a-z:!\"\\\\~]{0,20}"]) {
        if let Ok(set) = ScopeSet::parse(&s) {
            for t in set.iter() {
                prop_assert!(!t.is_empty());
                prop_assert!(t.bytes().all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b)), "{:?}", t);
            }
            prop_assert_eq!(ScopeSet::parse(&set.to_wire()).unwrap(), set);
        } else {
            prop_assert_eq!(ScopeSet::parse(&s).unwrap_err().code, ErrorCode::InvalidScope);
        }
    }

    #[test]
    fn requested_scopes_consent_to_exactly_the_offer_and_named_permissions_or_are_refused(offered in scope_set(), asked in prop::option::of(prop_oneof![
        scope_set().prop_map(|s| s.into_iter().collect::<Vec<_>>().join(" ")),
        "[ a-z:!\"]{0,12}",
    ])) {
        let offered = to_scope_set(&offered);
        // One tool permission (a `[[policy]]` step-up scope that is not a GitHub scope).
        let permissions = ScopeSet::from_list(["tools:write"]);
        match consent_scope::for_authorization(asked.as_deref(), &offered, &permissions) {
            // Whatever subset was named, the consent is for the whole configured set, plus
            // exactly the tool permissions named.
            Ok(got) => {
                let named = asked.as_deref().map(|a| ScopeSet::parse(a).unwrap());
                let wants = named.is_some_and(|n| n.contains("tools:write"));
                let mut want = offered.clone();
                if wants {
                    want.insert("tools:write");
                }
                prop_assert_eq!(got, want);
            }
            Err(e) => {
                prop_assert_eq!(e.code, ErrorCode::InvalidScope);
                let named = asked.as_deref().and_then(|a| ScopeSet::parse(a).ok());
                prop_assert!(named.is_none_or(|n| !offered.union(&permissions).covers(&n)));
            }
        }
    }
}
