//! Operator actions behind the admin API: list, show and delete clients (all three kinds:
//! configured ones are listed but only the config removes them; deleting a metadata-document
//! client also blocks its URL for good); list and revoke a
//! person's consents; revoke a person's GitHub grant and tokens; read, verify and export the
//! audit trail. Revocation reuses the same functions as the account page, so an admin
//! revocation is exactly as effective as a person's own.
//!
//! Binding: admin API ↔ operator. Every action takes an [`Operator`], which only
//! [`authorize`] makes, after comparing the bearer token to `[admin] token` in constant time.

use serde::Serialize;
use serde_json::{Value, json};

use super::FlowError;
use crate::app::App;
use crate::audit::{AuditEvent, verify::VerifyReport};
use crate::bindings::consent_registry;
use crate::clients::{ClientsError, cimd};
use crate::crypto;
use crate::flows::{github_access, revoke};
use crate::github::grants::GitHubRevocation;
use crate::ids::{ClientId, UserId};
use crate::store::records::{CimdClientRecord, ClientRecord};
use crate::store::{self, StoreError, cimd_clients, consents, families};

/// Most audit events `audit tail` returns at once.
pub const MAX_TAIL: usize = 10_000;

/// Why an admin request failed. `http::error` maps each variant to one response.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No bearer token, or not the configured one.
    #[error("admin token missing or wrong")]
    Unauthorized,
    /// No `[admin] token` is configured, so the admin API is off.
    #[error("admin API disabled")]
    Disabled,
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The request was malformed.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// The action does not apply to this thing as it is.
    #[error("conflict: {0}")]
    Conflict(&'static str),
    /// The route exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The request body is larger than an admin request can be.
    #[error("request body too large")]
    TooLarge,
    /// A loopback admin listener was addressed by a host name other than `localhost` (a
    /// web page using DNS rebinding to reach it from the operator's browser).
    #[error("misdirected host")]
    MisdirectedHost,
    /// Our side failed.
    #[error(transparent)]
    Flow(#[from] FlowError),
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        AdminError::Flow(FlowError::Store(e))
    }
}

/// Whether a request's `Host` may reach a loopback-only admin listener: an IP literal or
/// `localhost` (any port). Any other name means a page the operator's browser loaded resolved
/// its own name to loopback (DNS rebinding) and is now reading `/metrics` or probing the API.
pub fn loopback_host_allowed(host: Option<&str>) -> bool {
    let Some(host) = host else {
        // HTTP/1.0 without Host: not a browser.
        return true;
    };
    let name = match host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`
        Some(rest) => {
            return rest
                .split(']')
                .next()
                .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok());
        }
        None => host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        }),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// Proof that the caller presented the admin token. Only [`authorize`] makes one.
///
/// ```compile_fail
/// use mcp_oauth_proxy::flows::admin::Operator;
/// // Private field: an admin action cannot be reached without the token.
/// let forged = Operator(());
/// ```
///
/// ```
/// use mcp_oauth_proxy::app::App;
/// use mcp_oauth_proxy::flows::admin::{AdminError, Operator, authorize};
/// fn check(app: &App, authorization: Option<&str>) -> Result<Operator, AdminError> {
///     authorize(app, authorization)
/// }
/// ```
#[derive(Debug)]
pub struct Operator(());

/// Checks `Authorization: Bearer <token>` against `[admin] token`. Both sides are hashed
/// first so the constant-time comparison does not reveal the token's length either.
pub fn authorize(app: &App, authorization: Option<&str>) -> Result<Operator, AdminError> {
    let Some(expected) = app.config.admin_token.as_ref() else {
        return Err(AdminError::Disabled);
    };
    let given = authorization
        // The scheme is case-insensitive (RFC 6750 §2.1, RFC 9110 §11.1).
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token)
        .ok_or(AdminError::Unauthorized)?;
    if crypto::ct_eq(
        &crypto::sha256(given.trim().as_bytes()),
        &crypto::sha256(expected.secret().as_bytes()),
    ) {
        Ok(Operator(()))
    } else {
        Err(AdminError::Unauthorized)
    }
}

