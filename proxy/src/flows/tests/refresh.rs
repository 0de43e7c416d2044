//! The refresh decision (`oauth::grant::decide` and `apply`, run by `flows::token` with a
//! compare-and-swap on the family record) under contention and at the clock's edges: within
//! `refresh_grace_secs` a duplicate of the just-rotated token gets the same next token and
//! nothing is minted twice; after it, that token is reuse and revokes the family
//! (`refresh_reuse = "strict"`), or, by default (`"branch"`), a recent copy starts a branch
//! once however many present it at once, and a copy older than `refresh_stale_secs` is reuse;
//! a family ends `refresh_token_idle_ttl_secs` after its last rotation and
//! `refresh_token_max_lifetime_secs` after its creation, however often it is refreshed.

use std::sync::Arc;

use futures_util::future::join_all;

use super::fixture::{Browser, Fixture, Options, error_code, family_of};
use crate::flows::access::{self, TokenRejection};
use crate::ids::RefreshToken;
use crate::oauth::error::ErrorCode;
use crate::store::{Keyspace, StoreExt};

const GRACE: u64 = 30;
const IDLE: u64 = 1_000;
const MAX: u64 = 2_500;
/// `branch` mode: how long a superseded copy may start a branch.
const STALE: u64 = 800;
/// Concurrent refreshes per test (the end-to-end suite runs 64 over HTTP).
const N: usize = 32;

/// `refresh_reuse = "strict"`: every superseded token outside the grace window is reuse.
async fn fixture() -> Fixture {
    fixture_in("strict").await
}

async fn fixture_in(mode: &str) -> Fixture {
    Fixture::start_with(Options {
        extra: format!(
            "[tokens]\nrefresh_reuse = \"{mode}\"\nrefresh_grace_secs = {GRACE}\nrefresh_token_idle_ttl_secs = {IDLE}\nrefresh_token_max_lifetime_secs = {MAX}\nrefresh_stale_secs = {STALE}\nrefresh_branch_idle_secs = {STALE}\nrefresh_max_branches = 3\n"
        ),
        ..Options::default()
    })
    .await
}

fn heads(fam: &crate::store::records::FamilyRecord) -> Vec<String> {
    fam.branches.iter().map(|b| b.head.clone()).collect()
}

fn hash(token: &str) -> String {
    RefreshToken::new(token).hash()
}

async fn revoked(f: &Fixture, access_token: &str) -> bool {
    access::authenticate(&f.app, access_token)
        .await
        .unwrap()
        .err()
        == Some(TokenRejection::Revoked)
}

/// N concurrent refreshes of one current token: exactly one rotates, every other is a replay
/// of that rotation, so all N get the same next token and the family holds one generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_refreshes_of_one_token_rotate_once_and_all_get_the_same_next_token() {
    let f = Arc::new(fixture().await);
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    let tasks = (0..N).map(|_| {
        let (f, c, r0) = (f.clone(), c.clone(), r0.clone());
        tokio::spawn(async move { f.refresh(&c, &r0).await })
    });
    let outcomes: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|t| t.unwrap().unwrap())
        .collect();
    let next = outcomes[0].refresh_token.clone().unwrap();
    assert_ne!(next, r0);
    assert!(
        outcomes
            .iter()
            .all(|o| o.refresh_token.as_deref() == Some(next.as_str())),
        "every duplicate gets the one next token"
    );
    // Each answer carries its own access token; only the refresh generation is shared.
    let mut access: Vec<&str> = outcomes.iter().map(|o| o.access_token.as_str()).collect();
    access.sort_unstable();
    access.dedup();
    assert_eq!(access.len(), N);

    let fam = f.family(&family_of(&r0)).await.unwrap();
    assert_eq!(heads(&fam), vec![hash(&next)], "one generation minted");
    assert_eq!(fam.branches[0].previous, Some(hash(&r0)));
    assert!(fam.superseded.is_empty() && !fam.revoked);
    let refreshed: Vec<_> = f
        .audit()
        .await
        .into_iter()
        .filter(|e| e["event"] == "token_refreshed")
        .collect();
    assert_eq!(refreshed.len(), N);
    assert_eq!(
        refreshed.iter().filter(|e| e["grace"] == false).count(),
        1,
        "exactly one rotation, the rest replays"
    );
    // The next token works as the current one.
    let after = f.refresh(&c, &next).await.unwrap();
    assert_ne!(after.refresh_token.as_deref(), Some(next.as_str()));
}

