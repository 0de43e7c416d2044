//! Traces over OTLP/HTTP from the real binary (`[telemetry]`), received by the test collector
//! in `support/otlp.rs`: one server span per request named after its route template, the
//! backend call as a child span, the client's W3C `traceparent` carried through to the
//! backend, and no secret of the flow in anything exported.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::json;

use crate::support::binary::{BesideHelper, proxy_binary};
use crate::support::client::{approve, register_raw};
use crate::support::mcp::Mcp;
use crate::support::otlp::{Receiver, attr, hex, value_text};
use crate::support::{Browser, Client, Pkce, query_param};
use mcp_examples::backend::BackendRequest;

/// The trace the MCP client starts (W3C example ids).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// What one full flow through the binary left behind.
struct Flow {
    exports: Vec<ExportTraceServiceRequest>,
    spans: Vec<Span>,
    client_id: String,
    /// (what, value) of every secret the flow used.
    secrets: Vec<(&'static str, String)>,
    backend: Vec<BackendRequest>,
}

impl Flow {
    /// Registration, consent, GitHub, callback, code redemption, refresh, revocation, and
    /// `/mcp` (`initialize`, then `tools/call whoami` with the client's `traceparent`), then
    /// SIGTERM: the final export happens at shutdown.
    async fn run() -> Flow {
        // The in-process helper is there for its fake GitHub and demo backend; the flow
        // talks to the binary.
        let receiver = Receiver::start().await;
        let mut b = BesideHelper::start(
            1,
            "",
            &format!(
                r#"[telemetry]
otlp_endpoint = "{}"
service_name = "proxy-under-test"
batch_delay_ms = 200
"#,
                receiver.url
            ),
        )
        .await;
        let store = b.store();
        let (helper, proxy) = (&b.helper, &mut b.proxy);

        // A confidential client, so a client secret is part of the flow.
        let reg = register_raw(
            helper,
            json!({"client_name": "Traced App", "redirect_uris": ["https://srv.example/cb"], "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "client_secret_post"}),
        )
        .await;
        assert_eq!(reg.status, 201, "{:?}", reg.json);
        let client_secret = reg.json["client_secret"].as_str().unwrap().to_owned();
        let c = Client {
            id: reg.json["client_id"].as_str().unwrap().into(),
            secret: Some(client_secret.clone()),
            redirect_uri: "https://srv.example/cb".into(),
        };
        let browser = Browser::new();
        let pkce = Pkce::new();
        let page = browser
            .navigate(
                &c.authorize_url(helper, &pkce, "client-state-value", &[]),
                "none",
            )
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let txn = page.hidden("txn").unwrap();
        let csrf = page.hidden("csrf").unwrap();
        let gh_url = approve(helper, &browser, &page).await;
        let upstream_state = query_param(&gh_url, "state").unwrap();
        let flow_cookie = browser.cookie("__Host-mcp-flow").unwrap();
        let back = browser
            .through_github(&gh_url, "alice")
            .await
            .location()
            .unwrap();
        let github_code = query_param(&back, "code").unwrap();
        let cb = browser.navigate(&back, "cross-site").await;
        let code = query_param(&cb.location().unwrap(), "code").unwrap();
        let session = browser.cookie("__Host-mcp-session").unwrap();
        let t = c.redeem(helper, &code, &pkce, &[]).await;
        assert_eq!(t.status, 200, "{:?}", t.json);
        let access = t.json["access_token"].as_str().unwrap().to_owned();
        let refresh = t.json["refresh_token"].as_str().unwrap().to_owned();
        let r = c.refresh(helper, &refresh, &[]).await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        let access2 = r.json["access_token"].as_str().unwrap().to_owned();
        let refresh2 = r.json["refresh_token"].as_str().unwrap().to_owned();

        let mut mcp = Mcp::with_token(helper, &access2);
        mcp.initialize(false).await;
        let resp = mcp
            .post(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}))
            .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"))
            .header("tracestate", "vendor=opaque")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.text().await.unwrap();
        assert!(body.contains("You are alice on GitHub"), "{body}");
        assert_eq!(c.revoke(helper, &refresh2).await, 200);

        proxy.signal("TERM");
        let status = proxy.wait(Duration::from_secs(15)).await;
        let log = proxy.log_text();
        assert_eq!(status.code(), Some(0), "exit status; log:\n{log}");
        assert!(log.contains("spans exported"), "{log}");

        let mut secrets: Vec<(&'static str, String)> = vec![
            ("client secret", client_secret),
            ("consent csrf", csrf),
            ("transaction id", txn),
            ("client state", "client-state-value".to_owned()),
            ("upstream state", upstream_state),
            ("flow cookie", flow_cookie),
            ("GitHub code", github_code),
            ("authorization code", code),
            ("session cookie", session),
            ("access token", access),
            ("refresh token", refresh),
            ("access token 2", access2),
            ("refresh token 2", refresh2),
            ("PKCE verifier", pkce.verifier.clone()),
            ("GitHub client secret", "gh-client-secret".to_owned()),
        ];
        for t in helper.github.issued_access_tokens("alice") {
            secrets.push(("GitHub token", t));
        }
        for key in quoted_values(&store.join("keys.toml")) {
            secrets.push(("key", key));
        }
        Flow {
            exports: receiver.requests(),
            spans: receiver.spans(),
            client_id: c.id,
            secrets,
            backend: helper.backend().requests(),
        }
    }

