// Agent-level permissions with the real SDK: permissionOverrides on map/agents/register and
// map/agents/update (merged per section, permissions_agent_updated with the SDK's own resolution
// of the effective rules), canSee (agents, scopes, structure), canMessage (agents, scopes) and
// acceptsFrom (agents, clients) enforced as 1003 for a named target and as a skipped recipient
// for a group; the tenant's templates per role, which only an admin may override; and the rules
// of an agent on one cluster node holding for a sender on another.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { resolveAgentPermissions } from '@multi-agent-protocol/sdk';
import {
  startGateway, startCluster, connectAgent, connectClient, rawParticipant, rejectsWithCode,
  agentIds, normType, uid, pollUntil, DEFAULT_TENANTS,
} from './harness.mjs';

const ACME = { method: 'api-key', credential: 'acme-key' };
const ACME_ADMIN = { method: 'api-key', credential: 'acme-admin-key' };
const TENANTS = [
  DEFAULT_TENANTS[0],
  {
    id: 'acme',
    toml: [
      'api_keys = [{ key = "acme-admin-key", principal = "acme-admin" }, "acme-key"]',
      'admin_principals = ["acme-admin"]',
      'agent_permissions = { roles = { worker = { canSee = { agents = "hierarchy" }, acceptsFrom = { clients = "none" } } } }',
    ].join('\n'),
  },
];

let gw;
before(async () => { gw = await startGateway({ tenants: TENANTS }); });
after(async () => { await gw?.stop(); });

const update = (h, permissionOverrides) => h.conn.callExtension('map/agents/update', { agentId: h.id, permissionOverrides });
const listIds = async (h) => agentIds(await h.conn.callExtension('map/agents/list', {}));

test('an update merges overrides per section and emits permissions_agent_updated with the SDK\'s effective rules', async () => {
  const watcher = await connectClient(gw, { name: uid('watch') });
  const sub = await watcher.conn.subscribe({ eventTypes: ['permissions_agent_updated'] });
  const a = await connectAgent(gw, { name: uid('a'), role: 'analyst' });

  await update(a, { canSee: { agents: 'scoped', scopes: 'member' }, acceptsFrom: { clients: 'none' } });
  const r = await update(a, { canSee: { agents: 'hierarchy' }, acceptsFrom: { clients: null } });
  assert.deepEqual(r.agent.permissionOverrides, { canSee: { agents: 'hierarchy', scopes: 'member' } }, 'given keys overwrite, null removes, other keys stay');

  const mine = (ev) => normType(ev?.type) === 'permissions_agent_updated' && ev.data?.agentId === a.id;
  const seen = await watcher.tap.waitForEvents(sub.id, mine, 2);
  const last = seen[1].event;
  assert.deepEqual(last.data.changes, { canSee: { agents: 'hierarchy' }, acceptsFrom: { clients: null } });
  assert.equal(last.data.updatedBy, a.participantId);
  assert.equal(last.source?.agentId ?? last.source, a.id);
  assert.deepEqual(last.data.effectivePermissions, resolveAgentPermissions(r.agent), 'the gateway resolves as the SDK does');
  assert.equal(last.data.effectivePermissions.acceptsFrom.clients, 'all');
});

test('canSee.agents and canSee.scopes narrow what the agent\'s session lists and gets', async () => {
  const scope = uid('team');
  const a = await connectAgent(gw, { name: uid('seer'), scopes: [scope] });
  const mate = await connectAgent(gw, { name: uid('mate'), scopes: [scope] });
  const stranger = await connectAgent(gw, { name: uid('stranger') });
  const before = await listIds(a);
  assert.ok(before.includes(stranger.id), 'everything is open until a rule says otherwise');

  await update(a, { canSee: { agents: 'scoped', scopes: 'member' } });
  const after = await listIds(a);
  assert.ok(after.includes(a.id) && after.includes(mate.id), `own and scope-mates stay: ${after}`);
  assert.ok(!after.includes(stranger.id), 'an agent sharing no scope is gone');
  await rejectsWithCode(a.conn.callExtension('map/agents/get', { agentId: stranger.id }), 2001, 'a hidden agent is not found');
  assert.ok((await listIds(stranger)).includes(a.id), 'the rule is the viewer\'s own: others still see it');

  const other = uid('other-scope');
  await stranger.conn.callExtension('map/scopes/create', { scopeId: other });
  const scopes = (await a.conn.callExtension('map/scopes/list', {})).scopes.map((s) => s.id);
  assert.ok(scopes.includes(scope) && !scopes.includes(other), `member scopes only: ${scopes}`);
  await rejectsWithCode(a.conn.callExtension('map/scopes/get', { scopeId: other }), 2002);

  await update(a, { canSee: { agents: { include: [stranger.id] } } });
  assert.deepEqual((await listIds(a)).sort(), [a.id, stranger.id].sort(), 'an allowlist shows just those (and the agent itself)');
});

test('canSee.structure none hides the hierarchy\'s edges', async () => {
  const parent = await connectAgent(gw, { name: uid('parent') });
  const child = await rawParticipant(gw, { participantType: 'agent', register: { name: uid('child'), parent: parent.id } });
  const edges = async () => (await parent.conn.callExtension('map/structure/graph', { rootAgentId: parent.id })).edges;
  assert.equal((await edges()).length, 1);
  await update(parent, { canSee: { structure: 'none' } });
  assert.deepEqual(await edges(), []);
  await update(parent, { canSee: { structure: 'local' } });
  assert.deepEqual((await edges()).map((e) => e.to), [child.agent.id], 'local: edges that touch its own agents');
});

