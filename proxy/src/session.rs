//! The proxy's own browser sessions: a random token in the `__Host-mcp-session` cookie,
//! stored as a hash with the person, the time they signed in through GitHub and how GitHub was
//! asked to run that sign-in ([`SignInKind`]), which decides whether it can satisfy a link's
//! freshness check ([`Session::fresh_for_link`]).

use serde::Deserialize;

use crate::clock::UnixTime;
use crate::cookies;
use crate::crypto::{self, CryptoError};
use crate::ids::{GitHubLogin, SessionToken, UserId};
use crate::store::records::SessionRecord;
pub use crate::store::records::SignInKind;
use crate::store::{Store, StoreError, sessions};

/// A signed-in browser: the session its cookie names, as stored. Only [`current`] makes one,
/// so a [`FreshSession`] (and a connect link's `OpenedBy`) stands on a session the store
/// really holds.
///
/// ```compile_fail
/// use mcp_oauth_proxy::session::Session;
/// use mcp_oauth_proxy::store::records::SessionRecord;
/// // Private fields: a session cannot be made up from a record.
/// fn forge(record: SessionRecord) -> Session {
///     Session { token_hash: String::new(), record }
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::session::Session;
/// use mcp_oauth_proxy::store::records::SessionRecord;
/// fn read(s: &Session) -> (&str, &SessionRecord) {
///     (s.token_hash(), s.record())
/// }
/// ```
#[derive(Debug)]
pub struct Session {
    token_hash: String,
    record: SessionRecord,
}

/// Proof that this browser's sign-in is fresh and the navigation is not cross-site, the
/// conditions (with a remembered consent and a usable grant) for skipping the consent page.
/// Only [`Session::fresh_for_consent_skip`] makes one; a remembered consent is looked up from
/// it, by value (`bindings::consent_registry::lookup`).
///
/// ```compile_fail
/// use mcp_oauth_proxy::ids::UserId;
/// use mcp_oauth_proxy::session::FreshSession;
/// // Private field: a fresh sign-in cannot be claimed outside this module.
/// let forged = FreshSession { user_id: UserId::github(1) };
/// ```
///
/// ```
/// use mcp_oauth_proxy::ids::UserId;
/// use mcp_oauth_proxy::session::FreshSession;
/// fn person(fresh: &FreshSession) -> &UserId {
///     fresh.user_id()
/// }
/// ```
#[derive(Debug)]
pub struct FreshSession {
    user_id: UserId,
}

impl FreshSession {
    /// The person signed in.
    pub fn user_id(&self) -> &UserId {
        &self.user_id
    }
}

impl Session {
    /// Hash of the session token (for CSRF binding; never the token).
    pub fn token_hash(&self) -> &str {
        &self.token_hash
    }
    /// The stored record: the person and when they signed in.
    pub fn record(&self) -> &SessionRecord {
        &self.record
    }
    /// For unit tests elsewhere in the crate: a session as `current` would load it.
    #[cfg(test)]
    pub(crate) fn for_tests(record: SessionRecord) -> Session {
        Session {
            token_hash: "h".into(),
            record,
        }
    }

    /// Whether this sign-in satisfies a link's freshness check (connect and approval links,
    /// DESIGN §6 step 4): made through GitHub's account picker ([`SignInKind::AccountPicker`],
    /// which only a link's own sign-in asks for) at most `max_age_secs` ago. A silent sign-in
    /// (the account page's, the consent flow's) never does, however recent: GitHub answers
    /// those without a screen for a person signed in there who already authorized the app, so
    /// anything that can send the browser to `/account` could renew one.
    pub fn fresh_for_link(&self, now: UnixTime, max_age_secs: u64) -> bool {
        self.record.sign_in == SignInKind::AccountPicker
            && now.since(self.record.auth_time) <= max_age_secs
    }

    /// A [`FreshSession`] if the sign-in is recent enough and `Sec-Fetch-Site` is `none` or
    /// `same-origin` (a cross-site navigation, or a browser that does not say, gets the page).
    pub fn fresh_for_consent_skip(
        &self,
        now: UnixTime,
        policy: &SessionPolicy,
        sec_fetch_site: Option<&str>,
    ) -> Option<FreshSession> {
        let fresh = now.since(self.record.auth_time) <= policy.consent_skip_max_age_secs;
        let not_cross_site = matches!(sec_fetch_site, Some("none" | "same-origin"));
        (fresh && not_cross_site).then(|| FreshSession {
            user_id: self.record.user_id.clone(),
        })
    }
}

/// The session named by the cookie, if live.
pub async fn current(
    store: &dyn Store,
    cookie: Option<&str>,
) -> Result<Option<Session>, StoreError> {
    let Some(value) = cookie else { return Ok(None) };
    let token = SessionToken::new(value);
    let rec = sessions::get(store, &token).await?;
    Ok(rec.map(|record| Session {
        token_hash: token.hash(),
        record,
    }))
}

/// Starts a session for a sign-in GitHub just completed, run as `sign_in` says; returns its
/// `Set-Cookie`.
pub async fn start(
    store: &dyn Store,
    now: UnixTime,
    policy: &SessionPolicy,
    user_id: UserId,
    login: GitHubLogin,
    sign_in: SignInKind,
) -> Result<String, SessionError> {
    let token = SessionToken::new(crypto::random_token()?);
    let rec = SessionRecord {
        user_id,
        login,
        auth_time: now,
        sign_in,
    };
    sessions::put(store, &token, &rec, now.plus(policy.max_age_secs)).await?;
    Ok(cookies::set(
        cookies::SESSION_COOKIE,
        token.secret(),
        policy.max_age_secs,
    ))
}

