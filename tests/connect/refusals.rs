//! The refusal of a `tools/call` in each client's shape, and the 2026-07-28 retry.

use crate::support::mcp::Mcp;
use crate::support::people::Person;
use crate::support::{Options, TestProxy};
use serde_json::{Value, json};

fn opts() -> Options {
    Options {
        backend: true,
        ..Options::default()
    }
}

fn whoami_2026(url_elicitation: bool, request_state: Option<&str>) -> Value {
    let mut params = json!({"name": "whoami", "arguments": {}, "_meta": {}});
    if url_elicitation {
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"elicitation": {"url": {}}});
    }
    if let Some(s) = request_state {
        // A retry as 2026-07-28 clients send it: the echoed state and the answer to the
        // input request (the SDK's elicitation handler accepted the URL).
        params["requestState"] = json!(s);
        params["inputResponses"] = json!({"github_connect": {"action": "accept"}});
    }
    json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": params})
}

#[tokio::test]
async fn url_elicitation_error_for_a_2025_11_25_client_that_declared_it() {
    let proxy = TestProxy::start_with(opts()).await;
    let mut alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    alice.mcp.initialize(true).await;
    alice.withdraw_agent(&proxy).await;
    let before = proxy.backend().requests().len();
    let (status, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(msg["id"], 7);
    assert_eq!(msg["error"]["code"], -32042, "{msg}");
    let e = &msg["error"]["data"]["elicitations"][0];
    assert_eq!(e["mode"], "url");
    assert!(
        e["url"]
            .as_str()
            .unwrap()
            .starts_with(&proxy.url("/connect/"))
    );
    assert!(
        e["message"].as_str().unwrap().contains("Repo Helper"),
        "the message names the agent"
    );
    let link_id = e["elicitationId"].as_str().unwrap();
    let created = proxy.app.audit.all().await.unwrap();
    assert!(
        created
            .iter()
            .any(|c| c.event["event"] == "connect_link_created" && c.event["link_id"] == link_id)
    );
    assert_eq!(
        proxy.backend().requests().len(),
        before,
        "the refused call never reaches the backend"
    );
    // After alice allows it, the retry succeeds.
    let done = alice
        .complete(&proxy, e["url"].as_str().unwrap(), "alice")
        .await;
    assert_eq!(done.status, 200);
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(msg.to_string().contains("You are alice"), "{msg}");
}

#[tokio::test]
async fn tool_error_fallback_for_a_client_that_declared_nothing() {
    let proxy = TestProxy::start_with(opts()).await;
    let mut alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    alice.mcp.initialize(false).await;
    alice.withdraw_agent(&proxy).await;
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(
        msg.get("error").is_none(),
        "no -32042 without the capability: {msg}"
    );
    assert_eq!(msg["result"]["isError"], true);
    let text = msg["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Repo Helper") && text.contains(&proxy.url("/connect/")),
        "{text}"
    );
    assert!(!msg.to_string().contains("elicitation"));
}

#[tokio::test]
async fn input_required_for_2026_client_and_retry_with_request_state() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let (status, msg) = alice.mcp.request(whoami_2026(true, None)).await;
    assert_eq!(status, 200);
    assert!(
        !msg.to_string().contains("-32042"),
        "never -32042 to a 2026-07-28 client"
    );
    let r = &msg["result"];
    assert_eq!(r["resultType"], "input_required", "{msg}");
    let req = &r["inputRequests"]["github_connect"];
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(req["params"]["mode"], "url");
    let url = req["params"]["url"].as_str().unwrap().to_owned();
    let state = r["requestState"].as_str().unwrap().to_owned();

    // Retried before the person acted: refused again with the same link.
    let (_, again) = alice.mcp.request(whoami_2026(true, Some(&state))).await;
    assert_eq!(
        again["result"]["inputRequests"]["github_connect"]["params"]["url"],
        url.as_str()
    );

    // The person finishes; the retry with the state is forwarded (without our state) and works.
    assert_eq!(alice.complete(&proxy, &url, "alice").await.status, 200);
    let (status, done) = alice.mcp.request(whoami_2026(true, Some(&state))).await;
    assert_eq!(status, 200);
    assert!(done.to_string().contains("You are alice"), "{done}");
    let forwarded = proxy.backend().requests().pop().unwrap();
    assert!(
        !forwarded.body.contains("requestState") && !forwarded.body.contains("inputResponses"),
        "the gateway's own state and the answer to its own input request are not the backend's business: {}",
        forwarded.body
    );
}

#[tokio::test]
async fn tampered_expired_or_foreign_request_state_is_rejected() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let (_, msg) = alice.mcp.request(whoami_2026(true, None)).await;
    let state = msg["result"]["requestState"].as_str().unwrap().to_owned();
    let before = proxy.backend().requests().len();

    let mut tampered = state.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let (status, m) = alice.mcp.request(whoami_2026(true, Some(&tampered))).await;
    assert_eq!((status, m["error"]["code"].as_i64()), (400, Some(-32602)));

    // Another person presenting alice's state.
    let mallory = Person::with_agent(&proxy, "mallory", "Triage Helper", "2026-07-28").await;
    let (status, _) = mallory.mcp.request(whoami_2026(true, Some(&state))).await;
    assert_eq!(status, 400);
    // The same person for another call.
    let other = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "list_repos", "arguments": {}, "requestState": state}});
    assert_eq!(alice.mcp.request(other).await.0, 400);
    // Expired.
    proxy.clock.advance(601);
    let (status, _) = alice.mcp.request(whoami_2026(true, Some(&state))).await;
    assert_eq!(status, 400);
    assert_eq!(
        proxy.backend().requests().len(),
        before,
        "nothing reached the backend"
    );
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "handle_rejected")
    );
}

#[tokio::test]
async fn no_url_elicitation_for_a_2026_client_that_did_not_declare_it() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let (_, msg) = alice.mcp.request(whoami_2026(false, None)).await;
    assert_eq!(msg["result"]["isError"], true, "{msg}");
    // A complete result, as 2026-07-28 requires it to say; never input_required.
    assert_eq!(msg["result"]["resultType"], "complete", "{msg}");
    assert!(!msg.to_string().contains("-32042"));
}

#[tokio::test]
async fn initialize_without_github_access_gets_the_link_in_an_error() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    alice.disconnect_github(&proxy).await;
    let mcp = Mcp::with_token(&proxy, &alice.mcp.token);
    let (status, msg) = mcp
        .request(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .await;
    assert_eq!(status, 200);
    assert!(
        msg["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/connect/"),
        "{msg}"
    );
}
