//! Changing the fake's world mid-test: the state mutations behind [`crate::FakeGitHub`]'s
//! control methods, and the same controls over HTTP under `/_fake/` (for tests that drive a
//! separate process, and for poking the offline demo with `curl`). Control requests are not
//! GitHub traffic: they are not recorded and bypass the `Unavailable`/`Hang` outage modes.
//!
//! | route | body | effect |
//! |---|---|---|
//! | `PUT /_fake/orgs/{org}/members/{login}` | `{"state"?, "role"?, "public"?}` | add or update an org membership |
//! | `DELETE /_fake/orgs/{org}/members/{login}` | | remove it (and the org's team memberships) |
//! | `PUT /_fake/orgs/{org}/teams/{slug}/members/{login}` | `{"state"?, "role"?}` | add or update a team membership |
//! | `DELETE /_fake/orgs/{org}/teams/{slug}/members/{login}` | | remove it |
//! | `PUT /_fake/orgs/{org}/sso` | `{"enforced": bool}` | switch SAML SSO enforcement |
//! | `PUT /_fake/orgs/{org}/sso/users/{login}` | | SSO-authorize the person's tokens, now and later |
//! | `DELETE /_fake/orgs/{org}/sso/users/{login}` | | take that back |
//! | `DELETE /_fake/users/{login}/authorization` | | the person revokes the app at GitHub |
//! | `PUT /_fake/users/{login}/rate_limit` | `{"remaining": n}` | requests left in the person's window (turns enforcement on) |
//! | `PUT /_fake/rate_limit` | `{"limit"?, "status"?, "secondary_retry_after"?}` | rate-limit settings (a `limit` turns enforcement on) |
//! | `DELETE /_fake/rate_limit` | | every window starts afresh |
//! | `PUT /_fake/reachability` | `{"mode": "up" \| "unavailable" \| "hang"}` | outage switch (`down` only from Rust: nothing could switch it back over HTTP) |
//!
//! Answers: 204 on success (200 with the membership for the membership `PUT`s), 404 for an
//! unknown organization or team, 422 for a body that does not parse.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{CONTROL_PREFIX, FakeState, api_json};
use crate::gate::Gate;
use crate::{FakeOrgMember, MembershipState, OrgRole, Reachability, RecordedRequest, TeamRole};

fn unprocessable(what: &str) -> Response {
    api_json(StatusCode::UNPROCESSABLE_ENTITY, json!({"message": what}))
}

fn missing() -> Response {
    api_json(StatusCode::NOT_FOUND, json!({"message": "Not Found"}))
}

fn done(found: bool) -> Response {
    if found {
        StatusCode::NO_CONTENT.into_response()
    } else {
        missing()
    }
}

impl FakeState {
    /// Adds or replaces a membership; `false` if the organization is unknown.
    pub(crate) fn set_org_member(&mut self, org: &str, member: FakeOrgMember) -> bool {
        let Some(o) = self
            .config
            .orgs
            .iter_mut()
            .find(|o| o.login.eq_ignore_ascii_case(org))
        else {
            return false;
        };
        o.members
            .retain(|m| !m.login.eq_ignore_ascii_case(&member.login));
        o.members.push(member);
        true
    }

    /// Removes a membership and, as GitHub does, the person's memberships of the
    /// organization's teams; `false` if the organization is unknown.
    pub(crate) fn remove_org_member(&mut self, org: &str, login: &str) -> bool {
        let Some(o) = self
            .config
            .orgs
            .iter_mut()
            .find(|o| o.login.eq_ignore_ascii_case(org))
        else {
            return false;
        };
        o.members.retain(|m| !m.login.eq_ignore_ascii_case(login));
        for team in self
            .config
            .teams
            .iter_mut()
            .filter(|t| t.org.eq_ignore_ascii_case(org))
        {
            team.members
                .retain(|m| !m.login.eq_ignore_ascii_case(login));
        }
        true
    }

    pub(crate) fn set_team_member(
        &mut self,
        org: &str,
        slug: &str,
        login: &str,
        state: MembershipState,
        role: TeamRole,
    ) -> bool {
        let Some(team) = self
            .config
            .teams
            .iter_mut()
            .find(|t| t.org.eq_ignore_ascii_case(org) && t.slug.eq_ignore_ascii_case(slug))
        else {
            return false;
        };
        team.members
            .retain(|m| !m.login.eq_ignore_ascii_case(login));
        team.members.push(crate::FakeTeamMember {
            login: login.to_owned(),
            state,
            role,
        });
        true
    }

    pub(crate) fn remove_team_member(&mut self, org: &str, slug: &str, login: &str) -> bool {
        let Some(team) = self
            .config
            .teams
            .iter_mut()
            .find(|t| t.org.eq_ignore_ascii_case(org) && t.slug.eq_ignore_ascii_case(slug))
        else {
            return false;
        };
        team.members
            .retain(|m| !m.login.eq_ignore_ascii_case(login));
        true
    }

    pub(crate) fn set_sso_enforced(&mut self, org: &str, enforced: bool) -> bool {
        match self
            .config
            .orgs
            .iter_mut()
            .find(|o| o.login.eq_ignore_ascii_case(org))
        {
            Some(o) => {
                o.sso_enforced = enforced;
                true
            }
            None => false,
        }
    }

