// map/subscribe + map/event: shape, gap-free sequence numbers, unique event ids, filters.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startGateway, connectAgent, connectClient, rawParticipant,
  normType, mentions, eventIdLess, sourceAgent, uid, sleep, pollUntil, quietPeriod, WAIT_MS,
} from './harness.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

/** map/event params on the subscription must be numbered 1..n without gaps, with unique increasing eventIds. */
function checkStream(tap, subId) {
  const evs = tap.events(subId);
  assert.ok(evs.length > 0, 'expected events on the subscription');
  evs.forEach((p, i) => {
    assert.equal(p.sequenceNumber, i + 1, `sequenceNumber must be ${i + 1} (1, 2, 3 … no gaps), got ${p.sequenceNumber}; all: ${evs.map((e) => e.sequenceNumber)}`);
  });
  const ids = evs.map((p) => p.eventId);
  assert.ok(ids.every((x) => typeof x === 'string' && x.length > 0), `eventId must be a non-empty string: ${ids}`);
  assert.equal(new Set(ids).size, ids.length, `eventIds must be unique: ${ids}`);
  for (let i = 1; i < ids.length; i++) {
    assert.ok(eventIdLess(ids[i - 1], ids[i]), `eventIds must be orderable (increasing): ${ids[i - 1]} then ${ids[i]}`);
  }
  return evs;
}

const typeIs = (t) => (ev) => normType(ev.type) === normType(t);

test('subscribe without filter: map/event shape, gap-free sequence, SDK Subscription receives events', async () => {
  const watcher = await connectClient(gw, { name: 'watch-all' });
  const sub = await watcher.conn.subscribe();
  assert.equal(typeof sub.id, 'string', 'SDK reads result.subscriptionId');
  const seen = [];
  sub.on('event', (e) => seen.push(e));

  const a = await connectAgent(gw, { name: 'ev-a', role: 'ev' });
  const b = await connectAgent(gw, { name: 'ev-b', role: 'ev' });
  await a.conn.busy();
  const scope = await a.conn.createScope({ name: uid('ev-scope') });
  await b.conn.joinScope(scope.id);

  await watcher.tap.waitForEvents(sub.id, (e) => typeIs('agent_registered')(e) && mentions(e, b.id));
  await watcher.tap.waitForEvents(sub.id, (e) => typeIs('agent_state_changed')(e) && mentions(e, a.id));
  await watcher.tap.waitForEvents(sub.id, (e) => typeIs('scope_created')(e) && mentions(e, scope.id));
  await watcher.tap.waitForEvents(sub.id, (e) => typeIs('scope_member_joined')(e) && mentions(e, scope.id) && mentions(e, b.id));
  await quietPeriod();

  const evs = checkStream(watcher.tap, sub.id);
  for (const p of evs) {
    assert.equal(p.subscriptionId, sub.id);
    assert.equal(typeof p.timestamp, 'number', 'map/event params.timestamp');
    assert.ok(p.event && typeof p.event === 'object', 'map/event params.event');
    assert.equal(typeof p.event.id, 'string', 'event.id');
    assert.equal(typeof p.event.type, 'string', 'event.type');
    assert.equal(typeof p.event.timestamp, 'number', 'event.timestamp');
  }
  const reg = evs.find((p) => typeIs('agent_registered')(p.event) && mentions(p.event, a.id));
  assert.ok(reg, 'agent_registered for ev-a');
  const st = evs.find((p) => typeIs('agent_state_changed')(p.event) && mentions(p.event, a.id));
  assert.equal(sourceAgent(st.event), a.id, 'event.source of an agent\'s own state change is that agent id');

  // the SDK Subscription saw exactly the same events, in order, and tracked the cursor
  assert.deepEqual(seen.map((e) => e.id), evs.map((p) => p.event.id));
  assert.equal(sub.lastSequenceNumber, evs.length);
  assert.equal(sub.lastEventId, evs.at(-1).eventId);
  await sub.unsubscribe();
});

