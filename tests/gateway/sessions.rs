//! Session binding: an `Mcp-Session-Id` belongs to the person and client that created it.

use crate::support::mcp::Mcp;
use crate::support::{Browser, Client, Options, TestProxy};
use mcp_oauth_proxy::bindings::session_binding;
use serde_json::json;

fn ping() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
}

#[tokio::test]
async fn session_hijack_with_another_persons_token_is_rejected_and_not_forwarded() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut alice = Mcp::for_user(&proxy, "alice").await;
    alice.initialize(false).await;
    let mut mallory = Mcp::for_user(&proxy, "mallory").await;
    mallory.session = alice.session.clone();
    let before = proxy.backend().requests().len();
    let (status, msg) = mallory.request(ping()).await;
    assert_eq!(status, 404);
    assert_eq!(msg["error"]["code"], -32001);
    assert_eq!(
        proxy.backend().requests().len(),
        before,
        "must not reach the backend"
    );
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "handle_rejected")
    );
    // Alice's session is unaffected.
    assert_eq!(alice.request(ping()).await.0, 200);
}

#[tokio::test]
async fn session_of_the_same_person_in_another_client_is_rejected() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut first = Mcp::for_user(&proxy, "alice").await;
    first.initialize(false).await;
    let other = Client::register(&proxy, "Other agent", "https://other.example/cb").await;
    let t = other.tokens(&proxy, &Browser::new(), "alice").await;
    let mut second = Mcp::with_token(&proxy, t.json["access_token"].as_str().unwrap());
    second.session = first.session.clone();
    let before = proxy.backend().requests().len();
    assert_eq!(second.request(ping()).await.0, 404);
    assert_eq!(proxy.backend().requests().len(), before);
}

#[tokio::test]
async fn made_up_session_id_is_rejected_and_not_forwarded() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.session = Some("0123456789abcdef0123456789abcdef".into());
    let before = proxy.backend().requests().len();
    assert_eq!(mcp.request(ping()).await.0, 404);
    assert_eq!(proxy.backend().requests().len(), before);
}

#[tokio::test]
async fn deleted_session_is_forgotten() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    let del = crate::support::http()
        .delete(&mcp.url)
        .bearer_auth(&mcp.token)
        .header("mcp-session-id", mcp.session.as_deref().unwrap())
        .header("mcp-protocol-version", mcp.version)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    assert_eq!(mcp.request(ping()).await.0, 404);
}

#[tokio::test]
async fn url_elicitation_declared_at_initialize_is_remembered_per_session() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut yes = Mcp::for_user(&proxy, "alice").await;
    yes.initialize(true).await;
    let mut no = Mcp::for_user(&proxy, "bob").await;
    no.initialize(false).await;
    for (mcp, want) in [(&yes, true), (&no, false)] {
        let token = mcp_oauth_proxy::flows::access::authenticate(&proxy.app, &mcp.token)
            .await
            .unwrap()
            .unwrap();
        let bound = session_binding::check_session(
            proxy.app.store.as_ref(),
            mcp.session.as_deref().unwrap(),
            &token,
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(bound.get().url_elicitation, want);
    }
}

#[tokio::test]
async fn request_state_not_issued_to_the_caller_is_rejected() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.version = "2026-07-28";
    let before = proxy.backend().requests().len();
    let (status, _) = mcp
        .request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami", "arguments": {}, "requestState": "forged-or-foreign"}}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(proxy.backend().requests().len(), before);
}
