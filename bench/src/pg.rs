//! PostgreSQL for the benchmarks: the run's scratch database (made by the parent, dropped at
//! the end of the run), what the server makes durable at each commit (its settings, for the
//! report), and a baseline: bare single-statement INSERTs, each its own committed
//! transaction, as every write of the proxy's PostgreSQL store is.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use crate::timing::{now, ns_since, segment};

/// Where the bench looks for a server unless `--pg-url URL` says otherwise: the machine's
/// PostgreSQL, as CI has it (trust auth, user postgres).
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Connections the bare baseline shares among its workers: as many as each of the proxy's two
/// store pools holds (`POOL_SIZE` in `store/postgres.rs`), so both can have at most 16
/// WAL-flushing commits in flight.
const BARE_CONNECTIONS: usize = 16;

async fn connect(url: &str) -> Result<tokio_postgres::Client, String> {
    let connecting = tokio_postgres::connect(url, NoTls);
    let (client, conn) = tokio::time::timeout(Duration::from_secs(5), connecting)
        .await
        .map_err(|_| "no answer within 5 s".to_owned())?
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The run's scratch database.
pub struct Scratch {
    admin_url: String,
    /// Its name.
    pub name: String,
    /// A URL to it.
    pub url: String,
    /// `server_version`, `synchronous_commit`, `fsync`, `wal_sync_method`, `commit_delay`,
    /// `max_connections`, as the server has them.
    pub settings: Vec<(&'static str, String)>,
}

/// Settings read from the server for the report.
const SETTINGS: [&str; 6] = [
    "server_version",
    "synchronous_commit",
    "fsync",
    "wal_sync_method",
    "commit_delay",
    "max_connections",
];

impl Scratch {
    /// Creates a database of its own for this run on the server at `admin_url`.
    pub async fn create(admin_url: &str) -> Result<Scratch, String> {
        let admin = connect(admin_url).await?;
        let mut settings = Vec::new();
        for s in SETTINGS {
            let row = admin
                .query_one(&format!("SHOW {s}"), &[])
                .await
                .map_err(|e| e.to_string())?;
            settings.push((s, row.get::<_, String>(0)));
        }
        let secs = std::time::SystemTime::UNIX_EPOCH
            .elapsed()
            .map_or(0, |d| d.as_secs());
        let name = format!("proxy_bench_{}_{secs}", std::process::id());
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| format!("CREATE DATABASE: {e}"))?;
        let mut url = url::Url::parse(admin_url).map_err(|e| e.to_string())?;
        url.set_path(&format!("/{name}"));
        Ok(Scratch {
            admin_url: admin_url.to_owned(),
            name,
            url: url.to_string(),
            settings,
        })
    }

    /// The value of one of [`SETTINGS`].
    pub fn setting(&self, name: &str) -> &str {
        self.settings
            .iter()
            .find(|(k, _)| *k == name)
            .map_or("?", |(_, v)| v.as_str())
    }

    /// Drops the database (and ends any connection still open to it: a child that hung).
    pub async fn drop_db(&self) -> Result<(), String> {
        let admin = connect(&self.admin_url).await?;
        admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .map_err(|e| e.to_string())
    }
}

/// Baseline: bare INSERTs into a table shaped like the store's, one autocommitted statement
/// each (so each waits for its commit), from concurrent workers over [`BARE_CONNECTIONS`]
/// connections. Its rate bounds what any sequence of durable writes through this server
/// reaches on this machine, as bare sled does for sled.
pub struct BarePg {
    /// Each connection with its prepared INSERT (a statement belongs to its connection).
    conns: Vec<(tokio_postgres::Client, tokio_postgres::Statement)>,
    next: AtomicU64,
}

impl BarePg {
    /// Connects to `url` (the scratch database) and makes its table.
    pub async fn open(url: &str) -> Arc<BarePg> {
        let table = format!("bare_kv_{}", std::process::id());
        let first = connect(url).await.expect("connect bare PostgreSQL");
        first
            .batch_execute(&format!(
                "CREATE TABLE {table} (keyspace TEXT NOT NULL, key TEXT COLLATE \"C\" NOT NULL, value BYTEA NOT NULL, expires_at BIGINT, PRIMARY KEY (keyspace, key))"
            ))
            .await
            .expect("create bare table");
        let sql = format!(
            "INSERT INTO {table} (keyspace, key, value, expires_at) VALUES ('bare', $1, $2, NULL)"
        );
        let mut conns = Vec::new();
        let mut next = Some(first);
        for _ in 0..BARE_CONNECTIONS {
            let c = match next.take() {
                Some(c) => c,
                None => connect(url).await.expect("connect bare PostgreSQL"),
            };
            let st = c.prepare(&sql).await.expect("prepare");
            conns.push((c, st));
        }
        Arc::new(BarePg {
            conns,
            next: AtomicU64::new(0),
        })
    }

    /// One durable write: one INSERT, committed before it returns.
    async fn write(&self, worker: usize) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let key = mcp_oauth_proxy::crypto::hash_secret(&n.to_string());
        // About the size of an access-token or audit record.
        let value = vec![b'x'; 300];
        let (client, insert) = &self.conns[worker % self.conns.len()];
        client
            .execute(insert, &[&key, &value])
            .await
            .expect("bare insert");
    }

    /// A segment of `workers` concurrent writers.
    pub async fn run(self: &Arc<Self>, workers: usize, dur: Duration) -> (Vec<u64>, Duration) {
        let me = self.clone();
        segment(
            "bare PostgreSQL insert",
            workers,
            dur,
            move |i, deadline: Instant| {
                let me = me.clone();
                async move {
                    let mut lat = Vec::new();
                    while now() < deadline {
                        let s = now();
                        me.write(i).await;
                        lat.push(ns_since(s));
                    }
                    lat
                }
            },
        )
        .await
    }
}
