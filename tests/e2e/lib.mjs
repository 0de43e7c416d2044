// Shared helpers for the real-client end-to-end scripts (driven by tests/e2e/real_client.rs).
//
// Conventions of every script here:
// - arguments are `--name value` pairs;
// - progress goes to stderr; exactly one JSON line goes to stdout at the end
//   (`{"ok":true,...}` and exit 0, or `{"ok":false,"error":...}` and exit 1);
// - the whole run is bounded by a watchdog, and Chromium is Debian's (/usr/bin/chromium): a test
//   tool's own browser download is never used (and cannot work on this project's machines).

import { mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname } from 'node:path';
import { createHash, randomBytes } from 'node:crypto';

import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { chromium } from 'playwright-core';

/** `--name value` pairs into an object; `required` names must be present. */
export function parseArgs(argv, required) {
    const out = {};
    for (let i = 0; i < argv.length; i += 2) {
        const key = argv[i];
        if (!key.startsWith('--') || i + 1 >= argv.length) {
            throw new Error(`bad arguments near ${JSON.stringify(key)}: expected --name value pairs`);
        }
        out[key.slice(2)] = argv[i + 1];
    }
    for (const name of required) {
        if (!out[name]) {
            throw new Error(`missing argument --${name}`);
        }
    }
    return out;
}

/** Progress line on stderr. */
export function log(...parts) {
    process.stderr.write(`[e2e ${new Date().toISOString().slice(11, 23)}] ${parts.join(' ')}\n`);
}

/**
 * Runs `main` under a watchdog and prints its result as one JSON line. Exits the process (open
 * SSE streams or browser pipes would otherwise keep it alive).
 */
export function runMain(main, { timeoutMs = 90_000 } = {}) {
    const watchdog = setTimeout(() => {
        finish(1, { ok: false, error: `watchdog: the script did not finish within ${timeoutMs} ms` });
    }, timeoutMs);
    main().then(
        result => finish(0, { ok: true, ...result }),
        err => {
            log('FAILED:', err?.stack ?? String(err));
            finish(1, { ok: false, error: String(err?.message ?? err) });
        }
    );
    let done = false;
    function finish(code, obj) {
        if (done) return;
        done = true;
        clearTimeout(watchdog);
        process.stdout.write(JSON.stringify(obj) + '\n', () => process.exit(code));
    }
}

/** Throws unless `cond`. */
export function check(cond, message) {
    if (!cond) {
        throw new Error(`check failed: ${message}`);
    }
}

/** Rejects after `ms` with a message naming `what`. */
export function withTimeout(promise, ms, what) {
    let timer;
    return Promise.race([
        promise,
        new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
        })
    ]).finally(() => clearTimeout(timer));
}

/** The Chromium binary: Debian's, or MCP_E2E_CHROMIUM. */
export const CHROMIUM = process.env.MCP_E2E_CHROMIUM || '/usr/bin/chromium';

/**
 * Launches Debian's Chromium headless with the flags this machine needs (see the env notes:
 * no background networking, no sandbox as root). Playwright gives every launch a new, empty
 * temporary profile directory (`--user-data-dir`) and removes it on close.
 */
export async function launchChromium() {
    return chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        args: [
            '--headless',
            '--no-sandbox',
            '--disable-gpu',
            '--disable-quic',
            '--no-first-run',
            '--disable-background-networking',
            '--disable-component-update',
            '--disable-sync'
        ],
        timeout: 30_000
    });
}

/** Starts `handler` on `host`:0; resolves to `{ server, port, origin }`. */
export function listen(handler, host = '127.0.0.1') {
    return new Promise((resolve, reject) => {
        const server = createServer(handler);
        server.on('error', reject);
        server.listen(0, host, () => {
            const { port } = server.address();
            resolve({ server, port, origin: `http://${host}:${port}` });
        });
    });
}

/** Closes a server, dropping kept-alive connections. */
export function close(server) {
    return new Promise(resolve => {
        server.closeAllConnections?.();
        server.close(() => resolve());
    });
}

