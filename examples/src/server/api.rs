//! The REST API under `/api/v3` (GHES-style prefix), answered the way api.github.com answers.
//!
//! Every request needs a `User-Agent`. Requests with a user token (`Authorization: Bearer` or
//! `token`) are authenticated, charged to the person's primary rate limit and answered with
//! `X-OAuth-Scopes` (the presented token's own scopes, OAuth App tokens only),
//! `X-Accepted-OAuth-Scopes` (what the endpoint checks) and the `x-ratelimit-*` headers.
//! The OAuth-application API (`/applications/{client_id}/…`) authenticates the app with HTTP
//! Basic instead and is never charged to the person's rate limit.
//!
//! Facts this follows, and where they come from:
//! * `GET /user/orgs` needs a scope among `admin:org, read:org, repo, user, write:org`;
//!   without one GitHub answers 403 "You need at least read:org scope or user scope to list
//!   your organizations." (REST docs "List organizations for the authenticated user"; the
//!   message as quoted in many public bug reports, e.g. octokit/octokit.rb#957). It lists the
//!   organizations the person belongs to, public and private memberships alike (developer.
//!   github.com changes 2014-12-08); an invitation (pending) is not a membership.
//!   `GET /users/{username}/orgs` lists only public memberships.
//! * `GET /user/memberships/orgs/{org}`: "If the authenticated user is an active or pending
//!   member of the organization, this endpoint will return the user's membership. If the
//!   authenticated user is not affiliated with the organization, a 404 is returned." The fake
//!   requires `read:org` (or `write:org`/`admin:org`) and answers 403 without it.
//! * `GET /user/teams` "requires user, repo, or read:org scope" (REST description).
//! * `GET /orgs/{org}/teams/{slug}/memberships/{username}`: "the team must be visible to the
//!   authenticated user"; the response carries `state` and `role`, and "the role for
//!   organization owners is set to maintainer"; 404 when there is no membership. Team
//!   endpoints need `read:org`; GitHub documents only 200/404 here, so a token without it, or
//!   a caller who cannot see the team, gets 404.
//! * SAML SSO ("Authenticating to the REST API", "About authentication with SAML single
//!   sign-on"): a token not authorized for an SSO-enforcing organization gets 403 with
//!   `X-GitHub-SSO: required; url=…` on that organization's resources, and listings that
//!   span organizations leave the organization out and say `X-GitHub-SSO: partial-results;
//!   organizations=<ids>`. An OAuth App token is SSO-authorized only if the person had an
//!   active SAML session when the app was authorized; a later SAML sign-in does not authorize
//!   tokens issued before it ("you must reauthorize any OAuth apps").
//! * Rate limits ("Rate limits for the REST API"): 5,000 requests per hour per person, shared
//!   by every app acting for them; over it, 403 or 429 with `x-ratelimit-remaining: 0` and
//!   `x-ratelimit-reset`; a secondary limit answers 403 or 429 with `retry-after`.
//! * "Check a token": Basic auth with the app's `client_id:client_secret`, "without exceeding
//!   the normal rate limits"; "Invalid tokens will return 404 NOT FOUND".

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    FakeState, api_json, bad_credentials, basic_credentials, bearer_token, grants, random_hex,
};
use crate::{
    FakeOrg, FakeOrgMember, FakeTeam, FakeUser, MembershipState, OrgRole, RecordedRequest,
    TeamPrivacy, TeamRole, pages,
};

const DOCS: &str = "https://docs.github.com/rest";
const RATE_DOCS: &str = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api";
const SSO_DOCS: &str = "https://docs.github.com/articles/authenticating-to-a-github-organization-with-saml-single-sign-on/";
/// GitHub's message on a 403 for SAML enforcement, for OAuth tokens.
pub(crate) const SSO_MESSAGE: &str = "Resource protected by organization SAML enforcement. You must grant your OAuth token access to this organization.";
const WINDOW: Duration = Duration::from_secs(3600);
/// The primary rate limit of an authenticated person.
pub(crate) const DEFAULT_RATE_LIMIT: u64 = 5000;

