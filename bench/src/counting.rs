//! A `Store` that counts what passes through it to the proxy's store. Used only by the
//! calibration proxy (never by a timed one) to show how many reads, writes and flushes one
//! flow, refresh or `tools/call` costs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mcp_oauth_proxy::clock::UnixTime;
use mcp_oauth_proxy::store::{Keyspace, Row, SharedStore, Store, StoreError, Versioned};

/// Counters.
#[derive(Debug, Default)]
pub struct Counters {
    reads: AtomicU64,
    scans: AtomicU64,
    /// Writes that changed something, by keyspace.
    writes: Mutex<BTreeMap<&'static str, u64>>,
    /// Flushes waited for: each write outside a batched request (it flushes by itself) and
    /// each explicit flush (a batched request's final one).
    flushes: AtomicU64,
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Point reads.
    pub reads: u64,
    /// Prefix scans.
    pub scans: u64,
    /// Writes, by keyspace.
    pub writes: BTreeMap<&'static str, u64>,
    /// Flushes waited for.
    pub flushes: u64,
}

impl Counts {
    /// `self - before`.
    pub fn since(&self, before: &Counts) -> Counts {
        let mut writes = self.writes.clone();
        for (k, v) in &before.writes {
            if let Some(n) = writes.get_mut(k) {
                *n -= v;
            }
        }
        writes.retain(|_, n| *n > 0);
        Counts {
            reads: self.reads - before.reads,
            scans: self.scans - before.scans,
            writes,
            flushes: self.flushes - before.flushes,
        }
    }

    /// All writes.
    pub fn durable_writes(&self) -> u64 {
        self.writes.values().sum()
    }
}

impl Counters {
    /// The current values.
    pub fn snapshot(&self) -> Counts {
        Counts {
            reads: self.reads.load(Ordering::SeqCst),
            scans: self.scans.load(Ordering::SeqCst),
            writes: self.writes.lock().expect("counters").clone(),
            flushes: self.flushes.load(Ordering::SeqCst),
        }
    }
    fn write(&self, ks: Keyspace, happened: bool) {
        if happened {
            if !mcp_oauth_proxy::store::write_is_batched() {
                self.flushes.fetch_add(1, Ordering::SeqCst);
            }
            *self
                .writes
                .lock()
                .expect("counters")
                .entry(ks.name())
                .or_default() += 1;
        }
    }
}

/// The wrapper.
pub struct CountingStore {
    inner: SharedStore,
    counters: Arc<Counters>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: SharedStore, counters: Arc<Counters>) -> CountingStore {
        CountingStore { inner, counters }
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.counters.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(ks, key).await
    }
    async fn get_many(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<Versioned>>, StoreError> {
        // Records read, as with `get`; on PostgreSQL they are one statement.
        self.counters
            .reads
            .fetch_add(keys.len() as u64, Ordering::SeqCst);
        self.inner.get_many(keys).await
    }
    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        let r = self.inner.insert_new(ks, key, value, expires_at).await?;
        self.counters.write(ks, r);
        Ok(r)
    }
    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        self.inner.put(ks, key, value, expires_at).await?;
        self.counters.write(ks, true);
        Ok(())
    }
    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        let r = self.inner.take(ks, key).await?;
        self.counters.write(ks, r.is_some());
        Ok(r)
    }
    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        let r = self.inner.compare_and_swap(ks, key, expected, new).await?;
        self.counters.write(ks, r);
        Ok(r)
    }
    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        self.inner.remove(ks, key).await?;
        self.counters.write(ks, true);
        Ok(())
    }
    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        self.counters.scans.fetch_add(1, Ordering::SeqCst);
        self.inner.scan_prefix(ks, prefix).await
    }
    async fn put_many(&self, ks: Keyspace, rows: Vec<Row>) -> Result<(), StoreError> {
        // A background group commit (upstream-action events): every row is a write, made
        // durable by one flush that no request waits for, so it is not counted as waited.
        let n = rows.len() as u64;
        self.inner.put_many(ks, rows).await?;
        *self
            .counters
            .writes
            .lock()
            .expect("counters")
            .entry(ks.name())
            .or_default() += n;
        Ok(())
    }
    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        self.inner.sweep_expired().await
    }
    async fn flush_with(&self, rows: Vec<(Keyspace, Row)>) -> Result<(), StoreError> {
        // A batched request's final flush, with the rows handed to it (its audit events):
        // each row a write, all of them and the flush one statement on PostgreSQL.
        self.counters.flushes.fetch_add(1, Ordering::SeqCst);
        let written: Vec<&'static str> = rows.iter().map(|(ks, _)| ks.name()).collect();
        self.inner.flush_with(rows).await?;
        let mut w = self.counters.writes.lock().expect("counters");
        for ks in written {
            *w.entry(ks).or_default() += 1;
        }
        Ok(())
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.counters.flushes.fetch_add(1, Ordering::SeqCst);
        self.inner.flush().await
    }
    fn peers(
        &self,
        cache: std::sync::Arc<mcp_oauth_proxy::store::RecordCache>,
    ) -> std::sync::Arc<dyn mcp_oauth_proxy::store::Peers> {
        self.inner.peers(cache)
    }
}
