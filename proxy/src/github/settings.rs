//! `[github]`: the proxy's one OAuth client at GitHub, and its validation.

use std::path::PathBuf;

use serde::Deserialize;
use url::Url;

use crate::bindings::redirect::is_loopback_host;
use crate::ids::ClientSecret;
use crate::secrets::{Env, resolve_secret};

/// `[github]` as written.
// No Debug: holds inline secrets.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGitHub {
    client_id: String,
    client_secret: Option<String>,
    client_secret_file: Option<PathBuf>,
    client_secret_env: Option<String>,
    #[serde(default = "default_scopes")]
    scopes: Vec<String>,
    #[serde(default = "default_authorize_url")]
    authorize_url: String,
    #[serde(default = "default_token_url")]
    token_url: String,
    #[serde(default = "default_api_url")]
    api_url: String,
    #[serde(default = "default_timeout")]
    timeout_secs: u64,
}

impl RawGitHub {
    /// The scopes as written (other sections are checked against them even when `[github]`
    /// has errors of its own).
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }
}

fn default_scopes() -> Vec<String> {
    vec!["read:user".to_owned()]
}
fn default_authorize_url() -> String {
    "https://github.com/login/oauth/authorize".to_owned()
}
fn default_token_url() -> String {
    "https://github.com/login/oauth/access_token".to_owned()
}
fn default_api_url() -> String {
    "https://api.github.com".to_owned()
}
fn default_timeout() -> u64 {
    10
}

/// The proxy's one OAuth client at GitHub.
#[derive(Debug, Clone)]
pub struct GitHubConfig {
    /// Client id.
    pub client_id: String,
    /// Client secret.
    pub client_secret: std::sync::Arc<ClientSecret>,
    /// Scopes requested from GitHub; also the scopes MCP clients may ask for.
    pub scopes: Vec<String>,
    /// Authorize endpoint.
    pub authorize_url: Url,
    /// Token endpoint.
    pub token_url: Url,
    /// REST API base.
    pub api_url: Url,
    /// Timeout for each call to GitHub.
    pub timeout_secs: u64,
}

impl GitHubConfig {
    /// The GitHub host shown to people ("github.com").
    pub fn display_host(&self) -> String {
        self.authorize_url.host_str().unwrap_or("GitHub").to_owned()
    }

    /// Validates `[github]`, pushing one readable line per problem into `errs`; `None` if it
    /// cannot be used.
    pub fn from_raw(g: &RawGitHub, env: &dyn Env, errs: &mut Vec<String>) -> Option<GitHubConfig> {
        if g.client_id.trim().is_empty() {
            errs.push("github.client_id: must not be empty".to_owned());
        }
        let secret = resolve_secret(
            "client_secret",
            g.client_secret.as_ref(),
            g.client_secret_file.as_ref(),
            g.client_secret_env.as_ref(),
            env,
            errs,
        );
        if secret.is_none()
            && g.client_secret.is_none()
            && g.client_secret_file.is_none()
            && g.client_secret_env.is_none()
        {
            errs.push(
                "github.client_secret: required (or client_secret_file / client_secret_env)"
                    .to_owned(),
            );
        }
        if g.scopes
            .iter()
            .any(|s| s.is_empty() || s.contains([' ', ',']))
        {
            errs.push("github.scopes: each scope is one word without spaces or commas".to_owned());
        }
        if g.timeout_secs == 0 || g.timeout_secs > 120 {
            errs.push("github.timeout_secs: must be between 1 and 120".to_owned());
        }
        let a = parse_url("github.authorize_url", &g.authorize_url, errs);
        let t = parse_url("github.token_url", &g.token_url, errs);
        let api = parse_url("github.api_url", &g.api_url, errs);
        match (secret, a, t, api) {
            (Some(secret), Some(authorize_url), Some(token_url), Some(api_url)) => {
                Some(GitHubConfig {
                    client_id: g.client_id.clone(),
                    client_secret: std::sync::Arc::new(ClientSecret::new(secret)),
                    scopes: g.scopes.clone(),
                    authorize_url,
                    token_url,
                    api_url,
                    timeout_secs: g.timeout_secs,
                })
            }
            _ => None,
        }
    }
}

/// An endpoint URL: https, or http on a loopback host (a fake GitHub in development).
fn parse_url(name: &str, s: &str, errs: &mut Vec<String>) -> Option<Url> {
    match Url::parse(s) {
        Ok(u) if u.scheme() == "https" => Some(u),
        Ok(u) if u.scheme() == "http" && is_loopback_host(u.host_str().unwrap_or_default()) => {
            Some(u)
        }
        Ok(_) => {
            errs.push(format!("{name}: must be https (http only on loopback)"));
            None
        }
        Err(e) => {
            errs.push(format!("{name}: {e}"));
            None
        }
    }
}
