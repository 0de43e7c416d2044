//! `application_type` (OIDC Registration, MCP 2026-07-28): web clients redirect only to
//! https; loopback and custom-scheme redirects belong to native apps.

use super::register_as;
use crate::support::TestProxy;
use mcp_oauth_proxy::store::Keyspace;
use serde_json::json;

#[tokio::test]
async fn web_client_registering_a_loopback_or_custom_scheme_redirect_is_refused() {
    let proxy = TestProxy::start().await;
    for uri in [
        "http://127.0.0.1/callback",
        "http://localhost:3000/callback",
        "com.example.agent:/oauth",
    ] {
        let r = register_as(
            &proxy,
            None,
            None,
            &json!({"redirect_uris": [uri], "application_type": "web", "token_endpoint_auth_method": "none"}),
        )
        .await;
        assert_eq!(
            (r.status, r.error()),
            (400, "invalid_redirect_uri"),
            "{uri}"
        );
        assert!(
            r.json["error_description"]
                .as_str()
                .unwrap()
                .contains("native")
        );
    }
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
}

#[tokio::test]
async fn native_and_untyped_clients_may_register_loopback_redirects() {
    let proxy = TestProxy::start().await;
    let r = register_as(
        &proxy,
        None,
        None,
        &json!({"redirect_uris": ["http://127.0.0.1/callback", "cursor://anysphere.cursor-retrieval/oauth/callback"], "application_type": "native", "token_endpoint_auth_method": "none"}),
    )
    .await;
    assert_eq!(r.status, 201, "{:?}", r.json);
    assert_eq!(r.json["application_type"], "native");
    // Clients from before 2026-07-28 send no application_type: inferred from the redirects.
    let r = register_as(
        &proxy,
        None,
        None,
        &json!({"redirect_uris": ["http://localhost/callback"], "token_endpoint_auth_method": "none"}),
    )
    .await;
    assert_eq!(r.status, 201, "{:?}", r.json);
    assert_eq!(r.json["application_type"], "native");
    let r = register_as(
        &proxy,
        None,
        None,
        &json!({"redirect_uris": ["https://app.example/cb"], "token_endpoint_auth_method": "none"}),
    )
    .await;
    assert_eq!(r.json["application_type"], "web");
    let r = register_as(
        &proxy,
        None,
        None,
        &json!({"redirect_uris": ["https://app.example/cb"], "application_type": "browser"}),
    )
    .await;
    assert_eq!((r.status, r.error()), (400, "invalid_client_metadata"));
    assert_eq!(proxy.count(Keyspace::Clients).await, 3);
}
