//! Unused registrations are reaped after `unused_client_ttl_secs`; identical unused
//! re-registrations from one client IP are bounded beyond the authorization window, and none
//! is removed while someone may still be signing in with it; used registrations are kept for
//! good; a registration that is gone gets no code.

use super::{behind_trusted_proxy, body, register_as};
use crate::support::client::approve;
use crate::support::{Browser, Client, Pkce};
use mcp_oauth_proxy::flows::register::AUTHORIZATION_WINDOW_SECS;
use mcp_oauth_proxy::store::Keyspace;
use mcp_oauth_proxy::store::StoreExt;
use mcp_oauth_proxy::store::records::ClientRecord;

async fn exists(proxy: &crate::support::TestProxy, id: &str) -> bool {
    proxy
        .app
        .store
        .get_json::<ClientRecord>(Keyspace::Clients, id)
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn unused_registration_is_reaped_after_its_ttl_and_a_used_one_is_kept() {
    let proxy = behind_trusted_proxy("[registration]\nunused_client_ttl_secs = 3600\n").await;
    let unused = Client::register(&proxy, "Abandoned", "https://a.example/cb").await;
    let used = Client::register(&proxy, "Finished", "https://b.example/cb").await;
    let pkce = Pkce::new();
    used.get_code(&proxy, &Browser::new(), "alice", &pkce).await;

    proxy.clock.advance(3599);
    proxy.app.store.sweep_expired().await.unwrap();
    assert!(exists(&proxy, &unused.id).await, "not before its time");

    proxy.clock.advance(2);
    let swept = proxy.app.store.sweep_expired().await.unwrap();
    assert!(swept >= 1);
    assert!(!exists(&proxy, &unused.id).await);
    assert!(exists(&proxy, &used.id).await);
    assert_eq!(proxy.count(Keyspace::Clients).await, 1);
    // The reaped client cannot start an authorization any more; the used one can.
    let page = Browser::new()
        .navigate(
            &unused.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(page.status, 400);
    assert!(page.location().is_none());
    let page = Browser::new()
        .navigate(&used.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200);
    // Long after, the used client is still there.
    proxy.clock.advance(30 * 86_400);
    proxy.app.store.sweep_expired().await.unwrap();
    assert!(exists(&proxy, &used.id).await);
}

/// A flood of identical registrations from one egress IP (an AI platform's users, or an
/// attacker) keeps the dedupe list at its bound: each registration reads at most that many
/// others, not every one made within the authorization window.
#[tokio::test]
async fn registration_flood_from_one_address_keeps_the_dedupe_list_at_its_bound() {
    let proxy = behind_trusted_proxy("[registration]\nmax_identical_per_ip = 3\n").await;
    let b = body("Claude", "http://127.0.0.1/callback");
    for _ in 0..40 {
        let r = register_as(&proxy, Some("203.0.113.9"), None, &b).await;
        assert_eq!(r.status, 201, "{:?}", r.json);
    }
    assert_eq!(proxy.count(Keyspace::Clients).await, 40, "all accepted");
    let lists = proxy
        .app
        .store
        .scan_prefix(Keyspace::ClientDedupe, "")
        .await
        .unwrap();
    assert_eq!(lists.len(), 1);
    let list: serde_json::Value = serde_json::from_slice(&lists[0].1.value).unwrap();
    assert_eq!(list["clients"].as_array().unwrap().len(), 3, "{list}");
}

#[tokio::test]
async fn identical_reregistrations_from_one_address_do_not_pile_up() {
    let proxy = behind_trusted_proxy("[registration]\nmax_identical_per_ip = 2\n").await;
    let b = body("Claude", "http://127.0.0.1/callback");
    let mut ids = Vec::new();
    for _ in 0..5 {
        let r = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
        assert_eq!(r.status, 201, "{:?}", r.json);
        ids.push(r.json["client_id"].as_str().unwrap().to_owned());
    }
    // All young: any of them may be someone's sign-up in progress.
    assert_eq!(proxy.count(Keyspace::Clients).await, 5);
    // Past the authorization window only the bound is left: the three registered when two
    // were already kept lived only for the window.
    proxy.clock.advance(AUTHORIZATION_WINDOW_SECS);
    proxy.app.store.sweep_expired().await.unwrap();
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
    for kept in &ids[..2] {
        assert!(exists(&proxy, kept).await);
    }
    // Another one now removes the oldest unused one, which is past the window.
    let r = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
    assert_eq!(r.status, 201);
    assert!(!exists(&proxy, &ids[0]).await, "the oldest was evicted");
    assert!(exists(&proxy, &ids[1]).await);
    assert!(exists(&proxy, r.json["client_id"].as_str().unwrap()).await);
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
    // Different metadata from the same address is another client.
    let r = register_as(
        &proxy,
        Some("203.0.113.5"),
        None,
        &body("Claude", "http://127.0.0.1/other"),
    )
    .await;
    assert_eq!(r.status, 201);
    assert_eq!(proxy.count(Keyspace::Clients).await, 3);
}

#[tokio::test]
async fn identical_registrations_from_a_shared_address_do_not_evict_a_sign_up_in_progress() {
    // A platform's users all register identical metadata from one egress IP; one of them (or
    // anyone on that IP, on purpose) registers many times while Alice is signing in.
    let proxy = behind_trusted_proxy("").await;
    let b = body("Claude", "https://app.example/cb");
    let r = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
    assert_eq!(r.status, 201);
    let alice = Client {
        id: r.json["client_id"].as_str().unwrap().to_owned(),
        secret: None,
        redirect_uri: "https://app.example/cb".to_owned(),
    };
    let browser = Browser::new();
    let pkce = Pkce::new();
    let page = browser
        .navigate(&alice.authorize_url(&proxy, &pkce, "st-1", &[]), "none")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let github_url = approve(&proxy, &browser, &page).await;
    proxy.clock.advance(60);
    for _ in 0..20 {
        let r = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
        assert_eq!(r.status, 201, "{:?}", r.json);
    }
    assert!(
        exists(&proxy, &alice.id).await,
        "Alice's client was evicted"
    );
    let back = browser.through_github(&github_url, "alice").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 303, "{}", cb.body);
    let code = crate::support::query_param(&cb.location().unwrap(), "code").unwrap();
    let r = alice.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(proxy.count(Keyspace::Clients).await, 21);
}

#[tokio::test]
async fn a_registration_beyond_the_bound_is_kept_for_good_once_used() {
    let proxy = behind_trusted_proxy("[registration]\nmax_identical_per_ip = 1\n").await;
    let b = body("Claude", "https://app.example/cb");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
        ids.push(r.json["client_id"].as_str().unwrap().to_owned());
    }
    // The third is beyond the bound (kept for the window only) but completes a sign-in.
    let third = Client {
        id: ids[2].clone(),
        secret: None,
        redirect_uri: "https://app.example/cb".to_owned(),
    };
    third.tokens(&proxy, &Browser::new(), "alice").await;
    proxy.clock.advance(AUTHORIZATION_WINDOW_SECS);
    proxy.app.store.sweep_expired().await.unwrap();
    assert!(exists(&proxy, &ids[0]).await, "within the bound");
    assert!(
        !exists(&proxy, &ids[1]).await,
        "beyond the bound and unused"
    );
    assert!(exists(&proxy, &ids[2]).await, "used");
    proxy.clock.advance(30 * 86_400);
    proxy.app.store.sweep_expired().await.unwrap();
    assert!(exists(&proxy, &ids[2]).await);
}

