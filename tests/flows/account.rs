//! The account page: approved clients listed; revoking one kills its tokens at once and the
//! next authorization asks for consent again.

use crate::support::{Browser, Client, Pkce, TestProxy};
use mcp_oauth_proxy::flows::access::{self, TokenRejection};
use mcp_oauth_proxy::store::Keyspace;

#[tokio::test]
async fn revoking_a_client_on_the_account_page_kills_its_tokens_and_requires_consent_again() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let other = Client::register(&proxy, "Docs Bot", "https://docs.example/cb").await;
    let browser = Browser::new();
    let t = c.tokens(&proxy, &browser, "alice").await;
    let keep = other.tokens(&proxy, &browser, "alice").await;

    let page = browser.navigate(&proxy.url("/account"), "none").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for s in [
        "alice",
        "Repo Helper",
        "app.example",
        "Docs Bot",
        "read:user",
        "approved just now",
        "last used just now",
    ] {
        assert!(page.body.contains(s), "{s} missing from the account page");
    }
    let csrf = page.hidden("csrf").unwrap();

    // A cross-site form, or a wrong CSRF token, changes nothing.
    let evil = browser
        .post_form(
            &proxy.url("/account/revoke"),
            &[("client_id", &c.id), ("csrf", &csrf)],
            "https://evil.example",
            "cross-site",
        )
        .await;
    assert_eq!(evil.status, 403);
    let forged = browser
        .post_form(
            &proxy.url("/account/revoke"),
            &[("client_id", &c.id), ("csrf", "forged")],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(forged.status, 403);
    let access = t.json["access_token"].as_str().unwrap();
    assert!(
        access::authenticate(&proxy.app, access)
            .await
            .unwrap()
            .is_ok()
    );

    let r = browser
        .post_form(
            &proxy.url("/account/revoke"),
            &[("client_id", &c.id), ("csrf", &csrf)],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(r.status, 303);
    assert_eq!(r.location().as_deref(), Some("/account?notice=revoked"));

    // At once: the access token, the refresh token.
    assert_eq!(
        access::authenticate(&proxy.app, access)
            .await
            .unwrap()
            .unwrap_err(),
        TokenRejection::Revoked
    );
    assert_eq!(
        c.refresh(&proxy, t.json["refresh_token"].as_str().unwrap(), &[])
            .await
            .error(),
        "invalid_grant"
    );
    // The other client is untouched.
    assert!(
        access::authenticate(&proxy.app, keep.json["access_token"].as_str().unwrap())
            .await
            .unwrap()
            .is_ok()
    );
    // The next flow for the revoked client shows the consent page, even as a direct navigation.
    let again = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(again.status, 200);
    assert!(again.body.contains("Repo Helper"));
    let page = browser
        .navigate(&proxy.url("/account?notice=revoked"), "same-origin")
        .await;
    assert!(!page.body.contains("Repo Helper"));
    assert!(page.body.contains("Access was revoked"));
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "client_access_revoked")
    );
}

/// A code issued just before the person revoked the client cannot be redeemed afterwards.
#[tokio::test]
async fn code_issued_before_revocation_is_refused_after_it() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &browser, "alice", &pkce).await;
    let page = browser.navigate(&proxy.url("/account"), "none").await;
    let csrf = page.hidden("csrf").unwrap();
    browser
        .post_form(
            &proxy.url("/account/revoke"),
            &[("client_id", &c.id), ("csrf", &csrf)],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(
        c.redeem(&proxy, &code, &pkce, &[]).await.error(),
        "invalid_grant"
    );
    assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
}

#[tokio::test]
async fn account_page_without_session_signs_in_through_github_and_comes_back() {
    let proxy = TestProxy::start().await;
    let browser = Browser::new();
    let r = browser.navigate(&proxy.url("/account"), "none").await;
    assert_eq!(r.status, 303);
    let gh = r.location().unwrap();
    assert!(gh.starts_with(&proxy.github.authorize_url()));
    let back = browser.through_github(&gh, "bob").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 303);
    assert_eq!(cb.location().as_deref(), Some("/account"));
    let page = browser
        .navigate(&proxy.url("/account"), "same-origin")
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("bob"));
    assert!(page.body.contains("not approved any clients"));

    // Sign out ends the session.
    let csrf = page.hidden("csrf").unwrap();
    let out = browser
        .post_form(
            &proxy.url("/account/sign-out"),
            &[("csrf", &csrf)],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(out.status, 200);
    assert!(browser.cookie("__Host-mcp-session").is_none());
    assert_eq!(
        browser
            .navigate(&proxy.url("/account"), "none")
            .await
            .status,
        303
    );
}

/// The review's M2: a person revokes a client while that client is redeeming a code. Whatever
/// the interleaving, no token from that redemption may stay usable.
#[tokio::test]
async fn revocation_racing_a_code_redemption_leaves_nothing_usable() {
    let proxy = std::sync::Arc::new(TestProxy::start().await);
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    for _ in 0..12 {
        let browser = Browser::new();
        let pkce = Pkce::new();
        let code = c.get_code(&proxy, &browser, "alice", &pkce).await;
        let page = browser.navigate(&proxy.url("/account"), "none").await;
        let csrf = page.hidden("csrf").unwrap();
        let redeem = {
            let (p, c, code, pkce) = (proxy.clone(), c.clone(), code.clone(), pkce.clone());
            tokio::spawn(async move { c.redeem(&p, &code, &pkce, &[]).await })
        };
        browser
            .post_form(
                &proxy.url("/account/revoke"),
                &[("client_id", &c.id), ("csrf", &csrf)],
                &proxy.base,
                "same-origin",
            )
            .await;
        let r = redeem.await.unwrap();
        if r.status == 200 {
            let access = r.json["access_token"].as_str().unwrap();
            assert!(
                access::authenticate(&proxy.app, access)
                    .await
                    .unwrap()
                    .is_err(),
                "access token survived the revocation"
            );
            assert_eq!(
                c.refresh(&proxy, r.json["refresh_token"].as_str().unwrap(), &[])
                    .await
                    .error(),
                "invalid_grant"
            );
        }
    }
}
