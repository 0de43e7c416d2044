//! register → authorize → consent → GitHub → callback → token → refresh → revoke.

use crate::support::{Browser, Client, Pkce, TestProxy, query_param};
use mcp_oauth_proxy::flows::access::{self, TokenRejection};
use mcp_oauth_proxy::store::Keyspace;

#[tokio::test]
async fn full_flow_register_authorize_token_refresh_revoke() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let pkce = Pkce::new();

    // /authorize shows the proxy's own consent page first; GitHub has seen nothing yet.
    let page = browser
        .navigate(&client.authorize_url(&proxy, &pkce, "xyz", &[]), "none")
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Repo Helper"));
    assert!(page.body.contains("app.example"));
    assert!(page.body.contains("read:user"));
    assert!(proxy.github.requests().is_empty());
    assert!(
        browser.cookie("__Host-mcp-flow").is_none(),
        "no flow cookie before approval"
    );

    // Approve: redirect to GitHub with our own PKCE and a state, plus the flow cookie.
    let gh = crate::support::client::approve(&proxy, &browser, &page).await;
    assert!(gh.starts_with(&proxy.github.authorize_url()));
    assert_eq!(
        query_param(&gh, "code_challenge_method").as_deref(),
        Some("S256")
    );
    assert_eq!(
        query_param(&gh, "client_id").as_deref(),
        Some("gh-client-id")
    );
    assert!(browser.cookie("__Host-mcp-flow").is_some());

    // GitHub (first time: its own consent screen), then our callback.
    let back = browser.through_github(&gh, "alice").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 303);
    let loc = cb.location().unwrap();
    assert!(
        loc.starts_with("https://app.example/callback?code=mcpac_"),
        "{loc}"
    );
    assert_eq!(query_param(&loc, "state").as_deref(), Some("xyz"));
    assert_eq!(
        query_param(&loc, "iss").as_deref(),
        Some(proxy.base.as_str())
    );
    assert!(browser.cookie("__Host-mcp-session").is_some());
    assert!(
        browser.cookie("__Host-mcp-flow").is_none(),
        "flow cookie cleared after use"
    );

    // Token.
    let code = query_param(&loc, "code").unwrap();
    let t = client.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(t.status, 200, "{:?}", t.json);
    assert_eq!(t.headers["cache-control"], "no-store");
    assert_eq!(t.json["token_type"], "Bearer");
    // It asked for read:user; every consent is for the whole `[github] scopes`, and the
    // response says so (RFC 6749 §3.3).
    assert_eq!(t.json["scope"], "read:user repo");
    let access = t.json["access_token"].as_str().unwrap().to_owned();
    let refresh = t.json["refresh_token"].as_str().unwrap().to_owned();
    assert!(access.starts_with("mcpat_") && refresh.starts_with("mcprt_"));
    let rec = access::authenticate(&proxy.app, &access)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.get().resource, proxy.url("/mcp"));
    assert_eq!(rec.get().user_id.as_str(), "github:1001");

    // The GitHub token is stored sealed, never in the clear.
    let gh_tokens = proxy.github.issued_access_tokens("alice");
    assert_eq!(gh_tokens.len(), 1);
    let grants = proxy
        .app
        .store
        .scan_prefix(Keyspace::Grants, "")
        .await
        .unwrap();
    assert_eq!(grants.len(), 1);
    assert!(!String::from_utf8_lossy(&grants[0].1.value).contains(&gh_tokens[0]));
    assert!(!t.json.to_string().contains("gho_"));

    // Refresh rotates.
    let r = client.refresh(&proxy, &refresh, &[]).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let refresh2 = r.json["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(refresh2, refresh);
    let access2 = r.json["access_token"].as_str().unwrap().to_owned();

    // Revoke the refresh token: the family dies, with its access tokens.
    assert_eq!(client.revoke(&proxy, &refresh2).await, 200);
    assert_eq!(
        client.refresh(&proxy, &refresh2, &[]).await.error(),
        "invalid_grant"
    );
    assert_eq!(
        access::authenticate(&proxy.app, &access2)
            .await
            .unwrap()
            .unwrap_err(),
        TokenRejection::Revoked
    );
    assert_eq!(
        access::authenticate(&proxy.app, &access)
            .await
            .unwrap()
            .unwrap_err(),
        TokenRejection::Revoked
    );

    // The fake GitHub never saw a proxy token.
    assert!(
        proxy.github.violations().is_empty(),
        "{:?}",
        proxy.github.violations()
    );
    let events = proxy.audit_events().await;
    for e in [
        "client_registered",
        "consent_shown",
        "consent_approved",
        "signed_in",
        "consent_recorded",
        "code_issued",
        "token_issued",
        "token_refreshed",
        "token_revoked",
    ] {
        assert!(
            events.iter().any(|x| x == e),
            "missing audit event {e}: {events:?}"
        );
    }
}

