//! Admission (`[access]`): only the platform team's people sign in, and they keep access only
//! while they belong. The fake GitHub's `acme` org has alice (public member) and bob (private
//! member, and in the team `acme/platform`); mallory is outside.

use serde_json::json;

use crate::support::browser::Resp;
use crate::support::client::approve;
use crate::support::mcp::Mcp;
use crate::support::people::Person;
use crate::support::{Browser, Client, Options, Pkce, TestProxy};
use mcp_examples::Reachability;
use mcp_oauth_proxy::store::Keyspace;

fn acme(extra: &str) -> Options {
    Options {
        access: format!("github_orgs = [\"acme\"]\n{extra}"),
        backend: true,
        ..Options::default()
    }
}

/// The person's whole sign-in up to the proxy's answer to GitHub's callback.
async fn sign_in_through_consent(proxy: &TestProxy, c: &Client, login: &str) -> (Browser, Resp) {
    let browser = Browser::new();
    let page = browser
        .navigate(&c.authorize_url(proxy, &Pkce::new(), "st", &[]), "none")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let github_url = approve(proxy, &browser, &page).await;
    let back = browser.through_github(&github_url, login).await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    (browser, cb)
}

/// Everything a sign-in could have left behind.
async fn stored(proxy: &TestProxy) -> [usize; 7] {
    [
        proxy.count(Keyspace::Sessions).await,
        proxy.count(Keyspace::Grants).await,
        proxy.count(Keyspace::Codes).await,
        proxy.count(Keyspace::Consents).await,
        proxy.count(Keyspace::RefreshFamilies).await,
        proxy.count(Keyspace::Allowances).await,
        proxy.count(Keyspace::Standing).await,
    ]
}

/// What GitHub was asked to revoke (`DELETE /applications/{id}/token`).
fn revocations_at_github(proxy: &TestProxy) -> usize {
    proxy
        .github
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE" && r.path().ends_with("/token"))
        .count()
}

async fn assert_refused_and_nothing_stored(proxy: &TestProxy, login: &str, says: &str) {
    let c = Client::register(proxy, "Agent", "https://agent.example/cb").await;
    let before = stored(proxy).await;
    let revoked_before = revocations_at_github(proxy);
    let events_before = proxy.audit_events().await.len();
    let (browser, cb) = sign_in_through_consent(proxy, &c, login).await;
    assert_eq!(cb.status, 403, "{}", cb.body);
    assert!(
        cb.body.contains(says),
        "the page names the rule: {}",
        cb.body
    );
    assert!(cb.location().is_none(), "no redirect to the client");
    assert!(
        !cb.set_cookies()
            .iter()
            .any(|c| c.starts_with("__Host-mcp-session=")),
        "no session"
    );
    assert!(browser.cookie("__Host-mcp-session").is_none());
    assert_eq!(stored(proxy).await, before, "nothing stored");
    assert_eq!(
        revocations_at_github(proxy),
        revoked_before + 1,
        "the token GitHub minted for the sign-in was revoked"
    );
    let events = proxy.audit_events().await.split_off(events_before);
    assert!(events.contains(&"sign_in_refused".to_owned()), "{events:?}");
    assert!(!events.contains(&"signed_in".to_owned()), "{events:?}");
    assert!(!events.contains(&"code_issued".to_owned()), "{events:?}");
}

#[tokio::test]
async fn outsider_signing_in_is_refused_and_nothing_is_stored() {
    let proxy = TestProxy::start_with(acme("")).await;
    assert_refused_and_nothing_stored(&proxy, "mallory", "This server is for members of acme")
        .await;
    // A member signs in as before.
    Person::with_agent(&proxy, "alice", "Agent", "2025-11-25").await;
    // The account page's own sign-in is checked too.
    let browser = Browser::new();
    let start = browser.navigate(&proxy.url("/account"), "none").await;
    let github = start.location().unwrap();
    let github = if github.starts_with('/') {
        browser
            .navigate(&proxy.url(&github), "same-origin")
            .await
            .location()
            .unwrap()
    } else {
        github
    };
    let back = browser.through_github(&github, "mallory").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 403, "{}", cb.body);
    assert!(browser.cookie("__Host-mcp-session").is_none());
}

#[tokio::test]
async fn pending_org_invitation_is_not_membership() {
    let proxy = TestProxy::start_with(acme("")).await;
    assert!(proxy.github.invite_org_member("acme", "mallory"));
    assert_refused_and_nothing_stored(&proxy, "mallory", "members of acme").await;
}

