//! The shared store on PostgreSQL, for several replicas. One table holds every keyspace;
//! each operation is one statement (atomic, committed before it returns, so durable with the
//! server's default `synchronous_commit`). Single use is `DELETE … RETURNING`; compare-and-swap
//! is an `UPDATE … WHERE value = expected`. Expiry compares against the injected clock, so all
//! replicas and the tests agree on "now"; sweeping is a plain `DELETE` that any number of
//! replicas may run at once.
//!
//! Inside [`super::batched`] a write is still its own statement and its own commit, so it is
//! atomic and visible to every replica at once (a `take` or compare-and-swap that loses a race
//! loses it exactly as outside a batch), but it commits on a connection with
//! `synchronous_commit = off`: the commit does not wait for its WAL record to reach disk. The
//! batch's final [`Store::flush`] is one commit that does wait (a transactional
//! `pg_logical_emit_message`, the smallest statement whose commit must be flushed; or, when the
//! request handed rows to it, [`Store::flush_with`]'s insert of them), and WAL is
//! one sequence: flushing that commit's record flushes every record written before it,
//! including the request's own. So a batched request's response still goes out only after all
//! its writes are durable, as on sled, and pays one WAL flush instead of one per write. What
//! another request may read of those writes before the flush is what sled shows too (see
//! [`super::batched`]).

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use super::{Keyspace, Row, Store, StoreError, Versioned};
use crate::clock::{SharedClock, UnixTime};

/// Versioned schema migrations, applied in order at start (under an advisory lock, so
/// replicas starting together do not race) and by `mcp-oauth-proxy store-migrate`.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        r#"
CREATE TABLE IF NOT EXISTS mop_kv (
    keyspace   TEXT   NOT NULL,
    key        TEXT   COLLATE "C" NOT NULL,
    value      BYTEA  NOT NULL,
    expires_at BIGINT,
    PRIMARY KEY (keyspace, key)
);
CREATE INDEX IF NOT EXISTS mop_kv_expiry ON mop_kv (expires_at) WHERE expires_at IS NOT NULL;
"#,
    ),
    // Every changed row of a keyspace replicas cache is announced to all of them
    // (`store::pg_peers`), whoever changed it.
    (2, TRIGGER_SQL),
    // Rows up to a page stay whole: past about 2 KB PostgreSQL compresses a row's values and,
    // if it is still too big, moves them out of line (TOAST). A refresh family with its
    // superseded hashes (about 7.5 KB) and an audit group row (about 4 KB) are rewritten on
    // every refresh and group commit; compressing them and going through the TOAST table cost
    // more PostgreSQL CPU than the bytes saved (issue 17; BENCHMARKS.md). The largest target
    // a page allows is its size less 32 bytes (8160 on the usual 8 KB pages).
    (
        3,
        r#"
DO $$ BEGIN
    EXECUTE format('ALTER TABLE mop_kv SET (toast_tuple_target = %s)',
                   current_setting('block_size')::int - 32);
END $$;
"#,
    ),
];

const TRIGGER_SQL: &str = r#"
CREATE OR REPLACE FUNCTION mop_kv_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cached CONSTANT TEXT[] := ARRAY['access_tokens', 'refresh_families', 'standing', 'grants', 'allowances'];
    channel CONSTANT TEXT := 'mop_' || TG_TABLE_SCHEMA;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.keyspace = ANY (cached) THEN
        PERFORM pg_notify(channel, 'k ' || OLD.keyspace || ' ' || OLD.key);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.keyspace = ANY (cached)
        AND (TG_OP = 'INSERT' OR NEW.keyspace <> OLD.keyspace OR NEW.key <> OLD.key) THEN
        PERFORM pg_notify(channel, 'k ' || NEW.keyspace || ' ' || NEW.key);
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS mop_kv_changed ON mop_kv;
CREATE TRIGGER mop_kv_changed AFTER INSERT OR UPDATE OR DELETE ON mop_kv
    FOR EACH ROW EXECUTE FUNCTION mop_kv_changed();
