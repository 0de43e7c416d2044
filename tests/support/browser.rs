//! A browser: one cookie jar shared by every 127.0.0.1 port (cookies are not isolated by
//! port), `Sec-Fetch-Site` and `Origin` like a real browser sends them, and no automatic
//! redirects so each hop can be inspected. `Secure` cookies are kept over plain-HTTP
//! loopback, as Chromium does for `http://127.0.0.1`.
//!
//! It also does what the proxy's two scripts do for the browser-bound return (unless made
//! [`Browser::without_javascript`]): submitting the consent form through
//! `support::client::decide` keeps a fresh value in the proxy origin's session storage and sends
//! it as `flow_proof` (`consent.js`), and a navigation that lands on the finish page goes on at
//! once with that value (`finish.js`). Session storage, unlike the cookie jar, belongs to one
//! origin: nothing here lets another port write it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};

/// A response, read fully.
#[derive(Debug)]
pub struct Resp {
    /// Status.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// Body text.
    pub body: String,
}

impl Resp {
    /// `Location`, if any.
    pub fn location(&self) -> Option<String> {
        self.headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
    /// All `Set-Cookie` values.
    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }
    /// The value of `<input type="hidden" name="NAME" value="...">` in the page.
    pub fn hidden(&self, name: &str) -> Option<String> {
        let needle = format!("name=\"{name}\" value=\"");
        let start = self.body.find(&needle)? + needle.len();
        let end = self.body[start..].find('"')?;
        Some(self.body[start..start + end].to_owned())
    }
}

/// A cookie jar: one for every 127.0.0.1 port, like a browser on loopback.
#[derive(Default)]
pub struct CookieJar(Mutex<BTreeMap<String, String>>);

impl CookieJar {
    /// The `Cookie` header to send.
    pub fn header(&self) -> String {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Takes the `Set-Cookie` headers of a response: a cookie set empty or with `Max-Age=0`
    /// is removed. A header that is not `name=value` is passed over; how many were is returned.
    pub fn store(&self, headers: &HeaderMap) -> usize {
        let mut jar = self.0.lock().unwrap();
        let mut unreadable = 0;
        for v in headers.get_all(SET_COOKIE) {
            let Some((s, name, value)) = v.to_str().ok().and_then(|s| {
                let (name, value) = s.split(';').next()?.split_once('=')?;
                Some((s, name, value))
            }) else {
                unreadable += 1;
                continue;
            };
            let expired = s
                .split(';')
                .any(|a| a.trim().eq_ignore_ascii_case("Max-Age=0"));
            if expired || value.is_empty() {
                jar.remove(name.trim());
            } else {
                jar.insert(name.trim().to_owned(), value.to_owned());
            }
        }
        unreadable
    }

    /// Sets a cookie by hand.
    pub fn set(&self, name: &str, value: &str) {
        self.0
            .lock()
            .unwrap()
            .insert(name.to_owned(), value.to_owned());
    }

    /// A cookie's current value.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0.lock().unwrap().get(name).cloned()
    }
}

/// A browser with its own cookie jar.
pub struct Browser {
    client: reqwest::Client,
    jar: CookieJar,
    /// The proxy origin's session storage: the consent page's `flow_proof`, if any.
    flow_proof: Mutex<Option<String>>,
    javascript: bool,
}

