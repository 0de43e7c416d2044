//! Baseline: bare sled, opened exactly as `SledStore::open` opens it (same mode, on disk),
//! doing what every durable store write of the proxy does underneath: one `insert` of a
//! record-sized value, then a flush, from `workers` concurrent tasks. Its writes per second
//! bound what any sequence of durable writes can reach through sled on this machine. The flush
//! is sled's blocking `flush()` on tokio's blocking pool: `flush_async` (what the proxy uses)
//! hangs with more than about 7 concurrent callers (see `store_fixed.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::timing::{now, ns_since, segment};

/// A bare sled database in its own temporary directory.
pub struct BareSled {
    db: sled::Db,
    next: AtomicU64,
    _dir: tempfile::TempDir,
}

impl BareSled {
    /// Opens one.
    pub fn open() -> Arc<BareSled> {
        let dir = crate::harness::tempdir("bare-sled-");
        let db = sled::Config::new()
            .path(dir.path())
            .mode(sled::Mode::HighThroughput)
            .open()
            .expect("open sled");
        Arc::new(BareSled {
            db,
            next: AtomicU64::new(0),
            _dir: dir,
        })
    }

    /// One durable write: insert then flush.
    pub async fn write(&self) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let key = mcp_oauth_proxy::crypto::hash_secret(&n.to_string());
        // About the size of an access-token or audit record.
        let value = vec![b'x'; 300];
        self.db.insert(key.as_bytes(), value).expect("sled insert");
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush())
            .await
            .expect("join")
            .expect("sled flush");
    }

    /// A segment of `workers` concurrent writers.
    pub async fn run(self: &Arc<Self>, workers: usize, dur: Duration) -> (Vec<u64>, Duration) {
        let me = self.clone();
        segment(
            "bare sled insert+flush",
            workers,
            dur,
            move |_, deadline: Instant| {
                let me = me.clone();
                async move {
                    let mut lat = Vec::new();
                    while now() < deadline {
                        let s = now();
                        me.write().await;
                        lat.push(ns_since(s));
                    }
                    lat
                }
            },
        )
        .await
    }
}
