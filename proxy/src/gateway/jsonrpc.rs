//! What the gateway needs to know about MCP messages, without I/O: the request's method, id,
//! tool name, declared URL-elicitation capability (from `initialize` in 2025-x, from `_meta`
//! per request in 2026-07-28) and any `requestState`; and, in responses (JSON or SSE, read
//! incrementally as they stream through), the outcome of a call and any `requestState` the
//! backend minted. Bodies are forwarded byte for byte; this only reads them.

use serde::Deserialize as _;
use serde_json::Value;
use serde_json::value::RawValue;

// Defined by the session binding, which reads the header; re-exported for the gateway.
pub use crate::bindings::session_binding::Version;

use super::envelope::{self, ArgumentKeys, CLIENT_CAPS, NotRead};

/// One inbound JSON-RPC message, as far as the gateway cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inbound {
    /// `method`, if a request or notification.
    pub method: Option<String>,
    /// `id` as JSON text, if a request.
    pub id: Option<String>,
    /// `params.name` of a `tools/call`.
    pub tool: Option<String>,
    /// `initialize` declared `capabilities.elicitation.url`.
    pub init_declares_url_elicitation: bool,
    /// 2026-07-28 `_meta` declared URL elicitation for this request.
    pub request_declares_url_elicitation: bool,
    /// `params.requestState`, if the client echoed one.
    pub request_state: Option<String>,
    /// `params` (kept to bind a `requestState` to the call it was minted for).
    pub params: Option<Value>,
    /// The body was one JSON object (serde_json's reading; anything else is the default).
    pub object: bool,
}

fn declares_url(caps: Option<&Value>) -> bool {
    caps.and_then(|c| c.get("elicitation"))
        .and_then(|e| e.get("url"))
        .is_some_and(Value::is_object)
}

/// Longest tool name kept for the audit trail, in characters: the MCP specification asks
/// for names of 1 to 128 characters.
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// The tool name as recorded: a caller controls it, and it goes into the stored trail, the
/// audit log line and the webhook queue (bounded by entries, not bytes), so a name of
/// megabytes is cut to [`MAX_TOOL_NAME_CHARS`] and marked with "…". The request itself is
/// forwarded unchanged.
pub fn tool_for_audit(name: &str) -> String {
    match name.char_indices().nth(MAX_TOOL_NAME_CHARS) {
        Some((cut, _)) => format!("{}…", name.get(..cut).unwrap_or_default()),
        None => name.to_owned(),
    }
}

/// Whether a body is a JSON-RPC batch: its first byte after JSON whitespace (and a UTF-8
/// byte-order mark, which lenient parsers skip) is `[`. Decided on the bytes, not on a
/// successful parse, so a batch no parser here accepts but a backend's might still counts.
/// MCP removed batching in 2025-06-18; the gateway refuses every batch (see SECURITY.md).
pub fn is_batch(body: &[u8]) -> bool {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    body.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .is_some_and(|&b| b == b'[')
}

/// Reads an inbound `/mcp` POST body, or says why the gateway will not (the body is not one
/// object serde_json reads completely, or a backend's reader could see other keys than the
/// gateway: see [`envelope`](super::envelope)). `arguments`: the keys the policy reads in
/// `params.arguments`.
pub fn read_request(body: &[u8], arguments: &ArgumentKeys) -> Result<Inbound, NotRead> {
    match envelope::read(body, arguments)? {
        Value::Object(msg) => Ok(inbound(msg)),
        // `envelope::read` only returns objects.
        _ => Err(NotRead::Unreadable(envelope::Unreadable::NotAnObject)),
    }
}

/// [`read_request`] without policy keys, for what it accepts; anything else is the default.
pub fn inspect_request(body: &[u8]) -> Inbound {
    read_request(body, &ArgumentKeys::default()).unwrap_or_default()
}

