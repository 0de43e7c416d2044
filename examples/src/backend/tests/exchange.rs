//! Exchange mode end to end: the backend against a fake proxy token endpoint (RFC 8693, checks
//! the Basic credentials and the form exactly) and the crate's fake GitHub, which refuses any
//! request carrying an `mcpbt_` token.
//!
//! Relaying of connect-link refusals per docs/DESIGN.md §5: `-32042` only to a 2025-11-25 session that
//! declared URL elicitation, `input_required` + single-use `requestState` only to a 2026-07-28
//! request that declared it, a tool error with the link to everyone else.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus, header};
use axum::response::{IntoResponse, Response};
use base64::prelude::{BASE64_STANDARD, Engine as _};
use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{BOTH, CALLBACK, CLIENT_ID, SECRET, V2025, V2026, gho_token, parse_event, post, rpc};
use crate::backend::{
    BackendConfig, DemoBackend, ExchangeAttempt, ExchangeConfig, GRANT_TYPE_TOKEN_EXCHANGE,
    TOKEN_TYPE_ACCESS_TOKEN,
};
use crate::{FakeGitHub, FakeGitHubConfig};

/// The backend's confidential client at the proxy; both need form-encoding (RFC 6749 §2.3.1).
const BACKEND_ID: &str = "repo-helper:backend";
const BACKEND_SECRET: &str = "s3cret with space&plus+";
/// `base64(urlencode(BACKEND_ID) ":" urlencode(BACKEND_SECRET))`, encoded by hand.
const BASIC_PLAIN: &str = "repo-helper%3Abackend:s3cret+with+space%26plus%2B";
/// What the proxy attaches to forwarded requests in exchange mode.
const SUBJECT: &str = "mcpbt_4f1c2d9e8a7b6c5d4e3f2a1b0c9d8e7f";
const CONNECT_URI: &str = "https://proxy.example/connect/c0dec0dec0de";
const CONNECT_ID: &str = "conn-7d1e";
const CONNECT_MESSAGE: &str =
    "Open this link to connect your GitHub account and let Repo Helper use it.";
const LINK_TEXT: &str = "Open this link to connect your GitHub account and let Repo Helper use it. https://proxy.example/connect/c0dec0dec0de";
const NO_ACCESS: &str = "could not obtain GitHub access";
const CAPS: &str = "io.modelcontextprotocol/clientCapabilities";

// ---------------------------------------------------------------- the fake token endpoint

/// What the fake token endpoint answers to a well-formed request.
#[derive(Debug, Clone)]
enum Answer {
    /// 200 with this access token.
    Token(String),
    /// 400 `invalid_grant` with this `reason` and the connect link.
    Refuse(&'static str),
    /// Anything else, verbatim.
    Raw(u16, Value),
}

/// One request received by the fake token endpoint.
#[derive(Debug, Clone)]
struct Received {
    authorization: Option<String>,
    content_type: Option<String>,
    form: Vec<(String, String)>,
    /// What did not match RFC 8693 / the configured client (empty = all good).
    problems: Vec<String>,
}

struct FakeProxyState {
    answer: Answer,
    received: Vec<Received>,
}

#[derive(Clone)]
struct FakeProxy {
    token_url: String,
    state: Arc<Mutex<FakeProxyState>>,
}

impl FakeProxy {
    async fn start(answer: Answer) -> Self {
        let state = Arc::new(Mutex::new(FakeProxyState {
            answer,
            received: Vec::new(),
        }));
        let router = axum::Router::new()
            .route("/token", axum::routing::post(token_endpoint))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            token_url: format!("http://{addr}/token"),
            state,
        }
    }

    fn answer(&self, answer: Answer) {
        self.state.lock().unwrap().answer = answer;
    }

    fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }
}

