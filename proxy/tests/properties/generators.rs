//! Shared configuration and generators: the case counts, junk text and bytes built from
//! fragments that mean something to some parser, JSON and JSON-RPC values, single-character
//! edits, and small text helpers.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Value, json};

use mcp_oauth_proxy::crypto::Key;

/// The unit of cases per property (each property runs 2× or 4× this), tuned so the whole file
/// runs in well under 20 s in a debug build on two cores.
pub(crate) const CASES: u32 = 256;

/// `n` cases, and no regressions file next to this one (found bugs are kept as tests in their
/// modules).
pub(crate) fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(n)
    }
}

pub(crate) fn key(bytes: [u8; 32]) -> Key {
    Key::from_slice(&bytes).unwrap()
}

/// Pieces that mean something to one parser or another, to build near-miss junk from.
pub(crate) const FRAGMENTS: &[&str] = &[
    "=",
    "&",
    "%",
    "%2",
    "%zz",
    "%00",
    "%0A",
    "%C3",
    "%C3%A9",
    "%FF",
    "%26",
    "%3D",
    "+",
    " ",
    ";",
    ",",
    "\"",
    "\\",
    "\r\n",
    "\n\n",
    "\t",
    "\0",
    "é",
    "\u{202E}",
    "\u{FEFF}",
    "\u{1F600}",
    "client_id",
    "redirect_uri",
    "grant_type",
    "code",
    "scope",
    "state",
    "resource",
    "javascript:",
    "JaVaScRiPt:",
    "data:",
    "http://",
    "https://",
    "//",
    "127.0.0.1",
    "[::1]",
    "localhost",
    "@",
    "#",
    ":",
    "/",
    "?",
    "..",
    "%2e",
    "__Host-",
    "mcp-flow",
    "mop1.",
    ".",
    "{",
    "}",
    "[",
    "]",
    "\"jsonrpc\"",
    "data: ",
    "\u{7f}",
    "\u{85}",
    "Basic ",
    "S256",
];

pub(crate) fn fragments(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(select(FRAGMENTS), 0..max).prop_map(|v| v.concat())
}

/// Bytes percent-encoded (or not, at random): decodes to arbitrary, often invalid, UTF-8.
pub(crate) fn percent_junk() -> impl Strategy<Value = String> {
    prop::collection::vec((any::<u8>(), any::<bool>()), 0..128).prop_map(|v| {
        v.into_iter()
            .map(|(b, enc)| {
                if enc || !b.is_ascii_graphic() {
                    format!("%{b:02X}")
                } else {
                    char::from(b).to_string()
                }
            })
            .collect()
    })
}

/// Arbitrary text: unicode, control characters, percent-encoded junk, meaningful fragments,
/// and long inputs (a few KB).
pub(crate) fn junk() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<String>(),
        3 => fragments(48),
        2 => percent_junk(),
        2 => "[\\x00-\\x7f]{0,80}",
        1 => prop::collection::vec(any::<char>(), 0..3000)
            .prop_map(|c| c.into_iter().collect::<String>()),
        1 => fragments(600),
    ]
    .boxed()
}

/// Arbitrary bytes: raw, text junk, JSON values, JSON-RPC messages, truncated JSON, deep
/// nesting.
pub(crate) fn byte_junk() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..4096),
        2 => junk().prop_map(String::into_bytes),
        2 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        2 => jsonrpc_message().prop_map(|v| v.to_string().into_bytes()),
        1 => (jsonrpc_message(), any::<Index>()).prop_map(|(v, i)| {
            let s = v.to_string().into_bytes();
            let n = i.index(s.len() + 1);
            s[..n].to_vec()
        }),
        1 => (0usize..300, select(vec!["[", "{\"a\":", "[{\"params\":", "{\"params\":"]))
            .prop_map(|(n, s)| s.repeat(n).into_bytes()),
    ]
    .boxed()
}

pub(crate) const JSON_KEYS: &[&str] = &[
    "requestState",
    "_meta",
    "name",
    "arguments",
    "id",
    "method",
    "params",
    "result",
    "error",
    "isError",
    "resultType",
    "x",
    "",
    "é",
];

pub(crate) fn json_key() -> BoxedStrategy<String> {
    prop_oneof![select(JSON_KEYS).prop_map(str::to_owned), "\\PC{0,6}",].boxed()
}

pub(crate) fn json_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        select(vec!["input_required", "tools/call", "mop1.x.y"]).prop_map(Value::from),
    ]
    .boxed()
}

