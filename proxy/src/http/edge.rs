//! What one connection may cost: the `[server]` keys that bound time, connections and HTTP/2
//! state per peer, their defaults and their validation. The listener (`conn.rs`) applies them.
//!
//! The reasoning behind each default (docs/CONFIG.md repeats it for operators):
//! - **Header read, 10 s**: a real client sends its request head in one round trip; ten
//!   seconds covers a slow mobile link many times over, and a stranger who opens a connection
//!   and never finishes the head (slowloris) holds it for at most that long.
//! - **Body read, 60 s** from the first byte the proxy asks for: the largest body accepted
//!   (`/mcp`, 4 MiB) at about 0.5 Mbit/s. Total, not per chunk, so a trickle cannot keep it open.
//! - **Idle, 60 s**: a connection with no request in flight. A long SSE stream is a request in
//!   flight, so it is never idle; an MCP client between calls reconnects cheaply.
//! - **4096 connections**, **128 per source** (IPv4 address, IPv6 /64): the systemd unit allows
//!   65 536 descriptors, and each request in flight to the backend holds a second one; 128 is
//!   room for an office behind one NAT address, while filling the global cap takes 32 sources.
//! - **16 KiB of headers**: hyper's HTTP/2 default; our own headers (a bearer token, a session
//!   id, the flow cookie) are far smaller.
//! - **HTTP/2: 100 concurrent streams** (the minimum RFC 9113 §6.5.2 advises), **20 pending
//!   resets** and **1024 locally caused resets** before the connection is closed with GOAWAY:
//!   the h2 crate's rapid-reset defaults (CVE-2023-44487, RUSTSEC-2024-0003), set explicitly so
//!   that a dependency update cannot loosen them unnoticed.
//! - **Response stall, 20 s**: a response whose next bytes the client has not taken for this
//!   long (its HTTP/2 flow-control window shut, or its socket full) is reset, and its
//!   connection closed if nothing else on it moved. A client that reads takes bytes within a
//!   round trip; twenty seconds rides out a bad mobile link's retransmission back-off.
//! - **Response write, 60 s** in total spent waiting for the client, for answers that are not
//!   event streams: the stall bound alone lets a reader that opens its window a byte every
//!   19 s hold an answer for ever. Sixty seconds of waiting carries several MiB to a slow link.
//! - **Form bodies, 10 s**: every body but `/mcp`'s is at most 64 KiB, a second at
//!   0.5 Mbit/s; ten seconds is ample, and a stranger holds a half-sent form that long at most.
//! - **Held bodies: 256 MiB in all, 16 MiB per source, 16 MiB per token** (request bodies
//!   being received or handled, counted at their announced length): four largest `/mcp` bodies
//!   per source or token at once, any number of ordinary ones; sixteen sources (or /64s) fill
//!   the global budget, each for at most its body deadline.
//! - **32 `/mcp` requests in flight per token** (streams included): an agent's parallel tool
//!   calls and its event stream, several times over.

use std::time::Duration;

/// The edge limits, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeLimits {
    /// From accept until the first request's head is complete, and on HTTP/1.1 from the end
    /// of one response until the next request's head is complete.
    pub header_read_timeout: Duration,
    /// The whole request body must arrive within this, counted from the first read.
    pub body_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// Open connections at once; at the cap the listener stops accepting (new connections
    /// wait in the kernel backlog).
    pub max_connections: usize,
    /// Open connections at once from one TCP peer (IPv4 address, IPv6 /64); one beyond it is
    /// closed at once. Trusted proxies are exempt (they carry everyone's connections).
    pub max_connections_per_source: usize,
    /// Largest request head: HTTP/1.1 read buffer, HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`.
    pub max_header_bytes: usize,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 streams reset by the client before the server accepted them; beyond this the
    /// connection gets GOAWAY (rapid reset).
    pub http2_max_pending_reset_streams: usize,
    /// HTTP/2 streams the server had to reset because of the client's protocol errors; beyond
    /// this the connection gets GOAWAY.
    pub http2_max_local_error_resets: usize,
    /// A response whose next bytes the client has not taken for this long is reset (HTTP/2) or
    /// its connection closed (HTTP/1.1, or when nothing else on the connection moved); also a
    /// socket that accepts no writes for this long is closed.
    pub response_stall_timeout: Duration,
    /// A response that is not an event stream may wait this long in total for its client.
    pub response_write_timeout: Duration,
    /// The body-read timeout of every route but `/mcp` (forms and registration, 64 KiB).
    pub form_body_read_timeout: Duration,
    /// Request bytes held at once by bodies being received or handled, all sources.
    pub max_body_bytes: u64,
    /// The same per source (client IP: IPv4 address, IPv6 /64).
    pub max_body_bytes_per_source: u64,
    /// The same for the `/mcp` bodies of one access token.
    pub mcp_max_body_bytes_per_token: u64,
    /// `/mcp` requests in flight at once with one access token (answers included).
    pub mcp_max_requests_per_token: usize,
}

