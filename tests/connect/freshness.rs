//! What a connect link's freshness check accepts: only a sign-in the proxy sent through
//! GitHub's account picker (`prompt=select_account`) for a link, within
//! `[connect] max_sign_in_age_secs`. A sign-in GitHub may answer without showing anything — the
//! account page's, the consent flow's — is sent to sign in again however recent it is. And the
//! page itself is held like the consent page: without JavaScript, acting takes a confirmation
//! step that refuses a click right after it appeared.

use serde_json::json;

use crate::support::browser::Browser;
use crate::support::people::Person;
use crate::support::{Options, TestProxy, query_param};
use mcp_examples::Screen;
use mcp_oauth_proxy::store::Keyspace;

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
    assert_eq!(msg["result"]["isError"], true, "refusal expected: {msg}");
    msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .find(|w| w.contains("/connect/"))
        .unwrap()
        .to_owned()
}

/// The `sign_in` field of every `signed_in` audit event, sorted (the store's key order is
/// not the order they happened in).
async fn sign_ins(proxy: &TestProxy) -> Vec<String> {
    let mut kinds: Vec<String> = proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.event["event"] == "signed_in")
        .map(|r| {
            r.event["sign_in"]
                .as_str()
                .unwrap_or("(missing)")
                .to_owned()
        })
        .collect();
    kinds.sort();
    kinds
}

/// The authorize requests the fake GitHub received, as query strings, from `from` on.
fn authorize_queries(proxy: &TestProxy, from: usize) -> Vec<String> {
    proxy.github.requests()[from..]
        .iter()
        .filter(|r| r.method == "GET" && r.path() == "/login/oauth/authorize")
        .map(|r| r.path_and_query.clone())
        .collect()
}

/// Whether the agent may still not use GitHub: its call is refused with a link.
async fn still_refused(p: &Person) -> bool {
    let (_, msg) = p.mcp.call_tool("whoami", json!({})).await;
    msg["result"]["isError"] == true && msg.to_string().contains("/connect/")
}

async fn completed_links(proxy: &TestProxy) -> usize {
    proxy
        .audit_events()
        .await
        .iter()
        .filter(|e| *e == "connect_link_completed")
        .count()
}

/// The attack of the review: the person stopped an agent; another site sends their browser
/// to `/account`, which (without a session) signs them in through GitHub silently — GitHub
/// skips every screen for a signed-in person who already authorized the app — and then to
/// the agent's link. That brand-new sign-in must not count: the link sends the browser to
/// GitHub's account picker instead of offering Allow, and nothing changes until the person has
/// picked their account there.
#[tokio::test]
async fn silent_account_sign_in_does_not_satisfy_the_freshness_check() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let link = link_for(&alice).await;

    // A browser signed in at GitHub, sent to /account: in and out of GitHub with no screen.
    let browser = Browser::signed_in_at_github("alice");
    let screens = proxy.github.screens_shown().len();
    let requests = proxy.github.requests().len();
    let account = browser.navigate(&proxy.url("/account"), "cross-site").await;
    assert_eq!(account.status, 303);
    let gh = account.location().unwrap();
    assert_eq!(
        query_param(&gh, "prompt"),
        None,
        "the account page signs in silently"
    );
    let back = browser.navigate(&gh, "cross-site").await;
    assert_eq!(back.status, 302, "GitHub answered at once: {}", back.body);
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.location().as_deref(), Some("/account"));
    assert_eq!(
        proxy.github.screens_shown().len(),
        screens,
        "GitHub showed the person nothing"
    );
    let page = browser.navigate(&proxy.url("/account"), "none").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Signed in as <strong>@alice</strong>"));
    // Recorded as what it was: the consent flow's sign-in and this one, both silent.
    assert_eq!(sign_ins(&proxy).await, ["silent", "silent"]);

    // Seconds later, the link: sent to GitHub's account picker, no action offered.
    let links_before = proxy.count(Keyspace::ConnectLinks).await;
    let opened = browser.navigate(&link, "cross-site").await;
    assert_eq!(opened.status, 303, "{}", opened.body);
    let picker = opened.location().unwrap();
    assert!(
        picker.starts_with(&proxy.github.authorize_url()),
        "{picker}"
    );
    assert_eq!(
        query_param(&picker, "prompt").as_deref(),
        Some("select_account")
    );
    assert!(!opened.body.contains("name=\"decision\""));
    // A forged POST (with the account page's CSRF token, the only one this browser has) is
    // sent to sign in the same way.
    let forged = browser
        .post_form(
            &link,
            &[
                ("csrf", &page.hidden("csrf").unwrap()),
                ("decision", "approve"),
            ],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(forged.status, 303);
    // (Each sign-in it is sent to replaces the browser's flow cookie: the latest one counts.)
    let picker = forged.location().unwrap();
    assert!(picker.contains("prompt=select_account"), "{picker}");
    // The consent flow's own (silent) session is sent there too.
    let own = alice.open(&link).await;
    assert_eq!(own.status, 303);
    assert!(own.location().unwrap().contains("prompt=select_account"));

    // Nothing changed: the link is open, the agent still refused, nothing completed.
    assert_eq!(proxy.count(Keyspace::ConnectLinks).await, links_before);
    assert!(still_refused(&alice).await);
    assert_eq!(completed_links(&proxy).await, 0);
    let asked = authorize_queries(&proxy, requests);
    assert_eq!(
        asked.len(),
        1,
        "only the account page's sign-in reached GitHub: {asked:?}"
    );
    assert!(!asked[0].contains("prompt="), "{}", asked[0]);
    let requests = proxy.github.requests().len();

    // Through the picker (the person clicks their account), back to the link: now the page.
    let back = browser.through_github(&picker, "alice").await;
    assert_eq!(
        proxy.github.screens_shown()[screens..],
        [Screen::AccountPicker]
    );
    let asked = authorize_queries(&proxy, requests);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("prompt=select_account"), "{}", asked[0]);
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.location().as_deref(), link.strip_prefix(&proxy.base));
    let page = browser.navigate(&link, "none").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("name=\"decision\" value=\"approve\""));
    assert_eq!(
        sign_ins(&proxy).await,
        ["account_picker", "silent", "silent"]
    );
    let done = browser
        .post_form(
            &link,
            &[
                ("csrf", &page.hidden("csrf").unwrap()),
                ("decision", "approve"),
            ],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Go back to your agent"));
    assert!(!still_refused(&alice).await);
}

