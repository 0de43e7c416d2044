//! What the gateway reads of a request body, refusing every body that some backend's JSON
//! reader could read differently. Without I/O.
//!
//! Backends read JSON in different ways: exact keys with the last duplicate winning
//! (JavaScript, serde), exact keys with the first winning, and keys matched without case by
//! Unicode simple folding with the last match winning (Go's `encoding/json` decoding into
//! structs, so mark3labs/mcp-go: `"Method"`, `"METHOD"` and `"metho\u{17F}"`-with-long-s all
//! set `method`). The gateway decides on `method`, `params.name`, `params.arguments`,
//! `params._meta` and a few more keys; it forwards the body only when every such reader must
//! find the same member for each of them:
//!
//! 1. the body is one JSON object serde_json reads completely: valid UTF-8, no byte-order mark,
//!    no lone surrogate, nothing after it ([`Unreadable`]);
//! 2. no object anywhere has two keys that fold to the same string ([`fold_key`]), so no reader
//!    can choose between two members (exact duplicates included);
//! 3. in the objects the gateway reads, a key that folds to a key the gateway reads is spelt
//!    exactly as that key, without escapes, so the exact readers and the folding ones find the
//!    same single member (`"Params"` alone would be `params` to Go and nothing to the gateway).
//!
//! With these, a backend reads the same method, tool, arguments and `_meta` as the gateway
//! whichever of those readers it uses, and the body can be forwarded as sent.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::refusal::{APPROVAL_INPUT_KEY, INPUT_KEY};

/// `_meta` key of per-request client capabilities in 2026-07-28.
pub const CLIENT_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";

/// Why a body is not one JSON object the gateway can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Empty, or only whitespace.
    Empty,
    /// Starts with a UTF-8 byte-order mark (lenient readers skip it, serde_json does not).
    ByteOrderMark,
    /// Not JSON as serde_json reads it: a syntax error, invalid UTF-8, a lone surrogate in an
    /// escape, nesting past serde_json's limit, a number out of range.
    NotJson,
    /// JSON followed by more than whitespace (some readers stop after the first value).
    TrailingBytes,
    /// JSON, but not an object (a batch is refused before this, on its own).
    NotAnObject,
}

impl Unreadable {
    /// For the audit trail and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Unreadable::Empty => "empty",
            Unreadable::ByteOrderMark => "byte_order_mark",
            Unreadable::NotJson => "not_json",
            Unreadable::TrailingBytes => "trailing_bytes",
            Unreadable::NotAnObject => "not_an_object",
        }
    }
}

/// Two readers could disagree on which member a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ambiguous {
    /// Two keys of one object fold to the same string (`"name"` and `"Name"`, or one key
    /// twice).
    FoldedTwice {
        /// Where the object is, as a JSON pointer (cut for the logs).
        at: String,
    },
    /// A key that folds to a key the gateway reads, spelt otherwise (`"Method"`, `"param\u{17F}"`)
    /// or with escapes (`"m\u0065thod"`).
    Variant {
        /// Where the object is, as a JSON pointer (cut for the logs).
        at: String,
        /// The key the gateway reads there.
        reads: &'static str,
    },
}

impl Ambiguous {
    /// Whether the object in question is the message itself (its `id` may be the ambiguous key).
    pub fn at_top_level(&self) -> bool {
        let (Ambiguous::FoldedTwice { at } | Ambiguous::Variant { at, .. }) = self;
        at == "/"
    }

    /// A short description for the audit trail: where, never the offending key itself (a
    /// caller's text, unbounded).
    pub fn describe(&self) -> String {
        match self {
            Ambiguous::FoldedTwice { at } => format!("keys_fold_together:{at}"),
            Ambiguous::Variant { at, reads } => format!("variant_of:{at}/{reads}"),
        }
    }
}

/// Why the gateway will not read a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRead {
    /// Not one JSON object serde_json reads completely.
    Unreadable(Unreadable),
    /// Readers could disagree on a key the gateway decides on.
    Ambiguous(Ambiguous),
}

