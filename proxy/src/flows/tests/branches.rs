//! Refresh branches a person can see (issue 31, M3), in process with a manual clock: each
//! branch keeps who last used it (client IP, network, bounded `User-Agent`) and since when
//! from that network; a stolen *current* token shows as the branch the thief rotated, with the
//! thief's address, next to the branch the victim's stale copy forked; the two-networks alert
//! fires once both parties have used their branches after each other, and not when a laptop
//! carries its processes to another network; ending a branch stops its refresh and access
//! tokens and keeps the other branch; `refresh_strict_clients` turns the same theft into
//! reuse at the victim's next refresh.

use super::fixture::{Browser, Client, Fixture, Options, Pkce, error_code, family_of};
use crate::clock::Clock;
use crate::flows::access::{self, TokenRejection};
use crate::flows::revoke::BranchEnded;
use crate::ids::{AccessToken, RefreshToken, UserId};
use crate::oauth::error::ErrorCode;
use crate::oauth::grant::TokenResponse;
use crate::store::{Keyspace, StoreExt};

const VICTIM: &str = "198.51.100.7";
const VICTIM_UA: &str = "claude-cli/2.0.14 (external, cli)";
const THIEF: &str = "203.0.113.9";
const THIEF_UA: &str = "python-requests/2.32.3";
/// `[alerts] branch_network_window_secs` in these tests.
const WINDOW: u64 = 3_600;

async fn fixture() -> Fixture {
    Fixture::start_with(Options {
        extra: format!("[alerts]\nbranch_network_window_secs = {WINDOW}\n"),
        ..Options::default()
    })
    .await
}

/// The client's first tokens, redeemed from `ip` with `ua`.
async fn tokens_from(f: &Fixture, c: &Client, ip: &str, ua: &str) -> TokenResponse {
    let pkce = Pkce::new();
    let code = f
        .code_via_consent(&Browser::new(), c, "alice", &pkce, &[])
        .await;
    let resource = f.resource();
    f.token_from(
        c,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", &c.redirect_uri),
            ("code_verifier", &pkce.verifier),
            ("resource", &resource),
        ],
        Some(ip.parse().unwrap()),
        Some(ua),
    )
    .await
    .unwrap()
}

fn rt(t: &TokenResponse) -> String {
    t.refresh_token.clone().unwrap()
}

async fn access_state(f: &Fixture, t: &TokenResponse) -> Result<(), TokenRejection> {
    access::authenticate(&f.app, &t.access_token)
        .await
        .unwrap()
        .map(|_| ())
}

