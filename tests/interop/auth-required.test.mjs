// anonymous_tenant = "": connect without credentials → authRequired, everything else → 1000
// until map/authenticate succeeds.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { AgentConnection, websocketStream } from '@multi-agent-protocol/sdk';
import {
  startGateway, connectAgent, connectClient, connectBase, rejectsWithCode, agentIds, uid, RPC_TIMEOUT_MS,
} from './harness.mjs';
import { WebSocket } from 'ws';

let gw;
before(async () => { gw = await startGateway({ anonymousTenant: '' }); });
after(async () => { await gw?.stop(); });

test('connect without credentials: result carries authRequired {methods, required}', async () => {
  const c = await connectClient(gw, { name: 'no-creds' });
  const ar = c.connectResult.authRequired;
  assert.ok(ar && typeof ar === 'object', `authRequired expected in map/connect result, got ${JSON.stringify(c.connectResult)}`);
  assert.ok(Array.isArray(ar.methods) && ar.methods.length > 0, 'authRequired.methods is a non-empty array');
  assert.ok(ar.methods.includes('api-key') && ar.methods.includes('bearer'), `methods list api-key and bearer: ${ar.methods}`);
  assert.equal(ar.required, true);
});

test('before authenticating, every other method answers 1000', async () => {
  const c = await connectClient(gw, { name: 'unauth' });
  await rejectsWithCode(c.conn.listAgents(), 1000, 'map/agents/list');
  await rejectsWithCode(c.conn.getStructureGraph(), 1000, 'map/structure/graph');
  await rejectsWithCode(c.conn.listScopes(), 1000, 'map/scopes/list');
  await rejectsWithCode(c.conn.subscribe(), 1000, 'map/subscribe');
  await rejectsWithCode(c.conn.send({ broadcast: true }, { x: 1 }), 1000, 'map/send');
  await rejectsWithCode(c.conn.replay({}), 1000, 'map/replay');
  await rejectsWithCode(c.conn.callExtension('map/agents/register', { name: 'sneaky' }), 1000, 'map/agents/register');
});

test('wrong credentials: authRequired with error on map/connect, 1001 on map/authenticate; session stays unauthenticated', async () => {
  const b = await connectBase(gw);
  const r = await b.request('map/connect', { protocolVersion: 1, participantType: 'client', auth: { method: 'api-key', credential: 'bad' } });
  assert.equal(r.authRequired?.required, true, JSON.stringify(r));
  assert.equal(r.error?.code, 'invalid_credentials', JSON.stringify(r));
  await rejectsWithCode(b.request('map/agents/list', {}), 1000, 'still unauthenticated after a refused connect');

  const c = await connectClient(gw, { name: 'bad-auth' });
  await rejectsWithCode(c.conn.authenticate({ method: 'api-key', credential: 'bad' }), 1001, 'authenticate with bad key');
  await rejectsWithCode(c.conn.listAgents(), 1000, 'still unauthenticated after a failed authenticate');
});

test('map/authenticate unlocks the session into the right tenant (ClientConnection)', async () => {
  const acmeAgent = await connectAgent(gw, { name: 'acme-resident', auth: { method: 'api-key', credential: 'acme-key' } });
  const globexAgent = await connectAgent(gw, { name: 'globex-resident', auth: { method: 'bearer', credential: 'globex-token' } });

  const c = await connectClient(gw, { name: 'late-auth' });
  assert.ok(c.connectResult.authRequired);
  const r = await c.conn.authenticate({ method: 'api-key', credential: 'acme-key' });
  assert.equal(r.success, true, `authenticate result {success: true}, got ${JSON.stringify(r)}`);
  const ids = agentIds(await c.conn.listAgents());
  assert.ok(ids.includes(acmeAgent.id), 'now sees acme agents');
  assert.ok(!ids.includes(globexAgent.id), 'and not globex agents');
});

test('AgentConnection: connectOnly → authenticate({method, token}) → register', async () => {
  const ws = new WebSocket(gw.url);
  gw.connections.add(ws);
  await new Promise((res, rej) => { ws.once('open', res); ws.once('error', rej); });
  const agent = new AgentConnection(websocketStream(ws), { name: 'stepwise', role: uid('stepwise'), defaultTimeout: RPC_TIMEOUT_MS });
  const cr = await agent.connectOnly();
  assert.ok(cr.authRequired, 'authRequired present');
  await rejectsWithCode(agent.register(), 1000, 'register before authenticate');
  const auth = await agent.authenticate({ method: 'bearer', token: 'globex-token' });
  assert.equal(auth.success, true, `authenticate with the globex bearer token must succeed, got ${JSON.stringify(auth)}`);
  const registered = await agent.register();
  assert.equal(typeof registered.id, 'string');
  assert.equal(agent.agentId, registered.id);
  const globexWatch = await connectClient(gw, { auth: { method: 'api-key', credential: 'globex-key' } });
  assert.ok(agentIds(await globexWatch.conn.listAgents()).includes(registered.id), 'agent registered into globex');
  const acmeWatch = await connectClient(gw, { auth: { method: 'api-key', credential: 'acme-key' } });
  assert.ok(!agentIds(await acmeWatch.conn.listAgents()).includes(registered.id), 'not visible to acme');
});

test('credentials on map/connect skip authRequired entirely', async () => {
  const c = await connectClient(gw, { auth: { method: 'api-key', credential: 'acme-key' } });
  assert.ok(c.connectResult.authRequired == null, `no authRequired when connect carried valid credentials, got ${JSON.stringify(c.connectResult.authRequired)}`);
  const l = await c.conn.listAgents();
  assert.ok(Array.isArray(l.agents));
});

test('auth method none: a tenant that accepts it admits a named principal, and authRequired offers it', async () => {
  const g = await startGateway({
    anonymousTenant: '',
    tenants: [{ id: 'acme', api_keys: ['acme-key'], toml: 'none_principal = "anon-user"' }],
  });
  try {
    const c = await connectClient(g, { name: 'no-creds' });
    assert.ok(c.connectResult.authRequired.methods.includes('none'), JSON.stringify(c.connectResult));
    assert.ok(c.connectResult.authRequired.methods.includes('api-key'));
    const n = await connectClient(g, { name: 'none', auth: { method: 'none' } });
    assert.equal(n.connectResult.principal?.id, 'anon-user', JSON.stringify(n.connectResult));
    assert.equal(n.connectResult.principal?.claims?.tenant, 'acme');
    const k = await connectClient(g, { name: 'keyed', auth: { method: 'api-key', credential: 'acme-key' } });
    assert.notEqual(k.connectResult.principal?.id, 'anon-user');
  } finally {
    await g.stop();
  }
  // Off by default: not offered here.
  const c = await connectClient(gw, { name: 'default-methods' });
  assert.ok(!c.connectResult.authRequired.methods.includes('none'), JSON.stringify(c.connectResult));
});
