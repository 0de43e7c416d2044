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
 * Clicks `selector` and waits until the page has navigated away from its current URL and
 * loaded. Returns the main-frame response of the navigation that ended there, if any.
 */
export async function clickAndWait(page, selector, what) {
    const before = page.url();
    const button = page.locator(selector);
    check((await button.count()) === 1, `exactly one ${selector} on ${what} (${before})`);
    // The provenance headers Chromium sends with a form POST decide whether a server takes it
    // as its own page's: log them (a refusal of our own form is otherwise hard to explain).
    const posts = [];
    const onRequest = async request => {
        if (request.method() === 'POST' && request.isNavigationRequest()) {
            const h = await request.allHeaders().catch(() => ({}));
            posts.push(`POST ${redact(request.url())} origin=${h.origin ?? '(none)'} sec-fetch-site=${h['sec-fetch-site'] ?? '(none)'}`);
        }
    };
    page.on('request', onRequest);
    try {
        await Promise.all([
            page.waitForURL(url => url.href !== before, { timeout: 20_000, waitUntil: 'load' }),
            button.click({ timeout: 10_000 })
        ]);
    } finally {
        page.off('request', onRequest);
    }
    log(`clicked ${selector} on ${what}; ${posts.join('; ')}; now at ${redact(page.url())} "${await page.title()}"`);
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
