//! The in-process fixture: an [`App`] on a temporary sled store with a manual clock, the fake
//! GitHub on an ephemeral loopback port, and helpers that drive the flows through the same
//! public functions the HTTP handlers call (`flows::register::register`,
//! `flows::authorize::authorize`, `flows::consent::decide`, `flows::callback::github_callback`,
//! `flows::token::token`). No proxy listener: only "GitHub" is reached over HTTP, because the
//! proxy's GitHub client is what the callback exercises.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consent_ui::ConsentPage;
use mcp_examples::{FakeGitHub, FakeGitHubConfig};
use serde_json::{Value, json};

use crate::app::App;
use crate::clock::{Clock, ManualClock, SharedClock, SystemClock};
use crate::config::{Config, Keys};
use crate::cookies;
use crate::crypto;
use crate::flows::FlowError;
use crate::flows::authorize::{self, AuthorizeInput, AuthorizeOutcome};
use crate::flows::callback::{self, Next};
use crate::flows::consent::{self, ConsentInput, ConsentOutcome};
use crate::flows::register;
use crate::flows::token::{self, TokenOutcome};
use crate::ids::{AuthCode, FamilyId, RefreshToken};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant::{self, TokenResponse};
use crate::store::records::FamilyRecord;
use crate::store::{Keyspace, SharedStore, SledStore, StoreExt};

/// The proxy's public URL. Nothing listens there: the flows are called directly, and the fake
/// GitHub only redirects to it (the fixture reads the redirect instead of following it).
pub(super) const PUBLIC_URL: &str = "https://mcp.example.com";

/// How the fixture's proxy is configured beyond the defaults.
#[derive(Default, Clone)]
pub(super) struct Options {
    /// `[github] scopes` as a TOML array (default `["read:user", "repo"]`).
    pub github_scopes: Option<&'static str>,
    /// Whole TOML sections appended to the configuration (`[tokens]`, `[session]`,
    /// `[access]`, `[[clients]]` …).
    pub extra: String,
}

/// A proxy in this process.
pub(super) struct Fixture {
    /// The application, as the HTTP handlers get it.
    pub app: App,
    /// Its clock, moved by hand.
    pub clock: Arc<ManualClock>,
    /// The fake GitHub.
    pub github: FakeGitHub,
    /// The store without the metrics wrapper, to build the same proxy with another
    /// configuration on it ([`Fixture::reconfigured`]).
    store: SharedStore,
    keys: Keys,
}

/// An MCP client registered with the proxy.
#[derive(Clone, Debug)]
pub(super) struct Client {
    /// `client_id`.
    pub id: String,
    /// `client_secret`, for confidential clients (sent in the form).
    pub secret: Option<String>,
    /// The redirect URI it uses by default.
    pub redirect_uri: String,
}

/// A PKCE pair.
#[derive(Clone, Debug)]
pub(super) struct Pkce {
    /// The verifier.
    pub verifier: String,
    /// Its S256 challenge.
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

/// A browser's cookie jar for the proxy. Values are kept raw, as the handlers read them
/// (`cookies::read` does not percent-decode). `page_proof` is the value the consent page's
/// script keeps in the origin's session storage, handed back by the finish page's script.
#[derive(Default)]
pub(super) struct Browser {
    jar: Mutex<BTreeMap<String, String>>,
    page_proof: Mutex<Option<String>>,
}

impl Browser {
    /// A fresh browser.
    pub fn new() -> Browser {
        Browser::default()
    }

    /// Applies one `Set-Cookie` value (a cleared cookie is removed).
    pub fn absorb(&self, set_cookie: &str) {
        let first = set_cookie.split(';').next().unwrap_or_default();
        let (name, value) = first.split_once('=').unwrap();
        let cleared = set_cookie
            .split(';')
            .any(|a| a.trim().eq_ignore_ascii_case("Max-Age=0"));
        let mut jar = self.jar.lock().unwrap();
        if cleared || value.is_empty() {
            jar.remove(name.trim());
        } else {
            jar.insert(name.trim().to_owned(), value.to_owned());
        }
    }

    /// The value of a cookie, read the way the handlers read it.
    pub fn cookie(&self, name: &str) -> Option<String> {
        let header = self
            .jar
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::COOKIE, header.parse().unwrap());
        cookies::read(&headers, name)
    }

    /// The proxy session cookie.
    pub fn session(&self) -> Option<String> {
        self.cookie(cookies::SESSION_COOKIE)
    }
}

/// The value of query parameter `name` in a URL.
pub(super) fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The OAuth error a flow failed with (panics on success or on any other failure).
pub(super) fn oauth_error<T: std::fmt::Debug>(r: Result<T, FlowError>) -> OAuthError {
    match r {
        Err(FlowError::OAuth(e)) => e,
        other => panic!("expected an OAuth error, got {other:?}"),
    }
}

