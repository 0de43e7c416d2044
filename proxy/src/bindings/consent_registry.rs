//! Binding: person ↔ MCP client ↔ redirect URI ↔ scopes. The registry is server-side and is
//! consulted before anything is sent to GitHub. A consent covers one (person, client,
//! registered redirect URI) and a scope set, and records the fingerprint of the client's
//! metadata it was given for (`clients::fingerprint`); a new client, a new redirect URI, more
//! scopes, or a client whose metadata changed (a new metadata document, an edited configured
//! client) are not covered and need the consent page again.

use super::admission::Admitted;
use super::browser_state::BrowserBound;
use super::redirect::RedirectMatched;
use crate::clock::UnixTime;
use crate::ids::{ClientId, UserId};
use crate::oauth::scope::ScopeSet;
use crate::session::FreshSession;
use crate::store::records::{ConsentRecord, UpstreamStateRecord};
use crate::store::{Held, Store, StoreError, consents};

/// How we know the person is at this browser now. A consent is made from one, by value, so
/// the person it is for is the person present.
#[derive(Debug)]
pub enum Presence {
    /// They just came back from GitHub to the browser that approved the consent page.
    Callback(Box<BrowserBound<UpstreamStateRecord>>),
    /// A fresh sign-in in this browser, a same-origin or direct navigation, and a remembered
    /// consent.
    Session(FreshSession),
}

/// Proof that this person consented to this client, redirect URI and scopes, and is present
/// in this browser now. Only this module makes one: [`lookup`] from a [`FreshSession`] (the
/// person is the session's), [`record`] from the callback's [`BrowserBound`] state and the
/// [`Admitted`] person GitHub just confirmed. It carries that presence, so code issuance
/// takes no session of its own and cannot pair one person's session with another's consent.
/// No `Clone`: one consent check, one code.
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::consent_registry::{ConsentGranted, Presence};
/// use mcp_oauth_proxy::bindings::redirect::RedirectMatched;
/// use mcp_oauth_proxy::ids::UserId;
/// use mcp_oauth_proxy::oauth::scope::ScopeSet;
/// use mcp_oauth_proxy::session::FreshSession;
/// // Private fields: Alice's consent cannot be put together with Bob's session.
/// fn forge(bobs: FreshSession, redirect: RedirectMatched, scopes: ScopeSet) -> ConsentGranted {
///     ConsentGranted {
///         user_id: UserId::github(1),
///         redirect,
///         scopes,
///         presence: Presence::Session(bobs),
///     }
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::consent_registry::{ConsentGranted, Presence};
/// use mcp_oauth_proxy::ids::{ClientId, UserId};
/// // What a consent says: the person and client it was granted for, and how they are here.
/// fn who(c: &ConsentGranted) -> (&UserId, &ClientId, bool) {
///     (c.user_id(), c.client_id(), matches!(c.presence(), Presence::Session(_)))
/// }
/// ```
#[derive(Debug)]
pub struct ConsentGranted {
    user_id: UserId,
    redirect: RedirectMatched,
    scopes: ScopeSet,
    presence: Presence,
}

impl ConsentGranted {
    /// The person it was granted by, who is the person present.
    pub fn user_id(&self) -> &UserId {
        &self.user_id
    }
    /// The client it was granted to.
    pub fn client_id(&self) -> &ClientId {
        self.redirect.client_id()
    }
    /// The matched redirect.
    pub fn redirect(&self) -> &RedirectMatched {
        &self.redirect
    }
    /// The consented scopes this authorization uses.
    pub fn scopes(&self) -> &ScopeSet {
        &self.scopes
    }
    /// How the person is known to be at this browser.
    pub fn presence(&self) -> &Presence {
        &self.presence
    }
}

/// A remembered consent did not cover the request; the redirect is handed back for the
/// consent page.
#[derive(Debug)]
pub struct NotCovered(pub RedirectMatched);

/// Whether a stored consent was given for the client as it is now. Records from before
/// fingerprints can only be for registered clients (the only kind there was), whose
/// metadata never changes.
fn same_client(rec: &ConsentRecord, fingerprint: &str) -> bool {
    match &rec.client_fingerprint {
        Some(f) => f == fingerprint,
        None => rec
            .client_id
            .as_str()
            .starts_with(crate::oauth::grant::CLIENT_PREFIX),
    }
}

