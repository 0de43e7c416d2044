//! `[tokens]`: how long the tokens and codes this server issues live, independent of GitHub's,
//! and how refresh rotation treats a superseded token (`oauth::grant::decide`).

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::ids::ClientId;
use crate::oauth::grant::{RefreshRules, ReuseMode};

/// `[tokens]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTokens {
    access_token_ttl_secs: u64,
    refresh_token_idle_ttl_secs: u64,
    refresh_token_max_lifetime_secs: u64,
    refresh_grace_secs: u64,
    refresh_reuse: String,
    /// Unset: the default, shortened to the family's lifetime if that is shorter (a
    /// configuration that shortened the lifetime keeps starting).
    refresh_stale_secs: Option<u64>,
    /// Unset: the default, shortened to `refresh_stale_secs` if that is shorter.
    refresh_branch_idle_secs: Option<u64>,
    refresh_max_branches: u64,
    refresh_strict_clients: Vec<String>,
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
            refresh_reuse: d.refresh_reuse.name().to_owned(),
            refresh_stale_secs: None,
            refresh_branch_idle_secs: None,
            refresh_max_branches: d.refresh_max_branches as u64,
            refresh_strict_clients: Vec::new(),
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
    /// What a superseded refresh token of the family's own client means.
    pub refresh_reuse: ReuseMode,
    /// `branch`: a token superseded at most this long ago may start a branch.
    pub refresh_stale_secs: u64,
    /// `branch`: a branch unused this long no longer counts against `refresh_max_branches`.
    pub refresh_branch_idle_secs: u64,
    /// `branch`: live branches a family may have.
    pub refresh_max_branches: usize,
    /// Clients whose families follow `strict` whatever `refresh_reuse` says (exact client
    /// ids: configured clients and metadata-document URLs, whose ids are stable): clients
    /// known to keep one process per credential, for which a stolen token's first collision
    /// should revoke the family and alert rather than branch.
    pub refresh_strict_clients: BTreeSet<String>,
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
            refresh_reuse: ReuseMode::Branch,
            refresh_stale_secs: 7 * 86_400,
            refresh_branch_idle_secs: 86_400,
            refresh_max_branches: 8,
            refresh_strict_clients: BTreeSet::new(),
            code_ttl_secs: 60,
        }
    }
}

impl TokenPolicy {
    /// Validates `[tokens]`, pushing one readable line per problem into `errs`.
    pub fn from_raw(t: &RawTokens, errs: &mut Vec<String>) -> TokenPolicy {
        let refresh_reuse = match t.refresh_reuse.as_str() {
            "branch" => ReuseMode::Branch,
            "strict" => ReuseMode::Strict,
            _ => {
                errs.push("tokens.refresh_reuse: \"branch\" or \"strict\"".to_owned());
                ReuseMode::Strict
            }
        };
        let d = TokenPolicy::default();
        let refresh_stale_secs = t.refresh_stale_secs.unwrap_or(
            d.refresh_stale_secs
                .min(t.refresh_token_max_lifetime_secs)
                .max(t.refresh_grace_secs),
        );
        let refresh_branch_idle_secs = t
            .refresh_branch_idle_secs
            .unwrap_or(d.refresh_branch_idle_secs.min(refresh_stale_secs));
        let tokens = TokenPolicy {
            access_token_ttl_secs: t.access_token_ttl_secs,
            refresh_idle_ttl_secs: t.refresh_token_idle_ttl_secs,
            refresh_max_lifetime_secs: t.refresh_token_max_lifetime_secs,
            refresh_grace_secs: t.refresh_grace_secs,
            refresh_reuse,
            refresh_stale_secs,
            refresh_branch_idle_secs,
            refresh_max_branches: usize::try_from(t.refresh_max_branches).unwrap_or(usize::MAX),
            refresh_strict_clients: t.refresh_strict_clients.iter().cloned().collect(),
            code_ttl_secs: t.code_ttl_secs,
        };
        if t.refresh_strict_clients
            .iter()
            .any(|c| c.is_empty() || c.trim() != c)
        {
            errs.push(
                "tokens.refresh_strict_clients: client ids, exactly as the clients use them"
                    .to_owned(),
            );
        }
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
        let stale_ok = (tokens.refresh_grace_secs..=tokens.refresh_max_lifetime_secs)
            .contains(&tokens.refresh_stale_secs);
        if !stale_ok {
            errs.push("tokens.refresh_stale_secs: at least refresh_grace_secs and at most refresh_token_max_lifetime_secs".to_owned());
        }
        // (Its default follows refresh_stale_secs: checked only once that one is right.)
        if stale_ok
            && !(tokens.refresh_grace_secs..=tokens.refresh_stale_secs)
                .contains(&tokens.refresh_branch_idle_secs)
        {
            errs.push("tokens.refresh_branch_idle_secs: at least refresh_grace_secs and at most refresh_stale_secs".to_owned());
        }
        if !(1..=64).contains(&tokens.refresh_max_branches) {
            errs.push("tokens.refresh_max_branches: between 1 and 64".to_owned());
        }
        tokens
    }

