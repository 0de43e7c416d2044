//! The audit trail, by `time-sequence-id`: the time as 20 digits, then a per-process sequence
//! number (12 digits) ordering events of the same second, then the event id, so keys sort in
//! the order events happened and a time window is a key prefix.
//!
//! A row holds one event ([`append`]), or a **group** of events written together by the
//! background group commit ([`append_many`]): a row `{"group":[{"key":…,"rec":…},…]}` under its
//! first event's key, each event keeping its own key. One stored row per group instead of one
//! per event is what makes an upstream action cheap to keep (issue 17: on sled, a tree insert
//! per event cost more than the rest of the event's work together). A group row never spans two
//! windows and stays small ([`GROUP_ROW_BYTES`], [`GROUP_ROW_EVENTS`]): sled keeps a leaf of up
//! to 17 rows in one page, and a page over 128 KiB would go to a blob file of its own. Readers
//! unfold group rows and order the events of what they read by their own keys.

use super::records::AuditRecord;
use super::{Keyspace, Store, StoreError, decode, encode};
use crate::clock::UnixTime;

/// Reading the trail in windows of this many seconds (about 28 hours) bounds what export and
/// tail hold in memory at once. A power of ten, so that one window is exactly the keys that
/// share their first digits.
pub const WINDOW_SECS: u64 = 100_000;
/// Trailing key digits a window spans (`WINDOW_SECS` = 10^5).
const WINDOW_DIGITS: usize = 5;

/// Orders events recorded within the same second by this process (keys sort as text).
fn next_seq() -> u64 {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 1_000_000_000_000
}

/// Where [`page`] continues (opaque).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor(String);

/// An event about to be appended: its place in the trail is fixed when it is made (the
/// sequence number is taken then), so an event written later, in a group, still sorts where
/// it happened, and writing it again after a failed attempt replaces itself.
#[derive(Debug)]
pub struct Entry {
    key: String,
    rec: AuditRecord,
    expires_at: UnixTime,
}

impl Entry {
    /// `rec`, kept until `expires_at`, placed after every event made before it.
    pub fn new(rec: AuditRecord, expires_at: UnixTime) -> Entry {
        Entry {
            key: format!("{:020}-{:012}-{}", rec.at.0, next_seq(), rec.id),
            rec,
            expires_at,
        }
    }

    /// The event.
    pub fn record(&self) -> &AuditRecord {
        &self.rec
    }
}

/// Appends an event: durable when it returns or, inside a batched request, written by the
/// request's final flush (`store::write_at_flush`: on PostgreSQL in the statement that makes
/// the request durable, instead of a statement of its own). Either way before the request's
/// response leaves; nothing reads an event back in the request that records it.
pub async fn append(store: &dyn Store, e: &Entry) -> Result<(), StoreError> {
    let row = (e.key.clone(), encode(&e.rec)?, Some(e.expires_at));
    match super::write_at_flush(Keyspace::Audit, row) {
        Ok(()) => Ok(()),
        Err((key, value, expires_at)) => store.put(Keyspace::Audit, &key, value, expires_at).await,
    }
}

/// A group row is closed once its events take this many bytes (it may pass it by one event).
pub const GROUP_ROW_BYTES: usize = 4096;
/// At most this many events in one group row.
pub const GROUP_ROW_EVENTS: usize = 64;

/// The prefix every group row starts with, and no single event's row does (an
/// [`AuditRecord`] serializes its `id` first).
const GROUP_OPEN: &[u8] = b"{\"group\":[";

/// Appends these events together, in group rows ([`GROUP_ROW_BYTES`]): durable all at once
/// when it returns (sled: one batch and one flush; PostgreSQL: one statement). Writing the
/// same entries again, in the same order with more after them (the group commit's retry), is
/// harmless: the rows are cut the same way, under the same keys, and replace themselves; an
/// event that still ends up in two rows (a retry that starts later) is read once.
pub async fn append_many(store: &dyn Store, entries: &[&Entry]) -> Result<(), StoreError> {
    let rows = group_rows(entries)?;
    if rows.is_empty() {
        return Ok(());
    }
    store.put_many(Keyspace::Audit, rows).await
}

