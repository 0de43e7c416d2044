//! The real `mcp-oauth-proxy` binary for the tests that run it as a process (crash, shutdown,
//! TLS reload, telemetry, the stranger's suite, admin CLI): one way to find it, and to build it
//! when it is older than the sources (a `cargo test` of this package does not build other
//! packages' binaries); the process itself (started, signalled, waited for, killed when the
//! test ends); and the binary beside the fake GitHub of an in-process helper proxy.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use mcp_examples::FakeGitHub;
use tokio::time::{Instant, sleep, timeout};

use super::{Options, TestProxy};

/// The proxy binary to run, built first if the newest one is older than the sources.
pub fn proxy_binary() -> PathBuf {
    if let Ok(p) = std::env::var("MCP_CRASH_BIN") {
        return PathBuf::from(p);
    }
    let target = target_dir();
    let fresh = candidates(&target).find(|p| p.is_file() && !older_than_sources(p));
    if let Some(bin) = fresh {
        return bin;
    }
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let debug = target.join("debug").join(binary_name());
    if debug.is_file() && !older_than_sources(&debug) {
        return debug;
    }
    eprintln!("building the proxy binary for the process tests");
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "mcp-oauth-proxy", "--bin", "mcp-oauth-proxy"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status()
        .unwrap();
    assert!(status.success(), "building mcp-oauth-proxy failed");
    debug
}

/// A binary that is already built, however old, without building one: `MCP_CRASH_BIN`, else
/// release, else debug. For the crash test, which tests the build CI made (release) and passes
/// with a notice where there is none.
pub fn built_proxy_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("MCP_CRASH_BIN") {
        return Some(PathBuf::from(p));
    }
    candidates(&target_dir()).find(|p| p.is_file())
}

/// `target/`, from this test binary's path (`target/<profile>/deps/integration-…`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .unwrap()
        .to_owned()
}

fn binary_name() -> String {
    format!("mcp-oauth-proxy{}", std::env::consts::EXE_SUFFIX)
}

/// Release first, then debug.
fn candidates(target: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    ["release", "debug"]
        .into_iter()
        .map(move |p| target.join(p).join(binary_name()))
}

/// Whether any file under `proxy/src` is newer than the binary.
pub fn older_than_sources(bin: &Path) -> bool {
    fn newest(dir: &Path) -> Option<std::time::SystemTime> {
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                if meta.is_dir() {
                    newest(&e.path())
                } else {
                    meta.modified().ok()
                }
            })
            .max()
    }
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proxy/src");
    let built = std::fs::metadata(bin).and_then(|m| m.modified()).ok();
    matches!((newest(&sources), built), (Some(src), Some(bin)) if src > bin)
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The proxy as a child process, killed (SIGKILL) and reaped when dropped, so a test that ends
/// early leaves nothing running.
pub struct Process {
    child: Child,
    /// Where its output goes.
    pub log: PathBuf,
}

impl Process {
    /// Starts `serve --config <config>`, its output going to `<config>.log`.
    pub fn start(config: &Path) -> Process {
        let args = ["serve".as_ref(), "--config".as_ref(), config.as_os_str()];
        Process::run(&args, config.with_extension("log"))
    }

    /// Like [`Process::start`], with `adjust` changing the command first (its environment).
    pub fn start_with(config: &Path, adjust: impl FnOnce(&mut Command)) -> Process {
        let args = ["serve".as_ref(), "--config".as_ref(), config.as_os_str()];
        Process::spawn(&proxy_binary(), &args, config.with_extension("log"), adjust)
    }

    /// Starts [`proxy_binary`] with `args`, its output (stdout and stderr) going to `log`.
    pub fn run(args: &[&std::ffi::OsStr], log: PathBuf) -> Process {
        Process::run_binary(&proxy_binary(), args, log)
    }

    /// Starts `bin` with `args`, its output going to `log`.
    pub fn run_binary(bin: &Path, args: &[&std::ffi::OsStr], log: PathBuf) -> Process {
        Process::spawn(bin, args, log, |_| {})
    }

