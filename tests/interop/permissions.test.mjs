// map/permissions/update with the real SDK: a system participant or a tenant's admin principal
// changes what another participant's session may do (merged per capability group), the target's
// next request obeys, subscribers get permissions_client_updated; everyone else gets 1003, an
// unknown participant 2000, the docs' MAPClientPermissions shape -32602. Also across two cluster
// nodes: the target served by node a, the update made on node b.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startGateway, startCluster, connectAgent, connectClient, rawParticipant, rejectsWithCode,
  pollUntil, agentIds, normType, uid, DEFAULT_TENANTS,
} from './harness.mjs';

const ACME_ADMIN = { method: 'api-key', credential: 'acme-admin-key' };
const ACME = { method: 'api-key', credential: 'acme-key' };
const TENANTS = [
  DEFAULT_TENANTS[0],
  {
    id: 'acme',
    toml: [
      'api_keys = [{ key = "acme-admin-key", principal = "acme-admin" }, "acme-key"]',
      'admin_principals = ["acme-admin"]',
    ].join('\n'),
  },
];

const typeIs = (t) => (ev) => normType(ev?.type) === normType(t);

/** A system participant (the SDK has no class for one): a raw map/connect with participantType system. */
const connectSystem = (gw, auth) => rawParticipant(gw, { participantType: 'system', name: uid('system'), auth });

let gw;
before(async () => { gw = await startGateway({ tenants: TENANTS }); });
after(async () => { await gw?.stop(); });

/** Subscribe a raw participant to permissions_client_updated; its subscription id. */
async function watchUpdates(raw) {
  const r = await raw.call('map/subscribe', { filter: { eventTypes: ['permissions_client_updated'] } });
  return r.subscriptionId;
}

test('a system participant revokes flags: merged per group, the next requests get 1003, the event goes to the target and to system participants', async () => {
  const system = await connectSystem(gw);
  const client = await connectClient(gw, { name: uid('target') });
  const watcher = await connectSystem(gw);
  const watching = await watchUpdates(watcher);
  const own = await client.conn.subscribe({ eventTypes: ['permissions_client_updated'] });
  const bystander = await connectClient(gw, { name: uid('bystander') });
  const idle = await bystander.conn.subscribe({ eventTypes: ['permissions_client_updated'] });
  const agent = await connectAgent(gw, { name: uid('peer') });
  await client.conn.send({ agent: agent.id }, { marker: uid('before') });

  const permissions = { messaging: { canSend: false }, observation: { canObserve: false } };
  const r = await system.call('map/permissions/update', { clientId: client.participantId, permissions });
  assert.equal(r.success, true, JSON.stringify(r));
  const eff = r.effectivePermissions;
  assert.equal(eff.messaging.canSend, false, `given key overwritten: ${JSON.stringify(eff)}`);
  assert.equal(eff.messaging.canReceive, true, 'other keys of the group stay');
  assert.equal(eff.observation.canObserve, false);
  assert.equal(eff.observation.canQuery, true);
  assert.equal(eff.lifecycle.canRegister, true, 'other groups stay');

  // The target's next requests, on its open connection.
  await rejectsWithCode(client.conn.send({ agent: agent.id }, { marker: uid('after') }), 1003, 'send with messaging.canSend revoked');
  await rejectsWithCode(client.conn.subscribe(), 1003, 'subscribe with observation.canObserve revoked');
  assert.ok(agentIds(await client.conn.listAgents()).includes(agent.id), 'observation.canQuery still holds');

  const [ev] = await watcher.tap.waitForEvents(watching, typeIs('permissions_client_updated'));
  assert.deepEqual(ev.event.data, {
    clientId: client.participantId,
    changes: permissions,
    effectivePermissions: eff,
    updatedBy: system.connectResult.participantId,
  });
  // The target's subscription from before the revocation goes on, and it hears of the change.
  const [mine] = await client.tap.waitForEvents(own.id, typeIs('permissions_client_updated'));
  assert.deepEqual(mine.event.data, ev.event.data);

  // A later update merges into the earlier one and can grant back.
  const again = await system.call('map/permissions/update', { clientId: client.participantId, permissions: { messaging: { canSend: true } } });
  assert.equal(again.effectivePermissions.messaging.canSend, true);
  assert.equal(again.effectivePermissions.observation.canObserve, false, 'the earlier change stays');
  const sent = await client.conn.send({ agent: agent.id }, { marker: uid('granted') });
  assert.deepEqual(sent.delivered, [agent.id]);

  // Two updates later, the bystander's subscription has had none of them: the watcher's second
  // event is the barrier (one event log, in order).
  await watcher.tap.waitForEvents(watching, typeIs('permissions_client_updated'), 2);
  await bystander.conn.listAgents();
  assert.equal(bystander.tap.events(idle.id).length, 0, 'a plain client of the tenant does not see other participants\' permissions');
});

