//! Request handling: recording, forbidden-marker detection, routing, and the OAuth state
//! machine (authorizations, codes, tokens). Everything runs synchronously under one
//! `std::sync::Mutex`, taken only after the request body has been read (never across `.await`).
//! The REST API lives in [`api`], the test-control routes in [`control`].

mod api;
mod control;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::prelude::{BASE64_STANDARD, BASE64_URL_SAFE_NO_PAD, Engine as _};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use url::Url;
use url::form_urlencoded;

use crate::gate::Gate;
use crate::{FakeGitHubConfig, FakeUser, Reachability, RecordedRequest, pages};

pub(crate) const AUTHORIZE_PATH: &str = "/login/oauth/authorize";
pub(crate) const TOKEN_PATH: &str = "/login/oauth/access_token";
pub(crate) const API_PREFIX: &str = "/api/v3";
const LOGIN_PATH: &str = "/login";
const DECISION_PATH: &str = "/login/oauth/authorize/decision";
const USER_COOKIE: &str = "fgh_user";
/// Test controls (not GitHub): never recorded, never subject to an outage except `Down`.
pub(crate) const CONTROL_PREFIX: &str = "/_fake/";

const CODE_TTL: Duration = Duration::from_secs(600);
const ACCESS_TTL_SECS: u64 = 28_800;
const REFRESH_TTL_SECS: u64 = 15_897_600;
/// GitHub keeps at most 10 tokens per user/app/scope; the 11th revokes the oldest.
const TOKENS_PER_SCOPE: usize = 10;
const MAX_BODY: usize = 1 << 20;

const AUTHZ_ERRORS_DOC: &str =
    "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-authorization-request-errors";
const TOKEN_ERRORS_DOC: &str = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors";

pub(crate) type Shared = Arc<Mutex<FakeState>>;

/// The router's state: the fake's data and its outage switch.
#[derive(Clone)]
pub(crate) struct ServerState {
    pub(crate) shared: Shared,
    pub(crate) gate: Arc<Gate>,
}

pub(crate) fn lock(shared: &Mutex<FakeState>) -> MutexGuard<'_, FakeState> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[allow(clippy::disallowed_methods)] // the fake has its own wall clock: it is a separate server, not the proxy
fn real_now() -> SystemTime {
    SystemTime::now()
}

#[allow(clippy::disallowed_methods)] // fake server, not the proxy
fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    if getrandom::fill(&mut buf).is_err() {
        // Fallback: std's randomly seeded hasher over a counter (good enough for a fake).
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let seed = std::collections::hash_map::RandomState::new();
        for chunk in buf.chunks_mut(8) {
            let mut h = seed.build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            let bytes = h.finish().to_le_bytes();
            chunk.copy_from_slice(bytes.get(..chunk.len()).unwrap_or_default());
        }
    }
    buf
}

fn random_alnum(n: usize) -> String {
    const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    random_bytes(n)
        .iter()
        .map(|b| {
            char::from(
                ALNUM
                    .get(usize::from(*b) % ALNUM.len())
                    .copied()
                    .unwrap_or(b'0'),
            )
        })
        .collect()
}

