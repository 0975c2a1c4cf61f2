// Session resume via resumeToken, and map/replay after a reconnect.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { isOrphanedAgent } from '@multi-agent-protocol/sdk';
import {
  startGateway, connectBase, connectAgent, connectClient, rawParticipant, rawSocket, assertMapError, rejectsWithCode,
  agentIds, normType, mentions, eventIdLess, uid, sleep, pollUntil, openConnections, QUIET_MS, WAIT_MS,
} from './harness.mjs';

let gw;
before(async () => { gw = await startGateway({ resumeWindowSecs: 300 }); });
after(async () => { await gw?.stop(); });

test('resume with resumeToken: same sessionId, reconnected, agents and subscriptions back, messages flow', async () => {
  const observer = await connectClient(gw, { name: 'resume-observer' });
  const first = await rawParticipant(gw, { participantType: 'agent', name: 'resumer', register: { name: 'resumable', role: 'resumable' } });
  const agentId = first.agent.id;
  const sessionId = first.connectResult.sessionId;
  const sub = await first.call('map/subscribe', { filter: { eventTypes: ['agent_state_changed'] } });
  assert.equal(typeof sub.subscriptionId, 'string');

  const bye = await first.call('map/disconnect', { reason: 'network change' });
  assert.equal(bye.success, true);
  assert.equal(typeof bye.resumeToken, 'string');
  const open = await openConnections(gw, 'websocket');
  first.close();
  // Checked once the gateway has let the closed socket go.
  await pollUntil(() => openConnections(gw, 'websocket'), (n) => n < open, { timeoutMs: WAIT_MS * 4, intervalMs: 10, what: 'the closed socket to be let go' });

  // while away, the agent still exists (within the resume window)
  assert.ok(agentIds(await observer.conn.listAgents()).includes(agentId), 'agent kept during the resume window');

  const second = await rawSocket(gw);
  const res = await second.call('map/connect', { protocolVersion: 1, participantType: 'agent', resumeToken: bye.resumeToken });
  assert.equal(res.sessionId, sessionId, 'same sessionId after resume');
  assert.equal(res.reconnected, true, 'reconnected: true');

  const list = await second.call('map/agents/list', {});
  const mine = list.agents.find((a) => a.id === agentId);
  assert.ok(mine, 'agent still registered after resume');
  assert.notEqual(mine.state, 'stopped');

  // messages to the agent reach the resumed connection
  const sender = await connectAgent(gw, { name: 'resume-sender' });
  const marker = uid('resumed-msg');
  const sent = await sender.conn.send({ agent: agentId }, { marker });
  assert.deepEqual(sent.delivered, [agentId]);
  const msg = await second.tap.waitUntil(() => second.tap.messages((m) => m?.payload?.marker === marker)[0], 1500, 'map/message on resumed socket');
  assert.equal(msg.from, sender.id);

  // the old subscription is back, under the same id
  await sender.conn.busy();
  const evs = await second.tap.waitForEvents(sub.subscriptionId, (e) => mentions(e, sender.id));
  assert.equal(normType(evs[0].event.type), 'agent_state_changed');

  // and the agent can still act as itself
  const m2 = uid('from-resumed');
  const back = await second.call('map/send', { to: { agent: sender.id }, payload: { marker: m2 } });
  assert.deepEqual(back.delivered, [sender.id]);
  const got = await sender.tap.waitUntil(() => sender.tap.messages((m) => m?.payload?.marker === m2)[0], 1500, 'reply from resumed agent');
  assert.equal(got.from, agentId, 'from is still the resumed agent id');
});

test('ClientConnection: disconnect() token → new ClientConnection.connect({resumeToken}) resumes the session', async () => {
  const c1 = await connectClient(gw, { name: 'client-resume' });
  const token = await c1.conn.disconnect();
  assert.equal(typeof token, 'string');
  const c2 = await connectClient(gw, { name: 'client-resume', resumeToken: token });
  assert.equal(c2.connectResult.reconnected, true);
  assert.equal(c2.sessionId, c1.sessionId);
  assert.equal(c2.conn.sessionId, c1.sessionId);
});