/// Where a client comes from, as the admin API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientSource {
    /// `[[clients]]`: only the config removes it.
    Configured,
    /// `POST /register`.
    Registered,
    /// A Client ID Metadata Document URL.
    MetadataDocument,
}

/// A client as the admin API shows it (never its secret hash).
#[derive(Debug, Serialize)]
pub struct ClientView {
    client_id: ClientId,
    kind: ClientSource,
    /// Metadata documents only: deleted by an operator, never fetched again.
    #[serde(skip_serializing_if = "Option::is_none")]
    blocked: Option<bool>,
    client_name: Option<String>,
    redirect_uris: Vec<String>,
    auth_method: Value,
    grant_types: Vec<String>,
    registered_at: u64,
}

impl ClientView {
    fn of(c: &ClientRecord, kind: ClientSource) -> Self {
        ClientView {
            client_id: c.client_id.clone(),
            kind,
            blocked: None,
            client_name: c.client_name.clone(),
            redirect_uris: c.redirect_uris.clone(),
            auth_method: serde_json::to_value(c.auth_method).unwrap_or(Value::Null),
            grant_types: c.grant_types.clone(),
            registered_at: c.registered_at.0,
        }
    }

    fn of_document(d: &CimdClientRecord) -> Self {
        ClientView {
            blocked: Some(d.blocked_at.is_some()),
            ..ClientView::of(&d.client, ClientSource::MetadataDocument)
        }
    }
}

/// Every client: configured, registered, and metadata documents this server has seen.
pub async fn list_clients(app: &App, _: &Operator) -> Result<Vec<ClientView>, AdminError> {
    let mut out: Vec<ClientView> = app
        .clients
        .configured()
        .iter()
        .map(|c| ClientView::of(c, ClientSource::Configured))
        .collect();
    out.extend(
        store::clients::all(app.store.as_ref())
            .await?
            .iter()
            .map(|c| ClientView::of(c, ClientSource::Registered)),
    );
    out.extend(
        cimd_clients::all(app.store.as_ref())
            .await?
            .iter()
            .map(ClientView::of_document),
    );
    Ok(out)
}

const CONFIGURED: &str =
    "this client is configured in [[clients]]: remove it from the config and restart";

/// The client as the admin API finds it, of any kind.
async fn find_client(app: &App, id: &ClientId) -> Result<ClientView, AdminError> {
    if app.clients.is_configured(id) {
        let c = app
            .clients
            .known(id)
            .await?
            .ok_or(AdminError::NotFound("client"))?;
        return Ok(ClientView::of(&c, ClientSource::Configured));
    }
    if cimd::is_url_client_id(id.as_str()) {
        let d = cimd_clients::get(app.store.as_ref(), id)
            .await?
            .ok_or(AdminError::NotFound("client"))?;
        return Ok(ClientView::of_document(&d));
    }
    let c = store::clients::get(app.store.as_ref(), id)
        .await?
        .ok_or(AdminError::NotFound("client"))?;
    Ok(ClientView::of(&c, ClientSource::Registered))
}

/// One client, with how many people consented to it and how many token families it holds.
pub async fn show_client(app: &App, _: &Operator, id: &ClientId) -> Result<Value, AdminError> {
    let client = find_client(app, id).await?;
    let consents = consents_of_client(app, id).await?.len();
    let fams = families::index_all(app.store.as_ref())
        .await?
        .into_iter()
        .filter(|(_, c, _)| c == id)
        .count();
    Ok(json!({
        "client": client,
        "consents": consents,
        "token_families": fams,
    }))
}

async fn consents_of_client(app: &App, id: &ClientId) -> Result<Vec<UserId>, AdminError> {
    Ok(consents::all(app.store.as_ref())
        .await?
        .into_iter()
        .filter(|c| &c.client_id == id)
        .map(|c| c.user_id)
        .collect())
}

