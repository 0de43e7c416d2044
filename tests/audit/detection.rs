//! Each alert fires for its case, once, and none fires in normal flows.

use super::support::alerts;
use crate::support::mcp::Mcp;
use crate::support::people::Person;
use crate::support::{Browser, Client, Options, Pkce, TestProxy};
use mcp_oauth_proxy::clock::Clock;
use mcp_oauth_proxy::ids::{ClientId, UserId};
use mcp_oauth_proxy::oauth::pkce::CodeChallenge;
use mcp_oauth_proxy::oauth::scope::ScopeSet;
use mcp_oauth_proxy::store::records::{AccessTokenRecord, CodeRecord};
use mcp_oauth_proxy::store::{Keyspace, StoreExt};
use serde_json::json;

/// Normal use: a native (loopback) client used right away, a web client used an hour after
/// registering, refreshes, a revocation, a second authorization. No alert.
#[tokio::test]
async fn normal_flows_raise_no_alert() {
    let proxy = TestProxy::start().await;
    let native = Client::register(&proxy, "Desktop", "http://127.0.0.1:7777/cb").await;
    let t = native.tokens(&proxy, &Browser::new(), "alice").await;
    let r = native
        .refresh(&proxy, t.json["refresh_token"].as_str().unwrap(), &[])
        .await;
    assert_eq!(r.status, 200);
    let web = Client::register(&proxy, "Web", "https://normal-web.example/cb").await;
    proxy.clock.advance(3600);
    let browser = Browser::new();
    let t = web.tokens(&proxy, &browser, "bob").await;
    web.revoke(&proxy, t.json["refresh_token"].as_str().unwrap())
        .await;
    super::support::remembered_tokens(&proxy, &browser, &web).await;
    assert!(
        alerts(&proxy).await.is_empty(),
        "{:?}",
        alerts(&proxy).await
    );
}

/// The confused-deputy signature: a code exists for a person and client with no consent
/// behind it (planted through the store, as a bug or an attacker with store access would).
/// Presenting it is refused, nothing is minted, and the alert fires.
#[tokio::test]
async fn code_without_consent_is_refused_and_raises_the_confused_deputy_alert() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Target", "https://deputy.example/cb").await;
    let pkce = Pkce::new();
    let code = "mcpac_planted-code-without-any-consent-behind-it";
    let rec = CodeRecord {
        client_id: ClientId::new(c.id.clone()),
        redirect_uri: c.redirect_uri.clone(),
        redirect_uri_explicit: true,
        code_challenge: CodeChallenge::parse(Some(&pkce.challenge), Some("S256")).unwrap(),
        resource: proxy.url("/mcp"),
        scopes: ScopeSet::from_list(["read:user"]),
        user_id: UserId::github(1001),
        family_id: mcp_oauth_proxy::ids::FamilyId::new("plantedfamily000000000"),
        issued_at: proxy.clock.now(),
        code_id: "planted".into(),
    };
    proxy
        .app
        .store
        .put_json(
            Keyspace::Codes,
            &mcp_oauth_proxy::crypto::hash_secret(code),
            &rec,
            Some(proxy.clock.now().plus(60)),
        )
        .await
        .unwrap();
    let r = c.redeem(&proxy, code, &pkce, &[]).await;
    assert_eq!((r.status, r.error()), (400, "invalid_grant"));
    assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
    assert_eq!(proxy.count(Keyspace::RefreshFamilies).await, 0);
    assert_eq!(proxy.count(Keyspace::Codes).await, 1, "nothing consumed");
    assert_eq!(alerts(&proxy).await, ["code_without_consent"]);
    let ev = super::support::records(&proxy).await;
    let alert = &ev.iter().find(|r| r.kind == "alert_raised").unwrap().event;
    assert_eq!(alert["user_id"], "github:1001");
    assert_eq!(alert["client_id"], c.id.as_str());
}

/// A client registered moments ago receives a code for a host nobody approved before: the
/// shape of a phishing link built around a fresh registration.
#[tokio::test]
async fn fresh_client_getting_a_code_for_a_new_host_raises_an_alert() {
    // Approvals count only when admission is closed (everyone who approved was admitted).
    let proxy = TestProxy::start_with(Options {
        access: r#"github_users = ["alice", "bob", "mallory"]"#.to_owned(),
        ..Options::default()
    })
    .await;
    let c = Client::register(&proxy, "Totally Legit", "https://brand-new-host.example/cb").await;
    c.tokens(&proxy, &Browser::new(), "alice").await;
    assert_eq!(alerts(&proxy).await, ["fresh_client_new_host"]);
    let ev = super::support::records(&proxy).await;
    let kinds: Vec<&str> = ev.iter().map(|r| r.kind.as_str()).collect();
    let code = kinds.iter().position(|k| *k == "code_issued").unwrap();
    assert_eq!(kinds[code + 1], "alert_raised", "raised with the code");
    // One earlier approver is not enough (the consent page's rule: two distinct people).
    let again = Client::register(&proxy, "Second", "https://brand-new-host.example/cb").await;
    again.tokens(&proxy, &Browser::new(), "bob").await;
    assert_eq!(
        alerts(&proxy).await,
        ["fresh_client_new_host", "fresh_client_new_host"]
    );
    // Once two other people approved that host, a fresh client there is no longer flagged.
    let third = Client::register(&proxy, "Third", "https://brand-new-host.example/cb").await;
    third.tokens(&proxy, &Browser::new(), "mallory").await;
    assert_eq!(
        alerts(&proxy).await,
        ["fresh_client_new_host", "fresh_client_new_host"]
    );
}