pub(crate) fn json_value() -> BoxedStrategy<Value> {
    json_leaf()
        .prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((json_key(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
        .boxed()
}

pub(crate) fn json_object() -> BoxedStrategy<serde_json::Map<String, Value>> {
    prop::collection::vec((json_key(), json_value()), 0..6)
        .prop_map(|kv| kv.into_iter().collect())
        .boxed()
}

pub(crate) fn jsonrpc_id() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        "[a-z0-9\"\\\\ ]{0,8}".prop_map(Value::String),
        Just(Value::Null),
    ]
    .boxed()
}

/// Responses (results with and without `requestState`, `resultType`, `isError`; errors),
/// notifications, server requests, and arbitrary JSON.
pub(crate) fn jsonrpc_message() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => (
            jsonrpc_id(),
            prop::option::of("\\PC{0,16}"),
            prop::option::of(select(vec!["complete", "input_required", "other"])),
            prop::option::of(any::<bool>()),
            json_value(),
        )
            .prop_map(|(id, state, result_type, is_error, content)| {
                let mut r = serde_json::Map::new();
                if let Some(s) = state {
                    r.insert("requestState".into(), Value::String(s));
                }
                if let Some(t) = result_type {
                    r.insert("resultType".into(), t.into());
                }
                if let Some(e) = is_error {
                    r.insert("isError".into(), e.into());
                }
                r.insert("content".into(), content);
                json!({"jsonrpc": "2.0", "id": id, "result": Value::Object(r)})
            }),
        1 => (jsonrpc_id(), any::<i32>(), "\\PC{0,16}").prop_map(|(id, code, msg)| {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": msg}})
        }),
        1 => (
            "[a-z/]{1,20}",
            prop::option::of(jsonrpc_id()),
            json_value()
        )
            .prop_map(|(m, id, p)| {
                let mut o = json!({"jsonrpc": "2.0", "method": m, "params": p});
                if let Some(id) = id {
                    o["id"] = id;
                }
                o
            }),
        1 => json_value(),
    ]
    .boxed()
}

/// A single-character insertion, deletion or substitution.
#[derive(Debug, Clone)]
pub(crate) enum Edit {
    Insert(Index, char),
    Delete(Index),
    Replace(Index, char),
}

pub(crate) fn edit_char() -> BoxedStrategy<char> {
    prop_oneof![
        4 => select(vec![
            '/', ':', '@', '.', '%', '#', '?', '&', '=', '\\', 'a', 'A', 'Z', 'g', 'Q', 'w', '0',
            '1', '9', '-', '_', '~', '+', ' ', '\t', '\n', '[', ']', '"',
        ]),
        1 => any::<char>(),
    ]
    .boxed()
}

pub(crate) fn edit() -> BoxedStrategy<Edit> {
    prop_oneof![
        (any::<Index>(), edit_char()).prop_map(|(i, c)| Edit::Insert(i, c)),
        any::<Index>().prop_map(Edit::Delete),
        (any::<Index>(), edit_char()).prop_map(|(i, c)| Edit::Replace(i, c)),
    ]
    .boxed()
}

pub(crate) fn apply(s: &str, e: &Edit) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    match e {
        Edit::Insert(i, c) => {
            let at = i.index(chars.len() + 1);
            chars.insert(at, *c);
        }
        Edit::Delete(i) => {
            if !chars.is_empty() {
                let at = i.index(chars.len());
                chars.remove(at);
            }
        }
        Edit::Replace(i, c) => {
            if !chars.is_empty() {
                let at = i.index(chars.len());
                chars[at] = *c;
            }
        }
    }
    chars.into_iter().collect()
}

