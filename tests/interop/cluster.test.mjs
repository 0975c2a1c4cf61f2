// Cluster mode with the real SDK client: two gateway nodes (a, b) sharing PostgreSQL and a NATS
// (JetStream) server under one cluster name, each its own process and data dir. SDK connections on
// different nodes must see one gateway: agent listing and routing across nodes, one event stream,
// one replay log, and a session that survives the kill -9 of its node by resuming on the other.
//
// PostgreSQL (MAP_TEST_POSTGRES_URL, default postgres://root@127.0.0.1:5432/test) and NATS with
// JetStream (MAP_TEST_NATS_URL, default nats://127.0.0.1:4222) must be running: without them these
// tests fail, they are never skipped. Replication between nodes is asynchronous, so a write on one
// node is awaited on the other by polling with a deadline (pollUntil), never by a fixed sleep.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startCluster, connectAgent, connectClient, pollUntil, agentIds,
  normType, mentions, eventIdLess, uid, sleep, quietPeriod,
} from './harness.mjs';

/** How long a write on one node may take to show on the other. */
const REPLICATION_MS = 10_000;
/** How long a killed node's sessions may take to become resumable elsewhere (presence 2 s + margin). */
const RESUME_DEADLINE_MS = 10_000;
/** cluster.checkpoint_ms: how often a node saves its subscriptions' positions for a resume elsewhere. */
const CHECKPOINT_MS = 250;

const typeIs = (t) => (ev) => normType(ev?.type) === normType(t);

/** Poll map/agents/list through the SDK until it lists `id`; returns that agent. */
async function waitForAgent(client, id, where) {
  const list = await pollUntil(() => client.conn.listAgents(), (r) => agentIds(r).includes(id), {
    timeoutMs: REPLICATION_MS,
    what: `agent ${id} in map/agents/list on ${where}`,
  });
  return list.agents.find((a) => a.id === id);
}

/** Every map/replay entry matching `filter`, oldest first, paging with afterEventId (SDK replay). */
async function replayEverything(client, filter, limit = 100) {
  const out = [];
  let afterEventId;
  for (let page = 0; page < 1000; page++) {
    const r = await client.conn.replay({ filter, limit, ...(afterEventId ? { afterEventId } : {}) });
    assert.ok(Array.isArray(r.events) && typeof r.hasMore === 'boolean', `map/replay result {events, hasMore}, got ${JSON.stringify(r).slice(0, 300)}`);
    out.push(...r.events);
    if (!r.hasMore || r.events.length === 0) return out;
    afterEventId = r.events.at(-1).eventId;
  }
  assert.fail('map/replay paging does not end');
}

/** map/event params of a subscription numbered 1..n without gaps, with unique increasing eventIds. */
function checkGapFree(evs, ctx) {
  assert.ok(evs.length > 0, `${ctx}: expected events`);
  assert.deepEqual(evs.map((p) => p.sequenceNumber), evs.map((_, i) => i + 1), `${ctx}: sequenceNumber must run 1, 2, 3, … without gaps: ${JSON.stringify(evs.map((p) => [p.sequenceNumber, p.event?.type, p.eventId]))}`);
  const ids = evs.map((p) => p.eventId);
  assert.ok(ids.every((x) => typeof x === 'string' && x.length > 0), `${ctx}: eventId must be a non-empty string: ${ids}`);
  assert.equal(new Set(ids).size, ids.length, `${ctx}: eventIds must be unique: ${ids}`);
  for (let i = 1; i < ids.length; i++) assert.ok(eventIdLess(ids[i - 1], ids[i]), `${ctx}: eventIds increase: ${ids[i - 1]} then ${ids[i]}`);
}

