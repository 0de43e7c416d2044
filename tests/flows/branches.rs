//! Refresh branches a person can see (issue 31, M3), over real HTTP. The proxy believes
//! `X-Forwarded-For` from 127.0.0.1 (a trusted proxy: the tests connect from there), so the
//! victim and the thief each speak from their own address. The thief copies the victim's
//! *current* refresh token and rotates it first; the victim's next refresh presents the token
//! the thief replaced and forks a branch of its own. The trail names every refresh's address
//! and user agent, the account page lists both branches with theirs, the person ends the
//! thief's branch (CSRF-protected, their own only), and two branches used from two networks
//! alternately raise an alert (SECURITY.md, "Refresh rotation" and "Detection").

use serde_json::Value;

use crate::support::client::JsonResp;
use crate::support::{Browser, Client, Options, TestProxy, http};
use mcp_oauth_proxy::flows::access::{self, TokenRejection};
use mcp_oauth_proxy::ids::RefreshToken;
use mcp_oauth_proxy::oauth::grant;
use mcp_oauth_proxy::store::records::FamilyRecord;
use mcp_oauth_proxy::store::{Keyspace, StoreExt};

const VICTIM: &str = "198.51.100.7";
const VICTIM_NET: &str = "198.51.100.0/24";
const VICTIM_UA: &str = "claude-cli/2.0.14 (external, cli)";
const THIEF: &str = "203.0.113.9";
const THIEF_NET: &str = "203.0.113.0/24";
const THIEF_UA: &str = "python-requests/2.32.3";

async fn proxy() -> TestProxy {
    TestProxy::start_with(Options {
        server_toml: "trusted_proxies = [\"127.0.0.1\"]".to_owned(),
        ..Options::default()
    })
    .await
}

fn rt(r: &JsonResp) -> String {
    r.json["refresh_token"].as_str().unwrap().to_owned()
}

fn at(r: &JsonResp) -> String {
    r.json["access_token"].as_str().unwrap().to_owned()
}

