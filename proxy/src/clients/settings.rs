//! `[[clients]]` (clients a platform team registers ahead of time), `[cimd]` (Client ID
//! Metadata Documents: URL client ids fetched on demand) and `[registration]` (who may register
//! clients dynamically, and registration housekeeping): the three ways a client comes to
//! exist, each section with its validation.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::budget::UnusedLimits;
use crate::bindings::redirect;
use crate::crypto;
use crate::ids::{ClientId, InitialAccessToken};
use crate::oauth::grant::CLIENT_PREFIX;
use crate::oauth::registration::TokenAuthMethod;
use crate::secrets::{Env, resolve_secret};

/// One `[[clients]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClient {
    client_id: String,
    client_name: String,
    redirect_uris: Vec<String>,
    /// Hex SHA-256 of the client secret: the secret itself never sits in the config.
    client_secret_sha256: Option<String>,
    token_endpoint_auth_method: Option<String>,
    /// `private_key_jwt`: the client's public keys, a JSON Web Key Set as a JSON string.
    jwks: Option<String>,
    /// `private_key_jwt`: where the client publishes its keys.
    jwks_uri: Option<String>,
    #[serde(default = "yes")]
    remember_consent: bool,
}

fn yes() -> bool {
    true
}

/// `[cimd]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawCimd {
    enabled: bool,
    fetch_timeout_secs: u64,
    cache_min_secs: u64,
    cache_max_secs: u64,
    fetches_per_minute: u32,
    fetches_per_minute_per_ip: u32,
    known_fetches_per_minute: u32,
    dangerously_allow_loopback_for_development: bool,
}

impl Default for RawCimd {
    fn default() -> Self {
        RawCimd {
            enabled: true,
            fetch_timeout_secs: 5,
            cache_min_secs: 60,
            cache_max_secs: 3600,
            fetches_per_minute: 60,
            fetches_per_minute_per_ip: 10,
            known_fetches_per_minute: 30,
            dangerously_allow_loopback_for_development: false,
        }
    }
}

/// A client configured ahead of time.
#[derive(Debug, Clone)]
pub struct PreregisteredClient {
    /// Its id (never `mcpc_…`, never a URL).
    pub client_id: ClientId,
    /// Display name (trusted: an operator wrote it).
    pub client_name: String,
    /// Redirect URIs, validated like registrations.
    pub redirect_uris: Vec<String>,
    /// Token endpoint authentication.
    pub auth_method: TokenAuthMethod,
    /// Lowercase hex SHA-256 of the secret, for confidential clients.
    pub secret_hash: Option<String>,
    /// Whether an approval may be remembered (false: the consent page every time).
    pub remember_consent: bool,
    /// Its keys, with `private_key_jwt`.
    pub keys: Option<super::jwks::KeySource>,
}

/// Client ID Metadata Document policy.
#[derive(Debug, Clone, Copy)]
pub struct CimdPolicy {
    /// URL client ids accepted at all.
    pub enabled: bool,
    /// Connect and total timeout of one fetch.
    pub fetch_timeout_secs: u64,
    /// Shortest time a valid document is cached (unless `no-store`).
    pub cache_min_secs: u64,
    /// Longest time a valid document is cached.
    pub cache_max_secs: u64,
    /// Outbound fetches per minute, all hosts together.
    pub fetches_per_minute: u32,
    /// Fetch attempts per minute caused by one source (an IPv4 address, an IPv6 /48).
    pub fetches_per_minute_per_ip: u32,
    /// Fetches per minute reserved for URLs that fetched cleanly before (one per URL), used
    /// when the general or the source's budget is spent.
    pub known_fetches_per_minute: u32,
    /// Development only: fetch documents from loopback (and plain http there).
    pub dangerously_allow_loopback_for_development: bool,
}

const MAX_ID_CHARS: usize = 100;

