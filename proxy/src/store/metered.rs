//! A [`Store`] wrapper that times every operation into the metrics registry, so store latency
//! is visible whichever backend is configured.

use async_trait::async_trait;

use super::{Keyspace, SharedStore, Store, StoreError, Versioned};
use crate::clock::UnixTime;
use crate::metrics::{Metrics, Timer};

/// Times each call to the inner store.
pub struct MeteredStore {
    inner: SharedStore,
    metrics: Metrics,
}

impl MeteredStore {
    /// Wraps `inner`.
    pub fn new(inner: SharedStore, metrics: Metrics) -> MeteredStore {
        MeteredStore { inner, metrics }
    }
}

/// Runs `fut` and records how long it took under `op`.
macro_rules! timed {
    ($self:ident, $op:literal, $fut:expr) => {{
        let t = Timer::start();
        let r = $fut.await;
        $self.metrics.store_op($op, t.elapsed());
        r
    }};
}

#[async_trait]
impl Store for MeteredStore {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        timed!(self, "get", self.inner.get(ks, key))
    }
    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        timed!(
            self,
            "insert_new",
            self.inner.insert_new(ks, key, value, expires_at)
        )
    }
    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        timed!(self, "put", self.inner.put(ks, key, value, expires_at))
    }
    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        timed!(self, "take", self.inner.take(ks, key))
    }
    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        timed!(
            self,
            "compare_and_swap",
            self.inner.compare_and_swap(ks, key, expected, new)
        )
    }
    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        timed!(self, "remove", self.inner.remove(ks, key))
    }
    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        timed!(self, "scan_prefix", self.inner.scan_prefix(ks, prefix))
    }
    async fn scan_page(
        &self,
        ks: Keyspace,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        timed!(
            self,
            "scan_page",
            self.inner.scan_page(ks, prefix, after, limit)
        )
    }
    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        timed!(self, "sweep_expired", self.inner.sweep_expired())
    }
    async fn flush(&self) -> Result<(), StoreError> {
        timed!(self, "flush", self.inner.flush())
    }
    fn disk_flushes(&self) -> Option<u64> {
        self.inner.disk_flushes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::SledStore;
    use std::sync::Arc;

    #[tokio::test]
    async fn each_operation_is_timed_and_passed_through() {
        let metrics = Metrics::new();
        let inner: SharedStore =
            Arc::new(SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap());
        let store = MeteredStore::new(inner.clone(), metrics.clone());
        assert!(
            store
                .insert_new(Keyspace::Clients, "k", b"v".to_vec(), None)
                .await
                .unwrap()
        );
        assert_eq!(
            inner
                .get(Keyspace::Clients, "k")
                .await
                .unwrap()
                .unwrap()
                .value,
            b"v"
        );
        assert!(store.take(Keyspace::Clients, "k").await.unwrap().is_some());
        let text = metrics.render().unwrap();
        for op in ["insert_new", "take"] {
            assert!(
                text.contains(&format!(
                    "mcp_proxy_store_operation_duration_seconds_count{{op=\"{op}\"}} 1"
                )),
                "{op}"
            );
        }
    }
}
