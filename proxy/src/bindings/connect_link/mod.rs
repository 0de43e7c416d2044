//! Binding: a connect link ↔ the person it was made for (docs/DESIGN.md §6). A link is
//! `/connect/<code>`: 32 bytes derived from its id with a key used for nothing else, stored
//! only as a hash, pointing to (person, agent, service, kind). One open link per person, agent
//! and service: asking again returns the same link; a different kind replaces it and the old
//! code then behaves exactly like an unknown one. Opening runs these checks in this order,
//! before anything is shown: unknown/expired/declined/replaced → one 404; nobody signed in →
//! sign in; someone else signed in → refused (and audited); sign-in too old, or not made
//! through GitHub's account picker (`Session::fresh_for_link`: a silent sign-in from the
//! account page or the consent flow never counts) → sign in again, through the picker. Only
//! then does the person get `OpenedBy`, which the page's action requires. The page's buttons
//! are held like the consent page's, and its no-JavaScript confirmation step is timed from
//! the mark [`OpenedBy::confirm_shown`] leaves on the link.
//!
//! Approval links (`/approve/<code>`, [`approval`]) are links of the same kind for a tool call
//! a `[[policy]]` rule holds for its person: the same opener checks, in the same order, by the
//! same function ([`opener`]), with their own witness.

pub mod approval;

use serde::Deserialize;

use super::audience::Audienced;
use crate::clock::UnixTime;
use crate::crypto::{self, Key};
use crate::ids::{ClientId, UserId};
use crate::oauth::scope::ScopeSet;
use crate::session::Session;
use crate::store::links::{self, LinkKey};
use crate::store::records::{AccessTokenRecord, ConnectLinkRecord, LinkKind};
use crate::store::{Store, StoreError};

/// The only service today.
pub const GITHUB: &str = "github";

/// The code of a link, derived from its id.
pub fn code_for(key: &Key, link_id: &str) -> String {
    crypto::b64url(&key.mac(&[b"mcp-oauth-proxy/connect-link/v1", link_id.as_bytes()]))
}

/// A link as handed to an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedLink {
    /// Its id (`elicitationId`, `connect_id`).
    pub link_id: String,
    /// `/connect/<code>`, relative to the public URL.
    pub path: String,
    /// What it asks.
    pub kind: LinkKind,
    /// Seconds until it expires.
    pub expires_in: u64,
    /// Whether this call created it (false: the open one was returned again).
    pub created: bool,
}

/// Who a link is for: taken from an authenticated request only (the agent's audience-checked
/// token at `/mcp`, or the backend token a backend exchanged).
#[derive(Debug, Clone, Copy)]
pub struct For<'a> {
    /// The person.
    pub user: &'a UserId,
    /// The agent.
    pub client: &'a ClientId,
}

