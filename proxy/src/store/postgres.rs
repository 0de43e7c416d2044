//! The shared store on PostgreSQL, for several replicas. One table holds every keyspace;
//! each operation is one statement (atomic, committed before it returns, so durable with the
//! server's default `synchronous_commit`). Single use is `DELETE … RETURNING`; compare-and-swap
//! is an `UPDATE … WHERE value = expected`. Expiry compares against the injected clock, so all
//! replicas and the tests agree on "now"; sweeping is a plain `DELETE` that any number of
//! replicas may run at once.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use super::{Keyspace, Row, Store, StoreError, Versioned};
use crate::clock::{SharedClock, UnixTime};

/// Versioned schema migrations, applied in order at start (under an advisory lock, so
/// replicas starting together do not race) and by `mcp-oauth-proxy store-migrate`.
const MIGRATIONS: &[(i32, &str)] = &[(
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
)];

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

/// PostgreSQL-backed [`Store`].
pub struct PgStore {
    pool: Pool,
    clock: SharedClock,
}

/// TLS options taken out of the URL (tokio-postgres does not know `sslrootcert`).
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
            if !s
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(backend(
                    "store schema: lowercase letters, digits and _ only",
                ));
            }
            cfg.options(format!("-c search_path={s}"));
        }
        let mgr_cfg = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let mgr = if tls.require {
            Manager::from_config(cfg, rustls_connector(tls.root_cert.as_deref())?, mgr_cfg)
        } else {
            Manager::from_config(cfg, NoTls, mgr_cfg)
        };
        let pool = Pool::builder(mgr).max_size(16).build().map_err(backend)?;
        let store = PgStore { pool, clock };
        store.migrate(schema).await?;
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

    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        // Inserts, or replaces only an expired leftover; a live record wins.
        let row = self
            .conn()
            .await?
            .query_opt(
                "INSERT INTO mop_kv (keyspace, key, value, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (keyspace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at \
                 WHERE mop_kv.expires_at IS NOT NULL AND mop_kv.expires_at <= $5 RETURNING 1",
                &[&ks.name(), &key, &value, &exp(expires_at), &now_i64(&self.clock)],
            )
            .await
            .map_err(backend)?;
        Ok(row.is_some())
    }

    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        self.conn()
            .await?
            .execute(
                "INSERT INTO mop_kv (keyspace, key, value, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (keyspace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at",
                &[&ks.name(), &key, &value, &exp(expires_at)],
            )
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError> {
        let row = self
            .conn()
            .await?
            .query_opt(
                "DELETE FROM mop_kv WHERE keyspace = $1 AND key = $2 RETURNING value, expires_at",
                &[&ks.name(), &key],
            )
            .await
            .map_err(backend)?;
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
        let conn = self.conn().await?;
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
        Ok(n == 1)
    }

    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError> {
        self.conn()
            .await?
            .execute(
                "DELETE FROM mop_kv WHERE keyspace = $1 AND key = $2",
                &[&ks.name(), &key],
            )
            .await
            .map_err(backend)?;
        Ok(())
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
        // One statement (one commit) for the lot; a key given twice would make the upsert
        // touch its row twice, which PostgreSQL refuses, so only its last value is sent.
        let mut last = std::collections::HashMap::with_capacity(rows.len());
        for (i, (key, _, _)) in rows.iter().enumerate() {
            last.insert(key.clone(), i);
        }
        let mut keys = Vec::with_capacity(last.len());
        let mut values = Vec::with_capacity(last.len());
        let mut expiries = Vec::with_capacity(last.len());
        for (i, (key, value, expires_at)) in rows.into_iter().enumerate() {
            if last.get(&key) == Some(&i) {
                keys.push(key);
                values.push(value);
                expiries.push(exp(expires_at));
            }
        }
        if keys.is_empty() {
            return Ok(());
        }
        self.conn()
            .await?
            .execute(
                "INSERT INTO mop_kv (keyspace, key, value, expires_at) \
                 SELECT $1, k, v, e FROM UNNEST($2::text[], $3::bytea[], $4::int8[]) AS t(k, v, e) \
                 ON CONFLICT (keyspace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at",
                &[&ks.name(), &keys, &values, &expiries],
            )
            .await
            .map_err(backend)?;
        Ok(())
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
        // Every statement committed before it returned.
        Ok(())
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
