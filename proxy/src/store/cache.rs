//! A replica's cache of the records every `/mcp` request reads (issue 17): the access token,
//! its refresh family, the person's standing, their GitHub grant and the agent's allowance.
//! On PostgreSQL these reads were two round trips per `tools/call`; with the cache, none once
//! warm, so a `tools/call` costs on PostgreSQL about what it costs on sled.
//!
//! A cached record is security state (a revocation is a write to one of these records), so the
//! cache is exact, not "fresh enough":
//! - Only the `/mcp` checks read through it ([`Store::get_many_cached`]); every flow that
//!   decides something (refresh, redemption, revocation, consent) reads the store itself.
//! - Every write to a cached keyspace made through this process's store drops the key before
//!   the write's caller goes on ([`CachingStore`]), so the next request here misses.
//! - Writes by other processes reach the cache through [`Peers`]: on PostgreSQL a trigger
//!   notifies every replica of every changed row, and a write's response waits until every
//!   live replica has dropped the key (`store::pg_peers`); a replica that cannot be sure it has
//!   heard everything (its listener is down or behind) does not answer from its cache at all.
//!   On sled no other process can write.
//! - A read that raced a write cannot put the old value back: a fill is accepted only if no
//!   key was dropped since the read began (a generation count).
//! - Entries keep the store's expiry, and none is older than [`MAX_AGE_SECS`] (a bound in case
//!   a writer outside this design ever changed a record without the trigger).
//! - An entry also keeps its record decoded ([`CachedRecord::decoded`]), made from its bytes the
//!   first time a request needs it and shared by every later hit: a pure function of bytes the
//!   entry holds, so it goes when they go and can never describe other bytes.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use super::{Keyspace, Row, SharedStore, Store, StoreError, Versioned};
use crate::clock::{SharedClock, UnixTime};

/// The keyspaces the cache holds: what `flows::access::authenticate_call` reads.
pub const CACHED: [Keyspace; 5] = [
    Keyspace::AccessTokens,
    Keyspace::RefreshFamilies,
    Keyspace::Standing,
    Keyspace::Grants,
    Keyspace::Allowances,
];

/// No entry is answered from the cache once this old.
pub const MAX_AGE_SECS: u64 = 60;

/// Default number of entries (about 1 KiB each, up to twice that with the record decoded): a
/// few thousand active agents' checks.
pub const DEFAULT_ENTRIES: usize = 16_384;

fn slot(ks: Keyspace) -> Option<usize> {
    CACHED.iter().position(|k| *k == ks)
}

/// Whether writes to `ks` must drop cached entries.
pub fn caches(ks: Keyspace) -> bool {
    slot(ks).is_some()
}

/// A record as the `/mcp` checks read it ([`Store::get_many_cached`]): its bytes and, once a
/// request has asked for it, the record decoded from them. A hit hands out the same shared
/// record (issue 17: decoding the five records of every `tools/call` was about 5% of a sled
/// `tools/call`'s CPU, their strings and lists most of the proxy's allocations per call).
#[derive(Clone)]
pub struct CachedRecord(Arc<Decodable>);

struct Decodable {
    versioned: Versioned,
    /// Decoded from `versioned` (never from anything else): whichever type asked first.
    decoded: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl CachedRecord {
    /// A record read from the store.
    pub fn new(versioned: Versioned) -> CachedRecord {
        CachedRecord(Arc::new(Decodable {
            versioned,
            decoded: OnceLock::new(),
        }))
    }

    /// Its bytes and expiry.
    pub fn versioned(&self) -> &Versioned {
        &self.0.versioned
    }

    /// The record, decoded from its bytes the first time and shared after.
    pub fn decoded<T>(&self, ks: Keyspace) -> Result<Arc<T>, StoreError>
    where
        T: DeserializeOwned + Send + Sync + 'static,
    {
        if let Some(done) = self.0.decoded.get()
            && let Ok(t) = Arc::clone(done).downcast::<T>()
        {
            return Ok(t);
        }
        let t = Arc::new(super::decode::<T>(ks, &self.0.versioned.value)?);
        // Lost race or another type asked first: this caller still gets its own decoding.
        let _ = self.0.decoded.set(t.clone());
        Ok(t)
    }
}

impl PartialEq for CachedRecord {
    fn eq(&self, other: &CachedRecord) -> bool {
        self.versioned() == other.versioned()
    }
}

impl std::fmt::Debug for CachedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Bytes only: the decoded form is the same record.
        self.versioned().fmt(f)
    }
}

