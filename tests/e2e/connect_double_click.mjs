// Double-clickjacking against the proxy's connect-link page, in Debian's headless Chromium.
//
//   node connect_double_click.mjs --base http://127.0.0.1:PORT --clock http://127.0.0.1:PORT2 \
//        --allow URL --allow-noscript URL --connect URL --reconnect URL [--login alice]
//
// --clock is the test's control server for the proxy's injected clock (POST /advance?ms=N).
// The four URLs are connect links made for `login`: two `allow` links (agents the person had
// stopped), a `connect` and a `reconnect` one.
//
// The attack of the review: another site opens the link and swaps itself for it between the
// two clicks of a double-click; Chromium clicked Allow 532 ms after load and the stopped agent
// got GitHub access back. What must hold now:
// 0. The browser has no sign-in: opening a link sends it to GitHub with prompt=select_account,
//    and the (fake) GitHub shows its account picker, where the person picks their account.
// 1. On each kind's page (connect, reconnect, allow), real (trusted) double-clicks, clicks,
//    Enter and Space at load submit nothing: no POST to the link, the page stays.
// 2. The buttons arm after a second of being visible and focused (not at 0.9 s, at 1.1 s, in
//    the page's own paused time); blur or hiding disarms them at once and the wait starts over.
// 3. Then one click on Allow does it: the page says to go back to the agent.
// 4. With JavaScript off, the page offers Continue (no Allow); the confirmation page refuses
//    an Allow clicked right after it appeared (shown again, "too soon") and takes one clicked
//    after a second of server time.
//
// stdout: one JSON line with what was observed.

import {
    CONSENT_APPROVE,
    check,
    clickAndWait,
    launchChromium,
    log,
    logPageText,
    parseArgs,
    redact,
    runMain
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['base', 'clock', 'allow', 'allow-noscript', 'connect', 'reconnect']);
const base = new URL(args.base).origin;
const login = args.login ?? 'alice';
const clockControl = new URL(args.clock).origin;

/** Moves the proxy's injected clock on by `ms` (the test's control server, `--clock`). */
async function advanceServerClock(ms) {
    const resp = await fetch(`${clockControl}/advance?ms=${ms}`, { method: 'POST' });
    check(resp.ok, `clock control answered ${resp.status}`);
}

/** Counts the POSTs a page sends to the proxy's link pages (/connect/...). */
function linkPosts(page) {
    const posts = [];
    page.on('request', r => {
        const u = new URL(r.url());
        if (r.method() === 'POST' && u.origin === base && u.pathname.startsWith('/connect/')) posts.push(u.pathname);
    });
    return posts;
}

/** Every GET of GitHub's authorize endpoint a page makes, with its query. */
function authorizeRequests(page) {
    const seen = [];
    page.on('request', r => {
        const u = new URL(r.url());
        if (r.method() === 'GET' && u.pathname === '/login/oauth/authorize') {
            seen.push({ prompt: u.searchParams.get('prompt'), login: u.searchParams.get('login') });
        }
    });
    return seen;
}

async function centre(page, selector) {
    const box = await page.locator(selector).boundingBox();
    check(box, `${selector} has a box`);
    return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

/** Every way a stray gesture could reach the action button: double-click, click, forced click, Enter, Space. */
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
            label: b?.innerText?.trim() ?? null
        };
    }, CONSENT_APPROVE);
}

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

const pageNow = page => page.evaluate(() => performance.now());

async function disabledAfter(page, ms) {
    await page.clock.runFor(ms);
    return (await state(page)).disabled;
}

/**
 * The first gesture right at load, then the arming in page time. The page's clock is
 * Playwright's fake one, paused: a slow machine cannot turn "at load" into "a second later".
 */