impl<'a> For<'a> {
    /// From an audience-checked access token.
    pub fn token(t: &'a Audienced<AccessTokenRecord>) -> For<'a> {
        For {
            user: &t.get().user_id,
            client: &t.get().client_id,
        }
    }
}

/// Returns the open link for (person, agent, service) of this kind, creating it if there is
/// none, or replacing it if the open one is of another kind.
pub async fn request(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    ttl_secs: u64,
    who: For<'_>,
    kind: LinkKind,
    scopes: &ScopeSet,
) -> Result<IssuedLink, StoreError> {
    let (user, client) = (who.user, who.client);
    if let Some(open) = links::open(store, user, client, GITHUB).await? {
        let open = LinkKey::of_open(&open);
        let live = links::get(store, &open).await?;
        match live {
            Some(l) if l.kind == kind && l.scopes.covers(scopes) => {
                return Ok(IssuedLink {
                    path: format!("/connect/{}", code_for(key, &l.link_id)),
                    link_id: l.link_id,
                    kind,
                    expires_in: l.expires_at.since(now),
                    created: false,
                });
            }
            // Another kind (or more scopes): the old code must stop working.
            Some(_) => links::remove(store, &open).await?,
            None => {}
        }
    }
    let link_id = crypto::b64url(
        &crypto::random_bytes::<16>().map_err(|e| StoreError::Backend(e.to_string()))?,
    );
    let code = code_for(key, &link_id);
    let stored_at = LinkKey::of_code(&code);
    let expires_at = now.plus(ttl_secs);
    let rec = ConnectLinkRecord {
        link_id: link_id.clone(),
        user_id: user.clone(),
        client_id: client.clone(),
        service: GITHUB.to_owned(),
        kind,
        scopes: scopes.clone(),
        created_at: now,
        expires_at,
        confirm_shown_at_ms: None,
    };
    links::put(store, &stored_at, &rec).await?;
    links::put_open(store, &stored_at, &rec).await?;
    Ok(IssuedLink {
        path: format!("/connect/{code}"),
        link_id,
        kind,
        expires_in: ttl_secs,
        created: true,
    })
}

/// The person who opened a link is the person it was made for, with a recent sign-in. Only
/// this module makes one ([`open`]).
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::connect_link::OpenedBy;
/// use mcp_oauth_proxy::store::records::ConnectLinkRecord;
/// // Private fields: a link cannot be declared opened by its person outside this module.
/// fn forge(link: ConnectLinkRecord) -> OpenedBy {
///     OpenedBy { link, code_hash: String::new() }
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::connect_link::OpenedBy;
/// use mcp_oauth_proxy::store::records::ConnectLinkRecord;
/// fn read(o: &OpenedBy) -> &ConnectLinkRecord {
///     o.link()
/// }
/// ```
#[derive(Debug)]
pub struct OpenedBy {
    link: ConnectLinkRecord,
    stored_at: LinkKey,
}

impl OpenedBy {
    /// The link.
    pub fn link(&self) -> &ConnectLinkRecord {
        &self.link
    }