/**
 * A local redirect target for an OAuth client: GET /callback?code&state&iss resolves
 * `callback` with those parameters (an `error` parameter rejects it).
 */
export async function startCallbackServer() {
    let resolveCb;
    let rejectCb;
    const callback = new Promise((resolve, reject) => {
        resolveCb = resolve;
        rejectCb = reject;
    });
    callback.catch(() => {});
    const srv = await listen((req, res) => {
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        if (url.pathname !== '/callback') {
            res.writeHead(404, { 'content-type': 'text/plain' });
            res.end('not found');
            return;
        }
        const params = Object.fromEntries(url.searchParams);
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end('<!DOCTYPE html><title>e2e callback</title><h1>Authorization finished</h1><p>You can close this window.</p>');
        if (params.error) {
            rejectCb(new Error(`authorization failed: ${params.error} ${params.error_description ?? ''}`));
        } else {
            resolveCb(params);
        }
    });
    return { ...srv, redirectUri: `${srv.origin}/callback`, callback };
}

/** PKCE S256 pair. */
export function pkce() {
    const verifier = randomBytes(32).toString('base64url');
    const challenge = createHash('sha256').update(verifier).digest('base64url');
    return { verifier, challenge };
}

/** Random URL-safe string. */
export function randomState() {
    return randomBytes(16).toString('base64url');
}

/** Saves a full-page screenshot, creating the folder. */
export async function screenshot(page, path) {
    mkdirSync(dirname(path), { recursive: true });
    await page.screenshot({ path, fullPage: true });
    log('screenshot saved:', path);
}

/**
 * Clicks `selector` (a CSS selector or a Playwright Locator) and waits until the page has
 * navigated and loaded. By default "navigated" means the URL changed; with `{ sameUrl: true }`
 * (a form that posts to its own URL and answers with a page, no redirect) it means a new main
 * document was committed, whatever its URL.
 */
export async function clickAndWait(page, selector, what, { sameUrl = false } = {}) {
    const before = page.url();
    const button = typeof selector === 'string' ? page.locator(selector) : selector;
    const shown = typeof selector === 'string' ? selector : String(selector);
    check((await button.count()) === 1, `exactly one ${shown} on ${what} (${before})`);
    // The provenance headers Chromium sends with a form POST decide whether a server takes it
    // as its own page's: log them (a refusal of our own form is otherwise hard to explain).
    const posts = [];
    const onRequest = request => {
        if (request.method() === 'POST' && request.isNavigationRequest()) {
            // Kept as promises and awaited before the log line (the headers come asynchronously).
            posts.push(
                request
                    .allHeaders()
                    .catch(() => ({}))
                    .then(h => `POST ${redact(request.url())} origin=${h.origin ?? '(none)'} sec-fetch-site=${h['sec-fetch-site'] ?? '(none)'}`)
            );
        }
    };
    page.on('request', onRequest);
    try {
        const navigated = sameUrl
            ? page
                  .waitForEvent('framenavigated', { predicate: frame => frame === page.mainFrame(), timeout: 20_000 })
                  .then(() => page.waitForLoadState('load', { timeout: 20_000 }))
            : page.waitForURL(url => url.href !== before, { timeout: 20_000, waitUntil: 'load' });
        await Promise.all([navigated, button.click({ timeout: 10_000 })]);
    } finally {
        page.off('request', onRequest);
    }
    log(`clicked ${shown} on ${what}; ${(await Promise.all(posts)).join('; ')}; now at ${redact(page.url())} "${await page.title()}"`);
}

/**
 * Back from GitHub, waits until the browser is at `redirectUri`. The proxy's callback first
 * answers with its finish page, whose script hands back the value the consent page kept in
 * the origin's session storage and goes on at once (browser-bound return); only a browser
 * without that value stays there and is asked to confirm.
 */
export async function waitForRedirectUri(page, redirectUri) {
    await page.waitForURL(u => u.href.startsWith(redirectUri), { timeout: 20_000, waitUntil: 'commit' });
}

