//! Who may use `/mcp`: only live tokens this server issued for this resource, in the header,
//! from an allowed origin. Every refusal reaches neither the backend nor GitHub.

use crate::support::mcp::Mcp;
use crate::support::{Browser, Client, Options, TestProxy, http};
use mcp_oauth_proxy::clock::Clock;
use mcp_oauth_proxy::store::records::AccessTokenRecord;
use mcp_oauth_proxy::store::{Keyspace, StoreExt};
use serde_json::json;

fn with_backend() -> Options {
    Options {
        backend: true,
        ..Options::default()
    }
}

fn ping() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
}

/// Asserts a 401 with the RFC 9728 challenge, and that nobody downstream heard of it.
async fn assert_refused(
    proxy: &TestProxy,
    resp: reqwest::Response,
    error: Option<&str>,
    backend_before: usize,
    github_before: usize,
) {
    assert_eq!(resp.status(), 401);
    let www = resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(www.starts_with("Bearer "), "{www}");
    assert!(
        www.contains(&format!(
            "resource_metadata=\"{}\"",
            proxy.url("/.well-known/oauth-protected-resource/mcp")
        )),
        "{www}"
    );
    assert!(www.contains("scope=\""), "{www}");
    match error {
        Some(e) => assert!(www.contains(&format!("error=\"{e}\"")), "{www}"),
        None => assert!(
            !www.contains("error="),
            "no error code when no token was sent: {www}"
        ),
    }
    assert_eq!(
        proxy.backend().requests().len(),
        backend_before,
        "the backend must not be contacted"
    );
    assert_eq!(
        proxy.github.requests().len(),
        github_before,
        "GitHub must not be contacted"
    );
}

#[tokio::test]
async fn request_without_token_gets_a_discoverable_401() {
    let proxy = TestProxy::start_with(with_backend()).await;
    let r = http()
        .post(proxy.url("/mcp"))
        .json(&ping())
        .send()
        .await
        .unwrap();
    assert_refused(&proxy, r, None, 0, 0).await;
}

#[tokio::test]
async fn raw_github_token_is_never_accepted_nor_forwarded() {
    let proxy = TestProxy::start_with(with_backend()).await;
    Mcp::for_user(&proxy, "alice").await;
    let gh = proxy.github.issued_access_tokens("alice").pop().unwrap();
    let (b, g) = (
        proxy.backend().requests().len(),
        proxy.github.requests().len(),
    );
    let r = Mcp::with_token(&proxy, &gh)
        .post(&ping())
        .send()
        .await
        .unwrap();
    assert_refused(&proxy, r, Some("invalid_token"), b, g).await;
}

#[tokio::test]
async fn token_for_another_resource_is_rejected() {
    let proxy = TestProxy::start_with(with_backend()).await;
    let mcp = Mcp::for_user(&proxy, "alice").await;
    // Re-bind the live token's record to another resource, as a token minted by this server
    // for a different audience would be.
    let hash = mcp_oauth_proxy::crypto::hash_secret(&mcp.token);
    let mut rec: AccessTokenRecord = proxy
        .app
        .store
        .get_json(Keyspace::AccessTokens, &hash)
        .await
        .unwrap()
        .unwrap();
    rec.resource = "https://other.example/mcp".into();
    proxy
        .app
        .store
        .put_json(Keyspace::AccessTokens, &hash, &rec, Some(rec.expires_at))
        .await
        .unwrap();
    let (b, g) = (
        proxy.backend().requests().len(),
        proxy.github.requests().len(),
    );
    let r = mcp.post(&ping()).send().await.unwrap();
    assert_refused(&proxy, r, Some("invalid_token"), b, g).await;
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "token_rejected")
    );
}

#[tokio::test]
async fn expired_token_is_rejected() {
    let proxy = TestProxy::start_with(with_backend()).await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.version = "2026-07-28"; // stateless: a ping needs no session
    assert_eq!(mcp.post(&ping()).send().await.unwrap().status(), 200);
    proxy.clock.advance(3601);
    let (b, g) = (
        proxy.backend().requests().len(),
        proxy.github.requests().len(),
    );
    let r = mcp.post(&ping()).send().await.unwrap();
    assert_refused(&proxy, r, Some("invalid_token"), b, g).await;
    assert!(proxy.clock.now().0 > 0);
}