/// Validates `[[clients]]`, pushing one readable line per problem into `errs`.
pub fn validate_clients(raw: &[RawClient], errs: &mut Vec<String>) -> Vec<PreregisteredClient> {
    let mut out: Vec<PreregisteredClient> = Vec::new();
    for (i, c) in raw.iter().enumerate() {
        let at = format!("clients[{i}]");
        let id = c.client_id.trim();
        if id.is_empty() || id.len() > MAX_ID_CHARS {
            errs.push(format!("{at}.client_id: 1 to {MAX_ID_CHARS} characters"));
            continue;
        }
        if !id
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.'))
        {
            errs.push(format!(
                "{at}.client_id: letters, digits, '-', '_' and '.' only (URL client ids are metadata documents, not configuration)"
            ));
            continue;
        }
        if id.starts_with(CLIENT_PREFIX) {
            errs.push(format!(
                "{at}.client_id: must not start with {CLIENT_PREFIX:?} (reserved for registered clients)"
            ));
            continue;
        }
        if out.iter().any(|o| o.client_id.as_str() == id) {
            errs.push(format!("{at}.client_id: {id:?} appears twice"));
            continue;
        }
        let name = c.client_name.trim();
        if name.is_empty() || name.chars().any(char::is_control) {
            errs.push(format!(
                "{at}.client_name: required, without control characters"
            ));
        }
        if c.redirect_uris.is_empty() {
            errs.push(format!("{at}.redirect_uris: at least one is required"));
        }
        for u in &c.redirect_uris {
            if let Err(e) = redirect::validate_for_registration(u) {
                errs.push(format!("{at}.redirect_uris: {u:?}: {}", e.description()));
            }
        }
        let secret_hash = match &c.client_secret_sha256 {
            None => None,
            Some(h) => {
                let h = h.trim().to_ascii_lowercase();
                if h.len() != 64 || !h.chars().all(|ch| ch.is_ascii_hexdigit()) {
                    errs.push(format!(
                        "{at}.client_secret_sha256: 64 hex digits (e.g. printf %s \"$SECRET\" | sha256sum)"
                    ));
                }
                Some(h)
            }
        };
        let keys = configured_keys(&at, c, errs);
        let auth_method = match (c.token_endpoint_auth_method.as_deref(), &secret_hash) {
            (Some("private_key_jwt"), None) => {
                if keys.is_none() {
                    errs.push(format!(
                        "{at}: private_key_jwt needs exactly one of jwks or jwks_uri"
                    ));
                }
                TokenAuthMethod::PrivateKeyJwt
            }
            (Some("private_key_jwt"), Some(_)) => {
                errs.push(format!(
                    "{at}: a private_key_jwt client has no client_secret_sha256"
                ));
                TokenAuthMethod::PrivateKeyJwt
            }
            (None | Some("none"), None) => TokenAuthMethod::None,
            (None | Some("client_secret_basic"), Some(_)) => TokenAuthMethod::ClientSecretBasic,
            (Some("client_secret_post"), Some(_)) => TokenAuthMethod::ClientSecretPost,
            (Some("none"), Some(_)) => {
                errs.push(format!(
                    "{at}: a public client (token_endpoint_auth_method = \"none\") has no client_secret_sha256"
                ));
                TokenAuthMethod::None
            }
            (Some(m), None) if m.starts_with("client_secret") => {
                errs.push(format!(
                    "{at}.client_secret_sha256: required with token_endpoint_auth_method = {m:?}"
                ));
                TokenAuthMethod::None
            }
            (Some(m), _) => {
                errs.push(format!(
                    "{at}.token_endpoint_auth_method: {m:?} (use none, client_secret_basic, client_secret_post or private_key_jwt)"
                ));
                TokenAuthMethod::None
            }
        };
        if keys.is_some() && auth_method != TokenAuthMethod::PrivateKeyJwt {
            errs.push(format!(
                "{at}: jwks and jwks_uri are for token_endpoint_auth_method = \"private_key_jwt\""
            ));
        }
        out.push(PreregisteredClient {
            client_id: ClientId::new(id),
            client_name: name.to_owned(),
            redirect_uris: c.redirect_uris.clone(),
            auth_method,
            secret_hash,
            remember_consent: c.remember_consent,
            keys,
        });
    }
    out
}