fn random_hex(bytes: usize) -> String {
    random_bytes(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A code issued at the authorize endpoint (single use, 10 minutes).
struct CodeGrant {
    client_id: String,
    login: String,
    scopes: BTreeSet<String>,
    /// The `redirect_uri` sent at authorize, if any (then the token request must repeat it).
    redirect_uri_sent: Option<String>,
    code_challenge: Option<String>,
    expires_at: SystemTime,
}

struct AccessToken {
    /// GitHub's authorization id (the `id` of "Check a token").
    id: u64,
    token: String,
    login: String,
    scopes: BTreeSet<String>,
    created_at: SystemTime,
    expires_at: Option<SystemTime>,
    /// Lower-cased logins of the SSO-enforcing organizations this token may reach.
    sso_orgs: BTreeSet<String>,
}

struct RefreshGrant {
    login: String,
    scopes: BTreeSet<String>,
    access_token: String,
    expires_at: SystemTime,
}

pub(crate) struct FakeState {
    pub(crate) config: FakeGitHubConfig,
    pub(crate) time_offset: Duration,
    pub(crate) requests: Vec<RecordedRequest>,
    pub(crate) violations: Vec<String>,
    pub(crate) token_requests: usize,
    /// login → scopes the user has authorized for the app (server-side, like GitHub).
    pub(crate) authorizations: HashMap<String, BTreeSet<String>>,
    /// A silently completed request gets a token with everything the user authorized, not
    /// only what it asked for (GitHub documents this for a request without `scope`, and no
    /// document rules it out for a narrower one).
    pub(crate) skip_grants_whole_authorization: bool,
    /// (login, access token) in issue order, revoked ones included.
    pub(crate) issued: Vec<(String, String)>,
    codes: HashMap<String, CodeGrant>,
    /// Live access tokens, oldest first.
    access: Vec<AccessToken>,
    refresh: HashMap<String, RefreshGrant>,
    next_token_id: u64,
    /// (lower-cased org, lower-cased login): the person has an active SAML session for the
    /// organization, so tokens issued from now on are SSO-authorized for it.
    pub(crate) sso_sessions: HashSet<(String, String)>,
    /// `authorization_request` id of an `X-GitHub-SSO` URL → (lower-cased org, token).
    sso_requests: HashMap<String, (String, String)>,
    pub(crate) rate: api::RateLimits,
    /// Every page the person was shown at the authorize endpoint, in order.
    pub(crate) screens: Vec<Screen>,
}

/// A page the fake showed the person on the way through its authorize endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    /// "Sign in to GitHub": the account picker (no account cookie, or `prompt=select_account`).
    AccountPicker,
    /// GitHub's own "Authorize application" page.
    Consent,
}

/// Decoded `application/x-www-form-urlencoded` pairs, in order.
type Params = Vec<(String, String)>;

fn parse_params(s: &str) -> Params {
    form_urlencoded::parse(s.as_bytes()).into_owned().collect()
}

/// First non-empty value of a parameter (GitHub treats empty parameters as absent).
fn param<'a>(p: &'a Params, name: &str) -> Option<&'a str> {
    p.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

fn without(p: &Params, names: &[&str]) -> Params {
    p.iter()
        .filter(|(k, _)| !names.contains(&k.as_str()))
        .cloned()
        .collect()
}

