//! One behaviour for every `Store`: the same checks run against sled and PostgreSQL, so the
//! rest of the proxy cannot tell them apart.

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use super::update::hold;
use super::{Entry, Held, Keyspace, Step, Store, StoreError, Versioned, encode, update};
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
    update_applies_each_step(store.clone()).await;
    update_retries_a_lost_race_and_gives_up_after_its_attempts(store.clone()).await;
    concurrent_updates_lose_nothing(store.clone()).await;
    held_record_is_written_only_if_unchanged(store.clone()).await;
    put_many_writes_every_row_and_the_last_value_of_a_repeated_key(store.clone(), clock.clone())
        .await;
    an_assertion_jti_is_used_once_under_concurrency_until_it_expires(store.clone(), clock.clone())
        .await;
    get_many_answers_each_key_in_order_as_get_would(store.clone(), clock.clone()).await;
    batched_requests_see_their_own_writes_and_races_between_them_have_one_winner(store.clone())
        .await;
    rows_handed_to_the_final_flush_are_written_by_it_and_only_inside_a_batch(
        store.clone(),
        clock.clone(),
    )
    .await;
}

async fn rows_handed_to_the_final_flush_are_written_by_it_and_only_inside_a_batch(
    s: Arc<dyn Store>,
    clock: Arc<ManualClock>,
) {
    let soon = Some(UnixTime(crate::clock::Clock::now(&*clock).0 + 5));
    // Outside a batch the row comes back, for its writer to write itself.
    let row = ("fw|out".to_owned(), b"x".to_vec(), None);
    assert_eq!(
        super::write_at_flush(Keyspace::Audit, row.clone()),
        Err(row)
    );
    let seen_inside = super::batched(&s, async {
        s.put(Keyspace::Transactions, "fw|state", b"s".to_vec(), None)
            .await
            .unwrap();
        for (key, value) in [("fw|1", "first"), ("fw|2", "two"), ("fw|1", "last")] {
            let row = (key.to_owned(), value.as_bytes().to_vec(), soon);
            assert!(super::write_at_flush(Keyspace::Audit, row).is_ok());
        }
        // Written by the final flush: not yet while the request runs.
        s.get(Keyspace::Audit, "fw|1").await.unwrap()
    })
    .await
    .unwrap();
    assert_eq!(seen_inside, None);
    let got = audit_rows(s.as_ref(), "fw|").await;
    assert_eq!(
        got,
        vec![
            ("fw|1".to_owned(), b"last".to_vec(), soon),
            ("fw|2".to_owned(), b"two".to_vec(), soon),
        ]
    );
    assert!(
        s.get(Keyspace::Transactions, "fw|state")
            .await
            .unwrap()
            .is_some()
    );
    // Work that is not a request takes no rows: they come back to be written where made.
    let row = ("fw|not-a-request".to_owned(), b"x".to_vec(), None);
    let back = super::batched_without_rows(&s, async {
        super::write_at_flush(Keyspace::Audit, row.clone())
    })
    .await
    .unwrap();
    assert_eq!(back, Err(row));
    // A request that handed over rows and wrote nothing else still flushes them.
    super::batched(&s, async {
        let row = ("fw|3".to_owned(), b"alone".to_vec(), None);
        assert!(super::write_at_flush(Keyspace::Audit, row).is_ok());
    })
    .await
    .unwrap();
    assert!(s.get(Keyspace::Audit, "fw|3").await.unwrap().is_some());
}

/// The audit rows under `prefix`: key, value, expiry.
async fn audit_rows(s: &dyn Store, prefix: &str) -> Vec<(String, Vec<u8>, Option<UnixTime>)> {
    s.scan_prefix(Keyspace::Audit, prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, v.value, v.expires_at))
        .collect()
}