fn expected_form() -> Vec<(String, String)> {
    let mut form: Vec<(String, String)> = [
        ("audience", "github"),
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        ("subject_token", SUBJECT),
        (
            "subject_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    form.sort();
    form
}

async fn token_endpoint(
    State(state): State<Arc<Mutex<FakeProxyState>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let authorization = text(header::AUTHORIZATION);
    let content_type = text(header::CONTENT_TYPE);
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let mut problems = Vec::new();
    let basic = format!("Basic {}", BASE64_STANDARD.encode(BASIC_PLAIN));
    if authorization.as_deref() != Some(basic.as_str()) {
        problems.push(format!("authorization {authorization:?}"));
    }
    if content_type.as_deref() != Some("application/x-www-form-urlencoded") {
        problems.push(format!("content-type {content_type:?}"));
    }
    let mut sorted = form.clone();
    sorted.sort();
    if sorted != expected_form() {
        problems.push(format!("form {form:?}"));
    }
    let answer = {
        let mut st = state.lock().unwrap();
        st.received.push(Received {
            authorization,
            content_type,
            form,
            problems: problems.clone(),
        });
        st.answer.clone()
    };
    let no_store = [(header::CACHE_CONTROL, "no-store")];
    if !problems.is_empty() {
        let body = json!({"error": "invalid_client", "error_description": problems.join("; ")});
        return (AxumStatus::UNAUTHORIZED, no_store, axum::Json(body)).into_response();
    }
    match answer {
        Answer::Token(token) => {
            let body = json!({
                "access_token": token,
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer",
                "expires_in": 300,
            });
            (AxumStatus::OK, no_store, axum::Json(body)).into_response()
        }
        Answer::Refuse(reason) => {
            let body = json!({
                "error": "invalid_grant",
                "error_description": "the person must act first",
                "reason": reason,
                "connect_uri": CONNECT_URI,
                "connect_id": CONNECT_ID,
                "connect_expires_in": 1800,
                "connect_message": CONNECT_MESSAGE,
            });
            (AxumStatus::BAD_REQUEST, no_store, axum::Json(body)).into_response()
        }
        Answer::Raw(status, body) => (
            AxumStatus::from_u16(status).unwrap(),
            no_store,
            axum::Json(body),
        )
            .into_response(),
    }
}

// ---------------------------------------------------------------- world and clients

struct World {
    gh: FakeGitHub,
    proxy: FakeProxy,
    backend: DemoBackend,
}

async fn world(answer: Answer) -> World {
    let mut config = FakeGitHubConfig::demo(CLIENT_ID, SECRET, CALLBACK);
    config.forbidden_markers.push("mcpbt_".to_owned());
    let gh = FakeGitHub::start(config).await.unwrap();
    let proxy = FakeProxy::start(answer).await;
    let backend = DemoBackend::start_with_exchange(
        BackendConfig {
            github_api_url: gh.api_url(),
            prefer_sse: false,
        },
        ExchangeConfig::new(&proxy.token_url, BACKEND_ID, BACKEND_SECRET),
    )
    .await
    .unwrap();
    World { gh, proxy, backend }
}

/// An answer: its status, its raw text (to grep for codes that must never appear) and its
/// JSON-RPC message (the JSON body, or the last event of an SSE body).
struct Answered {
    status: StatusCode,
    raw: String,
    msg: Value,
}

async fn answered(resp: reqwest::Response) -> Answered {
    let status = resp.status();
    let sse = resp.headers()["content-type"] == "text/event-stream";
    let raw = resp.text().await.unwrap();
    let msg = if sse {
        let last = raw
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .last()
            .unwrap();
        parse_event(last).data.unwrap()
    } else {
        serde_json::from_str(&raw).unwrap()
    };
    Answered { status, raw, msg }
}

/// Opens a 2025-x session: `version` both in the header and as the requested version.
async fn open_session(backend: &DemoBackend, version: Option<&str>, capabilities: Value) -> String {
    let auth = format!("Bearer {SUBJECT}");
    let resp = post(
        backend,
        &[
            ("authorization", Some(&auth)),
            ("accept", Some(BOTH)),
            ("mcp-protocol-version", version),
        ],
        &rpc(
            0,
            "initialize",
            json!({
                "protocolVersion": version.unwrap_or("2025-03-26"),
                "capabilities": capabilities,
                "clientInfo": {"name": "exchange-test", "version": "1"},
            }),
        ),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// A request in a 2025-x session.
async fn send_2025(
    backend: &DemoBackend,
    version: Option<&str>,
    session: &str,
    body: &Value,
) -> Answered {
    let auth = format!("Bearer {SUBJECT}");
    answered(
        post(
            backend,
            &[
                ("authorization", Some(&auth)),
                ("accept", Some(BOTH)),
                ("mcp-protocol-version", version),
                ("mcp-session-id", Some(session)),
            ],
            body,
        )
        .await,
    )
    .await
}

async fn call_2025(
    backend: &DemoBackend,
    version: Option<&str>,
    session: &str,
    tool: &str,
) -> Answered {
    let body = rpc(7, "tools/call", json!({"name": tool, "arguments": {}}));
    send_2025(backend, version, session, &body).await
}

/// A 2026-07-28 `tools/call`, with the client capabilities in `_meta` (if any) and the
/// `requestState` of a retry (if any).
async fn call_2026(
    backend: &DemoBackend,
    tool: &str,
    capabilities: Option<Value>,
    request_state: Option<&str>,
) -> Answered {
    call_2026_with(backend, tool, capabilities, request_state, None).await
}

async fn call_2026_with(
    backend: &DemoBackend,
    tool: &str,
    capabilities: Option<Value>,
    request_state: Option<&str>,
    session_id: Option<&str>,
) -> Answered {
    let mut params = json!({"name": tool, "arguments": {}});
    if let Some(caps) = capabilities {
        params["_meta"] = json!({ CAPS: caps });
    }
    if let Some(state) = request_state {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({"github_connect": {"action": "accept"}});
    }
    let auth = format!("Bearer {SUBJECT}");
    answered(
        post(
            backend,
            &[
                ("authorization", Some(&auth)),
                ("accept", Some(BOTH)),
                ("mcp-protocol-version", Some(V2026)),
                ("mcp-method", Some("tools/call")),
                ("mcp-name", Some(tool)),
                ("mcp-session-id", session_id),
            ],
            &rpc(9, "tools/call", params),
        )
        .await,
    )
    .await
}

fn url_caps() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}})
}

