//! The session binding has no side doors (issue 15): a repeated or non-ASCII `Mcp-Session-Id`
//! or `MCP-Protocol-Version` is refused, the session check runs in every protocol version, a
//! header the version does not use is stripped, and a JSON-RPC batch is refused instead of
//! carrying its elements past the `requestState` check and the `tools/call` audit.

use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use crate::support::mcp::Mcp;
use crate::support::people::Person;
use crate::support::{Options, TestProxy, http};
use mcp_oauth_proxy::store::Keyspace;

fn opts() -> Options {
    Options {
        backend: true,
        ..Options::default()
    }
}

fn ping() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
}

fn whoami_2026(request_state: Option<&str>) -> Value {
    let mut params = json!({"name": "whoami", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}}}});
    if let Some(s) = request_state {
        params["requestState"] = json!(s);
    }
    json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": params})
}

/// Extra request headers, repeats and raw bytes kept.
type Headers<'a> = Vec<(&'a str, &'a [u8])>;

/// A POST to `/mcp` with exactly these extra headers (repeats kept, bytes as given).
async fn post_raw(
    proxy: &TestProxy,
    token: &str,
    method: reqwest::Method,
    headers: &[(&str, &[u8])],
    body: &str,
) -> (u16, Value) {
    let mut r = http()
        .request(method, proxy.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        // `header` appends: a name given twice is sent twice.
        r = r.header(*name, HeaderValue::from_bytes(value).unwrap());
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// What a refused request must leave as it was.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    backend_requests: usize,
    sessions: usize,
    request_states: usize,
    connect_links: usize,
    backend_tokens: usize,
    upstream_actions: usize,
}

async fn snapshot(proxy: &TestProxy) -> Snapshot {
    Snapshot {
        backend_requests: proxy.backend().requests().len(),
        sessions: proxy.count(Keyspace::McpSessions).await,
        request_states: proxy.count(Keyspace::RequestStates).await,
        connect_links: proxy.count(Keyspace::ConnectLinks).await,
        backend_tokens: proxy.count(Keyspace::BackendTokens).await,
        upstream_actions: count(proxy, "upstream_action").await,
    }
}

async fn count(proxy: &TestProxy, event: &str) -> usize {
    proxy
        .audit_events()
        .await
        .iter()
        .filter(|e| *e == event)
        .count()
}

fn session_ids_seen_by_backend(r: &mcp_examples::backend::BackendRequest) -> Vec<&str> {
    r.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
        .map(|(_, v)| v.as_str())
        .collect()
}

#[tokio::test]
async fn repeated_or_non_ascii_session_header_is_refused_and_not_forwarded() {
    let proxy = TestProxy::start_with(opts()).await;
    let mut alice = Mcp::for_user(&proxy, "alice").await;
    alice.initialize(false).await;
    let mut mallory = Mcp::for_user(&proxy, "mallory").await;
    mallory.initialize(false).await;
    let a = alice.session.clone().unwrap();
    let m = mallory.session.clone().unwrap();
    let a_non_ascii = [a.as_bytes(), b"\xe9"].concat();
    let a_utf8 = [a.as_bytes(), "é".as_bytes()].concat();
    let a_space = [a.as_bytes(), b" x"].concat();
    let a_bytes = a.as_bytes();
    let m_bytes = m.as_bytes();
    let v25: &[u8] = b"2025-11-25";
    let v26: &[u8] = b"2026-07-28";

    let sid = "Mcp-Session-Id";
    let ver = "MCP-Protocol-Version";
    let once = "must be sent at most once";
    let ascii = "must be visible ASCII";
    let cases: Vec<(&str, Headers<'_>, &str, &str)> = vec![
        (
            "her own session id, then alice's",
            vec![
                ("mcp-protocol-version", v25),
                ("mcp-session-id", m_bytes),
                ("mcp-session-id", a_bytes),
            ],
            sid,
            once,
        ),
        (
            "alice's session id, then her own",
            vec![
                ("mcp-protocol-version", v25),
                ("mcp-session-id", a_bytes),
                ("mcp-session-id", m_bytes),
            ],
            sid,
            once,
        ),
        (
            "her own session id twice",
            vec![
                ("mcp-protocol-version", v25),
                ("mcp-session-id", m_bytes),
                ("mcp-session-id", m_bytes),
            ],
            sid,
            once,
        ),
        (
            "two session ids in a stateless request",
            vec![
                ("mcp-protocol-version", v26),
                ("mcp-session-id", m_bytes),
                ("mcp-session-id", a_bytes),
            ],
            sid,
            once,
        ),
        (
            "alice's session id and a Latin-1 byte",
            vec![
                ("mcp-protocol-version", v25),
                ("mcp-session-id", &a_non_ascii),
            ],
            sid,
            ascii,
        ),
        (
            "alice's session id and a UTF-8 character, stateless",
            vec![("mcp-protocol-version", v26), ("mcp-session-id", &a_utf8)],
            sid,
            ascii,
        ),
        (
            "alice's session id, a space and more, no version",
            vec![("mcp-session-id", &a_space)],
            sid,
            ascii,
        ),
        (
            "two protocol versions",
            vec![
                ("mcp-protocol-version", v26),
                ("mcp-protocol-version", v25),
                ("mcp-session-id", a_bytes),
            ],
            ver,
            once,
        ),
        (
            "a protocol version with a non-ASCII byte",
            vec![
                ("mcp-protocol-version", b"2026-07-28\xe9"),
                ("mcp-session-id", a_bytes),
            ],
            ver,
            ascii,
        ),
    ];

    let before = snapshot(&proxy).await;
    let rejected_before = count(&proxy, "handle_rejected").await;
    for (what, headers, header, problem) in &cases {
        let (status, msg) = post_raw(
            &proxy,
            &mallory.token,
            reqwest::Method::POST,
            headers,
            &ping().to_string(),
        )
        .await;
        assert_eq!(status, 400, "{what}: {msg}");
        assert_eq!(msg["error"]["code"], -32600, "{what}: {msg}");
        assert_eq!(msg["id"], Value::Null, "{what}");
        let message = msg["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(header) && message.contains(problem),
            "{what}: {message}"
        );
    }
    // The same side doors in a DELETE, which would end alice's session.
    let (status, msg) = post_raw(
        &proxy,
        &mallory.token,
        reqwest::Method::DELETE,
        &[
            ("mcp-protocol-version", v26),
            ("mcp-session-id", m_bytes),
            ("mcp-session-id", a_bytes),
        ],
        "",
    )
    .await;
    assert_eq!((status, msg["error"]["code"].as_i64()), (400, Some(-32600)));

    assert_eq!(
        snapshot(&proxy).await,
        before,
        "nothing reached the backend and nothing changed"
    );
    assert_eq!(
        count(&proxy, "handle_rejected").await,
        rejected_before + cases.len() + 1,
        "each refusal is audited"
    );

    // Both sessions still work, and the backend sees exactly one, checked, session id.
    assert_eq!(alice.request(ping()).await.0, 200);
    let seen = proxy.backend().requests().pop().unwrap();
    assert_eq!(session_ids_seen_by_backend(&seen), [a.as_str()]);
    assert_eq!(mallory.request(ping()).await.0, 200);
    let seen = proxy.backend().requests().pop().unwrap();
    assert_eq!(session_ids_seen_by_backend(&seen), [m.as_str()]);
}

#[tokio::test]
async fn session_of_another_person_is_refused_in_every_protocol_version() {
    let proxy = TestProxy::start_with(opts()).await;
    let mut alice = Mcp::for_user(&proxy, "alice").await;
    alice.initialize(false).await;
    let a = alice.session.clone().unwrap();
    let mallory = Mcp::for_user(&proxy, "mallory").await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "whoami", "arguments": {}}})
    .to_string();

    let before = snapshot(&proxy).await;
    let rejected_before = count(&proxy, "handle_rejected").await;
    let mut refused = 0;
    for version in [
        Some("2025-06-18"),
        Some("2025-11-25"),
        Some("2026-07-28"),
        None,
    ] {
        let mut headers: Vec<(&str, &[u8])> = vec![("mcp-session-id", a.as_bytes())];
        if let Some(v) = version {
            headers.push(("mcp-protocol-version", v.as_bytes()));
        }
        if version == Some("2026-07-28") {
            headers.push(("mcp-method", b"tools/call"));
            headers.push(("mcp-name", b"whoami"));
        }
        // Acting in alice's session, listening to it, and ending it.
        for (method, body) in [
            (reqwest::Method::POST, call.as_str()),
            (reqwest::Method::GET, ""),
            (reqwest::Method::DELETE, ""),
        ] {
            let (status, msg) =
                post_raw(&proxy, &mallory.token, method.clone(), &headers, body).await;
            assert_eq!(status, 404, "{version:?} {method}: {msg}");
            assert_eq!(msg["error"]["code"], -32001, "{version:?} {method}");
            assert_eq!(msg["error"]["message"], "Session not found");
            refused += 1;
        }
    }
    assert_eq!(
        snapshot(&proxy).await,
        before,
        "nothing reached the backend and nothing changed"
    );
    assert_eq!(
        count(&proxy, "handle_rejected").await,
        rejected_before + refused
    );
    // Alice's session is untouched.
    assert_eq!(alice.request(ping()).await.0, 200);
}