/** A URL with its query values elided (codes and states are not for logs). */
export function redact(href) {
    try {
        const u = new URL(href);
        for (const key of [...u.searchParams.keys()]) {
            u.searchParams.set(key, '…');
        }
        return u.href;
    } catch {
        return href;
    }
}

/**
 * The attributes a `__Host-` cookie of the proxy must have, as Playwright reports them: host-only
 * (no Domain attribute: `domain` is the bare host without a leading dot), Secure, HttpOnly,
 * SameSite=Lax, Path=/. Returns a list of problems (empty when all hold).
 */
export function hostCookieProblems(cookie, host) {
    if (!cookie) return ['cookie missing'];
    const problems = [];
    if (!cookie.name.startsWith('__Host-')) problems.push(`name ${cookie.name} lacks __Host-`);
    if (cookie.secure !== true) problems.push(`secure=${cookie.secure}`);
    if (cookie.httpOnly !== true) problems.push(`httpOnly=${cookie.httpOnly}`);
    if (cookie.sameSite !== 'Lax') problems.push(`sameSite=${cookie.sameSite}`);
    if (cookie.path !== '/') problems.push(`path=${cookie.path}`);
    if (cookie.domain !== host) problems.push(`domain=${cookie.domain} (want host-only ${host})`);
    return problems;
}

/** Cookie attributes without the value (values are secrets). */
export function cookieAttributes(cookie) {
    if (!cookie) return null;
    const { name, domain, path, secure, httpOnly, sameSite, expires } = cookie;
    return { name, domain, path, secure, httpOnly, sameSite, session: expires === -1 };
}

/** The text parts of an MCP tool result, joined. */
export function textOf(result) {
    return (result?.content ?? [])
        .filter(c => c.type === 'text')
        .map(c => c.text)
        .join('\n');
}

/**
 * The SDK's `OAuthClientProvider`, in memory (like the SDK's own `InMemoryOAuthClientProvider`
 * example): it stores exactly what the SDK hands it. `redirectToAuthorization` starts
 * `openInBrowser(url)` (the person's part, in Chromium) and keeps its promise in `browserFlow`.
 */
export class BrowserOAuthProvider {
    constructor(redirectUrl, openInBrowser, { clientName = 'SDK e2e' } = {}) {
        this._redirectUrl = redirectUrl;
        this._openInBrowser = openInBrowser;
        this._clientName = clientName;
        this._state = undefined;
        this.savedTokens = [];
        this.savedClients = [];
        this.authorizationUrls = [];
    }
    get redirectUrl() {
        return this._redirectUrl;
    }
    get clientMetadata() {
        return {
            client_name: this._clientName,
            redirect_uris: [this._redirectUrl],
            grant_types: ['authorization_code', 'refresh_token'],
            response_types: ['code'],
            token_endpoint_auth_method: 'none'
        };
    }
    state() {
        this._state = randomState();
        return this._state;
    }
    clientInformation() {
        return this._clientInformation;
    }
    saveClientInformation(info) {
        this.savedClients.push(info.client_id);
        this._clientInformation = info;
    }
    tokens() {
        return this._tokens;
    }
    saveTokens(tokens) {
        this.savedTokens.push(tokens);
        this._tokens = tokens;
    }
    redirectToAuthorization(url) {
        this.authorizationUrls.push(url.href);
        // Not awaited: the SDK throws UnauthorizedError right after this, and the caller waits
        // for the redirect to reach the callback server (as in the SDK's example).
        this.browserFlow = this._openInBrowser(url);
        this.browserFlow.catch(() => {});
    }
    saveCodeVerifier(verifier) {
        this._codeVerifier = verifier;
    }
    // SDK v2 (SEP-2352): the discovery state is kept with the code verifier, so the callback
    // leg can be checked against the authorization server the flow started with.
    saveDiscoveryState(state) {
        this._discoveryState = state;
    }
    discoveryState() {
        return this._discoveryState;
    }
    codeVerifier() {
        if (!this._codeVerifier) {
            throw new Error('No code verifier saved');
        }
        return this._codeVerifier;
    }
}

