// The official MCP TypeScript SDK, unmodified, meets a connect link: a `tools/call` answered with
// the URL elicitation (JSON-RPC error -32042), the link completed in Chromium, and the retried
// call succeeding.
//
//   node sdk_connect_link.mjs --mcp-url http://127.0.0.1:PORT/mcp \
//        --screenshot ../../target/e2e/connect-link.png \
//        --done-screenshot ../../target/e2e/connect-link-done.png [--login alice]
//
// 1. The SDK client declares URL-mode elicitation (`capabilities.elicitation.url`), authorizes
//    with its own OAuth code (the person approves in Chromium, as in sdk_flow.mjs) and connects:
//    `initialize` carries the capability, and the proxy remembers it for the session.
// 2. In the same browser (signed in to the proxy by that authorization), the person opens
//    /account and stops this agent from using GitHub ("Stop using GitHub").
// 3. `callTool(whoami)`: the SDK rejects with its `UrlElicitationRequiredError` (-32042) carrying
//    the proxy's `data.elicitations[0]` = {mode:"url", elicitationId, url, message}.
// 4. The person opens that URL in the same browser. The authorization's sign-in was silent at
//    GitHub, so the link first sends them through GitHub's account picker
//    (`prompt=select_account`), where they pick their account and are sent back. They wait for
//    the held buttons, click Allow, and see "Go back to your agent" on the same URL (no
//    redirect anywhere).
// 5. `callTool(whoami)` again: it succeeds.
//
// The connection must exist before step 2: once the agent may not use GitHub, the proxy answers
// every request of it (`initialize` included) with the link instead of forwarding it, and the
// 2025-11-25 session remembers the URL-elicitation capability only from an `initialize` that
// reached the backend.
//
// stdout: one JSON line, e.g. {"ok":true,"elicitation":{"code":-32042,...},"whoami_after":"...",...}

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ErrorCode, McpError, UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';

import {
    approveAuthorizationIn,
    BrowserOAuthProvider,
    check,
    clickAndWait,
    close,
    connectAuthorizingInBrowser,
    launchChromium,
    log,
    logPageText,
    openLink,
    parseArgs,
    recordingFetchInto,
    redact,
    runMain,
    screenshot,
    startCallbackServer,
    textOf,
    waitForConsentButtons
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['mcp-url', 'screenshot', 'done-screenshot']);
const mcpUrl = new URL(args['mcp-url']);
const base = mcpUrl.origin;
const login = args.login ?? 'alice';
const CLIENT_NAME = 'SDK connect-link e2e';

const httpLog = [];
const recordingFetch = recordingFetchInto(httpLog);

/** Runs `step(page)`; on failure logs the page's text first. */
async function onPage(page, what, step) {
    try {
        return await step(page);
    } catch (err) {
        await logPageText(page, `when ${what} failed`);
        throw err;
    }
}

/** The person stops the agent `clientId` from using GitHub on /account. */
async function withdrawOnAccountPage(page, clientId) {
    const resp = await page.goto(`${base}/account`, { waitUntil: 'load' });
    check(resp.status() === 200, `/account answered ${resp.status()}`);
    const title = await page.title();
    const signedIn = (await page.locator('.signed-in').innerText()).trim();
    check(signedIn.includes(`@${login}`), `the account page is ${login}'s: ${JSON.stringify(signedIn)}`);
    const rowOf = () => page.locator('li.consent').filter({ has: page.locator('code', { hasText: clientId }) });
    check((await rowOf().count()) === 1, `one row for client ${clientId} on /account`);
    const before = await rowOf().innerText();
    check(before.includes(CLIENT_NAME), `the row names the client: ${before}`);
    check(before.includes('May use your GitHub account'), `the agent may use GitHub before: ${before}`);
    await clickAndWait(page, rowOf().locator('form[action="/account/withdraw"] button[type="submit"]'), 'the account page');
    const after = new URL(page.url());
    check(after.pathname === '/account', `back on /account, at ${redact(page.url())}`);
    const notice = (await page.locator('.notice').innerText().catch(() => '')).trim();
    const rowAfter = await rowOf().innerText();
    check(rowAfter.includes('May not use your GitHub account'), `the agent may not use GitHub after: ${rowAfter}`);
    return { title, notice, redirected_to: `${after.pathname}${after.search}` };
}

/**
 * Opens the connect link (through GitHub's account picker, which the link asks for), checks
 * the page, waits for its held buttons, clicks Allow, checks the page after it.
 */
async function completeLink(page, linkUrl) {
    const opened = await openLink(page, linkUrl, login);
    check(opened.status === 200, `the link page answered ${opened.status}`);
    check(opened.signed_in_through_picker, 'the silent sign-in of the authorization did not count: the link asked for the picker');
    check(page.url() === linkUrl, `the link page is at the link after the sign-in, at ${redact(page.url())}`);
    const title = await page.title();
    const heading = (await page.locator('h1').innerText()).trim();
    const agentShown = (await page.locator('.client-name .name').innerText()).trim();
    const text = await page.locator('body').innerText();
    const approve = page.locator('button[name="decision"][value="approve"]');
    check((await approve.count()) === 1, 'one approve button');
    const approveLabel = (await approve.innerText()).trim();
    check(approveLabel === 'Allow', `the approve button says Allow, says ${JSON.stringify(approveLabel)}`);
    check(agentShown === CLIENT_NAME, `the page names the agent: ${JSON.stringify(agentShown)}`);
    check(text.includes(`@${login}`), `the page names the signed-in account @${login}`);
    const armedAfterMs = await waitForConsentButtons(page);
    await screenshot(page, args.screenshot);

    await clickAndWait(page, approve, 'the connect link page', { sameUrl: true });
    const doneTitle = await page.title();
    const doneText = (await page.locator('body').innerText()).trim();
    check(doneText.includes('Go back to your agent'), `the page after Allow says to go back to the agent: ${doneText}`);
    check(page.url() === linkUrl, `no redirect after Allow, at ${redact(page.url())}`);
    await screenshot(page, args['done-screenshot']);
    return {
        status: opened.status,
        signed_in_through_picker: opened.signed_in_through_picker,
        sign_in_prompts: opened.sign_in_prompts,
        armed_after_ms: armedAfterMs,
        title,
        heading,
        agent_shown: agentShown,
        approve_label: approveLabel,
        done_title: doneTitle,
        done_text: doneText,
        done_url_is_link: page.url() === linkUrl
    };
}

