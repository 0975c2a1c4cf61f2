// map/send addressing: every address form reaches exactly the right recipients.
//
// Fixture (one tenant):
//   R  lead            (root)
//   ├─ C1 worker       (member of scope S)
//   │   └─ G helper
//   └─ C2 worker
//   U  worker          (no parent, member of scope S)
//   K, K2              clients (ClientConnection, no agent)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startGateway, connectAgent, connectClient, rejectsWithCode,
  expectExactRecipients, expectNobodyGot, inboxFor, uid, WAIT_MS, quietPeriod,
} from './harness.mjs';

let gw;
let R, C1, C2, G, U, K, K2, S, EMPTY;
let everyone;
const agents = () => [R, C1, C2, G, U];

before(async () => {
  gw = await startGateway();
  R = await connectAgent(gw, { name: 'R', role: 'lead' });
  C1 = await connectAgent(gw, { name: 'C1', role: 'worker', parent: R.id });
  C2 = await connectAgent(gw, { name: 'C2', role: 'worker', parent: R.id });
  G = await connectAgent(gw, { name: 'G', role: 'helper', parent: C1.id });
  U = await connectAgent(gw, { name: 'U', role: 'worker' });
  K = await connectClient(gw, { name: 'K' });
  K2 = await connectClient(gw, { name: 'K2' });
  S = (await R.conn.createScope({ name: 'S', sendPolicy: 'anyone' })).id;
  await C1.conn.joinScope(S);
  await U.conn.joinScope(S);
  EMPTY = (await R.conn.createScope({ name: 'empty', sendPolicy: 'anyone' })).id;
  everyone = [R, C1, C2, G, U, K, K2];
});
after(async () => { await gw?.stop(); });

const recipientId = (h) => (h.kind === 'agent' ? h.id : h.participantId);
const senderIds = (h) => (h.kind === 'agent' ? [h.id, h.participantId] : [h.participantId]);
const sorted = (xs) => [...xs].sort();

/**
 * Send `to` from `from` and check: exact recipients, one copy each, message fields,
 * `delivered`. deliveredMode: 'ids' (exact recipient ids) | 'count' (only how many).
 */
async function checkRoute({ from, to, expect, ignoreSender = false, deliveredMode = 'ids', meta }) {
  const marker = uid('route');
  const payload = { marker, text: 'hello', n: 1 };
  const res = await from.conn.send(to, payload, meta);
  assert.equal(typeof res.messageId, 'string', `send result needs messageId, got ${JSON.stringify(res)}`);
  assert.ok(Array.isArray(res.delivered), `send result needs delivered[], got ${JSON.stringify(res)}`);
  const got = await expectExactRecipients(everyone, expect, marker, { ignore: ignoreSender ? [from] : [] });

  for (const [h, msg] of got) {
    assert.equal(msg.id, res.messageId, `${h.label}: message.id equals the messageId returned by map/send`);
    const expectedFrom = from.kind === 'agent' ? from.id : from.participantId;
    assert.equal(msg.from, expectedFrom, `${h.label}: message.from must be the sending ${from.kind === 'agent' ? 'agent' : 'participant'} id`);
    assert.ok('to' in msg, `${h.label}: message.to present`);
    assert.equal(typeof msg.timestamp, 'number', `${h.label}: message.timestamp is a number (SDK requires it)`);
    assert.deepEqual(msg.payload, payload, `${h.label}: payload unchanged`);
  }
  let delivered = res.delivered;
  if (ignoreSender) delivered = delivered.filter((d) => !senderIds(from).includes(d));
  assert.equal(new Set(delivered).size, delivered.length, `delivered has no duplicates: ${delivered}`);
  if (deliveredMode === 'ids') {
    assert.deepEqual(sorted(delivered), sorted(expect.map(recipientId)), 'delivered lists exactly the recipients');
  } else {
    assert.equal(delivered.length, expect.length, `delivered has one entry per recipient: ${delivered}`);
  }
  return { res, got, marker };
}

