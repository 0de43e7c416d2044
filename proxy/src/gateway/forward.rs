//! Forwarding to the backend and streaming the answer back. The outgoing request is built by
//! `bindings::upstream_auth` (allow-list, the proxy's credential); it accepts only an
//! audience-checked token. The response is relayed chunk by chunk as it arrives (SSE is never
//! buffered; a JSON body is held back by one chunk so its content can be read before the
//! client gets the end of it); dropping the client stream drops the backend request, which
//! cancels it. Along the way the gateway binds new sessions and request states to the caller
//! and records the outcome of each `tools/call`.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use tracing::Instrument as _;

use super::jsonrpc::{Inbound, Scanner, Seen, Version};
use super::policy::{ListFilter, Permitted};
use super::tool_list;
use super::{ClientContext, GatewayError, McpRequest};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::audience::Audienced;
use crate::bindings::session_binding::{self, SessionChecked};
use crate::bindings::upstream_auth::{self, BackendCredential};
use crate::outbound::{BackendBody, BackendError};
use crate::store::records::AccessTokenRecord;
use crate::telemetry::span as telemetry;

/// A body stream.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// A backend response on its way to the client.
pub struct Forwarded {
    /// Status.
    pub status: StatusCode,
    /// Filtered headers.
    pub headers: HeaderMap,
    /// The streaming body.
    pub body: BodyStream,
    /// What the client declared (for the connect-link refusals that come later).
    pub context: ClientContext,
}

