// Double-clickjacking against the proxy's consent page, in Debian's headless Chromium.
//
//   node consent_double_click.mjs --base http://127.0.0.1:PORT --clock http://127.0.0.1:PORT2 [--login alice]
//
// --clock is the test's control server for the proxy's injected clock (POST /advance?ms=N).
//
// The attack: another site swaps itself for the consent page between the two clicks of a
// double-click, so the second click lands on Approve. What the page must do:
// 1. At load, real (trusted) double-clicks and clicks on Approve, and Enter, submit nothing:
//    no POST to /consent, the page stays where it is.
// 2. Once the page has been visible and focused for a second, Approve is enabled. When the page
//    loses focus or is hidden (the browser's answers to `document.hasFocus()` and
//    `visibilityState` are replaced, and the events fired, as a window switch would), the
//    buttons are disabled at once, and after focus comes back the wait starts over: a click
//    right then does nothing either.
// 3. After the wait, one click approves: the fake GitHub, then the client's redirect URI.
// 4. With JavaScript off, the page offers Continue (no Approve); the confirmation page it leads
//    to refuses an Approve clicked right after it appeared (shown again, "too soon"), and takes
//    one clicked after a second. Back from GitHub, nothing kept the approving page's value, so
//    the finish page asks again, under the same rule.
//
// stdout: one JSON line with what was observed (counts of POSTs to /consent at each step).

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
    redact,
    runMain,
    waitForConsentButtons,
    waitForRedirectUri,
    withTimeout
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['base', 'clock']);
const base = new URL(args.base).origin;
const login = args.login ?? 'alice';
const clockControl = args.clock ? new URL(args.clock).origin : null;

/** Moves the proxy's injected clock on by `ms` (the test's control server, `--clock`). */
async function advanceServerClock(ms) {
    check(clockControl, '--clock is needed to move the server clock');
    const resp = await fetch(`${clockControl}/advance?ms=${ms}`, { method: 'POST' });
    check(resp.ok, `clock control answered ${resp.status}`);
}

