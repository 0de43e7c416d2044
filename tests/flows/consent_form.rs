//! The consent form accepts only submissions from the proxy's own page.

use crate::support::client::decide;
use crate::support::{Browser, Client, Options, Pkce, TestProxy};
use mcp_oauth_proxy::store::Keyspace;

/// An attacker starts a flow for their own client, reads the consent form's fields from
/// their own browser, and makes the victim's browser POST "approve" from their site. Refused
/// before anything is taken or created.
#[tokio::test]
async fn cross_site_consent_post_is_rejected() {
    let proxy = TestProxy::start().await;
    let evil = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    let attacker = Browser::new();
    let page = attacker
        .navigate(&evil.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    let txn = page.hidden("txn").unwrap();
    let csrf = page.hidden("csrf").unwrap();
    let victim = Browser::signed_in_at_github("alice");
    let fields = [
        ("txn", txn.as_str()),
        ("csrf", csrf.as_str()),
        ("decision", "approve"),
    ];
    for (origin, site) in [
        ("https://attacker.example", "cross-site"),
        ("https://attacker.example", "same-site"),
        ("null", "cross-site"),
    ] {
        let r = victim
            .post_form(&proxy.url("/consent"), &fields, origin, site)
            .await;
        assert_eq!(r.status, 403, "{origin} {site}");
        assert!(r.location().is_none());
        assert!(r.set_cookies().is_empty());
    }
    assert_eq!(
        proxy.count(Keyspace::Transactions).await,
        1,
        "the transaction is still there, untouched"
    );
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
}

#[tokio::test]
async fn consent_csrf_token_of_another_transaction_is_rejected() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let p1 = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    let p2 = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    let r = browser
        .post_form(
            &proxy.url("/consent"),
            &[
                ("txn", &p1.hidden("txn").unwrap()),
                ("csrf", &p2.hidden("csrf").unwrap()),
                ("decision", "approve"),
            ],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(proxy.count(Keyspace::Transactions).await, 2);
    // Loading the page twice does not break the first tab (a known failure elsewhere).
    assert_eq!(
        crate::support::client::decide(&proxy, &browser, &p1, "approve")
            .await
            .status,
        303
    );
}

#[tokio::test]
async fn consent_page_cannot_be_framed_and_is_not_cached() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let page = Browser::new()
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.headers["x-frame-options"], "DENY");
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"));
    assert!(csp.contains("default-src 'none'"));
    // Exactly where the form's answers lead: GitHub (Approve), the client (Deny).
    assert!(
        csp.ends_with(&format!(
            "; form-action 'self' {} https://app.example",
            proxy.github.base_url()
        )),
        "{csp}"
    );
    assert_eq!(page.headers["cache-control"], "no-store");
    // same-origin, not no-referrer: with no-referrer Chromium sends `Origin: null` on our own
    // form POSTs, which the same-origin check must refuse; URLs still never leave the origin.
    assert_eq!(page.headers["referrer-policy"], "same-origin");
}