fn inbound(mut msg: serde_json::Map<String, Value>) -> Inbound {
    // Moved out, not cloned: the parsed message is dropped below.
    let owned = msg.remove("params");
    let params = owned.as_ref();
    let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
    let is = |m: &str| method.as_deref() == Some(m);
    Inbound {
        id: msg
            .get("id")
            .filter(|_| method.is_some())
            .map(Value::to_string),
        tool: if is("tools/call") {
            params
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .map(tool_for_audit)
        } else {
            None
        },
        init_declares_url_elicitation: is("initialize")
            && declares_url(params.and_then(|p| p.get("capabilities"))),
        request_declares_url_elicitation: declares_url(
            params
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(CLIENT_CAPS)),
        ),
        request_state: params
            .and_then(|p| p.get("requestState"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        params: owned,
        method,
        object: true,
    }
}

/// Why the gateway answers a request itself before anything else reads its body. Checked on
/// every `/mcp` request, with or without `[[policy]]`: the session and `requestState` bindings
/// and the audit trail see every call only if nothing can carry one past them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyRefusal {
    /// A method other than POST, GET and DELETE (only POST carries JSON-RPC messages).
    Method,
    /// A body on GET or DELETE: a backend that does not dispatch on the method could read a
    /// call in it.
    BodyWithoutPost,
    /// A POST body the gateway will not read ([`envelope`](super::envelope)).
    NotRead(NotRead),
    /// 2026-07-28 `Mcp-Method` / `Mcp-Name` say something other than the body, or come twice.
    MirroredHeaders,
    /// A `method` that is not a string (JSON-RPC 2.0 §4): the gateway would read no method
    /// and let it pass as a response, while a backend's reader may make one of it.
    MethodNotAString,
}

impl BodyRefusal {
    /// The `policy_decision` event's outcome.
    pub fn outcome(&self) -> &'static str {
        match self {
            BodyRefusal::Method => "refused_method",
            BodyRefusal::BodyWithoutPost => "refused_body",
            BodyRefusal::NotRead(NotRead::Unreadable(_)) => "refused_unreadable",
            BodyRefusal::NotRead(NotRead::Ambiguous(_)) => "refused_ambiguous_keys",
            BodyRefusal::MirroredHeaders => "refused_mirrored_headers",
            BodyRefusal::MethodNotAString => "refused_not_jsonrpc",
        }
    }

    /// What the audit event's `matched` says of it: the unreadable kind, or where the keys
    /// were ambiguous (never the keys: a caller's text).
    pub fn detail(&self) -> Option<String> {
        match self {
            BodyRefusal::NotRead(NotRead::Unreadable(u)) => Some(u.as_str().to_owned()),
            BodyRefusal::NotRead(NotRead::Ambiguous(a)) => Some(a.describe()),
            _ => None,
        }
    }

    /// The JSON-RPC id to answer with, as JSON text: the body's own when the ambiguity lies
    /// below the top level (so the top-level `id` is one exact key, read the same by everyone),
    /// else none (`null`, as JSON-RPC answers a request whose id it cannot tell).
    pub fn id(&self, body: &[u8]) -> Option<String> {
        let BodyRefusal::NotRead(NotRead::Ambiguous(a)) = self else {
            return None;
        };
        if a.at_top_level() {
            return None;
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(m)) => m.get("id").map(Value::to_string),
            _ => None,
        }
    }

    /// HTTP status, and the JSON-RPC error code and message of the answer (none for a wrong
    /// method).
    pub fn answer(&self) -> (http::StatusCode, Option<(i64, &'static str)>) {
        use http::StatusCode;
        match self {
            BodyRefusal::Method => (StatusCode::METHOD_NOT_ALLOWED, None),
            BodyRefusal::BodyWithoutPost => (
                StatusCode::BAD_REQUEST,
                Some((-32600, "GET and DELETE carry no body")),
            ),
            BodyRefusal::NotRead(NotRead::Unreadable(_)) => (
                StatusCode::BAD_REQUEST,
                Some((
                    -32700,
                    "the body is not one JSON object this server can read (UTF-8, no byte-order mark, no lone surrogate, nothing after it)",
                )),
            ),
            BodyRefusal::NotRead(NotRead::Ambiguous(_)) => (
                StatusCode::BAD_REQUEST,
                Some((
                    -32600,
                    "the request has object keys that differ only in case, or spells a key this server reads in another case or with escapes; send each key once, as MCP spells it",
                )),
            ),
            BodyRefusal::MirroredHeaders => (
                StatusCode::BAD_REQUEST,
                Some((
                    HEADER_MISMATCH,
                    "Mcp-Method or Mcp-Name does not say what the body says",
                )),
            ),
            BodyRefusal::MethodNotAString => (
                StatusCode::BAD_REQUEST,
                Some((-32600, "a JSON-RPC method is a string")),
            ),
        }
    }
}

