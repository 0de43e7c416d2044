//! `[telemetry]`: OpenTelemetry traces over OTLP/HTTP (protobuf), off unless `otlp_endpoint`
//! is set. This module owns the section (its keys, defaults and validation: `config` only hands
//! over the raw table), builds the process's `tracing` subscriber (the fmt log layer as before,
//! plus the OpenTelemetry layer when enabled) and shuts the exporter down at exit.
//!
//! What is exported is only the spans this crate opens with target [`TARGET`]: one server span
//! per HTTP request (`http/trace.rs`) and a client span per backend call (`gateway/forward.rs`).
//! Log events never become span events, and other crates' spans are not exported, so an
//! exported attribute is always one of the fields those two spans declare: a route template,
//! a method, a status, a client id, an outcome, a request id, the backend's host. None of them
//! can hold a token, code, cookie or secret (the raw URI, which carries `code` and `state` on
//! `/authorize` and `/callback/github`, is never recorded).

mod export;
pub mod span;

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, ParentBasedSampler, Sampler, SdkTracerProvider,
};
use serde::Deserialize;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use url::Url;

/// The `tracing` target of every span that is exported (and of no log line).
pub const TARGET: &str = "mcp_oauth_proxy::telemetry";

/// Default `service_name`.
pub const DEFAULT_SERVICE_NAME: &str = "mcp-oauth-proxy";
/// Default `timeout_secs`: one export request, connection included.
const DEFAULT_TIMEOUT_SECS: u64 = 10;
/// Default `batch_delay_ms`: how long spans wait to be exported together.
const DEFAULT_BATCH_DELAY_MS: u64 = 5_000;
/// How long the final export at shutdown may take.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// `[telemetry]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    otlp_endpoint: Option<String>,
    #[serde(default = "default_service_name")]
    service_name: String,
    #[serde(default = "default_timeout")]
    timeout_secs: u64,
    #[serde(default = "default_batch_delay")]
    batch_delay_ms: u64,
}

fn default_service_name() -> String {
    DEFAULT_SERVICE_NAME.to_owned()
}
fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECS
}
fn default_batch_delay() -> u64 {
    DEFAULT_BATCH_DELAY_MS
}

/// The validated `[telemetry]` section: present only when traces are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Where spans are POSTed: `otlp_endpoint` + `/v1/traces` (the OTLP/HTTP convention for a
    /// collector's base URL).
    pub traces_url: Url,
    /// `service.name` of every span.
    pub service_name: String,
    /// Timeout of one export request.
    pub timeout: Duration,
    /// How long finished spans wait to be exported in one batch.
    pub batch_delay: Duration,
}

impl TelemetryConfig {
    /// Validates the raw `[telemetry]` table (if any), pushing readable errors into `errs`.
    /// `None`: traces are off (no table, or no `otlp_endpoint`).
    pub fn from_section(
        table: Option<toml::Table>,
        errs: &mut Vec<String>,
    ) -> Option<TelemetryConfig> {
        let raw: RawTelemetry = match toml::Value::Table(table?).try_into() {
            Ok(r) => r,
            Err(e) => {
                errs.push(format!("telemetry: {}", e.message()));
                return None;
            }
        };
        let before = errs.len();
        let service_name = raw.service_name.trim().to_owned();
        if service_name.is_empty() || service_name.len() > 255 {
            errs.push("telemetry.service_name: between 1 and 255 characters".to_owned());
        }
        if !(1..=120).contains(&raw.timeout_secs) {
            errs.push("telemetry.timeout_secs: between 1 and 120".to_owned());
        }
        if !(10..=60_000).contains(&raw.batch_delay_ms) {
            errs.push("telemetry.batch_delay_ms: between 10 and 60000".to_owned());
        }
        let traces_url = raw
            .otlp_endpoint
            .as_deref()
            .and_then(|e| traces_url(e).map_err(|m| errs.push(m)).ok())?;
        (errs.len() == before).then(|| TelemetryConfig {
            traces_url,
            service_name,
            timeout: Duration::from_secs(raw.timeout_secs),
            batch_delay: Duration::from_millis(raw.batch_delay_ms),
        })
    }
}

