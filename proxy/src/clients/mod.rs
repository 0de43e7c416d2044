//! The client directory: one place that turns a `client_id` into a client, for all three
//! kinds. Configured (`[[clients]]`), Client ID Metadata Document (an `https` URL, fetched
//! through [`fetch`] and validated by [`cimd`]), and dynamically registered (the store). The
//! kinds cannot shadow each other: generated ids start with `mcpc_`, configured ids may not,
//! and neither may look like a URL.
//!
//! Metadata-document clients leave a [`CimdClientRecord`] behind: it dates the last change of
//! what a consent covers (the "registered moments ago" warning), lets the last valid document
//! be served for a bounded time when a fetch fails for reasons that are not the client's
//! (stale-if-error), carries an operator's block, and expires unless the client got a code.

pub mod budget;
pub mod cimd;
pub mod fetch;
pub mod jwks;
pub mod registration;
mod settings;
pub use settings::{
    CimdPolicy, PreregisteredClient, RawCimd, RawClient, RawRegistration, RegistrationMode,
    RegistrationPolicy, validate_cimd, validate_clients, validate_registration,
};

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::bindings::redirect;
use crate::clock::{SharedClock, UnixTime};
use crate::crypto;
use crate::ids::ClientId;
use crate::oauth::registration::ApplicationType;
use crate::oauth::scope::ScopeSet;
use crate::store::records::{CimdClientRecord, ClientRecord};
use crate::store::{self, Entry, SharedStore, Step, StoreError, cimd_clients};

use cimd::CimdError;
use fetch::{Familiarity, FetchError, FetchPolicy, Fetcher, Resolver};
use jsonwebtoken::jwk::JwkSet;
use jwks::KeySource;

/// Most metadata documents held in memory.
const MAX_CACHED: usize = 1024;
/// How long the last valid document is served when a fresh one cannot be had for reasons
/// that are not the client's (budget spent, host unreachable, server error).
pub const STALE_IF_ERROR_SECS: u64 = 86_400;
/// Compare-and-swap attempts on one metadata-document record.
const RECORD_ATTEMPTS: usize = 8;
/// Shortest time between two fetches of one `jwks_uri` that an unknown `kid` asks for: an
/// attacker's made-up `kid`s cannot make us hammer the client's key server.
pub const JWKS_REFETCH_MIN_SECS: u64 = 60;
/// Most key sets held in memory.
const MAX_CACHED_KEY_SETS: usize = 1024;

/// Every attempt at a metadata-document record lost a race.
fn contended() -> ClientsError {
    StoreError::Backend("metadata-document record contended".to_owned()).into()
}

/// Where a client's identity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientKind {
    /// Registered through `/register` (untrusted self-description).
    Registered,
    /// Configured by the operators (`[[clients]]`): shown as verified.
    Preregistered,
    /// A metadata document; `host` is the `client_id` URL's host, shown on the consent page.
    MetadataDocument {
        /// The `client_id` host.
        host: String,
    },
}

/// A client as the flows use it, resolved by the [`Directory`]: a configured entry, a metadata
/// document that was fetched and validated (or its last valid copy) and is not blocked, or a
/// stored registration. Only this module makes one. No `Clone`: the directory's cache keeps
/// its own copy (`copy_for_cache`).
///
/// ```compile_fail
/// use mcp_oauth_proxy::clients::{ClientKind, ResolvedClient};
/// use mcp_oauth_proxy::store::records::ClientRecord;
/// // Private fields: a client cannot be declared resolved (say, "verified") outside the
/// // directory.
/// fn forge(record: ClientRecord) -> ResolvedClient {
///     ResolvedClient {
///         fingerprint: String::new(),
///         record,
///         kind: ClientKind::Preregistered,
///         remember_consent: true,
///         keys: None,
///     }
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::clients::{ClientKind, ResolvedClient};
/// use mcp_oauth_proxy::store::records::ClientRecord;
/// fn read(c: &ResolvedClient) -> (&ClientRecord, &ClientKind, &str, bool, bool) {
///     (c.record(), c.kind(), c.fingerprint(), c.remember_consent(), c.verified())
/// }
/// ```
#[derive(Debug)]
pub struct ResolvedClient {
    record: ClientRecord,
    kind: ClientKind,
    /// What a consent covers (redirect URIs, name, auth method); see [`fingerprint`].
    fingerprint: String,
    /// Whether an approval may be remembered.
    remember_consent: bool,
    /// Its keys, for `private_key_jwt` clients.
    keys: Option<KeySource>,
}