    fn named(&self, name: &str) -> Vec<&Span> {
        self.spans.iter().filter(|s| s.name == name).collect()
    }

    /// The `/mcp` request span of the `tools/call` (the one in the client's trace).
    fn traced_mcp(&self) -> &Span {
        let mcp: Vec<&Span> = self
            .named("HTTP POST /mcp")
            .into_iter()
            .filter(|s| hex(&s.trace_id) == TRACE_ID)
            .collect();
        assert_eq!(mcp.len(), 1, "one /mcp span in the client's trace");
        mcp[0]
    }
}

/// The quoted values of a TOML file (the generated keys).
fn quoted_values(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('"').and_then(|(_, r)| r.split_once('"')))
        .map(|(v, _)| v.to_owned())
        .filter(|v| v.len() >= 16)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_flow_exports_one_server_span_per_request_named_by_route_template() {
    let flow = Flow::run().await;
    for name in [
        "HTTP POST /register",
        "HTTP GET /authorize",
        "HTTP POST /consent",
        "HTTP GET /callback/github",
        "HTTP POST /token",
        "HTTP POST /revoke",
        "HTTP POST /mcp",
        "HTTP POST backend",
    ] {
        assert!(
            !flow.named(name).is_empty(),
            "no {name:?} span in {:?}",
            flow.spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    }
    let service: Vec<String> = flow
        .exports
        .iter()
        .flat_map(|e| &e.resource_spans)
        .filter_map(|rs| rs.resource.as_ref())
        .filter_map(|r| attr(&r.attributes, "service.name"))
        .collect();
    assert!(!service.is_empty() && service.iter().all(|s| s == "proxy-under-test"));

    for s in flow
        .spans
        .iter()
        .filter(|s| s.name.starts_with("HTTP ") && s.name != "HTTP POST backend")
    {
        assert_eq!(s.kind, SpanKind::Server as i32, "{}", s.name);
        let route = attr(&s.attributes, "http.route").unwrap();
        assert_eq!(
            s.name,
            format!(
                "HTTP {} {route}",
                attr(&s.attributes, "http.request.method").unwrap()
            )
        );
        assert!(
            attr(&s.attributes, "http.response.status_code").is_some(),
            "{}",
            s.name
        );
        assert!(attr(&s.attributes, "outcome").is_some(), "{}", s.name);
        assert!(
            attr(&s.attributes, "request_id").is_some_and(|r| r.len() >= 16),
            "{}",
            s.name
        );
        // A template, never a path with a query.
        assert!(!route.contains('?'), "{route}");
    }
    // The flows that know the client name it.
    for name in ["HTTP GET /authorize", "HTTP POST /token", "HTTP POST /mcp"] {
        for s in flow.named(name) {
            assert_eq!(
                attr(&s.attributes, "oauth.client_id").as_deref(),
                Some(flow.client_id.as_str()),
                "{name}"
            );
        }
    }
    let tokens: Vec<String> = flow
        .named("HTTP POST /token")
        .iter()
        .filter_map(|s| attr(&s.attributes, "outcome"))
        .collect();
    assert!(tokens.iter().all(|o| o == "ok"), "{tokens:?}");
    let mcp = flow.traced_mcp();
    assert_eq!(attr(&mcp.attributes, "outcome").as_deref(), Some("ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backend_call_is_a_child_span_and_the_clients_trace_id_reaches_the_backend() {
    let flow = Flow::run().await;
    let mcp = flow.traced_mcp();
    // The request span continues the client's trace, under the client's span.
    assert_eq!(hex(&mcp.parent_span_id), CLIENT_SPAN_ID);
    let children: Vec<&Span> = flow
        .named("HTTP POST backend")
        .into_iter()
        .filter(|s| s.parent_span_id == mcp.span_id)
        .collect();
    assert_eq!(children.len(), 1, "one backend call under the /mcp span");
    let call = children[0];
    assert_eq!(call.trace_id, mcp.trace_id);
    assert_eq!(call.kind, SpanKind::Client as i32);
    assert_eq!(
        attr(&call.attributes, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attr(&call.attributes, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(
        attr(&call.attributes, "server.address").as_deref(),
        Some("127.0.0.1")
    );
    // Every backend call is somebody's child: no orphan client spans.
    let ids: Vec<&Vec<u8>> = flow.spans.iter().map(|s| &s.span_id).collect();
    for b in flow.named("HTTP POST backend") {
        assert!(
            ids.contains(&&b.parent_span_id),
            "backend span without its request span"
        );
    }

    // The backend got the same trace, with the proxy's backend span as the parent.
    let whoami = flow
        .backend
        .iter()
        .find(|r| r.body.contains("whoami"))
        .expect("the tools/call reached the backend");
    assert_eq!(
        whoami.header("traceparent"),
        Some(format!("00-{TRACE_ID}-{}-01", hex(&call.span_id)).as_str())
    );
    assert_eq!(whoami.header("tracestate"), Some("vendor=opaque"));
    // The initialize had no traceparent: the proxy started a trace and passed it on.
    let init = flow
        .backend
        .iter()
        .find(|r| r.body.contains("\"initialize\""))
        .unwrap();
    let tp = init
        .header("traceparent")
        .expect("a traceparent on every backend call");
    let init_trace = tp.split('-').nth(1).unwrap();
    assert_ne!(init_trace, TRACE_ID);
    assert!(
        flow.named("HTTP POST /mcp")
            .iter()
            .any(|s| hex(&s.trace_id) == init_trace && s.parent_span_id.is_empty()),
        "the initialize's /mcp span is the root of the trace the backend got"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_secret_of_the_flow_appears_in_any_exported_attribute() {
    let flow = Flow::run().await;
    assert!(flow.spans.len() >= 10, "the export must hold the flow");
    // Every attribute of every span, event, link and resource, and every name.
    let mut exported: Vec<String> = Vec::new();
    for e in &flow.exports {
        for rs in &e.resource_spans {
            if let Some(r) = &rs.resource {
                exported.extend(
                    r.attributes
                        .iter()
                        .filter_map(|kv| kv.value.as_ref())
                        .map(value_text),
                );
            }
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    exported.push(s.name.clone());
                    exported.push(s.trace_state.clone());
                    exported.extend(
                        s.attributes
                            .iter()
                            .filter_map(|kv| kv.value.as_ref())
                            .map(value_text),
                    );
                    for ev in &s.events {
                        exported.push(ev.name.clone());
                        exported.extend(
                            ev.attributes
                                .iter()
                                .filter_map(|kv| kv.value.as_ref())
                                .map(value_text),
                        );
                    }
                    for l in &s.links {
                        exported.extend(
                            l.attributes
                                .iter()
                                .filter_map(|kv| kv.value.as_ref())
                                .map(value_text),
                        );
                    }
                    if let Some(st) = &s.status {
                        exported.push(st.message.clone());
                    }
                }
            }
        }
    }
    assert!(
        exported.iter().any(|v| v == &flow.client_id),
        "the scan sees attribute values"
    );
    // And the whole export as the collector got it, field by field.
    let everything = format!("{:?}", flow.exports);
    for (what, secret) in &flow.secrets {
        for v in &exported {
            assert!(
                !v.contains(secret.as_str()),
                "{what} appears in an exported attribute: {v}"
            );
        }
        assert!(
            !everything.contains(secret.as_str()),
            "{what} appears in the export"
        );
    }
    assert!(flow.secrets.iter().any(|(w, _)| *w == "GitHub token"));
    assert!(flow.secrets.iter().any(|(w, _)| *w == "key"));
}

#[test]
fn check_config_refuses_a_telemetry_endpoint_with_credentials_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
public_url = "http://127.0.0.1:1"
listen = "127.0.0.1:1"
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
[store]
path = {:?}
[telemetry]
otlp_endpoint = "http://user:hunter2@collector:4318"
"#,
            dir.path().join("store").display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(proxy_binary())
        .arg("check-config")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("telemetry.otlp_endpoint") && err.contains("credentials"),
        "{err}"
    );
    assert!(
        !err.contains("hunter2"),
        "the password is not echoed: {err}"
    );
}

/// The review's Info finding: `traceparent: 00-…-00` (not sampled) from any caller kept its
/// requests out of the traces, refusals included. An anonymous caller sends refused requests
/// with an unsampled context; each is exported anyway, as a child of the caller's span, with
/// its refusal as the outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unsampled_traceparent_from_an_untrusted_caller_does_not_hide_refusals() {
    let receiver = Receiver::start().await;
    let mut b = BesideHelper::start(
        1,
        "",
        &format!(
            "[telemetry]\notlp_endpoint = \"{}\"\nbatch_delay_ms = 200\n",
            receiver.url
        ),
    )
    .await;
    let (helper, proxy) = (&b.helper, &mut b.proxy);
    let unsampled = |trace: &str| format!("00-{trace}-{CLIENT_SPAN_ID}-00");
    let http = crate::support::http();
    // A tokenless `/mcp` call, a callback with a state nobody issued, a bad code at `/token`.
    let mcp_trace = "11111111111111111111111111111111";
    let r = http
        .post(helper.url("/mcp"))
        .header("traceparent", unsampled(mcp_trace))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let callback_trace = "22222222222222222222222222222222";
    let r = http
        .get(helper.url("/callback/github?code=x&state=never-issued"))
        .header("traceparent", unsampled(callback_trace))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let token_trace = "33333333333333333333333333333333";
    let r = http
        .post(helper.url("/token"))
        .header("traceparent", unsampled(token_trace))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", "mcpac_forged"),
            ("client_id", "mcpc_unknown"),
            ("code_verifier", &"v".repeat(43)),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    proxy.signal("TERM");
    let status = proxy.wait(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "log:\n{}", proxy.log_text());
    let spans = receiver.spans();
    for (trace, name, status, outcome) in [
        (mcp_trace, "HTTP POST /mcp", "401", "no_token"),
        (
            callback_trace,
            "HTTP GET /callback/github",
            "400",
            "client_error",
        ),
        (token_trace, "HTTP POST /token", "401", "invalid_client"),
    ] {
        let found: Vec<&Span> = spans.iter().filter(|s| hex(&s.trace_id) == trace).collect();
        assert_eq!(
            found.len(),
            1,
            "{name}: the refused request is in the traces: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        let s = found[0];
        assert_eq!(s.name, name);
        assert_eq!(hex(&s.parent_span_id), CLIENT_SPAN_ID, "{name}");
        assert_eq!(
            attr(&s.attributes, "http.response.status_code").as_deref(),
            Some(status),
            "{name}"
        );
        assert_eq!(
            attr(&s.attributes, "outcome").as_deref(),
            Some(outcome),
            "{name}"
        );
    }
}