async function main() {
    const callback = await startCallbackServer();
    const browser = await launchChromium();
    log('chromium', browser.version());
    const context = await browser.newContext();
    const authPage = await context.newPage();

    const provider = new BrowserOAuthProvider(
        callback.redirectUri,
        url => approveAuthorizationIn(authPage, url, { login, clientName: CLIENT_NAME, redirectUri: callback.redirectUri }),
        { clientName: CLIENT_NAME }
    );
    // URL-mode elicitation, declared as SDK 1.32.2 types it (ClientCapabilities.elicitation.url).
    const capabilities = { elicitation: { url: {} } };
    const client = new Client({ name: 'mcp-oauth-proxy-e2e-connect-link', version: '1.0.0' }, { capabilities });

    // 1. Authorize (the person approves in Chromium) and connect: `initialize` declares it.
    const { params } = await connectAuthorizingInBrowser({ client, mcpUrl, provider, callback, fetch: recordingFetch });
    const clientId = provider._clientInformation?.client_id;
    check(typeof clientId === 'string', 'the SDK registered a client');
    const init = httpLog.filter(e => e.rpc_method === 'initialize' && e.status === 200);
    check(init.length === 1, `one initialize answered 200: ${JSON.stringify(httpLog)}`);
    check(init[0].capabilities?.elicitation?.url !== undefined, `initialize declared elicitation.url: ${JSON.stringify(init[0].capabilities)}`);

    // 2. The person stops this agent from using GitHub.
    const accountPage = await context.newPage();
    const account = await onPage(accountPage, 'withdrawing on /account', p => withdrawOnAccountPage(p, clientId));
    log('withdrawn on /account:', account.notice);

    // 3. The tool call is refused with the URL elicitation.
    const before = httpLog.length;
    let refusal;
    try {
        const unexpected = await client.callTool({ name: 'whoami', arguments: {} });
        throw new Error(`whoami was not refused: ${JSON.stringify(unexpected)}`);
    } catch (err) {
        if (!(err instanceof McpError)) {
            throw err;
        }
        refusal = err;
    }
    log('refused:', refusal.constructor.name, refusal.code, refusal.message);
    check(refusal instanceof UrlElicitationRequiredError, `the SDK raised UrlElicitationRequiredError, raised ${refusal.constructor.name}`);
    check(refusal.code === ErrorCode.UrlElicitationRequired && refusal.code === -32042, `code -32042, got ${refusal.code}`);
    const elicitations = refusal.elicitations;
    check(elicitations.length === 1, `one elicitation: ${JSON.stringify(elicitations)}`);
    const e = elicitations[0];
    check(e.mode === 'url', `mode url: ${e.mode}`);
    check(typeof e.elicitationId === 'string' && e.elicitationId.length > 0, 'an elicitationId');
    check(typeof e.url === 'string' && e.url.startsWith(`${base}/connect/`), `the URL is a connect link of the proxy: ${redact(e.url)}`);
    check(e.url.length > `${base}/connect/`.length + 20, 'the link has a long code');
    check(typeof e.message === 'string' && e.message.includes(CLIENT_NAME), `the message names the agent: ${e.message}`);
    const refusedOnWire = httpLog.slice(before).filter(x => x.rpc_method === 'tools/call');
    check(
        refusedOnWire.length === 1 && refusedOnWire[0].status === 200 && refusedOnWire[0].rpc_error_code === -32042,
        `one tools/call answered 200 with JSON-RPC error -32042 on the wire: ${JSON.stringify(refusedOnWire)}`
    );

    // 4. The person completes the link in the same browser.
    const linkPage = await context.newPage();
    const link = await onPage(linkPage, 'completing the link', p => completeLink(p, e.url));
    log('link completed:', link.done_text);

    // 5. The retried call succeeds.
    const who = await client.callTool({ name: 'whoami', arguments: {} });
    const whoText = textOf(who);
    check(!who.isError, `whoami succeeded after the link: ${whoText}`);
    check(whoText.includes(login), `whoami names ${login}: ${whoText}`);

    await client.close();
    await context.close();
    await browser.close();
    await close(callback.server);

    return {
        login,
        client_id: clientId,
        client_name: CLIENT_NAME,
        callback_iss: params.iss,
        declared_capabilities: init[0].capabilities,
        protocol_version: init[0].protocol_version,
        account,
        elicitation: {
            error_class: refusal.constructor.name,
            code: refusal.code,
            message: refusal.message,
            count: elicitations.length,
            mode: e.mode,
            elicitation_id: e.elicitationId,
            url: e.url,
            text: e.message
        },
        link,
        whoami_after: whoText,
        http: httpLog
    };
}

runMain(main);
