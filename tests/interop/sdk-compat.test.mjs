// What the SDK's own clients expect on the wire: scopes created on register,
// event.source as an id, flat and nested event data, event types spelled as
// the filter names them, resume restoring the state an agent had before
// suspend, pausing a subscription, refreshAuth, and a taken agent id.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, connectAgent, connectClient, uid, pollUntil, WAIT_MS, quietPeriod } from './harness.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

/** Collect a subscription's events until `pred` holds for one, or fail. */
const waitFor = (seen, pred, what) => pollUntil(() => seen.map((e) => e.type), () => seen.some(pred), { timeoutMs: WAIT_MS * 2, intervalMs: 20, what })
  .then(() => seen.find(pred));

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

test('events come typed as the subscription names them: agent.registered, session.connected, scope.created', async () => {
  const w = await connectClient(gw, { name: 'alias-watch' });
  const sub = await w.conn.subscribe({ eventTypes: ['agent.registered', 'session.connected', 'scope.created'] });
  const snake = await w.conn.subscribe({ eventTypes: ['agent_registered', 'participant_connected', 'scope_created'] });
  const seen = [];
  const seenSnake = [];
  sub.on('event', (e) => seen.push(e));
  snake.on('event', (e) => seenSnake.push(e));
  const room = uid('alias-room');
  const a = await connectAgent(gw, { name: uid('alias-agent'), scopes: [room] });
  await waitFor(seen, (e) => e.type === 'agent.registered' && e.data?.agentId === a.id, 'agent.registered');
  await waitFor(seen, (e) => e.type === 'session.connected' && e.data?.participantId === a.participantId, 'session.connected');
  await waitFor(seen, (e) => e.type === 'scope.created' && e.data?.scopeId === room, 'scope.created');
  await waitFor(seenSnake, (e) => e.type === 'agent_registered' && e.data?.agentId === a.id, 'agent_registered');
  await waitFor(seenSnake, (e) => e.type === 'participant_connected' && e.data?.participantId === a.participantId, 'participant_connected');
  await waitFor(seenSnake, (e) => e.type === 'scope_created' && e.data?.scopeId === room, 'scope_created');
  await a.conn.busy();
  // An event the subscription does take, raised after: once it is in, a state change would be too.
  const later = await connectAgent(gw, { name: uid('alias-later') });
  await waitFor(seen, (e) => e.type === 'agent.registered' && e.data?.agentId === later.id, 'agent.registered after the state change');
  assert.ok(!seen.some((e) => /state/.test(e.type)), 'other types stay out');
  // map/replay spells by its own filter.
  const page = await w.conn.replay({ filter: { eventTypes: ['agent.registered'] } });
  const mine = page.events.find((r) => r.event.data?.agentId === a.id);
  assert.equal(mine?.event.type, 'agent.registered', JSON.stringify(page.events.map((r) => r.event.type)));
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

test('suspend → resume → stop of a registered agent, as the conformance suite calls it: resume answers idle', async () => {
  const a = await connectAgent(gw, { name: uid('conformance') });
  assert.equal(a.agent.state, 'registered');
  const k = await connectClient(gw, { name: 'conformance-client' });
  assert.equal((await k.conn.callExtension('map/agents/suspend', { agentId: a.id })).agent.state, 'suspended');
  assert.equal((await k.conn.callExtension('map/agents/resume', { agentId: a.id })).agent.state, 'idle');
  assert.equal((await k.conn.callExtension('map/agents/stop', { agentId: a.id })).agent.state, 'stopped');
});

test('a second AgentConnection with a taken agentId is refused with "already exists"', async () => {
  const id = uid('fixed-id');
  await connectAgent(gw, { name: 'first', agentId: id });
  await assert.rejects(connectAgent(gw, { name: 'second', agentId: id }), (e) => {
    assert.equal(e.code, 3000, `${e.code} ${e.message}`);
    assert.match(e.message, /already exists/);
    return true;
  });
});

test('streaming: supportsPause, and a subscription paused on the gateway holds its events until resumed', async () => {
  const w = await connectClient(gw, { name: 'pause-watch' });
  assert.equal(w.conn.serverCapabilities?.streaming?.supportsPause, true, JSON.stringify(w.connectResult.capabilities));
  assert.equal(w.conn.serverCapabilities?.streaming?.supportsAck, true);
  const sub = await w.conn.subscribe({ eventTypes: ['agent_registered'] });
  const seen = [];
  sub.on('event', (e) => seen.push(e));
  const paused = await w.conn.callExtension('map/subscriptions/pause', { subscriptionId: sub.id });
  assert.equal(paused.success, true);
  const held = [];
  for (let i = 0; i < 3; i++) held.push((await connectAgent(gw, { name: uid('held') })).id);
  await quietPeriod();
  assert.deepEqual(seen.filter((e) => held.includes(e.data?.agentId)), [], 'nothing while paused');
  await w.conn.callExtension('map/subscriptions/resume', { subscriptionId: sub.id });
  await waitFor(seen, (e) => e.data?.agentId === held[2], 'the held events after the resume');
  assert.deepEqual(seen.map((e) => e.data?.agentId).filter((id) => held.includes(id)), held, 'in order');
  assert.equal(sub.lastSequenceNumber, seen.length, 'numbered without a gap');
  // The SDK's own client-side pause still works on top.
  sub.pause();
  assert.equal(sub.isPaused, true);
  sub.resume();
  assert.equal(sub.isPaused, false);
});

test('refreshAuth answers {success, principal}, or {success: false, error}', async () => {
  const c = await connectClient(gw, { name: 'refresher', auth: { method: 'api-key', credential: 'acme-key' } });
  const ok = await c.conn.refreshAuth({ method: 'api-key', credential: 'acme-key' });
  assert.equal(ok.success, true, JSON.stringify(ok));
  assert.equal(ok.principal?.id, c.connectResult.principal.id);
  assert.equal(typeof ok.accessToken, 'string');
  const bad = await c.conn.refreshAuth({ method: 'api-key', credential: 'not-a-key' });
  assert.equal(bad.success, false, JSON.stringify(bad));
  assert.equal(bad.error?.code, 'invalid_credentials');
  assert.ok(Array.isArray((await c.conn.listAgents()).agents), 'the session goes on');
});
