//! Binding: consent = real access. What the person approves and what the backend acts with.
//!
//! GitHub does not give one OAuth App a separate token scope per use: a person who once
//! authorized the app for a broader set can have a later, narrower request silently completed
//! with everything they authorized ("this step of the flow will automatically complete with the
//! set of scopes the user has authorized for the application", GitHub's "Authorizing OAuth
//! apps"), and the proxy keeps one GitHub grant per person for all of their agents. So a
//! per-client subset on the consent page could not be made true. Every consent is therefore for
//! the **whole configured set** (`[github] scopes`): the consent page lists it, the stored
//! consent, codes and proxy tokens carry it, and the token response says so (RFC 6749 §3.3:
//! the server may issue a scope other than requested and then says which).
//!
//! And whatever GitHub does, a GitHub token is stored or handed to the backend only with a
//! [`WithinConsent`]: the scopes GitHub reported for it, GitHub's implied scopes expanded, are
//! all covered by what the person consented to. Only [`check_github_token`] makes one.
//!
//! Pure: no I/O. The flows that store or hand out GitHub tokens call in here.

use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::scope::ScopeSet;

/// Scopes GitHub treats as included in a broader one ("Scopes for OAuth apps": `repo` covers
/// `repo:status`, `public_repo`, …; `user` covers `read:user`, `user:email`, `user:follow`),
/// transitively expanded.
fn implied(scope: &str) -> &'static [&'static str] {
    match scope {
        "repo" => &[
            "repo:status",
            "repo_deployment",
            "public_repo",
            "repo:invite",
            "security_events",
        ],
        "admin:repo_hook" => &["write:repo_hook", "read:repo_hook"],
        "write:repo_hook" => &["read:repo_hook"],
        "admin:org" => &["write:org", "read:org"],
        "write:org" => &["read:org"],
        "admin:public_key" => &["write:public_key", "read:public_key"],
        "write:public_key" => &["read:public_key"],
        "admin:gpg_key" => &["write:gpg_key", "read:gpg_key"],
        "write:gpg_key" => &["read:gpg_key"],
        "user" => &["read:user", "user:email", "user:follow"],
        "project" => &["read:project"],
        "write:packages" => &["read:packages"],
        "admin:enterprise" => &[
            "manage_runners:enterprise",
            "manage_billing:enterprise",
            "read:enterprise",
        ],
        _ => &[],
    }
}

/// GitHub's OAuth app scopes ("Scopes for OAuth apps"), so a tool permission can never be
/// mistaken for one.
const GITHUB_SCOPES: &[&str] = &[
    "repo",
    "repo:status",
    "repo_deployment",
    "public_repo",
    "repo:invite",
    "security_events",
    "admin:repo_hook",
    "write:repo_hook",
    "read:repo_hook",
    "admin:org",
    "write:org",
    "read:org",
    "admin:public_key",
    "write:public_key",
    "read:public_key",
    "admin:org_hook",
    "gist",
    "notifications",
    "user",
    "read:user",
    "user:email",
    "user:follow",
    "project",
    "read:project",
    "delete_repo",
    "write:packages",
    "read:packages",
    "delete:packages",
    "admin:gpg_key",
    "write:gpg_key",
    "read:gpg_key",
    "codespace",
    "workflow",
    "admin:enterprise",
    "manage_runners:enterprise",
    "manage_billing:enterprise",
    "read:enterprise",
    "audit_log",
    "read:audit_log",
    "copilot",
    "manage_billing:copilot",
    "admin:ssh_signing_key",
    "write:ssh_signing_key",
    "read:ssh_signing_key",
];

/// Whether `scope` is one of GitHub's OAuth scopes.
pub fn is_github_scope(scope: &str) -> bool {
    GITHUB_SCOPES.contains(&scope)
}

/// Whether `scope` is within `consented`: named there, or implied by a scope named there.
fn covered(consented: &ScopeSet, scope: &str) -> bool {
    consented
        .iter()
        .any(|c| c == scope || implied(c).contains(&scope))
}