/// JSON-RPC error of a mirrored header that disagrees with the body (MCP 2026-07-28).
pub const HEADER_MISMATCH: i64 = -32020;

/// The checks every `/mcp` request's method and body pass before anything else reads it: the
/// message as the gateway reads it, or why it is answered here. A batch is left to the handle
/// checks (its own refusal); GET and DELETE read as the default message.
pub fn admit(
    method: &http::Method,
    headers: &http::HeaderMap,
    body: &[u8],
    arguments: &ArgumentKeys,
) -> Result<Inbound, BodyRefusal> {
    use http::Method;
    if *method != Method::POST {
        if !matches!(*method, Method::GET | Method::DELETE) {
            return Err(BodyRefusal::Method);
        }
        if !body.is_empty() {
            return Err(BodyRefusal::BodyWithoutPost);
        }
        return Ok(Inbound::default());
    }
    if is_batch(body) {
        return Ok(Inbound::default());
    }
    let inbound = read_request(body, arguments).map_err(BodyRefusal::NotRead)?;
    if inbound.method.is_none() && has_method_key(body) {
        return Err(BodyRefusal::MethodNotAString);
    }
    if mirrors_disagree(headers, &inbound) {
        return Err(BodyRefusal::MirroredHeaders);
    }
    Ok(inbound)
}

/// Whether the top-level object has a `method` member (the body was already read, so it is
/// one object whose keys are spelled exactly once).
fn has_method_key(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(default, deserialize_with = "present")]
        method: bool,
    }
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| true)
    }
    use serde::Deserialize;
    serde_json::from_slice::<Probe>(body).is_ok_and(|p| p.method)
}

/// Whether a 2026-07-28 client's mirrored `Mcp-Method` / `Mcp-Name` headers, when present,
/// say something other than the body, or come more than once (`Mcp-Name` mirrors
/// `params.name` of `tools/call` and `prompts/get`, `params.uri` of `resources/read`,
/// `params.taskId` of `tasks/*`; a non-ASCII value comes as `=?base64?…?=`). A backend or an
/// intermediary routing on them would act on something other than what the gateway decided.
fn mirrors_disagree(headers: &http::HeaderMap, inbound: &Inbound) -> bool {
    let decoded = |v: &http::HeaderValue| -> Option<String> {
        let text = v.to_str().ok()?;
        match text
            .strip_prefix("=?base64?")
            .and_then(|r| r.strip_suffix("?="))
        {
            Some(b64) => String::from_utf8(crate::crypto::b64_decode(b64)?).ok(),
            None => Some(text.to_owned()),
        }
    };
    let field = |name: &str| {
        inbound
            .params
            .as_ref()
            .and_then(|p| p.get(name))
            .and_then(Value::as_str)
    };
    // One value each: a repeated header could say one thing here and another to the backend.
    let one = |name: &str| -> Result<Option<Option<String>>, ()> {
        let mut all = headers.get_all(name).iter();
        match (all.next(), all.next()) {
            (None, _) => Ok(None),
            (Some(v), None) => Ok(Some(decoded(v))),
            (Some(_), Some(_)) => Err(()),
        }
    };
    let (Ok(method_header), Ok(name_header)) = (one("mcp-method"), one("mcp-name")) else {
        return true;
    };
    let method_differs = method_header.is_some_and(|m| m.as_deref() != inbound.method.as_deref());
    // What `Mcp-Name` mirrors, by method (MCP 2026-07-28); other methods have none to check.
    let named = match inbound.method.as_deref() {
        Some("tools/call" | "prompts/get") => Some(field("name")),
        Some("resources/read") => Some(field("uri")),
        Some(m) if m.starts_with("tasks/") => Some(field("taskId")),
        _ => None,
    };
    let name_differs = match (name_header, named) {
        (Some(sent), Some(body)) => sent.as_deref() != body,
        _ => false,
    };
    method_differs || name_differs
}

