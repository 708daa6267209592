// A real MCP client on the official TypeScript SDK, driven by a Go test
// (test/e2e/mcp_test.go): it connects to alpd's /mcp, completes the OAuth
// flow itself (RFC 9728 discovery, client registration, authorization code
// with PKCE S256 and a resource indicator), lists the tools, then calls
// what the test asks for.
//
//   node mcp_client.mjs <mcp url>
//
// It talks JSON Lines. On stdout it writes events:
//   {"event":"authorize","url":...}      open this URL in the person's browser; the
//                                        browser ends at this script's loopback redirect URI
//   {"event":"connected","instructions":...,"server":...,"protocol":...}
//   {"event":"tools","tools":[...]}
//   {"event":"result","id":...,"result":...} / {"event":"error","id":...,"message":...}
//   {"event":"resource_updated","uri":...}   {"event":"log","params":...}
// On stdin it reads commands, one per line:
//   {"id":1,"tool":"send_message","args":{...}}
//   {"id":2,"subscribe":"alp://inbox"}     {"id":3,"read":"alp://inbox"}
//   {"id":4,"setLevel":"info"}             {"id":5,"quit":true}
import http from 'node:http';
import readline from 'node:readline';
import { randomBytes } from 'node:crypto';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import {
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fail = (msg) => {
  process.stderr.write(`mcp_client: ${msg}\n`);
  process.exit(1);
};

if (process.argv.length < 3) fail('usage: node mcp_client.mjs <mcp url>');
const serverURL = new URL(process.argv[2]);

// The redirect URI: a loopback listener that receives the authorization
// code (RFC 8252 §7.3), as a desktop MCP client does.
let gotCode;
const codeArrived = new Promise((resolve) => (gotCode = resolve));
const callback = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://127.0.0.1');
  if (u.pathname !== '/callback') {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'Content-Type': 'text/plain' }).end('You can close this window.');
  gotCode({ code: u.searchParams.get('code'), error: u.searchParams.get('error'), state: u.searchParams.get('state') });
});
await new Promise((resolve) => callback.listen(0, '127.0.0.1', resolve));
const redirectUrl = `http://127.0.0.1:${callback.address().port}/callback`;

// An OAuth client that keeps everything in memory.
class Provider {
  constructor() {
    this.expectedState = randomBytes(16).toString('hex');
  }
  get redirectUrl() {
    return redirectUrl;
  }
  get clientMetadata() {
    return {
      client_name: 'alpd e2e (MCP TypeScript SDK)',
      redirect_uris: [redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  state() {
    return this.expectedState;
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info) {
    this.client = info;
  }
  tokens() {
    return this.savedTokens;
  }
  saveTokens(tokens) {
    this.savedTokens = tokens;
  }
  redirectToAuthorization(url) {
    emit({ event: 'authorize', url: url.toString() });
  }
  saveCodeVerifier(v) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
}

const provider = new Provider();
const newClient = () => new Client({ name: 'alpd-e2e-ts', version: '1.0.0' });
let client = newClient();
try {
  await client.connect(new StreamableHTTPClientTransport(serverURL, { authProvider: provider }));
} catch (e) {
  if (!(e instanceof UnauthorizedError)) fail(`connect: ${e.stack || e}`);
  const { code, error, state } = await codeArrived;
  if (error || !code) fail(`authorization failed: ${error}`);
  if (state !== provider.expectedState) fail('the authorization response carries another state');
  const t = new StreamableHTTPClientTransport(serverURL, { authProvider: provider });
  await t.finishAuth(code);
  client = newClient();
  await client.connect(new StreamableHTTPClientTransport(serverURL, { authProvider: provider }));
}
callback.close();

client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => emit({ event: 'resource_updated', uri: n.params.uri }));
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => emit({ event: 'log', params: n.params }));

emit({
  event: 'connected',
  instructions: client.getInstructions(),
  server: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
});
emit({ event: 'tools', tools: (await client.listTools()).tools });

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch {
    fail(`not a command: ${line}`);
  }
  try {
    let result;
    if (cmd.quit) break;
    else if (cmd.tool) result = await client.callTool({ name: cmd.tool, arguments: cmd.args ?? {} });
    else if (cmd.subscribe) result = await client.subscribeResource({ uri: cmd.subscribe });
    else if (cmd.read) result = await client.readResource({ uri: cmd.read });
    else if (cmd.setLevel) result = await client.setLoggingLevel(cmd.setLevel);
    else throw new Error(`unknown command ${line}`);
    emit({ event: 'result', id: cmd.id, result });
  } catch (e) {
    emit({ event: 'error', id: cmd.id, message: String(e && e.message ? e.message : e) });
  }
}
await client.close();
process.exit(0);
