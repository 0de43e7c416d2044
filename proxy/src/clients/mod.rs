//! The client directory: one place that turns a `client_id` into a client, for all three
//! kinds. Configured (`[[clients]]`), Client ID Metadata Document (an `https` URL, fetched
//! through [`fetch`] and validated by [`cimd`]), and dynamically registered (the store). The
//! kinds cannot shadow each other: generated ids start with `mcpc_`, configured ids may not,
//! and neither may look like a URL.

pub mod cimd;
pub mod fetch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::{SharedClock, UnixTime};
use crate::config::{CimdPolicy, Config, PreregisteredClient};
use crate::crypto;
use crate::ids::ClientId;
use crate::oauth::scope::ScopeSet;
use crate::store::records::{CimdClientRecord, ClientRecord};
use crate::store::{Keyspace, SharedStore, StoreError, StoreExt};

use cimd::CimdError;
use fetch::{FetchError, FetchPolicy, Fetcher, Resolver};

/// Most metadata documents held in memory.
const MAX_CACHED: usize = 1024;

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

/// A client as the flows use it.
#[derive(Debug, Clone)]
pub struct ResolvedClient {
    /// The client record.
    pub record: ClientRecord,
    /// Its kind.
    pub kind: ClientKind,
    /// What a consent covers (redirect URIs, name, auth method); see [`fingerprint`].
    pub fingerprint: String,
    /// Whether an approval may be remembered.
    pub remember_consent: bool,
}

impl ResolvedClient {
    /// Whether the operators vouch for the name.
    pub fn verified(&self) -> bool {
        self.kind == ClientKind::Preregistered
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

/// Resolves client ids; held in `App`.
pub struct Directory {
    preregistered: HashMap<String, PreregisteredClient>,
    policy: CimdPolicy,
    fetcher: Fetcher,
    cache: Mutex<HashMap<String, Cached>>,
    store: SharedStore,
    clock: SharedClock,
    offered: ScopeSet,
}

impl Directory {
    /// Builds the directory from configuration; documents are resolved through `resolver`.
    pub fn new(
        config: &Config,
        store: SharedStore,
        clock: SharedClock,
        offered: ScopeSet,
        resolver: Arc<dyn Resolver>,
    ) -> Directory {
        let policy = config.cimd;
        if policy.enabled && policy.dangerously_allow_loopback_for_development {
            tracing::warn!(
                "cimd.dangerously_allow_loopback_for_development is on: client metadata documents may be fetched from loopback over plain http. Never use this in production."
            );
        }
        Directory {
            preregistered: config
                .clients
                .iter()
                .map(|c| (c.client_id.as_str().to_owned(), c.clone()))
                .collect(),
            fetcher: Fetcher::new(
                resolver,
                FetchPolicy {
                    timeout: Duration::from_secs(policy.fetch_timeout_secs),
                    per_minute: policy.fetches_per_minute,
                    allow_loopback: policy.dangerously_allow_loopback_for_development,
                },
            ),
            policy,
            cache: Mutex::new(HashMap::new()),
            store,
            clock,
            offered,
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

    /// Resolves a client for authorization: configured, fetched document (cached within its
    /// lifetime), or registered. `Ok(None)`: no such client.
    pub async fn resolve(&self, id: &ClientId) -> Result<Option<ResolvedClient>, ClientsError> {
        if let Some(c) = self.preregistered.get(id.as_str()) {
            return Ok(Some(preregistered(c)));
        }
        if cimd::is_url_client_id(id.as_str()) {
            return self.document(id).await.map(Some);
        }
        let rec: Option<ClientRecord> = self.store.get_json(Keyspace::Clients, id.as_str()).await?;
        Ok(rec.map(|record| ResolvedClient {
            fingerprint: fingerprint(&record),
            record,
            kind: ClientKind::Registered,
            remember_consent: true,
        }))
    }

    /// The client record as [`Directory::resolve`] finds it.
    pub async fn get(&self, id: &ClientId) -> Result<Option<ClientRecord>, ClientsError> {
        Ok(self.resolve(id).await?.map(|c| c.record))
    }

    /// The client as last known, without fetching anything: for display (names on pages and
    /// messages), never for authorization.
    pub async fn known(&self, id: &ClientId) -> Result<Option<ClientRecord>, StoreError> {
        if let Some(c) = self.preregistered.get(id.as_str()) {
            return Ok(Some(preregistered(c).record));
        }
        if cimd::is_url_client_id(id.as_str()) {
            let seen: Option<CimdClientRecord> = self
                .store
                .get_json(Keyspace::CimdClients, id.as_str())
                .await?;
            return Ok(seen.map(|s| s.client));
        }
        self.store.get_json(Keyspace::Clients, id.as_str()).await
    }

    async fn document(&self, id: &ClientId) -> Result<ResolvedClient, ClientsError> {
        if !self.policy.enabled {
            return Err(CimdError::Disabled.into());
        }
        let url = cimd::parse_url(
            id.as_str(),
            self.policy.dangerously_allow_loopback_for_development,
        )?;
        let now = self.clock.now();
        if let Some(c) = self.cached(id.as_str(), now) {
            return Ok(c);
        }
        // Errors and invalid documents return here, before anything is cached or stored.
        let fetched = self.fetcher.fetch(&url, now).await?;
        let doc = cimd::validate(id.as_str(), &fetched.body, &self.offered)?;
        let m = doc.metadata;
        let host = url.host_str().unwrap_or_default().to_owned();
        let mut record = ClientRecord {
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
        let fp = fingerprint(&record);
        let fresh = CimdClientRecord {
            first_seen: now,
            client: record.clone(),
        };
        if !self
            .store
            .insert_json(Keyspace::CimdClients, id.as_str(), &fresh, None)
            .await?
        {
            let seen: Option<CimdClientRecord> = self
                .store
                .get_json(Keyspace::CimdClients, id.as_str())
                .await?;
            if let Some(seen) = seen {
                record.registered_at = seen.first_seen;
                if fingerprint(&seen.client) != fp {
                    let updated = CimdClientRecord {
                        first_seen: seen.first_seen,
                        client: record.clone(),
                    };
                    self.store
                        .put_json(Keyspace::CimdClients, id.as_str(), &updated, None)
                        .await?;
                }
            }
        }
        let client = ResolvedClient {
            record,
            kind: ClientKind::MetadataDocument { host },
            fingerprint: fp,
            remember_consent: true,
        };
        if let Some(secs) = cimd::cache_secs(
            fetched.cache_control.as_deref(),
            self.policy.cache_min_secs,
            self.policy.cache_max_secs,
        ) {
            self.remember(id.as_str(), &client, now.plus(secs));
        }
        Ok(client)
    }

    fn cached(&self, id: &str, now: UnixTime) -> Option<ResolvedClient> {
        let cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .get(id)
            .filter(|c| now < c.until)
            .map(|c| c.client.clone())
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
                client: client.clone(),
                until,
            },
        );
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
        application_type: crate::oauth::registration::ApplicationType::Web,
        // Configured clients are not "new": the recent-registration warning never applies.
        registered_at: UnixTime(0),
    };
    ResolvedClient {
        fingerprint: fingerprint(&record),
        record,
        kind: ClientKind::Preregistered,
        remember_consent: c.remember_consent,
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
