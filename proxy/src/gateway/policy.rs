//! Binding: a tool call ↔ the `[[policy]]` decision for its caller (person, agent), checked
//! after authentication and before anything reaches the backend. The rules themselves are
//! pure (`tool_policy`); this module applies them to one request and answers for them:
//!
//! * A body some backend could read differently never gets here (`jsonrpc::admit`, for every
//!   request); a `tools/call` whose tool name is outside MCP's characters is refused when a
//!   policy is set: a rule could otherwise check a name the backend reads differently.
//! * `deny`: a tool error naming the rule; nothing is forwarded.
//! * `step_up`: 403 `insufficient_scope` naming every scope the call needs, so the client
//!   re-authorizes (and the person consents to the extra access).
//! * `ask`: the call is forwarded only with an approval of exactly this call (person, agent,
//!   tool, digest of the canonical arguments), which forwarding it uses up; otherwise the
//!   answer is an approval link in the client's shape (`refusal`).
//! * `tools/list`: forwarded, and the answer loses the tools the policy denies this caller
//!   whatever the arguments (`tool_list`).
//!
//! Only [`gate`] makes a [`Permitted`], and forwarding takes one.

use std::sync::Arc;

use http::Method;
use serde_json::{Value, json};

use super::jsonrpc::{Inbound, Version};
use super::refusal;
use super::request_state;
use super::{ClientContext, Forwarded, GatewayError};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::audience::Audienced;
use crate::bindings::connect_link::{For, approval};
use crate::flows::admission::PersonFacts;
use crate::ids::{ClientId, UserId};
use crate::store::records::{AccessTokenRecord, ClientRecord};
use crate::tool_policy::{self, Action, Caller, Decision, Policy, ToolCall};

/// Largest canonical arguments an `ask` rule holds for approval (the page shows them all).
pub const MAX_ASK_ARGUMENTS_BYTES: usize = 64 * 1024;

/// The id `policy_decision` events give the defaults.
pub const DEFAULTS_ID: &str = "policy_defaults";

/// A request the policy lets through to the backend. Only [`gate`] makes one.
///
/// ```compile_fail
/// use mcp_oauth_proxy::gateway::policy::Permitted;
/// // Private fields: a request cannot be declared permitted outside this module.
/// fn forge() -> Permitted {
///     Permitted { list_filter: None, approved: true }
/// }
/// ```
#[derive(Debug)]
pub struct Permitted {
    list_filter: Option<ListFilter>,
    approved: bool,
}

impl Permitted {
    /// For a `tools/list`: what its answer must lose.
    pub fn list_filter(&self) -> Option<&ListFilter> {
        self.list_filter.as_ref()
    }

    /// A call its person approved: forward it as the page showed it (serde_json's reading
    /// of the body, re-serialized), so a number or string spelt in a way another parser reads
    /// differently never reaches the backend in a form the person did not see.
    pub fn approved(&self) -> bool {
        self.approved
    }
}

/// Which tools a `tools/list` answer must not show this caller.
#[derive(Debug, Clone)]
pub struct ListFilter {
    policy: Arc<Policy>,
    user_id: UserId,
    client_id: ClientId,
    person: PersonFacts,
    /// The request's id, as JSON text.
    pub id: String,
}

impl ListFilter {
    /// Whether `tool` is denied to this caller whatever its arguments.
    pub fn hides(&self, tool: &str) -> bool {
        self.policy
            .hidden(&caller(&self.user_id, &self.client_id, &self.person), tool)
    }

    /// The rule that hides `tool` (for the audit trail): the one a call without arguments
    /// meets.
    pub fn rule_for(&self, tool: &str) -> String {
        self.policy
            .decide(
                &caller(&self.user_id, &self.client_id, &self.person),
                &ToolCall {
                    name: tool,
                    arguments: None,
                },
            )
            .rule_id
            .unwrap_or_else(|| DEFAULTS_ID.to_owned())
    }
}

fn caller<'a>(user_id: &'a UserId, client_id: &'a ClientId, person: &'a PersonFacts) -> Caller<'a> {
    Caller {
        user_id,
        login: person.login.as_deref(),
        memberships: &person.memberships,
        client_id,
        answered: Some(&person.answered),
    }
}

