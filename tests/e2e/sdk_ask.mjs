// The official MCP TypeScript SDK, unmodified, meets a tool call held by `[[policy]] decision =
// "ask"`: the proxy answers with an approval link in the client's shape, the person approves
// in Chromium, and the retried call runs once.
//
//   node sdk_ask.mjs --mcp-url http://127.0.0.1:PORT/mcp --sdk v1|v2 [--login alice]
//
// v1 (`@modelcontextprotocol/sdk`, 2025-11-25): `initialize` declares URL elicitation; the held
//    `callTool(create_issue)` rejects with `UrlElicitationRequiredError` (-32042) whose URL is
//    the proxy's `/approve/<code>`; the person approves; the same call, retried, succeeds.
// v2 (`@modelcontextprotocol/client`, pinned to 2026-07-28): the held call is answered
//    `input_required` with a URL `elicitation/create` and a `requestState`; the SDK hands it to
//    our handler, which approves in Chromium; the SDK retries with the `requestState` by itself.
// Both: a call with one argument changed is held again (a new link), never forwarded.
//
// stdout: one JSON line with what was observed.

import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError, UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';

import {
    approveAuthorizationIn,
    approveHeldCall,
    BrowserOAuthProvider,
    check,
    close,
    connectAuthorizingInBrowser,
    launchChromium,
    log,
    parseArgs,
    recordingFetchInto,
    redact,
    runMain,
    startCallbackServer,
    textOf,
    withTimeout
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['mcp-url', 'sdk']);
const mcpUrl = new URL(args['mcp-url']);
const base = mcpUrl.origin;
const login = args.login ?? 'alice';
const sdk = args.sdk;
check(sdk === 'v1' || sdk === 'v2', `--sdk v1 or v2, got ${sdk}`);
const CLIENT_NAME = `SDK ${sdk} ask e2e`;
const TOOL = 'create_issue';
const RULE = 'writes-need-a-human';
const ARGS = { owner: 'acme', repo: 'site', title: 'Fix the build' };

const httpLog = [];
const recordingFetch = recordingFetchInto(httpLog);

async function connectV1(context, callback) {
    const authPage = await context.newPage();
    const provider = new BrowserOAuthProvider(
        callback.redirectUri,
        url => approveAuthorizationIn(authPage, url, { login, clientName: CLIENT_NAME, redirectUri: callback.redirectUri }),
        { clientName: CLIENT_NAME }
    );
    const client = new ClientV1({ name: 'mcp-oauth-proxy-e2e-ask', version: '1.0.0' }, { capabilities: { elicitation: { url: {} } } });
    await connectAuthorizingInBrowser({ client, mcpUrl, provider, callback, fetch: recordingFetch });
    return client;
}

async function connectV2(context, callback, onElicitation) {
    const authPage = await context.newPage();
    const provider = new BrowserOAuthProvider(
        callback.redirectUri,
        url => approveAuthorizationIn(authPage, url, { login, clientName: CLIENT_NAME, redirectUri: callback.redirectUri }),
        { clientName: CLIENT_NAME }
    );
    const client = new ClientV2(
        { name: 'mcp-oauth-proxy-e2e-ask-v2', version: '1.0.0' },
        { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } }
    );
    client.setRequestHandler('elicitation/create', async request => onElicitation(request.params ?? request));
    const transport = () => new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch: recordingFetch });
    const first = transport();
    try {
        await client.connect(first);
        throw new Error('the first connect must need authorization');
    } catch (err) {
        if (!(err instanceof UnauthorizedError)) throw err;
    }
    await withTimeout(provider.browserFlow, 60_000, 'the person to finish in the browser');
    const params = await withTimeout(callback.callback, 10_000, 'the redirect to the callback server');
    await first.finishAuth(new URLSearchParams(params));
    await client.connect(transport());
    return client;
}

/** A v1 call the proxy holds: the SDK's error, checked. */
async function heldV1(client, toolArgs) {
    try {
        const unexpected = await client.callTool({ name: TOOL, arguments: toolArgs });
        throw new Error(`${TOOL} was not held: ${JSON.stringify(unexpected)}`);
    } catch (err) {
        if (!(err instanceof McpError)) throw err;
        check(err instanceof UrlElicitationRequiredError, `UrlElicitationRequiredError, got ${err.constructor.name}`);
        check(err.code === -32042, `code -32042, got ${err.code}`);
        const e = err.elicitations[0];
        check(e.mode === 'url' && e.url.startsWith(`${base}/approve/`), `an approval link: ${redact(e.url)}`);
        return { code: err.code, mode: e.mode, url: e.url, elicitation_id: e.elicitationId, message: e.message };
    }
}

async function main() {
    const callback = await startCallbackServer();
    const browser = await launchChromium();
    log('chromium', browser.version());
    const context = await browser.newContext();
    const approvals = [];
    const approveIn = async url => {
        const page = await context.newPage();
        const shown = await approveHeldCall(page, url, { login, clientName: CLIENT_NAME, tool: TOOL, rule: RULE, shownArgument: ARGS.title });
        approvals.push({ url, ...shown });
        await page.close();
    };

    let first;
    let after;
    let changed;
    if (sdk === 'v1') {
        const client = await connectV1(context, callback);
        first = await heldV1(client, ARGS);
        await approveIn(first.url);
        const done = await client.callTool({ name: TOOL, arguments: ARGS });
        check(!done.isError, `the retried call ran: ${textOf(done)}`);
        after = { text: textOf(done), arguments: done.structuredContent?.arguments ?? null };
        changed = await heldV1(client, { ...ARGS, title: 'Something else' });
        check(changed.url !== first.url, 'a changed argument asks again, with a new link');
        await client.close();
    } else {
        const elicitations = [];
        let approveNext = true;
        const client = await connectV2(context, callback, async params => {
            elicitations.push({ mode: params.mode, url: params.url, message: params.message });
            check(params.mode === 'url' && params.url.startsWith(`${base}/approve/`), `an approval link: ${redact(params.url ?? '')}`);
            if (!approveNext) return { action: 'decline' };
            await approveIn(params.url);
            return { action: 'accept' };
        });
        const before = httpLog.length;
        const done = await client.callTool({ name: TOOL, arguments: ARGS });
        check(!done.isError, `the call ran after approval: ${textOf(done)}`);
        check(elicitations.length === 1, `one elicitation: ${JSON.stringify(elicitations)}`);
        first = { mode: elicitations[0].mode, url: elicitations[0].url, message: elicitations[0].message };
        after = {
            text: textOf(done),
            arguments: done.structuredContent?.arguments ?? null,
            calls: httpLog.slice(before).filter(e => e.rpc_method === 'tools/call').map(e => ({ status: e.status, result_type: e.result_type ?? null, has_request_state: e.has_request_state ?? null }))
        };
        // A changed argument: asked again (the handler declines this time), never forwarded.
        approveNext = false;
        let declined;
        try {
            declined = await client.callTool({ name: TOOL, arguments: { ...ARGS, title: 'Something else' } });
        } catch (err) {
            declined = { error: String(err) };
        }
        check(elicitations.length === 2, `a changed argument asks again, once: ${JSON.stringify(elicitations)}`);
        check(declined?.isError === true, `declined: a final tool error, not a loop: ${JSON.stringify(declined)}`);
        check(elicitations[1].url !== first.url, 'with a new link');
        changed = { url: elicitations[1].url, answer: declined };
        await client.close();
    }

    await context.close();
    await browser.close();
    await close(callback.server);
    return { sdk, login, client_name: CLIENT_NAME, first, approvals, after, changed, http: httpLog };
}

runMain(main);
