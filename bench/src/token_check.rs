//! Benchmark 4, run in a child process of its own so its memory figures are the proxy's alone:
//! resident memory of an idle proxy (serving, empty durable store), the same proxy after its
//! store holds `large` live access tokens, and the cost of the `/mcp` token check
//! (`flows::access::authenticate`) against that store versus one holding `small` tokens,
//! measured in interleaved rounds.
//!
//! Stores are populated through the `Store` trait with the record types `/token` writes
//! (`AccessTokenRecord` under the token's hash, and its `FamilyRecord`, one family per token
//! as after a code redemption), with `StoreExt::put_json` and the same expiries, by a few
//! concurrent writers (each write is durable, as in the proxy; concurrent flushes are shared;
//! more writers would risk sled 0.34.7's `flush_async` hang, see `store_fixed.rs`).

use std::time::Duration;

use futures_util::future::join_all;
use mcp_oauth_proxy::app::App;
use mcp_oauth_proxy::clock::{Clock, SystemClock};
use mcp_oauth_proxy::crypto;
use mcp_oauth_proxy::flows::access;
use mcp_oauth_proxy::ids::{AccessToken, ClientId, FamilyId, UserId};
use mcp_oauth_proxy::oauth::grant::ACCESS_PREFIX;
use mcp_oauth_proxy::oauth::scope::ScopeSet;
use mcp_oauth_proxy::store::records::{AccessTokenRecord, FamilyRecord};
use mcp_oauth_proxy::store::{Keyspace, StoreExt};
use serde_json::json;

use crate::harness;
use crate::timing::{Rng, Samples, now, ns_since, or_hang, rss_kib};

/// Concurrent writers while populating: below the 7 concurrent `flush_async` callers at which
/// sled 0.34.7 can hang (see `store_fixed.rs`); nothing else in this process flushes (no
/// sweeper, no requests).
const WRITERS: usize = 6;

/// The secret of bench token `i` (prefixed like real access tokens, so it is looked up).
fn secret(i: u64) -> String {
    format!("{ACCESS_PREFIX}bench-{i:012}")
}

fn family(i: u64) -> FamilyId {
    FamilyId::new(crypto::b64url(
        crypto::sha256(format!("family-{i}").as_bytes())
            .get(..16)
            .unwrap_or_default(),
    ))
}

async fn populate(app: &App, n: u64) -> Duration {
    let start = now();
    let t = SystemClock.now();
    let resource = app.resource();
    let scopes = ScopeSet::from_list(["read:user"]);
    let client = ClientId::new("mcpc_bench_client");
    let access_ttl = app.config.tokens.access_token_ttl_secs;
    let family_ttl = app.config.tokens.refresh_idle_ttl_secs;
    let writers = WRITERS as u64;
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let store = app.store.clone();
            let resource = resource.clone();
            let scopes = scopes.clone();
            let client = client.clone();
            tokio::spawn(async move {
                let mut j = w;
                while j < n {
                    let user = UserId::github(100_000 + j % 50_000);
                    let fam = family(j);
                    let token = AccessTokenRecord {
                        family_id: fam.clone(),
                        user_id: user.clone(),
                        client_id: client.clone(),
                        scopes: scopes.clone(),
                        resource: resource.clone(),
                        issued_at: t,
                        expires_at: t.plus(access_ttl),
                        branch: Some(0),
                    };
                    let family = FamilyRecord::new(
                        fam.clone(),
                        user,
                        client.clone(),
                        scopes.clone(),
                        resource.clone(),
                        crypto::hash_secret(&format!("refresh-{j}")),
                        t,
                    );
                    store
                        .put_json(
                            Keyspace::AccessTokens,
                            &AccessToken::new(secret(j)).hash(),
                            &token,
                            Some(t.plus(access_ttl)),
                        )
                        .await
                        .expect("put token");
                    store
                        .put_json(
                            Keyspace::RefreshFamilies,
                            fam.as_str(),
                            &family,
                            Some(t.plus(family_ttl)),
                        )
                        .await
                        .expect("put family");
                    if w == 0 && j % 100_000 < writers {
                        eprintln!("    … {j} tokens");
                    }
                    j += writers;
                }
            })
        })
        .collect();
    let limit = Duration::from_secs(60 + n / 1_000);
    or_hang("populating the store", limit, join_all(handles)).await;
    now().duration_since(start)
}

/// One check of every token, in index order; returns the mean in µs.
async fn warm(app: &App, n: u64) -> f64 {
    let start = now();
    for i in 0..n {
        let r = access::authenticate(app, &secret(i)).await.expect("store");
        assert!(r.is_ok(), "a populated token must authenticate");
    }
    now().duration_since(start).as_secs_f64() * 1e6 / n.max(1) as f64
}

