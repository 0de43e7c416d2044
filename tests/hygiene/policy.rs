//! Registration policy: open, initial access token (RFC 7591 §3), closed.

use super::{behind_trusted_proxy, body, register_as};
use crate::support::Options;
use crate::support::TestProxy;
use mcp_oauth_proxy::store::Keyspace;
use serde_json::json;

const IAT: &str = "iat-0123456789abcdef0123456789abcdef";

async fn with_policy(policy: &str) -> TestProxy {
    let token = if policy == "initial_access_token" {
        format!("initial_access_token = \"{IAT}\"\n")
    } else {
        String::new()
    };
    TestProxy::start_with(Options {
        extra_toml: format!("[registration]\npolicy = \"{policy}\"\n{token}"),
        ..Options::default()
    })
    .await
}

#[tokio::test]
async fn closed_registration_refuses_dcr_with_403_and_stores_nothing() {
    let proxy = with_policy("closed").await;
    let r = register_as(&proxy, None, None, &body("Agent", "https://app.example/cb")).await;
    assert_eq!(
        (r.status, r.error()),
        (403, "access_denied"),
        "{:?}",
        r.json
    );
    assert!(
        r.json["error_description"]
            .as_str()
            .unwrap()
            .contains("metadata document")
    );
    assert_eq!(r.headers["cache-control"], "no-store");
    // Even a token does not open a closed registration.
    let r = register_as(
        &proxy,
        None,
        Some(&format!("Bearer {IAT}")),
        &body("Agent", "https://app.example/cb"),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
    assert_eq!(proxy.count(Keyspace::ClientDedupe).await, 0);
    // Anonymous refusals: one aggregate for the source and reason, not one event each.
    proxy.app.audit.flush_refusals(true).await.unwrap();
    let trail = proxy.app.audit.all().await.unwrap();
    let refused: Vec<_> = trail
        .iter()
        .filter(|e| e.kind == "anonymous_refusals")
        .map(|e| (e.event["reason"].clone(), e.event["count"].clone()))
        .collect();
    assert_eq!(refused, [(json!("closed"), json!(2))], "{trail:?}");
    assert!(
        !proxy
            .audit_events()
            .await
            .contains(&"client_registered".to_owned())
    );
}

#[tokio::test]
async fn registration_without_the_initial_access_token_is_refused_401_and_stores_nothing() {
    let proxy = with_policy("initial_access_token").await;
    let b = body("Agent", "https://app.example/cb");
    let r = register_as(&proxy, None, None, &b).await;
    assert_eq!(
        (r.status, r.error()),
        (401, "invalid_token"),
        "{:?}",
        r.json
    );
    assert!(
        r.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    for wrong in [
        "Bearer iat-0123456789abcdef0123456789abcdeX".to_owned(),
        "Bearer ".to_owned(),
        format!("Basic {IAT}"),
        format!("Bearer {IAT}x"),
    ] {
        let r = register_as(&proxy, None, Some(&wrong), &b).await;
        assert_eq!((r.status, r.error()), (401, "invalid_token"), "{wrong}");
    }
    let r = register_as(&proxy, None, Some("Bearer guess"), &b).await;
    assert_eq!(
        r.headers["www-authenticate"],
        "Bearer realm=\"registration\", error=\"invalid_token\""
    );
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
    assert!(
        !proxy
            .audit_events()
            .await
            .contains(&"client_registered".to_owned())
    );
}

#[tokio::test]
async fn registration_with_the_initial_access_token_succeeds() {
    let proxy = with_policy("initial_access_token").await;
    let r = register_as(
        &proxy,
        None,
        Some(&format!("bearer {IAT}")),
        &body("Agent", "https://app.example/cb"),
    )
    .await;
    assert_eq!(r.status, 201, "{:?}", r.json);
    assert_eq!(proxy.count(Keyspace::Clients).await, 1);
}

#[tokio::test]
async fn open_registration_audits_source_and_client_ip() {
    let proxy = behind_trusted_proxy("").await;
    let r = register_as(
        &proxy,
        Some("198.51.100.23"),
        None,
        &body("Agent", "https://app.example/cb"),
    )
    .await;
    assert_eq!(r.status, 201, "{:?}", r.json);
    let all = proxy.app.audit.all().await.unwrap();
    let ev = all
        .iter()
        .find(|e| e.event["event"] == "client_registered")
        .unwrap();
    assert_eq!(ev.event["source"], "dynamic");
    assert_eq!(ev.event["ip"], "198.51.100.23");
    assert_eq!(ev.event["client_id"], r.json["client_id"]);
}

#[tokio::test]
async fn guessing_the_initial_access_token_is_audited_with_the_client_ip() {
    let token = format!(
        "[registration]\npolicy = \"initial_access_token\"\ninitial_access_token = \"{IAT}\"\n"
    );
    let proxy = behind_trusted_proxy(&token).await;
    let b = body("Agent", "https://app.example/cb");
    for auth in [Some("Bearer guess-1"), Some("Bearer guess-2"), None] {
        let r = register_as(&proxy, Some("198.51.100.66"), auth, &b).await;
        assert_eq!(r.status, 401);
    }
    // Counted per source and minute (anonymous: nothing stored per request), with the
    // client IP: the guesser is visible in the trail once the minute is written.
    assert!(
        !proxy
            .app
            .audit
            .all()
            .await
            .unwrap()
            .iter()
            .any(|e| e.kind == "anonymous_refusals"),
        "nothing is written while the minute lasts"
    );
    proxy.app.audit.flush_refusals(true).await.unwrap();
    let all = proxy.app.audit.all().await.unwrap();
    let refused: Vec<_> = all
        .iter()
        .filter(|e| e.event["event"] == "anonymous_refusals")
        .collect();
    let mut reasons: Vec<_> = refused
        .iter()
        .map(|e| (e.event["reason"].clone(), e.event["count"].clone()))
        .collect();
    reasons.sort_by_key(|(r, _)| r.to_string());
    assert_eq!(
        reasons,
        [
            (json!("missing_token"), json!(1)),
            (json!("wrong_token"), json!(2))
        ]
    );
    assert!(
        refused.iter().all(
            |e| e.event["source"] == "198.51.100.66" && e.event["refused_at"] == "registration"
        )
    );
    assert!(
        !all.iter().any(|e| e.event.to_string().contains("guess-")),
        "the presented token is never recorded"
    );
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
    let metrics = proxy.app.metrics.render().unwrap();
    assert!(
        metrics.contains(
            "mcp_proxy_rejections_total{source=\"registration\",reason=\"wrong_token\"} 2"
        ),
        "{metrics}"
    );
}