/// Per-person primary rate limit windows, and the switches of the secondary limit.
///
/// Every user-token request is counted against GitHub's 5,000 per person and hour and the
/// count is reported in the `x-ratelimit-*` headers, but a request over the limit is refused
/// only once `enforce` is on (a test touched the limit): the workspace's benchmarks run far
/// more flows per person than GitHub would allow in an hour.
#[derive(Debug)]
pub(crate) struct RateLimits {
    pub(crate) limit: u64,
    pub(crate) enforce: bool,
    /// 403 (GitHub's usual answer) or 429.
    pub(crate) status: StatusCode,
    /// `Some(seconds)`: every user-token request hits a secondary rate limit.
    pub(crate) secondary_retry_after: Option<u64>,
    windows: HashMap<String, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    reset: SystemTime,
    used: u64,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            limit: DEFAULT_RATE_LIMIT,
            enforce: false,
            status: StatusCode::FORBIDDEN,
            secondary_retry_after: None,
            windows: HashMap::new(),
        }
    }
}

fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl RateLimits {
    fn window(&mut self, login: &str, now: SystemTime) -> &mut Window {
        let w = self
            .windows
            .entry(login.to_ascii_lowercase())
            .or_insert(Window {
                reset: now + WINDOW,
                used: 0,
            });
        if now >= w.reset {
            *w = Window {
                reset: now + WINDOW,
                used: 0,
            };
        }
        w
    }

    /// Requests charged to the person in the current window.
    pub(crate) fn used(&mut self, login: &str, now: SystemTime) -> u64 {
        self.window(login, now).used
    }

    /// Leaves `remaining` requests in the person's current window.
    pub(crate) fn set_remaining(&mut self, login: &str, remaining: u64, now: SystemTime) {
        let limit = self.limit;
        self.enforce = true;
        self.window(login, now).used = limit.saturating_sub(remaining);
    }

    pub(crate) fn reset_all(&mut self) {
        self.windows.clear();
    }

    fn headers(&self, w: Window) -> Vec<(&'static str, String)> {
        vec![
            ("x-ratelimit-limit", self.limit.to_string()),
            (
                "x-ratelimit-remaining",
                self.limit.saturating_sub(w.used).to_string(),
            ),
            ("x-ratelimit-used", w.used.to_string()),
            ("x-ratelimit-reset", epoch_secs(w.reset).to_string()),
            ("x-ratelimit-resource", "core".to_owned()),
        ]
    }

    /// Charges one request, or answers the way GitHub does when the person is over a limit.
    fn charge(
        &mut self,
        user: &FakeUser,
        now: SystemTime,
    ) -> Result<Vec<(&'static str, String)>, Box<Response>> {
        let limit = self.limit;
        let status = self.status;
        let secondary = self.secondary_retry_after;
        let w = *self.window(&user.login, now);
        if let Some(retry_after) = secondary {
            let mut resp = api_error(
                status,
                "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                &format!("{RATE_DOCS}#about-secondary-rate-limits"),
            );
            let mut headers = self.headers(w);
            headers.push(("retry-after", retry_after.to_string()));
            set_headers(&mut resp, &headers);
            return Err(Box::new(resp));
        }
        if self.enforce && w.used >= limit {
            let mut resp = api_error(
                status,
                &format!("API rate limit exceeded for user ID {}.", user.id),
                RATE_DOCS,
            );
            set_headers(&mut resp, &self.headers(w));
            return Err(Box::new(resp));
        }
        let w = self.window(&user.login, now);
        w.used += 1;
        let w = *w;
        Ok(self.headers(w))
    }
}

/// GitHub's error body: `message`, `documentation_url`, `status` (a string).
pub(crate) fn api_error(status: StatusCode, message: &str, doc: &str) -> Response {
    api_json(
        status,
        json!({"message": message, "documentation_url": doc, "status": status.as_u16().to_string()}),
    )
}

fn not_found() -> Response {
    api_error(StatusCode::NOT_FOUND, "Not Found", DOCS)
}

fn set_headers(resp: &mut Response, headers: &[(&'static str, String)]) {
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            resp.headers_mut().insert(*name, v);
        }
    }
}

/// `http://host` as the client addressed the fake.
fn site_base(req: &RecordedRequest) -> String {
    format!("http://{}", req.header("host").unwrap_or("127.0.0.1"))
}

