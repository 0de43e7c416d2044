//! Connect links check who opens them. In these tests the attacker is mallory and the
//! colleague alice.

use crate::support::people::Person;
use crate::support::{Browser, Options, TestProxy};
use mcp_oauth_proxy::ids::UserId;
use serde_json::json;

fn opts() -> Options {
    Options {
        backend: true,
        ..Options::default()
    }
}

/// The link a refused `tools/call` carried (fallback shape: the link is in the text).
async fn link_for(p: &Person) -> String {
    let (status, msg) = p.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    let text = msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("refusal expected: {msg}"));
    assert_eq!(msg["result"]["isError"], true);
    text.split_whitespace()
        .find(|w| w.contains("/connect/"))
        .unwrap()
        .to_owned()
}

/// Mallory asks her agent for something that needs GitHub, gets a link, and forwards it to
/// alice ("can you connect this for the team?"). Alice is signed in and clicks. Nothing is
/// joined, alice is told the link was made for another account, operators get an event.
#[tokio::test]
async fn mallorys_link_opened_by_alice_joins_nothing() {
    let proxy = TestProxy::start_with(opts()).await;
    let mallory = Person::with_agent(&proxy, "mallory", "Triage Helper", "2026-07-28").await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    mallory.withdraw_agent(&proxy).await;
    let link = link_for(&mallory).await;

    let page = alice.open(&link).await;
    assert_eq!(page.status, 403);
    assert!(
        page.body.contains("made for another account"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("name=\"decision\""),
        "no action may be offered"
    );
    // A forged POST from alice's browser is refused too.
    let post = alice
        .browser
        .post_form(
            &link,
            &[("csrf", "x"), ("decision", "approve")],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(post.status, 403);

    // Nothing joined: mallory's agent still cannot use any GitHub account, alice's still can.
    let (_, msg) = mallory.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(msg["result"]["isError"], true);
    assert!(!msg.to_string().contains("You are alice"));
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(msg.to_string().contains("You are alice"), "{msg}");
    let events = proxy.app.audit.all().await.unwrap();
    let refused = events
        .iter()
        .find(|e| e.event["event"] == "connect_link_refused")
        .expect("operators get an event");
    assert_eq!(refused.event["owner"], "github:1002");
    assert_eq!(refused.event["opener"], "github:1001");
}

/// The reverse: mallory opens alice's link. She cannot sign in as alice (she signs in as
/// herself), so she is refused; nothing is joined.
#[tokio::test]
async fn alices_link_opened_by_mallory_joins_nothing() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let link = link_for(&alice).await;

    let mallory = Browser::new();
    let r = mallory.navigate(&link, "none").await;
    assert_eq!(r.status, 303, "sign-in first");
    let gh = r.location().unwrap();
    assert!(gh.contains("prompt=select_account"));
    let back = mallory.through_github(&gh, "mallory").await;
    let cb = mallory
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(
        cb.location().as_deref(),
        Some(link.strip_prefix(&proxy.base).unwrap())
    );
    let page = mallory.navigate(&link, "same-origin").await;
    assert_eq!(page.status, 403);
    assert!(page.body.contains("made for another account"));
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(
        msg["result"]["isError"], true,
        "alice's agent is still not allowed"
    );
    // The sign-in did not store mallory's GitHub token as anyone's grant.
    assert!(
        proxy
            .app
            .grants
            .get(&UserId::github(1002))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn unknown_expired_declined_and_replaced_codes_look_identical() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let fresh = || Browser::new();
    let get = |url: String| async move {
        let r = fresh().navigate(&url, "none").await;
        (
            r.status,
            r.headers.get("content-type").cloned(),
            r.headers.get("content-length").cloned(),
            r.headers.get("cache-control").cloned(),
            r.body,
        )
    };

    // unknown
    let unknown = get(proxy.url(&format!("/connect/{}", "A".repeat(43)))).await;
    assert_eq!(unknown.0, 404);
    // replaced: an allow link, then a connect link (kind change)
    alice.withdraw_agent(&proxy).await;
    let allow_link = link_for(&alice).await;
    alice.disconnect_github(&proxy).await;
    let connect_link = link_for(&alice).await;
    assert_ne!(allow_link, connect_link);
    let replaced = get(allow_link).await;
    // declined
    let page = alice.open_link(&proxy, &connect_link).await;
    let declined_resp = alice.decide(&proxy, &connect_link, &page, "decline").await;
    assert_eq!(declined_resp.status, 200);
    assert!(declined_resp.body.contains("Nothing was changed"));
    let declined = get(connect_link).await;
    // expired
    let expiring = link_for(&alice).await;
    proxy.clock.advance(1801);
    let expired = get(expiring).await;

    for (what, r) in [
        ("replaced", &replaced),
        ("declined", &declined),
        ("expired", &expired),
    ] {
        assert_eq!(r, &unknown, "{what} differs from unknown");
    }
}

#[tokio::test]
async fn stale_sign_in_must_sign_in_again() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let link = link_for(&alice).await;
    assert_eq!(
        alice.open_link(&proxy, &link).await.status,
        200,
        "a fresh sign-in sees the page"
    );
    proxy.clock.advance(16 * 60);
    let r = alice.open(&link).await;
    assert_eq!(r.status, 303);
    assert!(r.location().unwrap().contains("prompt=select_account"));
    // A POST with the stale session is sent to sign in as well; nothing changes.
    let r = alice
        .browser
        .post_form(
            &link,
            &[("csrf", "x"), ("decision", "approve")],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(r.status, 303);
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(msg["result"]["isError"], true);
}

#[tokio::test]
async fn asking_twice_returns_the_same_link_and_a_kind_change_replaces_it() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let a = link_for(&alice).await;
    let b = link_for(&alice).await;
    assert_eq!(a, b);
    alice.disconnect_github(&proxy).await;
    let c = link_for(&alice).await;
    assert_ne!(a, c);
    assert_eq!(Browser::new().navigate(&a, "none").await.status, 404);
    let created = proxy
        .audit_events()
        .await
        .iter()
        .filter(|e| *e == "connect_link_created")
        .count();
    assert_eq!(created, 2);
}

#[tokio::test]
async fn allow_link_completed_by_its_person_lets_the_retry_succeed() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let link = link_for(&alice).await;
    let done = alice.complete(&proxy, &link, "alice").await;
    assert_eq!(done.status, 200);
    assert!(done.body.contains("Go back to your agent"), "{}", done.body);
    assert!(done.location().is_none(), "no redirect anywhere");
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(msg.to_string().contains("You are alice"), "{msg}");
    assert_eq!(
        Browser::new().navigate(&link, "none").await.status,
        404,
        "a used link is gone"
    );
}