#[tokio::test]
async fn header_the_version_does_not_use_is_stripped_not_forwarded() {
    let proxy = TestProxy::start_with(opts()).await;
    let mut alice = Mcp::for_user(&proxy, "alice").await;
    alice.initialize(false).await;
    let a = alice.session.clone().unwrap();

    // 2026-07-28 has no sessions and no resumption: alice's own session id and a
    // Last-Event-ID are checked, then stripped.
    let (status, msg) = post_raw(
        &proxy,
        &alice.token,
        reqwest::Method::POST,
        &[
            ("mcp-protocol-version", b"2026-07-28"),
            ("mcp-session-id", a.as_bytes()),
            ("last-event-id", b"3"),
            ("mcp-method", b"tools/call"),
            ("mcp-name", b"whoami"),
        ],
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}}})
        .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{msg}");
    let seen = proxy.backend().requests().pop().unwrap();
    assert_eq!(seen.header("mcp-protocol-version"), Some("2026-07-28"));
    assert!(seen.header("mcp-session-id").is_none());
    assert!(seen.header("last-event-id").is_none());
    assert_eq!(seen.header("mcp-method"), Some("tools/call"));

    // 2025-x does not use the mirrored 2026-07-28 headers.
    let resp = alice
        .post(&ping())
        .header("mcp-method", "ping")
        .header("mcp-name", "x")
        .header("mcp-param-region", "eu")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = proxy.backend().requests().pop().unwrap();
    assert_eq!(session_ids_seen_by_backend(&seen), [a.as_str()]);
    for gone in ["mcp-method", "mcp-name", "mcp-param-region"] {
        assert!(seen.header(gone).is_none(), "{gone}");
    }
}

