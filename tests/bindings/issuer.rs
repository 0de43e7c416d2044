//! RFC 9207: `iss` on every authorization response, errors included.

use crate::support::{Browser, Client, Pkce, TestProxy, query_param};

#[tokio::test]
async fn every_error_redirect_carries_iss() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let cases: [(&[(&str, &str)], &str); 6] = [
        (&[("response_type", "token")], "unsupported_response_type"),
        (&[("code_challenge_method", "plain")], "invalid_request"),
        (&[("code_challenge_method", "")], "invalid_request"),
        (&[("code_challenge", "")], "invalid_request"),
        (&[("scope", "admin:org")], "invalid_scope"),
        (
            &[("resource", "https://evil.example/mcp")],
            "invalid_target",
        ),
    ];
    for (extra, want) in cases {
        let r = Browser::new()
            .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", extra), "none")
            .await;
        assert_eq!(r.status, 303, "{extra:?}");
        let loc = r.location().unwrap();
        assert_eq!(
            query_param(&loc, "error").as_deref(),
            Some(want),
            "{extra:?}"
        );
        assert_eq!(
            query_param(&loc, "iss").as_deref(),
            Some(proxy.base.as_str()),
            "{extra:?}"
        );
    }
}

#[tokio::test]
async fn metadata_issuer_is_byte_identical_to_iss() {
    let proxy = TestProxy::start().await;
    let meta: serde_json::Value = crate::support::http()
        .get(proxy.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["issuer"], proxy.base.as_str());
    assert_eq!(meta["authorization_response_iss_parameter_supported"], true);
}