/// What became of a forwarded call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result.
    Ok,
    /// A tool result with `isError: true`.
    ToolError,
    /// A JSON-RPC error.
    Error,
    /// An `input_required` result (2026-07-28).
    InputRequired,
}

impl Outcome {
    /// For audit.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::Error => "error",
            Outcome::InputRequired => "input_required",
        }
    }
}

/// Something seen in a response message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The response to request `id`, with its outcome.
    Response {
        /// JSON text of the id.
        id: String,
        /// Outcome.
        outcome: Outcome,
    },
    /// The backend minted a `requestState` the client will echo back.
    RequestState(String),
}

/// The parts of a response message [`inspect_response`] reads, borrowed from it: everything
/// else (a tool's whole output) is skipped by the parser, never built into a tree.
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default, deserialize_with = "present")]
    method: bool,
    #[serde(default, borrow, deserialize_with = "raw")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    result: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// The parts of a `result` object [`inspect_response`] reads.
#[derive(serde::Deserialize)]
struct PeekResult {
    #[serde(default, rename = "requestState")]
    request_state: Option<Value>,
    #[serde(default, rename = "resultType")]
    result_type: Option<Value>,
    #[serde(default, rename = "isError")]
    is_error: Option<Value>,
}

/// A key present with any value, `null` included (as `Map::get(..).is_some()` reads it).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// A key present with any value, `null` included, as its text.
fn raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Whether JSON text is an object (its first byte, the text being valid JSON).
fn is_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// Reads one outbound JSON-RPC message. The usual shape (one object, each key once) is read
/// without building the message ([`Peek`]); what that reader refuses (a repeated key, for
/// one) is read as a `Value`, with the same rules, so both readings agree on every input
/// (see the tests).
pub fn inspect_response(msg: &[u8]) -> Vec<Seen> {
    let text = std::str::from_utf8(msg).unwrap_or_default();
    if !is_object(text) {
        // Not an object: nothing to read (and a derived struct would accept an array).
        return Vec::new();
    }
    match serde_json::from_str::<Peek<'_>>(text).and_then(peeked) {
        Ok(seen) => seen,
        Err(_) => inspect_response_value(msg),
    }
}

fn peeked(p: Peek<'_>) -> Result<Vec<Seen>, serde_json::Error> {
    let mut out = Vec::new();
    if p.method {
        return Ok(out); // a notification or a server request, not a response
    }
    let Some(id) = p.id else {
        return Ok(out);
    };
    // The id's text as serde_json writes a `Value` (so `1.0` and `"\u0061"` read as the
    // request's own id does).
    let id = serde_json::from_str::<Value>(id.get())?.to_string();
    let outcome = match (p.result, p.error) {
        (_, true) => Outcome::Error,
        (Some(r), false) => {
            // A `result` that is no object has none of these (as `Value::get` reads it).
            let r = if is_object(r.get()) {
                serde_json::from_str::<PeekResult>(r.get())?
            } else {
                PeekResult {
                    request_state: None,
                    result_type: None,
                    is_error: None,
                }
            };
            if let Some(state) = r.request_state.as_ref().and_then(Value::as_str) {
                out.push(Seen::RequestState(state.to_owned()));
            }
            if r.result_type.as_ref().and_then(Value::as_str) == Some("input_required") {
                Outcome::InputRequired
            } else if r.is_error.as_ref().and_then(Value::as_bool) == Some(true) {
                Outcome::ToolError
            } else {
                Outcome::Ok
            }
        }
        (None, false) => return Ok(out),
    };
    out.push(Seen::Response { id, outcome });
    Ok(out)
}

