//! Binding: an MCP session (or a backend's `requestState`) ↔ the person and client that
//! created it. The gateway records the `Mcp-Session-Id` the backend mints on the response
//! that carries it, and the `requestState` values the backend returns; a later request that
//! presents either with another person's or another client's token is answered as if the
//! handle did not exist and never reaches the backend. Possession is never authentication.
//!
//! No side doors:
//! - `Mcp-Session-Id` and `MCP-Protocol-Version` are read once, here
//!   ([`read_transport_headers`]): a header sent more than once, empty, or holding a byte
//!   outside visible ASCII (0x21–0x7E, the MCP transport's rule for session ids) refuses the
//!   request before anything else looks at it.
//! - The session check runs whatever the protocol version says ([`check_transport`]): a
//!   2026-07-28 request (which has no sessions) that carries someone else's session id is
//!   refused like any other.
//! - What the backend receives of these two headers comes only from the checked value
//!   ([`SessionChecked::upstream`]): the session id only in versions that have sessions.

use http::{HeaderMap, HeaderName, HeaderValue};

use super::audience::Audienced;
use crate::clock::UnixTime;
use crate::ids::{ClientId, UserId};
use crate::store::records::AccessTokenRecord;
use crate::store::{Store, StoreError, mcp_sessions};

/// The session id header.
pub const SESSION_ID: &str = "mcp-session-id";
/// The protocol version header.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// The protocol version a request speaks (`MCP-Protocol-Version`; absent means 2025-03-26).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// 2025-03-26, 2025-06-18, 2025-11-25 (and anything older): sessions, GET streams.
    Sessions,
    /// 2026-07-28: stateless, per-request capabilities, multi round-trip requests.
    Stateless,
}

impl Version {
    /// From the header value.
    pub fn from_header(v: Option<&str>) -> Version {
        match v {
            Some("2026-07-28") => Version::Stateless,
            _ => Version::Sessions,
        }
    }
}

/// Why a request's MCP transport headers were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadTransportHeader {
    /// The header was sent more than once.
    Repeated(&'static str),
    /// The value is empty or holds a byte outside visible ASCII (0x21–0x7E).
    NotVisibleAscii(&'static str),
}

impl BadTransportHeader {
    /// The header concerned, as it is spelled on the wire.
    pub fn header(self) -> &'static str {
        match self {
            BadTransportHeader::Repeated(h) | BadTransportHeader::NotVisibleAscii(h) => {
                if h == SESSION_ID {
                    "Mcp-Session-Id"
                } else {
                    "MCP-Protocol-Version"
                }
            }
        }
    }
}

/// `Mcp-Session-Id` and `MCP-Protocol-Version` as presented: each at most once, each visible
/// ASCII. Only [`read_transport_headers`] makes one, and only [`check_transport`] uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportHeaders {
    version: Version,
    protocol_version: Option<HeaderValue>,
    session_id: Option<HeaderValue>,
}

impl TransportHeaders {
    /// The protocol generation the request speaks.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The session id presented, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_ref().and_then(|v| v.to_str().ok())
    }
}

/// Whether every byte is visible ASCII (0x21–0x7E) and there is at least one.
pub fn visible_ascii(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(|c| (0x21..=0x7e).contains(c))
}

/// The single value of `name`: `None` when absent, an error when repeated or not visible
/// ASCII.
fn single(h: &HeaderMap, name: &'static str) -> Result<Option<HeaderValue>, BadTransportHeader> {
    let mut all = h.get_all(name).iter();
    let Some(first) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(BadTransportHeader::Repeated(name));
    }
    if !visible_ascii(first.as_bytes()) {
        return Err(BadTransportHeader::NotVisibleAscii(name));
    }
    Ok(Some(first.clone()))
}

