//! The gateway's `requestState`.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

use mcp_oauth_proxy::clock::UnixTime;
use mcp_oauth_proxy::crypto::{self, Key};
use mcp_oauth_proxy::gateway::request_state::{self, StateRejection};
use mcp_oauth_proxy::ids::{ClientId, UserId};

use crate::generators::*;

type StateBinding = (UserId, ClientId, String, String);

fn state_binding() -> BoxedStrategy<StateBinding> {
    (
        prop_oneof![
            (0u64..4).prop_map(UserId::github),
            "[a-z:\"\\\\]{0,4}".prop_map(UserId::new),
        ],
        "[ab\"\\\\.]{0,3}".prop_map(ClientId::new),
        prop_oneof![
            select(vec!["tools/call", "tools/list", ""]).prop_map(str::to_owned),
            "\\PC{0,6}",
        ],
        prop_oneof![
            prop::option::of(json_value()).prop_map(|v| request_state::params_digest(v.as_ref())),
            "[a-zA-Z0-9_-]{0,3}",
        ],
    )
        .boxed()
}

fn state_binding_pair() -> BoxedStrategy<(StateBinding, StateBinding)> {
    (state_binding(), state_binding(), 0u8..6)
        .prop_map(|(a, b, mode)| {
            let b = match mode {
                0 => b,
                1 => a.clone(),
                2 => (b.0, a.1.clone(), a.2.clone(), a.3.clone()),
                3 => (a.0.clone(), b.1, a.2.clone(), a.3.clone()),
                4 => (a.0.clone(), a.1.clone(), b.2, a.3.clone()),
                _ => (a.0.clone(), a.1.clone(), a.2.clone(), b.3),
            };
            (a, b)
        })
        .boxed()
}

fn mint(k: &Key, b: &StateBinding, now: u64) -> String {
    request_state::mint(k, &b.0, &b.1, &b.2, &b.3, UnixTime(now))
}

fn check(k: &Key, state: &str, b: &StateBinding, now: u64) -> Result<(), StateRejection> {
    request_state::check(k, state, &b.0, &b.1, &b.2, &b.3, UnixTime(now))
}

fn text(v: &Value) -> String {
    v.to_string()
}

/// Removes what `params_digest` ignores.
fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("requestState");
        o.remove("_meta");
    }
    v
}

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn request_state_round_trips_before_expiry(
        k in any::<[u8; 32]>(),
        b in state_binding(),
        now in 0u64..10_000_000_000,
        dt in 0u64..request_state::TTL_SECS,
    ) {
        let k = key(k);
        let s = mint(&k, &b, now);
        prop_assert!(s.starts_with(request_state::PREFIX));
        prop_assert_eq!(check(&k, &s, &b, now + dt), Ok(()));
        prop_assert_eq!(check(&k, &s, &b, now + request_state::TTL_SECS + dt), Err(StateRejection::Expired));
    }

    #[test]
    fn request_state_single_char_change_never_passes(
        k in any::<[u8; 32]>(),
        b in state_binding(),
        now in 0u64..10_000_000_000,
        e in edit(),
    ) {
        let k = key(k);
        let s = mint(&k, &b, now);
        let edited = apply(&s, &e);
        prop_assume!(edited != s);
        prop_assert_eq!(check(&k, &edited, &b, now), Err(StateRejection::Invalid));
    }

    #[test]
    fn arbitrary_request_states_never_pass(
        k in any::<[u8; 32]>(),
        b in state_binding(),
        now in 0u64..10_000_000_000,
        s in prop_oneof![
            junk(),
            junk().prop_map(|j| format!("{}{j}", request_state::PREFIX)),
            (json_value(), any::<[u8; 32]>()).prop_map(|(v, t)| format!(
                "{}{}.{}",
                request_state::PREFIX,
                crypto::b64url(v.to_string().as_bytes()),
                crypto::b64url(&t)
            )),
        ],
    ) {
        prop_assert!(check(&key(k), &s, &b, now).is_err());
    }

    #[test]
    fn request_state_passes_only_for_its_user_client_method_and_call(
        k in any::<[u8; 32]>(),
        (a, b) in state_binding_pair(),
        now in 0u64..10_000_000_000,
        dt in 0u64..request_state::TTL_SECS,
        other_key in any::<[u8; 32]>(),
    ) {
        let k = key(k);
        let s = mint(&k, &a, now);
        let want = if a == b { Ok(()) } else { Err(StateRejection::Foreign) };
        prop_assert_eq!(check(&k, &s, &b, now + dt), want);
        let other = key(other_key);
        prop_assume!(other.secret() != k.secret());
        prop_assert_eq!(check(&other, &s, &a, now), Err(StateRejection::Invalid));
    }

    #[test]
    fn params_digest_ignores_request_state_and_meta(
        params in json_object(),
        state in prop::option::of(json_value()),
        meta in prop::option::of(json_value()),
    ) {
        let base = strip(&Value::Object(params));
        let mut with = base.clone();
        if let Some(s) = state {
            with["requestState"] = s;
        }
        if let Some(m) = meta {
            with["_meta"] = m;
        }
        prop_assert_eq!(
            request_state::params_digest(Some(&base)),
            request_state::params_digest(Some(&with))
        );
    }

    #[test]
    fn params_digest_changes_with_anything_else(
        a in json_value(),
        b in json_value(),
        key_ in json_key(),
        mode in 0u8..3,
    ) {
        // `b` unrelated, or `a` with one top-level member added or replaced.
        let b = match (mode, a.clone()) {
            (1, Value::Object(mut o)) => {
                o.insert(key_, b);
                Value::Object(o)
            }
            (2, Value::Array(mut v)) => {
                v.push(b);
                Value::Array(v)
            }
            _ => b,
        };
        let (sa, sb) = (strip(&a), strip(&b));
        let (da, db) = (request_state::params_digest(Some(&a)), request_state::params_digest(Some(&b)));
        if sa != sb {
            prop_assert_ne!(da, db);
        } else if text(&sa) == text(&sb) {
            prop_assert_eq!(da, db);
        }
    }
}
