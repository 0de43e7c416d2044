//! A person with an agent: their own browser (signed in to the proxy after authorizing), the
//! agent's registration and its MCP client, and the account-page actions tests need.

use super::browser::{Browser, Resp};
use super::client::Client;
use super::mcp::Mcp;
use super::{TestProxy, query_param};

/// A person and their agent.
pub struct Person {
    /// Their GitHub login.
    pub login: String,
    /// Their browser.
    pub browser: Browser,
    /// Their agent's registration.
    pub client: Client,
    /// Their agent's MCP client.
    pub mcp: Mcp,
}

impl Person {
    /// `login` authorizes a new agent called `agent` in their own browser.
    pub async fn with_agent(
        proxy: &TestProxy,
        login: &str,
        agent: &str,
        version: &'static str,
    ) -> Person {
        let client =
            Client::register(proxy, agent, &format!("https://{login}-agent.example/cb")).await;
        let browser = Browser::new();
        let t = client.tokens(proxy, &browser, login).await;
        let mut mcp = Mcp::with_token(proxy, t.json["access_token"].as_str().unwrap());
        mcp.version = version;
        Person {
            login: login.to_owned(),
            browser,
            client,
            mcp,
        }
    }

    async fn account_post(&self, proxy: &TestProxy, path: &str, fields: &[(&str, &str)]) -> Resp {
        let page = self.browser.navigate(&proxy.url("/account"), "none").await;
        assert_eq!(page.status, 200, "{}", page.body);
        let csrf = page.hidden("csrf").unwrap();
        let mut all = vec![("csrf", csrf.as_str())];
        all.extend_from_slice(fields);
        self.browser
            .post_form(&proxy.url(path), &all, &proxy.base, "same-origin")
            .await
    }

    /// Stops their agent from using GitHub (account page).
    pub async fn withdraw_agent(&self, proxy: &TestProxy) {
        let r = self
            .account_post(
                proxy,
                "/account/withdraw",
                &[("client_id", &self.client.id)],
            )
            .await;
        assert_eq!(r.status, 303);
    }

    /// Disconnects GitHub (account page); returns where the page sent the browser.
    pub async fn disconnect_github(&self, proxy: &TestProxy) -> String {
        let r = self.account_post(proxy, "/account/disconnect", &[]).await;
        assert_eq!(r.status, 303);
        r.location().unwrap()
    }

    /// Revokes their agent (account page: consent, tokens, GitHub allowance).
    pub async fn revoke_agent(&self, proxy: &TestProxy) {
        let r = self
            .account_post(proxy, "/account/revoke", &[("client_id", &self.client.id)])
            .await;
        assert_eq!(r.status, 303);
        assert_eq!(r.location().as_deref(), Some("/account?notice=revoked"));
    }

    /// Opens a link in their browser, as a click from a chat would.
    pub async fn open(&self, url: &str) -> Resp {
        self.browser.navigate(url, "none").await
    }

    /// Opens a connect or approval link as its person does: when the proxy first sends them to
    /// sign in again (always after the consent flow's or the account page's sign-in, which
    /// GitHub may answer silently and which therefore never count as fresh for a link), they
    /// pick their own account in GitHub's account picker and come back. Returns the page.
    pub async fn open_link(&self, proxy: &TestProxy, url: &str) -> Resp {
        let first = self.open(url).await;
        if first.status != 303 {
            return first;
        }
        let gh = first.location().unwrap();
        assert!(
            gh.starts_with(&proxy.github.authorize_url()),
            "a link sends only to GitHub's sign-in: {gh}"
        );
        assert_eq!(
            query_param(&gh, "prompt").as_deref(),
            Some("select_account"),
            "a link's sign-in asks for GitHub's account picker: {gh}"
        );
        let back = self.browser.through_github(&gh, &self.login).await;
        let cb = self
            .browser
            .navigate(&back.location().unwrap(), "cross-site")
            .await;
        assert_eq!(cb.status, 303, "{}", cb.body);
        assert_eq!(
            cb.location().as_deref(),
            url.strip_prefix(&proxy.base),
            "the sign-in returns to the link"
        );
        self.open(url).await
    }

    /// Submits the link page's form with `decision`.
    pub async fn decide(
        &self,
        proxy: &TestProxy,
        link_url: &str,
        page: &Resp,
        decision: &str,
    ) -> Resp {
        let csrf = page.hidden("csrf").expect("the link page's form");
        self.browser
            .post_form(
                link_url,
                &[("csrf", &csrf), ("decision", decision)],
                &proxy.base,
                "same-origin",
            )
            .await
    }

    /// Opens a link and completes its action, signing in at GitHub as `github_login` when a
    /// (re)connection is asked. Returns the final page.
    pub async fn complete(&self, proxy: &TestProxy, link_url: &str, github_login: &str) -> Resp {
        let page = self.open_link(proxy, link_url).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let r = self.decide(proxy, link_url, &page, "approve").await;
        if r.status != 303 {
            return r;
        }
        let gh = r.location().unwrap();
        assert_eq!(
            query_param(&gh, "prompt").as_deref(),
            Some("select_account")
        );
        let back = self.browser.through_github(&gh, github_login).await;
        self.browser
            .navigate(&back.location().unwrap(), "cross-site")
            .await
    }
}
