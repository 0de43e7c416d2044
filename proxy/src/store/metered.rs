//! A [`Store`] wrapper that times every operation and reports it to an [`OpObserver`] (the
//! metrics registry implements it), so store latency is visible whichever backend is
//! configured, without the store depending on metrics.

use std::time::Duration;

use async_trait::async_trait;

use super::{CachedRecord, Keyspace, Row, SharedStore, Store, StoreError, Versioned};
use crate::clock::UnixTime;

/// Told how long each store operation took.
pub trait OpObserver: Send + Sync + 'static {
    /// Operation `op` (the [`Store`] method's name) took `took`.
    fn store_op(&self, op: &'static str, took: Duration);
}

/// Times each call to the inner store.
pub struct MeteredStore {
    inner: SharedStore,
    observer: Box<dyn OpObserver>,
}

impl MeteredStore {
    /// Wraps `inner`, reporting to `observer`.
    pub fn new(inner: SharedStore, observer: impl OpObserver) -> MeteredStore {
        MeteredStore {
            inner,
            observer: Box::new(observer),
        }
    }
}

/// Monotonic time for durations only; wall-clock time still comes from the injected clock.
#[allow(clippy::disallowed_methods)] // a latency, not a timestamp: nothing depends on it
fn started() -> std::time::Instant {
    std::time::Instant::now()
}

/// Runs `fut` and records how long it took under `op`.
macro_rules! timed {
    ($self:ident, $op:literal, $fut:expr) => {{
        let t = started();
        let r = $fut.await;
        $self.observer.store_op($op, t.elapsed());
        r
    }};
}

#[async_trait]
impl Store for MeteredStore {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        timed!(self, "get", self.inner.get(ks, key))
    }
    async fn get_many(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<Versioned>>, StoreError> {
        timed!(self, "get_many", self.inner.get_many(keys))
    }
    async fn get_many_cached(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<CachedRecord>>, StoreError> {
        timed!(self, "get_many_cached", self.inner.get_many_cached(keys))
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
    async fn put_many(&self, ks: Keyspace, rows: Vec<Row>) -> Result<(), StoreError> {
        timed!(self, "put_many", self.inner.put_many(ks, rows))
    }
    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        timed!(self, "sweep_expired", self.inner.sweep_expired())
    }
    async fn flush(&self) -> Result<(), StoreError> {
        timed!(self, "flush", self.inner.flush())
    }
    async fn flush_with(&self, rows: Vec<(Keyspace, Row)>) -> Result<(), StoreError> {
        timed!(self, "flush_with", self.inner.flush_with(rows))
    }
    fn disk_flushes(&self) -> Option<u64> {
        self.inner.disk_flushes()
    }
    fn peers(&self, cache: std::sync::Arc<super::RecordCache>) -> std::sync::Arc<dyn super::Peers> {
        self.inner.peers(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::SledStore;
    use std::sync::{Arc, Mutex};

    /// Counts operations by name.
    #[derive(Clone, Default)]
    struct Ops(Arc<Mutex<Vec<&'static str>>>);

    impl OpObserver for Ops {
        fn store_op(&self, op: &'static str, _: Duration) {
            self.0.lock().unwrap().push(op);
        }
    }

    #[tokio::test]
    async fn each_operation_is_timed_and_passed_through() {
        let ops = Ops::default();
        let inner: SharedStore =
            Arc::new(SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap());
        let store = MeteredStore::new(inner.clone(), ops.clone());
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
        assert_eq!(*ops.0.lock().unwrap(), ["insert_new", "take"]);
    }
}
