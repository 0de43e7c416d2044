//! A test OTLP/HTTP receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`,
//! as a collector on port 4318 receives it, kept in memory for the test to inspect.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// A running receiver.
pub struct Receiver {
    /// Its base URL (what `otlp_endpoint` is set to).
    pub url: String,
    received: Received,
}

async fn traces(
    State(received): State<Received>,
    body: Bytes,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    let ct = [(header::CONTENT_TYPE, "application/x-protobuf")];
    match ExportTraceServiceRequest::decode(body) {
        Ok(req) => {
            received.lock().unwrap().push(req);
            (
                StatusCode::OK,
                ct,
                ExportTraceServiceResponse::default().encode_to_vec(),
            )
        }
        Err(_) => (StatusCode::BAD_REQUEST, ct, Vec::new()),
    }
}

impl Receiver {
    /// Starts on an ephemeral loopback port.
    pub async fn start() -> Receiver {
        let received = Received::default();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, received }
    }

    /// Every export request received so far.
    pub fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.received.lock().unwrap().clone()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.requests()
            .into_iter()
            .flat_map(|r| r.resource_spans)
            .flat_map(|rs| rs.scope_spans)
            .flat_map(|ss| ss.spans)
            .collect()
    }
}

/// An attribute value as text (arrays and maps flattened), for assertions and secret scans.
pub fn value_text(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BytesValue(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(any_value::Value::ArrayValue(a)) => a
            .values
            .iter()
            .map(value_text)
            .collect::<Vec<_>>()
            .join(" "),
        Some(any_value::Value::KvlistValue(kv)) => kv
            .values
            .iter()
            .map(|k| {
                format!(
                    "{}={}",
                    k.key,
                    k.value.as_ref().map(value_text).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The text of attribute `key`, if present.
pub fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .map(value_text)
}

/// Lowercase hex of an id.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}
