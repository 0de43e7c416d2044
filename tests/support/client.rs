//! An MCP client as the proxy sees it: registers over HTTP, builds authorization URLs with
//! PKCE and `resource`, and calls /token and /revoke.

use serde_json::{Value, json};

use super::browser::{Browser, Resp};
use super::{TestProxy, http, query_param};
use mcp_oauth_proxy::crypto;

/// A PKCE pair.
#[derive(Clone, Debug)]
pub struct Pkce {
    /// Verifier.
    pub verifier: String,
    /// S256 challenge.
    pub challenge: String,
}

impl Pkce {
    /// A fresh pair.
    pub fn new() -> Pkce {
        let verifier = crypto::random_token().unwrap();
        let challenge = crypto::pkce_s256(&verifier);
        Pkce {
            verifier,
            challenge,
        }
    }
}

/// A registered client.
#[derive(Clone, Debug)]
pub struct Client {
    /// client_id
    pub id: String,
    /// client_secret (confidential clients)
    pub secret: Option<String>,
    /// The redirect URI it uses.
    pub redirect_uri: String,
}

/// A JSON response.
#[derive(Debug)]
pub struct JsonResp {
    /// Status.
    pub status: u16,
    /// Headers.
    pub headers: reqwest::header::HeaderMap,
    /// Body.
    pub json: Value,
}

impl JsonResp {
    /// `error` field.
    pub fn error(&self) -> &str {
        self.json["error"].as_str().unwrap_or_default()
    }
}