test('observation.canObserve revoked: a subscription made before sends only the notices of the session\'s permissions; granted back, it goes on without a gap', async () => {
  const system = await connectSystem(gw);
  const client = await connectClient(gw, { name: uid('observer') });
  const sub = await client.conn.subscribe({ eventTypes: ['agent_registered', 'permissions_client_updated'] });
  const registered = (id) => (ev) => typeIs('agent_registered')(ev) && ev.data?.agentId === id;
  const first = await connectAgent(gw, { name: uid('before') });
  await client.tap.waitForEvents(sub.id, registered(first.id));

  await system.call('map/permissions/update', { clientId: client.participantId, permissions: { observation: { canObserve: false } } });
  await client.tap.waitForEvents(sub.id, typeIs('permissions_client_updated'));
  const unseen = await connectAgent(gw, { name: uid('while-revoked') });
  await system.call('map/permissions/update', { clientId: client.participantId, permissions: { observation: { canObserve: true } } });
  await client.tap.waitForEvents(sub.id, typeIs('permissions_client_updated'), 2);
  const last = await connectAgent(gw, { name: uid('after') });
  await client.tap.waitForEvents(sub.id, registered(last.id));

  // One socket, in order: had the registration made while revoked been sent, it would be here by now.
  const got = client.tap.events(sub.id);
  assert.deepEqual(got.map((p) => [normType(p.event.type), p.event.data?.agentId ?? null]), [
    ['agent_registered', first.id],
    ['permissions_client_updated', null],
    ['permissions_client_updated', null],
    ['agent_registered', last.id],
  ], `nothing about ${unseen.id}`);
  assert.deepEqual(got.map((p) => p.sequenceNumber), [1, 2, 3, 4], 'numbered without a gap');
});

test('lifecycle.canRegister revoked: the agent\'s next register and update get 1003, then work again', async () => {
  const system = await connectSystem(gw);
  const agent = await connectAgent(gw, { name: uid('worker') });
  await system.call('map/permissions/update', { clientId: agent.participantId, permissions: { lifecycle: { canRegister: false } } });
  await rejectsWithCode(agent.conn.callExtension('map/agents/register', { name: uid('child') }), 1003, 'register');
  await rejectsWithCode(agent.conn.busy(), 1003, 'map/agents/update needs lifecycle.canRegister too');
  await system.call('map/permissions/update', { clientId: agent.participantId, permissions: { lifecycle: { canRegister: true } } });
  const child = await agent.conn.callExtension('map/agents/register', { name: uid('child') });
  assert.equal(typeof child.agent.id, 'string');
});

test('an admin principal of the tenant may call it through the SDK client; other clients get 1003', async () => {
  const admin = await connectClient(gw, { name: uid('admin'), auth: ACME_ADMIN });
  const plain = await connectClient(gw, { name: uid('plain'), auth: ACME });
  const target = await connectClient(gw, { name: uid('target'), auth: ACME });
  const update = { clientId: target.participantId, permissions: { scopes: { canCreateScopes: false } } };

  await rejectsWithCode(plain.conn.callExtension('map/permissions/update', update), 1003, 'a client that is no admin');
  // A tenant that names its admins gives the right to them alone: claiming
  // to be a system participant is not enough there.
  const claimed = await connectSystem(gw, ACME);
  const refused = await rejectsWithCode(claimed.call('map/permissions/update', update), 1003, 'a system participant that is no admin');
  assert.match(refused.message, /admin principals/);
  const r = await admin.conn.callExtension('map/permissions/update', update);
  assert.equal(r.success, true);
  assert.equal(r.effectivePermissions.scopes.canCreateScopes, false);
  assert.equal(r.effectivePermissions.scopes.canManageScopes, true);
  const createScope = (h) => h.conn.callExtension('map/scopes/create', { name: uid('scope') });
  await rejectsWithCode(createScope(target), 1003, 'scopes/create with scopes.canCreateScopes revoked');
  assert.equal(typeof (await createScope(plain)).scope.id, 'string', 'only the target is changed');

  // Admins of one tenant are nobody in another.
  const stranger = await connectClient(gw, { name: uid('stranger') });
  await rejectsWithCode(admin.conn.callExtension('map/permissions/update', { clientId: stranger.participantId, permissions: { messaging: { canSend: false } } }), 2000, 'a participant of another tenant is unknown');
});

