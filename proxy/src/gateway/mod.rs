//! The `/mcp` gateway. Every request is authenticated from its head alone, before its body is
//! read ([`authenticate`]; Bearer header only; a local lookup, no GitHub call),
//! audience-checked, scope-checked, and its MCP session or request state must
//! belong to the caller; then it is forwarded to the backend with the proxy's own credential,
//! and the response streams back unbuffered.

pub mod envelope;
pub mod forward;
pub mod jsonrpc;
pub mod policy;
pub mod refusal;
pub mod request_state;
pub mod tool_list;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method};

use crate::app::App;
use crate::audit::{AuditEvent, aggregate};
use crate::bindings::audience::Audienced;
use crate::bindings::backend::BackendAuth;
use crate::bindings::connect_link;
use crate::bindings::session_binding::{self, SessionChecked};
use crate::bindings::upstream_auth::BackendCredential;
use crate::flows::access::{self, TokenRejection};
use crate::flows::admission::{self, PersonFacts, Verdict};
use crate::flows::github_access::{self, Access};
use crate::ids::BackendToken;
use crate::store::StoreError;
use crate::store::backend_tokens;
use crate::store::call_records::CallRecords;
use crate::store::records::AccessTokenRecord;
use crate::store::records::{
    AllowanceRecord, BackendTokenRecord, ClientRecord, GrantRecord, LinkKind,
};
pub use forward::Forwarded;
use jsonrpc::{Inbound, Version};

/// Why `/mcp` refused a request. `http::error` maps each to its response.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// `Origin` present and not allowed (DNS rebinding, cross-site pages).
    #[error("origin not allowed")]
    ForbiddenOrigin,
    /// A token in the query string.
    #[error("token in query string")]
    TokenInQuery,
    /// No bearer token.
    #[error("no token")]
    NoToken,
    /// A token that is not a live token of this server for this resource.
    #[error("invalid token: {0:?}")]
    InvalidToken(TokenRejection),
    /// The token lacks scopes `/mcp` requires.
    #[error("insufficient scope")]
    InsufficientScope(String),
    /// Unknown `Mcp-Session-Id` or `requestState`, or one that belongs to someone else.
    #[error("unknown session")]
    UnknownSession,
    /// `Mcp-Session-Id` or `MCP-Protocol-Version` repeated, empty or not visible ASCII.
    #[error("bad transport header: {0:?}")]
    BadTransportHeader(session_binding::BadTransportHeader),
    /// A JSON-RPC batch (removed from MCP in 2025-06-18; never forwarded).
    #[error("JSON-RPC batch")]
    BatchNotSupported,
    /// A request without a JSON-RPC id-bearing body where a session is needed.
    #[error("GitHub access missing")]
    GitHubAccessMissing {
        /// JSON-RPC id to answer, if the request had one.
        id: Option<String>,
    },
    /// No backend configured.
    #[error("no backend configured")]
    NoBackend,
    /// The backend refused the person's GitHub token (github_token mode).
    #[error("GitHub refused the person's token")]
    GitHubRejected,
    /// A `requestState` the gateway minted, presented tampered, expired or by someone else.
    #[error("invalid requestState")]
    BadRequestState {
        /// JSON-RPC id to answer.
        id: Option<String>,
    },
    /// The backend could not be reached or answered badly.
    #[error("backend unavailable: {0}")]
    Backend(String),
    /// GitHub could not confirm the person's standing for longer than `[access]` allows.
    #[error("standing could not be confirmed with GitHub")]
    StandingUnverifiable,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An inbound `/mcp` request.
#[derive(Debug)]
pub struct McpRequest {
    /// Method.
    pub method: Method,
    /// Headers.
    pub headers: HeaderMap,
    /// Raw query string.
    pub query: Option<String>,
    /// Body (requests are small; responses stream).
    pub body: Bytes,
}

/// What the client declared about itself for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientContext {
    /// Protocol generation.
    pub version: Version,
    /// URL-mode elicitation declared (in `initialize` for 2025-x, in `_meta` for 2026-07-28).
    pub url_elicitation: bool,
}