fn attempt(status: u16, reason: Option<&str>) -> ExchangeAttempt {
    ExchangeAttempt {
        status,
        reason: reason.map(str::to_owned),
    }
}

/// The answer is the fallback: a tool error whose text is the message and the link.
#[track_caller]
fn assert_link_in_tool_error(a: &Answered, what: &str) {
    assert_eq!(a.status, StatusCode::OK, "{what}: {}", a.raw);
    assert!(a.msg.get("error").is_none(), "{what}: {}", a.raw);
    let result = &a.msg["result"];
    assert_eq!(result["isError"], true, "{what}: {}", a.raw);
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": LINK_TEXT}]),
        "{what}"
    );
    // A complete result (2026-07-28 says so explicitly), never input_required.
    assert!(
        result.get("resultType").is_none_or(|t| t == "complete"),
        "{what}: {}",
        a.raw
    );
    assert!(!a.raw.contains("32042"), "{what}: {}", a.raw);
    assert!(!a.raw.contains("elicitation"), "{what}: {}", a.raw);
}

/// No request carrying the proxy's token ever reached GitHub.
fn assert_github_never_saw_the_proxy_token(gh: &FakeGitHub) {
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
    for req in gh.requests() {
        let all = format!("{} {:?} {}", req.path_and_query, req.headers, req.body);
        assert!(!all.contains("mcpbt_"), "{all}");
    }
}

// ---------------------------------------------------------------- tests