test('map/replay after a reconnect returns the missed events in order, with filter and paging', async () => {
  const tag = uid('replay');
  const c1 = await connectClient(gw, { name: 'replayer' });
  const sub = await c1.conn.subscribe({ eventTypes: ['agent_registered', 'agent_state_changed'] });
  const early = await connectAgent(gw, { name: `${tag}-early` });
  const seenEvs = await c1.tap.waitForEvents(sub.id, (e) => mentions(e, early.id));
  const lastSeen = seenEvs.at(-1).eventId;
  assert.equal(typeof lastSeen, 'string', 'map/event carries eventId');
  // The SDK's reader handles the frame the tap already saw.
  const tapLast = c1.tap.events(sub.id).at(-1).eventId;
  await pollUntil(() => sub.lastEventId, (id) => id === tapLast, { timeoutMs: WAIT_MS, intervalMs: 5, what: 'SDK Subscription tracked lastEventId from map/event' });
  await c1.conn.disconnect();

  // events while the client is away
  const missed1 = await connectAgent(gw, { name: `${tag}-missed-1` });
  const missed2 = await connectAgent(gw, { name: `${tag}-missed-2` });
  await missed1.conn.busy();
  await missed2.conn.busy();
  await missed1.conn.idle();

  const c2 = await connectClient(gw, { name: 'replayer-again' });
  await pollUntil(() => c2.conn.replay({ afterEventId: lastSeen, filter: { eventTypes: ['agent_state_changed'] } }), (f) => f.events.length >= 3,
    { timeoutMs: WAIT_MS * 4, intervalMs: 10, what: 'the three state changes in the log' });
  const r = await c2.conn.replay({ afterEventId: lastSeen });
  assert.ok(Array.isArray(r.events), `replay result {events, hasMore}, got ${JSON.stringify(r).slice(0, 300)}`);
  assert.equal(typeof r.hasMore, 'boolean');
  const ids = r.events.map((x) => x.eventId);
  assert.ok(!ids.includes(lastSeen), 'afterEventId is exclusive');
  assert.equal(new Set(ids).size, ids.length, 'unique eventIds');
  for (let i = 1; i < ids.length; i++) assert.ok(eventIdLess(ids[i - 1], ids[i]), 'replay is in eventId order');
  for (const item of r.events) {
    assert.equal(typeof item.eventId, 'string');
    assert.equal(typeof item.timestamp, 'number', 'replayed item timestamp');
    assert.ok(item.event && typeof item.event.type === 'string', 'replayed item carries event');
    assert.ok(eventIdLess(lastSeen, item.eventId), `every replayed event comes after ${lastSeen}`);
  }
  const find = (type, id) => r.events.findIndex((x) => normType(x.event.type) === type && mentions(x.event, id));
  const i1 = find('agent_registered', missed1.id);
  const i2 = find('agent_registered', missed2.id);
  const i3 = find('agent_state_changed', missed1.id);
  assert.ok(i1 >= 0 && i2 >= 0 && i3 >= 0, 'missed registrations and state change are replayed');
  assert.ok(i1 < i2 && i2 < i3, 'replayed in the order they happened');
  assert.ok(find('agent_registered', early.id) < 0, 'events up to afterEventId are not replayed');

  // with a filter
  const f = await c2.conn.replay({ afterEventId: lastSeen, filter: { eventTypes: ['agent_state_changed'] } });
  assert.ok(f.events.length >= 3);
  assert.ok(f.events.every((x) => normType(x.event.type) === 'agent_state_changed'), 'replay honours filter.eventTypes');
  assert.ok(f.events.some((x) => mentions(x.event, missed2.id)));

  // with paging
  const p1 = await c2.conn.replay({ afterEventId: lastSeen, limit: 2, filter: { eventTypes: ['agent_registered', 'agent_state_changed'] } });
  assert.equal(p1.events.length, 2, 'limit honoured');
  assert.equal(p1.hasMore, true, 'more events remain');
  // keyset paging from lastSeen (SDK replayAll() always starts from the beginning, so page by hand)
  const all = [];
  let cursor = lastSeen;
  for (let page = 0; page < 100; page++) {
    const pr = await c2.conn.replay({ afterEventId: cursor, limit: 2, filter: { eventTypes: ['agent_registered', 'agent_state_changed'] } });
    assert.ok(pr.events.length <= 2);
    all.push(...pr.events.map((x) => x.eventId));
    if (!pr.hasMore || pr.events.length === 0) break;
    cursor = pr.events.at(-1).eventId;
  }
  assert.equal(new Set(all).size, all.length, 'paging yields no duplicates');
  assert.deepEqual(all.slice(0, 2), p1.events.map((x) => x.eventId));
  // SDK replayAll() walks the whole log (from the start) without duplicates and includes the missed events
  const everything = [];
  for await (const item of c2.conn.replayAll({ filter: { eventTypes: ['agent_registered'] }, limit: 3 })) {
    everything.push(item);
    if (everything.length > 2000) break;
  }
  assert.equal(new Set(everything.map((x) => x.eventId)).size, everything.length, 'replayAll: no duplicates');
  assert.ok(everything.some((x) => mentions(x.event, early.id)) && everything.some((x) => mentions(x.event, missed2.id)), 'replayAll covers before and after the disconnect');
  assert.ok(all.length >= 5, `at least the 5 missed events, got ${all.length}`);
});