/// The keys a `[[policy]]` rule reads inside `params.arguments`, as a tree of JSON-pointer
/// segments (`owner`, `/repo/name`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ArgumentKeys {
    children: Vec<(String, ArgumentKeys)>,
}

impl ArgumentKeys {
    /// From RFC 6901 pointers (`/repo/name`); a pointer that is not one is skipped (the policy
    /// refuses those when it loads).
    pub fn from_pointers<'a>(pointers: impl IntoIterator<Item = &'a str>) -> ArgumentKeys {
        let mut root = ArgumentKeys::default();
        for p in pointers {
            let Some(rest) = p.strip_prefix('/') else {
                continue;
            };
            let mut node = &mut root;
            for seg in rest.split('/') {
                let seg = seg.replace("~1", "/").replace("~0", "~");
                let i = match node.children.iter().position(|(k, _)| *k == seg) {
                    Some(i) => i,
                    None => {
                        node.children.push((seg, ArgumentKeys::default()));
                        node.children.len() - 1
                    }
                };
                // The index was just found or pushed.
                let Some((_, child)) = node.children.get_mut(i) else {
                    break;
                };
                node = child;
            }
        }
        root
    }

    fn child(&self, key: &str) -> Option<&ArgumentKeys> {
        self.children.iter().find(|(k, _)| k == key).map(|(_, c)| c)
    }
}

/// Where in the body a value sits, as far as the gateway reads it.
#[derive(Debug, Clone, Copy)]
enum Node<'k> {
    Root,
    Params,
    Meta,
    Capabilities,
    Elicitation,
    InputResponses,
    InputResponse,
    Arguments(&'k ArgumentKeys),
    /// Read by nobody here; still checked for keys that fold together.
    Free,
}

/// The keys the gateway reads in `params` (of any method): the tool or prompt (`name`), the
/// mirrored `uri` and `taskId`, the arguments a policy and an approval cover, the capabilities
/// of `initialize` and of a 2026-07-28 request, and the state of a multi round-trip request.
const PARAMS_KEYS: &[&str] = &[
    "name",
    "arguments",
    "_meta",
    "requestState",
    "inputResponses",
    "capabilities",
    "uri",
    "taskId",
];

impl<'k> Node<'k> {
    /// The keys read in an object here: static ones, or the policy's argument names.
    fn reads(&self) -> Reads<'k> {
        match self {
            Node::Root => Reads::Static(&["jsonrpc", "id", "method", "params"]),
            Node::Params => Reads::Static(PARAMS_KEYS),
            Node::Meta => Reads::Static(&[CLIENT_CAPS]),
            Node::Capabilities => Reads::Static(&["elicitation"]),
            Node::Elicitation => Reads::Static(&["url"]),
            Node::InputResponses => Reads::Static(&[INPUT_KEY, APPROVAL_INPUT_KEY]),
            Node::InputResponse => Reads::Static(&["action"]),
            Node::Arguments(keys) => Reads::Arguments(keys),
            Node::Free => Reads::Static(&[]),
        }
    }

    /// The node of the member `key` (exactly spelt) of an object here; `arguments` are the
    /// policy's keys for `params.arguments`.
    fn member(&self, key: &str, arguments: &'k ArgumentKeys) -> Node<'k> {
        match (self, key) {
            (Node::Root, "params") => Node::Params,
            (Node::Params, "_meta") => Node::Meta,
            (Node::Params, "capabilities") | (Node::Meta, CLIENT_CAPS) => Node::Capabilities,
            (Node::Params, "inputResponses") => Node::InputResponses,
            (Node::Params, "arguments") => Node::Arguments(arguments),
            (Node::Capabilities, "elicitation") => Node::Elicitation,
            (Node::InputResponses, k) if k == INPUT_KEY || k == APPROVAL_INPUT_KEY => {
                Node::InputResponse
            }
            (Node::Arguments(keys), k) => keys.child(k).map_or(Node::Free, Node::Arguments),
            _ => Node::Free,
        }
    }

    /// The node of element `i` of an array here (a pointer segment may be an index).
    fn element(&self, i: usize) -> Node<'k> {
        match self {
            Node::Arguments(keys) => keys
                .child(&i.to_string())
                .map_or(Node::Free, Node::Arguments),
            _ => Node::Free,
        }
    }
}

