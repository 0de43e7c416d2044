// The proxy's consent page in a real browser (Debian's headless Chromium via playwright-core):
// what the person sees, the cookies Chromium actually stores, framing, and a cross-site POST.
//
//   node consent_browser.mjs --base http://127.0.0.1:PORT --screenshot ../../target/e2e/consent.png [--login alice]
//
// 1. Registers a public client (POST /register) whose redirect URI is a local server here, opens
//    /authorize (PKCE S256, `resource`) and checks the page: client name (escaped, marked
//    unverified), redirect host and full URI. Cookies in the browser: `__Host-mcp-csrf` before
//    approval and no flow cookie; after Approve `__Host-mcp-flow`; after GitHub `__Host-mcp-session`
//    and the flow cookie gone; all host-only, Secure, HttpOnly, SameSite=Lax, Path=/. The code
//    that reaches the redirect URI is redeemed at /token.
// 2. Framing: a page on another site (http://127.0.0.2:…) frames the consent page; the frame must
//    not render it (a control frame of the attacker's own origin must render, or the check proves
//    nothing).
// 3. Cross-site POST: an attacker loads a consent page in their own browser context, copies `txn`
//    and `csrf`, and makes a victim's browser auto-submit "approve" to /consent from another site
//    (cross-site) and from another port of the same host (same-site, cross-origin, with the
//    victim's own cookies). Both must be the proxy's 403 "Request refused" with no flow cookie.
//
// stdout: one JSON line with what was observed.

import {
    check,
    clickAndWait,
    close,
    cookieAttributes,
    hostCookieProblems,
    launchChromium,
    listen,
    log,
    parseArgs,
    pkce,
    randomState,
    redact,
    runMain,
    screenshot,
    startCallbackServer,
    waitForRedirectUri,
    withTimeout
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['base', 'screenshot']);
const base = new URL(args.base).origin;
const host = new URL(base).hostname;
const login = args.login ?? 'alice';
/** Contains markup on purpose: the page must show it as text. */
const CLIENT_NAME = 'Browser <b>E2E</b> & Co';
const CSRF_COOKIE = '__Host-mcp-csrf';
const FLOW_COOKIE = '__Host-mcp-flow';
const SESSION_COOKIE = '__Host-mcp-session';

