//! `[tokens]`: how long the tokens and codes this server issues live, independent of GitHub's.

use serde::Deserialize;

/// `[tokens]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTokens {
    access_token_ttl_secs: u64,
    refresh_token_idle_ttl_secs: u64,
    refresh_token_max_lifetime_secs: u64,
    refresh_grace_secs: u64,
    code_ttl_secs: u64,
}

impl Default for RawTokens {
    fn default() -> Self {
        let d = TokenPolicy::default();
        RawTokens {
            access_token_ttl_secs: d.access_token_ttl_secs,
            refresh_token_idle_ttl_secs: d.refresh_idle_ttl_secs,
            refresh_token_max_lifetime_secs: d.refresh_max_lifetime_secs,
            refresh_grace_secs: d.refresh_grace_secs,
            code_ttl_secs: d.code_ttl_secs,
        }
    }
}

/// Client-facing token lifetimes, independent of GitHub's.
#[derive(Debug, Clone)]
pub struct TokenPolicy {
    /// Access token lifetime.
    pub access_token_ttl_secs: u64,
    /// A refresh token family dies after this long without use.
    pub refresh_idle_ttl_secs: u64,
    /// ... and after this long regardless.
    pub refresh_max_lifetime_secs: u64,
    /// How long the immediately previous refresh token is still honoured after a rotation.
    pub refresh_grace_secs: u64,
    /// Authorization code lifetime.
    pub code_ttl_secs: u64,
}

impl Default for TokenPolicy {
    fn default() -> Self {
        TokenPolicy {
            access_token_ttl_secs: 3600,
            refresh_idle_ttl_secs: 30 * 86_400,
            refresh_max_lifetime_secs: 90 * 86_400,
            refresh_grace_secs: 30,
            code_ttl_secs: 60,
        }
    }
}

impl TokenPolicy {
    /// Validates `[tokens]`, pushing one readable line per problem into `errs`.
    pub fn from_raw(t: &RawTokens, errs: &mut Vec<String>) -> TokenPolicy {
        let tokens = TokenPolicy {
            access_token_ttl_secs: t.access_token_ttl_secs,
            refresh_idle_ttl_secs: t.refresh_token_idle_ttl_secs,
            refresh_max_lifetime_secs: t.refresh_token_max_lifetime_secs,
            refresh_grace_secs: t.refresh_grace_secs,
            code_ttl_secs: t.code_ttl_secs,
        };
        if tokens.access_token_ttl_secs < 60 || tokens.access_token_ttl_secs > 7 * 86_400 {
            errs.push("tokens.access_token_ttl_secs: between 60 and 604800".to_owned());
        }
        if tokens.code_ttl_secs < 10 || tokens.code_ttl_secs > 600 {
            errs.push("tokens.code_ttl_secs: between 10 and 600 (OAuth 2.1 recommends at most 10 minutes)".to_owned());
        }
        if tokens.refresh_grace_secs > 300 {
            errs.push("tokens.refresh_grace_secs: at most 300".to_owned());
        }
        if tokens.refresh_idle_ttl_secs > tokens.refresh_max_lifetime_secs {
            errs.push("tokens.refresh_token_idle_ttl_secs: must not exceed refresh_token_max_lifetime_secs".to_owned());
        }
        tokens
    }
}
