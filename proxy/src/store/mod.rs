//! Storage behind one interface. Every operation is atomic on one key; every write is durable
//! before it returns (sled flush; a PostgreSQL commit later), so a response that creates,
//! consumes or revokes security state is never sent ahead of the data. Single use is `take`
//! (remove-and-return), never read-then-delete. Expired records read as absent.
//!
//! The one exception is a request run inside [`batched`]: its writes skip their own flush and
//! `batched` makes them all durable with one [`Store::flush`] before it hands back the
//! response. A flush covers every write made before it began (sled's log is one sequence, and
//! so is PostgreSQL's WAL), so the response still goes out only after every write of the
//! request is on disk; what changes is that a request pays for one flush instead of one per
//! write.
//!
//! Callers outside this module use the typed repositories below, one per record family: they
//! name ids, tokens and records, never a [`Keyspace`] or a key string, so every key layout is
//! built and parsed here alone. A read-modify-write goes through [`update`] (compare-and-swap
//! with a bounded retry) or, for one attempt, a [`Held`] record. [`Keyspace`] and the raw
//! [`Store`] trait stay public for the store implementations and for tests that inspect what is
//! stored.

pub mod access_tokens;
pub mod allowances;
pub mod approvals;
pub mod audit_log;
pub mod backend_tokens;
pub mod cache;
pub mod call_records;
pub mod cimd_clients;
pub mod client_dedupe;
pub mod clients;
pub mod codes;
#[cfg(test)]
mod conformance;
pub mod consents;
#[cfg(test)]
pub(crate) mod failing;
pub mod families;
pub mod grants;
pub mod links;
pub mod mcp_sessions;
mod metered;
mod pg_peers;
mod postgres;
pub mod records;
pub mod sessions;
mod sled_store;
pub mod standing;
pub mod tool_approvals;
pub mod transactions;
pub mod unused_budget;
mod update;
pub mod upstream_states;
pub mod used_assertions;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

mod settings;
pub use settings::{RawStore, StoreConfig};

use crate::clock::UnixTime;
pub use cache::{CachedRecord, CachingStore, NoPeers, Peers, RecordCache};
pub use metered::{MeteredStore, OpObserver};
pub use postgres::PgStore;
pub use sled_store::SledStore;
pub use update::{Entry, Held, Step, update};

/// Default size of sled's page cache, MiB: sled's own default (1 GiB), now stated and
/// configurable. A smaller cache bounds memory but makes token checks on a store larger than
/// the cache several times slower (BENCHMARKS.md: 1M tokens, 128 MiB: 245 MB resident, checks
/// about 10× the 10k-token cost; 1 GiB: about 1.1 GB, 2.4×).
pub const DEFAULT_SLED_CACHE_MB: u64 = 1024;

/// The keyspaces (tables). Names are stable on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Keyspace {
    /// Registered MCP clients, by client id.
    Clients,
    /// Per-person consents, by `user|client|sha(redirect)`.
    Consents,
    /// Proxy browser sessions, by token hash.
    Sessions,
    /// Authorization transactions started at /authorize, by txn id.
    Transactions,
    /// States sent to GitHub, by hash.
    UpstreamStates,
    /// Authorization codes, by hash.
    Codes,
    /// Tombstones of redeemed codes (reuse detection), by hash.
    UsedCodes,
    /// Access tokens, by hash.
    AccessTokens,
    /// Refresh-token families, by family id.
    RefreshFamilies,
    /// Index `user|client|family` → (), to revoke a person's tokens for a client.
    UserFamilies,
    /// GitHub grants (sealed tokens), by user id.
    Grants,
    /// Audit events, by `time-random`.
    Audit,
    /// Redirect hosts that have completed a consent before, by host.
    SeenRedirectHosts,
    /// MCP sessions bound to a person and client, by hash of `Mcp-Session-Id`.
    McpSessions,
    /// Backend `requestState` values bound to a person and client, by hash.
    RequestStates,
    /// Which agents may use a person's GitHub account, by `user|client`.
    Allowances,
    /// Connect links, by hash of the code.
    ConnectLinks,
    /// The one open link per person, agent and service, by `user|client|service`.
    ConnectLinkIndex,
    /// Short-lived tokens given to exchange-mode backends, by hash.
    BackendTokens,
    /// Metadata-document clients seen, by `client_id` URL.
    CimdClients,
    /// Unused dynamic registrations with identical metadata from one client IP, by hash of
    /// both (bounds re-registration storms).
    ClientDedupe,
    /// Each person's standing as last checked with GitHub (admission), by user id.
    Standing,
    /// Admitted people's first approvals of a client, by client id.
    ClientApprovals,
    /// `jti`s of client assertions already used (RFC 7523 §3 item 7), by hash of
    /// `client|jti`, kept until the assertion's `exp` plus the allowed skew.
    UsedAssertions,
    /// Tool calls waiting for their person's approval, by hash of the link's code.
    ApprovalLinks,
    /// The one open approval link per person, agent and call, by `user|client|call`.
    ApprovalLinkIndex,
    /// Approvals given and not yet used (single use), by `user|client|call`.
    ToolApprovals,
    /// Each person's recent answers to approval links, by user id.
    ApprovalHistory,
    /// Budgets of never-used dynamic registrations (everyone, per source, per /48), and what
    /// each registration was charged, by `all`, `ip|prefix`, `net|prefix`, `charge|client`.
    UnusedBudgets,
}