/// Whether `origin` may call `/mcp`: the proxy's own origin or a configured one.
pub fn origin_allowed(app: &App, origin: &str) -> bool {
    origin == app.config.public_url.origin()
        || app.config.allowed_origins.iter().any(|o| o == origin)
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

async fn reject_token<T>(
    app: &App,
    reason: &'static str,
    err: GatewayError,
) -> Result<T, GatewayError> {
    // No token of ours (none, one we never issued, one in the query string): anonymous,
    // counted per source and minute (`audit::aggregate`) and never stored one by one. A token
    // we did issue (wrong audience, expired, revoked, short of scope, its person gone) is an
    // individual event: an investigation needs each of those.
    let anonymous = match &err {
        GatewayError::NoToken => Some(aggregate::Refusal::McpMissing),
        GatewayError::TokenInQuery => Some(aggregate::Refusal::McpInQuery),
        GatewayError::InvalidToken(TokenRejection::Unknown) => Some(aggregate::Refusal::McpUnknown),
        _ => None,
    };
    // Write class (DESIGN.md §8): not security state. An anonymous refusal is an aggregated
    // counter (`audit::aggregate`, flushed with its minute); an individual rejection is an
    // audit event, made durable by the audit module. No later request depends on either: the
    // refusal itself is what protects, and it changes nothing stored.
    match anonymous {
        Some(r) => app.audit.refused(r),
        None => {
            app.audit
                .record(AuditEvent::TokenRejected { reason })
                .await?;
        }
    }
    Err(err)
}

/// The person's GitHub grant and this agent's allowance, shared with the record cache.
type GitHubRecords = (Option<Arc<GrantRecord>>, Option<Arc<AllowanceRecord>>);

/// A caller authenticated from the request's head alone: origin, bearer token, audience,
/// scopes and standing with GitHub all checked. Only [`authenticate`] makes one, and the
/// body of an `/mcp` request is read only once it exists (`http/mcp.rs`), so a stranger's
/// body is never buffered.
///
/// ```compile_fail
/// use mcp_oauth_proxy::gateway::Authenticated;
/// // Private fields: the witness cannot be built outside its module.
/// fn forge(token: mcp_oauth_proxy::bindings::audience::Audienced<
///     mcp_oauth_proxy::store::records::AccessTokenRecord>) -> Authenticated {
///     Authenticated {
///         token,
///         standing: mcp_oauth_proxy::flows::admission::Verdict::Admitted,
///         person: mcp_oauth_proxy::flows::admission::PersonFacts::default(),
///         github: None,
///     }
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::app::App;
/// use mcp_oauth_proxy::gateway::{Authenticated, GatewayError, authenticate};
/// // The one way in: the checks of the request's head.
/// async fn check(app: &App, headers: &http::HeaderMap) -> Result<Authenticated, GatewayError> {
///     authenticate(app, headers, None).await
/// }
/// ```
#[derive(Debug)]
pub struct Authenticated {
    token: Audienced<AccessTokenRecord>,
    standing: Verdict,
    /// What the tool-call policy knows of the person (login, memberships), as of the standing.
    person: PersonFacts,
    /// The GitHub grant and this agent's allowance, read with the token's other records; used
    /// only while the standing check changed nothing (`Verdict::Admitted`), else read again.
    github: Option<GitHubRecords>,
}

impl Authenticated {
    /// The person's login and memberships for `[[policy]]` `people` rules: stored with their
    /// standing, never asked of GitHub on the call.
    pub fn person(&self) -> &PersonFacts {
        &self.person
    }
}

/// The checks of an `/mcp` request that need only its head, in order: origin, no token in
/// the query, a bearer token live for this resource, a backend, the required scopes, the
/// person's standing. Every refusal is answered without reading a byte of the body.
pub async fn authenticate(
    app: &App,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Authenticated, GatewayError> {
    if let Some(origin) = header(headers, "origin")
        && !origin_allowed(app, origin)
    {
        return Err(GatewayError::ForbiddenOrigin);
    }
    let in_query = query.is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "access_token")
    });
    if in_query {
        return reject_token(app, "in_query", GatewayError::TokenInQuery).await;
    }
    let Some(bearer) = header(headers, "authorization").and_then(|v| {
        let (scheme, token) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    }) else {
        return reject_token(app, "missing", GatewayError::NoToken).await;
    };
    let (token, records) = match access::authenticate_call(app, bearer).await? {
        Ok(t) => t,
        Err(r) => {
            let reason = match r {
                TokenRejection::Unknown => "unknown",
                TokenRejection::Expired => "expired",
                TokenRejection::Revoked => "revoked",
                TokenRejection::WrongAudience => "wrong_audience",
            };
            return reject_token(app, reason, GatewayError::InvalidToken(r)).await;
        }
    };
    crate::telemetry::span::record_client_id(&token.get().client_id);
    // Borrowed, not cloned: the config is shared and fixed for the process's life.
    let Some(backend) = app.config.backend.as_ref() else {
        return Err(GatewayError::NoBackend);
    };
    let missing: Vec<&str> = backend
        .required_scopes
        .iter()
        .map(String::as_str)
        .filter(|s| !token.get().scopes.iter().any(|t| t == *s))
        .collect();
    if !missing.is_empty() {
        return reject_token(
            app,
            "insufficient_scope",
            GatewayError::InsufficientScope(backend.required_scopes.join(" ")),
        )
        .await;
    }

    // The person's standing with GitHub (`[access]`), asked again at most every recheck_secs.
    let CallRecords {
        standing: last_standing,
        grant,
        allowance,
        ..
    } = records;
    let (standing, person) = admission::standing_from(app, &token.get().user_id, last_standing)
        .await
        .map_err(flow_err)?;
    match standing {
        Verdict::Admitted | Verdict::TokenBroken => {}
        Verdict::Lost => {
            return reject_token(
                app,
                "access_lost",
                GatewayError::InvalidToken(TokenRejection::Revoked),
            )
            .await;
        }
        Verdict::Unavailable => return Err(GatewayError::StandingUnverifiable),
    }
    Ok(Authenticated {
        token,
        github: (standing == Verdict::Admitted).then_some((grant, allowance)),
        standing,
        person,
    })
}