function escapeHtml(s) {
    return s.replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

async function register(redirectUri) {
    const resp = await fetch(`${base}/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
            client_name: CLIENT_NAME,
            redirect_uris: [redirectUri],
            token_endpoint_auth_method: 'none',
            grant_types: ['authorization_code', 'refresh_token']
        })
    });
    const body = await resp.json();
    check(resp.status === 201, `registration answered ${resp.status}: ${JSON.stringify(body)}`);
    return body.client_id;
}

function authorizeUrl(clientId, redirectUri, challenge, state) {
    const u = new URL(`${base}/authorize`);
    u.search = new URLSearchParams({
        response_type: 'code',
        client_id: clientId,
        redirect_uri: redirectUri,
        code_challenge: challenge,
        code_challenge_method: 'S256',
        state,
        scope: 'read:user',
        resource: `${base}/mcp`
    }).toString();
    return u.href;
}

async function cookieNamed(context, name) {
    return (await context.cookies(base)).find(c => c.name === name);
}

function assertHostCookie(cookie, name, when) {
    const problems = hostCookieProblems(cookie, host);
    check(problems.length === 0, `${name} ${when}: ${problems.join(', ')}`);
    return cookieAttributes(cookie);
}

/** Part 1: the honest person approves in Chromium; cookies at every step. */
async function consentAndCookies(browser, clientId, callback) {
    const context = await browser.newContext();
    const page = await context.newPage();
    const { verifier, challenge } = pkce();
    const state = randomState();
    const url = authorizeUrl(clientId, callback.redirectUri, challenge, state);

    const resp = await page.goto(url, { waitUntil: 'load' });
    check(resp.status() === 200, `consent page status ${resp.status()}`);
    const headers = await resp.allHeaders();
    const title = await page.title();
    check(title.startsWith('Review access request'), `consent page title ${JSON.stringify(title)}`);

    // What the person sees: the untrusted name as text (escaped, no markup), marked unverified,
    // the redirect host and the exact redirect URI.
    const nameEl = page.locator('.client-name .name');
    const shownName = await nameEl.textContent();
    check(shownName === CLIENT_NAME, `client name shown as text: ${JSON.stringify(shownName)}`);
    check((await nameEl.locator('b').count()) === 0, 'the client name markup was not rendered as HTML');
    const unverified = await page.locator('.badge-unverified').isVisible();
    check(unverified, 'the client name is marked unverified');
    const redirectHost = new URL(callback.redirectUri).hostname;
    const hostsShown = await page.locator('.host').allTextContents();
    check(
        hostsShown.some(h => h.includes(redirectHost)),
        `redirect host ${redirectHost} shown (hosts: ${JSON.stringify(hostsShown)})`
    );
    const uriShown = (await page.locator('code.uri').textContent())?.trim();
    check(uriShown === callback.redirectUri, `full redirect URI shown: ${uriShown}`);
    const approveVisible = await page.locator('button[name="decision"][value="approve"]').isVisible();
    check(approveVisible, 'Approve button visible');
    await screenshot(page, args.screenshot);

    const csrfBefore = assertHostCookie(await cookieNamed(context, CSRF_COOKIE), CSRF_COOKIE, 'after the consent page');
    check(!(await cookieNamed(context, FLOW_COOKIE)), 'no flow cookie before approval');
    check(!(await cookieNamed(context, SESSION_COOKIE)), 'no session cookie before sign-in');

    // Approve → the fake GitHub's account picker; the flow cookie is set by that redirect.
    await clickAndWait(page, 'button[name="decision"][value="approve"]', 'the proxy consent page');
    const pickerTitle = await page.title();
    check(pickerTitle.startsWith('Sign in to GitHub'), `GitHub account picker expected, got ${JSON.stringify(pickerTitle)}`);
    const flow = assertHostCookie(await cookieNamed(context, FLOW_COOKIE), FLOW_COOKIE, 'after Approve');
    const csrfAfterApprove = cookieAttributes(await cookieNamed(context, CSRF_COOKIE));

    // GitHub: pick the account, approve GitHub's own consent, back through the proxy callback.
    await clickAndWait(page, `button[name="login"][value="${login}"]`, "the fake GitHub's account picker");
    if ((await page.title()) === 'Authorize application') {
        await clickAndWait(page, 'button[name="decision"][value="approve"]', "GitHub's consent page");
    }
    await waitForRedirectUri(page, callback.redirectUri);
    check(page.url().startsWith(callback.redirectUri), `ended at the redirect URI, at ${redact(page.url())}`);
    const params = await withTimeout(callback.callback, 10_000, 'the redirect to the callback server');
    check(params.state === state, 'state came back unchanged');
    check(params.iss === base, `iss ${params.iss} is the issuer ${base}`);
    const session = assertHostCookie(await cookieNamed(context, SESSION_COOKIE), SESSION_COOKIE, 'after the callback');
    const flowAfterCallback = !!(await cookieNamed(context, FLOW_COOKIE));
    check(!flowAfterCallback, 'the flow cookie is cleared by the callback');

    // The code is good: redeem it as the client would.
    const token = await fetch(`${base}/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({
            grant_type: 'authorization_code',
            code: params.code,
            code_verifier: verifier,
            redirect_uri: callback.redirectUri,
            client_id: clientId,
            resource: `${base}/mcp`
        })
    });
    const tokenBody = await token.json();
    check(token.status === 200 && typeof tokenBody.access_token === 'string', `token answered ${token.status}: ${tokenBody.error ?? ''}`);

    await page.close();
    return {
        context,
        result: {
            status: resp.status(),
            title,
            client_name_shown: shownName,
            unverified_badge: unverified,
            redirect_hosts_shown: hostsShown,
            redirect_uri_shown: uriShown,
            headers: {
                x_frame_options: headers['x-frame-options'] ?? null,
                content_security_policy: headers['content-security-policy'] ?? null,
                cache_control: headers['cache-control'] ?? null,
                referrer_policy: headers['referrer-policy'] ?? null
            },
            cookies: {
                csrf_before_approve: csrfBefore,
                csrf_after_approve: csrfAfterApprove,
                flow_after_approve: flow,
                session_after_callback: session,
                flow_after_callback: flowAfterCallback
            },
            callback_iss: params.iss,
            code_redeemed: true,
            token_type: tokenBody.token_type
        }
    };
}

