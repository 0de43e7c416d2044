//! Binding: the consent decision ↔ the GitHub callback. The upstream `state` is created only
//! after approval, right before the redirect to GitHub. It is random, stored as a hash,
//! expires in 10 minutes, is taken atomically (single use), and is accepted only from the
//! browser that carries the matching flow cookie. A GitHub authorization URL captured by an
//! attacker and opened in a victim's browser therefore fails here.

use super::consent_cookie::{self, CookieError, FlowBinding};
use crate::clock::UnixTime;
use crate::crypto::{self, Key};
use crate::ids::{PkceVerifier, UpstreamState};
use crate::store::records::{FlowPurpose, UpstreamStateRecord};
use crate::store::{Store, StoreError, upstream_states};

/// Lifetime of an upstream state.
pub const STATE_TTL_SECS: u64 = consent_cookie::TTL_SECS;
/// How long a person has to decide on the consent page: the lifetime of the transaction
/// `/authorize` stores, which the decision takes before [`begin`] makes the state. With
/// [`STATE_TTL_SECS`], how long an authorization may take in the browser (registration
/// housekeeping spares registrations younger than that).
pub const TXN_TTL_SECS: u64 = 600;

/// Proof that a callback's state was issued to this very browser. Only this module makes one
/// ([`take`]).
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::browser_state::BrowserBound;
/// use mcp_oauth_proxy::store::records::UpstreamStateRecord;
/// // Private field: a state read from the store is not browser-bound until the flow cookie
/// // was checked.
/// fn forge(record: UpstreamStateRecord) -> BrowserBound<UpstreamStateRecord> {
///     BrowserBound(record)
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::browser_state::BrowserBound;
/// use mcp_oauth_proxy::store::records::UpstreamStateRecord;
/// fn read(b: &BrowserBound<UpstreamStateRecord>) -> &UpstreamStateRecord {
///     b.get()
/// }
/// ```
#[derive(Debug)]
pub struct BrowserBound<T>(T);

impl<T> BrowserBound<T> {
    /// The bound value.
    pub fn get(&self) -> &T {
        &self.0
    }
    /// Consumes the proof.
    pub fn into_inner(self) -> T {
        self.0
    }
}