/// docs/DESIGN.md §7: the tool exchanges the received `mcpbt_` token (RFC 8693, Basic client
/// authentication per RFC 6749 §2.3.1) and calls GitHub with the `gho_` token it gets back.
#[tokio::test]
async fn exchange_success_calls_github_with_the_exchanged_token_only() {
    let w = world(Answer::Raw(500, json!({}))).await;
    let gho = gho_token(&w.gh, "alice").await;
    w.proxy.answer(Answer::Token(gho.clone()));

    // initialize, ping and tools/list need no GitHub access.
    let session = open_session(&w.backend, Some(V2025), url_caps()).await;
    let list = send_2025(
        &w.backend,
        Some(V2025),
        &session,
        &rpc(1, "tools/list", json!({})),
    )
    .await;
    assert_eq!(list.msg["result"]["tools"][0]["name"], "whoami");
    let ping = send_2025(
        &w.backend,
        Some(V2025),
        &session,
        &rpc(2, "ping", json!({})),
    )
    .await;
    assert_eq!(ping.msg["result"], json!({}));
    let slow = send_2025(
        &w.backend,
        Some(V2025),
        &session,
        &rpc(
            3,
            "tools/call",
            json!({"name": "slow_count", "arguments": {"count": 1, "delay_ms": 0}}),
        ),
    )
    .await;
    assert_eq!(slow.msg["result"]["content"][0]["text"], "counted to 1");
    assert!(w.backend.exchanges().is_empty());
    assert!(w.proxy.received().is_empty());

    let whoami = call_2025(&w.backend, Some(V2025), &session, "whoami").await;
    assert_eq!(whoami.msg["result"]["isError"], false, "{}", whoami.raw);
    assert_eq!(
        whoami.msg["result"]["structuredContent"],
        json!({"login": "alice", "id": 1001})
    );
    let repos = call_2025(&w.backend, Some(V2025), &session, "list_repos").await;
    assert_eq!(
        repos.msg["result"]["structuredContent"]["repositories"][0]["full_name"],
        "alice/demo-one"
    );
    let stateless = call_2026(&w.backend, "whoami", Some(url_caps()), None).await;
    assert_eq!(
        stateless.msg["result"]["structuredContent"]["login"], "alice",
        "{}",
        stateless.raw
    );

    // The proxy got exactly the RFC 8693 request, three times.
    assert_eq!(w.backend.exchanges(), vec![attempt(200, None); 3]);
    let received = w.proxy.received();
    assert_eq!(received.len(), 3);
    for r in &received {
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(
            r.authorization.as_deref(),
            Some("Basic cmVwby1oZWxwZXIlM0FiYWNrZW5kOnMzY3JldCt3aXRoK3NwYWNlJTI2cGx1cyUyQg==")
        );
        assert_eq!(
            r.content_type.as_deref(),
            Some("application/x-www-form-urlencoded")
        );
        let mut form = r.form.clone();
        form.sort();
        assert_eq!(form, expected_form());
        assert!(
            form.iter()
                .any(|(k, v)| k == "grant_type" && v == GRANT_TYPE_TOKEN_EXCHANGE)
        );
        assert!(
            form.iter()
                .any(|(k, v)| k == "subject_token_type" && v == TOKEN_TYPE_ACCESS_TOKEN)
        );
        // The secret travels only in the Basic header.
        assert!(!format!("{:?}", r.form).contains("s3cret"));
    }

    // GitHub saw the gho_ token on every call, and never the mcpbt_ one.
    let calls: Vec<_> =
        w.gh.requests()
            .into_iter()
            .filter(|r| r.path() == "/api/v3/user")
            .collect();
    assert_eq!(calls.len(), 3);
    for call in &calls {
        assert_eq!(
            call.header("authorization"),
            Some(format!("Bearer {gho}").as_str())
        );
    }
    assert_github_never_saw_the_proxy_token(&w.gh);
}

