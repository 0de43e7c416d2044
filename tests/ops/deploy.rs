//! The deployment assets stay true: `deploy/proxy.toml` passes `check-config` once its
//! secrets are where systemd's `LoadCredential=` puts them, and it reads exactly the
//! credentials that `deploy/systemd/mcp-oauth-proxy.service` loads. (`.ci/run` runs
//! `systemd-analyze verify` on the unit.)

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use crate::support::binary::proxy_binary;

/// Where systemd puts the unit's credentials.
const CREDENTIALS: &str = "/run/credentials/mcp-oauth-proxy.service/";

fn repo_file(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The credential names the config reads from the credentials directory.
fn credentials_read(config: &str) -> BTreeSet<String> {
    config
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(CREDENTIALS).skip(1))
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

/// The names of the unit's `LoadCredential=name:path` lines.
fn credentials_loaded(unit: &str) -> BTreeSet<String> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix("LoadCredential="))
        .map(|v| v.split(':').next().unwrap().to_owned())
        .collect()
}

#[test]
fn production_example_config_passes_check_config_with_its_credentials_in_place() {
    let config = repo_file("deploy/proxy.toml");
    let unit = repo_file("deploy/systemd/mcp-oauth-proxy.service");
    let names = credentials_read(&config);
    assert!(
        !names.is_empty(),
        "the example reads its secrets from credentials"
    );
    assert_eq!(
        names,
        credentials_loaded(&unit),
        "proxy.toml reads exactly the credentials the unit loads"
    );
    assert!(
        unit.contains("--config /etc/mcp-oauth-proxy/proxy.toml"),
        "the unit runs the config where the install steps put it"
    );

    // The same file, with the credentials directory where this test can write.
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials");
    std::fs::create_dir(&creds).unwrap();
    for name in &names {
        // 48 characters: longer than every minimum length a secret has.
        std::fs::write(creds.join(name), format!("{name}-{}\n", "x".repeat(48))).unwrap();
    }
    let local = config.replace(CREDENTIALS, &format!("{}/", creds.display()));
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, local).unwrap();
    let out = Command::new(proxy_binary())
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "check-config failed:\n{text}");
    assert!(text.contains("configuration is valid"), "{text}");

    // A missing credential is a config error (exit 64), as it would be under systemd.
    let first = names.iter().next().unwrap();
    std::fs::remove_file(creds.join(first)).unwrap();
    let out = Command::new(proxy_binary())
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}
