// Mail data lives in the host's durable plugin storage: after a kill -9 (no shutdown, no
// flush) and a restart on the same data_dir, every conversation, participant, turn (explicit
// and intercepted) and thread is back, unchanged, and the rules still hold. Also checks the
// default thread nesting limit (8) since this gateway sets no max_thread_depth.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { startGateway, connectAgent, rejectsWithCode, uid, pollUntil, WAIT_MS } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const MAIL_WASM = join(HERE, '..', '..', 'plugins', 'dist', 'mail.wasm');
const extraToml = `[plugins.mail]\npath = ${JSON.stringify(MAIL_WASM)}\n`;

const text = (t) => ({ contentType: 'text', content: { text: t } });

/** Everything agent `h` can read about the conversations it is in. */
async function snapshot(h) {
  const { conversations } = await h.conn.listConversations({ limit: 200 });
  const out = { conversations: conversations.map((c) => c.id), detail: {} };
  for (const c of conversations) {
    out.detail[c.id] = {
      get: await h.conn.getConversation(c.id, { participants: true, threads: true, recentTurns: 100, stats: true }),
      turns: (await h.conn.listTurns({ conversationId: c.id, limit: 500 })).turns,
      threads: (await h.conn.listThreads({ conversationId: c.id, limit: 200 })).threads,
    };
  }
  return out;
}

test('kill -9 after successful responses loses no conversation, participant, turn or thread', async () => {
  assert.ok(existsSync(MAIL_WASM), `build the plugin first (scripts/build-plugins.sh): ${MAIL_WASM} is missing`);
  const ids = { a: uid('agent-a'), b: uid('agent-b'), c: uid('agent-c') };
  const gw1 = await startGateway({ extraToml });
  let gw2;
  try {
    const a = await connectAgent(gw1, { agentId: ids.a, name: 'a' });
    const b = await connectAgent(gw1, { agentId: ids.b, name: 'b' });
    const c = await connectAgent(gw1, { agentId: ids.c, name: 'c' });

    // conversation 1: participants coming and going, every kind of turn, nested threads
    const { conversation: conv1, initialTurn } = await a.conn.createConversation({
      type: 'multi-agent', subject: 'Durable', metadata: { keep: true },
      initialParticipants: [{ id: b.id, role: 'worker' }], initialTurn: text('first words'),
    });
    await a.conn.inviteToConversation({ conversationId: conv1.id, participant: { id: c.id, role: 'observer', permissions: { historyAccess: 'from-join' } } });
    await c.conn.leaveConversation(conv1.id, 'stepping out');
    const threads = [];
    for (let depth = 1; depth <= 8; depth++) {
      const { thread } = await a.conn.createThread({ conversationId: conv1.id, rootTurnId: initialTurn.id, parentThreadId: threads.at(-1)?.id, subject: `level ${depth}` });
      threads.push(thread);
    }
    await rejectsWithCode(a.conn.createThread({ conversationId: conv1.id, rootTurnId: initialTurn.id, parentThreadId: threads[7].id }), 10009, 'default max_thread_depth is 8');
    await b.conn.recordTurn({ conversationId: conv1.id, contentType: 'data', content: { rows: 3 }, threadId: threads[0].id });
    await a.conn.recordTurn({ conversationId: conv1.id, ...text('only for me'), visibility: { type: 'private' } });
    const { turn: draft } = await a.conn.recordTurn({ conversationId: conv1.id, ...text('draft'), status: 'streaming' });
    await a.conn.callExtension('mail/turn', { conversationId: conv1.id, turnId: draft.id, status: 'complete', content: { text: 'done' } });
    const sent = await a.conn.sendWithMail({ agent: b.id }, { task: 'persist me' }, conv1.id, { threadId: threads[1].id });
    await pollUntil(() => b.conn.listTurns({ conversationId: conv1.id }), (r) => r.turns.some((t) => t.source.messageId === sent.messageId), {
      timeoutMs: WAIT_MS * 2, intervalMs: 25, what: 'the intercepted turn recorded',
    });
    const summary = await b.conn.getConversationSummary({ conversationId: conv1.id });
    assert.equal(summary.generated, true);

    // conversation 2: closed; conversation 3: a child of 1
    const { conversation: conv2 } = await a.conn.createConversation({ type: 'user-session', initialParticipants: [{ id: b.id }] });
    await b.conn.recordTurn({ conversationId: conv2.id, ...text('closing soon') });
    await a.conn.closeConversation(conv2.id, 'finished');
    const { conversation: conv3 } = await b.conn.createConversation({ parentConversationId: conv1.id, parentTurnId: initialTurn.id, initialParticipants: [{ id: a.id }] });

    // the last write answers, then the process dies at once
    const { turn: last } = await b.conn.recordTurn({ conversationId: conv3.id, ...text('written right before the crash') });
    const beforeA = await snapshot(a);
    const beforeB = await snapshot(b);
    await gw1.kill();

    gw2 = await startGateway({ dataDir: gw1.dataDir, extraToml });
    const a2 = await connectAgent(gw2, { agentId: ids.a, name: 'a' });
    const b2 = await connectAgent(gw2, { agentId: ids.b, name: 'b' });
    const c2 = await connectAgent(gw2, { agentId: ids.c, name: 'c' });

    assert.deepEqual(beforeA.conversations, [conv1.id, conv2.id, conv3.id]);
    assert.deepEqual(await snapshot(a2), beforeA, 'the initiator reads back exactly what it had');
    assert.deepEqual(await snapshot(b2), beforeB, 'so does the worker (with its own visibility)');
    assert.ok(beforeB.detail[conv3.id].turns.some((t) => t.id === last.id), 'the turn acknowledged right before kill -9');
    const d1 = beforeA.detail[conv1.id];
    assert.equal(d1.threads.length, 8);
    assert.equal(d1.get.stats.totalTurns, 5);
    assert.ok(d1.turns.some((t) => t.source.type === 'intercepted' && t.source.messageId === sent.messageId));
    assert.equal(d1.get.participants.find((p) => p.id === c.id).leftAt > 0, true);

    // rules and caches still apply to the restored data
    const cached = await b2.conn.getConversationSummary({ conversationId: conv1.id });
    assert.deepEqual([cached.generated, cached.summary], [false, summary.summary], 'the cached summary survived too');
    await rejectsWithCode(b2.conn.recordTurn({ conversationId: conv2.id, ...text('still closed?') }), 10001, 'closed stays closed');
    await rejectsWithCode(c2.conn.listTurns({ conversationId: conv1.id }), 10002, 'who left stays out');
    await rejectsWithCode(a2.conn.createThread({ conversationId: conv1.id, rootTurnId: initialTurn.id, parentThreadId: threads[7].id }), 10009, 'nesting depth survives');
    const { turn: next } = await a2.conn.recordTurn({ conversationId: conv1.id, ...text('after the restart') });
    const turns = (await a2.conn.listTurns({ conversationId: conv1.id })).turns;
    assert.equal(turns.at(-1).id, next.id, 'new turns sort after the restored ones');
    assert.ok(turns.at(-2).id < next.id);
    const back = await c2.conn.joinConversation({ conversationId: conv1.id, role: 'worker' });
    assert.equal(back.participant.role, 'observer', 'the restored participant record (role) is used on rejoin');
  } finally {
    await gw2?.stop();
    await gw1.stop();
  }
});

