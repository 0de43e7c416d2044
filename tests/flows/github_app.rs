//! GitHub App user tokens expire after 8 hours and rotate their refresh token on use. The
//! proxy refreshes once per grant at a time (single-flight) and saves the result atomically;
//! two refreshes of the same GitHub refresh token would kill the grant.

use std::time::Duration;

use crate::support::{Browser, Client, TestProxy};
use mcp_oauth_proxy::ids::UserId;

#[tokio::test]
async fn expiring_github_token_is_refreshed_once_for_concurrent_users() {
    let proxy = TestProxy::start().await;
    proxy.github.set_expiring_tokens(true);
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    c.tokens(&proxy, &Browser::new(), "alice").await;
    let alice = UserId::github(1001);
    let first = proxy.app.grants.access_token(&alice).await.unwrap();
    assert!(first.secret().starts_with("ghu_"));
    let grant = proxy.app.grants.get(&alice).await.unwrap().unwrap();
    assert!(grant.token_expires_at.is_some() && grant.sealed_refresh.is_some());

    // Eight hours later, at GitHub and here.
    proxy
        .github
        .advance_time(Duration::from_secs(8 * 3600 + 60));
    proxy.clock.advance(8 * 3600 + 60);
    let before = proxy.github.token_requests();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let app = proxy.app.clone();
        let user = alice.clone();
        tasks.push(tokio::spawn(async move {
            app.grants.access_token(&user).await.unwrap()
        }));
    }
    let mut tokens = std::collections::BTreeSet::new();
    for t in tasks {
        tokens.insert(t.await.unwrap().secret().to_owned());
    }
    assert_eq!(
        proxy.github.token_requests() - before,
        1,
        "exactly one refresh at GitHub"
    );
    assert_eq!(tokens.len(), 1, "everyone got the refreshed token");
    let new = tokens.into_iter().next().unwrap();
    assert_ne!(new, first.secret());
    // The refreshed token works at GitHub; the old one does not.
    let api = proxy.github.api_url();
    let user = |t: String| {
        let url = format!("{api}/user");
        async move {
            crate::support::http()
                .get(url)
                .bearer_auth(t)
                .header("user-agent", "tests")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(user(new.clone()).await, 200);
    assert_eq!(user(first.secret().to_owned()).await, 401);
    // Saved: the next use needs no refresh.
    assert_eq!(
        proxy
            .app
            .grants
            .access_token(&alice)
            .await
            .unwrap()
            .secret(),
        new
    );
    assert_eq!(proxy.github.token_requests() - before, 1);
}

#[tokio::test]
async fn failed_github_refresh_marks_the_grant_broken() {
    let proxy = TestProxy::start().await;
    proxy.github.set_expiring_tokens(true);
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    c.tokens(&proxy, &Browser::new(), "alice").await;
    let alice = UserId::github(1001);
    proxy.github.revoke_tokens_of("alice");
    proxy
        .github
        .advance_time(Duration::from_secs(8 * 3600 + 60));
    proxy.clock.advance(8 * 3600 + 60);
    assert!(proxy.app.grants.access_token(&alice).await.is_err());
    assert!(
        proxy.app.grants.get(&alice).await.unwrap().unwrap().broken,
        "agents will get a reconnect link"
    );
    // Operators see it happen, once, however many requests notice.
    assert!(proxy.app.grants.access_token(&alice).await.is_err());
    let broken = proxy
        .audit_events()
        .await
        .into_iter()
        .filter(|e| e == "git_hub_grant_broken")
        .count();
    assert_eq!(broken, 1, "one grant-broken audit event");
}