pub(crate) fn flip_case(s: &str, mask: &[bool]) -> String {
    s.chars()
        .zip(mask.iter().cycle())
        .map(|(c, &flip)| {
            if !flip {
                c
            } else if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

pub(crate) fn form(pairs: &[(String, String)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

pub(crate) fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

pub(crate) fn non_empty(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.is_empty())
}

/// The schemes `bindings::redirect` must never accept.
pub(crate) const DANGEROUS: &[&str] = &[
    "javascript",
    "data",
    "file",
    "vbscript",
    "about",
    "blob",
    "filesystem",
    "view-source",
    "chrome",
    "chrome-extension",
    "ws",
    "wss",
    "ftp",
    "mailto",
    "tel",
    "sms",
    "urn",
    "jar",
];

// URI-shaped text, shared by the redirect, registration and resource properties.

pub(crate) fn random_case(s: &'static str) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<bool>(), 20).prop_map(move |m| flip_case(s, &m))
}

/// URI-shaped strings built from pieces that matter to redirect validation.
pub(crate) fn uri_like() -> BoxedStrategy<String> {
    let scheme = prop_oneof![
        3 => select(vec![
            "https", "http", "HTTPS", "Http", "com.example.app", "cursor", "myapp", "x-javascript",
            "",
        ])
        .prop_map(str::to_owned),
        2 => select(DANGEROUS).prop_flat_map(random_case),
        1 => "[a-zA-Z][a-zA-Z0-9+.-]{0,10}",
    ];
    let sep = select(vec!["://", "://", "://", ":", ":/", ":///", ":\\\\", "//"]);
    let userinfo = select(vec![
        "",
        "",
        "",
        "",
        "user@",
        ":pw@",
        "@",
        "a:b@",
        "%40@",
        "127.0.0.1@",
        "localhost:80@",
    ]);
    let host = select(vec![
        "app.example",
        "127.0.0.1",
        "localhost",
        "LOCALHOST",
        "LocalHost",
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
        "127.0.0.2",
        "127.1",
        "0x7f.1",
        "2130706433",
        "[::ffff:127.0.0.1]",
        "localhost.",
        "127.0.0.1.evil.example",
        "evil.example",
        "10.0.0.1",
        "0.0.0.0",
        "",
        "%6cocalhost",
        "xn--80ak6aa92e.com",
        "ex%41mple.com",
        "[::]",
        "ｌｏｃａｌｈｏｓｔ",
    ]);
    let port = select(vec![
        "", "", "", ":", ":0", ":8080", ":65535", ":65536", ":99999", ":abc", ":443",
    ]);
    let path = select(vec![
        "",
        "/",
        "/cb",
        "/callback",
        "/a/../b",
        "//evil.example",
        "/c b",
        "/%2F",
        "/é",
        "\\evil",
        "/@evil.example",
    ]);
    let query = select(vec![
        "",
        "",
        "?",
        "?x=1",
        "?a=b&c=d",
        "?next=https://evil.example",
    ]);
    let fragment = select(vec!["", "", "", "#", "#x", "%23x"]);
    let noise = prop::option::of((any::<Index>(), edit_char()));
    (
        scheme, sep, userinfo, host, port, path, query, fragment, noise,
    )
        .prop_map(
            |(scheme, sep, ui, host, port, path, query, fragment, noise)| {
                let s = format!("{scheme}{sep}{ui}{host}{port}{path}{query}{fragment}");
                match noise {
                    Some((i, c)) => apply(&s, &Edit::Insert(i, c)),
                    None => s,
                }
            },
        )
        .boxed()
}

/// `http://<loopback>` as `split_loopback` knows it, plus the parts after the authority.
pub(crate) fn loopback_parts() -> impl Strategy<Value = (&'static str, Option<u16>, String, String)>
{
    (
        select(vec!["127.0.0.1", "[::1]", "localhost"]),
        prop::option::of(1u16..),
        "(/[a-z0-9._~%-]{0,5}){0,3}",
        prop::option::of("[a-z0-9=&]{0,6}")
            .prop_map(|q| q.map(|q| format!("?{q}")).unwrap_or_default()),
    )
}

pub(crate) fn port_text(p: Option<u16>) -> String {
    p.map(|p| format!(":{p}")).unwrap_or_default()
}

pub(crate) fn https_uri() -> BoxedStrategy<String> {
    (
        select(vec![
            "https://",
            "https://",
            "HTTPS://",
            "com.example.app:/",
            "cursor://",
        ]),
        "[a-z]{1,8}\\.(example|com|dev)",
        prop::option::of(1u16..),
        "(/[a-zA-Z0-9._~-]{0,8}){0,3}",
        prop::option::of("[a-z0-9=&]{0,8}"),
    )
        .prop_map(|(s, h, p, path, q)| {
            format!(
                "{s}{h}{}{path}{}",
                port_text(p),
                q.map(|q| format!("?{q}")).unwrap_or_default()
            )
        })
        .boxed()
}

// Consent-cookie and CSRF bindings: (purpose, client id, flow id).

pub(crate) type Binding = (String, String, String);

pub(crate) fn binding_part() -> BoxedStrategy<String> {
    prop_oneof![
        "[ab.]{0,3}",
        select(vec!["authorize", "sign-in", "", "client-a", "txn1"]).prop_map(str::to_owned),
        "\\PC{0,10}",
    ]
    .boxed()
}

pub(crate) fn binding() -> BoxedStrategy<Binding> {
    (binding_part(), binding_part(), binding_part()).boxed()
}

/// A second binding: unrelated, identical, or the first with the text moved between fields.
pub(crate) fn binding_pair() -> BoxedStrategy<(Binding, Binding)> {
    (binding(), binding(), 0u8..5, any::<Index>())
        .prop_map(|(a, b, mode, i)| {
            let shift = |x: &str, y: &str| {
                let cut = x
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain([x.len()])
                    .nth(i.index(x.chars().count() + 1))
                    .unwrap_or(x.len());
                (x[..cut].to_owned(), format!("{}{y}", &x[cut..]))
            };
            let b = match mode {
                0 => b,
                1 => a.clone(),
                2 => {
                    let (p, c) = shift(&format!("{}{}", a.0, a.1), "");
                    (p, c, a.2.clone())
                }
                3 => {
                    let (c, f) = shift(&format!("{}{}", a.1, a.2), "");
                    (a.0.clone(), c, f)
                }
                _ => (a.1.clone(), a.0.clone(), a.2.clone()),
            };
            (a, b)
        })
        .boxed()
}
