//! Several replicas behind a load balancer that is not sticky: any request may reach any
//! replica, so everything that must be shared lives in PostgreSQL.

use crate::support::client::approve;
use crate::support::{
    Browser, Client, Options, Pkce, TestProxy, postgres_available, postgres_selected, query_param,
};
use mcp_oauth_proxy::flows::access::{self, TokenRejection};

/// Two replicas; `None` when PostgreSQL is not available (the test then passes with a
/// notice, unless `MCP_PG=require`).
async fn pair() -> Option<(TestProxy, TestProxy)> {
    if !postgres_available().await {
        return None;
    }
    let a = TestProxy::start_with(Options {
        postgres: true,
        ..Options::default()
    })
    .await;
    let b = a.replica().await;
    Some((a, b))
}

/// `url` (on the public address) rewritten to reach replica `to` directly.
fn via(to: &TestProxy, url: &str) -> String {
    url.replacen(&to.base, &to.own_base, 1)
}

#[tokio::test]
async fn flow_started_on_one_replica_completes_on_another() {
    let Some((a, b)) = pair().await else { return };
    let client = Client::register(&a, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let pkce = Pkce::new();
    // /authorize and the consent page on A.
    let page = browser
        .navigate(&client.authorize_url(&a, &pkce, "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200);
    // The approval lands on B (the transaction lives in the database).
    let txn = page.hidden("txn").unwrap();
    let csrf = page.hidden("csrf").unwrap();
    let proof = browser.consent_script_proof(&page).unwrap();
    let r = browser
        .post_form(
            &b.own_url("/consent"),
            &[
                ("txn", &txn),
                ("csrf", &csrf),
                ("decision", "approve"),
                ("flow_proof", &proof),
            ],
            &b.base,
            "same-origin",
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let back = browser
        .through_github(&r.location().unwrap(), "alice")
        .await
        .location()
        .unwrap();
    // GitHub's callback reaches A.
    let cb = browser.navigate(&back, "cross-site").await;
    assert_eq!(cb.status, 303, "{}", cb.body);
    let code = query_param(&cb.location().unwrap(), "code").unwrap();
    // The code is redeemed on B, refreshed on A.
    let mut on_b = client.clone();
    on_b.redirect_uri = client.redirect_uri.clone();
    let t = crate::support::http()
        .post(b.own_url("/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("client_id", client.id.as_str()),
            ("code", code.as_str()),
            ("code_verifier", pkce.verifier.as_str()),
            ("redirect_uri", client.redirect_uri.as_str()),
            ("resource", a.url("/mcp").as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(t.status(), 200);
    let t: serde_json::Value = t.json().await.unwrap();
    let r = client
        .refresh(&a, t["refresh_token"].as_str().unwrap(), &[])
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert!(
        access::authenticate(&b.app, r.json["access_token"].as_str().unwrap())
            .await
            .unwrap()
            .is_ok()
    );
}

#[tokio::test]
async fn same_code_redeemed_at_once_on_both_replicas_exactly_one_succeeds() {
    let Some((a, b)) = pair().await else { return };
    let client = Client::register(&a, "Repo Helper", "https://app.example/callback").await;
    let pkce = Pkce::new();
    let code = client.get_code(&a, &Browser::new(), "alice", &pkce).await;
    let form = |code: String| {
        vec![
            ("grant_type".to_owned(), "authorization_code".to_owned()),
            ("client_id".to_owned(), client.id.clone()),
            ("code".to_owned(), code),
            ("code_verifier".to_owned(), pkce.verifier.clone()),
            ("redirect_uri".to_owned(), client.redirect_uri.clone()),
        ]
    };
    let mut tasks = Vec::new();
    for i in 0..16 {
        let url = if i % 2 == 0 {
            a.own_url("/token")
        } else {
            b.own_url("/token")
        };
        let f = form(code.clone());
        tasks.push(tokio::spawn(async move {
            crate::support::http()
                .post(url)
                .form(&f)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            200 => ok += 1,
            400 => {}
            s => panic!("unexpected {s}"),
        }
    }
    assert_eq!(ok, 1);
}

#[tokio::test]
async fn token_revoked_on_one_replica_is_rejected_on_the_other_at_once() {
    let Some((a, b)) = pair().await else { return };
    let client = Client::register(&a, "Repo Helper", "https://app.example/callback").await;
    let t = client.tokens(&a, &Browser::new(), "alice").await;
    let access = t.json["access_token"].as_str().unwrap();
    assert!(access::authenticate(&b.app, access).await.unwrap().is_ok());
    let status = crate::support::http()
        .post(a.own_url("/revoke"))
        .form(&[
            ("client_id", client.id.as_str()),
            ("token", t.json["refresh_token"].as_str().unwrap()),
        ])
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    assert_eq!(
        access::authenticate(&b.app, access)
            .await
            .unwrap()
            .unwrap_err(),
        TokenRejection::Revoked
    );
}

#[tokio::test]
async fn refresh_race_across_replicas_keeps_exactly_one_family_alive() {
    let Some((a, b)) = pair().await else { return };
    let client = Client::register(&a, "Repo Helper", "https://app.example/callback").await;
    let t = client.tokens(&a, &Browser::new(), "alice").await;
    let rt = t.json["refresh_token"].as_str().unwrap().to_owned();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let url = if i % 2 == 0 {
            a.own_url("/token")
        } else {
            b.own_url("/token")
        };
        let f = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("client_id", client.id.clone()),
            ("refresh_token", rt.clone()),
        ];
        tasks.push(tokio::spawn(async move {
            let r = crate::support::http()
                .post(url)
                .form(&f)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let j: serde_json::Value = r.json().await.unwrap();
            (status, j)
        }));
    }
    let mut issued = std::collections::BTreeSet::new();
    for t in tasks {
        let (status, j) = t.await.unwrap();
        if status == 200 {
            issued.insert(j["refresh_token"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(issued.len(), 1, "exactly one rotation across both replicas");
    // The family is alive: the token from the race refreshes, on either replica.
    assert_eq!(
        client
            .refresh(&b, issued.iter().next().unwrap(), &[])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn replica_killed_mid_flow_does_not_break_the_flow_on_the_other() {
    let Some((a, b)) = pair().await else { return };
    let client = Client::register(&a, "Repo Helper", "https://app.example/callback").await;
    let browser = Browser::new();
    let pkce = Pkce::new();
    let page = browser
        .navigate(&client.authorize_url(&a, &pkce, "s", &[]), "none")
        .await;
    let gh = approve(&a, &browser, &page).await;
    drop(a); // the replica that served the consent page goes away
    let back = browser
        .through_github(&gh, "alice")
        .await
        .location()
        .unwrap();
    let cb = browser.navigate(&via(&b, &back), "cross-site").await;
    assert_eq!(cb.status, 303, "{}", cb.body);
    let code = query_param(&cb.location().unwrap(), "code").unwrap();
    let t = crate::support::http()
        .post(b.own_url("/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("client_id", client.id.as_str()),
            ("code", code.as_str()),
            ("code_verifier", pkce.verifier.as_str()),
            ("redirect_uri", client.redirect_uri.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(t.status(), 200);
}

/// The whole integration suite again, on PostgreSQL, in a child run of this same binary, so
/// one test command proves both stores.
#[tokio::test]
async fn integration_suite_passes_on_postgres() {
    if postgres_selected() || !postgres_available().await {
        return; // we are the child run, or there is no PostgreSQL here
    }
    let exe = std::env::current_exe().unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe)
            .args([
                "--skip",
                "integration_suite_passes_on_postgres",
                "--skip",
                "e2e::",
                "--skip",
                "replicas::",
                "--test-threads",
                "4",
            ])
            .env("MCP_TEST_STORE", "postgres")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("test result:"))
        .unwrap_or("no summary");
    eprintln!("integration suite on PostgreSQL: {summary}");
    assert!(
        out.status.success(),
        "the suite failed on PostgreSQL:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        summary.contains(" passed") && !summary.contains(" 0 passed"),
        "{summary}"
    );
}

/// Two replicas, each with the demo backend behind its `/mcp` (one fake GitHub for both).
async fn pair_with_backends() -> Option<(TestProxy, TestProxy)> {
    if !postgres_available().await {
        return None;
    }
    let a = TestProxy::start_with(Options {
        postgres: true,
        backend: true,
        ..Options::default()
    })
    .await;
    let b = TestProxy::start_with(Options {
        replica_of: Some(a.replica.clone()),
        backend: true,
        ..Options::default()
    })
    .await;
    Some((a, b))
}

/// The text of a `tools/call` answer that is a connect-link refusal.
fn refusal_text(msg: &serde_json::Value) -> Option<&str> {
    (msg["result"]["isError"] == true)
        .then(|| msg["result"]["content"][0]["text"].as_str())
        .flatten()
        .filter(|t| t.contains("/connect/"))
}

/// alice, her agent registered and authorized on `a`, and that agent's MCP client pointed at
/// `b`'s own `/mcp` (2026-07-28).
async fn alice_calling(
    a: &TestProxy,
    b: &TestProxy,
) -> (crate::support::people::Person, crate::support::mcp::Mcp) {
    let alice =
        crate::support::people::Person::with_agent(a, "alice", "Repo Helper", "2026-07-28").await;
    let mut on_b = crate::support::mcp::Mcp::with_token(b, &alice.mcp.token);
    on_b.url = b.own_url("/mcp");
    on_b.version = "2026-07-28";
    (alice, on_b)
}

/// What one replica withdraws or revokes (the agent's allowance, the person's GitHub grant,
/// the access token) is honoured by the very next `tools/call` on the other, whose record
/// cache holds those checks (`store::cache`).
#[tokio::test]
async fn mcp_on_one_replica_honours_at_once_what_the_other_withdrew_or_revoked() {
    use serde_json::json;
    let Some((a, b)) = pair_with_backends().await else {
        return;
    };
    let (alice, on_b) = alice_calling(&a, &b).await;
    let (status, msg) = on_b.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    assert!(msg.to_string().contains("alice"), "{msg}");
    assert!(refusal_text(&msg).is_none(), "{msg}");
    // B's record cache now holds alice's checks and answers them: what follows is
    // withdrawn under a warm cache.
    let (hits, _) = b.app.record_cache.cache().hits_and_misses();
    let (status, msg) = on_b.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    assert!(
        b.app.record_cache.cache().hits_and_misses().0 > hits,
        "B answered from its cache"
    );

    // The agent's allowance, withdrawn on A.
    alice.withdraw_agent(&a).await;
    let before = b.backend().requests().len();
    let (status, msg) = on_b.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    assert!(
        refusal_text(&msg).is_some(),
        "B used a withdrawn allowance: {msg}"
    );
    assert_eq!(
        b.backend().requests().len(),
        before,
        "nothing reached B's backend"
    );

    // The person's GitHub grant, forgotten on A.
    alice.disconnect_github(&a).await;
    let (status, msg) = on_b.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    assert!(
        refusal_text(&msg).is_some(),
        "B used a forgotten grant: {msg}"
    );
    assert_eq!(
        b.backend().requests().len(),
        before,
        "nothing reached B's backend"
    );

    // The access token itself, revoked on A (RFC 7009).
    let status = crate::support::http()
        .post(a.own_url("/revoke"))
        .form(&[
            ("client_id", alice.client.id.as_str()),
            ("token", alice.mcp.token.as_str()),
        ])
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let (status, msg) = on_b.call_tool("whoami", json!({})).await;
    assert_eq!(status, 401, "B accepted a revoked access token: {msg}");
    assert_eq!(
        b.backend().requests().len(),
        before,
        "nothing reached B's backend"
    );
}

/// A replica whose cache listener is cut off cannot know what the others wrote since: it
/// answers from the store until it listens again (and then starts empty), so a revocation
/// on the other replica is still honoured by its next request.
#[tokio::test]
async fn replica_that_lost_its_cache_listener_still_honours_a_revocation_at_once() {
    use serde_json::json;
    let Some((a, b)) = pair_with_backends().await else {
        return;
    };
    let (alice, on_b) = alice_calling(&a, &b).await;
    for _ in 0..2 {
        let (status, msg) = on_b.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200, "{msg}");
    }
    assert!(b.app.record_cache.cache().hits_and_misses().0 > 0);

    // An operator (or a failover) ends both replicas' listener connections.
    let (pg, connection) =
        tokio_postgres::connect(&crate::support::pg_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    let name = format!("mcp-oauth-proxy listener {}", a.schema());
    for _ in 0..100 {
        let n: i64 = pg
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        if n == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let ended = pg
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap();
    assert_eq!(ended.len(), 2, "one listener per replica");

    let status = crate::support::http()
        .post(a.own_url("/revoke"))
        .form(&[
            ("client_id", alice.client.id.as_str()),
            ("token", alice.mcp.token.as_str()),
        ])
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let before = b.backend().requests().len();
    let (status, msg) = on_b.call_tool("whoami", json!({})).await;
    assert_eq!(
        status, 401,
        "B answered a revoked token from its cache: {msg}"
    );
    assert_eq!(b.backend().requests().len(), before);
}

/// The budget of never-used registrations is one budget whichever replica a registration
/// reaches: eight registrations from one address at once, split between two replicas, with
/// room for three, leave exactly three stored; the others are refused with 429 `slow_down`.
#[tokio::test]
async fn never_used_registration_budget_is_shared_by_replicas() {
    if !postgres_available().await {
        return;
    }
    let opts = |replica_of| Options {
        postgres: true,
        replica_of,
        server_toml: "trusted_proxies = [\"127.0.0.1\"]".to_owned(),
        extra_toml: "[registration]\nmax_unused_per_source = 3\n".to_owned(),
        ..Options::default()
    };
    let a = TestProxy::start_with(opts(None)).await;
    let b = TestProxy::start_with(opts(Some(a.replica.clone()))).await;
    let calls = (0..8).map(|i| {
        let url = if i % 2 == 0 { &a } else { &b }.own_url("/register");
        async move {
            crate::support::http()
                .post(url)
                .header("x-forwarded-for", "198.51.100.40")
                .json(&serde_json::json!({
                    "client_name": format!("Tool {i}"),
                    "redirect_uris": [format!("https://tool{i}.example/cb")],
                    "token_endpoint_auth_method": "none",
                }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    let mut statuses = futures_util::future::join_all(calls).await;
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 201, 201, 429, 429, 429, 429, 429]);
    assert_eq!(a.count(mcp_oauth_proxy::store::Keyspace::Clients).await, 3);
}
