//! Revocation is total (issue 14): revoking a client on the account page or through the admin
//! API ends its backend tokens at token exchange at once, and its GitHub allowance; approving
//! it again never revives the old backend tokens. Disconnecting GitHub withdraws every agent's
//! allowance, and a GitHub-side revocation that did not happen is reported, not swallowed.

use super::exchange::{exchange, last_backend_token};
use crate::support::admin::{Admin, admin_toml};
use crate::support::client::JsonResp;
use crate::support::mcp::Mcp;
use crate::support::people::Person;
use crate::support::{BACKEND_CLIENT_ID, BACKEND_CLIENT_SECRET, Browser, Options, TestProxy};
use mcp_oauth_proxy::ids::UserId;
use mcp_oauth_proxy::store::records::GrantRecord;
use mcp_oauth_proxy::store::{Keyspace, StoreExt};
use serde_json::{Value, json};

const ALICE: &str = "github:1001";

async fn proxy() -> (TestProxy, Admin) {
    let proxy = TestProxy::start_with(Options {
        exchange: true,
        extra_toml: admin_toml(),
        ..Options::default()
    })
    .await;
    let admin = Admin::start(&proxy).await;
    (proxy, admin)
}

/// Alice's agent made one tool call; the backend token it got exchanges. Returns it.
async fn backend_token_of(proxy: &TestProxy, mcp: &Mcp) -> String {
    let (status, msg) = mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200);
    assert!(msg.to_string().contains("You are"), "{msg}");
    let bt = last_backend_token(proxy);
    let ok = exchange_as_backend(proxy, &bt).await;
    assert_eq!(
        ok.status, 200,
        "before the revocation it exchanges: {:?}",
        ok.json
    );
    bt
}

async fn exchange_as_backend(proxy: &TestProxy, bt: &str) -> JsonResp {
    exchange(proxy, BACKEND_CLIENT_ID, BACKEND_CLIENT_SECRET, bt).await
}

/// Everything a refused exchange could change: what GitHub was asked, the records of every
/// kind an exchange touches, the audit trail's length.
async fn snapshot(proxy: &TestProxy) -> (usize, Vec<usize>, usize) {
    let mut counts = Vec::new();
    for ks in [
        Keyspace::BackendTokens,
        Keyspace::ConnectLinks,
        Keyspace::ConnectLinkIndex,
        Keyspace::Grants,
        Keyspace::Allowances,
        Keyspace::RefreshFamilies,
        Keyspace::AccessTokens,
        Keyspace::Consents,
    ] {
        counts.push(proxy.count(ks).await);
    }
    (
        proxy.github.requests().len(),
        counts,
        proxy.app.audit.all().await.unwrap().len(),
    )
}

/// The newest audit record.
async fn last_event(proxy: &TestProxy) -> Value {
    proxy.app.audit.all().await.unwrap().pop().unwrap().event
}

/// `bt` is refused with 400 `invalid_grant` and no link; nothing changes but one audited
/// refusal.
async fn refused_as_revoked(proxy: &TestProxy, bt: &str) {
    let (github_before, records_before, audit_before) = snapshot(proxy).await;
    let r = exchange_as_backend(proxy, bt).await;
    assert_eq!(
        (r.status, r.error()),
        (400, "invalid_grant"),
        "{:?}",
        r.json
    );
    assert_eq!(r.headers["cache-control"], "no-store");
    assert!(r.json.get("access_token").is_none(), "{:?}", r.json);
    assert!(
        r.json.get("connect_uri").is_none() && r.json.get("reason").is_none(),
        "a revoked client gets no connect link: {:?}",
        r.json
    );
    let (github_after, records_after, audit_after) = snapshot(proxy).await;
    assert_eq!(github_after, github_before, "GitHub is not asked anything");
    assert_eq!(records_after, records_before, "no record changes");
    assert_eq!(audit_after, audit_before + 1, "exactly one audit event");
    let ev = last_event(proxy).await;
    assert_eq!(ev["event"], "token_exchange_refused");
    assert_eq!(ev["reason"], "subject_revoked");
    assert!(proxy.github.violations().is_empty());
}

#[tokio::test]
async fn revoked_clients_backend_token_no_longer_exchanges() {
    let (proxy, _admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let bt = backend_token_of(&proxy, &alice.mcp).await;
    assert_eq!(proxy.count(Keyspace::Allowances).await, 1);

    alice.revoke_agent(&proxy).await;

    refused_as_revoked(&proxy, &bt).await;
    assert_eq!(
        proxy.count(Keyspace::Allowances).await,
        0,
        "its GitHub allowance went with it"
    );
    let revoked = proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.event["event"] == "client_access_revoked")
        .unwrap();
    assert_eq!(revoked.event["allowance"], true);
    assert_eq!(revoked.event["families"], 1);
    let page = alice
        .browser
        .navigate(&proxy.url("/account?notice=revoked"), "same-origin")
        .await;
    assert!(page.body.contains("may no longer use your GitHub account"));
}