async fn get_many_answers_each_key_in_order_as_get_would(
    s: Arc<dyn Store>,
    clock: Arc<ManualClock>,
) {
    let now = crate::clock::Clock::now(&*clock).0;
    s.put(Keyspace::Grants, "gm|u", b"grant".to_vec(), None)
        .await
        .unwrap();
    s.put(Keyspace::Allowances, "gm|u|c", b"allowed".to_vec(), None)
        .await
        .unwrap();
    s.put(
        Keyspace::Allowances,
        "gm|u|old",
        b"x".to_vec(),
        Some(UnixTime(now + 1)),
    )
    .await
    .unwrap();
    clock.advance(2);
    let keys = [
        (Keyspace::Allowances, "gm|u|c"),
        (Keyspace::Grants, "gm|missing"),
        (Keyspace::Grants, "gm|u"),
        // The same key in another keyspace is another record.
        (Keyspace::Allowances, "gm|u"),
        (Keyspace::Allowances, "gm|u|old"),
        // Keys LIKE would treat as patterns match only themselves.
        (Keyspace::Grants, "gm|_"),
    ];
    let got: Vec<Option<Vec<u8>>> = s
        .get_many(&keys)
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.map(|v| v.value))
        .collect();
    assert_eq!(
        got,
        vec![
            Some(b"allowed".to_vec()),
            None,
            Some(b"grant".to_vec()),
            None,
            None,
            None
        ]
    );
    for (i, (ks, key)) in keys.iter().enumerate() {
        assert_eq!(
            s.get(*ks, key).await.unwrap().map(|v| v.value),
            got[i],
            "{key}"
        );
    }
    assert!(s.get_many(&[]).await.unwrap().is_empty());
}

/// Inside `batched` a write may skip waiting for its own flush (sled) or commit without waiting
/// for the WAL flush (PostgreSQL): it must still be atomic and visible at once, so the request
/// reads what it wrote, and of two requests racing on one code or one refresh family the one
/// that lost still loses.
async fn batched_requests_see_their_own_writes_and_races_between_them_have_one_winner(
    s: Arc<dyn Store>,
) {
    let own = super::batched(&s, async {
        s.put(Keyspace::Transactions, "b|own", b"mine".to_vec(), None)
            .await
            .unwrap();
        s.get(Keyspace::Transactions, "b|own").await.unwrap()
    })
    .await
    .unwrap();
    assert_eq!(own.map(|v| v.value), Some(b"mine".to_vec()));

    s.put(Keyspace::Codes, "b|code", b"v".to_vec(), None)
        .await
        .unwrap();
    s.put(Keyspace::RefreshFamilies, "b|fam", b"0".to_vec(), None)
        .await
        .unwrap();
    let v = s
        .get(Keyspace::RefreshFamilies, "b|fam")
        .await
        .unwrap()
        .unwrap();
    let mut handles = Vec::new();
    for i in 0..16u8 {
        let (s, v) = (s.clone(), v.clone());
        handles.push(tokio::spawn(async move {
            let shared = s.clone();
            super::batched(&shared, async move {
                let took = s.take(Keyspace::Codes, "b|code").await.unwrap().is_some();
                let next = Versioned {
                    value: vec![i],
                    expires_at: None,
                };
                let swapped = s
                    .compare_and_swap(Keyspace::RefreshFamilies, "b|fam", &v, Some(next))
                    .await
                    .unwrap();
                (took, swapped)
            })
            .await
            .unwrap()
        }));
    }
    let (mut took, mut swapped) = (0, 0);
    for h in handles {
        let (t, w) = h.await.unwrap();
        took += usize::from(t);
        swapped += usize::from(w);
    }
    assert_eq!((took, swapped), (1, 1), "exactly one take and one swap win");
    assert!(s.get(Keyspace::Codes, "b|code").await.unwrap().is_none());
}

async fn put_many_writes_every_row_and_the_last_value_of_a_repeated_key(
    s: Arc<dyn Store>,
    clock: Arc<ManualClock>,
) {
    s.put(Keyspace::Audit, "many|0", b"old".to_vec(), None)
        .await
        .unwrap();
    let soon = Some(UnixTime(crate::clock::Clock::now(&*clock).0 + 5));
    let rows = vec![
        ("many|0".to_owned(), b"replaced".to_vec(), None),
        ("many|1".to_owned(), b"first".to_vec(), soon),
        ("many|2".to_owned(), b"two".to_vec(), None),
        ("many|1".to_owned(), b"last".to_vec(), soon),
    ];
    s.put_many(Keyspace::Audit, rows).await.unwrap();
    s.put_many(Keyspace::Audit, Vec::new()).await.unwrap();
    let got = audit_rows(s.as_ref(), "many|").await;
    assert_eq!(
        got,
        vec![
            ("many|0".to_owned(), b"replaced".to_vec(), None),
            ("many|1".to_owned(), b"last".to_vec(), soon),
            ("many|2".to_owned(), b"two".to_vec(), None),
        ]
    );
}