test('string agent id: message fields, meta pass-through, SDK onMessage sees it', async () => {
  const meta = { priority: 'high', correlationId: uid('corr'), expectsResponse: true };
  const { res, got, marker } = await checkRoute({ from: C2, to: U.id, expect: [U], meta });
  const msg = got.get(U);
  assert.equal(msg.meta?.priority, 'high');
  assert.equal(msg.meta?.correlationId, meta.correlationId);
  assert.equal(msg.meta?.expectsResponse, true);
  // the raw frame is map/message {message: {...}}
  const frame = U.tap.messageNotifications().find((f) => f.params?.message?.payload?.marker === marker);
  assert.ok(frame && frame.params.message, 'notification params wrap the message: {message}');
  // the SDK's AgentConnection.onMessage handler received the same message
  const sdk = U.sdkMessages.find((m) => m?.payload?.marker === marker);
  assert.ok(sdk, 'AgentConnection.onMessage handler must fire');
  assert.equal(sdk.id, res.messageId);
  assert.equal(sdk.from, C2.id);
});

test('reply(): the recipient answers via {agent: message.from} with correlationId', async () => {
  const corr = uid('corr');
  const { got } = await checkRoute({ from: C2, to: { agent: U.id }, expect: [U], meta: { correlationId: corr } });
  const original = got.get(U);
  const marker = uid('reply');
  const r = await U.conn.reply(original, { marker });
  assert.deepEqual(r.delivered, [C2.id]);
  await expectExactRecipients(everyone, [C2], marker);
  const back = inboxFor(C2, marker)[0];
  assert.equal(back.from, U.id);
  assert.equal(back.meta?.correlationId, corr);
  assert.equal(back.meta?.isResult, true);
});

test('"agent:<id>" prefix', async () => { await checkRoute({ from: C2, to: `agent:${U.id}`, expect: [U] }); });
test('{agent}', async () => { await checkRoute({ from: C2, to: { agent: U.id }, expect: [U] }); });
test('{agent} via AgentConnection.sendToAgent', async () => {
  const marker = uid('sta');
  const res = await R.conn.sendToAgent(G.id, { marker });
  assert.deepEqual(res.delivered, [G.id]);
  await expectExactRecipients(everyone, [G], marker);
});
test('{agents: [...]}', async () => { await checkRoute({ from: R, to: { agents: [C1.id, U.id] }, expect: [C1, U] }); });
test('{scope}', async () => { await checkRoute({ from: C2, to: { scope: S }, expect: [C1, U] }); });
test('plain string scope id', async () => { await checkRoute({ from: C2, to: S, expect: [C1, U] }); });
test('"scope:<id>" prefix', async () => { await checkRoute({ from: C2, to: `scope:${S}`, expect: [C1, U] }); });
test('{role}', async () => { await checkRoute({ from: R, to: { role: 'worker' }, expect: [C1, C2, U] }); });
test('{role, within: scope}', async () => { await checkRoute({ from: R, to: { role: 'worker', within: S }, expect: [C1, U] }); });
test('{role} from a client via ClientConnection.sendToRole', async () => {
  const marker = uid('str');
  const res = await K.conn.sendToRole('helper', { marker });
  assert.deepEqual(res.delivered, [G.id]);
  const got = await expectExactRecipients(everyone, [G], marker);
  assert.equal(got.get(G).from, K.participantId, 'from is the client participant id when no agent sends');
});
test('{parent: true}', async () => { await checkRoute({ from: G, to: { parent: true }, expect: [C1] }); });
test('{parent: true} via AgentConnection.sendToParent', async () => {
  const marker = uid('stp');
  const res = await C2.conn.sendToParent({ marker });
  assert.deepEqual(res.delivered, [R.id]);
  await expectExactRecipients(everyone, [R], marker);
});
test('{children: true}', async () => { await checkRoute({ from: R, to: { children: true }, expect: [C1, C2] }); });
test('{ancestors: true}', async () => { await checkRoute({ from: G, to: { ancestors: true }, expect: [C1, R] }); });
test('{ancestors: true, depth: 1}', async () => { await checkRoute({ from: G, to: { ancestors: true, depth: 1 }, expect: [C1] }); });
test('{descendants: true}', async () => { await checkRoute({ from: R, to: { descendants: true }, expect: [C1, C2, G] }); });
test('{descendants: true, depth: 1}', async () => { await checkRoute({ from: R, to: { descendants: true, depth: 1 }, expect: [C1, C2] }); });
test('{siblings: true}', async () => { await checkRoute({ from: C1, to: { siblings: true }, expect: [C2] }); });
test('{broadcast: true} from a client reaches every agent and no client', async () => {
  await checkRoute({ from: K, to: { broadcast: true }, expect: agents() });
});
test('{broadcast: true} from an agent reaches every other agent and no client', async () => {
  await checkRoute({ from: R, to: { broadcast: true }, expect: [C1, C2, G, U], ignoreSender: true });
});
test('{participant}: a client by participant id', async () => {
  await checkRoute({ from: R, to: { participant: K2.participantId }, expect: [K2] });
});
test('{participants: "clients"}', async () => {
  await checkRoute({ from: R, to: { participants: 'clients' }, expect: [K, K2] });
});
test('{participants: "agents"}', async () => {
  await checkRoute({ from: K, to: { participants: 'agents' }, expect: agents(), deliveredMode: 'count' });
});
test('{participants: "all"}', async () => {
  await checkRoute({ from: K2, to: { participants: 'all' }, expect: [...agents(), K], ignoreSender: true, deliveredMode: 'count' });
});
test('array of addresses', async () => {
  await checkRoute({ from: C2, to: [{ agent: U.id }, { role: 'lead' }], expect: [U, R] });
});
test('array with overlapping addresses delivers one copy per recipient', async () => {
  await checkRoute({ from: R, to: [{ agent: U.id }, { agents: [U.id, C1.id] }, { scope: S }], expect: [U, C1] });
});

