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
        }
    }
}

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
            ..RawEdgeLimits::default()
        };
        let l = EdgeLimits::from_raw(&raw, &mut errs);
        let all = errs.join("\n");
        for key in [
            "server.header_read_timeout_secs",
            "server.max_header_bytes",
            "server.http2_max_concurrent_streams",
            "server.max_connections_per_source",
        ] {
            assert!(all.contains(key), "{key} missing in {all}");
        }
        assert_eq!(errs.len(), 4, "{all}");
        assert!(l.max_connections_per_source <= l.max_connections);
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
    }
}