/// [`inspect_response`] on a parsed `Value` (later duplicate keys win, as serde_json's map).
fn inspect_response_value(msg: &[u8]) -> Vec<Seen> {
    let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(msg) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if m.get("method").is_some() {
        return out; // a notification or a server request, not a response
    }
    let Some(id) = m.get("id").map(Value::to_string) else {
        return out;
    };
    let outcome = match (m.get("result"), m.get("error")) {
        (_, Some(_)) => Outcome::Error,
        (Some(r), None) => {
            if let Some(state) = r.get("requestState").and_then(Value::as_str) {
                out.push(Seen::RequestState(state.to_owned()));
            }
            if r.get("resultType").and_then(Value::as_str) == Some("input_required") {
                Outcome::InputRequired
            } else if r.get("isError").and_then(Value::as_bool) == Some(true) {
                Outcome::ToolError
            } else {
                Outcome::Ok
            }
        }
        (None, None) => return out,
    };
    out.push(Seen::Response { id, outcome });
    out
}

/// Largest SSE event or JSON body the scanner keeps to read (larger ones stream through
/// unread).
const MAX_EVENT: usize = 1 << 20;

/// Reads a response incrementally as it streams: SSE events as they complete, or a whole
/// JSON body at the end. Holds at most `MAX_EVENT` bytes of one event (or body); a larger one
/// streams through unread, and scanning resumes exactly at the next event boundary.
#[derive(Debug)]
pub struct Scanner {
    sse: bool,
    buf: Vec<u8>,
    /// Inside an oversized event: skipping until its blank line.
    skipping: bool,
    /// JSON body too large to read.
    overflow: bool,
    /// How much of `buf` is known to hold no event boundary (so each byte is searched once).
    searched: usize,
}

