//! Crash test (issue 7): the `mcp-oauth-proxy` binary under a load of full OAuth flows,
//! refreshes, revocations and `/mcp` calls is killed with SIGKILL at random moments and
//! restarted on the same sled directory, many times. After every restart (and at the end) it
//! checks, from the client side only, over HTTP:
//!
//! 1. a code confirmed redeemed (200) is refused when presented again, and no code is ever
//!    confirmed twice;
//! 2. a refresh token confirmed rotated away is never accepted again (`refresh_grace_secs = 0`;
//!    the only tolerated answer is the documented replay of the very same successor), and no
//!    rotation ever yields two different successors;
//! 3. nothing revoked is honoured after its revocation response (`/revoke` of a refresh or an
//!    access token, the account page's "revoke", reuse detection, a replayed code);
//! 4. every client confirmed registered (201) is still known;
//! 5. every access token confirmed issued and not revoked is still accepted at `/mcp` (no
//!    `[backend]`: 503 = accepted, 401 = refused), every refresh token confirmed current still
//!    rotates, every consent confirmed (a redirect with a code) is still remembered, every code
//!    confirmed to a client can still be redeemed once;
//! 6. the server comes up within a bound every time (also after a kill during its start-up),
//!    completes a write right away, keeps completing them (a server whose requests that write
//!    hang while its metadata still answers is reported), and never logs a panic or an error.
//!
//! A request whose response was not received is unconfirmed: neither success nor failure. A
//! request whose TCP connection was refused never reached the server and changed nothing.
//! Checks run while the load is paused; each pass favours what has not been checked yet, and
//! the last pass (after a final kill and restart) checks everything and then presents every
//! redeemed code and every rotated-away refresh token once more.
//!
//! Uses `target/release/mcp-oauth-proxy` (CI builds it first), else `target/debug/…`
//! (`MCP_CRASH_BIN` overrides). Without a binary it passes with a notice, unless
//! `MCP_CRASH=require`. `MCP_CRASH_CYCLES` sets the number of kills, `MCP_CRASH_CONCURRENCY`
//! the number of concurrent clients, `MCP_CRASH_SEED` the seed (printed; the operations are
//! reproducible from it, the moments they meet a kill are not).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use mcp_examples::{FakeGitHub, FakeGitHubConfig};
use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use serde_json::{Value, json};
use tokio::sync::RwLock;
use tokio::time::{Instant, sleep, timeout};

use crate::support::{Pkce, query_param};

/// Concurrent load tasks, and concurrent checks (`MCP_CRASH_CONCURRENCY` overrides).
const DEFAULT_CONCURRENCY: usize = 8;
/// Kills during load, unless `MCP_CRASH_CYCLES` says otherwise.
const DEFAULT_CYCLES: usize = 40;
/// The kill loop stops after this long even if cycles remain.
const LOOP_BUDGET: Duration = Duration::from_secs(90);
/// The whole test, including the final checks.
const TEST_BOUND: Duration = Duration::from_secs(240);
/// A start must answer within this.
const READY_BOUND: Duration = Duration::from_secs(30);
/// Any single HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A check pass (sampled) must finish within this.
const PASS_BOUND: Duration = Duration::from_secs(60);
/// The final, complete checks must finish within this.
const FINAL_BOUND: Duration = Duration::from_secs(90);
/// Codes live 60 s; an older one may have expired legitimately.
const CODE_FRESH: Duration = Duration::from_secs(45);
/// People at the fake GitHub.
const LOGINS: [&str; 3] = ["alice", "bob", "mallory"];

// ---------------------------------------------------------------------------------------------
// Randomness (seeded, printed) and small helpers.

/// SplitMix64: enough for choosing moments and operations reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % (n.max(1) as u64)) as usize
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
}

