// The credentials extension (urn:map:ext:credentials:1) through the SDK's callExtension: an
// agent that declared capabilities.credentials gets the static secret its principal is granted,
// is refused (11001) what it is not, and a subscriber sees credential.issued and
// credential.denied without the secret. cred/status and cred/list answer as the SDK's types
// say; a tenant without a broker answers 11000. host/tests/all/credentials.rs covers OAuth2.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, connectAgent, connectClient, rejectsWithCode, sourceAgent, uid, WAIT_MS } from './harness.mjs';

const SECRET = `ghp-interop-${process.pid}-secret`;
const key = (k) => ({ method: 'api-key', credential: k });
const ALICE = key('alice-key');
const BOB = key('bob-key');
const CAN_GET = { credentials: { canGet: true, canList: true } };
const TENANTS = [
  { id: 'default' },
  {
    id: 'acme',
    toml: [
      'api_keys = [{ secret = "alice-key", principal = "alice" }, { secret = "bob-key", principal = "bob" }]',
      '[tenants.credentials.providers.github]',
      'type = "static"',
      'secrets = { "github:repo:read" = { type = "bearer_token", value = "env:MAP_INTEROP_GITHUB_TOKEN" } }',
      '[[tenants.credentials.grants]]',
      'principal = "alice"',
      'scopes = ["github:*"]',
      'resources = ["acme/*"]',
    ].join('\n'),
  },
  { id: 'globex', api_keys: ['globex-key'] },
];

let gw;
before(async () => {
  process.env.MAP_INTEROP_GITHUB_TOKEN = SECRET;
  gw = await startGateway({ tenants: TENANTS });
});
after(async () => { await gw?.stop(); });

/** A client of acme subscribed to the credential events; `wait(n)` resolves with its first n. */
async function watcher() {
  const w = await connectClient(gw, { auth: BOB, name: uid('watch') });
  const sub = await w.conn.subscribe({ eventTypes: ['credential.*'] });
  return (n) => w.tap.waitForEvents(sub.id, () => true, n, WAIT_MS).then((ps) => ps.slice(0, n).map((p) => p.event));
}

test('a granted agent gets its secret; others are refused, and events never carry it', async () => {
  const wait = await watcher();
  const alice = await connectAgent(gw, { name: uid('alice'), auth: ALICE, capabilities: CAN_GET });
  assert.deepEqual(alice.connectResult.capabilities.credentials, { enabled: true, canGet: true, canList: true, canStatus: true });
  assert.ok(alice.connectResult.capabilities.extensions.some((e) => e.uri === 'urn:map:ext:credentials:1'));

  const issued = await alice.conn.callExtension('cred/get', { scope: 'github:repo:read', resource: 'acme/frontend' });
  assert.deepEqual(issued, { credentialType: 'bearer_token', credential: { token: SECRET, tokenType: 'Bearer' } });
  await rejectsWithCode(alice.conn.callExtension('cred/get', { scope: 'github:repo:read', resource: 'globex/site' }), 11001, 'another resource');
  const bob = await connectAgent(gw, { name: uid('bob'), auth: BOB, capabilities: CAN_GET });
  await rejectsWithCode(bob.conn.callExtension('cred/get', { scope: 'github:repo:read', resource: 'acme/frontend' }), 11001, 'another principal');
  await rejectsWithCode(alice.conn.callExtension('cred/get', { scope: 'github:repo:read' }), -32602, 'no resource');

  const [ok, denied, bobDenied] = await wait(3);
  assert.equal(ok.type, 'credential.issued');
  assert.deepEqual(ok.data, { agentId: alice.id, scope: 'github:repo:read', resource: 'acme/frontend', credentialType: 'bearer_token' });
  assert.equal(sourceAgent(ok), alice.id);
  assert.equal(denied.type, 'credential.denied');
  assert.equal(denied.data.resource, 'globex/site');
  assert.match(denied.data.reason, /resource/);
  assert.equal(bobDenied.data.agentId, bob.id);
  for (const e of [ok, denied, bobDenied]) assert.ok(!JSON.stringify(e).includes(SECRET), `the secret in ${JSON.stringify(e)}`);
  assert.ok(!gw.stderr().includes(SECRET), 'the secret in the log');
});

test('cred/status for any session, cred/list for the agent, and clients may not get', async () => {
  const client = await connectClient(gw, { auth: ALICE });
  assert.deepEqual(client.connectResult.capabilities.credentials, { enabled: true, canGet: false, canList: false, canStatus: true });
  assert.deepEqual(await client.conn.callExtension('cred/status'), { providers: ['github'] });
  await rejectsWithCode(client.conn.callExtension('cred/get', { scope: 'github:repo:read', resource: 'acme/x' }), 1003, 'a client');
  const alice = await connectAgent(gw, { name: uid('alice'), auth: ALICE, capabilities: CAN_GET });
  assert.deepEqual(await alice.conn.callExtension('cred/list'), { agentId: alice.id, scopes: ['github:*'], constraints: { 'github:*': { resources: ['acme/*'] } } });
  const quiet = await connectAgent(gw, { name: uid('quiet'), auth: ALICE });
  await rejectsWithCode(quiet.conn.callExtension('cred/get', { scope: 'github:repo:read', resource: 'acme/x' }), 1003, 'no canGet declared');
});

test('a tenant without a broker advertises none and answers 11000', async () => {
  const agent = await connectAgent(gw, { name: uid('globex'), auth: key('globex-key'), capabilities: CAN_GET });
  assert.equal(agent.connectResult.capabilities.credentials, undefined);
  assert.ok(!agent.connectResult.capabilities.extensions.some((e) => e.uri === 'urn:map:ext:credentials:1'));
  await rejectsWithCode(agent.conn.callExtension('cred/get', { scope: 'github:repo:read', resource: 'acme/x' }), 11000, 'no broker');
});