impl std::fmt::Debug for Forwarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarded")
            .field("status", &self.status)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl Forwarded {
    /// An answer the gateway gives itself (a refusal), never from the backend.
    pub fn local(
        status: StatusCode,
        body: Option<serde_json::Value>,
        context: ClientContext,
    ) -> Forwarded {
        let mut headers = HeaderMap::new();
        let bytes = match body {
            Some(v) => {
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let body: BodyStream =
            Box::pin(futures_util::stream::iter([Ok::<_, std::io::Error>(bytes)]));
        Forwarded {
            status,
            headers,
            body,
            context,
        }
    }
}

/// Sends the request to the backend and prepares the streamed response. `permitted`: the
/// policy let it through (and says what a `tools/list` answer must lose).
#[allow(clippy::too_many_arguments)]
pub async fn forward(
    app: &App,
    token: &Arc<Audienced<AccessTokenRecord>>,
    credential: BackendCredential,
    checked: &SessionChecked,
    req: McpRequest,
    inbound: &Inbound,
    context: ClientContext,
    permitted: Permitted,
) -> Result<Forwarded, GatewayError> {
    let http = app.backend_http.as_ref().ok_or(GatewayError::NoBackend)?;
    let backend = app.config.backend.as_ref().ok_or(GatewayError::NoBackend)?;
    // The backend call's span: held by the observer until the answer has streamed through.
    let span = telemetry::backend_span(&req.method, &backend.url, inbound.method.as_deref());
    let mut headers = upstream_auth::upstream_headers(&req.headers, checked, credential);
    telemetry::inject_backend(&span, &req.headers, &mut headers);
    let resp = http
        .send(req.method, headers, req.body)
        .instrument(span.clone())
        .await
        .map_err(|e| {
            let kind = match e {
                BackendError::Connect => "connect",
                BackendError::Request | BackendError::Body => "request",
            };
            telemetry::backend_finished(&span, Err(kind));
            GatewayError::Backend(kind.into())
        })?;
    let status = resp.status;
    telemetry::backend_finished(&span, Ok(status));
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        // The backend refused the credential the proxy gave it; the client's own token is
        // fine, so this must not look like a 401 from us. With the person's GitHub token, that
        // means GitHub stopped honouring it.
        if backend.auth == crate::bindings::backend::BackendAuth::GitHubToken
            && status == StatusCode::UNAUTHORIZED
        {
            return Err(GatewayError::GitHubRejected);
        }
        return Err(GatewayError::Backend(format!(
            "backend refused the credential ({status})"
        )));
    }
    let mut headers = upstream_auth::downstream_headers(&resp.headers, context.version);
    // Write class: security state (session binding). Every later request that presents this
    // `Mcp-Session-Id` is checked against it (`session_binding::check_session`); durable (own
    // flush or commit: /mcp is not inside `store::batched`) before the response headers that
    // reveal the id are handed back.
    if context.version == Version::Sessions
        && let Some(sid) = session_binding::minted_session_id(&resp.headers)
        && !session_binding::bind_session(
            app.store.as_ref(),
            app.clock.now(),
            sid,
            token,
            inbound.init_declares_url_elicitation,
        )
        .await?
    {
        return Err(GatewayError::Backend(
            "backend reused a session id bound to someone else".into(),
        ));
    }
    let content_type = resp
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let sse = content_type.as_deref().is_some_and(|c| {
        c.trim_start()
            .to_ascii_lowercase()
            .starts_with("text/event-stream")
    });
    if sse {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    }
    let mut upstream = resp.body;
    if let Some(filter) = permitted.list_filter()
        && status.is_success()
    {
        upstream = filtered_list(app, token, filter, upstream, sse).await?;
    }
    let observer = Observer {
        app: app.clone(),
        token: Arc::clone(token),
        call: inbound.tool.clone().zip(inbound.id.clone()),
        recorded: false,
        status,
        http_request_id: crate::audit::request_id::current(),
        _span: span,
    };
    let body = relay(
        upstream,
        Scanner::new(content_type.as_deref()),
        sse,
        observer,
    );
    Ok(Forwarded {
        status,
        headers,
        body,
        context,
    })
}

/// Reads a `tools/list` answer whole and drops the tools the policy hides from this caller
/// (`tool_list`); each hidden tool is audited. An answer that cannot be filtered is refused.
async fn filtered_list(
    app: &App,
    token: &Arc<Audienced<AccessTokenRecord>>,
    filter: &ListFilter,
    mut upstream: BackendBody,
    sse: bool,
) -> Result<BackendBody, GatewayError> {
    let mut body = Vec::new();
    // Bounded in time as in size: a backend that keeps the stream open is refused, not waited on.
    let read = async {
        while let Some(chunk) = upstream.next().await {
            let chunk = chunk.map_err(|_| GatewayError::Backend("request".into()))?;
            if body.len() + chunk.len() > tool_list::MAX_LIST_BYTES {
                return Err(GatewayError::Backend(
                    "tools/list answer too large to filter".into(),
                ));
            }
            body.extend_from_slice(&chunk);
            // An SSE stream may stay open after the answer (servers SHOULD close it): stop at
            // the event that carries it.
            if sse
                && (body.ends_with(b"\n\n") || body.ends_with(b"\r\n\r\n"))
                && tool_list::filter(&body, true, &filter.id, &|_| false).is_ok()
            {
                break;
            }
        }
        Ok(())
    };
    tokio::time::timeout(tool_list::READ_TIMEOUT, read)
        .await
        .map_err(|_| GatewayError::Backend("tools/list answer did not end in time".into()))??;
    let (out, hidden) = tool_list::filter(&body, sse, &filter.id, &|t| filter.hides(t))
        .map_err(|e| GatewayError::Backend(format!("tools/list answer unfilterable: {e:?}")))?;
    for tool in hidden {
        // Write class: not security state, an audit event (group committed): hiding a tool
        // changes nothing stored; calling it is denied on its own.
        app.audit
            .record(AuditEvent::PolicyDecision {
                user_id: token.get().user_id.clone(),
                client_id: token.get().client_id.clone(),
                tool: super::jsonrpc::tool_for_audit(&tool),
                rule_id: filter.rule_for(&tool),
                decision: "deny",
                outcome: "hidden",
                arguments_digest: String::new(),
                matched: vec!["tool".to_owned()],
            })
            .await?;
    }
    let once: BackendBody = Box::pin(futures_util::stream::iter([Ok::<_, BackendError>(
        Bytes::from(out),
    )]));
    Ok(once)
}

/// Watches a response go by: binds request states, records the `tools/call` outcome (also
/// when the client goes away first).
struct Observer {
    app: App,
    token: Arc<Audienced<AccessTokenRecord>>,
    /// (tool, request id) of a `tools/call`.
    call: Option<(String, String)>,
    recorded: bool,
    status: StatusCode,
    /// The HTTP request's id: the body streams after the handler returned, outside its scope.
    http_request_id: Option<String>,
    /// The backend call's span, which ends (and lets the request's span end) with the stream.
    _span: tracing::Span,
}

impl Observer {
    async fn seen(&mut self, seen: Vec<Seen>) {
        for s in seen {
            match s {
                Seen::RequestState(state) => {
                    // Write class: security state (request state binding). A later request
                    // echoing this `requestState` is checked against it; durable (own flush or
                    // commit) before the chunk that reveals it is relayed (see `relay`).
                    let r = session_binding::bind_request_state(
                        self.app.store.as_ref(),
                        self.app.clock.now(),
                        &state,
                        &self.token,
                    )
                    .await;
                    if let Err(e) = r {
                        tracing::error!(error = %e, "could not bind a request state");
                    }
                }
                Seen::Response { id, outcome } => {
                    if self.call.as_ref().is_some_and(|(_, cid)| *cid == id) {
                        self.record(outcome.as_str().to_owned()).await;
                    }
                }
            }
        }
    }

    fn event(&mut self, outcome: String) -> Option<AuditEvent> {
        if self.recorded {
            return None;
        }
        let (tool, _) = self.call.as_ref()?;
        self.recorded = true;
        Some(AuditEvent::UpstreamAction {
            user_id: self.token.get().user_id.clone(),
            client_id: self.token.get().client_id.clone(),
            tool: tool.clone(),
            outcome,
        })
    }

    async fn record(&mut self, outcome: String) {
        // Write class: not security state, an upstream-action event (issue 17): no later
        // request reads it; the audit module group commits it within its configured window.
        if let Some(e) = self.event(outcome)
            && let Err(err) = self
                .app
                .audit
                .record_in(self.http_request_id.clone(), e)
                .await
        {
            tracing::error!(error = %err, "could not record an upstream action");
        }
    }

    async fn finish(&mut self, errored: bool) {
        let outcome = if errored {
            "backend_error".to_owned()
        } else if self.status.is_success() {
            "no_response".to_owned()
        } else {
            self.status.as_u16().to_string()
        };
        self.record(outcome).await;
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        // The client went away before the call finished: that cancelled it. Write class: not
        // security state, an upstream-action event (see `record`).
        if let Some(e) = self.event("cancelled".to_owned())
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let audit = self.app.audit.clone();
            let rid = self.http_request_id.clone();
            rt.spawn(async move {
                let _ = audit.record_in(rid, e).await;
            });
        }
    }
}

