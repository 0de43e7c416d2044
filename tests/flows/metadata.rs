//! Discovery documents.

use crate::support::{TestProxy, http};
use serde_json::Value;

async fn get(proxy: &TestProxy, path: &str) -> Value {
    let r = http().get(proxy.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    r.json().await.unwrap()
}

#[tokio::test]
async fn authorization_server_metadata_is_complete() {
    let proxy = TestProxy::start().await;
    let m = get(&proxy, "/.well-known/oauth-authorization-server").await;
    assert_eq!(m["issuer"], proxy.base.as_str());
    assert_eq!(m["authorization_endpoint"], proxy.url("/authorize"));
    assert_eq!(m["token_endpoint"], proxy.url("/token"));
    assert_eq!(m["registration_endpoint"], proxy.url("/register"));
    assert_eq!(m["revocation_endpoint"], proxy.url("/revoke"));
    assert_eq!(
        m["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    assert_eq!(m["response_types_supported"], serde_json::json!(["code"]));
    assert_eq!(
        m["grant_types_supported"],
        serde_json::json!(["authorization_code", "refresh_token"])
    );
    assert!(
        m["token_endpoint_auth_methods_supported"]
            .as_array()
            .unwrap()
            .contains(&"none".into())
    );
    assert_eq!(m["authorization_response_iss_parameter_supported"], true);
}

#[tokio::test]
async fn protected_resource_metadata_names_the_exact_mcp_resource_at_both_locations() {
    let proxy = TestProxy::start().await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let m = get(&proxy, path).await;
        assert_eq!(m["resource"], proxy.url("/mcp"));
        assert_eq!(m["authorization_servers"], serde_json::json!([proxy.base]));
        assert_eq!(m["bearer_methods_supported"], serde_json::json!(["header"]));
        assert!(
            !m["scopes_supported"]
                .as_array()
                .unwrap()
                .contains(&"offline_access".into())
        );
    }
}

#[tokio::test]
async fn unknown_paths_get_a_readable_404() {
    let proxy = TestProxy::start().await;
    let r = http().get(proxy.url("/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("Not found"));
}

/// Advertising `/register` under a closed policy would send clients into a 403 they cannot
/// get past; RFC 8414 makes the field optional, so a closed registration is not advertised.
#[tokio::test]
async fn closed_registration_is_not_advertised_in_metadata() {
    let proxy = TestProxy::start_with(crate::support::Options {
        extra_toml: "[registration]\npolicy = \"closed\"\n".to_owned(),
        ..crate::support::Options::default()
    })
    .await;
    let m = get(&proxy, "/.well-known/oauth-authorization-server").await;
    assert!(m.get("registration_endpoint").is_none(), "{m}");
    assert_eq!(m["token_endpoint"], proxy.url("/token"));
    // The endpoint itself still refuses: nothing was registered by looking.
    let r = http()
        .post(proxy.url("/register"))
        .json(&serde_json::json!({"redirect_uris": ["https://app.example/cb"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        proxy.count(mcp_oauth_proxy::store::Keyspace::Clients).await,
        0
    );
}
