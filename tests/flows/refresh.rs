//! Refresh rotation with a grace window for the immediately previous token, and family
//! revocation on reuse of anything older.

use crate::support::{Browser, Client, Options, TestProxy};
use mcp_oauth_proxy::flows::access::{self, TokenRejection};

fn rt(r: &crate::support::client::JsonResp) -> String {
    r.json["refresh_token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn refresh_reuse_outside_grace_window_revokes_the_family() {
    let proxy = TestProxy::start_with(Options {
        extra_toml: "[tokens]\nrefresh_grace_secs = 30\n".into(),
        ..Options::default()
    })
    .await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let r1 = c.refresh(&proxy, &rt(&t0), &[]).await;
    assert_eq!(r1.status, 200);
    let access1 = r1.json["access_token"].as_str().unwrap().to_owned();
    proxy.clock.advance(31);
    // The old token, after the grace window: reuse.
    let reuse = c.refresh(&proxy, &rt(&t0), &[]).await;
    assert_eq!((reuse.status, reuse.error()), (400, "invalid_grant"));
    assert!(reuse.json.get("access_token").is_none());
    // The whole family is dead: the current refresh token and its access token too.
    assert_eq!(
        c.refresh(&proxy, &rt(&r1), &[]).await.error(),
        "invalid_grant"
    );
    assert_eq!(
        access::authenticate(&proxy.app, &access1)
            .await
            .unwrap()
            .unwrap_err(),
        TokenRejection::Revoked
    );
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "refresh_reuse")
    );
}

#[tokio::test]
async fn previous_refresh_token_inside_grace_window_is_honoured() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let r1 = c.refresh(&proxy, &rt(&t0), &[]).await;
    proxy.clock.advance(5);
    // A retry with the previous token (the client never saw r1) still works...
    let r1b = c.refresh(&proxy, &rt(&t0), &[]).await;
    assert_eq!(r1b.status, 200, "{:?}", r1b.json);
    // ...and the client moves on with what it received.
    assert_eq!(c.refresh(&proxy, &rt(&r1b), &[]).await.status, 200);
    // r1, lost in transit and never used, is now older than the previous token: presenting
    // it is reuse and revokes the family.
    assert_eq!(
        c.refresh(&proxy, &rt(&r1), &[]).await.error(),
        "invalid_grant"
    );
}

#[tokio::test]
async fn token_two_generations_old_is_reuse_even_inside_the_window() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let r1 = c.refresh(&proxy, &rt(&t0), &[]).await;
    let r2 = c.refresh(&proxy, &rt(&r1), &[]).await;
    assert_eq!(r2.status, 200);
    assert_eq!(
        c.refresh(&proxy, &rt(&t0), &[]).await.error(),
        "invalid_grant"
    );
    assert_eq!(
        c.refresh(&proxy, &rt(&r2), &[]).await.error(),
        "invalid_grant",
        "family revoked"
    );
}

#[tokio::test]
async fn refresh_by_another_client_is_rejected_without_harm() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let thief = Client::register(&proxy, "Thief", "https://thief.example/cb").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let r = thief.refresh(&proxy, &rt(&t0), &[]).await;
    assert_eq!((r.status, r.error()), (400, "invalid_grant"));
    assert_eq!(c.refresh(&proxy, &rt(&t0), &[]).await.status, 200);
}

#[tokio::test]
async fn refresh_cannot_widen_scope() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let r = c
        .refresh(&proxy, &rt(&t0), &[("scope", "read:user repo")])
        .await;
    assert_eq!(r.error(), "invalid_scope");
    assert_eq!(
        c.refresh(&proxy, &rt(&t0), &[("scope", "read:user")])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn concurrent_refreshes_keep_exactly_one_family_alive() {
    let proxy = std::sync::Arc::new(TestProxy::start().await);
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let token = rt(&t0);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (p, c, token) = (proxy.clone(), c.clone(), token.clone());
        tasks.push(tokio::spawn(
            async move { c.refresh(&p, &token, &[]).await },
        ));
    }
    let mut issued = Vec::new();
    for t in tasks {
        let r = t.await.unwrap();
        if r.status == 200 {
            issued.push(rt(&r));
        }
    }
    // One rotation plus grace siblings (bounded), all valid, never a revoked family.
    assert!(!issued.is_empty() && issued.len() <= 4, "{}", issued.len());
    assert_eq!(c.refresh(&proxy, &issued[0], &[]).await.status, 200);
}

/// The review's L1: family ids appear in the audit trail. A made-up refresh token for a known
/// family must be refused without revoking the family (or anyone could log its owner out).
#[tokio::test]
async fn forged_refresh_token_for_a_known_family_changes_nothing() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let real = rt(&t0);
    let family = real
        .strip_prefix("mcprt_")
        .unwrap()
        .split('.')
        .next()
        .unwrap();
    let forged = format!("mcprt_{family}.{}", "A".repeat(43));
    let r = c.refresh(&proxy, &forged, &[]).await;
    assert_eq!((r.status, r.error()), (400, "invalid_grant"));
    assert!(
        !proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "refresh_reuse")
    );
    assert_eq!(
        c.refresh(&proxy, &real, &[]).await.status,
        200,
        "the family must be alive"
    );
}
