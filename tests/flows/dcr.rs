//! Dynamic client registration (RFC 7591): real validation, OAuth-shaped errors, no state
//! change on refusal.

use crate::support::client::register_raw;
use crate::support::{TestProxy, http};
use mcp_oauth_proxy::store::Keyspace;
use serde_json::json;

#[tokio::test]
async fn registration_returns_generated_id_and_metadata() {
    let proxy = TestProxy::start().await;
    let r = register_raw(&proxy, json!({"client_name": "Claude Code", "redirect_uris": ["http://localhost/callback"], "token_endpoint_auth_method": "none", "application_type": "native", "grant_types": ["authorization_code", "refresh_token"]})).await;
    assert_eq!(r.status, 201);
    let id = r.json["client_id"].as_str().unwrap();
    assert!(id.starts_with("mcpc_") && !id.starts_with("https://"));
    assert!(r.json.get("client_secret").is_none());
    assert_eq!(
        r.json["redirect_uris"],
        json!(["http://localhost/callback"])
    );
    assert_eq!(r.json["application_type"], "native");
    assert_eq!(r.headers["cache-control"], "no-store");
}

#[tokio::test]
async fn registration_rejects_dangerous_redirect_uris_and_stores_nothing() {
    let proxy = TestProxy::start().await;
    for bad in [
        "javascript:alert(document.cookie)",
        "data:text/html,<script>x</script>",
        "file:///etc/passwd",
        "http://evil.example/cb",
        "https://a.example/cb#frag",
        "vbscript:msgbox",
        "https://user@evil.example/cb",
    ] {
        let r = register_raw(&proxy, json!({"client_name": "X", "redirect_uris": [bad]})).await;
        assert_eq!(
            (r.status, r.error()),
            (400, "invalid_redirect_uri"),
            "{bad}"
        );
        assert!(r.json["error_description"].is_string());
    }
    let r = register_raw(&proxy, json!({"client_name": "X"})).await;
    assert_eq!(r.error(), "invalid_redirect_uri");
    let r = register_raw(&proxy, json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt"})).await;
    assert_eq!(r.error(), "invalid_client_metadata");
    let r = register_raw(
        &proxy,
        json!({"redirect_uris": ["https://a.example/cb"], "client_name": "Evil\u{202e}gnp.exe"}),
    )
    .await;
    assert_eq!(r.error(), "invalid_client_metadata");
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
}

#[tokio::test]
async fn registration_rejects_non_json_and_oversized_bodies() {
    let proxy = TestProxy::start().await;
    let r = http()
        .post(proxy.url("/register"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let j: serde_json::Value = r.json().await.unwrap();
    assert_eq!(j["error"], "invalid_client_metadata");
    let r = http()
        .post(proxy.url("/register"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let big = format!(
        "{{\"client_name\":\"{}\",\"redirect_uris\":[\"https://a.example/cb\"]}}",
        "a".repeat(100_000)
    );
    let r = http()
        .post(proxy.url("/register"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
}

#[tokio::test]
async fn cors_is_offered_on_registration_and_token_but_never_on_authorize() {
    let proxy = TestProxy::start().await;
    for path in [
        "/register",
        "/token",
        "/revoke",
        "/.well-known/oauth-authorization-server",
    ] {
        let r = http()
            .request(reqwest::Method::OPTIONS, proxy.url(path))
            .header("origin", "https://inspector.example")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        assert_eq!(r.headers()["access-control-allow-origin"], "*", "{path}");
    }
    let r = http()
        .get(proxy.url("/authorize"))
        .header("origin", "https://inspector.example")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
}