/// Ends a session; returns the clearing `Set-Cookie`.
pub async fn end(store: &dyn Store, session: &Session) -> Result<String, StoreError> {
    sessions::remove(store, &session.token_hash).await?;
    Ok(cookies::clear(cookies::SESSION_COOKIE))
}

/// Session failures.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Storage.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Randomness.
    #[error(transparent)]
    Crypto(#[from] CryptoError),
}

/// `[session]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawSession {
    max_age_secs: u64,
    consent_skip_max_age_secs: u64,
}

impl Default for RawSession {
    fn default() -> Self {
        let d = SessionPolicy::default();
        RawSession {
            max_age_secs: d.max_age_secs,
            consent_skip_max_age_secs: d.consent_skip_max_age_secs,
        }
    }
}

/// Browser session policy.
#[derive(Debug, Clone)]
pub struct SessionPolicy {
    /// A proxy sign-in lasts this long.
    pub max_age_secs: u64,
    /// The consent page may be skipped only if the sign-in is at most this old.
    pub consent_skip_max_age_secs: u64,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        SessionPolicy {
            max_age_secs: 12 * 3600,
            consent_skip_max_age_secs: 3600,
        }
    }
}

impl SessionPolicy {
    /// Validates `[session]`, pushing one readable line per problem into `errs`.
    pub fn from_raw(s: &RawSession, errs: &mut Vec<String>) -> SessionPolicy {
        let session = SessionPolicy {
            max_age_secs: s.max_age_secs,
            consent_skip_max_age_secs: s.consent_skip_max_age_secs,
        };
        if session.max_age_secs < 300 {
            errs.push("session.max_age_secs: at least 300".to_owned());
        }
        if session.consent_skip_max_age_secs > session.max_age_secs {
            errs.push("session.consent_skip_max_age_secs: must not exceed max_age_secs".to_owned());
        }
        session
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock as _, ManualClock};

    fn session(auth_time: u64) -> Session {
        signed_in(auth_time, SignInKind::Silent)
    }

    fn signed_in(auth_time: u64, sign_in: SignInKind) -> Session {
        Session {
            token_hash: "h".into(),
            record: SessionRecord {
                user_id: UserId::github(1),
                login: GitHubLogin::new("a"),
                auth_time: UnixTime(auth_time),
                sign_in,
            },
        }
    }

    /// The clock is a `ManualClock`, moved by hand: the decision reads no time of its own.
    #[test]
    fn only_an_account_picker_sign_in_within_the_age_is_fresh_for_a_link() {
        let clock = ManualClock::new(UnixTime(10_000));
        let picked = signed_in(clock.now().0, SignInKind::AccountPicker);
        let silent = signed_in(clock.now().0, SignInKind::Silent);
        assert!(picked.fresh_for_link(clock.now(), 900));
        // Signed in this very second, silently (the account page, the consent flow): never.
        assert!(!silent.fresh_for_link(clock.now(), 900));
        clock.advance(900);
        assert!(
            picked.fresh_for_link(clock.now(), 900),
            "the age is inclusive"
        );
        assert!(!silent.fresh_for_link(clock.now(), 900));
        clock.advance(1);
        assert!(
            !picked.fresh_for_link(clock.now(), 900),
            "one second too old"
        );
        // A longer configured age covers it again: the age is the only other condition.
        assert!(picked.fresh_for_link(clock.now(), 3_600));
        assert!(!silent.fresh_for_link(clock.now(), 86_400));
    }

    #[test]
    fn a_session_stored_before_sign_in_kinds_reads_as_silent() {
        let old = r#"{"user_id":"github:1","login":"a","auth_time":10000}"#;
        let rec: SessionRecord = serde_json::from_str(old).unwrap();
        assert_eq!(rec.sign_in, SignInKind::Silent);
        let s = Session {
            token_hash: "h".into(),
            record: rec,
        };
        assert!(!s.fresh_for_link(UnixTime(10_000), 900));
        let picked = serde_json::to_value(&signed_in(1, SignInKind::AccountPicker).record).unwrap();
        assert_eq!(picked["sign_in"], "account_picker");
    }

    #[test]
    fn only_the_account_picker_kind_asks_github_for_a_prompt() {
        assert_eq!(SignInKind::Silent.github_prompt(), None);
        assert_eq!(
            SignInKind::AccountPicker.github_prompt(),
            Some("select_account")
        );
    }

    #[test]
    fn consent_skip_needs_fetch_metadata_saying_not_cross_site() {
        let p = SessionPolicy::default();
        let s = session(1_000);
        assert!(
            s.fresh_for_consent_skip(UnixTime(1_001), &p, Some("none"))
                .is_some()
        );
        assert!(
            s.fresh_for_consent_skip(UnixTime(1_001), &p, Some("same-origin"))
                .is_some()
        );
        // A browser that does not say where the navigation came from gets the page.
        assert!(
            s.fresh_for_consent_skip(UnixTime(1_001), &p, None)
                .is_none()
        );
        assert!(
            s.fresh_for_consent_skip(UnixTime(1_001), &p, Some("same-site"))
                .is_none()
        );
        assert!(
            s.fresh_for_consent_skip(UnixTime(1_001), &p, Some("cross-site"))
                .is_none()
        );
        assert!(
            s.fresh_for_consent_skip(
                UnixTime(1_000 + p.consent_skip_max_age_secs + 1),
                &p,
                Some("none")
            )
            .is_none()
        );
    }
}