/// The scopes of one consent: always the whole configured set.
pub fn consent_set(configured: &ScopeSet) -> ScopeSet {
    configured.clone()
}

/// The scopes an authorization request gets. Every scope it names must be one of the
/// configured `[github] scopes` or one of the tool permissions `permissions` (the `step_up`
/// scopes of `[[policy]]` that are not GitHub scopes; otherwise `invalid_scope`). What it gets
/// is the whole GitHub set, whatever subset it named (see the module docs), plus the tool
/// permissions it named. A tool permission adds no GitHub access: it only lets the gateway
/// forward the calls a `step_up` rule holds back, so it can be per client and still true.
pub fn for_authorization(
    param: Option<&str>,
    configured: &ScopeSet,
    permissions: &ScopeSet,
) -> Result<ScopeSet, OAuthError> {
    let mut granted = consent_set(configured);
    if let Some(s) = param {
        let asked = ScopeSet::parse(s)?;
        for scope in asked.iter() {
            if permissions.contains(scope) {
                granted.insert(scope);
            } else if !configured.contains(scope) {
                return Err(OAuthError::new(
                    ErrorCode::InvalidScope,
                    "a requested scope is not one of this server's GitHub scopes or tool permissions",
                ));
            }
        }
    }
    Ok(granted)
}

/// The scopes a refreshed access token gets: a `scope` beyond the family's is
/// `invalid_scope` (RFC 6749 §6); a narrower one still gets the family's whole set, because
/// the backend would still act with the person's whole GitHub grant.
pub fn at_refresh(param: Option<&str>, family: &ScopeSet) -> Result<ScopeSet, OAuthError> {
    if let Some(s) = param {
        let asked = ScopeSet::parse(s)?;
        if !family.covers(&asked) {
            return Err(OAuthError::new(
                ErrorCode::InvalidScope,
                "scope exceeds the original grant",
            ));
        }
    }
    Ok(family.clone())
}

/// The `scope` a registration records and answers with (RFC 7591 §3.2.1: the server may
/// replace a requested value and returns what it registered): the whole configured set for a
/// client that named any scope. A scope outside the set was refused before
/// (`invalid_client_metadata`).
pub fn registered(asked: Option<&ScopeSet>, configured: &ScopeSet) -> Option<ScopeSet> {
    asked.map(|_| consent_set(configured))
}

