//! Consent = real access: the consent page shows exactly the GitHub access the backend will act
//! with, and no GitHub token with more than the person consented to is ever stored or handed
//! to the backend (`proxy/src/bindings/consent_scope.rs`).

use std::collections::BTreeSet;

use mcp_oauth_proxy::store::Keyspace;
use serde_json::json;

use crate::support::client::{JsonResp, approve, register_raw};
use crate::support::mcp::Mcp;
use crate::support::{Browser, Client, Options, Pkce, TestProxy, http, query_param};

/// The scope names a consent page lists.
fn page_scopes(body: &str) -> BTreeSet<String> {
    body.split("<code class=\"mono scope-name\">")
        .skip(1)
        .filter_map(|rest| rest.split_once("</code>").map(|(name, _)| name.to_owned()))
        .collect()
}

/// What the fake GitHub reports (`X-OAuth-Scopes`) for a token, as GitHub would to anyone
/// holding it; `None` if GitHub no longer honours the token.
async fn github_reported_scopes(proxy: &TestProxy, token: &str) -> Option<BTreeSet<String>> {
    let r = http()
        .get(format!("{}/user", proxy.github.api_url()))
        .bearer_auth(token)
        .header("user-agent", "consent-scope-test")
        .send()
        .await
        .unwrap();
    if r.status() != 200 {
        return None;
    }
    Some(
        r.headers()
            .get("x-oauth-scopes")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// The GitHub token the backend last used: the bearer of the last `GET /user` GitHub received
/// (the demo backend's `whoami` calls it with the token it got, in either mode).
fn token_the_backend_used(proxy: &TestProxy) -> String {
    let req = proxy
        .github
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.method == "GET" && r.path().ends_with("/user"))
        .expect("the backend called GitHub");
    req.header("authorization")
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
        .to_owned()
}

/// A client that registered asking only for `read:user`.
async fn harmless_client(proxy: &TestProxy) -> Client {
    let r = register_raw(
        proxy,
        json!({
            "client_name": "Profile Badge",
            "redirect_uris": ["https://badge.example/cb"],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "scope": "read:user",
        }),
    )
    .await;
    assert_eq!(r.status, 201, "{:?}", r.json);
    // RFC 7591 §3.2.1: the server answers with what it registered, the whole set.
    assert_eq!(r.json["scope"], "read:user repo");
    Client {
        id: r.json["client_id"].as_str().unwrap().to_owned(),
        secret: None,
        redirect_uri: "https://badge.example/cb".to_owned(),
    }
}

/// An attacker registers "Profile Badge" asking only for `read:user`, hoping for a page that
/// says "Read your GitHub profile" while the backend acts with `repo`. The page lists the whole
/// set the backend receives, and that set is exactly what GitHub reports for the token the
/// backend used, in both backend modes.
#[tokio::test]
async fn harmless_looking_consent_never_hands_the_backend_more_than_the_page_showed() {
    for exchange in [false, true] {
        let proxy = TestProxy::start_with(Options {
            backend: true,
            exchange,
            ..Options::default()
        })
        .await;
        let client = harmless_client(&proxy).await;
        let browser = Browser::new();
        let pkce = Pkce::new();
        let page = browser
            .navigate(
                &client.authorize_url(&proxy, &pkce, "s", &[("scope", "read:user")]),
                "none",
            )
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let shown = page_scopes(&page.body);
        assert_eq!(
            shown,
            BTreeSet::from(["read:user".to_owned(), "repo".to_owned()]),
            "exchange={exchange}: the page lists every scope the backend will act with"
        );
        assert!(page.body.contains("Full control of your repositories"));

        let gh = approve(&proxy, &browser, &page).await;
        let back = browser.through_github(&gh, "alice").await;
        let cb = browser
            .navigate(&back.location().unwrap(), "cross-site")
            .await;
        assert_eq!(cb.status, 303, "{}", cb.body);
        let code = query_param(&cb.location().unwrap(), "code").unwrap();
        let t: JsonResp = client.redeem(&proxy, &code, &pkce, &[]).await;
        assert_eq!(t.status, 200, "{:?}", t.json);
        // RFC 6749 §3.3/§5.1: a scope other than the one asked for is stated in the response.
        assert_eq!(t.json["scope"], "read:user repo");

        let mut mcp = Mcp::with_token(&proxy, t.json["access_token"].as_str().unwrap());
        mcp.version = "2026-07-28";
        let (status, msg) = mcp.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200);
        assert!(msg.to_string().contains("You are alice"), "{msg}");
        let used = token_the_backend_used(&proxy);
        assert_eq!(
            github_reported_scopes(&proxy, &used).await,
            Some(shown.clone()),
            "exchange={exchange}: the backend's token carries exactly what the page showed"
        );

        // The account page shows the same set, for the consent and as GitHub granted it.
        let account = browser.navigate(&proxy.url("/account"), "none").await;
        assert_eq!(account.status, 200, "{}", account.body);
        assert!(account.body.contains("read:user, repo"), "{}", account.body);
        assert!(proxy.github.violations().is_empty());
    }
}

