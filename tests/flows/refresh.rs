//! Refresh rotation with a grace window for the immediately previous token; under
//! `refresh_reuse = "strict"`, family revocation on reuse of anything older; under the default
//! `"branch"`, a branch for a recent stale copy of the family's own client (several processes
//! sharing one credential), and revocation for a copy older than `refresh_stale_secs` or a
//! fork beyond `refresh_max_branches` (SECURITY.md, "Refresh rotation").

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::support::{Browser, Client, Options, TestProxy};
use mcp_oauth_proxy::flows::access::{self, TokenRejection};
use mcp_oauth_proxy::ids::RefreshToken;
use mcp_oauth_proxy::oauth::grant;
use mcp_oauth_proxy::store::records::FamilyRecord;
use mcp_oauth_proxy::store::{Keyspace, StoreExt};
use serde_json::Value;

const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;

fn rt(r: &crate::support::client::JsonResp) -> String {
    r.json["refresh_token"].as_str().unwrap().to_owned()
}

/// A proxy with `refresh_reuse = "strict"` (today's tests of the strict policy) and `extra`.
async fn strict(extra: &str) -> TestProxy {
    TestProxy::start_with(Options {
        extra_toml: format!("[tokens]\nrefresh_reuse = \"strict\"\n{extra}"),
        ..Options::default()
    })
    .await
}

/// A proxy with the default `branch` policy and `[tokens]` keys `extra`; no rate limits (the
/// concurrency tests send far more than a client would).
async fn branching(extra: &str) -> TestProxy {
    TestProxy::start_with(Options {
        extra_toml: format!("[tokens]\n{extra}\n[rate_limits]\nenabled = false\n"),
        ..Options::default()
    })
    .await
}

async fn family(proxy: &TestProxy, token: &str) -> FamilyRecord {
    let id = grant::refresh_family(&RefreshToken::new(token)).unwrap();
    proxy
        .app
        .store
        .get_json(Keyspace::RefreshFamilies, id.as_str())
        .await
        .unwrap()
        .unwrap()
}

async fn events(proxy: &TestProxy, name: &str) -> Vec<Value> {
    proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == name)
        .map(|r| r.event)
        .collect()
}

/// Asserts that presenting `token` was refused as reuse of the case named, raising the alert
/// that names it, minting nothing and revoking the family (its other tokens stop too).
async fn assert_refused_as_reuse(
    proxy: &TestProxy,
    c: &Client,
    token: &str,
    case: &str,
    others: &[&str],
) {
    let before = proxy.count(Keyspace::AccessTokens).await;
    let reuses_before = events(proxy, "refresh_reuse").await.len();
    let r = c.refresh(proxy, token, &[]).await;
    assert_eq!(
        (r.status, r.error()),
        (400, "invalid_grant"),
        "{:?}",
        r.json
    );
    assert!(r.json.get("access_token").is_none() && r.json.get("refresh_token").is_none());
    let reuse = events(proxy, "refresh_reuse").await;
    assert_eq!(reuse.len(), reuses_before + 1);
    assert_eq!(reuse.last().unwrap()["case"], case);
    let alerts = events(proxy, "alert_raised").await;
    let alert = alerts.last().expect("an alert");
    assert_eq!(alert["alert"], "refresh_token_reuse");
    assert!(alert["detail"].as_str().unwrap().contains(case), "{alert}");
    assert!(family(proxy, token).await.revoked);
    assert!(
        proxy.count(Keyspace::AccessTokens).await <= before,
        "nothing minted"
    );
    for other in others {
        assert_eq!(
            c.refresh(proxy, other, &[]).await.error(),
            "invalid_grant",
            "the family is revoked"
        );
    }
}

#[tokio::test]
async fn refresh_reuse_outside_grace_window_revokes_the_family() {
    let proxy = strict("refresh_grace_secs = 30\n").await;
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
    assert_eq!(
        events(&proxy, "refresh_reuse").await[0]["case"],
        "previous_outside_grace"
    );
}