/// A short, single-line description of a response body (an HTML page's title).
fn brief(body: &str) -> String {
    if let Some(start) = body.find("<title>") {
        let rest = &body[start + 7..];
        return rest[..rest.find("</title>").unwrap_or(rest.len())].to_owned();
    }
    let one: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    one.chars().take(200).collect()
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

// ---------------------------------------------------------------------------------------------
// HTTP: every request is either answered, not sent (connection refused), or lost.

#[derive(Debug)]
enum Fail {
    /// The TCP connection was refused: the server never saw the request.
    NotSent,
    /// Sent, but no complete response: the outcome is unknown.
    Lost(String),
}

type Out<T> = Result<T, Fail>;

/// The innermost cause of an HTTP error (no URL, so no query parameters in the output).
fn reason(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Resp {
    fn location(&self) -> Option<String> {
        self.headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
    fn hidden(&self, name: &str) -> Option<String> {
        let needle = format!("name=\"{name}\" value=\"");
        let start = self.body.find(&needle)? + needle.len();
        let end = self.body[start..].find('"')?;
        Some(self.body[start..start + end].to_owned())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
    fn is_invalid_grant(&self) -> bool {
        self.status == 400 && self.error() == "invalid_grant"
    }
    fn brief(&self) -> String {
        format!("{} {}", self.status, brief(&self.body))
    }
}

/// A browser's cookie jar: one for every 127.0.0.1 port, like a browser on loopback.
#[derive(Default)]
struct Jar(Mutex<BTreeMap<String, String>>);

impl Jar {
    fn header(&self) -> String {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
    fn store(&self, headers: &HeaderMap) {
        let mut jar = self.0.lock().unwrap();
        for v in headers.get_all(SET_COOKIE) {
            let Ok(s) = v.to_str() else { continue };
            let Some((name, value)) = s.split(';').next().and_then(|f| f.split_once('=')) else {
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
    }
}

// ---------------------------------------------------------------------------------------------
// What the clients were told: the model every check compares against.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Consent {
    /// No consent was ever given (no callback was sent).
    Never,
    /// A redirect with a code confirmed it.
    Confirmed,
    /// The account page confirmed its revocation (303).
    Revoked,
    /// A callback was sent but its answer was lost.
    Unsure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AgentState {
    Active,
    /// The account page's revoke was sent, its answer lost: retried next.
    RevokeLost,
    /// Revoked on the account page (confirmed); only checked from now on.
    Retired,
}

#[derive(Clone)]
struct PendingCode {
    code: String,
    verifier: String,
    issued: Instant,
    /// A redemption was sent and its answer lost.
    lost: bool,
}

struct ClientRec {
    id: String,
    redirect_uri: String,
    checks: u32,
}

/// One person's agent: a registered client and the person's own browser.
struct Agent {
    worker: usize,
    client: usize,
    login: &'static str,
    jar: Arc<Jar>,
    consent: Consent,
    state: AgentState,
    pending_code: Option<PendingCode>,
    /// A code issued just before the consent was revoked; must be refused after.
    code_before_revoke: Option<(String, String)>,
    families: Vec<usize>,
    checks: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fam {
    Live,
    /// Presenting the current refresh token was sent, the answer lost.
    RefreshLost,
    /// `/revoke` of the current refresh token was sent, the answer lost.
    RevokeLost,
    /// Presenting the rotated-away token at this index was sent, the answer lost.
    ReuseLost(usize),
    /// Confirmed revoked, and how.
    Revoked(&'static str),
    /// The model no longer knows (after a violation): not checked any more.
    Dead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Live,
    Revoked,
    RevokeLost,
}

/// A refresh-token family: born from one confirmed code redemption.
struct Family {
    agent: usize,
    client: usize,
    code: String,
    verifier: String,
    /// Confirmed refresh tokens, oldest first: each the confirmed successor of the one before.
    chain: Vec<String>,
    access: Vec<(String, Tok)>,
    state: Fam,
    checks: u32,
}

#[derive(Default, Debug)]
struct Stats {
    registrations: u64,
    consent_pages: u64,
    consent_skips: u64,
    codes_issued: u64,
    codes_redeemed: u64,
    refreshes: u64,
    replays: u64,
    revoked_refresh: u64,
    revoked_access: u64,
    revoked_account: u64,
    reuse_detected: u64,
    codes_replayed: u64,
    mcp_calls: u64,
    checks: u64,
    not_sent: u64,
    lost: u64,
    timeouts: u64,
    kills: u64,
    startup_kills: u64,
    starts: u64,
    ready_total_ms: u64,
    ready_max_ms: u64,
}

#[derive(Default)]
struct Model {
    clients: Vec<ClientRec>,
    agents: Vec<Agent>,
    families: Vec<Family>,
    /// Every code ever confirmed redeemed.
    redeemed: HashSet<String>,
    /// Refresh token → its confirmed successor.
    rotations: HashMap<String, String>,
    violations: Vec<String>,
    /// Why operations' answers were lost, and how often.
    lost_reasons: BTreeMap<String, u64>,
    stats: Stats,
}

/// What an operation needs to know about a family.
#[derive(Clone)]
struct FamView {
    client_id: String,
    redirect_uri: String,
    code: String,
    verifier: String,
    chain: Vec<String>,
    access: Vec<(String, Tok)>,
    state: Fam,
    agent_state: AgentState,
}

impl Model {
    fn view(&self, f: usize) -> FamView {
        let fam = &self.families[f];
        let c = &self.clients[fam.client];
        FamView {
            client_id: c.id.clone(),
            redirect_uri: c.redirect_uri.clone(),
            code: fam.code.clone(),
            verifier: fam.verifier.clone(),
            chain: fam.chain.clone(),
            access: fam.access.clone(),
            state: fam.state,
            agent_state: self.agents[fam.agent].state,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The shared context: HTTP client, the proxy's address, the model, the gate between load
// (readers) and checks (the writer).

struct Ctx {
    http: reqwest::Client,
    base: String,
    model: Mutex<Model>,
    gate: RwLock<()>,
    stop: AtomicBool,
    /// A request timed out: checks stop until a probe shows the server still writes.
    hung: AtomicBool,
    /// Concurrent checks.
    concurrency: usize,
}

impl Ctx {
    fn m(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn violation(&self, msg: String) {
        eprintln!("VIOLATION: {msg}");
        self.m().violations.push(msg);
    }

    fn is_hung(&self) -> bool {
        self.hung.load(Ordering::SeqCst)
    }

    fn checked(&self) {
        self.m().stats.checks += 1;
    }

    async fn finish(
        &self,
        r: Result<reqwest::Response, reqwest::Error>,
        jar: Option<&Jar>,
    ) -> Out<Resp> {
        let out = match r {
            Err(e) if e.is_connect() => Err(Fail::NotSent),
            Err(e) => {
                if e.is_timeout() {
                    self.hung.store(true, Ordering::SeqCst);
                    self.m().stats.timeouts += 1;
                }
                Err(Fail::Lost(reason(&e)))
            }
            Ok(r) => {
                let status = r.status().as_u16();
                let headers = r.headers().clone();
                if let Some(jar) = jar {
                    jar.store(&headers);
                }
                match r.text().await {
                    Ok(body) => Ok(Resp {
                        status,
                        headers,
                        body,
                    }),
                    Err(e) => {
                        if e.is_timeout() {
                            self.hung.store(true, Ordering::SeqCst);
                            self.m().stats.timeouts += 1;
                        }
                        Err(Fail::Lost(reason(&e)))
                    }
                }
            }
        };
        match &out {
            Err(Fail::NotSent) => self.m().stats.not_sent += 1,
            Err(Fail::Lost(_)) => self.m().stats.lost += 1,
            Ok(_) => {}
        }
        out
    }

    /// A top-level navigation with `Sec-Fetch-Site: site`.
    async fn navigate(&self, url: &str, jar: Option<&Jar>, site: &str) -> Out<Resp> {
        let mut req = self
            .http
            .get(url)
            .header("sec-fetch-site", site)
            .header("sec-fetch-mode", "navigate");
        if let Some(jar) = jar {
            req = req.header("cookie", jar.header());
        }
        self.finish(req.send().await, jar).await
    }

    /// A form POST from a page on `origin`.
    async fn post_form(
        &self,
        url: &str,
        fields: &[(&str, &str)],
        jar: Option<&Jar>,
        origin: &str,
    ) -> Out<Resp> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut req = self
            .http
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", origin)
            .header("sec-fetch-site", "same-origin")
            .body(body);
        if let Some(jar) = jar {
            req = req.header("cookie", jar.header());
        }
        self.finish(req.send().await, jar).await
    }

    /// `POST /token` as the public client `client_id`.
    async fn token(&self, client_id: &str, fields: &[(&str, &str)]) -> Out<Resp> {
        let mut all = vec![("client_id", client_id)];
        all.extend_from_slice(fields);
        let r = self.http.post(self.url("/token")).form(&all).send().await;
        self.finish(r, None).await
    }

    async fn redeem(
        &self,
        client_id: &str,
        redirect_uri: &str,
        code: &str,
        verifier: &str,
    ) -> Out<Resp> {
        let resource = self.url("/mcp");
        self.token(
            client_id,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", redirect_uri),
                ("code_verifier", verifier),
                ("resource", &resource),
            ],
        )
        .await
    }

    async fn refresh(&self, client_id: &str, refresh_token: &str) -> Out<Resp> {
        self.token(
            client_id,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
            ],
        )
        .await
    }

    /// RFC 7009 revocation.
    async fn revoke(&self, client_id: &str, token: &str) -> Out<Resp> {
        let r = self
            .http
            .post(self.url("/revoke"))
            .form(&[("client_id", client_id), ("token", token)])
            .send()
            .await;
        self.finish(r, None).await
    }

    /// An MCP `initialize` with `token`: 503 (no backend) means accepted, 401 refused.
    async fn mcp(&self, token: &str) -> Out<u16> {
        self.m().stats.mcp_calls += 1;
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "crash-test", "version": "1"}}
        });
        let r = self
            .http
            .post(self.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await;
        self.finish(r, None).await.map(|r| r.status)
    }

    fn authorize_url(
        &self,
        client_id: &str,
        redirect_uri: &str,
        pkce: &Pkce,
        state: &str,
    ) -> String {
        let resource = self.url("/mcp");
        let q = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("response_type", "code"),
                ("client_id", client_id),
                ("redirect_uri", redirect_uri),
                ("code_challenge", pkce.challenge.as_str()),
                ("code_challenge_method", "S256"),
                ("state", state),
                ("scope", "read:user"),
                ("resource", resource.as_str()),
            ])
            .finish();
        self.url(&format!("/authorize?{q}"))
    }

    /// The code in a redirect back to the client, checking where it goes, `state` and `iss`.
    fn code_in(&self, location: Option<&str>, redirect_uri: &str, state: &str) -> Option<String> {
        let loc = location?;
        if !loc.starts_with(redirect_uri)
            || query_param(loc, "state").as_deref() != Some(state)
            || query_param(loc, "iss").as_deref() != Some(self.base.as_str())
        {
            return None;
        }
        query_param(loc, "code")
    }
}

// ---------------------------------------------------------------------------------------------
// Operations. Each returns `Err` when its answer did not arrive; the model then records only
// what was confirmed.

async fn op_register(ctx: &Ctx, w: usize, rng: &mut Rng) -> Out<()> {
    let login = rng.pick(&LOGINS);
    let redirect_uri = format!("https://agent-{w}-{:x}.example/cb", rng.next());
    let r = ctx
        .http
        .post(ctx.url("/register"))
        .json(&json!({
            "client_name": format!("Crash agent {w}"),
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }))
        .send()
        .await;
    let r = ctx.finish(r, None).await?;
    let Some(id) = (r.status == 201)
        .then(|| r.json()["client_id"].as_str().map(str::to_owned))
        .flatten()
    else {
        ctx.violation(format!("registration answered {}", r.brief()));
        return Ok(());
    };
    let mut m = ctx.m();
    m.stats.registrations += 1;
    m.clients.push(ClientRec {
        id,
        redirect_uri,
        checks: 0,
    });
    let client = m.clients.len() - 1;
    m.agents.push(Agent {
        worker: w,
        client,
        login,
        jar: Arc::new(Jar::default()),
        consent: Consent::Never,
        state: AgentState::Active,
        pending_code: None,
        code_before_revoke: None,
        families: Vec::new(),
        checks: 0,
    });
    Ok(())
}

/// Follows GitHub's authorize URL like a person (pick the account, approve GitHub's own
/// consent the first time); returns GitHub's redirect back to the proxy.
async fn through_github(ctx: &Ctx, jar: &Jar, authorize_url: &str, login: &str) -> Out<String> {
    let u = url::Url::parse(authorize_url).map_err(|e| Fail::Lost(format!("GitHub URL: {e}")))?;
    let params: Vec<(String, String)> = u.query_pairs().into_owned().collect();
    let base = u.origin().ascii_serialization();
    let fields = |name: &str, value: &str| -> Vec<(String, String)> {
        let mut f: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| k != "prompt" && k != "login")
            .cloned()
            .collect();
        f.push((name.to_owned(), value.to_owned()));
        f
    };
    let mut resp = ctx.navigate(authorize_url, Some(jar), "cross-site").await?;
    for (marker, path, name, value) in [
        ("action=\"/login\"", "/login", "login", login),
        (
            "/login/oauth/authorize/decision",
            "/login/oauth/authorize/decision",
            "decision",
            "approve",
        ),
    ] {
        if resp.status == 200 && resp.body.contains(marker) {
            let f = fields(name, value);
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            resp = ctx
                .post_form(&format!("{base}{path}"), &f, Some(jar), &base)
                .await?;
        }
    }
    match (resp.status, resp.location()) {
        (302, Some(loc)) => Ok(loc),
        _ => Err(Fail::Lost(format!("fake GitHub answered {}", resp.brief()))),
    }
}

/// A full authorization in the agent's browser: the consent page (or its remembered skip),
/// GitHub, the callback; then the code's redemption.
async fn op_flow(ctx: &Ctx, a: usize, rng: &mut Rng) -> Out<()> {
    let (client_id, redirect_uri, login, jar, consent) = {
        let m = ctx.m();
        let ag = &m.agents[a];
        let c = &m.clients[ag.client];
        (
            c.id.clone(),
            c.redirect_uri.clone(),
            ag.login,
            ag.jar.clone(),
            ag.consent,
        )
    };
    let pkce = Pkce::new();
    let state = format!("st{:x}", rng.next());
    let url = ctx.authorize_url(&client_id, &redirect_uri, &pkce, &state);
    let page = ctx.navigate(&url, Some(&jar), "none").await?;
    let code = match page.status {
        303 => {
            let Some(code) = ctx.code_in(page.location().as_deref(), &redirect_uri, &state) else {
                ctx.violation(format!(
                    "/authorize redirected without a proper code: {:?}",
                    page.location()
                ));
                return Ok(());
            };
            let mut m = ctx.m();
            m.stats.consent_skips += 1;
            match consent {
                Consent::Revoked | Consent::Never => {
                    drop(m);
                    ctx.violation(format!(
                        "client {client_id}: a code was issued without the consent page although the consent is {consent:?}"
                    ));
                }
                Consent::Unsure | Consent::Confirmed => m.agents[a].consent = Consent::Confirmed,
            }
            code
        }
        200 if page.hidden("txn").is_some() => {
            if consent == Consent::Confirmed {
                ctx.violation(format!(
                    "client {client_id}: the consent confirmed earlier (and the sign-in confirmed with it) is not remembered: the consent page was shown again"
                ));
            }
            ctx.m().stats.consent_pages += 1;
            let txn = page.hidden("txn").unwrap_or_default();
            let csrf = page.hidden("csrf").unwrap_or_default();
            let r = ctx
                .post_form(
                    &ctx.url("/consent"),
                    &[("txn", &txn), ("csrf", &csrf), ("decision", "approve")],
                    Some(&jar),
                    &ctx.base,
                )
                .await?;
            let Some(github) = (r.status == 303).then(|| r.location()).flatten() else {
                ctx.violation(format!(
                    "client {client_id}: approving a consent page that was shown was refused: {}",
                    r.brief()
                ));
                return Ok(());
            };
            let back = through_github(ctx, &jar, &github, login).await?;
            let cb = match ctx.navigate(&back, Some(&jar), "cross-site").await {
                Ok(cb) => cb,
                Err(Fail::NotSent) => return Err(Fail::NotSent),
                Err(e) => {
                    let mut m = ctx.m();
                    if m.agents[a].consent != Consent::Confirmed {
                        m.agents[a].consent = Consent::Unsure;
                    }
                    return Err(e);
                }
            };
            let code = (cb.status == 303)
                .then(|| ctx.code_in(cb.location().as_deref(), &redirect_uri, &state))
                .flatten();
            let Some(code) = code else {
                ctx.violation(format!(
                    "client {client_id}: GitHub's callback was refused: {}",
                    cb.brief()
                ));
                let mut m = ctx.m();
                if m.agents[a].consent != Consent::Confirmed {
                    m.agents[a].consent = Consent::Unsure;
                }
                return Ok(());
            };
            ctx.m().agents[a].consent = Consent::Confirmed;
            code
        }
        _ => {
            ctx.violation(format!(
                "client {client_id} (confirmed registered): /authorize answered {}",
                page.brief()
            ));
            return Ok(());
        }
    };
    {
        let mut m = ctx.m();
        m.stats.codes_issued += 1;
        m.agents[a].pending_code = Some(PendingCode {
            code,
            verifier: pkce.verifier.clone(),
            issued: Instant::now(),
            lost: false,
        });
    }
    op_redeem(ctx, a).await
}

/// Redeems the agent's pending code (confirmed issued to it).
async fn op_redeem(ctx: &Ctx, a: usize) -> Out<()> {
    let (client, client_id, redirect_uri, pc) = {
        let m = ctx.m();
        let ag = &m.agents[a];
        let Some(pc) = ag.pending_code.clone() else {
            return Ok(());
        };
        let c = &m.clients[ag.client];
        (ag.client, c.id.clone(), c.redirect_uri.clone(), pc)
    };
    let r = match ctx
        .redeem(&client_id, &redirect_uri, &pc.code, &pc.verifier)
        .await
    {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            if let Some(p) = ctx.m().agents[a].pending_code.as_mut() {
                p.lost = true;
            }
            return Err(e);
        }
    };
    let mut m = ctx.m();
    m.agents[a].pending_code = None;
    if r.status == 200 {
        let j = r.json();
        let (Some(at), Some(rt)) = (j["access_token"].as_str(), j["refresh_token"].as_str()) else {
            drop(m);
            ctx.violation(format!("code redemption without tokens: {}", r.brief()));
            return Ok(());
        };
        if !m.redeemed.insert(pc.code.clone()) {
            m.violations
                .push(format!("client {client_id}: a code was accepted twice"));
        }
        m.stats.codes_redeemed += 1;
        m.families.push(Family {
            agent: a,
            client,
            code: pc.code,
            verifier: pc.verifier,
            chain: vec![rt.to_owned()],
            access: vec![(at.to_owned(), Tok::Live)],
            state: Fam::Live,
            checks: 0,
        });
        let f = m.families.len() - 1;
        m.agents[a].families.push(f);
    } else if !pc.lost && pc.issued.elapsed() < CODE_FRESH {
        drop(m);
        ctx.violation(format!(
            "client {client_id}: a code confirmed to it {:?} ago was refused at its first redemption: {}",
            pc.issued.elapsed(),
            r.brief()
        ));
    }
    Ok(())
}

/// Presents the family's refresh token at `idx`: the current one (rotation expected) or a
/// rotated-away one (refusal expected, which revokes the family; the previous one may only
/// be replayed to exactly its recorded successor).
async fn op_present(ctx: &Ctx, f: usize, idx: usize) -> Out<()> {
    let v = ctx.m().view(f);
    let last = v.chain.len() - 1;
    let token = &v.chain[idx];
    let retry = matches!(v.state, Fam::RefreshLost | Fam::ReuseLost(_));
    let r = match ctx.refresh(&v.client_id, token).await {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            // Presenting the current token of a live family can only rotate it. Presenting it
            // again after a lost rotation may meet reuse detection (the family revoked), as
            // may presenting a rotated-away token: then the family's state is unknown.
            let mut m = ctx.m();
            m.families[f].state = match m.families[f].state {
                Fam::Live if idx == last => Fam::RefreshLost,
                Fam::Live | Fam::RefreshLost | Fam::ReuseLost(_) => Fam::ReuseLost(idx),
                other => other,
            };
            return Err(e);
        }
    };
    let mut m = ctx.m();
    m.stats.checks += 1;
    if r.status == 200 {
        let j = r.json();
        let (Some(at), Some(rt)) = (j["access_token"].as_str(), j["refresh_token"].as_str()) else {
            m.families[f].state = Fam::Dead;
            drop(m);
            ctx.violation(format!(
                "refresh answered 200 without tokens: {}",
                r.brief()
            ));
            return Ok(());
        };
        let known = m.rotations.get(token).cloned();
        if let Some(known) = &known
            && known != rt
        {
            m.families[f].state = Fam::Dead;
            drop(m);
            ctx.violation(format!(
                "client {}: the refresh token of generation {idx} yielded two different successors",
                v.client_id
            ));
            return Ok(());
        }
        let fam = &mut m.families[f];
        if idx == last {
            fam.chain.push(rt.to_owned());
            fam.access.push((at.to_owned(), Tok::Live));
            fam.state = Fam::Live;
            m.rotations.insert(token.clone(), rt.to_owned());
            m.stats.refreshes += 1;
        } else if idx + 1 == last && known.is_some() {
            // The immediately previous token, within the grace second: the same successor.
            fam.access.push((at.to_owned(), Tok::Live));
            fam.state = Fam::Live;
            m.stats.replays += 1;
        } else {
            fam.state = Fam::Dead;
            drop(m);
            ctx.violation(format!(
                "client {}: a refresh token rotated away (generation {idx}, current {last}) was accepted again",
                v.client_id
            ));
        }
    } else if r.is_invalid_grant() && (idx < last || retry) {
        // Reuse detection (or the retry of a rotation that did happen): the family is revoked
        // before this answer is sent.
        m.families[f].state = Fam::Revoked(if idx < last {
            "a rotated-away refresh token was presented (reuse detection)"
        } else {
            "its refresh token was presented again after an unconfirmed rotation"
        });
        m.stats.reuse_detected += 1;
    } else {
        m.families[f].state = Fam::Dead;
        drop(m);
        ctx.violation(format!(
            "client {}: the current refresh token (generation {last}, confirmed) of a live family was refused: {}",
            v.client_id,
            r.brief()
        ));
    }
    Ok(())
}

/// `/revoke` of the family's current refresh token.
async fn op_revoke(ctx: &Ctx, f: usize) -> Out<()> {
    let v = ctx.m().view(f);
    let token = v.chain.last().cloned().unwrap_or_default();
    let r = match ctx.revoke(&v.client_id, &token).await {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            ctx.m().families[f].state = Fam::RevokeLost;
            return Err(e);
        }
    };
    if r.status == 200 {
        let mut m = ctx.m();
        m.families[f].state = Fam::Revoked("its refresh token was revoked at /revoke");
        m.stats.revoked_refresh += 1;
    } else {
        ctx.violation(format!("/revoke answered {}", r.brief()));
    }
    Ok(())
}

/// `/revoke` of one access token.
async fn op_revoke_access(ctx: &Ctx, f: usize, t: usize) -> Out<()> {
    let v = ctx.m().view(f);
    let r = match ctx.revoke(&v.client_id, &v.access[t].0).await {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            ctx.m().families[f].access[t].1 = Tok::RevokeLost;
            return Err(e);
        }
    };
    if r.status == 200 {
        let mut m = ctx.m();
        m.families[f].access[t].1 = Tok::Revoked;
        m.stats.revoked_access += 1;
    } else {
        ctx.violation(format!("/revoke answered {}", r.brief()));
    }
    Ok(())
}