async fn an_assertion_jti_is_used_once_under_concurrency_until_it_expires(
    s: Arc<dyn Store>,
    clock: Arc<ManualClock>,
) {
    use super::used_assertions::first_use;
    let t = clock.now_for_tests();
    let keep = t.plus(120);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { first_use(s.as_ref(), "client-j", "jti-1", t, keep).await })
        })
        .collect();
    let mut firsts = 0;
    for t in tasks {
        if t.await.unwrap().unwrap() {
            firsts += 1;
        }
    }
    assert_eq!(firsts, 1, "one jti authenticates once");
    // Another client's jti of the same value is its own.
    assert!(
        first_use(s.as_ref(), "client-k", "jti-1", t, keep)
            .await
            .unwrap()
    );
    clock.advance(121);
    // Past exp + skew the assertion is refused by its exp anyway; the record may go.
    assert!(
        first_use(
            s.as_ref(),
            "client-j",
            "jti-1",
            clock.now_for_tests(),
            keep.plus(200)
        )
        .await
        .unwrap()
    );
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

/// The raw record at `key` of the update checks: (decoded value, expiry).
async fn read_u64(s: &dyn Store, key: &str) -> Option<(u64, Option<UnixTime>)> {
    let v = s.get(Keyspace::UsedCodes, key).await.unwrap()?;
    Some((serde_json::from_slice(&v.value).unwrap(), v.expires_at))
}

async fn update_applies_each_step(s: Arc<dyn Store>) {
    let s = &*s;
    let ks = Keyspace::UsedCodes;
    let run = |step: Step<u64, &'static str>| async move {
        let mut step = Some(step);
        update(s, ks, "upd-k", 3, |_: Option<Entry<u64>>| {
            let step = step.take();
            async move { Ok::<_, StoreError>(step.unwrap()) }
        })
        .await
        .unwrap()
    };
    // Absent: a put inserts, with no expiry of its own.
    assert_eq!(run(Step::Put(1, "put")).await, Some("put"));
    assert_eq!(read_u64(s, "upd-k").await, Some((1, None)));
    assert_eq!(
        run(Step::PutUntil(2, Some(UnixTime(5_000)), "until")).await,
        Some("until")
    );
    assert_eq!(read_u64(s, "upd-k").await, Some((2, Some(UnixTime(5_000)))));
    // A put keeps the expiry of the record it replaces.
    run(Step::Put(3, "put")).await;
    assert_eq!(read_u64(s, "upd-k").await, Some((3, Some(UnixTime(5_000)))));
    // Changing the expiry keeps the stored bytes.
    let before = s.get(ks, "upd-k").await.unwrap().unwrap().value;
    run(Step::SetExpiry(None, "expiry")).await;
    let after = s.get(ks, "upd-k").await.unwrap().unwrap();
    assert_eq!((after.value, after.expires_at), (before, None));
    assert_eq!(run(Step::Keep("kept")).await, Some("kept"));
    assert_eq!(read_u64(s, "upd-k").await, Some((3, None)));
    assert_eq!(run(Step::Delete("deleted")).await, Some("deleted"));
    assert_eq!(read_u64(s, "upd-k").await, None);
    // Nothing to delete or re-time: nothing happens, the answer still comes back.
    assert_eq!(run(Step::Delete("absent")).await, Some("absent"));
    assert_eq!(run(Step::SetExpiry(None, "absent")).await, Some("absent"));
    assert_eq!(read_u64(s, "upd-k").await, None);
    // The step sees what is stored; an error from it writes nothing.
    s.put(ks, "upd-k", encode(&7u64).unwrap(), None)
        .await
        .unwrap();
    let seen = update(s, ks, "upd-k", 3, |cur: Option<Entry<u64>>| async move {
        Ok::<Step<u64, _>, StoreError>(Step::Keep(cur.map(|c| c.value)))
    })
    .await
    .unwrap();
    assert_eq!(seen, Some(Some(7)));
    let failed = update(s, ks, "upd-k", 3, |_: Option<Entry<u64>>| async move {
        Err::<Step<u64, ()>, _>(StoreError::Backend("refused".into()))
    })
    .await;
    assert!(failed.is_err());
    assert_eq!(read_u64(s, "upd-k").await, Some((7, None)));
}

