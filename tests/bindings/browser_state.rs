//! Browser-bound, single-use upstream state.

use crate::support::client::approve;
use crate::support::{Browser, Client, Pkce, TestProxy, query_param};
use mcp_oauth_proxy::store::Keyspace;

/// Mallory approves her own client in her browser and captures the GitHub authorization URL
/// the proxy sent her to. She gets Alice to open it. GitHub skips its consent for Alice and
/// redirects to the proxy's callback with Alice's code and Mallory's state, in Alice's
/// browser. The state is not bound to Alice's browser: refused, no code, no GitHub exchange.
#[tokio::test]
async fn captured_github_url_opened_in_victim_browser_is_rejected() {
    let proxy = TestProxy::start().await;
    // Alice has used the proxy's GitHub app before, so GitHub will not ask her again.
    let honest = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let alice = Browser::new();
    honest.tokens(&proxy, &alice, "alice").await;

    let evil = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    let mallory = Browser::new();
    let page = mallory
        .navigate(&evil.authorize_url(&proxy, &Pkce::new(), "m", &[]), "none")
        .await;
    let captured = approve(&proxy, &mallory, &page).await;

    let token_requests = proxy.github.token_requests();
    let codes_before = proxy.count(Keyspace::Codes).await;
    let back = alice.through_github(&captured, "alice").await; // silent at GitHub
    let cb = alice
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 400);
    assert!(
        cb.location().is_none(),
        "nothing may be redirected to the attacker"
    );
    assert!(cb.body.contains("not started in this browser"));
    assert_eq!(
        proxy.github.token_requests(),
        token_requests,
        "GitHub's code must not be exchanged"
    );
    assert_eq!(proxy.count(Keyspace::Codes).await, codes_before);
    // Anyone can send a bad state: counted per source and minute, not stored per request.
    assert!(
        !proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "callback_rejected")
    );
    proxy.app.audit.flush_refusals(true).await.unwrap();
    let trail = proxy.app.audit.all().await.unwrap();
    assert!(
        trail.iter().any(|r| r.kind == "anonymous_refusals"
            && r.event["refused_at"] == "callback"
            && r.event["reason"] == "state_not_this_browser"
            && r.event["count"] == 1),
        "{trail:?}"
    );
}

#[tokio::test]
async fn replayed_state_is_rejected() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let flow_cookie = browser.cookie("__Host-mcp-flow").unwrap();
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    assert_eq!(browser.navigate(&back, "cross-site").await.status, 303);
    let codes = proxy.count(Keyspace::Codes).await;
    // Replay the same callback URL, even with the original flow cookie restored.
    browser.set_cookie("__Host-mcp-flow", &flow_cookie);
    let again = browser.navigate(&back, "cross-site").await;
    assert_eq!(again.status, 400);
    assert!(again.location().is_none());
    assert_eq!(proxy.count(Keyspace::Codes).await, codes);
}

#[tokio::test]
async fn callback_without_state_is_rejected() {
    let proxy = TestProxy::start().await;
    let browser = Browser::new();
    let r = browser
        .navigate(&proxy.url("/callback/github?code=abc"), "cross-site")
        .await;
    assert_eq!(r.status, 400);
    assert!(r.location().is_none());
    assert_eq!(proxy.github.token_requests(), 0);
}

#[tokio::test]
async fn callback_without_flow_cookie_is_rejected_and_burns_the_state() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    let fresh_browser = Browser::new();
    let r = fresh_browser.navigate(&back, "cross-site").await;
    assert_eq!(r.status, 400);
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    assert_eq!(proxy.github.token_requests(), 0);
}

#[tokio::test]
async fn expired_state_is_rejected() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    proxy.clock.advance(601);
    let r = browser.navigate(&back, "cross-site").await;
    assert_eq!(r.status, 400);
    assert!(r.location().is_none());
    assert_eq!(proxy.github.token_requests(), 0);
    assert!(query_param(&back, "state").is_some());
}