/// The error code a flow failed with.
pub(super) fn error_code<T: std::fmt::Debug>(r: Result<T, FlowError>) -> ErrorCode {
    oauth_error(r).code
}

/// The family a refresh token names.
pub(super) fn family_of(refresh_token: &str) -> FamilyId {
    grant::refresh_family(&RefreshToken::new(refresh_token)).unwrap()
}

fn form(params: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish()
}

fn config(github: &FakeGitHub, opts: &Options) -> Config {
    let toml = format!(
        r#"
[server]
public_url = "{PUBLIC_URL}"
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
scopes = {scopes}
authorize_url = "{authorize}"
token_url = "{token}"
api_url = "{api}"
[store]
path = "/nonexistent-the-fixture-uses-a-temporary-store"
{extra}
"#,
        scopes = opts.github_scopes.unwrap_or(r#"["read:user", "repo"]"#),
        authorize = github.authorize_url(),
        token = github.token_url(),
        api = github.api_url(),
        extra = opts.extra,
    );
    Config::from_toml(&toml, &std::collections::HashMap::new())
        .unwrap_or_else(|e| panic!("fixture config: {:?}", e.0))
}

impl Fixture {
    /// A proxy with the default configuration.
    pub async fn start() -> Fixture {
        Fixture::start_with(Options::default()).await
    }

    /// A proxy configured with `opts`.
    pub async fn start_with(opts: Options) -> Fixture {
        crate::install_crypto_provider();
        let github = FakeGitHub::start(FakeGitHubConfig::demo(
            "gh-client-id",
            "gh-client-secret",
            format!("{PUBLIC_URL}/callback/github"),
        ))
        .await
        .unwrap();
        // The fake GitHub keeps real time; the proxy's clock starts there and moves by hand.
        let clock = ManualClock::new(SystemClock.now());
        let shared: SharedClock = clock.clone();
        let store: SharedStore = Arc::new(SledStore::temporary(shared.clone()).unwrap());
        let keys = Keys::generate().unwrap();
        let app = App::new(config(&github, &opts), keys.clone(), store.clone(), shared).unwrap();
        Fixture {
            app,
            clock,
            github,
            store,
            keys,
        }
    }

    /// The same proxy (store, keys, clock, GitHub) started again with another configuration:
    /// what an operator's edit of the config file and a restart do.
    pub fn reconfigured(&self, opts: Options) -> Fixture {
        let shared: SharedClock = self.clock.clone();
        let app = App::new(
            config(&self.github, &opts),
            self.keys.clone(),
            self.store.clone(),
            shared,
        )
        .unwrap();
        Fixture {
            app,
            clock: self.clock.clone(),
            github: self.github.clone(),
            store: self.store.clone(),
            keys: self.keys.clone(),
        }
    }

    /// This proxy's MCP resource.
    pub fn resource(&self) -> String {
        format!("{PUBLIC_URL}/mcp")
    }

    /// Registers a public client (`POST /register`) with these redirect URIs; it uses the
    /// first by default.
    pub async fn register(&self, name: &str, redirect_uris: &[&str]) -> Client {
        self.register_with(
            name,
            redirect_uris,
            json!({"token_endpoint_auth_method": "none"}),
        )
        .await
    }

    /// Registers a confidential client (`client_secret_post`).
    pub async fn register_confidential(&self, name: &str, redirect_uri: &str) -> Client {
        self.register_with(
            name,
            &[redirect_uri],
            json!({"token_endpoint_auth_method": "client_secret_post"}),
        )
        .await
    }

    async fn register_with(&self, name: &str, redirect_uris: &[&str], extra: Value) -> Client {
        let mut body = json!({
            "client_name": name,
            "redirect_uris": redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let out = register::register(&self.app, None, None, body.to_string().as_bytes())
            .await
            .unwrap();
        Client {
            id: out["client_id"].as_str().unwrap().to_owned(),
            secret: out["client_secret"].as_str().map(str::to_owned),
            redirect_uri: redirect_uris[0].to_owned(),
        }
    }

    /// A client configured in `[[clients]]` (no registration), by its id and redirect URI.
    pub fn configured(id: &str, redirect_uri: &str) -> Client {
        Client {
            id: id.to_owned(),
            secret: None,
            redirect_uri: redirect_uri.to_owned(),
        }
    }

    /// The `/authorize` query with the usual parameters plus `extra` (which override; an
    /// empty value leaves the parameter out).
    pub fn authorize_query(&self, client: &Client, pkce: &Pkce, extra: &[(&str, &str)]) -> String {
        let resource = self.resource();
        let mut params: Vec<(&str, &str)> = vec![
            ("response_type", "code"),
            ("client_id", &client.id),
            ("redirect_uri", &client.redirect_uri),
            ("code_challenge", &pkce.challenge),
            ("code_challenge_method", "S256"),
            ("state", "client-state"),
            ("scope", "read:user"),
            ("resource", &resource),
        ];
        for (k, v) in extra {
            params.retain(|(pk, _)| pk != k);
            if !v.is_empty() {
                params.push((k, v));
            }
        }
        form(&params)
    }

    /// `GET /authorize` from `browser` with `Sec-Fetch-Site: site`. A consent page's CSRF
    /// cookie goes into the jar.
    pub async fn authorize(
        &self,
        browser: &Browser,
        client: &Client,
        pkce: &Pkce,
        site: Option<&str>,
        extra: &[(&str, &str)],
    ) -> AuthorizeOutcome {
        let query = self.authorize_query(client, pkce, extra);
        let out = authorize::authorize(
            &self.app,
            AuthorizeInput {
                raw_query: &query,
                session_cookie: browser.session(),
                csrf_cookie: browser.cookie(cookies::CSRF_COOKIE),
                sec_fetch_site: site.map(str::to_owned),
                client_ip: None,
            },
        )
        .await
        .unwrap();
        if let AuthorizeOutcome::Consent(_, Some(set_cookie)) = &out {
            browser.absorb(set_cookie);
        }
        out
    }

    /// Approves a consent page from `browser`; returns the GitHub authorize URL (the flow
    /// cookie goes into the jar).
    pub async fn approve(&self, browser: &Browser, page: &ConsentPage) -> String {
        // What the consent page's script does on submit.
        let proof = crate::crypto::random_token().unwrap();
        *browser.page_proof.lock().unwrap() = Some(proof.clone());
        let body = form(&[
            ("txn", &page.txn),
            ("csrf", &page.csrf),
            ("decision", "approve"),
            ("flow_proof", &proof),
        ]);
        let csrf_cookie = browser.cookie(cookies::CSRF_COOKIE);
        let session = browser.session();
        let out = consent::decide(
            &self.app,
            ConsentInput {
                body: &body,
                csrf_cookie: csrf_cookie.as_deref(),
                sec_fetch_site: Some("same-origin"),
                origin: Some(PUBLIC_URL),
                session_cookie: session.as_deref(),
            },
        )
        .await
        .unwrap();
        match out {
            ConsentOutcome::ToGitHub { url, set_cookie } => {
                browser.absorb(&set_cookie);
                url
            }
            other => panic!("approval did not go to GitHub: {other:?}"),
        }
    }

    /// Follows a GitHub authorize URL as `login` (already signed in at GitHub and having
    /// authorized the app for the configured scopes, so GitHub answers at once); returns the
    /// query of GitHub's redirect back to the proxy's callback.
    pub async fn through_github(&self, url: &str, login: &str) -> String {
        let asked = query_param(url, "scope").unwrap_or_default();
        let scopes: Vec<&str> = asked.split([' ', ',']).filter(|s| !s.is_empty()).collect();
        self.github.authorize_app(login, &scopes);
        // The proxy's own GitHub client policy: no redirect is followed, so the answer is
        // GitHub's redirect back, read here instead of followed to a listener that is not there.
        let resp = crate::outbound::github(Duration::from_secs(10))
            .unwrap()
            .get(url)
            .header("cookie", format!("fgh_user={login}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 302, "GitHub should redirect back");
        let location = resp.headers()["location"].to_str().unwrap().to_owned();
        assert!(
            location.starts_with(&format!("{PUBLIC_URL}/callback/github?")),
            "{location}"
        );
        url::Url::parse(&location)
            .unwrap()
            .query()
            .unwrap_or_default()
            .to_owned()
    }

    /// `GET /callback/github` in `browser`; returns where the browser is sent (the client's
    /// redirect URI with the code). Its cookies (the session) go into the jar.
    pub async fn callback(&self, browser: &Browser, query: &str) -> String {
        let flow = browser.cookie(cookies::FLOW_COOKIE);
        let session = browser.session();
        let csrf = browser.cookie(cookies::CSRF_COOKIE);
        // What the finish page's script does: hand back the value the consent page kept.
        let query = match browser.page_proof.lock().unwrap().take() {
            Some(proof) => format!("{query}&flow_proof={proof}"),
            None => query.to_owned(),
        };
        let out = callback::github_callback(
            &self.app,
            callback::CallbackInput {
                request: callback::CallbackRequest::FromGitHub { raw_query: &query },
                flow_cookie: flow.as_deref(),
                session_cookie: session.as_deref(),
                csrf_cookie: csrf.as_deref(),
            },
        )
        .await
        .unwrap();
        for c in &out.set_cookies {
            browser.absorb(c);
        }
        match out.next {
            Next::Redirect(to) => to,
            Next::Page(title, _) => panic!("callback showed a page: {title}"),
            Next::Finish(page) => panic!("callback asked to confirm: {page:?}"),
        }
    }

    /// The whole browser leg through the consent page: `/authorize` (which must show the
    /// page), approve, GitHub as `login`, callback. Returns the code sent to the client.
    pub async fn code_via_consent(
        &self,
        browser: &Browser,
        client: &Client,
        login: &str,
        pkce: &Pkce,
        extra: &[(&str, &str)],
    ) -> String {
        let page = match self
            .authorize(browser, client, pkce, Some("cross-site"), extra)
            .await
        {
            AuthorizeOutcome::Consent(page, _) => page,
            AuthorizeOutcome::Redirect(to) => panic!("expected the consent page, got {to}"),
        };
        let github = self.approve(browser, &page).await;
        let query = self.through_github(&github, login).await;
        let to = self.callback(browser, &query).await;
        query_param(&to, "code").unwrap_or_else(|| panic!("no code in {to}"))
    }

    /// `POST /token` as `client` (its secret in the form, if it has one) with `params`.
    pub async fn token(
        &self,
        client: &Client,
        params: &[(&str, &str)],
    ) -> Result<TokenResponse, FlowError> {
        self.token_from(client, params, None, None).await
    }

    /// `POST /token` as `client` from client IP `ip` with `User-Agent` `user_agent`.
    pub async fn token_from(
        &self,
        client: &Client,
        params: &[(&str, &str)],
        ip: Option<std::net::IpAddr>,
        user_agent: Option<&str>,
    ) -> Result<TokenResponse, FlowError> {
        let mut all: Vec<(&str, &str)> = vec![("client_id", &client.id)];
        if let Some(s) = &client.secret {
            all.push(("client_secret", s));
        }
        all.extend_from_slice(params);
        match token::token(&self.app, None, ip, user_agent, &form(&all)).await? {
            TokenOutcome::Tokens(t) => Ok(t),
            TokenOutcome::Exchanged(v) => panic!("unexpected exchange answer {v}"),
        }
    }

    /// Redeems a code with the usual parameters plus `extra` (which override; an empty value
    /// leaves the parameter out).
    pub async fn redeem(
        &self,
        client: &Client,
        code: &str,
        pkce: &Pkce,
        extra: &[(&str, &str)],
    ) -> Result<TokenResponse, FlowError> {
        let resource = self.resource();
        let mut params: Vec<(&str, &str)> = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &client.redirect_uri),
            ("code_verifier", &pkce.verifier),
            ("resource", &resource),
        ];
        for (k, v) in extra {
            params.retain(|(pk, _)| pk != k);
            if !v.is_empty() {
                params.push((k, v));
            }
        }
        self.token(client, &params).await
    }

    /// A refresh with `refresh_token`.
    pub async fn refresh(
        &self,
        client: &Client,
        refresh_token: &str,
    ) -> Result<TokenResponse, FlowError> {
        self.token(
            client,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
            ],
        )
        .await
    }

    /// A refresh with `refresh_token` from client IP `ip` with `User-Agent` `user_agent`.
    pub async fn refresh_from(
        &self,
        client: &Client,
        refresh_token: &str,
        ip: &str,
        user_agent: &str,
    ) -> Result<TokenResponse, FlowError> {
        self.token_from(
            client,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
            ],
            Some(ip.parse().unwrap()),
            Some(user_agent),
        )
        .await
    }

    /// Signs `login` in through the consent page and redeems the code: the client's first
    /// tokens.
    pub async fn tokens(&self, browser: &Browser, client: &Client, login: &str) -> TokenResponse {
        let pkce = Pkce::new();
        let code = self
            .code_via_consent(browser, client, login, &pkce, &[])
            .await;
        self.redeem(client, &code, &pkce, &[]).await.unwrap()
    }

    /// Live records in a keyspace.
    pub async fn count(&self, ks: Keyspace) -> usize {
        self.app.store.scan_prefix(ks, "").await.unwrap().len()
    }

    /// Whether a code is still stored (unredeemed and unexpired).
    pub async fn code_stored(&self, code: &str) -> bool {
        self.app
            .store
            .get(Keyspace::Codes, &AuthCode::new(code).hash())
            .await
            .unwrap()
            .is_some()
    }

    /// A refresh family's record.
    pub async fn family(&self, id: &FamilyId) -> Option<FamilyRecord> {
        self.app
            .store
            .get_json(Keyspace::RefreshFamilies, id.as_str())
            .await
            .unwrap()
    }

    /// The audit events, in order (each its JSON with the `event` name).
    pub async fn audit(&self) -> Vec<Value> {
        self.app
            .audit
            .all()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.event)
            .collect()
    }

    /// How many audit events named `name` there are.
    pub async fn audited(&self, name: &str) -> usize {
        self.audit()
            .await
            .iter()
            .filter(|e| e["event"] == name)
            .count()
    }
}