test('two subscriptions on one connection are numbered independently', async () => {
  const w = await connectClient(gw);
  const s1 = await w.conn.subscribe();
  const x = await connectAgent(gw, { name: 'between' });
  await w.tap.waitForEvents(s1.id, (e) => mentions(e, x.id));
  const s2 = await w.conn.subscribe();
  assert.notEqual(s1.id, s2.id);
  const y = await connectAgent(gw, { name: 'after-both' });
  await w.tap.waitForEvents(s1.id, (e) => typeIs('agent_registered')(e) && mentions(e, y.id));
  await w.tap.waitForEvents(s2.id, (e) => typeIs('agent_registered')(e) && mentions(e, y.id));
  await quietPeriod();
  checkStream(w.tap, s1.id);
  const e2 = checkStream(w.tap, s2.id);
  assert.equal(e2[0].sequenceNumber, 1, 'a new subscription starts at 1');
  assert.ok(!e2.some((p) => typeIs('agent_registered')(p.event) && mentions(p.event, x.id)), 'no events from before the subscription');
});

test('filter eventTypes (exact)', async () => {
  const w = await connectClient(gw);
  const sub = await w.conn.subscribe({ eventTypes: ['agent_registered'] });
  const a = await connectAgent(gw, { name: 'et-a' });
  const b = await connectAgent(gw, { name: 'et-b' });
  await a.conn.busy();
  await a.conn.createScope({ name: uid('et-scope') });
  await w.tap.waitForEvents(sub.id, (e) => mentions(e, b.id));
  await quietPeriod();
  const evs = checkStream(w.tap, sub.id);
  assert.ok(evs.every((p) => normType(p.event.type) === 'agent_registered'), `only agent_registered: ${evs.map((p) => p.event.type)}`);
  assert.ok(evs.some((p) => mentions(p.event, a.id)) && evs.some((p) => mentions(p.event, b.id)));
});

test('filter eventTypes: dotted form and "prefix.*" (treat _ and . alike)', async () => {
  const w = await connectClient(gw);
  const dotted = await w.conn.subscribe({ eventTypes: ['agent.registered'] });
  const prefix = await w.conn.subscribe({ eventTypes: ['agent.*'] });
  const x = await connectAgent(gw, { name: 'prefix-x' });
  await x.conn.busy();
  const scope = await x.conn.createScope({ name: uid('prefix-scope') });
  await x.conn.joinScope(scope.id);
  const peer = await connectAgent(gw, { name: 'prefix-peer' });
  await x.conn.send({ agent: peer.id }, { marker: uid('m') });

  await w.tap.waitForEvents(dotted.id, (e) => mentions(e, peer.id));
  await w.tap.waitForEvents(prefix.id, (e) => typeIs('agent_state_changed')(e) && mentions(e, x.id));
  await w.tap.waitForEvents(prefix.id, (e) => typeIs('agent_registered')(e) && mentions(e, peer.id));
  await quietPeriod();

  const d = checkStream(w.tap, dotted.id);
  assert.ok(d.every((p) => normType(p.event.type) === 'agent_registered'), `dotted: ${d.map((p) => p.event.type)}`);
  assert.ok(d.some((p) => mentions(p.event, x.id)));
  const pr = checkStream(w.tap, prefix.id);
  assert.ok(pr.every((p) => normType(p.event.type).startsWith('agent_')), `prefix agent.* only agent_*: ${pr.map((p) => p.event.type)}`);
  assert.ok(pr.some((p) => typeIs('agent_registered')(p.event) && mentions(p.event, x.id)));
});

test('filter fromAgents (and its schema alias agents)', async () => {
  const w = await connectClient(gw);
  const a = await connectAgent(gw, { name: 'src-a' });
  const b = await connectAgent(gw, { name: 'src-b' });
  const s1 = await w.conn.subscribe({ fromAgents: [a.id] });
  const s2 = await w.conn.subscribe({ agents: [a.id] });
  await b.conn.busy();
  await a.conn.busy();
  await b.conn.idle();
  await a.conn.idle();
  for (const s of [s1, s2]) {
    await w.tap.waitForEvents(s.id, (e) => typeIs('agent_state_changed')(e) && sourceAgent(e) === a.id, 2);
  }
  await quietPeriod();
  for (const s of [s1, s2]) {
    const evs = checkStream(w.tap, s.id);
    assert.ok(evs.every((p) => sourceAgent(p.event) === a.id), `only events from ${a.id}: ${JSON.stringify(evs.map((p) => p.event.source))}`);
    assert.ok(!evs.some((p) => mentions(p.event, b.id)), 'nothing about src-b');
  }
});

