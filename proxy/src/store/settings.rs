//! `[store]`: which store, and where, with its validation.

use std::path::PathBuf;

use serde::Deserialize;

// The default stays with the configuration until the store branch moves it here.
use super::DEFAULT_SLED_CACHE_MB;
use crate::secrets::Env;

/// `[store]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    path: Option<PathBuf>,
    cache_mb: Option<u64>,
    url: Option<String>,
    url_env: Option<String>,
    schema: Option<String>,
    record_cache_entries: Option<usize>,
}

/// Accepted `store.record_cache_entries` (0 turns the cache off).
const RECORD_CACHE_RANGE: std::ops::RangeInclusive<usize> = 0..=1_000_000;

impl RawStore {
    /// `store.record_cache_entries`: the size of the replica's cache of the `/mcp` checks'
    /// records (`store::cache`).
    pub fn record_cache_entries(&self, errs: &mut Vec<String>) -> usize {
        let n = self
            .record_cache_entries
            .unwrap_or(super::cache::DEFAULT_ENTRIES);
        if !RECORD_CACHE_RANGE.contains(&n) {
            errs.push(format!(
                "store.record_cache_entries: must be {}..={}",
                RECORD_CACHE_RANGE.start(),
                RECORD_CACHE_RANGE.end()
            ));
        }
        n
    }
}

/// Accepted `store.cache_mb`.
const SLED_CACHE_MB_RANGE: std::ops::RangeInclusive<u64> = 4..=65_536;

/// Which store, and where.
#[derive(Clone)]
pub enum StoreConfig {
    /// The embedded default: a sled directory (one process).
    Sled {
        /// Directory.
        path: PathBuf,
        /// Bytes of sled's page cache: bounds the store's share of resident memory however
        /// many records are live (colder pages are read back from the file system).
        cache_bytes: u64,
    },
    /// PostgreSQL, shared by several replicas.
    Postgres {
        /// Connection URL (may carry a password: never printed).
        url: String,
        /// Schema to use (created if missing); `None`: the server's default search path.
        schema: Option<String>,
    },
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreConfig::Sled { path, cache_bytes } => f
                .debug_struct("Sled")
                .field("path", path)
                .field("cache_bytes", cache_bytes)
                .finish(),
            StoreConfig::Postgres { schema, .. } => f
                .debug_struct("Postgres")
                .field("url", &"[redacted]")
                .field("schema", schema)
                .finish(),
        }
    }
}

impl StoreConfig {
    /// Validates `[store]`, pushing one readable line per problem into `errs`; `None` if it
    /// names no usable store.
    pub fn from_raw(raw: &RawStore, env: &dyn Env, errs: &mut Vec<String>) -> Option<StoreConfig> {
        let pg_url = match (&raw.url, &raw.url_env) {
            (Some(u), None) => Some(u.clone()),
            (None, Some(var)) => match env.var(var) {
                Some(u) => Some(u),
                None => {
                    errs.push(format!(
                        "store.url_env: environment variable {var} is not set"
                    ));
                    None
                }
            },
            (Some(_), Some(_)) => {
                errs.push("store: give url or url_env, not both".to_owned());
                None
            }
            (None, None) => None,
        };
        match (&raw.path, pg_url) {
            (Some(p), None) => {
                let mb = raw.cache_mb.unwrap_or(DEFAULT_SLED_CACHE_MB);
                if !(SLED_CACHE_MB_RANGE).contains(&mb) {
                    errs.push(format!(
                        "store.cache_mb: must be {}..={}",
                        SLED_CACHE_MB_RANGE.start(),
                        SLED_CACHE_MB_RANGE.end()
                    ));
                }
                Some(StoreConfig::Sled {
                    path: p.clone(),
                    // Saturating: an out-of-range value was reported above and never used.
                    cache_bytes: mb.saturating_mul(1024 * 1024),
                })
            }
            (None, Some(url)) => {
                if raw.cache_mb.is_some() {
                    errs.push("store.cache_mb: only for the sled store (store.path)".to_owned());
                }
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                    errs.push("store.url: must start with postgres:// or postgresql://".to_owned());
                }
                Some(StoreConfig::Postgres {
                    url,
                    schema: raw.schema.clone(),
                })
            }
            (Some(_), Some(_)) => {
                errs.push("store: give path (sled) or url (PostgreSQL), not both".to_owned());
                None
            }
            (None, None) => {
                errs.push(
                    "store.path (sled directory) or store.url (PostgreSQL) is required".to_owned(),
                );
                None
            }
        }
    }
}
