//! The `__Host-` flow cookie: exact attributes, set only on approval, and bound to its flow.

use crate::support::client::approve;
use crate::support::{Browser, Client, Pkce, TestProxy};

#[tokio::test]
async fn flow_cookie_attributes_are_exact_and_set_only_on_approval() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    // Before approval the only cookie is the CSRF binding of the form, never the flow cookie.
    let pre = page.set_cookies();
    assert_eq!(pre.len(), 1, "{pre:?}");
    assert!(pre[0].starts_with("__Host-mcp-csrf="));
    for want in ["Path=/", "Secure", "HttpOnly", "SameSite=Lax"] {
        assert!(
            pre[0].split("; ").any(|a| a == want),
            "{want} missing: {}",
            pre[0]
        );
    }
    assert!(browser.cookie("__Host-mcp-flow").is_none());
    let txn = page.hidden("txn").unwrap();
    let csrf = page.hidden("csrf").unwrap();
    let r = browser
        .post_form(
            &proxy.url("/consent"),
            &[("txn", &txn), ("csrf", &csrf), ("decision", "approve")],
            &proxy.base,
            "same-origin",
        )
        .await;
    let cookies = r.set_cookies();
    assert_eq!(cookies.len(), 1);
    let c0 = &cookies[0];
    assert!(c0.starts_with("__Host-mcp-flow="));
    let attrs: Vec<&str> = c0.split("; ").skip(1).collect();
    for want in [
        "Path=/",
        "Secure",
        "HttpOnly",
        "SameSite=Lax",
        "Max-Age=600",
    ] {
        assert!(attrs.contains(&want), "{want} missing: {c0}");
    }
    assert!(!c0.to_ascii_lowercase().contains("domain="));
}

/// A flow cookie from one authorization (client A) does not validate another flow's
/// callback (client B), even in the same browser.
#[tokio::test]
async fn flow_cookie_for_client_a_is_rejected_for_client_b_callback() {
    let proxy = TestProxy::start().await;
    let a = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let b = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    let alice = Browser::new();
    let mallory = Browser::new();
    // Mallory's captured URL for B; Alice's browser holds a flow cookie for her own flow with A.
    let page_b = mallory
        .navigate(&b.authorize_url(&proxy, &Pkce::new(), "m", &[]), "none")
        .await;
    let captured = approve(&proxy, &mallory, &page_b).await;
    let page_a = alice
        .navigate(&a.authorize_url(&proxy, &Pkce::new(), "a", &[]), "none")
        .await;
    approve(&proxy, &alice, &page_a).await;
    assert!(alice.cookie("__Host-mcp-flow").is_some());
    let back = alice
        .through_github(&captured, "alice")
        .await
        .location()
        .unwrap();
    let r = alice.navigate(&back, "cross-site").await;
    assert_eq!(r.status, 400);
    assert!(r.location().is_none());
}

#[tokio::test]
async fn tampered_flow_cookie_is_rejected() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let v = browser.cookie("__Host-mcp-flow").unwrap();
    let (exp, tag) = v.split_once('.').unwrap();
    browser.set_cookie(
        "__Host-mcp-flow",
        &format!("{}.{tag}", exp.parse::<u64>().unwrap() + 3600),
    );
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    assert_eq!(browser.navigate(&back, "cross-site").await.status, 400);
}
