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
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

import {
    check,
    clickAndWait,
    launchChromium,
    log,
    parseArgs,
    randomState,
    redact,
    runMain,
    screenshot,
    startCallbackServer,
    withTimeout,
    close
} from './lib.mjs';

const args = parseArgs(process.argv.slice(2), ['mcp-url', 'screenshot']);
const mcpUrl = new URL(args['mcp-url']);
const login = args.login ?? 'alice';

/** What the SDK asked for over HTTP: method, path, status, and (for /token) the grant type. */
const httpLog = [];

/** `fetch` for the transport: records each request (never a header or body value) and passes it on. */
async function recordingFetch(input, init) {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
    const entry = { method, path: url.pathname };
    if (url.pathname === '/token' && init?.body instanceof URLSearchParams) {
        entry.grant_type = init.body.get('grant_type');
        entry.resource = init.body.get('resource');
        entry.has_code_verifier = init.body.has('code_verifier');
    }
    if (url.pathname === '/register' && typeof init?.body === 'string') {
        entry.client_name = JSON.parse(init.body).client_name;
    }
    const response = await fetch(input, init);
    entry.status = response.status;
    if (response.status === 401) {
        const www = response.headers.get('www-authenticate') ?? '';
        entry.www_authenticate_error = /error="([^"]*)"/.exec(www)?.[1] ?? null;
        entry.resource_metadata = /resource_metadata="([^"]*)"/.exec(www)?.[1] ?? null;
    }
    httpLog.push(entry);
    log(`sdk http: ${method} ${url.pathname} → ${response.status}`);
    return response;
}

/**
 * The SDK's `OAuthClientProvider`, in memory (like the SDK's own `InMemoryOAuthClientProvider`
 * example): it stores exactly what the SDK hands it.
 */
class BrowserOAuthProvider {
    constructor(redirectUrl, openInBrowser) {
        this._redirectUrl = redirectUrl;
        this._openInBrowser = openInBrowser;
        this._state = undefined;
        this.savedTokens = [];
        this.savedClients = [];
        this.authorizationUrls = [];
    }
    get redirectUrl() {
        return this._redirectUrl;
    }
    get clientMetadata() {
        return {
            client_name: 'SDK e2e',
            redirect_uris: [this._redirectUrl],
            grant_types: ['authorization_code', 'refresh_token'],
            response_types: ['code'],
            token_endpoint_auth_method: 'none'
        };
    }
    state() {
        this._state = randomState();
        return this._state;
    }
    clientInformation() {
        return this._clientInformation;
    }
    saveClientInformation(info) {
        this.savedClients.push(info.client_id);
        this._clientInformation = info;
    }
    tokens() {
        return this._tokens;
    }
    saveTokens(tokens) {
        this.savedTokens.push(tokens);
        this._tokens = tokens;
    }
    redirectToAuthorization(url) {
        this.authorizationUrls.push(url.href);
        // Not awaited: the SDK throws UnauthorizedError right after this, and the caller waits
        // for the redirect to reach the callback server (as in the SDK's example).
        this.browserFlow = this._openInBrowser(url);
        this.browserFlow.catch(() => {});
    }
    saveCodeVerifier(verifier) {
        this._codeVerifier = verifier;
    }
    codeVerifier() {
        if (!this._codeVerifier) {
            throw new Error('No code verifier saved');
        }
        return this._codeVerifier;
    }
}

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
        try {
            return await approveIn(page, authorizationUrl);
        } catch (err) {
            const body = await page.locator('body').innerText().catch(() => '(no page text)');
            log(`browser at ${redact(page.url())} when it failed; page text:\n${body}`);
            throw err;
        }
    }

    async function approveIn(page, authorizationUrl) {
        const consent = await page.goto(authorizationUrl.href, { waitUntil: 'load' });
        check(consent.status() === 200, `consent page answered ${consent.status()}`);
        const title = await page.title();
        check(title.startsWith('Review access request'), `proxy consent page expected, got title ${JSON.stringify(title)}`);
        const clientName = (await page.locator('.client-name .name').textContent())?.trim();
        check(clientName === 'SDK e2e', `consent page names the client (got ${JSON.stringify(clientName)})`);
        await screenshot(page, args.screenshot);
        await clickAndWait(page, 'button[name="decision"][value="approve"]', 'the proxy consent page');

        const pickerTitle = await page.title();
        check(pickerTitle.startsWith('Sign in to GitHub'), `GitHub account picker expected, got ${JSON.stringify(pickerTitle)}`);
        await clickAndWait(page, `button[name="login"][value="${login}"]`, "the fake GitHub's account picker");

        // GitHub's own consent screen, shown the first time this account authorizes the app.
        if ((await page.title()) === 'Authorize application') {
            await clickAndWait(page, 'button[name="decision"][value="approve"]', "GitHub's consent page");
        }
        check(
            page.url().startsWith(callback.redirectUri),
            `browser should end at the client's redirect URI, is at ${redact(page.url())}`
        );
        return { consentTitle: title, clientName };
    }

    const provider = new BrowserOAuthProvider(callback.redirectUri, personApproves);
    const client = new Client({ name: 'mcp-oauth-proxy-e2e', version: '1.0.0' }, { capabilities: {} });

    // 1. No token yet: the SDK gets 401, discovers, registers, and redirects the person.
    const transport = new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch: recordingFetch });
    let unauthorized = false;
    try {
        await client.connect(transport);
    } catch (err) {
        if (!(err instanceof UnauthorizedError)) {
            throw err;
        }
        unauthorized = true;
    }
    check(unauthorized, 'the first connect must need authorization');
    check(provider.authorizationUrls.length === 1, 'the SDK redirected to the authorization endpoint once');
    const authUrl = new URL(provider.authorizationUrls[0]);
    log('authorization URL:', redact(authUrl.href));

    // The browser flow failing (a check, a page that did not come) ends the wait at once.
    const browserResult = await withTimeout(provider.browserFlow, 60_000, 'the person to finish in the browser');
    const params = await withTimeout(callback.callback, 10_000, 'the redirect to the callback server');
    check(typeof params.code === 'string' && params.code.length > 0, 'callback has a code');
    check(params.state === provider._state, 'callback state matches the one the SDK sent');
    const expectedIssuer = mcpUrl.origin;
    check(params.iss === expectedIssuer, `callback iss ${params.iss} equals the issuer ${expectedIssuer}`);

    // 2. Exchange the code (SDK), reconnect with a new transport as in the SDK's example.
    await transport.finishAuth(params.code);
    check(provider.savedTokens.length === 1, 'finishAuth saved tokens');
    const firstTokens = provider.savedTokens[0];
    const transport2 = new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch: recordingFetch });
    await client.connect(transport2);
    const server = client.getServerVersion();
    log('connected to', JSON.stringify(server), 'protocol', transport2.protocolVersion ?? '?');

    const { tools } = await client.listTools();
    const toolNames = tools.map(t => t.name);
    check(toolNames.includes('whoami'), `whoami among the tools: ${toolNames}`);

    const textOf = result => result.content.filter(c => c.type === 'text').map(c => c.text).join('\n');
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