#[tokio::test]
async fn batch_request_cannot_skip_the_request_state_check() {
    let proxy = TestProxy::start_with(opts()).await;
    // Alice's agent is refused with input_required and a requestState minted for her.
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let (_, msg) = alice.mcp.request(whoami_2026(None)).await;
    let state = msg["result"]["requestState"].as_str().unwrap().to_owned();
    let link = msg["result"]["inputRequests"]["github_connect"]["params"]["url"].clone();
    let mut tampered = state.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let mallory = Person::with_agent(&proxy, "mallory", "Triage Helper", "2026-07-28").await;
    let mut bob = Mcp::for_user(&proxy, "bob").await;
    bob.initialize(false).await;

    // Sent on its own, mallory's retry with alice's state is refused by the check.
    let (status, m) = mallory.mcp.request(whoami_2026(Some(&state))).await;
    assert_eq!((status, m["error"]["code"].as_i64()), (400, Some(-32602)));

    let before = snapshot(&proxy).await;
    let rejected_before = count(&proxy, "handle_rejected").await;
    let v26: &[(&str, &[u8])] = &[("mcp-protocol-version", b"2026-07-28")];
    let batch = |items: Vec<Value>| Value::Array(items).to_string();
    let cases: Vec<(&str, &Mcp, Headers<'_>, String)> = vec![
        (
            "mallory's batch of one with alice's state",
            &mallory.mcp,
            v26.to_vec(),
            batch(vec![whoami_2026(Some(&state))]),
        ),
        (
            "mallory's batch hiding it behind a ping",
            &mallory.mcp,
            v26.to_vec(),
            batch(vec![ping(), whoami_2026(Some(&state))]),
        ),
        (
            "mallory's batch after whitespace",
            &mallory.mcp,
            v26.to_vec(),
            format!(" \r\n\t{}", batch(vec![whoami_2026(Some(&state))])),
        ),
        (
            "alice's batch with a tampered state",
            &alice.mcp,
            v26.to_vec(),
            batch(vec![whoami_2026(Some(&tampered))]),
        ),
        (
            "alice's batch with a state nobody issued her",
            &alice.mcp,
            v26.to_vec(),
            batch(vec![whoami_2026(Some("forged-or-foreign"))]),
        ),
        ("an empty batch", &alice.mcp, v26.to_vec(), "[]".to_owned()),
    ];
    let bob_session = bob.session.clone().unwrap();
    let bob_call = batch(vec![
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "whoami", "arguments": {}}}),
    ]);
    let mut cases = cases;
    for version in [Some(&b"2025-06-18"[..]), Some(b"2025-11-25"), None] {
        // A session-era tools/call in a batch would skip its audit.
        let mut h: Vec<(&str, &[u8])> = vec![("mcp-session-id", bob_session.as_bytes())];
        if let Some(v) = version {
            h.push(("mcp-protocol-version", v));
        }
        cases.push(("bob's batched tools/call", &bob, h, bob_call.clone()));
    }

    for (what, who, headers, body) in &cases {
        let (status, msg) =
            post_raw(&proxy, &who.token, reqwest::Method::POST, headers, body).await;
        assert_eq!(status, 400, "{what}: {msg}");
        assert_eq!(msg["error"]["code"], -32600, "{what}: {msg}");
        assert_eq!(
            msg["error"]["message"], "batching is not supported",
            "{what}"
        );
        assert_eq!(msg["id"], Value::Null, "{what}");
    }
    assert_eq!(
        snapshot(&proxy).await,
        before,
        "nothing reached the backend, nothing was audited as an upstream action, no state changed"
    );
    assert_eq!(
        count(&proxy, "handle_rejected").await,
        rejected_before + cases.len()
    );
    // Alice's own state still means what it meant: her retry is refused again with her link.
    let (status, again) = alice.mcp.request(whoami_2026(Some(&state))).await;
    assert_eq!(status, 200);
    assert_eq!(
        again["result"]["inputRequests"]["github_connect"]["params"]["url"],
        link
    );
}