struct Relay<S> {
    upstream: S,
    scanner: Scanner,
    sse: bool,
    held: Option<Bytes>,
    observer: Observer,
    done: bool,
}

fn relay<S, E>(upstream: S, scanner: Scanner, sse: bool, observer: Observer) -> BodyStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: Send + 'static,
{
    let state = Relay {
        upstream,
        scanner,
        sse,
        held: None,
        observer,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            match st.upstream.next().await {
                Some(Ok(chunk)) => {
                    let seen = st.scanner.feed(&chunk);
                    // Bindings are written before the bytes that reveal them go out.
                    st.observer.seen(seen).await;
                    if st.sse {
                        return Some((Ok(chunk), st));
                    }
                    if let Some(prev) = st.held.replace(chunk) {
                        return Some((Ok(prev), st));
                    }
                }
                Some(Err(_)) => {
                    st.done = true;
                    st.observer.finish(true).await;
                    return Some((Err(std::io::Error::other("backend stream failed")), st));
                }
                None => {
                    let seen = st.scanner.finish();
                    st.observer.seen(seen).await;
                    st.observer.finish(false).await;
                    st.done = true;
                    if let Some(last) = st.held.take() {
                        return Some((Ok(last), st));
                    }
                    return None;
                }
            }
        }
    }))
}