/// Handles one `/mcp` request of an [`authenticate`]d caller: its session and request state,
/// GitHub access, then the backend.
pub async fn handle(
    app: &App,
    caller: Authenticated,
    req: McpRequest,
) -> Result<Forwarded, GatewayError> {
    let Authenticated {
        token,
        standing,
        person,
        github: prefetched,
    } = caller;
    let Some(backend) = app.config.backend.as_ref() else {
        return Err(GatewayError::NoBackend);
    };
    let policy = app.policy();
    let arguments = envelope::ArgumentKeys::from_pointers(policy.argument_pointers());
    let inbound = match jsonrpc::admit(&req.method, &req.headers, &req.body, &arguments) {
        Ok(inbound) => inbound,
        Err(refusal) => return refuse_body(app, &token, &refusal, &req.body).await,
    };
    let checked = check_handles(app, &token, &req, &inbound).await?;
    let version = checked.version();
    let context = ClientContext {
        version,
        url_elicitation: match version {
            Version::Sessions => checked.session().is_some_and(|s| s.get().url_elicitation),
            Version::Stateless => inbound.request_declares_url_elicitation,
        },
    };

    // `[[policy]]`, before anything reaches the backend: a call it refuses outright never gets
    // as far as the GitHub-access checks (no connect link, no token refresh for it).
    let held = match policy::gate(app, &token, &person, &req.method, &inbound, context).await? {
        policy::Gate::Pass(p) => Ok(p),
        policy::Gate::Answer(answer) => return Ok(answer),
        policy::Gate::Held(h) => Err(h),
    };
    if standing == Verdict::TokenBroken && inbound.method.as_deref() == Some("tools/call") {
        // GitHub no longer honours the person's token: a reconnect link, in either backend
        // mode, whatever the backend would answer (GitHub's own MCP server answers a tool
        // error with HTTP 200, which the gateway cannot tell from any other).
        return refuse(
            app,
            &token,
            LinkKind::Reconnect,
            &req.method,
            &inbound,
            context,
        )
        .await;
    }
    // GitHub access (reads only, unless an expiring GitHub App token is due).
    let github = match &backend.auth {
        BackendAuth::GitHubToken => {
            // Reads only, unless an expiring GitHub App token is due: its refresh writes the
            // rotated grant (security state: GitHub spent the old refresh token, so every
            // later request depends on the new one), durable before the token is used.
            let t = token.get();
            let access = match prefetched {
                Some((grant, allowance)) => {
                    github_access::for_agent_from(app, &t.user_id, &t.scopes, grant, allowance)
                        .await
                }
                None => github_access::for_agent(app, &t.user_id, &t.client_id, &t.scopes).await,
            };
            match access.map_err(flow_err)? {
                Access::Ready(gh) => Some(gh),
                Access::Needs(kind) => {
                    return refuse(app, &token, kind, &req.method, &inbound, context).await;
                }
            }
        }
        BackendAuth::Exchange { .. } => None,
    };
    // A held call (`ask`) is redeemed only now that it could be forwarded: one that got a
    // connect link above keeps its approval.
    let permitted = match held {
        Ok(p) => p,
        Err(h) => match policy::redeem(app, &token, h, &inbound, context).await? {
            policy::Gate::Pass(p) => p,
            policy::Gate::Answer(answer) => return Ok(answer),
            policy::Gate::Held(_) => return Err(GatewayError::Backend("policy".into())),
        },
    };
    let credential = match (&backend.auth, github) {
        (BackendAuth::GitHubToken, Some(gh)) => BackendCredential::github_token(&token, &gh)
            .ok_or_else(|| GatewayError::Backend("credential".into()))?,
        (BackendAuth::Exchange { token_ttl_secs, .. }, _) => {
            let minted = mint_backend_token(app, &token, *token_ttl_secs).await?;
            BackendCredential::backend_token(&token, &minted)
                .ok_or_else(|| GatewayError::Backend("credential".into()))?
        }
        (BackendAuth::GitHubToken, None) => {
            return Err(GatewayError::Backend("credential".into()));
        }
    };
    let mut req = req;
    if let Some(stripped) = own_state_stripped(&req.body, &inbound) {
        // Our own requestState served its purpose; the backend never issued it.
        req.body = stripped;
    } else if permitted.approved()
        && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&req.body)
        && let Ok(bytes) = serde_json::to_vec(&v)
    {
        // The approved call as the page showed it (`Permitted::approved`).
        req.body = Bytes::from(bytes);
    }
    let is_delete = req.method == Method::DELETE;
    let method = req.method.clone();
    // Shared with the response observer rather than cloned: the retry below needs the token
    // (and the method) only if the backend reports that GitHub refused the person's token.
    let token = Arc::new(token);
    let forwarded = match forward::forward(
        app, &token, credential, &checked, req, &inbound, context, permitted,
    )
    .await
    {
        Err(GatewayError::GitHubRejected) => {
            // The backend says GitHub refused the person's token: mark the grant broken, so
            // the person gets a reconnect link instead of an opaque error.
            // Write class: security state (grant marked broken). The next `tools/call` of
            // any agent of this person depends on it (`github_access::for_agent` answers
            // with a reconnect link instead of handing out the token); `mark_broken`
            // returns once it is durable (its own flush or commit: /mcp is not inside
            // `store::batched`), before the refusal below reveals it.
            app.grants
                .mark_broken(
                    &token.get().user_id,
                    "backend reported that GitHub refused the token",
                )
                .await
                .map_err(|e| GatewayError::Backend(e.to_string()))?;
            return refuse(app, &token, LinkKind::Reconnect, &method, &inbound, context).await;
        }
        other => other?,
    };
    if is_delete
        && forwarded.status.is_success()
        && version == Version::Sessions
        && let Some(s) = checked.session()
    {
        // Write class: security state (forgotten session). A later request presenting this
        // `Mcp-Session-Id` must be refused; durable (own flush or commit) before the DELETE's
        // answer goes out.
        session_binding::forget_session(app.store.as_ref(), s).await?;
    }
    Ok(forwarded)
}