async fn json_resp(r: reqwest::Response) -> JsonResp {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    JsonResp {
        status,
        headers,
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}

/// POSTs JSON to /register.
pub async fn register_raw(proxy: &TestProxy, body: Value) -> JsonResp {
    json_resp(
        http()
            .post(proxy.url("/register"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

impl Client {
    /// Registers a public client with one redirect URI.
    pub async fn register(proxy: &TestProxy, name: &str, redirect_uri: &str) -> Client {
        let r = register_raw(
            proxy,
            json!({
                "client_name": name,
                "redirect_uris": [redirect_uri],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
            }),
        )
        .await;
        assert_eq!(r.status, 201, "{:?}", r.json);
        Client {
            id: r.json["client_id"].as_str().unwrap().to_owned(),
            secret: None,
            redirect_uri: redirect_uri.to_owned(),
        }
    }

    /// The /authorize URL with standard parameters plus `extra` (which override).
    pub fn authorize_url(
        &self,
        proxy: &TestProxy,
        pkce: &Pkce,
        state: &str,
        extra: &[(&str, &str)],
    ) -> String {
        let resource = proxy.url("/mcp");
        let mut params: Vec<(&str, &str)> = vec![
            ("response_type", "code"),
            ("client_id", &self.id),
            ("redirect_uri", &self.redirect_uri),
            ("code_challenge", &pkce.challenge),
            ("code_challenge_method", "S256"),
            ("state", state),
            ("scope", "read:user"),
            ("resource", &resource),
        ];
        for (k, v) in extra {
            params.retain(|(pk, _)| pk != k);
            if !v.is_empty() {
                params.push((k, v));
            }
        }
        let q = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        proxy.url(&format!("/authorize?{q}"))
    }

    fn auth_fields(&self) -> Vec<(String, String)> {
        let mut f = vec![("client_id".to_owned(), self.id.clone())];
        if let Some(s) = &self.secret {
            f.push(("client_secret".to_owned(), s.clone()));
        }
        f
    }

    /// POST /token with `fields` plus this client's authentication.
    pub async fn token(&self, proxy: &TestProxy, fields: &[(&str, &str)]) -> JsonResp {
        let mut all: Vec<(String, String)> = self.auth_fields();
        all.extend(
            fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        json_resp(
            http()
                .post(proxy.url("/token"))
                .form(&all)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// Redeems a code with the standard parameters plus `extra` (which override; an empty
    /// value removes the parameter).
    pub async fn redeem(
        &self,
        proxy: &TestProxy,
        code: &str,
        pkce: &Pkce,
        extra: &[(&str, &str)],
    ) -> JsonResp {
        let resource = proxy.url("/mcp");
        let mut f: Vec<(&str, &str)> = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &self.redirect_uri),
            ("code_verifier", &pkce.verifier),
            ("resource", &resource),
        ];
        for (k, v) in extra {
            f.retain(|(fk, _)| fk != k);
            if !v.is_empty() {
                f.push((k, v));
            }
        }
        self.token(proxy, &f).await
    }

    /// Refreshes.
    pub async fn refresh(
        &self,
        proxy: &TestProxy,
        refresh_token: &str,
        extra: &[(&str, &str)],
    ) -> JsonResp {
        let mut f: Vec<(&str, &str)> = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ];
        f.extend_from_slice(extra);
        self.token(proxy, &f).await
    }

    /// RFC 7009 revocation.
    pub async fn revoke(&self, proxy: &TestProxy, token: &str) -> u16 {
        let mut all = self.auth_fields();
        all.push(("token".to_owned(), token.to_owned()));
        http()
            .post(proxy.url("/revoke"))
            .form(&all)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// The whole browser side of an authorization for `login`, starting from a navigation the
    /// client opened (`Sec-Fetch-Site: none`): consent page, approve, GitHub, callback.
    /// Returns the final redirect back to the client.
    pub async fn authorize_in(
        &self,
        proxy: &TestProxy,
        browser: &Browser,
        login: &str,
        pkce: &Pkce,
        state: &str,
    ) -> String {
        let page = browser
            .navigate(&self.authorize_url(proxy, pkce, state, &[]), "none")
            .await;
        assert_eq!(page.status, 200, "expected the consent page: {}", page.body);
        let github_url = approve(proxy, browser, &page).await;
        let back = browser.through_github(&github_url, login).await;
        let cb = browser
            .navigate(&back.location().unwrap(), "cross-site")
            .await;
        assert_eq!(
            cb.status, 303,
            "callback should redirect to the client: {}",
            cb.body
        );
        cb.location().unwrap()
    }

    /// `authorize_in` and return the code, checking `state` and `iss`.
    pub async fn get_code(
        &self,
        proxy: &TestProxy,
        browser: &Browser,
        login: &str,
        pkce: &Pkce,
    ) -> String {
        let loc = self.authorize_in(proxy, browser, login, pkce, "st-1").await;
        assert!(loc.starts_with(&self.redirect_uri), "{loc}");
        assert_eq!(query_param(&loc, "state").as_deref(), Some("st-1"));
        assert_eq!(
            query_param(&loc, "iss").as_deref(),
            Some(proxy.base.as_str())
        );
        query_param(&loc, "code").unwrap()
    }

    /// Full authorization and code redemption; returns the token response.
    pub async fn tokens(&self, proxy: &TestProxy, browser: &Browser, login: &str) -> JsonResp {
        let pkce = Pkce::new();
        let code = self.get_code(proxy, browser, login, &pkce).await;
        let r = self.redeem(proxy, &code, &pkce, &[]).await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        r
    }
}

/// Clicks Approve on a consent page; returns the GitHub URL the proxy redirected to.
pub async fn approve(proxy: &TestProxy, browser: &Browser, page: &Resp) -> String {
    let r = decide(proxy, browser, page, "approve").await;
    assert_eq!(r.status, 303, "{}", r.body);
    r.location().unwrap()
}

/// Submits the consent form with `decision`, from the proxy's own page (with the value its
/// script adds, in a browser with JavaScript).
pub async fn decide(proxy: &TestProxy, browser: &Browser, page: &Resp, decision: &str) -> Resp {
    let txn = page.hidden("txn").expect("txn in consent page");
    let csrf = page.hidden("csrf").expect("csrf in consent page");
    let mut fields = vec![
        ("txn", txn),
        ("csrf", csrf),
        ("decision", decision.to_owned()),
    ];
    if let Some(proof) = browser.consent_script_proof(page) {
        fields.push(("flow_proof", proof));
    }
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    browser
        .post_form(&proxy.url("/consent"), &fields, &proxy.base, "same-origin")
        .await
}