/** The proxy consent page's Approve button. */
export const CONSENT_APPROVE = 'button[name="decision"][value="approve"]';

/**
 * Waits until the proxy consent page's buttons are enabled: its script enables them once the
 * page has been visible and focused for a second. Resolves to how long that took (ms).
 */
export async function waitForConsentButtons(page, { timeout = 10_000 } = {}) {
    const started = Date.now();
    await page.waitForFunction(
        sel => [...document.querySelectorAll(sel)].some(b => !b.disabled && b.offsetParent !== null),
        CONSENT_APPROVE,
        { timeout, polling: 50 }
    );
    return Date.now() - started;
}

/**
 * The person's part of an MCP client's authorization, in Chromium: the proxy's consent page
 * (which must name `clientName`; screenshot to `screenshotPath` when given) → Approve → the fake
 * GitHub's account picker (`login`) → GitHub's own consent the first time → the client's
 * `redirectUri`. On failure the page text is logged. Returns what the consent page showed.
 */
export async function approveAuthorizationIn(page, authorizationUrl, { login, clientName, redirectUri, screenshotPath }) {
    try {
        const consent = await page.goto(String(authorizationUrl), { waitUntil: 'load' });
        check(consent.status() === 200, `consent page answered ${consent.status()}`);
        const title = await page.title();
        check(title.startsWith('Review access request'), `proxy consent page expected, got title ${JSON.stringify(title)}`);
        const shownName = (await page.locator('.client-name .name').textContent())?.trim();
        check(shownName === clientName, `consent page names the client (got ${JSON.stringify(shownName)})`);
        // The buttons act only once the page has been visible and focused for a moment (the
        // double-clickjacking defence): wait for Approve to be enabled, as a person would.
        await waitForConsentButtons(page);
        if (screenshotPath) {
            await screenshot(page, screenshotPath);
        }
        await clickAndWait(page, CONSENT_APPROVE, 'the proxy consent page');

        const pickerTitle = await page.title();
        check(pickerTitle.startsWith('Sign in to GitHub'), `GitHub account picker expected, got ${JSON.stringify(pickerTitle)}`);
        await clickAndWait(page, `button[name="login"][value="${login}"]`, "the fake GitHub's account picker");

        // GitHub's own consent screen, shown the first time this account authorizes the app.
        if ((await page.title()) === 'Authorize application') {
            await clickAndWait(page, 'button[name="decision"][value="approve"]', "GitHub's consent page");
        }
        await waitForRedirectUri(page, redirectUri);
        check(
            page.url().startsWith(redirectUri),
            `browser should end at the client's redirect URI, is at ${redact(page.url())}`
        );
        return { consentTitle: title, clientName: shownName };
    } catch (err) {
        await logPageText(page, 'when it failed');
        throw err;
    }
}

/** Logs where `page` is and its text (for a failure's context). */
export async function logPageText(page, when) {
    const body = await page.locator('body').innerText().catch(() => '(no page text)');
    log(`browser at ${redact(page.url())} ${when}; page text:\n${body}`);
}

/**
 * The SDK's own authorization, as in its example `simpleOAuthClient`: `client.connect` gets 401,
 * discovers, registers and calls `provider.redirectToAuthorization` (the person approves in the
 * browser); the redirect reaches `callback`; `transport.finishAuth(code)` redeems it; a new
 * transport connects (`initialize`). `fetch` is handed to both transports. Returns the connected
 * transport, the authorization URL, the callback's parameters and what the browser part returned.
 */