/// Whether a response is the proxy's finish page (its form answers the callback).
fn is_finish_page(r: &Resp) -> bool {
    r.status == 200 && r.body.contains(r#"action="/callback/github""#)
}

impl Default for Browser {
    fn default() -> Self {
        Browser::new()
    }
}

impl Browser {
    /// A fresh browser.
    pub fn new() -> Browser {
        Browser {
            client: super::http(),
            jar: CookieJar::default(),
            flow_proof: Mutex::new(None),
            javascript: true,
        }
    }

    /// A browser that runs no script (none of the proxy's scripts' effects are emulated).
    pub fn without_javascript() -> Browser {
        Browser {
            javascript: false,
            ..Browser::new()
        }
    }

    /// What the consent page's script does when its form is submitted (`consent.js`): a fresh
    /// value kept in the proxy origin's session storage, returned to send as `flow_proof`.
    /// `None` without JavaScript, or when `page` has no such field (the confirmation page).
    pub fn consent_script_proof(&self, page: &Resp) -> Option<String> {
        if !self.javascript || !page.body.contains(r#"name="flow_proof""#) {
            return None;
        }
        let value = mcp_oauth_proxy::crypto::random_token().unwrap();
        *self.flow_proof.lock().unwrap() = Some(value.clone());
        Some(value)
    }

    /// The value the consent page's script kept (what `finish.js` would find), if any.
    pub fn stored_flow_proof(&self) -> Option<String> {
        self.flow_proof.lock().unwrap().clone()
    }

    /// A browser already signed in at the fake GitHub as `login`.
    pub fn signed_in_at_github(login: &str) -> Browser {
        let b = Browser::new();
        b.set_cookie("fgh_user", login);
        b
    }

    /// Sets a cookie by hand.
    pub fn set_cookie(&self, name: &str, value: &str) {
        self.jar.set(name, value);
    }

    /// A cookie's current value.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.jar.get(name)
    }

    fn cookie_header(&self) -> String {
        self.jar.header()
    }

    async fn finish(&self, resp: reqwest::Response) -> Resp {
        let unreadable = self.jar.store(resp.headers());
        assert_eq!(unreadable, 0, "a Set-Cookie that is not name=value");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.unwrap();
        Resp {
            status,
            headers,
            body,
        }
    }

    /// A top-level navigation. `site` is the `Sec-Fetch-Site` the browser would send
    /// (`none` for a typed or app-opened URL, `cross-site` for a link on another site).
    pub async fn navigate(&self, url: &str, site: &str) -> Resp {
        let r = self.navigate_once(url, site).await;
        if !self.javascript || !is_finish_page(&r) || url.contains("flow_proof=") {
            return r;
        }
        // `finish.js`: hand the stored value back once (a `location.replace` from our own page),
        // or stay on the page.
        let stored = self.flow_proof.lock().unwrap().take();
        match stored {
            Some(proof) => {
                self.navigate_once(&format!("{url}&flow_proof={proof}"), "same-origin")
                    .await
            }
            None => r,
        }
    }

    async fn navigate_once(&self, url: &str, site: &str) -> Resp {
        let resp = self
            .client
            .get(url)
            .header("cookie", self.cookie_header())
            .header("sec-fetch-site", site)
            .header("sec-fetch-mode", "navigate")
            .send()
            .await
            .unwrap();
        self.finish(resp).await
    }

    /// A form POST from a page on `origin`, with the `Sec-Fetch-Site` a browser would send.
    pub async fn post_form(
        &self,
        url: &str,
        fields: &[(&str, &str)],
        origin: &str,
        site: &str,
    ) -> Resp {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let resp = self
            .client
            .post(url)
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", origin)
            .header("sec-fetch-site", site)
            .body(body)
            .send()
            .await
            .unwrap();
        self.finish(resp).await
    }

    /// A form POST with exactly the given extra headers (none: like a client that sends no
    /// `Origin` or fetch metadata).
    pub async fn post_form_with(
        &self,
        url: &str,
        fields: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Resp {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut req = self
            .client
            .post(url)
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.body(body).send().await.unwrap();
        self.finish(resp).await
    }

    /// Follows a GitHub authorize URL the way a person would: pick `login` if asked, approve
    /// GitHub's own consent screen if shown. Returns the redirect GitHub sends back.
    pub async fn through_github(&self, authorize_url: &str, login: &str) -> Resp {
        let params: Vec<(String, String)> = url::Url::parse(authorize_url)
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect();
        let base = {
            let u = url::Url::parse(authorize_url).unwrap();
            format!("{}://{}", u.scheme(), u.host_str().unwrap())
                + &u.port().map(|p| format!(":{p}")).unwrap_or_default()
        };
        let mut resp = self.navigate(authorize_url, "cross-site").await;
        if resp.status == 200 && resp.body.contains("action=\"/login\"") {
            let mut fields: Vec<(&str, &str)> = params
                .iter()
                .filter(|(k, _)| k != "prompt" && k != "login")
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            fields.push(("login", login));
            resp = self
                .post_form(&format!("{base}/login"), &fields, &base, "same-origin")
                .await;
        }
        if resp.status == 200 && resp.body.contains("/login/oauth/authorize/decision") {
            let mut fields: Vec<(&str, &str)> = params
                .iter()
                .filter(|(k, _)| k != "prompt" && k != "login")
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            fields.push(("decision", "approve"));
            resp = self
                .post_form(
                    &format!("{base}/login/oauth/authorize/decision"),
                    &fields,
                    &base,
                    "same-origin",
                )
                .await;
        }
        assert_eq!(
            resp.status, 302,
            "GitHub should redirect back: {}",
            resp.body
        );
        resp
    }
}