#[tokio::test]
async fn team_member_outside_the_listed_org_teams_is_refused() {
    let proxy = TestProxy::start_with(Options {
        access: r#"github_teams = ["acme/platform"]"#.to_owned(),
        backend: true,
        ..Options::default()
    })
    .await;
    // alice is in acme, and in another of its teams, but not in acme/platform.
    proxy.github.add_team(mcp_examples::FakeTeam::new(
        "acme", "design", 7002, "Design",
    ));
    assert!(proxy.github.add_team_member("acme", "design", "alice"));
    assert_refused_and_nothing_stored(&proxy, "alice", "the team acme/platform").await;
    // bob, in acme/platform, is admitted.
    Person::with_agent(&proxy, "bob", "Agent", "2025-11-25").await;
}

#[tokio::test]
async fn person_removed_from_the_org_loses_every_token_within_the_recheck_interval() {
    let proxy = TestProxy::start_with(acme("recheck_secs = 5")).await;
    let alice = Person::with_agent(&proxy, "alice", "Agent", "2026-07-28").await;
    // A second agent of hers, with a refresh token.
    let refresh = Client::register(&proxy, "Second agent", "https://second.example/cb").await;
    let t = refresh.tokens(&proxy, &Browser::new(), "alice").await;
    let refresh_token = t.json["refresh_token"].as_str().unwrap().to_owned();
    let (_, ok) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(ok.to_string().contains("You are alice"), "{ok}");

    assert!(proxy.github.remove_org_member("acme", "alice"));
    // Within the interval the last decision stands (no GitHub call per request).
    let (status, _) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200);
    proxy.clock.advance(5);
    let (status, body) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "invalid_token");
    // Every token of hers is dead: the other client's too, and its refresh token.
    let r = refresh.refresh(&proxy, &refresh_token, &[]).await;
    assert_eq!((r.status, r.error()), (400, "invalid_grant"));
    let (status, _) = Mcp::with_token(&proxy, t.json["access_token"].as_str().unwrap())
        .call_tool("whoami", json!({}))
        .await;
    assert_eq!(status, 401);
    assert_eq!(
        proxy.count(Keyspace::Grants).await,
        0,
        "GitHub grant revoked"
    );
    assert!(
        !proxy.github.has_authorized("alice"),
        "revoked at GitHub too"
    );
    let events = proxy.audit_events().await;
    assert_eq!(
        events.iter().filter(|e| *e == "access_lost").count(),
        1,
        "{events:?}"
    );
    // Her next sign-in gets the readable refusal.
    assert_refused_and_nothing_stored(&proxy, "alice", "members of acme").await;
}

fn whoami_2026() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {
        "name": "whoami", "arguments": {},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}}}
    }})
}

#[tokio::test]
async fn app_revoked_at_github_turns_the_next_tool_call_into_a_reconnect_link() {
    for exchange in [false, true] {
        let proxy = TestProxy::start_with(Options {
            exchange,
            ..acme("recheck_secs = 5")
        })
        .await;
        let mut old = Person::with_agent(&proxy, "alice", "Agent", "2025-11-25").await;
        old.mcp.initialize(true).await;
        let new = Person::with_agent(&proxy, "bob", "Agent", "2026-07-28").await;
        for p in [&old, &new] {
            let (_, ok) = p.mcp.call_tool("whoami", json!({})).await;
            assert!(ok.to_string().contains("You are"), "{ok}");
        }
        // Both revoke the app at GitHub. The demo backend, like GitHub's own MCP server,
        // answers GitHub's 401 as a tool error (HTTP 200): opaque until the standing check.
        proxy.github.revoke_tokens_of("alice");
        proxy.github.revoke_tokens_of("bob");
        let (status, opaque) = old.mcp.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200);
        if !exchange {
            assert!(opaque.to_string().contains("401"), "{opaque}");
        }
        proxy.clock.advance(5);
        // 2025-11-25 with URL elicitation: -32042 with a reconnect link.
        let (status, msg) = old.mcp.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(msg["error"]["code"], -32042, "exchange={exchange}: {msg}");
        let e = &msg["error"]["data"]["elicitations"][0];
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("GitHub stopped accepting"),
            "{e}"
        );
        // 2026-07-28: input_required with the link.
        let (_, msg) = new.mcp.request(whoami_2026()).await;
        assert_eq!(msg["result"]["resultType"], "input_required", "{msg}");
        let url = msg["result"]["inputRequests"]["github_connect"]["params"]["url"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(url.starts_with(&proxy.url("/connect/")));
        // Reconnecting makes it work again.
        assert_eq!(new.complete(&proxy, &url, "bob").await.status, 200);
        let (_, done) = new.mcp.request(whoami_2026()).await;
        assert!(done.to_string().contains("You are bob"), "{done}");
    }
}

