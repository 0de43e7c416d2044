//! The consent cookie.

use proptest::prelude::*;

use mcp_oauth_proxy::bindings::consent_cookie::{self, CookieError, FlowBinding};
use mcp_oauth_proxy::clock::UnixTime;
use mcp_oauth_proxy::cookies;
use mcp_oauth_proxy::crypto;

use crate::generators::*;

fn flow(b: &Binding) -> FlowBinding<'_> {
    FlowBinding {
        purpose: &b.0,
        client_id: &b.1,
        flow_id: &b.2,
    }
}

/// The cookie value in a `Set-Cookie` header.
fn cookie_value(set_cookie: &str) -> String {
    let first = set_cookie.split(';').next().unwrap();
    first.split_once('=').unwrap().1.to_owned()
}

fn time() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..10_000_000_000, Just(u64::MAX - 1_000), any::<u64>()]
}

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn consent_cookie_verifies_only_for_its_own_binding(
        k in any::<[u8; 32]>(),
        (a, b) in binding_pair(),
        now in 0u64..10_000_000_000,
        dt in 0u64..consent_cookie::TTL_SECS,
    ) {
        let k = key(k);
        let set = consent_cookie::issue(&k, &flow(&a), UnixTime(now));
        let prefix = format!("{}=", cookies::FLOW_COOKIE);
        prop_assert!(set.starts_with(&prefix));
        let v = cookie_value(&set);
        prop_assert_eq!(consent_cookie::verify(&k, Some(&v), &flow(&a), UnixTime(now + dt)), Ok(()));
        let want = if a == b { Ok(()) } else { Err(CookieError::Invalid) };
        prop_assert_eq!(consent_cookie::verify(&k, Some(&v), &flow(&b), UnixTime(now + dt)), want);
    }

    #[test]
    fn consent_cookie_verifies_only_before_expiry(
        k in any::<[u8; 32]>(),
        a in binding(),
        issued in time(),
        at in time(),
    ) {
        let k = key(k);
        let v = cookie_value(&consent_cookie::issue(&k, &flow(&a), UnixTime(issued)));
        let exp = issued.saturating_add(consent_cookie::TTL_SECS);
        let want = if at < exp { Ok(()) } else { Err(CookieError::Expired) };
        prop_assert_eq!(consent_cookie::verify(&k, Some(&v), &flow(&a), UnixTime(at)), want);
    }

    #[test]
    fn arbitrary_consent_cookies_never_verify(
        k in any::<[u8; 32]>(),
        a in binding(),
        v in prop_oneof![
            junk(),
            (time(), any::<[u8; 32]>()).prop_map(|(e, t)| format!("{e}.{}", crypto::b64url(&t))),
            (time(), junk()).prop_map(|(e, t)| format!("{e}.{t}")),
        ],
        now in 0u64..10_000_000_000,
    ) {
        prop_assert!(consent_cookie::verify(&key(k), Some(&v), &flow(&a), UnixTime(now)).is_err());
    }

    #[test]
    fn consent_cookie_edit_verifies_only_if_it_spells_the_same_expiry_and_tag(
        k in any::<[u8; 32]>(),
        a in binding(),
        now in 0u64..10_000_000_000,
        e in edit(),
        other_key in any::<[u8; 32]>(),
    ) {
        let k = key(k);
        let v = cookie_value(&consent_cookie::issue(&k, &flow(&a), UnixTime(now)));
        let edited = apply(&v, &e);
        prop_assume!(edited != v);
        if consent_cookie::verify(&k, Some(&edited), &flow(&a), UnixTime(now)).is_ok() {
            // Only a different spelling of the same number (a leading `0` or `+`) survives.
            let (e1, t1) = v.split_once('.').unwrap();
            let (e2, t2) = edited.split_once('.').unwrap();
            prop_assert_eq!(t1, t2);
            prop_assert_eq!(e1.parse::<u64>().unwrap(), e2.parse::<u64>().unwrap());
        }
        let other = key(other_key);
        prop_assume!(other.secret() != k.secret());
        prop_assert_eq!(
            consent_cookie::verify(&other, Some(&v), &flow(&a), UnixTime(now)),
            Err(CookieError::Invalid)
        );
    }
}
