//! End-to-end tests of the demo backend over real HTTP on ephemeral loopback ports, with the
//! crate's fake GitHub as "GitHub".

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::time::Instant;
use url::Url;

use super::{BackendConfig, DemoBackend};
use crate::{FakeGitHub, FakeGitHubConfig};

mod exchange;

const CLIENT_ID: &str = "Iv1.fakeclient";
const SECRET: &str = "fake-secret";
const CALLBACK: &str = "http://127.0.0.1:9/callback/github";
const BOTH: &str = "application/json, text/event-stream";
const JSON_ONLY: &str = "application/json";
const SSE_ONLY: &str = "text/event-stream";
const V2025: &str = "2025-11-25";
const V2026: &str = "2026-07-28";

/// One shared client; idle pooling is off because every `#[tokio::test]` has its own runtime.
#[allow(clippy::disallowed_methods)] // a test client, not the proxy's outbound traffic
fn client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .pool_max_idle_per_host(0)
                .build()
                .unwrap()
        })
        .clone()
}

struct World {
    gh: FakeGitHub,
    backend: DemoBackend,
}

async fn world(prefer_sse: bool) -> World {
    let gh = FakeGitHub::start(FakeGitHubConfig::demo(CLIENT_ID, SECRET, CALLBACK))
        .await
        .unwrap();
    let backend = DemoBackend::start(BackendConfig {
        github_api_url: gh.api_url(),
        prefer_sse,
    })
    .await
    .unwrap();
    World { gh, backend }
}