enum Reads<'k> {
    Static(&'static [&'static str]),
    Arguments(&'k ArgumentKeys),
}

impl Reads<'_> {
    /// The read key `key` folds to, if any (`Some` also when `key` is that key exactly).
    fn folded_match(&self, folded: &str) -> Option<ReadKey<'_>> {
        match self {
            Reads::Static(keys) => keys
                .iter()
                .find(|r| fold_key(r) == folded)
                .map(|r| ReadKey::Static(r)),
            Reads::Arguments(keys) => keys
                .children
                .iter()
                .find(|(r, _)| fold_key(r) == folded)
                .map(|(r, _)| ReadKey::Argument(r)),
        }
    }
}

enum ReadKey<'a> {
    Static(&'static str),
    Argument(&'a str),
}

impl ReadKey<'_> {
    fn text(&self) -> &str {
        match self {
            ReadKey::Static(s) => s,
            ReadKey::Argument(s) => s,
        }
    }

    /// For [`Ambiguous::Variant`]: static keys by name, argument names (operator-written, of
    /// any length) as one word.
    fn label(&self) -> &'static str {
        match self {
            ReadKey::Static(s) => s,
            ReadKey::Argument(_) => "(an argument a policy rule names)",
        }
    }
}

/// A key's folded form: two keys fold to the same string exactly when Go's `encoding/json`
/// (Unicode simple case folding: `k`, `K` and KELVIN SIGN; `s`, `S` and LONG S) or a reader
/// comparing simple upper- or lower-case mappings (.NET's and Java's case-insensitive modes,
/// which also equate the dotless `ı` and dotted `İ` with `i`) would match one for the other.
/// The representative is the smallest character of each class, as Go's `foldName` picks it.
pub fn fold_key(key: &str) -> Cow<'_, str> {
    if key.bytes().all(|b| b.is_ascii() && !b.is_ascii_lowercase()) {
        return Cow::Borrowed(key);
    }
    Cow::Owned(key.chars().map(fold_char).collect())
}

/// The smallest character of `c`'s class (see [`fold_key`]).
pub fn fold_char(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    // The Turkic i's have no simple folding (CaseFolding.txt gives them status T only), but
    // their simple case mappings are `I` and `i`, which .NET and Java compare.
    if matches!(c, '\u{130}' | '\u{131}') {
        return 'I';
    }
    let mut class =
        regex_syntax::hir::ClassUnicode::new([regex_syntax::hir::ClassUnicodeRange::new(c, c)]);
    // Only fails without regex-syntax's `unicode-case` tables, which Cargo.toml turns on.
    if class.try_case_fold_simple().is_err() {
        return c;
    }
    class.ranges().first().map_or(c, |r| r.start())
}

/// Longest JSON pointer an [`Ambiguous`] carries (the keys are a caller's text).
const MAX_AT: usize = 96;

