//! Token formats and the refresh-rotation rule, without I/O.
//!
//! Tokens are opaque random strings with a type prefix (so secret scanners and our own
//! log checks recognise them) and are stored only as SHA-256 hashes. A refresh token names its
//! family: `mcprt_<family>.<secret>`. Rotation: the current token yields a new one and
//! becomes "previous"; the previous one is honoured only inside a short grace window (a client
//! that retried, or refreshed from two egress IPs); any older token is reuse and revokes the
//! whole family (OAuth 2.1 §4.3.1, RFC 9700 §4.14.2).

use serde::{Deserialize, Serialize};

use crate::clock::UnixTime;
use crate::crypto::{self, CryptoError};
use crate::ids::{AccessToken, AuthCode, ClientId, ClientSecret, FamilyId, RefreshToken, UserId};
use crate::oauth::scope::ScopeSet;

/// Prefix of access tokens.
pub const ACCESS_PREFIX: &str = "mcpat_";
/// Prefix of refresh tokens.
pub const REFRESH_PREFIX: &str = "mcprt_";
/// Prefix of tokens given to exchange-mode backends.
pub const BACKEND_PREFIX: &str = "mcpbt_";
/// Prefix of authorization codes.
pub const CODE_PREFIX: &str = "mcpac_";
/// Prefix of generated client ids (never `https://`, which would read as a metadata URL).
pub const CLIENT_PREFIX: &str = "mcpc_";
/// Prefix of client secrets.
pub const CLIENT_SECRET_PREFIX: &str = "mcpc_secret_";