/// Whether a remembered consent of `user` covers this request, given for the client metadata
/// with this `fingerprint`.
pub async fn on_record(
    store: &dyn Store,
    user: &UserId,
    redirect: &RedirectMatched,
    scopes: &ScopeSet,
    fingerprint: &str,
) -> Result<bool, StoreError> {
    let rec = consents::get(store, user, redirect.client_id(), redirect.registered()).await?;
    Ok(rec.is_some_and(|r| {
        r.user_id == *user
            && r.client_id == *redirect.client_id()
            && r.scopes.covers(scopes)
            && same_client(&r, fingerprint)
    }))
}

/// The consent page may be skipped: the fresh session's person has a remembered consent
/// covering this request (client metadata with this `fingerprint`). The consent is looked up
/// for the session's own person, so another person's consent never covers it.
pub async fn lookup(
    store: &dyn Store,
    fresh: FreshSession,
    redirect: RedirectMatched,
    scopes: &ScopeSet,
    fingerprint: &str,
) -> Result<Result<ConsentGranted, NotCovered>, StoreError> {
    if !on_record(store, fresh.user_id(), &redirect, scopes, fingerprint).await? {
        return Ok(Err(NotCovered(redirect)));
    }
    Ok(Ok(ConsentGranted {
        user_id: fresh.user_id().clone(),
        redirect,
        scopes: scopes.clone(),
        presence: Presence::Session(fresh),
    }))
}

/// Records the consent the person gave on the consent page. Requires the proof that the
/// GitHub callback came back to the browser that approved, and the person GitHub confirmed
/// there and `[access]` admitted: the consent is theirs.
pub async fn record(
    store: &dyn Store,
    now: UnixTime,
    admitted: &Admitted,
    redirect: RedirectMatched,
    scopes: ScopeSet,
    fingerprint: &str,
    approved_in_this_browser: BrowserBound<UpstreamStateRecord>,
) -> Result<ConsentGranted, StoreError> {
    let user = admitted.user_id();
    let previous = consents::get(store, user, redirect.client_id(), redirect.registered()).await?;
    // The person approved `scopes` now and whatever the earlier record holds before, as long
    // as that was for the same client metadata.
    let union = match &previous {
        Some(p) if same_client(p, fingerprint) => {
            ScopeSet::from_list(p.scopes.iter().chain(scopes.iter()).map(str::to_owned))
        }
        _ => scopes.clone(),
    };
    let rec = ConsentRecord {
        user_id: user.clone(),
        client_id: redirect.client_id().clone(),
        redirect_uri: redirect.registered().to_owned(),
        scopes: union,
        granted_at: now,
        last_used_at: previous.and_then(|p| p.last_used_at),
        client_fingerprint: Some(fingerprint.to_owned()),
    };
    consents::put(store, &rec).await?;
    Ok(ConsentGranted {
        user_id: user.clone(),
        redirect,
        scopes,
        presence: Presence::Callback(Box::new(approved_in_this_browser)),
    })
}

/// How stale a consent's `last_used_at` may be: the account page shows it to the minute ("just
/// now" below 60 s), so a use within this many seconds of the recorded one writes nothing. A
/// busy client refreshing several times a minute then costs no consent write per refresh.
pub const TOUCH_EVERY_SECS: u64 = 60;

/// Notes that a consent was used (code or refresh), for the account page. A compare-and-swap
/// against what was read, so a consent revoked meanwhile is never written back.
pub async fn touch(
    store: &dyn Store,
    now: UnixTime,
    user: &UserId,
    client: &ClientId,
) -> Result<(), StoreError> {
    touch_held(
        store,
        now,
        consents::hold_of_client(store, user, client).await?,
    )
    .await
}