#[tokio::test]
async fn remembered_consent_skips_the_page_only_for_a_direct_navigation() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    client.tokens(&proxy, &browser, "alice").await;
    let token_requests = proxy.github.token_requests();

    // Same client, same browser, opened by the app: no page, no GitHub round trip.
    let pkce = Pkce::new();
    let r = browser
        .navigate(&client.authorize_url(&proxy, &pkce, "s2", &[]), "none")
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let loc = r.location().unwrap();
    assert_eq!(
        query_param(&loc, "iss").as_deref(),
        Some(proxy.base.as_str())
    );
    let code = query_param(&loc, "code").unwrap();
    assert_eq!(client.redeem(&proxy, &code, &pkce, &[]).await.status, 200);
    assert_eq!(proxy.github.token_requests(), token_requests);

    // The same request arriving as a cross-site navigation (a link on another site) shows the page.
    let r = browser
        .navigate(
            &client.authorize_url(&proxy, &pkce, "s3", &[]),
            "cross-site",
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.location().is_none());

    // Naming other configured scopes is the same consent (always the whole set): no page.
    // (More scopes, from an operator adding to `[github] scopes`, need the page again:
    // `consent_registry::tests::scope_growth_requires_reconsent`.)
    let r = browser
        .navigate(
            &client.authorize_url(&proxy, &pkce, "s4", &[("scope", "read:user repo")]),
            "none",
        )
        .await;
    assert_eq!(r.status, 303);

    // A stale sign-in shows the page.
    proxy.clock.advance(3601);
    let r = browser
        .navigate(&client.authorize_url(&proxy, &pkce, "s5", &[]), "none")
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn denied_consent_returns_access_denied_with_iss_and_no_github_contact() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "st", &[]),
            "none",
        )
        .await;
    let r = crate::support::client::decide(&proxy, &browser, &page, "deny").await;
    assert_eq!(r.status, 303);
    let loc = r.location().unwrap();
    assert_eq!(query_param(&loc, "error").as_deref(), Some("access_denied"));
    assert_eq!(query_param(&loc, "state").as_deref(), Some("st"));
    assert_eq!(
        query_param(&loc, "iss").as_deref(),
        Some(proxy.base.as_str())
    );
    assert!(proxy.github.requests().is_empty());
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    // The transaction is spent: approving it afterwards fails.
    let again = crate::support::client::decide(&proxy, &browser, &page, "approve").await;
    assert_eq!(again.status, 400);
    assert!(again.location().is_none());
}

/// After GitHub stopped honouring the person's grant, a remembered consent must not keep
/// issuing codes silently: the page (and a new GitHub round trip) comes back.
#[tokio::test]
async fn broken_github_grant_stops_the_consent_skip() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    client.tokens(&proxy, &browser, "alice").await;
    proxy
        .app
        .grants
        .mark_broken(&mcp_oauth_proxy::ids::UserId::github(1001), "test")
        .await
        .unwrap();
    let codes = proxy.count(Keyspace::Codes).await;
    let r = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(r.status, 200, "consent page expected");
    assert_eq!(proxy.count(Keyspace::Codes).await, codes);
}

/// A browser that sends no fetch metadata gets the page even with a remembered consent.
#[tokio::test]
async fn navigation_without_fetch_metadata_does_not_skip_consent() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    client.tokens(&proxy, &browser, "alice").await;
    let url = client.authorize_url(&proxy, &Pkce::new(), "s", &[]);
    let r = crate::support::http()
        .get(&url)
        .header(
            "cookie",
            format!(
                "__Host-mcp-session={}",
                browser.cookie("__Host-mcp-session").unwrap()
            ),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("location").is_none());
}
