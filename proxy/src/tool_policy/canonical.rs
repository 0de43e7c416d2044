//! What a call's arguments are, independent of how they were written: the canonical digest an
//! approval is bound to.

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
