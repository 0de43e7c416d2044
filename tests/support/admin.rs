//! The admin listener for tests: the proxy's admin router on its own ephemeral port, with a
//! test admin token in the config.

use serde_json::Value;

use super::{Options, TestProxy, http};

/// The admin token the test proxies are configured with.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef-0123";

/// `[admin]` for `Options::extra_toml`.
pub fn admin_toml() -> String {
    format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{ADMIN_TOKEN}\"\n")
}

/// A running admin listener.
pub struct Admin {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Admin {
    /// Serves `proxy`'s admin router on an ephemeral loopback port.
    pub async fn start(proxy: &TestProxy) -> Admin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = proxy.app.clone();
        tokio::spawn(async move {
            mcp_oauth_proxy::admin::serve(listener, app, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Admin { base, _stop: tx }
    }

    /// `base + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET with the admin token; (status, JSON body or Null).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = http()
            .get(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// POST JSON with the admin token.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = http()
            .post(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(body)
            .send()
            .await
            .unwrap();
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// DELETE with the admin token.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let r = http()
            .delete(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// The metrics exposition.
    pub async fn metrics(&self) -> String {
        let r = http().get(self.url("/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    }
}

/// A proxy (with the demo backend behind `/mcp`) and its admin listener.
pub async fn proxy_with_admin() -> (TestProxy, Admin) {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        extra_toml: admin_toml(),
        ..Options::default()
    })
    .await;
    let admin = Admin::start(&proxy).await;
    (proxy, admin)
}