test('kill -9 while many writers record turns loses no acknowledged turn', async () => {
  assert.ok(existsSync(MAIL_WASM), `build the plugin first (scripts/build-plugins.sh): ${MAIL_WASM} is missing`);
  const writers = 6;
  const inFlight = 8; // requests each writer keeps open, so commits are grouped
  const gw1 = await startGateway({ extraToml });
  let gw2;
  try {
    const agents = [];
    for (let i = 0; i < writers; i++) agents.push(await connectAgent(gw1, { agentId: uid(`writer-${i}`), name: `writer-${i}` }));
    const convs = [];
    for (const a of agents) convs.push((await a.conn.createConversation({ subject: `load ${a.id}` })).conversation);

    const acked = new Map(); // conversation id -> acknowledged turn ids
    let total = 0;
    let dead = false;
    let killAt;
    const killed = new Promise((resolve) => { killAt = resolve; });
    const lane = async (a, conv, lane) => {
      for (let n = 0; !dead; n++) {
        try {
          const { turn } = await a.conn.recordTurn({ conversationId: conv.id, ...text(`lane ${lane} turn ${n}`) });
          acked.get(conv.id).push(turn.id);
          if (++total === 300) killAt();
        } catch {
          return; // the connection died under it: not acknowledged
        }
      }
    };
    const lanes = [];
    agents.forEach((a, i) => {
      acked.set(convs[i].id, []);
      for (let l = 0; l < inFlight; l++) lanes.push(lane(a, convs[i], l));
    });
    await killed;
    // Writes are still in flight on every lane when the process dies.
    const killing = gw1.kill();
    dead = true;
    await killing;
    await Promise.allSettled(lanes);

    gw2 = await startGateway({ dataDir: gw1.dataDir, extraToml });
    for (let i = 0; i < writers; i++) {
      const a2 = await connectAgent(gw2, { agentId: agents[i].id, name: `writer-${i}` });
      const stored = new Set();
      let cursor;
      do {
        const page = await a2.conn.listTurns({ conversationId: convs[i].id, limit: 500, cursor });
        page.turns.forEach((t) => stored.add(t.id));
        cursor = page.hasMore ? page.nextCursor : undefined;
      } while (cursor);
      const missing = acked.get(convs[i].id).filter((id) => !stored.has(id));
      assert.deepEqual(missing, [], `writer ${i}: every acknowledged turn survives kill -9`);
      assert.ok(acked.get(convs[i].id).length > 0);
    }
    assert.ok(total >= 300);
  } finally {
    await gw2?.stop();
    await gw1.stop();
  }
});