#[tokio::test]
async fn sso_protected_org_shows_the_sso_authorization_link() {
    let proxy = TestProxy::start_with(acme("")).await;
    assert!(proxy.github.set_sso_enforced("acme", true));
    let c = Client::register(&proxy, "Agent", "https://agent.example/cb").await;
    let before = stored(&proxy).await;
    let (_, cb) = sign_in_through_consent(&proxy, &c, "alice").await;
    assert_eq!(cb.status, 403, "{}", cb.body);
    assert!(cb.body.contains("single sign-on"), "{}", cb.body);
    let link = format!("{}/orgs/acme/sso", proxy.github.base_url());
    assert!(
        cb.body.contains(&format!("href=\"{link}")),
        "GitHub's own SSO link: {}",
        cb.body
    );
    assert_eq!(stored(&proxy).await, before);
    let events = proxy.audit_events().await;
    assert!(events.contains(&"sign_in_refused".to_owned()));
    // Once she has an SSO session, the next authorization is admitted.
    proxy.github.sso_sign_in("acme", "alice");
    let (_, cb) = sign_in_through_consent(&proxy, &c, "alice").await;
    assert_eq!(cb.status, 303, "{}", cb.body);
}

#[tokio::test]
async fn github_unreachable_keeps_the_last_decision_only_for_the_configured_time() {
    let proxy = TestProxy::start_with(acme("recheck_secs = 10\nunreachable_grace_secs = 30")).await;
    let alice = Person::with_agent(&proxy, "alice", "Agent", "2026-07-28").await;
    proxy.github.set_reachability(Reachability::Unavailable);
    proxy.clock.advance(11);
    // The check is due but GitHub does not answer: the last decision stands.
    let (status, ok) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{ok}");
    // Past the grace (31 s since GitHub last answered): refused, and said so.
    proxy.clock.advance(20);
    let (status, body) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("cannot confirm"), "{body}");
    // Between attempts GitHub is not asked again on every request.
    let asked = proxy.github.refused_during_outage();
    let (status, _) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 503);
    assert_eq!(proxy.github.refused_during_outage(), asked);
    // GitHub answers again: at the next check, access is back.
    proxy.github.set_reachability(Reachability::Up);
    proxy.clock.advance(10);
    let (status, ok) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{ok}");
}

#[tokio::test]
async fn sybil_approvals_by_outsiders_do_not_silence_the_new_destination_warning() {
    // Admission open: anyone's approval proves nothing, however many and however old.
    let open = TestProxy::start().await;
    let evil = Client::register(&open, "Triage Helper", "https://attacker.example/steal").await;
    for sybil in ["mallory", "bob"] {
        evil.get_code(&open, &Browser::new(), sybil, &Pkce::new())
            .await;
    }
    open.clock.advance(3600);
    let page = Browser::new()
        .navigate(&evil.authorize_url(&open, &Pkce::new(), "s", &[]), "none")
        .await;
    assert!(page.body.contains("new to this server"), "{}", page.body);

    // Admission closed: outsiders cannot approve at all, so nothing of theirs counts.
    let closed = TestProxy::start_with(acme("")).await;
    let evil = Client::register(&closed, "Triage Helper", "https://attacker.example/steal").await;
    let (_, cb) = sign_in_through_consent(&closed, &evil, "mallory").await;
    assert_eq!(cb.status, 403);
    closed.clock.advance(3600);
    let page = Browser::new()
        .navigate(&evil.authorize_url(&closed, &Pkce::new(), "s", &[]), "none")
        .await;
    assert!(page.body.contains("new to this server"), "{}", page.body);
    assert!(
        page.body
            .contains("No one here has used this application yet"),
        "an hour-old client nobody admitted approved is still new: {}",
        page.body
    );
}

#[tokio::test]
async fn approvals_by_admitted_people_do() {
    let proxy = TestProxy::start_with(acme("")).await;
    let c = Client::register(&proxy, "Team Tool", "https://tool.example/cb").await;
    for who in ["alice", "bob"] {
        c.get_code(&proxy, &Browser::new(), who, &Pkce::new()).await;
    }
    proxy.clock.advance(601);
    let page = Browser::new()
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("new to this server"), "{}", page.body);
    assert!(!page.body.contains("moments ago"), "{}", page.body);
    assert!(!page.body.contains("No one here"), "{}", page.body);
}