impl Scanner {
    /// For a response with this content type.
    pub fn new(content_type: Option<&str>) -> Scanner {
        let sse = content_type.is_some_and(|c| {
            c.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
        Scanner {
            sse,
            buf: Vec::new(),
            skipping: false,
            overflow: false,
            searched: 0,
        }
    }

    /// Feeds a chunk; returns what completed events revealed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Seen> {
        if !self.sse {
            if !self.overflow {
                self.buf.extend_from_slice(chunk);
                if self.buf.len() > MAX_EVENT {
                    self.overflow = true;
                    self.buf = Vec::new();
                }
            }
            return Vec::new();
        }
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        // Split into events first, so the size limit applies per event, not per chunk. Each
        // byte is searched once (a boundary may straddle old and new bytes: look 3 back), and
        // consumed events are removed once per chunk, not once per event.
        let mut start = 0;
        let mut from = self.searched.saturating_sub(3);
        while let Some(len) = find_boundary(self.buf.get(from..).unwrap_or_default()) {
            let end = from + len;
            let event = self.buf.get(start..end).unwrap_or_default();
            if self.skipping {
                // The end of the oversized event: resume with the next one.
                self.skipping = false;
            } else if event.len() <= MAX_EVENT {
                out.extend(inspect_response(&sse_data(event)));
            }
            start = end;
            from = end;
        }
        self.buf.drain(..start);
        self.searched = self.buf.len();
        if self.buf.len() > MAX_EVENT {
            // An event larger than the limit: drop what we hold, keeping the last three bytes
            // in case its terminating blank line straddles the next chunk.
            self.skipping = true;
            let keep = self.buf.split_off(self.buf.len() - 3);
            self.buf = keep;
            self.searched = self.buf.len();
        }
        out
    }

    /// The stream ended; returns what a JSON body revealed.
    pub fn finish(&mut self) -> Vec<Seen> {
        if self.sse || self.overflow {
            return Vec::new();
        }
        inspect_response(&std::mem::take(&mut self.buf))
    }
}

/// Index just past the first blank line (`\n\n` or `\r\n\r\n`), the end of an SSE event.
/// One pass: stops at the first line end followed by another.
fn find_boundary(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(off) = b.get(i..)?.iter().position(|&c| c == b'\n') {
        let nl = i + off;
        match (b.get(nl + 1), b.get(nl + 2)) {
            (Some(b'\n'), _) => return Some(nl + 2),
            (Some(b'\r'), Some(b'\n')) => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

/// The concatenated `data:` lines of one SSE event.
fn sse_data(event: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(event);
    let mut data = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    data.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_that_is_not_a_string_is_refused_and_a_response_is_not() {
        let admit_post = |b: &str| {
            admit(
                &http::Method::POST,
                &http::HeaderMap::new(),
                b.as_bytes(),
                &ArgumentKeys::default(),
            )
        };
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":5,"params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":{"a":"tools/call"}}"#,
        ] {
            let r = admit_post(body);
            assert!(
                matches!(r, Err(BodyRefusal::MethodNotAString)),
                "{body}: {:?}",
                r.map(|i| i.method)
            );
        }
        let response = admit_post(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(response.map(|i| i.method).ok(), Some(None));
        assert_eq!(
            BodyRefusal::MethodNotAString.answer().1.map(|a| a.0),
            Some(-32600)
        );
    }

    /// Messages where a shortcut reading could differ from the `Value` one.
    const TRICKY: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"id":7,"result":null}"#,
        r#"{"id":null,"result":{}}"#,
        r#"{"id":1.0,"result":{"isError":true}}"#,
        r#"{"id":"\u0061b","result":{"isError":"true"}}"#,
        r#"{"id":7,"result":[null,"input_required",true]}"#,
        r#"{"id":7,"result":5}"#,
        r#"{"id":7,"result":"x"}"#,
        r#"{"id":7,"error":null}"#,
        r#"{"id":7,"error":{"code":1},"result":{"requestState":"s"}}"#,
        r#"{"id":7,"method":null,"result":{}}"#,
        r#"{"m\u0065thod":"x","id":7,"result":{}}"#,
        r#"{"id":7,"id":8,"result":{}}"#,
        r#"{"id":7,"result":{"isError":false,"isError":true}}"#,
        r#"{"id":7,"result":{"requestState":"a","requestState":"b"}}"#,
        r#"{"id":7,"result":{"resultType":"input_required","requestState":"st"}}"#,
        r#"{"id":7,"result":{"requestState":{"nested":1}}}"#,
        r#"{"id":7,"result":{}} trailing"#,
        r#"[{"id":7,"result":{}}]"#,
        r#"[]"#,
        r#"  {"id":7,"result":{"isError":true}}  "#,
        r#"{"result":{"isError":true}}"#,
        "\u{feff}{\"id\":7,\"result\":{}}",
        r#"{"id":7,"result":{"is\u0045rror":true}}"#,
        "",
        "nope",
    ];

    #[test]
    fn the_shortcut_reads_every_response_as_the_value_reading_does() {
        for m in TRICKY {
            assert_eq!(
                inspect_response(m.as_bytes()),
                inspect_response_value(m.as_bytes()),
                "{m}"
            );
        }
        assert_eq!(
            inspect_response(TRICKY[0].as_bytes()),
            [Seen::Response {
                id: "7".into(),
                outcome: Outcome::Ok
            }]
        );
    }

    proptest::proptest! {
        #[test]
        fn the_shortcut_agrees_with_the_value_reading_on_generated_messages(
            keys in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["method", "id", "result", "error", "jsonrpc", "x", "m\\u0065thod"]),
                    proptest::sample::select(vec![
                        "null", "7", "1.0", "\"a\"", "\"\\u0061\"", "true", "[]", "[1,true]", "{}",
                        r#"{"isError":true}"#, r#"{"isError":1}"#, r#"{"resultType":"input_required"}"#,
                        r#"{"requestState":"s","isError":true}"#, r#"{"requestState":null}"#,
                        r#"{"isError":true,"isError":false}"#, r#"{"content":[{"text":"x"}],"isError":true}"#,
                    ]),
                ),
                0..5,
            )
        ) {
            let body: Vec<String> = keys.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let msg = format!("{{{}}}", body.join(","));
            proptest::prop_assert_eq!(
                inspect_response(msg.as_bytes()),
                inspect_response_value(msg.as_bytes()),
                "{}", msg
            );
        }
    }

    #[test]
    fn initialize_capabilities_are_read() {
        let url = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"elicitation":{"form":{},"url":{}}}}}"#;
        assert!(inspect_request(url).init_declares_url_elicitation);
        let form_only = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#;
        assert!(!inspect_request(form_only).init_declares_url_elicitation);
    }

    #[test]
    fn megabyte_tool_name_is_cut_for_the_audit_trail_at_a_character_boundary() {
        let long = "é".repeat(1_000_000);
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": long}})
        .to_string();
        let tool = inspect_request(body.as_bytes()).tool.unwrap();
        assert_eq!(tool.chars().count(), MAX_TOOL_NAME_CHARS + 1);
        assert!(tool.ends_with('…'));
        assert!(tool.starts_with("éé"));
        let exact = "t".repeat(MAX_TOOL_NAME_CHARS);
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": exact}})
        .to_string();
        assert_eq!(
            inspect_request(body.as_bytes()).tool.as_deref(),
            Some(exact.as_str())
        );
    }

    #[test]
    fn per_request_capabilities_and_tool_name() {
        let m = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"whoami","requestState":"rs","_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}}}"#;
        let i = inspect_request(m);
        assert_eq!(i.tool.as_deref(), Some("whoami"));
        assert_eq!(i.id.as_deref(), Some("\"a\""));
        assert!(i.request_declares_url_elicitation);
        assert_eq!(i.request_state.as_deref(), Some("rs"));
    }

    #[test]
    fn batches_are_recognised_on_the_bytes() {
        for batch in [
            &b"[]"[..],
            b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            b" \r\n\t[{}]",
            b"\xef\xbb\xbf[{}]",
            b"[{\"unterminated\"",
        ] {
            assert!(is_batch(batch), "{:?}", String::from_utf8_lossy(batch));
        }
        for single in [
            &b""[..],
            b"   ",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":[1]}}",
            b"\"[\"",
            b"x[",
        ] {
            assert!(!is_batch(single), "{:?}", String::from_utf8_lossy(single));
        }
    }

    #[test]
    fn garbage_is_harmless() {
        assert_eq!(inspect_request(b"[1,2]"), Inbound::default());
        assert_eq!(inspect_request(b"\xff\xfe"), Inbound::default());
        assert!(inspect_response(b"nope").is_empty());
    }

    #[test]
    fn sse_events_split_across_chunks() {
        let mut s = Scanner::new(Some("text/event-stream"));
        assert!(s.feed(b"id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n").is_empty());
        assert!(
            s.feed(b"id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,")
                .is_empty()
        );
        let seen = s.feed(b"\"result\":{\"isError\":true}}\n\n");
        assert_eq!(
            seen,
            vec![Seen::Response {
                id: "7".into(),
                outcome: Outcome::ToolError
            }]
        );
    }

    #[test]
    fn json_body_read_at_the_end() {
        let mut s = Scanner::new(Some("application/json"));
        assert!(
            s.feed(br#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"input_required","#)
                .is_empty()
        );
        assert!(s.feed(br#""requestState":"abc"}}"#).is_empty());
        let seen = s.finish();
        assert!(seen.contains(&Seen::RequestState("abc".into())));
        assert!(seen.contains(&Seen::Response {
            id: "3".into(),
            outcome: Outcome::InputRequired
        }));
    }

    #[test]
    fn oversized_event_is_skipped_and_scanning_resumes() {
        let mut s = Scanner::new(Some("text/event-stream"));
        let big = vec![b'x'; MAX_EVENT + 10];
        assert!(s.feed(&big).is_empty());
        let seen = s.feed(b"\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{}}\n\n");
        assert_eq!(
            seen,
            vec![Seen::Response {
                id: "1".into(),
                outcome: Outcome::Error
            }]
        );
    }
}