#[tokio::test]
async fn revoked_clients_backend_token_no_longer_exchanges_after_an_admin_consent_revoke() {
    let (proxy, admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let bt = backend_token_of(&proxy, &alice.mcp).await;

    let (status, r) = admin
        .post(
            "/admin/api/consents/revoke",
            &json!({"user": ALICE, "client": alice.client.id}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (r["consents"].as_u64(), r["families"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["allowances"], 1);

    refused_as_revoked(&proxy, &bt).await;
    assert_eq!(proxy.count(Keyspace::Allowances).await, 0);
}

#[tokio::test]
async fn deleted_clients_backend_tokens_no_longer_exchange_for_anyone() {
    let (proxy, admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let alice_bt = backend_token_of(&proxy, &alice.mcp).await;
    // Bob uses the same client.
    let t = alice.client.tokens(&proxy, &Browser::new(), "bob").await;
    let mut bob = Mcp::with_token(&proxy, t.json["access_token"].as_str().unwrap());
    bob.version = "2026-07-28";
    let bob_bt = backend_token_of(&proxy, &bob).await;
    // And a bystander client of alice's keeps working.
    let other = Person::with_agent(&proxy, "alice", "Docs Bot", "2026-07-28").await;
    assert_eq!(proxy.count(Keyspace::Allowances).await, 3);

    let (status, r) = admin
        .delete(&format!("/admin/api/clients/{}", alice.client.id))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (r["consents"].as_u64(), r["families"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(r["allowances"], 2);

    refused_as_revoked(&proxy, &alice_bt).await;
    refused_as_revoked(&proxy, &bob_bt).await;
    assert_eq!(
        proxy.count(Keyspace::Allowances).await,
        1,
        "Docs Bot's stays"
    );
    backend_token_of(&proxy, &other.mcp).await;
}

/// "Stop this agent using GitHub" keeps the agent's proxy tokens: its backend token is refused
/// with the designed refusal, an allow link for the person (docs/DESIGN.md §7), and GitHub's
/// token is not handed out.
#[tokio::test]
async fn withdrawn_agents_backend_token_no_longer_exchanges() {
    let (proxy, _admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let bt = backend_token_of(&proxy, &alice.mcp).await;
    alice.withdraw_agent(&proxy).await;

    let github_before = proxy.github.requests().len();
    let r = exchange_as_backend(&proxy, &bt).await;
    assert_eq!(
        (r.status, r.error()),
        (400, "invalid_grant"),
        "{:?}",
        r.json
    );
    assert_eq!(r.json["reason"], "allow_required");
    assert!(r.json.get("access_token").is_none());
    assert_eq!(last_event(&proxy).await["reason"], "allow_required");
    // Asking again changes nothing more: the same link, no new record.
    let (_, records, _) = snapshot(&proxy).await;
    let again = exchange_as_backend(&proxy, &bt).await;
    assert_eq!(again.json["connect_id"], r.json["connect_id"]);
    assert_eq!(snapshot(&proxy).await.1, records);
    assert_eq!(proxy.github.requests().len(), github_before);
}

#[tokio::test]
async fn re_approving_a_revoked_client_does_not_revive_its_old_backend_tokens() {
    let (proxy, _admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let old_bt = backend_token_of(&proxy, &alice.mcp).await;
    alice.revoke_agent(&proxy).await;

    // Alice approves the same client again (consent page, GitHub, new tokens, allowed again).
    let t = alice.client.tokens(&proxy, &alice.browser, "alice").await;
    let mut mcp = Mcp::with_token(&proxy, t.json["access_token"].as_str().unwrap());
    mcp.version = "2026-07-28";
    let new_bt = backend_token_of(&proxy, &mcp).await;
    assert_ne!(new_bt, old_bt);
    assert_eq!(proxy.count(Keyspace::Allowances).await, 1);

    refused_as_revoked(&proxy, &old_bt).await;
    assert_eq!(exchange_as_backend(&proxy, &new_bt).await.status, 200);
}

/// Disconnecting GitHub withdraws every agent's allowance: connecting again through one
/// agent's link allows that agent only.
#[tokio::test]
async fn reconnecting_github_for_one_agent_does_not_re_allow_the_others() {
    let (proxy, _admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let bt = backend_token_of(&proxy, &alice.mcp).await;
    let docs = Person::with_agent(&proxy, "alice", "Docs Bot", "2026-07-28").await;
    let docs_bt = backend_token_of(&proxy, &docs.mcp).await;

    assert_eq!(
        alice.disconnect_github(&proxy).await,
        "/account?notice=disconnected"
    );
    assert_eq!(proxy.count(Keyspace::Allowances).await, 0);
    let refused = exchange_as_backend(&proxy, &bt).await;
    assert_eq!((refused.status, refused.error()), (400, "invalid_grant"));
    assert_eq!(refused.json["reason"], "connect_required");
    let ev = proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.event["event"] == "git_hub_grant_disconnected")
        .unwrap();
    assert_eq!(ev.event["github_revocation"], "revoked");
    assert_eq!(ev.event["allowances"], 2);
    assert!(!proxy.github.has_authorized("alice"), "revoked at GitHub");

    let link = refused.json["connect_uri"].as_str().unwrap();
    let done = alice.complete(&proxy, link, "alice").await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(exchange_as_backend(&proxy, &bt).await.status, 200);
    let other = exchange_as_backend(&proxy, &docs_bt).await;
    assert_eq!((other.status, other.error()), (400, "invalid_grant"));
    assert_eq!(other.json["reason"], "allow_required");
}

/// A grant whose token cannot be opened is still forgotten here, and the person is told that
/// GitHub did not revoke it: never a silent skip.
#[tokio::test]
async fn disconnect_that_could_not_revoke_at_github_says_so() {
    let (proxy, _admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let user = UserId::github(1001);
    let mut grant: GrantRecord = proxy
        .app
        .store
        .get_json(Keyspace::Grants, user.as_str())
        .await
        .unwrap()
        .unwrap();
    grant.sealed_token = "AAAA".to_owned();
    proxy
        .app
        .store
        .put_json(Keyspace::Grants, user.as_str(), &grant, None)
        .await
        .unwrap();
    let grant_calls = || {
        proxy
            .github
            .requests()
            .iter()
            .filter(|r| r.path().ends_with("/grant"))
            .count()
    };
    let before = grant_calls();

    let to = alice.disconnect_github(&proxy).await;

    assert_eq!(to, "/account?notice=disconnected_unconfirmed");
    assert_eq!(
        proxy.count(Keyspace::Grants).await,
        0,
        "forgotten here all the same"
    );
    assert_eq!(grant_calls(), before, "GitHub could not be asked");
    let ev = last_event(&proxy).await;
    assert_eq!(ev["event"], "git_hub_grant_disconnected");
    assert_eq!(ev["github_revocation"], "token_unreadable");
    let page = alice.browser.navigate(&proxy.url(&to), "same-origin").await;
    assert!(
        page.body.contains("GitHub did not confirm"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn admin_grant_revoke_reports_a_github_revocation_that_did_not_happen() {
    let (proxy, admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let bt = backend_token_of(&proxy, &alice.mcp).await;
    // GitHub no longer knows the stored token (422 to the deletion).
    proxy.github.revoke_tokens_of("alice");

    let (status, r) = admin
        .post("/admin/api/grants/revoke", &json!({"user": ALICE}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["grant_removed"], true);
    assert_eq!(r["github_revocation"], "refused_by_github");
    assert_eq!(
        (r["families"].as_u64(), r["allowances"].as_u64()),
        (Some(1), Some(1))
    );
    let ev = last_event(&proxy).await;
    assert_eq!(ev["event"], "grant_revoked_by_admin");
    assert_eq!(ev["github_revocation"], "refused_by_github");
    // The person's tokens are revoked, so the backend token is too.
    refused_as_revoked(&proxy, &bt).await;
}

/// Issue 15: the admin grant revoke and the account disconnect share one helper
/// (`Grants::forget`, `flows/revoke.rs`) that reports a failed GitHub-side revocation to the
/// caller and the audit trail. Here the case the issue found swallowed (`.ok()`): the stored
/// GitHub token cannot be opened, so GitHub cannot be asked. The admin API says so, the event
/// records it, and the grant and tokens are gone here all the same. (The disconnect path:
/// `disconnect_that_could_not_revoke_at_github_says_so`; GitHub refusing the deletion:
/// `admin_grant_revoke_reports_a_github_revocation_that_did_not_happen`.)
#[tokio::test]
async fn failed_github_side_revocation_is_reported_not_swallowed() {
    let (proxy, admin) = proxy().await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let bt = backend_token_of(&proxy, &alice.mcp).await;
    let user = UserId::github(1001);
    let mut grant: GrantRecord = proxy
        .app
        .store
        .get_json(Keyspace::Grants, user.as_str())
        .await
        .unwrap()
        .unwrap();
    grant.sealed_token = "AAAA".to_owned();
    proxy
        .app
        .store
        .put_json(Keyspace::Grants, user.as_str(), &grant, None)
        .await
        .unwrap();
    let deletions = || {
        proxy
            .github
            .requests()
            .iter()
            .filter(|r| r.path().ends_with("/grant"))
            .count()
    };
    let before = deletions();

    let (status, r) = admin
        .post("/admin/api/grants/revoke", &json!({"user": ALICE}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["grant_removed"], true);
    assert_eq!(r["github_revocation"], "token_unreadable", "{r}");
    assert_eq!(deletions(), before, "GitHub could not be asked");
    assert_eq!(proxy.count(Keyspace::Grants).await, 0);
    let ev = last_event(&proxy).await;
    assert_eq!(ev["event"], "grant_revoked_by_admin");
    assert_eq!(ev["github_revocation"], "token_unreadable");
    refused_as_revoked(&proxy, &bt).await;
}