test('{system: true} is accepted and no participant receives it', async () => {
  const marker = uid('sys');
  const res = await C1.conn.send({ system: true }, { marker });
  assert.equal(typeof res.messageId, 'string');
  assert.ok(Array.isArray(res.delivered), 'delivered[] present');
  for (const h of everyone) assert.ok(!res.delivered.includes(recipientId(h)), `system message must not be delivered to ${h.label}`);
  await expectNobodyGot(everyone, marker);
});

// ---- addresses that reach no one ------------------------------------------

async function noOne(from, to, codes, ctx) {
  const marker = uid('none');
  await rejectsWithCode(from.conn.send(to, { marker }), codes, ctx);
  await expectNobodyGot(everyone, marker);
}

test('unknown plain string id → 2001/2000', async () => { await noOne(C1, uid('ghost'), [2000, 2001], 'unknown string id'); });
test('{agent: unknown} → 2001', async () => { await noOne(C1, { agent: uid('ghost') }, 2001, 'unknown agent'); });
test('"agent:unknown" → 2001', async () => { await noOne(C1, `agent:${uid('ghost')}`, 2001, 'unknown agent: prefix'); });
test('{agents: [unknown…]} → 2001/2000', async () => { await noOne(C1, { agents: [uid('g1'), uid('g2')] }, [2000, 2001], 'unknown agents'); });
test('{scope: unknown} → 2002', async () => { await noOne(C1, { scope: uid('nope') }, 2002, 'unknown scope'); });
test('"scope:unknown" → 2002', async () => { await noOne(C1, `scope:${uid('nope')}`, 2002, 'unknown scope: prefix'); });
test('{role, within: unknown scope} → 2002/2000', async () => { await noOne(R, { role: 'worker', within: uid('nope') }, [2000, 2002], 'role within unknown scope'); });
// A group or relative address that holds no one right now succeeds and reaches no one.
async function emptyGroup(from, to, ctx) {
  const marker = uid('empty');
  const res = await from.conn.send(to, { marker });
  assert.deepEqual(res.delivered, [], `${ctx}: delivered is empty, got ${JSON.stringify(res)}`);
  assert.equal(typeof res.messageId, 'string', ctx);
  await expectNobodyGot(everyone, marker);
}