#[tokio::test]
async fn revoked_token_is_rejected() {
    let proxy = TestProxy::start_with(with_backend()).await;
    let c = Client::register(&proxy, "Agent", "https://agent.example/cb").await;
    let t = c.tokens(&proxy, &Browser::new(), "alice").await;
    let mut mcp = Mcp::with_token(&proxy, t.json["access_token"].as_str().unwrap());
    mcp.version = "2026-07-28";
    assert_eq!(mcp.post(&ping()).send().await.unwrap().status(), 200);
    c.revoke(&proxy, t.json["refresh_token"].as_str().unwrap())
        .await;
    let (b, g) = (
        proxy.backend().requests().len(),
        proxy.github.requests().len(),
    );
    let r = mcp.post(&ping()).send().await.unwrap();
    assert_refused(&proxy, r, Some("invalid_token"), b, g).await;
}

#[tokio::test]
async fn token_in_query_string_is_refused() {
    let proxy = TestProxy::start_with(with_backend()).await;
    let mcp = Mcp::for_user(&proxy, "alice").await;
    let b = proxy.backend().requests().len();
    let r = http()
        .post(format!("{}?access_token={}", proxy.url("/mcp"), mcp.token))
        .json(&ping())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("invalid_request")
    );
    assert_eq!(proxy.backend().requests().len(), b);
}

#[tokio::test]
async fn token_lacking_a_required_scope_gets_403_insufficient_scope() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        backend_toml: "required_scopes = [\"repo\"]".into(),
        ..Options::default()
    })
    .await;
    let mcp = Mcp::for_user(&proxy, "alice").await;
    // Every consent is now for the whole `[github] scopes`, so only a token issued before that
    // (or before the operator added a required scope) can lack one: narrow the live token's
    // record to `read:user`, as such a token would be.
    let hash = mcp_oauth_proxy::crypto::hash_secret(&mcp.token);
    let mut rec: AccessTokenRecord = proxy
        .app
        .store
        .get_json(Keyspace::AccessTokens, &hash)
        .await
        .unwrap()
        .unwrap();
    rec.scopes = mcp_oauth_proxy::oauth::scope::ScopeSet::from_list(["read:user"]);
    proxy
        .app
        .store
        .put_json(Keyspace::AccessTokens, &hash, &rec, Some(rec.expires_at))
        .await
        .unwrap();
    let b = proxy.backend().requests().len();
    let r = mcp.post(&ping()).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let www = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(
        www.contains("error=\"insufficient_scope\"") && www.contains("scope=\"repo\""),
        "{www}"
    );
    assert_eq!(proxy.backend().requests().len(), b);
}

#[tokio::test]
async fn request_from_another_sites_origin_is_forbidden() {
    let proxy = TestProxy::start_with(with_backend()).await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.version = "2026-07-28";
    let b = proxy.backend().requests().len();
    let r = mcp
        .post(&ping())
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(proxy.backend().requests().len(), b);
    // The proxy's own origin is fine.
    let r = mcp
        .post(&ping())
        .header("origin", proxy.base.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn configured_origin_is_allowed_and_preflight_needs_no_token() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        extra_toml: String::new(),
        ..Options::default()
    })
    .await;
    let r = http()
        .request(reqwest::Method::OPTIONS, proxy.url("/mcp"))
        .header("origin", proxy.base.as_str())
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type, mcp-session-id, mcp-protocol-version",
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], proxy.base.as_str());
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    assert!(
        h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("mcp-session-id")
    );
    // Exposed headers come on the actual response.
    let r = http()
        .post(proxy.url("/mcp"))
        .header("origin", proxy.base.as_str())
        .json(&ping())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for h in ["www-authenticate", "mcp-session-id", "mcp-protocol-version"] {
        assert!(exposed.contains(h), "{h} not exposed: {exposed}");
    }
    // A preflight from another site gets no CORS grant.
    let r = http()
        .request(reqwest::Method::OPTIONS, proxy.url("/mcp"))
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
}