#[tokio::test]
async fn a_code_is_never_minted_for_a_registration_removed_mid_authorization() {
    let proxy = behind_trusted_proxy("").await;
    let c = Client::register(&proxy, "Agent", "https://app.example/cb").await;
    let browser = Browser::new();
    let page = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "st-1", &[]), "none")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let github_url = approve(&proxy, &browser, &page).await;
    // Reaped, evicted or deleted while the person is at GitHub.
    proxy
        .app
        .store
        .remove(Keyspace::Clients, &c.id)
        .await
        .unwrap();
    let back = browser.through_github(&github_url, "alice").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 400, "{}", cb.body);
    assert!(cb.location().is_none());
    assert!(cb.body.contains("Unknown application"), "{}", cb.body);
    assert_eq!(proxy.count(Keyspace::Codes).await, 0);
    assert_eq!(proxy.count(Keyspace::Clients).await, 0, "not recreated");
    assert!(
        !proxy
            .audit_events()
            .await
            .contains(&"code_issued".to_owned())
    );
}

#[tokio::test]
async fn identical_registration_from_another_address_evicts_nothing() {
    let proxy = behind_trusted_proxy("[registration]\nmax_identical_per_ip = 1\n").await;
    let b = body("Claude", "http://127.0.0.1/callback");
    let a = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
    let other = register_as(&proxy, Some("198.51.100.5"), None, &b).await;
    assert_eq!((a.status, other.status), (201, 201));
    let (a, other) = (
        a.json["client_id"].as_str().unwrap().to_owned(),
        other.json["client_id"].as_str().unwrap().to_owned(),
    );
    // Past the authorization window each is its address's one kept registration: neither
    // counted against the other's address.
    proxy.clock.advance(AUTHORIZATION_WINDOW_SECS);
    proxy.app.store.sweep_expired().await.unwrap();
    assert!(exists(&proxy, &a).await);
    assert!(exists(&proxy, &other).await);
    // A further one from the second address evicts that address's own, never the first's.
    let third = register_as(&proxy, Some("198.51.100.5"), None, &b).await;
    assert_eq!(third.status, 201, "{:?}", third.json);
    assert!(
        exists(&proxy, &a).await,
        "another address's registration was evicted"
    );
    assert!(!exists(&proxy, &other).await);
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
}

#[tokio::test]
async fn a_used_registration_is_never_evicted_by_identical_ones() {
    let proxy = behind_trusted_proxy("[registration]\nmax_identical_per_ip = 1\n").await;
    let b = body("Claude", "https://app.example/cb");
    let first = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
    let first = Client {
        id: first.json["client_id"].as_str().unwrap().to_owned(),
        secret: None,
        redirect_uri: "https://app.example/cb".to_owned(),
    };
    first.tokens(&proxy, &Browser::new(), "alice").await;
    for _ in 0..3 {
        assert_eq!(
            register_as(&proxy, Some("203.0.113.5"), None, &b)
                .await
                .status,
            201
        );
    }
    proxy.clock.advance(AUTHORIZATION_WINDOW_SECS);
    proxy.app.store.sweep_expired().await.unwrap();
    assert!(exists(&proxy, &first.id).await);
    // The used one plus the single unused one within the bound.
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
    // Another one evicts that unused one, never the used one.
    register_as(&proxy, Some("203.0.113.5"), None, &b).await;
    assert!(exists(&proxy, &first.id).await);
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
}
