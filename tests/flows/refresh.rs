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
async fn previous_refresh_token_inside_grace_window_replays_the_same_rotation() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let r1 = c.refresh(&proxy, &rt(&t0), &[]).await;
    proxy.clock.advance(5);
    // A retry with the previous token (the client never saw r1, or refreshed from two
    // places) gets the same next token: the generation is minted once.
    let r1b = c.refresh(&proxy, &rt(&t0), &[]).await;
    assert_eq!(r1b.status, 200, "{:?}", r1b.json);
    assert_eq!(rt(&r1b), rt(&r1));
    assert_ne!(r1b.json["access_token"], r1.json["access_token"]);
    // The client moves on; the token two generations back is now reuse.
    let r2 = c.refresh(&proxy, &rt(&r1b), &[]).await;
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
        .refresh(&proxy, &rt(&t0), &[("scope", "read:user workflow")])
        .await;
    assert_eq!(r.error(), "invalid_scope");
    // A narrower scope is not a narrower token: the backend would still act with the whole
    // GitHub grant, so the token keeps the family's set and the response says which.
    let r = c.refresh(&proxy, &rt(&t0), &[("scope", "read:user")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json["scope"], "read:user repo");
}

/// 64 clients refresh the same refresh token at once: exactly one rotation happens (every
/// success carries the same next token), and the family stays alive.
#[tokio::test]
async fn sixty_four_concurrent_refreshes_rotate_exactly_once() {
    let proxy = std::sync::Arc::new(TestProxy::start().await);
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let token = rt(&t0);
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (p, c, token) = (proxy.clone(), c.clone(), token.clone());
        tasks.push(tokio::spawn(
            async move { c.refresh(&p, &token, &[]).await },
        ));
    }
    let mut issued = std::collections::BTreeSet::new();
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            200 => {
                issued.insert(rt(&r));
            }
            s => assert!(s == 400 || s == 503, "unexpected {s}: {:?}", r.json),
        }
    }
    assert_eq!(issued.len(), 1, "exactly one rotation");
    let next = issued.into_iter().next().unwrap();
    assert_eq!(
        c.refresh(&proxy, &next, &[]).await.status,
        200,
        "the family is alive"
    );
}
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