impl Default for EdgeLimits {
    fn default() -> Self {
        EdgeLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_source: 128,
            max_header_bytes: 16 * 1024,
            http2_max_concurrent_streams: 100,
            http2_max_pending_reset_streams: 20,
            http2_max_local_error_resets: 1024,
            response_stall_timeout: Duration::from_secs(20),
            response_write_timeout: Duration::from_secs(60),
            form_body_read_timeout: Duration::from_secs(10),
            max_body_bytes: 256 * MIB,
            max_body_bytes_per_source: 16 * MIB,
            mcp_max_body_bytes_per_token: 16 * MIB,
            mcp_max_requests_per_token: 32,
        }
    }
}

const MIB: u64 = 1024 * 1024;

/// The smallest byte budget: one largest `/mcp` body must fit.
const MIN_BODY_BUDGET: u64 = super::MAX_MCP_BODY as u64;

/// The `[server]` keys as written; `None`: the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct RawEdgeLimits {
    /// `header_read_timeout_secs`.
    pub header_read_timeout_secs: Option<u64>,
    /// `body_read_timeout_secs`.
    pub body_read_timeout_secs: Option<u64>,
    /// `idle_timeout_secs`.
    pub idle_timeout_secs: Option<u64>,
    /// `max_connections`.
    pub max_connections: Option<u64>,
    /// `max_connections_per_source`.
    pub max_connections_per_source: Option<u64>,
    /// `max_header_bytes`.
    pub max_header_bytes: Option<u64>,
    /// `http2_max_concurrent_streams`.
    pub http2_max_concurrent_streams: Option<u64>,
    /// `http2_max_pending_reset_streams`.
    pub http2_max_pending_reset_streams: Option<u64>,
    /// `http2_max_local_error_resets`.
    pub http2_max_local_error_resets: Option<u64>,
    /// `response_stall_timeout_secs`.
    pub response_stall_timeout_secs: Option<u64>,
    /// `response_write_timeout_secs`.
    pub response_write_timeout_secs: Option<u64>,
    /// `form_body_read_timeout_secs`.
    pub form_body_read_timeout_secs: Option<u64>,
    /// `max_body_bytes`.
    pub max_body_bytes: Option<u64>,
    /// `max_body_bytes_per_source`.
    pub max_body_bytes_per_source: Option<u64>,
    /// `mcp_max_body_bytes_per_token`.
    pub mcp_max_body_bytes_per_token: Option<u64>,
    /// `mcp_max_requests_per_token`.
    pub mcp_max_requests_per_token: Option<u64>,
}

/// The smallest HTTP/1.1 read buffer hyper accepts (it panics below it).
const MIN_HEADER_BYTES: u64 = 8 * 1024;