    /// A SAML session for the person plus every current token authorized.
    pub(crate) fn sso_authorize_user(&mut self, org: &str, login: &str) -> bool {
        if self.org(org).is_none() {
            return false;
        }
        self.sso_sessions
            .insert((org.to_ascii_lowercase(), login.to_ascii_lowercase()));
        self.sso_authorize_tokens_of(org, login);
        true
    }

    pub(crate) fn control(&mut self, req: &RecordedRequest, gate: &Gate) -> Response {
        let path = req.path().trim_start_matches(CONTROL_PREFIX);
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let body: Value = if req.body.trim().is_empty() {
            json!({})
        } else {
            match serde_json::from_str(&req.body) {
                Ok(v @ Value::Object(_)) => v,
                _ => return unprocessable("body must be a JSON object"),
            }
        };
        let text = |name: &str| body.get(name).and_then(Value::as_str);
        let now = self.now();
        match (req.method.as_str(), segments.as_slice()) {
            ("PUT", ["orgs", org, "members", login]) => {
                let Some(existing) = self.org(org).map(|o| {
                    o.members
                        .iter()
                        .find(|m| m.login.eq_ignore_ascii_case(login))
                        .cloned()
                }) else {
                    return missing();
                };
                let mut m = existing.unwrap_or_else(|| FakeOrgMember::active(*login));
                if let Some(s) = text("state") {
                    let Some(state) = MembershipState::parse(s) else {
                        return unprocessable("state must be active or pending");
                    };
                    m.state = state;
                }
                if let Some(r) = text("role") {
                    let Some(role) = OrgRole::parse(r) else {
                        return unprocessable("role must be member or admin");
                    };
                    m.role = role;
                }
                if let Some(p) = body.get("public").and_then(Value::as_bool) {
                    m.public = p;
                }
                let answer = json!({"org": org, "login": m.login, "state": m.state.as_str(), "role": m.role.as_str(), "public": m.public});
                self.set_org_member(org, m);
                api_json(StatusCode::OK, answer)
            }
            ("DELETE", ["orgs", org, "members", login]) => done(self.remove_org_member(org, login)),
            ("PUT", ["orgs", org, "teams", slug, "members", login]) => {
                let state = match text("state").map(MembershipState::parse) {
                    None => MembershipState::Active,
                    Some(Some(s)) => s,
                    Some(None) => return unprocessable("state must be active or pending"),
                };
                let role = match text("role").map(TeamRole::parse) {
                    None => TeamRole::Member,
                    Some(Some(r)) => r,
                    Some(None) => return unprocessable("role must be member or maintainer"),
                };
                if !self.set_team_member(org, slug, login, state, role) {
                    return missing();
                }
                api_json(
                    StatusCode::OK,
                    json!({"org": org, "team": slug, "login": login, "state": state.as_str(), "role": role.as_str()}),
                )
            }
            ("DELETE", ["orgs", org, "teams", slug, "members", login]) => {
                done(self.remove_team_member(org, slug, login))
            }
            ("PUT", ["orgs", org, "sso"]) => {
                let Some(enforced) = body.get("enforced").and_then(Value::as_bool) else {
                    return unprocessable("enforced must be a boolean");
                };
                done(self.set_sso_enforced(org, enforced))
            }
            ("PUT", ["orgs", org, "sso", "users", login]) => {
                done(self.sso_authorize_user(org, login))
            }
            ("DELETE", ["orgs", org, "sso", "users", login]) => {
                let known = self.org(org).is_some();
                if known {
                    self.sso_revoke(org, login);
                }
                done(known)
            }
            ("DELETE", ["users", login, "authorization"]) => {
                self.revoke_user(login);
                done(true)
            }
            ("PUT", ["users", login, "rate_limit"]) => {
                let Some(remaining) = body.get("remaining").and_then(Value::as_u64) else {
                    return unprocessable("remaining must be a number");
                };
                self.rate.set_remaining(login, remaining, now);
                done(true)
            }
            ("PUT", ["rate_limit"]) => {
                if let Some(limit) = body.get("limit").and_then(Value::as_u64) {
                    self.rate.limit = limit;
                    self.rate.enforce = true;
                }
                match body.get("status").and_then(Value::as_u64) {
                    None => {}
                    Some(403) => self.rate.status = StatusCode::FORBIDDEN,
                    Some(429) => self.rate.status = StatusCode::TOO_MANY_REQUESTS,
                    Some(_) => return unprocessable("status must be 403 or 429"),
                }
                if let Some(v) = body.get("secondary_retry_after") {
                    self.rate.secondary_retry_after = v.as_u64();
                }
                done(true)
            }
            ("DELETE", ["rate_limit"]) => {
                self.rate.reset_all();
                done(true)
            }
            ("PUT", ["reachability"]) => match text("mode").and_then(Reachability::parse) {
                Some(Reachability::Down) => unprocessable(
                    "down cannot be undone over HTTP; use FakeGitHub::set_reachability",
                ),
                Some(mode) => {
                    gate.set(mode);
                    done(true)
                }
                None => unprocessable("mode must be up, unavailable or hang"),
            },
            _ => missing(),
        }
    }
}