async fn events(f: &Fixture, name: &str) -> Vec<serde_json::Value> {
    f.audit()
        .await
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

async fn alerts(f: &Fixture) -> Vec<serde_json::Value> {
    events(f, "alert_raised")
        .await
        .into_iter()
        .filter(|e| e["alert"] == "refresh_branches_on_two_networks")
        .collect()
}

/// The review's M3, step by step: the victim refreshes (`v1`); a thief who copied that
/// *current* token rotates it first (`t1`, branch 0 is now the thief's line); ten minutes
/// later the victim's process presents `v1`, which the thief's rotation replaced: a fork,
/// branch 1 (`w1`).
struct Theft {
    c: Client,
    /// `v1`, the stolen current token.
    stolen: String,
    victim: TokenResponse,
    thief: TokenResponse,
}

async fn theft(f: &Fixture) -> Theft {
    let c = f
        .register("Claude Code", &["http://127.0.0.1:33418/cb"])
        .await;
    let t0 = tokens_from(f, &c, VICTIM, VICTIM_UA).await;
    f.clock.advance(600);
    let v1 = f
        .refresh_from(&c, &rt(&t0), VICTIM, VICTIM_UA)
        .await
        .unwrap();
    f.clock.advance(60);
    let thief = f.refresh_from(&c, &rt(&v1), THIEF, THIEF_UA).await.unwrap();
    f.clock.advance(600);
    let victim = f
        .refresh_from(&c, &rt(&v1), VICTIM, VICTIM_UA)
        .await
        .unwrap();
    Theft {
        c,
        stolen: rt(&v1),
        victim,
        thief,
    }
}

#[tokio::test]
async fn stolen_current_token_is_the_branch_with_the_thiefs_address_and_the_victim_forks() {
    let f = fixture().await;
    let start = f.clock.now();
    let Theft {
        c,
        stolen,
        victim,
        thief,
    } = theft(&f).await;
    let fam = f.family(&family_of(&rt(&victim))).await.unwrap();
    assert_eq!(fam.branches.len(), 2);
    let seen = |i: usize| fam.branches[i].seen.clone().unwrap();
    let (b0, b1) = (seen(0), seen(1));
    assert_eq!(
        (b0.ip.unwrap().to_string(), b0.user_agent.as_deref()),
        (THIEF.to_owned(), Some(THIEF_UA))
    );
    assert_eq!(b0.network_since, start.plus(660), "the thief's first use");
    assert_eq!(
        (b1.ip.unwrap().to_string(), b1.user_agent.as_deref()),
        (VICTIM.to_owned(), Some(VICTIM_UA))
    );
    assert_eq!(
        fam.branches[1].forked_from,
        Some(RefreshToken::new(stolen.as_str()).hash()),
        "the victim's branch was forked from the token the thief replaced"
    );
    // Every refresh names its branch, address, network and user agent.
    let refreshed = events(&f, "token_refreshed").await;
    let by: Vec<_> = refreshed
        .iter()
        .map(|e| {
            (
                e["branch"].as_u64().unwrap(),
                e["ip"].as_str().unwrap().to_owned(),
                e["network"].as_str().unwrap().to_owned(),
                e["user_agent"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        by,
        [
            (0, VICTIM.into(), "198.51.100.0/24".into(), VICTIM_UA.into()),
            (0, THIEF.into(), "203.0.113.0/24".into(), THIEF_UA.into()),
            (1, VICTIM.into(), "198.51.100.0/24".into(), VICTIM_UA.into()),
        ]
    );
    let branched = events(&f, "refresh_branched").await;
    assert_eq!(
        (&branched[0]["ip"], &branched[0]["branch"]),
        (&serde_json::json!(VICTIM), &serde_json::json!(1))
    );
    // Both work; nothing was an alert yet (the thief has not used its branch since).
    assert_eq!(access_state(&f, &thief).await, Ok(()));
    assert_eq!(access_state(&f, &victim).await, Ok(()));
    assert!(
        f.refresh_from(&c, &rt(&victim), VICTIM, VICTIM_UA)
            .await
            .is_ok()
    );
    assert!(alerts(&f).await.is_empty());
    assert_eq!(f.audited("refresh_reuse").await, 0);
}

/// After the fork, the victim's uses alone raise nothing; the thief's next use does (one
/// alert, naming both networks), and so does a thief hopping networks, at the victim's next
/// use. Quiet for the window after it fired, then again while both go on.
#[tokio::test]
async fn branches_used_alternately_from_two_networks_alert_once_per_window() {
    let f = fixture().await;
    let Theft {
        c, victim, thief, ..
    } = theft(&f).await;
    f.clock.advance(600);
    let victim = f
        .refresh_from(&c, &rt(&victim), VICTIM, VICTIM_UA)
        .await
        .unwrap();
    assert!(alerts(&f).await.is_empty());
    f.clock.advance(600);
    let thief = f
        .refresh_from(&c, &rt(&thief), THIEF, THIEF_UA)
        .await
        .unwrap();
    let fired = alerts(&f).await;
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0]["user_id"], "github:1001");
    assert_eq!(fired[0]["client_id"], c.id.as_str());
    let detail = fired[0]["detail"].as_str().unwrap();
    for s in ["203.0.113.0/24", "198.51.100.0/24", THIEF_UA, VICTIM_UA] {
        assert!(detail.contains(s), "{s} missing: {detail}");
    }
    let fam = f.family(&family_of(&rt(&victim))).await.unwrap();
    assert_eq!(fam.network_alert_at, Some(f.clock.now()));
    // Within the window: quiet, whoever refreshes.
    f.clock.advance(600);
    let victim = f
        .refresh_from(&c, &rt(&victim), VICTIM, VICTIM_UA)
        .await
        .unwrap();
    f.clock.advance(600);
    let thief = f
        .refresh_from(&c, &rt(&thief), "192.0.2.50", THIEF_UA)
        .await
        .unwrap();
    assert_eq!(alerts(&f).await.len(), 1);
    // A window later, the thief (now hopping networks) is seen at the victim's next use.
    f.clock.advance(WINDOW - 1_200);
    let _ = f
        .refresh_from(&c, &rt(&thief), "192.0.2.51", THIEF_UA)
        .await
        .unwrap();
    assert_eq!(
        alerts(&f).await.len(),
        1,
        "the hopping thief's own use: nothing"
    );
    f.clock.advance(60);
    f.refresh_from(&c, &rt(&victim), VICTIM, VICTIM_UA)
        .await
        .unwrap();
    assert_eq!(alerts(&f).await.len(), 2);
    assert!(!f.family(&family_of(&rt(&victim))).await.unwrap().revoked);
}

/// A laptop with two processes of one client (a branch each) at home, carried to the office
/// and back: every use of every branch refreshes, and nothing alerts. (What the rule cannot
/// tell apart, SECURITY.md says: two routes in use at once, such as IPv4 and IPv6.)
#[tokio::test]
async fn a_laptop_carrying_its_processes_between_networks_raises_no_alert() {
    let f = fixture().await;
    let c = f
        .register("Claude Code", &["http://127.0.0.1:33418/cb"])
        .await;
    let home = VICTIM;
    let office = "192.0.2.44";
    let t0 = tokens_from(&f, &c, home, VICTIM_UA).await;
    f.clock.advance(600);
    let mut a = rt(&f.refresh_from(&c, &rt(&t0), home, VICTIM_UA).await.unwrap());
    f.clock.advance(600);
    let mut b = rt(&f.refresh_from(&c, &rt(&t0), home, VICTIM_UA).await.unwrap());
    assert_eq!(f.family(&family_of(&a)).await.unwrap().branches.len(), 2);
    for place in [home, office, office, home, home, office] {
        f.clock.advance(900);
        a = rt(&f.refresh_from(&c, &a, place, VICTIM_UA).await.unwrap());
        f.clock.advance(300);
        b = rt(&f.refresh_from(&c, &b, place, VICTIM_UA).await.unwrap());
    }
    assert!(alerts(&f).await.is_empty());
}

/// Ending the thief's branch (the person's action on the account page): the thief's refresh
/// token, the stolen one and its access token stop, nothing forks again, the family is not
/// revoked and nothing alerts as reuse; the victim's branch goes on. Another person cannot end
/// it: the same answer as for a branch that does not exist, and nothing changes.
#[tokio::test]
async fn ending_the_thiefs_branch_stops_its_tokens_and_keeps_the_victims() {
    let f = fixture().await;
    let Theft {
        c,
        stolen,
        victim,
        thief,
    } = theft(&f).await;
    let id = family_of(&rt(&victim));
    let before = f.family(&id).await.unwrap();
    let thief_branch = before.branches[0].id;
    assert_eq!(
        crate::flows::revoke::end_branch(&f.app, &UserId::github(2002), &id, thief_branch)
            .await
            .unwrap(),
        BranchEnded::NotFound
    );
    assert_eq!(
        crate::flows::revoke::end_branch(&f.app, &before.user_id, &id, 99)
            .await
            .unwrap(),
        BranchEnded::NotFound
    );
    assert_eq!(f.family(&id).await.unwrap(), before, "nothing changed");

    assert_eq!(
        crate::flows::revoke::end_branch(&f.app, &before.user_id, &id, thief_branch)
            .await
            .unwrap(),
        BranchEnded::Ended(before.client_id.clone(), false)
    );
    let after = f.family(&id).await.unwrap();
    assert!(!after.revoked && after.branch_ended(thief_branch));
    assert_eq!(after.branches.len(), 1);
    assert_eq!(access_state(&f, &thief).await, Err(TokenRejection::Revoked));
    assert_eq!(access_state(&f, &victim).await, Ok(()));
    // Later, past the grace window: the thief tries its own token and the stolen one.
    f.clock.advance(600);
    for token in [rt(&thief), stolen] {
        assert_eq!(
            error_code(f.refresh_from(&c, &token, THIEF, THIEF_UA).await),
            ErrorCode::InvalidGrant
        );
    }
    assert_eq!(
        f.family(&id).await.unwrap(),
        after,
        "refused tokens change nothing"
    );
    assert_eq!(f.audited("refresh_reuse").await, 0);
    assert_eq!(f.audited("refresh_branched").await, 1, "no fork since");
    let next = f
        .refresh_from(&c, &rt(&victim), VICTIM, VICTIM_UA)
        .await
        .unwrap();
    assert_eq!(access_state(&f, &next).await, Ok(()));
}

/// The stolen token itself (replaced by the thief's rotation, which the victim's branch was
/// forked from) can neither fork again after the thief's branch ended, nor be replayed.
#[tokio::test]
async fn the_stolen_copy_cannot_fork_again_once_its_branch_ended() {
    let f = fixture().await;
    let c = f
        .register("Claude Code", &["http://127.0.0.1:33418/cb"])
        .await;
    let t0 = tokens_from(&f, &c, VICTIM, VICTIM_UA).await;
    let stolen = rt(&t0);
    f.clock.advance(60);
    let thief = f.refresh_from(&c, &stolen, THIEF, THIEF_UA).await.unwrap();
    f.clock.advance(600);
    let victim = f
        .refresh_from(&c, &stolen, VICTIM, VICTIM_UA)
        .await
        .unwrap();
    let id = family_of(&stolen);
    let user = f.family(&id).await.unwrap().user_id;
    crate::flows::revoke::end_branch(&f.app, &user, &id, 0)
        .await
        .unwrap();
    f.clock.advance(600);
    for token in [&stolen, &rt(&thief)] {
        assert_eq!(
            error_code(f.refresh_from(&c, token, THIEF, THIEF_UA).await),
            ErrorCode::InvalidGrant
        );
    }
    assert_eq!(f.family(&id).await.unwrap().branches.len(), 1);
    assert!(
        f.refresh_from(&c, &rt(&victim), VICTIM, VICTIM_UA)
            .await
            .is_ok()
    );
}

/// `refresh_strict_clients`: the same theft against a client the operator listed as one that
/// never branches is reuse at the victim's next refresh: the family (the thief's line with
/// it) is revoked and the reuse alert fires.
#[tokio::test]
async fn a_listed_strict_client_turns_the_stolen_current_token_into_reuse() {
    let f = fixture().await;
    let c = f
        .register("Single Process Agent", &["https://app.example/cb"])
        .await;
    let f = f.reconfigured(Options {
        extra: format!("[tokens]\nrefresh_strict_clients = [\"{}\"]\n", c.id),
        ..Options::default()
    });
    let t0 = tokens_from(&f, &c, VICTIM, VICTIM_UA).await;
    f.clock.advance(60);
    let thief = f.refresh_from(&c, &rt(&t0), THIEF, THIEF_UA).await.unwrap();
    f.clock.advance(600);
    assert_eq!(
        error_code(f.refresh_from(&c, &rt(&t0), VICTIM, VICTIM_UA).await),
        ErrorCode::InvalidGrant
    );
    assert!(f.family(&family_of(&rt(&t0))).await.unwrap().revoked);
    let reuse = events(&f, "refresh_reuse").await;
    assert_eq!(reuse[0]["case"], "previous_outside_grace");
    assert_eq!(access_state(&f, &thief).await, Err(TokenRejection::Revoked));
}

/// Access tokens stored before branches were recorded (no `branch`) still authenticate, and
/// still die with their family.
#[tokio::test]
async fn access_token_from_before_branches_still_works() {
    let f = fixture().await;
    let c = f
        .register("Claude Code", &["http://127.0.0.1:33418/cb"])
        .await;
    let t0 = tokens_from(&f, &c, VICTIM, VICTIM_UA).await;
    let key = AccessToken::new(t0.access_token.as_str()).hash();
    let mut rec: serde_json::Value = f
        .app
        .store
        .get_json(Keyspace::AccessTokens, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec["branch"], 0);
    rec.as_object_mut().unwrap().remove("branch");
    f.app
        .store
        .put_json(Keyspace::AccessTokens, &key, &rec, None)
        .await
        .unwrap();
    assert_eq!(access_state(&f, &t0).await, Ok(()));
    crate::flows::revoke::revoke_family(&f.app, &family_of(&rt(&t0)))
        .await
        .unwrap();
    assert_eq!(access_state(&f, &t0).await, Err(TokenRejection::Revoked));
}