export async function connectAuthorizingInBrowser({ client, mcpUrl, provider, callback, fetch }) {
    // 1. No token yet: the SDK gets 401, discovers, registers, and redirects the person.
    const first = new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch });
    let unauthorized = false;
    try {
        await client.connect(first);
    } catch (err) {
        if (!(err instanceof UnauthorizedError)) {
            throw err;
        }
        unauthorized = true;
    }
    check(unauthorized, 'the first connect must need authorization');
    check(provider.authorizationUrls.length === 1, 'the SDK redirected to the authorization endpoint once');
    const authorizationUrl = new URL(provider.authorizationUrls[0]);
    log('authorization URL:', redact(authorizationUrl.href));

    // The browser flow failing (a check, a page that did not come) ends the wait at once.
    const browserResult = await withTimeout(provider.browserFlow, 60_000, 'the person to finish in the browser');
    const params = await withTimeout(callback.callback, 10_000, 'the redirect to the callback server');
    check(typeof params.code === 'string' && params.code.length > 0, 'callback has a code');
    check(params.state === provider._state, 'callback state matches the one the SDK sent');
    const expectedIssuer = mcpUrl.origin;
    check(params.iss === expectedIssuer, `callback iss ${params.iss} equals the issuer ${expectedIssuer}`);

    // 2. Exchange the code (SDK), reconnect with a new transport as in the SDK's example.
    await first.finishAuth(params.code);
    check(provider.savedTokens.length === 1, 'finishAuth saved tokens');
    const transport = new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch });
    await client.connect(transport);
    log('connected to', JSON.stringify(client.getServerVersion()), 'protocol', transport.protocolVersion ?? '?');
    return { transport, authorizationUrl, params, browserResult };
}

/**
 * A `fetch` for the SDK's transport that records each request into `httpLog` (never a header
 * value, token or secret) and passes it on: method, path, status; for `/token` the grant type,
 * `resource` and whether a PKCE verifier was sent; for `/register` the client name; for a 401 the
 * `WWW-Authenticate` error and `resource_metadata`; for a JSON-RPC POST its method (and, for
 * `initialize`, the declared capabilities and protocol version), and for a JSON answer its
 * JSON-RPC error code.
 */
export function recordingFetchInto(httpLog) {
    return async function recordingFetch(input, init) {
        const url = new URL(input instanceof Request ? input.url : String(input));
        const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
        const entry = { method, path: url.pathname };
        if (url.pathname === '/token' && init?.body instanceof URLSearchParams) {
            entry.grant_type = init.body.get('grant_type');
            entry.resource = init.body.get('resource');
            entry.has_code_verifier = init.body.has('code_verifier');
        }
        if (url.pathname === '/register' && typeof init?.body === 'string') {
            entry.client_name = JSON.parse(init.body).client_name;
        }
        if (method === 'POST' && url.pathname !== '/register' && typeof init?.body === 'string') {
            const rpc = jsonOrNull(init.body);
            if (rpc && !Array.isArray(rpc) && typeof rpc.method === 'string') {
                entry.rpc_method = rpc.method;
                if (rpc.method === 'initialize') {
                    entry.capabilities = rpc.params?.capabilities ?? null;
                    entry.protocol_version = rpc.params?.protocolVersion ?? null;
                }
                if (rpc.method === 'tools/call') {
                    entry.tool = rpc.params?.name ?? null;
                    entry.has_request_state = typeof rpc.params?.requestState === 'string';
                }
            }
        }
        const response = await fetch(input, init);
        entry.status = response.status;
        if (response.status === 401) {
            const www = response.headers.get('www-authenticate') ?? '';
            entry.www_authenticate_error = /error="([^"]*)"/.exec(www)?.[1] ?? null;
            entry.resource_metadata = /resource_metadata="([^"]*)"/.exec(www)?.[1] ?? null;
        }
        if (entry.rpc_method && (response.headers.get('content-type') ?? '').startsWith('application/json')) {
            // A JSON answer is complete and small: read a copy (an SSE stream is left alone).
            const answer = jsonOrNull(await response.clone().text());
            if (answer && !Array.isArray(answer) && answer.jsonrpc === '2.0' && answer.error) {
                entry.rpc_error_code = answer.error.code ?? null;
            }
            if (answer && !Array.isArray(answer) && answer.result?.resultType) {
                entry.result_type = answer.result.resultType;
            }
        }
        httpLog.push(entry);
        log(`sdk http: ${method} ${url.pathname}${entry.rpc_method ? ` ${entry.rpc_method}` : ''} → ${response.status}${entry.rpc_error_code ? ` (JSON-RPC error ${entry.rpc_error_code})` : ''}`);
        return response;
    };
}

