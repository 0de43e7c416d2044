//! Records the git commit the binary is built from, for `--version`. Outside a git checkout
//! (a source tarball) `MCP_OAUTH_PROXY_COMMIT` may name it; otherwise it is "unknown".
#![forbid(unsafe_code)]

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=MCP_OAUTH_PROXY_COMMIT");
    let commit = std::env::var("MCP_OAUTH_PROXY_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and packed refs.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/packed-refs");
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            // In a worktree, branch refs live in the common dir.
            let common =
                git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).unwrap_or(dir);
            println!("cargo:rerun-if-changed={common}/{reference}");
        }
    }
    println!("cargo:rustc-env=MCP_OAUTH_PROXY_COMMIT={commit}");
}
