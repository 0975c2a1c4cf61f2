// The gateway held to the MAP SDK repository's extension conformance packs
// (ts-sdk/src/ext/{mail,trajectory}/conformance.ts): mail v1.1
// (urn:map:ext:mail:1) and the trajectory checkpoint nucleus
// (urn:map:ext:trajectory:1). Each check of a pack is one test here, written
// for this suite: requests go as the packs send them, `method` and `params`
// through the real SDK client's callExtension, to the real gateway. Mail runs
// once for an agent and once for a client. Where the gateway deliberately
// answers otherwise than a pack could assume, a test says so and checks it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { startGateway, connectAgent, connectClient, rejectsWithCode, uid } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const DIST = join(HERE, '..', '..', 'plugins', 'dist');
const MAIL_WASM = join(DIST, 'mail.wasm');
const TRAJECTORY_WASM = join(DIST, 'trajectory.wasm');

let gw;
before(async () => {
  for (const wasm of [MAIL_WASM, TRAJECTORY_WASM]) assert.ok(existsSync(wasm), `${wasm} is missing: run scripts/build-plugins.sh`);
  gw = await startGateway({
    extraToml: `[plugins.mail]\npath = ${JSON.stringify(MAIL_WASM)}\n\n[plugins.trajectory]\npath = ${JSON.stringify(TRAJECTORY_WASM)}\n`,
  });
});
after(async () => { await gw?.stop(); });

/** A participant of this kind, and `send(method, params)` as it. */
async function participant(kind) {
  const h = kind === 'agent' ? await connectAgent(gw, { name: uid('conformance') }) : await connectClient(gw, { name: uid('conformance') });
  return { h, id: h.id ?? h.participantId, send: (method, params) => h.conn.callExtension(method, params) };
}

// ---------------------------------------------------------------------------
// mail v1.1
// ---------------------------------------------------------------------------

for (const kind of ['agent', 'client']) {
  const created = async (send) => (await send('mail/create', {})).conversation;

  test(`mail (${kind}): mail/create with no params answers an active conversation with a string id`, async () => {
    const { send } = await participant(kind);
    const res = await send('mail/create', {});
    assert.equal(typeof res.conversation, 'object');
    assert.equal(typeof res.conversation.id, 'string');
    assert.equal(res.conversation.status, 'active');
  });

  test(`mail (${kind}): mail/get answers the conversation, and its threads when include.threads asks`, async () => {
    const { send } = await participant(kind);
    const conversation = await created(send);
    const res = await send('mail/get', { conversationId: conversation.id, include: { threads: true } });
    assert.equal(res.conversation.id, conversation.id);
    assert.deepEqual(res.threads, [], 'an array, even with no thread');
  });

  test(`mail (${kind}): mail/list with no params answers conversations[]`, async () => {
    const { send } = await participant(kind);
    const conversation = await created(send);
    const res = await send('mail/list', {});
    assert.ok(Array.isArray(res.conversations));
    assert.ok(res.conversations.some((c) => c.id === conversation.id));
  });

  test(`mail (${kind}): mail/close makes it completed, mail/reopen active again`, async () => {
    const { send } = await participant(kind);
    const conversation = await created(send);
    assert.equal((await send('mail/close', { conversationId: conversation.id })).conversation.status, 'completed');
    assert.equal((await send('mail/reopen', { conversationId: conversation.id })).conversation.status, 'active');
  });

  test(`mail (${kind}): mail/presence answers conversationId and participants with participantId and a presence string`, async () => {
    const { send, id } = await participant(kind);
    const conversation = await created(send);
    const absent = uid('absent');
    await send('mail/invite', { conversationId: conversation.id, participant: { id: absent } });
    const res = await send('mail/presence', { conversationId: conversation.id });
    assert.equal(res.conversationId, conversation.id);
    assert.ok(Array.isArray(res.participants));
    for (const p of res.participants) {
      assert.notEqual(p.participantId, undefined);
      assert.equal(typeof p.presence, 'string');
      // The gateway's own fields agree with it.
      assert.equal(p.online, p.presence === 'online');
    }
    const by = Object.fromEntries(res.participants.map((p) => [p.participantId, p]));
    assert.deepEqual(Object.keys(by).sort(), [id, absent].sort());
    assert.equal(by[id].presence, 'online');
    assert.equal(by[id].role, 'initiator');
    assert.equal(typeof by[id].joinedAt, 'number');
    assert.equal(by[absent].presence, 'offline');
  });

  test(`mail (${kind}): mail/turn records a turn, and mail/turns/list answers exactly it`, async () => {
    const { send } = await participant(kind);
    const conversation = await created(send);
    // The pack joins first and ignores the answer: the creator is in already (10004).
    await rejectsWithCode(send('mail/join', { conversationId: conversation.id }), 10004, 'the creator joins again');
    await send('mail/turn', { conversationId: conversation.id, contentType: 'text', content: { text: 'hello' } });
    const res = await send('mail/turns/list', { conversationId: conversation.id });
    assert.equal(res.turns.length, 1);
    assert.deepEqual(res.turns[0].content, { text: 'hello' });
  });

  test(`mail (${kind}): mail/thread/create on a turn, and mail/thread/list answers exactly that thread`, async () => {
    const { send } = await participant(kind);
    const conversation = await created(send);
    const { turn } = await send('mail/turn', { conversationId: conversation.id, contentType: 'text', content: { text: 'root' } });
    const { thread } = await send('mail/thread/create', { conversationId: conversation.id, rootTurnId: turn.id });
    const res = await send('mail/thread/list', { conversationId: conversation.id });
    assert.equal(res.threads.length, 1);
    assert.equal(res.threads[0].id, thread.id);
    assert.equal(res.threads[0].rootTurnId, turn.id);
  });

  test(`mail (${kind}): mail/replay answers turns[]`, async () => {
    const { send } = await participant(kind);
    const conversation = await created(send);
    const res = await send('mail/replay', { conversationId: conversation.id });
    assert.deepEqual(res.turns, []);
  });

  test(`mail (${kind}): an unknown conversation is 10000`, async () => {
    const { send } = await participant(kind);
    await rejectsWithCode(send('mail/get', { conversationId: 'does-not-exist' }), 10000, 'unknown conversation');
  });
}