async fn check_round(app: &App, n: u64, calls: usize, rng: &mut Rng, out: &mut Samples) {
    let mut lat = Vec::with_capacity(calls);
    let start = now();
    for _ in 0..calls {
        let bearer = secret(rng.below(n));
        let s = now();
        let r = access::authenticate(app, &bearer).await.expect("store");
        lat.push(ns_since(s));
        assert!(r.is_ok(), "a populated token must authenticate");
    }
    let mean = lat.iter().sum::<u64>() as f64 / lat.len().max(1) as f64 / 1_000.0;
    eprintln!("    round over {n} tokens: mean {mean:.2} µs");
    out.add(lat, now().duration_since(start));
}

/// The child's entry point: prints one JSON line with the results on stdout.
pub async fn child(small: u64, large: u64, rounds: usize, calls: usize) {
    let rss_start = rss_kib();
    // The proxy that will hold the large store, serving on a port but otherwise idle.
    let big = harness::start(harness::Options {
        github: None,
        backend_url: None,
        counters: None,
        sweeper: false,
        store: harness::Backing::Sled,
    })
    .await;
    let http = harness::http();
    for path in ["/healthz", "/.well-known/oauth-authorization-server"] {
        let r = http.get(big.url(path)).send().await.expect("idle probe");
        assert!(r.status().is_success());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss_idle = rss_kib();
    eprintln!(
        "  idle proxy: VmRSS {:.1} MiB (process start {:.1} MiB)",
        rss_idle as f64 / 1024.0,
        rss_start as f64 / 1024.0
    );

    eprintln!("  populating {large} live tokens (+ their families) …");
    let took_large = populate(&big.app, large).await;
    // Let sled's background work after a large write burst settle before measuring.
    big.app.store.flush().await.expect("flush");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_large = rss_kib();
    let disk_large = harness::dir_size(big.dir.path());
    eprintln!(
        "  {large} tokens: populated in {:.1} s ({:.0} records/s), VmRSS {:.1} MiB, on disk {:.1} MiB",
        took_large.as_secs_f64(),
        2.0 * large as f64 / took_large.as_secs_f64(),
        rss_large as f64 / 1024.0,
        disk_large as f64 / 1_048_576.0
    );

    let small_proxy = harness::start(harness::Options {
        github: None,
        backend_url: None,
        counters: None,
        sweeper: false,
        store: harness::Backing::Sled,
    })
    .await;
    let took_small = populate(&small_proxy.app, small).await;
    eprintln!(
        "  {small} tokens: populated in {:.1} s",
        took_small.as_secs_f64()
    );

    // Warm both with one pass over every token (the first pass after writing loads pages into
    // sled's cache), then interleave: small, large, large, small, …
    let warm_small = warm(&small_proxy.app, small).await;
    let warm_large = warm(&big.app, large).await;
    eprintln!(
        "  first pass over every token (cold): {small} tokens mean {warm_small:.2} µs | {large} tokens mean {warm_large:.2} µs"
    );
    let mut rng = Rng::new(0x5eed);
    let mut s_small = Samples::default();
    let mut s_large = Samples::default();
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for use_large in order {
            if use_large {
                check_round(&big.app, large, calls, &mut rng, &mut s_large).await;
            } else {
                check_round(&small_proxy.app, small, calls, &mut rng, &mut s_small).await;
            }
        }
    }
    eprintln!(
        "  token check: {small} tokens mean {:.2} µs p50 {:.2} µs p99 {:.2} µs | {large} tokens mean {:.2} µs p50 {:.2} µs p99 {:.2} µs",
        s_small.mean_us(),
        s_small.pct_us(50.0),
        s_small.pct_us(99.0),
        s_large.mean_us(),
        s_large.pct_us(50.0),
        s_large.pct_us(99.0),
    );
    let v = json!({
        "kind": "tokens",
        "small": small,
        "large": large,
        "rss_start_kib": rss_start,
        "rss_idle_kib": rss_idle,
        "rss_large_kib": rss_large,
        "disk_large_bytes": disk_large,
        "populate_large_secs": took_large.as_secs_f64(),
        "small_mean_us": s_small.mean_us(),
        "small_p50_us": s_small.pct_us(50.0),
        "small_p99_us": s_small.pct_us(99.0),
        "large_mean_us": s_large.mean_us(),
        "large_p50_us": s_large.pct_us(50.0),
        "large_p99_us": s_large.pct_us(99.0),
        "checks_per_side": s_small.count(),
        "warm_small_mean_us": warm_small,
        "warm_large_mean_us": warm_large,
    });
    println!("{v}");
}