    /// The rules `oauth::grant::decide` and `apply` follow for a family of `client`: `strict`
    /// for the clients `refresh_strict_clients` lists, `refresh_reuse` for the others.
    pub fn refresh_rules_for(&self, client: &ClientId) -> RefreshRules {
        let mut rules = self.refresh_rules();
        if self.refresh_strict_clients.contains(client.as_str()) {
            rules.mode = ReuseMode::Strict;
        }
        rules
    }

    /// The rules `oauth::grant::decide` and `apply` follow under `refresh_reuse`.
    pub fn refresh_rules(&self) -> RefreshRules {
        RefreshRules {
            mode: self.refresh_reuse,
            grace_secs: self.refresh_grace_secs,
            stale_secs: self.refresh_stale_secs,
            branch_idle_secs: self.refresh_branch_idle_secs,
            max_branches: self.refresh_max_branches,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> (TokenPolicy, Vec<String>) {
        let raw: RawTokens = toml::from_str(toml_text).unwrap();
        let mut errs = Vec::new();
        (TokenPolicy::from_raw(&raw, &mut errs), errs)
    }

    #[test]
    fn refresh_reuse_defaults_to_branch_with_a_week_and_eight_branches() {
        let (t, errs) = parse("");
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            t.refresh_rules(),
            RefreshRules {
                mode: ReuseMode::Branch,
                grace_secs: 30,
                stale_secs: 604_800,
                branch_idle_secs: 86_400,
                max_branches: 8,
            }
        );
        assert_eq!(
            parse("refresh_reuse = \"strict\"").0.refresh_reuse,
            ReuseMode::Strict
        );
        // A listed client is strict whatever the mode; the others follow it.
        let (t, errs) = parse("refresh_strict_clients = [\"vscode\", \"https://app.example/c\"]");
        assert!(errs.is_empty(), "{errs:?}");
        for (client, mode) in [
            ("vscode", ReuseMode::Strict),
            ("https://app.example/c", ReuseMode::Strict),
            ("mcpc_other", ReuseMode::Branch),
            ("VSCODE", ReuseMode::Branch),
        ] {
            assert_eq!(
                t.refresh_rules_for(&ClientId::new(client)).mode,
                mode,
                "{client}"
            );
        }
        // A lifetime shorter than the default stale window shortens the defaults with it.
        let (t, errs) =
            parse("refresh_token_idle_ttl_secs = 3600\nrefresh_token_max_lifetime_secs = 7200");
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            (t.refresh_stale_secs, t.refresh_branch_idle_secs),
            (7200, 7200)
        );
    }

    #[test]
    fn refresh_reuse_keys_out_of_bounds_are_readable_errors() {
        for (text, key) in [
            ("refresh_reuse = \"lenient\"", "tokens.refresh_reuse"),
            ("refresh_stale_secs = 10", "tokens.refresh_stale_secs"),
            ("refresh_stale_secs = 99999999", "tokens.refresh_stale_secs"),
            (
                "refresh_branch_idle_secs = 5",
                "tokens.refresh_branch_idle_secs",
            ),
            (
                "refresh_stale_secs = 3600\nrefresh_branch_idle_secs = 7200",
                "tokens.refresh_branch_idle_secs",
            ),
            ("refresh_max_branches = 0", "tokens.refresh_max_branches"),
            ("refresh_max_branches = 65", "tokens.refresh_max_branches"),
            (
                "refresh_strict_clients = [\"\"]",
                "tokens.refresh_strict_clients",
            ),
            (
                "refresh_strict_clients = [\" vscode\"]",
                "tokens.refresh_strict_clients",
            ),
        ] {
            let (_, errs) = parse(text);
            assert!(
                errs.len() == 1 && errs[0].starts_with(key),
                "{text}: {errs:?}"
            );
        }
    }
}