    /// `RUST_LOG=info` and plain-text logs, unless `adjust` says otherwise.
    fn spawn(
        bin: &Path,
        args: &[&std::ffi::OsStr],
        log: PathBuf,
        adjust: impl FnOnce(&mut Command),
    ) -> Process {
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env("RUST_LOG", "info")
            .env_remove("MCP_OAUTH_PROXY_LOG_JSON")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        adjust(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        Process { child, log }
    }

    /// Sends a signal by name (`TERM`, `HUP`) with kill(1).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// Its process id (for `/proc/<pid>/status`).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits for the exit, at most `bound`.
    pub async fn wait(&mut self, bound: Duration) -> ExitStatus {
        let end = Instant::now() + bound;
        loop {
            if let Some(s) = self.exited() {
                return s;
            }
            assert!(
                Instant::now() < end,
                "still running {bound:?} later; log:\n{}",
                self.log_text()
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then the exit status within `bound`.
    pub async fn stop(&mut self, bound: Duration) -> ExitStatus {
        self.signal("TERM");
        self.wait(bound).await
    }

    /// Waits until `url` answers 200 (with `http`), failing with the log if it exits first or
    /// does not answer within 30 s.
    pub async fn wait_ready(&mut self, http: &reqwest::Client, url: &str) {
        if let Err(why) = self.ready_within(http, url, Duration::from_secs(30)).await {
            panic!("{why}:\n{}", self.log_text());
        }
    }

    /// Waits until `url` answers 200: how long that took, or why it did not (the process
    /// exited, or `bound` passed).
    pub async fn ready_within(
        &mut self,
        http: &reqwest::Client,
        url: &str,
        bound: Duration,
    ) -> Result<Duration, String> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Err(format!("the proxy exited ({status}) before answering"));
            }
            if started.elapsed() > bound {
                return Err(format!("the proxy did not answer within {bound:?}"));
            }
            if let Ok(Ok(r)) = timeout(Duration::from_secs(2), http.get(url).send()).await
                && r.status() == 200
            {
                return Ok(started.elapsed());
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// Its output so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The configuration of a binary that listens on `127.0.0.1:port` (its public URL too),
/// signs in at `github`, keeps its sled store in `store` and has an admin listener on an
/// ephemeral port. `server_extra`: more lines of `[server]`; `sections`: more sections.
pub fn config_toml(
    port: u16,
    github: &FakeGitHub,
    store: &Path,
    server_extra: &str,
    sections: &str,
) -> String {
    format!(
        r#"[server]
public_url = "http://127.0.0.1:{port}"
listen = "127.0.0.1:{port}"
{server_extra}
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
scopes = ["read:user", "repo"]
authorize_url = "{a}"
token_url = "{t}"
api_url = "{api}"
[admin]
listen = "127.0.0.1:0"
[store]
path = {store:?}
{sections}"#,
        a = github.authorize_url(),
        t = github.token_url(),
        api = github.api_url(),
        store = store.display().to_string(),
    )
}

/// The real binary beside an in-process helper proxy, whose fake GitHub and demo backend
/// (`[backend]`, `auth = "github_token"`) the binary uses. The helper is there for those and
/// for its flow helpers: its `base` is the binary's URL, so `Mcp::for_user(&b.helper, …)` and
/// the like talk to the binary.
pub struct BesideHelper {
    /// The binary (killed first when this is dropped).
    pub proxy: Process,
    /// The helper.
    pub helper: TestProxy,
    /// The binary's port on 127.0.0.1 (`helper.base` is its URL).
    pub port: u16,
    /// The binary's config, log and store.
    pub dir: tempfile::TempDir,
}

impl BesideHelper {
    /// Starts the binary with `shutdown_grace_secs = grace_secs` and `server_extra` in
    /// `[server]` and `sections` appended, and waits until it answers.
    pub async fn start(grace_secs: u64, server_extra: &str, sections: &str) -> BesideHelper {
        let mut helper = TestProxy::start_with(Options {
            backend: true,
            ..Options::default()
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        helper
            .github
            .set_callback_url(&format!("{base}/callback/github"));
        let config = dir.path().join("proxy.toml");
        let backend = format!(
            "[backend]\nurl = \"{}\"\nauth = \"github_token\"\n",
            helper.backend().url()
        );
        std::fs::write(
            &config,
            config_toml(
                port,
                &helper.github,
                &dir.path().join("store"),
                &format!("shutdown_grace_secs = {grace_secs}\n{server_extra}"),
                &format!("{backend}{sections}"),
            ),
        )
        .unwrap();
        let mut proxy = Process::start(&config);
        proxy
            .wait_ready(
                &super::http(),
                &format!("{base}/.well-known/oauth-authorization-server"),
            )
            .await;
        helper.base = base;
        BesideHelper {
            proxy,
            helper,
            port,
            dir,
        }
    }

    /// The binary's sled store directory.
    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }
}
