//! Binding: the consent decision ↔ the GitHub callback. The upstream `state` is created only
//! after approval, right before the redirect to GitHub. It is random, stored as a hash,
//! expires in 10 minutes, is taken atomically (single use), and is accepted only from the
//! browser that carries the matching flow cookie. A GitHub authorization URL captured by an
//! attacker and opened in a victim's browser therefore fails here.
//!
//! A flow cookie alone does not prove the browser, though. Cookies are not isolated by port:
//! whoever serves another port of the proxy's host can set ("toss") a cookie of the same name
//! into a visitor's browser, and on plain-HTTP loopback that is any local program, because
//! Chromium treats `http://127.0.0.1:9999` as a secure context that may set `Secure` and
//! `__Host-` cookies. Such a program approves its own client in its own browser, tosses that
//! flow cookie into the victim's browser and sends it to the GitHub URL of its own `state`;
//! GitHub, already authorized, sends the victim straight back, and the victim's account would
//! complete the attacker's authorization. So an authorization also has a [`ReturnCheck`]: the
//! consent page's script keeps a random value in its origin's session storage (per origin, port
//! included, out of reach of every other port and of cookies) and sends it with Approve
//! (`flow_proof`, stored hashed); when GitHub sends the browser back, our page's script sends it
//! again. A browser without it (no JavaScript, or not the browser that approved) is not turned
//! away but asked, on the finish page, to confirm in this browser what it is completing; that
//! Approve counts only [`FINISH_MIN_MS`] after the page appeared (a double-click cannot land on
//! it), so the tossing page gets no more than a consent page of its own would get.

use super::consent_cookie::{self, CookieError, FlowBinding};
use crate::clock::UnixTime;
use crate::crypto::{self, Key};
use crate::ids::{PkceVerifier, UpstreamState};
use crate::store::records::{FlowPurpose, ReturnCheck, UpstreamStateRecord};
use crate::store::{Store, StoreError, upstream_states};

/// Lifetime of an upstream state.
pub const STATE_TTL_SECS: u64 = consent_cookie::TTL_SECS;
/// How long a person has to decide on the consent page: the lifetime of the transaction
/// `/authorize` stores, which the decision takes before [`begin`] makes the state. With
/// [`STATE_TTL_SECS`], how long an authorization may take in the browser (registration
/// housekeeping spares registrations younger than that).
pub const TXN_TTL_SECS: u64 = 600;
/// An Approve on the finish page counts only once the page has been shown this long
/// (milliseconds): the consent confirmation's rule (`flows::consent::CONFIRM_MIN_MS`), for the
/// same reason (above the second click of any double-click).
pub const FINISH_MIN_MS: u64 = 750;
/// The form field (and callback parameter) carrying the approving page's value.
pub const PROOF_FIELD: &str = "flow_proof";

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

/// The return check of an authorization approved with `page_proof` (the consent form's
/// [`PROOF_FIELD`]: 43 base64url characters, as the consent page's script makes it; anything
/// else counts as none, and the returning browser will have to confirm).
fn return_check(page_proof: Option<&str>) -> ReturnCheck {
    ReturnCheck {
        page_proof: page_proof
            .filter(|p| well_formed(p))
            .map(crypto::hash_secret),
        confirm_shown_at_ms: None,
    }
}

