//! The token endpoint: single-use codes under concurrency, client binding, PKCE, reuse.

use crate::support::{Browser, Client, Pkce, TestProxy};
use mcp_oauth_proxy::flows::access::{self, TokenRejection};
use mcp_oauth_proxy::store::Keyspace;

#[tokio::test]
async fn sixty_four_concurrent_redemptions_of_one_code_exactly_one_succeeds() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    let proxy = std::sync::Arc::new(proxy);
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (p, c, code, pkce) = (proxy.clone(), c.clone(), code.clone(), pkce.clone());
        tasks.push(tokio::spawn(async move {
            c.redeem(&p, &code, &pkce, &[]).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            200 => ok += 1,
            400 => assert_eq!(r.error(), "invalid_grant"),
            s => panic!("unexpected {s}: {:?}", r.json),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(proxy.count(Keyspace::RefreshFamilies).await, 1);
}

#[tokio::test]
async fn code_redeemed_by_another_client_is_rejected_and_stays_redeemable() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let thief = Client::register(&proxy, "Thief", "https://app.example/callback").await;
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    let r = thief.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error(), "invalid_grant");
    assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
    assert_eq!(c.redeem(&proxy, &code, &pkce, &[]).await.status, 200);
}

#[tokio::test]
async fn code_without_or_with_wrong_verifier_is_rejected() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    assert_eq!(
        c.redeem(&proxy, &code, &pkce, &[("code_verifier", "")])
            .await
            .error(),
        "invalid_grant"
    );
    let wrong = Pkce::new();
    assert_eq!(
        c.redeem(&proxy, &code, &pkce, &[("code_verifier", &wrong.verifier)])
            .await
            .error(),
        "invalid_grant"
    );
    // `plain` downgrade: the challenge itself as verifier.
    assert_eq!(
        c.redeem(&proxy, &code, &pkce, &[("code_verifier", &pkce.challenge)])
            .await
            .error(),
        "invalid_grant"
    );
    assert_eq!(
        c.redeem(
            &proxy,
            &code,
            &pkce,
            &[("redirect_uri", "https://app.example/other")]
        )
        .await
        .error(),
        "invalid_grant"
    );
    assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
    assert_eq!(c.redeem(&proxy, &code, &pkce, &[]).await.status, 200);
}

/// A code presented a second time (it leaked) revokes the tokens the first redemption got
/// (OAuth 2.1 §4.1.3).
#[tokio::test]
async fn replayed_code_revokes_tokens_issued_from_it() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    let t = c.redeem(&proxy, &code, &pkce, &[]).await;
    let access = t.json["access_token"].as_str().unwrap();
    let again = c.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(again.error(), "invalid_grant");
    assert_eq!(
        access::authenticate(&proxy.app, access)
            .await
            .unwrap()
            .unwrap_err(),
        TokenRejection::Revoked
    );
    assert_eq!(
        c.refresh(&proxy, t.json["refresh_token"].as_str().unwrap(), &[])
            .await
            .error(),
        "invalid_grant"
    );
    assert!(proxy.audit_events().await.iter().any(|e| e == "code_reuse"));
}

#[tokio::test]
async fn expired_code_is_rejected() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    proxy.clock.advance(61);
    assert_eq!(
        c.redeem(&proxy, &code, &pkce, &[]).await.error(),
        "invalid_grant"
    );
}

#[tokio::test]
async fn token_endpoint_errors_are_oauth_shaped() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let unknown = Client {
        id: "mcpc_nobody".into(),
        secret: None,
        redirect_uri: c.redirect_uri.clone(),
    };
    let r = unknown
        .token(
            &proxy,
            &[("grant_type", "authorization_code"), ("code", "x")],
        )
        .await;
    assert_eq!((r.status, r.error()), (401, "invalid_client"));
    let r = c
        .token(&proxy, &[("grant_type", "password"), ("username", "a")])
        .await;
    assert_eq!((r.status, r.error()), (400, "unsupported_grant_type"));
    let r = c
        .token(
            &proxy,
            &[
                ("grant_type", "authorization_code"),
                ("code", "a"),
                ("code", "b"),
            ],
        )
        .await;
    assert_eq!((r.status, r.error()), (400, "invalid_request"));
    // A public client may not present a secret it never had.
    let r = c
        .token(
            &proxy,
            &[
                ("grant_type", "authorization_code"),
                ("code", "x"),
                ("client_secret", "guess"),
            ],
        )
        .await;
    assert_eq!((r.status, r.error()), (401, "invalid_client"));
    let r = crate::support::http()
        .post(proxy.url("/token"))
        .body("grant_type=x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "a body that is not a form");
    assert_eq!(r.headers()["cache-control"], "no-store");
}