/// N concurrent presentations of the previous token after the grace window: all refused, the
/// family revoked once, one `refresh_reuse` in the trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reuse_after_the_grace_window_revokes_the_family_once() {
    let f = Arc::new(fixture().await);
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    let t1 = f.refresh(&c, &r0).await.unwrap();
    f.clock.advance(GRACE + 1);
    let tasks = (0..N).map(|_| {
        let (f, c, r0) = (f.clone(), c.clone(), r0.clone());
        tokio::spawn(async move { f.refresh(&c, &r0).await })
    });
    for t in join_all(tasks).await {
        assert_eq!(error_code(t.unwrap()), ErrorCode::InvalidGrant);
    }
    assert!(f.family(&family_of(&r0)).await.unwrap().revoked);
    assert_eq!(f.audited("refresh_reuse").await, 1);
    assert_eq!(
        error_code(f.refresh(&c, t1.refresh_token.as_deref().unwrap()).await),
        ErrorCode::InvalidGrant
    );
    assert!(revoked(&f, &t1.access_token).await);
}

/// The previous token replays the same rotation up to and including `refresh_grace_secs`
/// after it; one second later it is reuse: the family is revoked and its current token and
/// access tokens stop working.
#[tokio::test]
async fn previous_token_replays_until_the_grace_boundary_and_one_second_later_revokes_the_family() {
    let f = fixture().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    let t1 = f.refresh(&c, &r0).await.unwrap();
    let r1 = t1.refresh_token.clone().unwrap();
    let before = f.family(&family_of(&r0)).await.unwrap();

    f.clock.advance(GRACE);
    let replay = f.refresh(&c, &r0).await.unwrap();
    assert_eq!(replay.refresh_token.as_deref(), Some(r1.as_str()));
    assert_eq!(
        f.family(&family_of(&r0)).await.unwrap(),
        before,
        "a replay changes nothing"
    );

    f.clock.advance(1);
    assert_eq!(
        error_code(f.refresh(&c, &r0).await),
        ErrorCode::InvalidGrant
    );
    let fam = f.family(&family_of(&r0)).await.unwrap();
    assert!(fam.revoked && fam.branches.iter().all(|b| b.replay.is_none()));
    assert_eq!(f.audited("refresh_reuse").await, 1);
    assert_eq!(
        error_code(f.refresh(&c, &r1).await),
        ErrorCode::InvalidGrant
    );
    for access_token in [&t0.access_token, &t1.access_token, &replay.access_token] {
        assert!(revoked(&f, access_token).await);
    }
}

/// A family unused for `refresh_token_idle_ttl_secs` is gone: a refresh one second before
/// works and restarts the idle time; exactly that long after it, the token is refused and the
/// access tokens of the family stop too.
#[tokio::test]
async fn family_unused_for_the_idle_ttl_is_gone_with_its_access_tokens() {
    let f = fixture().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    f.clock.advance(IDLE - 1);
    let t1 = f.refresh(&c, &r0).await.unwrap();
    let r1 = t1.refresh_token.clone().unwrap();
    f.clock.advance(IDLE - 1);
    assert!(f.family(&family_of(&r1)).await.is_some());
    f.clock.advance(1);
    assert_eq!(
        error_code(f.refresh(&c, &r1).await),
        ErrorCode::InvalidGrant
    );
    assert!(f.family(&family_of(&r1)).await.is_none());
    // Its access token has not reached its own expiry, but its family is gone.
    assert!(revoked(&f, &t1.access_token).await);
}