/// `otlp_endpoint` → the traces URL: http or https, a host, no credentials, query or fragment.
fn traces_url(endpoint: &str) -> Result<Url, String> {
    let bad = |why: &str| format!("telemetry.otlp_endpoint: {why}");
    let url = Url::parse(endpoint).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must be http:// or https://"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("must name a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Credentials in the URL would end up in logs and error messages; a collector that
        // needs them gets them through OTEL_EXPORTER_OTLP_HEADERS.
        return Err(bad(
            "must not contain credentials (use OTEL_EXPORTER_OTLP_HEADERS)",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not have a query or fragment"));
    }
    let base = url.as_str().trim_end_matches('/');
    Url::parse(&format!("{base}/v1/traces")).map_err(|e| bad(&e.to_string()))
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
#[error("telemetry: {0}")]
pub struct TelemetryError(String);

/// The running exporter; [`Telemetry::shutdown`] exports what is still queued.
#[derive(Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("exporting", &self.provider.is_some())
            .finish()
    }
}

impl Telemetry {
    /// Exports the spans still queued (bounded by a few seconds) and stops the exporter. Call
    /// it outside the async runtime, after serving stopped.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(p) = self.provider.take() {
            match p.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
                Ok(()) => tracing::info!("telemetry: spans exported; exporter stopped"),
                Err(e) => tracing::warn!(error = %e, "telemetry: final export failed"),
            }
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Installs the process's subscriber: log lines (JSON or plain, filtered by `RUST_LOG`,
/// default `info`) exactly as before, and, with `config`, the OpenTelemetry layer exporting
/// this crate's [`TARGET`] spans.
pub fn init(json: bool, config: Option<&TelemetryConfig>) -> Result<Telemetry, TelemetryError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The exported spans are not log context: log lines look as they did without telemetry.
    let logs_filter = filter.and(filter_fn(|m| !(m.is_span() && m.target() == TARGET)));
    let fmt = tracing_subscriber::fmt::layer().with_ansi(false);
    let fmt = if json {
        fmt.json().with_filter(logs_filter).boxed()
    } else {
        fmt.with_filter(logs_filter).boxed()
    };
    let mut telemetry = Telemetry::default();
    let otel = match config {
        Some(c) => {
            let (provider, runtime) = provider(c)?;
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("mcp-oauth-proxy"))
                // Only the fields the spans declare: no file names, threads or timings.
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false)
                .with_filter(filter_fn(|m| m.is_span() && m.target() == TARGET));
            telemetry.provider = Some(provider);
            telemetry.runtime = Some(runtime);
            Some(layer)
        }
        None => None,
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| TelemetryError(e.to_string()))?;
    if let Some(c) = config {
        tracing::info!(
            endpoint = %c.traces_url,
            service_name = %c.service_name,
            "telemetry: exporting traces over OTLP/HTTP"
        );
    }
    Ok(telemetry)
}

/// Every span is recorded and exported: a caller's `traceparent` makes our span a child of its
/// trace, but its sampled flag is not obeyed. Anyone can send `traceparent: 00-…-00`, and
/// honouring it (the SDK's default, `ParentBased(AlwaysOn)`) let any caller keep its requests,
/// refusals included, out of the traces. No caller is trusted with that decision (a trusted
/// proxy in front usually passes the client's header on unchanged); sampling, if wanted,
/// belongs in the collector, which sees the outcome. Explicit here, so `OTEL_TRACES_SAMPLER`
/// cannot bring the default back.
fn sampler() -> ParentBasedSampler {
    Sampler::parent_based(Sampler::AlwaysOn).with_remote_parent_not_sampled(Sampler::AlwaysOn)
}