/// docs/DESIGN.md §5, 2025-11-25 with `elicitation.url`: JSON-RPC error -32042 whose single URL
/// elicitation carries the connect id as `elicitationId`.
#[tokio::test]
async fn refusal_to_a_2025_11_25_session_with_url_elicitation_is_error_32042() {
    let w = world(Answer::Refuse("connect_required")).await;
    let session = open_session(&w.backend, Some(V2025), url_caps()).await;

    for (tool, reason) in [
        ("whoami", "connect_required"),
        ("list_repos", "allow_required"),
    ] {
        w.proxy.answer(Answer::Refuse(reason));
        let a = call_2025(&w.backend, Some(V2025), &session, tool).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.raw);
        assert!(a.msg.get("result").is_none(), "{}", a.raw);
        assert_eq!(a.msg["id"], 7);
        let error = &a.msg["error"];
        assert_eq!(error["code"], -32042, "{}", a.raw);
        assert_eq!(error["message"], CONNECT_MESSAGE);
        assert_eq!(
            error["data"],
            json!({"elicitations": [{
                "mode": "url",
                "elicitationId": CONNECT_ID,
                "url": CONNECT_URI,
                "message": CONNECT_MESSAGE,
            }]})
        );
        assert_eq!(
            error["data"]["elicitations"][0]["elicitationId"],
            CONNECT_ID
        );
    }
    assert_eq!(
        w.backend.exchanges(),
        vec![
            attempt(400, Some("connect_required")),
            attempt(400, Some("allow_required"))
        ]
    );
    // Refused: GitHub was not called at all.
    assert!(w.gh.requests().iter().all(|r| r.path() != "/api/v3/user"));
    assert_github_never_saw_the_proxy_token(&w.gh);
}