#[tokio::test]
async fn confidential_client_must_present_its_secret_by_its_registered_method() {
    let proxy = TestProxy::start().await;
    let r = crate::support::client::register_raw(
        &proxy,
        serde_json::json!({"client_name": "Server App", "redirect_uris": ["https://srv.example/cb"], "grant_types": ["authorization_code", "refresh_token"]}),
    )
    .await;
    // RFC 7591's default method.
    assert_eq!(r.json["token_endpoint_auth_method"], "client_secret_basic");
    let secret = r.json["client_secret"].as_str().unwrap().to_owned();
    let mut c = Client {
        id: r.json["client_id"].as_str().unwrap().into(),
        secret: None,
        redirect_uri: "https://srv.example/cb".into(),
    };
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    assert_eq!(
        c.redeem(&proxy, &code, &pkce, &[]).await.error(),
        "invalid_client",
        "no secret"
    );
    // The right secret by the wrong method (form instead of Basic) is refused too.
    c.secret = Some(secret.clone());
    assert_eq!(
        c.redeem(&proxy, &code, &pkce, &[]).await.error(),
        "invalid_client",
        "secret in the form"
    );
    let basic = |secret: &str| {
        crate::support::http()
            .post(proxy.url("/token"))
            .basic_auth(&c.id, Some(secret))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", code.as_str()),
                ("code_verifier", pkce.verifier.as_str()),
                ("redirect_uri", "https://srv.example/cb"),
            ])
            .send()
    };
    let wrong = basic("mcpc_secret_wrong").await.unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(
        wrong.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic")
    );
    // None of the refusals consumed the code.
    assert_eq!(basic(&secret).await.unwrap().status(), 200);
}

/// RFC 7009 §2.1: a client may revoke only its own tokens. Another client holding a leaked
/// token must not be able to cut the rightful client off.
#[tokio::test]
async fn revocation_by_another_client_changes_nothing() {
    let proxy = TestProxy::start().await;
    let owner = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let other = Client::register(&proxy, "Other", "https://other.example/cb").await;
    let t = owner.tokens(&proxy, &Browser::new(), "alice").await;
    let (access, refresh) = (
        t.json["access_token"].as_str().unwrap(),
        t.json["refresh_token"].as_str().unwrap(),
    );
    assert_eq!(
        other.revoke(&proxy, refresh).await,
        200,
        "RFC 7009: no error for a token that is not yours"
    );
    assert_eq!(other.revoke(&proxy, access).await, 200);
    assert!(
        access::authenticate(&proxy.app, access)
            .await
            .unwrap()
            .is_ok(),
        "access token must survive"
    );
    assert_eq!(
        owner.refresh(&proxy, refresh, &[]).await.status,
        200,
        "refresh token must survive"
    );
    assert!(
        !proxy
            .audit_events()
            .await
            .iter()
            .any(|e| e == "token_revoked")
    );
}

/// An access token past its expiry is refused even if the store still holds its record.
#[tokio::test]
async fn expired_access_token_record_is_refused_even_if_still_stored() {
    use mcp_oauth_proxy::clock::Clock;
    use mcp_oauth_proxy::store::StoreExt;
    use mcp_oauth_proxy::store::records::AccessTokenRecord;
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Repo Helper", "https://app.example/callback").await;
    let t = c.tokens(&proxy, &Browser::new(), "alice").await;
    let access = t.json["access_token"].as_str().unwrap();
    let hash = mcp_oauth_proxy::crypto::hash_secret(access);
    let mut rec: AccessTokenRecord = proxy
        .app
        .store
        .get_json(Keyspace::AccessTokens, &hash)
        .await
        .unwrap()
        .unwrap();
    rec.expires_at = mcp_oauth_proxy::clock::UnixTime(proxy.clock.now().0 - 1);
    // Stored with a later store-level expiry: only the record's own expiry can refuse it.
    proxy
        .app
        .store
        .put_json(
            Keyspace::AccessTokens,
            &hash,
            &rec,
            Some(proxy.clock.now().plus(3600)),
        )
        .await
        .unwrap();
    assert_eq!(
        access::authenticate(&proxy.app, access)
            .await
            .unwrap()
            .unwrap_err(),
        TokenRejection::Expired
    );
}

/// A client that did not register the refresh grant cannot use one, even with a refresh
/// token that exists.
#[tokio::test]
async fn refresh_by_a_client_without_the_refresh_grant_is_unauthorized() {
    use mcp_oauth_proxy::store::StoreExt;
    use mcp_oauth_proxy::store::records::FamilyRecord;
    let proxy = TestProxy::start().await;
    let r = crate::support::client::register_raw(
        &proxy,
        serde_json::json!({"client_name": "Codes only", "redirect_uris": ["https://c.example/cb"], "token_endpoint_auth_method": "none", "grant_types": ["authorization_code"]}),
    )
    .await;
    let c = Client {
        id: r.json["client_id"].as_str().unwrap().into(),
        secret: None,
        redirect_uri: "https://c.example/cb".into(),
    };
    let t = c.tokens(&proxy, &Browser::new(), "alice").await;
    assert!(
        t.json.get("refresh_token").is_none(),
        "no refresh token without the grant"
    );
    // Forge a family record so a well-formed refresh token exists for this client.
    let fam_key = proxy
        .app
        .store
        .scan_prefix(Keyspace::RefreshFamilies, "")
        .await
        .unwrap()
        .pop()
        .unwrap()
        .0;
    let mut fam: FamilyRecord = proxy
        .app
        .store
        .get_json(Keyspace::RefreshFamilies, &fam_key)
        .await
        .unwrap()
        .unwrap();
    let token = mcp_oauth_proxy::oauth::grant::new_refresh_token(&fam.family_id).unwrap();
    fam.branches[0].head = token.hash();
    proxy
        .app
        .store
        .put_json(Keyspace::RefreshFamilies, &fam_key, &fam, None)
        .await
        .unwrap();
    let r = c.refresh(&proxy, token.secret(), &[]).await;
    assert_eq!((r.status, r.error()), (400, "unauthorized_client"));
}
