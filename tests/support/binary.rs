//! The real `mcp-oauth-proxy` binary for the tests that run it as a process (crash, shutdown,
//! TLS reload, admin CLI): one way to find it, and to build it when it is older than the
//! sources (a `cargo test` of this package does not build other packages' binaries).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The proxy binary to run, built first if the newest one is older than the sources.
pub fn proxy_binary() -> PathBuf {
    if let Ok(p) = std::env::var("MCP_CRASH_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/integration-… → target/
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap().parent().unwrap();
    let name = format!("mcp-oauth-proxy{}", std::env::consts::EXE_SUFFIX);
    let fresh = ["release", "debug"]
        .iter()
        .map(|p| target.join(p).join(&name))
        .find(|p| p.is_file() && !older_than_sources(p));
    if let Some(bin) = fresh {
        return bin;
    }
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let debug = target.join("debug").join(&name);
    if debug.is_file() && !older_than_sources(&debug) {
        return debug;
    }
    eprintln!("building the proxy binary for the process tests");
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "mcp-oauth-proxy", "--bin", "mcp-oauth-proxy"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status()
        .unwrap();
    assert!(status.success(), "building mcp-oauth-proxy failed");
    debug
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