/// Request scopes are space-delimited (GitHub also accepts commas).
fn parse_scopes(s: Option<&str>) -> BTreeSet<String> {
    s.unwrap_or_default()
        .split([' ', ','])
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Scopes implied by a broader one (the hierarchy of "Scopes for OAuth apps",
/// docs.github.com/apps/oauth-apps/building-oauth-apps/scopes-for-oauth-apps), transitively.
fn implied(scope: &str) -> &'static [&'static str] {
    match scope {
        "repo" => &[
            "repo:status",
            "repo_deployment",
            "public_repo",
            "repo:invite",
            "security_events",
        ],
        "admin:repo_hook" => &["write:repo_hook", "read:repo_hook"],
        "write:repo_hook" => &["read:repo_hook"],
        "admin:org" => &["write:org", "read:org"],
        "write:org" => &["read:org"],
        "admin:public_key" => &["write:public_key", "read:public_key"],
        "write:public_key" => &["read:public_key"],
        "admin:gpg_key" => &["write:gpg_key", "read:gpg_key"],
        "write:gpg_key" => &["read:gpg_key"],
        "user" => &["read:user", "user:email", "user:follow"],
        "project" => &["read:project"],
        "write:packages" => &["read:packages"],
        _ => &[],
    }
}

/// Whether a token holding `granted` passes a check for `scope` (held, or implied).
fn grants(granted: &BTreeSet<String>, scope: &str) -> bool {
    granted.contains(scope) || granted.iter().any(|g| implied(g).contains(&scope))
}

fn covers(granted: &BTreeSet<String>, requested: &BTreeSet<String>) -> bool {
    requested.iter().all(|r| grants(granted, r))
}

/// GitHub's "normalized scopes": a token is saved without the scopes another requested scope
/// already includes (`user,gist,user:email` → `gist,user`).
fn normalize(scopes: BTreeSet<String>) -> BTreeSet<String> {
    let all = scopes.clone();
    scopes
        .into_iter()
        .filter(|s| {
            !all.iter()
                .any(|o| o != s && implied(o).contains(&s.as_str()))
        })
        .collect()
}

/// GitHub's rule: same scheme, host and port; path equal to or under the callback path.
fn redirect_allowed(registered: &Url, requested: &Url) -> bool {
    let base = registered.path().trim_end_matches('/');
    let path = requested.path();
    registered.scheme() == requested.scheme()
        && registered.host_str() == requested.host_str()
        && registered.port_or_known_default() == requested.port_or_known_default()
        && requested.username().is_empty()
        && requested.password().is_none()
        && requested.fragment().is_none()
        && (path == registered.path() || path == base || path.starts_with(&format!("{base}/")))
}

fn redirect_to(url: &Url, pairs: &[(&str, Option<&str>)]) -> Response {
    let mut url = url.clone();
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
    }
    (StatusCode::FOUND, [(header::LOCATION, url.to_string())]).into_response()
}