/// Reads a `/mcp` POST body: the message as serde_json reads it, or why the gateway will not
/// read it (see the module docs). `arguments` are the keys the policy reads in
/// `params.arguments`.
pub fn read(body: &[u8], arguments: &ArgumentKeys) -> Result<Value, NotRead> {
    let text = body
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .and_then(|start| body.get(start..));
    let Some(text) = text else {
        return Err(NotRead::Unreadable(Unreadable::Empty));
    };
    if text.starts_with(b"\xef\xbb\xbf") {
        return Err(NotRead::Unreadable(Unreadable::ByteOrderMark));
    }
    if !text.starts_with(b"{") {
        // Valid or not, it is no object (a batch starts with `[` and is refused earlier).
        return Err(NotRead::Unreadable(
            if serde_json::from_slice::<de::IgnoredAny>(text).is_ok() {
                Unreadable::NotAnObject
            } else {
                Unreadable::NotJson
            },
        ));
    }
    let found = Cell::new(None);
    let walk = Walk {
        node: Node::Root,
        arguments,
        at: Pointer::root(),
        found: &found,
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = match walk.deserialize(&mut de) {
        Ok(v) => v,
        // The walk's own error when it refused a key; any other is serde_json's.
        Err(_) => {
            return Err(match found.take() {
                Some(a) => NotRead::Ambiguous(a),
                None => NotRead::Unreadable(Unreadable::NotJson),
            });
        }
    };
    if de.end().is_err() {
        return Err(NotRead::Unreadable(Unreadable::TrailingBytes));
    }
    Ok(value)
}

/// Where the walk is, as a JSON pointer, for the logs (cut at [`MAX_AT`]).
#[derive(Clone)]
struct Pointer(String);

impl Pointer {
    fn root() -> Pointer {
        Pointer(String::new())
    }

    fn push(&self, seg: &str) -> Pointer {
        if self.0.len() >= MAX_AT {
            return self.clone();
        }
        let mut p = self.0.clone();
        p.push('/');
        for c in seg.chars() {
            if p.len() >= MAX_AT {
                p.push('…');
                break;
            }
            match c {
                '~' => p.push_str("~0"),
                '/' => p.push_str("~1"),
                c if c.is_control() => p.push('?'),
                c => p.push(c),
            }
        }
        Pointer(p)
    }

    fn text(&self) -> String {
        if self.0.is_empty() {
            "/".to_owned()
        } else {
            self.0.clone()
        }
    }
}

/// One value of the body, walked where it sits; builds the `Value` serde_json would.
struct Walk<'k, 'f> {
    node: Node<'k>,
    arguments: &'k ArgumentKeys,
    at: Pointer,
    found: &'f Cell<Option<Ambiguous>>,
}

impl<'k, 'f> Walk<'k, 'f> {
    fn below(&self, node: Node<'k>, seg: &str) -> Walk<'k, 'f> {
        Walk {
            node,
            arguments: self.arguments,
            at: self.at.push(seg),
            found: self.found,
        }
    }

    fn refuse<E: de::Error>(&self, a: Ambiguous) -> E {
        self.found.set(Some(a));
        E::custom("ambiguous key")
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity; serde_json's own `Value` reads them as null too.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let i = items.len();
            let below = self.below(self.node.element(i), &i.to_string());
            match seq.next_element_seed(below)? {
                Some(v) => items.push(v),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let reads = self.node.reads();
        let mut out = Map::new();
        // Folded keys seen so far; objects are small, a linear scan beats hashing here.
        let mut folded: Vec<String> = Vec::new();
        while let Some(Key { text, escaped }) = map.next_key::<Key<'de>>()? {
            let f = fold_key(&text).into_owned();
            if folded.contains(&f) {
                return Err(self.refuse(Ambiguous::FoldedTwice { at: self.at.text() }));
            }
            if let Some(r) = reads.folded_match(&f)
                && (r.text() != text || escaped)
            {
                return Err(self.refuse(Ambiguous::Variant {
                    at: self.at.text(),
                    reads: r.label(),
                }));
            }
            folded.push(f);
            let below = self.below(self.node.member(&text, self.arguments), &text);
            let v = map.next_value_seed(below)?;
            out.insert(text.into_owned(), v);
        }
        Ok(Value::Object(out))
    }
}

/// An object key as written: `escaped` when the text had a backslash escape (serde_json hands
/// out a borrowed key only when it had none).
struct Key<'de> {
    text: Cow<'de, str>,
    escaped: bool,
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key {
                    text: Cow::Borrowed(v),
                    escaped: false,
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key {
                    text: Cow::Owned(v.to_owned()),
                    escaped: true,
                })
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn none() -> ArgumentKeys {
        ArgumentKeys::default()
    }

    fn ambiguous(body: &str) -> Ambiguous {
        match read(body.as_bytes(), &none()) {
            Err(NotRead::Ambiguous(a)) => a,
            other => panic!("{body}: {other:?}"),
        }
    }

    fn unreadable(body: &[u8]) -> Unreadable {
        match read(body, &none()) {
            Err(NotRead::Unreadable(u)) => u,
            other => panic!("{}: {other:?}", String::from_utf8_lossy(body)),
        }
    }

    #[test]
    fn folding_matches_go_on_the_characters_that_reach_ascii() {
        assert_eq!(fold_key("method"), "METHOD");
        assert_eq!(fold_key("param\u{17F}"), "PARAMS", "long s");
        assert_eq!(fold_key("\u{212A}ey"), "KEY", "Kelvin sign");
        assert_eq!(fold_key("\u{131}d"), "ID", "dotless i");
        assert_eq!(fold_key("\u{130}D"), "ID", "dotted capital I");
        assert_eq!(fold_key("\u{3C3}"), fold_key("\u{3C2}"), "final sigma");
        assert_eq!(fold_key("\u{3A3}"), fold_key("\u{3C3}"));
        assert_ne!(
            fold_key("stra\u{DF}e"),
            fold_key("strasse"),
            "no full folding"
        );
        assert_eq!(fold_key("_meta"), "_META");
        assert!(matches!(fold_key("ALREADY_UP"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_case_variant_of_a_key_the_gateway_reads_is_refused() {
        for (body, reads) in [
            (r#"{"Method":"tools/call","params":{"name":"x"}}"#, "method"),
            (r#"{"method":"tools/call","Params":{"name":"x"}}"#, "params"),
            (
                "{\"method\":\"tools/call\",\"param\u{17F}\":{\"name\":\"x\"}}",
                "params",
            ),
            (
                r#"{"method":"tools/call","params":{"NAME":"create_branch"}}"#,
                "name",
            ),
            (
                "{\"method\":\"tools/call\",\"params\":{\"name\":\"x\",\"argument\u{17F}\":{}}}",
                "arguments",
            ),
            (
                r#"{"method":"tools/call","params":{"name":"x","_META":{}}}"#,
                "_meta",
            ),
            (
                r#"{"method":"tools/call","params":{"name":"x","requeststate":"s"}}"#,
                "requestState",
            ),
            (r#"{"m\u0065thod":"tools/call"}"#, "method"),
        ] {
            match ambiguous(body) {
                Ambiguous::Variant { reads: r, .. } => assert_eq!(r, reads, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn two_keys_folding_together_anywhere_are_refused() {
        for (body, at) in [
            (r#"{"method":"ping","METHOD":"tools/call"}"#, "/"),
            (r#"{"method":"a","method":"b"}"#, "/"),
            (
                r#"{"method":"tools/call","params":{"name":"get_me","Name":"create_branch"}}"#,
                "/params",
            ),
            (
                r#"{"method":"tools/call","params":{"name":"t","arguments":{"owner":"a","Owner":"b"}}}"#,
                "/params/arguments",
            ),
            (
                "{\"params\":{\"arguments\":{\"deep\":[{\"k\":1,\"\u{212A}\":2}]}}}",
                "/params/arguments/deep/0",
            ),
            (r#"{"x":{"a":1,"\u0061":2}}"#, "/x"),
        ] {
            assert_eq!(
                ambiguous(body),
                Ambiguous::FoldedTwice { at: at.to_owned() },
                "{body}"
            );
        }
    }

    #[test]
    fn keys_the_gateway_does_not_read_may_have_any_case() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"Owner":"acme","REPO":"x"},"_meta":{"progressToken":1,"Other":true}},"Extra":1}"#;
        let v = read(body.as_bytes(), &none()).unwrap();
        assert_eq!(v["params"]["arguments"]["Owner"], "acme");
    }

    #[test]
    fn argument_names_a_policy_reads_must_be_spelt_exactly() {
        let keys = ArgumentKeys::from_pointers(["/owner", "/repo/name", "/items/0/ref"]);
        let ok = r#"{"params":{"name":"t","arguments":{"owner":"acme","repo":{"name":"x"},"items":[{"ref":"main"}]}}}"#;
        assert!(read(ok.as_bytes(), &keys).is_ok());
        for body in [
            r#"{"params":{"arguments":{"Owner":"acme"}}}"#,
            r#"{"params":{"arguments":{"repo":{"NAME":"x"}}}}"#,
            r#"{"params":{"arguments":{"items":[{"Ref":"main"}]}}}"#,
            r#"{"params":{"arguments":{"\u006fwner":"acme"}}}"#,
        ] {
            assert!(
                matches!(
                    read(body.as_bytes(), &keys),
                    Err(NotRead::Ambiguous(Ambiguous::Variant { .. }))
                ),
                "{body}"
            );
        }
        // Without the rule, the same spelling is the tool's business.
        assert!(read(br#"{"params":{"arguments":{"Owner":"acme"}}}"#, &none()).is_ok());
        // A pointer segment only applies where its path leads.
        assert!(
            read(
                br#"{"params":{"arguments":{"other":{"Owner":"x"}}}}"#,
                &keys
            )
            .is_ok()
        );
    }

    #[test]
    fn bodies_serde_json_cannot_read_completely_are_unreadable() {
        assert_eq!(unreadable(b""), Unreadable::Empty);
        assert_eq!(unreadable(b" \r\n"), Unreadable::Empty);
        assert_eq!(
            unreadable(b"\xef\xbb\xbf{\"method\":\"ping\"}"),
            Unreadable::ByteOrderMark
        );
        assert_eq!(
            unreadable(br#"{"method":"\ud800"}"#),
            Unreadable::NotJson,
            "lone surrogate"
        );
        assert_eq!(
            unreadable(b"{\"method\":\"\xff\"}"),
            Unreadable::NotJson,
            "invalid UTF-8"
        );
        assert_eq!(
            unreadable(br#"{"method":"ping"} {"method":"tools/call"}"#),
            Unreadable::TrailingBytes
        );
        assert_eq!(unreadable(br#""tools/call""#), Unreadable::NotAnObject);
        assert_eq!(unreadable(b"nope"), Unreadable::NotJson);
        assert_eq!(unreadable(br#"{"n":1e400}"#), Unreadable::NotJson);
        let deep = format!("{}{}", "{\"a\":".repeat(200), "}".repeat(200));
        assert_eq!(unreadable(deep.as_bytes()), Unreadable::NotJson);
    }

    #[test]
    fn a_readable_body_reads_as_serde_json_reads_it() {
        for body in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {"n": 1.5, "big": 18446744073709551615u64, "neg": -3, "s": "é\n", "arr": [null, true, {}]}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ] {
            let text = body.to_string();
            assert_eq!(
                read(text.as_bytes(), &none()).unwrap(),
                serde_json::from_str::<Value>(&text).unwrap()
            );
        }
        let spaced = " \n{ \"id\" : 1e2 , \"method\":\"t\\u00e9\" } \t";
        assert_eq!(
            read(spaced.as_bytes(), &none()).unwrap(),
            serde_json::from_str::<Value>(spaced).unwrap()
        );
    }

    #[test]
    fn the_place_of_an_ambiguity_is_cut_for_the_logs() {
        let long = "k".repeat(500);
        let body = format!(r#"{{"{long}":{{"a":1,"A":2}}}}"#);
        let Ambiguous::FoldedTwice { at } = ambiguous(&body) else {
            panic!()
        };
        assert!(at.chars().count() <= MAX_AT + 2, "{at}");
    }
}
