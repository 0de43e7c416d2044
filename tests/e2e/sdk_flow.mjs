// The official MCP TypeScript SDK, unmodified, runs the whole OAuth flow against the proxy:
// 401 → discovery (RFC 9728 from WWW-Authenticate, then RFC 8414) → dynamic registration →
// authorization in a real browser (PKCE S256, `resource`) → token → tools → refresh.
//
//   node sdk_flow.mjs --mcp-url http://127.0.0.1:PORT/mcp --screenshot ../../target/e2e/sdk-consent.png [--login alice]
//
// Only the `OAuthClientProvider` is ours (in memory, as the SDK's own example); its
// `redirectToAuthorization` opens the URL in Debian's headless Chromium and clicks through the
// proxy's consent page, the fake GitHub's account picker and GitHub's own consent. The redirect
// lands on a local HTTP server; then `transport.finishAuth(code)` and a reconnect, following
// the SDK's example `simpleOAuthClient`.
//
// stdout: one JSON line, e.g. {"ok":true,"login":"alice","tools":[...],"refreshed":true,...}

import { Client } from '@modelcontextprotocol/sdk/client/index.js';

import {
    approveAuthorizationIn,
    BrowserOAuthProvider,
    check,
    connectAuthorizingInBrowser,
    launchChromium,
    log,
    parseArgs,
    recordingFetchInto,
    runMain,
    startCallbackServer,
    textOf,
    close
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['mcp-url', 'screenshot']);
const mcpUrl = new URL(args['mcp-url']);
const login = args.login ?? 'alice';

/** What the SDK asked for over HTTP: method, path, status, and (for /token) the grant type. */
const httpLog = [];
const recordingFetch = recordingFetchInto(httpLog);

async function main() {
    const callback = await startCallbackServer();
    const browser = await launchChromium();
    log('chromium', browser.version());
    const context = await browser.newContext();
    const pages = [];

    /** A person in Chromium: approve at the proxy, pick the account at GitHub, approve there. */
    async function personApproves(authorizationUrl) {
        const page = await context.newPage();
        pages.push(page);
        return approveAuthorizationIn(page, authorizationUrl, {
            login,
            clientName: 'SDK e2e',
            redirectUri: callback.redirectUri,
            screenshotPath: args.screenshot
        });
    }

    const provider = new BrowserOAuthProvider(callback.redirectUri, personApproves);
    const client = new Client({ name: 'mcp-oauth-proxy-e2e', version: '1.0.0' }, { capabilities: {} });

    // 1–2. 401 → discovery → registration → the person in Chromium → code → token → connect.
    const { authorizationUrl: authUrl, params, browserResult } = await connectAuthorizingInBrowser({
        client,
        mcpUrl,
        provider,
        callback,
        fetch: recordingFetch
    });
    const firstTokens = provider.savedTokens[0];
    const server = client.getServerVersion();

    const { tools } = await client.listTools();
    const toolNames = tools.map(t => t.name);
    check(toolNames.includes('whoami'), `whoami among the tools: ${toolNames}`);

    const who = await client.callTool({ name: 'whoami', arguments: {} });
    const whoText = textOf(who);
    check(!who.isError, `whoami succeeded: ${whoText}`);
    check(whoText.includes(login), `whoami names ${login}: ${whoText}`);

    // 3. Refresh by the SDK's own logic: the access token stops working (garbage), the refresh
    // token stays; the next request gets 401 invalid_token and the SDK refreshes by itself.
    const before = httpLog.length;
    provider._tokens = { ...provider._tokens, access_token: 'garbage-access-token-for-the-refresh-test' };
    const who2 = await client.callTool({ name: 'whoami', arguments: {} });
    const who2Text = textOf(who2);
    check(!who2.isError && who2Text.includes(login), `whoami after the refresh: ${who2Text}`);
    const afterRefresh = httpLog.slice(before);
    check(
        afterRefresh.some(e => e.path === mcpUrl.pathname && e.status === 401 && e.www_authenticate_error === 'invalid_token'),
        'the garbage token got 401 invalid_token'
    );
    check(afterRefresh.some(e => e.path === '/token' && e.grant_type === 'refresh_token' && e.status === 200), 'the SDK refreshed');
    check(provider.savedTokens.length === 2, `the SDK saved new tokens (saved ${provider.savedTokens.length} times)`);
    const secondTokens = provider.savedTokens[1];
    const refreshRotated = !!secondTokens.refresh_token && secondTokens.refresh_token !== firstTokens.refresh_token;
    const accessChanged = secondTokens.access_token !== firstTokens.access_token;
    check(refreshRotated, 'the refresh token was rotated');
    check(accessChanged, 'a new access token was issued');

    await client.close();
    for (const page of pages) await page.close();
    await context.close();
    await browser.close();
    await close(callback.server);

    return {
        login,
        server,
        tools: toolNames,
        whoami: whoText,
        whoami_after_refresh: who2Text,
        refreshed: true,
        refresh_rotated: refreshRotated,
        client_registered: provider.savedClients.length > 0,
        client_id: provider._clientInformation?.client_id ?? null,
        consent_page: browserResult,
        authorize_request: {
            path: authUrl.pathname,
            response_type: authUrl.searchParams.get('response_type'),
            code_challenge_method: authUrl.searchParams.get('code_challenge_method'),
            has_code_challenge: authUrl.searchParams.has('code_challenge'),
            resource: authUrl.searchParams.get('resource'),
            scope: authUrl.searchParams.get('scope'),
            redirect_uri: authUrl.searchParams.get('redirect_uri'),
            has_state: authUrl.searchParams.has('state')
        },
        callback_iss: params.iss,
        token_type: firstTokens.token_type,
        scope: firstTokens.scope ?? null,
        http: httpLog
    };
}

runMain(main);
