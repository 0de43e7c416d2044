//! The real binary's `admin` subcommand against a test proxy's admin listener: each command
//! works, `audit verify` exits 0 on a clean trail, a refused request exits 2, usage errors 64.

use std::process::Command;

use crate::support::admin::{ADMIN_TOKEN, Admin, proxy_with_admin};
use crate::support::{Browser, Client, TestProxy};
use mcp_oauth_proxy::store::Keyspace;
use serde_json::Value;

/// Output of one run.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|_| panic!("not JSON: {}", self.stdout))
    }
}

/// The variables reqwest's system proxy reads.
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Runs `mcp-oauth-proxy admin --url <admin> <args>` with `token` in `MCP_ADMIN_TOKEN`.
async fn admin_cli(admin: &Admin, token: Option<&str>, args: &[&str]) -> Run {
    admin_cli_at(&admin.base, token, args, &[]).await
}

/// Runs `mcp-oauth-proxy admin --url <url> <args>` with `token` in `MCP_ADMIN_TOKEN`, no proxy
/// variables but those in `env`.
async fn admin_cli_at(url: &str, token: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Run {
    let bin = crate::support::binary::proxy_binary();
    let mut cmd = Command::new(bin);
    cmd.arg("admin").arg("--url").arg(url).args(args);
    cmd.env_remove("MCP_ADMIN_TOKEN");
    for v in PROXY_VARS {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied());
    if let Some(t) = token {
        cmd.env("MCP_ADMIN_TOKEN", t);
    }
    // Blocking process on a blocking thread: the runtime keeps serving the proxy meanwhile.
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn ok(admin: &Admin, args: &[&str]) -> Run {
    let r = admin_cli(admin, Some(ADMIN_TOKEN), args).await;
    assert_eq!(r.code, 0, "{args:?}: {}{}", r.stdout, r.stderr);
    r
}

async fn authorized(proxy: &TestProxy, name: &str) -> Client {
    let client = Client::register(proxy, name, "https://app.example/cb").await;
    client.tokens(proxy, &Browser::new(), "alice").await;
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_clients_list_show_and_delete() {
    let (proxy, admin) = proxy_with_admin().await;
    let client = authorized(&proxy, "CLI Target").await;
    let list = ok(&admin, &["clients", "list"]).await.json();
    assert_eq!(list[0]["client_id"], client.id.as_str());
    let shown = ok(&admin, &["clients", "show", &client.id]).await.json();
    assert_eq!(shown["client"]["client_name"], "CLI Target");
    assert_eq!(shown["token_families"], 1);
    let gone = ok(&admin, &["clients", "delete", &client.id]).await.json();
    assert_eq!(gone["families"], 1);
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
    // Unknown now: the proxy refuses, exit 2 with its reason.
    let r = admin_cli(&admin, Some(ADMIN_TOKEN), &["clients", "show", &client.id]).await;
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("client not found"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_consents_list_revoke_and_grants_revoke() {
    let (proxy, admin) = proxy_with_admin().await;
    let client = authorized(&proxy, "CLI Consent").await;
    let list = ok(&admin, &["consents", "list", "--user", "github:1001"])
        .await
        .json();
    assert_eq!(list[0]["client_id"], client.id.as_str());
    let r = ok(
        &admin,
        &[
            "consents",
            "revoke",
            "--user",
            "github:1001",
            "--client",
            &client.id,
        ],
    )
    .await
    .json();
    assert_eq!(r["consents"], 1);
    assert_eq!(proxy.count(Keyspace::Consents).await, 0);

    authorized(&proxy, "CLI Grant").await;
    assert_eq!(proxy.count(Keyspace::Grants).await, 1);
    let r = ok(&admin, &["grants", "revoke", "--user", "github:1001"])
        .await
        .json();
    assert_eq!(r["grant_removed"], true);
    assert_eq!(proxy.count(Keyspace::Grants).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_audit_tail_verify_and_export() {
    let (proxy, admin) = proxy_with_admin().await;
    authorized(&proxy, "CLI Audit").await;
    let events = proxy.audit_events().await;

    let tail = ok(&admin, &["audit", "tail", "-n", "3"]).await;
    let lines: Vec<Value> = tail
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[2]["event"]["event"],
        events[events.len() - 1].as_str()
    );

    let verify = ok(&admin, &["audit", "verify"]).await.json();
    assert_eq!(verify["events"], events.len());
    assert_eq!(verify["problems"], serde_json::json!([]));

    let export = ok(&admin, &["audit", "export"]).await;
    assert_eq!(export.stdout.lines().count(), events.len());
    for l in export.stdout.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert!(v["event"]["event"].is_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_refused_requests_exit_2_and_usage_errors_exit_64() {
    let (proxy, admin) = proxy_with_admin().await;
    authorized(&proxy, "CLI Refusal").await;
    let before = proxy.count(Keyspace::Clients).await;

    let wrong = admin_cli(
        &admin,
        Some("a-wrong-token-that-is-long-enough-0123"),
        &["clients", "list"],
    )
    .await;
    assert_eq!(wrong.code, 2, "{}", wrong.stderr);
    assert!(wrong.stderr.contains("401"), "{}", wrong.stderr);
    assert!(wrong.stdout.is_empty());

    let missing = admin_cli(&admin, None, &["clients", "list"]).await;
    assert_eq!(missing.code, 64, "{}", missing.stderr);
    assert!(missing.stderr.contains("MCP_ADMIN_TOKEN"));

    let usage = admin_cli(&admin, Some(ADMIN_TOKEN), &["clients", "frobnicate"]).await;
    assert_eq!(usage.code, 64, "{}", usage.stderr);
    let usage = admin_cli(
        &admin,
        Some(ADMIN_TOKEN),
        &["consents", "revoke", "--user", "u"],
    )
    .await;
    assert_eq!(usage.code, 64, "{}", usage.stderr);
    assert_eq!(proxy.count(Keyspace::Clients).await, before);
}

/// An HTTP proxy configured for other traffic must not see the admin token: the CLI ignores
/// the proxy variables and talks to the admin listener directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_does_not_send_the_admin_token_through_an_environment_proxy() {
    use tokio::io::AsyncReadExt;
    let (proxy, admin) = proxy_with_admin().await;
    let client = authorized(&proxy, "CLI Direct").await;
    // The fake proxy records every byte it is sent and never answers.
    let fake = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fake_url = format!("http://{}", fake.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = fake.accept().await {
            let record = record.clone();
            record.lock().unwrap().extend_from_slice(b"<connection>");
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    record.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    let env = [
        ("HTTP_PROXY", fake_url.as_str()),
        ("http_proxy", fake_url.as_str()),
        ("HTTPS_PROXY", fake_url.as_str()),
        ("ALL_PROXY", fake_url.as_str()),
    ];
    let r = admin_cli_at(&admin.base, Some(ADMIN_TOKEN), &["clients", "list"], &env).await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()[0]["client_id"], client.id.as_str());
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.is_empty(),
        "the proxy saw: {}",
        String::from_utf8_lossy(&seen)
    );
}

/// A non-loopback plain-http `--url` would send the admin token in clear text: refused as a
/// usage error before anything is sent, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_refuses_plain_http_to_a_non_loopback_admin_url() {
    let (proxy, _admin) = proxy_with_admin().await;
    let client = authorized(&proxy, "CLI Clear").await;
    let before = proxy.count(Keyspace::Clients).await;
    let r = admin_cli_at(
        "http://example.com:9090",
        Some(ADMIN_TOKEN),
        &["clients", "delete", &client.id],
        &[],
    )
    .await;
    assert_eq!(r.code, 64, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("loopback"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
    assert_eq!(proxy.count(Keyspace::Clients).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_policy_show_prints_the_rules_in_force() {
    let (proxy, admin) = proxy_with_admin().await;
    let r = ok(&admin, &["policy", "show"]).await;
    assert_eq!(r.json()["description"], "0 rules, default allow");
    let rules: Vec<mcp_oauth_proxy::tool_policy::RawRule> = serde_json::from_value(
        serde_json::json!([{"id": "no-deletes", "tools": ["delete_*"], "decision": "deny"}]),
    )
    .unwrap();
    let mut errs = Vec::new();
    proxy
        .app
        .replace_policy(mcp_oauth_proxy::tool_policy::Policy::from_raw(
            &rules,
            &Default::default(),
            &mut errs,
        ));
    assert!(errs.is_empty());
    let r = ok(&admin, &["policy", "show"]).await;
    assert_eq!(r.json()["rules"][0]["id"], "no-deletes");
    assert_eq!(r.json()["rules"][0]["decision"], "deny");
}