/// Whether access token `t` of family `f` must be accepted (`Some(true)`), refused
/// (`Some(false)`), or is unknown to the model (`None`).
fn expected_access(v: &FamView, t: usize) -> Option<bool> {
    if v.agent_state == AgentState::RevokeLost {
        return None;
    }
    match (v.state, v.access[t].1) {
        (Fam::Revoked(_), _) => Some(false),
        (Fam::Live | Fam::RefreshLost, Tok::Live) => Some(true),
        (Fam::Live | Fam::RefreshLost, Tok::Revoked) => Some(false),
        _ => None,
    }
}

/// Calls `/mcp` with access token `t` of family `f` and compares with the model.
async fn op_mcp(ctx: &Ctx, f: usize, t: usize, when: &str) -> Out<()> {
    let v = ctx.m().view(f);
    let Some(accept) = expected_access(&v, t) else {
        return Ok(());
    };
    let status = ctx.mcp(&v.access[t].0).await?;
    ctx.checked();
    match (accept, status) {
        (true, 503) | (false, 401) => {}
        (true, s) => ctx.violation(format!(
            "client {}: an access token confirmed issued (not revoked) was not accepted at /mcp {when}: {s} (503 = accepted, no backend)",
            v.client_id
        )),
        (false, s) => {
            let why = match v.state {
                Fam::Revoked(why) => why,
                _ => "the access token itself was revoked at /revoke",
            };
            ctx.violation(format!(
                "client {}: an access token was honoured at /mcp ({s}) {when} after its revocation was confirmed ({why})",
                v.client_id
            ));
        }
    }
    Ok(())
}