#[tokio::test]
async fn trusted_redirect_host_has_no_warning() {
    let proxy = TestProxy::start_with(Options {
        extra_toml: "[registration]\ntrusted_redirect_hosts = [\"app.example\"]\n".to_owned(),
        ..Options::default()
    })
    .await;
    let trusted = Client::register(&proxy, "App", "https://app.example/cb").await;
    let other = Client::register(&proxy, "Other", "https://other.example/cb").await;
    proxy.clock.advance(601);
    let page = |c: Client| {
        let proxy = &proxy;
        async move {
            Browser::new()
                .navigate(&c.authorize_url(proxy, &Pkce::new(), "s", &[]), "none")
                .await
        }
    };
    let p = page(trusted).await;
    assert!(!p.body.contains("new to this server"), "{}", p.body);
    let p = page(other).await;
    assert!(p.body.contains("new to this server"), "{}", p.body);
}

/// The tool-call policy's `people` rules on orgs and teams: the person's login and active
/// memberships among those the policy names are asked at sign-in and at each recheck — here
/// with `[access]` open — and stored with the standing; a tool call never asks GitHub. A
/// policy that names an org not yet asked about (a SIGHUP reload) makes the next request ask.
#[tokio::test]
async fn policy_memberships_are_asked_at_sign_in_and_recheck_never_on_the_call() {
    use mcp_oauth_proxy::flows::admission::{Verdict, standing};
    use mcp_oauth_proxy::ids::UserId;
    use mcp_oauth_proxy::tool_policy::{Policy, RawDefaults, RawRule};

    let policy = |people: serde_json::Value| {
        let rules: Vec<RawRule> = serde_json::from_value(json!([{
            "id": "platform", "tools": ["*"], "people": people, "decision": "allow"
        }]))
        .unwrap();
        let mut errs = Vec::new();
        let p = Policy::from_raw(&rules, &RawDefaults::default(), &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        p
    };
    let proxy = TestProxy::start_with(Options {
        // [access] open; only how often standing is asked again.
        access: "recheck_secs = 5".to_owned(),
        extra_toml: "[[policy]]\nid = \"platform\"\ntools = [\"*\"]\n\
                     people = [\"team:ACME/platform\", \"org:elsewhere\"]\ndecision = \"allow\"\n"
            .to_owned(),
        backend: true,
        ..Options::default()
    })
    .await;
    let membership_questions = || {
        proxy
            .github
            .requests()
            .iter()
            .filter(|r| r.path().contains("/memberships/"))
            .count()
    };
    let bob = Person::with_agent(&proxy, "bob", "Agent", "2026-07-28").await;
    let bob_id = UserId::github(1003);
    let (verdict, facts) = standing(&proxy.app, &bob_id).await.unwrap();
    assert_eq!(verdict, Verdict::Admitted);
    assert_eq!(facts.login.as_deref(), Some("bob"));
    assert_eq!(facts.memberships, ["acme/platform"]);
    let asked = membership_questions();
    assert_eq!(asked, 2, "both questions, once, at sign-in");

    // Calls within recheck_secs ask GitHub nothing, and a change is not seen yet.
    assert!(proxy.github.remove_team_member("acme", "platform", "bob"));
    for _ in 0..3 {
        let (status, body) = bob.mcp.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(membership_questions(), asked);
    assert_eq!(
        standing(&proxy.app, &bob_id).await.unwrap().1.memberships,
        ["acme/platform"]
    );

    // The next recheck sees it.
    proxy.clock.advance(5);
    let (status, body) = bob.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (verdict, facts) = standing(&proxy.app, &bob_id).await.unwrap();
    assert_eq!(verdict, Verdict::Admitted);
    assert!(facts.memberships.is_empty(), "{facts:?}");
    assert_eq!(membership_questions(), asked + 2);

    // A new policy naming the org: asked at the next request (a second later), not at the
    // next recheck.
    proxy.app.replace_policy(policy(json!(["org:acme"])));
    proxy.clock.advance(1);
    let (_, facts) = standing(&proxy.app, &bob_id).await.unwrap();
    assert_eq!(
        facts.memberships,
        ["acme"],
        "bob is a private member of acme"
    );
    assert_eq!(membership_questions(), asked + 3);
    // And not again until recheck_secs.
    let (_, facts) = standing(&proxy.app, &bob_id).await.unwrap();
    assert_eq!(facts.memberships, ["acme"]);
    assert_eq!(membership_questions(), asked + 3);

    // Someone outside both: signs in (access is open), no memberships.
    Person::with_agent(&proxy, "mallory", "Agent", "2025-11-25").await;
    let (verdict, facts) = standing(&proxy.app, &UserId::github(1002)).await.unwrap();
    assert_eq!(verdict, Verdict::Admitted);
    assert_eq!(facts.login.as_deref(), Some("mallory"));
    assert!(facts.memberships.is_empty());
}
