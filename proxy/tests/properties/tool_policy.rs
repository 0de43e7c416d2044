//! The tool-call policy's matcher, argument digest, duplicate-key check and tool-name rule.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Value, json};

use mcp_oauth_proxy::gateway::envelope::{Ambiguous, ArgumentKeys, NotRead};
use mcp_oauth_proxy::gateway::jsonrpc::read_request;
use mcp_oauth_proxy::ids::{ClientId, UserId};
use mcp_oauth_proxy::tool_policy::{
    Action, Caller, Policy, RawDefaults, RawRule, ToolCall, arguments_digest, valid_tool_name,
};

use crate::generators::*;

fn policy(rules: Value, defaults: Value) -> Policy {
    let rules: Vec<RawRule> = serde_json::from_value(rules).unwrap();
    let defaults: RawDefaults = serde_json::from_value(defaults).unwrap();
    let mut errs = Vec::new();
    let p = Policy::from_raw(&rules, &defaults, &mut errs);
    assert!(errs.is_empty(), "{errs:?}");
    p
}

/// One rule of each kind of condition, so arbitrary input walks every matcher.
fn every_condition() -> Policy {
    policy(
        json!([
            {"id": "args", "tools": ["*"], "arguments": {"owner": "a*", "/x/0/y": "[0-9]?", "/é~1~0": "{t,f}*"}, "decision": "deny"},
            {"id": "people", "tools": ["get_?", "*é*"], "people": ["octocat", "id:1", "org:acme", "team:acme/x"], "decision": "ask"},
            {"id": "clients", "tools": ["[a-m]*"], "clients": ["mcpc_1"], "decision": "step_up", "scopes": ["repo"]},
            {"id": "all", "tools": ["**"], "decision": "allow"},
        ]),
        json!({"decision": "deny"}),
    )
}

/// Tool names: valid ones, near misses and junk.
fn tool_name() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[A-Za-z0-9_.-]{1,20}",
        2 => junk(),
        1 => "[a-z_]{0,8}[^A-Za-z0-9_.-][a-z_]{0,8}",
    ]
    .boxed()
}

/// Text of a rule's literal pieces: what a deny rule names and a caller re-cases.
fn word() -> BoxedStrategy<String> {
    "[a-zA-Z0-9_.-]{1,16}".boxed()
}

fn who<'a>(user: &'a UserId, memberships: &'a [String], client: &'a ClientId) -> Caller<'a> {
    Caller {
        user_id: user,
        login: Some("OctoCat"),
        memberships,
        client_id: client,
        answered: None,
    }
}

/// `v` as JSON text, its objects' keys in an order `seed` picks (never sorted on purpose) and
/// with whitespace here and there.
fn render_shuffled(v: &Value, seed: &mut u64, out: &mut String) {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let space = if *seed >> 63 == 1 { " " } else { "" };
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            let n = entries.len().max(1);
            entries.rotate_left((*seed >> 33) as usize % n);
            if (*seed >> 40) & 1 == 1 {
                entries.reverse();
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(space);
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                out.push_str(space);
                render_shuffled(v, seed, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(space);
                render_shuffled(v, seed, out);
            }
            out.push(']');
        }
        leaf => out.push_str(&leaf.to_string()),
    }
}

