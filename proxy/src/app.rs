//! The dependencies every flow needs, built once at start: configuration, keys, store, clock,
//! the GitHub client, the grant store and the audit sink.

use std::sync::Arc;

use crate::audit::Audit;
use crate::clock::SharedClock;
use crate::config::{Config, Keys};
use crate::github::client::{GitHubClient, GitHubError};
use crate::github::grants::Grants;
use crate::metrics::Metrics;
use crate::oauth::scope::ScopeSet;
use crate::store::SharedStore;

/// Shared application state.
#[derive(Clone)]
pub struct App(Arc<Inner>);

/// The fields behind [`App`].
pub struct Inner {
    /// Configuration.
    pub config: Config,
    /// Keys.
    pub keys: Keys,
    /// Store.
    pub store: SharedStore,
    /// Clock.
    pub clock: SharedClock,
    /// GitHub client.
    pub github: GitHubClient,
    /// GitHub grants.
    pub grants: Grants,
    /// Audit sink.
    pub audit: Audit,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Scopes MCP clients may ask for (the GitHub scopes configured).
    pub offered_scopes: ScopeSet,
    /// HTTP client toward the backend MCP server, if one is configured.
    pub backend_http: Option<reqwest::Client>,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl App {
    /// Wires the application together.
    pub fn new(
        config: Config,
        keys: Keys,
        store: SharedStore,
        clock: SharedClock,
    ) -> Result<App, GitHubError> {
        // Every store call is timed, whichever backend was opened.
        let metrics = Metrics::new();
        let store: SharedStore =
            std::sync::Arc::new(crate::store::MeteredStore::new(store, metrics.clone()));
        let github = GitHubClient::new(config.github.clone(), &config.github_callback_url())?;
        let grants = Grants::new(
            store.clone(),
            keys.token_encryption.clone(),
            github.clone(),
            clock.clone(),
        );
        let audit = Audit::new(store.clone(), clock.clone(), metrics.clone());
        let offered_scopes = ScopeSet::from_list(config.github.scopes.iter().cloned());
        let backend_http = match &config.backend {
            Some(b) => Some(
                crate::gateway::forward::backend_client(b)
                    .map_err(|e| GitHubError::Unavailable(e.to_string()))?,
            ),
            None => None,
        };
        Ok(App(Arc::new(Inner {
            backend_http,
            config,
            keys,
            store,
            clock,
            github,
            grants,
            audit,
            metrics,
            offered_scopes,
        })))
    }

    /// The canonical MCP resource URI.
    pub fn resource(&self) -> String {
        self.config.public_url.mcp_resource()
    }

    /// The issuer.
    pub fn issuer(&self) -> &str {
        self.config.public_url.issuer()
    }
}