/// A family ends `refresh_token_max_lifetime_secs` after it began, even when every refresh
/// came well within the idle time.
#[tokio::test]
async fn family_ends_at_its_max_lifetime_however_often_it_is_refreshed() {
    let f = fixture().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let mut rt = t0.refresh_token.clone().unwrap();
    // Refreshed at 900, 1800 and 2499 seconds: each within the idle time of the one before.
    for step in [900, 900, MAX - 1 - 1_800] {
        f.clock.advance(step);
        rt = f.refresh(&c, &rt).await.unwrap().refresh_token.unwrap();
    }
    f.clock.advance(1);
    assert_eq!(
        error_code(f.refresh(&c, &rt).await),
        ErrorCode::InvalidGrant
    );
    assert!(f.family(&family_of(&rt)).await.is_none());
}

/// `branch` mode: N concurrent presentations of one stale copy (superseded well outside the
/// grace window) fork the family once: every answer carries the fork's one first token, and
/// the family holds exactly two branches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_presentations_of_one_stale_copy_fork_once() {
    let f = Arc::new(fixture_in("branch").await);
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    let r1 = f.refresh(&c, &r0).await.unwrap().refresh_token.unwrap();
    f.clock.advance(STALE / 2);
    let tasks = (0..N).map(|_| {
        let (f, c, r0) = (f.clone(), c.clone(), r0.clone());
        tokio::spawn(async move { f.refresh(&c, &r0).await })
    });
    let outcomes: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|t| t.unwrap().unwrap())
        .collect();
    let fork = outcomes[0].refresh_token.clone().unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| o.refresh_token.as_deref() == Some(fork.as_str())),
        "every duplicate gets the fork's one first token"
    );
    assert_ne!(fork, r1);
    let fam = f.family(&family_of(&r0)).await.unwrap();
    assert_eq!(heads(&fam), vec![hash(&r1), hash(&fork)]);
    assert_eq!(f.audited("refresh_branched").await, 1);
    assert_eq!(f.audited("refresh_reuse").await, 0);
    // Both branches rotate.
    assert!(f.refresh(&c, &r1).await.is_ok());
    assert!(f.refresh(&c, &fork).await.is_ok());
}

/// `branch` mode at the clock's edges: a copy superseded exactly `refresh_stale_secs` ago
/// branches; one second older is reuse, case `stale_beyond_window`, and revokes the family.
#[tokio::test]
async fn stale_copy_branches_up_to_the_stale_window_and_one_second_later_revokes_the_family() {
    let f = fixture_in("branch").await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    let t1 = f.refresh(&c, &r0).await.unwrap();
    // Two processes held r0 and r1; the one with r0 forks at the window's edge.
    let t2 = f
        .refresh(&c, t1.refresh_token.as_deref().unwrap())
        .await
        .unwrap();
    f.clock.advance(STALE);
    let forked = f.refresh(&c, &r0).await.unwrap();
    f.clock.advance(GRACE + 1);
    // A third presentation of r0, one second past the window: reuse.
    assert_eq!(
        error_code(f.refresh(&c, &r0).await),
        ErrorCode::InvalidGrant
    );
    let fam = f.family(&family_of(&r0)).await.unwrap();
    assert!(fam.revoked);
    let reuse: Vec<_> = f
        .audit()
        .await
        .into_iter()
        .filter(|e| e["event"] == "refresh_reuse")
        .collect();
    assert_eq!(reuse.len(), 1);
    assert_eq!(reuse[0]["case"], "stale_beyond_window");
    for t in [&t2, &forked] {
        assert_eq!(
            error_code(f.refresh(&c, t.refresh_token.as_deref().unwrap()).await),
            ErrorCode::InvalidGrant
        );
        assert!(revoked(&f, &t.access_token).await);
    }
}