/// Checks the request's handles before anything reaches the backend: the transport headers
/// (`Mcp-Session-Id`, `MCP-Protocol-Version`: once each, visible ASCII), the session id in
/// every protocol version, no JSON-RPC batch, and any echoed `requestState`. What it returns
/// is the only source of the session and version headers the backend receives.
async fn check_handles(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    req: &McpRequest,
    inbound: &Inbound,
) -> Result<SessionChecked, GatewayError> {
    let store = app.store.as_ref();
    // Write class of every `reject(..)` below: not security state, an audit event of a refusal
    // (the audit module makes it durable); the refusal changes nothing a later request reads.
    let reject = |kind: &'static str| AuditEvent::HandleRejected {
        user_id: token.get().user_id.clone(),
        client_id: token.get().client_id.clone(),
        kind,
    };
    let headers = match session_binding::read_transport_headers(&req.headers) {
        Ok(h) => h,
        Err(bad) => {
            app.audit.record(reject("transport_header")).await?;
            return Err(GatewayError::BadTransportHeader(bad));
        }
    };
    // Every version: a 2026-07-28 request has no use for a session id, but one that carries
    // someone else's is refused like any other (and the caller's own is stripped later).
    let checked = match session_binding::check_transport(store, headers, token).await? {
        Ok(c) => c,
        Err(_) => {
            app.audit.record(reject("session")).await?;
            return Err(GatewayError::UnknownSession);
        }
    };
    // A batch would hide its elements from the checks below and from the `tools/call` audit.
    if req.method == Method::POST && jsonrpc::is_batch(&req.body) {
        app.audit.record(reject("batch")).await?;
        return Err(GatewayError::BatchNotSupported);
    }
    if let Some(state) = &inbound.request_state
        && state.starts_with(request_state::PREFIX)
    {
        // A state this gateway minted with an input_required refusal.
        let t = token.get();
        let digest = request_state::params_digest(inbound.params.as_ref());
        let method = inbound.method.as_deref().unwrap_or_default();
        if request_state::check(
            &app.keys.request_state,
            state,
            &t.user_id,
            &t.client_id,
            method,
            &digest,
            app.clock.now(),
        )
        .is_err()
        {
            app.audit.record(reject("request_state")).await?;
            return Err(GatewayError::BadRequestState {
                id: inbound.id.clone(),
            });
        }
    } else if let Some(state) = &inbound.request_state
        && session_binding::check_request_state(store, state, token)
            .await?
            .is_err()
    {
        // A backend's state: it must have been minted for this caller.
        app.audit.record(reject("request_state")).await?;
        return Err(GatewayError::UnknownSession);
    }
    Ok(checked)
}