/** An "attacker" site: serves pages given as HTML by path. */
async function attackerSite(hostname) {
    const pages = new Map();
    const site = await listen((req, res) => {
        const path = new URL(req.url ?? '/', 'http://x').pathname;
        const html = pages.get(path);
        res.writeHead(html ? 200 : 404, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
        res.end(html ?? 'not found');
    }, hostname);
    return { ...site, pages };
}

/** Part 2: another site frames the consent page (the person is signed in: a clickjacking try). */
async function framing(context, evil, clientId, redirectUri) {
    const target = authorizeUrl(clientId, redirectUri, pkce().challenge, randomState());
    evil.pages.set('/framable', '<!DOCTYPE html><title>control</title><form><button name="decision" value="approve">Approve</button></form>');
    evil.pages.set(
        '/frame',
        `<!DOCTYPE html><title>Win a prize</title>
<iframe id="target" src="${escapeHtml(target)}" width="800" height="600"></iframe>
<iframe id="control" src="/framable" width="300" height="100"></iframe>`
    );
    const page = await context.newPage();
    const consoleMessages = [];
    page.on('console', m => consoleMessages.push(m.text()));
    const framedResponse = page.waitForResponse(r => r.url() === target, { timeout: 15_000 });
    await page.goto(`${evil.origin}/frame`, { waitUntil: 'load' });
    const resp = await framedResponse;
    const framedHeaders = await resp.allHeaders();

    const targetFrame = await (await page.$('#target')).contentFrame();
    const controlFrame = await (await page.$('#control')).contentFrame();
    check(targetFrame && controlFrame, 'both frames exist');
    // Give a blocked frame's error page a moment to settle, then look inside.
    await targetFrame.waitForLoadState('load', { timeout: 10_000 }).catch(() => {});
    const frameUrl = targetFrame.url();
    const approveInFrame = await targetFrame.locator('button[value="approve"]').count().catch(() => 0);
    const frameTitle = await targetFrame.title().catch(() => null);
    const approveInControl = await controlFrame.locator('button[value="approve"]').count();
    check(approveInControl === 1, 'the control frame (attacker-origin page) renders, so the check can see a rendered frame');
    check(approveInFrame === 0, `the framed consent page must not render (frame at ${redact(frameUrl)}, title ${frameTitle})`);
    check(!frameUrl.startsWith(base), `the frame did not stay on the proxy's page: ${redact(frameUrl)}`);
    const refusal = consoleMessages.find(m => /frame-ancestors|X-Frame-Options/i.test(m)) ?? null;
    await page.close();
    return {
        attacker_origin: evil.origin,
        framed_response_status: resp.status(),
        x_frame_options: framedHeaders['x-frame-options'] ?? null,
        csp_frame_ancestors: /frame-ancestors [^;]*/.exec(framedHeaders['content-security-policy'] ?? '')?.[0] ?? null,
        frame_url: frameUrl.startsWith(base) ? redact(frameUrl) : frameUrl,
        frame_title: frameTitle,
        approve_buttons_in_frame: approveInFrame,
        control_frame_rendered: approveInControl === 1,
        console_refusal: refusal
    };
}

/** Part 3: the attacker's txn/csrf, auto-submitted from another site by the victim's browser. */
async function crossSitePost(browser, victimContext, evil, clientId, redirectUri, kind) {
    // The attacker's own browser context loads a consent page and copies the form's fields.
    const attacker = await browser.newContext();
    const ap = await attacker.newPage();
    await ap.goto(authorizeUrl(clientId, redirectUri, pkce().challenge, randomState()), { waitUntil: 'load' });
    const txn = await ap.locator('input[name="txn"]').getAttribute('value');
    const csrf = await ap.locator('input[name="csrf"]').getAttribute('value');
    check(txn && csrf, 'the attacker read txn and csrf from their own consent page');
    await attacker.close();

    evil.pages.set(
        '/post',
        `<!DOCTYPE html><title>Loading…</title>
<form method="post" action="${escapeHtml(base)}/consent">
<input type="hidden" name="txn" value="${escapeHtml(txn)}">
<input type="hidden" name="csrf" value="${escapeHtml(csrf)}">
<input type="hidden" name="decision" value="approve">
</form>
<script>document.forms[0].submit()</script>`
    );
    const page = await victimContext.newPage();
    const posted = page.waitForResponse(r => r.url() === `${base}/consent` && r.request().method() === 'POST', { timeout: 15_000 });
    await page.goto(`${evil.origin}/post`);
    const resp = await posted;
    const reqHeaders = await resp.request().allHeaders();
    await page.waitForURL(`${base}/consent`, { waitUntil: 'load', timeout: 10_000 });
    const title = await page.title();
    const text = await page.locator('body').innerText();
    const flowCookie = !!(await cookieNamed(victimContext, FLOW_COOKIE));
    const location = (await resp.allHeaders()).location ?? null;
    check(resp.status() === 403, `${kind} POST answered ${resp.status()} (want 403)`);
    check(text.includes('Request refused'), `${kind} POST shows the refusal page: ${title}`);
    check(!flowCookie, `${kind} POST set no flow cookie`);
    check(location === null, `${kind} POST redirected nowhere`);
    await page.close();
    return {
        kind,
        attacker_origin: evil.origin,
        sent_origin: reqHeaders.origin ?? null,
        sent_sec_fetch_site: reqHeaders['sec-fetch-site'] ?? null,
        sent_cookie_names: (reqHeaders.cookie ?? '')
            .split(';')
            .map(c => c.trim().split('=')[0])
            .filter(Boolean),
        status: resp.status(),
        title,
        refused: text.includes('Request refused'),
        flow_cookie: flowCookie
    };
}

async function main() {
    const callback = await startCallbackServer();
    const clientId = await register(callback.redirectUri);
    log('registered', clientId);
    const browser = await launchChromium();
    const chromiumVersion = browser.version();
    log('chromium', chromiumVersion);
    // Another site (127.0.0.2 is a different host, so a different site), and another origin of
    // the same site (127.0.0.1 on another port).
    const crossSite = await attackerSite('127.0.0.2');
    const sameSite = await attackerSite('127.0.0.1');

    const { context: person, result: consent } = await consentAndCookies(browser, clientId, callback);
    log('consent page and cookies: ok');
    const framed = await framing(person, crossSite, clientId, callback.redirectUri);
    log('framing: ok');
    const freshVictim = await browser.newContext();
    const posts = [
        await crossSitePost(browser, freshVictim, crossSite, clientId, callback.redirectUri, 'cross-site'),
        // The signed-in person's own browser, with its own session and CSRF cookies: the
        // same-site page gets them sent along, and must still be refused.
        await crossSitePost(browser, person, sameSite, clientId, callback.redirectUri, 'same-site')
    ];
    log('cross-site POSTs: refused');

    await freshVictim.close();
    await person.close();
    await browser.close();
    for (const s of [callback.server, crossSite.server, sameSite.server]) await close(s);
    return { client_id: clientId, chromium: chromiumVersion, consent, framing: framed, cross_site_posts: posts };
}

runMain(main);