/// The account page: revoke this agent's client (consent and every token).
async fn op_account_revoke(ctx: &Ctx, a: usize, rng: &mut Rng) -> Out<()> {
    let (client_id, redirect_uri, jar, state, consent) = {
        let m = ctx.m();
        let ag = &m.agents[a];
        let c = &m.clients[ag.client];
        (
            c.id.clone(),
            c.redirect_uri.clone(),
            ag.jar.clone(),
            ag.state,
            ag.consent,
        )
    };
    // A code issued just before the revocation, to redeem after it.
    let mut early_code = None;
    if state == AgentState::Active && consent == Consent::Confirmed {
        let pkce = Pkce::new();
        let st = format!("pre{:x}", rng.next());
        let r = ctx
            .navigate(
                &ctx.authorize_url(&client_id, &redirect_uri, &pkce, &st),
                Some(&jar),
                "none",
            )
            .await?;
        early_code = ctx
            .code_in(r.location().as_deref(), &redirect_uri, &st)
            .map(|c| (c, pkce.verifier));
    }
    let page = ctx
        .navigate(&ctx.url("/account"), Some(&jar), "none")
        .await?;
    let Some(csrf) = (page.status == 200).then(|| page.hidden("csrf")).flatten() else {
        if consent == Consent::Confirmed {
            ctx.violation(format!(
                "client {client_id}: the account page did not show for a sign-in confirmed with the consent: {}",
                page.brief()
            ));
        }
        return Ok(());
    };
    let r = match ctx
        .post_form(
            &ctx.url("/account/revoke"),
            &[("client_id", &client_id), ("csrf", &csrf)],
            Some(&jar),
            &ctx.base,
        )
        .await
    {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            ctx.m().agents[a].state = AgentState::RevokeLost;
            return Err(e);
        }
    };
    if r.status != 303 {
        ctx.violation(format!(
            "client {client_id}: the account page's revoke answered {}",
            r.brief()
        ));
        return Ok(());
    }
    let mut m = ctx.m();
    m.stats.revoked_account += 1;
    let fams = m.agents[a].families.clone();
    let ag = &mut m.agents[a];
    ag.state = AgentState::Retired;
    ag.consent = Consent::Revoked;
    ag.code_before_revoke = early_code;
    for f in fams {
        if m.families[f].state != Fam::Dead {
            m.families[f].state = Fam::Revoked("client access revoked on the account page");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The load.

enum Op {
    Register,
    Flow(usize),
    Redeem(usize),
    Present(usize, usize),
    Revoke(usize),
    RevokeAccess(usize, usize),
    Mcp(usize, usize),
    AccountRevoke(usize),
}

/// The worker's next operation: first whatever was left unconfirmed, then a random one.
fn choose(m: &Model, w: usize, rng: &mut Rng) -> Op {
    let mine: Vec<usize> = (0..m.agents.len())
        .filter(|&a| m.agents[a].worker == w)
        .collect();
    for &a in &mine {
        let ag = &m.agents[a];
        if ag.state == AgentState::RevokeLost {
            return Op::AccountRevoke(a);
        }
        if ag.pending_code.is_some() {
            return Op::Redeem(a);
        }
        for &f in &ag.families {
            let fam = &m.families[f];
            match fam.state {
                Fam::RefreshLost => return Op::Present(f, fam.chain.len() - 1),
                Fam::ReuseLost(i) => return Op::Present(f, i),
                Fam::RevokeLost => return Op::Revoke(f),
                _ => {}
            }
            if let Some(t) = fam.access.iter().position(|(_, s)| *s == Tok::RevokeLost) {
                return Op::RevokeAccess(f, t);
            }
        }
    }
    let active: Vec<usize> = mine
        .iter()
        .copied()
        .filter(|&a| m.agents[a].state == AgentState::Active)
        .collect();
    if active.is_empty() || (active.len() < 3 && rng.chance(0.08)) {
        return Op::Register;
    }
    let a = rng.pick(&active);
    let ag = &m.agents[a];
    if ag.consent != Consent::Confirmed {
        return Op::Flow(a);
    }
    let live: Vec<usize> = ag
        .families
        .iter()
        .copied()
        .filter(|&f| m.families[f].state == Fam::Live)
        .collect();
    if live.is_empty() {
        return Op::Flow(a);
    }
    let f = rng.pick(&live);
    let fam = &m.families[f];
    let last = fam.chain.len() - 1;
    match rng.below(100) {
        0..30 => Op::Flow(a),
        30..58 => Op::Present(f, last),
        58..74 => {
            // Any family of this agent: live tokens must work, revoked ones must not.
            let g = rng.pick(&ag.families);
            Op::Mcp(g, rng.below(m.families[g].access.len()))
        }
        74..81 => Op::Revoke(f),
        81..86 => {
            let live_tokens: Vec<usize> = (0..fam.access.len())
                .filter(|&t| fam.access[t].1 == Tok::Live)
                .collect();
            if live_tokens.is_empty() {
                Op::Present(f, last)
            } else {
                Op::RevokeAccess(f, rng.pick(&live_tokens))
            }
        }
        86..92 if last >= 1 => {
            let idx = if rng.chance(0.5) {
                last - 1
            } else {
                rng.below(last)
            };
            Op::Present(f, idx)
        }
        92..95 => Op::AccountRevoke(a),
        _ => Op::Present(f, last),
    }
}

async fn worker(ctx: Arc<Ctx>, w: usize, seed: u64) {
    let mut rng = Rng(seed);
    while !ctx.stop.load(Ordering::SeqCst) {
        let result = {
            let _load = ctx.gate.read().await;
            if ctx.stop.load(Ordering::SeqCst) {
                break;
            }
            let op = choose(&ctx.m(), w, &mut rng);
            let step = async {
                match op {
                    Op::Register => op_register(&ctx, w, &mut rng).await,
                    Op::Flow(a) => op_flow(&ctx, a, &mut rng).await,
                    Op::Redeem(a) => op_redeem(&ctx, a).await,
                    Op::Present(f, i) => op_present(&ctx, f, i).await,
                    Op::Revoke(f) => op_revoke(&ctx, f).await,
                    Op::RevokeAccess(f, t) => op_revoke_access(&ctx, f, t).await,
                    Op::Mcp(f, t) => op_mcp(&ctx, f, t, "during load").await,
                    Op::AccountRevoke(a) => op_account_revoke(&ctx, a, &mut rng).await,
                }
            };
            timeout(Duration::from_secs(30), step)
                .await
                .unwrap_or_else(|_| Err(Fail::Lost("step timed out".to_owned())))
        };
        match result {
            Ok(()) => {}
            Err(Fail::NotSent) => sleep(Duration::from_millis(20)).await,
            Err(Fail::Lost(why)) => {
                *ctx.m().lost_reasons.entry(why).or_default() += 1;
                sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checks after a restart.

async fn check_client(ctx: &Ctx, c: usize) {
    if ctx.is_hung() {
        return;
    }
    let (id, redirect_uri) = {
        let mut m = ctx.m();
        m.clients[c].checks += 1;
        (m.clients[c].id.clone(), m.clients[c].redirect_uri.clone())
    };
    let url = ctx.authorize_url(&id, &redirect_uri, &Pkce::new(), "check");
    let Ok(r) = ctx.navigate(&url, None, "none").await else {
        return;
    };
    ctx.checked();
    if r.status != 200 || r.hidden("txn").is_none() {
        ctx.violation(format!(
            "client {id}, confirmed registered (201), is not known after a restart: /authorize answered {}",
            r.brief()
        ));
    }
}

async fn check_agent(ctx: &Ctx, a: usize) {
    if ctx.is_hung() {
        return;
    }
    let (client_id, redirect_uri, jar, state, consent, early) = {
        let mut m = ctx.m();
        let ag = &mut m.agents[a];
        ag.checks += 1;
        let early = ag.code_before_revoke.take();
        let (state, consent, jar, client) = (ag.state, ag.consent, ag.jar.clone(), ag.client);
        let c = &m.clients[client];
        (
            c.id.clone(),
            c.redirect_uri.clone(),
            jar,
            state,
            consent,
            early,
        )
    };
    let check_consent = matches!(
        (state, consent),
        (AgentState::Active, Consent::Confirmed) | (AgentState::Retired, Consent::Revoked)
    );
    if check_consent {
        let pkce = Pkce::new();
        let url = ctx.authorize_url(&client_id, &redirect_uri, &pkce, "check");
        if let Ok(r) = ctx.navigate(&url, Some(&jar), "none").await {
            ctx.checked();
            let code = ctx.code_in(r.location().as_deref(), &redirect_uri, "check");
            let page = r.status == 200 && r.hidden("txn").is_some();
            match consent {
                Consent::Confirmed if r.status == 303 && code.is_some() => {}
                Consent::Confirmed => ctx.violation(format!(
                    "client {client_id}: a consent confirmed to it (redirect with a code) is not remembered after a restart: /authorize answered {}",
                    r.brief()
                )),
                _ if page => {}
                _ => ctx.violation(format!(
                    "client {client_id}: a consent revoked on the account page (303) is honoured after a restart: /authorize answered {} {:?}",
                    r.brief(),
                    r.location()
                )),
            }
        }
    }
    if let Some((code, verifier)) = early
        && let Ok(r) = ctx
            .redeem(&client_id, &redirect_uri, &code, &verifier)
            .await
    {
        ctx.checked();
        if !r.is_invalid_grant() {
            ctx.violation(format!(
                "client {client_id}: a code issued before its consent was revoked was not refused with invalid_grant after the revocation: {}",
                r.brief()
            ));
        }
    }
}

/// A family's tokens against the model; a live family also rotates once.
async fn check_family(ctx: &Ctx, f: usize, full: bool, seed: u64) {
    if ctx.is_hung() {
        return;
    }
    let mut rng = Rng(seed);
    let v = {
        let mut m = ctx.m();
        m.families[f].checks += 1;
        m.view(f)
    };
    if v.agent_state == AgentState::RevokeLost {
        return;
    }
    let n = v.access.len();
    let mut tokens: Vec<usize> = if full {
        (0..n).collect()
    } else {
        let mut t = vec![n - 1];
        for _ in 0..2 {
            t.push(rng.below(n));
        }
        t.sort_unstable();
        t.dedup();
        t
    };
    // Individually revoked tokens are always worth a look.
    tokens.extend((0..n).filter(|&t| v.access[t].1 == Tok::Revoked));
    tokens.sort_unstable();
    tokens.dedup();
    for t in tokens {
        if op_mcp(ctx, f, t, "after a restart").await.is_err() {
            return;
        }
    }
    match v.state {
        Fam::Live => {
            let _ = op_present(ctx, f, v.chain.len() - 1).await;
        }
        Fam::Revoked(why) => {
            let last = v.chain.len() - 1;
            if let Ok(r) = ctx.refresh(&v.client_id, &v.chain[last]).await {
                ctx.checked();
                if !r.is_invalid_grant() {
                    ctx.m().families[f].state = Fam::Dead;
                    ctx.violation(format!(
                        "client {}: a refresh token of a family confirmed revoked ({why}) was honoured after a restart: {}",
                        v.client_id,
                        r.brief()
                    ));
                    return;
                }
            }
            if (full || rng.chance(0.3))
                && let Ok(r) = ctx
                    .redeem(&v.client_id, &v.redirect_uri, &v.code, &v.verifier)
                    .await
            {
                ctx.checked();
                if !r.is_invalid_grant() {
                    ctx.violation(format!(
                        "client {}: a code confirmed redeemed, presented again after a restart, was not refused with invalid_grant: {}",
                        v.client_id,
                        r.brief()
                    ));
                }
            }
        }
        _ => {}
    }
}

/// Presents a live family's code again: it must be refused, and that revokes the family.
async fn replay_code(ctx: &Ctx, f: usize) {
    if ctx.is_hung() {
        return;
    }
    let v = ctx.m().view(f);
    let Ok(r) = ctx
        .redeem(&v.client_id, &v.redirect_uri, &v.code, &v.verifier)
        .await
    else {
        ctx.m().families[f].state = Fam::Dead;
        return;
    };
    let mut m = ctx.m();
    m.stats.checks += 1;
    if r.is_invalid_grant() {
        m.stats.codes_replayed += 1;
        if matches!(v.state, Fam::Live | Fam::RefreshLost) {
            m.families[f].state = Fam::Revoked("its authorization code was presented again");
        }
    } else {
        m.families[f].state = Fam::Dead;
        drop(m);
        ctx.violation(format!(
            "client {}: a code confirmed redeemed, presented again, was not refused with invalid_grant: {}",
            v.client_id,
            r.brief()
        ));
    }
}

/// The items least checked so far, at most `cap` (all when `cap` is `None`).
fn least_checked(items: Vec<(usize, u32)>, cap: Option<usize>, rng: &mut Rng) -> Vec<usize> {
    let mut keyed: Vec<(u32, u64, usize)> =
        items.into_iter().map(|(i, c)| (c, rng.next(), i)).collect();
    keyed.sort_unstable();
    keyed
        .into_iter()
        .take(cap.unwrap_or(usize::MAX))
        .map(|(_, _, i)| i)
        .collect()
}

/// One pass of checks (the load is paused). `full`: everything; else a sample favouring
/// what has not been checked yet, plus a few families destroyed on purpose (code replay,
/// reuse of a rotated-away refresh token).
async fn check_pass(ctx: &Ctx, full: bool, rng: &mut Rng) -> u64 {
    let before = ctx.m().stats.checks;
    let cap = |n: usize| (!full).then_some(n);
    let (clients, agents, families, destroy_code, destroy_reuse) = {
        let m = ctx.m();
        let clients = least_checked(
            m.clients
                .iter()
                .enumerate()
                .map(|(i, c)| (i, c.checks))
                .collect(),
            cap(60),
            rng,
        );
        let agents = least_checked(
            m.agents
                .iter()
                .enumerate()
                .filter(|(_, a)| {
                    a.code_before_revoke.is_some() || a.state != AgentState::RevokeLost
                })
                .map(|(i, a)| {
                    (
                        i,
                        if a.code_before_revoke.is_some() {
                            0
                        } else {
                            a.checks
                        },
                    )
                })
                .collect(),
            cap(60),
            rng,
        );
        let live: Vec<(usize, u32)> = m
            .families
            .iter()
            .enumerate()
            .filter(|(_, f)| matches!(f.state, Fam::Live | Fam::RefreshLost))
            .map(|(i, f)| (i, f.checks))
            .collect();
        let revoked: Vec<(usize, u32)> = m
            .families
            .iter()
            .enumerate()
            .filter(|(_, f)| matches!(f.state, Fam::Revoked(_)))
            .map(|(i, f)| (i, f.checks))
            .collect();
        let mut families = least_checked(live, cap(150), rng);
        families.extend(least_checked(revoked, cap(100), rng));
        // Families already checked at least once may be destroyed on purpose.
        let mut spare: Vec<usize> = m
            .families
            .iter()
            .enumerate()
            .filter(|(i, f)| f.state == Fam::Live && f.checks > 0 && !families.contains(i))
            .map(|(i, _)| i)
            .collect();
        let mut destroy_code = Vec::new();
        let mut destroy_reuse = Vec::new();
        if !full {
            for _ in 0..3 {
                if !spare.is_empty() {
                    destroy_code.push(spare.swap_remove(rng.below(spare.len())));
                }
            }
            for _ in 0..2 {
                if !spare.is_empty() {
                    let f = spare.swap_remove(rng.below(spare.len()));
                    let last = m.families[f].chain.len() - 1;
                    if last >= 1 {
                        destroy_reuse.push((f, rng.below(last)));
                    }
                }
            }
        }
        (clients, agents, families, destroy_code, destroy_reuse)
    };
    futures_util::stream::iter(clients)
        .for_each_concurrent(ctx.concurrency, |c| check_client(ctx, c))
        .await;
    futures_util::stream::iter(agents)
        .for_each_concurrent(ctx.concurrency, |a| check_agent(ctx, a))
        .await;
    let seeds: Vec<(usize, u64)> = families.into_iter().map(|f| (f, rng.next())).collect();
    futures_util::stream::iter(seeds)
        .for_each_concurrent(ctx.concurrency, |(f, s)| check_family(ctx, f, full, s))
        .await;
    for f in destroy_code {
        replay_code(ctx, f).await;
    }
    for (f, idx) in destroy_reuse {
        if ctx.is_hung() {
            break;
        }
        let _ = op_present(ctx, f, idx).await;
    }
    ctx.m().stats.checks - before
}

/// At the very end: every rotated-away refresh token and every redeemed code is presented
/// once more; each must be refused (the previous token may only replay its successor).
async fn final_replays(ctx: &Ctx) -> u64 {
    let before = ctx.m().stats.checks;
    let n = ctx.m().families.len();
    futures_util::stream::iter(0..n)
        .for_each_concurrent(ctx.concurrency, |f| async move {
            if ctx.is_hung() {
                return;
            }
            let v = ctx.m().view(f);
            let last = v.chain.len() - 1;
            // The oldest, one in between and the previous one (reuse detection remembers 64).
            let mut older: Vec<usize> = vec![last.saturating_sub(64), last / 2, last.saturating_sub(1)];
            older.retain(|&i| i < last);
            older.sort_unstable();
            older.dedup();
            for idx in older {
                let Ok(r) = ctx.refresh(&v.client_id, &v.chain[idx]).await else {
                    continue;
                };
                ctx.checked();
                let replayed = r.status == 200
                    && idx + 1 == last
                    && r.json()["refresh_token"].as_str() == Some(v.chain[last].as_str());
                if replayed {
                    ctx.m().stats.replays += 1;
                } else if !r.is_invalid_grant() {
                    ctx.violation(format!(
                        "client {}: a refresh token rotated away (generation {idx}, current {last}), presented again at the end, was not refused with invalid_grant: {}",
                        v.client_id,
                        r.brief()
                    ));
                }
            }
            if let Ok(r) = ctx
                .redeem(&v.client_id, &v.redirect_uri, &v.code, &v.verifier)
                .await
            {
                ctx.checked();
                if r.is_invalid_grant() {
                    ctx.m().stats.codes_replayed += 1;
                } else {
                    ctx.violation(format!(
                        "client {}: a code confirmed redeemed, presented again at the end, was not refused with invalid_grant: {}",
                        v.client_id,
                        r.brief()
                    ));
                }
            }
        })
        .await;
    ctx.m().stats.checks - before
}

// ---------------------------------------------------------------------------------------------
// The server process.

struct Server {
    bin: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    starts: usize,
    log: PathBuf,
}

impl Server {
    fn spawn(&mut self) {
        self.starts += 1;
        self.log = self.dir.join(format!("proxy-{:03}.log", self.starts));
        let out = std::fs::File::create(&self.log).unwrap();
        let err = out.try_clone().unwrap();
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .env_remove("MCP_OAUTH_PROXY_LOG_JSON")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        self.child = Some(child);
    }

    /// SIGKILL and reap.
    fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Waits until the metadata answers; the time it took, or why it did not.
    async fn wait_ready(&mut self, http: &reqwest::Client, base: &str) -> Result<Duration, String> {
        let started = Instant::now();
        let url = format!("{base}/.well-known/oauth-authorization-server");
        loop {
            if let Some(status) = self.exited() {
                return Err(format!("the server exited ({status}) before answering"));
            }
            if started.elapsed() > READY_BOUND {
                return Err(format!("the server did not answer within {READY_BOUND:?}"));
            }
            if let Ok(Ok(r)) = timeout(Duration::from_secs(2), http.get(&url).send()).await
                && r.status().as_u16() == 200
            {
                return Ok(started.elapsed());
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Panics and errors in the current log.
    fn log_problems(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked") || l.contains(" ERROR "))
            .map(|l| format!("{}: {l}", self.log.display()))
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The binary to test: `MCP_CRASH_BIN`, else release, else debug, next to this test binary.
fn proxy_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("MCP_CRASH_BIN") {
        return Some(PathBuf::from(p));
    }
    // target/<profile>/deps/integration-… → target/
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?.parent()?;
    let name = format!("mcp-oauth-proxy{}", std::env::consts::EXE_SUFFIX);
    ["release", "debug"]
        .iter()
        .map(|p| target.join(p).join(&name))
        .find(|p| p.is_file())
}

/// A free loopback port below the ephemeral range, so that no outgoing connection can take it
/// while the server is down between a kill and its restart.
fn stable_port(rng: &mut Rng) -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768);
    if low > 12_000 {
        for _ in 0..200 {
            let p = rng.range(10_000, low - 1);
            if let Ok(p) = u16::try_from(p)
                && std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
            {
                return p;
            }
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn config_toml(port: u16, github: &FakeGitHub, store: &Path) -> String {
    use base64::Engine as _;
    let key = |n: u8| base64::engine::general_purpose::STANDARD.encode([n; 32]);
    format!(
        r#"[server]
public_url = "http://127.0.0.1:{port}"
listen = "127.0.0.1:{port}"

[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
scopes = ["read:user", "repo"]
authorize_url = "{a}"
token_url = "{t}"
api_url = "{api}"

[store]
path = {store:?}

[keys]
consent_cookie = "{k1}"
csrf = "{k2}"
token_encryption = "{k3}"
connect_link = "{k4}"
request_state = "{k5}"

[tokens]
refresh_grace_secs = 0

# The load comes from one address far faster than any client would send it; this test checks
# durability, not the rate limiter.
[rate_limits]
enabled = false
[admin]
listen = "127.0.0.1:0"
"#,
        a = github.authorize_url(),
        t = github.token_url(),
        api = github.api_url(),
        store = store.display().to_string(),
        k1 = key(0x11),
        k2 = key(0x22),
        k3 = key(0x33),
        k4 = key(0x44),
        k5 = key(0x55),
    )
}

// ---------------------------------------------------------------------------------------------
// The test.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_at_random_moments_loses_nothing_confirmed_and_honours_nothing_revoked() {
    if crate::support::postgres_selected() {
        // The suite's re-run on PostgreSQL: this test starts the binary on its sled store.
        eprintln!("NOTICE: crash test skipped in the PostgreSQL run (it tests the sled store)");
        return;
    }
    let Some(bin) = proxy_binary() else {
        assert!(
            std::env::var("MCP_CRASH").as_deref() != Ok("require"),
            "MCP_CRASH=require but no proxy binary: run `cargo build --release -p mcp-oauth-proxy`"
        );
        eprintln!(
            "NOTICE: crash test skipped: no target/release/mcp-oauth-proxy (build it with `cargo build --release -p mcp-oauth-proxy`)"
        );
        return;
    };
    match timeout(TEST_BOUND, crash_test(bin)).await {
        Ok(()) => {}
        Err(_) => panic!("the crash test did not finish within {TEST_BOUND:?}"),
    }
}

async fn crash_test(bin: PathBuf) {
    let test_started = Instant::now();
    mcp_oauth_proxy::install_crypto_provider();
    let seed = env_number("MCP_CRASH_SEED").unwrap_or_else(|| {
        u64::from_le_bytes(mcp_oauth_proxy::crypto::random_bytes::<8>().unwrap())
    });
    let cycles = env_number("MCP_CRASH_CYCLES").map_or(DEFAULT_CYCLES, |n| n as usize);
    let concurrency = env_number("MCP_CRASH_CONCURRENCY")
        .map_or(DEFAULT_CONCURRENCY, |n| n as usize)
        .max(1);
    let mut rng = Rng(seed);
    let age = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map_or_else(|| "?".to_owned(), |d| format!("{} s", d.as_secs()));
    eprintln!(
        "crash test: binary {} (built {age} ago), seed {seed} (MCP_CRASH_SEED), {cycles} kills (MCP_CRASH_CYCLES), {concurrency} concurrent clients (MCP_CRASH_CONCURRENCY)",
        bin.display()
    );
    if crate::support::binary::older_than_sources(&bin) {
        eprintln!(
            "WARNING: {} is older than the proxy's sources: rebuild it (`cargo build --release -p mcp-oauth-proxy`) to test the current code",
            bin.display()
        );
    }

    let github = FakeGitHub::start(FakeGitHubConfig::demo(
        "gh-client-id",
        "gh-client-secret",
        "http://127.0.0.1:1/unset",
    ))
    .await
    .unwrap();
    let port = stable_port(&mut rng);
    let base = format!("http://127.0.0.1:{port}");
    github.set_callback_url(&format!("{base}/callback/github"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        config_toml(port, &github, &dir.path().join("store")),
    )
    .unwrap();

    #[allow(clippy::disallowed_methods)] // the test's client, not the proxy's outbound traffic
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let mut server = Server {
        bin,
        config,
        dir: dir.path().to_owned(),
        child: None,
        starts: 0,
        log: PathBuf::new(),
    };
    let ctx = Arc::new(Ctx {
        http: http.clone(),
        base: base.clone(),
        model: Mutex::new(Model::default()),
        gate: RwLock::new(()),
        stop: AtomicBool::new(false),
        hung: AtomicBool::new(false),
        concurrency,
    });

    let mut healthy = start(&mut server, &ctx, &mut rng).await;
    let workers: Vec<_> = (0..concurrency)
        .map(|w| tokio::spawn(worker(ctx.clone(), w, rng.next())))
        .collect();

    let loop_started = Instant::now();
    let mut cycle = 0;
    while healthy && cycle < cycles && loop_started.elapsed() < LOOP_BUDGET {
        cycle += 1;
        let load_ms = rng.range(150, 900);
        sleep(Duration::from_millis(load_ms)).await;
        let before = {
            let m = ctx.m();
            m.stats.codes_redeemed + m.stats.refreshes
        };
        kill(&mut server, &ctx);
        healthy = start(&mut server, &ctx, &mut rng).await;
        if !healthy {
            break;
        }
        let pass_started = Instant::now();
        let checks = {
            let _exclusive = ctx.gate.write().await;
            timeout(PASS_BOUND, check_pass(&ctx, false, &mut rng)).await
        };
        healthy = still_serving(&ctx, &mut server, checks.is_err()).await;
        let (fams, viol) = {
            let m = ctx.m();
            (m.families.len(), m.violations.len())
        };
        eprintln!(
            "cycle {cycle:>2}: killed after {load_ms} ms of load ({before} codes+refreshes so far), restarted, {} checks in {} ms, {fams} families, {viol} violations",
            checks.unwrap_or_default(),
            pass_started.elapsed().as_millis()
        );
        if viol > 50 {
            break;
        }
    }

    // Stop the load, kill once more, restart, and check everything.
    ctx.stop.store(true, Ordering::SeqCst);
    for w in workers {
        if healthy {
            let _ = timeout(Duration::from_secs(40), w).await;
        } else {
            w.abort();
        }
    }
    let mut full = 0;
    let mut final_ms = 0;
    if healthy {
        kill(&mut server, &ctx);
        healthy = start(&mut server, &ctx, &mut rng).await;
    }
    if healthy {
        let final_started = Instant::now();
        let checked = {
            let _exclusive = ctx.gate.write().await;
            timeout(FINAL_BOUND, async {
                check_pass(&ctx, true, &mut rng).await + final_replays(&ctx).await
            })
            .await
        };
        final_ms = final_started.elapsed().as_millis();
        if still_serving(&ctx, &mut server, checked.is_err()).await {
            if checked.is_err() {
                ctx.violation(format!(
                    "the final checks did not finish within {FINAL_BOUND:?} although the server kept answering"
                ));
            }
            full = checked.unwrap_or_default();
            for p in server.log_problems() {
                ctx.violation(format!("the server logged: {p}"));
            }
        }
    }
    let _ = server.kill();

    let m = ctx.m();
    let s = &m.stats;
    let live = m.families.iter().filter(|f| f.state == Fam::Live).count();
    let revoked = m
        .families
        .iter()
        .filter(|f| matches!(f.state, Fam::Revoked(_)))
        .count();
    eprintln!(
        "crash test summary: binary {}, seed {seed}, {concurrency} concurrent clients\n  kills: {} (the last one after the load stopped) + {} during start-up, {} starts, ready in {} ms on average (max {} ms)\n  clients registered {}, consent pages {}, consent skips {}, codes issued {}, codes redeemed {} (= full flows completed), families {} ({live} live and {revoked} revoked before the final replays)\n  refreshes {}, replays of the previous token {}, revocations: refresh {} access {} account page {}, reuse detected {}, redeemed codes presented again and refused {}\n  /mcp calls {}, checks {} ({full} in the final pass, {final_ms} ms), requests not sent {}, lost {} (timed out {})\n  total {} s, violations {}",
        server.bin.display(),
        s.kills,
        s.startup_kills,
        s.starts,
        s.ready_total_ms / s.starts.max(1),
        s.ready_max_ms,
        s.registrations,
        s.consent_pages,
        s.consent_skips,
        s.codes_issued,
        s.codes_redeemed,
        m.families.len(),
        s.refreshes,
        s.replays,
        s.revoked_refresh,
        s.revoked_access,
        s.revoked_account,
        s.reuse_detected,
        s.codes_replayed,
        s.mcp_calls,
        s.checks,
        s.not_sent,
        s.lost,
        s.timeouts,
        test_started.elapsed().as_secs(),
        m.violations.len(),
    );
    for (why, n) in &m.lost_reasons {
        eprintln!("  lost answers: {n} x {why}");
    }
    if !m.violations.is_empty() {
        let kept = dir.keep();
        let shown = m.violations.len().min(40);
        panic!(
            "{} violation(s) (seed {seed}; store and logs kept in {}); the first {shown}:\n{}",
            m.violations.len(),
            kept.display(),
            m.violations[..shown].join("\n")
        );
    }
    assert!(s.kills >= 2, "the server was never killed under load");
    assert!(
        s.codes_redeemed > 0 && s.refreshes > 0,
        "the load did nothing"
    );
}

/// After a check pass: whether the server still completes requests that write to the store.
/// If requests timed out (or the pass did), a registration decides; a server that answers
/// its metadata but not that is stuck, which is recorded as a violation.
async fn still_serving(ctx: &Ctx, server: &mut Server, pass_timed_out: bool) -> bool {
    if let Some(status) = server.exited() {
        ctx.violation(format!(
            "the server exited on its own ({status}):\n{}",
            server.log_tail(30)
        ));
        return false;
    }
    if !pass_timed_out && !ctx.hung.load(Ordering::SeqCst) {
        return true;
    }
    match probe_write(ctx).await {
        Ok(()) => {
            ctx.hung.store(false, Ordering::SeqCst);
            true
        }
        Err(why) => {
            let timeouts = ctx.m().stats.timeouts;
            let metadata = ctx
                .navigate(
                    &ctx.url("/.well-known/oauth-authorization-server"),
                    None,
                    "none",
                )
                .await
                .map_or_else(|e| format!("{e:?}"), |r| r.status.to_string());
            ctx.violation(format!(
                "the server stopped completing requests that write to its store ({}): {timeouts} request(s) timed out after {REQUEST_TIMEOUT:?}{}; a registration now {why}, while GET /.well-known/oauth-authorization-server answers {metadata}. Last log lines:\n{}",
                server.log.display(),
                if pass_timed_out {
                    format!(", a check pass exceeded {PASS_BOUND:?}")
                } else {
                    String::new()
                },
                server.log_tail(3)
            ));
            false
        }
    }
}

/// Registers a client (a write to the store), with its own short bound.
async fn probe_write(ctx: &Ctx) -> Result<(), String> {
    let redirect_uri = "https://probe.example/cb".to_owned();
    // A distinct name per probe: identical unused registrations from one address are bounded
    // (the oldest is removed by design), and every probe must stay known.
    let n = ctx.m().clients.len();
    let r = ctx
        .http
        .post(ctx.url("/register"))
        .timeout(Duration::from_secs(5))
        .json(&json!({
            "client_name": format!("Crash probe {n}"),
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }))
        .send()
        .await;
    match r {
        Ok(r) if r.status().as_u16() == 201 => {
            let body: Value = r.json().await.map_err(|e| reason(&e))?;
            let id = body["client_id"].as_str().unwrap_or_default().to_owned();
            ctx.m().clients.push(ClientRec {
                id,
                redirect_uri,
                checks: 0,
            });
            Ok(())
        }
        Ok(r) => Err(format!("answered {}", r.status())),
        Err(e) if e.is_timeout() => Err("did not complete within 5 s".to_owned()),
        Err(e) => Err(format!("failed: {}", reason(&e))),
    }
}

/// SIGKILL the server and check that it had not died on its own before.
fn kill(server: &mut Server, ctx: &Ctx) {
    if let Some(status) = server.exited() {
        ctx.violation(format!(
            "the server exited on its own ({status}) before it was killed:\n{}",
            server.log_tail(30)
        ));
    }
    server.kill();
    ctx.m().stats.kills += 1;
    for p in server.log_problems() {
        ctx.violation(format!("the server logged: {p}"));
    }
}

/// Starts the server (sometimes killing it once during start-up first), waits until it
/// answers and completes a write; records a violation with its log and returns `false` if
/// it does not.
async fn start(server: &mut Server, ctx: &Ctx, rng: &mut Rng) -> bool {
    if server.starts > 0 && rng.chance(0.15) {
        server.spawn();
        sleep(Duration::from_millis(rng.range(0, 60))).await;
        server.kill();
        ctx.m().stats.startup_kills += 1;
    }
    server.spawn();
    match server.wait_ready(&ctx.http, &ctx.base).await {
        Ok(took) => {
            let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
            let mut m = ctx.m();
            m.stats.starts += 1;
            m.stats.ready_total_ms += ms;
            m.stats.ready_max_ms = m.stats.ready_max_ms.max(ms);
        }
        Err(why) => {
            ctx.violation(format!(
                "start {}: {why}; its log ({}):\n{}",
                server.starts,
                server.log.display(),
                server.log_tail(40)
            ));
            return false;
        }
    }
    if let Err(why) = probe_write(ctx).await {
        ctx.violation(format!(
            "start {}: the server answers but a registration {why}; its log ({}):\n{}",
            server.starts,
            server.log.display(),
            server.log_tail(20)
        ));
        return false;
    }
    true
}