/// What a deletion or revocation removed.
#[derive(Debug, Serialize)]
pub struct Revoked {
    /// Consents forgotten.
    pub consents: usize,
    /// Refresh-token families revoked (with their access tokens).
    pub families: usize,
    /// Whether a GitHub grant was forgotten.
    pub grant_removed: bool,
    /// Agent allowances (permission to use a person's GitHub account) withdrawn.
    pub allowances: usize,
    /// For a grant revocation, what happened at GitHub: `revoked`, `no_grant`, or why it was
    /// not confirmed (`refused_by_github`, `github_unreachable`, `token_unreadable`; the
    /// person should then revoke the app in their GitHub settings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github_revocation: Option<&'static str>,
}

/// What lifting a block did.
#[derive(Debug, Serialize)]
pub struct Unblocked {
    /// The client, now as never seen: its next use fetches its document again.
    pub client_id: ClientId,
    /// Always true (a client that was not blocked is a 404).
    pub unblocked: bool,
}

/// Lifts the block a delete put on a metadata-document client (the delete was a mistake).
/// Its consents and tokens stay revoked; people approve it again as a new client.
pub async fn unblock_client(
    app: &App,
    _: &Operator,
    id: &ClientId,
) -> Result<Unblocked, AdminError> {
    const NOT_BLOCKED: &str = "blocked metadata-document client";
    if !cimd::is_url_client_id(id.as_str()) {
        return Err(AdminError::NotFound(NOT_BLOCKED));
    }
    match app.clients.unblock(id).await {
        Ok(true) => {}
        Ok(false) | Err(ClientsError::Document(_) | ClientsError::Fetch(_)) => {
            return Err(AdminError::NotFound(NOT_BLOCKED));
        }
        Err(ClientsError::Store(e)) => return Err(e.into()),
    }
    app.audit
        .record(AuditEvent::ClientUnblocked {
            client_id: id.clone(),
        })
        .await?;
    Ok(Unblocked {
        client_id: id.clone(),
        unblocked: true,
    })
}

/// Deletes a client: first so that nothing new can start (a registration is removed; a
/// metadata-document URL is blocked for good, since removing its record would only let the
/// next request fetch it again), then every person's consent for it, then every token family
/// it holds. Configured clients are refused: only the config removes them.
pub async fn delete_client(app: &App, _: &Operator, id: &ClientId) -> Result<Revoked, AdminError> {
    if app.clients.is_configured(id) {
        return Err(AdminError::Conflict(CONFIGURED));
    }
    // Whether this call took the client away. If it was gone already (deleted before, or a
    // delete that failed after its first step), what it left behind is still revoked below,
    // so repeating a failed delete finishes it.
    let took_it = if cimd::is_url_client_id(id.as_str()) {
        match app.clients.block(id).await {
            Ok(newly) => newly,
            // Not a URL that could ever be fetched: nothing of it can exist.
            Err(ClientsError::Document(_) | ClientsError::Fetch(_)) => {
                return Err(AdminError::NotFound("client"));
            }
            Err(ClientsError::Store(e)) => return Err(e.into()),
        }
    } else {
        store::clients::remove(app.store.as_ref(), id).await?
    };
    let mut consents = 0;
    let mut users = consents_of_client(app, id).await?;
    users.dedup();
    for user in &users {
        consents += consent_registry::revoke_client(app.store.as_ref(), user, id).await?;
    }
    let mut revoked = 0;
    for (_, client, fam) in families::index_all(app.store.as_ref()).await? {
        if &client == id && revoke::revoke_family(app, &fam).await? {
            revoked += 1;
        }
    }
    // Backend tokens died with their families; the allowances go too.
    let allowances = github_access::withdraw_everywhere(app, id).await?;
    if !took_it && consents == 0 && revoked == 0 && allowances == 0 {
        return Err(AdminError::NotFound("client"));
    }
    app.audit
        .record(AuditEvent::ClientDeleted {
            client_id: id.clone(),
            consents,
            families: revoked,
            allowances,
        })
        .await?;
    Ok(Revoked {
        consents,
        families: revoked,
        grant_removed: false,
        allowances,
        github_revocation: None,
    })
}

/// A person's consents.
pub async fn list_consents(
    app: &App,
    _: &Operator,
    user: &UserId,
) -> Result<Vec<crate::store::records::ConsentRecord>, AdminError> {
    Ok(consent_registry::list(app.store.as_ref(), user).await?)
}

