//! Exact redirect URI matching; nothing redirects before client and redirect are verified.

use crate::support::{Browser, Client, Pkce, TestProxy, query_param};
use mcp_oauth_proxy::store::Keyspace;

async fn assert_page_not_redirect(proxy: &TestProxy, url: &str) {
    let txns = proxy.count(Keyspace::Transactions).await;
    let r = Browser::new().navigate(url, "none").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.location().is_none(),
        "must not redirect: {:?}",
        r.location()
    );
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(
        proxy.count(Keyspace::Transactions).await,
        txns,
        "no transaction may be stored"
    );
}

#[tokio::test]
async fn redirect_uri_differing_by_one_character_never_redirects() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    for bad in [
        "https://app.example/callbacc",
        "https://app.example/callback/",
        "https://app.example/Callback",
        "https://app.example/callback?x=1",
        "https://app.example.evil.example/callback",
        "https://app.example@evil.example/callback",
        "http://app.example/callback",
    ] {
        let url = c.authorize_url(&proxy, &Pkce::new(), "s", &[("redirect_uri", bad)]);
        assert_page_not_redirect(&proxy, &url).await;
    }
}

#[tokio::test]
async fn unknown_client_never_redirects() {
    let proxy = TestProxy::start().await;
    let c = Client {
        id: "mcpc_unknown".into(),
        secret: None,
        redirect_uri: "https://attacker.example/cb".into(),
    };
    assert_page_not_redirect(&proxy, &c.authorize_url(&proxy, &Pkce::new(), "s", &[])).await;
    // Errors that would otherwise redirect are still pages when the client is unknown.
    assert_page_not_redirect(
        &proxy,
        &c.authorize_url(&proxy, &Pkce::new(), "s", &[("response_type", "token")]),
    )
    .await;
}

#[tokio::test]
async fn repeated_redirect_uri_parameter_never_redirects() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let url = format!(
        "{}&redirect_uri=https%3A%2F%2Fevil.example%2F",
        c.authorize_url(&proxy, &Pkce::new(), "s", &[])
    );
    assert_page_not_redirect(&proxy, &url).await;
}

#[tokio::test]
async fn loopback_redirect_may_change_port_but_nothing_else() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "CLI Agent", "http://127.0.0.1/callback").await;
    let browser = Browser::new();
    let ok = c.authorize_url(
        &proxy,
        &Pkce::new(),
        "s",
        &[("redirect_uri", "http://127.0.0.1:53123/callback")],
    );
    let page = browser.navigate(&ok, "none").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("http://127.0.0.1:53123/callback"));
    assert!(
        page.body.contains("program on this computer"),
        "loopback warning expected"
    );
    for bad in [
        "http://127.0.0.1:53123/callback2",
        "http://127.0.0.1.evil.example:53123/callback",
        "https://127.0.0.1:53123/callback",
    ] {
        assert_page_not_redirect(
            &proxy,
            &c.authorize_url(&proxy, &Pkce::new(), "s", &[("redirect_uri", bad)]),
        )
        .await;
    }
}

#[tokio::test]
async fn code_goes_to_the_requested_loopback_port() {
    let proxy = TestProxy::start().await;
    let mut c = Client::register(&proxy, "CLI Agent", "http://127.0.0.1/callback").await;
    c.redirect_uri = "http://127.0.0.1:40111/callback".into();
    let pkce = Pkce::new();
    let loc = c
        .authorize_in(&proxy, &Browser::new(), "alice", &pkce, "s")
        .await;
    assert!(
        loc.starts_with("http://127.0.0.1:40111/callback?code="),
        "{loc}"
    );
    let code = query_param(&loc, "code").unwrap();
    assert_eq!(c.redeem(&proxy, &code, &pkce, &[]).await.status, 200);
}