"#;

/// The trigger's SQL (its keyspace list must be `store::cache::CACHED`; a test checks).
#[cfg(test)]
pub(super) fn trigger_sql() -> &'static str {
    TRIGGER_SQL
}

/// An arbitrary constant identifying our migration lock.
const MIGRATION_LOCK: i64 = 0x6d63_705f_6f61_7574;

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn exp(t: Option<UnixTime>) -> Option<i64> {
    t.map(|t| i64::try_from(t.0).unwrap_or(i64::MAX))
}

fn now_i64(clock: &SharedClock) -> i64 {
    i64::try_from(clock.now().0).unwrap_or(i64::MAX)
}

fn versioned(value: Vec<u8>, expires_at: Option<i64>) -> Versioned {
    Versioned {
        value,
        expires_at: expires_at.and_then(|e| u64::try_from(e).ok()).map(UnixTime),
    }
}

/// The items whose key comes last among those sharing it, in their order: a key given twice
/// in one upsert would touch its row twice, which PostgreSQL refuses, so only its last value
/// is sent.
fn last_of_each<T, K: std::hash::Hash + Eq>(items: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
    let mut last = std::collections::HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        last.insert(key(item), i);
    }
    items
        .into_iter()
        .enumerate()
        .filter(|(i, item)| last.get(&key(item)) == Some(i))
        .map(|(_, item)| item)
        .collect()
}

/// Connections per pool ([`PgStore`] has two): a statement holds one only while it runs, so
/// 16 keep a 2-core server busy; each replica opens at most twice this many.
const POOL_SIZE: usize = 16;

/// PostgreSQL-backed [`Store`].
pub struct PgStore {
    pool: Pool,
    /// Connections with `synchronous_commit = off`, for writes inside [`super::batched`] only:
    /// the batch's final flush makes them durable before its response leaves.
    deferred: Pool,
    /// Writes committed on `deferred` so far and, of those, the ones a completed flush covers:
    /// a flush with nothing uncovered has nothing to wait for.
    written: AtomicU64,
    flushed: AtomicU64,
    clock: SharedClock,
    /// What the cache listener connects with (`store::pg_peers`), and the schema whose
    /// trigger it hears.
    listen_cfg: tokio_postgres::Config,
    tls: Tls,
    schema: String,
    /// This replica's name among the others (random per start).
    replica_id: String,
}

/// TLS options taken out of the URL (tokio-postgres does not know `sslrootcert`).
#[derive(Clone)]
struct Tls {
    require: bool,
    root_cert: Option<std::path::PathBuf>,
}

fn split_url(url: &str) -> Result<(String, Tls), StoreError> {
    let mut parsed = url::Url::parse(url).map_err(|e| backend(format!("store.url: {e}")))?;
    let pairs: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
    let mut tls = Tls {
        require: false,
        root_cert: None,
    };
    let mut kept = Vec::new();
    for (k, v) in pairs {
        match k.as_str() {
            "sslrootcert" => tls.root_cert = Some(v.into()),
            "sslmode" => {
                tls.require = matches!(v.as_str(), "require" | "verify-ca" | "verify-full");
                // tokio-postgres knows disable/prefer/require; verification is ours.
                kept.push((k, if tls.require { "require".to_owned() } else { v }));
            }
            _ => kept.push((k, v)),
        }
    }
    parsed.set_query(None);
    if !kept.is_empty() {
        parsed.query_pairs_mut().extend_pairs(kept);
    }
    Ok((parsed.to_string(), tls))
}