/// What the policy makes of a request.
#[derive(Debug)]
pub enum Gate {
    /// Forward it.
    Pass(Permitted),
    /// Answer it here; nothing reaches the backend.
    Answer(Forwarded),
    /// An `ask` rule holds it: [`redeem`] decides once the gateway could forward it.
    Held(Held),
}

fn pass(list_filter: Option<ListFilter>) -> Gate {
    Gate::Pass(Permitted {
        list_filter,
        approved: false,
    })
}

/// A JSON-RPC error for a request the gateway refuses to read further.
pub(super) fn json_rpc_error(id: Option<&str>, code: i64, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.and_then(|i| serde_json::from_str::<Value>(i).ok()).unwrap_or(Value::Null),
        "error": {"code": code, "message": message}
    })
}

/// A tool result with `isError: true` (the call itself was well formed).
fn tool_error(id: &str, text: String, version: Version) -> Value {
    let mut result = json!({"content": [{"type": "text", "text": text}], "isError": true});
    if version == Version::Stateless {
        result["resultType"] = json!("complete");
    }
    json!({
        "jsonrpc": "2.0",
        "id": serde_json::from_str::<Value>(id).unwrap_or(Value::Null),
        "result": result
    })
}

/// A call an `ask` rule holds, decided but not yet redeemed: [`redeem`] uses the person's
/// approval of it or answers with the approval link. Split from [`gate`] so that the gateway's
/// GitHub-access checks run in between: a call that gets a connect link instead must not use
/// up its approval, and a call the policy refuses outright never reaches those checks.
#[derive(Debug)]
pub struct Held {
    tool: String,
    digest: String,
    rule: String,
    ttl_secs: u64,
    decision: Decision,
}