fn api_base(req: &RecordedRequest) -> String {
    format!("{}{}", site_base(req), super::API_PREFIX)
}

/// ISO 8601 UTC (`2011-09-06T17:26:27Z`), as GitHub formats timestamps.
pub(crate) fn iso8601(t: SystemTime) -> String {
    let secs = epoch_secs(t);
    let days = i64::try_from(secs / 86_400).unwrap_or_default();
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// The presented token, as far as an endpoint needs to know it.
struct Caller {
    token: String,
    user: FakeUser,
    scopes: BTreeSet<String>,
    /// OAuth App tokens (`gho_`) report `X-OAuth-Scopes`; GitHub App user tokens have none.
    reports_scopes: bool,
    sso_orgs: BTreeSet<String>,
}

impl Caller {
    /// Whether the token passes an endpoint's scope check. GitHub App user tokens (`ghu_`)
    /// have no scopes but the app's fine-grained permissions, which the fake does not model:
    /// they pass every check.
    fn has_any(&self, scopes: &[&str]) -> bool {
        !self.reports_scopes || scopes.iter().any(|s| grants(&self.scopes, s))
    }

    fn sso_blocked(&self, org: &FakeOrg) -> bool {
        org.sso_enforced && !self.sso_orgs.contains(&org.login.to_ascii_lowercase())
    }
}

fn same(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn member_of<'a>(org: &'a FakeOrg, login: &str) -> Option<&'a FakeOrgMember> {
    org.members.iter().find(|m| same(&m.login, login))
}

fn active_member(org: &FakeOrg, login: &str) -> bool {
    member_of(org, login).is_some_and(|m| m.state == MembershipState::Active)
}

fn active_admin(org: &FakeOrg, login: &str) -> bool {
    member_of(org, login)
        .is_some_and(|m| m.state == MembershipState::Active && m.role == OrgRole::Admin)
}

impl FakeState {
    pub(crate) fn org(&self, login: &str) -> Option<&FakeOrg> {
        self.config.orgs.iter().find(|o| same(&o.login, login))
    }

    fn team(&self, org: &str, slug: &str) -> Option<&FakeTeam> {
        self.config
            .teams
            .iter()
            .find(|t| same(&t.org, org) && same(&t.slug, slug))
    }

    pub(super) fn api(&mut self, req: &RecordedRequest, path: &str) -> Response {
        if req
            .header("user-agent")
            .is_none_or(|ua| ua.trim().is_empty())
        {
            return api_json(
                StatusCode::FORBIDDEN,
                json!({"message": "Request forbidden by administrative rules. Please make sure your request has a User-Agent header"}),
            );
        }
        let app_route = path
            .strip_prefix("/applications/")
            .and_then(|rest| rest.split_once('/'));
        if let Some((client_id, what @ ("grant" | "token"))) = app_route {
            let method = req.method.clone();
            return self.application_api(req, &method, client_id, what);
        }
        self.user_api(req, path)
    }

    fn authenticate(&self, req: &RecordedRequest) -> Result<Caller, Box<Response>> {
        let Some(token) = bearer_token(req) else {
            return Err(Box::new(api_error(
                StatusCode::UNAUTHORIZED,
                "Requires authentication",
                DOCS,
            )));
        };
        self.live_token(&token)
            .and_then(|t| {
                Some(Caller {
                    token: t.token.clone(),
                    user: self.user(&t.login)?,
                    scopes: t.scopes.clone(),
                    reports_scopes: t.token.starts_with("gho_"),
                    sso_orgs: t.sso_orgs.clone(),
                })
            })
            .ok_or_else(|| Box::new(bad_credentials()))
    }

