//! The gateway's reading of a `/mcp` body (`gateway::envelope`) against the readers backends
//! use: exact keys with the last or the first duplicate winning (JavaScript and serde; some
//! streaming readers), and keys matched by Unicode simple folding with the last or first match
//! winning (Go's `encoding/json` into structs, so mcp-go). For any body, either the gateway
//! refuses it, or every one of those readers sees the method, tool name, arguments and `_meta`
//! the gateway decided on.
//!
//! The folding readers use the proxy's own `fold_key`; that it folds as Go does on every code
//! point is checked against a real Go program in the integration suite
//! (`gateway::folded_keys::fold_key_agrees_with_go_on_every_code_point`).

use std::fmt::Write as _;

use mcp_oauth_proxy::gateway::envelope::{ArgumentKeys, CLIENT_CAPS, fold_key};
use mcp_oauth_proxy::gateway::jsonrpc::read_request;
use proptest::prelude::*;
use proptest::sample::select;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::generators::{CASES, cases};

/// A JSON document as written: object members in order, duplicates kept.
#[derive(Debug, Clone)]
enum J {
    Obj(Vec<(String, J)>),
    Arr(Vec<J>),
    Leaf(Value),
}

impl<'de> de::Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<J, E> {
                Ok(J::Leaf(Value::Bool(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<J, E> {
                Ok(J::Leaf(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<J, E> {
                Ok(J::Leaf(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<J, E> {
                Ok(J::Leaf(
                    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<J, E> {
                Ok(J::Leaf(Value::String(v.to_owned())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<J, E> {
                Ok(J::Leaf(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<J, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = s.next_element()? {
                    v.push(x);
                }
                Ok(J::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<J, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = m.next_entry::<String, J>()? {
                    v.push((k, x));
                }
                Ok(J::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// How a reader picks the member a key names.
#[derive(Debug, Clone, Copy)]
enum Reader {
    ExactLast,
    ExactFirst,
    FoldLast,
    FoldFirst,
}

const READERS: [Reader; 4] = [
    Reader::ExactLast,
    Reader::ExactFirst,
    Reader::FoldLast,
    Reader::FoldFirst,
];

impl Reader {
    fn same(self, a: &str, b: &str) -> bool {
        match self {
            Reader::ExactLast | Reader::ExactFirst => a == b,
            Reader::FoldLast | Reader::FoldFirst => fold_key(a) == fold_key(b),
        }
    }

    fn last(self) -> bool {
        matches!(self, Reader::ExactLast | Reader::FoldLast)
    }

    fn get<'a>(self, obj: &'a J, key: &str) -> Option<&'a J> {
        let J::Obj(members) = obj else { return None };
        let mut it = members.iter().filter(|(k, _)| self.same(k, key));
        if self.last() {
            it.next_back()
        } else {
            it.next()
        }
        .map(|(_, v)| v)
    }

    /// The document as this reader holds it: per object, one member per key as the reader
    /// tells keys apart (the winning member's own spelling kept).
    fn value(self, j: &J) -> Value {
        match j {
            J::Leaf(v) => v.clone(),
            J::Arr(items) => Value::Array(items.iter().map(|i| self.value(i)).collect()),
            J::Obj(members) => {
                let mut out = serde_json::Map::new();
                for (i, (k, _)) in members.iter().enumerate() {
                    let winner = if self.last() {
                        members.iter().rposition(|(k2, _)| self.same(k, k2))
                    } else {
                        members.iter().position(|(k2, _)| self.same(k, k2))
                    };
                    if winner == Some(i)
                        && let Some((wk, wv)) = members.get(i)
                    {
                        out.insert(wk.clone(), self.value(wv));
                    }
                }
                Value::Object(out)
            }
        }
    }

    /// What this reader sees of a message: method, tool name, arguments, `_meta`.
    fn sees(self, msg: &J) -> [Option<Value>; 4] {
        let params = self.get(msg, "params");
        let field = |k: &str| params.and_then(|p| self.get(p, k)).map(|v| self.value(v));
        [
            self.get(msg, "method").map(|v| self.value(v)),
            field("name"),
            field("arguments"),
            field("_meta"),
        ]
    }
}

/// A key spelt as a client or an attacker might: as is, in another case, with a long s or a
/// Kelvin sign where it has an `s` or a `k`, or with its first character escaped.
fn spelling(key: &'static str) -> impl Strategy<Value = String> {
    (0u8..10).prop_map(move |pick| {
        let escaped = |k: &str| {
            let mut chars = k.chars();
            chars.next().map_or_else(String::new, |c| {
                format!("\\u{:04x}{}", u32::from(c), chars.as_str())
            })
        };
        match pick {
            0 => key.to_uppercase(),
            1 => {
                let mut c = key.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect())
                    .unwrap_or_default()
            }
            2 => key.replacen('s', "\u{17F}", 1),
            3 => key.replacen('k', "\u{212A}", 1),
            4 => escaped(key),
            _ => key.to_owned(),
        }
    })
}

/// One member: a key (with its spelling) and its JSON text.
fn member(key: &'static str, value: BoxedStrategy<String>) -> BoxedStrategy<(String, String)> {
    (spelling(key), value)
        .prop_map(|(k, v)| {
            // The spelling may carry an escape: written as is, never re-escaped.
            let k = if k.contains("\\u") {
                k
            } else {
                serde_json::to_string(&k)
                    .unwrap()
                    .trim_matches('"')
                    .to_owned()
            };
            (k, v)
        })
        .boxed()
}

/// An object from some of `members` (each possibly twice, the second drawn on its own: another
/// spelling, another value), in any order.
fn object(members: Vec<BoxedStrategy<(String, String)>>) -> BoxedStrategy<String> {
    let n = members.len();
    let pairs: Vec<_> = members.into_iter().map(|m| (m.clone(), m)).collect();
    (
        pairs,
        prop::collection::vec(any::<bool>(), n),
        prop::collection::vec(any::<bool>(), n),
        Just(()).prop_perturb(|(), mut rng| rng.random::<u64>()),
    )
        .prop_flat_map(|(ms, keep, twice, seed)| {
            let mut chosen: Vec<(String, String)> = Vec::new();
            for (i, (m, again)) in ms.into_iter().enumerate() {
                if keep.get(i).copied().unwrap_or(true) {
                    chosen.push(m);
                    if twice.get(i).copied().unwrap_or(false) {
                        chosen.push(again);
                    }
                }
            }
            // A deterministic shuffle from the case's seed.
            let mut order: Vec<usize> = (0..chosen.len()).collect();
            let mut s = seed;
            for i in (1..order.len()).rev() {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                order.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut text = String::from("{");
            for (n, i) in order.iter().enumerate() {
                if n > 0 {
                    text.push(',');
                }
                let (k, v) = &chosen[*i];
                let _ = write!(text, "\"{k}\":{v}");
            }
            text.push('}');
            Just(text)
        })
        .boxed()
}

fn string(values: Vec<&'static str>) -> BoxedStrategy<String> {
    select(values)
        .prop_map(|v| serde_json::to_string(v).unwrap())
        .boxed()
}

fn arguments() -> BoxedStrategy<String> {
    let nested = object(vec![
        member("inner", string(vec!["a", "b"])),
        member("Other", string(vec!["c"])),
    ]);
    object(vec![
        member("owner", string(vec!["acme", "octo"])),
        member("repo", string(vec!["site", "infra"])),
        member("key", string(vec!["prod-1", "dev-1"])),
        member("nested", nested),
    ])
}

fn meta() -> BoxedStrategy<String> {
    let caps = object(vec![member(
        "elicitation",
        object(vec![member("url", Just("{}".to_owned()).boxed())]),
    )]);
    object(vec![
        member(CLIENT_CAPS, caps),
        member("progressToken", Just("1".to_owned()).boxed()),
    ])
}

fn message() -> BoxedStrategy<String> {
    let params = object(vec![
        member("name", string(vec!["get_me", "create_branch"])),
        member("arguments", arguments()),
        member("_meta", meta()),
        member("requestState", string(vec!["s1", "s2"])),
    ]);
    object(vec![
        member("jsonrpc", Just("\"2.0\"".to_owned()).boxed()),
        member("id", Just("7".to_owned()).boxed()),
        member("method", string(vec!["tools/call", "ping"])),
        member("params", params),
    ])
}

proptest! {
    #![proptest_config(cases(CASES * 4))]

    #[test]
    fn every_reader_sees_what_the_gateway_decided_or_the_gateway_refused(
        body in message(),
        with_policy_keys in any::<bool>(),
    ) {
        let keys = if with_policy_keys {
            ArgumentKeys::from_pointers(["/owner", "/key", "/nested/inner"])
        } else {
            ArgumentKeys::default()
        };
        let Ok(inbound) = read_request(body.as_bytes(), &keys) else {
            return Ok(()); // refused: nothing reaches a backend
        };
        let doc: J = serde_json::from_str(&body).unwrap();
        let params = inbound.params.as_ref();
        let decided = [
            inbound.method.clone().map(Value::String),
            params.and_then(|p| p.get("name")).cloned(),
            params.and_then(|p| p.get("arguments")).cloned(),
            params.and_then(|p| p.get("_meta")).cloned(),
        ];
        for reader in READERS {
            prop_assert_eq!(&reader.sees(&doc), &decided, "{:?} reads {}", reader, body);
        }
    }
}

/// The generator does reach bodies the gateway accepts, and ones it refuses for each reason.
#[test]
fn the_generator_reaches_both_sides() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..2000 {
        let body = message().new_tree(&mut runner).unwrap().current();
        match read_request(body.as_bytes(), &ArgumentKeys::default()) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(accepted > 20, "accepted {accepted}, refused {refused}");
    assert!(refused > 200, "accepted {accepted}, refused {refused}");
}