impl Keyspace {
    /// All keyspaces, for sweeping.
    pub const ALL: [Keyspace; 29] = [
        Keyspace::Clients,
        Keyspace::Consents,
        Keyspace::Sessions,
        Keyspace::Transactions,
        Keyspace::UpstreamStates,
        Keyspace::Codes,
        Keyspace::UsedCodes,
        Keyspace::AccessTokens,
        Keyspace::RefreshFamilies,
        Keyspace::UserFamilies,
        Keyspace::Grants,
        Keyspace::Audit,
        Keyspace::SeenRedirectHosts,
        Keyspace::McpSessions,
        Keyspace::RequestStates,
        Keyspace::Allowances,
        Keyspace::ConnectLinks,
        Keyspace::ConnectLinkIndex,
        Keyspace::BackendTokens,
        Keyspace::CimdClients,
        Keyspace::ClientDedupe,
        Keyspace::Standing,
        Keyspace::ClientApprovals,
        Keyspace::UsedAssertions,
        Keyspace::ApprovalLinks,
        Keyspace::ApprovalLinkIndex,
        Keyspace::ToolApprovals,
        Keyspace::ApprovalHistory,
        Keyspace::UnusedBudgets,
    ];

    /// The keyspace with this on-disk name.
    pub fn from_name(name: &str) -> Option<Keyspace> {
        Keyspace::ALL.into_iter().find(|k| k.name() == name)
    }

    /// On-disk name.
    pub fn name(self) -> &'static str {
        match self {
            Keyspace::Clients => "clients",
            Keyspace::Consents => "consents",
            Keyspace::Sessions => "sessions",
            Keyspace::Transactions => "transactions",
            Keyspace::UpstreamStates => "upstream_states",
            Keyspace::Codes => "codes",
            Keyspace::UsedCodes => "used_codes",
            Keyspace::AccessTokens => "access_tokens",
            Keyspace::RefreshFamilies => "refresh_families",
            Keyspace::UserFamilies => "user_families",
            Keyspace::Grants => "grants",
            Keyspace::Audit => "audit",
            Keyspace::SeenRedirectHosts => "seen_redirect_hosts",
            Keyspace::McpSessions => "mcp_sessions",
            Keyspace::RequestStates => "request_states",
            Keyspace::Allowances => "allowances",
            Keyspace::ConnectLinks => "connect_links",
            Keyspace::ConnectLinkIndex => "connect_link_index",
            Keyspace::BackendTokens => "backend_tokens",
            Keyspace::CimdClients => "cimd_clients",
            Keyspace::ClientDedupe => "client_dedupe",
            Keyspace::Standing => "standing",
            Keyspace::ClientApprovals => "client_approvals",
            Keyspace::UsedAssertions => "used_assertions",
            Keyspace::ApprovalLinks => "approval_links",
            Keyspace::ApprovalLinkIndex => "approval_link_index",
            Keyspace::ToolApprovals => "tool_approvals",
            Keyspace::ApprovalHistory => "approval_history",
            Keyspace::UnusedBudgets => "unused_budgets",
        }
    }
}

/// Storage failures. Always our side (500), never the caller's.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed.
    #[error("store backend: {0}")]
    Backend(String),
    /// A stored value did not decode.
    #[error("corrupt record in {0}")]
    Corrupt(&'static str),
}

/// A stored value and its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The payload.
    pub value: Vec<u8>,
    /// When it stops existing.
    pub expires_at: Option<UnixTime>,
}