async fn update_retries_a_lost_race_and_gives_up_after_its_attempts(s: Arc<dyn Store>) {
    let ks = Keyspace::UsedCodes;
    let calls = AtomicUsize::new(0);
    // Someone else writes between every read and write: each attempt loses.
    let out = update(&*s, ks, "upd-race", 4, |cur: Option<Entry<u64>>| {
        let (s, calls) = (&s, &calls);
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let n = cur.map_or(0, |c| c.value);
            s.put(ks, "upd-race", encode(&(n + 100)).unwrap(), None)
                .await
                .unwrap();
            Ok::<_, StoreError>(Step::Put(n + 1, ()))
        }
    })
    .await
    .unwrap();
    assert_eq!(out, None, "every attempt lost");
    assert_eq!(calls.load(Ordering::SeqCst), 4, "exactly `attempts` reads");
    assert_eq!(read_u64(&*s, "upd-race").await, Some((400, None)));
    // Absent when read, present when written: the insert loses and the retry sees the record.
    let first = AtomicUsize::new(0);
    let out = update(&*s, ks, "upd-ins", 3, |cur: Option<Entry<u64>>| {
        let (s, first) = (&s, &first);
        async move {
            if first.fetch_add(1, Ordering::SeqCst) == 0 {
                s.put(ks, "upd-ins", encode(&10u64).unwrap(), None)
                    .await
                    .unwrap();
            }
            Ok::<_, StoreError>(Step::Put(cur.map_or(0, |c| c.value) + 1, ()))
        }
    })
    .await
    .unwrap();
    assert_eq!(out, Some(()));
    assert_eq!(read_u64(&*s, "upd-ins").await, Some((11, None)));
}

async fn concurrent_updates_lose_nothing(s: Arc<dyn Store>) {
    let mut handles = Vec::new();
    for _ in 0..16 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            update(
                &*s,
                Keyspace::UsedCodes,
                "upd-count",
                1_000,
                |cur: Option<Entry<u64>>| async move {
                    Ok::<_, StoreError>(Step::Put(cur.map_or(0, |c| c.value) + 1, ()))
                },
            )
            .await
            .unwrap()
        }));
    }
    for h in handles {
        assert_eq!(h.await.unwrap(), Some(()));
    }
    assert_eq!(read_u64(&*s, "upd-count").await, Some((16, None)));
}

async fn held_record_is_written_only_if_unchanged(s: Arc<dyn Store>) {
    let ks = Keyspace::UsedCodes;
    s.put(ks, "held-k", encode(&1u64).unwrap(), Some(UnixTime(9_000)))
        .await
        .unwrap();
    let held: Held<u64> = hold(&*s, ks, "held-k").await.unwrap().unwrap();
    assert_eq!(
        (*held.value(), held.expires_at()),
        (1, Some(UnixTime(9_000)))
    );
    assert!(held.swap(&*s, &2, held.expires_at()).await.unwrap());
    assert_eq!(
        read_u64(&*s, "held-k").await,
        Some((2, Some(UnixTime(9_000))))
    );
    // The record changed since it was held: nothing more is written through the hold.
    assert!(!held.swap(&*s, &3, None).await.unwrap());
    assert!(!held.set_expiry(&*s, None).await.unwrap());
    assert!(!held.remove(&*s).await.unwrap());
    assert_eq!(
        read_u64(&*s, "held-k").await,
        Some((2, Some(UnixTime(9_000))))
    );
    let held: Held<u64> = hold(&*s, ks, "held-k").await.unwrap().unwrap();
    assert!(held.set_expiry(&*s, None).await.unwrap());
    let held: Held<u64> = hold(&*s, ks, "held-k").await.unwrap().unwrap();
    assert!(held.remove(&*s).await.unwrap());
    assert_eq!(read_u64(&*s, "held-k").await, None);
}