fn rustls_connector(
    root_cert: Option<&std::path::Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    crate::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    let path = root_cert.ok_or_else(|| {
        backend("store.url: sslmode=require needs sslrootcert=<PEM file of the server's CA>")
    })?;
    for cert in
        CertificateDer::pem_file_iter(path).map_err(|e| backend(format!("sslrootcert: {e}")))?
    {
        roots
            .add(cert.map_err(|e| backend(format!("sslrootcert: {e}")))?)
            .map_err(|e| backend(format!("sslrootcert: {e}")))?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

impl PgStore {
    /// Connects (a pool), applies migrations, and returns the store. With `schema`, every
    /// connection uses that schema (created if missing): tests isolate themselves this way.
    pub async fn connect(
        url: &str,
        schema: Option<&str>,
        clock: SharedClock,
    ) -> Result<PgStore, StoreError> {
        let (url, tls) = split_url(url)?;
        let mut cfg = tokio_postgres::Config::from_str(&url)
            .map_err(|e| backend(format!("store.url: {e}")))?;
        if let Some(s) = schema {
            // The trigger's channel is `mop_<schema>`, an identifier of at most 63 bytes.
            if s.is_empty()
                || s.len() > 59
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(backend(
                    "store schema: 1 to 59 lowercase letters, digits and _",
                ));
            }
            cfg.options(format!("-c search_path={s}"));
        }
        // The same, for writes whose durability a batch's final flush provides.
        let mut deferred_cfg = cfg.clone();
        deferred_cfg.options(format!(
            "{} -c synchronous_commit=off",
            cfg.get_options().unwrap_or("")
        ));
        let pool = |cfg: tokio_postgres::Config| {
            let mgr_cfg = ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            };
            let mgr = if tls.require {
                Manager::from_config(cfg, rustls_connector(tls.root_cert.as_deref())?, mgr_cfg)
            } else {
                Manager::from_config(cfg, NoTls, mgr_cfg)
            };
            Pool::builder(mgr)
                .max_size(POOL_SIZE)
                .build()
                .map_err(backend)
        };
        let store = PgStore {
            pool: pool(cfg.clone())?,
            deferred: pool(deferred_cfg.clone())?,
            written: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            clock,
            // Its heartbeats and answers need no durability: a commit that notifies is
            // serialized with every other such commit (PostgreSQL keeps notifications in
            // commit order), so none of them may wait for a WAL flush.
            listen_cfg: deferred_cfg.clone(),
            tls,
            schema: String::new(),
            replica_id: crate::crypto::random_token()
                .map_err(|e| backend(format!("replica id: {e}")))?,
        };
        store.migrate(schema).await?;
        let mut store = store;
        // The schema the table is in is the trigger's channel (`TG_TABLE_SCHEMA`).
        store.schema = store
            .conn()
            .await?
            .query_opt("SELECT current_schema()", &[])
            .await
            .map_err(backend)?
            .and_then(|r| r.get::<_, Option<String>>(0))
            .ok_or_else(|| backend("no current schema"))?;
        // Named, so an operator (and a test) can tell it apart in pg_stat_activity.
        store
            .listen_cfg
            .application_name(format!("mcp-oauth-proxy listener {}", store.schema));
        Ok(store)
    }

    /// Applies pending migrations; returns how many were applied. Everything, including
    /// creating the schema, happens under one advisory lock: `CREATE … IF NOT EXISTS` is not
    /// safe against itself when replicas (or tests) start at the same moment.
    pub async fn migrate(&self, schema: Option<&str>) -> Result<usize, StoreError> {
        let mut conn = self.pool.get().await.map_err(backend)?;
        let tx = conn.transaction().await.map_err(backend)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(backend)?;
        if let Some(s) = schema {
            tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {s}"))
                .await
                .map_err(backend)?;
        }
        tx.batch_execute("CREATE TABLE IF NOT EXISTS mop_schema (version INT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            .await
            .map_err(backend)?;
        let mut applied = 0;
        for (version, sql) in MIGRATIONS {
            let done = tx
                .query_opt("SELECT 1 FROM mop_schema WHERE version = $1", &[version])
                .await
                .map_err(backend)?;
            if done.is_none() {
                tx.batch_execute(sql).await.map_err(backend)?;
                tx.execute("INSERT INTO mop_schema (version) VALUES ($1)", &[version])
                    .await
                    .map_err(backend)?;
                applied += 1;
            }
        }
        tx.commit().await.map_err(backend)?;
        Ok(applied)
    }

    /// Shared handle.
    pub fn shared(self) -> Arc<PgStore> {
        Arc::new(self)
    }

    async fn conn(&self) -> Result<Conn, StoreError> {
        self.pool.get().await.map(Conn).map_err(backend)
    }

    /// A connection for one write: inside an open batch, one whose commit does not wait for
    /// the WAL flush (the batch's final flush does); else an ordinary one.
    async fn writer(&self) -> Result<Writer, StoreError> {
        if super::batch_open() {
            let conn = self.deferred.get().await.map(Conn).map_err(backend)?;
            Ok(Writer {
                conn,
                deferred: true,
            })
        } else {
            Ok(Writer {
                conn: self.conn().await?,
                deferred: false,
            })
        }
    }

    /// After a write on `w` that `changed` something: a deferred write is counted and noted
    /// with its batch, whose final flush then covers it. (Should the batch have closed
    /// meanwhile, which a write inside it cannot see, the write is flushed here.)
    async fn wrote(&self, w: &Writer, changed: bool) -> Result<(), StoreError> {
        if !(w.deferred && changed) {
            return Ok(());
        }
        self.written.fetch_add(1, Ordering::AcqRel);
        if super::write_is_batched() {
            return Ok(());
        }
        self.flush().await
    }
}

/// A connection taken for one write, and whether its commit waits for the WAL flush.
struct Writer {
    conn: Conn,
    deferred: bool,
}

/// A pooled connection whose statements are prepared once per connection and then reused
/// (`prepare_cached`): a statement given as text is otherwise parsed and planned anew on each
/// call, one more round trip before it runs. The pool recycles connections without
/// `DISCARD ALL` ([`RecyclingMethod::Fast`]), so the prepared statements stay valid.
struct Conn(deadpool_postgres::Object);

type Params<'a> = &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)];

impl Conn {
    async fn query_opt(
        &self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<tokio_postgres::Row>, tokio_postgres::Error> {
        let statement = self.0.prepare_cached(sql).await?;
        self.0.query_opt(&statement, params).await
    }

    async fn query(
        &self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let statement = self.0.prepare_cached(sql).await?;
        self.0.query(&statement, params).await
    }

    async fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64, tokio_postgres::Error> {
        let statement = self.0.prepare_cached(sql).await?;
        self.0.execute(&statement, params).await
    }
}

#[async_trait]
impl Store for PgStore {
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        let row = self
            .conn()
            .await?
            .query_opt(
                "SELECT value, expires_at FROM mop_kv WHERE keyspace = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > $3)",
                &[&ks.name(), &key, &now_i64(&self.clock)],
            )
            .await
            .map_err(backend)?;
        Ok(row.map(|r| versioned(r.get(0), r.get(1))))
    }

    async fn get_many(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<Versioned>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // One statement, answered from one snapshot: a `UNION ALL` of the point reads `get`
        // makes, one primary-key lookup each. Measured with pgbench on this project's 2-core
        // machine, two keys: 25 µs at 1 client against 47 µs for two statements, and 1.6× the
        // pairs per second at 16. (An `UNNEST … JOIN` of arrays costs more: PostgreSQL plans
        // it anew on every call, ~130 µs, and a plan it did keep, made while the table was
        // small, scanned the whole table.) One prepared statement per count of keys.
        let now = now_i64(&self.clock);
        let names: Vec<&'static str> = keys.iter().map(|(ks, _)| ks.name()).collect();
        let mut sql = String::new();
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&now];
        for (i, ((_, key), ks)) in keys.iter().zip(&names).enumerate() {
            if i > 0 {
                sql.push_str(" UNION ALL ");
            }
            sql.push_str(&format!(
                "SELECT {i}::int8, value, expires_at FROM mop_kv WHERE keyspace = ${} AND key = ${} \
                 AND (expires_at IS NULL OR expires_at > $1)",
                2 * i + 2,
                2 * i + 3
            ));
            params.push(ks);
            params.push(key);
        }
        let rows = self
            .conn()
            .await?
            .query(&sql, &params)
            .await
            .map_err(backend)?;
        let mut out: Vec<Option<Versioned>> = vec![None; keys.len()];
        for r in rows {
            let i: i64 = r.get(0);
            let slot = usize::try_from(i)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| backend("get_many: row out of range"))?;
            *slot = Some(versioned(r.get(1), r.get(2)));
        }
        Ok(out)
    }

    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        // Inserts, or replaces only an expired leftover; a live record wins.
        let w = self.writer().await?;
        let row = w
            .conn
            .query_opt(
                "INSERT INTO mop_kv (keyspace, key, value, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (keyspace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at \
                 WHERE mop_kv.expires_at IS NOT NULL AND mop_kv.expires_at <= $5 RETURNING 1",
                &[&ks.name(), &key, &value, &exp(expires_at), &now_i64(&self.clock)],
            )
            .await
            .map_err(backend)?;
        self.wrote(&w, row.is_some()).await?;
        Ok(row.is_some())
    }

    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        let w = self.writer().await?;
        w.conn
            .execute(
                "INSERT INTO mop_kv (keyspace, key, value, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (keyspace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at",
                &[&ks.name(), &key, &value, &exp(expires_at)],
            )
            .await
            .map_err(backend)?;
        self.wrote(&w, true).await
    }

    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        let w = self.writer().await?;
        let row = w
            .conn
            .query_opt(
                "DELETE FROM mop_kv WHERE keyspace = $1 AND key = $2 RETURNING value, expires_at",
                &[&ks.name(), &key],
            )
            .await
            .map_err(backend)?;
        self.wrote(&w, row.is_some()).await?;
        let now = now_i64(&self.clock);
        Ok(row.and_then(|r| {
            let e: Option<i64> = r.get(1);
            e.is_none_or(|e| e > now).then(|| versioned(r.get(0), e))
        }))
    }

    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        let w = self.writer().await?;
        let conn = &w.conn;
        let n = match new {
            Some(n) => conn
                .execute(
                    "UPDATE mop_kv SET value = $3, expires_at = $4 \
                     WHERE keyspace = $1 AND key = $2 AND value = $5 AND expires_at IS NOT DISTINCT FROM $6",
                    &[&ks.name(), &key, &n.value, &exp(n.expires_at), &expected.value, &exp(expected.expires_at)],
                )
                .await
                .map_err(backend)?,
            None => conn
                .execute(
                    "DELETE FROM mop_kv WHERE keyspace = $1 AND key = $2 AND value = $3 AND expires_at IS NOT DISTINCT FROM $4",
                    &[&ks.name(), &key, &expected.value, &exp(expected.expires_at)],
                )
                .await
                .map_err(backend)?,
        };
        self.wrote(&w, n == 1).await?;
        Ok(n == 1)
    }

    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        let w = self.writer().await?;
        let n = w
            .conn
            .execute(
                "DELETE FROM mop_kv WHERE keyspace = $1 AND key = $2",
                &[&ks.name(), &key],
            )
            .await
            .map_err(backend)?;
        self.wrote(&w, n > 0).await
    }

    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        // LIKE with an escaped prefix uses the primary key index under COLLATE "C".
        let pattern = format!(
            "{}%",
            prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let rows = self
            .conn()
            .await?
            .query(
                "SELECT key, value, expires_at FROM mop_kv WHERE keyspace = $1 AND key LIKE $2 \
                 AND (expires_at IS NULL OR expires_at > $3) ORDER BY key",
                &[&ks.name(), &pattern, &now_i64(&self.clock)],
            )
            .await
            .map_err(backend)?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get(0), versioned(r.get(1), r.get(2))))
            .collect())
    }

    async fn scan_page(
        &self,
        ks: Keyspace,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        let pattern = format!(
            "{}%",
            prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .conn()
            .await?
            .query(
                "SELECT key, value, expires_at FROM mop_kv WHERE keyspace = $1 AND key LIKE $2 \
                 AND key > $3 AND (expires_at IS NULL OR expires_at > $4) ORDER BY key LIMIT $5",
                &[
                    &ks.name(),
                    &pattern,
                    &after.unwrap_or(""),
                    &now_i64(&self.clock),
                    &limit,
                ],
            )
            .await
            .map_err(backend)?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get(0), versioned(r.get(1), r.get(2))))
            .collect())
    }

    async fn put_many(&self, ks: Keyspace, rows: Vec<Row>) -> Result<(), StoreError> {
        // One statement (one commit) for the lot.
        let rows = last_of_each(rows, |(key, _, _)| key.clone());
        let mut keys = Vec::with_capacity(rows.len());
        let mut values = Vec::with_capacity(rows.len());
        let mut expiries = Vec::with_capacity(rows.len());
        for (key, value, expires_at) in rows {
            keys.push(key);
            values.push(value);
            expiries.push(exp(expires_at));
        }
        if keys.is_empty() {
            return Ok(());
        }
        let w = self.writer().await?;
        w.conn
            .execute(
                "INSERT INTO mop_kv (keyspace, key, value, expires_at) \
                 SELECT $1, k, v, e FROM UNNEST($2::text[], $3::bytea[], $4::int8[]) AS t(k, v, e) \
                 ON CONFLICT (keyspace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at",
                &[&ks.name(), &keys, &values, &expiries],
            )
            .await
            .map_err(backend)?;
        self.wrote(&w, true).await
    }

    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        self.conn()
            .await?
            .execute(
                "DELETE FROM mop_kv WHERE expires_at IS NOT NULL AND expires_at <= $1",
                &[&now_i64(&self.clock)],
            )
            .await
            .map_err(backend)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        // Statements outside a batch were durable when they returned; deferred ones are
        // durable once a commit that waits for the WAL flush follows them. A commit that
        // wrote no WAL of its own does not wait (PostgreSQL commits it asynchronously), so
        // the flush writes a transactional logical-decoding message: a WAL record of a few
        // bytes, no table, any role may, and only logical decoding ever reads it.
        let covered = self.written.load(Ordering::Acquire);
        if self.flushed.load(Ordering::Acquire) >= covered {
            return Ok(());
        }
        self.conn()
            .await?
            .execute(
                "SELECT pg_logical_emit_message(true, 'mcp-oauth-proxy', 'flush')",
                &[],
            )
            .await
            .map_err(backend)?;
        self.flushed.fetch_max(covered, Ordering::AcqRel);
        Ok(())
    }

    async fn flush_with(&self, rows: Vec<(Keyspace, Row)>) -> Result<(), StoreError> {
        // The rows in one statement on a connection whose commit waits for the WAL flush:
        // that flush makes this commit durable and, WAL being one sequence, every deferred
        // write before it, as `flush`'s message does.
        let covered = self.written.load(Ordering::Acquire);
        let rows = last_of_each(rows, |(ks, (key, _, _))| (*ks, key.clone()));
        let mut keyspaces = Vec::with_capacity(rows.len());
        let mut keys = Vec::with_capacity(rows.len());
        let mut values = Vec::with_capacity(rows.len());
        let mut expiries = Vec::with_capacity(rows.len());
        for (ks, (key, value, expires_at)) in rows {
            keyspaces.push(ks.name());
            keys.push(key);
            values.push(value);
            expiries.push(exp(expires_at));
        }
        if keys.is_empty() {
            return self.flush().await;
        }
        self.conn()
            .await?
            .execute(
                "INSERT INTO mop_kv (keyspace, key, value, expires_at) \
                 SELECT ks, k, v, e FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::int8[]) AS t(ks, k, v, e) \
                 ON CONFLICT (keyspace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at",
                &[&keyspaces, &keys, &values, &expiries],
            )
            .await
            .map_err(backend)?;
        self.flushed.fetch_max(covered, Ordering::AcqRel);
        Ok(())
    }

    fn peers(&self, cache: Arc<super::RecordCache>) -> Arc<dyn super::Peers> {
        let cfg = self.listen_cfg.clone();
        let tls = self.tls.clone();
        let connect: super::pg_peers::Connect = Arc::new(move || {
            let cfg = cfg.clone();
            let tls = tls.clone();
            Box::pin(async move {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let client = if tls.require {
                    let connector =
                        rustls_connector(tls.root_cert.as_deref()).map_err(|e| e.to_string())?;
                    let (client, connection) =
                        cfg.connect(connector).await.map_err(|e| e.to_string())?;
                    tokio::spawn(super::pg_peers::drive(connection, tx));
                    client
                } else {
                    let (client, connection) =
                        cfg.connect(NoTls).await.map_err(|e| e.to_string())?;
                    tokio::spawn(super::pg_peers::drive(connection, tx));
                    client
                };
                Ok((client, rx))
            })
        });
        Arc::new(super::pg_peers::PgPeers::start(
            self.replica_id.clone(),
            &self.schema,
            cache,
            // Barriers need no durability either (see `listen_cfg`).
            self.deferred.clone(),
            connect,
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// A fresh schema on the test server, or `None` (with a notice) when PostgreSQL is not
    /// reachable and `MCP_PG=require` is not set.
    pub(crate) async fn test_store(clock: SharedClock) -> Option<PgStore> {
        let url = std::env::var("MCP_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let schema = format!(
            "t_{}",
            crate::crypto::b64url(&crate::crypto::random_bytes::<9>().unwrap())
                .to_ascii_lowercase()
                .replace('-', "_")
        );
        match PgStore::connect(&url, Some(&schema), clock).await {
            Ok(s) => Some(s),
            Err(e) if std::env::var("MCP_PG").as_deref() == Ok("require") => {
                panic!("PostgreSQL required (MCP_PG=require): {e}")
            }
            Err(e) => {
                eprintln!(
                    "NOTICE: PostgreSQL at {url} not reachable ({e}); skipping PostgreSQL store tests"
                );
                None
            }
        }
    }

    #[tokio::test]
    async fn postgres_passes_the_store_conformance_suite() {
        let clock = ManualClock::new(UnixTime(1_000));
        let Some(store) = test_store(clock.clone()).await else {
            return;
        };
        crate::store::conformance::run(Arc::new(store), clock).await;
    }

    /// A batched request's writes commit without waiting for the WAL flush, and the request
    /// answers only after one flush that waits covers them; outside a batch every commit
    /// waits by itself.
    #[tokio::test]
    async fn batched_writes_are_made_durable_by_the_one_final_flush() {
        let clock = ManualClock::new(UnixTime(1_000));
        let Some(store) = test_store(clock).await else {
            return;
        };
        let setting = |pool: &Pool| {
            let pool = pool.clone();
            async move {
                let c = pool.get().await.unwrap();
                let row = c.query_one("SHOW synchronous_commit", &[]).await.unwrap();
                row.get::<_, String>(0)
            }
        };
        assert_eq!(setting(&store.deferred).await, "off");
        assert_ne!(setting(&store.pool).await, "off");
        let store = Arc::new(store);
        let shared: crate::store::SharedStore = store.clone();
        store
            .put(Keyspace::Codes, "outside", b"v".to_vec(), None)
            .await
            .unwrap();
        assert_eq!(store.written.load(Ordering::Acquire), 0, "not deferred");
        let (written, flushed) = crate::store::batched(&shared, async {
            shared
                .put(Keyspace::Codes, "a", b"v".to_vec(), None)
                .await
                .unwrap();
            assert!(shared.take(Keyspace::Codes, "a").await.unwrap().is_some());
            // A take that found nothing changed nothing: nothing more to flush for it.
            assert!(shared.take(Keyspace::Codes, "a").await.unwrap().is_none());
            (
                store.written.load(Ordering::Acquire),
                store.flushed.load(Ordering::Acquire),
            )
        })
        .await
        .unwrap();
        assert_eq!((written, flushed), (2, 0), "deferred, not yet flushed");
        assert_eq!(
            store.flushed.load(Ordering::Acquire),
            2,
            "flushed before answering"
        );
    }

    /// Rows handed to the final flush are written by the commit that waits, which covers the
    /// request's deferred writes too: one statement instead of one per row and the flush.
    #[tokio::test]
    async fn rows_handed_to_the_final_flush_are_written_by_the_commit_that_waits() {
        let clock = ManualClock::new(UnixTime(1_000));
        let Some(store) = test_store(clock).await else {
            return;
        };
        let store = Arc::new(store);
        let shared: crate::store::SharedStore = store.clone();
        let (written, flushed) = crate::store::batched(&shared, async {
            shared
                .put(Keyspace::Codes, "fw-state", b"v".to_vec(), None)
                .await
                .unwrap();
            let row = ("fw-event".to_owned(), b"e".to_vec(), None);
            assert!(crate::store::write_at_flush(Keyspace::Audit, row).is_ok());
            (
                store.written.load(Ordering::Acquire),
                store.flushed.load(Ordering::Acquire),
            )
        })
        .await
        .unwrap();
        assert_eq!((written, flushed), (1, 0), "the state write deferred");
        assert_eq!(store.flushed.load(Ordering::Acquire), 1, "covered by it");
        assert!(
            store
                .get(Keyspace::Audit, "fw-event")
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn migrations_are_idempotent() {
        let clock = ManualClock::new(UnixTime(1_000));
        let Some(store) = test_store(clock).await else {
            return;
        };
        assert_eq!(
            store.migrate(None).await.unwrap(),
            0,
            "already applied at connect"
        );
    }

    /// A record of several KB (a refresh family that has rotated many times, an audit group
    /// row) is kept whole: not compressed, not moved out of line, so rewriting and reading it
    /// costs PostgreSQL no compression and no TOAST work (migration 3).
    #[tokio::test]
    async fn records_up_to_a_page_stay_inline_and_uncompressed() {
        let clock = ManualClock::new(UnixTime(1_000));
        let Some(store) = test_store(clock).await else {
            return;
        };
        // Shaped like a family's superseded hashes: random hashes in repeated JSON, which by
        // default PostgreSQL compresses only in part and then moves out of line.
        let mut value = Vec::new();
        while value.len() < 7_400 {
            let hash = crate::crypto::b64url(&crate::crypto::random_bytes::<32>().unwrap());
            value.extend_from_slice(
                format!(r#"{{"hash":"{hash}","at":1000,"branch":0}},"#).as_bytes(),
            );
        }
        store
            .put(Keyspace::RefreshFamilies, "fam", value.clone(), None)
            .await
            .unwrap();
        let conn = store.conn().await.unwrap();
        let row = conn
            .0
            .query_one(
                "SELECT pg_column_size(value), \
                        (SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'mop_kv'::regclass) \
                 FROM mop_kv WHERE keyspace = 'refresh_families' AND key = 'fam'",
                &[],
            )
            .await
            .unwrap();
        let (size, toasted): (i32, i64) = (row.get(0), row.get(1));
        assert_eq!(toasted, 0, "moved out of line");
        assert!(
            usize::try_from(size).unwrap() >= value.len(),
            "compressed: stored in {size} bytes for {}",
            value.len()
        );
        let read = store.get(Keyspace::RefreshFamilies, "fam").await.unwrap();
        assert_eq!(read.map(|v| v.value), Some(value));
    }

    #[test]
    fn url_options_are_split_for_tls() {
        let (url, tls) = split_url("postgres://u@db.example/mcp?sslmode=verify-full&sslrootcert=/etc/ca.pem&application_name=x").unwrap();
        assert!(tls.require);
        assert_eq!(
            tls.root_cert.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert!(!url.contains("sslrootcert"));
        assert!(url.contains("sslmode=require") && url.contains("application_name=x"));
        let (_, tls) = split_url("postgres://u@127.0.0.1/test").unwrap();
        assert!(!tls.require);
    }
}