/// Revokes a person's consent for a client, the client's tokens (backend tokens included) and
/// its GitHub allowance for that person: exactly what the account page's "revoke" does
/// (`flows::revoke::client_for`).
pub async fn revoke_consent(
    app: &App,
    _: &Operator,
    user: &UserId,
    client: &ClientId,
) -> Result<Revoked, AdminError> {
    let r = revoke::client_for(app, user, client).await?;
    if !r.anything() {
        return Err(AdminError::NotFound("consent"));
    }
    app.audit
        .record(AuditEvent::ClientAccessRevoked {
            user_id: user.clone(),
            client_id: client.clone(),
            families: r.families,
            allowance: r.allowance,
        })
        .await?;
    Ok(Revoked {
        consents: r.consents,
        families: r.families,
        grant_removed: false,
        allowances: usize::from(r.allowance),
        github_revocation: None,
    })
}

/// Forgets a person's GitHub grant (and revokes it at GitHub, reporting whether GitHub
/// confirmed), withdraws every agent allowance, and revokes every proxy token the person
/// holds, for all clients (backend tokens die with their families).
pub async fn revoke_grant(app: &App, _: &Operator, user: &UserId) -> Result<Revoked, AdminError> {
    let everything = revoke::everything_of(app, user).await?;
    let forgotten = everything.grant;
    let revoked = everything.families;
    let had_grant = forgotten.github != GitHubRevocation::NoGrant;
    if !had_grant && revoked == 0 && forgotten.allowances == 0 {
        return Err(AdminError::NotFound("grant or tokens for this user"));
    }
    app.audit
        .record(AuditEvent::GrantRevokedByAdmin {
            user_id: user.clone(),
            families: revoked,
            github_revocation: forgotten.github.as_str(),
            allowances: forgotten.allowances,
        })
        .await?;
    Ok(Revoked {
        consents: 0,
        families: revoked,
        grant_removed: had_grant,
        allowances: forgotten.allowances,
        github_revocation: Some(forgotten.github.as_str()),
    })
}

/// The tool-call policy in force now (the one the last valid SIGHUP reload or the start put
/// in force): rule ids, decisions, tool globs, argument pointers, people and clients.
pub fn policy(app: &App, _: &Operator) -> crate::tool_policy::PolicySummary {
    app.policy().summary()
}

/// The newest `limit` audit records, oldest first.
pub async fn audit_tail(
    app: &App,
    _: &Operator,
    limit: usize,
) -> Result<Vec<crate::audit::AuditRecord>, AdminError> {
    Ok(app.audit.recent(limit.min(MAX_TAIL)).await?)
}