/// A configured client's `jwks` (a JSON key set, checked like a document's) or `jwks_uri`
/// (https; plain http only to a loopback address, which the fetcher then also requires the
/// `[cimd]` development setting for). Not both.
fn configured_keys(
    at: &str,
    c: &RawClient,
    errs: &mut Vec<String>,
) -> Option<super::jwks::KeySource> {
    use super::jwks::{self, KeySource};
    match (&c.jwks, &c.jwks_uri) {
        (None, None) => None,
        (Some(_), Some(_)) => {
            errs.push(format!("{at}: jwks and jwks_uri are exclusive"));
            None
        }
        (Some(text), None) => {
            let parsed = serde_json::from_str::<serde_json::Value>(text)
                .map_err(|_| jwks::JwksError::NotASet)
                .and_then(|v| jwks::parse_set(&v));
            match parsed {
                Ok(set) => Some(KeySource::Inline(std::sync::Arc::new(set))),
                Err(e) => {
                    errs.push(format!("{at}.jwks: {}", e.description()));
                    None
                }
            }
        }
        (None, Some(uri)) => match url::Url::parse(uri) {
            Ok(u)
                if u.scheme() == "https"
                    || (u.scheme() == "http"
                        && match u.host() {
                            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                            _ => false,
                        }) =>
            {
                Some(KeySource::Uri(u))
            }
            _ => {
                errs.push(format!(
                    "{at}.jwks_uri: an https URL (plain http only to a loopback address, for development)"
                ));
                None
            }
        },
    }
}

/// Validates `[cimd]`, pushing one readable line per problem into `errs`.
pub fn validate_cimd(raw: &RawCimd, errs: &mut Vec<String>) -> CimdPolicy {
    if !(1..=30).contains(&raw.fetch_timeout_secs) {
        errs.push("cimd.fetch_timeout_secs: between 1 and 30".to_owned());
    }
    if raw.cache_max_secs > 86_400 {
        errs.push("cimd.cache_max_secs: at most 86400 (a day)".to_owned());
    }
    if raw.cache_min_secs > raw.cache_max_secs {
        errs.push("cimd.cache_min_secs: must not exceed cache_max_secs".to_owned());
    }
    if raw.fetches_per_minute == 0 {
        errs.push("cimd.fetches_per_minute: at least 1".to_owned());
    }
    if raw.fetches_per_minute_per_ip == 0 {
        errs.push("cimd.fetches_per_minute_per_ip: at least 1".to_owned());
    }
    if raw.known_fetches_per_minute == 0 {
        errs.push("cimd.known_fetches_per_minute: at least 1".to_owned());
    }
    CimdPolicy {
        enabled: raw.enabled,
        fetch_timeout_secs: raw.fetch_timeout_secs,
        cache_min_secs: raw.cache_min_secs,
        cache_max_secs: raw.cache_max_secs,
        fetches_per_minute: raw.fetches_per_minute,
        fetches_per_minute_per_ip: raw.fetches_per_minute_per_ip,
        known_fetches_per_minute: raw.known_fetches_per_minute,
        dangerously_allow_loopback_for_development: raw.dangerously_allow_loopback_for_development,
    }
}

// ---- [registration] ----------------------------------------------------------------------

// No Debug: may hold the initial access token inline.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRegistration {
    #[serde(default = "default_policy")]
    policy: String,
    initial_access_token: Option<String>,
    initial_access_token_file: Option<PathBuf>,
    initial_access_token_env: Option<String>,
    #[serde(default = "default_unused_ttl")]
    unused_client_ttl_secs: u64,
    #[serde(default = "default_max_identical")]
    max_identical_per_ip: u32,
    #[serde(default)]
    trusted_redirect_hosts: Vec<String>,
    #[serde(default = "default_max_unused_per_source")]
    max_unused_per_source: u32,
    #[serde(default = "default_max_unused_bytes_per_source")]
    max_unused_bytes_per_source: u64,
    #[serde(default = "default_max_unused")]
    max_unused: u32,
    #[serde(default = "default_max_unused_bytes")]
    max_unused_bytes: u64,
}

impl Default for RawRegistration {
    fn default() -> Self {
        RawRegistration {
            policy: default_policy(),
            initial_access_token: None,
            initial_access_token_file: None,
            initial_access_token_env: None,
            unused_client_ttl_secs: default_unused_ttl(),
            max_identical_per_ip: default_max_identical(),
            trusted_redirect_hosts: Vec::new(),
            max_unused_per_source: default_max_unused_per_source(),
            max_unused_bytes_per_source: default_max_unused_bytes_per_source(),
            max_unused: default_max_unused(),
            max_unused_bytes: default_max_unused_bytes(),
        }
    }
}