// ---------------------------------------------------------------------------
// trajectory v1, the checkpoint nucleus
// ---------------------------------------------------------------------------

test('trajectory: a checkpoint keeps the id the reporter gave and its label, and gets a timestamp', async () => {
  const { send } = await participant('agent');
  const before = Date.now();
  const res = await send('trajectory/checkpoint', { checkpoint: { id: 'ckpt-1', label: 'step-1', metadata: { k: 1 } } });
  assert.equal(res.checkpoint.id, 'ckpt-1');
  assert.equal(res.checkpoint.label, 'step-1');
  assert.ok(res.checkpoint.timestamp >= before && res.checkpoint.timestamp <= Date.now(), `Unix ms: ${res.checkpoint.timestamp}`);
  assert.deepEqual(res.checkpoint.metadata, { k: 1 });
});

test('trajectory: a checkpoint keeps the sessionId it was given', async () => {
  const { send } = await participant('agent');
  const res = await send('trajectory/checkpoint', { checkpoint: { id: 'ckpt-2', label: 's', sessionId: 'sess-1' } });
  assert.equal(res.checkpoint.sessionId, 'sess-1');
});

// Where the gateway deliberately differs: checkpoints are reported by agents,
// and an id, once an agent's, stays that agent's (the pack's fixed ids
// reported again by another agent are refused, not overwritten).
test('trajectory (differs on purpose): a client does not report, and another agent cannot take over a checkpoint id', async () => {
  const client = await participant('client');
  await rejectsWithCode(client.send('trajectory/checkpoint', { checkpoint: { id: uid('ckpt'), label: 'x' } }), 13004, 'a client reports');
  const first = await participant('agent');
  const id = uid('ckpt');
  await first.send('trajectory/checkpoint', { checkpoint: { id, label: 'first' } });
  const other = await participant('agent');
  await rejectsWithCode(other.send('trajectory/checkpoint', { checkpoint: { id, label: 'other' } }), 13004, 'another agent reuses the id');
  const again = await first.send('trajectory/checkpoint', { checkpoint: { id, label: 'again' } });
  assert.equal(again.checkpoint.label, 'again', 'its own agent reports it again');
});
