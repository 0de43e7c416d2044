//! JSON-RPC inspection and the response scanner.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Value, json};

use mcp_oauth_proxy::gateway::jsonrpc::{Scanner, Seen, inspect_request, inspect_response};
use mcp_oauth_proxy::gateway::request_state;

use crate::generators::*;

#[derive(Debug, Clone)]
struct EventStyle {
    crlf: bool,
    id: Option<u32>,
    event_name: bool,
    comment: bool,
    pretty: bool,
    space: bool,
}

fn event_style() -> impl Strategy<Value = EventStyle> {
    (
        any::<bool>(),
        prop::option::of(any::<u32>()),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(crlf, id, event_name, comment, pretty, space)| EventStyle {
                crlf,
                id,
                event_name,
                comment,
                pretty,
                space,
            },
        )
}

/// One SSE event carrying `msg` (or a keep-alive without data).
fn render_event(msg: Option<&Value>, st: &EventStyle) -> String {
    let nl = if st.crlf { "\r\n" } else { "\n" };
    let mut out = String::new();
    if st.comment {
        out.push_str(": keep-alive");
        out.push_str(nl);
    }
    if let Some(id) = st.id {
        out.push_str(&format!("id: {id}{nl}"));
    }
    if st.event_name {
        out.push_str(&format!("event: message{nl}"));
    }
    if let Some(m) = msg {
        let text = if st.pretty {
            serde_json::to_string_pretty(m).unwrap()
        } else {
            m.to_string()
        };
        for line in text.split('\n') {
            out.push_str(if st.space { "data: " } else { "data:" });
            out.push_str(line);
            out.push_str(nl);
        }
    }
    out.push_str(nl);
    out
}

fn cut_points(len: usize, cuts: &[Index]) -> Vec<usize> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(len + 1)).collect();
    at.sort_unstable();
    at
}

/// Feeds `data` to a fresh scanner split at `at`; returns everything it reported.
fn scan(content_type: &str, data: &[u8], at: &[usize]) -> Vec<Seen> {
    let mut s = Scanner::new(Some(content_type));
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in at {
        out.extend(s.feed(&data[prev..c]));
        prev = c;
    }
    out.extend(s.feed(&data[prev..]));
    out.extend(s.finish());
    out
}

fn sse_stream() -> BoxedStrategy<(Vec<u8>, Vec<Seen>)> {
    prop::collection::vec(
        (
            prop_oneof![4 => jsonrpc_message().prop_map(Some), 1 => Just(None)],
            event_style(),
        ),
        0..6,
    )
    .prop_map(|events| {
        let mut data = String::new();
        let mut want = Vec::new();
        for (msg, st) in &events {
            data.push_str(&render_event(msg.as_ref(), st));
            if let Some(m) = msg {
                want.extend(inspect_response(m.to_string().as_bytes()));
            }
        }
        (data.into_bytes(), want)
    })
    .boxed()
}

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn jsonrpc_inspection_never_panics(body in byte_junk(), cuts in prop::collection::vec(any::<Index>(), 0..4)) {
        let i = inspect_request(&body);
        let _ = request_state::params_digest(i.params.as_ref());
        let _ = inspect_response(&body);
        let at = cut_points(body.len(), &cuts);
        for ct in ["text/event-stream", "application/json", " TEXT/Event-Stream; charset=utf-8"] {
            let _ = scan(ct, &body, &at);
        }
    }

    #[test]
    fn inspect_request_reads_what_was_sent(
        id in jsonrpc_id(),
        method in select(vec!["tools/call", "initialize", "tools/list", "notifications/x"]),
        name in "\\PC{0,8}",
        state in prop::option::of("\\PC{0,12}"),
        url_elicitation in any::<bool>(),
        notification in any::<bool>(),
    ) {
        let caps = if url_elicitation { json!({"elicitation": {"url": {}}}) } else { json!({"elicitation": {}}) };
        let mut params = json!({
            "name": name,
            "capabilities": caps,
            "_meta": {"io.modelcontextprotocol/clientCapabilities": caps},
        });
        if let Some(s) = &state {
            params["requestState"] = json!(s);
        }
        let mut msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if !notification {
            msg["id"] = id.clone();
        }
        let i = inspect_request(msg.to_string().as_bytes());
        prop_assert_eq!(i.method.as_deref(), Some(method));
        prop_assert_eq!(i.id, (!notification).then(|| id.to_string()));
        prop_assert_eq!(i.tool, (method == "tools/call").then(|| name.clone()));
        prop_assert_eq!(i.init_declares_url_elicitation, method == "initialize" && url_elicitation);
        prop_assert_eq!(i.request_declares_url_elicitation, url_elicitation);
        prop_assert_eq!(i.request_state, state);
        prop_assert_eq!(i.params.as_ref(), Some(&params));
    }

    #[test]
    fn sse_scanner_result_does_not_depend_on_chunking(
        (data, want) in sse_stream(),
        cuts in prop::collection::vec(any::<Index>(), 0..10),
        ct in select(vec!["text/event-stream", "Text/Event-Stream; charset=utf-8"]),
    ) {
        prop_assert_eq!(&scan(ct, &data, &[]), &want);
        prop_assert_eq!(&scan(ct, &data, &cut_points(data.len(), &cuts)), &want);
        if data.len() <= 2048 {
            let every_byte: Vec<usize> = (1..data.len()).collect();
            prop_assert_eq!(&scan(ct, &data, &every_byte), &want);
        }
    }

    #[test]
    fn json_body_scan_does_not_depend_on_chunking(
        body in prop_oneof![jsonrpc_message().prop_map(|m| m.to_string().into_bytes()), byte_junk()],
        cuts in prop::collection::vec(any::<Index>(), 0..10),
    ) {
        let want = inspect_response(&body);
        let mut s = Scanner::new(Some("application/json"));
        let mut prev = 0;
        for c in cut_points(body.len(), &cuts) {
            prop_assert!(s.feed(&body[prev..c]).is_empty());
            prev = c;
        }
        prop_assert!(s.feed(&body[prev..]).is_empty());
        prop_assert_eq!(s.finish(), want.clone());
        prop_assert_eq!(scan("application/json", &body, &[]), want);
    }
}

