//! `form-action` on every page (issue 31, Info): each page's CSP lists exactly where its forms'
//! answers may send the browser, because Chromium applies `form-action` to the redirects that
//! follow a form POST. Chromium itself is in `tests/e2e` (`consent_form_action.mjs`); here, the
//! header of every kind of page.

use serde_json::json;

use crate::support::people::Person;
use crate::support::{Browser, Client, Options, Pkce, TestProxy};

fn form_action(resp: &crate::support::browser::Resp) -> String {
    let csp = resp.headers["content-security-policy"].to_str().unwrap();
    csp.split(';')
        .map(str::trim)
        .find(|d| d.starts_with("form-action "))
        .unwrap_or_else(|| panic!("no form-action in {csp}"))
        .to_owned()
}

/// The link a refused `tools/call` carried (fallback shape: the link is in the text).
async fn link_for(p: &Person) -> String {
    let (status, msg) = p.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    let text = msg["result"]["content"][0]["text"].as_str().unwrap();
    text.split_whitespace()
        .find(|w| w.contains("/connect/"))
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn every_page_lists_exactly_where_its_forms_lead() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let github = proxy.github.base_url();

    // Consent pages: GitHub for Approve, this transaction's redirect URI for Deny.
    let native = crate::support::client::register_raw(
        &proxy,
        json!({
            "client_name": "Desktop Tool",
            "redirect_uris": ["http://127.0.0.1/cb", "com.example.tool:/cb", "http://[::1]/cb"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
        }),
    )
    .await;
    assert_eq!(native.status, 201, "{:?}", native.json);
    for (redirect, expected) in [
        (
            "http://127.0.0.1:53682/cb",
            format!("form-action 'self' {github} http://127.0.0.1:53682"),
        ),
        (
            "com.example.tool:/cb",
            format!("form-action 'self' {github} com.example.tool:"),
        ),
        // Chromium ignores IPv6 literals in source lists: the scheme stands in.
        (
            "http://[::1]:53682/cb",
            format!("form-action 'self' {github} http:"),
        ),
    ] {
        let c = Client {
            id: native.json["client_id"].as_str().unwrap().to_owned(),
            secret: None,
            redirect_uri: redirect.to_owned(),
        };
        let page = Browser::new()
            .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert_eq!(form_action(&page), expected, "{redirect}");
    }

    // The account page: its forms answer with our own pages.
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let account = alice.open(&proxy.url("/account")).await;
    assert_eq!(account.status, 200, "{}", account.body);
    assert_eq!(form_action(&account), "form-action 'self'");

    // A connect link's page: its form is answered with a redirect to GitHub.
    alice.withdraw_agent(&proxy).await;
    let link = link_for(&alice).await;
    let page = alice.open_link(&proxy, &link).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(form_action(&page), format!("form-action 'self' {github}"));

    // Error and message pages: no form leaves the origin.
    let error = Browser::new()
        .navigate(&proxy.url("/authorize?client_id=unknown"), "none")
        .await;
    assert_eq!(error.status, 400, "{}", error.body);
    assert_eq!(form_action(&error), "form-action 'self'");
}
