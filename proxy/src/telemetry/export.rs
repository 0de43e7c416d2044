//! The OTLP exporter's HTTP client: `outbound::telemetry` (no redirects, timeouts, our user
//! agent), run on the exporter's own runtime. The SDK's batch processor
//! exports from a plain thread (`futures_executor::block_on`), where `reqwest` has no reactor;
//! each request is therefore spawned onto `runtime` and awaited from there.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};

use super::TelemetryError;

/// `opentelemetry_http::HttpClient` over the outbound client.
#[derive(Debug)]
pub(super) struct OtlpHttp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl OtlpHttp {
    pub(super) fn new(
        timeout: Duration,
        runtime: tokio::runtime::Handle,
    ) -> Result<OtlpHttp, TelemetryError> {
        let client = crate::outbound::telemetry(timeout)
            .map_err(|e| TelemetryError(format!("HTTP client: {e}")))?;
        Ok(OtlpHttp { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        // `reqwest::Client`'s own implementation (opentelemetry-http's `reqwest` feature):
        // request conversion and the 4 MiB bound on the collector's answer.
        self.runtime
            .spawn(async move { HttpClient::send_bytes(&client, request).await })
            .await?
    }
}
