//! Each person's GitHub grant, sealed with AES-256-GCM under the token-encryption key with
//! the record id as associated data. GitHub App tokens that expire are refreshed once per
//! grant at a time (single-flight: GitHub rotates the refresh token on use, so two concurrent
//! refreshes would kill the grant) and the result is saved with a compare-and-swap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::client::{GitHubClient, GitHubError, GitHubTokens, GitHubUser, RevocationFailed};
use crate::audit::{Audit, AuditEvent};
use crate::bindings::admission::Admitted;
use crate::bindings::consent_scope::{self, WithinConsent};
use crate::clock::{SharedClock, UnixTime};
use crate::crypto::{self, Key};
use crate::ids::{GitHubRefreshToken, GitHubToken, UserId};
use crate::oauth::scope::ScopeSet;
use crate::store::records::GrantRecord;
use crate::store::{Held, SharedStore, StoreError, grants};

/// Refresh this long before expiry.
const REFRESH_MARGIN_SECS: u64 = 120;

/// What can go wrong using a grant.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// No grant stored.
    #[error("no GitHub account connected")]
    Missing,
    /// GitHub stopped honouring it.
    #[error("GitHub access stopped working")]
    Broken,
    /// GitHub could not be reached (transient; the grant is kept).
    #[error(transparent)]
    GitHub(#[from] GitHubError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Sealing or opening failed.
    #[error("grant could not be opened")]
    Crypto,
}

/// What forgetting a person's grant did at GitHub. Forgetting it here never depends on GitHub;
/// revoking it there can fail, and then the person must be told to revoke the app at GitHub
/// themselves (GitHub would otherwise skip its consent screen on the next sign-in and hand a
/// new token to whoever asks as this person).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitHubRevocation {
    /// No grant was stored: nothing to revoke.
    NoGrant,
    /// GitHub confirmed the revocation.
    Revoked,
    /// The stored token could not be opened: GitHub was not asked.
    TokenUnreadable,
    /// GitHub did not confirm.
    Failed(RevocationFailed),
}

impl GitHubRevocation {
    /// The word the audit trail and the admin API show.
    pub fn as_str(self) -> &'static str {
        match self {
            GitHubRevocation::NoGrant => "no_grant",
            GitHubRevocation::Revoked => "revoked",
            GitHubRevocation::TokenUnreadable => "token_unreadable",
            GitHubRevocation::Failed(RevocationFailed::Refused(_)) => "refused_by_github",
            GitHubRevocation::Failed(RevocationFailed::Unreachable) => "github_unreachable",
        }
    }

    /// Whether a grant was stored and GitHub did not confirm revoking it.
    pub fn failed(self) -> bool {
        matches!(
            self,
            GitHubRevocation::TokenUnreadable | GitHubRevocation::Failed(_)
        )
    }
}

/// Whether a person's grant can be used without calling GitHub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantStatus {
    /// None stored.
    Missing,
    /// Marked broken.
    Broken,
    /// Present and not known to be broken.
    Usable,
}

/// The grant store.
#[derive(Clone)]
pub struct Grants {
    store: SharedStore,
    key: Key,
    github: GitHubClient,
    clock: SharedClock,
    audit: Audit,
    in_flight: Arc<Mutex<HashMap<UserId, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Removes a person's single-flight lock once nobody else waits on it, so the map does not
/// grow with every person who ever refreshed.
struct PruneOnDrop<'a> {
    map: &'a Mutex<HashMap<UserId, Arc<tokio::sync::Mutex<()>>>>,
    user: &'a UserId,
}

impl Drop for PruneOnDrop<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.map.lock()
            && m.get(self.user).is_some_and(|l| Arc::strong_count(l) <= 2)
        {
            m.remove(self.user);
        }
    }
}

fn aad(user: &UserId, what: &str) -> Vec<u8> {
    format!("mcp-oauth-proxy/grant/{what}/{}", user.as_str()).into_bytes()
}

