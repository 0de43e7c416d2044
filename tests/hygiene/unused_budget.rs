//! Never-used registrations are bounded (issue 31): open registration let anyone store a
//! client record for a day per request. Each source (IPv4 address, IPv6 /64), each /48 and
//! everyone together may hold only so many registrations nobody has used, in count and in
//! bytes; one more is refused with 429 `slow_down` and `Retry-After`, and stores nothing. A
//! registration that gets used leaves the budget.

use serde_json::{Value, json};

use super::{behind_trusted_proxy, body, register_as};
use crate::support::client::JsonResp;
use crate::support::{Browser, Client, TestProxy};
use mcp_oauth_proxy::store::Keyspace;

const BUDGETS: &str = "[registration]\nmax_unused_per_source = 4\nmax_unused_bytes_per_source = 65536\nmax_unused = 30\nmax_unused_bytes = 1048576\n";

/// A registration of about 10 KB (five redirect URIs near the 2000-character limit), charged
/// about 20 KB with its audit event.
fn huge(n: usize) -> Value {
    let uris: Vec<String> = (0..5)
        .map(|i| format!("https://big{n}.example/{i}/{}", "p".repeat(1_950)))
        .collect();
    json!({
        "client_name": format!("Big {n}"),
        "redirect_uris": uris,
        "token_endpoint_auth_method": "none",
    })
}

fn small(n: usize) -> Value {
    body(&format!("Tool {n}"), &format!("https://tool{n}.example/cb"))
}

/// Everything a registration stores, to show a refusal stored none of it.
async fn stored(proxy: &TestProxy) -> (usize, usize, usize, usize) {
    (
        proxy.count(Keyspace::Clients).await,
        proxy.count(Keyspace::UnusedBudgets).await,
        proxy.count(Keyspace::ClientDedupe).await,
        proxy.app.audit.all().await.unwrap().len(),
    )
}

/// The refusal: RFC 7591's error shape (RFC 6749 §5.2 JSON), 429 `slow_down`, `Retry-After`
/// no sooner than the oldest charges end (a day, rounded up to the hour), and nothing stored.
async fn assert_refused(proxy: &TestProxy, from: &str, body: &Value, says: &str) {
    let before = stored(proxy).await;
    let r: JsonResp = register_as(proxy, Some(from), None, body).await;
    assert_eq!(r.status, 429, "{from}: {:?}", r.json);
    assert_eq!(r.json["error"], "slow_down", "{:?}", r.json);
    let description = r.json["error_description"].as_str().unwrap();
    assert!(description.contains(says), "{description}");
    assert!(r.json.get("client_id").is_none());
    assert_eq!(r.headers["cache-control"], "no-store");
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((86_400..=86_400 + 3_600).contains(&retry), "{retry}");
    assert_eq!(
        stored(proxy).await,
        before,
        "{from}: a refusal stores nothing"
    );
}

