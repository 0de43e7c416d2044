//! The `tools/list` answer without the tools `[[policy]]` denies its caller outright
//! (`tool_policy::Policy::hidden`). The backend's answer is read whole (it is small, and
//! bounded by [`MAX_LIST_BYTES`]), the response to the caller's request is found (a JSON
//! body, or the SSE event that carries it), and its `result.tools` loses the hidden entries;
//! every other byte, and every other event, passes unchanged. An answer that cannot be read is
//! refused rather than passed on: a list the gateway could not filter might name what the
//! policy hides.

use serde_json::Value;

/// Largest `tools/list` answer the gateway filters.
pub const MAX_LIST_BYTES: usize = 4 << 20;
/// Longest the gateway waits for a `tools/list` answer to end.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Why an answer could not be filtered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfilterable {
    /// Larger than [`MAX_LIST_BYTES`].
    TooLarge,
    /// Not JSON (or an SSE event that is not), or no response to the request in it.
    Unreadable,
}

/// Drops the hidden tools from the response to request `id` (JSON text) in `msg`; returns the
/// names dropped, or `None` if `msg` is not that response.
fn filter_message(msg: &mut Value, id: &str, hide: &dyn Fn(&str) -> bool) -> Option<Vec<String>> {
    // Compared as JSON text: the id may be a number or a string.
    let is_response = msg
        .get("id")
        .is_some_and(|v| serde_json::to_string(v).is_ok_and(|t| t == id))
        && (msg.get("result").is_some() || msg.get("error").is_some());
    if !is_response {
        return None;
    }
    let mut hidden = Vec::new();
    if let Some(tools) = msg
        .get_mut("result")
        .and_then(|r| r.get_mut("tools"))
        .and_then(Value::as_array_mut)
    {
        tools.retain(|t| {
            // A tool without a readable name cannot be called by name either; kept.
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
            let keep = name.is_empty() || !hide(name);
            if !keep {
                hidden.push(name.to_owned());
            }
            keep
        });
    }
    Some(hidden)
}

/// Filters a whole answer: a JSON body, or an SSE stream (`sse`). Returns the body to send
/// and the names hidden.
pub fn filter(
    body: &[u8],
    sse: bool,
    id: &str,
    hide: &dyn Fn(&str) -> bool,
) -> Result<(Vec<u8>, Vec<String>), Unfilterable> {
    if body.len() > MAX_LIST_BYTES {
        return Err(Unfilterable::TooLarge);
    }
    if !sse {
        let mut msg: Value = serde_json::from_slice(body).map_err(|_| Unfilterable::Unreadable)?;
        let hidden = filter_message(&mut msg, id, hide).ok_or(Unfilterable::Unreadable)?;
        if hidden.is_empty() {
            return Ok((body.to_vec(), hidden));
        }
        return Ok((msg.to_string().into_bytes(), hidden));
    }
    let text = std::str::from_utf8(body).map_err(|_| Unfilterable::Unreadable)?;
    let mut out = String::with_capacity(text.len());
    let mut found = None;
    for event in split_events(text) {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if found.is_none() && !data.is_empty() {
            let joined = data.join("\n");
            if let Ok(mut msg) = serde_json::from_str::<Value>(&joined)
                && let Some(hidden) = filter_message(&mut msg, id, hide)
            {
                // The event again, its data now one line; its other fields (id:, event:) kept.
                for line in event
                    .lines()
                    .filter(|l| !l.is_empty() && !l.starts_with("data:"))
                {
                    out.push_str(line);
                    out.push('\n');
                }
                out.push_str("data: ");
                out.push_str(&msg.to_string());
                out.push_str("\n\n");
                found = Some(hidden);
                continue;
            }
        }
        out.push_str(event);
    }
    let hidden = found.ok_or(Unfilterable::Unreadable)?;
    Ok((out.into_bytes(), hidden))
}

/// The events of an SSE stream, each with its terminating blank line (the last may lack it).
fn split_events(text: &str) -> Vec<&str> {
    let mut events = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let lf = rest.find("\n\n").map(|i| i + 2);
        let crlf = rest.find("\r\n\r\n").map(|i| i + 4);
        let end = match (lf, crlf) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(rest.len()),
        };
        // `end` follows an ASCII newline (or is the end), so it is a char boundary.
        let Some((event, tail)) = rest.split_at_checked(end) else {
            events.push(rest);
            break;
        };
        events.push(event);
        rest = tail;
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hide(name: &str) -> bool {
        name.starts_with("delete_")
    }

    #[test]
    fn json_answer_loses_hidden_tools_only() {
        let body = json!({"jsonrpc": "2.0", "id": 3, "result": {"tools": [
            {"name": "create_issue"}, {"name": "delete_repo"}, {"name": "list_repos"}
        ], "nextCursor": "c"}});
        let (out, hidden) = filter(body.to_string().as_bytes(), false, "3", &hide).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let names: Vec<&str> = v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["create_issue", "list_repos"]);
        assert_eq!(hidden, ["delete_repo"]);
        assert_eq!(v["result"]["nextCursor"], "c");
    }

    #[test]
    fn sse_answer_is_filtered_in_its_event_and_other_events_pass() {
        let note = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n";
        let resp = "id: 7\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{\"tools\":[{\"name\":\"delete_x\"},{\"name\":\"ok\"}]}}\n\n";
        let body = format!("{note}{resp}");
        let (out, hidden) = filter(body.as_bytes(), true, "\"a\"", &hide).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with(note));
        assert!(out.contains("id: 7\nevent: message\ndata: "));
        assert!(!out.contains("delete_x") && out.contains("\"ok\""));
        assert_eq!(hidden, ["delete_x"]);
    }

    #[test]
    fn unreadable_or_foreign_answers_are_refused_not_passed_on() {
        assert_eq!(
            filter(b"not json", false, "1", &hide),
            Err(Unfilterable::Unreadable)
        );
        let other = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}});
        assert_eq!(
            filter(other.to_string().as_bytes(), false, "1", &hide),
            Err(Unfilterable::Unreadable)
        );
        assert_eq!(
            filter(b"data: nope\n\n", true, "1", &hide),
            Err(Unfilterable::Unreadable)
        );
        let big = vec![b' '; MAX_LIST_BYTES + 1];
        assert_eq!(filter(&big, false, "1", &hide), Err(Unfilterable::TooLarge));
    }

    #[test]
    fn an_error_answer_passes_unchanged() {
        let body = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no"}})
            .to_string();
        let (out, hidden) = filter(body.as_bytes(), false, "1", &hide).unwrap();
        assert_eq!(out, body.as_bytes());
        assert!(hidden.is_empty());
    }
}
