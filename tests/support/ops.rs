//! A `Store` that logs each operation with its keyspace, to show what one request reads and
//! writes (the hot-path tests assert it; nothing here is timed).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mcp_oauth_proxy::clock::UnixTime;
use mcp_oauth_proxy::store::{Keyspace, SharedStore, Store, StoreError, Versioned};

/// The operations seen, in order: `"get clients"`, `"put audit"`, `"flush"`, …
#[derive(Clone, Default)]
pub struct OpLog(Arc<Mutex<Vec<String>>>);

impl OpLog {
    fn push(&self, op: &str, ks: Option<Keyspace>) {
        let entry = match ks {
            Some(ks) => format!("{op} {}", ks.name()),
            None => op.to_owned(),
        };
        self.0.lock().unwrap().push(entry);
    }

    /// A write, marked when it was made inside `store::batched` (it then skips its own flush
    /// and is durable only once the batch's final flush has run).
    fn push_write(&self, op: &str, ks: Keyspace) {
        let mut entry = format!("{op} {}", ks.name());
        if mcp_oauth_proxy::store::write_is_batched() {
            entry.push_str(" (batched)");
        }
        self.0.lock().unwrap().push(entry);
    }

    /// Forgets what was logged so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    /// What was logged so far.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Logs every call into `log` and passes it to `inner`.
pub struct LoggingStore {
    pub inner: SharedStore,
    pub log: OpLog,
}

#[async_trait]
impl Store for LoggingStore {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.log.push("get", Some(ks));
        self.inner.get(ks, key).await
    }
    async fn get_many(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<Versioned>>, StoreError> {
        let names: Vec<&str> = keys.iter().map(|(ks, _)| ks.name()).collect();
        self.log
            .push(&format!("get_many {}", names.join(" ")), None);
        self.inner.get_many(keys).await
    }
    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        self.log.push_write("insert_new", ks);
        self.inner.insert_new(ks, key, value, expires_at).await
    }
    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        self.log.push_write("put", ks);
        self.inner.put(ks, key, value, expires_at).await
    }
    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.log.push_write("take", ks);
        self.inner.take(ks, key).await
    }
    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        self.log.push_write("compare_and_swap", ks);
        self.inner.compare_and_swap(ks, key, expected, new).await
    }
    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        self.log.push_write("remove", ks);
        self.inner.remove(ks, key).await
    }
    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        self.log.push("scan_prefix", Some(ks));
        self.inner.scan_prefix(ks, prefix).await
    }
    async fn scan_page(
        &self,
        ks: Keyspace,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        self.log.push("scan_page", Some(ks));
        self.inner.scan_page(ks, prefix, after, limit).await
    }
    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        self.log.push("sweep_expired", None);
        self.inner.sweep_expired().await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.log.push("flush", None);
        self.inner.flush().await
    }
    fn disk_flushes(&self) -> Option<u64> {
        self.inner.disk_flushes()
    }
    fn peers(
        &self,
        cache: std::sync::Arc<mcp_oauth_proxy::store::RecordCache>,
    ) -> std::sync::Arc<dyn mcp_oauth_proxy::store::Peers> {
        self.inner.peers(cache)
    }
}