fn default_max_unused_per_source() -> u32 {
    UnusedLimits::default().per_source
}
fn default_max_unused_bytes_per_source() -> u64 {
    UnusedLimits::default().per_source_bytes
}
fn default_max_unused() -> u32 {
    UnusedLimits::default().total
}
fn default_max_unused_bytes() -> u64 {
    UnusedLimits::default().total_bytes
}

/// The smallest byte budget accepted: room for one registration of the largest size
/// `RegistrationRequest::validate` lets through, with its charge record.
const MIN_UNUSED_BYTES: u64 = 64 * 1024;

fn default_policy() -> String {
    "open".to_owned()
}
fn default_unused_ttl() -> u64 {
    86_400
}
fn default_max_identical() -> u32 {
    5
}

/// Shortest accepted initial access token: long enough that guessing it is hopeless.
const MIN_IAT_CHARS: usize = 32;

/// Who may use dynamic client registration (`POST /register`).
#[derive(Debug, Clone)]
pub enum RegistrationMode {
    /// Anyone (the MCP default: DCR is how most clients still find a client id).
    Open,
    /// Only callers presenting this token as `Authorization: Bearer` (RFC 7591 §3).
    InitialAccessToken(Arc<InitialAccessToken>),
    /// Nobody: only client ID metadata documents and pre-registered clients work.
    Closed,
}

impl RegistrationMode {
    /// Whether `presented` is the configured initial access token (constant time; hashes are
    /// compared so the length of the secret does not leak either).
    pub fn token_matches(&self, presented: &str) -> bool {
        match self {
            RegistrationMode::InitialAccessToken(t) => crypto::ct_eq(
                &crypto::sha256(presented.as_bytes()),
                &crypto::sha256(t.secret().as_bytes()),
            ),
            _ => false,
        }
    }
}

/// Registration policy and housekeeping.
#[derive(Debug, Clone)]
pub struct RegistrationPolicy {
    /// Who may register.
    pub mode: RegistrationMode,
    /// A registration that never got an authorization code is removed after this long.
    pub unused_client_ttl_secs: u64,
    /// At most this many unused registrations with identical metadata from one client IP are
    /// kept beyond the authorization window (see `flows::register`): another one removes the
    /// oldest unused one past that window, or, if all are younger, is itself kept only for
    /// the window.
    pub max_identical_per_ip: u32,
    /// Redirect hosts the operator vouches for (lower-case): the consent page never calls them
    /// a new destination, and the fresh-client alert does not fire for them. The only way to
    /// quiet that warning while `[access]` admits everyone.
    pub trusted_redirect_hosts: Vec<String>,
    /// Caps on registrations nobody has used yet (`clients::budget`), per source, per /48 and
    /// for everyone, in count and bytes.
    pub unused: UnusedLimits,
}

impl Default for RegistrationPolicy {
    fn default() -> Self {
        RegistrationPolicy {
            mode: RegistrationMode::Open,
            unused_client_ttl_secs: default_unused_ttl(),
            max_identical_per_ip: default_max_identical(),
            trusted_redirect_hosts: Vec::new(),
            unused: UnusedLimits::default(),
        }
    }
}