    /// Authenticate, charge the rate limit, answer, and add GitHub's headers.
    fn user_api(&mut self, req: &RecordedRequest, path: &str) -> Response {
        let caller = match self.authenticate(req) {
            Ok(caller) => caller,
            Err(resp) => return *resp,
        };
        let now = self.now();
        let (mut resp, accepted, rate) = match self.rate.charge(&caller.user, now) {
            Ok(rate) => {
                let (resp, accepted) = self.user_route(req, path, &caller);
                (resp, accepted, rate)
            }
            Err(resp) => (*resp, "", Vec::new()),
        };
        let mut headers = rate;
        if caller.reports_scopes {
            let scopes: Vec<&str> = caller.scopes.iter().map(String::as_str).collect();
            headers.push(("x-oauth-scopes", scopes.join(", ")));
        }
        headers.push(("x-accepted-oauth-scopes", accepted.to_owned()));
        headers.push(("x-github-media-type", "github.v3; format=json".to_owned()));
        set_headers(&mut resp, &headers);
        resp
    }

    /// The answer and the endpoint's `X-Accepted-OAuth-Scopes`.
    fn user_route(
        &mut self,
        req: &RecordedRequest,
        path: &str,
        caller: &Caller,
    ) -> (Response, &'static str) {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (req.method.as_str(), segments.as_slice()) {
            ("GET", ["user"]) => (api_json(StatusCode::OK, self.user_json(&caller.user)), ""),
            ("GET", ["user", "orgs"]) => (
                self.list_user_orgs(req, caller),
                "admin:org, read:org, repo, user, write:org",
            ),
            ("GET", ["users", login, "orgs"]) => (self.list_public_orgs(req, login), ""),
            ("GET", ["user", "memberships", "orgs", org]) => (
                self.own_org_membership(req, caller, org),
                "admin:org, read:org, write:org",
            ),
            ("GET", ["user", "teams"]) => (
                self.list_user_teams(req, caller),
                "admin:org, read:org, repo, user, write:org",
            ),
            ("GET", ["orgs", org, "teams", slug, "memberships", login]) => (
                self.team_membership(req, caller, org, slug, login),
                "admin:org, read:org, write:org",
            ),
            _ => (not_found(), ""),
        }
    }

    pub(super) fn user_json(&self, user: &FakeUser) -> Value {
        json!({
            "login": user.login,
            "id": user.id,
            "node_id": format!("U_fake{}", user.id),
            "avatar_url": format!("https://avatars.githubusercontent.com/u/{}?v=4", user.id),
            "html_url": format!("https://github.com/{}", user.login),
            "name": user.name,
            "type": "User",
            "site_admin": false,
        })
    }

    fn org_json(req: &RecordedRequest, org: &FakeOrg) -> Value {
        let api = api_base(req);
        let o = &org.login;
        json!({
            "login": o,
            "id": org.id,
            "node_id": format!("O_fake{}", org.id),
            "url": format!("{api}/orgs/{o}"),
            "repos_url": format!("{api}/orgs/{o}/repos"),
            "events_url": format!("{api}/orgs/{o}/events"),
            "hooks_url": format!("{api}/orgs/{o}/hooks"),
            "issues_url": format!("{api}/orgs/{o}/issues"),
            "members_url": format!("{api}/orgs/{o}/members{{/member}}"),
            "public_members_url": format!("{api}/orgs/{o}/public_members{{/member}}"),
            "avatar_url": format!("https://avatars.githubusercontent.com/u/{}?v=4", org.id),
            "description": null,
        })
    }

    fn team_json(req: &RecordedRequest, team: &FakeTeam, org: &FakeOrg) -> Value {
        let api = api_base(req);
        let team_url = format!("{api}/organizations/{}/team/{}", org.id, team.id);
        let members = team
            .members
            .iter()
            .filter(|m| m.state == MembershipState::Active)
            .count();
        json!({
            "id": team.id,
            "node_id": format!("T_fake{}", team.id),
            "url": team_url,
            "html_url": format!("{}/orgs/{}/teams/{}", site_base(req), org.login, team.slug),
            "name": team.name,
            "slug": team.slug,
            "description": null,
            "privacy": team.privacy.as_str(),
            "notification_setting": "notifications_enabled",
            "permission": "pull",
            "members_url": format!("{team_url}/members{{/member}}"),
            "repositories_url": format!("{team_url}/repos"),
            "parent": null,
            "members_count": members,
            "repos_count": 0,
            "organization": Self::org_json(req, org),
        })
    }

    /// `X-GitHub-SSO: partial-results; organizations=…` when some organizations were left out.
    fn partial_results(resp: &mut Response, left_out: &[u64]) {
        if left_out.is_empty() {
            return;
        }
        let ids: Vec<String> = left_out.iter().map(u64::to_string).collect();
        let value = format!("partial-results; organizations={}", ids.join(","));
        set_headers(resp, &[("x-github-sso", value)]);
    }

    /// 403 with `X-GitHub-SSO: required; url=…`; the URL (on the fake) lets the person start a
    /// SAML session for the organization (see [`FakeState::sso_page`]).
    fn sso_required(&mut self, req: &RecordedRequest, org: &FakeOrg, caller: &Caller) -> Response {
        let id = random_hex(20);
        self.sso_requests.insert(
            id.clone(),
            (org.login.to_ascii_lowercase(), caller.token.clone()),
        );
        let url = format!(
            "{}/orgs/{}/sso?authorization_request={id}",
            site_base(req),
            org.login
        );
        let mut resp = api_error(StatusCode::FORBIDDEN, SSO_MESSAGE, SSO_DOCS);
        set_headers(
            &mut resp,
            &[("x-github-sso", format!("required; url={url}"))],
        );
        resp
    }

    fn list_user_orgs(&self, req: &RecordedRequest, caller: &Caller) -> Response {
        if !caller.has_any(&["read:org", "user", "repo"]) {
            return api_error(
                StatusCode::FORBIDDEN,
                "You need at least read:org scope or user scope to list your organizations.",
                "https://docs.github.com/rest/orgs/orgs#list-organizations-for-the-authenticated-user",
            );
        }
        let mut left_out = Vec::new();
        let mut list = Vec::new();
        for org in &self.config.orgs {
            if !active_member(org, &caller.user.login) {
                continue;
            }
            if caller.sso_blocked(org) {
                left_out.push(org.id);
            } else {
                list.push(Self::org_json(req, org));
            }
        }
        let mut resp = api_json(StatusCode::OK, Value::Array(list));
        Self::partial_results(&mut resp, &left_out);
        resp
    }

    fn list_public_orgs(&self, req: &RecordedRequest, login: &str) -> Response {
        if !self.config.users.iter().any(|u| same(&u.login, login)) {
            return not_found();
        }
        let list: Vec<Value> = self
            .config
            .orgs
            .iter()
            .filter(|o| {
                member_of(o, login).is_some_and(|m| m.state == MembershipState::Active && m.public)
            })
            .map(|o| Self::org_json(req, o))
            .collect();
        api_json(StatusCode::OK, Value::Array(list))
    }

    fn own_org_membership(
        &mut self,
        req: &RecordedRequest,
        caller: &Caller,
        org: &str,
    ) -> Response {
        let Some(org) = self.org(org).cloned() else {
            return not_found();
        };
        if !caller.has_any(&["read:org"]) {
            return api_error(
                StatusCode::FORBIDDEN,
                "You do not have access to this organization membership.",
                "https://docs.github.com/rest/orgs/members#get-an-organization-membership-for-the-authenticated-user",
            );
        }
        let Some(m) = member_of(&org, &caller.user.login).cloned() else {
            return not_found();
        };
        if m.state == MembershipState::Active && caller.sso_blocked(&org) {
            return self.sso_required(req, &org, caller);
        }
        let api = api_base(req);
        api_json(
            StatusCode::OK,
            json!({
                "url": format!("{api}/orgs/{}/memberships/{}", org.login, caller.user.login),
                "state": m.state.as_str(),
                "role": m.role.as_str(),
                "organization_url": format!("{api}/orgs/{}", org.login),
                "organization": Self::org_json(req, &org),
                "user": self.user_json(&caller.user),
            }),
        )
    }

    fn list_user_teams(&self, req: &RecordedRequest, caller: &Caller) -> Response {
        if !caller.has_any(&["read:org", "user", "repo"]) {
            return api_error(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "https://docs.github.com/rest/teams/teams#list-teams-for-the-authenticated-user",
            );
        }
        let login = &caller.user.login;
        let mut left_out = Vec::new();
        let mut list = Vec::new();
        for team in &self.config.teams {
            let Some(org) = self.org(&team.org) else {
                continue;
            };
            let in_team = team
                .members
                .iter()
                .any(|m| same(&m.login, login) && m.state == MembershipState::Active);
            if !in_team || !active_member(org, login) {
                continue;
            }
            if caller.sso_blocked(org) {
                if !left_out.contains(&org.id) {
                    left_out.push(org.id);
                }
            } else {
                list.push(Self::team_json(req, team, org));
            }
        }
        let mut resp = api_json(StatusCode::OK, Value::Array(list));
        Self::partial_results(&mut resp, &left_out);
        resp
    }

    fn team_membership(
        &mut self,
        req: &RecordedRequest,
        caller: &Caller,
        org: &str,
        slug: &str,
        login: &str,
    ) -> Response {
        let (Some(org), Some(team)) = (self.org(org).cloned(), self.team(org, slug).cloned())
        else {
            return not_found();
        };
        if !caller.has_any(&["read:org"]) {
            return not_found();
        }
        let me = &caller.user.login;
        if active_member(&org, me) && caller.sso_blocked(&org) {
            return self.sso_required(req, &org, caller);
        }
        let in_team = team
            .members
            .iter()
            .any(|m| same(&m.login, me) && m.state == MembershipState::Active);
        let visible = active_admin(&org, me)
            || in_team
            || (team.privacy == TeamPrivacy::Closed && active_member(&org, me));
        if !visible {
            return not_found();
        }
        let Some(m) = team.members.iter().find(|m| same(&m.login, login)) else {
            return not_found();
        };
        let role = if active_admin(&org, &m.login) {
            TeamRole::Maintainer
        } else {
            m.role
        };
        api_json(
            StatusCode::OK,
            json!({
                "url": format!("{}/organizations/{}/team/{}/memberships/{}", api_base(req), org.id, team.id, m.login),
                "role": role.as_str(),
                "state": m.state.as_str(),
            }),
        )
    }

    /// `DELETE /applications/{id}/grant`, `POST`/`DELETE /applications/{id}/token`:
    /// HTTP Basic with the app's credentials and a JSON body `{"access_token": "…"}`.
    fn application_api(
        &mut self,
        req: &RecordedRequest,
        method: &str,
        client_id: &str,
        what: &str,
    ) -> Response {
        let creds_ok = basic_credentials(req).is_some_and(|(id, secret)| {
            id == self.config.client_id && secret == self.config.client_secret
        });
        if !creds_ok {
            return bad_credentials();
        }
        if client_id != self.config.client_id {
            return not_found();
        }
        let Some(token) = serde_json::from_str::<Value>(&req.body)
            .ok()
            .and_then(|v| v.get("access_token")?.as_str().map(str::to_owned))
            .filter(|t| !t.is_empty())
        else {
            return api_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid request.\n\n\"access_token\" wasn't supplied.",
                "https://docs.github.com/rest/apps/oauth-applications",
            );
        };
        // "Check a token" needs a live token; the deletions accept an expired one too.
        let now = self.now();
        let Some(found) = self.access.iter().position(|t| {
            t.token == token && (method != "POST" || t.expires_at.is_none_or(|e| e > now))
        }) else {
            return if method == "POST" {
                not_found()
            } else {
                api_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Validation Failed",
                    "https://docs.github.com/rest/apps/oauth-applications",
                )
            };
        };
        let login = self
            .access
            .get(found)
            .map(|t| t.login.clone())
            .unwrap_or_default();
        match (method, what) {
            ("DELETE", "grant") => {
                self.revoke_user(&login);
                StatusCode::NO_CONTENT.into_response()
            }
            ("DELETE", "token") => {
                self.access.retain(|t| t.token != token);
                self.refresh.retain(|_, r| r.access_token != token);
                StatusCode::NO_CONTENT.into_response()
            }
            ("POST", "token") => self.check_token(req, found),
            _ => not_found(),
        }
    }

    /// "Check a token": GitHub's authorization object for a live token.
    fn check_token(&self, req: &RecordedRequest, index: usize) -> Response {
        let Some(t) = self.access.get(index) else {
            return not_found();
        };
        let user = self.user(&t.login).map(|u| self.user_json(&u));
        let last_eight: String = {
            let chars: Vec<char> = t.token.chars().collect();
            chars
                .get(chars.len().saturating_sub(8)..)
                .unwrap_or_default()
                .iter()
                .collect()
        };
        let hashed: String = Sha256::digest(t.token.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        api_json(
            StatusCode::OK,
            json!({
                "id": t.id,
                "url": format!("{}/authorizations/{}", api_base(req), t.id),
                "scopes": t.scopes,
                "token": t.token,
                "token_last_eight": last_eight,
                "hashed_token": hashed,
                "app": {
                    "client_id": self.config.client_id,
                    "name": self.config.client_id,
                    "url": site_base(req),
                },
                "note": null,
                "note_url": null,
                "created_at": iso8601(t.created_at),
                "updated_at": iso8601(t.created_at),
                "fingerprint": null,
                "expires_at": t.expires_at.map(iso8601),
                "user": user,
                "installation": null,
            }),
        )
    }

    /// `GET /orgs/{org}/sso?authorization_request=…`: the page behind an `X-GitHub-SSO` URL.
    /// Opened by the token's owner (signed in with the fake's cookie), it starts a SAML
    /// session for the organization: tokens issued from now on are SSO-authorized for it. The
    /// token that was refused stays refused, as on GitHub for OAuth apps — the app must run
    /// its authorization again (silent for an app the person already authorized).
    pub(super) fn sso_page(
        &mut self,
        req: &RecordedRequest,
        path: &str,
        query: &[(String, String)],
    ) -> Response {
        let org_login = path
            .trim_start_matches("/orgs/")
            .trim_end_matches("/sso")
            .to_ascii_lowercase();
        let Some(org) = self.org(&org_login).cloned() else {
            return pages::not_found();
        };
        let request = query
            .iter()
            .find(|(k, _)| k == "authorization_request")
            .and_then(|(_, v)| self.sso_requests.get(v).cloned());
        let Some((req_org, token)) = request.filter(|(o, _)| *o == org_login) else {
            return pages::not_found();
        };
        let owner = self
            .access
            .iter()
            .find(|t| t.token == token)
            .map(|t| t.login.clone());
        let signed_in = self.cookie_user(req);
        match (owner, signed_in) {
            (Some(owner), Some(user)) if same(&owner, &user.login) => {
                self.sso_sessions
                    .insert((req_org, user.login.to_ascii_lowercase()));
                pages::page(
                    StatusCode::OK,
                    "Single sign-on · GitHub",
                    &format!(
                        "<h1>Single sign-on to {}</h1><p>You are signed in to {} through its identity provider. Authorize the application again to grant it access to this organization.</p>",
                        pages::esc(&org.login),
                        pages::esc(&org.login)
                    ),
                )
            }
            _ => pages::page(
                StatusCode::FORBIDDEN,
                "Single sign-on · GitHub",
                "<h1>Single sign-on</h1><p>Sign in as the account this request was made for.</p>",
            ),
        }
    }

    /// Adds `org` (lower-cased) to the SSO authorizations of every live token of `login`.
    pub(crate) fn sso_authorize_tokens_of(&mut self, org: &str, login: &str) {
        for t in self.access.iter_mut().filter(|t| same(&t.login, login)) {
            t.sso_orgs.insert(org.to_ascii_lowercase());
        }
    }

    /// Removes the SAML session and every token's SSO authorization for `org`.
    pub(crate) fn sso_revoke(&mut self, org: &str, login: &str) {
        let org = org.to_ascii_lowercase();
        self.sso_sessions
            .remove(&(org.clone(), login.to_ascii_lowercase()));
        for t in self.access.iter_mut().filter(|t| same(&t.login, login)) {
            t.sso_orgs.remove(&org);
        }
    }

    /// SSO-authorizes one token; `false` if the token is unknown.
    pub(crate) fn sso_authorize_token(&mut self, org: &str, token: &str) -> bool {
        match self.access.iter_mut().find(|t| t.token == token) {
            Some(t) => {
                t.sso_orgs.insert(org.to_ascii_lowercase());
                true
            }
            None => false,
        }
    }

    /// The scopes of a live token.
    pub(crate) fn token_scopes(&self, token: &str) -> Option<BTreeSet<String>> {
        self.live_token(token).map(|t| t.scopes.clone())
    }
}