test('filter roles and fromRoles', async () => {
  const wr = uid('worker-role');
  const mr = uid('manager-role');
  const w = await connectClient(gw);
  const worker = await connectAgent(gw, { name: 'r-worker', role: wr });
  const manager = await connectAgent(gw, { name: 'r-manager', role: mr });
  const sRoles = await w.conn.subscribe({ roles: [wr] });
  const sFrom = await w.conn.subscribe({ fromRoles: [wr] });
  await manager.conn.busy();
  await worker.conn.busy();
  await manager.conn.idle();
  await worker.conn.idle();
  for (const s of [sRoles, sFrom]) {
    await w.tap.waitForEvents(s.id, (e) => typeIs('agent_state_changed')(e) && mentions(e, worker.id), 2);
  }
  await quietPeriod();
  for (const s of [sRoles, sFrom]) {
    const evs = checkStream(w.tap, s.id);
    assert.ok(evs.every((p) => mentions(p.event, worker.id)), 'every event relates to the worker');
    assert.ok(!evs.some((p) => mentions(p.event, manager.id)), 'no event about the manager role');
  }
});

test('filter scopes', async () => {
  const w = await connectClient(gw);
  const x = await connectAgent(gw, { name: 'scoper' });
  const s1 = (await x.conn.createScope({ name: uid('s1') })).id;
  const s2 = (await x.conn.createScope({ name: uid('s2') })).id;
  const sub = await w.conn.subscribe({ scopes: [s1] });
  await x.conn.joinScope(s2);
  await x.conn.joinScope(s1);
  await x.conn.leaveScope(s2);
  await x.conn.leaveScope(s1);
  await w.tap.waitForEvents(sub.id, (e) => typeIs('scope_member_joined')(e));
  await w.tap.waitForEvents(sub.id, (e) => typeIs('scope_member_left')(e));
  await quietPeriod();
  const evs = checkStream(w.tap, sub.id);
  assert.ok(evs.filter((p) => typeIs('scope_member_joined')(p.event) || typeIs('scope_member_left')(p.event)).length === 2, `exactly the join and the leave of ${s1}: ${JSON.stringify(evs.map((p) => [p.event.type, p.event.data]))}`);
  assert.ok(evs.every((p) => p.event.data?.scopeId === undefined || p.event.data.scopeId === s1), `every event that names a scope (data.scopeId) names ${s1}: ${JSON.stringify(evs.map((p) => p.event.data))}`);
  assert.ok(!evs.some((p) => mentions(p.event, s2)), 'nothing about the other scope');
});

test('filter priorities (message events)', async () => {
  const w = await connectClient(gw);
  const a = await connectAgent(gw, { name: 'prio-a' });
  const b = await connectAgent(gw, { name: 'prio-b' });
  const sub = await w.conn.subscribe({ priorities: ['high', 'urgent'] });
  const low = await a.conn.send({ agent: b.id }, { marker: uid('low') }, { priority: 'low' });
  const high = await a.conn.send({ agent: b.id }, { marker: uid('high') }, { priority: 'high' });
  const normal = await a.conn.send({ agent: b.id }, { marker: uid('normal') });
  const urgent = await a.conn.send({ agent: b.id }, { marker: uid('urgent') }, { priority: 'urgent' });
  await w.tap.waitForEvents(sub.id, (e) => mentions(e, high.messageId));
  await w.tap.waitForEvents(sub.id, (e) => mentions(e, urgent.messageId));
  await quietPeriod();
  const evs = checkStream(w.tap, sub.id);
  assert.ok(evs.some((p) => typeIs('message_sent')(p.event) && mentions(p.event, high.messageId)) ||
    evs.some((p) => typeIs('message_delivered')(p.event) && mentions(p.event, high.messageId)), 'a message_sent/delivered event for the high message');
  assert.ok(!evs.some((p) => mentions(p.event, low.messageId)), 'low-priority message filtered out');
  assert.ok(!evs.some((p) => mentions(p.event, normal.messageId)), 'normal-priority message filtered out');
});