/// The storage interface. Implementations: [`SledStore`] (embedded default).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Reads a live record.
    async fn get(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError>;
    /// Reads several live records, of any keyspaces, each as [`Store::get`] would: the
    /// answers in the order asked. For reads that do not depend on each other: one statement
    /// on PostgreSQL (one round trip instead of one per record). The default reads them one
    /// by one.
    async fn get_many(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<Versioned>>, StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for (ks, key) in keys {
            out.push(self.get(*ks, key).await?);
        }
        Ok(out)
    }
    /// [`Store::get_many`] for the `/mcp` checks only, which a [`CachingStore`] may answer
    /// from its replica's cache (exact: see `store::cache`). Everything else reads the store.
    async fn get_many_cached(
        &self,
        keys: &[(Keyspace, &str)],
    ) -> Result<Vec<Option<CachedRecord>>, StoreError> {
        Ok(cache::read_uncached(self.get_many(keys).await?))
    }
    /// Writes a record unless a live one exists; true if written.
    async fn insert_new(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError>;
    /// Writes a record, replacing any.
    async fn put(
        &self,
        ks: Keyspace,
        key: &str,
        value: Vec<u8>,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError>;
    /// Atomically removes a record and returns it if it was live (single use).
    async fn take(&self, ks: Keyspace, key: &str) -> Result<Option<Versioned>, StoreError>;
    /// Replaces `expected` with `new` (or deletes with `None`) only if the record still holds
    /// exactly `expected`; true if swapped.
    async fn compare_and_swap(
        &self,
        ks: Keyspace,
        key: &str,
        expected: &Versioned,
        new: Option<Versioned>,
    ) -> Result<bool, StoreError>;
    /// Removes a record (no error if absent).
    async fn remove(&self, ks: Keyspace, key: &str) -> Result<(), StoreError>;
    /// Live records whose key starts with `prefix`, in key order.
    async fn scan_prefix(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError>;
    /// At most `limit` live records whose key starts with `prefix` and sorts after `after`
    /// (from the first with `None`), in key order: pages through a keyspace in bounded
    /// memory. The default reads the whole prefix and cuts it; the stores override it.
    async fn scan_page(
        &self,
        ks: Keyspace,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        let mut rows = self.scan_prefix(ks, prefix).await?;
        rows.retain(|(k, _)| after.is_none_or(|a| k.as_str() > a));
        rows.truncate(limit);
        Ok(rows)
    }
    /// Writes these records (key, value, expiry), replacing any, all durable when it returns:
    /// one atomic batch under one flush on sled, one statement on PostgreSQL. A key given
    /// twice keeps its last value. The default writes them one by one.
    async fn put_many(&self, ks: Keyspace, rows: Vec<Row>) -> Result<(), StoreError> {
        for (key, value, expires_at) in rows {
            self.put(ks, &key, value, expires_at).await?;
        }
        Ok(())
    }
    /// Deletes expired records; returns how many.
    async fn sweep_expired(&self) -> Result<u64, StoreError>;
    /// Makes all writes so far durable.
    async fn flush(&self) -> Result<(), StoreError>;
    /// Writes `rows` (keyspace, key, value, expiry; replacing any) and makes them and all
    /// writes so far durable: a [`batched`] request's final flush carrying the rows handed to
    /// it ([`write_at_flush`]). On PostgreSQL one statement whose commit waits for the WAL
    /// flush, instead of a statement per row and then the flush. The default writes each
    /// keyspace's rows with [`Store::put_many`], then flushes: two waits where a store that
    /// can (sled, PostgreSQL) overrides it with one.
    async fn flush_with(&self, rows: Vec<(Keyspace, Row)>) -> Result<(), StoreError> {
        flush_with_by_parts(self, rows).await
    }
    /// Flushes to disk made so far (sled: fsyncs of its log), for a backend that flushes
    /// itself; `None` where every statement commits on its own (PostgreSQL).
    fn disk_flushes(&self) -> Option<u64> {
        None
    }
    /// How a [`RecordCache`] over this store learns of writes other processes make (a
    /// wrapper passes its inner store's). Required, so that no wrapper can silently cut a
    /// cache off from its invalidations.
    fn peers(&self, cache: Arc<RecordCache>) -> Arc<dyn Peers>;
}

/// Shared store handle.
pub type SharedStore = Arc<dyn Store>;

/// [`Store::flush_with`] made of [`Store::put_many`] per keyspace (in the order the
/// keyspaces first appear) and [`Store::flush`].
pub async fn flush_with_by_parts<S: Store + ?Sized>(
    store: &S,
    rows: Vec<(Keyspace, Row)>,
) -> Result<(), StoreError> {
    let mut parts: Vec<(Keyspace, Vec<Row>)> = Vec::new();
    for (ks, row) in rows {
        match parts.iter_mut().find(|(k, _)| *k == ks) {
            Some((_, part)) => part.push(row),
            None => parts.push((ks, vec![row])),
        }
    }
    for (ks, part) in parts {
        store.put_many(ks, part).await?;
    }
    store.flush().await
}

/// One record of [`Store::put_many`]: key, value, expiry.
pub type Row = (String, Vec<u8>, Option<UnixTime>);

/// Work to run once a batched request's writes are durable (e.g. a webhook delivery, which
/// must never announce an event that a crash could still lose).
type AfterDurable = Box<dyn FnOnce() + Send>;

/// The writes of one request, made durable together by [`batched`].
struct Batch {
    after: std::sync::Mutex<Vec<AfterDurable>>,
    /// Set once the request's final flush has run; writes after that flush by themselves.
    closed: AtomicBool,
    /// Whether the request wrote anything (a store asked [`write_is_batched`] for a write).
    wrote: AtomicBool,
    /// Rows handed to the final flush ([`write_at_flush`]); `None` where the batch takes none.
    rows: Option<std::sync::Mutex<Vec<(Keyspace, Row)>>>,
    /// Where rows of a request cut off before its final flush are written (see `Drop`).
    store: SharedStore,
}

impl Batch {
    fn new(store: &SharedStore, takes_rows: bool) -> Batch {
        Batch {
            after: std::sync::Mutex::default(),
            closed: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            rows: takes_rows.then(std::sync::Mutex::default),
            store: store.clone(),
        }
    }

    /// The queued rows, taken.
    fn take_rows(&self) -> Vec<(Keyspace, Row)> {
        self.rows
            .as_ref()
            .map(|r| {
                std::mem::take(&mut *r.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
            })
            .unwrap_or_default()
    }
}

impl Drop for Batch {
    /// A request dropped before its final flush (the client went away) may have written state
    /// that a later flush makes durable: its queued rows (its audit events) are written too,
    /// as they were before they rode the final flush, and once they and everything before
    /// them are durable, its webhook offers go out, on a task of their own.
    fn drop(&mut self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let rows = self.take_rows();
        let after = std::mem::take(
            &mut *self
                .after
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if rows.is_empty() && after.is_empty() {
            return;
        }
        let store = self.store.clone();
        let n = rows.len();
        let running = CutOffWrite::start();
        let finish = async move {
            let _running = running;
            let durable = if rows.is_empty() {
                store.flush().await.is_ok()
            } else {
                write_rows_anyway(store, rows, "request cut off").await
            };
            if durable {
                for f in after {
                    f();
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(finish);
            }
            Err(_) => tracing::error!(
                rows = n,
                "request cut off outside a runtime: its queued audit rows are not written"
            ),
        }
    }
}

/// Background writes of cut-off requests (see `Batch`'s `Drop`) still running.
static CUT_OFF_WRITES: AtomicUsize = AtomicUsize::new(0);
/// Told whenever one of them ends.
static CUT_OFF_ENDED: std::sync::LazyLock<tokio::sync::Notify> =
    std::sync::LazyLock::new(tokio::sync::Notify::new);

/// One running background write of a cut-off request; counted until dropped.
struct CutOffWrite;

impl CutOffWrite {
    fn start() -> CutOffWrite {
        CUT_OFF_WRITES.fetch_add(1, Ordering::AcqRel);
        CutOffWrite
    }
}

impl Drop for CutOffWrite {
    fn drop(&mut self) {
        CUT_OFF_WRITES.fetch_sub(1, Ordering::AcqRel);
        CUT_OFF_ENDED.notify_waiters();
    }
}

/// Returns once no request cut off before its final flush is still writing its queued rows:
/// shutdown waits for it (bounded) before its final flush, so a request the shutdown cut off
/// keeps its events as its other writes.
pub async fn cut_off_writes_done() {
    loop {
        let ended = CUT_OFF_ENDED.notified();
        if CUT_OFF_WRITES.load(Ordering::Acquire) == 0 {
            return;
        }
        ended.await;
    }
}

/// Writes rows whose final flush did not happen or failed, by themselves, so that a request's
/// events are kept whenever its other writes may be. True once they and every earlier write
/// are durable.
async fn write_rows_anyway(
    store: SharedStore,
    rows: Vec<(Keyspace, Row)>,
    why: &'static str,
) -> bool {
    let n = rows.len();
    match flush_with_by_parts(store.as_ref(), rows).await {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, rows = n, why, "queued audit rows not written");
            false
        }
    }
}

tokio::task_local! {
    static BATCH: Batch;
}

/// Whether a write made now may skip its own flush because the surrounding [`batched`] call
/// flushes before the response leaves (store implementations; also counted by the bench).
/// Asked once per write the store made: a `true` answer also notes that the request wrote,
/// so its final flush is owed.
pub fn write_is_batched() -> bool {
    BATCH
        .try_with(|b| {
            let open = !b.closed.load(Ordering::Acquire);
            if open {
                b.wrote.store(true, Ordering::Release);
            }
            open
        })
        .unwrap_or(false)
}

/// Whether a write made now falls inside an open [`batched`] request, without noting a write:
/// for a store that must choose how to make the write before it knows whether the write will
/// change anything (PostgreSQL picks a connection that commits without waiting for the WAL
/// flush). A store that then changed something still asks [`write_is_batched`], which notes
/// that the request's final flush is owed.
pub fn batch_open() -> bool {
    BATCH
        .try_with(|b| !b.closed.load(Ordering::Acquire))
        .unwrap_or(false)
}

/// Hands a row to the current [`batched`] request's final flush, which writes it together
/// with making the request durable ([`Store::flush_with`]): for records nothing in the same
/// request reads back and that need not exist before the request ends, such as its audit
/// events. Outside an open batch the row is given back (`Err`): the caller writes it itself.
///
/// A request cut off before its final flush, or whose final flush failed, still writes its
/// rows by themselves (see `Batch`'s `Drop`), because its other writes may become durable
/// with a later flush. A crash, a shutdown that ends before that write, or a store refusing
/// it too can leave its other writes durable without its rows, for a response never sent.
pub fn write_at_flush(ks: Keyspace, row: Row) -> Result<(), Row> {
    let mut row = Some(row);
    let _ = BATCH.try_with(|b| {
        if b.closed.load(Ordering::Acquire) {
            return;
        }
        let Some(rows) = &b.rows else {
            return;
        };
        if let Some(row) = row.take() {
            // A poisoned lock still holds a usable list.
            rows.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((ks, row));
        }
    });
    match row {
        None => Ok(()),
        Some(row) => Err(row),
    }
}

/// Runs `f` once everything written so far by the current batched request is durable: at
/// the end of [`batched`], or right away outside one (every write there is durable already
/// when it returns).
pub fn after_durable(f: impl FnOnce() + Send + 'static) {
    let mut f = Some(f);
    let _ = BATCH.try_with(|b| {
        if b.closed.load(Ordering::Acquire) {
            return;
        }
        if let Some(f) = f.take() {
            // A poisoned lock still holds a usable list; running `f` now would be before
            // the write is durable.
            b.after
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(Box::new(f));
        }
    });
    if let Some(f) = f {
        f();
    }
}

/// Runs one request's work with its writes grouped under a single flush: writes inside `f`
/// skip their own flush, then `store.flush()` makes all of them (and anything else written
/// before it began) durable, writing with it the rows handed to [`write_at_flush`]
/// ([`Store::flush_with`]), and only then is `f`'s output returned. On a failed flush the
/// output is dropped and the error returned: the caller must answer with a failure, never
/// with `f`'s response. Work spawned onto other tasks is outside the batch and keeps one
/// flush per write. A store with nothing unflushed answers the flush at once. The flush and
/// the queued [`after_durable`] work run on a task of their own, so dropping this future (the
/// client hung up) does not stop them.
///
/// A request that wrote nothing does not wait for a flush at all: it created, consumed or
/// revoked nothing, so it has nothing to make durable, and a refusal (an unknown state, a
/// missing token) answers without queueing behind other requests' flushes. What it may have
/// read of another request's unflushed writes is still withheld from that other request's
/// own caller until its flush.
pub async fn batched<F: Future>(store: &SharedStore, f: F) -> Result<F::Output, StoreError> {
    batch(store, true, f).await
}

/// [`batched`] for work that is not a request (the refusal counts' writer): rows are not
/// queued ([`write_at_flush`] gives them back), so each is written, and can fail, where it is
/// made.
pub async fn batched_without_rows<F: Future>(
    store: &SharedStore,
    f: F,
) -> Result<F::Output, StoreError> {
    batch(store, false, f).await
}

async fn batch<F: Future>(
    store: &SharedStore,
    takes_rows: bool,
    f: F,
) -> Result<F::Output, StoreError> {
    BATCH
        .scope(Batch::new(store, takes_rows), async {
            let out = f.await;
            let (wrote, after, rows) = BATCH
                .try_with(|b| {
                    b.closed.store(true, Ordering::Release);
                    let after = std::mem::take(
                        &mut *b
                            .after
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner),
                    );
                    (b.wrote.load(Ordering::Acquire), after, b.take_rows())
                })
                .unwrap_or_default();
            if !wrote && after.is_empty() && rows.is_empty() {
                return Ok(out);
            }
            // The flush and what waits on it run on their own task: a client that goes away
            // cancels this request here, but the work it already wrote still becomes durable
            // and its webhook offers (alerts included) still go out.
            let store = store.clone();
            let finish = async move {
                if rows.is_empty() {
                    store.flush().await?;
                } else if let Err(e) = store.flush_with(rows.clone()).await {
                    // The request answers 500, but what it wrote may become durable with a
                    // later flush: its events are written as well, by themselves. Its webhook
                    // offers stay unsent, as for any request answered 500.
                    write_rows_anyway(store, rows, "final flush failed").await;
                    return Err(e);
                }
                for f in after {
                    f();
                }
                Ok::<(), StoreError>(())
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => rt
                    .spawn(finish)
                    .await
                    .map_err(|e| StoreError::Backend(format!("batch flush task: {e}")))??,
                Err(_) => finish.await?,
            }
            Ok(out)
        })
        .await
}

/// Encodes a record.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Backend(format!("encode: {e}")))
}

/// Decodes a record.
pub fn decode<T: DeserializeOwned>(ks: Keyspace, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|_| StoreError::Corrupt(ks.name()))
}

/// Typed helpers over any [`Store`].
#[async_trait]
pub trait StoreExt {
    /// Reads and decodes.
    async fn get_json<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        key: &str,
    ) -> Result<Option<T>, StoreError>;
    /// Reads, keeping the raw version for a later compare-and-swap.
    async fn get_versioned<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        key: &str,
    ) -> Result<Option<(T, Versioned)>, StoreError>;
    /// Encodes and writes.
    async fn put_json<T: Serialize + Sync>(
        &self,
        ks: Keyspace,
        key: &str,
        v: &T,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError>;
    /// Encodes and writes unless present.
    async fn insert_json<T: Serialize + Sync>(
        &self,
        ks: Keyspace,
        key: &str,
        v: &T,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError>;
    /// Atomically takes and decodes.
    async fn take_json<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        key: &str,
    ) -> Result<Option<T>, StoreError>;
    /// Decoded prefix scan.
    async fn scan_json<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, T)>, StoreError>;
}