/// `entries`, in their order, cut into group rows: a new row at each window's start and once a
/// row holds [`GROUP_ROW_BYTES`] or [`GROUP_ROW_EVENTS`].
fn group_rows(entries: &[&Entry]) -> Result<Vec<super::Row>, StoreError> {
    struct Open {
        key: String,
        window: String,
        value: Vec<u8>,
        events: usize,
        expires_at: UnixTime,
    }
    fn close(o: Open) -> super::Row {
        let mut value = o.value;
        value.extend_from_slice(b"]}");
        (o.key, value, Some(o.expires_at))
    }
    let mut rows = Vec::new();
    let mut open: Option<Open> = None;
    for e in entries {
        let window = e.key.get(..20 - WINDOW_DIGITS).unwrap_or(&e.key);
        let fits = open.as_ref().is_some_and(|o| {
            o.window == window && o.events < GROUP_ROW_EVENTS && o.value.len() < GROUP_ROW_BYTES
        });
        if !fits {
            rows.extend(open.take().map(close));
        }
        let o = open.get_or_insert_with(|| Open {
            key: e.key.clone(),
            window: window.to_owned(),
            value: GROUP_OPEN.to_vec(),
            events: 0,
            expires_at: e.expires_at,
        });
        if o.events > 0 {
            o.value.push(b',');
        }
        // Written straight into the row (an error fails the whole write, row and all).
        o.value.extend_from_slice(b"{\"key\":");
        serde_json::to_writer(&mut o.value, &e.key)
            .map_err(|err| StoreError::Backend(format!("encode: {err}")))?;
        o.value.extend_from_slice(b",\"rec\":");
        serde_json::to_writer(&mut o.value, &e.rec)
            .map_err(|err| StoreError::Backend(format!("encode: {err}")))?;
        o.value.push(b'}');
        o.events += 1;
        o.expires_at = o.expires_at.max(e.expires_at);
    }
    rows.extend(open.map(close));
    Ok(rows)
}

/// One event of a group row.
#[derive(serde::Deserialize)]
struct Grouped {
    key: String,
    rec: AuditRecord,
}

/// A group row.
#[derive(serde::Deserialize)]
struct GroupRow {
    group: Vec<Grouped>,
}

/// The events a stored row holds, each with its own key, appended to `out`.
fn unfold(
    key: String,
    value: &[u8],
    out: &mut Vec<(String, AuditRecord)>,
) -> Result<(), StoreError> {
    if value.starts_with(GROUP_OPEN) {
        let row: GroupRow = decode(Keyspace::Audit, value)?;
        out.extend(row.group.into_iter().map(|g| (g.key, g.rec)));
    } else {
        out.push((key, decode(Keyspace::Audit, value)?));
    }
    Ok(())
}

/// The events of `rows`, ordered by their own keys (a group row sorts at its first event,
/// and an event written alone while the group was open sorts inside it).
fn events(rows: Vec<(String, super::Versioned)>) -> Result<Vec<AuditRecord>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    for (key, v) in rows {
        unfold(key, &v.value, &mut out)?;
    }
    // Each event's key is its own: the order of the trail. An event found twice (a group whose
    // write failed after sled applied it, written again cut differently with the group
    // retried after it) is listed once.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// The stored events of window `w` (times `w * WINDOW_SECS ..` the next), oldest first.
pub async fn window(store: &dyn Store, w: u64) -> Result<Vec<AuditRecord>, StoreError> {
    let start = format!("{:020}", w.saturating_mul(WINDOW_SECS));
    let prefix = start.get(..20 - WINDOW_DIGITS).unwrap_or(&start);
    events(store.scan_prefix(Keyspace::Audit, prefix).await?)
}

