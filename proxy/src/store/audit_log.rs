//! The audit trail, by `time-sequence-id`: the time as 20 digits, then a per-process sequence
//! number (12 digits) ordering events of the same second, then the event id, so keys sort in
//! the order events happened and a time window is a key prefix.

use super::records::AuditRecord;
use super::{Keyspace, Store, StoreError, StoreExt, decode};
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

/// Appends an event (durable when it returns, or at the end of a batched request).
pub async fn append(store: &dyn Store, e: &Entry) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::Audit, &e.key, &e.rec, Some(e.expires_at))
        .await
}

/// Appends these events together: durable all at once when it returns (sled: one batch and
/// one flush; PostgreSQL: one statement). Writing the same entries again is harmless.
pub async fn append_many(store: &dyn Store, entries: &[&Entry]) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let rows = entries
        .iter()
        .map(|e| Ok((e.key.clone(), super::encode(&e.rec)?, Some(e.expires_at))))
        .collect::<Result<Vec<_>, StoreError>>()?;
    store.put_many(Keyspace::Audit, rows).await
}

/// The stored events of window `w` (times `w * WINDOW_SECS ..` the next), oldest first.
pub async fn window(store: &dyn Store, w: u64) -> Result<Vec<AuditRecord>, StoreError> {
    let start = format!("{:020}", w.saturating_mul(WINDOW_SECS));
    let prefix = start.get(..20 - WINDOW_DIGITS).unwrap_or(&start);
    Ok(store
        .scan_json(Keyspace::Audit, prefix)
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// The next at most `limit` (at least one) events after `cursor` (from the oldest with
/// `None`), oldest first, and the cursor to continue from (`None` once the trail is read).
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
    let records = rows
        .into_iter()
        .map(|(_, v)| decode(Keyspace::Audit, &v.value))
        .collect::<Result<Vec<AuditRecord>, StoreError>>()?;
    Ok((records, next))
}

/// All stored events, oldest first.
pub async fn all(store: &dyn Store) -> Result<Vec<AuditRecord>, StoreError> {
    Ok(store
        .scan_json(Keyspace::Audit, "")
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}
