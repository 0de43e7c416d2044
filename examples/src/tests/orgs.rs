//! Organizations, teams, SAML SSO, per-token scopes, "Check a token", rate limits, outages and
//! the control routes, over real HTTP.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{CALLBACK, CLIENT_ID, SECRET, VERIFIER, client, exchange, fake, get_code, params};
use crate::{FakeGitHub, FakeOrg, FakeTeam, MembershipState, OrgRole, Reachability, TeamRole};

/// A token for `user` from a full web flow asking for `scope` (approving GitHub's consent page
/// when it is shown); returns the token endpoint's body.
async fn flow(gh: &FakeGitHub, user: &str, scope: &str) -> Value {
    let code = get_code(gh, user, &params(&[("scope", scope)])).await;
    let (status, body) = exchange(
        gh,
        &[
            ("code", &code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", VERIFIER),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.get("error").is_none(), "{body}");
    body
}

async fn token(gh: &FakeGitHub, user: &str, scope: &str) -> String {
    flow(gh, user, scope).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn get(gh: &FakeGitHub, token: &str, path: &str) -> reqwest::Response {
    client()
        .get(format!("{}{path}", gh.api_url()))
        .header("user-agent", "fake-github-tests")
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap()
}

fn header<'a>(resp: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    resp.headers().get(name).map(|v| v.to_str().unwrap())
}

async fn check(gh: &FakeGitHub, secret: &str, body: Value) -> reqwest::Response {
    client()
        .post(format!("{}/applications/{CLIENT_ID}/token", gh.api_url()))
        .header("user-agent", "fake-github-tests")
        .basic_auth(CLIENT_ID, Some(secret))
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn control(gh: &FakeGitHub, method: &str, path: &str, body: Value) -> reqwest::Response {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    client()
        .request(method, format!("{}/_fake/{path}", gh.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn logins(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|o| o["login"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn demo_has_acme_with_alice_and_bob_and_mallory_outside() {
    let gh = fake().await;
    let alice = gh.org_membership("acme", "alice").unwrap();
    assert_eq!(
        (alice.state, alice.role, alice.public),
        (MembershipState::Active, OrgRole::Member, true)
    );
    assert_eq!(
        gh.org_membership("acme", "bob").unwrap().state,
        MembershipState::Active
    );
    assert!(gh.org_membership("acme", "mallory").is_none());
    let bob = token(&gh, "bob", "read:org").await;
    let teams: Value = get(&gh, &bob, "/user/teams").await.json().await.unwrap();
    assert_eq!(teams[0]["slug"], "platform");
    assert_eq!(teams[0]["organization"]["login"], "acme");
}

#[tokio::test]
async fn user_orgs_needs_an_org_scope_and_lists_only_active_memberships() {
    let gh = fake().await;
    let plain = token(&gh, "alice", "read:user").await;
    let resp = get(&gh, &plain, "/user/orgs").await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&resp, "x-oauth-scopes"), Some("read:user"));
    assert_eq!(
        header(&resp, "x-accepted-oauth-scopes"),
        Some("admin:org, read:org, repo, user, write:org")
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["message"],
        "You need at least read:org scope or user scope to list your organizations."
    );
    assert_eq!(body["status"], "403");

    for scope in ["read:org", "user", "admin:org", "repo"] {
        let t = token(&gh, "alice", scope).await;
        let resp = get(&gh, &t, "/user/orgs").await;
        assert_eq!(resp.status(), StatusCode::OK, "{scope}");
        let orgs: Value = resp.json().await.unwrap();
        assert_eq!(logins(&orgs), ["acme"], "{scope}");
        assert_eq!(orgs[0]["id"], 5001);
    }
    // Private memberships are listed to the member's own token too.
    let bob = token(&gh, "bob", "read:org").await;
    let orgs: Value = get(&gh, &bob, "/user/orgs").await.json().await.unwrap();
    assert_eq!(logins(&orgs), ["acme"]);

    // An invitation is not a membership.
    assert!(gh.invite_org_member("acme", "mallory"));
    let mallory = token(&gh, "mallory", "read:org").await;
    let orgs: Value = get(&gh, &mallory, "/user/orgs").await.json().await.unwrap();
    assert_eq!(orgs, json!([]));
}

#[tokio::test]
async fn public_listing_shows_only_public_memberships() {
    let gh = fake().await;
    let t = token(&gh, "mallory", "").await;
    let alice: Value = get(&gh, &t, "/users/alice/orgs")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(logins(&alice), ["acme"]);
    let bob: Value = get(&gh, &t, "/users/bob/orgs").await.json().await.unwrap();
    assert_eq!(bob, json!([]));
    assert_eq!(
        get(&gh, &t, "/users/nobody/orgs").await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn own_org_membership_is_active_pending_or_404_and_needs_read_org() {
    let gh = fake().await;
    let alice = token(&gh, "alice", "read:org").await;
    let resp = get(&gh, &alice, "/user/memberships/orgs/acme").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "x-accepted-oauth-scopes"),
        Some("admin:org, read:org, write:org")
    );
    let m: Value = resp.json().await.unwrap();
    assert_eq!(
        (m["state"].as_str(), m["role"].as_str()),
        (Some("active"), Some("member"))
    );
    assert_eq!(m["organization"]["login"], "acme");
    assert_eq!(m["user"]["login"], "alice");
    assert!(
        m["url"]
            .as_str()
            .unwrap()
            .ends_with("/orgs/acme/memberships/alice")
    );
    // The organization name is not case sensitive.
    assert_eq!(
        get(&gh, &alice, "/user/memberships/orgs/ACME")
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        get(&gh, &alice, "/user/memberships/orgs/nowhere")
            .await
            .status(),
        StatusCode::NOT_FOUND
    );

    let mallory = token(&gh, "mallory", "read:org").await;
    let resp = get(&gh, &mallory, "/user/memberships/orgs/acme").await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["message"], "Not Found");
    gh.invite_org_member("acme", "mallory");
    let m: Value = get(&gh, &mallory, "/user/memberships/orgs/acme")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(m["state"], "pending");

    let plain = token(&gh, "alice", "read:user").await;
    let resp = get(&gh, &plain, "/user/memberships/orgs/acme").await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["message"],
        "You do not have access to this organization membership."
    );
    // write:org implies read:org.
    let writer = token(&gh, "alice", "write:org").await;
    assert_eq!(
        get(&gh, &writer, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::OK
    );

    // Removed mid-test: the membership and the team memberships go.
    assert!(gh.remove_org_member("acme", "bob"));
    let bob = token(&gh, "bob", "read:org").await;
    assert_eq!(
        get(&gh, &bob, "/user/memberships/orgs/acme").await.status(),
        StatusCode::NOT_FOUND
    );
    let teams: Value = get(&gh, &bob, "/user/teams").await.json().await.unwrap();
    assert_eq!(teams, json!([]));
}

#[tokio::test]
async fn teams_and_team_memberships_follow_visibility_state_and_role() {
    let gh = fake().await;
    let alice = token(&gh, "alice", "read:org").await;
    let bob = token(&gh, "bob", "read:org").await;
    let mallory = token(&gh, "mallory", "read:org").await;
    let url = "/orgs/acme/teams/platform/memberships";

    let teams: Value = get(&gh, &alice, "/user/teams").await.json().await.unwrap();
    assert_eq!(teams, json!([]));
    let plain = token(&gh, "bob", "read:user").await;
    assert_eq!(
        get(&gh, &plain, "/user/teams").await.status(),
        StatusCode::FORBIDDEN
    );

    // A closed team is visible to every member of the organization.
    let resp = get(&gh, &alice, &format!("{url}/bob")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let m: Value = resp.json().await.unwrap();
    assert_eq!(
        (m["state"].as_str(), m["role"].as_str()),
        (Some("active"), Some("member"))
    );
    assert_eq!(
        get(&gh, &alice, &format!("{url}/alice")).await.status(),
        StatusCode::NOT_FOUND
    );
    // An outsider cannot see the team at all; nor can a token without read:org.
    assert_eq!(
        get(&gh, &mallory, &format!("{url}/bob")).await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&gh, &plain, &format!("{url}/bob")).await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&gh, &bob, "/orgs/acme/teams/nope/memberships/bob")
            .await
            .status(),
        StatusCode::NOT_FOUND
    );

    // Pending team memberships and owners (reported as maintainers).
    assert!(gh.set_team_membership(
        "acme",
        "platform",
        "alice",
        MembershipState::Pending,
        TeamRole::Member
    ));
    let m: Value = get(&gh, &bob, &format!("{url}/alice"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(m["state"], "pending");
    let teams: Value = get(&gh, &alice, "/user/teams").await.json().await.unwrap();
    assert_eq!(teams, json!([]), "a pending team membership is not listed");
    gh.set_org_membership(
        "acme",
        crate::FakeOrgMember::active("bob").role(OrgRole::Admin),
    );
    let m: Value = get(&gh, &alice, &format!("{url}/bob"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(m["role"], "maintainer");

    // A secret team: only its members and the owners see it.
    gh.add_team(
        FakeTeam::new("acme", "vault", 7002, "Vault")
            .secret()
            .member("carol"),
    );
    gh.add_org_member("acme", "carol");
    assert_eq!(
        get(&gh, &alice, "/orgs/acme/teams/vault/memberships/carol")
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&gh, &bob, "/orgs/acme/teams/vault/memberships/carol")
            .await
            .status(),
        StatusCode::OK
    );
    assert!(gh.remove_team_member("acme", "platform", "bob"));
    let teams: Value = get(&gh, &bob, "/user/teams").await.json().await.unwrap();
    assert_eq!(teams, json!([]));
}

#[tokio::test]
async fn sso_enforced_org_refuses_unauthorized_tokens_with_the_sso_header() {
    let gh = fake().await;
    let before = token(&gh, "alice", "read:org").await;
    let bob = token(&gh, "bob", "read:org").await;
    let mallory = token(&gh, "mallory", "read:org").await;
    assert!(gh.set_sso_enforced("acme", true));

    let resp = get(&gh, &before, "/user/memberships/orgs/acme").await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let sso = header(&resp, "x-github-sso").unwrap().to_owned();
    let url = sso.strip_prefix("required; url=").unwrap().to_owned();
    assert!(
        url.starts_with(&format!(
            "{}/orgs/acme/sso?authorization_request=",
            gh.base_url()
        )),
        "{url}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["message"],
        "Resource protected by organization SAML enforcement. You must grant your OAuth token access to this organization."
    );
    assert_eq!(
        get(&gh, &bob, "/orgs/acme/teams/platform/memberships/bob")
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    // Outsiders are not asked for SSO: they are simply not members.
    assert_eq!(
        get(&gh, &mallory, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    // Listings leave the organization out and say so.
    let resp = get(&gh, &before, "/user/orgs").await;
    assert_eq!(
        header(&resp, "x-github-sso"),
        Some("partial-results; organizations=5001")
    );
    assert_eq!(resp.json::<Value>().await.unwrap(), json!([]));
    let resp = get(&gh, &bob, "/user/teams").await;
    assert_eq!(
        header(&resp, "x-github-sso"),
        Some("partial-results; organizations=5001")
    );

    // The URL needs the token's owner; it starts a SAML session, and only tokens issued
    // after it reach the organization (the app has to authorize again, silently).
    let page = client().get(&url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::FORBIDDEN);
    let page = client()
        .get(&url)
        .header("cookie", "fgh_user=alice")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(
        get(&gh, &before, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    let after = token(&gh, "alice", "read:org").await;
    assert_eq!(
        get(&gh, &after, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::OK
    );
    let resp = get(&gh, &after, "/user/orgs").await;
    assert!(resp.headers().get("x-github-sso").is_none());
    assert_eq!(logins(&resp.json().await.unwrap()), ["acme"]);

    // Direct controls: one token, or every token of a person; and taking it back.
    assert!(gh.sso_authorize_token("acme", &before));
    assert_eq!(
        get(&gh, &before, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::OK
    );
    assert!(gh.sso_authorize_user("acme", "bob"));
    assert_eq!(
        get(&gh, &bob, "/orgs/acme/teams/platform/memberships/bob")
            .await
            .status(),
        StatusCode::OK
    );
    gh.sso_revoke_user("acme", "bob");
    assert_eq!(
        get(&gh, &bob, "/user/memberships/orgs/acme").await.status(),
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn each_flow_mints_a_token_with_its_own_scopes() {
    let gh = fake().await;
    let first = flow(&gh, "alice", "read:user").await;
    assert_eq!(first["scope"], "read:user");
    let narrow = first["access_token"].as_str().unwrap().to_owned();
    // More scopes than authorized: GitHub's consent page again, then a token with exactly
    // what this flow asked for.
    let resp = super::authorize(&gh, Some("alice"), &params(&[("scope", "repo")])).await;
    assert_eq!(resp.status(), StatusCode::OK, "consent page expected");
    let second = flow(&gh, "alice", "repo").await;
    assert_eq!(second["scope"], "repo");
    let wide = second["access_token"].as_str().unwrap().to_owned();
    assert_eq!(
        gh.authorized_scopes("alice").unwrap(),
        ["read:user", "repo"].map(String::from).into()
    );

    // Both tokens live side by side, each reporting its own scopes.
    let resp = get(&gh, &narrow, "/user").await;
    assert_eq!(header(&resp, "x-oauth-scopes"), Some("read:user"));
    let resp = get(&gh, &wide, "/user").await;
    assert_eq!(header(&resp, "x-oauth-scopes"), Some("repo"));
    assert_eq!(
        gh.token_scopes(&narrow).unwrap(),
        ["read:user".to_owned()].into()
    );
    let body: Value = check(&gh, SECRET, json!({"access_token": narrow}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["scopes"], json!(["read:user"]));

    // A covered subset is silent and still narrow; no scope at all gets the union.
    let silent = super::authorize(&gh, Some("alice"), &params(&[("scope", "read:user")])).await;
    assert_eq!(silent.status(), StatusCode::FOUND);
    assert_eq!(
        flow(&gh, "alice", "public_repo").await["scope"],
        "public_repo"
    );
    assert_eq!(flow(&gh, "alice", "").await["scope"], "read:user,repo");
    // Normalized: a scope included in another requested one is dropped.
    assert_eq!(
        flow(&gh, "bob", "user user:email gist").await["scope"],
        "gist,user"
    );
}

#[tokio::test]
async fn check_a_token_answers_githubs_authorization_and_spares_the_rate_limit() {
    let gh = fake().await;
    let t = token(&gh, "alice", "read:user read:org").await;
    let used = gh.rate_limit_used("alice");
    let resp = check(&gh, SECRET, json!({"access_token": t})).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("x-ratelimit-remaining").is_none());
    let body: Value = resp.json().await.unwrap();
    assert!(body["id"].as_u64().unwrap() > 0);
    assert_eq!(body["token"], t.as_str());
    assert_eq!(body["token_last_eight"], &t[t.len() - 8..]);
    assert_eq!(body["hashed_token"].as_str().unwrap().len(), 64);
    assert_eq!(body["scopes"], json!(["read:org", "read:user"]));
    assert_eq!(body["app"]["client_id"], CLIENT_ID);
    assert_eq!(
        (body["user"]["login"].as_str(), body["user"]["id"].as_u64()),
        (Some("alice"), Some(1001))
    );
    let created = body["created_at"].as_str().unwrap();
    assert!(
        created.len() == 20 && created.ends_with('Z') && &created[10..11] == "T",
        "{created}"
    );
    assert!(body["expires_at"].is_null());
    assert_eq!(
        gh.rate_limit_used("alice"),
        used,
        "not charged to the person"
    );

    // Even a person out of rate limit can be checked.
    gh.exhaust_rate_limit("alice");
    assert_eq!(
        check(&gh, SECRET, json!({"access_token": t}))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        check(&gh, "wrong", json!({"access_token": t}))
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        check(&gh, SECRET, json!({})).await.status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let other_app = client()
        .post(format!("{}/applications/Iv1.other/token", gh.api_url()))
        .header("user-agent", "tests")
        .basic_auth(CLIENT_ID, Some(SECRET))
        .json(&json!({"access_token": t}))
        .send()
        .await
        .unwrap();
    assert_eq!(other_app.status(), StatusCode::NOT_FOUND);
    gh.revoke_tokens_of("alice");
    assert_eq!(
        check(&gh, SECRET, json!({"access_token": t}))
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn rate_limits_answer_like_github_and_recover_at_reset() {
    let gh = fake().await;
    let t = token(&gh, "alice", "read:org").await;
    let resp = get(&gh, &t, "/user").await;
    assert_eq!(header(&resp, "x-ratelimit-limit"), Some("5000"));
    assert_eq!(header(&resp, "x-ratelimit-remaining"), Some("4999"));
    assert_eq!(header(&resp, "x-ratelimit-used"), Some("1"));
    assert_eq!(header(&resp, "x-ratelimit-resource"), Some("core"));
    let reset: u64 = header(&resp, "x-ratelimit-reset").unwrap().parse().unwrap();
    assert!(reset > 1_700_000_000);
    assert_eq!(gh.rate_limit_used("alice"), 1);

    gh.set_rate_limit_remaining("alice", 1);
    assert_eq!(get(&gh, &t, "/user/orgs").await.status(), StatusCode::OK);
    let resp = get(&gh, &t, "/user/orgs").await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&resp, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        header(&resp, "x-ratelimit-reset"),
        Some(reset.to_string().as_str())
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["message"], "API rate limit exceeded for user ID 1001.");
    // Another person is not affected; 429 is GitHub's other answer.
    let bob = token(&gh, "bob", "").await;
    assert_eq!(get(&gh, &bob, "/user").await.status(), StatusCode::OK);
    gh.set_rate_limit_status_429(true);
    assert_eq!(
        get(&gh, &t, "/user").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    gh.advance_time(Duration::from_secs(3601));
    assert_eq!(get(&gh, &t, "/user").await.status(), StatusCode::OK);

    gh.set_secondary_rate_limit(Some(Duration::from_secs(60)));
    let resp = get(&gh, &t, "/user").await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), Some("60"));
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("secondary rate limit")
    );
    gh.set_secondary_rate_limit(None);
    assert_eq!(get(&gh, &t, "/user").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn outages_drop_connections_answer_503_or_hang() {
    let gh = fake().await;
    let t = token(&gh, "alice", "").await;
    #[allow(clippy::disallowed_methods)] // a test client, not the proxy's outbound traffic
    let keep_alive = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let user = |c: reqwest::Client| {
        let url = format!("{}/user", gh.api_url());
        let t = t.clone();
        async move {
            c.get(url)
                .header("user-agent", "tests")
                .header("authorization", format!("Bearer {t}"))
                .timeout(Duration::from_millis(500))
                .send()
                .await
        }
    };
    assert_eq!(
        user(keep_alive.clone()).await.unwrap().status(),
        StatusCode::OK
    );

    gh.set_reachability(Reachability::Down);
    // Both an open keep-alive connection and a fresh one fail below HTTP.
    let err = user(keep_alive.clone()).await.unwrap_err();
    assert!(!err.is_timeout() && err.status().is_none(), "{err:?}");
    let err = user(client()).await.unwrap_err();
    assert!(err.status().is_none(), "{err:?}");
    assert!(gh.refused_during_outage() >= 1);

    gh.set_reachability(Reachability::Unavailable);
    let resp = user(client()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The control routes still answer, and can end the outage.
    let resp = control(&gh, "PUT", "reachability", json!({"mode": "hang"})).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(gh.reachability(), Reachability::Hang);
    assert!(user(client()).await.unwrap_err().is_timeout());
    let resp = control(&gh, "PUT", "reachability", json!({"mode": "down"})).await;
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let resp = control(&gh, "PUT", "reachability", json!({"mode": "up"})).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(user(keep_alive).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn http_controls_change_the_world_mid_test_and_are_not_recorded() {
    let gh = fake().await;
    let recorded = gh.requests().len();
    let resp = control(
        &gh,
        "PUT",
        "orgs/acme/members/mallory",
        json!({"state": "pending"}),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        (body["state"].as_str(), body["role"].as_str()),
        (Some("pending"), Some("member"))
    );
    assert_eq!(
        gh.org_membership("acme", "mallory").unwrap().state,
        MembershipState::Pending
    );
    let resp = control(
        &gh,
        "PUT",
        "orgs/acme/members/mallory",
        json!({"state": "active", "role": "admin", "public": true}),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let m = gh.org_membership("acme", "mallory").unwrap();
    assert_eq!(
        (m.state, m.role, m.public),
        (MembershipState::Active, OrgRole::Admin, true)
    );
    assert_eq!(
        control(
            &gh,
            "PUT",
            "orgs/acme/members/mallory",
            json!({"state": "gone"})
        )
        .await
        .status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        control(&gh, "PUT", "orgs/nowhere/members/mallory", json!({}))
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        control(
            &gh,
            "PUT",
            "orgs/acme/teams/platform/members/mallory",
            json!({"role": "maintainer"})
        )
        .await
        .status(),
        StatusCode::OK
    );
    let mallory = token(&gh, "mallory", "read:org").await;
    let m: Value = get(
        &gh,
        &mallory,
        "/orgs/acme/teams/platform/memberships/mallory",
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(m["role"], "maintainer");
    assert_eq!(
        control(
            &gh,
            "DELETE",
            "orgs/acme/teams/platform/members/mallory",
            json!({})
        )
        .await
        .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        control(&gh, "DELETE", "orgs/acme/members/mallory", json!({}))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert!(gh.org_membership("acme", "mallory").is_none());

    // SSO, rate limit and the app's authorization.
    assert_eq!(
        control(&gh, "PUT", "orgs/acme/sso", json!({"enforced": true}))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    let alice = token(&gh, "alice", "read:org").await;
    assert_eq!(
        get(&gh, &alice, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        control(&gh, "PUT", "orgs/acme/sso/users/alice", json!({}))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        get(&gh, &alice, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        control(
            &gh,
            "PUT",
            "users/alice/rate_limit",
            json!({"remaining": 0})
        )
        .await
        .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        get(&gh, &alice, "/user").await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        control(&gh, "DELETE", "rate_limit", json!({}))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(get(&gh, &alice, "/user").await.status(), StatusCode::OK);
    assert_eq!(
        control(&gh, "DELETE", "users/alice/authorization", json!({}))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert!(!gh.has_authorized("alice"));
    assert_eq!(
        get(&gh, &alice, "/user").await.status(),
        StatusCode::UNAUTHORIZED
    );

    let controls = gh
        .requests()
        .iter()
        .skip(recorded)
        .filter(|r| r.path().starts_with("/_fake/"))
        .count();
    assert_eq!(controls, 0);
}

#[tokio::test]
async fn config_orgs_and_teams_are_taken_as_given() {
    let mut cfg = crate::FakeGitHubConfig::demo(CLIENT_ID, SECRET, CALLBACK);
    cfg.orgs = vec![FakeOrg::new(9, "solo").admin("mallory").sso_enforced()];
    cfg.teams = vec![];
    let gh = FakeGitHub::start(cfg).await.unwrap();
    gh.sso_sign_in("solo", "mallory");
    let t = token(&gh, "mallory", "read:org").await;
    let m: Value = get(&gh, &t, "/user/memberships/orgs/solo")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(m["role"], "admin");
    let alice = token(&gh, "alice", "read:org").await;
    assert_eq!(
        get(&gh, &alice, "/user/memberships/orgs/acme")
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn github_app_user_tokens_pass_the_scope_checks() {
    let gh = fake().await;
    gh.set_expiring_tokens(true);
    let body = flow(&gh, "bob", "").await;
    assert_eq!(body["scope"], "");
    let t = body["access_token"].as_str().unwrap();
    assert!(t.starts_with("ghu_"));
    let resp = get(&gh, t, "/user/memberships/orgs/acme").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("x-oauth-scopes").is_none());
    let teams: Value = get(&gh, t, "/user/teams").await.json().await.unwrap();
    assert_eq!(teams[0]["slug"], "platform");
    let check: Value = check(&gh, SECRET, json!({"access_token": t}))
        .await
        .json()
        .await
        .unwrap();
    assert!(check["expires_at"].as_str().unwrap().ends_with('Z'));
}
