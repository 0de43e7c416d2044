//! End-to-end tests of the fake over real HTTP on an ephemeral loopback port.

use std::time::Duration;

use base64::prelude::{BASE64_STANDARD, BASE64_URL_SAFE_NO_PAD, Engine as _};
use reqwest::StatusCode;
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

use crate::{FakeGitHub, FakeGitHubConfig};

mod orgs;

const CLIENT_ID: &str = "Iv1.fakeclient";
const SECRET: &str = "fake-secret";
const CALLBACK: &str = "http://127.0.0.1:9/callback/github";
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

async fn fake() -> FakeGitHub {
    FakeGitHub::start(FakeGitHubConfig::demo(CLIENT_ID, SECRET, CALLBACK))
        .await
        .unwrap()
}

/// One shared client (building one loads the platform roots, which is slow). Idle pooling is
/// off because every `#[tokio::test]` has its own runtime.
#[allow(clippy::disallowed_methods)] // a test client, not the proxy's outbound traffic
fn client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // reqwest is built with `rustls-no-provider`; even plain http needs one installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .pool_max_idle_per_host(0)
                .build()
                .unwrap()
        })
        .clone()
}

fn challenge(verifier: &str) -> String {
    BASE64_URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn location(resp: &reqwest::Response) -> Url {
    assert_eq!(resp.status(), StatusCode::FOUND, "expected a redirect");
    let loc = resp.headers()["location"].to_str().unwrap();
    Url::parse(loc).unwrap()
}

fn query(url: &Url, name: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Standard authorize parameters with PKCE, plus overrides/extras.
fn params<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, String)> {
    let mut p: Vec<(&str, String)> = vec![
        ("client_id", CLIENT_ID.into()),
        ("redirect_uri", CALLBACK.into()),
        ("scope", "read:user repo".into()),
        ("state", "st4te".into()),
        ("code_challenge", challenge(VERIFIER)),
        ("code_challenge_method", "S256".into()),
    ];
    for (k, v) in extra {
        p.retain(|(pk, _)| pk != k);
        if !v.is_empty() {
            p.push((k, (*v).to_owned()));
        }
    }
    p
}

async fn authorize(gh: &FakeGitHub, user: Option<&str>, p: &[(&str, String)]) -> reqwest::Response {
    let mut req = client().get(gh.authorize_url()).query(p);
    if let Some(u) = user {
        req = req.header("cookie", format!("fgh_user={u}"));
    }
    req.send().await.unwrap()
}

async fn decide(
    gh: &FakeGitHub,
    user: &str,
    p: &[(&str, String)],
    decision: &str,
) -> reqwest::Response {
    let mut form = p.to_vec();
    form.push(("decision", decision.to_owned()));
    client()
        .post(format!("{}/login/oauth/authorize/decision", gh.base_url()))
        .header("cookie", format!("fgh_user={user}"))
        .form(&form)
        .send()
        .await
        .unwrap()
}

/// Runs authorize (approving the consent page if shown) and returns the code.
async fn get_code(gh: &FakeGitHub, user: &str, p: &[(&str, String)]) -> String {
    let resp = authorize(gh, Some(user), p).await;
    let resp = if resp.status() == StatusCode::OK {
        decide(gh, user, p, "approve").await
    } else {
        resp
    };
    let loc = location(&resp);
    assert_eq!(query(&loc, "state").as_deref(), Some("st4te"));
    query(&loc, "code").unwrap()
}

async fn exchange(gh: &FakeGitHub, form: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut form = form.to_vec();
    form.extend([("client_id", CLIENT_ID), ("client_secret", SECRET)]);
    let resp = client()
        .post(gh.token_url())
        .header("accept", "application/json")
        .form(&form)
        .send()
        .await
        .unwrap();
    (resp.status(), resp.json().await.unwrap())
}

async fn token_for(gh: &FakeGitHub, user: &str) -> Value {
    let code = get_code(gh, user, &params(&[])).await;
    let (_, body) = exchange(
        gh,
        &[
            ("code", &code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", VERIFIER),
        ],
    )
    .await;
    body
}

async fn get_user(gh: &FakeGitHub, token: &str) -> reqwest::Response {
    client()
        .get(format!("{}/user", gh.api_url()))
        .header("user-agent", "fake-github-tests")
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn consent_page_first_then_silent_skip() {
    let gh = fake().await;
    let p = params(&[]);
    let first = authorize(&gh, Some("alice"), &p).await;
    assert_eq!(first.status(), StatusCode::OK);
    let html = first.text().await.unwrap();
    assert!(html.contains("<title>Authorize application</title>"));
    assert!(html.contains("action=\"/login/oauth/authorize/decision\""));
    assert!(html.contains("name=\"decision\" value=\"approve\""));
    assert!(!gh.has_authorized("alice"));

    let approved = decide(&gh, "alice", &p, "approve").await;
    let loc = location(&approved);
    assert!(loc.as_str().starts_with(CALLBACK));
    assert_eq!(query(&loc, "code").unwrap().len(), 20);
    assert!(gh.has_authorized("alice"));

    // The second authorization is silent: straight back with a code, no page.
    let second = authorize(&gh, Some("alice"), &p).await;
    let loc = location(&second);
    assert!(query(&loc, "code").is_some());
    assert_eq!(query(&loc, "state").as_deref(), Some("st4te"));
    // A covered subset (and an omitted scope) is silent too; a new scope is not.
    let subset = authorize(&gh, Some("alice"), &params(&[("scope", "public_repo")])).await;
    assert_eq!(subset.status(), StatusCode::FOUND);
    let omitted = authorize(&gh, Some("alice"), &params(&[("scope", "")])).await;
    assert_eq!(omitted.status(), StatusCode::FOUND);
    let wider = authorize(&gh, Some("alice"), &params(&[("scope", "repo gist")])).await;
    assert_eq!(wider.status(), StatusCode::OK);
    // Another user still sees the consent page.
    let bob = authorize(&gh, Some("bob"), &p).await;
    assert_eq!(bob.status(), StatusCode::OK);
}

#[tokio::test]
async fn account_picker_and_login_continue_in_place() {
    let gh = fake().await;
    let p = params(&[("login", "alice")]);
    let picker = authorize(&gh, None, &p).await;
    assert_eq!(picker.status(), StatusCode::OK);
    let html = picker.text().await.unwrap();
    assert!(html.contains("action=\"/login\""));
    assert!(html.contains("<button type=\"submit\" name=\"login\" value=\"mallory\""));
    assert!(html.contains("name=\"state\" value=\"st4te\""));

    let mut form = params(&[]);
    form.push(("login", "alice".into()));
    let login = |form: Vec<(&'static str, String)>| {
        let url = format!("{}/login", gh.base_url());
        async move { client().post(url).form(&form).send().await.unwrap() }
    };
    let resp = login(form.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert_eq!(cookie, "fgh_user=alice; Path=/; HttpOnly; SameSite=Lax");
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("/login/oauth/authorize/decision")
    );
    decide(&gh, "alice", &params(&[]), "approve").await;

    // prompt=select_account forces the picker even when signed in...
    let forced = authorize(&gh, Some("alice"), &params(&[("prompt", "select_account")])).await;
    let html = forced.text().await.unwrap();
    assert!(html.contains("Sign in to GitHub"));
    assert!(!html.contains("select_account"));
    // ...and picking an account that already authorized completes silently, with the cookie.
    let resp = login(form).await;
    assert!(query(&location(&resp), "code").is_some());
    assert!(resp.headers().contains_key("set-cookie"));

    let mut unknown = params(&[]);
    unknown.push(("login", "eve".into()));
    assert_eq!(login(unknown).await.status(), StatusCode::BAD_REQUEST);
}

/// Like GitHub: for a signed-in person who already authorized the app, only
/// `prompt=select_account` shows anything; no other `prompt` value (GitHub documents none) and
/// no `login` hint does. The fake records what it showed; the answers carry none of it.
#[tokio::test]
async fn only_select_account_shows_a_screen_to_an_authorized_signed_in_person() {
    use crate::Screen;
    let gh = fake().await;
    gh.authorize_app("alice", &["read:user", "repo"]);
    for extra in [
        vec![],
        vec![("prompt", "login")],
        vec![("prompt", "consent")],
        vec![("prompt", "none")],
        vec![("login", "alice")],
    ] {
        let resp = authorize(&gh, Some("alice"), &params(&extra)).await;
        assert!(query(&location(&resp), "code").is_some(), "{extra:?}");
    }
    assert!(gh.screens_shown().is_empty(), "{:?}", gh.screens_shown());
    let picker = authorize(&gh, Some("alice"), &params(&[("prompt", "select_account")])).await;
    assert_eq!(picker.status(), StatusCode::OK);
    assert!(picker.text().await.unwrap().contains("Sign in to GitHub"));
    assert_eq!(gh.screens_shown(), vec![Screen::AccountPicker]);
    // A new scope: GitHub's own consent page, recorded too.
    let more = authorize(&gh, Some("alice"), &params(&[("scope", "gist")])).await;
    assert_eq!(more.status(), StatusCode::OK);
    assert_eq!(
        gh.screens_shown(),
        vec![Screen::AccountPicker, Screen::Consent]
    );
}

#[tokio::test]
async fn pkce_exchange_wrong_verifier_and_reuse() {
    let gh = fake().await;
    let code = get_code(&gh, "alice", &params(&[])).await;
    let (status, body) = exchange(
        &gh,
        &[
            ("code", &code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", VERIFIER),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let token = body["access_token"].as_str().unwrap();
    assert!(token.starts_with("gho_") && token.len() == 40, "{token}");
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["scope"], "read:user,repo");
    assert!(body.get("refresh_token").is_none());
    assert_eq!(gh.issued_access_tokens("alice"), vec![token.to_owned()]);

    // Reuse of a consumed code.
    let (status, body) = exchange(
        &gh,
        &[
            ("code", &code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", VERIFIER),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["error"], "bad_verification_code");

    // Wrong verifier, then a missing one: HTTP 200 with an error.
    for verifier in ["wrong-verifier-wrong-verifier-wrong-verifier-x", ""] {
        let code = get_code(&gh, "alice", &params(&[])).await;
        let mut form = vec![("code", code.as_str()), ("redirect_uri", CALLBACK)];
        if !verifier.is_empty() {
            form.push(("code_verifier", verifier));
        }
        let (status, body) = exchange(&gh, &form).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["error"], "bad_verification_code");
        assert!(
            body["error_uri"]
                .as_str()
                .unwrap()
                .starts_with("https://docs.github.com/")
        );
    }

    // redirect_uri sent at authorize must be repeated identically.
    let code = get_code(&gh, "alice", &params(&[])).await;
    let (_, body) = exchange(&gh, &[("code", &code), ("code_verifier", VERIFIER)]).await;
    assert_eq!(body["error"], "redirect_uri_mismatch");

    // Codes expire after 10 minutes.
    let code = get_code(&gh, "alice", &params(&[])).await;
    gh.advance_time(Duration::from_secs(601));
    let (_, body) = exchange(
        &gh,
        &[
            ("code", &code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", VERIFIER),
        ],
    )
    .await;
    assert_eq!(body["error"], "bad_verification_code");
    assert_eq!(gh.token_requests(), 6);
}

#[tokio::test]
async fn basic_auth_form_response_and_client_errors() {
    let gh = fake().await;
    let code = get_code(
        &gh,
        "bob",
        &params(&[("redirect_uri", ""), ("code_challenge", "")]),
    )
    .await;
    let resp = client()
        .post(gh.token_url())
        .header(
            "authorization",
            format!(
                "Basic {}",
                BASE64_STANDARD.encode(format!("{CLIENT_ID}:{SECRET}"))
            ),
        )
        .form(&[("grant_type", "authorization_code"), ("code", &code)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/x-www-form-urlencoded")
    );
    let body = resp.text().await.unwrap();
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    assert!(
        pairs
            .iter()
            .any(|(k, v)| k == "access_token" && v.starts_with("gho_")),
        "{body}"
    );
    assert!(pairs.contains(&("scope".into(), "read:user,repo".into())));
    assert!(pairs.contains(&("token_type".into(), "bearer".into())));

    let resp = client()
        .post(gh.token_url())
        .basic_auth(CLIENT_ID, Some("nope"))
        .header("accept", "application/json")
        .form(&[("code", "whatever")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "incorrect_client_credentials");

    let (status, body) = exchange(&gh, &[("grant_type", "password")]).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::OK, Some("unsupported_grant_type"))
    );
    let (_, body) = exchange(
        &gh,
        &[("grant_type", "refresh_token"), ("refresh_token", "ghr_x")],
    )
    .await;
    assert_eq!(body["error"], "bad_refresh_token");
}

#[tokio::test]
async fn user_endpoint_needs_user_agent_and_a_live_token() {
    let gh = fake().await;
    let token = token_for(&gh, "alice").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();

    let resp = get_user(&gh, &token).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-oauth-scopes"], "read:user, repo");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        (body["login"].as_str(), body["id"].as_u64()),
        (Some("alice"), Some(1001))
    );
    assert_eq!(body["name"], "Alice Example");
    assert_eq!(body["type"], "User");

    let resp = client()
        .get(format!("{}/user", gh.api_url()))
        .header("authorization", format!("token {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body: Value = resp.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("User-Agent"));

    let resp = get_user(&gh, "gho_notarealtoken").await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["message"], "Bad credentials");

    gh.revoke_tokens_of("alice");
    assert!(!gh.has_authorized("alice"));
    assert_eq!(
        get_user(&gh, &token).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        authorize(&gh, Some("alice"), &params(&[])).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn forbidden_marker_is_recorded_as_a_violation() {
    let gh = fake().await;
    assert_eq!(
        get_user(&gh, "gho_fine").await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert!(gh.violations().is_empty());

    let resp = get_user(&gh, "mcpat_leaked").await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["message"], "proxy token received");
    // Hidden in Basic credentials and percent-encoded in a query: still caught.
    client()
        .post(gh.token_url())
        .basic_auth(CLIENT_ID, Some("mcpc_secret_abc"))
        .send()
        .await
        .unwrap();
    client()
        .get(format!("{}/nowhere?x=mcprt%5Fabc", gh.base_url()))
        .send()
        .await
        .unwrap();
    let violations = gh.violations();
    assert_eq!(violations.len(), 3, "{violations:?}");
    assert!(violations[0].contains("mcpat_") && violations[0].contains("authorization"));
    assert!(violations[1].contains("mcpc_secret_"));
    assert!(violations[2].contains("/nowhere"));
    // Every request is recorded, including the 404.
    let requests = gh.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[3].path_and_query, "/nowhere?x=mcprt%5Fabc");
    assert_eq!(requests[1].header("User-Agent"), Some("fake-github-tests"));
}

#[tokio::test]
async fn expiring_tokens_refresh_rotates() {
    let gh = fake().await;
    gh.set_expiring_tokens(true);
    let body = token_for(&gh, "alice").await;
    let access = body["access_token"].as_str().unwrap().to_owned();
    let refresh = body["refresh_token"].as_str().unwrap().to_owned();
    assert!(access.starts_with("ghu_") && refresh.starts_with("ghr_"));
    assert_eq!(body["expires_in"], 28800);
    assert_eq!(body["refresh_token_expires_in"], 15_897_600);
    assert_eq!(body["scope"], "");
    let resp = get_user(&gh, &access).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(!resp.headers().contains_key("x-oauth-scopes"));

    let (_, new) = exchange(
        &gh,
        &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
    )
    .await;
    let new_access = new["access_token"].as_str().unwrap().to_owned();
    let new_refresh = new["refresh_token"].as_str().unwrap().to_owned();
    assert!(new_access.starts_with("ghu_") && new_access != access && new_refresh != refresh);
    assert_eq!(
        get_user(&gh, &access).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(get_user(&gh, &new_access).await.status(), StatusCode::OK);
    let (_, again) = exchange(
        &gh,
        &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
    )
    .await;
    assert_eq!(again["error"], "bad_refresh_token");

    // Access tokens expire after 8 hours; the refresh token still works.
    gh.advance_time(Duration::from_secs(28_801));
    assert_eq!(
        get_user(&gh, &new_access).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let (_, later) = exchange(
        &gh,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &new_refresh),
        ],
    )
    .await;
    assert!(later["access_token"].as_str().unwrap().starts_with("ghu_"));
}

#[tokio::test]
async fn eleventh_token_evicts_the_oldest() {
    let gh = fake().await;
    let mut tokens = Vec::new();
    for _ in 0..11 {
        tokens.push(
            token_for(&gh, "alice").await["access_token"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(gh.issued_access_tokens("alice"), tokens);
    assert_eq!(
        get_user(&gh, &tokens[0]).await.status(),
        StatusCode::UNAUTHORIZED
    );
    for t in &tokens[1..] {
        assert_eq!(get_user(&gh, t).await.status(), StatusCode::OK);
    }
    // A different scope set has its own budget.
    let code = get_code(&gh, "alice", &params(&[("scope", "repo")])).await;
    let (_, body) = exchange(
        &gh,
        &[
            ("code", &code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", VERIFIER),
        ],
    )
    .await;
    assert_eq!(body["scope"], "repo");
    assert_eq!(get_user(&gh, &tokens[1]).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn redirect_uri_rule_pkce_method_and_unknown_client() {
    let gh = fake().await;
    let sub = format!("{CALLBACK}/deeper?x=1");
    let code = get_code(&gh, "alice", &params(&[("redirect_uri", &sub)])).await;
    assert_eq!(code.len(), 20);
    for bad in [
        "http://127.0.0.1:10/callback/github",
        "http://localhost:9/callback/github",
        "https://127.0.0.1:9/callback/github",
        "http://127.0.0.1:9/callback/githubx",
        "http://127.0.0.1:9/callback/github/../../evil",
        "http://127.0.0.1:9/other",
    ] {
        let resp = authorize(&gh, Some("alice"), &params(&[("redirect_uri", bad)])).await;
        let loc = location(&resp);
        assert_eq!(
            format!("{}{}", &loc[..url::Position::BeforePath], loc.path()),
            CALLBACK,
            "{bad}"
        );
        assert_eq!(
            query(&loc, "error").as_deref(),
            Some("redirect_uri_mismatch"),
            "{bad}"
        );
        assert_eq!(query(&loc, "state").as_deref(), Some("st4te"));
        assert!(query(&loc, "error_uri").is_some());
    }
    for method in ["plain", ""] {
        let resp = authorize(
            &gh,
            Some("alice"),
            &params(&[("code_challenge_method", method)]),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert!(
            resp.text()
                .await
                .unwrap()
                .contains("PKCE: only S256 supported")
        );
    }
    let resp = authorize(&gh, Some("alice"), &params(&[("client_id", "Iv1.other")])).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);

    gh.set_callback_url("http://127.0.0.1:10/cb");
    let resp = authorize(&gh, Some("alice"), &params(&[("redirect_uri", "")])).await;
    assert!(
        location(&resp)
            .as_str()
            .starts_with("http://127.0.0.1:10/cb?code=")
    );
}

#[tokio::test]
async fn deny_and_grant_deletion() {
    let gh = fake().await;
    let p = params(&[]);
    let denied = decide(&gh, "mallory", &p, "deny").await;
    let loc = location(&denied);
    assert_eq!(query(&loc, "error").as_deref(), Some("access_denied"));
    assert_eq!(
        query(&loc, "error_description").as_deref(),
        Some("The user has denied your application access.")
    );
    assert!(
        loc.query()
            .unwrap()
            .contains("The+user+has+denied+your+application+access.")
    );
    assert!(!gh.has_authorized("mallory"));
    let no_cookie = client()
        .post(format!("{}/login/oauth/authorize/decision", gh.base_url()))
        .form(&[("decision", "approve"), ("client_id", CLIENT_ID)])
        .send()
        .await
        .unwrap();
    assert_eq!(no_cookie.status(), StatusCode::BAD_REQUEST);

    let token = token_for(&gh, "alice").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let grant_url = format!("{}/applications/{CLIENT_ID}/grant", gh.api_url());
    let delete = |secret: &'static str, token: String| {
        let url = grant_url.clone();
        async move {
            client()
                .delete(url)
                .header("user-agent", "tests")
                .basic_auth(CLIENT_ID, Some(secret))
                .json(&serde_json::json!({ "access_token": token }))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(
        delete("wrong", token.clone()).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        delete(SECRET, "gho_unknown".into()).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(delete(SECRET, token.clone()).await, StatusCode::NO_CONTENT);
    assert!(!gh.has_authorized("alice"));
    assert_eq!(
        get_user(&gh, &token).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        authorize(&gh, Some("alice"), &p).await.status(),
        StatusCode::OK
    );

    // "Check a token": 200 with the user for a live token, 404 once revoked.
    let other = token_for(&gh, "bob").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let check = |token: String| {
        let url = format!("{}/applications/{CLIENT_ID}/token", gh.api_url());
        async move {
            client()
                .post(url)
                .header("user-agent", "tests")
                .basic_auth(CLIENT_ID, Some(SECRET))
                .json(&serde_json::json!({ "access_token": token }))
                .send()
                .await
                .unwrap()
        }
    };
    let resp = check(other.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["user"]["login"], "bob");
    assert_eq!(check(token).await.status(), StatusCode::NOT_FOUND);

    let base = gh.base_url();
    gh.shutdown().await;
    assert!(client().get(base).send().await.is_err());
}