impl ResolvedClient {
    /// The client record.
    pub fn record(&self) -> &ClientRecord {
        &self.record
    }
    /// Its kind.
    pub fn kind(&self) -> &ClientKind {
        &self.kind
    }
    /// What a consent covers (redirect URIs, name, auth method); see [`fingerprint`].
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    /// Whether an approval may be remembered (`remember_consent = false` on a configured
    /// client always shows the page).
    pub fn remember_consent(&self) -> bool {
        self.remember_consent
    }
    /// Whether the operators vouch for the name.
    pub fn verified(&self) -> bool {
        self.kind == ClientKind::Preregistered
    }
    /// Where its `private_key_jwt` keys are (none for other methods).
    pub fn keys(&self) -> Option<&KeySource> {
        self.keys.as_ref()
    }
    /// The client record, for callers that need only it.
    pub fn into_record(self) -> ClientRecord {
        self.record
    }
    /// The copy the directory's cache hands out until the document's lifetime ends.
    fn copy_for_cache(&self) -> ResolvedClient {
        ResolvedClient {
            record: self.record.clone(),
            kind: self.kind.clone(),
            fingerprint: self.fingerprint.clone(),
            remember_consent: self.remember_consent,
            keys: self.keys.clone(),
        }
    }
}

/// Why a client could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ClientsError {
    /// Storage failed (our side).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The URL or the document was refused.
    #[error("client metadata document: {0}")]
    Document(#[from] CimdError),
    /// Fetching the document failed.
    #[error("client metadata fetch: {0}")]
    Fetch(#[from] FetchError),
}

impl ClientsError {
    /// Whether the document could not be had for reasons that are not the client's (fetch
    /// budget spent, host unreachable, server error): worth retrying, never `invalid_client`.
    pub fn is_temporary(&self) -> bool {
        matches!(self, ClientsError::Fetch(e) if e.is_temporary())
    }

    /// A readable reason (not for `Store`, which is our fault and stays generic).
    pub fn description(&self) -> &'static str {
        match self {
            ClientsError::Store(_) => "the server could not look up the client",
            ClientsError::Document(e) => e.description(),
            ClientsError::Fetch(e) => e.description(),
        }
    }
}

/// The fingerprint of what a person approves about a client: its redirect URIs, its name and
/// its authentication method. A consent is remembered with it and covers only the same.
pub fn fingerprint(rec: &ClientRecord) -> String {
    let v = serde_json::json!([rec.redirect_uris, rec.client_name, rec.auth_method.as_str()]);
    crypto::hash_secret(&v.to_string())
}

struct Cached {
    client: ResolvedClient,
    until: UnixTime,
}

struct CachedKeys {
    keys: Arc<JwkSet>,
    /// Served until then (the response's cache lifetime, bounded like documents').
    until: UnixTime,
    /// Last fetch, for [`JWKS_REFETCH_MIN_SECS`].
    fetched_at: UnixTime,
}

/// Which keys [`Directory::keys`] should give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFreshness {
    /// Whatever is cached within its lifetime (fetched if nothing is).
    Cached,
    /// Newer ones than those just used: the assertion named a `kid` they lack. Fetched at
    /// most once per [`JWKS_REFETCH_MIN_SECS`] per `jwks_uri`.
    AfterUnknownKid,
}

/// Resolves client ids; held in `App`.
pub struct Directory {
    preregistered: HashMap<String, PreregisteredClient>,
    policy: CimdPolicy,
    fetcher: Fetcher,
    cache: Mutex<HashMap<String, Cached>>,
    key_cache: Mutex<HashMap<String, CachedKeys>>,
    store: SharedStore,
    clock: SharedClock,
    offered: ScopeSet,
    unused_ttl_secs: u64,
}

