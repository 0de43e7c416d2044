//! A full flow leaves the expected events, in order, each with an id, time and request id,
//! and none of the secrets issued during it (neither in the stored trail nor in the logs).

use super::support::records;
use crate::support::client::{approve, register_raw};
use crate::support::{Browser, Client, Pkce, TestProxy, logs, query_param};

#[tokio::test]
async fn full_flow_records_expected_events_in_order_and_no_secret_anywhere() {
    let proxy = TestProxy::start().await;
    let reg = register_raw(
        &proxy,
        serde_json::json!({"client_name": "Audit App", "redirect_uris": ["https://audit-app.example/cb"], "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "client_secret_post"}),
    )
    .await;
    let client_secret = reg.json["client_secret"].as_str().unwrap().to_owned();
    let c = Client {
        id: reg.json["client_id"].as_str().unwrap().into(),
        secret: Some(client_secret.clone()),
        redirect_uri: "https://audit-app.example/cb".into(),
    };
    // Not a fresh client any more: this is a normal flow, no alert expected.
    proxy.clock.advance(3600);
    let browser = Browser::new();
    let pkce = Pkce::new();
    let page = browser
        .navigate(
            &c.authorize_url(&proxy, &pkce, "client-state-1", &[]),
            "none",
        )
        .await;
    let csrf = page.hidden("csrf").unwrap();
    let txn = page.hidden("txn").unwrap();
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
    let callback_url = cb.location().unwrap();
    let code = query_param(&callback_url, "code").unwrap();
    let session = browser.cookie("__Host-mcp-session").unwrap();
    let csrf_cookie = browser.cookie("__Host-mcp-csrf").unwrap_or_default();
    let t = c.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(t.status, 200);
    let access = t.json["access_token"].as_str().unwrap().to_owned();
    let refresh = t.json["refresh_token"].as_str().unwrap().to_owned();
    let r = c.refresh(&proxy, &refresh, &[]).await;
    assert_eq!(r.status, 200);
    let access2 = r.json["access_token"].as_str().unwrap().to_owned();
    let refresh2 = r.json["refresh_token"].as_str().unwrap().to_owned();
    c.revoke(&proxy, &refresh2).await;

    let trail = records(&proxy).await;
    let kinds: Vec<&str> = trail.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "client_registered",
            "consent_shown",
            "consent_approved",
            "git_hub_grant_stored",
            "signed_in",
            "consent_recorded",
            "code_issued",
            "token_issued",
            "token_refreshed",
            "token_revoked",
        ]
    );
    for r in &trail {
        assert!(!r.id.is_empty());
        assert!(r.at.0 > 0);
        assert!(
            r.request_id.as_deref().is_some_and(|id| id.len() >= 16),
            "{} has no request id",
            r.kind
        );
        assert_eq!(r.event["event"], r.kind.as_str());
    }
    // The callback's events share one request id; the token request has another.
    let rid = |k: &str| {
        trail
            .iter()
            .find(|r| r.kind == k)
            .and_then(|r| r.request_id.clone())
            .unwrap()
    };
    assert_eq!(rid("consent_recorded"), rid("code_issued"));
    assert_ne!(rid("code_issued"), rid("token_issued"));
    // Typed fields: who, which client, which redirect; the code and tokens joined by ids.
    let ev = |k: &str| &trail.iter().find(|r| r.kind == k).unwrap().event;
    assert_eq!(
        ev("client_registered")["redirect_uris"][0],
        "https://audit-app.example/cb"
    );
    assert_eq!(
        ev("consent_approved")["redirect_uri"],
        "https://audit-app.example/cb"
    );
    assert_eq!(
        ev("code_issued")["user_id"],
        ev("consent_recorded")["user_id"]
    );
    assert_eq!(ev("code_issued")["client_id"], c.id.as_str());
    assert!(!ev("code_issued")["code_id"].as_str().unwrap().is_empty());
    assert_eq!(ev("code_issued")["code_id"], ev("token_issued")["code_id"]);
    assert_eq!(
        ev("token_issued")["family_id"],
        ev("token_refreshed")["family_id"]
    );
    assert_eq!(
        ev("token_refreshed")["user_id"],
        ev("token_issued")["user_id"]
    );

    let mut secrets: Vec<(&str, String)> = vec![
        ("client secret", client_secret),
        ("consent csrf", csrf),
        ("transaction id", txn),
        ("upstream state", upstream_state),
        ("client state", "client-state-1".to_owned()),
        ("flow cookie", flow_cookie),
        ("GitHub code", github_code),
        ("authorization code", code),
        ("full callback URL", callback_url),
        ("session cookie", session),
        ("access token", access),
        ("refresh token", refresh),
        ("access token 2", access2),
        ("refresh token 2", refresh2),
        ("PKCE verifier", pkce.verifier.clone()),
    ];
    if !csrf_cookie.is_empty() {
        secrets.push(("csrf cookie", csrf_cookie));
    }
    for t in proxy.github.issued_access_tokens("alice") {
        secrets.push(("GitHub token", t));
    }
    let stored = serde_json::to_string(&trail).unwrap();
    let logs = logs::all();
    assert!(
        logs.contains(&trail[0].id),
        "the logs hold this flow's events"
    );
    for (what, s) in &secrets {
        assert!(!stored.contains(s.as_str()), "{what} is in the audit trail");
        assert!(!logs.contains(s.as_str()), "{what} is in the logs");
    }
    assert!(super::support::alerts(&proxy).await.is_empty());
}