/// Validates `[registration]`.
pub fn validate_registration(
    raw: &RawRegistration,
    env: &dyn Env,
    errs: &mut Vec<String>,
) -> RegistrationPolicy {
    let token = resolve_secret(
        "initial_access_token",
        raw.initial_access_token.as_ref(),
        raw.initial_access_token_file.as_ref(),
        raw.initial_access_token_env.as_ref(),
        env,
        errs,
    );
    let token_given = raw.initial_access_token.is_some()
        || raw.initial_access_token_file.is_some()
        || raw.initial_access_token_env.is_some();
    let mode = match raw.policy.as_str() {
        "open" | "closed" => {
            if token_given {
                errs.push(format!(
                    "registration.initial_access_token: only used with policy = \"initial_access_token\" (policy is {:?})",
                    raw.policy
                ));
            }
            if raw.policy == "open" {
                RegistrationMode::Open
            } else {
                RegistrationMode::Closed
            }
        }
        "initial_access_token" => match token {
            // The presented token is trimmed, so a configured one with surrounding spaces
            // could never match.
            Some(t) if t.trim() != t => {
                errs.push(
                    "registration.initial_access_token: no leading or trailing whitespace"
                        .to_owned(),
                );
                RegistrationMode::Closed
            }
            Some(t) if t.chars().count() >= MIN_IAT_CHARS => {
                RegistrationMode::InitialAccessToken(Arc::new(InitialAccessToken::new(t)))
            }
            Some(_) => {
                errs.push(format!(
                    "registration.initial_access_token: at least {MIN_IAT_CHARS} characters"
                ));
                RegistrationMode::Closed
            }
            None => {
                if !token_given {
                    errs.push("registration.initial_access_token: required with policy = \"initial_access_token\" (or initial_access_token_file / initial_access_token_env)".to_owned());
                }
                RegistrationMode::Closed
            }
        },
        other => {
            errs.push(format!(
                "registration.policy: {other:?} is not \"open\", \"initial_access_token\" or \"closed\""
            ));
            RegistrationMode::Closed
        }
    };
    if !(60..=90 * 86_400).contains(&raw.unused_client_ttl_secs) {
        errs.push(
            "registration.unused_client_ttl_secs: between 60 and 7776000 (90 days)".to_owned(),
        );
    }
    if !(1..=100).contains(&raw.max_identical_per_ip) {
        errs.push("registration.max_identical_per_ip: between 1 and 100".to_owned());
    }
    let mut trusted_redirect_hosts = Vec::new();
    for h in &raw.trusted_redirect_hosts {
        // A bare host name, as the consent page shows it: no scheme, port, path or wildcard.
        let ok = !h.is_empty()
            && h.len() <= 253
            && h.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            && !h.starts_with(['.', '-'])
            && !h.ends_with(['.', '-']);
        if ok {
            trusted_redirect_hosts.push(h.to_ascii_lowercase());
        } else {
            errs.push(format!(
                "registration.trusted_redirect_hosts: {h:?} is not a host name (no scheme, port, path or wildcard)"
            ));
        }
    }
    if !(1..=10_000_000).contains(&raw.max_unused) {
        errs.push("registration.max_unused: between 1 and 10000000".to_owned());
    }
    if !(1..=raw.max_unused).contains(&raw.max_unused_per_source) {
        errs.push("registration.max_unused_per_source: at least 1, at most max_unused".to_owned());
    }
    if !(MIN_UNUSED_BYTES..=1 << 40).contains(&raw.max_unused_bytes) {
        errs.push(format!(
            "registration.max_unused_bytes: between {MIN_UNUSED_BYTES} and 1099511627776 (1 TiB)"
        ));
    }
    if !(MIN_UNUSED_BYTES..=raw.max_unused_bytes).contains(&raw.max_unused_bytes_per_source) {
        errs.push(format!(
            "registration.max_unused_bytes_per_source: at least {MIN_UNUSED_BYTES}, at most max_unused_bytes"
        ));
    }
    RegistrationPolicy {
        mode,
        unused_client_ttl_secs: raw.unused_client_ttl_secs,
        max_identical_per_ip: raw.max_identical_per_ip,
        trusted_redirect_hosts,
        unused: UnusedLimits {
            per_source: raw.max_unused_per_source,
            per_source_bytes: raw.max_unused_bytes_per_source,
            total: raw.max_unused,
            total_bytes: raw.max_unused_bytes,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients(toml_text: &str) -> (Vec<PreregisteredClient>, Vec<String>) {
        #[derive(Deserialize)]
        struct W {
            clients: Vec<RawClient>,
        }
        let w: W = toml::from_str(toml_text).unwrap();
        let mut errs = Vec::new();
        (validate_clients(&w.clients, &mut errs), errs)
    }

    const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn public_and_confidential_clients() {
        let (c, errs) = clients(&format!(
            r#"
[[clients]]
client_id = "platform-cli"
client_name = "Platform CLI"
redirect_uris = ["http://127.0.0.1/callback"]
[[clients]]
client_id = "portal"
client_name = "Portal"
redirect_uris = ["https://portal.example/cb"]
client_secret_sha256 = "{}"
remember_consent = false
"#,
            HASH.to_uppercase()
        ));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(c[0].auth_method, TokenAuthMethod::None);
        assert!(c[0].remember_consent);
        assert_eq!(c[1].auth_method, TokenAuthMethod::ClientSecretBasic);
        assert_eq!(c[1].secret_hash.as_deref(), Some(HASH));
        assert!(!c[1].remember_consent);
    }

    #[test]
    fn ids_that_could_collide_are_refused() {
        // `|` separates store key parts: refused with every other punctuation.
        for id in ["mcpc_abc", "https://app.example/c", "", "a b", "a|b"] {
            let (_, errs) = clients(&format!(
                "[[clients]]\nclient_id = {id:?}\nclient_name = \"X\"\nredirect_uris = [\"https://x.example/cb\"]\n"
            ));
            assert_eq!(errs.len(), 1, "{id}: {errs:?}");
        }
        let (_, errs) = clients(
            "[[clients]]\nclient_id = \"a\"\nclient_name = \"X\"\nredirect_uris = [\"https://x.example/cb\"]\n[[clients]]\nclient_id = \"a\"\nclient_name = \"Y\"\nredirect_uris = [\"https://x.example/cb\"]\n",
        );
        assert!(errs[0].contains("twice"), "{errs:?}");
    }

    #[test]
    fn bad_redirects_secrets_and_methods_are_reported() {
        let (_, errs) = clients(
            "[[clients]]\nclient_id = \"a\"\nclient_name = \"X\"\nredirect_uris = [\"http://evil.example/cb\"]\nclient_secret_sha256 = \"abc\"\n",
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        let (_, errs) = clients(
            "[[clients]]\nclient_id = \"a\"\nclient_name = \"X\"\nredirect_uris = [\"https://x.example/cb\"]\ntoken_endpoint_auth_method = \"client_secret_post\"\n",
        );
        assert!(errs[0].contains("client_secret_sha256"), "{errs:?}");
    }

    #[test]
    fn private_key_jwt_clients_need_exactly_one_usable_key_source() {
        let base = "[[clients]]\nclient_id = \"s\"\nclient_name = \"S\"\nredirect_uris = [\"https://s.example/cb\"]\ntoken_endpoint_auth_method = \"private_key_jwt\"\n";
        let (c, errs) = clients(&format!(
            "{base}jwks_uri = \"https://s.example/jwks.json\"\n"
        ));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(c[0].auth_method, TokenAuthMethod::PrivateKeyJwt);
        assert!(matches!(
            c[0].keys,
            Some(super::super::jwks::KeySource::Uri(_))
        ));
        let (_, errs) = clients(&format!(
            "{base}jwks_uri = \"http://127.0.0.1:9/jwks.json\"\n"
        ));
        assert!(errs.is_empty(), "loopback http for development: {errs:?}");
        for (extra, says) in [
            ("", "exactly one of jwks or jwks_uri"),
            ("jwks_uri = \"http://s.example/jwks.json\"\n", "jwks_uri"),
            (
                "jwks_uri = \"https://s.example/j\"\njwks = '{\"keys\":[]}'\n",
                "exclusive",
            ),
            (
                "jwks = '{\"keys\":[{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"}]}'\n",
                "symmetric",
            ),
            ("jwks = 'not json'\n", "not a JSON Web Key Set"),
            (
                "jwks_uri = \"https://s.example/j\"\nclient_secret_sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n",
                "no client_secret_sha256",
            ),
        ] {
            let (_, errs) = clients(&format!("{base}{extra}"));
            assert!(errs.iter().any(|e| e.contains(says)), "{extra}: {errs:?}");
        }
        // Keys without private_key_jwt are a mistake, not silently unused.
        let (_, errs) = clients(
            "[[clients]]\nclient_id = \"p\"\nclient_name = \"P\"\nredirect_uris = [\"https://p.example/cb\"]\njwks_uri = \"https://p.example/j\"\n",
        );
        assert!(
            errs.iter().any(|e| e.contains("private_key_jwt")),
            "{errs:?}"
        );
    }

    #[test]
    fn cimd_bounds() {
        let mut errs = Vec::new();
        let p = validate_cimd(&RawCimd::default(), &mut errs);
        assert!(errs.is_empty() && p.enabled && !p.dangerously_allow_loopback_for_development);
        let raw = RawCimd {
            cache_min_secs: 10_000,
            cache_max_secs: 100_000,
            fetches_per_minute: 0,
            fetches_per_minute_per_ip: 0,
            known_fetches_per_minute: 0,
            fetch_timeout_secs: 0,
            ..RawCimd::default()
        };
        validate_cimd(&raw, &mut errs);
        assert_eq!(errs.len(), 5, "{errs:?}");
    }

    fn reg(toml_text: &str) -> (RegistrationPolicy, Vec<String>) {
        let raw: RawRegistration = toml::from_str(toml_text).unwrap();
        let mut errs = Vec::new();
        let p = validate_registration(&raw, &std::collections::HashMap::new(), &mut errs);
        (p, errs)
    }

    #[test]
    fn registration_defaults_to_open_with_a_day_to_finish() {
        let (p, errs) = reg("");
        assert!(errs.is_empty(), "{errs:?}");
        assert!(matches!(p.mode, RegistrationMode::Open));
        assert_eq!(p.unused_client_ttl_secs, 86_400);
    }

    #[test]
    fn never_used_registration_budgets_default_and_bounds() {
        let (p, _) = reg("");
        assert_eq!(p.unused, UnusedLimits::default());
        let (p, errs) = reg(
            "max_unused_per_source = 10\nmax_unused_bytes_per_source = 65536\nmax_unused = 100\nmax_unused_bytes = 1048576",
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            p.unused,
            UnusedLimits {
                per_source: 10,
                per_source_bytes: 65_536,
                total: 100,
                total_bytes: 1_048_576,
            }
        );
        for (bad, needle) in [
            ("max_unused = 0", "max_unused:"),
            (
                "max_unused = 10\nmax_unused_per_source = 11",
                "max_unused_per_source",
            ),
            (
                "max_unused_bytes_per_source = 1000",
                "max_unused_bytes_per_source",
            ),
            (
                "max_unused_bytes = 100000\nmax_unused_bytes_per_source = 200000",
                "max_unused_bytes_per_source",
            ),
        ] {
            let (_, errs) = reg(bad);
            assert!(errs.iter().any(|e| e.contains(needle)), "{bad}: {errs:?}");
        }
    }

    #[test]
    fn initial_access_token_must_be_long_and_compares_exactly() {
        let (_, errs) = reg("policy = \"initial_access_token\"\ninitial_access_token = \"short\"");
        assert!(errs.iter().any(|e| e.contains("at least 32")), "{errs:?}");
        let (_, errs) = reg("policy = \"initial_access_token\"");
        assert!(errs.iter().any(|e| e.contains("required")), "{errs:?}");
        let t = "a".repeat(40);
        let (p, errs) = reg(&format!(
            "policy = \"initial_access_token\"\ninitial_access_token = \"{t}\""
        ));
        assert!(errs.is_empty(), "{errs:?}");
        assert!(p.mode.token_matches(&t));
        assert!(!p.mode.token_matches(&"a".repeat(39)));
        assert!(!p.mode.token_matches(""));
        assert!(!format!("{p:?}").contains(&t), "the token is never printed");
        let (_, errs) = reg(&format!(
            "policy = \"initial_access_token\"\ninitial_access_token = \" {t}\""
        ));
        assert!(errs.iter().any(|e| e.contains("whitespace")), "{errs:?}");
    }

    #[test]
    fn token_given_with_open_policy_is_a_mistake() {
        let (_, errs) = reg(&format!("initial_access_token = \"{}\"", "b".repeat(40)));
        assert!(
            errs.iter().any(|e| e.contains("only used with")),
            "{errs:?}"
        );
        let (_, errs) = reg("policy = \"invite_only\"");
        assert!(errs.iter().any(|e| e.contains("registration.policy")));
    }
}