/// The attacker approves their own fresh phishing client first, so its host has an approver
/// before any victim arrives: the victim's code still raises the alert.
#[tokio::test]
async fn attacker_approving_their_own_fresh_client_first_does_not_silence_the_alert() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Totally Legit", "https://phish.example/cb").await;
    c.tokens(&proxy, &Browser::new(), "mallory").await;
    assert_eq!(alerts(&proxy).await, ["fresh_client_new_host"]);
    c.tokens(&proxy, &Browser::new(), "alice").await;
    assert_eq!(
        alerts(&proxy).await,
        ["fresh_client_new_host", "fresh_client_new_host"],
        "the victim's code is flagged too"
    );
}

#[tokio::test]
async fn refresh_token_reuse_raises_an_alert() {
    let proxy = TestProxy::start_with(Options {
        extra_toml: "[tokens]\nrefresh_reuse = \"strict\"\nrefresh_grace_secs = 30\n".into(),
        ..Options::default()
    })
    .await;
    let c = Client::register(&proxy, "Repo Helper", "http://127.0.0.1:9/cb").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let old = t0.json["refresh_token"].as_str().unwrap();
    assert_eq!(c.refresh(&proxy, old, &[]).await.status, 200);
    assert!(alerts(&proxy).await.is_empty());
    proxy.clock.advance(31);
    assert_eq!(c.refresh(&proxy, old, &[]).await.error(), "invalid_grant");
    assert_eq!(alerts(&proxy).await, ["refresh_token_reuse"]);
}

#[tokio::test]
async fn connect_link_opened_by_the_wrong_person_raises_an_alert() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    let link = msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .find(|w| w.contains("/connect/"))
        .unwrap()
        .to_owned();
    let before = alerts(&proxy).await;
    assert!(!before.contains(&"connect_link_wrong_person".to_owned()));
    let mallory = Browser::new();
    let gh = mallory.navigate(&link, "none").await.location().unwrap();
    let back = mallory.through_github(&gh, "mallory").await;
    mallory
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(mallory.navigate(&link, "same-origin").await.status, 403);
    let after = alerts(&proxy).await;
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(after.last().unwrap(), "connect_link_wrong_person");
}

/// Tokens minted for another resource arriving at `/mcp` in a burst: one alert at the
/// threshold, none below it.
#[tokio::test]
async fn burst_of_wrong_audience_tokens_raises_one_alert() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        extra_toml: "[alerts]\nwrong_audience_threshold = 3\nwrong_audience_window_secs = 60\n"
            .into(),
        ..Options::default()
    })
    .await;
    let mcp = Mcp::for_user(&proxy, "alice").await;
    let hash = mcp_oauth_proxy::crypto::hash_secret(&mcp.token);
    let mut rec: AccessTokenRecord = proxy
        .app
        .store
        .get_json(Keyspace::AccessTokens, &hash)
        .await
        .unwrap()
        .unwrap();
    rec.resource = "https://other.example/mcp".into();
    proxy
        .app
        .store
        .put_json(Keyspace::AccessTokens, &hash, &rec, Some(rec.expires_at))
        .await
        .unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let rate = |a: Vec<String>| a.iter().filter(|k| *k == "wrong_audience_rate").count();
    for _ in 0..2 {
        assert_eq!(mcp.post(&ping).send().await.unwrap().status(), 401);
    }
    assert_eq!(rate(alerts(&proxy).await), 0, "below the threshold");
    for _ in 0..3 {
        assert_eq!(mcp.post(&ping).send().await.unwrap().status(), 401);
    }
    assert_eq!(rate(alerts(&proxy).await), 1, "one alert per burst");
    // After the window a new burst alerts again.
    proxy.clock.advance(61);
    for _ in 0..3 {
        mcp.post(&ping).send().await.unwrap();
    }
    assert_eq!(rate(alerts(&proxy).await), 2);
}
