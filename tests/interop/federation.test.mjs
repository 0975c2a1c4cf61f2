// Federation driven by the SDK's own GatewayConnection: connectToSystem and
// routeToSystem against a gateway whose tenant "acme" is a system with peers.
//
// The SDK reads connectToSystem(systemId) as "connect to the remote system
// systemId"; the gateway reads it as "the caller is peer systemId". Both hold
// for a peer's gateway connected here, so the caller names itself ("globex").
// routeToSystem(systemId) puts systemId in the envelope's targetSystem, so a
// message for an agent here is routed to "acme", this system's own id.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startGateway, connectAgent, connectGateway, rejectsWithCode, pollUntil,
  quietPeriod, uid,
} from './harness.mjs';

const GLOBEX_AUTH = { method: 'api-key', credentials: 'globex-at-acme' };
const INITECH_AUTH = { method: 'api-key', credentials: 'initech-at-acme' };

const ACME_TOML = `
api_keys = [
  { secret = "acme-key", principal = "acme-user" },
  { secret = "globex-at-acme", principal = "globex" },
  { secret = "initech-at-acme", principal = "initech" },
]
[tenants.federation]
system_id = "acme"
endpoint = "ws://127.0.0.1:1/map"
[[tenants.federation.peers]]
system_id = "globex"
endpoint = ""
auth = { method = "api-key", credential = "acme-at-globex" }
principal = "globex"
expose = { agents = "all", events = [] }
[[tenants.federation.peers]]
system_id = "initech"
endpoint = ""
auth = { method = "api-key", credential = "acme-at-initech" }
principal = "initech"
expose = { agents = "none", events = [] }
`;

let gw;
let agent; // the local recipient, an SDK AgentConnection in tenant acme

before(async () => {
  gw = await startGateway({ tenants: [{ id: 'default' }, { id: 'acme', toml: ACME_TOML }] });
  agent = await connectAgent(gw, { name: 'recipient', auth: { method: 'api-key', credential: 'acme-key' } });
});
after(async () => { await gw?.stop(); });

/** A gateway session in acme as `auth`'s principal, optionally connected as peer `peer`. */
async function peerGateway({ routing, auth = GLOBEX_AUTH, peer } = {}) {
  const g = await connectGateway(gw, { name: uid('gw'), routing, auth: { method: 'api-key', token: auth.credentials } });
  if (peer) {
    const r = await g.conn.connectToSystem(peer, `ws://${peer}.example/map`, { auth });
    assert.equal(r.connected, true, `connectToSystem(${peer}): ${JSON.stringify(r)}`);
  }
  return g;
}

function message(extra = {}) {
  return { id: uid('msg'), from: 'sender-7', to: { agent: agent.id }, timestamp: Date.now(), payload: { marker: uid('m'), n: 1 }, ...extra };
}

/** The SDK's map/federation/route requests on a gateway connection. */
const routeRequests = (g) => g.sent.filter((f) => f.method === 'map/federation/route');

/** Wait until the agent's SDK onMessage handler has the message carrying `marker`. */
const received = (marker) => pollUntil(
  () => agent.sdkMessages.filter((m) => m?.payload?.marker === marker),
  (ms) => ms.length >= 1,
  { timeoutMs: 1500, what: `map/message ${marker} at the agent` },
);

/** After a quiet period: the agent got no message carrying `marker`. */
async function notReceived(marker) {
  await quietPeriod();
  assert.deepEqual(agent.sdkMessages.filter((m) => m?.payload?.marker === marker), [], `the agent must not get ${marker}`);
}

test('connectToSystem with the peer\'s credentials: connected, and the SDK records the system', async () => {
  const g = await peerGateway();
  const r = await g.conn.connectToSystem('globex', 'ws://globex.example/map', { auth: GLOBEX_AUTH });
  assert.equal(r.connected, true, JSON.stringify(r));
  assert.equal(r.sessionId, g.sessionId, 'the federation session is this gateway session');
  assert.equal(r.principal?.id, 'globex');
  assert.equal(r.systemInfo?.name, 'acme');
  assert.equal(typeof r.systemInfo?.version, 'string');
  assert.equal(r.peer?.systemId, 'globex');
  assert.equal(g.conn.isSystemConnected('globex'), true, 'GatewayConnection.isSystemConnected');
  assert.equal(g.conn.connectedSystems.get('globex')?.name, 'acme');
  const req = g.sent.find((f) => f.method === 'map/federation/connect');
  assert.deepEqual(req.params, { systemId: 'globex', endpoint: 'ws://globex.example/map', auth: GLOBEX_AUTH }, 'what the SDK sends');
});