/// A refresh from client IP `ip` (through the trusted proxy) with `User-Agent` `ua`.
async fn refresh_as(proxy: &TestProxy, c: &Client, token: &str, ip: &str, ua: &str) -> JsonResp {
    let r = http()
        .post(proxy.url("/token"))
        .header("x-forwarded-for", ip)
        .header("user-agent", ua)
        .form(&[
            ("client_id", c.id.as_str()),
            ("grant_type", "refresh_token"),
            ("refresh_token", token),
        ])
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    JsonResp {
        status,
        headers,
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
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

async fn branch_alerts(proxy: &TestProxy) -> Vec<Value> {
    events(proxy, "alert_raised")
        .await
        .into_iter()
        .filter(|e| e["alert"] == "refresh_branches_on_two_networks")
        .collect()
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

async fn access_state(proxy: &TestProxy, token: &str) -> Result<(), TokenRejection> {
    access::authenticate(&proxy.app, token)
        .await
        .unwrap()
        .map(|_| ())
}

/// The theft, as the review reproduced it.
struct Theft {
    c: Client,
    /// Alice's browser, signed in to the proxy.
    browser: Browser,
    /// The current token the thief copied.
    stolen: String,
    /// What the thief's rotation got.
    thief: JsonResp,
    /// What the victim's next refresh (a fork) got.
    victim: JsonResp,
}

async fn theft(proxy: &TestProxy) -> Theft {
    let c = Client::register(proxy, "Claude Code", "http://127.0.0.1:33418/callback").await;
    let browser = Browser::new();
    let t0 = c.tokens(proxy, &browser, "alice").await;
    proxy.clock.advance(600);
    let v1 = refresh_as(proxy, &c, &rt(&t0), VICTIM, VICTIM_UA).await;
    assert_eq!(v1.status, 200, "{:?}", v1.json);
    let stolen = rt(&v1);
    proxy.clock.advance(60);
    let thief = refresh_as(proxy, &c, &stolen, THIEF, THIEF_UA).await;
    assert_eq!(thief.status, 200, "{:?}", thief.json);
    // Ten minutes later (past the grace window) the victim's process refreshes with the
    // token it holds, which the thief's rotation replaced.
    proxy.clock.advance(600);
    let victim = refresh_as(proxy, &c, &stolen, VICTIM, VICTIM_UA).await;
    assert_eq!(victim.status, 200, "{:?}", victim.json);
    assert_ne!(rt(&victim), rt(&thief));
    Theft {
        c,
        browser,
        stolen,
        thief,
        victim,
    }
}

/// The hidden `family` and `branch` of the end form of the account page's session whose
/// address is `ip`.
fn session_form(page: &str, ip: &str) -> (String, String) {
    let start = page
        .find(&format!("<code class=\"mono\">{ip} (network"))
        .unwrap_or_else(|| panic!("no session from {ip}"));
    let rest = &page[start..];
    let value = |name: &str| {
        let needle = format!("name=\"{name}\" value=\"");
        let from = rest.find(&needle).unwrap() + needle.len();
        rest[from..from + rest[from..].find('"').unwrap()].to_owned()
    };
    (value("family"), value("branch"))
}

#[tokio::test]
async fn stolen_current_refresh_token_shows_as_a_second_branch_with_its_address() {
    let proxy = proxy().await;
    let Theft {
        c,
        browser,
        stolen,
        thief,
        victim,
    } = theft(&proxy).await;

    // The family has two branches: the thief's (the line it took over) and the victim's fork.
    let fam = family(&proxy, &stolen).await;
    assert!(!fam.revoked);
    let seen: Vec<(String, String)> = fam
        .branches
        .iter()
        .map(|b| {
            let s = b.seen.clone().unwrap();
            (s.ip.unwrap().to_string(), s.user_agent.unwrap())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (THIEF.to_owned(), THIEF_UA.to_owned()),
            (VICTIM.to_owned(), VICTIM_UA.to_owned())
        ]
    );

    // `token_refreshed` names the address, network, user agent and branch of every refresh.
    let refreshed = events(&proxy, "token_refreshed").await;
    let got: Vec<(Value, Value, Value, Value)> = refreshed
        .iter()
        .map(|e| {
            (
                e["branch"].clone(),
                e["ip"].clone(),
                e["network"].clone(),
                e["user_agent"].clone(),
            )
        })
        .collect();
    let row = |b: u32, ip: &str, net: &str, ua: &str| {
        (
            Value::from(b),
            Value::from(ip),
            Value::from(net),
            Value::from(ua),
        )
    };
    assert_eq!(
        got,
        [
            row(0, VICTIM, VICTIM_NET, VICTIM_UA),
            row(0, THIEF, THIEF_NET, THIEF_UA),
            row(1, VICTIM, VICTIM_NET, VICTIM_UA),
        ]
    );
    let branched = events(&proxy, "refresh_branched").await;
    assert_eq!(branched.len(), 1);
    assert_eq!(
        (&branched[0]["branch"], &branched[0]["ip"]),
        (&Value::from(1), &Value::from(VICTIM))
    );

    // The account page lists both, with where each was last used and what it said it was.
    let page = browser.navigate(&proxy.url("/account"), "none").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for s in [
        "Claude Code",
        &format!("{THIEF} (network {THIEF_NET})"),
        THIEF_UA,
        &format!("{VICTIM} (network {VICTIM_NET})"),
        VICTIM_UA,
    ] {
        assert!(page.body.contains(s), "{s} missing from the account page");
    }
    assert_eq!(page.body.matches(">End this session</button>").count(), 2);
    // Both parties' tokens work (the branch policy honoured the fork); no alert yet.
    assert_eq!(access_state(&proxy, &at(&thief)).await, Ok(()));
    assert_eq!(access_state(&proxy, &at(&victim)).await, Ok(()));
    assert!(events(&proxy, "refresh_reuse").await.is_empty());
    assert!(branch_alerts(&proxy).await.is_empty());
    let _ = c;
}

#[tokio::test]
async fn person_revokes_one_branch_and_keeps_the_other() {
    let proxy = proxy().await;
    let Theft {
        c,
        browser,
        stolen,
        thief,
        victim,
    } = theft(&proxy).await;
    let page = browser.navigate(&proxy.url("/account"), "none").await;
    let csrf = page.hidden("csrf").unwrap();
    let (family_id, branch) = session_form(&page.body, THIEF);
    assert_eq!(branch, "0", "the thief holds the line it rotated");
    let end = async |fields: &[(&str, &str)]| {
        browser
            .post_form(
                &proxy.url("/account/end-session"),
                fields,
                &proxy.base,
                "same-origin",
            )
            .await
    };
    let before = family(&proxy, &stolen).await;

    // A cross-site form, or a forged CSRF token: refused, nothing changes.
    let cross = browser
        .post_form(
            &proxy.url("/account/end-session"),
            &[("family", &family_id), ("branch", &branch), ("csrf", &csrf)],
            "https://evil.example",
            "cross-site",
        )
        .await;
    assert_eq!(cross.status, 403);
    let forged = end(&[
        ("family", &family_id),
        ("branch", &branch),
        ("csrf", "forged"),
    ])
    .await;
    assert_eq!(forged.status, 403);
    // Another person, signed in with their own valid CSRF token, naming Alice's session: the
    // same page as for a session that does not exist, and nothing changes.
    let bob = Browser::new();
    let other = Client::register(&proxy, "Bob's Agent", "https://bob-agent.example/cb").await;
    other.tokens(&proxy, &bob, "bob").await;
    let bob_page = bob.navigate(&proxy.url("/account"), "none").await;
    let bob_csrf = bob_page.hidden("csrf").unwrap();
    let cross_person = bob
        .post_form(
            &proxy.url("/account/end-session"),
            &[
                ("family", &family_id),
                ("branch", &branch),
                ("csrf", &bob_csrf),
            ],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(cross_person.status, 404, "{}", cross_person.body);
    assert!(cross_person.body.contains("Session not found"));
    let unknown = end(&[("family", &family_id), ("branch", "7"), ("csrf", &csrf)]).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(family(&proxy, &stolen).await, before, "nothing changed");
    assert!(events(&proxy, "refresh_branch_ended").await.is_empty());
    assert_eq!(access_state(&proxy, &at(&thief)).await, Ok(()));

    // Alice ends the thief's session.
    let r = end(&[("family", &family_id), ("branch", &branch), ("csrf", &csrf)]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        r.location().as_deref(),
        Some("/account?notice=session_ended")
    );
    let ended = events(&proxy, "refresh_branch_ended").await;
    assert_eq!(ended.len(), 1);
    assert_eq!(
        (
            &ended[0]["family_id"],
            &ended[0]["branch"],
            &ended[0]["family_revoked"]
        ),
        (
            &Value::from(family_id.as_str()),
            &Value::from(0),
            &Value::from(false)
        )
    );

    // At once: the thief's access token; then its refresh token and the stolen one, which
    // neither refresh nor fork again, and change nothing.
    assert_eq!(
        access_state(&proxy, &at(&thief)).await,
        Err(TokenRejection::Revoked)
    );
    let after = family(&proxy, &stolen).await;
    for token in [rt(&thief), stolen.clone()] {
        let r = refresh_as(&proxy, &c, &token, THIEF, THIEF_UA).await;
        assert_eq!(
            (r.status, r.error()),
            (400, "invalid_grant"),
            "{:?}",
            r.json
        );
        assert!(r.json.get("access_token").is_none());
    }
    assert_eq!(
        family(&proxy, &stolen).await,
        after,
        "refusals change nothing"
    );
    assert_eq!(after.branches.len(), 1);
    assert!(!after.revoked);
    assert!(events(&proxy, "refresh_reuse").await.is_empty());
    assert_eq!(events(&proxy, "refresh_branched").await.len(), 1);

    // The victim's branch goes on.
    assert_eq!(access_state(&proxy, &at(&victim)).await, Ok(()));
    let next = refresh_as(&proxy, &c, &rt(&victim), VICTIM, VICTIM_UA).await;
    assert_eq!(next.status, 200, "{:?}", next.json);
    assert_eq!(access_state(&proxy, &at(&next)).await, Ok(()));
    let page = browser
        .navigate(&proxy.url("/account?notice=session_ended"), "same-origin")
        .await;
    assert!(page.body.contains("That session was ended"));
    assert!(!page.body.contains(THIEF), "the ended session is gone");
    assert!(page.body.contains(VICTIM));
}

#[tokio::test]
async fn branches_from_two_networks_alert() {
    let proxy = proxy().await;
    let Theft {
        c, thief, victim, ..
    } = theft(&proxy).await;
    // The victim keeps working: nothing yet (the thief has not used its branch since the
    // victim's began).
    proxy.clock.advance(900);
    let victim = refresh_as(&proxy, &c, &rt(&victim), VICTIM, VICTIM_UA).await;
    assert_eq!(victim.status, 200);
    assert!(branch_alerts(&proxy).await.is_empty());
    // The thief comes back for another access token: two parties, two networks.
    proxy.clock.advance(900);
    let thief = refresh_as(&proxy, &c, &rt(&thief), THIEF, THIEF_UA).await;
    assert_eq!(thief.status, 200, "the refresh itself is answered");
    let alerts = branch_alerts(&proxy).await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(a["user_id"], "github:1001");
    assert_eq!(a["client_id"], c.id.as_str());
    let detail = a["detail"].as_str().unwrap();
    let fam = family(&proxy, &rt(&thief)).await;
    for s in [
        fam.family_id.as_str(),
        THIEF,
        THIEF_NET,
        VICTIM,
        VICTIM_NET,
        THIEF_UA,
    ] {
        assert!(detail.contains(s), "{s} missing: {detail}");
    }
    // One alert per family and window, however the two go on.
    proxy.clock.advance(900);
    let v = refresh_as(&proxy, &c, &rt(&victim), VICTIM, VICTIM_UA).await;
    assert_eq!(v.status, 200);
    let t = refresh_as(&proxy, &c, &rt(&thief), THIEF, THIEF_UA).await;
    assert_eq!(t.status, 200);
    assert_eq!(branch_alerts(&proxy).await.len(), 1);
    assert!(events(&proxy, "refresh_reuse").await.is_empty());
}

/// The review of 2026-12-04: the victim refreshes with the token the thief just rotated,
/// seconds later, inside the 30 s grace window. That used to be a replay (the victim got the
/// thief's own next token, no branch, no alert); from another network it is a branch of its
/// own now, listed with its address, and the two live branches on two networks raise the
/// alert. A retry from the thief's network inside the window is still a replay.
#[tokio::test]
async fn stolen_token_presented_inside_the_grace_window_from_another_network_is_a_visible_branch() {
    let proxy = proxy().await;
    let c = Client::register(&proxy, "Claude Code", "http://127.0.0.1:33418/callback").await;
    let browser = Browser::new();
    let t0 = c.tokens(&proxy, &browser, "alice").await;
    proxy.clock.advance(600);
    let v1 = refresh_as(&proxy, &c, &rt(&t0), VICTIM, VICTIM_UA).await;
    assert_eq!(v1.status, 200, "{:?}", v1.json);
    let stolen = rt(&v1);
    proxy.clock.advance(60);
    let thief = refresh_as(&proxy, &c, &stolen, THIEF, THIEF_UA).await;
    assert_eq!(thief.status, 200, "{:?}", thief.json);
    proxy.clock.advance(5);
    let retry = refresh_as(&proxy, &c, &stolen, THIEF, THIEF_UA).await;
    assert_eq!(
        rt(&retry),
        rt(&thief),
        "a retry from the rotating network is a replay"
    );
    proxy.clock.advance(5);
    let victim = refresh_as(&proxy, &c, &stolen, VICTIM, VICTIM_UA).await;
    assert_eq!(victim.status, 200, "{:?}", victim.json);
    assert_ne!(
        rt(&victim),
        rt(&thief),
        "another network inside the window gets a branch of its own"
    );
    let fam = family(&proxy, &stolen).await;
    assert_eq!(fam.branches.len(), 2);
    assert_eq!(events(&proxy, "refresh_branched").await.len(), 1);
    let page = browser.navigate(&proxy.url("/account"), "none").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("{THIEF} (network {THIEF_NET})"))
    );
    assert!(
        page.body
            .contains(&format!("{VICTIM} (network {VICTIM_NET})"))
    );
    // Both branches used from two networks within the window: the alert fires.
    proxy.clock.advance(60);
    let t = refresh_as(&proxy, &c, &rt(&thief), THIEF, THIEF_UA).await;
    assert_eq!(t.status, 200, "{:?}", t.json);
    assert_eq!(branch_alerts(&proxy).await.len(), 1);
}
