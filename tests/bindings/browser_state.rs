//! Browser-bound, single-use upstream state, and the return from GitHub bound to the browser
//! that approved (not only to a cookie another port can toss in).

use crate::support::browser::Resp;
use crate::support::client::{approve, decide};
use crate::support::{Browser, Client, Pkce, TestProxy, query_param};
use mcp_oauth_proxy::bindings::browser_state::FINISH_MIN_MS;
use mcp_oauth_proxy::store::Keyspace;

/// Mallory approves her own client in her browser and captures the GitHub authorization URL
/// the proxy sent her to. She gets Alice to open it. GitHub skips its consent for Alice and
/// redirects to the proxy's callback with Alice's code and Mallory's state, in Alice's
/// browser. The state is not bound to Alice's browser: refused, no code, no GitHub exchange.
#[tokio::test]
async fn captured_github_url_opened_in_victim_browser_is_rejected() {
    let proxy = TestProxy::start().await;
    // Alice has used the proxy's GitHub app before, so GitHub will not ask her again.
    let honest = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let alice = Browser::new();
    honest.tokens(&proxy, &alice, "alice").await;

    let evil = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    let mallory = Browser::new();
    let page = mallory
        .navigate(&evil.authorize_url(&proxy, &Pkce::new(), "m", &[]), "none")
        .await;
    let captured = approve(&proxy, &mallory, &page).await;

    let token_requests = proxy.github.token_requests();
    let codes_before = proxy.count(Keyspace::Codes).await;
    let back = alice.through_github(&captured, "alice").await; // silent at GitHub
    let cb = alice
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 400);
    assert!(
        cb.location().is_none(),
        "nothing may be redirected to the attacker"
    );
    assert!(cb.body.contains("not started in this browser"));
    assert_eq!(
        proxy.github.token_requests(),
        token_requests,
        "GitHub's code must not be exchanged"
    );
    assert_eq!(proxy.count(Keyspace::Codes).await, codes_before);
    // Anyone can send a bad state: counted per source and minute, not stored per request.
    assert!(
        !proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "callback_rejected")
    );
    proxy.app.audit.flush_refusals(true).await.unwrap();
    let trail = proxy.app.audit.all().await.unwrap();
    assert!(
        trail.iter().any(|r| r.kind == "anonymous_refusals"
            && r.event["refused_at"] == "callback"
            && r.event["reason"] == "state_not_this_browser"
            && r.event["count"] == 1),
        "{trail:?}"
    );
}

#[tokio::test]
async fn replayed_state_is_rejected() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let flow_cookie = browser.cookie("__Host-mcp-flow").unwrap();
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    assert_eq!(browser.navigate(&back, "cross-site").await.status, 303);
    let codes = proxy.count(Keyspace::Codes).await;
    // Replay the same callback URL, even with the original flow cookie restored.
    browser.set_cookie("__Host-mcp-flow", &flow_cookie);
    let again = browser.navigate(&back, "cross-site").await;
    assert_eq!(again.status, 400);
    assert!(again.location().is_none());
    assert_eq!(proxy.count(Keyspace::Codes).await, codes);
}

#[tokio::test]
async fn callback_without_state_is_rejected() {
    let proxy = TestProxy::start().await;
    let browser = Browser::new();
    let r = browser
        .navigate(&proxy.url("/callback/github?code=abc"), "cross-site")
        .await;
    assert_eq!(r.status, 400);
    assert!(r.location().is_none());
    assert_eq!(proxy.github.token_requests(), 0);
}

#[tokio::test]
async fn callback_without_flow_cookie_is_rejected_and_burns_the_state() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    let fresh_browser = Browser::new();
    let r = fresh_browser.navigate(&back, "cross-site").await;
    assert_eq!(r.status, 400);
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    assert_eq!(proxy.github.token_requests(), 0);
}

#[tokio::test]
async fn expired_state_is_rejected() {
    let proxy = TestProxy::start().await;
    let client = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    proxy.clock.advance(601);
    let r = browser.navigate(&back, "cross-site").await;
    assert_eq!(r.status, 400);
    assert!(r.location().is_none());
    assert_eq!(proxy.github.token_requests(), 0);
    assert!(query_param(&back, "state").is_some());
}