test('connectToSystem without auth: authRequired with a challenge; retried with it and credentials: connected', async () => {
  const g = await peerGateway();
  const first = await g.conn.connectToSystem('globex', 'ws://globex.example/map');
  assert.equal(first.connected, false, JSON.stringify(first));
  assert.equal(first.authRequired?.required, true);
  assert.ok(Array.isArray(first.authRequired.methods) && first.authRequired.methods.includes('api-key'), `methods: ${JSON.stringify(first.authRequired.methods)}`);
  assert.equal(typeof first.authRequired.challenge, 'string');
  assert.equal(g.conn.isSystemConnected('globex'), false);

  const second = await g.conn.connectToSystem('globex', 'ws://globex.example/map', {
    auth: GLOBEX_AUTH,
    authContext: { source: 'configured', challenge: first.authRequired.challenge },
  });
  assert.equal(second.connected, true, JSON.stringify(second));
  assert.equal(g.conn.isSystemConnected('globex'), true);

  // A challenge this system never issued is refused, credentials or not.
  const forged = await g.conn.connectToSystem('globex', 'ws://globex.example/map', {
    auth: GLOBEX_AUTH,
    authContext: { source: 'cached', challenge: 'map_chal_01ARZ3NDEKTSV4RRFFQ69G5FAV' },
  });
  assert.equal(forged.connected, false, JSON.stringify(forged));
  assert.equal(forged.error?.code, 5002);
});

test('connectToSystem with a wrong credential, or another principal\'s: not connected (5002 in the answer)', async () => {
  for (const [what, auth] of [
    ['an unknown key', { method: 'api-key', credentials: 'not-a-key' }],
    ['the tenant\'s own user key', { method: 'api-key', credentials: 'acme-key' }],
    ['another peer\'s key', INITECH_AUTH],
  ]) {
    const g = await peerGateway();
    const r = await g.conn.connectToSystem('globex', 'ws://globex.example/map', { auth });
    assert.equal(r.connected, false, `${what}: ${JSON.stringify(r)}`);
    assert.equal(r.authRequired?.required, true, `${what}: authRequired`);
    assert.equal(r.error?.code, 5002, `${what}: error`);
    assert.equal(r.sessionId, undefined, `${what}: no federation session`);
    assert.equal(g.conn.isSystemConnected('globex'), false, `${what}: isSystemConnected`);
  }
});

test('connectToSystem naming a system that is not a peer: 5001', async () => {
  const g = await peerGateway();
  await rejectsWithCode(g.conn.connectToSystem('hooli', 'ws://hooli.example/map', { auth: GLOBEX_AUTH }), 5001, 'unknown system');
  assert.equal(g.conn.isSystemConnected('hooli'), false);
});

test('routeToSystem("acme") with an envelope: delivered to the local agent as from "globex:agent:<from>"', async () => {
  const g = await peerGateway({ routing: { systemId: 'globex' }, peer: 'globex' });
  const m = message();
  const r = await g.conn.routeToSystem('acme', m);
  const [req] = routeRequests(g);
  assert.equal(req.params.systemId, 'acme');
  assert.deepEqual(req.params.envelope.payload, m, 'the SDK wraps the message as is');
  assert.equal(req.params.envelope.federation.sourceSystem, 'globex');
  assert.equal(req.params.envelope.federation.targetSystem, 'acme', 'the SDK targets the systemId it is given');
  assert.equal(req.params.envelope.federation.hopCount, 0);

  assert.equal(r.routed, true, JSON.stringify(r));
  assert.equal(r.messageId, m.id);
  assert.ok(Array.isArray(r.delivered) && r.delivered.includes(agent.id), `delivered: ${JSON.stringify(r.delivered)}`);
  assert.equal(typeof g.conn.getLastSyncTimestamp('acme'), 'number', 'the SDK notes a routed message');

  const [got] = await received(m.payload.marker);
  assert.equal(got.from, 'globex:agent:sender-7');
  assert.deepEqual(got.payload, m.payload);
  assert.equal(got.to?.agent ?? got.to, agent.id);
});

test('routeToSystem("acme") without routing config (the legacy message form): delivered the same way', async () => {
  const g = await peerGateway({ peer: 'globex' });
  const m = message();
  const r = await g.conn.routeToSystem('acme', m);
  const [req] = routeRequests(g);
  assert.deepEqual(req.params, { systemId: 'acme', message: m }, 'no envelope without routing config');
  assert.equal(r.routed, true, JSON.stringify(r));
  assert.equal(r.messageId, m.id);
  const [got] = await received(m.payload.marker);
  assert.equal(got.from, 'globex:agent:sender-7', 'the sender is the peer this session connected as');
  assert.deepEqual(got.payload, m.payload);
});