test('filter correlationIds', async () => {
  const w = await connectClient(gw);
  const a = await connectAgent(gw, { name: 'corr-a' });
  const b = await connectAgent(gw, { name: 'corr-b' });
  const want = uid('corr-want');
  const sub = await w.conn.subscribe({ correlationIds: [want] });
  const other = await a.conn.send({ agent: b.id }, { marker: uid('c1') }, { correlationId: uid('corr-other') });
  const none = await a.conn.send({ agent: b.id }, { marker: uid('c2') });
  const hit = await a.conn.send({ agent: b.id }, { marker: uid('c3') }, { correlationId: want });
  await w.tap.waitForEvents(sub.id, (e) => mentions(e, hit.messageId));
  await quietPeriod();
  const evs = checkStream(w.tap, sub.id);
  assert.ok(evs.some((p) => mentions(p.event, want)), 'an event carries the wanted correlationId');
  assert.ok(evs.every((p) => mentions(p.event, want) || mentions(p.event, hit.messageId)), 'every event relates to the correlated message');
  assert.ok(!evs.some((p) => mentions(p.event, other.messageId) || mentions(p.event, none.messageId)), 'other messages filtered out');
});

test('filter metadataMatch', async () => {
  const w = await connectClient(gw);
  const team = uid('team');
  const sub = await w.conn.subscribe({ metadataMatch: { team } });
  const blue = await rawParticipant(gw, { participantType: 'agent', register: { name: 'meta-blue', metadata: { team: uid('other-team') } } });
  const red = await rawParticipant(gw, { participantType: 'agent', register: { name: 'meta-red', metadata: { team, extra: 1 } } });
  await w.tap.waitForEvents(sub.id, (e) => typeIs('agent_registered')(e) && mentions(e, red.agent.id));
  await quietPeriod();
  const evs = checkStream(w.tap, sub.id);
  assert.ok(evs.every((p) => mentions(p.event, team)), 'every event carries the matching metadata');
  assert.ok(!evs.some((p) => mentions(p.event, blue.agent.id)), 'agent with other metadata filtered out');
});

test('filter fields combine with AND (eventTypes + fromAgents)', async () => {
  const w = await connectClient(gw);
  const a = await connectAgent(gw, { name: 'and-a' });
  const b = await connectAgent(gw, { name: 'and-b' });
  const sub = await w.conn.subscribe({ eventTypes: ['agent_state_changed'], fromAgents: [a.id] });
  const scope = await a.conn.createScope({ name: uid('and-scope') });
  await a.conn.joinScope(scope.id);
  await b.conn.busy();
  await a.conn.busy();
  await w.tap.waitForEvents(sub.id, (e) => sourceAgent(e) === a.id);
  await quietPeriod();
  const evs = checkStream(w.tap, sub.id);
  assert.equal(evs.length, 1, `exactly one state change from and-a: ${JSON.stringify(evs.map((p) => [p.event.type, p.event.source]))}`);
  assert.equal(normType(evs[0].event.type), 'agent_state_changed');
  assert.equal(sourceAgent(evs[0].event), a.id);
});

test('events from the async iterator of the SDK Subscription', async () => {
  const w = await connectClient(gw);
  const sub = await w.conn.subscribe({ eventTypes: ['agent_registered'] });
  const it = sub[Symbol.asyncIterator]();
  const a = await connectAgent(gw, { name: 'iter-a' });
  const next = await Promise.race([it.next(), sleep(WAIT_MS).then(() => ({ timeout: true }))]);
  assert.ok(!next.timeout, 'iterator yields an event');
  assert.equal(normType(next.value.type), 'agent_registered');
  assert.ok(mentions(next.value, a.id));
});

test('unsubscribe: {subscription: {id, closedAt}} and no more events', async () => {
  const w = await connectClient(gw);
  const sub = await w.conn.subscribe({ eventTypes: ['agent_registered'] });
  const a = await connectAgent(gw, { name: 'unsub-a' });
  await w.tap.waitForEvents(sub.id, (e) => mentions(e, a.id));
  const raw = await w.conn.callExtension('map/unsubscribe', { subscriptionId: sub.id });
  assert.equal(raw.subscription?.id, sub.id, `unsubscribe result {subscription: {id, closedAt}}, got ${JSON.stringify(raw)}`);
  assert.equal(typeof raw.subscription.closedAt, 'number');
  const count = w.tap.events(sub.id).length;
  // A subscription that stays, as a barrier: once it has the registration after the one
  // checked, an event for the closed subscription would have come before it.
  const probe = await w.conn.subscribe({ eventTypes: ['agent_registered'] });
  const barrier = async () => {
    const later = await connectAgent(gw, { name: uid('unsub-later') });
    await w.tap.waitForEvents(probe.id, (e) => mentions(e, later.id));
  };
  await connectAgent(gw, { name: 'unsub-b' });
  await barrier();
  assert.equal(w.tap.events(sub.id).length, count, 'no events after unsubscribe');

  // the SDK's own unsubscribe path
  const sub2 = await w.conn.subscribe({ eventTypes: ['agent_registered'] });
  await sub2.unsubscribe();
  await connectAgent(gw, { name: 'unsub-c' });
  await barrier();
  assert.equal(w.tap.events(sub2.id).length, 0, 'no events after Subscription.unsubscribe()');
});

