//! The OAuth side of an MCP client and a person's browser, over real HTTP (after
//! tests/support/{client,browser}.rs): register, the browser part of an authorization
//! (`/authorize` → consent approve → GitHub → `/callback/github`), and `/token`.

use std::time::Instant;

use reqwest::header::{LOCATION, SET_COOKIE};
use serde_json::{Value, json};

use crate::harness::Proxy;
use crate::timing::{now, ns_since};

/// The redirect URI the bench's MCP client registers.
pub const REDIRECT_URI: &str = "https://agent.example/cb";

/// A registered public client.
#[derive(Debug, Clone)]
pub struct RegisteredClient {
    /// `client_id`.
    pub id: String,
}

/// Tokens from `/token`.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// Access token.
    pub access: String,
    /// Refresh token.
    pub refresh: String,
}

/// Time spent in each step of one flow, nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Steps {
    /// `GET /authorize` (consent page).
    pub authorize: u64,
    /// `POST /consent` (approve).
    pub consent: u64,
    /// The fake GitHub's authorize endpoint (silent for a person who authorized before).
    pub github: u64,
    /// `GET /callback/github` (the proxy calls GitHub's token endpoint and `/user`).
    pub callback: u64,
    /// `POST /token` (code redemption).
    pub token: u64,
}

/// Step names in the order of [`Steps::as_array`].
pub const STEP_NAMES: [&str; 5] = [
    "GET /authorize (consent page)",
    "POST /consent (approve)",
    "fake GitHub authorize (silent)",
    "GET /callback/github",
    "POST /token (code)",
];

impl Steps {
    /// The steps as an array, in flow order.
    pub fn as_array(&self) -> [u64; 5] {
        [
            self.authorize,
            self.consent,
            self.github,
            self.callback,
            self.token,
        ]
    }
}

/// Registers a public client with the refresh grant.
pub async fn register(http: &reqwest::Client, proxy: &Proxy) -> RegisteredClient {
    let r = http
        .post(proxy.url("/register"))
        .json(&json!({
            "client_name": "proxy-bench agent",
            "redirect_uris": [REDIRECT_URI],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }))
        .send()
        .await
        .expect("register");
    assert_eq!(r.status().as_u16(), 201, "register");
    let v: Value = r.json().await.expect("register json");
    RegisteredClient {
        id: v["client_id"].as_str().expect("client_id").to_owned(),
    }
}

/// A browser's cookies for one flow (sent to every loopback port, as browsers do).
#[derive(Default)]
struct Jar(Vec<(String, String)>);

impl Jar {
    fn header(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
    fn set(&mut self, name: &str, value: &str) {
        self.0.retain(|(k, _)| k != name);
        if !value.is_empty() {
            self.0.push((name.to_owned(), value.to_owned()));
        }
    }
    fn store(&mut self, resp: &reqwest::Response) {
        for v in resp.headers().get_all(SET_COOKIE) {
            let s = v.to_str().expect("set-cookie");
            let first = s.split(';').next().unwrap_or_default();
            let Some((name, value)) = first.split_once('=') else {
                continue;
            };
            let expired = s
                .split(';')
                .any(|a| a.trim().eq_ignore_ascii_case("Max-Age=0"));
            self.set(name.trim(), if expired { "" } else { value });
        }
    }
}

struct Page {
    status: u16,
    location: Option<String>,
    body: String,
}

impl Page {
    fn hidden(&self, name: &str) -> Option<String> {
        let needle = format!("name=\"{name}\" value=\"");
        let start = self.body.find(&needle)? + needle.len();
        let end = self.body.get(start..)?.find('"')?;
        self.body.get(start..start + end).map(str::to_owned)
    }
}

async fn finish(jar: &mut Jar, resp: reqwest::Response) -> Page {
    jar.store(&resp);
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp.text().await.expect("body");
    Page {
        status,
        location,
        body,
    }
}

async fn navigate(http: &reqwest::Client, jar: &mut Jar, url: &str, site: &str) -> Page {
    let resp = http
        .get(url)
        .header("cookie", jar.header())
        .header("sec-fetch-site", site)
        .header("sec-fetch-mode", "navigate")
        .send()
        .await
        .expect("navigate");
    finish(jar, resp).await
}

async fn post_form(
    http: &reqwest::Client,
    jar: &mut Jar,
    url: &str,
    fields: &[(&str, &str)],
    origin: &str,
) -> Page {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let resp = http
        .post(url)
        .header("cookie", jar.header())
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", origin)
        .header("sec-fetch-site", "same-origin")
        .body(body)
        .send()
        .await
        .expect("post form");
    finish(jar, resp).await
}

fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn origin_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .expect("url")
}

