//! Unused registrations are reaped after `unused_client_ttl_secs`; identical unused
//! re-registrations from one client IP are bounded; used registrations are kept for good.

use super::{behind_trusted_proxy, body, register_as};
use crate::support::{Browser, Client, Pkce};
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
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
    for old in &ids[..3] {
        assert!(!exists(&proxy, old).await, "{old} should have been evicted");
    }
    for newest in &ids[3..] {
        assert!(exists(&proxy, newest).await);
    }
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
async fn identical_registration_from_another_address_evicts_nothing() {
    let proxy = behind_trusted_proxy("[registration]\nmax_identical_per_ip = 1\n").await;
    let b = body("Claude", "http://127.0.0.1/callback");
    let a = register_as(&proxy, Some("203.0.113.5"), None, &b).await;
    let other = register_as(&proxy, Some("198.51.100.5"), None, &b).await;
    assert_eq!((a.status, other.status), (201, 201));
    assert!(exists(&proxy, a.json["client_id"].as_str().unwrap()).await);
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
    assert!(exists(&proxy, &first.id).await);
    // The used one plus the single newest unused one.
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
}