/// `v` as JSON text with one key of its `target`-th object (in document order) written twice,
/// the second time `\u`-escaped when `escape`; `None` when `v` has fewer objects.
fn render_with_duplicate(
    v: &Value,
    target: usize,
    seen: &mut usize,
    escape: bool,
    out: &mut String,
) -> bool {
    match v {
        Value::Object(map) => {
            let here = *seen == target;
            *seen += 1;
            let mut done = here;
            out.push('{');
            let mut first = true;
            for (k, v) in map {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                done |= render_with_duplicate(v, target, seen, escape, out);
            }
            if here {
                let key = map.keys().next().cloned().unwrap_or_else(|| "k".to_owned());
                let written = if escape {
                    let mut s = String::from("\"");
                    for u in key.encode_utf16() {
                        s.push_str(&format!("\\u{u:04x}"));
                    }
                    s.push('"');
                    s
                } else {
                    serde_json::to_string(&key).unwrap()
                };
                if map.is_empty() {
                    out.push_str(&format!("{written}:1,"));
                } else {
                    out.push(',');
                }
                out.push_str(&format!("{written}:null"));
            }
            out.push('}');
            done
        }
        Value::Array(items) => {
            out.push('[');
            let mut done = false;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                done |= render_with_duplicate(v, target, seen, escape, out);
            }
            out.push(']');
            done
        }
        leaf => {
            out.push_str(&leaf.to_string());
            false
        }
    }
}

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn policy_never_panics_on_arbitrary_tool_names_and_arguments(
        name in tool_name(),
        args in prop_oneof![3 => json_value(), 2 => json_object().prop_map(Value::Object), 1 => Just(Value::Null)],
        absent in any::<bool>(),
        member in any::<bool>(),
    ) {
        let p = every_condition();
        let user = UserId::github(1);
        let client = ClientId::new("mcpc_1");
        let memberships = if member { vec!["acme".to_owned(), "acme/x".to_owned()] } else { vec![] };
        let caller = who(&user, &memberships, &client);
        let call = ToolCall { name: &name, arguments: (!absent).then_some(&args) };
        let d = p.decide(&caller, &call);
        prop_assert!(d.matched.iter().all(|m| !m.contains(':') || m.starts_with("tool:") || m.starts_with("argument:/") || m.starts_with("people:")));
        let _ = p.hidden(&caller, &name);
        let digest = arguments_digest(call.arguments);
        prop_assert_eq!(digest.len(), 43);
    }

    #[test]
    fn from_raw_never_panics_on_arbitrary_globs_people_and_pointers(
        tools in prop::collection::vec(prop_oneof![junk(), "[*?\\[\\]{}!,\\\\a-z]{0,12}"], 0..4),
        key in prop_oneof![junk(), "/[~0-9a-z/]{0,8}"],
        glob in prop_oneof![junk(), "[*?\\[\\]{}!,\\\\a-z]{0,12}"],
        person in prop_oneof![junk(), select(vec!["id:", "org:", "team:", "team:/", "id:0", "id:-1"]).prop_map(str::to_owned)],
        ttl in any::<u64>(),
        name in tool_name(),
        args in json_value(),
    ) {
        let raw = json!([{ "id": "r", "tools": tools, "arguments": {key: glob}, "people": [person], "decision": "ask", "ask_ttl_secs": ttl }]);
        let rules: Vec<RawRule> = serde_json::from_value(raw).unwrap();
        let mut errs = Vec::new();
        let p = Policy::from_raw(&rules, &RawDefaults::default(), &mut errs);
        let _ = p.warnings();
        let _ = p.questions();
        let user = UserId::github(1);
        let client = ClientId::new("c");
        let _ = p.decide(&who(&user, &[], &client), &ToolCall { name: &name, arguments: Some(&args) });
    }

    #[test]
    fn a_deny_rule_is_never_bypassed_by_ascii_case(
        tool in word(),
        owner in word(),
        prefix_glob in any::<bool>(),
        tool_mask in prop::collection::vec(any::<bool>(), 16),
        owner_mask in prop::collection::vec(any::<bool>(), 16),
        glob_mask in prop::collection::vec(any::<bool>(), 16),
        numeric in any::<bool>(),
    ) {
        // The rule is written in one case, the call in another.
        let written_tool = flip_case(&tool, &glob_mask);
        let tool_glob = if prefix_glob {
            format!("{}*", &written_tool[..written_tool.len().div_ceil(2)])
        } else {
            written_tool.clone()
        };
        let p = policy(
            json!([
                {"id": "no", "tools": [tool_glob], "arguments": {"owner": flip_case(&owner, &glob_mask)}, "decision": "deny"},
                {"id": "rest", "tools": ["*"], "decision": "allow"},
            ]),
            json!({}),
        );
        let user = UserId::github(1);
        let client = ClientId::new("c");
        let called = flip_case(&tool, &tool_mask);
        let args = json!({"owner": flip_case(&owner, &owner_mask), "other": 1});
        let d = p.decide(&who(&user, &[], &client), &ToolCall { name: &called, arguments: Some(&args) });
        prop_assert_eq!(d.action, Action::Deny);
        prop_assert_eq!(d.rule_id.as_deref(), Some("no"));
        // A number matches as its JSON text and, when integral, as its integer text.
        if numeric {
            let p = policy(json!([{"id": "n", "tools": ["*"], "arguments": {"/n": "100000"}, "decision": "deny"}]), json!({}));
            for text in [r#"{"n": 1e5}"#, r#"{"n": 100000}"#, r#"{"n": 100000.0}"#, r#"{"n": 1E5}"#, r#"{"n": "100000"}"#] {
                let args: Value = serde_json::from_str(text).unwrap();
                let d = p.decide(&who(&user, &[], &client), &ToolCall { name: &called, arguments: Some(&args) });
                prop_assert_eq!(d.action, Action::Deny, "{}", text);
            }
        }
    }

    #[test]
    fn a_name_with_any_other_character_is_never_a_valid_tool_name(
        good in "[A-Za-z0-9_.-]{0,127}",
        bad in any::<char>().prop_filter("outside the tool-name set", |c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))),
        at in any::<Index>(),
        arbitrary in junk(),
    ) {
        prop_assert_eq!(valid_tool_name(&good), !good.is_empty());
        let i = at.index(good.len() + 1);
        let with_bad = format!("{}{}{}", &good[..i], bad, &good[i..]);
        prop_assert!(!valid_tool_name(&with_bad), "{:?}", with_bad);
        let expected = (1..=128).contains(&arbitrary.len())
            && arbitrary.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        prop_assert_eq!(valid_tool_name(&arbitrary), expected);
    }

    #[test]
    fn a_json_text_with_a_duplicated_key_anywhere_is_always_refused_by_the_gateway(
        v in json_value(),
        target in any::<Index>(),
        escape in any::<bool>(),
        wrap in any::<bool>(),
    ) {
        let v = if wrap || !v.is_object() {
            json!({"jsonrpc": "2.0", "params": {"arguments": v}})
        } else {
            v
        };
        // What serde_json writes repeats no key; it may still spell one the gateway reads in
        // another case, which is refused as such, not as a repeat.
        let read = read_request(v.to_string().as_bytes(), &ArgumentKeys::default());
        prop_assert!(
            !matches!(read, Err(NotRead::Ambiguous(Ambiguous::FoldedTwice { .. }))),
            "{:?}", read
        );
        let mut objects = 0;
        render_with_duplicate(&v, usize::MAX, &mut objects, false, &mut String::new());
        let text = if objects == 0 {
            format!("[{v},{{\"a\":1,\"a\":2}}]")
        } else {
            let mut out = String::new();
            let mut seen = 0;
            prop_assert!(render_with_duplicate(&v, target.index(objects), &mut seen, escape, &mut out));
            out
        };
        prop_assert!(serde_json::from_str::<Value>(&text).is_ok(), "{}", text);
        let read = read_request(text.as_bytes(), &ArgumentKeys::default());
        prop_assert!(matches!(read, Err(NotRead::Ambiguous(_))), "{} read as {:?}", text, read);
    }

    #[test]
    fn digest_is_invariant_under_key_reordering_and_whitespace(v in json_value(), seed in any::<u64>()) {
        let mut text = String::new();
        let mut s = seed;
        render_shuffled(&v, &mut s, &mut text);
        let back: Value = serde_json::from_str(&text).unwrap();
        // Both sides parsed from the same number texts (serde_json's float parsing is not an
        // exact round trip of its printing).
        let plain: Value = serde_json::from_str(&v.to_string()).unwrap();
        prop_assert_eq!(arguments_digest(Some(&back)), arguments_digest(Some(&plain)));
    }
}
