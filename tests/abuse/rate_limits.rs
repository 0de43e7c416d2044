//! Every public endpoint a stranger can make work for (issue 15): `/revoke` (a client-secret
//! oracle), `/authorize`, `/callback/github`, `/consent`, `/connect/{code}` and the account
//! forms have a per-source and a global rate limit, configured under `[rate_limits.<name>]`,
//! answered with the same 429 as `/register` and `/token` (`Retry-After`, `no-store`,
//! `slow_down`), before any handler runs.

use crate::support::{Options, TestProxy, http};

/// A proxy that believes `X-Forwarded-For` from 127.0.0.1, so the test can speak as any
/// source, with tiny limits on the endpoints under test: per source a burst of 2 and then one
/// a minute; everyone together a burst of 3 and then one a minute.
async fn small_limits() -> TestProxy {
    let mut toml = String::new();
    for name in [
        "revoke",
        "authorize",
        "callback",
        "consent",
        "connect",
        "account",
    ] {
        toml.push_str(&format!(
            "[rate_limits.{name}]\nper_ip_per_minute = 1\nper_ip_burst = 2\nglobal_per_minute = 1\nglobal_burst = 3\n"
        ));
    }
    TestProxy::start_with(Options {
        server_toml: "trusted_proxies = [\"127.0.0.1\"]".to_owned(),
        extra_toml: toml,
        ..Options::default()
    })
    .await
}

/// One request to `path` (`POST` with an empty form, or `GET`) as `from`.
async fn send(proxy: &TestProxy, post: bool, path: &str, from: &str) -> reqwest::Response {
    let url = proxy.url(path);
    let req = if post {
        http()
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("")
    } else {
        http().get(url)
    };
    req.header("x-forwarded-for", from).send().await.unwrap()
}

async fn assert_429(r: reqwest::Response, retry_after: &str, what: &str) {
    assert_eq!(r.status(), 429, "{what}");
    assert_eq!(r.headers()["retry-after"], retry_after, "{what}");
    assert_eq!(r.headers()["cache-control"], "no-store", "{what}");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"], "slow_down", "{what}");
}

#[tokio::test]
async fn every_public_endpoint_has_a_per_source_and_a_global_rate_limit() {
    let proxy = small_limits().await;
    let endpoints = [
        (true, "/revoke", "revoke"),
        (false, "/authorize", "authorize"),
        (false, "/callback/github", "callback"),
        (true, "/consent", "consent"),
        (false, "/connect/nope", "connect"),
        (true, "/connect/nope", "connect"),
        (true, "/account/sign-out", "account"),
        (true, "/account/revoke", "account"),
    ];
    // Each endpoint (and each method of /connect, each account form) shares its section's
    // buckets; sources are distinct per section so only the buckets under test are spent.
    let mut seen = std::collections::HashSet::new();
    for (n, (post, path, name)) in endpoints.iter().enumerate() {
        if !seen.insert(*name) {
            // The second route of a section: its source's bucket is already empty.
            let r = send(&proxy, *post, path, &format!("198.51.100.{}", 10 + n - 1)).await;
            assert_429(r, "60", &format!("{path}: same section, same bucket")).await;
            continue;
        }
        let a = format!("198.51.100.{}", 10 + n);
        // Per source: the burst of 2 is let through to the handler (whatever it answers).
        for _ in 0..2 {
            let r = send(&proxy, *post, path, &a).await;
            assert_ne!(r.status(), 429, "{path}");
        }
        let r = send(&proxy, *post, path, &a).await;
        assert_429(r, "60", &format!("{path}: per source")).await;
        // The global burst of 3 has one request left, for another source; then everyone is
        // refused (retry within the global refill).
        let b = format!("203.0.113.{}", 10 + n);
        assert_ne!(send(&proxy, *post, path, &b).await.status(), 429, "{path}");
        let c = format!("192.0.2.{}", 10 + n);
        let r = send(&proxy, *post, path, &c).await;
        assert_429(r, "60", &format!("{path}: global")).await;
    }
    let metrics = proxy.app.metrics.render().unwrap();
    for name in [
        "revoke",
        "authorize",
        "callback",
        "consent",
        "connect",
        "account",
    ] {
        for bucket in ["per_ip", "global"] {
            assert!(
                metrics.contains(&format!(
                    "mcp_proxy_rate_limited_total{{endpoint=\"{name}\",bucket=\"{bucket}\"}}"
                )),
                "{name} {bucket}: {metrics}"
            );
        }
    }
}

/// The limits are generous by default: a busy office behind one address (or an AI
/// platform's hosted browser) is not refused for a normal morning's sign-ins.
#[tokio::test]
async fn default_limits_let_a_shared_address_sign_in_many_people() {
    let proxy = TestProxy::start().await;
    for _ in 0..60 {
        let r = send(
            &proxy,
            false,
            "/callback/github?state=x&code=y",
            "127.0.0.1",
        )
        .await;
        assert_eq!(r.status(), 400);
        let r = send(&proxy, false, "/authorize?client_id=nope", "127.0.0.1").await;
        assert_ne!(r.status(), 429);
    }
}
