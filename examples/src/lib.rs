//! A fake GitHub OAuth server that behaves like the real github.com.
//!
//! It is used by the workspace's integration tests (real HTTP on an ephemeral loopback port)
//! and by the proxy's offline `demo` command. It imitates exactly the GitHub behaviour the proxy
//! must cope with (see `mcp-auth-spec-notes.md` §7):
//!
//! * the OAuth App web flow: `/login/oauth/authorize` with an account picker, GitHub's own
//!   consent page and — most importantly — a **silent skip** of that consent page for a user who
//!   already authorized the app. That skip is what makes confused-deputy attacks on an OAuth
//!   proxy possible, so security tests depend on it;
//! * GitHub's non-exact `redirect_uri` rule (same scheme, host and port; path equal to or under
//!   the registered callback) and its error redirects to the *registered* callback;
//! * PKCE with `S256` only;
//! * a token endpoint that answers every error with **HTTP 200** and an `error` field, returns
//!   form-encoded bodies unless JSON is asked for, comma-separated scopes, client credentials in
//!   the body or via HTTP Basic, and the "10 tokens per user/app/scope" eviction;
//! * optional GitHub App style expiring `ghu_` tokens with rotating `ghr_` refresh tokens;
//! * `GET /api/v3/user` (GHES-style prefix) with the `User-Agent` requirement and
//!   `X-OAuth-Scopes`, and the OAuth-application API (`DELETE …/grant`, `POST`/`DELETE …/token`
//!   with "Check a token" answering GitHub's authorization object, not charged to the person's
//!   rate limit);
//! * per-token scopes: each web flow mints a token with exactly the (normalized) scopes it
//!   asked for, while the stored authorization is the union that decides the silent skip;
//! * organizations and teams ([`FakeOrg`], [`FakeTeam`]): `GET /user/orgs`,
//!   `GET /users/{username}/orgs`, `GET /user/memberships/orgs/{org}`, `GET /user/teams`,
//!   `GET /orgs/{org}/teams/{slug}/memberships/{username}`, with GitHub's scope rules, pending
//!   invitations, visibility and SAML SSO enforcement (`X-GitHub-SSO`);
//! * the primary and secondary rate limits (`x-ratelimit-*`, 403/429, `retry-after`) and an
//!   outage switch ([`Reachability`]).
//!
//! Tests change that world mid-run through [`FakeGitHub`]'s methods, or over HTTP under
//! `/_fake/` (listed in `server/control.rs`).
//!
//! Every request is recorded before it is handled, and any request carrying one of the
//! configured forbidden markers (the proxy's own token prefixes) is refused and listed by
//! [`FakeGitHub::violations`], so tests can assert that no proxy token ever reached "GitHub".

pub mod backend;
mod gate;
mod model;
mod pages;
mod server;
#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use std::collections::BTreeSet;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use model::{
    FakeOrg, FakeOrgMember, FakeTeam, FakeTeamMember, MembershipState, OrgRole, Reachability,
    TeamPrivacy, TeamRole,
};
pub use server::Screen;
use server::{FakeState, ServerState, Shared, lock};

/// The proxy's token prefixes; none of them may ever reach GitHub.
pub const DEFAULT_FORBIDDEN_MARKERS: [&str; 5] =
    ["mcpat_", "mcprt_", "mcpac_", "mcpbt_", "mcpc_secret_"];

/// A GitHub account known to the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeUser {
    pub id: u64,
    pub login: String,
    pub name: String,
}

impl FakeUser {
    pub fn new(id: u64, login: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            id,
            login: login.into(),
            name: name.into(),
        }
    }
}

/// Configuration of the single OAuth application registered at the fake.
#[derive(Debug, Clone)]
pub struct FakeGitHubConfig {
    pub client_id: String,
    pub client_secret: String,
    /// The single registered OAuth callback URL (the proxy's), e.g.
    /// `http://127.0.0.1:8080/callback/github`. `redirect_uri` matching follows GitHub's rule
    /// (same scheme+host+port, path equal to or under the callback path); if `redirect_uri` is
    /// omitted, the registered callback is used.
    pub callback_url: String,
    pub users: Vec<FakeUser>,
    /// `false` = OAuth App (`gho_` tokens never expire, no refresh token); `true` = GitHub App
    /// user tokens: `expires_in` 28800, `refresh_token` `ghr_…`, `refresh_token_expires_in`
    /// 15897600, scope `""`. A refresh rotates: the old refresh token AND the old access token
    /// stop working.
    pub expiring_tokens: bool,
    /// Substrings that must never arrive (proxy tokens); see [`DEFAULT_FORBIDDEN_MARKERS`].
    pub forbidden_markers: Vec<String>,
    /// Organizations with their memberships.
    pub orgs: Vec<FakeOrg>,
    /// Teams (each names its organization by login).
    pub teams: Vec<FakeTeam>,
}