test('map/replay by fromTimestamp/toTimestamp window', async () => {
  const c = await connectClient(gw, { name: 'ts-replayer' });
  // Timestamps are in ms: the sleeps let time pass so that each one differs.
  const t0 = Date.now();
  await sleep(20);
  const a = await connectAgent(gw, { name: 'ts-a' });
  await sleep(50);
  const t1 = Date.now();
  await sleep(50);
  const b = await connectAgent(gw, { name: 'ts-b' });
  await sleep(20);
  const r = await c.conn.replay({ fromTimestamp: t0, toTimestamp: t1, filter: { eventTypes: ['agent_registered'] } });
  assert.ok(r.events.some((x) => mentions(x.event, a.id)), 'event inside the window');
  assert.ok(!r.events.some((x) => mentions(x.event, b.id)), 'event after toTimestamp excluded');
  assert.ok(r.events.every((x) => x.timestamp >= t0 && x.timestamp <= t1), 'all timestamps inside the window');
});

test('map/session/list (sessions extension, advertised) via ClientConnection.listSessions', async () => {
  const c = await connectClient(gw, { name: 'lister' });
  const r = await c.conn.listSessions();
  assert.ok(Array.isArray(r.sessions), `{sessions: SessionInfo[]}, got ${JSON.stringify(r).slice(0, 300)}`);
  const mine = r.sessions.find((x) => x.id === c.sessionId);
  assert.ok(mine, 'own session listed');
  assert.equal(typeof mine.createdAt, 'number');
});

