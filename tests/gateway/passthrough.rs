//! No passthrough: the backend gets the person's GitHub token from the proxy and never the
//! client's credentials; nothing about the GitHub token flows back to the client.

use crate::support::mcp::Mcp;
use crate::support::{Options, TestProxy};
use serde_json::json;

#[tokio::test]
async fn backend_never_sees_client_authorization_or_cookies() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    let resp = mcp
        .post(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}))
        .header("cookie", "__Host-mcp-session=stolen; other=1")
        .header("x-forwarded-for", "203.0.113.9")
        .header("proxy-authorization", "Basic Zm9vOmJhcg==")
        .header("x-mcp-proxy-internal", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let headers = format!("{:?}", resp.headers());
    let body = resp.text().await.unwrap();
    assert!(body.contains("You are alice on GitHub"), "{body}");

    let gh_token = proxy.github.issued_access_tokens("alice").pop().unwrap();
    let seen = proxy.backend().requests();
    assert!(!seen.is_empty());
    for r in &seen {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {gh_token}").as_str()),
            "backend must get the GitHub token"
        );
        for h in [
            "cookie",
            "x-forwarded-for",
            "proxy-authorization",
            "x-mcp-proxy-internal",
        ] {
            assert!(r.header(h).is_none(), "{h} leaked to the backend");
        }
        let all = format!("{:?}{}", r.headers, r.body);
        assert!(
            !all.contains(&mcp.token),
            "the client's token reached the backend"
        );
        assert!(
            !all.contains("mcpat_") && !all.contains("mcprt_"),
            "a proxy token reached the backend"
        );
    }
    // GitHub saw only its own token; the client saw no GitHub token.
    assert!(
        proxy.github.violations().is_empty(),
        "{:?}",
        proxy.github.violations()
    );
    assert!(!body.contains(&gh_token) && !headers.contains(&gh_token));
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "upstream_action")
    );
}

#[tokio::test]
async fn mirrored_2026_headers_pass_untouched() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.version = "2026-07-28";
    let resp = mcp
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}))
        .header("mcp-param-region", "=?base64?ZXU=?=")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("mcp-session-id").is_none());
    assert!(resp.text().await.unwrap().contains("alice"));
    let last = proxy.backend().requests().pop().unwrap();
    assert_eq!(last.header("mcp-method"), Some("tools/call"));
    assert_eq!(last.header("mcp-name"), Some("whoami"));
    assert_eq!(last.header("mcp-param-region"), Some("=?base64?ZXU=?="));
    assert_eq!(last.header("mcp-protocol-version"), Some("2026-07-28"));
}

#[tokio::test]
async fn tools_call_outcome_is_audited_without_arguments() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    let (status, _) = mcp
        .call_tool(
            "slow_count",
            json!({"count": 2, "delay_ms": 0, "secret_note": "do-not-log-me"}),
        )
        .await;
    assert_eq!(status, 200);
    // The event is group-committed in the background (not security state); it was queued
    // before the answer's last byte, and `Audit::all` drains the queue first, so no polling.
    let events = proxy.app.audit.all().await.unwrap();
    let action = events
        .iter()
        .rev()
        .find(|e| e.event["event"] == "upstream_action")
        .expect("audited");
    assert_eq!(action.event["tool"], "slow_count");
    assert_eq!(action.event["outcome"], "ok");
    assert_eq!(action.event["user_id"], "github:1001");
    let all = serde_json::to_string(&events.iter().map(|e| &e.event).collect::<Vec<_>>()).unwrap();
    assert!(!all.contains("do-not-log-me"));
}