/// The tracer provider: OTLP/HTTP protobuf exporter over the project's outbound client, behind
/// a batch processor. Exports run on a small runtime of their own, so they neither depend on
/// nor wait for the serving runtime, and the final flush works after it has stopped.
fn provider(
    c: &TelemetryConfig,
) -> Result<(SdkTracerProvider, tokio::runtime::Runtime), TelemetryError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()
        .map_err(|e| TelemetryError(format!("export runtime: {e}")))?;
    let client = export::OtlpHttp::new(c.timeout, runtime.handle().clone())?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(c.traces_url.as_str())
        .with_timeout(c.timeout)
        .build()
        .map_err(|e| TelemetryError(e.to_string()))?;
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(c.batch_delay)
                .build(),
        )
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(c.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batch)
        .with_resource(resource)
        .with_sampler(sampler())
        .build();
    Ok((provider, runtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Option<TelemetryConfig>, Vec<String>) {
        let table: toml::Table = toml::from_str(text).unwrap();
        let mut errs = Vec::new();
        let c = TelemetryConfig::from_section(Some(table), &mut errs);
        (c, errs)
    }

    /// An unsampled `traceparent` (flags `00`) from whoever sends one is recorded and exported
    /// like any other; a sampled one and none at all as before.
    #[test]
    fn a_callers_unsampled_flag_does_not_stop_recording() {
        use opentelemetry::trace::{
            SpanContext, SpanId, SpanKind, TraceContextExt as _, TraceFlags, TraceId, TraceState,
        };
        use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample as _};
        let trace_id = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        let remote = |flags| {
            opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
                trace_id,
                SpanId::from_hex("00f067aa0ba902b7").unwrap(),
                flags,
                true,
                TraceState::default(),
            ))
        };
        let s = sampler();
        for parent in [
            Some(remote(TraceFlags::default())),
            Some(remote(TraceFlags::SAMPLED)),
            None,
        ] {
            let r = s.should_sample(
                parent.as_ref(),
                trace_id,
                "HTTP POST /mcp",
                &SpanKind::Server,
                &[],
                &[],
            );
            assert_eq!(r.decision, SamplingDecision::RecordAndSample);
        }
    }

    #[test]
    fn off_without_an_endpoint() {
        assert_eq!(TelemetryConfig::from_section(None, &mut Vec::new()), None);
        let (c, errs) = parse("service_name = \"x\"");
        assert_eq!((c, errs.len()), (None, 0));
    }

    #[test]
    fn endpoint_gets_the_traces_path_and_defaults() {
        let (c, errs) = parse("otlp_endpoint = \"http://collector:4318\"");
        assert!(errs.is_empty(), "{errs:?}");
        let c = c.unwrap();
        assert_eq!(c.traces_url.as_str(), "http://collector:4318/v1/traces");
        assert_eq!(c.service_name, "mcp-oauth-proxy");
        assert_eq!(c.timeout, Duration::from_secs(10));
        let (c, _) = parse("otlp_endpoint = \"https://otel.example/otlp/\"");
        assert_eq!(
            c.unwrap().traces_url.as_str(),
            "https://otel.example/otlp/v1/traces"
        );
    }

    #[test]
    fn bad_endpoints_and_unknown_keys_are_refused() {
        for (bad, needle) in [
            ("otlp_endpoint = \"ftp://c:4318\"", "http:// or https://"),
            ("otlp_endpoint = \"http://u:p@c:4318\"", "credentials"),
            ("otlp_endpoint = \"http://c:4318/?k=v\"", "query"),
            ("otlp_endpoint = \"not a url\"", "otlp_endpoint"),
            (
                "otlp_endpoint = \"http://c\"\nservice_name = \" \"",
                "service_name",
            ),
            (
                "otlp_endpoint = \"http://c\"\ntimeout_secs = 0",
                "timeout_secs",
            ),
            (
                "otlp_endpoint = \"http://c\"\nendpoint = \"x\"",
                "unknown field",
            ),
        ] {
            let (c, errs) = parse(bad);
            assert!(c.is_none(), "{bad}");
            assert!(errs.join("\n").contains(needle), "{bad}: {errs:?}");
        }
    }
}