/// The events of the next at most `limit` (at least one) stored rows after `cursor` (from the
/// oldest with `None`), oldest first, and the cursor to continue from (`None` once the trail
/// is read). A group row counts as one: a page holds at most `limit` rows of at most
/// [`GROUP_ROW_BYTES`] (plus one event) each. Events are in order within a page; a group that
/// was open while another event was written alone lists its events at its first one's place.
pub async fn page(
    store: &dyn Store,
    cursor: Option<&Cursor>,
    limit: usize,
) -> Result<(Vec<AuditRecord>, Option<Cursor>), StoreError> {
    let rows = store
        .scan_page(
            Keyspace::Audit,
            "",
            cursor.map(|c| c.0.as_str()),
            limit.max(1),
        )
        .await?;
    let next = (rows.len() >= limit.max(1))
        .then(|| rows.last().map(|(k, _)| Cursor(k.clone())))
        .flatten();
    Ok((events(rows)?, next))
}

/// All stored events, oldest first.
pub async fn all(store: &dyn Store) -> Result<Vec<AuditRecord>, StoreError> {
    events(store.scan_prefix(Keyspace::Audit, "").await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::SledStore;

    fn entry(at: u64, n: usize, pad: usize) -> Entry {
        let rec = AuditRecord {
            id: format!("e{n}"),
            at: UnixTime(at),
            request_id: None,
            kind: "upstream_action".to_owned(),
            event: serde_json::json!({"event": "upstream_action", "n": n, "pad": "x".repeat(pad)}),
        };
        Entry::new(rec, UnixTime(at + 100))
    }

    fn ns(recs: &[AuditRecord]) -> Vec<u64> {
        recs.iter()
            .map(|r| r.event["n"].as_u64().unwrap_or(u64::MAX))
            .collect()
    }

    fn store() -> SledStore {
        SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap()
    }

    #[test]
    fn a_group_row_is_cut_at_a_window_start_and_at_its_size_bounds() {
        // Window boundary: the last second of one window, then the first of the next.
        let edge = WINDOW_SECS * 3;
        let es = [
            entry(edge - 1, 0, 0),
            entry(edge - 1, 1, 0),
            entry(edge, 2, 0),
        ];
        let refs: Vec<&Entry> = es.iter().collect();
        let rows = group_rows(&refs).unwrap();
        assert_eq!(rows.len(), 2, "one row per window");
        assert_eq!(rows[0].0, es[0].key);
        assert_eq!(rows[1].0, es[2].key);
        // Bytes: events of ~1 KiB fill a row after about four.
        let big: Vec<Entry> = (0..10).map(|n| entry(edge, n, 1000)).collect();
        let refs: Vec<&Entry> = big.iter().collect();
        let rows = group_rows(&refs).unwrap();
        assert!(rows.len() >= 3, "{} rows", rows.len());
        assert!(
            rows.iter()
                .all(|r| r.1.len() < GROUP_ROW_BYTES + 1200 && r.1.starts_with(GROUP_OPEN))
        );
        // Count: even tiny events stop at GROUP_ROW_EVENTS a row.
        let many: Vec<Entry> = (0..3 * GROUP_ROW_EVENTS)
            .map(|n| entry(edge, n, 0))
            .collect();
        let refs: Vec<&Entry> = many.iter().collect();
        let rows = group_rows(&refs).unwrap();
        let per_row: Vec<usize> = rows
            .iter()
            .map(|r| r.1.windows(7).filter(|w| w == b"\"key\":\"").count())
            .collect();
        assert_eq!(per_row.iter().sum::<usize>(), many.len());
        assert!(per_row.iter().all(|&n| (1..=GROUP_ROW_EVENTS).contains(&n)));
        assert!(group_rows(&[]).unwrap().is_empty());
    }

    #[tokio::test]
    async fn readers_unfold_groups_and_order_every_event_by_its_own_place() {
        let s = store();
        let es: Vec<Entry> = (0..5).map(|n| entry(2_000, n, 0)).collect();
        // Event 2 was written alone (a security event) while the group of the others was open.
        append(&s, &es[2]).await.unwrap();
        let group: Vec<&Entry> = [0, 1, 3, 4].iter().map(|&i| &es[i]).collect();
        append_many(&s, &group).await.unwrap();
        assert_eq!(
            s.scan_prefix(Keyspace::Audit, "").await.unwrap().len(),
            2,
            "one row for the group, one for the lone event"
        );
        assert_eq!(ns(&all(&s).await.unwrap()), [0, 1, 2, 3, 4]);
        assert_eq!(ns(&window(&s, 0).await.unwrap()), [0, 1, 2, 3, 4]);
        assert!(window(&s, 1).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_retried_group_replaces_its_rows_and_adds_nothing_twice() {
        let s = store();
        let es: Vec<Entry> = (0..(GROUP_ROW_EVENTS + 10))
            .map(|n| entry(2_000, n, 0))
            .collect();
        let first: Vec<&Entry> = es.iter().take(GROUP_ROW_EVENTS + 3).collect();
        append_many(&s, &first).await.unwrap();
        // The retry: the same events in the same order, then the next group's.
        let again: Vec<&Entry> = es.iter().collect();
        append_many(&s, &again).await.unwrap();
        let want: Vec<u64> = (0..es.len() as u64).collect();
        assert_eq!(ns(&all(&s).await.unwrap()), want);
    }

    #[tokio::test]
    async fn an_event_stored_in_two_group_rows_is_read_once() {
        let s = store();
        let es: Vec<Entry> = (0..4).map(|n| entry(2_000, n, 0)).collect();
        // A failed attempt that sled applied anyway, then the retry of its last events with
        // the next group's: rows under 0 and under 1 both hold 1 and 2.
        append_many(&s, &[&es[0], &es[1], &es[2]]).await.unwrap();
        append_many(&s, &[&es[1], &es[2], &es[3]]).await.unwrap();
        assert_eq!(s.scan_prefix(Keyspace::Audit, "").await.unwrap().len(), 2);
        assert_eq!(ns(&all(&s).await.unwrap()), [0, 1, 2, 3]);
        assert_eq!(ns(&window(&s, 0).await.unwrap()), [0, 1, 2, 3]);
        assert_eq!(ns(&page(&s, None, 10).await.unwrap().0), [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn paging_counts_a_group_row_once_and_loses_no_event() {
        let s = store();
        let es: Vec<Entry> = (0..(2 * GROUP_ROW_EVENTS + 1))
            .map(|n| entry(2_000, n, 0))
            .collect();
        let refs: Vec<&Entry> = es.iter().collect();
        append_many(&s, &refs).await.unwrap();
        let lone = entry(2_001, 999, 0);
        append(&s, &lone).await.unwrap();
        let rows = s.scan_prefix(Keyspace::Audit, "").await.unwrap().len();
        assert_eq!(rows, group_rows(&refs).unwrap().len() + 1);
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let (page, next) = page(&s, cursor.as_ref(), 2).await.unwrap();
            pages += 1;
            seen.extend(ns(&page));
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        // Two rows a page, a group row counting once (and an empty last page when the rows
        // divide evenly: the cursor cannot know it reached the end).
        assert_eq!(pages, rows / 2 + 1);
        let mut want: Vec<u64> = (0..es.len() as u64).collect();
        want.push(999);
        assert_eq!(seen, want);
    }

    #[tokio::test]
    async fn a_row_written_one_event_at_a_time_still_reads() {
        // Trails written before group rows (one event per row, also by the group commit).
        let s = store();
        let e = entry(2_000, 7, 0);
        s.put(
            Keyspace::Audit,
            &e.key,
            crate::store::encode(&e.rec).unwrap(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(ns(&all(&s).await.unwrap()), [7]);
    }
}