/// A real `gho_` token from the fake's web flow: authorize as a signed-in user, approve the
/// consent page if it is shown, exchange the code.
async fn gho_token(gh: &FakeGitHub, login: &str) -> String {
    let params = [
        ("client_id", CLIENT_ID),
        ("redirect_uri", CALLBACK),
        ("scope", "read:user"),
        ("state", "st4te"),
    ];
    let cookie = format!("fgh_user={login}");
    let mut resp = client()
        .get(gh.authorize_url())
        .query(&params)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    if resp.status() == StatusCode::OK {
        let mut form = params.to_vec();
        form.push(("decision", "approve"));
        resp = client()
            .post(format!("{}/login/oauth/authorize/decision", gh.base_url()))
            .header("cookie", &cookie)
            .form(&form)
            .send()
            .await
            .unwrap();
    }
    assert_eq!(resp.status(), StatusCode::FOUND);
    let location = Url::parse(resp.headers()["location"].to_str().unwrap()).unwrap();
    let code = location
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    let body: Value = client()
        .post(gh.token_url())
        .header("accept", "application/json")
        .form(&[
            ("code", code.as_str()),
            ("redirect_uri", CALLBACK),
            ("client_id", CLIENT_ID),
            ("client_secret", SECRET),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = body["access_token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("gho_"), "{body}");
    token
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A POST to the backend with the given headers (`None` values are left out).
async fn post(
    backend: &DemoBackend,
    headers: &[(&str, Option<&str>)],
    body: &Value,
) -> reqwest::Response {
    let mut req = client().post(backend.url()).json(body);
    for (name, value) in headers {
        if let Some(value) = value {
            req = req.header(*name, *value);
        }
    }
    req.send().await.unwrap()
}

/// A 2025-x client with a session.
struct Session2025 {
    backend: DemoBackend,
    token: String,
    session: String,
    accept: &'static str,
}

impl Session2025 {
    async fn open(backend: &DemoBackend, token: &str) -> Self {
        let resp = post(
            backend,
            &[("authorization", Some(&format!("Bearer {token}"))), ("accept", Some(BOTH))],
            &rpc(
                0,
                "initialize",
                json!({"protocolVersion": V2025, "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {"name": "test", "version": "1"}}),
            ),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let session = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let init = message(resp).await;
        assert_eq!(init["result"]["protocolVersion"], V2025);
        Self {
            backend: backend.clone(),
            token: token.to_owned(),
            session,
            accept: BOTH,
        }
    }

    async fn send(&self, body: &Value) -> reqwest::Response {
        post(
            &self.backend,
            &[
                ("authorization", Some(&format!("Bearer {}", self.token))),
                ("accept", Some(self.accept)),
                ("mcp-protocol-version", Some(V2025)),
                ("mcp-session-id", Some(&self.session)),
            ],
            body,
        )
        .await
    }

    async fn call(&self, tool: &str, args: Value) -> Value {
        let resp = self
            .send(&rpc(
                7,
                "tools/call",
                json!({"name": tool, "arguments": args}),
            ))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        message(resp).await
    }

    async fn get(&self, accept: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut req = client()
            .get(self.backend.url())
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", accept)
            .header("mcp-protocol-version", V2025)
            .header("mcp-session-id", &self.session);
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        req.send().await.unwrap()
    }
}

/// A 2026-07-28 stateless request with the mirrored headers.
async fn post_2026(
    backend: &DemoBackend,
    token: &str,
    accept: &str,
    mcp_method: Option<&str>,
    mcp_name: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    post(
        backend,
        &[
            ("authorization", Some(&format!("Bearer {token}"))),
            ("accept", Some(accept)),
            ("mcp-protocol-version", Some(V2026)),
            ("mcp-method", mcp_method),
            ("mcp-name", mcp_name),
        ],
        body,
    )
    .await
}

#[derive(Debug)]
struct Event {
    id: Option<String>,
    data: Option<Value>,
    comment: bool,
}

fn parse_event(raw: &str) -> Event {
    let mut event = Event {
        id: None,
        data: None,
        comment: false,
    };
    for line in raw.lines() {
        if let Some(id) = line.strip_prefix("id: ") {
            event.id = Some(id.to_owned());
        } else if let Some(data) = line.strip_prefix("data: ") {
            event.data = Some(serde_json::from_str(data).unwrap());
        } else if line.starts_with(':') {
            event.comment = true;
        } else {
            assert_eq!(line, "event: message");
        }
    }
    event
}

/// Reads SSE events as their chunks arrive.
struct SseReader {
    resp: reqwest::Response,
    buf: String,
}

impl SseReader {
    fn new(resp: reqwest::Response) -> Self {
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(resp.headers()["cache-control"], "no-cache");
        assert_eq!(resp.headers()["x-accel-buffering"], "no");
        Self {
            resp,
            buf: String::new(),
        }
    }

    /// The next event, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..pos + 2).collect();
                return Some(parse_event(raw.trim_end()));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.resp.chunk())
                .await
                .expect("no SSE event within 10 s")
                .unwrap()?;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next event's JSON-RPC message (skipping comments).
    async fn next_message(&mut self) -> (String, Value) {
        loop {
            let event = self.next().await.expect("the stream ended");
            if !event.comment {
                return (event.id.unwrap(), event.data.unwrap());
            }
        }
    }
}

/// The JSON-RPC message of a response: the JSON body, or the last event of an SSE body.
async fn message(resp: reqwest::Response) -> Value {
    let sse = resp.headers()["content-type"] == "text/event-stream";
    if !sse {
        return resp.json().await.unwrap();
    }
    let text = resp.text().await.unwrap();
    let last = text
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .last()
        .unwrap();
    parse_event(last).data.unwrap()
}

async fn delete(backend: &DemoBackend, session: Option<&str>) -> StatusCode {
    let mut req = client()
        .delete(backend.url())
        .header("authorization", "Bearer t")
        .header("mcp-protocol-version", V2025);
    if let Some(session) = session {
        req = req.header("MCP-SESSION-ID", session);
    }
    req.send().await.unwrap().status()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn initialize_opens_a_session_and_tools_list_works() {
    let w = world(false).await;
    let s = Session2025::open(&w.backend, "gho_whatever").await;
    assert_eq!(s.session.len(), 32);
    assert!(s.session.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(w.backend.sessions(), 1);

    // The client's notification after initialize: 202, empty.
    let resp = s
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    assert!(resp.text().await.unwrap().is_empty());

    let resp = s.send(&rpc(1, "tools/list", json!({}))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let list = message(resp).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "whoami",
            "list_repos",
            "create_issue",
            "create_branch",
            "delete_repo",
            "slow_count"
        ]
    );
    let slow = &list["result"]["tools"][5]["inputSchema"]["properties"];
    assert_eq!(slow["count"]["type"], "integer");
    assert_eq!(slow["delay_ms"]["maximum"], 5000);

    let ping = message(s.send(&rpc(2, "ping", json!({}))).await).await;
    assert_eq!(ping, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));

    // Unknown method (2025 rules: HTTP 200) and unknown tool.
    let resp = s.send(&rpc(3, "resources/list", json!({}))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(message(resp).await["error"]["code"], -32601);
    assert_eq!(s.call("nope", json!({})).await["error"]["code"], -32602);

    // Without a version header, initialize still works (2025-03-26 assumed); an unknown
    // requested version is answered with the latest 2025 one, and the elicitation capability
    // is remembered.
    let resp = post(
        &w.backend,
        &[("authorization", Some("Bearer t")), ("accept", Some(BOTH))],
        &rpc(
            0,
            "initialize",
            json!({"protocolVersion": "2099-01-01", "capabilities": {}}),
        ),
    )
    .await;
    assert!(resp.headers().contains_key("mcp-session-id"));
    assert_eq!(
        message(resp).await["result"]["protocolVersion"],
        "2025-11-25"
    );
    assert_eq!(w.backend.sessions(), 2);
    {
        let st = w.backend.inner.app.lock();
        let url_flags: Vec<bool> = st.sessions.values().map(|s| s.elicitation_url).collect();
        assert!(url_flags.contains(&true) && url_flags.contains(&false));
    }

    // Every request was recorded, headers searchable case-insensitively.
    let reqs = w.backend.requests();
    assert_eq!(reqs.len(), 7);
    assert_eq!(reqs[1].header("MCP-Session-Id"), Some(s.session.as_str()));
    assert_eq!(reqs[1].path(), "/mcp");
    assert!(reqs[0].body.contains("\"initialize\""));
}

#[tokio::test]
async fn missing_token_is_401_and_rejections_are_recorded() {
    let w = world(false).await;
    let body = rpc(1, "tools/list", json!({}));
    let resp = post(&w.backend, &[("accept", Some(BOTH))], &body).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({"error": "missing token"})
    );
    let resp = post(
        &w.backend,
        &[
            ("authorization", Some("Basic YTpi")),
            ("accept", Some(BOTH)),
        ],
        &body,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = client()
        .get(format!("{}/other", w.backend.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);

    let reqs = w.backend.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[1].header("authorization"), Some("Basic YTpi"));
    assert_eq!(reqs[2].path_and_query, "/mcp/other");
    assert_eq!(w.backend.sessions(), 0);
}

#[tokio::test]
async fn whoami_and_list_repos_call_github_with_the_received_token() {
    let w = world(false).await;
    let token = gho_token(&w.gh, "alice").await;
    let s = Session2025::open(&w.backend, &token).await;

    let whoami = s.call("whoami", json!({})).await;
    let result = &whoami["result"];
    assert_eq!(result["isError"], false, "{whoami}");
    assert_eq!(
        result["content"][0]["text"],
        "You are alice on GitHub (id 1001)."
    );
    assert_eq!(
        result["structuredContent"],
        json!({"login": "alice", "id": 1001})
    );

    let repos = s.call("list_repos", json!({})).await;
    let names: Vec<&str> = repos["result"]["structuredContent"]["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["full_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["alice/demo-one", "alice/demo-two", "alice/dotfiles"]
    );
    let text = repos["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("alice/dotfiles"), "{text}");

    // GitHub saw the very token the backend received, with the right headers.
    let calls: Vec<_> =
        w.gh.requests()
            .into_iter()
            .filter(|r| r.path() == "/api/v3/user")
            .collect();
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(call.method, "GET");
        assert_eq!(
            call.header("authorization"),
            Some(format!("Bearer {token}").as_str())
        );
        assert_eq!(
            call.header("user-agent"),
            Some("mcp-oauth-proxy-demo-backend")
        );
        assert_eq!(call.header("accept"), Some("application/vnd.github+json"));
    }
    assert!(w.gh.violations().is_empty());
}

#[tokio::test]
async fn whoami_with_a_bad_token_or_no_github_is_a_tool_error() {
    let w = world(false).await;
    let s = Session2025::open(&w.backend, "gho_notarealtoken").await;
    let whoami = s.call("whoami", json!({})).await;
    assert_eq!(whoami["result"]["isError"], true, "{whoami}");
    assert_eq!(
        whoami["result"]["content"][0]["text"],
        "GitHub rejected the token (401)"
    );
    let repos = s.call("list_repos", json!({})).await;
    assert_eq!(repos["result"]["isError"], true);

    // GitHub unreachable: still a result, not a transport error.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = listener.local_addr().unwrap();
    drop(listener);
    let backend = DemoBackend::start(BackendConfig {
        github_api_url: format!("http://{dead}/api/v3"),
        prefer_sse: false,
    })
    .await
    .unwrap();
    let s = Session2025::open(&backend, "gho_x").await;
    let whoami = s.call("whoami", json!({})).await;
    assert_eq!(whoami["result"]["isError"], true, "{whoami}");
    backend.shutdown().await;
}

#[tokio::test]
async fn session_header_missing_400_unknown_404_and_delete() {
    let w = world(false).await;
    let s = Session2025::open(&w.backend, "t").await;
    let list = rpc(1, "tools/list", json!({}));

    let missing = post(
        &w.backend,
        &[
            ("authorization", Some("Bearer t")),
            ("accept", Some(BOTH)),
            ("mcp-protocol-version", Some(V2025)),
        ],
        &list,
    )
    .await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    let unknown = post(
        &w.backend,
        &[
            ("authorization", Some("Bearer t")),
            ("accept", Some(BOTH)),
            ("mcp-protocol-version", Some(V2025)),
            ("Mcp-Session-Id", Some("0123456789abcdef0123456789abcdef")),
        ],
        &list,
    )
    .await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    // Notifications need the session too.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = post(&w.backend, &[("authorization", Some("Bearer t"))], &note).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    assert_eq!(delete(&w.backend, None).await, StatusCode::BAD_REQUEST);
    assert_eq!(
        delete(&w.backend, Some("nope")).await,
        StatusCode::NOT_FOUND
    );

    // An open GET stream ends when its session is deleted.
    let mut stream = SseReader::new(s.get(SSE_ONLY, None).await);
    assert_eq!(
        delete(&w.backend, Some(&s.session)).await,
        StatusCode::NO_CONTENT
    );
    assert!(stream.next().await.is_none());
    assert_eq!(w.backend.sessions(), 0);
    assert_eq!(s.send(&list).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        delete(&w.backend, Some(&s.session)).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn unsupported_version_batches_and_bad_json_are_400() {
    let w = world(false).await;
    let resp = post(
        &w.backend,
        &[
            ("authorization", Some("Bearer t")),
            ("mcp-protocol-version", Some("2024-11-05")),
        ],
        &rpc(5, "tools/list", json!({})),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["id"], 5);
    assert_eq!(body["error"]["code"], -32022);
    assert_eq!(
        body["error"]["data"]["supported"],
        json!(["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
    );

    let batch = json!([rpc(1, "ping", json!({})), rpc(2, "ping", json!({}))]);
    let resp = post(&w.backend, &[("authorization", Some("Bearer t"))], &batch).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], -32600);

    let resp = client()
        .post(w.backend.url())
        .header("authorization", "Bearer t")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], -32700);

    let resp = client()
        .put(w.backend.url())
        .header("authorization", "Bearer t")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn stateless_2026_checks_mirrored_headers_and_has_no_sessions() {
    let w = world(false).await;
    let token = gho_token(&w.gh, "bob").await;
    let call = rpc(1, "tools/call", json!({"name": "whoami", "arguments": {}}));

    let resp = post_2026(
        &w.backend,
        &token,
        BOTH,
        Some("tools/call"),
        Some("whoami"),
        &call,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(!resp.headers().contains_key("mcp-session-id"));
    let body = message(resp).await;
    assert_eq!(
        body["result"]["structuredContent"]["login"], "bob",
        "{body}"
    );

    // A session id is ignored, never echoed.
    let resp = post(
        &w.backend,
        &[
            ("authorization", Some(&format!("Bearer {token}"))),
            ("mcp-protocol-version", Some(V2026)),
            ("mcp-method", Some("tools/list")),
            ("mcp-session-id", Some("whatever")),
        ],
        &rpc(2, "tools/list", json!({})),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(!resp.headers().contains_key("mcp-session-id"));

    for (method, name) in [
        (Some("tools/call"), Some("list_repos")),
        (Some("tools/call"), None),
        (Some("tools/list"), Some("whoami")),
        (None, Some("whoami")),
    ] {
        let resp = post_2026(&w.backend, &token, BOTH, method, name, &call).await;
        assert_eq!(
            resp.status(),
            StatusCode::BAD_REQUEST,
            "{method:?} {name:?}"
        );
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32020, "{body}");
        assert_eq!(body["id"], 1);
    }
    // Base64-encoded mirrored values are decoded.
    let resp = post_2026(
        &w.backend,
        &token,
        BOTH,
        Some("=?base64?dG9vbHMvY2FsbA==?="),
        Some("whoami"),
        &call,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    // Notifications are checked too.
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    let ok = post_2026(
        &w.backend,
        &token,
        BOTH,
        Some("notifications/cancelled"),
        None,
        &note,
    )
    .await;
    assert_eq!(ok.status(), StatusCode::ACCEPTED);
    let bad = post_2026(&w.backend, &token, BOTH, Some("ping"), None, &note).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    // server/discover answers what initialize told older clients.
    let discover = rpc(4, "server/discover", json!({}));
    let resp = post_2026(
        &w.backend,
        &token,
        BOTH,
        Some("server/discover"),
        None,
        &discover,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let found = resp.json::<Value>().await.unwrap();
    assert_eq!(
        found["result"]["supportedVersions"],
        json!([V2026]),
        "{found}"
    );
    assert!(
        found["result"]["capabilities"]["tools"].is_object(),
        "{found}"
    );

    // No initialize, unknown methods are 404, GET and DELETE are 405.
    let init = rpc(3, "initialize", json!({"protocolVersion": V2026}));
    let resp = post_2026(&w.backend, &token, BOTH, Some("initialize"), None, &init).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], -32601);
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let resp = client()
            .request(method, w.backend.url())
            .header("authorization", "Bearer t")
            .header("accept", SSE_ONLY)
            .header("mcp-protocol-version", V2026)
            .header("mcp-session-id", "whatever")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
    assert_eq!(w.backend.sessions(), 0);
}

#[tokio::test]
async fn slow_count_streams_events_one_by_one() {
    let w = world(false).await;
    let s = Session2025::open(&w.backend, "t").await;
    let started = Instant::now();
    let resp = s
        .send(&rpc(
            9,
            "tools/call",
            json!({"name": "slow_count", "arguments": {"count": 4, "delay_ms": 150}, "_meta": {"progressToken": "p1"}}),
        ))
        .await;
    let mut sse = SseReader::new(resp);
    let mut arrivals = Vec::new();
    let mut ids = Vec::new();
    for i in 1..=4u64 {
        let (id, msg) = sse.next_message().await;
        arrivals.push(Instant::now());
        ids.push(id.parse::<u64>().unwrap());
        assert_eq!(msg["method"], "notifications/progress");
        assert_eq!(
            msg["params"],
            json!({"progressToken": "p1", "progress": i, "total": 4, "message": format!("tick {i}")})
        );
    }
    let (_, result) = sse.next_message().await;
    assert_eq!(result["id"], 9);
    assert_eq!(result["result"]["content"][0]["text"], "counted to 4");
    assert!(sse.next().await.is_none());

    // Spaced in time, not delivered all at once at the end.
    assert!(arrivals[0] - started >= Duration::from_millis(140));
    for pair in arrivals.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(75), "events bunched: {gap:?}");
    }
    assert!(ids.windows(2).all(|p| p[0] < p[1]), "{ids:?}");
    eventually("completed stream", || w.backend.completed_streams() == 1).await;
    assert_eq!(w.backend.cancelled_streams(), 0);

    // Without a progress token the request id is used; a JSON-only client gets JSON after the
    // delays.
    let mut json_client = Session2025::open(&w.backend, "t").await;
    json_client.accept = JSON_ONLY;
    let resp = json_client
        .send(&rpc(
            10,
            "tools/call",
            json!({"name": "slow_count", "arguments": {"count": 2, "delay_ms": 10}}),
        ))
        .await;
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(
        resp.json::<Value>().await.unwrap()["result"]["content"][0]["text"],
        "counted to 2"
    );
    let mut sse = SseReader::new(
        s.send(&rpc(
            11,
            "tools/call",
            json!({"name": "slow_count", "arguments": {"count": 1, "delay_ms": 0}}),
        ))
        .await,
    );
    assert_eq!(sse.next_message().await.1["params"]["progressToken"], 11);

    // Out-of-range arguments are invalid params.
    for args in [
        json!({"count": 0}),
        json!({"count": 51}),
        json!({"delay_ms": 5001}),
        json!({"count": "3"}),
    ] {
        let body = s.call("slow_count", args.clone()).await;
        assert_eq!(body["error"]["code"], -32602, "{args}");
    }
}

#[tokio::test]
async fn dropping_the_slow_count_stream_cancels_it() {
    let w = world(false).await;
    let token = "gho_t";
    let call = rpc(
        1,
        "tools/call",
        json!({"name": "slow_count", "arguments": {"count": 50, "delay_ms": 100}}),
    );
    let resp = post_2026(
        &w.backend,
        token,
        BOTH,
        Some("tools/call"),
        Some("slow_count"),
        &call,
    )
    .await;
    let mut sse = SseReader::new(resp);
    let (id, first) = sse.next_message().await;
    assert_eq!(id, "1");
    assert_eq!(first["params"]["progress"], 1);
    drop(sse);
    eventually("cancelled stream", || w.backend.cancelled_streams() == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.backend.completed_streams(), 0);
    assert_eq!(w.backend.cancelled_streams(), 1);
}

#[tokio::test]
async fn get_stream_delivers_pushes_and_replays_after_last_event_id() {
    let w = world(false).await;
    let s = Session2025::open(&w.backend, "t").await;
    let note = |n: u64| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": n}});

    assert!(!w.backend.push_notification("unknown", note(0)));
    assert_eq!(
        s.get(JSON_ONLY, None).await.status(),
        StatusCode::NOT_ACCEPTABLE
    );
    let no_session = client()
        .get(w.backend.url())
        .header("authorization", "Bearer t")
        .header("accept", SSE_ONLY)
        .send()
        .await
        .unwrap();
    assert_eq!(no_session.status(), StatusCode::BAD_REQUEST);

    // Pushed before any stream is open: queued for the first GET.
    assert!(w.backend.push_notification(&s.session, note(1)));
    let mut first = SseReader::new(s.get(SSE_ONLY, None).await);
    let (id1, m1) = first.next_message().await;
    assert_eq!(m1, note(1));
    assert!(w.backend.push_notification(&s.session, note(2)));
    let (id2, m2) = first.next_message().await;
    assert_eq!(m2, note(2));
    assert!(id1.parse::<u64>().unwrap() < id2.parse::<u64>().unwrap());
    drop(first);

    // Missed while disconnected, then resumed after id1: 2 is replayed, 3 follows, 4 is live.
    assert!(w.backend.push_notification(&s.session, note(3)));
    let mut resumed = SseReader::new(s.get(SSE_ONLY, Some(&id1)).await);
    assert_eq!(resumed.next_message().await, (id2.clone(), note(2)));
    let (id3, m3) = resumed.next_message().await;
    assert_eq!(m3, note(3));
    assert!(w.backend.push_notification(&s.session, note(4)));
    assert_eq!(resumed.next_message().await.1, note(4));

    // A newer GET without Last-Event-ID takes over: nothing old is repeated, the older stream
    // ends, and new messages go to the newer one only.
    let mut newer = SseReader::new(s.get(SSE_ONLY, None).await);
    assert!(resumed.next().await.is_none());
    assert!(w.backend.push_notification(&s.session, note(5)));
    assert_eq!(newer.next_message().await.1, note(5));
    drop(newer);

    // Only the last 100 are kept.
    for n in 6..=120 {
        assert!(w.backend.push_notification(&s.session, note(n)));
    }
    let mut replay = SseReader::new(s.get(SSE_ONLY, Some(&id3)).await);
    assert_eq!(replay.next_message().await.1, note(21));
}

#[tokio::test]
async fn prefer_sse_answers_requests_over_sse_when_accepted() {
    let w = world(true).await;
    let resp = post(
        &w.backend,
        &[("authorization", Some("Bearer t")), ("accept", Some(BOTH))],
        &rpc(
            0,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
        ),
    )
    .await;
    assert!(resp.headers().contains_key("mcp-session-id"));
    let mut sse = SseReader::new(resp);
    let (_, init) = sse.next_message().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        "mcp-oauth-proxy demo backend"
    );
    assert!(sse.next().await.is_none());

    // A JSON-only client still gets JSON; an SSE-only client gets SSE even without the
    // preference.
    let resp = post_2026(
        &w.backend,
        "t",
        JSON_ONLY,
        Some("tools/list"),
        None,
        &rpc(1, "tools/list", json!({})),
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "application/json");
    let plain = world(false).await;
    let resp = post_2026(
        &plain.backend,
        "t",
        SSE_ONLY,
        Some("ping"),
        None,
        &rpc(2, "ping", json!({})),
    )
    .await;
    let mut sse = SseReader::new(resp);
    assert_eq!(
        sse.next_message().await.1["result"],
        json!({"resultType": "complete"})
    );
    eventually("completed streams", || {
        w.backend.completed_streams() == 1 && plain.backend.completed_streams() == 1
    })
    .await;
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let w = world(false).await;
    let s = Session2025::open(&w.backend, "t").await;
    let mut stream = SseReader::new(s.get(SSE_ONLY, None).await);
    let url = w.backend.url();
    let started = Instant::now();
    w.backend.clone().shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(stream.next().await.is_none());
    assert!(client().post(url).send().await.is_err());
}

/// hyper notices the closed connection while the stream is idle: no write is needed.
#[tokio::test]
async fn a_disconnect_is_noticed_without_waiting_for_the_next_event() {
    let w = world(false).await;
    let call = rpc(
        1,
        "tools/call",
        json!({"name": "slow_count", "arguments": {"count": 3, "delay_ms": 5000}}),
    );
    let resp = post_2026(
        &w.backend,
        "t",
        BOTH,
        Some("tools/call"),
        Some("slow_count"),
        &call,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let dropped = Instant::now();
    drop(resp);
    eventually("cancelled stream", || w.backend.cancelled_streams() == 1).await;
    assert!(
        dropped.elapsed() < Duration::from_secs(3),
        "{:?}",
        dropped.elapsed()
    );
    assert_eq!(w.backend.completed_streams(), 0);
}