test('an id names one session: a participant id that is another session\'s agent is refused while that session is connected, and given way to once it dropped', async () => {
  const observer = await connectClient(gw, { name: uid('ids-observer') });
  const first = await connectAgent(gw, { name: uid('ids-holder') });
  const agentId = first.id;
  assert.notEqual(first.participantId, agentId, 'connected without an agentId: the participant id is another id');
  const connected = async () => agentIds(await observer.conn.listAgents({ filter: { connected: true } }));

  // Another connection asking for the agent's id as its participant id (as an SDK agent's
  // reconnect does): refused while the agent's own session is connected.
  const intruder = await rawSocket(gw);
  const refused = await intruder.request('map/connect', { protocolVersion: 1, participantType: 'agent', participantId: agentId });
  assertMapError(refused.error, 3000, 'map/connect {participantId: <a connected session\'s agent>}');
  assert.match(refused.error.message, /already exists/);
  intruder.close();
  // Every answer about the agent agrees with delivery: connected, and reached.
  assert.ok((await connected()).includes(agentId), 'listed with filter.connected: true');
  const marker = uid('still-there');
  assert.deepEqual((await observer.conn.send({ agent: agentId }, { marker })).delivered, [agentId]);
  await first.tap.waitUntil(() => first.tap.messages((m) => m?.payload?.marker === marker)[0], WAIT_MS, 'map/message at the agent');

  // Nor may another session register an agent under a connected participant's id.
  const client = await rawSocket(gw);
  const participantId = uid('named-client');
  await client.call('map/connect', { protocolVersion: 1, participantType: 'client', participantId });
  const squatter = await rawParticipant(gw, { participantType: 'agent', name: uid('squatter') });
  const taken = await squatter.request('map/agents/register', { agentId: participantId });
  assertMapError(taken.error, 3000, 'map/agents/register {agentId: <another session\'s participant id>}');

  // The agent's connection drops without a goodbye; the same agent connecting anew with its id
  // (AgentConnection.connect({agentId})) takes it over: the dropped session gives way.
  first.ws.terminate();
  await pollUntil(connected, (ids) => !ids.includes(agentId), { timeoutMs: WAIT_MS * 4, what: `${agentId} to be listed as not connected` });
  const again = await connectAgent(gw, { name: uid('ids-holder'), agentId });
  assert.equal(again.id, agentId);
  assert.equal(again.participantId, agentId);
  assert.ok((await connected()).includes(agentId), 'connected again, on the new session');
  const marker2 = uid('back');
  assert.deepEqual((await observer.conn.send({ agent: agentId }, { marker: marker2 })).delivered, [agentId]);
  await again.tap.waitUntil(() => again.tap.messages((m) => m?.payload?.marker === marker2)[0], WAIT_MS, 'map/message at the agent\'s new connection');
});

test('map/disconnect {policy}: orphan at once, with agent_orphaned {previousOwner} and ownerId null (the SDK\'s isOrphanedAgent); the goodbye\'s policy replaces the connect\'s', async () => {
  const observer = await connectClient(gw, { name: uid('policy-observer') });
  const sub = await observer.conn.subscribe({ eventTypes: ['agent_orphaned', 'agent_unregistered'] });
  const about = (id) => (ev) => ev?.data?.agentId === id;

  // As the SDK's own tests do it: BaseConnection, register, then a goodbye saying orphan.
  const leaving = await connectBase(gw);
  const hello = await leaving.request('map/connect', { protocolVersion: 1, participantType: 'agent', name: uid('orphaner') });
  const { agent } = await leaving.request('map/agents/register', { name: uid('orphan-me') });
  assert.equal(agent.ownerId, hello.participantId);
  const bye = await leaving.request('map/disconnect', { policy: { agentBehavior: 'orphan' } });
  assert.equal(typeof bye.resumeToken, 'string', 'still resumable');
  const [ev] = await observer.tap.waitForEvents(sub.id, about(agent.id));
  assert.equal(normType(ev.event.type), 'agent_orphaned');
  assert.equal(ev.event.data.previousOwner, hello.participantId, JSON.stringify(ev.event.data));
  assert.equal(ev.event.data.ownerId, null);
  const { agent: orphan } = await observer.conn.getAgent(agent.id);
  assert.equal(orphan.state, 'orphaned');
  assert.equal(isOrphanedAgent(orphan), true, `ownerId null: ${JSON.stringify(orphan)}`);

  // A connect's orphan policy, replaced at the goodbye by unregister.
  const other = await connectBase(gw);
  await other.request('map/connect', { protocolVersion: 1, participantType: 'agent', disconnectPolicy: { agentBehavior: 'orphan' } });
  const { agent: second } = await other.request('map/agents/register', { name: uid('unregister-me') });
  // A policy that is none of the three is refused, and the session goes on.
  await rejectsWithCode(other.request('map/disconnect', { policy: { agentBehavior: 'vanish' } }), -32602, 'unknown agentBehavior');
  await other.request('map/disconnect', { policy: { agentBehavior: 'unregister' } });
  const [gone] = await observer.tap.waitForEvents(sub.id, about(second.id));
  assert.equal(normType(gone.event.type), 'agent_unregistered');
  await rejectsWithCode(observer.conn.getAgent(second.id), 2001, 'unregistered at the goodbye');
  assert.equal(observer.tap.events(sub.id).length, 2, 'one event per agent');
});