/// A scope outside `[github] scopes` is `invalid_scope` at `/authorize` (redirected with `iss`,
/// after the client and redirect URI are verified; a page before that), and
/// `invalid_client_metadata` at `/register`. Nothing is stored, GitHub is not contacted.
#[tokio::test]
async fn scope_outside_the_configured_set_is_invalid_scope() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let txns = proxy.count(Keyspace::Transactions).await;
    let clients = proxy.count(Keyspace::Clients).await;
    let github_requests = proxy.github.requests().len();

    for scope in ["admin:org", "read:user delete_repo", "public_repo"] {
        let r = Browser::new()
            .navigate(
                &client.authorize_url(&proxy, &Pkce::new(), "s", &[("scope", scope)]),
                "none",
            )
            .await;
        assert_eq!(r.status, 303, "{scope}");
        let loc = r.location().unwrap();
        assert!(loc.starts_with("https://app.example/callback"), "{loc}");
        assert_eq!(query_param(&loc, "error").as_deref(), Some("invalid_scope"));
        assert_eq!(query_param(&loc, "state").as_deref(), Some("s"));
        assert_eq!(
            query_param(&loc, "iss").as_deref(),
            Some(proxy.base.as_str())
        );
    }
    // Before the redirect URI is verified, the same bad scope is a page, never a redirect.
    let r = Browser::new()
        .navigate(
            &client.authorize_url(
                &proxy,
                &Pkce::new(),
                "s",
                &[
                    ("scope", "admin:org"),
                    ("redirect_uri", "https://evil.example/cb"),
                ],
            ),
            "none",
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.location().is_none());

    let r = register_raw(
        &proxy,
        json!({
            "client_name": "Greedy",
            "redirect_uris": ["https://greedy.example/cb"],
            "token_endpoint_auth_method": "none",
            "scope": "read:user delete_repo",
        }),
    )
    .await;
    assert_eq!(r.status, 400, "{:?}", r.json);
    assert_eq!(r.error(), "invalid_client_metadata");

    assert_eq!(proxy.count(Keyspace::Transactions).await, txns);
    assert_eq!(proxy.count(Keyspace::Clients).await, clients);
    assert_eq!(proxy.github.requests().len(), github_requests);
}

/// What must not change when a GitHub token is refused.
async fn stored(proxy: &TestProxy) -> [usize; 6] {
    [
        proxy.count(Keyspace::Grants).await,
        proxy.count(Keyspace::Consents).await,
        proxy.count(Keyspace::Codes).await,
        proxy.count(Keyspace::Sessions).await,
        proxy.count(Keyspace::Allowances).await,
        proxy.count(Keyspace::AccessTokens).await,
    ]
}

/// The operator narrowed `[github] scopes` to `read:user`, but alice authorized this GitHub
/// app for `repo` earlier, and GitHub silently completes the new request with everything she
/// authorized. The callback refuses that token with a page saying why, revokes it at GitHub,
/// and stores nothing: no grant, consent, session, code or allowance. The same holds when the
/// token arrives through a connect link.
#[tokio::test]
async fn github_token_with_more_scopes_than_consented_is_refused_and_revoked() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        github_scopes: Some(r#"["read:user"]"#.to_owned()),
        ..Options::default()
    })
    .await;
    proxy.github.set_skip_grants_whole_authorization(true);
    proxy.github.authorize_app("alice", &["read:user", "repo"]);

    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page_scopes(&page.body),
        BTreeSet::from(["read:user".to_owned()])
    );
    let before = stored(&proxy).await;
    let gh = approve(&proxy, &browser, &page).await;
    let back = browser.through_github(&gh, "alice").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 403, "{}", cb.body);
    assert!(cb.location().is_none(), "no code goes to the client");
    assert!(
        cb.body
            .contains("GitHub granted more access than you approved"),
        "{}",
        cb.body
    );
    let minted = proxy.github.issued_access_tokens("alice");
    let minted = minted.last().unwrap();
    assert_eq!(
        github_reported_scopes(&proxy, minted).await,
        None,
        "the over-scoped token was revoked at GitHub"
    );
    assert_eq!(stored(&proxy).await, before, "nothing was stored");
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "callback_rejected")
    );

    // Through a connect link: alice's first connection was within the consent; then GitHub's
    // authorization grew again (another tool, say) and her grant broke.
    proxy.github.set_skip_grants_whole_authorization(false);
    proxy.github.revoke_tokens_of("alice"); // forgets her authorization too
    let alice =
        crate::support::people::Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28")
            .await;
    proxy.github.set_skip_grants_whole_authorization(true);
    proxy.github.authorize_app("alice", &["repo"]);
    proxy
        .app
        .grants
        .mark_broken(&mcp_oauth_proxy::ids::UserId::github(1001), "test")
        .await
        .unwrap();
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    let link = msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .find(|w| w.contains("/connect/"))
        .unwrap()
        .to_owned();
    let grant_before = proxy
        .app
        .grants
        .get(&mcp_oauth_proxy::ids::UserId::github(1001))
        .await
        .unwrap()
        .unwrap();
    let r = alice.complete(&proxy, &link, "alice").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body
            .contains("GitHub granted more access than you approved")
    );
    let minted = proxy.github.issued_access_tokens("alice");
    assert_eq!(
        github_reported_scopes(&proxy, minted.last().unwrap()).await,
        None
    );
    let grant_after = proxy
        .app
        .grants
        .get(&mcp_oauth_proxy::ids::UserId::github(1001))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(grant_after.sealed_token, grant_before.sealed_token);
    assert!(grant_after.broken, "the old, broken grant stays as it was");
    assert!(proxy.github.violations().is_empty());
}
