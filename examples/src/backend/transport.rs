//! Streamable HTTP on `/mcp`: recording, authentication, protocol-version rules (2025-x
//! sessions or 2026-07-28 stateless), JSON-RPC dispatch, the choice between a JSON and an SSE
//! answer, and (exchange mode) relaying a connect-link refusal the way the client can take it.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use base64::prelude::{BASE64_STANDARD, Engine as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::exchange::Refusal;
use super::relay::{self, Relay};
use super::sse::{self, Standalone};
use super::tools::{self, INVALID_PARAMS, Outcome, RpcError};
use super::{App, BackendRequest, MCP_PATH, Session};

const MAX_BODY: usize = 1 << 20;

/// Versions answered with 2025 rules (sessions, GET stream, DELETE).
const SESSION_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
/// Assumed when the `MCP-Protocol-Version` header is absent.
const DEFAULT_VERSION: &str = "2025-03-26";
/// Offered at `initialize` when the client asks for a version it does not know.
const LATEST_SESSION_VERSION: &str = "2025-11-25";
/// Stateless rules.
const STATELESS_VERSION: &str = "2026-07-28";

const SESSION_HEADER: &str = "mcp-session-id";

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
/// What the TypeScript SDK answers for transport-level refusals.
const SERVER_ERROR: i64 = -32000;
const SESSION_NOT_FOUND: i64 = -32001;
const HEADER_MISMATCH: i64 = -32020;
const UNSUPPORTED_VERSION: i64 = -32022;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// One of [`SESSION_VERSIONS`].
    Session(&'static str),
    Stateless,
}

/// Who is asking: the rules of its version, and how it can hear about a connect link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Caller {
    version: Version,
    relay: Relay,
}

/// The single handler: read, record, then answer.
pub(crate) async fn handle(State(app): State<App>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let (body, too_large) = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => (body, false),
        Err(_) => (Bytes::new(), true),
    };
    app.lock().requests.push(record(&parts, &body));
    if parts.uri.path() != MCP_PATH {
        return plain_json(StatusCode::NOT_FOUND, json!({"error": "not found"}));
    }
    if too_large {
        return plain_json(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": "body too large"}),
        );
    }
    let Some(token) = bearer(&parts.headers) else {
        return plain_json(StatusCode::UNAUTHORIZED, json!({"error": "missing token"}));
    };
    let version = match version(&parts.headers) {
        Ok(v) => v,
        Err(requested) => {
            let id = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|m| m.get("id").cloned())
                .unwrap_or(Value::Null);
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                &id,
                UNSUPPORTED_VERSION,
                "Unsupported protocol version",
                Some(json!({
                    "supported": [SESSION_VERSIONS[0], SESSION_VERSIONS[1], SESSION_VERSIONS[2], STATELESS_VERSION],
                    "requested": requested,
                })),
            );
        }
    };
    match parts.method {
        Method::POST => post(app, &parts.headers, &body, token, version).await,
        Method::GET => get(app, &parts.headers, version),
        Method::DELETE => delete(&app, &parts.headers, version),
        _ => method_not_allowed(version),
    }
}