/// A family record written before branches (the shape on users' disks) still refreshes: its
/// current token rotates, its previous replays inside the grace window, and in `strict` mode
/// its retired tokens are still reuse.
#[tokio::test]
async fn family_record_from_before_branches_still_refreshes() {
    let f = fixture_in("strict").await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    let id = family_of(&r0);
    let fam = f.family(&id).await.unwrap();
    // Rewrite it as the old shape: r0 current, an older token retired.
    let old_token = crate::oauth::grant::new_refresh_token(&id).unwrap();
    let mut old = serde_json::to_value(&fam).unwrap();
    let obj = old.as_object_mut().unwrap();
    for k in ["branches", "superseded", "forks", "next_branch"] {
        obj.remove(k);
    }
    obj.insert("current".into(), serde_json::json!([hash(&r0)]));
    obj.insert("previous".into(), serde_json::Value::Null);
    obj.insert("retired".into(), serde_json::json!([old_token.hash()]));
    obj.insert("rotated_at".into(), serde_json::json!(fam.created_at));
    f.app
        .store
        .put_json(Keyspace::RefreshFamilies, id.as_str(), &old, None)
        .await
        .unwrap();
    let r1 = f.refresh(&c, &r0).await.unwrap().refresh_token.unwrap();
    assert_eq!(
        f.refresh(&c, &r0).await.unwrap().refresh_token.as_deref(),
        Some(r1.as_str()),
        "the previous token replays"
    );
    assert_eq!(
        error_code(f.refresh(&c, old_token.secret()).await),
        ErrorCode::InvalidGrant
    );
    assert!(f.family(&id).await.unwrap().revoked);
    assert_eq!(f.audited("refresh_reuse").await, 1);
}

/// The consent behind a family is gone while the family is not yet revoked (what a crash
/// between the account page's two steps leaves, or a consent removed in the store): the
/// refresh is refused, the family and its tokens are revoked, and noting the consent's use
/// writes nothing back. Fails if the refresh stops checking the consents it read.
#[tokio::test]
async fn refresh_whose_consent_is_gone_is_refused_revokes_the_family_and_writes_no_consent_back() {
    let f = fixture().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let r0 = t0.refresh_token.clone().unwrap();
    let fam = f.family(&family_of(&r0)).await.unwrap();
    let store = f.app.store.as_ref();
    let removed = crate::store::consents::remove_of_client(store, &fam.user_id, &fam.client_id)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(
        error_code(f.refresh(&c, &r0).await),
        ErrorCode::InvalidGrant
    );
    assert!(
        revoked(&f, &t0.access_token).await,
        "its tokens are revoked"
    );
    assert!(
        crate::store::consents::of_user(store, &fam.user_id)
            .await
            .unwrap()
            .is_empty(),
        "no consent written back"
    );
}

/// A refresh notes the consent's use for the account page, at most once a minute.
#[tokio::test]
async fn refresh_notes_the_consents_use_at_most_once_a_minute() {
    let f = fixture().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let t0 = f.tokens(&Browser::new(), &c, "alice").await;
    let fam = f
        .family(&family_of(t0.refresh_token.as_deref().unwrap()))
        .await
        .unwrap();
    let last_used = || async {
        crate::store::consents::of_user(f.app.store.as_ref(), &fam.user_id)
            .await
            .unwrap()[0]
            .last_used_at
    };
    let issued = last_used().await.expect("noted when the code was issued");
    f.clock.advance(30);
    let r1 = f
        .refresh(&c, t0.refresh_token.as_deref().unwrap())
        .await
        .unwrap()
        .refresh_token
        .unwrap();
    assert_eq!(
        last_used().await,
        Some(issued),
        "within the minute: no write"
    );
    f.clock.advance(31);
    f.refresh(&c, &r1).await.unwrap();
    assert_eq!(last_used().await, Some(issued.plus(61)));
}
