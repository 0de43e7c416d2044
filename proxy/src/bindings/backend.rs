//! `[backend]`: the backend MCP server behind `/mcp` and which credential it receives, with
//! the section's validation. Not a binding of its own: it sits here, below `gateway`, because
//! the no-passthrough binding (`upstream_auth`), the token-exchange flow (which authenticates
//! an exchange-mode backend) and `App` all read it, and they are below the gateway.

use std::path::PathBuf;

use serde::Deserialize;
use url::Url;

use crate::ids::ClientSecret;
use crate::secrets::{Env, resolve_secret};

/// `[backend]` as written.
// No Debug: may hold the exchange client's secret inline.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    url: String,
    #[serde(default = "default_backend_auth")]
    auth: String,
    #[serde(default)]
    required_scopes: Vec<String>,
    #[serde(default = "default_connect_timeout")]
    connect_timeout_secs: u64,
    exchange_client_id: Option<String>,
    exchange_client_secret: Option<String>,
    exchange_client_secret_file: Option<PathBuf>,
    exchange_client_secret_env: Option<String>,
    #[serde(default = "default_backend_token_ttl")]
    backend_token_ttl_secs: u64,
}

fn default_backend_token_ttl() -> u64 {
    300
}

fn default_backend_auth() -> String {
    "github_token".to_owned()
}
fn default_connect_timeout() -> u64 {
    10
}

/// What the backend receives as its credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendAuth {
    /// The person's GitHub token as a Bearer token.
    GitHubToken,
    /// A short-lived proxy token for the backend, which it exchanges (RFC 8693) for the
    /// person's GitHub token, authenticating as this confidential client.
    Exchange {
        /// The backend's client id at our token endpoint.
        client_id: String,
        /// Its secret.
        client_secret: std::sync::Arc<ClientSecret>,
        /// Lifetime of each backend token.
        token_ttl_secs: u64,
    },
}

/// The backend MCP server (Streamable HTTP).
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// Its MCP endpoint.
    pub url: Url,
    /// What it receives.
    pub auth: BackendAuth,
    /// Scopes every token must carry to use `/mcp`.
    pub required_scopes: Vec<String>,
    /// Connection timeout (streams themselves have none).
    pub connect_timeout_secs: u64,
}

impl BackendConfig {
    /// Validates `[backend]`, pushing one readable line per problem into `errs`; `None` if it
    /// cannot be used.
    pub fn from_raw(
        b: &RawBackend,
        env: &dyn Env,
        errs: &mut Vec<String>,
    ) -> Option<BackendConfig> {
        let url = match Url::parse(&b.url) {
            Ok(u) if matches!(u.scheme(), "https" | "http") => Some(u),
            Ok(_) => {
                errs.push("backend.url: must be http:// or https://".to_owned());
                None
            }
            Err(e) => {
                errs.push(format!("backend.url: {e}"));
                None
            }
        };
        let auth = match b.auth.as_str() {
            "github_token" => Some(BackendAuth::GitHubToken),
            "exchange" => {
                let secret = resolve_secret(
                    "exchange_client_secret",
                    b.exchange_client_secret.as_ref(),
                    b.exchange_client_secret_file.as_ref(),
                    b.exchange_client_secret_env.as_ref(),
                    env,
                    errs,
                );
                let id = b
                    .exchange_client_id
                    .clone()
                    .filter(|i| !i.trim().is_empty());
                if id.is_none() {
                    errs.push(
                        "backend.exchange_client_id: required with auth = \"exchange\"".to_owned(),
                    );
                }
                if secret.as_ref().is_none_or(|s| s.len() < 16) {
                    errs.push("backend.exchange_client_secret: required with auth = \"exchange\", at least 16 characters".to_owned());
                }
                if !(30..=3600).contains(&b.backend_token_ttl_secs) {
                    errs.push("backend.backend_token_ttl_secs: between 30 and 3600".to_owned());
                }
                match (id, secret) {
                    (Some(client_id), Some(s)) => Some(BackendAuth::Exchange {
                        client_id,
                        client_secret: std::sync::Arc::new(ClientSecret::new(s)),
                        token_ttl_secs: b.backend_token_ttl_secs,
                    }),
                    _ => None,
                }
            }
            other => {
                errs.push(format!("backend.auth: {other:?} is not supported (use \"github_token\" or \"exchange\")"));
                None
            }
        };
        if b.connect_timeout_secs == 0 || b.connect_timeout_secs > 120 {
            errs.push("backend.connect_timeout_secs: between 1 and 120".to_owned());
        }
        Some(BackendConfig {
            url: url?,
            auth: auth?,
            required_scopes: b.required_scopes.clone(),
            connect_timeout_secs: b.connect_timeout_secs,
        })
    }
}