/// Applies the policy to one request, up to what needs no store: refusals before any rule
/// (methods, bodies the gateway cannot read unambiguously), `tools/list` filtering, and each
/// `tools/call` decision. An `ask` comes back [`Gate::Held`] for [`redeem`].
#[allow(clippy::too_many_arguments)]
pub async fn gate(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    person: &PersonFacts,
    method: &Method,
    inbound: &Inbound,
    context: ClientContext,
) -> Result<Gate, GatewayError> {
    let policy = app.policy();
    if policy.is_empty() {
        return Ok(pass(None));
    }
    let t = token.get();
    let id = inbound.id.as_deref();
    let local = |status, body| Ok(Gate::Answer(Forwarded::local(status, body, context)));
    let params = inbound.params.as_ref();
    let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
    let arguments = params.and_then(|p| p.get("arguments"));
    let digest = tool_policy::arguments_digest(arguments);
    let refused = |tool: &str, outcome: &'static str| AuditEvent::PolicyDecision {
        user_id: t.user_id.clone(),
        client_id: t.client_id.clone(),
        tool: crate::gateway::jsonrpc::tool_for_audit(tool),
        rule_id: DEFAULTS_ID.to_owned(),
        decision: "deny",
        outcome,
        arguments_digest: digest.clone(),
        matched: Vec::new(),
    };
    // Write class of every `app.audit.record` below: not security state, an audit event (the
    // refusal or the forwarded call changes nothing a later request reads); a refusal's event
    // is durable before the answer, a forwarded call's is group committed.
    //
    // The method, the body's readability, its keys and the mirrored headers were checked for
    // every request before this (`jsonrpc::admit`); only POST carries a call.
    if *method != Method::POST {
        return Ok(pass(None));
    }
    match inbound.method.as_deref() {
        Some("tools/list") => {
            return Ok(pass(inbound.id.clone().map(|id| ListFilter {
                policy: Arc::clone(&policy),
                user_id: t.user_id.clone(),
                client_id: t.client_id.clone(),
                person: person.clone(),
                id,
            })));
        }
        Some("tools/call") => {}
        _ => return Ok(pass(None)),
    }
    let Some(name) = name.filter(|n| tool_policy::valid_tool_name(n)) else {
        app.audit
            .record(refused(name.unwrap_or_default(), "refused_tool_name"))
            .await?;
        return local(
            http::StatusCode::OK,
            Some(json_rpc_error(
                id,
                -32602,
                "tool names are 1 to 128 of the characters A-Z a-z 0-9 _ - .",
            )),
        );
    };
    let decision = policy.decide(
        &caller(&t.user_id, &t.client_id, person),
        &ToolCall { name, arguments },
    );
    let rule = decision
        .rule_id
        .clone()
        .unwrap_or_else(|| DEFAULTS_ID.to_owned());
    let event = |d: &Decision, outcome: &'static str| decision_event(t, name, &digest, d, outcome);
    match &decision.action {
        Action::Allow => {
            app.audit.record(event(&decision, "allowed")).await?;
            Ok(pass(None))
        }
        Action::Deny => {
            app.audit.record(event(&decision, "denied")).await?;
            let Some(id) = id else {
                return local(http::StatusCode::ACCEPTED, None);
            };
            local(
                http::StatusCode::OK,
                Some(tool_error(
                    id,
                    format!(
                        "The tool {name} is not available: denied by policy rule \"{rule}\" of this server."
                    ),
                    context.version,
                )),
            )
        }
        Action::StepUp { scopes } => {
            let missing = scopes.iter().any(|s| !t.scopes.iter().any(|h| h == s));
            if !missing {
                app.audit.record(event(&decision, "allowed")).await?;
                return Ok(pass(None));
            }
            app.audit
                .record(event(&decision, "step_up_required"))
                .await?;
            // Everything the call needs: what the token has and what the rule adds.
            let mut needed: Vec<String> = t.scopes.iter().map(str::to_owned).collect();
            for s in scopes {
                if !needed.contains(s) {
                    needed.push(s.clone());
                }
            }
            Err(GatewayError::InsufficientScope(needed.join(" ")))
        }
        Action::Ask { ttl_secs } => {
            let Some(id) = id else {
                // A notification cannot carry a link, nor be approved: not forwarded.
                app.audit.record(event(&decision, "denied")).await?;
                return local(http::StatusCode::ACCEPTED, None);
            };
            if declined_in_retry(inbound) {
                // A 2026-07-28 client says its person declined the link: a final answer, so
                // the client does not retry (and ask) again and again.
                app.audit
                    .record(event(&decision, "approval_declined"))
                    .await?;
                return local(
                    http::StatusCode::OK,
                    Some(tool_error(
                        id,
                        format!("The call to {name} was not approved, so it did not run."),
                        context.version,
                    )),
                );
            }
            Ok(Gate::Held(Held {
                tool: name.to_owned(),
                digest: digest.clone(),
                rule,
                ttl_secs: *ttl_secs,
                decision: decision.clone(),
            }))
        }
    }
}

fn decision_event(
    t: &AccessTokenRecord,
    tool: &str,
    digest: &str,
    d: &Decision,
    outcome: &'static str,
) -> AuditEvent {
    AuditEvent::PolicyDecision {
        user_id: t.user_id.clone(),
        client_id: t.client_id.clone(),
        tool: crate::gateway::jsonrpc::tool_for_audit(tool),
        rule_id: d.rule_id.clone().unwrap_or_else(|| DEFAULTS_ID.to_owned()),
        decision: d.action.as_str(),
        outcome,
        arguments_digest: digest.to_owned(),
        matched: d.matched.clone(),
    }
}

/// A held call, once the gateway knows it could forward it: the person's approval of exactly
/// this call is used up (durable, so a replay finds none) and the call passes, or the answer
/// is the approval link.
pub async fn redeem(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    held: Held,
    inbound: &Inbound,
    context: ClientContext,
) -> Result<Gate, GatewayError> {
    let t = token.get();
    let event = |outcome: &'static str| {
        decision_event(t, &held.tool, &held.digest, &held.decision, outcome)
    };
    // Write class: security state (an approval used up). A replay of the call must find
    // nothing; `use_approval` returns once the take is durable.
    if approval::use_approval(
        app.store.as_ref(),
        For::token(token),
        &held.rule,
        &held.tool,
        &held.digest,
    )
    .await?
    .is_some()
    {
        app.audit.record(event("approval_used")).await?;
        return Ok(Gate::Pass(Permitted {
            list_filter: None,
            approved: true,
        }));
    }
    let arguments = inbound.params.as_ref().and_then(|p| p.get("arguments"));
    let answer = ask(app, token, &held, arguments, inbound, context).await?;
    // After the link exists: an investigation can follow the event to it.
    app.audit.record(event("approval_requested")).await?;
    Ok(answer)
}