impl FakeGitHubConfig {
    /// Users alice (1001), mallory (1002) and bob (1003), default markers, OAuth App tokens;
    /// organization `acme` (5001) with alice (public membership) and bob (private) as active
    /// members and mallory outside; team `acme/platform` (7001) with bob.
    pub fn demo(
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
        callback_url: impl Into<String>,
    ) -> Self {
        Self {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            callback_url: callback_url.into(),
            users: vec![
                FakeUser::new(1001, "alice", "Alice Example"),
                FakeUser::new(1002, "mallory", "Mallory Attacker"),
                FakeUser::new(1003, "bob", "Bob Builder"),
            ],
            expiring_tokens: false,
            forbidden_markers: DEFAULT_FORBIDDEN_MARKERS.map(String::from).to_vec(),
            orgs: vec![
                FakeOrg::new(5001, "acme")
                    .public_member("alice")
                    .member("bob"),
            ],
            teams: vec![FakeTeam::new("acme", "platform", 7001, "Platform").member("bob")],
        }
    }
}

/// One HTTP request as received by the fake (header names are lower-case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RecordedRequest {
    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without the query string.
    pub fn path(&self) -> &str {
        self.path_and_query
            .split_once('?')
            .map_or(self.path_and_query.as_str(), |(p, _)| p)
    }
}

/// Handle to a running fake GitHub. Cheap to clone; the server stops when [`shutdown`] is
/// called or when the last clone is dropped.
///
/// [`shutdown`]: FakeGitHub::shutdown
#[derive(Clone)]
pub struct FakeGitHub {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Shared,
    gate: Arc<gate::Gate>,
    base_url: String,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for FakeGitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeGitHub")
            .field("base_url", &self.inner.base_url)
            .finish_non_exhaustive()
    }
}