/// A new access token.
pub fn new_access_token() -> Result<AccessToken, CryptoError> {
    Ok(AccessToken::new(format!(
        "{ACCESS_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// A new backend token.
pub fn new_backend_token() -> Result<crate::ids::BackendToken, CryptoError> {
    Ok(crate::ids::BackendToken::new(format!(
        "{BACKEND_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// A new authorization code.
pub fn new_code() -> Result<AuthCode, CryptoError> {
    Ok(AuthCode::new(format!(
        "{CODE_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// A new family id.
pub fn new_family_id() -> Result<FamilyId, CryptoError> {
    Ok(FamilyId::new(
        crypto::b64url(&crypto::random_bytes::<16>()?),
    ))
}

/// A new refresh token in `family`.
pub fn new_refresh_token(family: &FamilyId) -> Result<RefreshToken, CryptoError> {
    Ok(RefreshToken::new(format!(
        "{REFRESH_PREFIX}{}.{}",
        family.as_str(),
        crypto::random_token()?
    )))
}

/// The family a refresh token names, if it is well-formed.
pub fn refresh_family(token: &RefreshToken) -> Option<FamilyId> {
    let rest = token.secret().strip_prefix(REFRESH_PREFIX)?;
    let (family, secret) = rest.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (ok(family, 22) && ok(secret, 43)).then(|| FamilyId::new(family))
}

/// A new client id.
pub fn new_client_id() -> Result<ClientId, CryptoError> {
    Ok(ClientId::new(format!(
        "{CLIENT_PREFIX}{}",
        crypto::b64url(&crypto::random_bytes::<16>()?)
    )))
}

/// A new client secret.
pub fn new_client_secret() -> Result<ClientSecret, CryptoError> {
    Ok(ClientSecret::new(format!(
        "{CLIENT_SECRET_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// One authorization's refresh-token family, as stored (`store::records` re-exports it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyRecord {
    /// Id (embedded in its refresh tokens).
    pub family_id: FamilyId,
    /// The person.
    pub user_id: UserId,
    /// The client.
    pub client_id: ClientId,
    /// Scopes.
    pub scopes: ScopeSet,
    /// Audience.
    pub resource: String,
    /// Hash of the refresh token that is currently valid (a list for older records).
    pub current: Vec<String>,
    /// Hash of the immediately previous token, honoured until `rotated_at + grace`.
    pub previous: Option<String>,
    /// Hashes of older tokens of this family (bounded): presenting one is reuse. A token
    /// that was never issued is merely unknown and changes nothing.
    #[serde(default)]
    pub retired: Vec<String>,
    /// The current token, sealed (AES-256-GCM, token-encryption key, family id as associated
    /// data), kept for replays of `previous` inside the grace window.
    #[serde(default)]
    pub replay: Option<String>,
    /// When `previous` was replaced.
    pub rotated_at: UnixTime,
    /// When the family started.
    pub created_at: UnixTime,
    /// Revoked families stay as tombstones until they expire, so reuse is still recognised.
    pub revoked: bool,
}

/// What presenting a refresh token means for its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshDecision {
    /// The current token: rotate (mint the next generation).
    Rotate,
    /// The immediately previous token inside the grace window: a duplicate of the request
    /// that rotated it (a retry, or the same client refreshing from two places). It gets the
    /// same next-generation token again, so a generation is minted exactly once.
    Replay,
    /// A token this family issued earlier (or the previous one too late): revoke the family.
    Reuse,
    /// A well-formed token this family never issued (a guess or a forgery): refuse, change
    /// nothing, so knowing a family id is not enough to log its owner out.
    Unknown,
    /// The family is already revoked.
    Revoked,
}

/// Decides what a presented refresh token (by hash) does to its family.
pub fn decide(
    family: &FamilyRecord,
    presented_hash: &str,
    now: UnixTime,
    grace_secs: u64,
) -> RefreshDecision {
    if family.revoked {
        return RefreshDecision::Revoked;
    }
    let is = |h: &String| crypto::ct_eq(h.as_bytes(), presented_hash.as_bytes());
    if family.current.iter().any(is) {
        return RefreshDecision::Rotate;
    }
    if family.previous.as_ref().is_some_and(is) {
        return if now.since(family.rotated_at) <= grace_secs && family.replay.is_some() {
            RefreshDecision::Replay
        } else {
            RefreshDecision::Reuse
        };
    }
    if family.retired.iter().any(is) {
        return RefreshDecision::Reuse;
    }
    RefreshDecision::Unknown
}

/// How many retired token hashes a family remembers for reuse detection.
const MAX_RETIRED: usize = 64;

/// The family after a decision. For `Rotate`, `new_hash` is the next token's hash and
/// `sealed_next` that token sealed, kept for replays inside the grace window.
pub fn apply(
    family: &FamilyRecord,
    decision: RefreshDecision,
    presented_hash: &str,
    new_hash: String,
    sealed_next: Option<String>,
    now: UnixTime,
) -> FamilyRecord {
    let mut next = family.clone();
    match decision {
        RefreshDecision::Rotate => {
            // The old previous token retires: presenting it later is reuse.
            next.retired.extend(next.previous.take());
            next.retired.extend(
                next.current
                    .iter()
                    .filter(|h| h.as_str() != presented_hash)
                    .cloned(),
            );
            let excess = next.retired.len().saturating_sub(MAX_RETIRED);
            next.retired.drain(..excess);
            next.previous = Some(presented_hash.to_owned());
            next.current = vec![new_hash];
            next.replay = sealed_next;
            next.rotated_at = now;
        }
        RefreshDecision::Reuse => {
            next.revoked = true;
            next.replay = None;
        }
        RefreshDecision::Replay | RefreshDecision::Revoked | RefreshDecision::Unknown => {}
    }
    next
}

/// RFC 6749 §5.1 token response. Its `Debug` shows no token.
#[derive(Serialize)]
pub struct TokenResponse {
    /// The access token.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds.
    pub expires_in: u64,
    /// The refresh token (absent for clients without the refresh grant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Granted scopes.
    pub scope: String,
}

impl std::fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResponse")
            .field("access_token", &"[redacted]")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "[redacted]"),
            )
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family() -> FamilyRecord {
        FamilyRecord {
            family_id: FamilyId::new("f"),
            user_id: UserId::github(1),
            client_id: ClientId::new("c"),
            scopes: ScopeSet::default(),
            resource: "r".into(),
            current: vec!["h1".into()],
            previous: None,
            retired: Vec::new(),
            replay: None,
            rotated_at: UnixTime(100),
            created_at: UnixTime(100),
            revoked: false,
        }
    }

    fn rotate(f: &FamilyRecord, from: &str, to: &str, at: u64) -> FamilyRecord {
        apply(
            f,
            RefreshDecision::Rotate,
            from,
            to.into(),
            Some(format!("sealed-{to}")),
            UnixTime(at),
        )
    }

    #[test]
    fn current_rotates_previous_in_grace_replays_older_is_reuse() {
        let f0 = family();
        assert_eq!(
            decide(&f0, "h1", UnixTime(200), 30),
            RefreshDecision::Rotate
        );
        let f1 = rotate(&f0, "h1", "h2", 200);
        assert_eq!(
            decide(&f1, "h2", UnixTime(201), 30),
            RefreshDecision::Rotate
        );
        assert_eq!(
            decide(&f1, "h1", UnixTime(230), 30),
            RefreshDecision::Replay
        );
        assert_eq!(
            apply(
                &f1,
                RefreshDecision::Replay,
                "h1",
                String::new(),
                None,
                UnixTime(230)
            ),
            f1,
            "a replay mints nothing"
        );
        assert_eq!(decide(&f1, "h1", UnixTime(231), 30), RefreshDecision::Reuse);
        let f2 = rotate(&f1, "h2", "h3", 240);
        // h1 is now two generations old: reuse even inside any window.
        assert_eq!(decide(&f2, "h1", UnixTime(241), 30), RefreshDecision::Reuse);
        let dead = apply(
            &f2,
            RefreshDecision::Reuse,
            "h1",
            String::new(),
            None,
            UnixTime(241),
        );
        assert!(dead.revoked && dead.replay.is_none());
        assert_eq!(
            decide(&dead, "h3", UnixTime(242), 30),
            RefreshDecision::Revoked
        );
    }

    #[test]
    fn forged_token_for_a_known_family_changes_nothing() {
        let f = rotate(&family(), "h1", "h2", 200);
        assert_eq!(
            decide(&f, "never-issued", UnixTime(201), 30),
            RefreshDecision::Unknown
        );
        assert_eq!(
            apply(
                &f,
                RefreshDecision::Unknown,
                "never-issued",
                String::new(),
                None,
                UnixTime(201)
            ),
            f
        );
    }

    #[test]
    fn retired_list_is_bounded() {
        let mut f = family();
        for i in 0..100 {
            let cur = f.current[0].clone();
            f = rotate(&f, &cur, &format!("t{i}"), 200 + i);
        }
        assert!(f.retired.len() <= MAX_RETIRED);
        assert_eq!(decide(&f, "t50", UnixTime(400), 30), RefreshDecision::Reuse);
    }

    #[test]
    fn token_response_debug_is_redacted() {
        let r = TokenResponse {
            access_token: "mcpat_secret".into(),
            token_type: "Bearer",
            expires_in: 1,
            refresh_token: Some("mcprt_secret".into()),
            scope: String::new(),
        };
        let d = format!("{r:?}");
        assert!(!d.contains("secret"), "{d}");
    }

    #[test]
    fn refresh_token_names_its_family() {
        let fam = new_family_id().unwrap();
        let t = new_refresh_token(&fam).unwrap();
        assert_eq!(refresh_family(&t), Some(fam));
        assert_eq!(refresh_family(&RefreshToken::new("mcprt_x.y")), None);
        assert_eq!(refresh_family(&RefreshToken::new("gho_abc")), None);
    }
}