async function register(redirectUri) {
    const resp = await fetch(`${base}/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
            client_name: 'Double Click E2E',
            redirect_uris: [redirectUri],
            token_endpoint_auth_method: 'none',
            grant_types: ['authorization_code', 'refresh_token']
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

/** Counts the POSTs to /consent a page sends. */
function consentPosts(page) {
    const posts = [];
    page.on('request', r => {
        if (r.method() === 'POST' && new URL(r.url()).pathname === '/consent') posts.push(r.url());
    });
    return posts;
}

/** Where a button's centre is (for trusted mouse input at that point). */
async function centre(page, selector) {
    const box = await page.locator(selector).boundingBox();
    check(box, `${selector} has a box`);
    return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

/** Every way a stray gesture could reach Approve: double-click, click, forced click, Enter. */
async function strayGestures(page) {
    const { x, y } = await centre(page, CONSENT_APPROVE);
    await page.mouse.dblclick(x, y);
    await page.mouse.click(x, y);
    await page.locator(CONSENT_APPROVE).click({ force: true, timeout: 2_000 });
    await page.keyboard.press('Enter');
    await page.keyboard.press('Space');
}

async function state(page) {
    return page.evaluate(sel => {
        const b = document.querySelector(sel);
        return {
            armed: document.getElementById('consent-decision')?.getAttribute('data-armed') ?? null,
            disabled: b?.disabled ?? null,
            focused: document.hasFocus(),
            visibility: document.visibilityState
        };
    }, CONSENT_APPROVE);
}

/** As the browser reports a window switch: `hasFocus()` false (or hidden), then the event. */
async function loseFocus(page, how) {
    await page.evaluate(how => {
        if (how === 'blur') {
            document.hasFocus = () => false;
            window.dispatchEvent(new Event('blur'));
        } else {
            Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
            document.dispatchEvent(new Event('visibilitychange'));
        }
    }, how);
}

async function regainFocus(page) {
    await page.evaluate(() => {
        delete document.hasFocus;
        delete document.visibilityState;
        document.dispatchEvent(new Event('visibilitychange'));
        window.dispatchEvent(new Event('focus'));
    });
}

/** Page time, as the page's own script reads it (`performance.now()`). */
async function pageNow(page) {
    return page.evaluate(() => performance.now());
}

/**
 * Advances the page's paused clock by `ms` (its interval timers fire on the way) and returns
 * whether Approve is still disabled then.
 */
async function disabledAfter(page, ms) {
    await page.clock.runFor(ms);
    return (await state(page)).disabled;
}

/**
 * Parts 1–3, with JavaScript. The page's clock is Playwright's fake one, paused: the page's
 * second of being seen is measured in page time, which moves only when this script says so, so
 * a slow, loaded machine cannot turn "a gesture right at load" into one a second later.
 */
async function withScript(browser, clientId, callback) {
    const context = await browser.newContext();
    await context.clock.install({ time: new Date('2026-01-01T00:00:00Z') });
    await context.clock.pauseAt(new Date('2026-01-01T00:00:01Z'));
    const page = await context.newPage();
    const posts = consentPosts(page);
    const url = authorizeUrl(clientId, callback.redirectUri);

    // 1. The first gesture, right at load (page time stands still meanwhile).
    await page.goto(url, { waitUntil: 'domcontentloaded' });
    const loadedAt = await pageNow(page);
    const atLoad = await state(page);
    await strayGestures(page);
    const strayWithinMs = (await pageNow(page)) - loadedAt;
    await sleep(300);
    const afterStray = { posts: posts.length, url: page.url(), ...(await state(page)) };
    log(`stray gestures within ${strayWithinMs} ms of load (page time): ${JSON.stringify(afterStray)}`);
    check(strayWithinMs < 1000, `the stray gestures came within the delay (${strayWithinMs} ms)`);
    check(afterStray.posts === 0, 'no POST to /consent from a gesture at load');
    check(new URL(afterStray.url).pathname === '/authorize', `still on the consent page, at ${redact(afterStray.url)}`);
    check(atLoad.disabled === true && afterStray.disabled === true, 'Approve disabled at load');

    // 2. Armed after a second of being visible and focused (not at 0.9 s, at 1.1 s); disarmed
    //    by blur or hiding, and the wait starts over.
    const disabledAt900 = await disabledAfter(page, 900);
    const disabledAt1100 = await disabledAfter(page, 200);
    check(disabledAt900 === true, 'still disabled 0.9 s after load');
    check(disabledAt1100 === false, 'armed 1.1 s after load');
    const sinceLoad = (await pageNow(page)) - loadedAt;
    const focusLoss = [];
    for (const how of ['blur', 'hidden']) {
        await loseFocus(page, how);
        const lost = await state(page);
        check(lost.disabled === true, `${how}: Approve disabled at once`);
        await regainFocus(page);
        await strayGestures(page);
        const back = await state(page);
        check(posts.length === 0, `${how}: a click right after focus came back submitted nothing`);
        check(back.disabled === true, `${how}: still disabled right after focus came back`);
        const stillAt900 = await disabledAfter(page, 900);
        const armedAt1100 = !(await disabledAfter(page, 200));
        check(stillAt900, `${how}: the wait started over (still disabled 0.9 s after focus came back)`);
        check(armedAt1100, `${how}: armed again 1.1 s after focus came back`);
        focusLoss.push({ how, disabled_on_loss: lost.disabled, disabled_on_return: back.disabled, disabled_900ms_after_return: stillAt900, armed_1100ms_after_return: armedAt1100 });
    }

    // 3. Now one click approves (page time flows again for the rest of the flow).
    await context.clock.resume();
    await clickAndWait(page, CONSENT_APPROVE, 'the proxy consent page');
    check((await page.title()).startsWith('Sign in to GitHub'), 'Approve led to the GitHub account picker');
    check(posts.length === 1, `exactly one POST to /consent (${posts.length})`);
    await finishAtGitHub(page, callback);
    await context.close();
    return {
        at_load: atLoad,
        stray_within_ms: strayWithinMs,
        after_stray: { posts: afterStray.posts, on_consent_page: true, disabled: afterStray.disabled },
        disabled_900ms_after_load: disabledAt900,
        armed_1100ms_after_load: !disabledAt1100,
        armed_after_ms_since_load: sinceLoad,
        focus_loss: focusLoss,
        consent_posts: posts.length
    };
}

/**
 * GitHub's account picker and consent, then back through the proxy's callback. With JavaScript
 * the finish page goes on by itself; without (`noScript`), it stays and asks: an Approve right
 * away is refused ("too soon"), one a second later (on the server's clock) goes through.
 * Returns whether the finish page refused the early Approve (null with JavaScript).
 */
async function finishAtGitHub(page, callback, { noScript = false } = {}) {
    await clickAndWait(page, `button[name="login"][value="${login}"]`, "the fake GitHub's account picker");
    if ((await page.title()) === 'Authorize application') {
        await clickAndWait(page, 'button[name="decision"][value="approve"]', "GitHub's consent page");
    }
    let finishTooSoon = null;
    if (noScript) {
        check((await page.title()).startsWith('Finish authorization'), `finish page expected, got ${await page.title()}`);
        await clickAndWait(page, CONSENT_APPROVE, 'the finish page, at once', { sameUrl: true });
        finishTooSoon = (await page.locator('body').innerText()).includes('That click came too soon');
        await advanceServerClock(1_000);
        await clickAndWait(page, CONSENT_APPROVE, 'the finish page, after a second');
    }
    await waitForRedirectUri(page, callback.redirectUri);
    check(page.url().startsWith(callback.redirectUri), `ended at the redirect URI, at ${redact(page.url())}`);
    const params = await withTimeout(callback.next(), 10_000, 'the redirect to the callback server');
    check(typeof params.code === 'string', 'a code reached the client');
    return finishTooSoon;
}

/** Part 4, with JavaScript off. */
async function withoutScript(browser, clientId, callback) {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    const posts = consentPosts(page);
    await page.goto(authorizeUrl(clientId, callback.redirectUri), { waitUntil: 'load' });
    const scriptButtonsVisible = await page.locator('#consent-actions').isVisible();
    check(!scriptButtonsVisible, 'the script-enabled buttons stay hidden without JavaScript');
    const cont = page.locator('button[name="decision"][value="review"]');
    check(await cont.isVisible(), 'Continue is shown without JavaScript');

    await clickAndWait(page, cont, 'the consent page (no JavaScript)', { sameUrl: true });
    check((await page.title()).startsWith('Confirm access request'), `confirmation page, got ${await page.title()}`);
    // Right away: the second click of a double-click.
    await clickAndWait(page, CONSENT_APPROVE, 'the confirmation page, at once', { sameUrl: true });
    const tooSoon = (await page.locator('body').innerText()).includes('That click came too soon');
    check(tooSoon, 'an Approve right after the confirmation page appeared is refused');
    check(!(await page.title()).startsWith('Sign in to GitHub'), 'not sent to GitHub');
    // "A second later", on the server's clock (which stands still otherwise).
    await advanceServerClock(1_000);
    await clickAndWait(page, CONSENT_APPROVE, 'the confirmation page, after a second');
    check((await page.title()).startsWith('Sign in to GitHub'), `GitHub account picker expected, got ${await page.title()}`);
    const finishTooSoon = await finishAtGitHub(page, callback, { noScript: true });
    await context.close();
    return {
        script_buttons_visible: scriptButtonsVisible,
        too_soon_refused: tooSoon,
        finish_too_soon_refused: finishTooSoon,
        consent_posts: posts.length
    };
}

/** A callback server whose `next()` resolves with each redirect's parameters in turn. */
async function callbacks() {
    const waiting = [];
    const arrived = [];
    const srv = await listen((req, res) => {
        const u = new URL(req.url ?? '/', 'http://127.0.0.1');
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end('<!DOCTYPE html><title>e2e callback</title><p>done</p>');
        if (u.pathname !== '/callback') return;
        const params = Object.fromEntries(u.searchParams);
        const w = waiting.shift();
        if (w) w(params);
        else arrived.push(params);
    });
    return {
        ...srv,
        redirectUri: `${srv.origin}/callback`,
        next: () => (arrived.length ? Promise.resolve(arrived.shift()) : new Promise(r => waiting.push(r)))
    };
}

async function main() {
    const callback = await callbacks();
    const clientId = await register(callback.redirectUri);
    const browser = await launchChromium();
    const chromium = browser.version();
    const scripted = await withScript(browser, clientId, callback);
    log('with JavaScript: ok');
    const noScript = await withoutScript(browser, clientId, callback);
    log('without JavaScript: ok');
    await browser.close();
    await close(callback.server);
    return { chromium, client_id: clientId, with_script: scripted, without_script: noScript };
}

runMain(main);