/// The GitHub leg as a person does it: pick the account and approve GitHub's own page if
/// shown (first time only); a person who authorized before is sent back at once.
async fn through_github(
    http: &reqwest::Client,
    jar: &mut Jar,
    authorize_url: &str,
    login: &str,
) -> Page {
    let params: Vec<(String, String)> = url::Url::parse(authorize_url)
        .expect("github url")
        .query_pairs()
        .into_owned()
        .collect();
    let base = origin_of(authorize_url);
    let form = |extra: (&'static str, &str)| -> Vec<(String, String)> {
        let mut f: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| k != "prompt" && k != "login")
            .cloned()
            .collect();
        f.push((extra.0.to_owned(), extra.1.to_owned()));
        f
    };
    let mut page = navigate(http, jar, authorize_url, "cross-site").await;
    if page.status == 200 && page.body.contains("action=\"/login\"") {
        let f = form(("login", login));
        let refs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        page = post_form(http, jar, &format!("{base}/login"), &refs, &base).await;
    }
    if page.status == 200 && page.body.contains("/login/oauth/authorize/decision") {
        let f = form(("decision", "approve"));
        let refs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        page = post_form(
            http,
            jar,
            &format!("{base}/login/oauth/authorize/decision"),
            &refs,
            &base,
        )
        .await;
    }
    assert_eq!(
        page.status, 302,
        "GitHub should redirect back: {}",
        page.body
    );
    page
}

/// One full authorization by a fresh browser whose person is signed in at GitHub as `login`:
/// `/authorize` → consent approve → GitHub → `/callback/github` → `/token`.
pub async fn flow(
    http: &reqwest::Client,
    proxy: &Proxy,
    client: &RegisteredClient,
    login: &str,
) -> (Tokens, Steps) {
    let mut steps = Steps::default();
    let mut jar = Jar::default();
    jar.set("fgh_user", login);
    let verifier = mcp_oauth_proxy::crypto::random_token().expect("random");
    let challenge = mcp_oauth_proxy::crypto::pkce_s256(&verifier);
    let resource = proxy.url("/mcp");
    let q = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("response_type", "code"),
            ("client_id", client.id.as_str()),
            ("redirect_uri", REDIRECT_URI),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", "bench"),
            ("scope", "read:user"),
            ("resource", resource.as_str()),
        ])
        .finish();

    let t: Instant = now();
    let page = navigate(
        http,
        &mut jar,
        &proxy.url(&format!("/authorize?{q}")),
        "none",
    )
    .await;
    steps.authorize = ns_since(t);
    assert_eq!(page.status, 200, "consent page expected: {}", page.body);
    let txn = page.hidden("txn").expect("txn");
    let csrf = page.hidden("csrf").expect("csrf");

    // What the consent page's script adds (the value it keeps in the origin's session storage;
    // the finish page's script hands it back below).
    let flow_proof = mcp_oauth_proxy::crypto::random_token().expect("random");
    let t = now();
    let approved = post_form(
        http,
        &mut jar,
        &proxy.url("/consent"),
        &[
            ("txn", &txn),
            ("csrf", &csrf),
            ("decision", "approve"),
            ("flow_proof", &flow_proof),
        ],
        &proxy.base,
    )
    .await;
    steps.consent = ns_since(t);
    assert_eq!(approved.status, 303, "approve: {}", approved.body);
    let github_url = approved.location.expect("to GitHub");

    let t = now();
    let back = through_github(http, &mut jar, &github_url, login).await;
    steps.github = ns_since(t);

    let t = now();
    let back = back.location.expect("back from GitHub");
    let finish = navigate(http, &mut jar, &back, "cross-site").await;
    assert_eq!(finish.status, 200, "finish page: {}", finish.body);
    let cb = navigate(
        http,
        &mut jar,
        &format!("{back}&flow_proof={flow_proof}"),
        "same-origin",
    )
    .await;
    steps.callback = ns_since(t);
    assert_eq!(cb.status, 303, "callback: {}", cb.body);
    let code = query_param(&cb.location.expect("to client"), "code").expect("code");

    let t = now();
    let resp = http
        .post(proxy.url("/token"))
        .form(&[
            ("client_id", client.id.as_str()),
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT_URI),
            ("code_verifier", verifier.as_str()),
            ("resource", resource.as_str()),
        ])
        .send()
        .await
        .expect("token");
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.expect("token json");
    steps.token = ns_since(t);
    assert_eq!(status, 200, "token: {v}");
    (
        Tokens {
            access: v["access_token"].as_str().expect("access").to_owned(),
            refresh: v["refresh_token"].as_str().expect("refresh").to_owned(),
        },
        steps,
    )
}