describe('two nodes: routing, events and replay across nodes', () => {
  let cluster;
  let a;
  let b;
  before(async () => {
    cluster = await startCluster(['a', 'b'], { presenceTimeoutMs: 2000 });
    ({ a, b } = cluster.nodes);
  });
  after(async () => { await cluster?.stop(); });

  test('SDK agent on node b, SDK client on node a: listed, reached by agent id and by role, delivered', async () => {
    const role = uid('cluster-role');
    const agent = await connectAgent(b, { name: 'agent-on-b', role });
    const client = await connectClient(a, { name: 'client-on-a' });

    // listing and get on node a show node b's agent
    const listed = await waitForAgent(client, agent.id, 'node a');
    assert.equal(listed.role, role, `role of node b's agent as listed on node a: ${JSON.stringify(listed)}`);
    assert.equal(listed.name, 'agent-on-b');
    const got = await client.conn.getAgent(agent.id);
    assert.equal(got.agent?.id, agent.id, `map/agents/get on node a: ${JSON.stringify(got)}`);
    assert.equal(got.agent.role, role);
    const byRole = await client.conn.listAgents({ filter: { roles: [role] } });
    assert.deepEqual(agentIds(byRole), [agent.id], 'role filter on node a finds exactly the agent on node b');

    const sends = [
      ['send(agentId) — plain string address', (p) => client.conn.send(agent.id, p)],
      ['sendToAgent(agentId) — {agent}', (p) => client.conn.sendToAgent(agent.id, p)],
      ['sendToRole(role) — {role}', (p) => client.conn.sendToRole(role, p)],
    ];
    for (const [form, send] of sends) {
      const marker = uid('x-node');
      const payload = { marker, form, n: 42 };
      const res = await send(payload);
      assert.equal(typeof res.messageId, 'string', `${form}: send result carries messageId: ${JSON.stringify(res)}`);
      assert.deepEqual(res.delivered, [agent.id], `${form}: delivered lists the agent on node b: ${JSON.stringify(res)}`);
      // the SDK's AgentConnection.onMessage handler on node b fires
      const msg = await pollUntil(() => agent.sdkMessages.find((m) => m?.payload?.marker === marker), Boolean, {
        timeoutMs: REPLICATION_MS,
        what: `${form}: AgentConnection.onMessage on node b for ${marker}`,
      });
      assert.equal(msg.id, res.messageId, `${form}: message.id is the messageId map/send returned on node a`);
      assert.equal(msg.from, client.participantId, `${form}: message.from is the client's participant id`);
      assert.deepEqual(msg.payload, payload, `${form}: payload unchanged`);
      assert.equal(typeof msg.timestamp, 'number', `${form}: message.timestamp`);
    }
    await quietPeriod();
    for (const [form] of sends) {
      const copies = agent.sdkMessages.filter((m) => m?.payload?.form === form);
      assert.equal(copies.length, 1, `${form}: exactly one copy on node b, got ${copies.length}`);
    }

    // and back: the agent on node b reaches the client on node a by participant id
    const marker = uid('back');
    const back = await agent.conn.send({ participant: client.participantId }, { marker });
    assert.deepEqual(back.delivered, [client.participantId], `map/send from node b to the client on node a: ${JSON.stringify(back)}`);
    const m = await client.tap.waitUntil(() => client.tap.messages((x) => x?.payload?.marker === marker)[0], REPLICATION_MS, 'map/message from node b on the client of node a');
    assert.equal(m.from, agent.id);
    assert.equal(m.id, back.messageId);
  });

  test('SDK subscription on node b receives events caused on node a, numbered without gaps', async () => {
    const watcher = await connectClient(b, { name: 'watcher-on-b' });
    const sub = await watcher.conn.subscribe({ eventTypes: ['agent_registered', 'message_sent'] });
    assert.equal(typeof sub.id, 'string');
    const seen = [];
    sub.on('event', (e) => seen.push(e));

    // caused on node a: two registrations and a message
    const x = await connectAgent(a, { name: 'ev-x-on-a' });
    const y = await connectAgent(a, { name: 'ev-y-on-a' });
    const sender = await connectClient(a, { name: 'ev-sender-on-a' });
    const sent = await sender.conn.sendToAgent(x.id, { marker: uid('ev-msg') });
    assert.deepEqual(sent.delivered, [x.id]);

    await watcher.tap.waitForEvents(sub.id, (e) => typeIs('agent_registered')(e) && mentions(e, x.id), 1, REPLICATION_MS);
    await watcher.tap.waitForEvents(sub.id, (e) => typeIs('agent_registered')(e) && mentions(e, y.id), 1, REPLICATION_MS);
    await watcher.tap.waitForEvents(sub.id, (e) => typeIs('message_sent')(e) && mentions(e, sent.messageId), 1, REPLICATION_MS);
    await quietPeriod();

    const evs = watcher.tap.events(sub.id);
    checkGapFree(evs, `subscription ${sub.id} on node b`);
    for (const p of evs) {
      assert.equal(typeof p.timestamp, 'number', 'map/event params.timestamp');
      assert.equal(typeof p.event?.id, 'string', 'event.id');
      assert.ok(['agent_registered', 'message_sent'].includes(normType(p.event.type)), `filter honoured: ${p.event.type}`);
    }
    const order = (pred) => evs.findIndex((p) => pred(p.event));
    const ix = order((e) => typeIs('agent_registered')(e) && mentions(e, x.id));
    const iy = order((e) => typeIs('agent_registered')(e) && mentions(e, y.id));
    const im = order((e) => typeIs('message_sent')(e) && mentions(e, sent.messageId));
    assert.ok(ix < iy && iy < im, `events arrive in the order node a made them: x ${ix}, y ${iy}, message ${im}`);
    assert.equal(evs.filter((p) => typeIs('agent_registered')(p.event) && mentions(p.event, x.id)).length, 1, 'each event once');

    // the SDK Subscription saw the same events in order and tracked the cursor
    await pollUntil(() => seen.length, (n) => n >= evs.length, { timeoutMs: 2000, what: 'SDK Subscription catching up with the raw frames' });
    assert.deepEqual(seen.map((e) => e.id), evs.map((p) => p.event.id), 'SDK Subscription event handler got the same events');
    assert.equal(sub.lastSequenceNumber, evs.length, 'SDK Subscription.lastSequenceNumber');
    assert.equal(sub.lastEventId, evs.at(-1).eventId, 'SDK Subscription.lastEventId');
    await sub.unsubscribe();
  });

  test('SDK map/replay on node b returns the events made on node a, same ids and order', async () => {
    const tag = uid('rp');
    const filter = { eventTypes: ['agent_registered', 'message_sent'] };
    const made = [];
    for (let i = 0; i < 5; i++) made.push(await connectAgent(a, { name: `${tag}-${i}` }));
    const onA = await connectClient(a, { name: 'replayer-on-a' });
    const sent = await onA.conn.sendToAgent(made[0].id, { marker: tag });
    assert.deepEqual(sent.delivered, [made[0].id]);

    const ours = (item) => (typeIs('agent_registered')(item.event) && made.some((h) => mentions(item.event, h.id)))
      || (typeIs('message_sent')(item.event) && mentions(item.event, sent.messageId));
    const fromA = (await replayEverything(onA, filter)).filter(ours);
    assert.equal(fromA.length, made.length + 1, `map/replay on node a, where the events were made: ${JSON.stringify(fromA.map((x) => x.event.type))}`);
    const idsA = fromA.map((x) => x.eventId);

    const onB = await connectClient(b, { name: 'replayer-on-b' });
    await pollUntil(async () => (await replayEverything(onB, filter)).filter(ours), (evs) => evs.length === made.length + 1, {
      timeoutMs: REPLICATION_MS,
      what: `map/replay on node b holding the ${made.length + 1} events made on node a`,
    });
    const fromB = (await replayEverything(onB, filter)).filter(ours);
    assert.deepEqual(fromB.map((x) => x.eventId), idsA, 'node b replays node a\'s events with the same eventIds, in the same order');
    for (const [i, x] of fromB.entries()) {
      assert.equal(typeof x.timestamp, 'number');
      assert.equal(x.timestamp, fromA[i].timestamp, `event ${x.eventId}: same timestamp on both nodes`);
      assert.equal(x.event.type, fromA[i].event.type);
      assert.deepEqual(x.event.data, fromA[i].event.data, `event ${x.eventId}: same data on both nodes`);
    }
    for (const [i, h] of made.entries()) {
      assert.ok(mentions(fromB[i].event, h.id), `replayed in the order made: #${i} is ${h.id}`);
    }
    assert.ok(typeIs('message_sent')(fromB.at(-1).event), 'the message, sent last, replays last');

    // an eventId handed out by node a is a valid afterEventId on node b (SDK replay, paging by 2)
    const rest = [];
    let cursor = idsA[1];
    for (let page = 0; page < 100; page++) {
      const r = await onB.conn.replay({ afterEventId: cursor, limit: 2, filter });
      assert.ok(r.events.length <= 2, `limit 2 honoured, got ${r.events.length}`);
      rest.push(...r.events);
      if (!r.hasMore || r.events.length === 0) break;
      cursor = r.events.at(-1).eventId;
    }
    assert.deepEqual(rest.filter(ours).map((x) => x.eventId), idsA.slice(2), `map/replay on node b after node a's eventId ${idsA[1]}`);
  });
});

