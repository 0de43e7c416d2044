// The official MCP TypeScript SDK v2 (`@modelcontextprotocol/client`, the first SDK on
// 2026-07-28), unmodified and pinned to 2026-07-28, against the proxy:
//
//   node sdk_v2_flow.mjs --mcp-url http://127.0.0.1:PORT/mcp [--login alice]
//
// 1. `client.connect` (pinned: the connect-time `server/discover` must offer 2026-07-28) gets
//    401, discovers (RFC 9728, RFC 8414), registers, and redirects the person, who approves in
//    Chromium; `transport.finishAuth(code)`; a new transport connects.
// 2. `tools/list` and `tools/call whoami` through /mcp, stateless (no session id).
// 3. In the same browser (signed in to the proxy by that authorization), the person stops this
//    agent from using GitHub on /account.
// 4. `callTool(whoami)`: the proxy answers `input_required` with a URL `elicitation/create` and
//    a `requestState`; the SDK hands the request to our `elicitation/create` handler, which
//    opens the link in Chromium and clicks Allow, then the SDK retries the call with the
//    `requestState` by itself and gets the tool's result.
//
// stdout: one JSON line with what was observed; `http` lists every request the SDK made
// (method, path, status, JSON-RPC method, the mirrored 2026-07-28 headers it sent).

import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';

import {
    approveAuthorizationIn,
    BrowserOAuthProvider,
    check,
    clickAndWait,
    close,
    launchChromium,
    log,
    logPageText,
    openLink,
    parseArgs,
    redact,
    runMain,
    startCallbackServer,
    textOf,
    waitForConsentButtons,
    withTimeout
} from './lib.mjs';

const PINNED = '2026-07-28';
const args = parseArgs(process.argv.slice(2), ['mcp-url']);
const mcpUrl = new URL(args['mcp-url']);
const base = mcpUrl.origin;
const login = args.login ?? 'alice';
const CLIENT_NAME = 'SDK v2 e2e';

/** What the SDK sent and got: never a header value that is a credential. */
const httpLog = [];

function headerOf(init, name) {
    const h = init?.headers;
    if (!h) return null;
    if (h instanceof Headers) return h.get(name);
    const key = Object.keys(h).find(k => k.toLowerCase() === name);
    return key ? h[key] : null;
}

async function recordingFetch(input, init) {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
    const entry = { method, path: url.pathname };
    if (url.pathname === '/token' && init?.body instanceof URLSearchParams) {
        entry.grant_type = init.body.get('grant_type');
        entry.resource = init.body.get('resource');
    }
    if (url.pathname === mcpUrl.pathname && typeof init?.body === 'string') {
        const rpc = JSON.parse(init.body);
        entry.rpc_method = rpc.method ?? null;
        entry.tool = rpc.params?.name ?? null;
        entry.has_request_state = typeof rpc.params?.requestState === 'string';
        entry.meta_version = rpc.params?._meta?.['io.modelcontextprotocol/protocolVersion'] ?? null;
        entry.declares_url_elicitation =
            rpc.params?._meta?.['io.modelcontextprotocol/clientCapabilities']?.elicitation?.url !== undefined;
        entry.mcp_method = headerOf(init, 'mcp-method');
        entry.mcp_name = headerOf(init, 'mcp-name');
        entry.protocol_version = headerOf(init, 'mcp-protocol-version');
        entry.session_id = headerOf(init, 'mcp-session-id');
    }
    const response = await fetch(input, init);
    entry.status = response.status;
    if (response.status === 401) {
        const www = response.headers.get('www-authenticate') ?? '';
        entry.www_authenticate_error = /error="([^"]*)"/.exec(www)?.[1] ?? null;
    }
    if (entry.rpc_method && (response.headers.get('content-type') ?? '').startsWith('application/json')) {
        const answer = JSON.parse(await response.clone().text());
        entry.result_type = answer.result?.resultType ?? null;
        entry.rpc_error_code = answer.error?.code ?? null;
    }
    httpLog.push(entry);
    log(`sdk http: ${method} ${url.pathname}${entry.rpc_method ? ` ${entry.rpc_method}` : ''} → ${response.status}${entry.result_type ? ` (${entry.result_type})` : ''}`);
    return response;
}

function newTransport(provider) {
    return new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch: recordingFetch });
}

/** The person stops the agent `clientId` from using GitHub on /account. */
async function withdrawOnAccountPage(page, clientId) {
    const resp = await page.goto(`${base}/account`, { waitUntil: 'load' });
    check(resp.status() === 200, `/account answered ${resp.status()}`);
    const rowOf = () => page.locator('li.consent').filter({ has: page.locator('code', { hasText: clientId }) });
    check((await rowOf().count()) === 1, `one row for client ${clientId} on /account`);
    await clickAndWait(page, rowOf().locator('form[action="/account/withdraw"] button[type="submit"]'), 'the account page');
    const rowAfter = await rowOf().innerText();
    check(rowAfter.includes('May not use your GitHub account'), `the agent may not use GitHub after: ${rowAfter}`);
}

