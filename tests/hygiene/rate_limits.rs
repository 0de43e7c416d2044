//! Rate limits on /register and /token: OAuth-shaped 429 with Retry-After, a bucket per
//! client IP that leaves other IPs alone, a global ceiling, forwarded headers believed only
//! from trusted proxies, and refused requests change nothing.

use super::{behind_trusted_proxy, body, register_as, token_as};
use crate::support::client::JsonResp;
use crate::support::{Browser, Client, Options, Pkce, TestProxy, http};
use mcp_oauth_proxy::store::Keyspace;

/// Per IP: a burst of 2, then 1 a minute. Everyone: a burst of 3, then 1 a minute.
const SMALL_REGISTER: &str = "[rate_limits.register]\nper_ip_per_minute = 1\nper_ip_burst = 2\nglobal_per_minute = 1\nglobal_burst = 3\n";

fn assert_429(r: &JsonResp, retry_after: &str) {
    assert_eq!(r.status, 429, "{:?}", r.json);
    assert_eq!(r.error(), "slow_down");
    assert!(
        r.json["error_description"]
            .as_str()
            .unwrap()
            .contains("Retry-After")
    );
    assert_eq!(r.headers["retry-after"], retry_after);
    assert_eq!(r.headers["cache-control"], "no-store");
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
}

#[tokio::test]
async fn registration_flood_from_one_address_gets_429_with_retry_after_and_stores_nothing() {
    let proxy = behind_trusted_proxy(SMALL_REGISTER).await;
    let b = body("Agent", "https://app.example/cb");
    for _ in 0..2 {
        let r = register_as(&proxy, Some("203.0.113.1"), None, &b).await;
        assert_eq!(r.status, 201, "{:?}", r.json);
    }
    let r = register_as(&proxy, Some("203.0.113.1"), None, &b).await;
    assert_429(&r, "60");
    assert!(
        r.json["error_description"]
            .as_str()
            .unwrap()
            .contains("this address")
    );
    assert_eq!(proxy.count(Keyspace::Clients).await, 2);
    let registered = proxy
        .audit_events()
        .await
        .iter()
        .filter(|e| *e == "client_registered")
        .count();
    assert_eq!(registered, 2);
    // After the advertised wait, the address may register again.
    proxy.clock.advance(60);
    let r = register_as(&proxy, Some("203.0.113.1"), None, &b).await;
    assert_eq!(r.status, 201, "{:?}", r.json);
}

#[tokio::test]
async fn another_address_is_unaffected_by_one_addresses_flood() {
    let proxy = behind_trusted_proxy(SMALL_REGISTER).await;
    let b = body("Agent", "https://app.example/cb");
    for _ in 0..2 {
        register_as(&proxy, Some("203.0.113.1"), None, &b).await;
    }
    assert_eq!(
        register_as(&proxy, Some("203.0.113.1"), None, &b)
            .await
            .status,
        429
    );
    let r = register_as(&proxy, Some("198.51.100.7"), None, &b).await;
    assert_eq!(r.status, 201, "{:?}", r.json);
}

#[tokio::test]
async fn global_ceiling_holds_across_addresses() {
    let proxy = behind_trusted_proxy(SMALL_REGISTER).await;
    let b = body("Agent", "https://app.example/cb");
    for ip in ["203.0.113.1", "203.0.113.2", "203.0.113.3"] {
        let r = register_as(&proxy, Some(ip), None, &b).await;
        assert_eq!(r.status, 201, "{ip}: {:?}", r.json);
    }
    // A fresh address has its own bucket full, but everyone's is empty.
    let r = register_as(&proxy, Some("203.0.113.4"), None, &b).await;
    assert_429(&r, "60");
    assert!(
        r.json["error_description"]
            .as_str()
            .unwrap()
            .contains("the server")
    );
    assert_eq!(proxy.count(Keyspace::Clients).await, 3);
}

#[tokio::test]
async fn spoofed_forwarded_for_from_an_untrusted_peer_does_not_buy_a_fresh_bucket() {
    // No trusted proxies: every request is from 127.0.0.1, whatever it claims.
    let proxy = TestProxy::start_with(Options {
        extra_toml: SMALL_REGISTER.to_owned(),
        ..Options::default()
    })
    .await;
    let b = body("Agent", "https://app.example/cb");
    for ip in ["203.0.113.1", "203.0.113.2"] {
        assert_eq!(register_as(&proxy, Some(ip), None, &b).await.status, 201);
    }
    let r = register_as(&proxy, Some("203.0.113.3"), None, &b).await;
    assert_429(&r, "60");
    assert!(
        r.json["error_description"]
            .as_str()
            .unwrap()
            .contains("this address")
    );
    // And the audit trail names the real peer, not the claimed address.
    let all = proxy.app.audit.all().await.unwrap();
    assert!(
        all.iter()
            .filter(|e| e.event["event"] == "client_registered")
            .all(|e| e.event["ip"] == "127.0.0.1")
    );
}