test('acceptsFrom refuses a named sender with 1003 and leaves it out of a group', async () => {
  const scope = uid('room');
  const target = await connectAgent(gw, { name: uid('target'), scopes: [scope] });
  const friend = await connectAgent(gw, { name: uid('friend'), scopes: [scope] });
  const other = await connectAgent(gw, { name: uid('other'), scopes: [scope] });
  const client = await connectClient(gw, { name: uid('client') });
  await update(target, { acceptsFrom: { clients: 'none', agents: { include: [friend.id] } } });

  await rejectsWithCode(client.conn.send({ agent: target.id }, { marker: uid('c') }), 1003, 'clients: none');
  await rejectsWithCode(other.conn.send({ agent: target.id }, { marker: uid('o') }), 1003, 'not on the allowlist');
  const ok = await friend.conn.send({ agent: target.id }, { marker: uid('f') });
  assert.deepEqual(ok.delivered, [target.id]);

  const group = await other.conn.send({ scope }, { marker: uid('g') });
  assert.ok(!group.delivered.includes(target.id), `a scope send skips the refusing member: ${group.delivered}`);
  assert.ok(group.delivered.includes(friend.id));
});

test('canMessage limits whom the agent may send to, agents and scopes', async () => {
  const room = uid('room');
  const sender = await connectAgent(gw, { name: uid('sender') });
  const child = await rawParticipant(gw, { participantType: 'agent', register: { name: uid('kid'), parent: sender.id, scopes: [room] } });
  const stranger = await connectAgent(gw, { name: uid('stranger'), scopes: [room] });
  await update(sender, { canMessage: { agents: 'hierarchy', scopes: 'member' } });

  await rejectsWithCode(sender.conn.send({ agent: stranger.id }, { marker: uid('s') }), 1003, 'outside its hierarchy');
  assert.deepEqual((await sender.conn.send({ agent: child.agent.id }, { marker: uid('k') })).delivered, [child.agent.id]);
  await rejectsWithCode(sender.conn.send({ scope: room }, { marker: uid('r') }), 1003, 'a scope it is not a member of');
  const wide = await sender.conn.send({ broadcast: true }, { marker: uid('b') });
  assert.ok(!wide.delivered.includes(stranger.id) && wide.delivered.includes(child.agent.id), `broadcast reaches only its hierarchy: ${wide.delivered}`);
});

test('a tenant\'s role template applies, and only an admin may override the keys it sets', async () => {
  const worker = await connectAgent(gw, { name: uid('worker'), role: 'worker', auth: ACME });
  const boss = await connectAgent(gw, { name: uid('boss'), auth: ACME });
  const client = await connectClient(gw, { name: uid('client'), auth: ACME });
  assert.deepEqual(await listIds(worker), [worker.id], 'hierarchy: an agent without family sees itself only');
  await rejectsWithCode(client.conn.send({ agent: worker.id }, { marker: uid('c') }), 1003, 'the template refuses clients');

  await rejectsWithCode(update(worker, { canSee: { agents: 'all' } }), 1003, 'a key the operator set');
  const own = await update(worker, { canMessage: { agents: 'scoped' } });
  assert.equal(own.agent.permissionOverrides.canMessage.agents, 'scoped', 'keys the template leaves open are the agent\'s own');

  const admin = await rawParticipant(gw, {
    participantType: 'agent', auth: ACME_ADMIN,
    register: { name: uid('lead'), role: 'worker', permissionOverrides: { canSee: { agents: 'all' } } },
  });
  assert.equal(admin.agent.permissionOverrides.canSee.agents, 'all', 'an admin principal may');
  assert.ok(agentIds(await admin.call('map/agents/list', {})).includes(boss.id));

  const bad = await rawParticipant(gw, { participantType: 'agent', auth: ACME });
  await assert.rejects(bad.call('map/agents/register', { name: 'x', permissionOverrides: { canSee: { agents: 'everyone' } } }), (e) => e.code === -32602);
  await assert.rejects(bad.call('map/agents/register', { name: 'x', permissionOverrides: { canFly: {} } }), (e) => e.code === -32602);
});

test('in a cluster, an agent\'s overrides hold for senders served by another node', async () => {
  const cluster = await startCluster(['a', 'b']);
  try {
    const { a, b } = cluster.nodes;
    const target = await connectAgent(a, { name: uid('target') });
    await update(target, { acceptsFrom: { clients: 'none' } });
    const client = await connectClient(b, { name: uid('client') });
    await pollUntil(
      () => client.conn.send({ agent: target.id }, { marker: uid('m') }).then(() => 'delivered', (e) => e.code),
      (code) => code === 1003,
      { what: 'node b refusing the client with 1003' },
    );
    const peer = await connectAgent(b, { name: uid('peer') });
    const sent = await peer.conn.send({ agent: target.id }, { marker: uid('p') });
    assert.deepEqual(sent.delivered, [target.id], 'agents are still accepted');
  } finally {
    await cluster.stop();
  }
});