#[tokio::test]
async fn previous_refresh_token_inside_grace_window_replays_the_same_rotation() {
    let proxy = strict("").await;
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
    let proxy = strict("").await;
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
    assert_eq!(events(&proxy, "refresh_reuse").await[0]["case"], "retired");
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

/// Claude Code's habit (anthropics/claude-code #74250, #85236, #91641, #66210): several
/// processes keep one stored credential, each refreshes from its own in-memory copy and
/// writes what it gets back to the shared store, which new processes read. Three processes
/// start from one copy and refresh hours apart; one exits and a new one reads the store; for
/// two days every refresh of every process works, nobody is logged out, nothing alerts, and
/// each fork is in the trail.
#[tokio::test]
async fn parallel_processes_sharing_a_credential_keep_refreshing() {
    let proxy = branching("").await;
    let c = Client::register(&proxy, "Claude Code", "http://127.0.0.1:33418/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let mut shared = rt(&t0);
    // What each process holds in memory.
    let mut process: Vec<String> = vec![shared.clone(); 3];
    let mut issued = BTreeSet::from([shared.clone()]);
    let mut access = Vec::new();
    let mut refresh = async |proxy: &TestProxy, held: &mut String, shared: &mut String| {
        let r = c.refresh(proxy, held, &[]).await;
        assert_eq!(r.status, 200, "a process was logged out: {:?}", r.json);
        *held = rt(&r);
        held.clone_into(shared);
        assert!(
            issued.insert(held.clone()),
            "a refresh token handed out twice"
        );
        access.push(r.json["access_token"].as_str().unwrap().to_owned());
    };
    // Hours apart, each process refreshes from the copy it started with: the first rotates,
    // the others are stale and branch.
    for p in &mut process {
        proxy.clock.advance(2 * HOUR);
        refresh(&proxy, p, &mut shared).await;
    }
    assert_eq!(family(&proxy, &shared).await.branches.len(), 3);
    // Process 1 exits; a new one starts from the shared store (process 2's latest token), so
    // two processes hold one copy again.
    process[1] = shared.clone();
    for round in 0..8 {
        proxy.clock.advance(4 * HOUR);
        for (i, p) in (0u64..).zip(process.iter_mut()) {
            proxy.clock.advance(HOUR + 7 * i + round);
            refresh(&proxy, p, &mut shared).await;
        }
    }
    let fam = family(&proxy, &shared).await;
    assert!(!fam.revoked);
    assert!(events(&proxy, "refresh_reuse").await.is_empty());
    assert!(events(&proxy, "alert_raised").await.is_empty());
    // Two forks at the start, one when the new process shared process 2's copy.
    let branched = events(&proxy, "refresh_branched").await;
    assert_eq!(branched.len(), 3, "{branched:?}");
    assert!(
        branched
            .iter()
            .all(|e| e["family_id"] == fam.family_id.as_str())
    );
    // The latest access token works.
    let last = access.last().unwrap();
    assert!(
        access::authenticate(&proxy.app, last)
            .await
            .unwrap()
            .is_ok()
    );
}

/// The stated policy for a copy the same client presents days after it was superseded: within
/// `refresh_stale_secs` (7 days by default) a branch of its own, with the family and the
/// process that moved on unharmed; beyond it, refused with `invalid_grant`, the alert names
/// `stale_beyond_window`, and the family is revoked.
#[tokio::test]
async fn refresh_token_replayed_days_later_by_the_same_client_follows_the_stated_policy() {
    let proxy = branching("").await;
    let c = Client::register(&proxy, "Claude Code", "http://127.0.0.1:33418/callback").await;

    // 3 days later: a branch.
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let r1 = c.refresh(&proxy, &rt(&t0), &[]).await;
    assert_eq!(r1.status, 200);
    proxy.clock.advance(3 * DAY);
    let late = c.refresh(&proxy, &rt(&t0), &[]).await;
    assert_eq!(late.status, 200, "{:?}", late.json);
    assert_ne!(rt(&late), rt(&r1));
    let branched = events(&proxy, "refresh_branched").await;
    assert_eq!(branched.len(), 1);
    // Two branches; the one that moved on 3 days ago and has not refreshed since is idle.
    assert_eq!(
        (
            &branched[0]["branches"],
            &branched[0]["live"],
            &branched[0]["ip"]
        ),
        (&Value::from(2), &Value::from(1), &Value::from("127.0.0.1")),
        "{branched:?}"
    );
    assert!(events(&proxy, "alert_raised").await.is_empty());
    for token in [rt(&r1), rt(&late)] {
        assert_eq!(c.refresh(&proxy, &token, &[]).await.status, 200);
    }

    // 8 days later (another authorization): refused, and the family is revoked.
    let u0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let u1 = c.refresh(&proxy, &rt(&u0), &[]).await;
    assert_eq!(u1.status, 200);
    proxy.clock.advance(8 * DAY);
    assert_refused_as_reuse(&proxy, &c, &rt(&u0), "stale_beyond_window", &[&rt(&u1)]).await;
}

/// A thief replays a refresh token after the legitimate client moved on: a copy superseded
/// longer than `refresh_stale_secs` ago, or a recent copy while the family already has
/// `refresh_max_branches` live branches (here 2: the client's process and its stale
/// sibling). Each is refused with `invalid_grant`, the alert names its case, nothing is
/// minted, and the family is revoked.
#[tokio::test]
async fn refresh_token_stolen_and_used_after_the_client_moved_on_is_refused_and_alerts() {
    let proxy = branching("refresh_max_branches = 2").await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;

    // Beyond the stale window: the client refreshes daily; the thief's copy is 8 days old.
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let stolen = rt(&t0);
    let mut current = stolen.clone();
    for _ in 0..8 {
        let r = c.refresh(&proxy, &current, &[]).await;
        assert_eq!(r.status, 200);
        current = rt(&r);
        proxy.clock.advance(DAY);
    }
    let before = family(&proxy, &current).await;
    assert_refused_as_reuse(&proxy, &c, &stolen, "stale_beyond_window", &[&current]).await;
    let after = family(&proxy, &current).await;
    assert_eq!(after.branches.len(), before.branches.len(), "no branch");
    assert_eq!(
        after.branches.iter().map(|b| &b.head).collect::<Vec<_>>(),
        before.branches.iter().map(|b| &b.head).collect::<Vec<_>>(),
        "nothing minted"
    );

    // Beyond the branch limit: two live branches, then a third party with a recent copy.
    let u0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let u1 = c.refresh(&proxy, &rt(&u0), &[]).await;
    proxy.clock.advance(HOUR);
    let sibling = c.refresh(&proxy, &rt(&u0), &[]).await;
    assert_eq!(sibling.status, 200, "the client's second process branches");
    let u2 = c.refresh(&proxy, &rt(&u1), &[]).await;
    assert_eq!(u2.status, 200);
    proxy.clock.advance(HOUR);
    let before = family(&proxy, &rt(&u2)).await;
    assert_eq!(before.branches.len(), 2);
    assert_refused_as_reuse(
        &proxy,
        &c,
        &rt(&u1),
        "branch_limit",
        &[&rt(&u2), &rt(&sibling)],
    )
    .await;
    assert_eq!(
        family(&proxy, &rt(&u2)).await.branches.len(),
        2,
        "no branch"
    );
}

/// 64 concurrent presentations of one token mint one generation: of a head, one rotation
/// (every success carries the same next token); of a stale copy, one fork (every success
/// carries the fork's one first token). Each success has its own access token, and the store
/// holds exactly those.
#[tokio::test]
async fn no_generation_is_minted_twice_for_one_presented_token() {
    let proxy = Arc::new(branching("").await);
    let c = Client::register(&proxy, "Claude Code", "http://127.0.0.1:33418/callback").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let stale = rt(&t0);
    let r1 = c.refresh(&proxy, &stale, &[]).await;
    assert_eq!(r1.status, 200);
    let head = rt(&r1);

    // `token` 64 times at once: the refresh tokens and access tokens handed out.
    let storm = async |token: &str| {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (p, c, token) = (proxy.clone(), c.clone(), token.to_owned());
                tokio::spawn(async move { c.refresh(&p, &token, &[]).await })
            })
            .collect();
        let (mut refresh, mut access) = (BTreeSet::new(), BTreeSet::new());
        for t in tasks {
            let r = t.await.unwrap();
            match r.status {
                200 => {
                    refresh.insert(rt(&r));
                    assert!(access.insert(r.json["access_token"].as_str().unwrap().to_owned()));
                }
                // `update` ran out of compare-and-swap attempts: retry later, nothing minted.
                503 => assert_eq!(r.error(), "temporarily_unavailable"),
                s => panic!("unexpected {s}: {:?}", r.json),
            }
        }
        (refresh, access)
    };

    let before = proxy.count(Keyspace::AccessTokens).await;
    let (refresh, access) = storm(&head).await;
    assert_eq!(refresh.len(), 1, "one rotation: {refresh:?}");
    assert!(!access.is_empty());
    assert_eq!(
        proxy.count(Keyspace::AccessTokens).await,
        before + access.len()
    );
    let next = refresh.into_iter().next().unwrap();
    let fam = family(&proxy, &next).await;
    let heads: Vec<_> = fam.branches.iter().map(|b| b.head.clone()).collect();
    assert_eq!(heads, [RefreshToken::new(next.as_str()).hash()]);

    // Two hours later, 64 processes present the copy the first rotation superseded.
    proxy.clock.advance(2 * HOUR);
    let before = proxy.count(Keyspace::AccessTokens).await;
    let (refresh, access) = storm(&stale).await;
    assert_eq!(refresh.len(), 1, "one fork: {refresh:?}");
    assert!(!access.is_empty());
    assert_eq!(
        proxy.count(Keyspace::AccessTokens).await,
        before + access.len()
    );
    let fork = refresh.into_iter().next().unwrap();
    assert_ne!(fork, next);
    let fam = family(&proxy, &fork).await;
    let heads: Vec<_> = fam.branches.iter().map(|b| b.head.clone()).collect();
    assert_eq!(
        heads,
        [
            RefreshToken::new(next.as_str()).hash(),
            RefreshToken::new(fork.as_str()).hash()
        ]
    );
    assert_eq!(events(&proxy, "refresh_branched").await.len(), 1);
    assert!(events(&proxy, "refresh_reuse").await.is_empty());
    for token in [&next, &fork] {
        assert_eq!(c.refresh(&proxy, token, &[]).await.status, 200);
    }
}