impl FakeGitHub {
    /// Starts the fake on an ephemeral port of 127.0.0.1.
    pub async fn start(config: FakeGitHubConfig) -> std::io::Result<FakeGitHub> {
        Self::start_on(config, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts the fake on the given address.
    pub async fn start_on(
        config: FakeGitHubConfig,
        addr: SocketAddr,
    ) -> std::io::Result<FakeGitHub> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let shared: Shared = Arc::new(Mutex::new(FakeState::new(config)));
        let gate = Arc::new(gate::Gate::default());
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(ServerState {
                shared: shared.clone(),
                gate: gate.clone(),
            });
        let listener = gate::GatedListener {
            inner: listener,
            gate: gate.clone(),
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    // Resolves on an explicit stop and when the last handle is dropped.
                    let _ = stop_rx.await;
                })
                .await;
            if let Err(err) = served {
                tracing::warn!(%err, "fake GitHub server stopped with an error");
            }
        });
        tracing::debug!(%local, "fake GitHub listening");
        Ok(FakeGitHub {
            inner: Arc::new(Inner {
                shared,
                gate,
                base_url: format!("http://{local}"),
                stop: Mutex::new(Some(stop_tx)),
                task: Mutex::new(Some(task)),
            }),
        })
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> String {
        self.inner.base_url.clone()
    }

    pub fn authorize_url(&self) -> String {
        format!("{}{}", self.inner.base_url, server::AUTHORIZE_PATH)
    }

    pub fn token_url(&self) -> String {
        format!("{}{}", self.inner.base_url, server::TOKEN_PATH)
    }

    /// GHES-style API prefix: `base + "/api/v3"`.
    pub fn api_url(&self) -> String {
        format!("{}{}", self.inner.base_url, server::API_PREFIX)
    }

    /// Replaces the registered callback (the proxy's port is known only after the fake starts).
    pub fn set_callback_url(&self, url: &str) {
        self.state().config.callback_url = url.to_owned();
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().requests.clone()
    }

    /// A description of each request that contained a forbidden marker anywhere.
    pub fn violations(&self) -> Vec<String> {
        self.state().violations.clone()
    }

    /// Number of POSTs to the token endpoint.
    pub fn token_requests(&self) -> usize {
        self.state().token_requests
    }

    /// The pages the person was shown at the authorize endpoint, in order: the account picker
    /// (no account cookie, or `prompt=select_account`) and GitHub's own consent page. An
    /// authorize request that went straight back to the callback adds nothing. Real GitHub
    /// tells its client none of this (see the authorize handler's notes).
    pub fn screens_shown(&self) -> Vec<Screen> {
        self.state().screens.clone()
    }

    /// Whether the user has a stored authorization of the app.
    pub fn has_authorized(&self, login: &str) -> bool {
        self.state().authorizations.contains_key(login)
    }

    /// Like the user having authorized the app at github.com for `scopes` earlier (through
    /// any flow): later requests these cover complete silently.
    pub fn authorize_app(&self, login: &str, scopes: &[&str]) {
        self.state()
            .authorizations
            .entry(login.to_owned())
            .or_default()
            .extend(scopes.iter().map(|s| (*s).to_owned()));
    }

    /// `true`: a silently completed request gets a token with the user's whole authorization,
    /// not only the scopes it asked for (what GitHub documents for a request without
    /// `scope`; proxies must not rely on the narrower answer).
    pub fn set_skip_grants_whole_authorization(&self, on: bool) {
        self.state().skip_grants_whole_authorization = on;
    }

    /// Like the user revoking the app at github.com: all of the user's tokens (and pending
    /// codes) stop working and the authorization is forgotten.
    pub fn revoke_tokens_of(&self, login: &str) {
        self.state().revoke_user(login);
    }

    /// Every access token ever handed out for that user, oldest first (revoked ones included).
    pub fn issued_access_tokens(&self, login: &str) -> Vec<String> {
        self.state()
            .issued
            .iter()
            .filter(|(l, _)| l == login)
            .map(|(_, t)| t.clone())
            .collect()
    }

    pub fn set_expiring_tokens(&self, on: bool) {
        self.state().config.expiring_tokens = on;
    }

    /// Moves the fake's own wall clock forward (to expire codes and tokens without sleeping).
    pub fn advance_time(&self, by: Duration) {
        self.state().time_offset += by;
    }

    /// The scopes of a live token, as GitHub would report them (`None` for an unknown,
    /// revoked or expired token).
    pub fn token_scopes(&self, token: &str) -> Option<BTreeSet<String>> {
        self.state().token_scopes(token)
    }

    /// The union of scopes the user has authorized for the app (what decides the silent
    /// skip), or `None` if the user has not authorized it.
    pub fn authorized_scopes(&self, login: &str) -> Option<BTreeSet<String>> {
        self.state().authorizations.get(login).cloned()
    }

    // ------------------------------------------------------------ organizations and teams

    /// Adds an organization (or replaces the one with the same login).
    pub fn add_org(&self, org: FakeOrg) {
        let mut st = self.state();
        st.config
            .orgs
            .retain(|o| !o.login.eq_ignore_ascii_case(&org.login));
        st.config.orgs.push(org);
    }

    /// Adds a team (or replaces the one with the same org and slug).
    pub fn add_team(&self, team: FakeTeam) {
        let mut st = self.state();
        st.config.teams.retain(|t| {
            !(t.org.eq_ignore_ascii_case(&team.org) && t.slug.eq_ignore_ascii_case(&team.slug))
        });
        st.config.teams.push(team);
    }

    /// Adds or replaces a membership of `org`; `false` if the organization is unknown.
    pub fn set_org_membership(&self, org: &str, member: FakeOrgMember) -> bool {
        self.state().set_org_member(org, member)
    }

    /// The person becomes an active, private member with the `member` role.
    pub fn add_org_member(&self, org: &str, login: &str) -> bool {
        self.set_org_membership(org, FakeOrgMember::active(login))
    }

    /// The person is invited (membership `pending`, not a member yet).
    pub fn invite_org_member(&self, org: &str, login: &str) -> bool {
        self.set_org_membership(org, FakeOrgMember::pending(login))
    }

    /// The person leaves the organization (and, as on GitHub, its teams).
    pub fn remove_org_member(&self, org: &str, login: &str) -> bool {
        self.state().remove_org_member(org, login)
    }

    /// The person's current membership of `org`, if any.
    pub fn org_membership(&self, org: &str, login: &str) -> Option<FakeOrgMember> {
        let st = self.state();
        st.org(org)?
            .members
            .iter()
            .find(|m| m.login.eq_ignore_ascii_case(login))
            .cloned()
    }

    /// Adds or updates a team membership; `false` if the team is unknown.
    pub fn set_team_membership(
        &self,
        org: &str,
        slug: &str,
        login: &str,
        state: MembershipState,
        role: TeamRole,
    ) -> bool {
        self.state().set_team_member(org, slug, login, state, role)
    }

    /// The person becomes an active team member.
    pub fn add_team_member(&self, org: &str, slug: &str, login: &str) -> bool {
        self.set_team_membership(org, slug, login, MembershipState::Active, TeamRole::Member)
    }

    pub fn remove_team_member(&self, org: &str, slug: &str, login: &str) -> bool {
        self.state().remove_team_member(org, slug, login)
    }

    // ------------------------------------------------------------ SAML SSO

    /// Switches SAML SSO enforcement of `org`.
    pub fn set_sso_enforced(&self, org: &str, enforced: bool) -> bool {
        self.state().set_sso_enforced(org, enforced)
    }

    /// The person signs in to `org`'s identity provider: tokens issued from now on are
    /// SSO-authorized for it; tokens issued before are not (GitHub: "you must reauthorize any
    /// OAuth apps"). This is also what opening the `X-GitHub-SSO` URL does.
    pub fn sso_sign_in(&self, org: &str, login: &str) {
        self.state()
            .sso_sessions
            .insert((org.to_ascii_lowercase(), login.to_ascii_lowercase()));
    }

    /// [`sso_sign_in`](Self::sso_sign_in) and every current token of the person authorized.
    pub fn sso_authorize_user(&self, org: &str, login: &str) -> bool {
        self.state().sso_authorize_user(org, login)
    }

    /// SSO-authorizes one token for `org`; `false` if the token is unknown.
    pub fn sso_authorize_token(&self, org: &str, token: &str) -> bool {
        self.state().sso_authorize_token(org, token)
    }

    /// Ends the person's SAML session for `org` and removes every token's authorization.
    pub fn sso_revoke_user(&self, org: &str, login: &str) {
        self.state().sso_revoke(org, login);
    }

    // ------------------------------------------------------------ rate limits and outages

    /// The primary rate limit per person and hour (GitHub: 5,000), enforced from now on.
    ///
    /// The fake always counts user-token requests and reports them in the `x-ratelimit-*`
    /// headers, but refuses requests over the limit only once a test has called this,
    /// [`set_rate_limit_remaining`](Self::set_rate_limit_remaining) or
    /// [`exhaust_rate_limit`](Self::exhaust_rate_limit) (the benchmarks run far more flows per
    /// person than GitHub allows in an hour).
    pub fn set_rate_limit(&self, limit: u64) {
        let mut st = self.state();
        st.rate.limit = limit;
        st.rate.enforce = true;
    }

    /// Leaves `remaining` requests in the person's current window and turns enforcement on
    /// (0: the next user-token request is refused until `x-ratelimit-reset`;
    /// [`advance_time`](Self::advance_time) past it to recover).
    pub fn set_rate_limit_remaining(&self, login: &str, remaining: u64) {
        let mut st = self.state();
        let now = st.now_for_controls();
        st.rate.set_remaining(login, remaining, now);
    }

    /// [`set_rate_limit_remaining`](Self::set_rate_limit_remaining) with 0.
    pub fn exhaust_rate_limit(&self, login: &str) {
        self.set_rate_limit_remaining(login, 0);
    }

    /// Requests charged to the person in the current window.
    pub fn rate_limit_used(&self, login: &str) -> u64 {
        let mut st = self.state();
        let now = st.now_for_controls();
        st.rate.used(login, now)
    }

    /// Every person's window starts afresh.
    pub fn reset_rate_limits(&self) {
        self.state().rate.reset_all();
    }

    /// Answer rate-limited requests with 429 instead of GitHub's usual 403.
    pub fn set_rate_limit_status_429(&self, on: bool) {
        self.state().rate.status = if on {
            axum::http::StatusCode::TOO_MANY_REQUESTS
        } else {
            axum::http::StatusCode::FORBIDDEN
        };
    }

    /// `Some(d)`: every user-token request hits a secondary rate limit with `retry-after`
    /// `d` (whole seconds); `None` lifts it.
    pub fn set_secondary_rate_limit(&self, retry_after: Option<Duration>) {
        self.state().rate.secondary_retry_after = retry_after.map(|d| d.as_secs());
    }

    /// Simulates a GitHub outage (see [`Reachability`]); applies to every path, the browser
    /// pages included.
    pub fn set_reachability(&self, mode: Reachability) {
        self.inner.gate.set(mode);
    }

    pub fn reachability(&self) -> Reachability {
        self.inner.gate.mode()
    }

    /// Connections dropped and requests refused with 503 during outages.
    pub fn refused_during_outage(&self) -> usize {
        self.inner.gate.refused()
    }

    /// Graceful stop: waits (at most 5 s) for the server task to finish.
    pub async fn shutdown(self) {
        let stop = self
            .inner
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        lock(&self.inner.shared)
    }
}
