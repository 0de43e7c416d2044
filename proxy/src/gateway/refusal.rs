//! The connect-link refusal of a `tools/call`, in the shape each client understands
//! (docs/DESIGN.md §5): a 2025-x client that declared URL elicitation gets JSON-RPC error -32042; a
//! 2026-07-28 client that declared it gets an `input_required` result with a `requestState`;
//! every other client gets a tool result with `isError: true` whose text carries the link.
//! Never -32042 to a 2026-07-28 client; never a URL elicitation to a client that did not ask.

use serde_json::{Value, json};

/// The key of the gateway's own input request in an `input_required` result (and of its
/// answer in the retry's `inputResponses`, which the backend never asked for): a connect link.
pub const INPUT_KEY: &str = "github_connect";
/// Likewise, for an approval link of a held tool call (`[[policy]] decision = "ask"`).
pub const APPROVAL_INPUT_KEY: &str = "tool_approval";
/// Every key the gateway's own input requests use.
pub const OWN_INPUT_KEYS: [&str; 2] = [INPUT_KEY, APPROVAL_INPUT_KEY];

use super::ClientContext;
use crate::bindings::session_binding::Version;

/// The error code of `URLElicitationRequiredError` (2025-11-25 only).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// What to say.
#[derive(Debug, Clone)]
pub struct Refusal<'a> {
    /// JSON-RPC id of the call, as JSON text.
    pub id: &'a str,
    /// Link id (`elicitationId`).
    pub link_id: &'a str,
    /// Absolute link URL.
    pub url: &'a str,
    /// Message naming the agent and the action.
    pub message: &'a str,
    /// The key of the input request in an `input_required` result.
    pub input_key: &'a str,
}

fn id_value(id: &str) -> Value {
    serde_json::from_str(id).unwrap_or(Value::Null)
}

/// The JSON-RPC response for a refused `tools/call`. `request_state` is needed (and used) only
/// for a 2026-07-28 client that declared URL elicitation.
pub fn tools_call(r: &Refusal<'_>, ctx: ClientContext, request_state: Option<&str>) -> Value {
    match (ctx.version, ctx.url_elicitation, request_state) {
        (Version::Sessions, true, _) => json!({
            "jsonrpc": "2.0",
            "id": id_value(r.id),
            "error": {
                "code": URL_ELICITATION_REQUIRED,
                "message": r.message,
                "data": {"elicitations": [{"mode": "url", "elicitationId": r.link_id, "url": r.url, "message": r.message}]}
            }
        }),
        (Version::Stateless, true, Some(state)) => json!({
            "jsonrpc": "2.0",
            "id": id_value(r.id),
            "result": {
                "resultType": "input_required",
                "inputRequests": {
                    r.input_key: {"method": "elicitation/create", "params": {"mode": "url", "url": r.url, "message": r.message}}
                },
                "requestState": state
            }
        }),
        _ => {
            let mut result = json!({"content": [{"type": "text", "text": format!("{} {}", r.message, r.url)}], "isError": true});
            if ctx.version == Version::Stateless {
                // 2026-07-28 results name their type; SDK v2 refuses one that does not.
                result["resultType"] = json!("complete");
            }
            json!({"jsonrpc": "2.0", "id": id_value(r.id), "result": result})
        }
    }
}

/// The JSON-RPC error for any other request that needs GitHub access (github_token backends
/// need it for everything): the link travels in the message.
pub fn other_request(r: &Refusal<'_>) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id_value(r.id),
        "error": {"code": -32001, "message": format!("{} {}", r.message, r.url), "data": {"connect_id": r.link_id, "connect_uri": r.url}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Refusal<'static> = Refusal {
        id: "7",
        link_id: "L1",
        url: "https://p.example/connect/abc",
        message: "Open this link.",
        input_key: INPUT_KEY,
    };

    #[test]
    fn url_elicitation_error_for_2025_client_that_declared_it() {
        let v = tools_call(
            &R,
            ClientContext {
                version: Version::Sessions,
                url_elicitation: true,
            },
            None,
        );
        assert_eq!(v["error"]["code"], -32042);
        assert_eq!(v["error"]["data"]["elicitations"][0]["elicitationId"], "L1");
        assert_eq!(v["error"]["data"]["elicitations"][0]["mode"], "url");
        assert_eq!(v["id"], 7);
    }

    #[test]
    fn input_required_for_2026_client_and_never_32042() {
        let v = tools_call(
            &R,
            ClientContext {
                version: Version::Stateless,
                url_elicitation: true,
            },
            Some("st"),
        );
        assert!(v.get("error").is_none());
        assert_eq!(v["result"]["resultType"], "input_required");
        assert_eq!(v["result"]["requestState"], "st");
        assert_eq!(
            v["result"]["inputRequests"]["github_connect"]["params"]["mode"],
            "url"
        );
        assert!(!v.to_string().contains("-32042"));
    }

    #[test]
    fn tool_error_for_clients_without_url_elicitation() {
        for ctx in [
            ClientContext {
                version: Version::Sessions,
                url_elicitation: false,
            },
            ClientContext {
                version: Version::Stateless,
                url_elicitation: false,
            },
        ] {
            let v = tools_call(&R, ctx, None);
            assert_eq!(v["result"]["isError"], true);
            assert!(
                v["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .contains("https://p.example/connect/abc")
            );
            assert!(!v.to_string().contains("elicitation"));
            // 2026-07-28 results say they are complete; earlier revisions have no such field.
            let stateless = ctx.version == Version::Stateless;
            assert_eq!(v["result"].get("resultType").is_some(), stateless, "{v}");
        }
    }
}
