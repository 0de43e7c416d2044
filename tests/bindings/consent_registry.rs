//! Per-client consent: a consent for one client never covers another, and the proxy stops
//! before GitHub for an unconsented client (the confused-deputy attack).

use crate::support::{Browser, Client, Pkce, TestProxy};
use mcp_oauth_proxy::store::Keyspace;

/// Alice uses client A. An attacker registers "Triage Helper" with a redirect URI on their
/// own host and gets Alice to open its authorization link in the same browser (signed in to
/// the proxy and to GitHub, GitHub would skip its own consent). The proxy must stop at its
/// consent page naming the attacker's client and host, and GitHub must hear nothing.
#[tokio::test]
async fn consent_for_client_a_does_not_let_attacker_client_b_skip_consent() {
    let proxy = TestProxy::start().await;
    let a = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    a.tokens(&proxy, &browser, "alice").await;
    assert!(proxy.github.has_authorized("alice"));

    let b = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    let github_before = proxy.github.requests().len();
    let codes_before = proxy.count(Keyspace::Codes).await;

    // Even as a direct navigation (the strongest case for skipping) B gets the page.
    let page = browser
        .navigate(&b.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200);
    assert!(page.location().is_none(), "must not redirect anywhere");
    assert!(page.body.contains("Triage Helper"));
    assert!(page.body.contains("attacker.example"));
    assert!(page.body.contains("https://attacker.example/steal"));
    assert!(page.body.contains("Unverified") || page.body.contains("unverified"));
    assert!(
        page.body.contains("registered moments ago"),
        "new-client warning expected"
    );
    assert!(
        page.body.contains("new to this server"),
        "unseen-host warning expected"
    );
    assert_eq!(
        proxy.github.requests().len(),
        github_before,
        "GitHub received something for B"
    );
    assert_eq!(proxy.count(Keyspace::Codes).await, codes_before);
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    assert_eq!(page.headers["x-frame-options"], "DENY");
    assert!(
        page.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
}

/// The same client with a second registered redirect URI needs a new consent for it.
#[tokio::test]
async fn consent_for_one_redirect_uri_does_not_cover_another() {
    let proxy = TestProxy::start().await;
    let r = crate::support::client::register_raw(
        &proxy,
        serde_json::json!({"client_name": "Two Homes", "redirect_uris": ["https://a.example/cb", "https://b.example/cb"], "token_endpoint_auth_method": "none"}),
    )
    .await;
    let id = r.json["client_id"].as_str().unwrap().to_owned();
    let a = Client {
        id: id.clone(),
        secret: None,
        redirect_uri: "https://a.example/cb".into(),
    };
    let b = Client {
        id,
        secret: None,
        redirect_uri: "https://b.example/cb".into(),
    };
    let browser = Browser::new();
    a.get_code(&proxy, &browser, "alice", &Pkce::new()).await;
    let page = browser
        .navigate(&b.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("https://b.example/cb"));
}