#[tokio::test]
async fn token_endpoint_is_limited_and_a_refused_redemption_leaves_the_code_usable() {
    let proxy = behind_trusted_proxy(
        "[rate_limits.token]\nper_ip_per_minute = 1\nper_ip_burst = 2\nglobal_per_minute = 10\nglobal_burst = 10\n",
    )
    .await;
    let c = Client::register(&proxy, "Agent", "https://app.example/cb").await;
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    let bad = [("grant_type", "authorization_code"), ("code", "mcpac_nope")];
    for _ in 0..2 {
        // Refused on its merits (no client), but each one spends the bucket.
        assert_eq!(token_as(&proxy, "203.0.113.9", &bad).await.status, 401);
    }
    let resource = proxy.url("/mcp");
    let redeem = [
        ("grant_type", "authorization_code"),
        ("client_id", c.id.as_str()),
        ("code", code.as_str()),
        ("redirect_uri", c.redirect_uri.as_str()),
        ("code_verifier", pkce.verifier.as_str()),
        ("resource", resource.as_str()),
    ];
    let r = token_as(&proxy, "203.0.113.9", &redeem).await;
    assert_429(&r, "60");
    assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
    assert_eq!(
        proxy.count(Keyspace::Codes).await,
        1,
        "the code is not consumed"
    );
    // Another address is not limited; the code still works.
    let r = token_as(&proxy, "198.51.100.2", &redeem).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
}

#[tokio::test]
async fn preflight_and_other_endpoints_are_not_limited() {
    let proxy = behind_trusted_proxy(SMALL_REGISTER).await;
    let b = body("Agent", "https://app.example/cb");
    for _ in 0..2 {
        register_as(&proxy, Some("203.0.113.1"), None, &b).await;
    }
    let r = http()
        .request(reqwest::Method::OPTIONS, proxy.url("/register"))
        .header("x-forwarded-for", "203.0.113.1")
        .header("origin", "https://inspector.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = http()
        .get(proxy.url("/.well-known/oauth-authorization-server"))
        .header("x-forwarded-for", "203.0.113.1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn the_initial_access_token_exempts_from_the_per_ip_bucket_but_guessers_are_held_to_it() {
    let iat = "iat-0123456789abcdef0123456789abcdef";
    let proxy = behind_trusted_proxy(&format!(
        "[registration]\npolicy = \"initial_access_token\"\ninitial_access_token = \"{iat}\"\n[rate_limits.register]\nper_ip_per_minute = 1\nper_ip_burst = 2\nglobal_per_minute = 1\nglobal_burst = 5\n"
    ))
    .await;
    let b = body("Agent", "https://app.example/cb");
    let vouched = format!("Bearer {iat}");
    // An operator's provisioning job behind one address registers more than its bucket.
    for _ in 0..3 {
        let r = register_as(&proxy, Some("203.0.113.1"), Some(&vouched), &b).await;
        assert_eq!(r.status, 201, "{:?}", r.json);
    }
    assert_eq!(
        proxy.app.limits.tracked_ips(),
        0,
        "no per-IP bucket was made"
    );
    // Someone guessing the token from one address gets its per-IP burst, then 429.
    for _ in 0..2 {
        let r = register_as(&proxy, Some("198.51.100.9"), Some("Bearer guess"), &b).await;
        assert_eq!(r.status, 401);
    }
    let r = register_as(&proxy, Some("198.51.100.9"), Some("Bearer guess"), &b).await;
    assert_429(&r, "60");
    // The global bucket still applies to vouched requests (5 spent: 3 + 2).
    let r = register_as(&proxy, Some("203.0.113.1"), Some(&vouched), &b).await;
    assert_429(&r, "60");
    assert!(
        r.json["error_description"]
            .as_str()
            .unwrap()
            .contains("the server")
    );
    assert_eq!(proxy.count(Keyspace::Clients).await, 3);
}

#[tokio::test]
async fn a_flood_refused_by_the_global_bucket_does_not_drain_a_quiet_addresses_bucket() {
    // Per IP: a burst of 2. Everyone: a burst of 3, then 1 a second.
    let proxy = behind_trusted_proxy(
        "[rate_limits.register]\nper_ip_per_minute = 1\nper_ip_burst = 2\nglobal_per_minute = 60\nglobal_burst = 3\n",
    )
    .await;
    let b = body("Agent", "https://app.example/cb");
    assert_eq!(
        register_as(&proxy, Some("203.0.113.1"), None, &b)
            .await
            .status,
        201
    );
    for _ in 0..2 {
        assert_eq!(
            register_as(&proxy, Some("203.0.113.2"), None, &b)
                .await
                .status,
            201
        );
    }
    // The flooder's own bucket refuses it first: everyone's bucket is not asked.
    for _ in 0..5 {
        let r = register_as(&proxy, Some("203.0.113.2"), None, &b).await;
        assert_429(&r, "60");
    }
    // Everyone's bucket is empty: other addresses are refused by it, each charged to its
    // own bucket only.
    for i in 10..20 {
        let r = register_as(&proxy, Some(&format!("203.0.113.{i}")), None, &b).await;
        assert_429(&r, "1");
    }
    proxy.clock.advance(1);
    // The quiet address still has the rest of its burst.
    let r = register_as(&proxy, Some("203.0.113.1"), None, &b).await;
    assert_eq!(r.status, 201, "{:?}", r.json);
    assert_eq!(proxy.count(Keyspace::Clients).await, 4);
    let metrics = proxy.app.metrics.render().unwrap();
    for (reason, n) in [("register_per_ip", 5), ("register_global", 10)] {
        assert!(
            metrics.contains(&format!(
                "mcp_proxy_rejections_total{{source=\"rate_limit\",reason=\"{reason}\"}} {n}"
            )),
            "{metrics}"
        );
    }
}