impl Grants {
    /// New store over `store`.
    pub fn new(
        store: SharedStore,
        key: Key,
        github: GitHubClient,
        clock: SharedClock,
        audit: Audit,
    ) -> Grants {
        Grants {
            store,
            key,
            github,
            clock,
            audit,
            in_flight: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn seal(&self, user: &UserId, what: &str, secret: &str) -> Result<String, GrantError> {
        Ok(crypto::b64url(
            &self
                .key
                .seal(secret.as_bytes(), &aad(user, what))
                .map_err(|_| GrantError::Crypto)?,
        ))
    }

    fn open(&self, user: &UserId, what: &str, sealed: &str) -> Result<String, GrantError> {
        let bytes = crypto::b64url_decode(sealed).ok_or(GrantError::Crypto)?;
        let plain = self
            .key
            .open(&bytes, &aad(user, what))
            .map_err(|_| GrantError::Crypto)?;
        String::from_utf8(plain).map_err(|_| GrantError::Crypto)
    }

    fn record(
        &self,
        user: &UserId,
        gh: &GitHubUser,
        tokens: &GitHubTokens,
        now: UnixTime,
    ) -> Result<GrantRecord, GrantError> {
        Ok(GrantRecord {
            user_id: user.clone(),
            github_id: gh.id,
            login: gh.login(),
            sealed_token: self.seal(user, "access", tokens.access_token.secret())?,
            sealed_refresh: tokens
                .refresh_token
                .as_ref()
                .map(|r| self.seal(user, "refresh", r.secret()))
                .transpose()?,
            token_expires_at: tokens.expires_at,
            scopes: tokens.scopes.clone(),
            updated_at: now,
            broken: false,
        })
    }

    /// Stores (replaces) a person's grant after a successful GitHub sign-in of an admitted
    /// person (`who`: nobody `[access]` refused ever has a grant stored). `within` proves that
    /// GitHub reported no scope for this token beyond what the person consented to
    /// (`bindings::consent_scope`).
    pub async fn save(
        &self,
        who: &Admitted,
        gh: &GitHubUser,
        tokens: &GitHubTokens,
        within: WithinConsent,
    ) -> Result<(), GrantError> {
        let user = who.user_id();
        let mut rec = self.record(user, gh, tokens, self.clock.now())?;
        // What is stored is what was checked.
        within.reported().clone_into(&mut rec.scopes);
        grants::put(self.store.as_ref(), user, &rec).await?;
        Ok(())
    }

    /// Whether the grant is there and not known to be broken. No GitHub call.
    pub async fn status(&self, user: &UserId) -> Result<GrantStatus, GrantError> {
        let rec = grants::get(self.store.as_ref(), user).await?;
        Ok(self.status_of(rec.as_ref()))
    }

    /// The status of a record read earlier (see [`Grants::get`]), so a caller that also needs
    /// the token reads the grant once.
    pub fn status_of(&self, rec: Option<&GrantRecord>) -> GrantStatus {
        match rec {
            None => GrantStatus::Missing,
            Some(r) if r.broken => GrantStatus::Broken,
            Some(r)
                if r.token_expires_at.is_some()
                    && r.sealed_refresh.is_none()
                    && r.token_expires_at.is_some_and(|e| e <= self.clock.now()) =>
            {
                GrantStatus::Broken
            }
            Some(_) => GrantStatus::Usable,
        }
    }

    /// The access token of a record read earlier with [`Grants::get`], without reading it
    /// again; an expiring GitHub App token goes through [`Grants::access_token`] (which reads
    /// the record again under the person's refresh lock), so a refresh happens only when the
    /// caller asks for the token, i.e. after it has decided the agent may use it.
    pub async fn token_from(
        &self,
        user: &UserId,
        rec: &GrantRecord,
    ) -> Result<GitHubToken, GrantError> {
        if rec.broken {
            return Err(GrantError::Broken);
        }
        if self.needs_refresh(rec) {
            return self.access_token(user).await;
        }
        Ok(GitHubToken::new(self.open(
            user,
            "access",
            &rec.sealed_token,
        )?))
    }

    /// The stored record (no secrets in the clear).
    pub async fn get(&self, user: &UserId) -> Result<Option<GrantRecord>, GrantError> {
        Ok(grants::get(self.store.as_ref(), user).await?)
    }

    /// Forgets a person's grant here (an atomic take, so a grant stored meanwhile by a new
    /// sign-in is the one revoked) and then revokes it at GitHub with the stored token as it
    /// is: no refresh first (GitHub accepts an expired token for this), and a grant marked
    /// broken is still revoked, since GitHub may well still honour it. The one path every
    /// disconnect takes (account page, admin API); a failure is logged here and returned for
    /// the caller to audit and show.
    pub async fn forget(&self, user: &UserId) -> Result<GitHubRevocation, GrantError> {
        let Some(rec) = grants::take(self.store.as_ref(), user).await? else {
            return Ok(GitHubRevocation::NoGrant);
        };
        let token = match self.open(user, "access", &rec.sealed_token) {
            Ok(t) => GitHubToken::new(t),
            Err(e) => {
                tracing::warn!(user = user.as_str(), error = %e, "GitHub grant forgotten, but its token could not be opened: not revoked at GitHub");
                return Ok(GitHubRevocation::TokenUnreadable);
            }
        };
        Ok(match self.github.delete_grant(&token).await {
            Ok(()) => GitHubRevocation::Revoked,
            Err(f) => {
                tracing::warn!(user = user.as_str(), failure = ?f, "GitHub grant forgotten, but GitHub did not confirm revoking it");
                GitHubRevocation::Failed(f)
            }
        })
    }

    /// A usable GitHub access token for the person, refreshing an expiring GitHub App token
    /// first if needed. Concurrent callers for the same person share one refresh.
    pub async fn access_token(&self, user: &UserId) -> Result<GitHubToken, GrantError> {
        let rec = grants::get(self.store.as_ref(), user)
            .await?
            .ok_or(GrantError::Missing)?;
        if rec.broken {
            return Err(GrantError::Broken);
        }
        if !self.needs_refresh(&rec) {
            return Ok(GitHubToken::new(self.open(
                user,
                "access",
                &rec.sealed_token,
            )?));
        }
        let lock = {
            let mut map = self.in_flight.lock().map_err(|_| GrantError::Crypto)?;
            map.entry(user.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        let _prune = PruneOnDrop {
            map: &self.in_flight,
            user,
        };
        // Whoever held the lock before us may have refreshed already: read again, and hold
        // what was read: the refresh below is never repeated (GitHub rotates the refresh
        // token), so the write after it is one attempt.
        let Some(held) = grants::hold(self.store.as_ref(), user).await? else {
            return Err(GrantError::Missing);
        };
        let rec = held.value();
        if rec.broken {
            return Err(GrantError::Broken);
        }
        if !self.needs_refresh(rec) {
            return Ok(GitHubToken::new(self.open(
                user,
                "access",
                &rec.sealed_token,
            )?));
        }
        let Some(sealed_refresh) = &rec.sealed_refresh else {
            self.mark_broken_version(user, &held, "expired and no refresh token")
                .await?;
            return Err(GrantError::Broken);
        };
        let refresh = GitHubRefreshToken::new(self.open(user, "refresh", sealed_refresh)?);
        let now = self.clock.now();
        match self.github.refresh(&refresh, now).await {
            Ok(tokens) => {
                // A refresh never widens what the person consented to: GitHub reporting more
                // than the grant had is refused, revoked, and the grant marked broken.
                let consented = ScopeSet::from_list(rec.scopes.iter().cloned());
                if let Err(e) = consent_scope::check_github_token(&consented, &tokens.scopes) {
                    self.github.delete_token(&tokens.access_token).await;
                    self.mark_broken_version(user, &held, &e.to_string())
                        .await?;
                    return Err(GrantError::Broken);
                }
                let gh = GitHubUser {
                    id: rec.github_id,
                    login: rec.login.as_str().to_owned(),
                };
                let next = self.record(user, &gh, &tokens, now)?;
                if !held.swap(self.store.as_ref(), &next, None).await? {
                    // Replaced meanwhile (a new sign-in): that grant wins; ours is discarded.
                    return Err(GrantError::Broken);
                }
                // GitHub has already rotated the refresh token: keep the new one durable now,
                // even inside a batched request that would flush only at its end.
                self.store.flush().await?;
                Ok(tokens.access_token)
            }
            Err(GitHubError::Refused(_)) | Err(GitHubError::Unauthorized) => {
                self.mark_broken_version(user, &held, "GitHub refused the refresh")
                    .await?;
                Err(GrantError::Broken)
            }
            Err(e) => Err(GrantError::GitHub(e)),
        }
    }

    /// Marks a person's grant broken (GitHub refused it somewhere): agents then get a
    /// reconnect link.
    pub async fn mark_broken(&self, user: &UserId, reason: &str) -> Result<(), GrantError> {
        if let Some(held) = grants::hold(self.store.as_ref(), user).await? {
            self.mark_broken_version(user, &held, reason).await?;
        }
        Ok(())
    }

    fn needs_refresh(&self, rec: &GrantRecord) -> bool {
        rec.token_expires_at.is_some_and(|exp| {
            exp.since(self.clock.now()) < REFRESH_MARGIN_SECS || exp <= self.clock.now()
        })
    }

    async fn mark_broken_version(
        &self,
        user: &UserId,
        held: &Held<GrantRecord>,
        reason: &str,
    ) -> Result<(), GrantError> {
        if held.value().broken {
            return Ok(());
        }
        let mut broken = held.value().clone();
        broken.broken = true;
        // Only the writer that actually marked it records the event (no duplicates when
        // several requests see the refusal at once); a grant replaced meanwhile (a new
        // sign-in) is left alone.
        if held.swap(self.store.as_ref(), &broken, None).await? {
            self.audit
                .record(AuditEvent::GitHubGrantBroken {
                    user_id: user.clone(),
                    reason: reason.to_owned(),
                })
                .await?;
        }
        Ok(())
    }
}