/// GitHub's scope list as it reports it: comma-separated in token responses, `", "` in
/// `X-OAuth-Scopes`.
pub fn parse_reported(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Proof that GitHub reported, for one token, only scopes the person consented to. Only
/// [`check_github_token`] makes one; storing a GitHub grant takes it by value.
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::consent_scope::WithinConsent;
/// // Private field: a witness cannot be built outside its module.
/// let forged = WithinConsent { reported: vec!["repo".to_owned()] };
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::consent_scope::WithinConsent;
/// fn reported(w: &WithinConsent) -> &[String] {
///     w.reported()
/// }
/// ```
#[derive(Debug)]
pub struct WithinConsent {
    reported: Vec<String>,
}

impl WithinConsent {
    /// The scopes GitHub reported for the token (what the account page shows).
    pub fn reported(&self) -> &[String] {
        &self.reported
    }
}

/// A token GitHub issued with more than the person consented to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("GitHub reported scopes beyond the consent: {}", excess.join(", "))]
pub struct ExceedsConsent {
    /// The reported scopes the consent does not cover.
    pub excess: Vec<String>,
}

/// Checks the scopes GitHub reported for a token against the consent. GitHub App user tokens
/// report none (fine-grained permissions instead), which is within any consent.
pub fn check_github_token(
    consented: &ScopeSet,
    reported: &[String],
) -> Result<WithinConsent, ExceedsConsent> {
    let excess: Vec<String> = reported
        .iter()
        .filter(|s| !covered(consented, s))
        .cloned()
        .collect();
    if excess.is_empty() {
        Ok(WithinConsent {
            reported: reported.to_vec(),
        })
    } else {
        Err(ExceedsConsent { excess })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> ScopeSet {
        ScopeSet::parse(s).unwrap()
    }

    fn v(s: &str) -> Vec<String> {
        parse_reported(s)
    }

    #[test]
    fn a_tool_permission_is_granted_only_when_named_and_never_mistaken_for_github_access() {
        let configured = ScopeSet::parse("read:user repo").unwrap();
        let permissions = ScopeSet::parse("tools:branches").unwrap();
        assert_eq!(
            for_authorization(None, &configured, &permissions).unwrap(),
            configured,
            "not named: not granted"
        );
        assert_eq!(
            for_authorization(Some("read:user tools:branches"), &configured, &permissions).unwrap(),
            ScopeSet::parse("read:user repo tools:branches").unwrap()
        );
        let e = for_authorization(Some("tools:other"), &configured, &permissions).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidScope);
        assert!(is_github_scope("repo") && is_github_scope("read:org"));
        assert!(!is_github_scope("tools:branches"));
    }

    #[test]
    fn a_subset_request_consents_to_the_whole_configured_set() {
        let configured = set("read:user repo");
        assert_eq!(
            for_authorization(Some("read:user"), &configured, &ScopeSet::default()).unwrap(),
            configured
        );
        assert_eq!(
            for_authorization(None, &configured, &ScopeSet::default()).unwrap(),
            configured
        );
        assert_eq!(
            for_authorization(Some(""), &configured, &ScopeSet::default()).unwrap(),
            configured
        );
    }

    #[test]
    fn scope_outside_the_configured_set_is_invalid_scope() {
        let configured = set("read:user repo");
        for asked in ["admin:org", "read:user delete_repo", "public_repo"] {
            let e = for_authorization(Some(asked), &configured, &ScopeSet::default()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidScope, "{asked}");
        }
        let e = for_authorization(Some("a\"b"), &configured, &ScopeSet::default()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidScope);
    }

    #[test]
    fn narrowing_at_refresh_keeps_the_family_set_and_widening_is_invalid_scope() {
        let family = set("read:user repo");
        assert_eq!(at_refresh(Some("read:user"), &family).unwrap(), family);
        assert_eq!(at_refresh(None, &family).unwrap(), family);
        let e = at_refresh(Some("read:user workflow"), &family).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidScope);
    }

    #[test]
    fn registration_records_the_whole_set_when_it_named_any() {
        let configured = set("read:user repo");
        assert_eq!(
            registered(Some(&set("read:user")), &configured),
            Some(configured.clone())
        );
        assert_eq!(registered(None, &configured), None);
    }

    #[test]
    fn github_token_with_a_scope_beyond_the_consent_is_refused() {
        let e = check_github_token(&set("read:user"), &v("read:user,repo")).unwrap_err();
        assert_eq!(e.excess, vec!["repo".to_owned()]);
        // A broader scope than the consented narrower one exceeds it.
        let e =
            check_github_token(&set("public_repo read:user"), &v("repo,read:user")).unwrap_err();
        assert_eq!(e.excess, vec!["repo".to_owned()]);
        let e = check_github_token(&set("read:user"), &v("user")).unwrap_err();
        assert_eq!(e.excess, vec!["user".to_owned()]);
    }

    #[test]
    fn implied_and_fewer_scopes_are_within_the_consent() {
        let consented = set("user repo admin:org");
        for reported in [
            "user,repo,admin:org",
            "read:user,public_repo",
            "user:email",
            "read:org",
            "repo:status,security_events",
            "",
        ] {
            let w = check_github_token(&consented, &v(reported)).unwrap();
            assert_eq!(w.reported(), v(reported).as_slice());
        }
    }

    #[test]
    fn github_app_tokens_report_no_scopes_and_pass() {
        assert!(check_github_token(&set("read:user"), &[]).is_ok());
        assert!(check_github_token(&ScopeSet::default(), &[]).is_ok());
    }

    #[test]
    fn reported_scopes_parse_both_github_separators() {
        assert_eq!(v("repo,gist"), vec!["repo", "gist"]);
        assert_eq!(v("read:user, repo"), vec!["read:user", "repo"]);
        assert!(v(" , ").is_empty());
    }
}
