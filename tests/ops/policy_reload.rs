//! `[[policy]]` reload on SIGHUP, on the real binary: a valid configuration puts its policy in
//! force, an invalid one (a bad glob, or a bad value in any other section) is logged and the
//! current policy stays, and neither stops the process. The active policy is read back from
//! the admin API (`GET /admin/api/policy`).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::time::{Instant, sleep};

use crate::support::binary::{Process, free_port};

const ADMIN_TOKEN: &str = "policy-reload-admin-token-0123456789abcdef";

fn config(port: u16, admin_port: u16, store: &Path, rest: &str) -> String {
    format!(
        r#"[server]
public_url = "http://127.0.0.1:{port}"
listen = "127.0.0.1:{port}"
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
scopes = ["read:user", "repo"]
authorize_url = "http://127.0.0.1:9/login/oauth/authorize"
token_url = "http://127.0.0.1:9/login/oauth/access_token"
api_url = "http://127.0.0.1:9/api"
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{ADMIN_TOKEN}"
[store]
path = {store:?}
{rest}"#,
        store = store.display().to_string(),
    )
}

const NO_DELETES: &str = r#"
[[policy]]
id = "no-deletes"
tools = ["delete_*"]
decision = "deny"
"#;

const BAD_GLOB: &str = r#"
[[policy]]
id = "broken"
tools = ["delete_[oops"]
decision = "deny"
"#;

const ASK_WRITES: &str = r#"
[[policy]]
id = "writes-need-a-human"
tools = ["create_*", "push_files"]
arguments = { owner = "acme" }
decision = "ask"
ask_ttl_secs = 300

[[policy]]
id = "no-deletes"
tools = ["delete_*"]
decision = "deny"

[policy_defaults]
decision = "deny"
"#;

async fn active_policy(http: &reqwest::Client, admin_port: u16) -> Value {
    let r = http
        .get(format!("http://127.0.0.1:{admin_port}/admin/api/policy"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn ids(policy: &Value) -> Vec<&str> {
    policy["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect()
}

/// Waits until the log has `needle` `n` times.
async fn logged(proxy: &Process, needle: &str, n: usize) {
    let until = Instant::now() + Duration::from_secs(15);
    while proxy.log_text().matches(needle).count() < n {
        assert!(
            Instant::now() < until,
            "no {needle:?}:\n{}",
            proxy.log_text()
        );
        sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_policy_on_sighup_keeps_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let store = dir.path().join("store");
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(port, admin_port, &store, NO_DELETES)).unwrap();
    let mut proxy = Process::start(&path);
    let http = crate::support::http();
    proxy
        .wait_ready(&http, &format!("http://127.0.0.1:{admin_port}/healthz"))
        .await;
    let p = active_policy(&http, admin_port).await;
    assert_eq!(ids(&p), ["no-deletes"]);
    assert_eq!(p["rules"][0]["decision"], "deny");
    assert_eq!(p["rules"][0]["tools"][0], "delete_*");
    assert_eq!(p["default"], "allow");

    // A bad glob: refused, logged with the rule, the deny rule still holds.
    std::fs::write(&path, config(port, admin_port, &store, BAD_GLOB)).unwrap();
    proxy.signal("HUP");
    logged(&proxy, "configuration reload refused", 1).await;
    assert!(
        proxy
            .log_text()
            .contains("policy[0] (id \"broken\"): tools: bad glob"),
        "{}",
        proxy.log_text()
    );
    assert_eq!(ids(&active_policy(&http, admin_port).await), ["no-deletes"]);
    assert!(
        proxy.exited().is_none(),
        "a bad reload must not stop the proxy"
    );

    // A good policy: in force.
    std::fs::write(&path, config(port, admin_port, &store, ASK_WRITES)).unwrap();
    proxy.signal("HUP");
    logged(&proxy, "policy reloaded", 1).await;
    let p = active_policy(&http, admin_port).await;
    assert_eq!(ids(&p), ["writes-need-a-human", "no-deletes"]);
    assert_eq!(p["rules"][0]["decision"], "ask");
    assert_eq!(p["rules"][0]["ask_ttl_secs"], 300);
    assert_eq!(p["rules"][0]["arguments"][0], "/owner");
    assert_eq!(p["default"], "deny");
    assert_eq!(p["description"], "2 rules, default deny");

    // A valid policy in a file with an error elsewhere: the whole file is validated, so
    // nothing of it is taken.
    let elsewhere = format!("{NO_DELETES}\n[tokens]\ncode_ttl_secs = 5\n");
    std::fs::write(&path, config(port, admin_port, &store, &elsewhere)).unwrap();
    proxy.signal("HUP");
    logged(&proxy, "configuration reload refused", 2).await;
    assert!(proxy.log_text().contains("code_ttl_secs"));
    assert_eq!(
        ids(&active_policy(&http, admin_port).await),
        ["writes-need-a-human", "no-deletes"]
    );

    // An unreadable file: the same.
    std::fs::remove_file(&path).unwrap();
    proxy.signal("HUP");
    logged(&proxy, "configuration reload refused", 3).await;
    assert_eq!(
        ids(&active_policy(&http, admin_port).await),
        ["writes-need-a-human", "no-deletes"]
    );

    let status = proxy.stop(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log_text());
}