/// Every response carries the request id its events were recorded under.
#[tokio::test]
async fn responses_carry_the_request_id_of_their_events() {
    let proxy = TestProxy::start().await;
    let r = crate::support::http()
        .post(proxy.url("/register"))
        .json(&serde_json::json!({"client_name": "Rid", "redirect_uris": ["https://rid.example/cb"], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let header = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    let trail = records(&proxy).await;
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].request_id.as_deref(), Some(header.as_str()));
    // A client cannot choose it.
    let r = crate::support::http()
        .get(proxy.url("/healthz"))
        .header("x-request-id", "chosen-by-client")
        .send()
        .await
        .unwrap();
    assert_ne!(r.headers()["x-request-id"], "chosen-by-client");
}

/// A failed request has one id: the one its error page shows for support is its
/// `X-Request-Id` and the request id of the audit event it left.
#[tokio::test]
async fn an_error_page_shows_the_request_id_of_its_header_and_audit_event() {
    // The operator narrowed `[github] scopes`; GitHub completes the sign-in with the broader
    // authorization alice gave before, so the callback refuses it (audited) with a page.
    let proxy = TestProxy::start_with(crate::support::Options {
        github_scopes: Some(r#"["read:user"]"#.to_owned()),
        ..crate::support::Options::default()
    })
    .await;
    proxy.github.set_skip_grants_whole_authorization(true);
    proxy.github.authorize_app("alice", &["read:user", "repo"]);
    let client = Client::register(&proxy, "Rid", "https://rid.example/cb").await;
    let browser = Browser::new();
    let page = browser
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    let gh = approve(&proxy, &browser, &page).await;
    let back = browser.through_github(&gh, "alice").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 403, "{}", cb.body);
    let header = cb.headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(header.len() >= 16);
    let shown = cb
        .body
        .split("<code class=\"mono\">")
        .nth(1)
        .and_then(|rest| rest.split("</code>").next())
        .unwrap_or_default();
    assert_eq!(shown, header, "the page shows the response's request id");
    let trail = records(&proxy).await;
    let rejected = trail
        .iter()
        .find(|r| r.kind == "callback_rejected")
        .expect("the refusal is audited");
    assert_eq!(rejected.request_id.as_deref(), Some(header.as_str()));
}
