//! Relaying a connect-link refusal to the MCP client (docs/DESIGN.md §5), by protocol version and
//! declared capability:
//!
//! * 2025-11-25 whose session declared `elicitation.url`: JSON-RPC error `-32042` with one URL
//!   elicitation whose `elicitationId` is the connect id;
//! * 2026-07-28 whose request declared `elicitation.url`: an `input_required` result with one
//!   URL `elicitation/create` and a `requestState` the backend remembers (single use, 10 minutes,
//!   bound to the tool);
//! * anyone else: a tool result with `isError: true` whose text carries the message and the link.
//!
//! The choice is a [`Relay`] made by one of two constructors, one per transport, so a 2026-07-28
//! request can never be answered with `-32042` and no client gets a URL elicitation it did not
//! declare.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::exchange::Refusal;
use super::tools::{self, RpcError};

/// `URLElicitationRequiredError`, 2025-11-25 only (reserved and never sent in 2026-07-28).
pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;
/// The key of the single input request of an `input_required` result.
pub(crate) const INPUT_KEY: &str = "github_connect";
/// How long a minted `requestState` is accepted.
pub(crate) const REQUEST_STATE_TTL: Duration = Duration::from_secs(10 * 60);
/// At most this many `requestState`s are remembered; the oldest goes first.
const MAX_REQUEST_STATES: usize = 4096;
/// The only 2025-x version with URL elicitation.
const URL_ELICITATION_VERSION: &str = "2025-11-25";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// How this request's client hears about a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relay {
    /// `-32042` (2025-11-25 sessions that declared URL elicitation).
    UrlElicitationError,
    /// `resultType: "input_required"` (2026-07-28 requests that declared URL elicitation).
    InputRequired,
    /// A tool error with the link in its text.
    ToolError,
}

impl Relay {
    /// A 2025-x session request: `-32042` only if the header says 2025-11-25 and the session was
    /// opened at 2025-11-25 with `capabilities.elicitation.url`.
    pub(crate) fn for_session(
        header_version: &str,
        session_version: &str,
        declared_url: bool,
    ) -> Self {
        if header_version == URL_ELICITATION_VERSION
            && session_version == URL_ELICITATION_VERSION
            && declared_url
        {
            Self::UrlElicitationError
        } else {
            Self::ToolError
        }
    }

    /// A 2026-07-28 request: the capability is declared per request, in `params._meta`. Never
    /// [`Relay::UrlElicitationError`].
    pub(crate) fn for_stateless(params: &Value) -> Self {
        let declared = params
            .get("_meta")
            .and_then(|m| m.get(CLIENT_CAPABILITIES))
            .is_some_and(declares_url_elicitation);
        if declared {
            Self::InputRequired
        } else {
            Self::ToolError
        }
    }
}

/// `capabilities.elicitation.url` is an object (`"elicitation": {}` means form only).
pub(crate) fn declares_url_elicitation(capabilities: &Value) -> bool {
    capabilities
        .get("elicitation")
        .and_then(|e| e.get("url"))
        .is_some_and(Value::is_object)
}

/// The `-32042` error.
pub(crate) fn url_elicitation_error(refusal: &Refusal) -> RpcError {
    RpcError::new(URL_ELICITATION_REQUIRED, refusal.connect_message.clone()).with_data(json!({
        "elicitations": [{
            "mode": "url",
            "elicitationId": refusal.connect_id,
            "url": refusal.connect_uri,
            "message": refusal.connect_message,
        }]
    }))
}

/// The `input_required` result.
pub(crate) fn input_required(refusal: &Refusal, request_state: &str) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {
            INPUT_KEY: {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "url": refusal.connect_uri,
                    "message": refusal.connect_message,
                },
            },
        },
        "requestState": request_state,
    })
}

/// The fallback tool error: `"<message> <link>"`.
pub(crate) fn tool_error(refusal: &Refusal) -> Value {
    tools::tool_error(&format!(
        "{} {}",
        refusal.connect_message, refusal.connect_uri
    ))
}

/// The `requestState`s handed out with `input_required` results. A state is a random handle
/// (32 bytes, hex) into this map, so it cannot be forged or altered; it carries no authority
/// (the retry exchanges its own token again), it only marks the retry of a refused call.
#[derive(Debug, Default)]
pub(crate) struct RequestStates {
    pending: HashMap<String, Pending>,
}

#[derive(Debug)]
struct Pending {
    tool: String,
    expires: Instant,
}