describe('two nodes: session resume on the other node after kill -9', () => {
  let cluster;
  let a;
  let b;
  before(async () => {
    cluster = await startCluster(['a', 'b'], { presenceTimeoutMs: 2000, resumeWindowSecs: 60, extraToml: `checkpoint_ms = ${CHECKPOINT_MS}\n` });
    ({ a, b } = cluster.nodes);
  });
  after(async () => { await cluster?.stop(); });

  test('ClientConnection on node a resumes on node b after kill -9: same session, subscription goes on, numbering continues', async (t) => {
    const first = await connectClient(a, { name: 'survivor' });
    const token = first.connectResult.resumeToken;
    assert.equal(typeof token, 'string', `map/connect on node a returns a resumeToken: ${JSON.stringify(first.connectResult)}`);
    assert.equal(first.conn.getResumeToken(), token, 'the SDK keeps the resume token');
    const sub = await first.conn.subscribe({ eventTypes: ['agent_registered'] });

    // an event from node b before the kill
    const pre = await connectAgent(b, { name: 'pre-kill-on-b' });
    await first.tap.waitForEvents(sub.id, (e) => mentions(e, pre.id), 1, REPLICATION_MS);
    // a subscription is first saved for a resume elsewhere at the next checkpoint tick: let one pass
    // (what is saved is the position one tick earlier, so the resume may send events again). The
    // save shows nowhere outside the cluster's own stream, so time passes: three ticks, room for a busy machine.
    await sleep(3 * CHECKPOINT_MS);
    const beforeKill = first.tap.events(sub.id);
    checkGapFree(beforeKill, `subscription ${sub.id} on node a before the kill`);

    // kill -9 node a: no shutdown, no goodbye to the cluster
    const exited = new Promise((r) => a.proc.once('exit', r));
    a.proc.kill('SIGKILL');
    await exited;
    const killedAt = Date.now();

    // caused on node b while the session has no connection
    const during = await connectAgent(b, { name: 'while-away-on-b' });

    // resume on node b once node a's presence has expired
    let attempts = 0;
    const resumed = await pollUntil(async () => {
      attempts += 1;
      const c = await connectClient(b, { name: 'survivor', resumeToken: token });
      if (c.connectResult.reconnected !== true) c.ws.terminate(); // a fresh session, not the resume: drop it and retry
      return c;
    }, (c) => c.connectResult.reconnected === true, {
      timeoutMs: RESUME_DEADLINE_MS,
      intervalMs: 200,
      what: `map/connect on node b with node a's resumeToken answering reconnected: true`,
    });
    const resumeMs = Date.now() - killedAt;
    assert.equal(resumed.sessionId, first.sessionId, `same sessionId after the resume on node b: ${JSON.stringify(resumed.connectResult)}`);
    assert.equal(resumed.conn.sessionId, first.sessionId, 'the SDK ClientConnection holds the resumed sessionId');
    assert.equal(resumed.participantId, first.participantId, 'same participantId after the resume');
    assert.equal(typeof resumed.connectResult.resumeToken, 'string', 'a resume token for the next resume');

    // an event caused on node b after the resume arrives on the old subscription, on the new connection
    // (raw frames: the new SDK ClientConnection does not know the subscription made by the old one,
    // so the SDK logs "Event for unknown subscription" for these frames and drops them)
    const post = await connectAgent(b, { name: 'post-resume-on-b' });
    await resumed.tap.waitForEvents(sub.id, (e) => typeIs('agent_registered')(e) && mentions(e, post.id), 1, REPLICATION_MS);
    // nothing made while the session was away is lost
    await resumed.tap.waitForEvents(sub.id, (e) => typeIs('agent_registered')(e) && mentions(e, during.id), 1, REPLICATION_MS);
    await quietPeriod();
    const afterEvs = resumed.tap.events(sub.id);
    t.diagnostic(`resumed on node b ${resumeMs} ms after the kill of node a (${attempts} map/connect attempts); sequence numbers before the kill ${JSON.stringify(beforeKill.map((p) => p.sequenceNumber))}, after the resume ${JSON.stringify(afterEvs.map((p) => p.sequenceNumber))}`);

    // the resumed connection works: a message from node b reaches it
    const marker = uid('to-resumed');
    const sent = await post.conn.send({ participant: first.participantId }, { marker });
    assert.deepEqual(sent.delivered, [first.participantId], `map/send to the resumed participant: ${JSON.stringify(sent)}`);
    await resumed.tap.waitUntil(() => resumed.tap.messages((m) => m?.payload?.marker === marker)[0], REPLICATION_MS, 'map/message on the resumed connection');

    // each event once (by eventId; a repeat of an event sent before the kill is allowed), in order
    const allEvents = [...beforeKill, ...afterEvs];
    for (const p of afterEvs) assert.equal(p.subscriptionId, sub.id);
    for (const h of [pre, during, post]) {
      const ids = new Set(allEvents.filter((p) => mentions(p.event, h.id)).map((p) => p.eventId));
      assert.equal(ids.size, 1, `agent_registered of ${h.label} delivered as exactly one event (by eventId), got ${ids.size}`);
    }
    const order = [during, post].map((h) => afterEvs.findIndex((p) => mentions(p.event, h.id)));
    assert.ok(order[0] < order[1], 'the event made while away comes before the one made after the resume');

    // numbering continues where node a stopped; a repeated number must be the very same event
    const show = (evs) => JSON.stringify(evs.map((p) => [p.sequenceNumber, p.eventId, [pre, during, post].find((h) => mentions(p.event, h.id))?.label ?? p.event?.type]));
    const story = `before the kill: ${show(beforeKill)}; after the resume: ${show(afterEvs)}`;
    const numbered = new Map(beforeKill.map((p) => [p.sequenceNumber, p.eventId]));
    for (const p of afterEvs) {
      const known = numbered.get(p.sequenceNumber);
      if (known !== undefined) {
        assert.equal(p.eventId, known, `sequence number ${p.sequenceNumber} named event ${known} before the kill, after the resume ${p.eventId}; ${story}`);
      } else {
        const next = Math.max(0, ...numbered.keys()) + 1;
        assert.equal(p.sequenceNumber, next, `gap in the numbering across the resume; ${story}`);
        numbered.set(p.sequenceNumber, p.eventId);
      }
    }
  });
});