// Bugs the properties above found, each fixed and kept as a plain test.

// BUG: `Scanner::feed` checks its 1 MiB limit *before* splitting events, so a chunk that
// holds more than 1 MiB of small, complete SSE events overflows and every event in it goes
// unread, while the same bytes in smaller chunks are all read (the doc says only events
// larger than the limit stream through unread). Responses, outcomes and backend-minted
// `requestState`s in such a chunk are missed (fail-closed: the retry is then refused). Latent
// while the HTTP client delivers smaller chunks. Found checking `Scanner::feed` against
// sse_scanner_result_does_not_depend_on_chunking, whose streams stay far below MAX_EVENT to
// keep the run time down.
#[test]
fn bug_sse_scanner_drops_small_events_in_a_large_chunk() {
    let event = br#"data: {"jsonrpc":"2.0","id":1,"result":{"requestState":"s"}}

"#;
    let stream = event.repeat((1 << 20) / event.len() + 10);
    let chunked: Vec<usize> = (1..stream.len() / 4096).map(|i| i * 4096).collect();
    let small = scan("text/event-stream", &stream, &chunked);
    let whole = scan("text/event-stream", &stream, &[]);
    assert_eq!(small.len(), 2 * ((1 << 20) / event.len() + 10));
    assert_eq!(whole.len(), small.len());
}

// BUG: after an oversized SSE event, `Scanner` resynchronises on the first blank line of the
// next chunk that has one. That is the end of the oversized event only if the chunk starts
// before it: when the blank line straddles two chunks (`…\n` | `\ndata: …\n\n`) or ends the
// chunk that overflowed (`…\n\n` | `data: …\n\n`), the first blank line found is the end of
// the *next* event, which is skipped although it is small. Cut just before the blank line,
// it is read. Found the same way as the previous one.
#[test]
fn bug_sse_scanner_resync_skips_the_next_event() {
    let mut stream = b"data: ".to_vec();
    stream.extend(vec![b'x'; (1 << 20) + 10]);
    let boundary = stream.len(); // index of the blank line ending the oversized event
    stream.extend_from_slice(b"\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{}}\n\n");
    let want = vec![Seen::Response {
        id: "7".into(),
        outcome: mcp_oauth_proxy::gateway::jsonrpc::Outcome::Error,
    }];
    let cuts = |last: usize| {
        let mut c: Vec<usize> = (1..=16).map(|i| i * 65_536).collect();
        c.push(last);
        c
    };
    assert_eq!(scan("text/event-stream", &stream, &cuts(boundary)), want);
    assert_eq!(
        scan("text/event-stream", &stream, &cuts(boundary + 1)),
        want
    );
    assert_eq!(
        scan("text/event-stream", &stream, &cuts(boundary + 2)),
        want
    );
}