async fn accepted(proxy: &TestProxy, from: &str, body: &Value) -> String {
    let r = register_as(proxy, Some(from), None, body).await;
    assert_eq!(r.status, 201, "{from}: {:?}", r.json);
    r.json["client_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn never_used_registrations_are_bounded_per_source_and_globally() {
    let proxy = behind_trusted_proxy(BUDGETS).await;
    let this_address = "this address holds too many registrations that were never used";

    // One address: bytes first (three charged about 20 KB each fit in 64 KiB, a fourth does
    // not, a small one does), then the count (four).
    let a = "198.51.100.1";
    for n in 0..3 {
        accepted(&proxy, a, &huge(n)).await;
    }
    assert_refused(&proxy, a, &huge(3), this_address).await;
    let small_one = accepted(&proxy, a, &small(0)).await;
    assert_refused(&proxy, a, &small(1), this_address).await;
    // Another address is not held back by it.
    accepted(&proxy, "198.51.100.2", &small(2)).await;

    // IPv6: four per /64, and a /48 holds four /64s' worth: a fifth /64 of it is refused.
    let mut n = 10;
    for sub in 1..=4 {
        for host in 1..=4 {
            accepted(&proxy, &format!("2001:db8:7:{sub}::{host}"), &small(n)).await;
            n += 1;
        }
        assert_refused(
            &proxy,
            &format!("2001:db8:7:{sub}::99"),
            &small(n),
            this_address,
        )
        .await;
    }
    assert_refused(&proxy, "2001:db8:7:5::1", &small(n), this_address).await;
    // Another /48 is not.
    accepted(&proxy, "2001:db8:8::1", &small(n)).await;

    // Everyone's: 4 + 1 + 16 + 1 held; eight more addresses fill the 30, the next is refused.
    for i in 0..8 {
        accepted(&proxy, &format!("203.0.113.{i}"), &small(100 + i)).await;
    }
    assert_refused(
        &proxy,
        "203.0.113.200",
        &small(200),
        "this server holds too many registrations that were never used",
    )
    .await;

    // A registration that gets used leaves the budget: the first address's small one signs in,
    // and the address may register again; so may a new one, within everyone's budget.
    let used = Client {
        id: small_one,
        secret: None,
        redirect_uri: "https://tool0.example/cb".to_owned(),
    };
    used.tokens(&proxy, &Browser::new(), "alice").await;
    accepted(&proxy, a, &small(300)).await;
    assert_refused(&proxy, a, &small(301), this_address).await;

    // Refusals are anonymous: counted per source and minute, never one event each.
    proxy.app.audit.flush_refusals(true).await.unwrap();
    let trail = proxy.app.audit.all().await.unwrap();
    let count = |reason: &str| -> u64 {
        trail
            .iter()
            .filter(|r| {
                r.kind == "anonymous_refusals"
                    && r.event["refused_at"] == "registration"
                    && r.event["reason"] == reason
            })
            .map(|r| r.event["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(count("unused_budget_source"), 8, "{trail:?}");
    assert_eq!(count("unused_budget_everyone"), 1, "{trail:?}");
}

/// Registrations vouched for by the initial access token are the operator's: not charged.
#[tokio::test]
async fn registrations_with_the_initial_access_token_are_not_charged() {
    let iat = "i".repeat(40);
    let proxy = behind_trusted_proxy(&format!(
        "[registration]\npolicy = \"initial_access_token\"\ninitial_access_token = \"{iat}\"\nmax_unused_per_source = 1\nmax_unused = 1\n"
    ))
    .await;
    for n in 0..3 {
        let r = register_as(
            &proxy,
            Some("198.51.100.9"),
            Some(&format!("Bearer {iat}")),
            &small(n),
        )
        .await;
        assert_eq!(r.status, 201, "{:?}", r.json);
    }
    assert_eq!(proxy.count(Keyspace::UnusedBudgets).await, 0);
}

/// What a registration is charged covers what it stores: its record, its charge record and
/// its `client_registered` audit event (key and row), within a few hundred bytes.
#[tokio::test]
async fn charged_bytes_cover_what_a_registration_stores() {
    use mcp_oauth_proxy::store::StoreExt as _;
    use mcp_oauth_proxy::store::records::UnusedBudgetRecord;

    let proxy = behind_trusted_proxy(BUDGETS).await;
    let store = proxy.app.store.as_ref();
    for (n, registration) in [small(500), huge(501)].into_iter().enumerate() {
        let from = format!("192.0.2.{n}");
        let id = accepted(&proxy, &from, &registration).await;
        let budget: UnusedBudgetRecord = store
            .get_json(Keyspace::UnusedBudgets, &format!("ip|{from}"))
            .await
            .unwrap()
            .unwrap();
        let charged = budget.buckets[0].bytes;
        let record = store.get(Keyspace::Clients, &id).await.unwrap().unwrap();
        let charge = store
            .get(Keyspace::UnusedBudgets, &format!("charge|{id}"))
            .await
            .unwrap()
            .unwrap();
        let events = store.scan_prefix(Keyspace::Audit, "").await.unwrap();
        let (key, row) = events
            .iter()
            .find(|(_, row)| {
                let text = String::from_utf8_lossy(&row.value);
                text.contains("client_registered") && text.contains(&id)
            })
            .unwrap();
        let stored = record.value.len() + charge.value.len() + key.len() + row.value.len();
        let stored = u64::try_from(stored).unwrap();
        assert!(charged >= stored, "charged {charged} < stored {stored}");
        assert!(charged - stored < 512, "charged {charged}, stored {stored}");
    }
}
