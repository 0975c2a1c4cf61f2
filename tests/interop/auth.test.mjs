// Credentials → tenants, refused credentials → authRequired with the reason, tenant isolation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ClientConnection } from '@multi-agent-protocol/sdk';
import {
  startGateway, connectAgent, connectClient, connectBase,
  rejectsWithCode, agentIds, expectExactRecipients, expectNobodyGot, mentions, uid, quietPeriod,
} from './harness.mjs';

let gw;
let A1, A2, Gx, D1, acmeWatch, globexWatch;
const ACME = { method: 'api-key', credential: 'acme-key' };
const GLOBEX = { method: 'api-key', credential: 'globex-key' };

before(async () => {
  gw = await startGateway({ anonymousTenant: 'default' });
  A1 = await connectAgent(gw, { name: 'acme-1', role: 'shared-role', auth: ACME });
  A2 = await connectAgent(gw, { name: 'acme-2', role: 'shared-role', auth: ACME });
  Gx = await connectAgent(gw, { name: 'globex-1', role: 'shared-role', auth: GLOBEX });
  D1 = await connectAgent(gw, { name: 'anon-1', role: 'shared-role' });
  acmeWatch = await connectClient(gw, { name: 'acme-watch', auth: ACME });
  globexWatch = await connectClient(gw, { name: 'globex-watch', auth: GLOBEX });
});
after(async () => { await gw?.stop(); });

test('api-key, bearer (credential and token field) all authenticate into the tenant', async () => {
  const byKey = await ClientConnection.connect(gw.url, { auth: { method: 'api-key', credential: 'acme-key' } });
  try {
    const ids = agentIds(await byKey.listAgents());
    assert.ok(ids.includes(A1.id), 'api-key client sees acme agents');
  } finally { await byKey.disconnect(); }

  const bearer = await connectClient(gw, { auth: { method: 'bearer', credential: 'acme-token' } });
  assert.ok(agentIds(await bearer.conn.listAgents()).includes(A1.id), 'bearer credential lands in acme');

  const b = await connectBase(gw);
  const r = await b.request('map/connect', { protocolVersion: 1, participantType: 'client', auth: { method: 'bearer', token: 'acme-token' } });
  assert.equal(typeof r.sessionId, 'string');
  const l = await b.request('map/agents/list', {});
  assert.ok(agentIds(l).includes(A1.id), 'auth.token is accepted like auth.credential');
  if (r.principal !== undefined) assert.equal(typeof r.principal.id, 'string', 'principal.id');
});

/** A map/connect result that refuses the credential as the SDK expects: authRequired and error.code. */
function assertRefused(r, ctx) {
  assert.ok(r.authRequired && r.authRequired.required === true, `${ctx}: authRequired in ${JSON.stringify(r)}`);
  assert.equal(r.error?.code, 'invalid_credentials', `${ctx}: ${JSON.stringify(r)}`);
  assert.equal(typeof r.error.message, 'string');
  assert.equal(r.principal, undefined, ctx);
}

test('refused credentials at map/connect: authRequired with error.code invalid_credentials, and the connection can retry', async () => {
  const b = await connectBase(gw);
  assertRefused(await b.request('map/connect', { protocolVersion: 1, participantType: 'client', auth: { method: 'api-key', credential: 'wrong' } }), 'wrong api key');
  await rejectsWithCode(b.request('map/agents/list', {}), 1000, 'nothing else until authenticated');
  const retry = await b.request('map/connect', { protocolVersion: 1, participantType: 'client', auth: ACME });
  assert.equal(retry.principal?.claims?.tenant, 'acme', `a retry on the same connection: ${JSON.stringify(retry)}`);
  const b2 = await connectBase(gw);
  assertRefused(await b2.request('map/connect', { protocolVersion: 1, participantType: 'agent', auth: { method: 'bearer', token: 'acme-key' } }), 'api key used as bearer token');
  const viaAuthenticate = await b2.request('map/authenticate', { method: 'api-key', credential: 'acme-key' });
  assert.equal(viaAuthenticate.success, true, 'map/authenticate after a refused connect');
  // AgentConnection.connect goes on to register, which is refused until authenticated.
  await rejectsWithCode(connectAgent(gw, { name: 'intruder', auth: { method: 'bearer', credential: 'nope' } }), 1000, 'AgentConnection with bad bearer');
  const c = await connectClient(gw, { name: 'intruder-client', auth: { method: 'api-key', credential: 'globex-token' } });
  assertRefused(c.connectResult, 'bearer token used as api key');
  await rejectsWithCode(c.conn.listAgents(), 1000, 'the refused client has no session');
  const ok = await c.conn.authenticate(GLOBEX);
  assert.equal(ok.success, true);
  assert.ok(agentIds(await c.conn.listAgents()).includes(Gx.id), 'and then lands in globex');
});

test('unknown non-x- auth method is rejected', async () => {
  const b = await connectBase(gw);
  await rejectsWithCode(
    b.request('map/connect', { protocolVersion: 1, participantType: 'client', auth: { method: 'kerberos', credential: 'acme-key' } }),
    [1001, 1005, -32602], 'unknown auth method');
});