    /// Records that the no-JavaScript confirmation step is being shown now (milliseconds);
    /// `false` if the link was closed in the meantime (it stays closed).
    pub async fn confirm_shown(
        &mut self,
        store: &dyn Store,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match links::confirm_shown(store, &self.stored_at, now_ms).await? {
            Some(rec) => {
                self.link = rec;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// What opening a link leads to, in the order the checks run. `T` is the witness of the
/// link's kind ([`OpenedBy`], [`approval::ApprovalOpenedBy`]).
#[derive(Debug)]
pub enum Opened<T = OpenedBy> {
    /// Unknown, expired, declined or replaced: all the same to the caller.
    NotFound,
    /// Nobody is signed in: sign in, then come back to this link.
    SignIn {
        /// The link id, to return to.
        link_id: String,
    },
    /// Someone other than the link's person is signed in.
    WrongPerson {
        /// The link.
        link_id: String,
        /// Whose link.
        owner: UserId,
        /// Who opened it.
        opener: UserId,
    },
    /// The sign-in is too old, or was silent: sign in again, through GitHub's account picker.
    Stale {
        /// The link id, to return to.
        link_id: String,
    },
    /// The right person: the action may be offered.
    Owner(T),
}

/// Who opened a live link, checked in order: nobody signed in, someone else, a sign-in older
/// than `max_sign_in_age_secs` or not made through GitHub's account picker. `Ok` only for the
/// link's own person, recently signed in through the picker.
fn opener<T>(
    link_id: &str,
    owner: &UserId,
    session: Option<&Session>,
    now: UnixTime,
    max_sign_in_age_secs: u64,
) -> Result<(), Opened<T>> {
    let Some(s) = session else {
        return Err(Opened::SignIn {
            link_id: link_id.to_owned(),
        });
    };
    if &s.record().user_id != owner {
        return Err(Opened::WrongPerson {
            link_id: link_id.to_owned(),
            owner: owner.clone(),
            opener: s.record().user_id.clone(),
        });
    }
    if !s.fresh_for_link(now, max_sign_in_age_secs) {
        return Err(Opened::Stale {
            link_id: link_id.to_owned(),
        });
    }
    Ok(())
}

/// Runs the opener checks, in order.
pub async fn open(
    store: &dyn Store,
    code: &str,
    session: Option<&Session>,
    now: UnixTime,
    max_sign_in_age_secs: u64,
) -> Result<Opened, StoreError> {
    let stored_at = LinkKey::of_code(code);
    let Some(link) = links::get(store, &stored_at).await? else {
        return Ok(Opened::NotFound);
    };
    if let Err(refused) = opener(
        &link.link_id,
        &link.user_id,
        session,
        now,
        max_sign_in_age_secs,
    ) {
        return Ok(refused);
    }
    Ok(Opened::Owner(OpenedBy { link, stored_at }))
}

/// Closes a link (completed or declined): its code becomes unknown.
pub async fn close(store: &dyn Store, opened: OpenedBy) -> Result<ConnectLinkRecord, StoreError> {
    links::remove(store, &opened.stored_at).await?;
    let l = &opened.link;
    if let Some(idx) = links::open(store, &l.user_id, &l.client_id, &l.service).await?
        && idx.link_id == l.link_id
    {
        links::remove_open(store, &l.user_id, &l.client_id, &l.service).await?;
    }
    Ok(opened.link)
}

/// Looks a link up by id, for the GitHub callback of a connect flow; `None` if it is no
/// longer open.
pub async fn reopen_by_id(
    store: &dyn Store,
    key: &Key,
    link_id: &str,
) -> Result<Option<OpenedBy>, StoreError> {
    let stored_at = LinkKey::of_code(&code_for(key, link_id));
    Ok(links::get(store, &stored_at)
        .await?
        .map(|link| OpenedBy { link, stored_at }))
}

/// `[connect]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConnect {
    link_ttl_secs: u64,
    max_sign_in_age_secs: u64,
}

impl Default for RawConnect {
    fn default() -> Self {
        let d = ConnectPolicy::default();
        RawConnect {
            link_ttl_secs: d.link_ttl_secs,
            max_sign_in_age_secs: d.max_sign_in_age_secs,
        }
    }
}

/// Connect links (docs/DESIGN.md §6).
#[derive(Debug, Clone)]
pub struct ConnectPolicy {
    /// How long a link stays open (housekeeping; the opener check is the protection).
    pub link_ttl_secs: u64,
    /// A sign-in older than this (or one not made through GitHub's account picker) must be
    /// repeated, through the picker, before a link's action is offered.
    pub max_sign_in_age_secs: u64,
}

impl Default for ConnectPolicy {
    fn default() -> Self {
        ConnectPolicy {
            link_ttl_secs: 1800,
            max_sign_in_age_secs: 900,
        }
    }
}

impl ConnectPolicy {
    /// Validates `[connect]`, pushing one readable line per problem into `errs`.
    pub fn from_raw(raw: &RawConnect, errs: &mut Vec<String>) -> ConnectPolicy {
        if !(60..=86_400).contains(&raw.link_ttl_secs) {
            errs.push("connect.link_ttl_secs: between 60 and 86400".to_owned());
        }
        if !(60..=86_400).contains(&raw.max_sign_in_age_secs) {
            errs.push("connect.max_sign_in_age_secs: between 60 and 86400".to_owned());
        }
        ConnectPolicy {
            link_ttl_secs: raw.link_ttl_secs,
            max_sign_in_age_secs: raw.max_sign_in_age_secs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::audience::audienced;
    use crate::clock::{Clock as _, ManualClock};
    use crate::ids::{FamilyId, GitHubLogin};
    use crate::session::SignInKind;
    use crate::store::SledStore;
    use crate::store::records::SessionRecord;

    fn token(user: u64, client: &str) -> Audienced<AccessTokenRecord> {
        let rec = AccessTokenRecord {
            family_id: FamilyId::new("f"),
            user_id: UserId::github(user),
            client_id: ClientId::new(client),
            scopes: ScopeSet::default(),
            resource: "r".into(),
            issued_at: UnixTime(0),
            expires_at: UnixTime(1),
            branch: None,
        };
        audienced(rec, "r").unwrap()
    }

    /// A session signed in through GitHub's account picker (what a link's sign-in makes).
    fn session(user: u64, auth_time: u64) -> Session {
        signed_in(user, auth_time, SignInKind::AccountPicker)
    }

    fn signed_in(user: u64, auth_time: u64, sign_in: SignInKind) -> Session {
        Session::for_tests(SessionRecord {
            user_id: UserId::github(user),
            login: GitHubLogin::new("x"),
            auth_time: UnixTime(auth_time),
            sign_in,
        })
    }

    fn code(path: &str) -> &str {
        path.strip_prefix("/connect/").unwrap()
    }

    async fn setup() -> (SledStore, Key) {
        (
            SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap(),
            Key::generate().unwrap(),
        )
    }

    #[tokio::test]
    async fn second_request_returns_same_link() {
        let (s, k) = setup().await;
        let t = token(1, "agent");
        let a = request(
            &s,
            &k,
            UnixTime(1_000),
            1800,
            For::token(&t),
            LinkKind::Connect,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        let b = request(
            &s,
            &k,
            UnixTime(1_010),
            1800,
            For::token(&t),
            LinkKind::Connect,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        assert!(a.created && !b.created);
        assert_eq!((a.link_id.clone(), a.path.clone()), (b.link_id, b.path));
        assert_eq!(a.path.len(), "/connect/".len() + 43);
    }

    #[tokio::test]
    async fn kind_change_replaces_link() {
        let (s, k) = setup().await;
        let t = token(1, "agent");
        let a = request(
            &s,
            &k,
            UnixTime(1_000),
            1800,
            For::token(&t),
            LinkKind::Connect,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        let b = request(
            &s,
            &k,
            UnixTime(1_000),
            1800,
            For::token(&t),
            LinkKind::Allow,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        assert_ne!(a.link_id, b.link_id);
        let old = open(
            &s,
            code(&a.path),
            Some(&session(1, 1_000)),
            UnixTime(1_001),
            900,
        )
        .await
        .unwrap();
        assert!(matches!(old, Opened::NotFound));
        let new = open(
            &s,
            code(&b.path),
            Some(&session(1, 1_000)),
            UnixTime(1_001),
            900,
        )
        .await
        .unwrap();
        assert!(matches!(new, Opened::Owner(_)));
    }

    #[tokio::test]
    async fn checks_run_in_order() {
        let (s, k) = setup().await;
        let a = request(
            &s,
            &k,
            UnixTime(1_000),
            1800,
            For::token(&token(1, "agent")),
            LinkKind::Connect,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        let c = code(&a.path);
        assert!(matches!(
            open(
                &s,
                "unknown",
                Some(&session(1, 1_000)),
                UnixTime(1_001),
                900
            )
            .await
            .unwrap(),
            Opened::NotFound
        ));
        assert!(matches!(
            open(&s, c, None, UnixTime(1_001), 900).await.unwrap(),
            Opened::SignIn { .. }
        ));
        // Another person is refused even with a stale sign-in: identity is checked first.
        assert!(matches!(
            open(&s, c, Some(&session(2, 0)), UnixTime(1_001), 900)
                .await
                .unwrap(),
            Opened::WrongPerson { .. }
        ));
        assert!(matches!(
            open(&s, c, Some(&session(1, 0)), UnixTime(1_001), 900)
                .await
                .unwrap(),
            Opened::Stale { .. }
        ));
        assert!(matches!(
            open(&s, c, Some(&session(1, 1_000)), UnixTime(1_001), 900)
                .await
                .unwrap(),
            Opened::Owner(_)
        ));
    }

    /// A sign-in GitHub may have answered without a screen (the account page's, the consent
    /// flow's) is sent to sign in again however recent it is; the owner's account-picker
    /// sign-in passes until it is older than the age, on a manual clock.
    #[tokio::test]
    async fn silent_sign_in_must_sign_in_again_through_the_account_picker() {
        let (s, k) = setup().await;
        let clock = ManualClock::new(UnixTime(1_000));
        let a = request(
            &s,
            &k,
            clock.now(),
            1800,
            For::token(&token(1, "agent")),
            LinkKind::Allow,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        let c = code(&a.path);
        let silent = signed_in(1, clock.now().0, SignInKind::Silent);
        let picked = signed_in(1, clock.now().0, SignInKind::AccountPicker);
        let owner = |o: Opened| matches!(o, Opened::Owner(_));
        let stale = |o: Opened| matches!(o, Opened::Stale { .. });
        assert!(stale(
            open(&s, c, Some(&silent), clock.now(), 900).await.unwrap()
        ));
        assert!(owner(
            open(&s, c, Some(&picked), clock.now(), 900).await.unwrap()
        ));
        clock.advance(900);
        assert!(owner(
            open(&s, c, Some(&picked), clock.now(), 900).await.unwrap()
        ));
        assert!(stale(
            open(&s, c, Some(&silent), clock.now(), 900).await.unwrap()
        ));
        clock.advance(1);
        assert!(stale(
            open(&s, c, Some(&picked), clock.now(), 900).await.unwrap()
        ));
        // Someone else's silent session is still refused as another person first.
        assert!(matches!(
            open(
                &s,
                c,
                Some(&signed_in(2, 1_000, SignInKind::Silent)),
                clock.now(),
                900
            )
            .await
            .unwrap(),
            Opened::WrongPerson { .. }
        ));
    }

    #[tokio::test]
    async fn confirmation_mark_is_kept_and_never_reopens_a_closed_link() {
        let (s, k) = setup().await;
        let a = request(
            &s,
            &k,
            UnixTime(1_000),
            1800,
            For::token(&token(1, "agent")),
            LinkKind::Allow,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        let c = code(&a.path);
        let Opened::Owner(mut o) = open(&s, c, Some(&session(1, 1_000)), UnixTime(1_001), 900)
            .await
            .unwrap()
        else {
            panic!("owner expected")
        };
        assert_eq!(o.link().confirm_shown_at_ms, None);
        assert!(o.confirm_shown(&s, 1_001_500).await.unwrap());
        assert_eq!(o.link().confirm_shown_at_ms, Some(1_001_500));
        let Opened::Owner(again) = open(&s, c, Some(&session(1, 1_000)), UnixTime(1_002), 900)
            .await
            .unwrap()
        else {
            panic!("owner expected")
        };
        assert_eq!(again.link().confirm_shown_at_ms, Some(1_001_500), "stored");
        close(&s, again).await.unwrap();
        assert!(!o.confirm_shown(&s, 1_003_000).await.unwrap());
        assert!(matches!(
            open(&s, c, Some(&session(1, 1_000)), UnixTime(1_003), 900)
                .await
                .unwrap(),
            Opened::NotFound
        ));
    }

    #[tokio::test]
    async fn closed_and_expired_links_are_unknown() {
        let (s, k) = setup().await;
        let t = token(1, "agent");
        let a = request(
            &s,
            &k,
            UnixTime(1_000),
            1800,
            For::token(&t),
            LinkKind::Allow,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        let Opened::Owner(o) = open(
            &s,
            code(&a.path),
            Some(&session(1, 1_000)),
            UnixTime(1_001),
            900,
        )
        .await
        .unwrap() else {
            panic!("owner expected")
        };
        close(&s, o).await.unwrap();
        assert!(matches!(
            open(
                &s,
                code(&a.path),
                Some(&session(1, 1_000)),
                UnixTime(1_001),
                900
            )
            .await
            .unwrap(),
            Opened::NotFound
        ));
        // A new request after closing makes a new link.
        let b = request(
            &s,
            &k,
            UnixTime(1_000),
            1800,
            For::token(&t),
            LinkKind::Allow,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        assert!(b.created && b.link_id != a.link_id);
    }

    #[test]
    fn code_depends_on_the_key() {
        let (k1, k2) = (Key::generate().unwrap(), Key::generate().unwrap());
        assert_ne!(code_for(&k1, "id"), code_for(&k2, "id"));
        assert_eq!(code_for(&k1, "id"), code_for(&k1, "id"));
    }
}
