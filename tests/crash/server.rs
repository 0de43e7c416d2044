//! The server process: started on a stable port, killed with SIGKILL, restarted, and asked
//! whether it still completes writes.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_examples::FakeGitHub;
use serde_json::{Value, json};
use tokio::time::sleep;

use crate::support::binary::{self, Process};

use super::ctx::{Ctx, reason};
use super::model::ClientRec;
use super::{PASS_BOUND, READY_BOUND, REQUEST_TIMEOUT, Rng};

/// The binary under test, started again and again on the same config and store, each start
/// with its own log (`proxy-NNN.log`); killed when dropped.
pub(super) struct Server {
    pub(super) bin: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    process: Option<Process>,
    pub(super) starts: usize,
    pub(super) log: PathBuf,
}

impl Server {
    pub(super) fn new(bin: PathBuf, config: PathBuf, dir: PathBuf) -> Server {
        Server {
            bin,
            config,
            dir,
            process: None,
            starts: 0,
            log: PathBuf::new(),
        }
    }

    pub(super) fn spawn(&mut self) {
        self.starts += 1;
        self.log = self.dir.join(format!("proxy-{:03}.log", self.starts));
        let args = [
            "serve".as_ref(),
            "--config".as_ref(),
            self.config.as_os_str(),
        ];
        self.process = Some(Process::run_binary(&self.bin, &args, self.log.clone()));
    }

    /// SIGKILL and reap (dropping the process does both).
    pub(super) fn kill(&mut self) {
        self.process = None;
    }

    pub(super) fn exited(&mut self) -> Option<ExitStatus> {
        self.process.as_mut()?.exited()
    }

    /// Waits until the metadata answers; the time it took, or why it did not.
    pub(super) async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        base: &str,
    ) -> Result<Duration, String> {
        let url = format!("{base}/.well-known/oauth-authorization-server");
        match self.process.as_mut() {
            Some(p) => p.ready_within(http, &url, READY_BOUND).await,
            None => Err("the server was not started".to_owned()),
        }
    }

    pub(super) fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Panics and errors in the current log.
    pub(super) fn log_problems(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked") || l.contains(" ERROR "))
            .map(|l| format!("{}: {l}", self.log.display()))
            .collect()
    }
}