fn record(parts: &Parts, body: &Bytes) -> BackendRequest {
    BackendRequest {
        method: parts.method.as_str().to_owned(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(body).into_owned(),
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The token of `Authorization: Bearer <token>`. Not validated: GitHub does that.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let (scheme, token) = header_str(headers, "authorization")?.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// The rules to apply, or `Err(requested)` for an unsupported version.
fn version(headers: &HeaderMap) -> Result<Version, String> {
    let Some(value) = headers.get("mcp-protocol-version") else {
        return Ok(Version::Session(DEFAULT_VERSION));
    };
    let value = String::from_utf8_lossy(value.as_bytes()).trim().to_owned();
    if value == STATELESS_VERSION {
        return Ok(Version::Stateless);
    }
    SESSION_VERSIONS
        .iter()
        .find(|v| **v == value)
        .map(|v| Version::Session(v))
        .ok_or(value)
}

/// Media types listed in `Accept` (parameters dropped, lower-case).
fn accepted(headers: &HeaderMap) -> Option<Vec<String>> {
    let all: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| {
            t.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|t| !t.is_empty())
        .collect();
    (!all.is_empty()).then_some(all)
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    accepted(headers).is_some_and(|types| types.iter().any(|t| t == "text/event-stream"))
}

fn accepts_json(headers: &HeaderMap) -> bool {
    accepted(headers).is_none_or(|types| {
        types
            .iter()
            .any(|t| matches!(t.as_str(), "application/json" | "application/*" | "*/*"))
    })
}

/// A mirrored header value; non-ASCII values arrive as `=?base64?<base64>?=`.
fn mirrored(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = header_str(headers, name)?;
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(BASE64_STANDARD.decode(b64).ok()?).ok(),
        None => Some(value.to_owned()),
    }
}

// ---------------------------------------------------------------- responses

fn plain_json(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn rpc_error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let (Some(data), Some(obj)) = (data, error.as_object_mut()) {
        obj.insert("data".to_owned(), data);
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

fn rpc_error_response(
    status: StatusCode,
    id: &Value,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Response {
    plain_json(status, rpc_error(id, code, message, data))
}

fn method_not_allowed(version: Version) -> Response {
    let allow = match version {
        Version::Session(_) => "GET, POST, DELETE",
        Version::Stateless => "POST",
    };
    let mut resp = rpc_error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        &Value::Null,
        SERVER_ERROR,
        "Method not allowed",
        None,
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// How to answer one JSON-RPC request: JSON or SSE, and with which event ids.
struct Replier {
    app: App,
    sse: bool,
    event_ids: Arc<AtomicU64>,
    extra: Vec<(HeaderName, HeaderValue)>,
    /// 2026-07-28: every result names its `resultType` (`complete` unless it says otherwise).
    stateless: bool,
}

impl Replier {
    fn new(app: &App, headers: &HeaderMap, event_ids: Arc<AtomicU64>) -> Self {
        let sse = accepts_sse(headers) && (app.config.prefer_sse || !accepts_json(headers));
        Self {
            app: app.clone(),
            sse,
            event_ids,
            extra: Vec::new(),
            stateless: false,
        }
    }

    /// One JSON-RPC message: a JSON body, or an SSE stream with just that event.
    fn send(self, message: Value) -> Response {
        if self.sse {
            return sse::response(sse::single(self.app, self.event_ids, message), &self.extra);
        }
        let mut resp = plain_json(StatusCode::OK, message);
        for (name, value) in self.extra {
            resp.headers_mut().insert(name, value);
        }
        resp
    }

    fn result(self, id: &Value, mut result: Value) -> Response {
        if self.stateless
            && let Some(fields) = result.as_object_mut()
        {
            fields
                .entry("resultType")
                .or_insert_with(|| Value::from("complete"));
        }
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    fn error(self, id: &Value, err: &RpcError) -> Response {
        self.send(rpc_error(id, err.code, &err.message, err.data.clone()))
    }
}

// ---------------------------------------------------------------- POST

/// Which kind of JSON-RPC message a POST carried.
enum Message {
    Request { id: Value, method: String },
    Notification { method: String },
    Response,
}

fn classify(msg: &Value) -> Message {
    let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
    let id = msg.get("id").filter(|id| !id.is_null()).cloned();
    match (method, id) {
        (Some(method), Some(id)) => Message::Request { id, method },
        (Some(method), None) => Message::Notification { method },
        (None, _) => Message::Response,
    }
}

async fn post(
    app: App,
    headers: &HeaderMap,
    body: &Bytes,
    token: String,
    version: Version,
) -> Response {
    if !accepts_json(headers) && !accepts_sse(headers) {
        return rpc_error_response(
            StatusCode::NOT_ACCEPTABLE,
            &Value::Null,
            SERVER_ERROR,
            "Not Acceptable: the client must accept application/json or text/event-stream",
            None,
        );
    }
    let msg: Value = match serde_json::from_slice(body) {
        Ok(msg) => msg,
        Err(err) => {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: {err}"),
                None,
            );
        }
    };
    if !msg.is_object() {
        let why = if msg.is_array() {
            "Invalid Request: batches are not supported, send one JSON-RPC message per POST"
        } else {
            "Invalid Request: expected a JSON-RPC message object"
        };
        return rpc_error_response(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            INVALID_REQUEST,
            why,
            None,
        );
    }
    let kind = classify(&msg);
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    match version {
        Version::Stateless => post_stateless(app, headers, kind, &params, &token).await,
        Version::Session(v) => post_session(app, headers, kind, &params, &token, v).await,
    }
}

/// 2026-07-28: no sessions; the mirrored headers must match the body.
async fn post_stateless(
    app: App,
    headers: &HeaderMap,
    kind: Message,
    params: &Value,
    token: &str,
) -> Response {
    let (id, method) = match &kind {
        Message::Request { id, method } => (id.clone(), method.as_str()),
        Message::Notification { method } => (Value::Null, method.as_str()),
        Message::Response => return StatusCode::ACCEPTED.into_response(),
    };
    if let Err(why) = check_mirrored(headers, method, params) {
        return rpc_error_response(
            StatusCode::BAD_REQUEST,
            &id,
            HEADER_MISMATCH,
            &format!("Header mismatch: {why}"),
            None,
        );
    }
    if matches!(kind, Message::Notification { .. }) {
        return StatusCode::ACCEPTED.into_response();
    }
    // No session: event ids only need to be unique within this stream.
    let mut replier = Replier::new(&app, headers, Arc::new(AtomicU64::new(0)));
    replier.stateless = true;
    let caller = Caller {
        version: Version::Stateless,
        relay: Relay::for_stateless(params),
    };
    dispatch(app, headers, replier, &id, method, params, token, caller).await
}

/// `Mcp-Method` must equal the method; `Mcp-Name` must equal `params.name` (or `params.uri`)
/// where the spec mirrors it; a `_meta` protocol version, if present, must equal the header.
fn check_mirrored(headers: &HeaderMap, method: &str, params: &Value) -> Result<(), String> {
    match mirrored(headers, "mcp-method") {
        None => return Err("the Mcp-Method header is required".to_owned()),
        Some(h) if h != method => {
            return Err(format!(
                "Mcp-Method {h:?} but the body's method is {method:?}"
            ));
        }
        Some(_) => {}
    }
    let named = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(field) = named {
        let in_body = params.get(field).and_then(Value::as_str);
        match (mirrored(headers, "mcp-name"), in_body) {
            (None, _) => return Err(format!("the Mcp-Name header is required for {method}")),
            (Some(h), Some(b)) if h == b => {}
            (Some(h), b) => {
                return Err(format!("Mcp-Name {h:?} but params.{field} is {b:?}"));
            }
        }
    }
    let meta_version = params
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    if let Some(v) = meta_version
        && v != STATELESS_VERSION
    {
        return Err(format!(
            "MCP-Protocol-Version {STATELESS_VERSION:?} but _meta says {v:?}"
        ));
    }
    Ok(())
}

/// 2025-x: `initialize` opens a session; everything else needs a known one.
async fn post_session(
    app: App,
    headers: &HeaderMap,
    kind: Message,
    params: &Value,
    token: &str,
    header_version: &'static str,
) -> Response {
    if let Message::Request { id, method } = &kind
        && method == "initialize"
    {
        return initialize(&app, headers, id, params, header_version);
    }
    let id = match &kind {
        Message::Request { id, .. } => id.clone(),
        _ => Value::Null,
    };
    let found = match session(&app, headers, &id) {
        Ok(found) => found,
        Err(resp) => return *resp,
    };
    let Message::Request { method, .. } = &kind else {
        return StatusCode::ACCEPTED.into_response();
    };
    let replier = Replier::new(&app, headers, found.event_ids);
    let caller = Caller {
        version: Version::Session(header_version),
        relay: Relay::for_session(
            header_version,
            &found.protocol_version,
            found.elicitation_url,
        ),
    };
    dispatch(app, headers, replier, &id, method, params, token, caller).await
}

/// What a request needs from its session.
struct FoundSession {
    event_ids: Arc<AtomicU64>,
    protocol_version: String,
    elicitation_url: bool,
}

/// The session of the request, or the 400/404 answer.
fn session(app: &App, headers: &HeaderMap, id: &Value) -> Result<FoundSession, Box<Response>> {
    let Some(session_id) = header_str(headers, SESSION_HEADER) else {
        return Err(Box::new(rpc_error_response(
            StatusCode::BAD_REQUEST,
            id,
            SERVER_ERROR,
            "Bad Request: Mcp-Session-Id header is required",
            None,
        )));
    };
    let st = app.lock();
    let Some(session) = st.sessions.get(session_id) else {
        return Err(Box::new(rpc_error_response(
            StatusCode::NOT_FOUND,
            id,
            SESSION_NOT_FOUND,
            "Session not found",
            None,
        )));
    };
    tracing::trace!(
        session_id,
        version = %session.protocol_version,
        elicitation_url = session.elicitation_url,
        "demo backend: session request"
    );
    Ok(FoundSession {
        event_ids: session.event_ids.clone(),
        protocol_version: session.protocol_version.clone(),
        elicitation_url: session.elicitation_url,
    })
}

fn initialize(
    app: &App,
    headers: &HeaderMap,
    id: &Value,
    params: &Value,
    header_version: &'static str,
) -> Response {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let agreed = requested
        .and_then(|r| SESSION_VERSIONS.iter().find(|v| **v == r))
        .copied()
        .unwrap_or(LATEST_SESSION_VERSION);
    let elicitation_url = params
        .get("capabilities")
        .is_some_and(relay::declares_url_elicitation);
    let session_id = super::random_hex(16);
    let session = Session::new(agreed.to_owned(), elicitation_url);
    let event_ids = session.event_ids.clone();
    app.lock().sessions.insert(session_id.clone(), session);
    tracing::debug!(%session_id, agreed, header_version, elicitation_url, "demo backend: new session");
    let mut replier = Replier::new(app, headers, event_ids);
    if let Ok(value) = HeaderValue::from_str(&session_id) {
        replier
            .extra
            .push((HeaderName::from_static(SESSION_HEADER), value));
    }
    replier.result(
        id,
        json!({
            "protocolVersion": agreed,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mcp-oauth-proxy demo backend", "version": "0.1.0"},
            "instructions": "Tools: whoami, list_repos, create_issue, create_branch, delete_repo, slow_count.",
        }),
    )
}

#[allow(clippy::too_many_arguments)] // one place that needs the whole request context
async fn dispatch(
    app: App,
    headers: &HeaderMap,
    replier: Replier,
    id: &Value,
    method: &str,
    params: &Value,
    token: &str,
    caller: Caller,
) -> Response {
    let tool = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if method == "tools/call"
        && caller.version == Version::Stateless
        && let Some(state) = params.get("requestState")
    {
        // The retry of a call refused with `input_required`: the state must be one we minted
        // for this tool, and it is used up. The tool then runs (and exchanges) again.
        let now = tokio::time::Instant::now();
        let known = state
            .as_str()
            .is_some_and(|s| app.lock().request_states.take(s, tool, now));
        if !known {
            return replier.error(id, &RpcError::new(INVALID_PARAMS, "unknown requestState"));
        }
    }
    match method {
        "ping" => replier.result(id, json!({})),
        // 2026-07-28's connect-time probe (what a client pinned to it sends first): the
        // versions and capabilities `initialize` told older clients, never cached for others.
        "server/discover" if caller.version == Version::Stateless => replier.result(
            id,
            json!({
                "supportedVersions": [STATELESS_VERSION],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "mcp-oauth-proxy demo backend", "version": "0.1.0"},
                "instructions": "Tools: whoami, list_repos, create_issue, create_branch, delete_repo, slow_count.",
                "ttlMs": 0,
                "cacheScope": "private",
            }),
        ),
        "tools/list" => {
            let mut list = tools::list();
            if caller.version == Version::Stateless {
                // 2026-07-28 list results say how long they may be cached, and by whom: not
                // at all here, the tools answer per person.
                list["ttlMs"] = json!(0);
                list["cacheScope"] = json!("private");
            }
            replier.result(id, list)
        }
        "tools/call" => match tools::call(&app, token, params).await {
            Outcome::Result(result) => replier.result(id, result),
            Outcome::Error(err) => replier.error(id, &err),
            Outcome::Refused(refusal) => refuse(&app, replier, id, tool, caller, &refusal),
            Outcome::SlowCount(sc) => {
                let progress_token = params
                    .pointer("/_meta/progressToken")
                    .filter(|t| !t.is_null())
                    .cloned()
                    .unwrap_or_else(|| id.clone());
                if !accepts_sse(headers) {
                    // Nowhere to put the progress notifications: just take the time.
                    for _ in 0..sc.count {
                        tokio::time::sleep(sc.delay).await;
                    }
                    return replier.result(id, tools::slow_count_result(sc.count));
                }
                let (tx, rx) = mpsc::channel(16);
                let stopping = app.stopping.subscribe();
                tokio::spawn(tools::slow_count_stream(
                    sc,
                    id.clone(),
                    progress_token,
                    tx,
                    stopping,
                ));
                let events = sse::response_stream(app, replier.event_ids, rx);
                sse::response(events, &replier.extra)
            }
        },
        _ => {
            let message = format!("Method not found: {method}");
            match caller.version {
                // 2026-07-28: an unknown method is an HTTP 404.
                Version::Stateless => {
                    rpc_error_response(StatusCode::NOT_FOUND, id, METHOD_NOT_FOUND, &message, None)
                }
                Version::Session(_) => replier.error(id, &RpcError::new(METHOD_NOT_FOUND, message)),
            }
        }
    }
}

/// Tells the client about a connect link in the one way its version and capabilities allow.
fn refuse(
    app: &App,
    replier: Replier,
    id: &Value,
    tool: &str,
    caller: Caller,
    refusal: &Refusal,
) -> Response {
    tracing::debug!(reason = %refusal.reason, relay = ?caller.relay, "demo backend: relaying a connect link");
    match caller.relay {
        // `Relay::for_stateless` never picks `-32042`; this keeps it so if that ever changes.
        Relay::UrlElicitationError if caller.version != Version::Stateless => {
            replier.error(id, &relay::url_elicitation_error(refusal))
        }
        Relay::InputRequired if caller.version == Version::Stateless => {
            let now = tokio::time::Instant::now();
            let state = app.lock().request_states.mint(tool, now);
            replier.result(id, relay::input_required(refusal, &state))
        }
        _ => replier.result(id, relay::tool_error(refusal)),
    }
}

// ---------------------------------------------------------------- GET and DELETE

/// The standalone stream of a 2025-x session, resumable with `Last-Event-ID`.
fn get(app: App, headers: &HeaderMap, version: Version) -> Response {
    if version == Version::Stateless {
        return method_not_allowed(version);
    }
    if !accepts_sse(headers) {
        return rpc_error_response(
            StatusCode::NOT_ACCEPTABLE,
            &Value::Null,
            SERVER_ERROR,
            "Not Acceptable: the client must accept text/event-stream",
            None,
        );
    }
    if let Err(resp) = session(&app, headers, &Value::Null) {
        return *resp;
    }
    let session_id = header_str(headers, SESSION_HEADER)
        .unwrap_or_default()
        .to_owned();
    let last_event_id = header_str(headers, "last-event-id").and_then(|v| v.parse::<u64>().ok());
    let stopping = app.stopping.subscribe();
    let stream = {
        let mut st = app.lock();
        let Some(session) = st.sessions.get_mut(&session_id) else {
            return rpc_error_response(
                StatusCode::NOT_FOUND,
                &Value::Null,
                SESSION_NOT_FOUND,
                "Session not found",
                None,
            );
        };
        // A message goes on one stream only: a newer GET replaces the older one.
        session.stream_generation += 1;
        session.wake.send_replace(());
        Standalone {
            app: app.clone(),
            session_id,
            generation: session.stream_generation,
            // Resume after the given id, or start with what no stream has had yet.
            cursor: last_event_id.unwrap_or(session.delivered),
            wake: session.wake.subscribe(),
            stopping,
        }
    };
    sse::response(stream.into_stream(), &[])
}

fn delete(app: &App, headers: &HeaderMap, version: Version) -> Response {
    if version == Version::Stateless {
        return method_not_allowed(version);
    }
    if let Err(resp) = session(app, headers, &Value::Null) {
        return *resp;
    }
    if let Some(session_id) = header_str(headers, SESSION_HEADER) {
        app.lock().sessions.remove(session_id);
        tracing::debug!(session_id, "demo backend: session deleted");
    }
    StatusCode::NO_CONTENT.into_response()
}