test('agent_unregistered is emitted when an agent disconnects via AgentConnection.disconnect()', async () => {
  const w = await connectClient(gw);
  const a = await connectAgent(gw, { name: 'bye-a' });
  const sub = await w.conn.subscribe({ eventTypes: ['agent_unregistered'] });
  await a.conn.disconnect();
  const evs = await w.tap.waitForEvents(sub.id, (e) => mentions(e, a.id));
  assert.equal(normType(evs[0].event.type), 'agent_unregistered');
});

test('burst: concurrent state changes keep every subscription gap-free and complete', async () => {
  const w = await connectClient(gw, { name: 'burst-watch' });
  const N = 4, M = 25;
  const burst = [];
  for (let i = 0; i < N; i++) burst.push(await connectAgent(gw, { name: `burst-${i}` }));
  const all = await w.conn.subscribe();
  const one = await w.conn.subscribe({ eventTypes: ['agent_state_changed'], fromAgents: [burst[0].id] });
  await Promise.all(burst.map(async (a) => {
    for (let j = 0; j < M; j++) await a.conn.updateState(j % 2 === 0 ? 'busy' : 'idle');
  }));
  const isBurstChange = (e) => typeIs('agent_state_changed')(e) && burst.some((a) => sourceAgent(e) === a.id);
  await w.tap.waitForEvents(all.id, isBurstChange, N * M, 5000);
  await w.tap.waitForEvents(one.id, () => true, M, 5000);
  await quietPeriod();
  const ea = checkStream(w.tap, all.id);
  assert.equal(ea.filter((p) => isBurstChange(p.event)).length, N * M, 'every state change delivered exactly once');
  const eo = checkStream(w.tap, one.id);
  assert.equal(eo.length, M, `filtered subscription gets exactly the ${M} changes of burst-0`);
  // per-agent order is preserved: busy, idle, busy, …
  const states = ea.filter((p) => sourceAgent(p.event) === burst[1].id && typeIs('agent_state_changed')(p.event)).map((p) => JSON.stringify(p.event.data));
  assert.equal(states.length, M);
  for (let j = 0; j < M; j++) {
    const want = j % 2 === 0 ? 'busy' : 'idle';
    assert.ok(states[j].includes(`"${want}"`), `event ${j} of burst-1 should be a change to ${want}: ${states[j]}`);
  }
});

test('map/subscribe.ack: the SDK acks when supportsAck is advertised; events keep flowing, no error frames', async () => {
  const w = await connectClient(gw, { name: 'acker' });
  const sub = await w.conn.subscribe({ eventTypes: ['agent_registered'] });
  const advertised = w.connectResult.capabilities?.streaming?.supportsAck === true;
  assert.equal(sub.supportsAck, advertised, 'SDK enables ack exactly when capabilities.streaming.supportsAck is true');
  const a = await connectAgent(gw, { name: 'ack-a' });
  const [seenA] = await w.tap.waitForEvents(sub.id, (e) => mentions(e, a.id));
  // The SDK's reader handles the frame the tap saw: its ack then covers it.
  await pollUntil(() => sub.lastEventId, (id) => id === seenA.eventId, { timeoutMs: WAIT_MS, intervalMs: 5, what: 'the SDK Subscription to take the event' });
  sub.ack(); // map/subscribe.ack {subscriptionId, upToSequence} notification (no-op if not advertised)
  const b = await connectAgent(gw, { name: 'ack-b' });
  await w.tap.waitForEvents(sub.id, (e) => mentions(e, b.id));
  await quietPeriod();
  checkStream(w.tap, sub.id);
  assert.ok(!w.tap.frames.some((f) => f && f.error), `no error frames: ${JSON.stringify(w.tap.frames.filter((f) => f && f.error))}`);
});