#[derive(Clone)]
struct Entry {
    /// `None`: the store had no live record (not kept for access tokens: unknown bearers
    /// would fill the cache).
    value: Option<CachedRecord>,
    cached_at: UnixTime,
}

#[derive(Default)]
struct Maps {
    by_keyspace: [HashMap<String, Entry>; CACHED.len()],
    len: usize,
    /// Bumped by every drop: a fill whose read began before a drop is refused.
    generation: u64,
}

/// The entries, bounded, with hit and miss counts.
pub struct RecordCache {
    maps: Mutex<Maps>,
    capacity: usize,
    clock: SharedClock,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// What [`RecordCache::lookup`] found.
enum Lookup {
    /// Every key, answered.
    Hit(Vec<Option<CachedRecord>>),
    /// Something missing: read the store, then [`RecordCache::fill`] with this generation.
    Miss(u64),
}

impl RecordCache {
    /// A cache of at most `capacity` entries (0: never holds anything).
    pub fn new(capacity: usize, clock: SharedClock) -> Arc<RecordCache> {
        Arc::new(RecordCache {
            maps: Mutex::new(Maps::default()),
            capacity,
            clock,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    fn maps(&self) -> MutexGuard<'_, Maps> {
        // A panic while holding the lock cannot leave a map half-changed in a way that
        // answers wrongly (each change is one insert or remove), so a poisoned lock is usable.
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lookup(&self, keys: &[(Keyspace, &str)]) -> Lookup {
        let now = self.clock.now();
        let maps = self.maps();
        let mut out = Vec::with_capacity(keys.len());
        for (ks, key) in keys {
            let found = slot(*ks).and_then(|s| maps.by_keyspace.get(s)?.get(*key));
            match found {
                Some(e) if e.cached_at.0 + MAX_AGE_SECS > now.0 => {
                    // The store's own rule for a live record.
                    out.push(
                        e.value
                            .clone()
                            .filter(|v| v.versioned().expires_at.is_none_or(|t| t > now)),
                    );
                }
                _ => {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    return Lookup::Miss(maps.generation);
                }
            }
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Lookup::Hit(out)
    }

    /// Keeps what a read that began at `generation` found, unless a key was dropped since.
    fn fill(&self, generation: u64, keys: &[(Keyspace, &str)], values: &[Option<CachedRecord>]) {
        let cached_at = self.clock.now();
        let mut maps = self.maps();
        if maps.generation != generation {
            return;
        }
        if maps.len + keys.len() > self.capacity {
            // Full: start again rather than track recency on every hit.
            for m in &mut maps.by_keyspace {
                m.clear();
            }
            maps.len = 0;
            if keys.len() > self.capacity {
                return;
            }
        }
        for ((ks, key), value) in keys.iter().zip(values) {
            if value.is_none() && *ks == Keyspace::AccessTokens {
                continue;
            }
            let Some(s) = slot(*ks) else { continue };
            let entry = Entry {
                value: value.clone(),
                cached_at,
            };
            let Some(m) = maps.by_keyspace.get_mut(s) else {
                continue;
            };
            if m.insert((*key).to_owned(), entry).is_none() {
                maps.len += 1;
            }
        }
    }

    /// Fills as a read that nothing raced would.
    #[cfg(test)]
    pub(super) fn fill_for_test(&self, keys: &[(Keyspace, &str)], values: &[Option<Versioned>]) {
        let generation = self.maps().generation;
        self.fill(generation, keys, &read_uncached(values.to_vec()));
    }

    /// Drops `key` of `ks` (a write to it, here or on another replica).
    pub fn drop_key(&self, ks: Keyspace, key: &str) {
        let Some(s) = slot(ks) else { return };
        let mut maps = self.maps();
        maps.generation += 1;
        if maps
            .by_keyspace
            .get_mut(s)
            .and_then(|m| m.remove(key))
            .is_some()
        {
            maps.len -= 1;
        }
    }

    /// Drops everything (the replica may have missed writes).
    pub fn clear(&self) {
        let mut maps = self.maps();
        maps.generation += 1;
        for m in &mut maps.by_keyspace {
            m.clear();
        }
        maps.len = 0;
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.maps().len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups answered from the cache, and lookups that read the store, so far.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

/// Records read from the store itself, each decoded when first asked for.
pub fn read_uncached(values: Vec<Option<Versioned>>) -> Vec<Option<CachedRecord>> {
    values
        .into_iter()
        .map(|v| v.map(CachedRecord::new))
        .collect()
}

/// How a replica's cache stays exact when other processes write the same store.
#[async_trait]
pub trait Peers: Send + Sync + 'static {
    /// Whether the cache may answer now: false while this replica cannot be sure it has
    /// dropped every key other processes wrote.
    fn cache_usable(&self) -> bool;
    /// Returns once every other live replica has dropped the keys this process has written
    /// so far (the caller's response may then leave).
    async fn settle(&self) -> Result<(), StoreError>;
}

/// The store has no other writer (sled: one process holds it).
pub struct NoPeers;

#[async_trait]
impl Peers for NoPeers {
    fn cache_usable(&self) -> bool {
        true
    }
    async fn settle(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A [`Store`] whose [`Store::get_many_cached`] answers from a [`RecordCache`], and which drops
/// a cached key on every write to it before returning.
pub struct CachingStore {
    inner: SharedStore,
    cache: Arc<RecordCache>,
    peers: Arc<dyn Peers>,
    /// Writes to cached keyspaces so far, and of those the ones a completed settle covers.
    written: AtomicU64,
    settled: AtomicU64,
}

impl CachingStore {
    /// Wraps `inner`, with a cache of `entries` entries kept exact by `inner`'s peers.
    pub fn new(inner: SharedStore, entries: usize, clock: SharedClock) -> CachingStore {
        let cache = RecordCache::new(entries, clock);
        let peers = inner.peers(cache.clone());
        CachingStore {
            inner,
            cache,
            peers,
            written: AtomicU64::new(0),
            settled: AtomicU64::new(0),
        }
    }

    /// The cache (for metrics and tests).
    pub fn cache(&self) -> &Arc<RecordCache> {
        &self.cache
    }

    /// Whether the cache may answer now (false while a PostgreSQL replica's listener is down
    /// or behind).
    pub fn answering(&self) -> bool {
        self.peers.cache_usable()
    }

    /// Held across a write to `ks`/`key`: drops the key when the write is over, also when
    /// the request goes away mid-write (the write may still have happened).
    fn dropping<'a>(&'a self, ks: Keyspace, key: &'a str) -> Dropping<'a> {
        Dropping {
            cache: &self.cache,
            ks,
            key,
        }
    }

    /// After a write to `ks` (its key dropped): outside a batched request, waits until the
    /// other replicas have dropped it too (inside one, the request's final flush does).
    async fn wrote(&self, ks: Keyspace) -> Result<(), StoreError> {
        if !caches(ks) {
            return Ok(());
        }
        self.written.fetch_add(1, Ordering::AcqRel);
        if super::batch_open() {
            return Ok(());
        }
        self.settle().await
    }

    async fn settle(&self) -> Result<(), StoreError> {
        let covered = self.written.load(Ordering::Acquire);
        if self.settled.load(Ordering::Acquire) >= covered {
            return Ok(());
        }
        self.peers.settle().await?;
        self.settled.fetch_max(covered, Ordering::AcqRel);
        Ok(())
    }
}

/// Drops a key when it goes (see [`CachingStore::dropping`]).
struct Dropping<'a> {
    cache: &'a RecordCache,
    ks: Keyspace,
    key: &'a str,
}

impl Drop for Dropping<'_> {
    fn drop(&mut self) {
        self.cache.drop_key(self.ks, self.key);
    }
}

#[async_trait]
impl Store for CachingStore {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.inner.get(ks, key).await
    }
    async fn get_many(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<Versioned>>, StoreError> {
        self.inner.get_many(keys).await
    }
    async fn get_many_cached(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<CachedRecord>>, StoreError> {
        if !self.peers.cache_usable() {
            return Ok(read_uncached(self.inner.get_many(keys).await?));
        }
        match self.cache.lookup(keys) {
            Lookup::Hit(values) => Ok(values),
            Lookup::Miss(generation) => {
                let values = read_uncached(self.inner.get_many(keys).await?);
                // Checked again: a listener lost during the read may have missed a drop.
                if self.peers.cache_usable() {
                    self.cache.fill(generation, keys, &values);
                }
                Ok(values)
            }
        }
    }
    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        let r = {
            let _drop = self.dropping(ks, key);
            self.inner.insert_new(ks, key, value, expires_at).await
        };
        self.wrote(ks).await?;
        r
    }
    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        let r = {
            let _drop = self.dropping(ks, key);
            self.inner.put(ks, key, value, expires_at).await
        };
        self.wrote(ks).await?;
        r
    }
    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        let r = {
            let _drop = self.dropping(ks, key);
            self.inner.take(ks, key).await
        };
        self.wrote(ks).await?;
        r
    }
    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        let r = {
            let _drop = self.dropping(ks, key);
            self.inner.compare_and_swap(ks, key, expected, new).await
        };
        self.wrote(ks).await?;
        r
    }
    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        let r = {
            let _drop = self.dropping(ks, key);
            self.inner.remove(ks, key).await
        };
        self.wrote(ks).await?;
        r
    }
    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        self.inner.scan_prefix(ks, prefix).await
    }
    async fn scan_page(
        &self,
        ks: Keyspace,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        self.inner.scan_page(ks, prefix, after, limit).await
    }
    async fn put_many(&self, ks: Keyspace, rows: Vec<Row>) -> Result<(), StoreError> {
        let keys: Vec<String> = if caches(ks) {
            rows.iter().map(|(k, _, _)| k.clone()).collect()
        } else {
            Vec::new()
        };
        let r = {
            let _drop: Vec<Dropping<'_>> = keys.iter().map(|k| self.dropping(ks, k)).collect();
            self.inner.put_many(ks, rows).await
        };
        if !keys.is_empty() {
            self.wrote(ks).await?;
        }
        r
    }
    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        // Entries keep their records' expiry and answer as the store does, so what a sweep
        // deletes was already not answered.
        self.inner.sweep_expired().await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        // Independent waits, both owed before the response: side by side.
        let (flushed, settled) = tokio::join!(self.inner.flush(), self.settle());
        flushed.and(settled)
    }
    async fn flush_with(&self, rows: Vec<(Keyspace, Row)>) -> Result<(), StoreError> {
        if rows.iter().any(|(ks, _)| caches(*ks)) {
            // Rows of a cached keyspace drop their entries as `put_many` does.
            return super::flush_with_by_parts(self, rows).await;
        }
        let (flushed, settled) = tokio::join!(self.inner.flush_with(rows), self.settle());
        flushed.and(settled)
    }
    fn disk_flushes(&self) -> Option<u64> {
        self.inner.disk_flushes()
    }
    fn peers(&self, cache: Arc<RecordCache>) -> Arc<dyn Peers> {
        self.inner.peers(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::store::SledStore;

    fn versioned(s: &str) -> Versioned {
        Versioned {
            value: s.as_bytes().to_vec(),
            expires_at: None,
        }
    }

    fn v(s: &str) -> CachedRecord {
        CachedRecord::new(versioned(s))
    }

    fn setup() -> (Arc<ManualClock>, CachingStore, SharedStore) {
        let clock = ManualClock::new(UnixTime(1_000_000));
        let inner: SharedStore = Arc::new(SledStore::temporary(clock.clone()).unwrap());
        let store = CachingStore::new(inner.clone(), 100, clock.clone());
        (clock, store, inner)
    }

    const FAM: (Keyspace, &str) = (Keyspace::RefreshFamilies, "f1");

    #[tokio::test]
    async fn a_write_through_the_store_is_seen_by_the_next_cached_read() {
        let (_clock, store, _inner) = setup();
        store
            .put(FAM.0, FAM.1, b"live".to_vec(), None)
            .await
            .unwrap();
        assert_eq!(
            store.get_many_cached(&[FAM]).await.unwrap(),
            [Some(v("live"))]
        );
        assert_eq!(store.cache().len(), 1);
        store
            .put(FAM.0, FAM.1, b"revoked".to_vec(), None)
            .await
            .unwrap();
        assert_eq!(store.cache().len(), 0, "the write dropped the entry");
        assert_eq!(
            store.get_many_cached(&[FAM]).await.unwrap(),
            [Some(v("revoked"))]
        );
        store.remove(FAM.0, FAM.1).await.unwrap();
        assert_eq!(store.get_many_cached(&[FAM]).await.unwrap(), [None]);
    }

    #[tokio::test]
    async fn a_second_read_is_answered_without_the_store() {
        let (_clock, store, inner) = setup();
        store
            .put(FAM.0, FAM.1, b"live".to_vec(), None)
            .await
            .unwrap();
        store.get_many_cached(&[FAM]).await.unwrap();
        // Behind the cache's back (no process can do this to sled; it shows the hit).
        inner.remove(FAM.0, FAM.1).await.unwrap();
        assert_eq!(
            store.get_many_cached(&[FAM]).await.unwrap(),
            [Some(v("live"))]
        );
        assert_eq!(store.cache().hits_and_misses(), (1, 1));
        // Plain reads never use the cache.
        assert_eq!(store.get(FAM.0, FAM.1).await.unwrap(), None);
    }

    #[tokio::test]
    async fn hits_share_one_decoded_record_and_a_write_brings_a_new_one() {
        let (_clock, store, _inner) = setup();
        async fn read(store: &CachingStore) -> Result<Arc<Vec<String>>, StoreError> {
            let found = store.get_many_cached(&[FAM]).await.unwrap();
            found[0].clone().unwrap().decoded::<Vec<String>>(FAM.0)
        }
        store
            .put(FAM.0, FAM.1, br#"["live"]"#.to_vec(), None)
            .await
            .unwrap();
        let first = read(&store).await.unwrap();
        let second = read(&store).await.unwrap();
        assert!(Arc::ptr_eq(&first, &second), "decoded once, shared");
        store
            .put(FAM.0, FAM.1, br#"["revoked"]"#.to_vec(), None)
            .await
            .unwrap();
        let third = read(&store).await.unwrap();
        assert_eq!(*third, ["revoked"], "the new bytes, decoded anew");
        assert_eq!(*first, ["live"], "a holder keeps what it read");
        // Bytes that do not decode are refused each time, and nothing is remembered.
        store
            .put(FAM.0, FAM.1, b"not json".to_vec(), None)
            .await
            .unwrap();
        for _ in 0..2 {
            assert!(matches!(read(&store).await, Err(StoreError::Corrupt(_))));
        }
    }

    #[tokio::test]
    async fn a_read_that_raced_a_write_does_not_put_the_old_value_back() {
        let (_clock, store, _inner) = setup();
        let cache = store.cache().clone();
        // A read began (generation taken), then a write dropped the key, then the read's
        // old answer arrives.
        let Lookup::Miss(generation) = cache.lookup(&[FAM]) else {
            panic!("empty cache hit")
        };
        cache.drop_key(FAM.0, FAM.1);
        cache.fill(generation, &[FAM], &[Some(v("old"))]);
        assert!(cache.is_empty());
        assert!(matches!(cache.lookup(&[FAM]), Lookup::Miss(_)));
    }

    #[tokio::test]
    async fn entries_keep_the_records_expiry_and_a_maximum_age() {
        let (clock, store, _inner) = setup();
        let now = clock.now();
        store
            .put(FAM.0, FAM.1, b"x".to_vec(), Some(UnixTime(now.0 + 10)))
            .await
            .unwrap();
        let g = (Keyspace::Grants, "u1");
        store.put(g.0, g.1, b"grant".to_vec(), None).await.unwrap();
        store.get_many_cached(&[FAM, g]).await.unwrap();
        clock.advance(10);
        assert_eq!(
            store.cache().lookup(&[FAM, g]).hit(),
            Some(vec![None, Some(v("grant"))]),
            "expired as the store would say"
        );
        clock.advance(MAX_AGE_SECS);
        assert!(store.cache().lookup(&[g]).hit().is_none(), "too old");
    }

    #[tokio::test]
    async fn unknown_access_tokens_are_not_kept_and_the_cache_stays_bounded() {
        let (_clock, store, _inner) = setup();
        for i in 0..500 {
            let key = format!("t{i}");
            store
                .get_many_cached(&[(Keyspace::AccessTokens, &key)])
                .await
                .unwrap();
        }
        assert!(store.cache().is_empty(), "no entry for an unknown bearer");
        for i in 0..500 {
            let key = format!("u{i}");
            store
                .get_many_cached(&[(Keyspace::Allowances, &key)])
                .await
                .unwrap();
            assert!(store.cache().len() <= 100);
        }
        // Keyspaces outside the cache are read every time.
        let c = (Keyspace::Clients, "c1");
        store.get_many_cached(&[c]).await.unwrap();
        assert!(matches!(store.cache().lookup(&[c]), Lookup::Miss(_)));
    }

    impl Lookup {
        fn hit(self) -> Option<Vec<Option<CachedRecord>>> {
            match self {
                Lookup::Hit(v) => Some(v),
                Lookup::Miss(_) => None,
            }
        }
    }
}