/// Reads the transport headers of a request: the decision that no repeated or malformed
/// session id or protocol version gets past the gateway. No I/O.
pub fn read_transport_headers(h: &HeaderMap) -> Result<TransportHeaders, BadTransportHeader> {
    let protocol_version = single(h, PROTOCOL_VERSION)?;
    let session_id = single(h, SESSION_ID)?;
    let version = Version::from_header(protocol_version.as_ref().and_then(|v| v.to_str().ok()));
    Ok(TransportHeaders {
        version,
        protocol_version,
        session_id,
    })
}

/// The session id a backend response mints: its single, visible-ASCII `Mcp-Session-Id`. A
/// repeated or malformed one is neither bound nor passed to the client.
pub fn minted_session_id(response: &HeaderMap) -> Option<&str> {
    single(response, SESSION_ID)
        .ok()
        .flatten()
        .and_then(|_| response.get(SESSION_ID))
        .and_then(|v| v.to_str().ok())
}

/// The transport headers after the session check. The only source of the session id and the
/// protocol version the backend receives. Only [`check_transport`] makes one.
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::session_binding::SessionChecked;
/// use mcp_oauth_proxy::gateway::jsonrpc::Version;
/// // Private fields: headers the client sent are not checked until `check_transport` ran.
/// fn forge(protocol_version: Option<http::HeaderValue>) -> SessionChecked {
///     SessionChecked { version: Version::Sessions, protocol_version, session: None }
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::session_binding::{SessionBound, SessionChecked};
/// use mcp_oauth_proxy::gateway::jsonrpc::Version;
/// fn read(c: &SessionChecked) -> (Version, Option<&SessionBound>) {
///     (c.version(), c.session())
/// }
/// ```
#[derive(Debug)]
pub struct SessionChecked {
    version: Version,
    protocol_version: Option<HeaderValue>,
    session: Option<SessionBound>,
}

impl SessionChecked {
    /// The protocol generation.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The caller's own session, if one was presented.
    pub fn session(&self) -> Option<&SessionBound> {
        self.session.as_ref()
    }

    /// The transport headers for the backend: the protocol version as checked, and the
    /// session id only where the version has sessions (2026-07-28 has none: stripped).
    pub fn upstream(&self) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = Vec::new();
        if let Some(v) = &self.protocol_version {
            out.push((HeaderName::from_static(PROTOCOL_VERSION), v.clone()));
        }
        if self.version == Version::Sessions
            && let Some(s) = &self.session
        {
            out.push((HeaderName::from_static(SESSION_ID), s.id.clone()));
        }
        out
    }
}

#[cfg(test)]
impl SessionChecked {
    /// For unit tests elsewhere in the crate: the result of a check that found `session`
    /// bound to (user 1, client "c").
    pub(crate) fn for_tests(protocol_version: Option<&str>, session: Option<&str>) -> Self {
        let protocol_version = protocol_version.and_then(|v| HeaderValue::from_str(v).ok());
        SessionChecked {
            version: Version::from_header(protocol_version.as_ref().and_then(|v| v.to_str().ok())),
            protocol_version,
            session: session.and_then(|id| {
                Some(SessionBound {
                    rec: SessionRecord {
                        user_id: UserId::github(1),
                        client_id: ClientId::new("c"),
                        url_elicitation: false,
                        created_at: UnixTime(0),
                    },
                    id: HeaderValue::from_str(id).ok()?,
                })
            }),
        }
    }
}

/// Checks the presented session id, in every protocol version: absent is fine; present, it
/// must be bound to this token's person and client.
pub async fn check_transport(
    store: &dyn Store,
    headers: TransportHeaders,
    token: &Audienced<AccessTokenRecord>,
) -> Result<Result<SessionChecked, UnknownHandle>, StoreError> {
    let session = match headers.session_id {
        None => None,
        Some(id) => {
            let Ok(text) = id.to_str() else {
                return Ok(Err(UnknownHandle));
            };
            match check_session(store, text, token).await? {
                Ok(bound) => Some(bound),
                Err(e) => return Ok(Err(e)),
            }
        }
    };
    Ok(Ok(SessionChecked {
        version: headers.version,
        protocol_version: headers.protocol_version,
        session,
    }))
}