/// One refresh; returns the new refresh token.
pub async fn refresh(
    http: &reqwest::Client,
    proxy: &Proxy,
    client: &RegisteredClient,
    refresh_token: &str,
) -> String {
    let resp = http
        .post(proxy.url("/token"))
        .form(&[
            ("client_id", client.id.as_str()),
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ])
        .send()
        .await
        .expect("refresh");
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.expect("refresh json");
    assert_eq!(status, 200, "refresh: {v}");
    v["refresh_token"].as_str().expect("refresh").to_owned()
}

/// The GitHub legs of one flow alone, straight at the fake: the browser's authorize (silent
/// for `login`), the token exchange and `GET /user` the proxy makes at the callback.
pub async fn github_legs(http: &reqwest::Client, github_base: &str, callback: &str, login: &str) {
    let verifier = mcp_oauth_proxy::crypto::random_token().expect("random");
    let challenge = mcp_oauth_proxy::crypto::pkce_s256(&verifier);
    let q = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("client_id", crate::harness::GH_CLIENT_ID),
            ("redirect_uri", callback),
            ("scope", "read:user repo"),
            ("state", "bench-state"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ])
        .finish();
    let r = http
        .get(format!("{github_base}/login/oauth/authorize?{q}"))
        .header("cookie", format!("fgh_user={login}"))
        .send()
        .await
        .expect("github authorize");
    assert_eq!(r.status().as_u16(), 302, "silent authorize");
    let loc = r
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .expect("location")
        .to_owned();
    let code = query_param(&loc, "code").expect("github code");
    let r = http
        .post(format!("{github_base}/login/oauth/access_token"))
        .header("accept", "application/json")
        .form(&[
            ("client_id", crate::harness::GH_CLIENT_ID),
            ("client_secret", crate::harness::GH_CLIENT_SECRET),
            ("code", code.as_str()),
            ("redirect_uri", callback),
            ("code_verifier", verifier.as_str()),
        ])
        .send()
        .await
        .expect("github token");
    let v: Value = r.json().await.expect("github token json");
    let token = v["access_token"].as_str().expect("github access token");
    let r = http
        .get(format!("{github_base}/api/v3/user"))
        .header("authorization", format!("Bearer {token}"))
        .header("user-agent", "proxy-bench")
        .header("accept", "application/vnd.github+json")
        .send()
        .await
        .expect("github user");
    assert_eq!(r.status().as_u16(), 200, "github /user");
    let _ = r.bytes().await;
}