fn well_formed(proof: &str) -> bool {
    proof.len() == 43
        && proof
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Creates the upstream state for an approved sign-in or connect link, and the cookie that
/// binds it to this browser. Call only after approval; the caller sends both on the redirect to
/// GitHub. Their callbacks grant nothing a tossed cookie could steal (a sign-in signs in whoever
/// GitHub says; a connect link checks the person), so they have no return check.
pub async fn begin(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    flow_id: String,
    purpose: FlowPurpose,
) -> Result<Started, StateError> {
    start(store, key, now, flow_id, purpose, None).await
}

/// [`begin`] for an approved authorization, with its [`return_check`] made from the consent
/// form's `page_proof`.
pub async fn begin_authorization(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    flow_id: String,
    purpose: FlowPurpose,
    page_proof: Option<&str>,
) -> Result<Started, StateError> {
    start(
        store,
        key,
        now,
        flow_id,
        purpose,
        Some(return_check(page_proof)),
    )
    .await
}

async fn start(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    flow_id: String,
    purpose: FlowPurpose,
    return_check: Option<ReturnCheck>,
) -> Result<Started, StateError> {
    let state = UpstreamState::new(crypto::random_token()?);
    let verifier = PkceVerifier::new(crypto::random_token()?);
    let code_challenge = crypto::pkce_s256(verifier.secret());
    let record = UpstreamStateRecord {
        flow_id,
        purpose,
        pkce_verifier: verifier,
        created_at: now,
        return_check,
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

/// How a browser comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returned<'a> {
    /// GitHub's redirect, with the value our page found in this browser's storage (absent on
    /// the first arrival, before the page ran, or without one).
    FromGitHub {
        /// The [`PROOF_FIELD`] parameter.
        page_proof: Option<&'a str>,
    },
    /// The person's Approve on the finish page (the caller checked origin and CSRF token).
    Confirmed,
    /// GitHub reported an error, or the person chose Deny on the finish page: nothing will be
    /// granted, and no check is needed to say so.
    Cancelled,
}

/// What a return leads to.
#[derive(Debug)]
pub enum Return {
    /// Bound to this browser: go on.
    Bound(BrowserBound<UpstreamStateRecord>),
    /// This browser must confirm on the finish page (its showing recorded just now). `too_soon`:
    /// an Approve came within [`FINISH_MIN_MS`] of the page appearing. The state stays.
    Confirm {
        /// The flow, for the page.
        record: UpstreamStateRecord,
        /// Whether to say the click came too soon.
        too_soon: bool,
    },
    /// Taken without granting anything.
    Cancelled(UpstreamStateRecord),
}

/// Handles a return to the callback: the state named must exist and this browser must carry
/// the flow cookie made for it (else the state is used up); then, if the flow has a
/// [`ReturnCheck`], the returning browser must show the approving page's value or confirm. The
/// state is taken (a compare-and-swap removal of exactly what was read, so it works once) when
/// the return is bound or cancelled; while it awaits confirmation it stays, with the time its
/// finish page was shown.
pub async fn take(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    now_ms: u64,
    state: Option<&str>,
    cookie: Option<&str>,
    returned: Returned<'_>,
) -> Result<Return, StateError> {
    let state = UpstreamState::new(state.ok_or(StateError::Missing)?);
    let mut held = upstream_states::hold(store, &state)
        .await?
        .ok_or(StateError::Unknown)?;
    let record = held.value();
    let (purpose_tag, client_id) = record.binding();
    if let Err(e) = consent_cookie::verify(
        key,
        cookie,
        &FlowBinding {
            purpose: purpose_tag,
            client_id,
            flow_id: &record.flow_id,
        },
        now,
    ) {
        // Shown without its cookie: the state is used up, as by any other use.
        held.remove(store).await?;
        return Err(StateError::Cookie(e));
    }
    let bound = match (&record.return_check, returned) {
        (_, Returned::Cancelled) => false,
        (None, _) => true,
        (Some(check), Returned::FromGitHub { page_proof }) => {
            matches!((&check.page_proof, page_proof), (Some(h), Some(p))
                if crypto::ct_eq(h.as_bytes(), crypto::hash_secret(p).as_bytes()))
        }
        (Some(check), Returned::Confirmed) => check
            .confirm_shown_at_ms
            .is_some_and(|shown| now_ms.saturating_sub(shown) >= FINISH_MIN_MS),
    };
    let finished = bound || returned == Returned::Cancelled;
    if finished {
        // Removed only if still exactly as read: a concurrent return took it first.
        if !held.remove(store).await? {
            return Err(StateError::Unknown);
        }
        let record = held.into_value();
        return Ok(if bound {
            Return::Bound(BrowserBound(record))
        } else {
            Return::Cancelled(record)
        });
    }
    if let Some(check) = held.value_mut().return_check.as_mut() {
        check.confirm_shown_at_ms = Some(now_ms);
    }
    if !held.swap(store, held.value(), held.expires_at()).await? {
        return Err(StateError::Unknown);
    }
    Ok(Return::Confirm {
        record: held.into_value(),
        too_soon: returned == Returned::Confirmed,
    })
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

    const GITHUB: Returned<'static> = Returned::FromGitHub { page_proof: None };

    async fn take_now(
        s: &SledStore,
        k: &Key,
        c: &ManualClock,
        st: &Started,
        cookie: Option<&str>,
        returned: Returned<'_>,
    ) -> Result<Return, StateError> {
        take(
            s,
            k,
            c.now(),
            c.now_millis(),
            Some(st.state.secret()),
            cookie,
            returned,
        )
        .await
    }

    fn bound(r: Result<Return, StateError>) -> UpstreamStateRecord {
        match r {
            Ok(Return::Bound(b)) => b.into_inner(),
            other => panic!("expected bound, got {other:?}"),
        }
    }

    fn must_confirm(r: Result<Return, StateError>) -> bool {
        match r {
            Ok(Return::Confirm { too_soon, .. }) => too_soon,
            other => panic!("expected the finish page, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn matching_browser_accepted_once() {
        let (s, k, c) = setup().await;
        let st = begin(&s, &k, c.now(), "flow1".into(), sign_in())
            .await
            .unwrap();
        let v = cookie_value(&st.set_cookie);
        bound(take_now(&s, &k, &c, &st, Some(&v), GITHUB).await);
    }

    #[tokio::test]
    async fn replayed_state_rejected() {
        let (s, k, c) = setup().await;
        let st = begin(&s, &k, c.now(), "flow1".into(), sign_in())
            .await
            .unwrap();
        let v = cookie_value(&st.set_cookie);
        bound(take_now(&s, &k, &c, &st, Some(&v), GITHUB).await);
        let again = take_now(&s, &k, &c, &st, Some(&v), GITHUB)
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
        let e = take_now(
            &s,
            &k,
            &c,
            &attacker,
            Some(&cookie_value(&victim.set_cookie)),
            GITHUB,
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
        for returned in [GITHUB, Returned::Confirmed, Returned::Cancelled] {
            let st = authorization(&s, &k, &c, Some(PROOF)).await;
            let e = take_now(&s, &k, &c, &st, None, returned).await.unwrap_err();
            assert!(
                matches!(e, StateError::Cookie(CookieError::Missing)),
                "{e:?}"
            );
            // Used up: even the right cookie and value no longer work.
            let v = cookie_value(&st.set_cookie);
            let with = Returned::FromGitHub {
                page_proof: Some(PROOF),
            };
            let e = take_now(&s, &k, &c, &st, Some(&v), with).await.unwrap_err();
            assert!(matches!(e, StateError::Unknown), "{e:?}");
        }
    }

    #[tokio::test]
    async fn expired_state_rejected() {
        let (s, k, c) = setup().await;
        let st = begin(&s, &k, c.now(), "flow1".into(), sign_in())
            .await
            .unwrap();
        c.advance(STATE_TTL_SECS);
        let v = cookie_value(&st.set_cookie);
        let e = take_now(&s, &k, &c, &st, Some(&v), GITHUB)
            .await
            .unwrap_err();
        assert!(matches!(e, StateError::Unknown), "{e:?}");
    }

    #[tokio::test]
    async fn missing_state_rejected() {
        let (s, k, c) = setup().await;
        assert!(matches!(
            take(&s, &k, c.now(), c.now_millis(), None, None, GITHUB)
                .await
                .unwrap_err(),
            StateError::Missing
        ));
    }

    const PROOF: &str = "pppppppppppppppppppppppppppppppppppppppppp0";

    async fn authorization(
        s: &SledStore,
        k: &Key,
        c: &ManualClock,
        proof: Option<&str>,
    ) -> Started {
        begin_authorization(s, k, c.now(), "txn".into(), sign_in(), proof)
            .await
            .unwrap()
    }

    /// The approving page's value, sent back by the same browser, binds at once.
    #[tokio::test]
    async fn returning_with_the_approving_pages_value_binds() {
        let (s, k, c) = setup().await;
        let st = authorization(&s, &k, &c, Some(PROOF)).await;
        let v = cookie_value(&st.set_cookie);
        let with = Returned::FromGitHub {
            page_proof: Some(PROOF),
        };
        bound(take_now(&s, &k, &c, &st, Some(&v), with).await);
    }

    /// A tossed flow cookie arrives in a browser whose storage holds no value for this flow, or
    /// another flow's: the state stays, and the finish page is shown instead of binding.
    #[tokio::test]
    async fn tossed_cookie_without_the_pages_value_must_confirm() {
        let (s, k, c) = setup().await;
        let st = authorization(&s, &k, &c, Some(PROOF)).await;
        let v = cookie_value(&st.set_cookie);
        let other = "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq0";
        for page_proof in [None, Some(other), Some(""), Some("short")] {
            let r = take_now(
                &s,
                &k,
                &c,
                &st,
                Some(&v),
                Returned::FromGitHub { page_proof },
            );
            assert!(!must_confirm(r.await), "{page_proof:?}");
        }
        // Still there: the right value still binds.
        let with = Returned::FromGitHub {
            page_proof: Some(PROOF),
        };
        bound(take_now(&s, &k, &c, &st, Some(&v), with).await);
    }

    /// An approval made without a value (no JavaScript) can only be completed on the finish page,
    /// and never by a value made up afterwards.
    #[tokio::test]
    async fn approval_without_a_value_can_only_be_confirmed() {
        let (s, k, c) = setup().await;
        for malformed in [None, Some("x"), Some(&PROOF[1..])] {
            assert_eq!(return_check(malformed).page_proof, None, "{malformed:?}");
        }
        let st = authorization(&s, &k, &c, None).await;
        let v = cookie_value(&st.set_cookie);
        let with = Returned::FromGitHub {
            page_proof: Some(PROOF),
        };
        assert!(!must_confirm(
            take_now(&s, &k, &c, &st, Some(&v), with).await
        ));
    }

    /// The finish page's Approve counts only once the page has been shown for
    /// `FINISH_MIN_MS`; before, the page is shown again (and the wait starts over), and a
    /// confirmation without any page shown is too soon as well.
    #[tokio::test]
    async fn finish_page_approve_counts_only_after_the_delay() {
        let (s, k, c) = setup().await;
        let st = authorization(&s, &k, &c, None).await;
        let v = cookie_value(&st.set_cookie);
        assert!(must_confirm(
            take_now(&s, &k, &c, &st, Some(&v), Returned::Confirmed).await
        ));
        assert!(!must_confirm(
            take_now(&s, &k, &c, &st, Some(&v), GITHUB).await
        ));
        c.advance_millis(FINISH_MIN_MS - 1);
        assert!(must_confirm(
            take_now(&s, &k, &c, &st, Some(&v), Returned::Confirmed).await
        ));
        c.advance_millis(FINISH_MIN_MS);
        bound(take_now(&s, &k, &c, &st, Some(&v), Returned::Confirmed).await);
        let again = take_now(&s, &k, &c, &st, Some(&v), Returned::Confirmed)
            .await
            .unwrap_err();
        assert!(matches!(again, StateError::Unknown), "{again:?}");
    }

    /// Deny on the finish page (or an error from GitHub) takes the state and binds nothing.
    #[tokio::test]
    async fn cancelled_return_takes_the_state_without_binding() {
        let (s, k, c) = setup().await;
        let st = authorization(&s, &k, &c, Some(PROOF)).await;
        let v = cookie_value(&st.set_cookie);
        let r = take_now(&s, &k, &c, &st, Some(&v), Returned::Cancelled).await;
        assert!(matches!(r, Ok(Return::Cancelled(_))), "{r:?}");
        let with = Returned::FromGitHub {
            page_proof: Some(PROOF),
        };
        let e = take_now(&s, &k, &c, &st, Some(&v), with).await.unwrap_err();
        assert!(matches!(e, StateError::Unknown), "{e:?}");
    }
}