impl Directory {
    /// Builds the directory from `[[clients]]`, `[cimd]` and `[registration]`
    /// `unused_client_ttl_secs`; documents are resolved through `resolver`.
    pub fn new(
        preregistered: &[PreregisteredClient],
        policy: CimdPolicy,
        unused_ttl_secs: u64,
        store: SharedStore,
        clock: SharedClock,
        offered: ScopeSet,
        resolver: Arc<dyn Resolver>,
    ) -> Directory {
        if policy.enabled && policy.dangerously_allow_loopback_for_development {
            tracing::warn!(
                "cimd.dangerously_allow_loopback_for_development is on: client metadata documents may be fetched from loopback over plain http. Never use this in production."
            );
        }
        Directory {
            preregistered: preregistered
                .iter()
                .map(|c| (c.client_id.as_str().to_owned(), c.clone()))
                .collect(),
            fetcher: Fetcher::new(
                resolver,
                FetchPolicy {
                    timeout: Duration::from_secs(policy.fetch_timeout_secs),
                    per_minute: policy.fetches_per_minute,
                    per_ip_per_minute: policy.fetches_per_minute_per_ip,
                    known_per_minute: policy.known_fetches_per_minute,
                    allow_loopback: policy.dangerously_allow_loopback_for_development,
                },
            ),
            policy,
            cache: Mutex::new(HashMap::new()),
            key_cache: Mutex::new(HashMap::new()),
            store,
            clock,
            offered,
            unused_ttl_secs,
        }
    }

    /// Whether the operators configured this client (its name is vouched for). No I/O.
    pub fn is_configured(&self, id: &ClientId) -> bool {
        self.preregistered.contains_key(id.as_str())
    }

    /// Whether metadata documents are accepted (advertised in AS metadata).
    pub fn cimd_enabled(&self) -> bool {
        self.policy.enabled
    }

    /// The configured clients, for the admin API.
    pub fn configured(&self) -> Vec<ClientRecord> {
        let mut all: Vec<ClientRecord> = self
            .preregistered
            .values()
            .map(|c| preregistered(c).into_record())
            .collect();
        all.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        all
    }

    /// Resolves a client for authorization: configured, fetched document (cached within its
    /// lifetime), or registered. `from` is the client IP of the request (its fetch budget).
    /// `Ok(None)`: no such client.
    pub async fn resolve(
        &self,
        id: &ClientId,
        from: Option<IpAddr>,
    ) -> Result<Option<ResolvedClient>, ClientsError> {
        if let Some(c) = self.preregistered.get(id.as_str()) {
            return Ok(Some(preregistered(c)));
        }
        if cimd::is_url_client_id(id.as_str()) {
            return self.document(id, from).await.map(Some);
        }
        let rec = store::clients::get(self.store.as_ref(), id).await?;
        Ok(rec.map(|record| ResolvedClient {
            fingerprint: fingerprint(&record),
            record,
            kind: ClientKind::Registered,
            remember_consent: true,
            keys: None,
        }))
    }

    /// The client record as [`Directory::resolve`] finds it.
    pub async fn get(
        &self,
        id: &ClientId,
        from: Option<IpAddr>,
    ) -> Result<Option<ClientRecord>, ClientsError> {
        Ok(self
            .resolve(id, from)
            .await?
            .map(ResolvedClient::into_record))
    }

    /// The client as last known, without fetching anything: for display (names on pages and
    /// messages), never for authorization. A metadata-document client's `registered_at` is
    /// the last change of what a consent covers.
    pub async fn known(&self, id: &ClientId) -> Result<Option<ClientRecord>, StoreError> {
        if let Some(c) = self.preregistered.get(id.as_str()) {
            return Ok(Some(preregistered(c).record));
        }
        if cimd::is_url_client_id(id.as_str()) {
            let seen = cimd_clients::get(self.store.as_ref(), id).await?;
            return Ok(seen.map(|s| s.client));
        }
        store::clients::get(self.store.as_ref(), id).await
    }

    /// A metadata-document client got its first code: its record is kept for good (until
    /// then it expires like an unused registration). Other kinds are left alone.
    pub async fn mark_used(&self, id: &ClientId) -> Result<(), StoreError> {
        if !cimd::is_url_client_id(id.as_str()) {
            return Ok(());
        }
        let done = cimd_clients::update(
            self.store.as_ref(),
            id,
            RECORD_ATTEMPTS,
            |current| async move {
                Ok::<_, StoreError>(match current {
                    Some(c) if c.expires_at.is_some() => Step::SetExpiry(None, ()),
                    _ => Step::Keep(()),
                })
            },
        )
        .await?;
        if done.is_none() {
            // Not fatal: the record may expire and the client then looks new again.
            tracing::warn!(client_id = %id, "metadata-document record contended; not marked used");
        }
        Ok(())
    }

