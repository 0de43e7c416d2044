//! DIAGNOSTIC ONLY, not the proxy's store: a copy of `mcp_oauth_proxy::store::SledStore`
//! (same sled mode, same on-disk value format `expiry (u64 BE) || payload`, same atomicity,
//! a flush after every write) with one change: the flush runs sled's blocking `Db::flush()` on
//! tokio's blocking pool instead of `Db::flush_async()`.
//!
//! Why it exists: in sled 0.34.7, `flush_async` runs the flush on sled's own small thread
//! pool, and the write of the sealed log buffer that the flush waits for is queued on that same
//! pool; with about 7 flushes waiting at once the pool is full of waiters and the write never
//! runs, so every durable write in the process hangs for good (spacejam/sled#1308, fixed on
//! sled's main branch, never released). The shipped proxy calls `flush_async` after every
//! write, so it hangs once enough requests write at the same time. The bench measures the
//! shipped store first and reports the hang; this copy lets it also report what the rest of
//! the proxy would do once that is fixed. Keep it in step with `proxy/src/store/sled_store.rs`.

use std::path::Path;

use async_trait::async_trait;
use mcp_oauth_proxy::clock::{SharedClock, UnixTime};
use mcp_oauth_proxy::store::{Keyspace, Store, StoreError, Versioned};

/// The copy.
pub struct BlockingFlushSledStore {
    db: sled::Db,
    trees: Vec<(Keyspace, sled::Tree)>,
    clock: SharedClock,
    /// DIAGNOSTIC (a second what-if, off unless asked for): when false, an `Audit` record is
    /// written without its own flush (it becomes durable with the next flush of any other
    /// write, or sled's background flush within 500 ms).
    flush_audit: bool,
}

fn backend(e: sled::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn pack(v: &Versioned) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + v.value.len());
    out.extend_from_slice(&v.expires_at.map_or(0, |t| t.0).to_be_bytes());
    out.extend_from_slice(&v.value);
    out
}

fn unpack(raw: &[u8]) -> Option<Versioned> {
    let (exp, value) = raw.split_at_checked(8)?;
    let exp = u64::from_be_bytes(exp.try_into().ok()?);
    Some(Versioned {
        value: value.to_vec(),
        expires_at: (exp != 0).then_some(UnixTime(exp)),
    })
}

impl BlockingFlushSledStore {
    /// Opens (or creates) a store in `path`, configured as `SledStore::open` does.
    pub fn open(path: &Path, clock: SharedClock, flush_audit: bool) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(backend)?;
        let trees = Keyspace::ALL
            .iter()
            .map(|ks| Ok((*ks, db.open_tree(ks.name()).map_err(backend)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Self {
            db,
            trees,
            clock,
            flush_audit,
        })
    }

    fn tree(&self, ks: Keyspace) -> Result<&sled::Tree, StoreError> {
        self.trees
            .iter()
            .find(|(k, _)| *k == ks)
            .map(|(_, t)| t)
            .ok_or_else(|| StoreError::Backend(format!("tree {} not open", ks.name())))
    }

    fn live(&self, raw: &[u8]) -> Option<Versioned> {
        let v = unpack(raw)?;
        match v.expires_at {
            Some(exp) if exp <= self.clock.now() => None,
            _ => Some(v),
        }
    }

    /// The one change: a blocking flush on tokio's blocking pool (concurrent callers still
    /// share sled's log writes: a flush waits only until the log is stable up to its point).
    async fn durable(&self) -> Result<(), StoreError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush())
            .await
            .map_err(|e| StoreError::Backend(e.to_string()))?
            .map(|_| ())
            .map_err(backend)
    }
}

#[async_trait]
impl Store for BlockingFlushSledStore {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        let raw = self.tree(ks)?.get(key.as_bytes()).map_err(backend)?;
        Ok(raw.and_then(|r| self.live(&r)))
    }

    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        let tree = self.tree(ks)?;
        let new = pack(&Versioned { value, expires_at });
        loop {
            let current = tree.get(key.as_bytes()).map_err(backend)?;
            if current.as_ref().is_some_and(|r| self.live(r).is_some()) {
                return Ok(false);
            }
            let swapped = tree
                .compare_and_swap(key.as_bytes(), current, Some(new.clone()))
                .map_err(backend)?;
            if swapped.is_ok() {
                self.durable().await?;
                return Ok(true);
            }
        }
    }

    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        self.tree(ks)?
            .insert(key.as_bytes(), pack(&Versioned { value, expires_at }))
            .map_err(backend)?;
        if ks == Keyspace::Audit && !self.flush_audit {
            return Ok(());
        }
        self.durable().await
    }

    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        let removed = self.tree(ks)?.remove(key.as_bytes()).map_err(backend)?;
        let Some(raw) = removed else {
            return Ok(None);
        };
        self.durable().await?;
        Ok(self.live(&raw))
    }

    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        let swapped = self
            .tree(ks)?
            .compare_and_swap(key.as_bytes(), Some(pack(expected)), new.as_ref().map(pack))
            .map_err(backend)?;
        if swapped.is_err() {
            return Ok(false);
        }
        self.durable().await?;
        Ok(true)
    }

    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        self.tree(ks)?.remove(key.as_bytes()).map_err(backend)?;
        self.durable().await
    }

    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        let mut out = Vec::new();
        for item in self.tree(ks)?.scan_prefix(prefix.as_bytes()) {
            let (k, raw) = item.map_err(backend)?;
            if let (Ok(k), Some(v)) = (String::from_utf8(k.to_vec()), self.live(&raw)) {
                out.push((k, v));
            }
        }
        Ok(out)
    }

    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let mut n = 0;
        for (_, tree) in &self.trees {
            for item in tree.iter() {
                let (k, raw) = item.map_err(backend)?;
                let expired = unpack(&raw)
                    .and_then(|v| v.expires_at)
                    .is_some_and(|exp| exp <= now);
                if expired
                    && tree
                        .compare_and_swap(&k, Some(raw), None as Option<&[u8]>)
                        .map_err(backend)?
                        .is_ok()
                {
                    n += 1;
                }
            }
        }
        if n > 0 {
            self.durable().await?;
        }
        Ok(n)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.durable().await
    }
}