async function heldAtLoad(page, posts, url) {
    const loadedAt = await pageNow(page);
    const atLoad = await state(page);
    await strayGestures(page);
    const strayWithinMs = (await pageNow(page)) - loadedAt;
    await sleep(300);
    const after = await state(page);
    check(strayWithinMs < 1000, `the stray gestures came within the delay (${strayWithinMs} ms)`);
    check(posts.length === 0, `no POST to the link from a gesture at load (${posts.length})`);
    check(page.url() === url, `still on the link page, at ${redact(page.url())}`);
    check(atLoad.disabled === true && after.disabled === true, 'the action button disabled at load');
    const disabledAt900 = await disabledAfter(page, 900);
    const disabledAt1100 = await disabledAfter(page, 200);
    check(disabledAt900 === true, 'still disabled 0.9 s after load');
    check(disabledAt1100 === false, 'armed 1.1 s after load');
    return {
        label: atLoad.label,
        disabled_at_load: atLoad.disabled,
        stray_within_ms: strayWithinMs,
        posts_after_stray: posts.length,
        disabled_900ms_after_load: disabledAt900,
        armed_1100ms_after_load: !disabledAt1100
    };
}

/** Opens `url` in a new page of `context` (closing none): the link's page, already signed in. */
async function openLinkPage(context, url) {
    const page = await context.newPage();
    const posts = linkPosts(page);
    const resp = await page.goto(url, { waitUntil: 'domcontentloaded' });
    check(resp.status() === 200, `the link page answered ${resp.status()}`);
    check(page.url() === url, `the link page stays at the link, at ${redact(page.url())}`);
    return { page, posts };
}

/**
 * Parts 0–3, with JavaScript, in one context whose clock is paused: the sign-in through the
 * account picker (from the connect link), each kind's page held at load, and the allow page's
 * full run (focus loss, then one click).
 */
async function withScript(browser) {
    const context = await browser.newContext();
    await context.clock.install({ time: new Date('2026-01-01T00:00:00Z') });
    await context.clock.pauseAt(new Date('2026-01-01T00:00:01Z'));

    // 0. No sign-in yet: the link sends the browser to GitHub's account picker.
    const first = await context.newPage();
    const asked = authorizeRequests(first);
    const firstPosts = linkPosts(first);
    await first.goto(args.connect, { waitUntil: 'load' });
    const pickerTitle = await first.title();
    check(pickerTitle.startsWith('Sign in to GitHub'), `GitHub's account picker expected, got ${JSON.stringify(pickerTitle)}`);
    check(asked.length === 1 && asked[0].prompt === 'select_account', `the sign-in asked GitHub for its picker: ${JSON.stringify(asked)}`);
    await clickAndWait(first, `button[name="login"][value="${login}"]`, "the fake GitHub's account picker");
    check(first.url() === args.connect, `back at the connect link after the picker, at ${redact(first.url())}`);
    const signIn = { picker_title: pickerTitle, authorize_requests: asked };

    // 1–2. The connect page (the one the sign-in returned to), then reconnect: held at load.
    const kinds = {};
    kinds.connect = await heldAtLoad(first, firstPosts, args.connect);
    await first.close();
    const reconnect = await openLinkPage(context, args.reconnect);
    kinds.reconnect = await heldAtLoad(reconnect.page, reconnect.posts, args.reconnect);
    await reconnect.page.close();

    // The allow page: held at load, then focus loss and return.
    const allow = await openLinkPage(context, args.allow);
    kinds.allow = await heldAtLoad(allow.page, allow.posts, args.allow);
    const page = allow.page;
    const focusLoss = [];
    for (const how of ['blur', 'hidden']) {
        await loseFocus(page, how);
        const lost = await state(page);
        check(lost.disabled === true, `${how}: disabled at once`);
        await regainFocus(page);
        await strayGestures(page);
        const back = await state(page);
        check(allow.posts.length === 0, `${how}: a click right after focus came back submitted nothing`);
        check(back.disabled === true, `${how}: still disabled right after focus came back`);
        const stillAt900 = await disabledAfter(page, 900);
        const armedAt1100 = !(await disabledAfter(page, 200));
        check(stillAt900, `${how}: the wait started over`);
        check(armedAt1100, `${how}: armed again 1.1 s after focus came back`);
        focusLoss.push({ how, disabled_on_loss: lost.disabled, disabled_on_return: back.disabled, disabled_900ms_after_return: stillAt900, armed_1100ms_after_return: armedAt1100 });
    }

    // 3. One deliberate click (page time flows again).
    await context.clock.resume();
    await clickAndWait(page, CONSENT_APPROVE, 'the allow link page', { sameUrl: true });
    const doneText = (await page.locator('body').innerText()).trim();
    check(doneText.includes('Go back to your agent'), `the page after Allow says to go back: ${doneText}`);
    check(page.url() === args.allow, `no redirect after Allow, at ${redact(page.url())}`);
    check(allow.posts.length === 1, `exactly one POST to the allow link (${allow.posts.length})`);
    await context.close();
    return { sign_in: signIn, kinds, focus_loss: focusLoss, allow_posts: allow.posts.length, done_text: doneText };
}