/// docs/DESIGN.md §5, 2026-07-28 with `elicitation.url`: an `input_required` result with a
/// `requestState`; the retry carrying it runs the tool again; states are single use.
#[tokio::test]
async fn refusal_to_2026_with_url_elicitation_is_input_required_and_the_retry_succeeds() {
    let w = world(Answer::Refuse("connect_required")).await;
    let mut raws = Vec::new();

    let first = call_2026(&w.backend, "whoami", Some(url_caps()), None).await;
    raws.push(first.raw.clone());
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.msg.get("error").is_none(), "{}", first.raw);
    let result = &first.msg["result"];
    assert_eq!(result["resultType"], "input_required", "{}", first.raw);
    assert_eq!(
        result["inputRequests"],
        json!({"github_connect": {
            "method": "elicitation/create",
            "params": {"mode": "url", "url": CONNECT_URI, "message": CONNECT_MESSAGE},
        }})
    );
    let state1 = result["requestState"].as_str().unwrap().to_owned();
    assert_eq!(state1.len(), 64);
    assert!(state1.bytes().all(|b| b.is_ascii_hexdigit()));

    // Still not connected: refused again, with a fresh state.
    let second = call_2026(&w.backend, "whoami", Some(url_caps()), Some(&state1)).await;
    raws.push(second.raw.clone());
    assert_eq!(second.msg["result"]["resultType"], "input_required");
    let state2 = second.msg["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(state1, state2);

    // The person connected: the retry succeeds.
    let gho = gho_token(&w.gh, "bob").await;
    w.proxy.answer(Answer::Token(gho));
    let done = call_2026(&w.backend, "whoami", Some(url_caps()), Some(&state2)).await;
    raws.push(done.raw.clone());
    assert_eq!(done.msg["result"]["isError"], false, "{}", done.raw);
    assert_eq!(done.msg["result"]["structuredContent"]["login"], "bob");
    assert_eq!(done.msg["result"]["resultType"], "complete", "{}", done.raw);
    assert_eq!(w.backend.exchanges().len(), 3);

    // Replays, made-up states and a state used for another tool: -32602, nothing exchanged.
    let forged = "00".repeat(32);
    for (tool, state) in [
        ("whoami", state1.as_str()),
        ("whoami", state2.as_str()),
        ("whoami", forged.as_str()),
        ("whoami", ""),
    ] {
        let a = call_2026(&w.backend, tool, Some(url_caps()), Some(state)).await;
        raws.push(a.raw.clone());
        assert_eq!(a.status, StatusCode::OK, "{}", a.raw);
        assert_eq!(a.msg["error"]["code"], -32602, "{state}: {}", a.raw);
        assert_eq!(a.msg["error"]["message"], "unknown requestState");
        assert!(a.msg.get("result").is_none());
    }
    w.proxy.answer(Answer::Refuse("allow_required"));
    let refused = call_2026(&w.backend, "whoami", Some(url_caps()), None).await;
    raws.push(refused.raw.clone());
    let state3 = refused.msg["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let other_tool = call_2026(&w.backend, "list_repos", Some(url_caps()), Some(&state3)).await;
    raws.push(other_tool.raw.clone());
    assert_eq!(
        other_tool.msg["error"]["code"], -32602,
        "{}",
        other_tool.raw
    );
    // …and trying it on another tool used it up.
    let used_up = call_2026(&w.backend, "whoami", Some(url_caps()), Some(&state3)).await;
    raws.push(used_up.raw.clone());
    assert_eq!(used_up.msg["error"]["code"], -32602, "{}", used_up.raw);
    assert_eq!(w.backend.exchanges().len(), 4);

    // A non-string requestState is unknown too.
    let auth = format!("Bearer {SUBJECT}");
    let resp = post(
        &w.backend,
        &[
            ("authorization", Some(&auth)),
            ("accept", Some(BOTH)),
            ("mcp-protocol-version", Some(V2026)),
            ("mcp-method", Some("tools/call")),
            ("mcp-name", Some("whoami")),
        ],
        &rpc(
            10,
            "tools/call",
            json!({"name": "whoami", "requestState": 42, "_meta": {CAPS: url_caps()}}),
        ),
    )
    .await;
    let a = answered(resp).await;
    assert_eq!(a.msg["error"]["code"], -32602, "{}", a.raw);

    // Never -32042 to a 2026-07-28 client, never an elicitationId.
    for raw in &raws {
        assert!(!raw.contains("32042"), "{raw}");
        assert!(!raw.contains("elicitationId"), "{raw}");
    }
    assert_github_never_saw_the_proxy_token(&w.gh);
}

/// docs/DESIGN.md §5, last row: a client that did not declare URL elicitation (or cannot, before
/// 2025-11-25) gets a tool error whose text is the message and the link.
#[tokio::test]
async fn refusal_without_url_elicitation_is_a_tool_error_with_the_link() {
    let w = world(Answer::Refuse("reconnect_required")).await;
    let b = &w.backend;

    let sessions = [
        (
            "2025-06-18 with url declared",
            Some("2025-06-18"),
            url_caps(),
        ),
        (
            "2025-11-25 form only",
            Some(V2025),
            json!({"elicitation": {}}),
        ),
        (
            "2025-11-25 form only, explicit",
            Some(V2025),
            json!({"elicitation": {"form": {}}}),
        ),
        ("2025-11-25 no capabilities", Some(V2025), json!({})),
        (
            "2025-11-25 url not an object",
            Some(V2025),
            json!({"elicitation": {"url": true}}),
        ),
        ("no version header", None, url_caps()),
    ];
    for (what, version, caps) in sessions {
        let session = open_session(b, version, caps).await;
        let a = call_2025(b, version, &session, "whoami").await;
        assert_link_in_tool_error(&a, what);
        let a = call_2025(b, version, &session, "list_repos").await;
        assert_link_in_tool_error(&a, what);
    }
    // A session opened at 2025-06-18 (with url) whose later requests say 2025-11-25.
    let session = open_session(b, Some("2025-06-18"), url_caps()).await;
    let a = call_2025(b, Some(V2025), &session, "whoami").await;
    assert_link_in_tool_error(&a, "opened at 2025-06-18, header 2025-11-25");

    for (what, caps) in [
        ("2026 without _meta", None),
        ("2026 no capabilities", Some(json!({}))),
        ("2026 form only", Some(json!({"elicitation": {}}))),
        (
            "2026 form only, explicit",
            Some(json!({"elicitation": {"form": {}}})),
        ),
    ] {
        let a = call_2026(b, "whoami", caps, None).await;
        assert_link_in_tool_error(&a, what);
    }
    assert_eq!(
        w.backend.exchanges(),
        vec![attempt(400, Some("reconnect_required")); 17]
    );
    assert_github_never_saw_the_proxy_token(&w.gh);
}

/// A 2026-07-28 request is never answered with -32042, even if it carries the session id of a
/// 2025-11-25 session that declared URL elicitation (2026-07-28 has no sessions).
#[tokio::test]
async fn stateless_2026_never_gets_32042_even_with_a_url_session_id() {
    let w = world(Answer::Refuse("connect_required")).await;
    let session = open_session(&w.backend, Some(V2025), url_caps()).await;
    // The session really would get -32042.
    let a = call_2025(&w.backend, Some(V2025), &session, "whoami").await;
    assert_eq!(a.msg["error"]["code"], -32042);

    let without = call_2026_with(&w.backend, "whoami", None, None, Some(&session)).await;
    assert_link_in_tool_error(&without, "2026 with a 2025 session id, no capability");
    let with = call_2026_with(&w.backend, "whoami", Some(url_caps()), None, Some(&session)).await;
    assert!(!with.raw.contains("32042"), "{}", with.raw);
    assert_eq!(
        with.msg["result"]["resultType"], "input_required",
        "{}",
        with.raw
    );
    // Initialize-style capabilities in a 2026 request do not count.
    let misplaced = answered(
        post(
            &w.backend,
            &[
                ("authorization", Some(&format!("Bearer {SUBJECT}"))),
                ("accept", Some(BOTH)),
                ("mcp-protocol-version", Some(V2026)),
                ("mcp-method", Some("tools/call")),
                ("mcp-name", Some("whoami")),
            ],
            &rpc(
                11,
                "tools/call",
                json!({"name": "whoami", "capabilities": url_caps()}),
            ),
        )
        .await,
    )
    .await;
    assert_link_in_tool_error(&misplaced, "2026 with capabilities outside _meta");
}

/// Anything but a token or a well-formed connect-link refusal is "could not obtain GitHub
/// access", whatever the client declared: no elicitation is invented from a broken answer.
#[tokio::test]
async fn exchange_failures_are_could_not_obtain_github_access() {
    let w = world(Answer::Raw(500, json!({}))).await;
    let session_url = open_session(&w.backend, Some(V2025), url_caps()).await;
    let cases = [
        (
            "5xx",
            Answer::Raw(500, json!({"error": "server_error"})),
            attempt(500, None),
        ),
        (
            "bad client",
            Answer::Raw(401, json!({"error": "invalid_client"})),
            attempt(401, None),
        ),
        (
            "invalid_grant without a link",
            Answer::Raw(
                400,
                json!({"error": "invalid_grant", "reason": "connect_required"}),
            ),
            attempt(400, Some("connect_required")),
        ),
        (
            "unknown reason",
            Answer::Raw(
                400,
                json!({"error": "invalid_grant", "reason": "pay_up", "connect_uri": CONNECT_URI, "connect_id": CONNECT_ID, "connect_message": CONNECT_MESSAGE}),
            ),
            attempt(400, Some("pay_up")),
        ),
        (
            "other error with a link",
            Answer::Raw(
                400,
                json!({"error": "invalid_target", "reason": "connect_required", "connect_uri": CONNECT_URI, "connect_id": CONNECT_ID, "connect_message": CONNECT_MESSAGE}),
            ),
            attempt(400, Some("connect_required")),
        ),
        (
            "wrong issued_token_type",
            Answer::Raw(
                200,
                json!({"access_token": "gho_x", "issued_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_type": "N_A"}),
            ),
            attempt(200, None),
        ),
        (
            "no access_token",
            Answer::Raw(200, json!({"issued_token_type": TOKEN_TYPE_ACCESS_TOKEN})),
            attempt(200, None),
        ),
    ];
    let mut expected = Vec::new();
    for (what, answer, recorded) in cases {
        w.proxy.answer(answer);
        let a = call_2025(&w.backend, Some(V2025), &session_url, "whoami").await;
        assert_eq!(a.msg["result"]["isError"], true, "{what}: {}", a.raw);
        assert_eq!(
            a.msg["result"]["content"],
            json!([{"type": "text", "text": NO_ACCESS}]),
            "{what}"
        );
        let a = call_2026(&w.backend, "list_repos", Some(url_caps()), None).await;
        assert_eq!(a.msg["result"]["isError"], true, "{what}: {}", a.raw);
        assert_eq!(a.msg["result"]["content"][0]["text"], NO_ACCESS, "{what}");
        assert_eq!(a.msg["result"]["resultType"], "complete", "{what}");
        expected.push(recorded.clone());
        expected.push(recorded);
    }
    assert_eq!(w.backend.exchanges(), expected);
    assert!(w.proxy.received().iter().all(|r| r.problems.is_empty()));

    // The token endpoint is unreachable: status 0.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = listener.local_addr().unwrap();
    drop(listener);
    let backend = DemoBackend::start_with_exchange(
        BackendConfig {
            github_api_url: w.gh.api_url(),
            prefer_sse: false,
        },
        ExchangeConfig::new(format!("http://{dead}/token"), BACKEND_ID, BACKEND_SECRET),
    )
    .await
    .unwrap();
    let a = call_2026(&backend, "whoami", Some(url_caps()), None).await;
    assert_eq!(
        a.msg["result"]["content"][0]["text"], NO_ACCESS,
        "{}",
        a.raw
    );
    assert_eq!(backend.exchanges(), vec![attempt(0, None)]);
    backend.shutdown().await;
    assert_github_never_saw_the_proxy_token(&w.gh);
}

#[tokio::test]
async fn start_with_exchange_rejects_a_token_url_that_is_not_http() {
    for bad in ["", "/token", "ftp://proxy.example/token", "not a url"] {
        let err = DemoBackend::start_with_exchange(
            BackendConfig {
                github_api_url: "http://127.0.0.1:9/api/v3".to_owned(),
                prefer_sse: false,
            },
            ExchangeConfig::new(bad, BACKEND_ID, BACKEND_SECRET),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
    }
}

/// Without exchange mode nothing changes: the received token goes to GitHub, and a 2026-07-28
/// `requestState` the backend never minted is unknown.
#[tokio::test]
async fn without_exchange_mode_there_is_no_exchange() {
    let gh = FakeGitHub::start(FakeGitHubConfig::demo(CLIENT_ID, SECRET, CALLBACK))
        .await
        .unwrap();
    let backend = DemoBackend::start(BackendConfig {
        github_api_url: gh.api_url(),
        prefer_sse: false,
    })
    .await
    .unwrap();
    let gho = gho_token(&gh, "alice").await;
    let resp = post(
        &backend,
        &[
            ("authorization", Some(&format!("Bearer {gho}"))),
            ("accept", Some(BOTH)),
            ("mcp-protocol-version", Some(V2026)),
            ("mcp-method", Some("tools/call")),
            ("mcp-name", Some("whoami")),
        ],
        &rpc(
            1,
            "tools/call",
            json!({"name": "whoami", "requestState": "ab".repeat(32)}),
        ),
    )
    .await;
    let a = answered(resp).await;
    assert_eq!(a.msg["error"]["code"], -32602, "{}", a.raw);
    assert!(backend.exchanges().is_empty());
    backend.shutdown().await;
}