test('{scope: empty scope} → delivered [], nothing queued', async () => { await emptyGroup(C1, { scope: EMPTY }, 'empty scope'); });
test('{role: nobody} → delivered []', async () => { await emptyGroup(C1, { role: uid('no-role') }, 'unknown role'); });
test('{parent: true} from a root agent → delivered []', async () => { await emptyGroup(R, { parent: true }, 'root has no parent'); });
test('sendToParent() from a root agent resolves with delivered []', async () => {
  const marker = uid('to-parent');
  const res = await R.conn.sendToParent({ marker });
  assert.deepEqual(res.delivered, []);
  await expectNobodyGot(everyone, marker);
});
test('{children: true} from a leaf → delivered []', async () => { await emptyGroup(U, { children: true }, 'leaf has no children'); });
test('{siblings: true} without parent → delivered []', async () => { await emptyGroup(U, { siblings: true }, 'no siblings'); });
// The spec does not say whether a relative address from a session without an agent is
// "resolves to no one" (2000/2001) or invalid params (-32602); both are accepted.
test('{parent: true} from a client (no agent) → 2000/2001/-32602', async () => { await noOne(K, { parent: true }, [2000, 2001, -32602], 'client has no agent'); });
test('{participant: unknown} → 2000/2001', async () => { await noOne(R, { participant: uid('nobody') }, [2000, 2001], 'unknown participant'); });

// ---- keep last: registers an extra agent ------------------------------------

test('plain string that is both an agent id and a scope id → 2004; prefixes disambiguate', async () => {
  const twin = await connectAgent(gw, { name: 'twin', role: 'twin', agentId: S });
  assert.equal(twin.id, S);
  try {
    const all = [...everyone, twin];
    const marker = uid('amb');
    await rejectsWithCode(R.conn.send(S, { marker }), 2004, 'ambiguous id');
    await expectNobodyGot(all, marker);

    const m1 = uid('amb-agent');
    const r1 = await R.conn.send(`agent:${S}`, { marker: m1 });
    assert.deepEqual(r1.delivered, [S]);
    await expectExactRecipients(all, [twin], m1);

    const m2 = uid('amb-scope');
    const r2 = await R.conn.send(`scope:${S}`, { marker: m2 });
    assert.deepEqual(sorted(r2.delivered), sorted([C1.id, U.id]));
    await expectExactRecipients(all, [C1, U], m2);
  } finally {
    await twin.conn.disconnect();
  }
});

test('messages keep their order per sender → recipient', async () => {
  const base = uid('order');
  const N = 20;
  await Promise.all(Array.from({ length: N }, (_, i) => C2.conn.send({ agent: U.id }, { marker: `${base}-${i}`, i })));
  await U.tap.waitUntil(() => U.tap.messages((m) => String(m?.payload?.marker).startsWith(base)).length >= N, WAIT_MS * 2, `${N} ordered messages`);
  // One more from the same sender: once it is in, a duplicate of any before it would be too.
  const end = uid('order-end');
  await C2.conn.send({ agent: U.id }, { marker: end });
  await U.tap.waitUntil(() => inboxFor(U, end).length >= 1, WAIT_MS, 'the closing message');
  const seq = U.tap.messages((m) => String(m?.payload?.marker).startsWith(base)).map((m) => m.payload.i);
  assert.deepEqual(seq, Array.from({ length: N }, (_, i) => i), 'delivered in send order, exactly once');
});

test('burst: concurrent senders, every message delivered exactly once, per-sender order kept', async () => {
  const base = uid('burst');
  const senders = [C1, C2, R];
  const N = 30;
  await Promise.all(senders.map((s) => Promise.all(Array.from({ length: N }, (_, i) =>
    s.conn.send({ agent: U.id }, { marker: `${base}-${s.label}-${i}`, s: s.label, i })))));
  const mine = () => U.tap.messages((m) => String(m?.payload?.marker).startsWith(base));
  await U.tap.waitUntil(() => mine().length >= senders.length * N, 5000, `${senders.length * N} burst messages`);
  await quietPeriod();
  const got = mine();
  assert.equal(got.length, senders.length * N, 'no duplicates');
  assert.equal(new Set(got.map((m) => m.id)).size, got.length, 'unique message ids');
  for (const s of senders) {
    const seq = got.filter((m) => m.payload.s === s.label).map((m) => m.payload.i);
    assert.deepEqual(seq, Array.from({ length: N }, (_, i) => i), `order from ${s.label}`);
    assert.ok(got.filter((m) => m.payload.s === s.label).every((m) => m.from === s.id), `from is ${s.label}`);
  }
});