impl EdgeLimits {
    /// Validates the keys, pushing readable errors (named `server.<key>`) into `errs`.
    pub fn from_raw(raw: &RawEdgeLimits, errs: &mut Vec<String>) -> EdgeLimits {
        let d = EdgeLimits::default();
        let mut key = |name: &str, value: Option<u64>, default: u64, min: u64, max: u64| {
            let v = value.unwrap_or(default);
            if v < min || v > max {
                errs.push(format!("server.{name}: must be {min}..={max}, not {v}"));
                default
            } else {
                v
            }
        };
        let secs = |d: Duration| d.as_secs();
        let header = key(
            "header_read_timeout_secs",
            raw.header_read_timeout_secs,
            secs(d.header_read_timeout),
            1,
            300,
        );
        let body = key(
            "body_read_timeout_secs",
            raw.body_read_timeout_secs,
            secs(d.body_read_timeout),
            1,
            3600,
        );
        let idle = key(
            "idle_timeout_secs",
            raw.idle_timeout_secs,
            secs(d.idle_timeout),
            1,
            3600,
        );
        let max_connections = key(
            "max_connections",
            raw.max_connections,
            d.max_connections as u64,
            1,
            1_000_000,
        );
        let per_source = key(
            "max_connections_per_source",
            raw.max_connections_per_source,
            d.max_connections_per_source as u64,
            1,
            1_000_000,
        );
        let header_bytes = key(
            "max_header_bytes",
            raw.max_header_bytes,
            d.max_header_bytes as u64,
            MIN_HEADER_BYTES,
            1024 * 1024,
        );
        let streams = key(
            "http2_max_concurrent_streams",
            raw.http2_max_concurrent_streams,
            u64::from(d.http2_max_concurrent_streams),
            1,
            1000,
        );
        let pending_resets = key(
            "http2_max_pending_reset_streams",
            raw.http2_max_pending_reset_streams,
            d.http2_max_pending_reset_streams as u64,
            1,
            1000,
        );
        let local_resets = key(
            "http2_max_local_error_resets",
            raw.http2_max_local_error_resets,
            d.http2_max_local_error_resets as u64,
            1,
            100_000,
        );
        let stall = key(
            "response_stall_timeout_secs",
            raw.response_stall_timeout_secs,
            secs(d.response_stall_timeout),
            1,
            3600,
        );
        let write = key(
            "response_write_timeout_secs",
            raw.response_write_timeout_secs,
            secs(d.response_write_timeout),
            1,
            3600,
        );
        let form_body = key(
            "form_body_read_timeout_secs",
            raw.form_body_read_timeout_secs,
            secs(d.form_body_read_timeout),
            1,
            3600,
        );
        let body_bytes = key(
            "max_body_bytes",
            raw.max_body_bytes,
            d.max_body_bytes,
            MIN_BODY_BUDGET,
            1 << 40,
        );
        let body_per_source = key(
            "max_body_bytes_per_source",
            raw.max_body_bytes_per_source,
            d.max_body_bytes_per_source,
            MIN_BODY_BUDGET,
            1 << 40,
        );
        let body_per_token = key(
            "mcp_max_body_bytes_per_token",
            raw.mcp_max_body_bytes_per_token,
            d.mcp_max_body_bytes_per_token,
            MIN_BODY_BUDGET,
            1 << 40,
        );
        let requests_per_token = key(
            "mcp_max_requests_per_token",
            raw.mcp_max_requests_per_token,
            d.mcp_max_requests_per_token as u64,
            1,
            100_000,
        );
        for (name, v) in [
            ("max_body_bytes_per_source", body_per_source),
            ("mcp_max_body_bytes_per_token", body_per_token),
        ] {
            if v > body_bytes {
                errs.push(format!(
                    "server.{name}: must not exceed max_body_bytes ({body_bytes}), not {v}"
                ));
            }
        }
        if per_source > max_connections {
            errs.push(format!(
                "server.max_connections_per_source: must not exceed max_connections ({max_connections}), not {per_source}"
            ));
        }
        // Every value is within the ranges above, which fit in usize and u32.
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        EdgeLimits {
            header_read_timeout: Duration::from_secs(header),
            body_read_timeout: Duration::from_secs(body),
            idle_timeout: Duration::from_secs(idle),
            max_connections: size(max_connections),
            max_connections_per_source: size(per_source.min(max_connections)),
            max_header_bytes: size(header_bytes),
            http2_max_concurrent_streams: u32::try_from(streams).unwrap_or(u32::MAX),
            http2_max_pending_reset_streams: size(pending_resets),
            http2_max_local_error_resets: size(local_resets),
            response_stall_timeout: Duration::from_secs(stall),
            response_write_timeout: Duration::from_secs(write),
            form_body_read_timeout: Duration::from_secs(form_body),
            max_body_bytes: body_bytes,
            max_body_bytes_per_source: body_per_source.min(body_bytes),
            mcp_max_body_bytes_per_token: body_per_token.min(body_bytes),
            mcp_max_requests_per_token: size(requests_per_token),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_keys_are_the_defaults() {
        let mut errs = Vec::new();
        let l = EdgeLimits::from_raw(&RawEdgeLimits::default(), &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(l, EdgeLimits::default());
    }

    #[test]
    fn out_of_range_values_are_errors_naming_the_key() {
        let mut errs = Vec::new();
        let raw = RawEdgeLimits {
            header_read_timeout_secs: Some(0),
            max_header_bytes: Some(100),
            http2_max_concurrent_streams: Some(0),
            max_connections: Some(10),
            max_connections_per_source: Some(11),
            response_stall_timeout_secs: Some(0),
            max_body_bytes: Some(1024),
            mcp_max_body_bytes_per_token: Some(512 * 1024 * 1024),
            ..RawEdgeLimits::default()
        };
        let l = EdgeLimits::from_raw(&raw, &mut errs);
        let all = errs.join("\n");
        for key in [
            "server.header_read_timeout_secs",
            "server.max_header_bytes",
            "server.http2_max_concurrent_streams",
            "server.max_connections_per_source",
            "server.response_stall_timeout_secs",
            "server.max_body_bytes: must be",
            "server.mcp_max_body_bytes_per_token: must not exceed",
        ] {
            assert!(all.contains(key), "{key} missing in {all}");
        }
        assert_eq!(errs.len(), 7, "{all}");
        assert!(l.max_connections_per_source <= l.max_connections);
        assert!(l.mcp_max_body_bytes_per_token <= l.max_body_bytes);
    }

    #[test]
    fn valid_values_are_taken() {
        let mut errs = Vec::new();
        let raw = RawEdgeLimits {
            header_read_timeout_secs: Some(2),
            body_read_timeout_secs: Some(5),
            idle_timeout_secs: Some(7),
            max_connections: Some(50),
            max_connections_per_source: Some(5),
            max_header_bytes: Some(8192),
            http2_max_concurrent_streams: Some(10),
            http2_max_pending_reset_streams: Some(3),
            http2_max_local_error_resets: Some(4),
            response_stall_timeout_secs: Some(3),
            response_write_timeout_secs: Some(9),
            form_body_read_timeout_secs: Some(2),
            max_body_bytes: Some(64 << 20),
            max_body_bytes_per_source: Some(8 << 20),
            mcp_max_body_bytes_per_token: Some(4 << 20),
            mcp_max_requests_per_token: Some(6),
        };
        let l = EdgeLimits::from_raw(&raw, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(l.header_read_timeout, Duration::from_secs(2));
        assert_eq!(l.body_read_timeout, Duration::from_secs(5));
        assert_eq!(l.idle_timeout, Duration::from_secs(7));
        assert_eq!((l.max_connections, l.max_connections_per_source), (50, 5));
        assert_eq!(l.max_header_bytes, 8192);
        assert_eq!(l.http2_max_concurrent_streams, 10);
        assert_eq!(
            (
                l.http2_max_pending_reset_streams,
                l.http2_max_local_error_resets
            ),
            (3, 4)
        );
        assert_eq!(
            (
                l.response_stall_timeout,
                l.response_write_timeout,
                l.form_body_read_timeout
            ),
            (
                Duration::from_secs(3),
                Duration::from_secs(9),
                Duration::from_secs(2)
            )
        );
        assert_eq!(
            (
                l.max_body_bytes,
                l.max_body_bytes_per_source,
                l.mcp_max_body_bytes_per_token,
                l.mcp_max_requests_per_token
            ),
            (64 << 20, 8 << 20, 4 << 20, 6)
        );
    }
}