test('tenant isolation: map/agents/list', async () => {
  const acme = agentIds(await A1.conn.callExtension('map/agents/list', {}));
  assert.ok(acme.includes(A1.id) && acme.includes(A2.id), 'acme sees acme');
  assert.ok(!acme.includes(Gx.id), 'acme must not see globex agents');
  assert.ok(!acme.includes(D1.id), 'acme must not see anonymous/default agents');

  const globex = agentIds(await globexWatch.conn.listAgents());
  assert.ok(globex.includes(Gx.id));
  assert.ok(!globex.includes(A1.id) && !globex.includes(A2.id), 'globex must not see acme agents');

  const anon = await connectClient(gw, { name: 'anon-watch' });
  const anonIds = agentIds(await anon.conn.listAgents());
  assert.ok(anonIds.includes(D1.id), 'anonymous connections land in the default tenant');
  assert.ok(!anonIds.includes(A1.id) && !anonIds.includes(Gx.id));

  const withRole = agentIds(await acmeWatch.conn.listAgents({ filter: { roles: ['shared-role'] } }));
  assert.deepEqual([...withRole].sort(), [A1.id, A2.id].sort(), 'role filter stays inside the tenant');
});

test('tenant isolation: map/agents/get and structure graph', async () => {
  await rejectsWithCode(acmeWatch.conn.getAgent(Gx.id), 2001, 'acme getting a globex agent');
  await rejectsWithCode(globexWatch.conn.getAgent(A1.id), 2001, 'globex getting an acme agent');
  const graph = await acmeWatch.conn.getStructureGraph();
  const ids = graph.nodes.map((n) => n.id);
  assert.ok(ids.includes(A1.id));
  assert.ok(!ids.includes(Gx.id) && !ids.includes(D1.id), 'graph is per tenant');
});

test('tenant isolation: map/send cannot reach another tenant', async () => {
  const everyone = [A1, A2, Gx, D1, acmeWatch, globexWatch];
  let marker = uid('x-tenant');
  await rejectsWithCode(A1.conn.send({ agent: Gx.id }, { marker }), 2001, '{agent: globex id} from acme');
  await rejectsWithCode(A1.conn.send(Gx.id, { marker }), [2000, 2001], 'plain globex id from acme');
  await rejectsWithCode(A1.conn.send({ agents: [Gx.id] }, { marker }), [2000, 2001], '{agents:[globex]} from acme');
  await rejectsWithCode(Gx.conn.send({ agent: A1.id }, { marker }), 2001, '{agent: acme id} from globex');
  await expectNobodyGot(everyone, marker);

  marker = uid('bcast');
  const b = await A1.conn.send({ broadcast: true }, { marker });
  assert.ok(!b.delivered.includes(Gx.id) && !b.delivered.includes(D1.id), `broadcast delivered outside the tenant: ${b.delivered}`);
  await expectExactRecipients(everyone, [A2], marker, { ignore: [A1] });

  marker = uid('role');
  const r = await A1.conn.send({ role: 'shared-role' }, { marker });
  assert.ok(!r.delivered.includes(Gx.id) && !r.delivered.includes(D1.id));
  await expectExactRecipients(everyone, [A2], marker, { ignore: [A1] });

  marker = uid('clients');
  await A1.conn.send({ participants: 'clients' }, { marker });
  await expectExactRecipients(everyone, [acmeWatch], marker);

  marker = uid('p-agents');
  await A1.conn.send({ participants: 'agents' }, { marker });
  await expectExactRecipients(everyone, [A2], marker, { ignore: [A1] });

  marker = uid('p-all');
  await Gx.conn.send({ participants: 'all' }, { marker });
  await expectExactRecipients(everyone, [globexWatch], marker, { ignore: [Gx] });

  marker = uid('participant');
  await rejectsWithCode(A1.conn.send({ participant: globexWatch.participantId }, { marker }), [2000, 2001], 'participant of another tenant');
  await expectNobodyGot(everyone, marker);
});

test('tenant isolation: scopes', async () => {
  const scope = await Gx.conn.createScope({ name: uid('globex-scope') });
  await Gx.conn.joinScope(scope.id);
  await rejectsWithCode(acmeWatch.conn.getScope(scope.id), 2002, 'acme reading a globex scope');
  const marker = uid('scope-x');
  await rejectsWithCode(A1.conn.send({ scope: scope.id }, { marker }), 2002, 'acme sending to a globex scope');
  await rejectsWithCode(A1.conn.joinScope(scope.id), 2002, 'acme joining a globex scope');
  await expectNobodyGot([Gx], marker);
  const list = await acmeWatch.conn.listScopes();
  assert.ok(!list.scopes.some((s) => s.id === scope.id), 'globex scope not listed for acme');
});

test('tenant isolation: events and replay', async () => {
  const sub = await acmeWatch.conn.subscribe();
  await Gx.conn.busy();
  await A2.conn.busy();
  await acmeWatch.tap.waitForEvents(sub.id, (e) => mentions(e, A2.id));
  await quietPeriod();
  const evs = acmeWatch.tap.events(sub.id);
  assert.ok(!evs.some((p) => mentions(p.event, Gx.id)), 'acme subscriber must not see globex events');
  const r = await acmeWatch.conn.replay({ limit: 1000 });
  assert.ok(r.events.some((x) => mentions(x.event, A2.id)), 'replay has own tenant events');
  assert.ok(!r.events.some((x) => mentions(x.event, Gx.id) || mentions(x.event, D1.id)), 'replay must not leak other tenants');
  await sub.unsubscribe();
});

test('tenant isolation: lifecycle control of another tenant\'s agent is refused', async () => {
  await rejectsWithCode(acmeWatch.conn.suspendAgent(Gx.id), [2001, 1003], 'suspend across tenants');
  await rejectsWithCode(acmeWatch.conn.stopAgent(Gx.id), [2001, 1003], 'stop across tenants');
  await rejectsWithCode(acmeWatch.conn.callExtension('map/agents/unregister', { agentId: Gx.id }), [2001, 1003], 'unregister across tenants');
  const g = await globexWatch.conn.getAgent(Gx.id);
  assert.notEqual(g.agent.state, 'suspended');
  assert.ok(!['stopping', 'stopped'].includes(g.agent.state));
});
