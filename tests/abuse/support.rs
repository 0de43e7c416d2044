//! The real binary with a fake GitHub and the demo backend, a stranger's raw sockets from
//! other loopback addresses (all of 127.0.0.0/8 is loopback on Linux), and the proxy's
//! resident memory from `/proc/<pid>/status`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, timeout};

use crate::support::TestProxy;
use crate::support::binary::{BesideHelper, Process};
use crate::support::mcp::Mcp;

/// The binary under attack, and the in-process helper whose fake GitHub and demo backend it
/// uses (the helper's flow helpers talk to the binary through `helper.base`).
pub struct Edge {
    pub helper: TestProxy,
    pub proxy: Process,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

/// Starts `serve` with `server_extra` appended to its `[server]` section.
pub async fn start(server_extra: &str) -> Edge {
    let b = BesideHelper::start(1, server_extra, "").await;
    Edge {
        helper: b.helper,
        proxy: b.proxy,
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, b.port)),
        _dir: b.dir,
    }
}

impl Edge {
    /// A real client's whole visit: registration, consent, GitHub, token, `initialize`, a
    /// tool call answered by the backend with the person's identity.
    pub async fn real_client_completes_a_flow(&self) {
        let mut mcp = Mcp::for_user(&self.helper, "alice").await;
        mcp.initialize(false).await;
        self.real_client_calls_a_tool(&mcp).await;
    }

    /// One tool call of an MCP client that already has a session.
    pub async fn real_client_calls_a_tool(&self, mcp: &Mcp) {
        let (status, msg) = mcp.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200, "{msg}");
        assert!(msg.get("result").is_some(), "{msg}");
    }

    /// Resident memory of the proxy process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.proxy.id())
    }

    /// Asserts the binary is still running and logged no panic.
    pub fn assert_healthy(&mut self) {
        assert!(self.proxy.exited().is_none(), "{}", self.proxy.log_text());
        let log = self.proxy.log_text();
        assert!(!log.contains("panicked"), "{log}");
    }
}

/// `VmRSS` of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A TCP connection to `to` from the loopback address `from`.
pub async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    timeout(Duration::from_secs(10), socket.connect(to))
        .await
        .expect("connect timed out")
        .unwrap()
}

/// Reads until the peer closes (end of stream or reset), at most `bound`; the time it took
/// and what was received, or `None` if it stayed open.
pub async fn until_closed<R: AsyncReadExt + Unpin>(
    r: &mut R,
    bound: Duration,
) -> Option<(Duration, Vec<u8>)> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    timeout(bound, read_all).await.ok()?;
    Some((start.elapsed(), got))
}

/// A GET of `path` on a raw connection, and the status line of the answer (empty if the
/// connection closed without one).
pub async fn raw_get(stream: &mut TcpStream, path: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !got.windows(2).any(|w| w == b"\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = timeout(Duration::from_secs(10), read).await;
    let text = String::from_utf8_lossy(&got).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}
