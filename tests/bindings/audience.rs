//! RFC 8707 audience: codes and tokens are bound to this server's MCP resource.

use crate::support::{Browser, Client, Pkce, TestProxy, query_param};

#[tokio::test]
async fn authorize_for_another_resource_is_invalid_target_with_iss() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let url = c.authorize_url(
        &proxy,
        &Pkce::new(),
        "s",
        &[("resource", "https://api.github.com")],
    );
    let r = Browser::new().navigate(&url, "none").await;
    assert_eq!(r.status, 303);
    let loc = r.location().unwrap();
    assert!(loc.starts_with("https://app.example/callback?"));
    assert_eq!(
        query_param(&loc, "error").as_deref(),
        Some("invalid_target")
    );
    assert_eq!(
        query_param(&loc, "iss").as_deref(),
        Some(proxy.base.as_str())
    );
    assert_eq!(query_param(&loc, "state").as_deref(), Some("s"));
}

#[tokio::test]
async fn code_presented_with_another_resource_is_rejected_and_stays_redeemable() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    for other in [
        "https://other.example/mcp",
        &format!("{}/", proxy.url("/mcp")),
        "https://api.github.com",
    ] {
        let r = c.redeem(&proxy, &code, &pkce, &[("resource", other)]).await;
        assert_eq!(r.status, 400);
        assert_eq!(r.error(), "invalid_target");
        assert!(r.json.get("access_token").is_none());
    }
    // The rejection changed nothing: the rightful redemption still works.
    assert_eq!(c.redeem(&proxy, &code, &pkce, &[]).await.status, 200);
}

#[tokio::test]
async fn refresh_presented_with_another_resource_is_rejected() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t = c.tokens(&proxy, &Browser::new(), "alice").await;
    let rt = t.json["refresh_token"].as_str().unwrap();
    let r = c
        .refresh(&proxy, rt, &[("resource", "https://other.example/mcp")])
        .await;
    assert_eq!(r.error(), "invalid_target");
    assert_eq!(
        c.refresh(&proxy, rt, &[]).await.status,
        200,
        "the refresh token must still work"
    );
}

#[tokio::test]
async fn token_for_another_resource_is_refused_by_the_resource_check() {
    use mcp_oauth_proxy::bindings::audience::{AudienceRejection, audienced};
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t = c.tokens(&proxy, &Browser::new(), "alice").await;
    let access = t.json["access_token"].as_str().unwrap();
    let rec = mcp_oauth_proxy::flows::access::authenticate(&proxy.app, access)
        .await
        .unwrap()
        .unwrap();
    let mut other = rec.get().clone();
    other.resource = "https://other.example/mcp".into();
    assert_eq!(
        audienced(other, &proxy.url("/mcp")).unwrap_err(),
        AudienceRejection
    );
    // A GitHub token presented as if it were ours is unknown.
    let gh = proxy.github.issued_access_tokens("alice").pop().unwrap();
    assert!(
        mcp_oauth_proxy::flows::access::authenticate(&proxy.app, &gh)
            .await
            .unwrap()
            .is_err()
    );
}