test('routeToSystem of the same message twice: delivered once', async () => {
  const g = await peerGateway({ routing: { systemId: 'globex' }, peer: 'globex' });
  const m = message();
  const first = await g.conn.routeToSystem('acme', m);
  const again = await g.conn.routeToSystem('acme', m);
  assert.equal(first.routed, true);
  assert.equal(again.routed, true, JSON.stringify(again));
  assert.equal(again.messageId, m.id);
  await received(m.payload.marker);
  await quietPeriod();
  assert.equal(agent.sdkMessages.filter((x) => x?.payload?.marker === m.payload.marker).length, 1, 'one copy');
});

test('routeToSystem to an agent not exposed to the peer: 5003, nothing delivered', async () => {
  const g = await peerGateway({ routing: { systemId: 'initech' }, auth: INITECH_AUTH, peer: 'initech' });
  const m = message();
  await rejectsWithCode(g.conn.routeToSystem('acme', m), 5003, 'initech sees no agents');
  await notReceived(m.payload.marker);
});

test('routeToSystem speaking for another peer than the one connected as: 5003', async () => {
  const g = await peerGateway({ routing: { systemId: 'initech' }, peer: 'globex' });
  const m = message();
  await rejectsWithCode(g.conn.routeToSystem('acme', m), 5003, 'globex\'s session claiming initech');
  await notReceived(m.payload.marker);
});

test('routeToSystem to another peer: forwarded, queued while that peer is not linked', async () => {
  const g = await peerGateway({ routing: { systemId: 'globex' }, peer: 'globex' });
  const m = message();
  const r = await g.conn.routeToSystem('initech', m);
  assert.equal(routeRequests(g)[0].params.envelope.federation.targetSystem, 'initech');
  assert.equal(r.routed, false, JSON.stringify(r));
  assert.equal(r.queued, true);
  assert.equal(r.messageId, m.id);
  assert.equal(g.conn.getLastSyncTimestamp('initech'), undefined, 'the SDK notes only routed messages');
  await notReceived(m.payload.marker);
});

test('routeToSystem to a system that is not a peer: 5001', async () => {
  const g = await peerGateway({ routing: { systemId: 'globex' }, peer: 'globex' });
  const m = message();
  await rejectsWithCode(g.conn.routeToSystem('hooli', m), 5001, 'unknown target');
  await notReceived(m.payload.marker);
});

test('an envelope at its hop limit (routing.maxHops 0): refused by the gateway with 5011', async () => {
  const g = await peerGateway({ routing: { systemId: 'globex', maxHops: 0 }, peer: 'globex' });
  const m = message();
  await rejectsWithCode(g.conn.routeToSystem('acme', m), 5011, 'hopCount 0 of maxHops 0');
  // The SDK does not check the limit itself: the request went out.
  const [req] = routeRequests(g);
  assert.equal(req.params.envelope.federation.hopCount, 0);
  assert.equal(req.params.envelope.federation.maxHops, 0);
  await notReceived(m.payload.marker);
});

test('an envelope whose path holds "acme" already: refused by the gateway with 5010', async () => {
  const g = await peerGateway({ routing: { systemId: 'acme', trackPath: true }, peer: 'globex' });
  const m = message();
  await rejectsWithCode(g.conn.routeToSystem('acme', m), 5010, 'path [acme]');
  const [req] = routeRequests(g);
  assert.deepEqual(req.params.envelope.federation.path, ['acme'], 'the SDK starts the path with routing.systemId');
  await notReceived(m.payload.marker);

  // From "acme" to a peer through "acme": a message that came back.
  const back = message();
  await rejectsWithCode(g.conn.routeToSystem('globex', back), 5010, 'source acme, on to globex');
});

test('routeToSystem before connectToSystem: 5002, whoever the credential names; nothing delivered', async () => {
  for (const auth of [GLOBEX_AUTH, INITECH_AUTH]) {
    const g = await peerGateway({ routing: { systemId: 'globex' }, auth });
    const m = message();
    await rejectsWithCode(g.conn.routeToSystem('acme', m), 5002, 'a session that has not connected as a system');
    await notReceived(m.payload.marker);
  }
});

test('a peer routing to itself through acme: 5010', async () => {
  const g = await peerGateway({ routing: { systemId: 'globex' }, peer: 'globex' });
  await rejectsWithCode(g.conn.routeToSystem('globex', message()), 5010, 'globex → acme → globex');
});

test('map/federation/* from an agent session: 1003, only gateways federate', async () => {
  const m = message();
  await rejectsWithCode(agent.conn.callExtension('map/federation/route', { systemId: 'acme', message: m }), 1003, 'an agent routing');
  await rejectsWithCode(agent.conn.callExtension('map/federation/connect', { systemId: 'globex', endpoint: 'ws://globex.example/map', auth: GLOBEX_AUTH }), 1003, 'an agent connecting');
  await notReceived(m.payload.marker);
});