/// Whether this is the retry of a held call whose client reports that the elicitation was
/// declined or cancelled (`inputResponses.tool_approval.action`), with the gateway's own
/// `requestState` (checked before the policy runs).
fn declined_in_retry(inbound: &Inbound) -> bool {
    let ours = inbound
        .request_state
        .as_deref()
        .is_some_and(|s| s.starts_with(request_state::PREFIX));
    let action = inbound
        .params
        .as_ref()
        .and_then(|p| p.get("inputResponses"))
        .and_then(|r| r.get(refusal::APPROVAL_INPUT_KEY))
        .and_then(|a| a.get("action"))
        .and_then(Value::as_str);
    ours && matches!(action, Some("decline" | "cancel"))
}

/// Holds a call for its person's approval: the approval link, in the client's shape.
async fn ask(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    held: &Held,
    arguments: Option<&Value>,
    inbound: &Inbound,
    context: ClientContext,
) -> Result<Gate, GatewayError> {
    let (tool, digest, rule, ttl_secs) = (
        held.tool.as_str(),
        held.digest.as_str(),
        held.rule.as_str(),
        held.ttl_secs,
    );
    let t = token.get();
    // Canonical JSON (serde_json's maps keep keys sorted): what the page shows is exactly what
    // the digest covers.
    let canonical = arguments
        .filter(|a| !a.is_null())
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    let Some(id) = inbound.id.as_deref() else {
        // `gate` answered notifications already; nothing is held for one.
        return Ok(Gate::Answer(Forwarded::local(
            http::StatusCode::ACCEPTED,
            None,
            context,
        )));
    };
    if canonical.len() > MAX_ASK_ARGUMENTS_BYTES {
        return Ok(Gate::Answer(Forwarded::local(
            http::StatusCode::OK,
            Some(tool_error(
                id,
                format!(
                    "The call to {tool} needs a person's approval, but its arguments are too large to show them on the approval page (more than {MAX_ASK_ARGUMENTS_BYTES} bytes)."
                ),
                context.version,
            )),
            context,
        )));
    }
    let now = app.clock.now();
    // Write class: security state (an approval link). The person's request to open it
    // depends on it; `approval::request` returns once it and its index are durable.
    let Some(link) = approval::request(
        app.store.as_ref(),
        &app.keys.connect_link,
        now,
        For::token(token),
        approval::Ask {
            tool,
            rule_id: rule,
            arguments_digest: digest,
            arguments: &canonical,
            ttl_secs,
        },
    )
    .await?
    else {
        return Ok(Gate::Answer(Forwarded::local(
            http::StatusCode::OK,
            Some(tool_error(
                id,
                format!(
                    "The call to {tool} needs a person's approval, but {} calls of this agent are already waiting for one: answer them on the account page, or let them lapse.",
                    approval::MAX_OPEN_PER_AGENT
                ),
                context.version,
            )),
            context,
        )));
    };
    let client: Option<ClientRecord> = app.clients.known(&t.client_id).await?;
    let agent = client.map_or_else(|| "this agent".to_owned(), |c| c.display_name());
    let url = app.config.public_url.join(&link.path);
    let message = format!(
        "A person must approve this call: open the link to review what {agent} wants {tool} to do, then try again."
    );
    let r = refusal::Refusal {
        id,
        link_id: &link.link_id,
        url: &url,
        message: &message,
        input_key: refusal::APPROVAL_INPUT_KEY,
    };
    let state = (context.version == Version::Stateless && context.url_elicitation).then(|| {
        request_state::mint(
            &app.keys.request_state,
            &t.user_id,
            &t.client_id,
            "tools/call",
            &request_state::params_digest(inbound.params.as_ref()),
            now,
        )
    });
    Ok(Gate::Answer(Forwarded::local(
        http::StatusCode::OK,
        Some(refusal::tools_call(&r, context, state.as_deref())),
        context,
    )))
}