/// Why a callback was refused.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No `state` parameter.
    #[error("missing state")]
    Missing,
    /// Unknown, already used, or expired.
    #[error("unknown, used or expired state")]
    Unknown,
    /// The browser lacks the flow cookie or carries one for another flow.
    #[error("state not bound to this browser: {0:?}")]
    Cookie(CookieError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Randomness failed.
    #[error(transparent)]
    Crypto(#[from] crypto::CryptoError),
}

/// What the redirect to GitHub needs.
#[derive(Debug)]
pub struct Started {
    /// The `state` parameter.
    pub state: UpstreamState,
    /// `S256` challenge of the proxy's own verifier.
    pub code_challenge: String,
    /// The flow cookie to set on the same response.
    pub set_cookie: String,
}

/// Creates the upstream state for an approved flow and the cookie that binds it to this
/// browser. Call only after approval; the caller sends both on the redirect to GitHub.
pub async fn begin(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    flow_id: String,
    purpose: FlowPurpose,
) -> Result<Started, StateError> {
    let state = UpstreamState::new(crypto::random_token()?);
    let verifier = PkceVerifier::new(crypto::random_token()?);
    let code_challenge = crypto::pkce_s256(verifier.secret());
    let record = UpstreamStateRecord {
        flow_id,
        purpose,
        pkce_verifier: verifier,
        created_at: now,
    };
    let (purpose_tag, client_id) = record.binding();
    let set_cookie = consent_cookie::issue(
        key,
        &FlowBinding {
            purpose: purpose_tag,
            client_id,
            flow_id: &record.flow_id,
        },
        now,
    );
    let fresh =
        upstream_states::insert_new(store, &state, &record, now.plus(STATE_TTL_SECS)).await?;
    if !fresh {
        // 256 random bits collided: treat as a random-source failure rather than reuse a record.
        return Err(StateError::Crypto(crypto::CryptoError::Random));
    }
    Ok(Started {
        state,
        code_challenge,
        set_cookie,
    })
}

/// Takes the state named by a callback (atomically, so it works once) and checks that this
/// browser carries the flow cookie made for it.
pub async fn take(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    state: Option<&str>,
    cookie: Option<&str>,
) -> Result<BrowserBound<UpstreamStateRecord>, StateError> {
    let state = UpstreamState::new(state.ok_or(StateError::Missing)?);
    let record = upstream_states::take(store, &state)
        .await?
        .ok_or(StateError::Unknown)?;
    let (purpose_tag, client_id) = record.binding();
    consent_cookie::verify(
        key,
        cookie,
        &FlowBinding {
            purpose: purpose_tag,
            client_id,
            flow_id: &record.flow_id,
        },
        now,
    )
    .map_err(StateError::Cookie)?;
    Ok(BrowserBound(record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::store::SledStore;
    use crate::store::records::ReturnTo;

    fn cookie_value(set_cookie: &str) -> String {
        set_cookie
            .split(';')
            .next()
            .unwrap()
            .split_once('=')
            .unwrap()
            .1
            .to_owned()
    }

    async fn setup() -> (SledStore, Key, std::sync::Arc<ManualClock>) {
        let clock = ManualClock::new(UnixTime(1_000));
        (
            SledStore::temporary(clock.clone()).unwrap(),
            Key::generate().unwrap(),
            clock,
        )
    }

    fn sign_in() -> FlowPurpose {
        FlowPurpose::SignIn {
            return_to: ReturnTo::Account,
            sign_in: crate::store::records::SignInKind::Silent,
        }
    }

    #[tokio::test]
    async fn matching_browser_accepted_once() {
        let (s, k, c) = setup().await;
        let st = begin(&s, &k, c.now(), "flow1".into(), sign_in())
            .await
            .unwrap();
        let v = cookie_value(&st.set_cookie);
        take(&s, &k, c.now(), Some(st.state.secret()), Some(&v))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn replayed_state_rejected() {
        let (s, k, c) = setup().await;
        let st = begin(&s, &k, c.now(), "flow1".into(), sign_in())
            .await
            .unwrap();
        let v = cookie_value(&st.set_cookie);
        take(&s, &k, c.now(), Some(st.state.secret()), Some(&v))
            .await
            .unwrap();
        let again = take(&s, &k, c.now(), Some(st.state.secret()), Some(&v))
            .await
            .unwrap_err();
        assert!(matches!(again, StateError::Unknown), "{again:?}");
    }

    #[tokio::test]
    async fn state_from_other_browser_rejected() {
        let (s, k, c) = setup().await;
        let attacker = begin(&s, &k, c.now(), "flow-attacker".into(), sign_in())
            .await
            .unwrap();
        let victim = begin(&s, &k, c.now(), "flow-victim".into(), sign_in())
            .await
            .unwrap();
        // The victim's browser carries its own flow cookie, not the attacker's.
        let e = take(
            &s,
            &k,
            c.now(),
            Some(attacker.state.secret()),
            Some(&cookie_value(&victim.set_cookie)),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(e, StateError::Cookie(CookieError::Invalid)),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn missing_binding_cookie_rejected() {
        let (s, k, c) = setup().await;
        let st = begin(&s, &k, c.now(), "flow1".into(), sign_in())
            .await
            .unwrap();
        let e = take(&s, &k, c.now(), Some(st.state.secret()), None)
            .await
            .unwrap_err();
        assert!(
            matches!(e, StateError::Cookie(CookieError::Missing)),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn expired_state_rejected() {
        let (s, k, c) = setup().await;
        let st = begin(&s, &k, c.now(), "flow1".into(), sign_in())
            .await
            .unwrap();
        c.advance(STATE_TTL_SECS);
        let e = take(
            &s,
            &k,
            c.now(),
            Some(st.state.secret()),
            Some(&cookie_value(&st.set_cookie)),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, StateError::Unknown), "{e:?}");
    }

    #[tokio::test]
    async fn missing_state_rejected() {
        let (s, k, c) = setup().await;
        assert!(matches!(
            take(&s, &k, c.now(), None, None).await.unwrap_err(),
            StateError::Missing
        ));
    }
}