/// How long an idle session binding lives (refreshed by use is not needed: backends end
/// sessions, and a forgotten binding only means the client must re-initialize).
pub const SESSION_TTL_SECS: u64 = 7 * 86_400;
/// How long a backend `requestState` binding lives.
pub const REQUEST_STATE_TTL_SECS: u64 = 3600;

/// A stored session binding.
pub use crate::store::records::McpSessionRecord as SessionRecord;

/// A session presented by the right person and client. Only this module makes one
/// ([`check_session`]).
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::session_binding::{SessionBound, SessionRecord};
/// // Private fields: someone else's session id cannot be declared ours.
/// fn forge(rec: SessionRecord, id: http::HeaderValue) -> SessionBound {
///     SessionBound { rec, id }
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::session_binding::{SessionBound, SessionRecord};
/// fn read(b: &SessionBound) -> &SessionRecord {
///     b.get()
/// }
/// ```
#[derive(Debug)]
pub struct SessionBound {
    rec: SessionRecord,
    /// The id as presented (visible ASCII).
    id: HeaderValue,
}

impl SessionBound {
    /// The binding.
    pub fn get(&self) -> &SessionRecord {
        &self.rec
    }
}

/// Unknown, or someone else's: both look the same to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownHandle;

fn owner(token: &Audienced<AccessTokenRecord>) -> (&UserId, &ClientId) {
    (&token.get().user_id, &token.get().client_id)
}

/// Records the session the backend just minted for this token's person and client. A session
/// id already bound to someone else is not re-bound (returns false).
pub async fn bind_session(
    store: &dyn Store,
    now: UnixTime,
    session_id: &str,
    token: &Audienced<AccessTokenRecord>,
    url_elicitation: bool,
) -> Result<bool, StoreError> {
    let (user_id, client_id) = owner(token);
    let rec = SessionRecord {
        user_id: user_id.clone(),
        client_id: client_id.clone(),
        url_elicitation,
        created_at: now,
    };
    if mcp_sessions::insert_new(store, session_id, &rec, now.plus(SESSION_TTL_SECS)).await? {
        return Ok(true);
    }
    let existing = mcp_sessions::get(store, session_id).await?;
    Ok(existing.is_some_and(|e| e.user_id == rec.user_id && e.client_id == rec.client_id))
}

/// Checks a presented `Mcp-Session-Id`.
pub async fn check_session(
    store: &dyn Store,
    session_id: &str,
    token: &Audienced<AccessTokenRecord>,
) -> Result<Result<SessionBound, UnknownHandle>, StoreError> {
    let (user_id, client_id) = owner(token);
    let rec = mcp_sessions::get(store, session_id).await?;
    let id = HeaderValue::from_str(session_id).ok();
    Ok(match (rec, id) {
        (Some(rec), Some(id)) if rec.user_id == *user_id && rec.client_id == *client_id => {
            Ok(SessionBound { rec, id })
        }
        _ => Err(UnknownHandle),
    })
}

/// Forgets a session (after the backend confirmed a DELETE).
pub async fn forget_session(store: &dyn Store, bound: &SessionBound) -> Result<(), StoreError> {
    let id = bound.id.to_str().unwrap_or_default();
    mcp_sessions::remove(store, id).await
}

/// Records a `requestState` the backend returned to this token's person and client.
pub async fn bind_request_state(
    store: &dyn Store,
    now: UnixTime,
    state: &str,
    token: &Audienced<AccessTokenRecord>,
) -> Result<(), StoreError> {
    let (user_id, client_id) = owner(token);
    let rec = SessionRecord {
        user_id: user_id.clone(),
        client_id: client_id.clone(),
        url_elicitation: false,
        created_at: now,
    };
    mcp_sessions::put_request_state(store, state, &rec, now.plus(REQUEST_STATE_TTL_SECS)).await
}