/// The request that reaches GitHub for a link's sign-in carries `prompt=select_account`, the
/// parameter GitHub documents to force its account picker: the fake, which behaves like GitHub
/// for it, shows the picker even to a signed-in person who already authorized the app. A
/// stale sign-in is sent the same way; the account page's sign-in carries no prompt.
#[tokio::test]
async fn freshness_sign_in_asks_github_for_its_account_picker() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let link = link_for(&alice).await;
    alice.browser.set_cookie("fgh_user", "alice");

    for round in ["silent consent-flow session", "stale link session"] {
        let requests = proxy.github.requests().len();
        let screens = proxy.github.screens_shown().len();
        let opened = alice.open(&link).await;
        assert_eq!(opened.status, 303, "{round}");
        let gh = opened.location().unwrap();
        let shown = alice.browser.navigate(&gh, "cross-site").await;
        assert_eq!(shown.status, 200, "{round}: the picker, not a redirect");
        assert!(shown.body.contains("Sign in to GitHub"), "{round}");
        let asked = authorize_queries(&proxy, requests);
        assert_eq!(asked.len(), 1, "{round}: {asked:?}");
        assert_eq!(
            query_param(&format!("http://x{}", asked[0]), "prompt").as_deref(),
            Some("select_account"),
            "{round}: what GitHub received"
        );
        assert_eq!(
            proxy.github.screens_shown()[screens..],
            [Screen::AccountPicker],
            "{round}"
        );
        let page = alice.open_link(&proxy, &link).await;
        assert_eq!(page.status, 200, "{round}: {}", page.body);
        proxy.clock.advance(16 * 60);
    }
    assert_eq!(
        sign_ins(&proxy).await,
        ["account_picker", "account_picker", "silent"]
    );
}

/// Double-clickjacking on the connect page. With JavaScript the page holds its buttons like
/// the consent page (hidden, disabled, the consent script under its CSP hash; the browser test
/// proves the script). Without it, Continue leads to a confirmation page that refuses an Allow
/// within `CONFIRM_MIN_MS` of appearing by showing itself again, with nothing allowed; once
/// shown long enough, Allow works. A Continue on a closed link shows nothing.
#[tokio::test]
async fn connect_action_right_after_the_confirmation_page_is_refused_then_works_after_the_delay() {
    use mcp_oauth_proxy::flows::consent::CONFIRM_MIN_MS;

    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let link = link_for(&alice).await;
    let page = alice.open_link(&proxy, &link).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains(r#"<div class="actions" id="consent-actions" hidden>"#)
    );
    assert!(page.body.contains(
        r#"<button type="submit" name="decision" value="approve" class="button button-primary" disabled>Allow</button>"#
    ));
    assert!(page.body.contains(r#"name="decision" value="review""#));
    // The consent page's one script, allowed by the consent CSP's hash (`consent-ui` and
    // `http::headers` unit tests pin the hash to the script).
    assert_eq!(page.body.matches("<script>").count(), 1);
    assert!(page.body.contains(r#"getElementById("consent-decision")"#));
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'sha256-"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers["x-frame-options"], "DENY");

    // Continue (the <noscript> button): the confirmation page, no script, plain buttons.
    let confirm = alice.decide(&proxy, &link, &page, "review").await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(
        confirm
            .body
            .contains("Confirm: Let Repo Helper use your GitHub account")
    );
    assert!(
        !confirm.body.contains("<script") && !confirm.body.contains("That click came too soon")
    );
    assert!(confirm.body.contains(
        r#"<button type="submit" name="decision" value="approve" class="button button-primary">Allow</button>"#
    ));
    assert_eq!(confirm.headers["x-frame-options"], "DENY");

    // The second click of a double-click, 100 ms later: the page again, nothing allowed.
    proxy.clock.advance_millis(100);
    let again = alice.decide(&proxy, &link, &confirm, "approve").await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("That click came too soon"));
    // The wait starts over from the page shown again.
    proxy.clock.advance_millis(CONFIRM_MIN_MS - 1);
    let still = alice.decide(&proxy, &link, &again, "approve").await;
    assert!(still.body.contains("That click came too soon"));
    assert!(still_refused(&alice).await);
    assert_eq!(completed_links(&proxy).await, 0);
    assert_eq!(proxy.count(Keyspace::ConnectLinks).await, 1);

    // Shown long enough: Allow works, and the agent's retry succeeds.
    proxy.clock.advance_millis(CONFIRM_MIN_MS);
    let done = alice.decide(&proxy, &link, &still, "approve").await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Go back to your agent"), "{}", done.body);
    assert!(!still_refused(&alice).await);
    assert_eq!(completed_links(&proxy).await, 1);

    // A late Continue from the same tab finds the link closed; nothing comes back.
    let late = alice.decide(&proxy, &link, &page, "review").await;
    assert_eq!(late.status, 404);
    assert_eq!(proxy.count(Keyspace::ConnectLinks).await, 0);
}