/// The newest `limit` policy decisions and approval answers, oldest first, of one person
/// and/or one client if given.
pub async fn policy_decisions(
    app: &App,
    _: &Operator,
    limit: usize,
    user: Option<&str>,
    client: Option<&str>,
) -> Result<Vec<crate::audit::AuditRecord>, AdminError> {
    use crate::audit::Kind;
    let field = |r: &crate::audit::AuditRecord, name: &str| -> Option<String> {
        r.event
            .get(name)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    Ok(app
        .audit
        .recent_of(
            &[Kind::PolicyDecision, Kind::ApprovalAnswered],
            limit.min(MAX_TAIL),
            |r| {
                user.is_none_or(|u| field(r, "user_id").as_deref() == Some(u))
                    && client.is_none_or(|c| field(r, "client_id").as_deref() == Some(c))
            },
        )
        .await?)
}

/// Joins the stored trail (see `audit::verify`), reading it one page at a time: memory is
/// bounded by one page plus what the verifier keeps, never the whole trail.
pub async fn audit_verify(app: &App, _: &Operator) -> Result<VerifyReport, AdminError> {
    let mut v = crate::audit::verify::Verifier::new();
    let mut cursor = None;
    loop {
        let (page, next) = app
            .audit
            .page(cursor.as_ref(), crate::audit::PAGE_SIZE)
            .await?;
        for rec in &page {
            v.feed(rec);
        }
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    Ok(v.finish())
}

/// The whole stored trail as JSON lines, oldest first, one page ([`crate::audit::PAGE_SIZE`]
/// stored rows) at a time (never the whole trail in memory). A store failure mid-way ends the
/// stream with an error, so the reader sees a broken transfer rather than a short file that
/// looks complete.
pub fn audit_export(
    app: &App,
    _: &Operator,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, AdminError>> + Send + 'static {
    use crate::audit::AuditCursor;
    enum State {
        From(Option<AuditCursor>),
        Done,
    }
    let audit = app.audit.clone();
    futures_util::stream::unfold(State::From(None), move |state| {
        let audit = audit.clone();
        async move {
            let State::From(cursor) = state else {
                return None;
            };
            let chunk = async {
                let (page, next) = audit.page(cursor.as_ref(), crate::audit::PAGE_SIZE).await?;
                let mut out = Vec::new();
                for rec in &page {
                    serde_json::to_writer(&mut out, rec).map_err(|e| {
                        AdminError::Flow(FlowError::Store(StoreError::Backend(e.to_string())))
                    })?;
                    out.push(b'\n');
                }
                Ok::<_, AdminError>((bytes::Bytes::from(out), next))
            }
            .await;
            Some(match chunk {
                Ok((bytes, Some(next))) => (Ok(bytes), State::From(Some(next))),
                Ok((bytes, None)) => (Ok(bytes), State::Done),
                Err(e) => (Err(e), State::Done),
            })
        }
    })
}

/// Readiness: the configuration was loaded (an [`App`] holds a validated one), the store
/// answers a read, and writes made so far can be made durable (on sled a flush of whatever is
/// pending succeeds: after a failed flush, a full disk or a stopped flusher, every request
/// that creates state would answer 500 while reads still answer).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Readiness {
    /// Configuration loaded.
    pub config: bool,
    /// Store answered.
    pub store: bool,
    /// Pending writes flushed (on PostgreSQL every statement is committed: always true).
    pub durable: bool,
}

impl Readiness {
    /// Ready to serve.
    pub fn ready(&self) -> bool {
        self.config && self.store && self.durable
    }
}

/// How long a readiness answer is reused: whoever can reach `/readyz` (a load balancer
/// probing every few seconds, or anyone on the admin listener's network) makes the store read
/// and flush at most once per this many seconds.
pub const READINESS_REUSE_SECS: u64 = 2;

/// [`readiness`] at most once per [`READINESS_REUSE_SECS`]; callers meanwhile (and callers
/// queued behind a check in progress) get the last answer.
#[derive(Default)]
pub struct ReadinessProbe {
    last: tokio::sync::Mutex<Option<(crate::clock::UnixTime, Readiness)>>,
}

impl ReadinessProbe {
    /// The readiness, checked afresh only when the last check is older than the period.
    pub async fn check(&self, app: &App) -> Readiness {
        let mut last = self.last.lock().await;
        let now = app.clock.now();
        if let Some((at, r)) = *last
            && now.0 < at.0.saturating_add(READINESS_REUSE_SECS)
            && now.0 >= at.0
        {
            return r;
        }
        let r = readiness(app).await;
        *last = Some((now, r));
        r
    }
}

/// Checks readiness (no operator needed: it reveals nothing).
pub async fn readiness(app: &App) -> Readiness {
    let store = match store::clients::probe(app.store.as_ref()).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "readiness: store read failed");
            false
        }
    };
    let durable = match app.store.flush().await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "readiness: store flush failed");
            false
        }
    };
    Readiness {
        config: true,
        store,
        durable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ip_literals_and_localhost_reach_a_loopback_admin_listener() {
        for ok in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "localhost:9090",
            "LOCALHOST",
            "[::1]:9090",
            "[::1]",
        ] {
            assert!(loopback_host_allowed(Some(ok)), "{ok}");
        }
        assert!(loopback_host_allowed(None));
        for rebinding in [
            "evil.example:9090",
            "evil.example",
            "127.0.0.1.nip.io:9090",
            "localhost.evil.example",
            "[::1.evil]:9090",
            "\u{fffd}",
        ] {
            assert!(!loopback_host_allowed(Some(rebinding)), "{rebinding}");
        }
    }
}