    /// Blocks a metadata-document client for good (an operator deleted it): it is never
    /// fetched or served again, on any replica. `Ok(false)`: it was blocked already. A client
    /// never seen is blocked ahead of time if its id is a URL that could be fetched.
    pub async fn block(&self, id: &ClientId) -> Result<bool, ClientsError> {
        self.forget(id.as_str());
        let now = self.clock.now();
        cimd_clients::update(
            self.store.as_ref(),
            id,
            RECORD_ATTEMPTS,
            move |current| async move {
                Ok::<_, ClientsError>(match current {
                    Some(c) if c.value.blocked_at.is_some() => Step::Keep(false),
                    // Blocked for good: no longer expires.
                    Some(Entry { mut value, .. }) => {
                        value.blocked_at = Some(now);
                        Step::PutUntil(value, None, true)
                    }
                    None => {
                        // Never seen (or its record expired): block it ahead of any fetch.
                        cimd::parse_url(
                            id.as_str(),
                            self.policy.dangerously_allow_loopback_for_development,
                        )?;
                        let rec = CimdClientRecord {
                            first_seen: now,
                            client: placeholder(id, now),
                            changed_at: Some(now),
                            validated_at: None,
                            blocked_at: Some(now),
                        };
                        Step::PutUntil(rec, None, true)
                    }
                })
            },
        )
        .await?
        .ok_or_else(contended)
    }

    /// Lifts an operator's block (the delete was a mistake): the blocked record is removed,
    /// so the client is as never seen, on every replica: its document is fetched again and
    /// people are shown the new-client warning. `Ok(false)`: it was not blocked.
    pub async fn unblock(&self, id: &ClientId) -> Result<bool, ClientsError> {
        self.forget(id.as_str());
        // Compare-and-swap: a record changed meanwhile is looked at again.
        cimd_clients::update(
            self.store.as_ref(),
            id,
            RECORD_ATTEMPTS,
            |current| async move {
                Ok::<_, ClientsError>(match current {
                    Some(c) if c.value.blocked_at.is_some() => Step::Delete(true),
                    _ => Step::Keep(false),
                })
            },
        )
        .await?
        .ok_or_else(contended)
    }

