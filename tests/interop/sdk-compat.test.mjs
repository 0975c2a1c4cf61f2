// What the SDK's own clients expect on the wire: scopes created on register,
// event.source as an id, flat and nested event data, dotted type aliases,
// and resume restoring the state an agent had before suspend.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, connectAgent, connectClient, uid, sleep, WAIT_MS } from './harness.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

/** Collect a subscription's events until `pred` holds for one, or fail. */
async function waitFor(seen, pred, what) {
  const deadline = Date.now() + WAIT_MS * 2;
  while (Date.now() < deadline) {
    const hit = seen.find(pred);
    if (hit) return hit;
    await sleep(20);
  }
  assert.fail(`${what}: not among ${JSON.stringify(seen.map((e) => e.type))}`);
}

test('AgentConnection.connect with scopes that do not exist yet registers the agent and creates them', async () => {
  const s1 = uid('new-scope');
  const s2 = uid('new-scope');
  const a = await connectAgent(gw, { name: 'scoped', scopes: [s1, s2] });
  assert.deepEqual([...a.agent.scopes].sort(), [s1, s2].sort());
  const k = await connectClient(gw, { name: 'scope-reader' });
  const scope = await k.conn.getScope(s1);
  assert.equal(scope.id, s1);
  assert.equal(scope.joinPolicy, 'open');
  const members = await k.conn.getScopeMembers(s2);
  assert.ok(JSON.stringify(members).includes(a.id), JSON.stringify(members));
  // A second agent joins the now existing scope and the two can talk through it.
  const b = await connectAgent(gw, { name: 'scoped-2', scopes: [s1] });
  const res = await b.conn.send({ scope: s1 }, { hi: 1 });
  assert.deepEqual(res.delivered, [a.id]);
});

test('event.source is the causing agent, and a fromAgents filter compares it', async () => {
  const w = await connectClient(gw, { name: 'source-watch' });
  const a = await connectAgent(gw, { name: uid('src-a') });
  const sub = await w.conn.subscribe({ fromAgents: [a.id] });
  const seen = [];
  sub.on('event', (e) => seen.push(e));
  const other = await connectAgent(gw, { name: uid('src-b') });
  await other.conn.busy();
  await a.conn.busy();
  const ev = await waitFor(seen, (e) => e.type === 'agent_state_changed', 'a state change of agent a');
  assert.equal(typeof ev.source, 'string');
  assert.equal(ev.source, a.id);
  assert.ok(seen.every((e) => e.source === a.id), `only agent a's events: ${JSON.stringify(seen.map((e) => e.source))}`);
  // A client's own event names its participant.
  const w2 = await connectClient(gw, { name: 'source-watch-2' });
  const sub2 = await w2.conn.subscribe({ eventTypes: ['participant_connected'] });
  const seen2 = [];
  sub2.on('event', (e) => seen2.push(e));
  const k = await connectClient(gw, { name: uid('joiner') });
  const joined = await waitFor(seen2, (e) => e.data?.participantId === k.participantId, 'participant_connected');
  assert.equal(joined.source, k.participantId);
});

test('subscriptions by dotted alias: agent.registered, session.connected', async () => {
  const w = await connectClient(gw, { name: 'alias-watch' });
  const sub = await w.conn.subscribe({ eventTypes: ['agent.registered', 'session.connected'] });
  const seen = [];
  sub.on('event', (e) => seen.push(e));
  const name = uid('alias-agent');
  const a = await connectAgent(gw, { name });
  await waitFor(seen, (e) => e.type === 'agent_registered' && e.data?.agentId === a.id, 'agent.registered');
  await waitFor(seen, (e) => e.type === 'participant_connected' && e.data?.participantId === a.participantId, 'session.connected');
  await a.conn.busy();
  await sleep(100);
  assert.ok(!seen.some((e) => e.type === 'agent_state_changed'), 'other types stay out');
});

test('event data is both flat and nested', async () => {
  const w = await connectClient(gw, { name: 'data-watch' });
  const sub = await w.conn.subscribe({ eventTypes: ['agent.registered'] });
  const seen = [];
  sub.on('event', (e) => seen.push(e));
  const name = uid('flat');
  const a = await connectAgent(gw, { name, role: 'flat-role' });
  const ev = await waitFor(seen, (e) => e.data?.agentId === a.id, 'agent_registered');
  // The SDK's own server's flat fields …
  assert.equal(ev.data.agentId, a.id);
  assert.equal(ev.data.ownerId, a.participantId);
  assert.equal(ev.data.name, name);
  assert.equal(ev.data.role, 'flat-role');
  // … beside the nested agent.
  assert.equal(ev.data.agent.id, a.id);
  assert.equal(ev.data.agent.name, name);
});

test('suspend then resume restores the state the agent had', async () => {
  const a = await connectAgent(gw, { name: uid('sleeper') });
  await a.conn.busy();
  const k = await connectClient(gw, { name: 'controller' });
  const suspended = await k.conn.suspendAgent(a.id, 'pause');
  assert.equal(suspended.agent.state, 'suspended');
  const resumed = await k.conn.resumeAgent(a.id);
  assert.equal(resumed.agent.state, 'busy');
  assert.equal((await k.conn.getAgent(a.id)).agent.state, 'busy');
});
