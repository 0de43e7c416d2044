//! A test store that fails the operations it is told to fail and passes the rest to sled.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use super::{Keyspace, Peers, RecordCache, Row, SledStore, Store, StoreError, Versioned};
use crate::clock::UnixTime;

/// Sled, with switches.
pub(crate) struct Failing {
    inner: Arc<SledStore>,
    /// `put` into the audit keyspace fails.
    pub fail_audit_puts: AtomicBool,
    /// `flush_with` (a batched request's final flush with rows) fails.
    pub fail_flush_with: AtomicBool,
}

impl Failing {
    pub(crate) fn new(inner: Arc<SledStore>) -> Failing {
        Failing {
            inner,
            fail_audit_puts: AtomicBool::new(false),
            fail_flush_with: AtomicBool::new(false),
        }
    }
}

fn refused() -> StoreError {
    StoreError::Backend("disk full".to_owned())
}

#[async_trait]
impl Store for Failing {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.inner.get(ks, key).await
    }
    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        self.inner.insert_new(ks, key, value, expires_at).await
    }
    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        if ks == Keyspace::Audit && self.fail_audit_puts.load(Ordering::Acquire) {
            return Err(refused());
        }
        self.inner.put(ks, key, value, expires_at).await
    }
    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.inner.take(ks, key).await
    }
    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        self.inner.compare_and_swap(ks, key, expected, new).await
    }
    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        self.inner.remove(ks, key).await
    }
    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        self.inner.scan_prefix(ks, prefix).await
    }
    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        self.inner.sweep_expired().await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
    async fn flush_with(&self, rows: Vec<(Keyspace, Row)>) -> Result<(), StoreError> {
        if self.fail_flush_with.load(Ordering::Acquire) {
            return Err(refused());
        }
        self.inner.flush_with(rows).await
    }
    fn peers(&self, cache: Arc<RecordCache>) -> Arc<dyn Peers> {
        self.inner.peers(cache)
    }
}
