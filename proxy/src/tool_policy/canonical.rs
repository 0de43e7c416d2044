//! What a call's arguments are, independent of how they were written: the canonical digest an
//! approval is bound to, and the duplicate-key check that keeps the matcher and the backend
//! looking at the same document.

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Canonical digest of a call's arguments: JSON with object keys sorted at every depth, no
/// whitespace, SHA-256, base64url. Absent arguments, `null` and `{}` are the same call.
pub fn arguments_digest(arguments: Option<&Value>) -> String {
    let mut out = String::new();
    match arguments {
        None | Some(Value::Null) => out.push_str("{}"),
        Some(v) => canonical(v, &mut out),
    }
    crate::crypto::b64url(&crate::crypto::sha256(out.as_bytes()))
}

/// Sorted keys at every depth whatever serde_json's map type is (it preserves insertion
/// order when some crate in the tree turns on `preserve_order`).
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(k, out);
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        Value::String(s) => string(s, out),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
    }
}

fn string(s: &str, out: &mut String) {
    // serde_json's escaping of a plain string cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Whether `body` (JSON text) has an object with a repeated key anywhere, keys compared after
/// unescaping (`"a"` and `"\u0061"` are the same key). serde_json keeps the last duplicate and
/// other parsers the first, so a rule could check a value the backend never sees: the gateway
/// refuses such bodies. Text that is not JSON answers `false` (the gateway's own parse refuses
/// it).
pub fn has_duplicate_keys(body: &[u8]) -> bool {
    let mut de = serde_json::Deserializer::from_slice(body);
    match Dup::deserialize(&mut de) {
        Ok(Dup(found)) => de.end().is_ok() && found,
        Err(_) => false,
    }
}

/// A JSON value walked for repeated keys: `Dup(true)` when some object in it has one.
struct Dup(bool);

impl<'de> Deserialize<'de> for Dup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DupVisitor)
    }
}

struct DupVisitor;

impl<'de> Visitor<'de> for DupVisitor {
    type Value = Dup;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Dup, E> {
        Ok(Dup(false))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Dup, E> {
        Ok(Dup(false))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Dup, E> {
        Ok(Dup(false))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Dup, E> {
        Ok(Dup(false))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Dup, E> {
        Ok(Dup(false))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Dup, E> {
        Ok(Dup(false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dup, A::Error> {
        let mut found = false;
        while let Some(Dup(d)) = seq.next_element()? {
            found |= d;
        }
        Ok(Dup(found))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Dup, A::Error> {
        let mut keys = HashSet::new();
        let mut found = false;
        while let Some(key) = map.next_key::<String>()? {
            found |= !keys.insert(key);
            let Dup(d) = map.next_value()?;
            found |= d;
        }
        Ok(Dup(found))
    }
}