test('errors: unknown client 2000, the docs shape and bad params -32602, oneself and granting beyond one\'s own rights 1003', async () => {
  const system = await connectSystem(gw);
  const client = await connectClient(gw, { name: uid('target') });
  const call = (params) => system.call('map/permissions/update', params);

  await rejectsWithCode(call({ clientId: uid('nobody'), permissions: { messaging: { canSend: false } } }), 2000, 'unknown clientId');
  const docs = await rejectsWithCode(call({ clientId: client.participantId, permissions: { actions: { steerAgents: true } } }), -32602, 'MAPClientPermissions shape');
  assert.match(docs.message, /MAPClientPermissions/);
  await rejectsWithCode(client.conn.callExtension('map/permissions/update'), 1003, 'no params, from a client');
  await rejectsWithCode(call(undefined), -32602, 'no params: clientId is required');
  await rejectsWithCode(call({ clientId: client.participantId }), -32602, 'no permissions');
  await rejectsWithCode(call({ clientId: client.participantId, permissions: { messaging: { canSend: 'no' } } }), -32602, 'a flag that is no boolean');
  await rejectsWithCode(call({ clientId: client.participantId, permissions: { bogus: { canX: true } } }), -32602, 'an unknown group');
  await rejectsWithCode(call({ clientId: system.connectResult.participantId, permissions: { messaging: { canSend: true } } }), 1003, 'oneself');

  // A system whose own canSend was revoked cannot grant it to anyone.
  const other = await connectSystem(gw);
  await other.call('map/permissions/update', { clientId: system.connectResult.participantId, permissions: { messaging: { canSend: false } } });
  const beyond = await rejectsWithCode(call({ clientId: client.participantId, permissions: { messaging: { canSend: true } } }), 1003, 'granting what the caller lacks');
  assert.match(beyond.message, /messaging\.canSend/);
  const revoke = await call({ clientId: client.participantId, permissions: { messaging: { canSend: false } } });
  assert.equal(revoke.success, true, 'revoking needs no right of one\'s own');
});

describe('two nodes: the target served by node a, the update made on node b', () => {
  let cluster;
  before(async () => { cluster = await startCluster(['a', 'b'], { tenants: TENANTS }); });
  after(async () => { await cluster?.stop(); });

  test('the target\'s next request on node a obeys the update node b answered', async () => {
    const { a, b } = cluster.nodes;
    const target = await connectAgent(a, { name: uid('target-on-a') });
    const peer = await connectAgent(a, { name: uid('peer-on-a') });
    const system = await connectSystem(b);
    // Node b knows the target once its agent is listed there (its session is mirrored before it).
    await pollUntil(() => system.call('map/agents/list', {}), (l) => agentIds(l).includes(target.id), { timeoutMs: 10_000, what: `agent ${target.id} on node b` });

    const r = await system.call('map/permissions/update', { clientId: target.participantId, permissions: { messaging: { canSend: false } } });
    assert.equal(r.effectivePermissions.messaging.canSend, false);
    await rejectsWithCode(target.conn.send({ agent: peer.id }, { marker: uid('x') }), 1003, 'send on node a right after node b answered');
    assert.doesNotMatch(b.stderr(), /not yet confirmed/, 'node b answered once node a had the change');

    await system.call('map/permissions/update', { clientId: target.participantId, permissions: { messaging: { canSend: true } } });
    const sent = await target.conn.send({ agent: peer.id }, { marker: uid('y') });
    assert.deepEqual(sent.delivered, [peer.id], 'granted back, from node b');
  });
  test('observation.canObserve revoked from node b: the target\'s subscription on node a stops sending, and goes on once granted back', async () => {
    const { a, b } = cluster.nodes;
    const target = await connectClient(a, { name: uid('observer-on-a') });
    const sub = await target.conn.subscribe({ eventTypes: ['agent_registered'] });
    // Fan-out on node a serves both subscriptions at once: once the bystander has an event, the target's was decided.
    const bystander = await connectClient(a, { name: uid('bystander-on-a') });
    const seen = await bystander.conn.subscribe({ eventTypes: ['agent_registered'] });
    const system = await connectSystem(b);
    await pollUntil(() => system.call('map/permissions/update', { clientId: target.participantId, permissions: { observation: { canObserve: false } } }).then(() => true, () => false),
      (done) => done, { timeoutMs: 10_000, what: `participant ${target.participantId} known on node b` });
    const unseen = await connectAgent(a, { name: uid('while-revoked') });
    await bystander.tap.waitForEvents(seen.id, (e) => e.data?.agentId === unseen.id);
    await system.call('map/permissions/update', { clientId: target.participantId, permissions: { observation: { canObserve: true } } });
    const last = await connectAgent(a, { name: uid('after') });
    const [ev] = await target.tap.waitForEvents(sub.id, (e) => e.data?.agentId === last.id);
    assert.equal(ev.sequenceNumber, 1, 'the first event it sent');
    assert.deepEqual(target.tap.events(sub.id).map((p) => p.event.data?.agentId), [last.id], `nothing about ${unseen.id}`);
  });
});
