//! No secret issued during a full flow ever reaches a log line or a `Debug` rendering.

use crate::support::client::{approve, register_raw};
use crate::support::{Browser, Client, Pkce, TestProxy, logs, query_param};

#[tokio::test]
async fn secrets_never_appear_in_logs_or_debug_output() {
    let proxy = TestProxy::start().await;
    let reg = register_raw(
        &proxy,
        serde_json::json!({"client_name": "Server App", "redirect_uris": ["https://srv.example/cb"], "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "client_secret_post"}),
    )
    .await;
    let client_secret = reg.json["client_secret"].as_str().unwrap().to_owned();
    let c = Client {
        id: reg.json["client_id"].as_str().unwrap().into(),
        secret: Some(client_secret.clone()),
        redirect_uri: "https://srv.example/cb".into(),
    };
    let browser = Browser::new();
    let pkce = Pkce::new();

    let page = browser
        .navigate(
            &c.authorize_url(&proxy, &pkce, "client-state-value", &[]),
            "none",
        )
        .await;
    let txn = page.hidden("txn").unwrap();
    let csrf = page.hidden("csrf").unwrap();
    let gh_url = approve(&proxy, &browser, &page).await;
    let upstream_state = query_param(&gh_url, "state").unwrap();
    let flow_cookie = browser.cookie("__Host-mcp-flow").unwrap();
    let back = browser
        .through_github(&gh_url, "alice")
        .await
        .location()
        .unwrap();
    let github_code = query_param(&back, "code").unwrap();
    let cb = browser.navigate(&back, "cross-site").await;
    let code = query_param(&cb.location().unwrap(), "code").unwrap();
    let session = browser.cookie("__Host-mcp-session").unwrap();
    let t = c.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(t.status, 200);
    let access = t.json["access_token"].as_str().unwrap().to_owned();
    let refresh = t.json["refresh_token"].as_str().unwrap().to_owned();
    let r = c.refresh(&proxy, &refresh, &[]).await;
    let access2 = r.json["access_token"].as_str().unwrap().to_owned();
    let refresh2 = r.json["refresh_token"].as_str().unwrap().to_owned();
    // A failure path too, so error logging is exercised.
    assert_eq!(
        c.refresh(&proxy, &refresh, &[("resource", "https://x.example/mcp")])
            .await
            .error(),
        "invalid_target"
    );
    c.revoke(&proxy, &refresh2).await;
    let account = browser.navigate(&proxy.url("/account"), "none").await;
    let account_csrf = account.hidden("csrf").unwrap();

    let mut secrets: Vec<(&str, String)> = vec![
        ("client secret", client_secret),
        ("consent csrf", csrf),
        ("account csrf", account_csrf),
        ("transaction id", txn),
        ("upstream state", upstream_state),
        ("flow cookie", flow_cookie),
        ("GitHub code", github_code),
        ("authorization code", code),
        ("session cookie", session),
        ("access token", access),
        ("refresh token", refresh),
        ("access token 2", access2),
        ("refresh token 2", refresh2),
        ("PKCE verifier", pkce.verifier.clone()),
        ("GitHub client secret", "gh-client-secret".to_owned()),
    ];
    for t in proxy.github.issued_access_tokens("alice") {
        secrets.push(("GitHub token", t));
    }
    let k = &proxy.app.keys;
    for key in [
        k.consent_cookie.secret(),
        k.csrf.secret(),
        k.token_encryption.secret(),
    ] {
        secrets.push(("key", mcp_oauth_proxy::crypto::b64(key)));
    }

    let logs = logs::all();
    assert!(
        logs.contains("audit"),
        "the capture must actually hold this flow's logs"
    );
    let debug = format!("{:?} {:?}", proxy.app.config, proxy.app.keys);
    for (what, s) in &secrets {
        assert!(!logs.contains(s.as_str()), "{what} appears in the logs");
        assert!(
            !debug.contains(s.as_str()),
            "{what} appears in Debug output"
        );
    }
    // Nor does the audit trail hold any of them.
    let audit = serde_json::to_string(&proxy.app.audit.all().await.unwrap()).unwrap();
    for (what, s) in &secrets {
        assert!(
            !audit.contains(s.as_str()),
            "{what} appears in the audit trail"
        );
    }
}
