//! A side of benchmark 1: nginx as a plain reverse proxy in front of the bench's backend, what
//! many teams would put in front instead of a gateway. `proxy_pass` to an `upstream` with
//! kept-alive connections (`keepalive`, `proxy_http_version 1.1`, `proxy_set_header
//! Connection ""`), one worker per core, no access log. It runs from a temporary directory of
//! its own (configuration, pid file, error log, temp paths), as the current user, on an
//! ephemeral loopback port, in the foreground (`daemon off`) as a child of the benchmark
//! process, which stops it by its pid.
//!
//! The parent installs Debian's package when no nginx binary is found ([`ensure`]).

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where nginx may be (`/usr/sbin` is not on every user's PATH).
fn find() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

/// This process's effective uid (`/proc/self/status`, `Uid:` real effective saved fs).
fn euid() -> Option<u32> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Uid:"))?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

fn apt(prefix: &[&str], args: &[&str]) -> Result<(), String> {
    let (cmd, rest) = match prefix.split_first() {
        Some((c, rest)) => (*c, [rest, &["apt-get"], args].concat()),
        None => ("apt-get", args.to_vec()),
    };
    eprintln!("  $ {} {}", cmd, rest.join(" "));
    let out = Command::new(cmd)
        .args(&rest)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(format!(
            "apt-get {} failed: {}",
            args.join(" "),
            last.trim()
        ))
    }
}

/// The nginx binary, installing Debian's `nginx-light` (or else `nginx`) with apt-get when
/// none is found: as root directly, otherwise through `sudo -n` if that needs no password.
/// `Err` is the reason nginx is not measured.
pub fn ensure() -> Result<PathBuf, String> {
    if let Some(p) = find() {
        return Ok(p);
    }
    let prefix: &[&str] = if euid() == Some(0) {
        &[]
    } else if Command::new("sudo")
        .args(["-n", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        &["sudo", "-n"]
    } else {
        return Err(
            "nginx is not installed, and installing it (apt-get install nginx-light) needs root or password-less sudo"
                .to_owned(),
        );
    };
    eprintln!("  nginx not found: installing Debian's package …");
    let mut last = String::new();
    // The package lists may be missing or stale on a new machine: update once, then retry.
    for update in [false, true] {
        if update && let Err(e) = apt(prefix, &["update", "-q"]) {
            last = e;
            break;
        }
        for pkg in ["nginx-light", "nginx"] {
            match apt(
                prefix,
                &["install", "-y", "-q", "--no-install-recommends", pkg],
            ) {
                Ok(()) => {
                    if let Some(p) = find() {
                        return Ok(p);
                    }
                    last = format!("{pkg} installed, but no nginx binary found");
                }
                Err(e) => last = e,
            }
        }
    }
    Err(format!("nginx could not be installed: {last}"))
}

/// `nginx -v` (it prints to stderr).
pub fn version(bin: &Path) -> String {
    Command::new(bin)
        .arg("-v")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .and_then(|s| s.strip_prefix("nginx version: ").map(str::to_owned))
        .unwrap_or_else(|| "unknown version".to_owned())
}

/// A running nginx: [`Nginx::stop`] it; if dropped running, it is sent SIGTERM.
pub struct Nginx {
    child: Child,
    /// Its URL (`http://127.0.0.1:PORT/mcp`).
    pub url: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn config(dir: &Path, port: u16, backend: SocketAddr, workers: usize, root: bool) -> String {
    let d = dir.display();
    // Run as root, nginx would switch its workers to `nobody`: keep them the current user.
    let user = if root { "user root;\n" } else { "" };
    format!(
        r#"# proxy-bench: nginx as a plain reverse proxy in front of the bench's backend.
{user}worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    # The load generator keeps its connections: do not close them after nginx's default of
    # 1000 requests (the proxy and the forwarder do not either).
    keepalive_requests 1000000;
    upstream bench_backend {{
        server {backend};
        keepalive 128;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://bench_backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"#
    )
}

impl Nginx {
    /// Starts `bin` in front of `backend_url` (`http://ADDR/mcp`) with `workers` worker
    /// processes, in a new directory of the run (`harness::tempdir`). `Err` says why it did not
    /// start.
    pub async fn start(bin: &Path, backend_url: &str, workers: usize) -> Result<Nginx, String> {
        let backend: SocketAddr = url::Url::parse(backend_url)
            .ok()
            .and_then(|u| u.socket_addrs(|| None).ok())
            .and_then(|a| a.first().copied())
            .ok_or_else(|| format!("backend URL {backend_url}"))?;
        let mut last = String::new();
        // The port is picked free, then bound by nginx: retry if someone took it meanwhile.
        for _ in 0..3 {
            let dir = crate::harness::tempdir("nginx-");
            let port = free_port();
            let conf = dir.path().join("nginx.conf");
            let text = config(dir.path(), port, backend, workers, euid() == Some(0));
            std::fs::File::create(&conf)
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .map_err(|e| format!("write nginx.conf: {e}"))?;
            let err_log = dir.path().join("error.log");
            let mut child = Command::new(bin)
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(&err_log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("start {}: {e}", bin.display()))?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut up = false;
            for _ in 0..100 {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                    up = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if up {
                return Ok(Nginx {
                    child,
                    url: format!("http://{addr}/mcp"),
                    _dir: dir,
                });
            }
            let _ = child.kill();
            let _ = child.wait();
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read as _;
                let _ = e.read_to_string(&mut stderr);
            }
            let log = std::fs::read_to_string(&err_log).unwrap_or_default();
            last = format!("{} {}", stderr.trim(), log.trim())
                .trim()
                .lines()
                .last()
                .unwrap_or("nginx did not start")
                .to_owned();
        }
        Err(format!("nginx did not start: {last}"))
    }

    /// Stops it: SIGTERM to the master (by its pid), which ends its workers; SIGKILL to the
    /// master if it is still there after 5 s.
    pub async fn stop(mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        signal(self.child.id(), "TERM");
        for _ in 0..50 {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal(self.child.id(), "TERM");
        }
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Stops any nginx a benchmark process started under `base` and could not stop itself (it
/// hung and was ended): each `nginx-*/nginx.pid` still there names a master still running,
/// checked to be nginx before it is sent SIGTERM.
pub fn reap(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with("nginx-") {
            continue;
        }
        let Some(pid) = std::fs::read_to_string(e.path().join("nginx.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains("nginx") {
            eprintln!("  stopping nginx (pid {pid}) left by a benchmark process");
            signal(pid, "TERM");
        }
    }
}