/// The consents a person gave a client, as read now, to check that one exists and then
/// [`touch_held`] them without reading them again.
pub async fn held_for_client(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<Vec<Held<ConsentRecord>>, StoreError> {
    consents::hold_of_client(store, user, client).await
}

/// [`touch`] for consents already read: each one still exactly as read and not noted as used
/// within [`TOUCH_EVERY_SECS`] gets `now`.
pub async fn touch_held(
    store: &dyn Store,
    now: UnixTime,
    held: Vec<Held<ConsentRecord>>,
) -> Result<(), StoreError> {
    for held in held {
        if held
            .value()
            .last_used_at
            .is_some_and(|t| now.since(t) < TOUCH_EVERY_SECS)
        {
            continue;
        }
        let mut rec = held.value().clone();
        rec.last_used_at = Some(now);
        // One attempt: a lost swap means the record changed or vanished; leave it as it is.
        held.swap(store, &rec, held.expires_at()).await?;
    }
    Ok(())
}

/// Whether a person still has any consent for a client (checked when a code is redeemed, so
/// a revocation between issuing and redeeming a code wins).
pub async fn exists_for_client(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<bool, StoreError> {
    consents::exists_for_client(store, user, client).await
}

/// All of a person's consents.
pub async fn list(store: &dyn Store, user: &UserId) -> Result<Vec<ConsentRecord>, StoreError> {
    consents::of_user(store, user).await
}

/// Forgets every consent a person gave one client; returns how many.
pub async fn revoke_client(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<usize, StoreError> {
    consents::remove_of_client(store, user, client).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::redirect::match_redirect;
    use crate::clock::ManualClock;
    use crate::store::SledStore;

    fn redirect(client: &str, uri: &str) -> RedirectMatched {
        match_redirect(&ClientId::new(client), &[uri.to_owned()], Some(uri)).unwrap()
    }

    const FP: &str = "fp-1";

    async fn put(store: &SledStore, user: &UserId, r: &RedirectMatched, scopes: &str) {
        put_with(store, user, r, scopes, Some(FP)).await;
    }

    async fn put_with(
        store: &SledStore,
        user: &UserId,
        r: &RedirectMatched,
        scopes: &str,
        fingerprint: Option<&str>,
    ) {
        let rec = ConsentRecord {
            user_id: user.clone(),
            client_id: r.client_id().clone(),
            redirect_uri: r.registered().to_owned(),
            scopes: ScopeSet::parse(scopes).unwrap(),
            granted_at: UnixTime(1),
            last_used_at: None,
            client_fingerprint: fingerprint.map(str::to_owned),
        };
        consents::put(store, &rec).await.unwrap();
    }

    fn store() -> SledStore {
        SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap()
    }

    #[tokio::test]
    async fn consent_for_client_a_does_not_cover_client_b() {
        let s = store();
        let alice = UserId::github(1);
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        let scopes = ScopeSet::parse("read:user").unwrap();
        assert!(on_record(&s, &alice, &a, &scopes, FP).await.unwrap());
        let b = redirect("client-b", "https://a.example/cb");
        assert!(!on_record(&s, &alice, &b, &scopes, FP).await.unwrap());
    }

    #[tokio::test]
    async fn consent_of_one_person_does_not_cover_another() {
        let s = store();
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &UserId::github(1), &a, "read:user").await;
        let scopes = ScopeSet::parse("read:user").unwrap();
        assert!(
            !on_record(&s, &UserId::github(2), &a, &scopes, FP)
                .await
                .unwrap()
        );
    }

    fn fresh(user: &UserId) -> FreshSession {
        use crate::store::records::SessionRecord;
        let session = crate::session::Session::for_tests(SessionRecord {
            user_id: user.clone(),
            login: crate::ids::GitHubLogin::new("someone"),
            auth_time: UnixTime(1_000),
            sign_in: crate::session::SignInKind::Silent,
        });
        session
            .fresh_for_consent_skip(UnixTime(1_001), &Default::default(), Some("none"))
            .unwrap()
    }

    /// Mallory's fresh session on Alice's consent: the lookup is for the session's own person,
    /// so Alice's consent makes no witness for Mallory (and a witness cannot be assembled from
    /// parts: see the `compile_fail` example on `ConsentGranted`).
    #[tokio::test]
    async fn one_persons_session_with_another_persons_consent_is_refused() {
        let s = store();
        let (alice, mallory) = (UserId::github(1), UserId::github(2));
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        let scopes = ScopeSet::parse("read:user").unwrap();
        let refused = lookup(&s, fresh(&mallory), a, &scopes, FP).await.unwrap();
        let NotCovered(a) = refused.unwrap_err();
        let granted = lookup(&s, fresh(&alice), a, &scopes, FP)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(granted.user_id(), &alice);
        assert_eq!(granted.client_id(), &ClientId::new("client-a"));
        assert!(
            matches!(granted.presence(), Presence::Session(f) if f.user_id() == &alice),
            "the consent carries the session it was looked up for"
        );
    }

    #[tokio::test]
    async fn scope_growth_requires_reconsent() {
        let s = store();
        let alice = UserId::github(1);
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        let more = ScopeSet::parse("read:user repo").unwrap();
        assert!(!on_record(&s, &alice, &a, &more, FP).await.unwrap());
    }

    #[tokio::test]
    async fn new_redirect_uri_requires_reconsent() {
        let s = store();
        let alice = UserId::github(1);
        let regs = vec![
            "https://a.example/cb".to_owned(),
            "https://other.example/cb".to_owned(),
        ];
        let first =
            match_redirect(&ClientId::new("c"), &regs, Some("https://a.example/cb")).unwrap();
        put(&s, &alice, &first, "read:user").await;
        let second =
            match_redirect(&ClientId::new("c"), &regs, Some("https://other.example/cb")).unwrap();
        let scopes = ScopeSet::parse("read:user").unwrap();
        assert!(!on_record(&s, &alice, &second, &scopes, FP).await.unwrap());
    }

    #[tokio::test]
    async fn loopback_consent_survives_a_new_port() {
        let s = store();
        let alice = UserId::github(1);
        let regs = vec!["http://127.0.0.1/cb".to_owned()];
        let first =
            match_redirect(&ClientId::new("c"), &regs, Some("http://127.0.0.1:5000/cb")).unwrap();
        put(&s, &alice, &first, "read:user").await;
        let later =
            match_redirect(&ClientId::new("c"), &regs, Some("http://127.0.0.1:6000/cb")).unwrap();
        let scopes = ScopeSet::parse("read:user").unwrap();
        assert!(on_record(&s, &alice, &later, &scopes, FP).await.unwrap());
    }

    #[tokio::test]
    async fn touch_never_resurrects_a_revoked_consent() {
        let s = store();
        let alice = UserId::github(1);
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        revoke_client(&s, &alice, a.client_id()).await.unwrap();
        touch(&s, UnixTime(5), &alice, a.client_id()).await.unwrap();
        assert!(!exists_for_client(&s, &alice, a.client_id()).await.unwrap());
    }

    async fn last_used(s: &SledStore) -> Option<UnixTime> {
        consents::of_user(s, &UserId::github(1)).await.unwrap()[0].last_used_at
    }

    #[tokio::test]
    async fn touch_writes_a_use_once_a_minute() {
        let s = store();
        let alice = UserId::github(1);
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        assert_eq!(last_used(&s).await, None);
        touch(&s, UnixTime(1000), &alice, a.client_id())
            .await
            .unwrap();
        assert_eq!(last_used(&s).await, Some(UnixTime(1000)));
        // Within the minute the account page shows, nothing is written.
        touch(
            &s,
            UnixTime(1000 + TOUCH_EVERY_SECS - 1),
            &alice,
            a.client_id(),
        )
        .await
        .unwrap();
        assert_eq!(last_used(&s).await, Some(UnixTime(1000)));
        let held = held_for_client(&s, &alice, a.client_id()).await.unwrap();
        touch_held(&s, UnixTime(1000 + TOUCH_EVERY_SECS), held)
            .await
            .unwrap();
        assert_eq!(last_used(&s).await, Some(UnixTime(1000 + TOUCH_EVERY_SECS)));
    }

    #[tokio::test]
    async fn touch_of_held_consents_never_resurrects_one_revoked_after_the_read() {
        let s = store();
        let alice = UserId::github(1);
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        let held = held_for_client(&s, &alice, a.client_id()).await.unwrap();
        assert_eq!(held.len(), 1);
        revoke_client(&s, &alice, a.client_id()).await.unwrap();
        touch_held(&s, UnixTime(5), held).await.unwrap();
        assert!(!exists_for_client(&s, &alice, a.client_id()).await.unwrap());
    }

    #[tokio::test]
    async fn changed_client_metadata_requires_reconsent() {
        let s = store();
        let alice = UserId::github(1);
        let a = redirect("https://app.example/client.json", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        let scopes = ScopeSet::parse("read:user").unwrap();
        assert!(on_record(&s, &alice, &a, &scopes, FP).await.unwrap());
        assert!(!on_record(&s, &alice, &a, &scopes, "fp-2").await.unwrap());
    }

    #[tokio::test]
    async fn consents_from_before_fingerprints_cover_only_registered_clients() {
        let s = store();
        let alice = UserId::github(1);
        let scopes = ScopeSet::parse("read:user").unwrap();
        let dcr = redirect("mcpc_abc", "https://a.example/cb");
        put_with(&s, &alice, &dcr, "read:user", None).await;
        assert!(on_record(&s, &alice, &dcr, &scopes, FP).await.unwrap());
        let doc = redirect("https://app.example/c.json", "https://a.example/cb");
        put_with(&s, &alice, &doc, "read:user", None).await;
        assert!(!on_record(&s, &alice, &doc, &scopes, FP).await.unwrap());
    }

    #[tokio::test]
    async fn revoked_consent_is_gone() {
        let s = store();
        let alice = UserId::github(1);
        let a = redirect("client-a", "https://a.example/cb");
        put(&s, &alice, &a, "read:user").await;
        assert_eq!(revoke_client(&s, &alice, a.client_id()).await.unwrap(), 1);
        let scopes = ScopeSet::parse("read:user").unwrap();
        assert!(!on_record(&s, &alice, &a, &scopes, FP).await.unwrap());
    }
}