function jsonOrNull(text) {
    try {
        return JSON.parse(text);
    } catch {
        return null;
    }
}

/**
 * Opens a connect or approval link as its person would. A link offers its action only to a
 * sign-in made through GitHub's account picker within the last minutes; the sign-in of an
 * authorization (the consent flow) is silent and never counts, so the first link after it
 * sends the browser to GitHub with `prompt=select_account`. There the person picks `login`,
 * and GitHub sends them back to the link. Resolves to the link page's status, whether the
 * picker was shown, and the `prompt` of every authorize request the page made.
 */
export async function openLink(page, linkUrl, login) {
    const prompts = [];
    const onRequest = request => {
        const u = new URL(request.url());
        if (request.method() === 'GET' && u.pathname === '/login/oauth/authorize') {
            prompts.push(u.searchParams.get('prompt'));
        }
    };
    page.on('request', onRequest);
    try {
        const resp = await page.goto(linkUrl, { waitUntil: 'load' });
        let status = resp.status();
        const picker = (await page.title()).startsWith('Sign in to GitHub');
        if (picker) {
            await clickAndWait(page, `button[name="login"][value="${login}"]`, "GitHub's account picker");
            check(page.url() === linkUrl, `the sign-in returned to the link, at ${redact(page.url())}`);
            status = await page.evaluate(() => performance.getEntriesByType('navigation')[0]?.responseStatus ?? 0);
        }
        return { status, signed_in_through_picker: picker, sign_in_prompts: prompts };
    } finally {
        page.off('request', onRequest);
    }
}

/**
 * The person's part of a held tool call (`[[policy]] decision = "ask"`), in Chromium: opens the
 * approval link (signing in through GitHub's account picker as `login` when it asks,
 * [`openLink`]), checks that the page names the agent, the tool and the rule and shows the
 * arguments, waits for the held buttons like a person would, clicks "Approve once", and checks
 * the page after it says to go back to the agent from the same URL (no redirect). Returns what
 * the page showed.
 */
export async function approveHeldCall(page, linkUrl, { login, clientName, tool, rule, shownArgument }) {
    try {
        const opened = await openLink(page, linkUrl, login);
        check(opened.status === 200, `the approval page answered ${opened.status}`);
        check(page.url() === linkUrl, `the approval page stays at the link, at ${redact(page.url())}`);
        const agentShown = (await page.locator('.client-name .name').innerText()).trim();
        check(agentShown === clientName, `the page names the agent: ${JSON.stringify(agentShown)}`);
        const text = await page.locator('body').innerText();
        check(text.includes(tool), `the page names the tool ${tool}`);
        check(text.includes(rule), `the page names the rule ${rule}`);
        check(text.includes(shownArgument), `the page shows the argument ${JSON.stringify(shownArgument)}`);
        const armedAfterMs = await waitForConsentButtons(page);
        const label = (await page.locator(CONSENT_APPROVE).innerText()).trim();
        check(label === 'Approve once', `the approve button says "Approve once", says ${JSON.stringify(label)}`);
        await clickAndWait(page, CONSENT_APPROVE, 'the approval page', { sameUrl: true });
        const doneText = (await page.locator('body').innerText()).trim();
        check(doneText.includes('Go back to your agent'), `the page after approving says to go back: ${doneText}`);
        check(page.url() === linkUrl, `no redirect after approving, at ${redact(page.url())}`);
        return { agent_shown: agentShown, armed_after_ms: armedAfterMs, approve_label: label, done_text: doneText, signed_in_through_picker: opened.signed_in_through_picker, sign_in_prompts: opened.sign_in_prompts };
    } catch (err) {
        await logPageText(page, 'when approving the held call failed');
        throw err;
    }
}