/** Part 4, with JavaScript off: its own sign-in through the picker, then the timed confirmation. */
async function withoutScript(browser) {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    const posts = linkPosts(page);
    const asked = authorizeRequests(page);
    const url = args['allow-noscript'];
    await page.goto(url, { waitUntil: 'load' });
    check((await page.title()).startsWith('Sign in to GitHub'), 'the account picker first');
    await clickAndWait(page, `button[name="login"][value="${login}"]`, "the fake GitHub's account picker");
    check(page.url() === url, `back at the link, at ${redact(page.url())}`);
    check(asked.length === 1 && asked[0].prompt === 'select_account', `prompt=select_account: ${JSON.stringify(asked)}`);

    const scriptButtonsVisible = await page.locator('#consent-actions').isVisible();
    check(!scriptButtonsVisible, 'the script-held buttons stay hidden without JavaScript');
    const cont = page.locator('button[name="decision"][value="review"]');
    check(await cont.isVisible(), 'Continue is shown without JavaScript');
    check((await page.locator(`${CONSENT_APPROVE}:visible`).count()) === 0, 'no visible Allow without JavaScript');

    await clickAndWait(page, cont, 'the link page (no JavaScript)', { sameUrl: true });
    const confirmTitle = await page.title();
    check(confirmTitle.startsWith('Confirm:'), `confirmation page, got ${confirmTitle}`);
    // Right away: the second click of a double-click.
    await clickAndWait(page, CONSENT_APPROVE, 'the confirmation page, at once', { sameUrl: true });
    const tooSoon = (await page.locator('body').innerText()).includes('That click came too soon');
    check(tooSoon, 'an Allow right after the confirmation page appeared is refused');
    // "A second later", on the server's clock (which stands still otherwise).
    await advanceServerClock(1_000);
    await clickAndWait(page, CONSENT_APPROVE, 'the confirmation page, after a second', { sameUrl: true });
    const doneText = (await page.locator('body').innerText()).trim();
    check(doneText.includes('Go back to your agent'), `done after a second: ${doneText}`);
    await context.close();
    return { script_buttons_visible: scriptButtonsVisible, confirm_title: confirmTitle, too_soon_refused: tooSoon, link_posts: posts.length, authorize_requests: asked };
}

async function main() {
    const browser = await launchChromium();
    const chromium = browser.version();
    let scripted;
    let plain;
    try {
        scripted = await withScript(browser);
        log('with JavaScript: ok');
        plain = await withoutScript(browser);
        log('without JavaScript: ok');
    } catch (err) {
        for (const ctx of browser.contexts()) {
            for (const p of ctx.pages()) await logPageText(p, 'when it failed');
        }
        throw err;
    } finally {
        await browser.close();
    }
    return { chromium, with_script: scripted, without_script: plain };
}

runMain(main);