/**
 * Opens the connect link in the person's browser (signing in through GitHub's account picker
 * when it asks), waits for its held buttons as a person would, and clicks Allow.
 */
async function completeLink(page, linkUrl) {
    try {
        const opened = await openLink(page, linkUrl, login);
        check(opened.status === 200, `the link page answered ${opened.status}`);
        const agentShown = (await page.locator('.client-name .name').innerText()).trim();
        check(agentShown === CLIENT_NAME, `the page names the agent: ${JSON.stringify(agentShown)}`);
        await waitForConsentButtons(page);
        await clickAndWait(page, 'button[name="decision"][value="approve"]', 'the connect link page', { sameUrl: true });
        const doneText = (await page.locator('body').innerText()).trim();
        check(doneText.includes('Go back to your agent'), `the page after Allow says to go back: ${doneText}`);
        check(page.url() === linkUrl, `no redirect after Allow, at ${redact(page.url())}`);
        return { agent_shown: agentShown, done_text: doneText };
    } catch (err) {
        await logPageText(page, 'when completing the link failed');
        throw err;
    }
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
    const client = new Client(
        { name: 'mcp-oauth-proxy-e2e-v2', version: '1.0.0' },
        { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode: { pin: PINNED } } }
    );
    const elicitations = [];
    let linkPage;
    client.setRequestHandler('elicitation/create', async request => {
        const params = request.params ?? request;
        elicitations.push({ mode: params.mode, url: params.url, message: params.message, elicitationId: params.elicitationId });
        log('elicitation:', params.mode, redact(params.url ?? ''));
        check(params.mode === 'url', `a URL elicitation, got ${params.mode}`);
        check(typeof params.url === 'string' && params.url.startsWith(`${base}/connect/`), `a connect link of the proxy: ${redact(params.url ?? '')}`);
        linkPage = await context.newPage();
        const done = await completeLink(linkPage, params.url);
        elicitations[elicitations.length - 1].completed = done;
        return { action: 'accept' };
    });

    // 1. 401 → discovery → registration → the person in Chromium → code → token → connect.
    const first = newTransport(provider);
    let unauthorized = false;
    try {
        await client.connect(first);
    } catch (err) {
        if (!(err instanceof UnauthorizedError)) throw err;
        unauthorized = true;
    }
    check(unauthorized, 'the first connect must need authorization');
    check(provider.authorizationUrls.length === 1, 'the SDK redirected to the authorization endpoint once');
    const authorizationUrl = new URL(provider.authorizationUrls[0]);
    await withTimeout(provider.browserFlow, 60_000, 'the person to finish in the browser');
    const params = await withTimeout(callback.callback, 10_000, 'the redirect to the callback server');
    check(typeof params.code === 'string' && params.code.length > 0, 'callback has a code');
    check(params.iss === base, `callback iss ${params.iss} equals the issuer ${base}`);
    // v2 takes the whole callback (RFC 9207: it checks `iss` against the discovered issuer).
    await first.finishAuth(new URLSearchParams(params));
    check(provider.savedTokens.length === 1, 'finishAuth saved tokens');
    await client.connect(newTransport(provider));
    const server = client.getServerVersion() ?? null;
    log('connected to', JSON.stringify(server));

    // 2. Tools, stateless.
    const { tools } = await client.listTools();
    const toolNames = tools.map(t => t.name);
    check(toolNames.includes('whoami'), `whoami among the tools: ${toolNames}`);
    const who = await client.callTool({ name: 'whoami', arguments: {} });
    const whoText = textOf(who);
    check(!who.isError && whoText.includes(login), `whoami names ${login}: ${whoText}`);

    // 3. The person stops this agent from using GitHub.
    const clientId = provider._clientInformation?.client_id;
    check(typeof clientId === 'string', 'the SDK registered a client');
    const accountPage = await context.newPage();
    try {
        await withdrawOnAccountPage(accountPage, clientId);
    } catch (err) {
        await logPageText(accountPage, 'when withdrawing failed');
        throw err;
    }

    // 4. input_required → our handler completes the link → the SDK's own retry succeeds.
    const before = httpLog.length;
    const again = await client.callTool({ name: 'whoami', arguments: {} });
    const againText = textOf(again);
    check(!again.isError && againText.includes(login), `whoami after the link: ${againText}`);
    check(elicitations.length === 1 && elicitations[0].completed, `one elicitation, completed: ${JSON.stringify(elicitations)}`);
    const calls = httpLog.slice(before).filter(e => e.rpc_method === 'tools/call');

    await client.close();
    await context.close();
    await browser.close();
    await close(callback.server);

    return {
        login,
        client_id: clientId,
        server,
        tools: toolNames,
        whoami: whoText,
        whoami_after_link: againText,
        authorize_resource: authorizationUrl.searchParams.get('resource'),
        callback_iss: params.iss,
        elicitation: elicitations[0],
        calls_after_withdrawal: calls,
        http: httpLog
    };
}

runMain(main);