/// Answers a request whose method or body the gateway will not pass on
/// ([`jsonrpc::admit`]): nothing reaches the backend, nothing stored changes, and the refusal
/// is a `policy_decision` event of the defaults, with or without `[[policy]]`.
async fn refuse_body(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    refusal: &jsonrpc::BodyRefusal,
    body: &[u8],
) -> Result<Forwarded, GatewayError> {
    let t = token.get();
    // Write class: not security state, an audit event of a refusal (durable before the
    // answer); the refusal changes nothing a later request reads.
    app.audit
        .record(AuditEvent::PolicyDecision {
            user_id: t.user_id.clone(),
            client_id: t.client_id.clone(),
            tool: String::new(),
            rule_id: policy::DEFAULTS_ID.to_owned(),
            decision: "deny",
            outcome: refusal.outcome(),
            arguments_digest: crate::tool_policy::arguments_digest(None),
            matched: refusal.detail().into_iter().collect(),
        })
        .await?;
    let (status, error) = refusal.answer();
    let id = refusal.id(body);
    let body = error.map(|(code, message)| policy::json_rpc_error(id.as_deref(), code, message));
    let context = ClientContext {
        version: Version::Sessions,
        url_elicitation: false,
    };
    Ok(Forwarded::local(status, body, context))
}

fn flow_err(e: crate::flows::FlowError) -> GatewayError {
    match e {
        crate::flows::FlowError::Store(s) => GatewayError::Store(s),
        other => GatewayError::Backend(other.to_string()),
    }
}