/// A page of another program on another loopback port: it sets ("tosses") `cookie` for
/// 127.0.0.1, which the browser also sends to the proxy's port, and sends the browser on to
/// `next`. Returns its URL.
async fn tossing_page(cookie: String, next: String) -> String {
    use axum::response::IntoResponse;
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let (cookie, next) = (cookie.clone(), next.clone());
            async move {
                (
                    axum::http::StatusCode::SEE_OTHER,
                    [
                        (
                            axum::http::header::SET_COOKIE,
                            format!(
                                "__Host-mcp-flow={cookie}; Path=/; Secure; HttpOnly; SameSite=Lax"
                            ),
                        ),
                        (axum::http::header::LOCATION, next),
                    ],
                )
                    .into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn is_finish_page(r: &Resp) -> bool {
    r.status == 200 && r.body.contains(r#"action="/callback/github""#)
}

/// The review's Low, reported twice: on plain-HTTP loopback any other loopback port can toss
/// `__Host-mcp-flow` into the victim's browser (Chromium treats `http://127.0.0.1:*` as a secure
/// context). Mallory approves her own client in her own browser, keeps the flow cookie and the
/// GitHub URL, and a page of hers on another port tosses the cookie into Alice's browser and
/// sends it to that URL; GitHub, already authorized by Alice, sends Alice straight back with her
/// code and Mallory's state. The cookie matches, but Alice's browser does not hold the value
/// Mallory's consent page kept in its own origin's storage (and its own leftover value is not
/// Mallory's): no code, no GitHub exchange, no consent; Alice is asked, on the finish page, to
/// confirm what she did not start, and her Deny ends it. Mallory cannot answer that page from
/// her port.
#[tokio::test]
async fn tossed_flow_cookie_from_another_loopback_port_yields_no_code() {
    let proxy = TestProxy::start().await;
    let honest = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let alice = Browser::signed_in_at_github("alice");
    honest.tokens(&proxy, &alice, "alice").await;
    // Alice also opened a second approval of her own in this tab and left it at GitHub: her
    // browser holds a value of its own for that flow.
    let second = Client::register(&proxy, "Docs Helper", "https://docs.example/callback").await;
    let page = alice
        .navigate(
            &second.authorize_url(&proxy, &Pkce::new(), "a2", &[]),
            "none",
        )
        .await;
    approve(&proxy, &alice, &page).await;
    assert!(alice.stored_flow_proof().is_some());

    let evil = Client::register(&proxy, "Triage Helper", "https://attacker.example/steal").await;
    let mallory = Browser::new();
    let page = mallory
        .navigate(&evil.authorize_url(&proxy, &Pkce::new(), "m", &[]), "none")
        .await;
    let captured = approve(&proxy, &mallory, &page).await;
    let tossed = mallory.cookie("__Host-mcp-flow").unwrap();
    let toss = tossing_page(tossed.clone(), captured.clone()).await;

    let token_requests = proxy.github.token_requests();
    let codes = proxy.count(Keyspace::Codes).await;
    let consents = proxy.count(Keyspace::Consents).await;
    let states = proxy.count(Keyspace::UpstreamStates).await;
    // Alice visits Mallory's page; the cookie lands in her jar for 127.0.0.1.
    let r = alice.navigate(&toss, "cross-site").await;
    assert_eq!(r.status, 303);
    assert_eq!(
        alice.cookie("__Host-mcp-flow").as_deref(),
        Some(tossed.as_str())
    );
    let back = alice.through_github(&captured, "alice").await; // silent at GitHub
    let back = back.location().unwrap();
    let cb = alice.navigate(&back, "cross-site").await;
    assert!(is_finish_page(&cb), "{}: {}", cb.status, cb.body);
    assert!(cb.location().is_none(), "nothing may be redirected");
    assert!(cb.body.contains("Triage Helper"), "{}", cb.body);
    assert!(cb.body.contains("https://attacker.example/steal"));
    assert_eq!(
        proxy.github.token_requests(),
        token_requests,
        "GitHub's code not exchanged"
    );
    assert_eq!(proxy.count(Keyspace::Codes).await, codes);
    assert_eq!(proxy.count(Keyspace::Consents).await, consents);
    assert_eq!(
        proxy.count(Keyspace::UpstreamStates).await,
        states,
        "the state waits"
    );

    // Mallory's own value, from a page on her port, is no use: it is not in Alice's storage,
    // and the callback URL Alice's browser follows is GitHub's. Sent straight to the callback
    // (were she to learn Alice's code), it would only work in the browser that approved: hers.
    let mallory_proof = mallory.stored_flow_proof().unwrap();
    let forged = Browser::new();
    forged.set_cookie("__Host-mcp-flow", &tossed);
    let r = forged
        .navigate(&format!("{back}&flow_proof={mallory_proof}x"), "cross-site")
        .await;
    assert!(is_finish_page(&r), "{}", r.body);

    // Answering the finish page from her port: refused before anything is looked at.
    let state = cb.hidden("state").unwrap();
    let code = cb.hidden("code").unwrap();
    let csrf = cb.hidden("csrf").unwrap();
    let fields = [
        ("state", state.as_str()),
        ("code", code.as_str()),
        ("csrf", csrf.as_str()),
        ("decision", "approve"),
    ];
    let toss_origin = toss.trim_end_matches('/');
    let r = alice
        .post_form(
            &proxy.url("/callback/github"),
            &fields,
            toss_origin,
            "same-site",
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // Nor with the page's own form in another browser (its token is bound to Alice's).
    let r = mallory
        .post_form(
            &proxy.url("/callback/github"),
            &fields,
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(proxy.github.token_requests(), token_requests);
    assert_eq!(proxy.count(Keyspace::Codes).await, codes);

    // Alice did not start this: Deny. The state is used up; no code goes anywhere.
    proxy.clock.advance_millis(FINISH_MIN_MS);
    let fields = [
        ("state", state.as_str()),
        ("code", code.as_str()),
        ("csrf", csrf.as_str()),
        ("decision", "deny"),
    ];
    let r = alice
        .post_form(
            &proxy.url("/callback/github"),
            &fields,
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let to = r.location().unwrap();
    assert_eq!(query_param(&to, "error").as_deref(), Some("access_denied"));
    assert!(query_param(&to, "code").is_none());
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, states - 1);
    assert_eq!(proxy.github.token_requests(), token_requests);
    assert_eq!(proxy.count(Keyspace::Codes).await, codes);
    assert_eq!(proxy.count(Keyspace::Consents).await, consents);
    assert!(
        proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "consent_denied")
    );
}

/// Without JavaScript nothing keeps the approving page's value, so the person finishes on the
/// finish page: an Approve right after it appeared (the second click of a double-click) shows
/// it again, with nothing exchanged; a moment later it completes, in this browser only.
#[tokio::test]
async fn approval_without_javascript_is_finished_on_the_finish_page() {
    use mcp_oauth_proxy::flows::consent::CONFIRM_MIN_MS;

    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::without_javascript();
    let page = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    let confirm = decide(&proxy, &browser, &page, "review").await;
    proxy.clock.advance_millis(CONFIRM_MIN_MS);
    let r = decide(&proxy, &browser, &confirm, "approve").await;
    assert_eq!(r.status, 303, "{}", r.body);
    let back = browser
        .through_github(&r.location().unwrap(), "alice")
        .await
        .location()
        .unwrap();
    let finish = browser.navigate(&back, "cross-site").await;
    assert!(is_finish_page(&finish), "{}", finish.body);
    assert!(finish.body.contains("Repo Helper"));
    assert!(!finish.body.contains("That click came too soon"));
    let csp = finish.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.ends_with("; form-action 'self' https://app.example"),
        "{csp}"
    );
    assert_eq!(finish.headers["x-frame-options"], "DENY");
    let answer = |page: &Resp, decision: &'static str| {
        [
            ("state", page.hidden("state").unwrap()),
            ("code", page.hidden("code").unwrap()),
            ("csrf", page.hidden("csrf").unwrap()),
            ("decision", decision.to_owned()),
        ]
    };
    let token_requests = proxy.github.token_requests();
    proxy.clock.advance_millis(100);
    let fields = answer(&finish, "approve");
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let again = browser
        .post_form(
            &proxy.url("/callback/github"),
            &fields,
            &proxy.base,
            "same-origin",
        )
        .await;
    assert!(is_finish_page(&again), "{}", again.body);
    assert!(again.body.contains("That click came too soon"));
    assert_eq!(proxy.github.token_requests(), token_requests);
    assert_eq!(proxy.count(Keyspace::Codes).await, 0);

    proxy.clock.advance_millis(FINISH_MIN_MS);
    let done = browser
        .post_form(
            &proxy.url("/callback/github"),
            &fields,
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let to = done.location().unwrap();
    assert!(to.starts_with("https://app.example/callback?"), "{to}");
    assert!(query_param(&to, "code").is_some());
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    // Once.
    let replay = browser
        .post_form(
            &proxy.url("/callback/github"),
            &fields,
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(replay.status, 400, "{}", replay.body);
}