#[async_trait]
impl<S: Store + ?Sized> StoreExt for S {
    async fn get_json<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        match self.get(ks, key).await? {
            Some(v) => Ok(Some(decode(ks, &v.value)?)),
            None => Ok(None),
        }
    }
    async fn get_versioned<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        key: &str,
    ) -> Result<Option<(T, Versioned)>, StoreError> {
        match self.get(ks, key).await? {
            Some(v) => Ok(Some((decode(ks, &v.value)?, v))),
            None => Ok(None),
        }
    }
    async fn put_json<T: Serialize + Sync>(
        &self,
        ks: Keyspace,
        key: &str,
        v: &T,
        expires_at: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        self.put(ks, key, encode(v)?, expires_at).await
    }
    async fn insert_json<T: Serialize + Sync>(
        &self,
        ks: Keyspace,
        key: &str,
        v: &T,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        self.insert_new(ks, key, encode(v)?, expires_at).await
    }
    async fn take_json<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        match self.take(ks, key).await? {
            Some(v) => Ok(Some(decode(ks, &v.value)?)),
            None => Ok(None),
        }
    }
    async fn scan_json<T: DeserializeOwned + Send>(
        &self,
        ks: Keyspace,
        prefix: &str,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let rows = self.scan_prefix(ks, prefix).await?;
        rows.into_iter()
            .map(|(k, v)| Ok((k, decode(ks, &v.value)?)))
            .collect()
    }
}