/// The body without our own `requestState` and the answer to our own input request in
/// `inputResponses` (the backend asked for neither); parsed and re-serialized only then.
fn own_state_stripped(body: &Bytes, inbound: &Inbound) -> Option<Bytes> {
    if !inbound
        .request_state
        .as_deref()
        .is_some_and(|s| s.starts_with(request_state::PREFIX))
    {
        return None;
    }
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let params = v.get_mut("params")?.as_object_mut()?;
    params.remove("requestState");
    if let Some(responses) = params
        .get_mut("inputResponses")
        .and_then(serde_json::Value::as_object_mut)
    {
        for key in refusal::OWN_INPUT_KEYS {
            responses.remove(key);
        }
        if responses.is_empty() {
            params.remove("inputResponses");
        }
    }
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

/// Mints the short-lived token an exchange-mode backend receives instead of the client's.
async fn mint_backend_token(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    ttl: u64,
) -> Result<BackendToken, GatewayError> {
    let now = app.clock.now();
    let minted = crate::oauth::grant::new_backend_token()
        .map_err(|e| GatewayError::Backend(e.to_string()))?;
    let t = token.get();
    let rec = BackendTokenRecord {
        user_id: t.user_id.clone(),
        client_id: t.client_id.clone(),
        scopes: t.scopes.clone(),
        expires_at: now.plus(ttl),
        family_id: Some(t.family_id.clone()),
    };
    // Write class: security state (minted backend token). The backend's token exchange for
    // this call depends on it; durable (own flush or commit) before the token is sent.
    backend_tokens::put(app.store.as_ref(), &minted, &rec, now.plus(ttl)).await?;
    Ok(minted)
}

/// Answers a request that needs GitHub access the person has not given this agent: a connect
/// link, in the shape the client understands. Nothing reaches the backend.
async fn refuse(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    kind: LinkKind,
    method: &Method,
    inbound: &Inbound,
    context: ClientContext,
) -> Result<Forwarded, GatewayError> {
    let t = token.get();
    let now = app.clock.now();
    // Write class: security state (connect link). The person's request to open the link
    // depends on it; `connect_link::request` returns once the link and its index are durable
    // (each write its own flush or commit), before the answer that carries the link.
    let link = connect_link::request(
        app.store.as_ref(),
        &app.keys.connect_link,
        now,
        app.config.connect.link_ttl_secs,
        connect_link::For::token(token),
        kind,
        &t.scopes,
    )
    .await?;
    if link.created {
        // Write class: not security state, an audit event (the link itself is stored above).
        app.audit
            .record(AuditEvent::ConnectLinkCreated {
                link_id: link.link_id.clone(),
                user_id: t.user_id.clone(),
                client_id: t.client_id.clone(),
                kind: kind.reason().trim_end_matches("_required").to_owned(),
            })
            .await?;
    }
    let client: Option<ClientRecord> = app.clients.known(&t.client_id).await?;
    let agent = client.map_or_else(|| "this agent".to_owned(), |c| c.display_name());
    let url = app.config.public_url.join(&link.path);
    let message = github_access::message(kind, &agent);
    let Some(id) = inbound.id.as_deref().filter(|_| *method == Method::POST) else {
        // A notification needs no answer; GET and DELETE cannot carry a link.
        if *method == Method::POST {
            return Ok(Forwarded::local(http::StatusCode::ACCEPTED, None, context));
        }
        return Err(GatewayError::GitHubAccessMissing { id: None });
    };
    let r = refusal::Refusal {
        id,
        link_id: &link.link_id,
        url: &url,
        message: &message,
        input_key: refusal::INPUT_KEY,
    };
    let body = if inbound.method.as_deref() == Some("tools/call") {
        let state = (context.version == Version::Stateless && context.url_elicitation).then(|| {
            let digest = request_state::params_digest(inbound.params.as_ref());
            request_state::mint(
                &app.keys.request_state,
                &t.user_id,
                &t.client_id,
                "tools/call",
                &digest,
                now,
            )
        });
        refusal::tools_call(&r, context, state.as_deref())
    } else {
        refusal::other_request(&r)
    };
    Ok(Forwarded::local(http::StatusCode::OK, Some(body), context))
}
