//! The README's first command, `demo`, as a newcomer runs it: on a machine where 8080 (any web
//! server) and 9090 (Prometheus' default) are taken it still starts, on free ports, and prints
//! the URLs it really uses; an address the person asked for is never silently replaced.
//! (`.ci/run` also runs the README's command itself and drives a real MCP client through it.)

use std::net::TcpListener;
use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::support::binary::{Process, free_port};

/// Holds `port` on loopback for the test, unless something else already holds it (then it is
/// taken all the same).
fn occupy(port: u16) -> Option<TcpListener> {
    TcpListener::bind(("127.0.0.1", port)).ok()
}

/// Waits until the demo's banner has printed the line starting with `label`; its URL.
async fn printed_url(demo: &mut Process, label: &str) -> url::Url {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let text = demo.log_text();
        if let Some(line) = text.lines().find(|l| l.trim_start().starts_with(label)) {
            let rest = line.trim_start()[label.len()..].trim();
            let first = rest.split_whitespace().next().unwrap_or_default();
            return url::Url::parse(first.trim_end_matches(',')).unwrap();
        }
        if let Some(s) = demo.exited() {
            panic!("the demo exited ({s}) before printing {label:?}:\n{text}");
        }
        assert!(Instant::now() < end, "no {label:?} in 60 s:\n{text}");
        sleep(Duration::from_millis(50)).await;
    }
}

fn demo(args: &[&str], name: &str) -> (tempfile::TempDir, Process) {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![std::ffi::OsStr::new("demo")];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    let process = Process::run(&all, dir.path().join(name));
    (dir, process)
}

#[tokio::test]
async fn demo_starts_while_8080_and_9090_are_taken_and_prints_the_urls_it_really_uses() {
    let _web = occupy(8080);
    let _prometheus = occupy(9090);
    let (_dir, mut demo) = demo(&[], "demo.log");
    let mcp = printed_url(&mut demo, "MCP server URL:").await;
    let metrics = printed_url(&mut demo, "Metrics and health:").await;
    assert_ne!(mcp.port(), Some(8080), "8080 is taken");
    assert_ne!(metrics.port(), Some(9090), "9090 is taken");
    assert_eq!(mcp.path(), "/mcp");

    let http = crate::support::http();
    // The printed MCP URL is the one the proxy serves and names as its resource.
    let mut prm = mcp.clone();
    prm.set_path("/.well-known/oauth-protected-resource/mcp");
    demo.wait_ready(&http, prm.as_str()).await;
    let doc: serde_json::Value = http.get(prm).send().await.unwrap().json().await.unwrap();
    assert_eq!(doc["resource"], mcp.as_str());
    // An unauthenticated MCP request gets the 401 that starts discovery.
    let r = http
        .post(mcp.clone())
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The printed admin listener answers.
    let mut health = metrics.clone();
    health.set_path("/healthz");
    let r = http.get(health).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", demo.log_text());

    // Ctrl-C ends it cleanly.
    demo.signal("INT");
    let status = demo.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "exit {status}:\n{}", demo.log_text());
}

#[tokio::test]
async fn demo_with_a_taken_listen_address_fails_naming_it_instead_of_moving() {
    let port = free_port();
    let _held = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let addr = format!("127.0.0.1:{port}");
    for flag in ["--listen", "--admin-listen"] {
        let (_dir, mut demo) = demo(&[flag, &addr], "demo.log");
        let status = demo.wait(Duration::from_secs(30)).await;
        let log = demo.log_text();
        assert!(!status.success(), "{flag} {addr} was taken:\n{log}");
        assert!(
            log.contains(&format!("listen on {addr}")) && log.contains("in use"),
            "{flag}: the error names the address:\n{log}"
        );
        assert!(
            !log.contains("MCP server URL"),
            "{flag}: nothing was served:\n{log}"
        );
    }
}