pub(crate) fn api_json(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn bad_credentials() -> Response {
    api_json(
        StatusCode::UNAUTHORIZED,
        json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"}),
    )
}

/// Token endpoint errors: always HTTP 200 with an `error` field, like GitHub.
fn token_error(error: &str, description: &str) -> Response {
    let error_uri = format!("{TOKEN_ERRORS_DOC}/#{}", error.replace('_', "-"));
    api_json(
        StatusCode::OK,
        json!({"error": error, "error_description": description, "error_uri": error_uri}),
    )
}

/// `(client_id, client_secret)` from an HTTP Basic `Authorization` header.
fn basic_credentials(req: &RecordedRequest) -> Option<(String, String)> {
    let value = req.header("authorization")?;
    let (scheme, b64) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(BASE64_STANDARD.decode(b64.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    // RFC 6749 §2.3.1: both parts are form-urlencoded before Basic encoding.
    let unescape = |s: &str| -> String {
        form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    Some((unescape(id), unescape(secret)))
}

/// The token of `Authorization: Bearer <t>` or `Authorization: token <t>`.
fn bearer_token(req: &RecordedRequest) -> Option<String> {
    let (scheme, token) = req.header("authorization")?.trim().split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
        .then(|| token.trim().to_owned())
}

/// Percent- and plus-decoded rendering of a URL-ish string, to catch escaped markers.
fn decoded(s: &str) -> String {
    form_urlencoded::parse(s.as_bytes())
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn find_markers(req: &RecordedRequest, markers: &[String]) -> Vec<String> {
    let mut places: Vec<(String, String)> = vec![
        ("path".into(), req.path_and_query.clone()),
        ("path".into(), decoded(&req.path_and_query)),
        ("body".into(), req.body.clone()),
        ("body".into(), decoded(&req.body)),
    ];
    for (k, v) in &req.headers {
        places.push((format!("header {k}"), v.clone()));
    }
    if let Some((id, secret)) = basic_credentials(req) {
        places.push(("basic credentials".into(), format!("{id}:{secret}")));
    }
    let mut found = Vec::new();
    for marker in markers.iter().filter(|m| !m.is_empty()) {
        for (place, text) in &places {
            let hit = format!("{marker:?} in {place}");
            if text.contains(marker.as_str()) && !found.contains(&hit) {
                found.push(hit);
            }
        }
    }
    found
}

/// The single handler: wait out an outage, read, record, then answer under the lock.
pub(crate) async fn handle(State(server): State<ServerState>, req: Request) -> Response {
    let control = req.uri().path().starts_with(CONTROL_PREFIX);
    if !control {
        loop {
            match server.gate.mode() {
                Reachability::Hang => tokio::time::sleep(Duration::from_millis(20)).await,
                Reachability::Unavailable => {
                    server.gate.count_refusal();
                    return api_json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        json!({"message": "Service Unavailable"}),
                    );
                }
                Reachability::Up | Reachability::Down => break,
            }
        }
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
    let recorded = RecordedRequest {
        method: parts.method.as_str().to_owned(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    if control {
        return lock(&server.shared).control(&recorded, &server.gate);
    }
    respond(&server.shared, recorded)
}

fn respond(shared: &Mutex<FakeState>, req: RecordedRequest) -> Response {
    let mut st = lock(shared);
    st.requests.push(req.clone());
    if req.method == "POST" && req.path() == TOKEN_PATH {
        st.token_requests += 1;
    }
    let found = find_markers(&req, &st.config.forbidden_markers);
    if !found.is_empty() {
        let what = format!("{} {}: {}", req.method, req.path(), found.join(", "));
        tracing::warn!(violation = %what, "fake GitHub received a proxy token");
        st.violations.push(what);
        return api_json(
            StatusCode::BAD_REQUEST,
            json!({"message": "proxy token received"}),
        );
    }
    st.route(&req)
}

/// A validated authorization request.
struct AuthRequest {
    params: Params,
    redirect_uri: Url,
    redirect_uri_sent: Option<String>,
    scopes: BTreeSet<String>,
    state: Option<String>,
    code_challenge: Option<String>,
}

impl FakeState {
    pub(crate) fn new(config: FakeGitHubConfig) -> Self {
        Self {
            config,
            time_offset: Duration::ZERO,
            requests: Vec::new(),
            violations: Vec::new(),
            token_requests: 0,
            authorizations: HashMap::new(),
            skip_grants_whole_authorization: false,
            issued: Vec::new(),
            codes: HashMap::new(),
            access: Vec::new(),
            refresh: HashMap::new(),
            next_token_id: 1,
            sso_sessions: HashSet::new(),
            sso_requests: HashMap::new(),
            rate: api::RateLimits::default(),
            screens: Vec::new(),
        }
    }

    fn now(&self) -> SystemTime {
        real_now() + self.time_offset
    }

    /// The fake's clock, for the control methods in `lib.rs`.
    pub(crate) fn now_for_controls(&self) -> SystemTime {
        self.now()
    }

    fn user(&self, login: &str) -> Option<FakeUser> {
        self.config.users.iter().find(|u| u.login == login).cloned()
    }

    pub(crate) fn revoke_user(&mut self, login: &str) {
        self.access.retain(|t| t.login != login);
        self.refresh.retain(|_, r| r.login != login);
        self.codes.retain(|_, c| c.login != login);
        self.authorizations.remove(login);
    }

    fn route(&mut self, req: &RecordedRequest) -> Response {
        let path = req.path();
        let query = req.path_and_query.split_once('?').map_or("", |(_, q)| q);
        match (req.method.as_str(), path) {
            ("GET", AUTHORIZE_PATH) => self.authorize(req, &parse_params(query)),
            ("POST", LOGIN_PATH) => self.login(&parse_params(&req.body)),
            ("POST", DECISION_PATH) => self.decision(req, &parse_params(&req.body)),
            ("POST", TOKEN_PATH) => self.token(req),
            ("GET", p) if p.starts_with("/orgs/") && p.ends_with("/sso") => {
                self.sso_page(req, p, &parse_params(query))
            }
            _ if path == API_PREFIX || path.starts_with(&format!("{API_PREFIX}/")) => {
                self.api(req, path.get(API_PREFIX.len()..).unwrap_or_default())
            }
            _ => pages::not_found(),
        }
    }

    // ---------------------------------------------------------------- browser side

    fn cookie_user(&self, req: &RecordedRequest) -> Option<FakeUser> {
        req.headers
            .iter()
            .filter(|(k, _)| k == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == USER_COOKIE)
            .and_then(|(_, login)| self.user(login))
    }

    /// Validates client, redirect_uri and PKCE method; `Err` is the response GitHub would give.
    fn validate_authorize(&self, params: &Params) -> Result<AuthRequest, Box<Response>> {
        if param(params, "client_id") != Some(self.config.client_id.as_str()) {
            return Err(Box::new(pages::not_found()));
        }
        let Ok(registered) = Url::parse(&self.config.callback_url) else {
            return Err(Box::new(pages::bad_request(
                "The application has no valid callback URL.",
            )));
        };
        let state = param(params, "state").map(str::to_owned);
        let redirect_uri_sent = param(params, "redirect_uri").map(str::to_owned);
        let redirect_uri = match &redirect_uri_sent {
            None => registered.clone(),
            Some(sent) => match Url::parse(sent) {
                Ok(u) if redirect_allowed(&registered, &u) => u,
                _ => {
                    return Err(Box::new(redirect_to(
                        &registered,
                        &[
                            ("error", Some("redirect_uri_mismatch")),
                            (
                                "error_description",
                                Some(
                                    "The redirect_uri MUST match the registered callback URL for this application.",
                                ),
                            ),
                            (
                                "error_uri",
                                Some(&format!("{AUTHZ_ERRORS_DOC}/#redirect-uri-mismatch")),
                            ),
                            ("state", state.as_deref()),
                        ],
                    )));
                }
            },
        };
        let code_challenge = param(params, "code_challenge").map(str::to_owned);
        // A missing method means "plain" to GitHub, which it does not support either.
        if code_challenge.is_some() && param(params, "code_challenge_method") != Some("S256") {
            return Err(Box::new(pages::bad_request("PKCE: only S256 supported")));
        }
        Ok(AuthRequest {
            params: params.clone(),
            redirect_uri,
            redirect_uri_sent,
            scopes: parse_scopes(param(params, "scope")),
            state,
            code_challenge,
        })
    }

    /// What GitHub does with `prompt` and `login` ("Authorizing OAuth apps" on docs.github.com
    /// and the changelog of 2024-06-07, "Account picker updates for OAuth and GitHub App
    /// sign-in"), and the fake with it. Nobody should read more into these than this:
    /// * `prompt=select_account` "forces the account picker to appear", also for a person
    ///   signed in with one account: a page where they must pick an account (or sign in) before
    ///   GitHub goes on. It is the only `prompt` value GitHub documents; any other is ignored
    ///   here, as GitHub documents no `login`, `consent` or `none` and no `max_age`.
    /// * After the picker GitHub goes on as usual: an app the account already authorized gets
    ///   its code at once, with no consent screen ([`Self::continue_as`]).
    /// * Without `prompt`, a person signed in with one account goes on as that account without
    ///   seeing anything. Several signed-in accounts always get the picker, and since 2024-06
    ///   so does every app whose callback is not `https://` ("native apps"). Neither is
    ///   modelled: the fake has one account cookie, and its callback is the proxy's loopback
    ///   `http://` one, so modelling the second would make every flow interactive and hide the
    ///   silent case a proxy must not trust.
    /// * `login` only suggests an account (it pre-fills GitHub's sign-in form, or asks whether
    ///   to switch when another is signed in); it forces nothing and proves nothing about who
    ///   signs in. The fake's picker drops it.
    /// * Nothing GitHub returns (the code, the token answer, `/user`) says whether any screen
    ///   was shown: no `auth_time`, no `amr`. A client knows what it asked for, never what
    ///   GitHub did. [`crate::FakeGitHub::screens_shown`] is the fake's own record of it, for
    ///   tests.
    fn authorize(&mut self, req: &RecordedRequest, params: &Params) -> Response {
        let ar = match self.validate_authorize(params) {
            Ok(ar) => ar,
            Err(resp) => return *resp,
        };
        match self.cookie_user(req) {
            Some(user) if param(params, "prompt") != Some("select_account") => {
                self.continue_as(&user, ar)
            }
            // The `login` hint is dropped so it cannot clash with the picker's buttons.
            _ => {
                self.screens.push(Screen::AccountPicker);
                pages::account_picker(&self.config.users, &without(params, &["prompt", "login"]))
            }
        }
    }

    /// Signed in: silently skip the consent page if the stored authorization covers the
    /// request (that is GitHub's behaviour), otherwise show it.
    ///
    /// What GitHub does, and the fake with it ("Authorizing OAuth apps" and "Scopes for OAuth
    /// apps" on docs.github.com):
    /// * the authorization is stored server-side per user and app, as the union of every scope
    ///   the user ever approved for the app;
    /// * each web flow mints its own token carrying the scopes requested *in that flow*
    ///   (normalized), not the union — "your OAuth app can perform the web flow for each use
    ///   case, requesting only the scopes needed"; GitHub keeps up to 10 tokens per
    ///   user/app/scope combination;
    /// * a flow without `scope` completes silently "with the set of scopes the user has
    ///   authorized for the application" (the union);
    /// * a flow asking for a scope the stored authorization does not cover shows the consent
    ///   page again (widely observed, not stated in the docs; a covered subset is silent).
    fn continue_as(&mut self, user: &FakeUser, mut ar: AuthRequest) -> Response {
        if let Some(granted) = self.authorizations.get(&user.login)
            && covers(granted, &ar.scopes)
        {
            if ar.scopes.is_empty() || self.skip_grants_whole_authorization {
                ar.scopes = granted.clone();
            }
            return self.issue_code(&user.login, ar);
        }
        self.screens.push(Screen::Consent);
        pages::consent(
            user,
            &self.config.client_id,
            ar.redirect_uri.as_str(),
            &ar.scopes,
            &without(&ar.params, &["prompt"]),
        )
    }

    fn issue_code(&mut self, login: &str, ar: AuthRequest) -> Response {
        let code = random_hex(10);
        self.codes.insert(
            code.clone(),
            CodeGrant {
                client_id: self.config.client_id.clone(),
                login: login.to_owned(),
                scopes: normalize(ar.scopes),
                redirect_uri_sent: ar.redirect_uri_sent,
                code_challenge: ar.code_challenge,
                expires_at: self.now() + CODE_TTL,
            },
        );
        redirect_to(
            &ar.redirect_uri,
            &[("code", Some(&code)), ("state", ar.state.as_deref())],
        )
    }

    fn login(&mut self, form: &Params) -> Response {
        let Some(user) = param(form, "login").and_then(|l| self.user(l)) else {
            return pages::bad_request("Incorrect username or password.");
        };
        let params = without(form, &["login", "prompt"]);
        let mut resp = match self.validate_authorize(&params) {
            Ok(ar) => self.continue_as(&user, ar),
            Err(resp) => *resp,
        };
        let cookie = format!(
            "{USER_COOKIE}={}; Path=/; HttpOnly; SameSite=Lax",
            user.login
        );
        if let Ok(value) = header::HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(header::SET_COOKIE, value);
        }
        resp
    }

    fn decision(&mut self, req: &RecordedRequest, form: &Params) -> Response {
        let Some(user) = self.cookie_user(req) else {
            return pages::bad_request("You must be signed in to authorize an application.");
        };
        let params = without(form, &["decision"]);
        let ar = match self.validate_authorize(&params) {
            Ok(ar) => ar,
            Err(resp) => return *resp,
        };
        match param(form, "decision") {
            Some("approve") => {
                let stored = self.authorizations.entry(user.login.clone()).or_default();
                stored.extend(ar.scopes.iter().cloned());
                *stored = normalize(std::mem::take(stored));
                self.issue_code(&user.login, ar)
            }
            Some("deny") => redirect_to(
                &ar.redirect_uri,
                &[
                    ("error", Some("access_denied")),
                    (
                        "error_description",
                        Some("The user has denied your application access."),
                    ),
                    (
                        "error_uri",
                        Some(&format!("{AUTHZ_ERRORS_DOC}/#access-denied")),
                    ),
                    ("state", ar.state.as_deref()),
                ],
            ),
            _ => pages::bad_request("Unknown decision."),
        }
    }

    // ---------------------------------------------------------------- token endpoint

    fn token(&mut self, req: &RecordedRequest) -> Response {
        let form = parse_params(&req.body);
        let wants_json = req
            .header("accept")
            .is_some_and(|a| a.contains("application/json"));
        let (client_id, secret) = basic_credentials(req).unwrap_or_else(|| {
            let get = |n| param(&form, n).unwrap_or_default().to_owned();
            (get("client_id"), get("client_secret"))
        });
        if client_id != self.config.client_id || secret != self.config.client_secret {
            return token_error(
                "incorrect_client_credentials",
                "The client_id and/or client_secret passed are incorrect.",
            );
        }
        match param(&form, "grant_type") {
            None | Some("authorization_code") => self.exchange_code(&form, wants_json),
            Some("refresh_token") => self.refresh_grant(&form, wants_json),
            Some(_) => token_error("unsupported_grant_type", "The grant type is not supported."),
        }
    }

    fn exchange_code(&mut self, form: &Params, wants_json: bool) -> Response {
        let bad_code = || {
            token_error(
                "bad_verification_code",
                "The code passed is incorrect or expired.",
            )
        };
        // Single use: a code is consumed by any exchange attempt that names it.
        let Some(grant) = param(form, "code").and_then(|c| self.codes.remove(c)) else {
            return bad_code();
        };
        if grant.expires_at <= self.now() || grant.client_id != self.config.client_id {
            return bad_code();
        }
        let sent = param(form, "redirect_uri");
        let mismatch = match (&grant.redirect_uri_sent, sent) {
            (Some(at_authorize), at_token) => at_token != Some(at_authorize.as_str()),
            (None, Some(at_token)) => at_token != self.config.callback_url,
            (None, None) => false,
        };
        if mismatch {
            return token_error(
                "redirect_uri_mismatch",
                "The redirect_uri MUST match the registered callback URL for this application.",
            );
        }
        let pkce_ok = match (&grant.code_challenge, param(form, "code_verifier")) {
            (Some(challenge), Some(verifier)) => {
                BASE64_URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())) == *challenge
            }
            (None, None) => true,
            _ => false,
        };
        if !pkce_ok {
            return bad_code();
        }
        let (access, refresh) = self.issue_tokens(&grant.login, grant.scopes);
        self.token_success(wants_json, &access, refresh.as_deref())
    }

    fn refresh_grant(&mut self, form: &Params, wants_json: bool) -> Response {
        let bad = || {
            token_error(
                "bad_refresh_token",
                "The refresh token passed is incorrect or expired.",
            )
        };
        if !self.config.expiring_tokens {
            return bad();
        }
        let Some(old) = param(form, "refresh_token").and_then(|r| self.refresh.remove(r)) else {
            return bad();
        };
        if old.expires_at <= self.now() {
            return bad();
        }
        // Rotation: the old refresh token is gone, and so is the old access token (its SSO
        // authorizations carry over to the new one).
        let sso: BTreeSet<String> = self
            .access
            .iter()
            .filter(|t| t.token == old.access_token)
            .flat_map(|t| t.sso_orgs.iter().cloned())
            .collect();
        self.access.retain(|t| t.token != old.access_token);
        let (access, refresh) = self.issue_tokens(&old.login, old.scopes);
        if let Some(t) = self.access.iter_mut().find(|t| t.token == access) {
            t.sso_orgs.extend(sso);
        }
        self.token_success(wants_json, &access, refresh.as_deref())
    }

    /// Mints an access token (and a refresh token in expiring mode), evicting the oldest
    /// tokens beyond GitHub's limit of 10 per user/app/scope.
    fn issue_tokens(&mut self, login: &str, scopes: BTreeSet<String>) -> (String, Option<String>) {
        let expiring = self.config.expiring_tokens;
        let scopes = if expiring { BTreeSet::new() } else { scopes };
        let same: Vec<String> = self
            .access
            .iter()
            .filter(|t| t.login == login && t.scopes == scopes)
            .map(|t| t.token.clone())
            .collect();
        let evict: Vec<String> = same
            .iter()
            .take((same.len() + 1).saturating_sub(TOKENS_PER_SCOPE))
            .cloned()
            .collect();
        if !evict.is_empty() {
            tracing::debug!(
                login,
                evicted = evict.len(),
                "fake GitHub evicts the oldest tokens"
            );
            self.access.retain(|t| !evict.contains(&t.token));
            self.refresh.retain(|_, r| !evict.contains(&r.access_token));
        }
        let now = self.now();
        let prefix = if expiring { "ghu_" } else { "gho_" };
        let token = format!("{prefix}{}", random_alnum(36));
        let refresh_token = expiring.then(|| format!("ghr_{}", random_alnum(76)));
        if let Some(rt) = &refresh_token {
            self.refresh.insert(
                rt.clone(),
                RefreshGrant {
                    login: login.to_owned(),
                    scopes: scopes.clone(),
                    access_token: token.clone(),
                    expires_at: now + Duration::from_secs(REFRESH_TTL_SECS),
                },
            );
        }
        let id = self.next_token_id;
        self.next_token_id += 1;
        let sso_orgs = self
            .sso_sessions
            .iter()
            .filter(|(_, l)| l.eq_ignore_ascii_case(login))
            .map(|(org, _)| org.clone())
            .collect();
        self.access.push(AccessToken {
            id,
            token: token.clone(),
            login: login.to_owned(),
            scopes,
            created_at: now,
            expires_at: expiring.then(|| now + Duration::from_secs(ACCESS_TTL_SECS)),
            sso_orgs,
        });
        self.issued.push((login.to_owned(), token.clone()));
        (token, refresh_token)
    }

    fn token_success(&self, wants_json: bool, access: &str, refresh: Option<&str>) -> Response {
        let scope = self
            .live_token(access)
            .map(|t| t.scopes.iter().cloned().collect::<Vec<_>>().join(","))
            .unwrap_or_default();
        let mut fields: Vec<(&str, Value)> = vec![("access_token", json!(access))];
        if let Some(rt) = refresh {
            fields.push(("expires_in", json!(ACCESS_TTL_SECS)));
            fields.push(("refresh_token", json!(rt)));
            fields.push(("refresh_token_expires_in", json!(REFRESH_TTL_SECS)));
        }
        fields.push(("scope", json!(scope)));
        fields.push(("token_type", json!("bearer")));
        if wants_json {
            let map: serde_json::Map<String, Value> =
                fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            return api_json(StatusCode::OK, Value::Object(map));
        }
        let mut ser = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &fields {
            match v {
                Value::String(s) => ser.append_pair(k, s),
                other => ser.append_pair(k, &other.to_string()),
            };
        }
        (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/x-www-form-urlencoded; charset=utf-8",
            )],
            ser.finish(),
        )
            .into_response()
    }

    fn live_token(&self, token: &str) -> Option<&AccessToken> {
        let now = self.now();
        self.access
            .iter()
            .find(|t| t.token == token && t.expires_at.is_none_or(|e| e > now))
    }
}
