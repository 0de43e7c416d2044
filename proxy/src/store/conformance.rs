//! One behaviour for every `Store`: the same checks run against sled and PostgreSQL, so the
//! rest of the proxy cannot tell them apart.

use std::sync::Arc;

use super::{Keyspace, Store, Versioned};
use crate::clock::{ManualClock, UnixTime};

/// Runs every check against `store`, whose clock is `clock` (starting at 1000).
pub(crate) async fn run(store: Arc<dyn Store>, clock: Arc<ManualClock>) {
    take_is_single_use_under_concurrency(store.clone()).await;
    expired_records_read_as_absent_and_cannot_be_taken(store.clone(), clock.clone()).await;
    insert_new_refuses_a_live_record_but_replaces_an_expired_one(store.clone(), clock.clone())
        .await;
    compare_and_swap_fails_on_a_changed_record(store.clone()).await;
    compare_and_swap_races_have_one_winner(store.clone()).await;
    scan_prefix_is_exact_and_ordered(store.clone()).await;
    scan_page_pages_in_order_within_the_prefix(store.clone(), clock.clone()).await;
    sweep_removes_only_expired(store.clone(), clock.clone()).await;
}

async fn take_is_single_use_under_concurrency(s: Arc<dyn Store>) {
    s.put(Keyspace::Codes, "take-k", b"v".to_vec(), None)
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..32 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            s.take(Keyspace::Codes, "take-k").await.unwrap()
        }));
    }
    let mut won = 0;
    for h in handles {
        if h.await.unwrap().is_some() {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one take wins");
}

async fn expired_records_read_as_absent_and_cannot_be_taken(
    s: Arc<dyn Store>,
    clock: Arc<ManualClock>,
) {
    let t = clock.now_for_tests();
    s.put(Keyspace::Codes, "exp-k", b"v".to_vec(), Some(t.plus(60)))
        .await
        .unwrap();
    assert!(s.get(Keyspace::Codes, "exp-k").await.unwrap().is_some());
    clock.advance(60);
    assert!(s.get(Keyspace::Codes, "exp-k").await.unwrap().is_none());
    assert!(s.take(Keyspace::Codes, "exp-k").await.unwrap().is_none());
}

async fn insert_new_refuses_a_live_record_but_replaces_an_expired_one(
    s: Arc<dyn Store>,
    clock: Arc<ManualClock>,
) {
    let t = clock.now_for_tests();
    assert!(
        s.insert_new(Keyspace::Clients, "ins-c", b"1".to_vec(), Some(t.plus(10)))
            .await
            .unwrap()
    );
    assert!(
        !s.insert_new(Keyspace::Clients, "ins-c", b"2".to_vec(), None)
            .await
            .unwrap()
    );
    assert_eq!(
        s.get(Keyspace::Clients, "ins-c")
            .await
            .unwrap()
            .unwrap()
            .value,
        b"1"
    );
    clock.advance(10);
    assert!(
        s.insert_new(Keyspace::Clients, "ins-c", b"3".to_vec(), None)
            .await
            .unwrap()
    );
    assert_eq!(
        s.get(Keyspace::Clients, "ins-c")
            .await
            .unwrap()
            .unwrap()
            .value,
        b"3"
    );
}

async fn compare_and_swap_fails_on_a_changed_record(s: Arc<dyn Store>) {
    s.put(Keyspace::RefreshFamilies, "cas-f", b"a".to_vec(), None)
        .await
        .unwrap();
    let v = s
        .get(Keyspace::RefreshFamilies, "cas-f")
        .await
        .unwrap()
        .unwrap();
    let next = Versioned {
        value: b"b".to_vec(),
        expires_at: None,
    };
    assert!(
        s.compare_and_swap(Keyspace::RefreshFamilies, "cas-f", &v, Some(next.clone()))
            .await
            .unwrap()
    );
    assert!(
        !s.compare_and_swap(Keyspace::RefreshFamilies, "cas-f", &v, Some(next.clone()))
            .await
            .unwrap()
    );
    assert!(
        s.compare_and_swap(Keyspace::RefreshFamilies, "cas-f", &next, None)
            .await
            .unwrap()
    );
    assert!(
        s.get(Keyspace::RefreshFamilies, "cas-f")
            .await
            .unwrap()
            .is_none()
    );
}

async fn compare_and_swap_races_have_one_winner(s: Arc<dyn Store>) {
    s.put(Keyspace::RefreshFamilies, "race-f", b"0".to_vec(), None)
        .await
        .unwrap();
    let v = s
        .get(Keyspace::RefreshFamilies, "race-f")
        .await
        .unwrap()
        .unwrap();
    let mut handles = Vec::new();
    for i in 0..16u8 {
        let (s, v) = (s.clone(), v.clone());
        handles.push(tokio::spawn(async move {
            let next = Versioned {
                value: vec![i],
                expires_at: None,
            };
            s.compare_and_swap(Keyspace::RefreshFamilies, "race-f", &v, Some(next))
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for h in handles {
        if h.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one swap wins");
}

async fn scan_prefix_is_exact_and_ordered(s: Arc<dyn Store>) {
    for k in ["scan|a|2", "scan|a|1", "scan|ab|1", "scan|b|1", "scan_a|1"] {
        s.put(Keyspace::Consents, k, k.as_bytes().to_vec(), None)
            .await
            .unwrap();
    }
    let keys: Vec<String> = s
        .scan_prefix(Keyspace::Consents, "scan|a|")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, vec!["scan|a|1", "scan|a|2"]);
    // `_` and `%` in a prefix are literal, not wildcards.
    let keys: Vec<String> = s
        .scan_prefix(Keyspace::Consents, "scan_")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, vec!["scan_a|1"]);
    assert!(
        s.scan_prefix(Keyspace::Sessions, "scan")
            .await
            .unwrap()
            .is_empty(),
        "keyspaces are separate"
    );
}

async fn scan_page_pages_in_order_within_the_prefix(s: Arc<dyn Store>, clock: Arc<ManualClock>) {
    let soon = Some(crate::clock::Clock::now(&*clock).plus(5));
    for (k, exp) in [
        ("page|3", None),
        ("page|1", None),
        ("page|2", soon),
        ("page|4", None),
        ("page_x", None),
        ("pagf|1", None),
    ] {
        s.put(Keyspace::Transactions, k, vec![1], exp)
            .await
            .unwrap();
    }
    let keys = |rows: Vec<(String, Versioned)>| -> Vec<String> {
        rows.into_iter().map(|(k, _)| k).collect()
    };
    let p1 = s
        .scan_page(Keyspace::Transactions, "page|", None, 2)
        .await
        .unwrap();
    assert_eq!(keys(p1), ["page|1", "page|2"]);
    let p2 = s
        .scan_page(Keyspace::Transactions, "page|", Some("page|2"), 2)
        .await
        .unwrap();
    assert_eq!(keys(p2), ["page|3", "page|4"], "after is exclusive");
    let p3 = s
        .scan_page(Keyspace::Transactions, "page|", Some("page|4"), 2)
        .await
        .unwrap();
    assert!(p3.is_empty(), "the prefix ends; `_` is literal");
    clock.advance(10);
    let live = s
        .scan_page(Keyspace::Transactions, "page|", None, 10)
        .await
        .unwrap();
    assert_eq!(
        keys(live),
        ["page|1", "page|3", "page|4"],
        "expired records skipped"
    );
}

async fn sweep_removes_only_expired(s: Arc<dyn Store>, clock: Arc<ManualClock>) {
    let t = clock.now_for_tests();
    s.put(
        Keyspace::Transactions,
        "sw-old",
        b"x".to_vec(),
        Some(t.plus(1)),
    )
    .await
    .unwrap();
    s.put(
        Keyspace::Transactions,
        "sw-new",
        b"x".to_vec(),
        Some(t.plus(9_999)),
    )
    .await
    .unwrap();
    s.put(Keyspace::Transactions, "sw-forever", b"x".to_vec(), None)
        .await
        .unwrap();
    clock.advance(5);
    assert!(s.sweep_expired().await.unwrap() >= 1);
    let keys: Vec<String> = s
        .scan_prefix(Keyspace::Transactions, "sw-")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, vec!["sw-forever", "sw-new"]);
}

/// `Clock::now` without importing the trait at every call site.
trait NowForTests {
    fn now_for_tests(&self) -> UnixTime;
}

impl NowForTests for ManualClock {
    fn now_for_tests(&self) -> UnixTime {
        crate::clock::Clock::now(self)
    }
}