impl RequestStates {
    /// A fresh state for a refused call of `tool`.
    pub(crate) fn mint(&mut self, tool: &str, now: Instant) -> String {
        self.pending.retain(|_, p| p.expires > now);
        while self.pending.len() >= MAX_REQUEST_STATES {
            let oldest = self
                .pending
                .iter()
                .min_by_key(|(_, p)| p.expires)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(key) => self.pending.remove(&key),
                None => break,
            };
        }
        let state = super::random_hex(32);
        self.pending.insert(
            state.clone(),
            Pending {
                tool: tool.to_owned(),
                expires: now + REQUEST_STATE_TTL,
            },
        );
        state
    }

    /// Whether `state` was minted for `tool` and is still fresh. Single use: it is forgotten
    /// whatever the answer.
    pub(crate) fn take(&mut self, state: &str, tool: &str, now: Instant) -> bool {
        self.pending
            .remove(state)
            .is_some_and(|p| p.tool == tool && now < p.expires)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal() -> Refusal {
        Refusal {
            reason: "connect_required".to_owned(),
            connect_uri: "https://proxy.example/connect/abc".to_owned(),
            connect_id: "c1".to_owned(),
            connect_message: "Open this link.".to_owned(),
        }
    }

    #[test]
    fn only_a_2025_11_25_session_that_declared_url_gets_32042() {
        let v = URL_ELICITATION_VERSION;
        assert_eq!(Relay::for_session(v, v, true), Relay::UrlElicitationError);
        assert_eq!(Relay::for_session(v, v, false), Relay::ToolError);
        assert_eq!(
            Relay::for_session("2025-06-18", "2025-06-18", true),
            Relay::ToolError
        );
        assert_eq!(Relay::for_session(v, "2025-06-18", true), Relay::ToolError);
        assert_eq!(Relay::for_session("2025-06-18", v, true), Relay::ToolError);
    }

    #[test]
    fn stateless_requests_never_get_32042() {
        let caps = |c: Value| json!({"_meta": {CLIENT_CAPABILITIES: c}});
        assert_eq!(
            Relay::for_stateless(&caps(json!({"elicitation": {"url": {}}}))),
            Relay::InputRequired
        );
        for no in [
            json!({}),
            json!({"elicitation": {}}),
            json!({"elicitation": {"form": {}}}),
            json!({"elicitation": {"url": true}}),
            json!({"elicitation": {"url": null}}),
        ] {
            assert_eq!(
                Relay::for_stateless(&caps(no.clone())),
                Relay::ToolError,
                "{no}"
            );
        }
        // In the wrong place (initialize-style) it does not count.
        assert_eq!(
            Relay::for_stateless(&json!({"capabilities": {"elicitation": {"url": {}}}})),
            Relay::ToolError
        );
    }

    #[test]
    fn shapes() {
        let err = url_elicitation_error(&refusal());
        assert_eq!(err.code, -32042);
        assert_eq!(err.message, "Open this link.");
        assert_eq!(
            err.data,
            Some(
                json!({"elicitations": [{"mode": "url", "elicitationId": "c1", "url": "https://proxy.example/connect/abc", "message": "Open this link."}]})
            )
        );
        let ir = input_required(&refusal(), "s");
        assert_eq!(ir["resultType"], "input_required");
        assert_eq!(
            ir["inputRequests"]["github_connect"],
            json!({"method": "elicitation/create", "params": {"mode": "url", "url": "https://proxy.example/connect/abc", "message": "Open this link."}})
        );
        assert!(
            ir["inputRequests"]["github_connect"]["params"]
                .get("elicitationId")
                .is_none()
        );
        assert_eq!(
            tool_error(&refusal()),
            json!({"content": [{"type": "text", "text": "Open this link. https://proxy.example/connect/abc"}], "isError": true})
        );
    }

    #[test]
    fn request_state_is_single_use_bound_to_the_tool_and_expires() {
        let t0 = Instant::now();
        let mut states = RequestStates::default();
        let a = states.mint("whoami", t0);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(states.take(&a, "whoami", t0));
        assert!(
            !states.take(&a, "whoami", t0),
            "replayed requestState accepted"
        );

        let b = states.mint("whoami", t0);
        assert_ne!(a, b);
        assert!(
            !states.take(&b, "list_repos", t0),
            "state of another tool accepted"
        );
        assert!(
            !states.take(&b, "whoami", t0),
            "a refused state stays usable"
        );

        let c = states.mint("whoami", t0);
        let late = t0 + REQUEST_STATE_TTL;
        assert!(
            !states.take(&c, "whoami", late),
            "expired requestState accepted"
        );
        assert!(!states.take("", "whoami", t0));

        // Expired states are forgotten when a new one is minted.
        let _stale = states.mint("whoami", t0);
        let _fresh = states.mint("whoami", late);
        assert_eq!(states.len(), 1);
    }
}