/// Checks a `requestState` a client echoed back.
pub async fn check_request_state(
    store: &dyn Store,
    state: &str,
    token: &Audienced<AccessTokenRecord>,
) -> Result<Result<(), UnknownHandle>, StoreError> {
    let (user_id, client_id) = owner(token);
    let rec = mcp_sessions::request_state(store, state).await?;
    Ok(match rec {
        Some(r) if r.user_id == *user_id && r.client_id == *client_id => Ok(()),
        _ => Err(UnknownHandle),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::audience::audienced;
    use crate::clock::ManualClock;
    use crate::ids::FamilyId;
    use crate::oauth::scope::ScopeSet;
    use crate::store::SledStore;

    fn token(user: u64, client: &str) -> Audienced<AccessTokenRecord> {
        audienced(
            AccessTokenRecord {
                family_id: FamilyId::new("f"),
                user_id: UserId::github(user),
                client_id: ClientId::new(client),
                scopes: ScopeSet::default(),
                resource: "r".into(),
                issued_at: UnixTime(0),
                expires_at: UnixTime(10),
                branch: None,
            },
            "r",
        )
        .unwrap()
    }

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn single_visible_ascii_headers_are_read() {
        let t = read_transport_headers(&headers(&[
            ("mcp-session-id", b"0123abcd-_.~!"),
            ("mcp-protocol-version", b"2025-11-25"),
        ]))
        .unwrap();
        assert_eq!(t.session_id(), Some("0123abcd-_.~!"));
        assert_eq!(t.version(), Version::Sessions);
        let t =
            read_transport_headers(&headers(&[("mcp-protocol-version", b"2026-07-28")])).unwrap();
        assert_eq!((t.version(), t.session_id()), (Version::Stateless, None));
        // No version header: the 2025-03-26 default, which has sessions.
        let t = read_transport_headers(&HeaderMap::new()).unwrap();
        assert_eq!((t.version(), t.session_id()), (Version::Sessions, None));
    }

    #[test]
    fn repeated_session_or_version_header_is_refused() {
        for name in [SESSION_ID, PROTOCOL_VERSION] {
            for values in [&[&b"a"[..], b"b"][..], &[b"same", b"same"]] {
                let pairs: Vec<(&str, &[u8])> = values.iter().map(|v| (name, *v)).collect();
                assert_eq!(
                    read_transport_headers(&headers(&pairs)),
                    Err(BadTransportHeader::Repeated(name)),
                    "{name} {values:?}"
                );
            }
        }
        // Spelled differently, still the same header.
        let mut h = headers(&[("mcp-session-id", b"a")]);
        h.append(
            HeaderName::from_bytes(b"Mcp-Session-Id").unwrap(),
            HeaderValue::from_static("b"),
        );
        assert_eq!(
            read_transport_headers(&h),
            Err(BadTransportHeader::Repeated(SESSION_ID))
        );
    }

    #[test]
    fn session_or_version_header_outside_visible_ascii_is_refused() {
        for name in [SESSION_ID, PROTOCOL_VERSION] {
            for bad in [&b"sess\xe9"[..], b"\xc3\xa9", b"a b", b"a\tb", b""] {
                assert_eq!(
                    read_transport_headers(&headers(&[(name, bad)])),
                    Err(BadTransportHeader::NotVisibleAscii(name)),
                    "{name} {bad:?}"
                );
            }
        }
        assert_eq!(
            BadTransportHeader::Repeated(SESSION_ID).header(),
            "Mcp-Session-Id"
        );
        assert_eq!(
            BadTransportHeader::NotVisibleAscii(PROTOCOL_VERSION).header(),
            "MCP-Protocol-Version"
        );
    }

    #[test]
    fn session_id_goes_upstream_only_in_versions_with_sessions() {
        let names = |c: &SessionChecked| -> Vec<String> {
            c.upstream()
                .into_iter()
                .map(|(n, v)| format!("{n}={}", v.to_str().unwrap()))
                .collect()
        };
        assert_eq!(
            names(&SessionChecked::for_tests(Some("2025-06-18"), Some("s1"))),
            ["mcp-protocol-version=2025-06-18", "mcp-session-id=s1"]
        );
        assert_eq!(
            names(&SessionChecked::for_tests(None, Some("s1"))),
            ["mcp-session-id=s1"]
        );
        assert_eq!(
            names(&SessionChecked::for_tests(Some("2026-07-28"), Some("s1"))),
            ["mcp-protocol-version=2026-07-28"]
        );
    }

    #[test]
    fn minted_session_id_must_be_single_and_visible_ascii() {
        assert_eq!(
            minted_session_id(&headers(&[("mcp-session-id", b"s1")])),
            Some("s1")
        );
        assert_eq!(
            minted_session_id(&headers(&[
                ("mcp-session-id", b"s1"),
                ("mcp-session-id", b"s2")
            ])),
            None
        );
        assert_eq!(
            minted_session_id(&headers(&[("mcp-session-id", b"s\xe9")])),
            None
        );
        assert_eq!(minted_session_id(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn session_check_runs_in_every_version() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1))).unwrap();
        let alice = token(1, "c");
        bind_session(&s, UnixTime(1), "alice-s", &alice, false)
            .await
            .unwrap();
        for version in [
            None,
            Some(&b"2025-06-18"[..]),
            Some(b"2025-11-25"),
            Some(b"2026-07-28"),
        ] {
            let mut pairs: Vec<(&str, &[u8])> = vec![("mcp-session-id", b"alice-s")];
            if let Some(v) = version {
                pairs.push(("mcp-protocol-version", v));
            }
            let presented = || read_transport_headers(&headers(&pairs)).unwrap();
            assert!(
                check_transport(&s, presented(), &token(2, "c"))
                    .await
                    .unwrap()
                    .is_err(),
                "{version:?}"
            );
            let own = check_transport(&s, presented(), &alice)
                .await
                .unwrap()
                .unwrap();
            assert!(own.session().is_some(), "{version:?}");
        }
    }

    #[tokio::test]
    async fn session_of_another_person_is_unknown() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1))).unwrap();
        let alice = token(1, "c");
        assert!(
            bind_session(&s, UnixTime(1), "sess-1", &alice, true)
                .await
                .unwrap()
        );
        assert!(
            check_session(&s, "sess-1", &alice)
                .await
                .unwrap()
                .unwrap()
                .get()
                .url_elicitation
        );
        assert_eq!(
            check_session(&s, "sess-1", &token(2, "c"))
                .await
                .unwrap()
                .unwrap_err(),
            UnknownHandle
        );
        assert_eq!(
            check_session(&s, "sess-1", &token(1, "other"))
                .await
                .unwrap()
                .unwrap_err(),
            UnknownHandle
        );
        assert_eq!(
            check_session(&s, "never-seen", &alice)
                .await
                .unwrap()
                .unwrap_err(),
            UnknownHandle
        );
    }

    #[tokio::test]
    async fn session_bound_to_one_person_is_not_rebound_to_another() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1))).unwrap();
        assert!(
            bind_session(&s, UnixTime(1), "sess-1", &token(1, "c"), false)
                .await
                .unwrap()
        );
        assert!(
            !bind_session(&s, UnixTime(1), "sess-1", &token(2, "c"), false)
                .await
                .unwrap()
        );
        assert!(
            check_session(&s, "sess-1", &token(1, "c"))
                .await
                .unwrap()
                .is_ok()
        );
    }

    #[tokio::test]
    async fn request_state_of_another_person_is_unknown() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1))).unwrap();
        bind_request_state(&s, UnixTime(1), "rs", &token(1, "c"))
            .await
            .unwrap();
        assert!(
            check_request_state(&s, "rs", &token(1, "c"))
                .await
                .unwrap()
                .is_ok()
        );
        assert!(
            check_request_state(&s, "rs", &token(2, "c"))
                .await
                .unwrap()
                .is_err()
        );
        assert!(
            check_request_state(&s, "forged", &token(1, "c"))
                .await
                .unwrap()
                .is_err()
        );
    }
}