/// A free loopback port below the ephemeral range, so that no outgoing connection can take it
/// while the server is down between a kill and its restart.
pub(super) fn stable_port(rng: &mut Rng) -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768);
    if low > 12_000 {
        for _ in 0..200 {
            let p = rng.range(10_000, low - 1);
            if let Ok(p) = u16::try_from(p)
                && std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
            {
                return p;
            }
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The admin API's token in the test configuration (the trail is read through its export).
pub(super) const ADMIN_TOKEN: &str = "crash-test-admin-token-0123456789abcdef";

/// The common binary config ([`crate::support::binary::config_toml`]) with fixed keys, no
/// refresh grace, no rate limits, the demo backend behind `/mcp`, the admin API on a stable
/// port, and the upstream-action commit window the checks allow for.
pub(super) fn config_toml(
    port: u16,
    admin_port: u16,
    backend: &str,
    github: &FakeGitHub,
    store: &Path,
) -> String {
    use base64::Engine as _;
    let key = |n: u8| base64::engine::general_purpose::STANDARD.encode([n; 32]);
    let sections = format!(
        r#"[keys]
consent_cookie = "{k1}"
csrf = "{k2}"
token_encryption = "{k3}"
connect_link = "{k4}"
request_state = "{k5}"

[tokens]
refresh_reuse = "strict"
refresh_grace_secs = 0

# The load comes from one address far faster than any client would send it; this test checks
# durability, not the rate limiter.
[rate_limits]
enabled = false

[backend]
url = "{backend}"
auth = "github_token"

[audit]
upstream_action_commit_ms = {window_ms}
"#,
        window_ms = super::UPSTREAM_COMMIT_WINDOW.as_millis(),
        k1 = key(0x11),
        k2 = key(0x22),
        k3 = key(0x33),
        k4 = key(0x44),
        k5 = key(0x55),
    );
    let common = binary::config_toml(port, github, store, "", &sections);
    let admin = "[admin]\nlisten = \"127.0.0.1:0\"\n";
    assert!(
        common.contains(admin),
        "the common config's [admin] changed"
    );
    common.replacen(
        admin,
        &format!("[admin]\nlisten = \"127.0.0.1:{admin_port}\"\ntoken = \"{ADMIN_TOKEN}\"\n"),
        1,
    )
}

/// After a check pass: whether the server still completes requests that write to the store.
/// If requests timed out (or the pass did), a registration decides; a server that answers
/// its metadata but not that is stuck, which is recorded as a violation.
pub(super) async fn still_serving(ctx: &Ctx, server: &mut Server, pass_timed_out: bool) -> bool {
    if let Some(status) = server.exited() {
        ctx.violation(format!(
            "the server exited on its own ({status}):\n{}",
            server.log_tail(30)
        ));
        return false;
    }
    if !pass_timed_out && !ctx.hung.load(Ordering::SeqCst) {
        return true;
    }
    match probe_write(ctx).await {
        Ok(()) => {
            ctx.hung.store(false, Ordering::SeqCst);
            true
        }
        Err(why) => {
            let timeouts = ctx.m().stats.timeouts;
            let metadata = ctx
                .navigate(
                    &ctx.url("/.well-known/oauth-authorization-server"),
                    None,
                    "none",
                )
                .await
                .map_or_else(|e| format!("{e:?}"), |r| r.status.to_string());
            ctx.violation(format!(
                "the server stopped completing requests that write to its store ({}): {timeouts} request(s) timed out after {REQUEST_TIMEOUT:?}{}; a registration now {why}, while GET /.well-known/oauth-authorization-server answers {metadata}. Last log lines:\n{}",
                server.log.display(),
                if pass_timed_out {
                    format!(", a check pass exceeded {PASS_BOUND:?}")
                } else {
                    String::new()
                },
                server.log_tail(3)
            ));
            false
        }
    }
}

/// Registers a client (a write to the store), with its own short bound.
pub(super) async fn probe_write(ctx: &Ctx) -> Result<(), String> {
    let redirect_uri = "https://probe.example/cb".to_owned();
    // A distinct name per probe: identical unused registrations from one address are bounded
    // (the oldest is removed by design), and every probe must stay known.
    let n = ctx.m().clients.len();
    let r = ctx
        .http
        .post(ctx.url("/register"))
        .timeout(Duration::from_secs(5))
        .json(&json!({
            "client_name": format!("Crash probe {n}"),
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }))
        .send()
        .await;
    match r {
        Ok(r) if r.status().as_u16() == 201 => {
            let body: Value = r.json().await.map_err(|e| reason(&e))?;
            let id = body["client_id"].as_str().unwrap_or_default().to_owned();
            ctx.m().clients.push(ClientRec {
                id,
                redirect_uri,
                checks: 0,
            });
            Ok(())
        }
        Ok(r) => Err(format!("answered {}", r.status())),
        Err(e) if e.is_timeout() => Err("did not complete within 5 s".to_owned()),
        Err(e) => Err(format!("failed: {}", reason(&e))),
    }
}

/// SIGKILL the server and check that it had not died on its own before.
pub(super) fn kill(server: &mut Server, ctx: &Ctx) {
    if let Some(status) = server.exited() {
        ctx.violation(format!(
            "the server exited on its own ({status}) before it was killed:\n{}",
            server.log_tail(30)
        ));
    }
    server.kill();
    ctx.m().stats.kills += 1;
    for p in server.log_problems() {
        ctx.violation(format!("the server logged: {p}"));
    }
}

/// Starts the server (sometimes killing it once during start-up first), waits until it
/// answers and completes a write; records a violation with its log and returns `false` if
/// it does not.
pub(super) async fn start(server: &mut Server, ctx: &Ctx, rng: &mut Rng) -> bool {
    if server.starts > 0 && rng.chance(0.15) {
        server.spawn();
        sleep(Duration::from_millis(rng.range(0, 60))).await;
        server.kill();
        ctx.m().stats.startup_kills += 1;
        // It may have served calls already (the load keeps coming): a kill like any other for
        // the upstream-action check, or their events, lost with it, would be owed later.
        super::checks::check_upstream_actions(ctx, tokio::time::Instant::now(), false).await;
    }
    server.spawn();
    match server.wait_ready(&ctx.http, &ctx.base).await {
        Ok(took) => {
            let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
            let mut m = ctx.m();
            m.stats.starts += 1;
            m.stats.ready_total_ms += ms;
            m.stats.ready_max_ms = m.stats.ready_max_ms.max(ms);
        }
        Err(why) => {
            ctx.violation(format!(
                "start {}: {why}; its log ({}):\n{}",
                server.starts,
                server.log.display(),
                server.log_tail(40)
            ));
            return false;
        }
    }
    if let Err(why) = probe_write(ctx).await {
        ctx.violation(format!(
            "start {}: the server answers but a registration {why}; its log ({}):\n{}",
            server.starts,
            server.log.display(),
            server.log_tail(20)
        ));
        return false;
    }
    true
}