/// A (re)connection must come back with the signed-in person's own GitHub account: alice
/// picking bob's account at GitHub is refused and nothing is stored.
#[tokio::test]
async fn connect_with_a_different_github_account_is_refused_and_nothing_stored() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.disconnect_github(&proxy).await;
    let link = link_for(&alice).await;
    let r = alice.complete(&proxy, &link, "bob").await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("different GitHub account"), "{}", r.body);
    assert!(
        proxy
            .app
            .grants
            .get(&UserId::github(1001))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        proxy
            .app
            .grants
            .get(&UserId::github(1003))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "connect_link_wrong_account")
    );
    // Then with her own account it works, and the agent's retry succeeds.
    let r = alice.complete(&proxy, &link, "alice").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(msg.to_string().contains("You are alice"), "{msg}");
}

#[tokio::test]
async fn reconnect_link_after_github_stopped_honouring_the_token() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    proxy.github.revoke_tokens_of("alice");
    proxy
        .app
        .grants
        .mark_broken(&UserId::github(1001), "test")
        .await
        .unwrap();
    let link = link_for(&alice).await;
    let page = alice.open_link(&proxy, &link).await;
    assert!(page.body.contains("Reconnect"), "{}", page.body);
    let r = alice.complete(&proxy, &link, "alice").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(msg.to_string().contains("You are alice"), "{msg}");
}