/// The review's M1: a victim browser that sends neither `Origin` nor `Sec-Fetch-Site` (an old
/// browser, a stripping proxy) auto-submits the attacker's own consent form. The form is bound
/// to the browser that loaded the page, and a POST without provenance headers is refused.
#[tokio::test]
async fn consent_post_without_origin_from_another_browser_is_rejected() {
    let proxy = TestProxy::start().await;
    let evil = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    let attacker = Browser::new();
    let page = attacker
        .navigate(&evil.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    let fields = [
        ("txn", page.hidden("txn").unwrap()),
        ("csrf", page.hidden("csrf").unwrap()),
        ("decision", "approve".to_owned()),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let victim = Browser::signed_in_at_github("alice");
    let r = victim
        .post_form_with(&proxy.url("/consent"), &fields, &[])
        .await;
    assert_eq!(r.status, 403);
    assert!(r.location().is_none() && r.set_cookies().is_empty());
    // Even with headers that look same-origin, the victim's browser lacks the form's cookie.
    let r = victim
        .post_form(&proxy.url("/consent"), &fields, &proxy.base, "same-origin")
        .await;
    assert_eq!(r.status, 403);
    // And the attacker's own browser without provenance headers is refused as well.
    let r = attacker
        .post_form_with(&proxy.url("/consent"), &fields, &[])
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    assert_eq!(proxy.count(Keyspace::Transactions).await, 1);
    assert!(proxy.github.requests().is_empty());
}

/// The review's M3: the attacker approves their own client with their own account, then waits.
/// The victim's consent page must still warn that the destination is new.
#[tokio::test]
async fn attacker_self_approval_does_not_silence_the_new_destination_warning() {
    // Approvals count only when admission is closed (everyone who approved was admitted).
    let proxy = TestProxy::start_with(Options {
        access: r#"github_users = ["alice", "bob", "mallory"]"#.to_owned(),
        ..Options::default()
    })
    .await;
    let evil = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    evil.get_code(&proxy, &Browser::new(), "mallory", &Pkce::new())
        .await;
    proxy.clock.advance(3600);
    let page = Browser::new()
        .navigate(&evil.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("new to this server"),
        "warning silenced by self-approval"
    );
    // Two different people approving makes the host known.
    evil.get_code(&proxy, &Browser::new(), "bob", &Pkce::new())
        .await;
    let page = Browser::new()
        .navigate(&evil.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert!(!page.body.contains("new to this server"));
}

async fn approvals(proxy: &TestProxy) -> usize {
    proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.event["event"] == "consent_approved")
        .count()
}

/// Double-clickjacking without JavaScript: the consent page offers Continue, not Approve; the
/// confirmation page it leads to refuses an Approve that comes within `CONFIRM_MIN_MS` of it
/// appearing (the second click of a double-click) by showing itself again, with nothing taken,
/// created or sent to GitHub; once it has been shown long enough, Approve works. A decided
/// transaction cannot be brought back by a late Continue.
#[tokio::test]
async fn approve_right_after_the_confirmation_page_is_refused_then_works_after_the_delay() {
    use mcp_oauth_proxy::flows::consent::CONFIRM_MIN_MS;

    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert!(page.body.contains(r#"name="decision" value="review""#));
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'sha256-"), "{csp}");

    // Continue (the <noscript> button): the confirmation page, framing denied as everywhere.
    let confirm = decide(&proxy, &browser, &page, "review").await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(confirm.body.contains("Confirm your approval"));
    assert!(!confirm.body.contains("That click came too soon"));
    assert!(confirm.body.contains("Repo Helper"));
    assert!(confirm.body.contains("https://app.example/callback"));
    assert_eq!(confirm.headers["x-frame-options"], "DENY");
    let csp = confirm.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(
        csp.ends_with(&format!(
            "; form-action 'self' {} https://app.example",
            proxy.github.base_url()
        )),
        "{csp}"
    );
    assert_eq!(confirm.hidden("txn"), page.hidden("txn"));

    // The second click of a double-click: 100 ms later. Refused by showing the page again.
    proxy.clock.advance_millis(100);
    let again = decide(&proxy, &browser, &confirm, "approve").await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("That click came too soon"));
    assert!(again.location().is_none() && again.set_cookies().is_empty());
    // The wait starts over from the page shown again: just under the delay is still too soon.
    proxy.clock.advance_millis(CONFIRM_MIN_MS - 1);
    let still = decide(&proxy, &browser, &again, "approve").await;
    assert!(still.body.contains("That click came too soon"));
    assert_eq!(proxy.count(Keyspace::Transactions).await, 1);
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    assert_eq!(approvals(&proxy).await, 0);
    assert!(proxy.github.requests().is_empty());

    // Shown long enough: Approve works.
    proxy.clock.advance_millis(CONFIRM_MIN_MS);
    let r = decide(&proxy, &browser, &still, "approve").await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.location().unwrap().contains("/login/oauth/authorize"));
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 1);
    assert_eq!(approvals(&proxy).await, 1);

    // A late Continue from the same tab finds the transaction gone; nothing is recreated.
    let late = decide(&proxy, &browser, &page, "review").await;
    assert_ne!(late.status, 200);
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
}

/// The confirmation step is bound like the consent form: another browser's cookie, or a
/// cross-site POST, is refused before anything is shown or changed.
#[tokio::test]
async fn confirmation_step_is_refused_from_another_browser() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let attacker = Browser::new();
    let page = attacker
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    let victim = Browser::new();
    let r = decide(&proxy, &victim, &page, "review").await;
    assert_eq!(r.status, 403);
    let r = attacker
        .post_form(
            &proxy.url("/consent"),
            &[
                ("txn", &page.hidden("txn").unwrap()),
                ("csrf", &page.hidden("csrf").unwrap()),
                ("decision", "review"),
            ],
            "https://attacker.example",
            "cross-site",
        )
        .await;
    assert_eq!(r.status, 403);
}