    async fn document(
        &self,
        id: &ClientId,
        from: Option<IpAddr>,
    ) -> Result<ResolvedClient, ClientsError> {
        if !self.policy.enabled {
            return Err(CimdError::Disabled.into());
        }
        let url = cimd::parse_url(
            id.as_str(),
            self.policy.dangerously_allow_loopback_for_development,
        )?;
        let now = self.clock.now();
        // The stored record before any cached copy: an operator's block, made on any
        // replica, wins at once.
        let stored = cimd_clients::get(self.store.as_ref(), id).await?;
        if stored.as_ref().is_some_and(|r| r.blocked_at.is_some()) {
            self.forget(id.as_str());
            return Err(CimdError::Blocked.into());
        }
        if let Some(c) = self.cached(id.as_str(), now) {
            return Ok(c);
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        // Errors and invalid documents return here, before anything is cached or stored.
        // A URL that produced a valid document before may use the fetch reserve.
        let familiarity = if stored.as_ref().is_some_and(|r| r.validated_at.is_some()) {
            Familiarity::Known
        } else {
            Familiarity::New
        };
        let fetched = match self.fetcher.fetch(&url, now, from, familiarity).await {
            Ok(f) => f,
            Err(e) if e.is_temporary() => {
                // Not for a private_key_jwt client: its keys are not stored, and without them
                // the copy could not authenticate anyway.
                if let Some(seen) = &stored
                    && let Some(validated) = seen.validated_at
                    && now.since(validated) <= STALE_IF_ERROR_SECS
                    && seen.client.auth_method
                        != crate::oauth::registration::TokenAuthMethod::PrivateKeyJwt
                {
                    tracing::warn!(client_id = %id, error = %e, "client metadata document not fetched; serving the last valid one");
                    return Ok(ResolvedClient {
                        fingerprint: fingerprint(&seen.client),
                        record: seen.client.clone(),
                        kind: ClientKind::MetadataDocument { host },
                        remember_consent: true,
                        keys: None,
                    });
                }
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        let doc = cimd::validate(
            id.as_str(),
            fetched.body(),
            &self.offered,
            self.policy.dangerously_allow_loopback_for_development,
        )?;
        let keys = doc.keys;
        let m = doc.metadata;
        let record = ClientRecord {
            client_id: id.clone(),
            client_name: m.client_name,
            redirect_uris: m.redirect_uris,
            auth_method: m.auth_method,
            secret_hash: None,
            grant_types: m.grant_types,
            scope: m.scope,
            application_type: m.application_type,
            registered_at: now,
        };
        let record = self.store_valid(id, record, now).await?;
        let client = ResolvedClient {
            fingerprint: fingerprint(&record),
            record,
            kind: ClientKind::MetadataDocument { host },
            remember_consent: true,
            keys,
        };
        if let Some(secs) = cimd::cache_secs(
            fetched.cache_control(),
            self.policy.cache_min_secs,
            self.policy.cache_max_secs,
        ) {
            self.remember(id.as_str(), &client, now.plus(secs));
        }
        Ok(client)
    }

    /// Records a freshly validated document; returns it with `registered_at` set to the last
    /// change of its fingerprint (now, for a new client or a changed document, so an old
    /// harmless document cannot lend its age to new redirect URIs).
    async fn store_valid(
        &self,
        id: &ClientId,
        record: ClientRecord,
        now: UnixTime,
    ) -> Result<ClientRecord, ClientsError> {
        let fp = &fingerprint(&record);
        let record = &record;
        cimd_clients::update(
            self.store.as_ref(),
            id,
            RECORD_ATTEMPTS,
            move |current| async move {
                Ok::<_, ClientsError>(match current {
                    None => {
                        let fresh = CimdClientRecord {
                            first_seen: now,
                            client: record.clone(),
                            changed_at: Some(now),
                            validated_at: Some(now),
                            blocked_at: None,
                        };
                        // Until its first code it expires like an unused registration.
                        let expires = Some(now.plus(self.unused_ttl_secs));
                        Step::PutUntil(fresh, expires, record.clone())
                    }
                    Some(c) if c.value.blocked_at.is_some() => {
                        self.forget(id.as_str());
                        return Err(CimdError::Blocked.into());
                    }
                    Some(Entry { value: seen, .. }) => {
                        let changed_at = if fingerprint(&seen.client) == *fp {
                            seen.changed_at.unwrap_or(seen.first_seen)
                        } else {
                            now
                        };
                        let mut client = record.clone();
                        client.registered_at = changed_at;
                        let next = CimdClientRecord {
                            first_seen: seen.first_seen,
                            client: client.clone(),
                            changed_at: Some(changed_at),
                            validated_at: Some(now),
                            blocked_at: None,
                        };
                        // Keeps its expiry: only a code makes it permanent.
                        Step::Put(next, client)
                    }
                })
            },
        )
        .await?
        .ok_or_else(contended)
    }

    /// The `private_key_jwt` keys of `client`: inline ones as given; a `jwks_uri`'s from the
    /// cache within the response's cache lifetime (bounded by `[cimd]` `cache_min_secs` and
    /// `cache_max_secs`), else fetched through the SSRF-safe fetcher under the documents'
    /// budgets. `Ok(None)`: no keys, or none newer than those already tried.
    pub async fn keys(
        &self,
        client: &ResolvedClient,
        from: Option<IpAddr>,
        freshness: KeyFreshness,
    ) -> Result<Option<Arc<JwkSet>>, ClientsError> {
        let url = match (&client.keys, freshness) {
            (None, _) | (Some(KeySource::Inline(_)), KeyFreshness::AfterUnknownKid) => {
                return Ok(None);
            }
            (Some(KeySource::Inline(set)), KeyFreshness::Cached) => {
                return Ok(Some(set.clone()));
            }
            (Some(KeySource::Uri(url)), _) => url,
        };
        let now = self.clock.now();
        let familiarity = {
            let mut cache = self
                .key_cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match (cache.get_mut(url.as_str()), freshness) {
                (Some(c), KeyFreshness::Cached) if now < c.until => {
                    return Ok(Some(c.keys.clone()));
                }
                (Some(c), KeyFreshness::AfterUnknownKid)
                    if now.since(c.fetched_at) < JWKS_REFETCH_MIN_SECS =>
                {
                    return Ok(None);
                }
                (Some(c), KeyFreshness::AfterUnknownKid) => {
                    // The refetch is claimed under the lock, before it runs: concurrent
                    // unknown `kid`s find the slot taken instead of each fetching, and a
                    // failed refetch spends it too.
                    c.fetched_at = now;
                    Familiarity::Known
                }
                (Some(_), _) => Familiarity::Known,
                (None, _) => Familiarity::New,
            }
        };
        let fetched = self
            .fetcher
            .fetch_keys(url, now, from, familiarity, jwks::MAX_JWKS_BYTES)
            .await?;
        let set = Arc::new(
            jwks::parse_body(fetched.body())
                .map_err(|e| ClientsError::Document(CimdError::BadKeys(e.description())))?,
        );
        // Public keys are harmless to keep: `no-store` still gets the minimum, so requests
        // with bad assertions cannot turn into one fetch each.
        let until = now.plus(
            cimd::cache_secs(
                fetched.cache_control(),
                self.policy.cache_min_secs,
                self.policy.cache_max_secs,
            )
            .unwrap_or(self.policy.cache_min_secs),
        );
        let mut cache = self
            .key_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= MAX_CACHED_KEY_SETS && !cache.contains_key(url.as_str()) {
            // Full: drop the entry fetched longest ago.
            if let Some(k) = cache
                .iter()
                .min_by_key(|(_, c)| c.fetched_at)
                .map(|(k, _)| k.clone())
            {
                cache.remove(&k);
            }
        }
        cache.insert(
            url.as_str().to_owned(),
            CachedKeys {
                keys: set.clone(),
                until,
                fetched_at: now,
            },
        );
        Ok(Some(set))
    }

    fn forget(&self, id: &str) {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    fn cached(&self, id: &str, now: UnixTime) -> Option<ResolvedClient> {
        let cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .get(id)
            .filter(|c| now < c.until)
            .map(|c| c.client.copy_for_cache())
    }

    fn remember(&self, id: &str, client: &ResolvedClient, until: UnixTime) {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= MAX_CACHED && !cache.contains_key(id) {
            let now = self.clock.now();
            cache.retain(|_, c| now < c.until);
            // Still full: drop the entry closest to expiry.
            if cache.len() >= MAX_CACHED
                && let Some(k) = cache
                    .iter()
                    .min_by_key(|(_, c)| c.until)
                    .map(|(k, _)| k.clone())
            {
                cache.remove(&k);
            }
        }
        cache.insert(
            id.to_owned(),
            Cached {
                client: client.copy_for_cache(),
                until,
            },
        );
    }
}

/// The record kept for a client blocked before it was ever seen: nothing it could use.
fn placeholder(id: &ClientId, now: UnixTime) -> ClientRecord {
    ClientRecord {
        client_id: id.clone(),
        client_name: None,
        redirect_uris: Vec::new(),
        auth_method: crate::oauth::registration::TokenAuthMethod::None,
        secret_hash: None,
        grant_types: Vec::new(),
        scope: None,
        application_type: crate::oauth::registration::ApplicationType::Web,
        registered_at: now,
    }
}

fn preregistered(c: &PreregisteredClient) -> ResolvedClient {
    let record = ClientRecord {
        client_id: c.client_id.clone(),
        client_name: Some(c.client_name.clone()),
        redirect_uris: c.redirect_uris.clone(),
        auth_method: c.auth_method,
        secret_hash: c.secret_hash.clone(),
        grant_types: vec!["authorization_code".to_owned(), "refresh_token".to_owned()],
        scope: None,
        // Inferred from the redirect URIs, as registration does for an omitted type.
        application_type: if c.redirect_uris.iter().any(|u| redirect::is_native_only(u)) {
            ApplicationType::Native
        } else {
            ApplicationType::Web
        },
        // Configured clients are not "new": the recent-registration warning never applies.
        registered_at: UnixTime(0),
    };
    ResolvedClient {
        fingerprint: fingerprint(&record),
        record,
        kind: ClientKind::Preregistered,
        remember_consent: c.remember_consent,
        keys: c.keys.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::registration::{ApplicationType, TokenAuthMethod};

    fn rec() -> ClientRecord {
        ClientRecord {
            client_id: ClientId::new("c"),
            client_name: Some("App".to_owned()),
            redirect_uris: vec!["https://a.example/cb".to_owned()],
            auth_method: TokenAuthMethod::None,
            secret_hash: None,
            grant_types: vec![],
            scope: None,
            application_type: ApplicationType::Web,
            registered_at: UnixTime(1),
        }
    }

    #[test]
    fn fingerprint_covers_redirects_name_and_auth_method_only() {
        let base = fingerprint(&rec());
        let mut r = rec();
        r.registered_at = UnixTime(99);
        r.grant_types = vec!["authorization_code".to_owned()];
        assert_eq!(fingerprint(&r), base);
        let mut r = rec();
        r.redirect_uris.push("https://b.example/cb".to_owned());
        assert_ne!(fingerprint(&r), base);
        let mut r = rec();
        r.client_name = Some("Other".to_owned());
        assert_ne!(fingerprint(&r), base);
        let mut r = rec();
        r.auth_method = TokenAuthMethod::ClientSecretBasic;
        assert_ne!(fingerprint(&r), base);
    }
}
