// The mail extension (plugins/mail → plugins/dist/mail.wasm) through the real SDK client:
// every mail/* method, the rules the reference server skips (participants only, closed
// conversations, canSend, visibility, historyAccess, content types, nesting limit), every
// spec error code 10000–10010, intercepted turns from map/send, mail.* events and the
// `mail` subscription filter; observer clients (capabilities.mail.canObserve), mail/reopen,
// mail/presence and the mail/turn.received notification.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync, readFileSync } from 'node:fs';
import {
  startGateway, connectAgent, connectClient, rejectsWithCode, uid, sleep, pollUntil, quietPeriod, WAIT_MS,
} from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const MAIL_WASM = join(HERE, '..', '..', 'plugins', 'dist', 'mail.wasm');
const OFF = { method: 'api-key', credential: 'off-key' };
const SHALLOW = { method: 'api-key', credential: 'shallow-key' };
const NO_OBSERVERS = { method: 'api-key', credential: 'no-observers-key' };

const E = {
  CONVERSATION_NOT_FOUND: 10000,
  CONVERSATION_CLOSED: 10001,
  NOT_A_PARTICIPANT: 10002,
  PERMISSION_DENIED: 10003,
  PARTICIPANT_ALREADY_JOINED: 10004,
  PARTICIPANT_NOT_FOUND: 10005,
  TURN_NOT_FOUND: 10006,
  THREAD_NOT_FOUND: 10007,
  INVALID_CONTENT_TYPE: 10008,
  THREAD_NESTING_LIMIT: 10009,
  MAIL_NOT_ENABLED: 10010,
  INVALID_PARAMS: -32602,
  METHOD_NOT_FOUND: -32601,
};

const ULID = '[0-9A-HJKMNP-TV-Z]{26}';
const CONV_ID = new RegExp(`^conv-${ULID}$`);
const TURN_ID = new RegExp(`^turn-${ULID}$`);
const THREAD_ID = new RegExp(`^thread-${ULID}$`);

let gw;
before(async () => {
  assert.ok(existsSync(MAIL_WASM), `build the plugin first (scripts/build-plugins.sh): ${MAIL_WASM} is missing`);
  gw = await startGateway({
    tenants: [
      { id: 'default' },
      // mail switched off for one tenant, a tighter nesting limit for another
      { id: 'off', api_keys: ['off-key'], toml: 'plugin_config = { mail = { enabled = false } }' },
      { id: 'shallow', api_keys: ['shallow-key'], toml: 'plugin_config = { mail = { max_thread_depth = 1 } }' },
      // observer clients turned away
      { id: 'no-observers', api_keys: ['no-observers-key'], toml: 'plugin_config = { mail = { allow_observers = false } }' },
    ],
    extraToml: `[plugins.mail]\npath = ${JSON.stringify(MAIL_WASM)}\n\n[plugins.mail.config]\nmax_thread_depth = 3\n`,
  });
});
after(async () => { await gw?.stop(); });

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

const agent = (name, opts = {}) => connectAgent(gw, { name: uid(name), ...opts });

/**
 * Subscribe with `filter` on `who`'s own connection (a new client when none is
 * given) and collect the mail events it gets. Mail events go only to the
 * conversation's participants, and turn events only to those who may read the turn.
 */
async function watch(filter, who) {
  const w = who ?? (await connectClient(gw, { name: uid('watch') }));
  const sub = await w.conn.subscribe(filter);
  const events = (pred = () => true) => w.tap.events(sub.id).map((p) => p.event).filter(pred);
  return {
    events,
    wait: (pred, n = 1) => w.tap.waitForEvents(sub.id, (ev) => pred(ev), n).then((ps) => ps.map((p) => p.event)),
  };
}

const ofType = (type, pred = () => true) => (ev) => ev.type === type && pred(ev.data ?? {});

/** Poll until fn() returns something truthy: that value. */
const eventually = (fn, what, timeoutMs = WAIT_MS * 2) => pollUntil(fn, (v) => v, { timeoutMs, intervalMs: 25, what });

// `sleep(3)` below lets time pass: timestamps are in ms, and the tests need each to differ.
const text = (t) => ({ contentType: 'text', content: { text: t } });
const ids = (turns) => turns.map((t) => t.id);

/** A conversation created by `owner`, with `others` added as [handle, role, permissions?]. */
async function conversation(owner, others = [], extra = {}) {
  const res = await owner.conn.createConversation({
    subject: uid('subject'),
    initialParticipants: others.map(([h, role, permissions]) => ({ id: h.id ?? h.participantId, role, permissions })),
    ...extra,
  });
  return res.conversation.id;
}

async function turn(h, conversationId, body, more = {}) {
  const { turn: t } = await h.conn.recordTurn({ conversationId, ...text(body), ...more });
  return t;
}

// ---------------------------------------------------------------------------
// capability advertisement
// ---------------------------------------------------------------------------

test('map/connect advertises capabilities.mail and the mail extension (mail 1.1.0) with its 15 methods', async () => {
  const c = await connectClient(gw);
  const caps = c.connectResult.capabilities;
  assert.equal(caps.mail?.enabled, true, `capabilities.mail: ${JSON.stringify(caps.mail)}`);
  for (const k of ['canCreate', 'canJoin', 'canInvite', 'canViewHistory', 'canCreateThreads', 'canObserve']) assert.equal(caps.mail[k], true, k);
  const ext = caps.extensions.find((e) => e.uri === 'urn:map:ext:mail:1');
  assert.ok(ext, `extensions: ${JSON.stringify(caps.extensions)}`);
  assert.deepEqual([...ext.methods].sort(), [
    'mail/close', 'mail/create', 'mail/get', 'mail/invite', 'mail/join', 'mail/leave', 'mail/list', 'mail/presence',
    'mail/reopen', 'mail/replay', 'mail/summary', 'mail/thread/create', 'mail/thread/list', 'mail/turn', 'mail/turns/list',
  ]);
  // the protocol's version (mail v1.1), and the plugin's own beside it; the group does not repeat it
  assert.equal(ext.version, '1.1.0', `extension entry: ${JSON.stringify(ext)}`);
  const crate = readFileSync(join(HERE, '..', '..', 'plugins', 'mail', 'Cargo.toml'), 'utf8').match(/^version = "([^"]+)"/m)[1];
  assert.equal(ext.pluginVersion, crate);
  assert.equal(caps.mail.protocolVersion, undefined);
});

// ---------------------------------------------------------------------------
// mail/create, mail/get
// ---------------------------------------------------------------------------

test('mail/create: caller joins as initiator, initial participants and turn, metadata, events', async () => {
  const a = await agent('creator');
  const b = await agent('worker');
  const c = await agent('observer');
  const w = await watch({ eventTypes: ['mail.*'] }, a);
  const res = await a.conn.createConversation({
    type: 'agent-task',
    subject: 'Sprint planning',
    initialParticipants: [
      { id: b.id, role: 'worker' },
      { id: c.id, role: 'observer', permissions: { historyAccess: 'from-join' } },
    ],
    initialTurn: text("Let's plan the sprint."),
    metadata: { project: 'map-sdk' },
  });
  const conv = res.conversation;
  assert.match(conv.id, CONV_ID);
  assert.equal(conv.type, 'agent-task');
  assert.equal(conv.status, 'active');
  assert.equal(conv.subject, 'Sprint planning');
  assert.equal(conv.participantCount, 3);
  assert.equal(conv.createdBy, a.id, 'the mail identity of an agent session is its agent id');
  assert.deepEqual(conv.metadata, { project: 'map-sdk' });
  assert.equal(typeof conv.createdAt, 'number');
  assert.ok(conv.updatedAt >= conv.createdAt);

  assert.equal(res.participant.id, a.id);
  assert.equal(res.participant.role, 'initiator');
  assert.equal(res.participant.conversationId, conv.id);
  assert.equal(res.participant.type, 'agent');
  assert.deepEqual(res.participant.permissions, {
    canSend: true, canObserve: true, canInvite: true, canRemove: true, canCreateThreads: true, historyAccess: 'full', canSeeInternal: true,
  });

  const t = res.initialTurn;
  assert.match(t.id, TURN_ID);
  assert.equal(t.conversationId, conv.id);
  assert.equal(t.participant, a.id);
  assert.equal(t.contentType, 'text');
  assert.deepEqual(t.content, { text: "Let's plan the sprint." });
  assert.deepEqual(t.source, { type: 'explicit', method: 'mail/turn' });
  assert.equal(t.status, 'complete');
  assert.ok(t.timestamp >= conv.createdAt);

  const [created] = await w.wait(ofType('mail.created', (d) => d.conversationId === conv.id));
  assert.equal(created.data.type, 'agent-task');
  assert.equal(created.data.subject, 'Sprint planning');
  assert.equal(created.data.createdBy, a.id);
  const joined = await w.wait(ofType('mail.participant.joined', (d) => d.conversationId === conv.id), 3);
  assert.deepEqual(joined.map((e) => e.data.participant.id).sort(), [a.id, b.id, c.id].sort());
  const [added] = await w.wait(ofType('mail.turn.added', (d) => d.conversationId === conv.id));
  assert.deepEqual(added.data.turn, t);

  // mail/get with every include, as the worker sees it
  const got = await b.conn.getConversation(conv.id, { participants: true, threads: true, recentTurns: 5, stats: true });
  assert.equal(got.conversation.id, conv.id);
  assert.equal(got.conversation.participantCount, 3);
  const roles = Object.fromEntries(got.participants.map((p) => [p.id, p.role]));
  assert.deepEqual(roles, { [a.id]: 'initiator', [b.id]: 'worker', [c.id]: 'observer' });
  const obs = got.participants.find((p) => p.id === c.id);
  assert.equal(obs.permissions.canSend, false, 'observers do not send by default');
  assert.equal(obs.permissions.historyAccess, 'from-join');
  assert.deepEqual(got.threads, []);
  assert.deepEqual(ids(got.recentTurns), [t.id]);
  assert.deepEqual(got.stats, { totalTurns: 1, turnsByContentType: { text: 1 }, activeParticipants: 3, threadCount: 0 });

  // without includes only the conversation comes back
  const plain = await c.conn.getConversation(conv.id);
  assert.deepEqual(Object.keys(plain), ['conversation']);
});

test('mail/create: default type, parent conversation and turn, and its errors', async () => {
  const a = await agent('parent-owner');
  const outsider = await agent('outsider');
  const { conversation: parent, initialTurn } = await a.conn.createConversation({ subject: 'parent', initialTurn: text('spawn a child') });
  const { conversation: child } = await a.conn.createConversation({ parentConversationId: parent.id, parentTurnId: initialTurn.id });
  assert.equal(child.type, 'multi-agent', 'type defaults to multi-agent');
  assert.equal(child.parentConversationId, parent.id);
  assert.equal(child.parentTurnId, initialTurn.id);

  await rejectsWithCode(a.conn.createConversation({ parentConversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ' }), E.CONVERSATION_NOT_FOUND, 'unknown parent');
  await rejectsWithCode(a.conn.createConversation({ parentConversationId: parent.id, parentTurnId: 'turn-nope' }), E.TURN_NOT_FOUND, 'unknown parent turn');
  await rejectsWithCode(outsider.conn.createConversation({ parentConversationId: parent.id }), E.NOT_A_PARTICIPANT, 'parent the caller is not in');
  await rejectsWithCode(a.conn.createConversation({ type: 'chit-chat' }), E.INVALID_PARAMS, 'unknown type');

  // a rejected create writes nothing
  const before = (await a.conn.listConversations()).conversations.length;
  await rejectsWithCode(a.conn.createConversation({ initialTurn: { contentType: 'image', content: {} } }), E.INVALID_CONTENT_TYPE, 'bad initial turn');
  await rejectsWithCode(a.conn.createConversation({ initialParticipants: [{ id: outsider.id }, { id: outsider.id }] }), E.PARTICIPANT_ALREADY_JOINED, 'duplicate participant');
  await rejectsWithCode(a.conn.createConversation({ initialParticipants: [{ id: a.id, role: 'worker' }] }), E.PARTICIPANT_ALREADY_JOINED, 'creator listed again');
  assert.equal((await a.conn.listConversations()).conversations.length, before, 'failed creates leave no conversation behind');

  await rejectsWithCode(a.conn.getConversation('conv-01HZZZZZZZZZZZZZZZZZZZZZZZ'), E.CONVERSATION_NOT_FOUND, 'get unknown');
  await rejectsWithCode(outsider.conn.getConversation(parent.id), E.NOT_A_PARTICIPANT, 'get by outsider');
  await rejectsWithCode(a.conn.getConversation(''), E.INVALID_PARAMS, 'empty id');
  await rejectsWithCode(a.conn.callExtension('mail/get', {}), E.INVALID_PARAMS, 'missing conversationId');
  await rejectsWithCode(a.conn.callExtension('mail/get', { conversationId: parent.id, include: { recentTurns: 'many' } }), E.INVALID_PARAMS, 'ill-typed include');
});

// ---------------------------------------------------------------------------
// mail/list
// ---------------------------------------------------------------------------

test('mail/list: only the caller\'s conversations, filters, cursor pagination', async () => {
  const l = await agent('lister');
  const m = await agent('member');
  const other = await agent('other');
  const c1 = await conversation(l, [[m, 'worker']], { type: 'user-session' });
  await sleep(3);
  const c2 = await conversation(l, [], { type: 'multi-agent' });
  await sleep(3);
  const c3 = await conversation(l, [[m, 'worker']], { type: 'user-session' });
  await sleep(3);
  const c4 = await conversation(l, [], { type: 'mixed', parentConversationId: c1 });
  await sleep(3);
  const c5 = await conversation(l, [], { type: 'agent-task' });
  await l.conn.closeConversation(c5, 'done');
  const theirs = await conversation(other);

  const all = await l.conn.listConversations();
  assert.deepEqual(all.conversations.map((c) => c.id), [c1, c2, c3, c4, c5], 'oldest first, only the caller\'s');
  assert.equal(all.hasMore, false);
  assert.equal(all.nextCursor, undefined);
  assert.ok(!(await other.conn.listConversations()).conversations.some((c) => c.id === c1), 'others do not see them');
  assert.ok(!all.conversations.some((c) => c.id === theirs));

  const pages = [];
  let cursor;
  for (;;) {
    const page = await l.conn.listConversations({ limit: 2, cursor });
    pages.push(page.conversations.map((c) => c.id));
    if (!page.hasMore) break;
    assert.equal(page.nextCursor, page.conversations.at(-1).id);
    cursor = page.nextCursor;
  }
  assert.deepEqual(pages, [[c1, c2], [c3, c4], [c5]]);

  const idsOf = async (filter) => (await l.conn.listConversations({ filter })).conversations.map((c) => c.id);
  assert.deepEqual(await idsOf({ type: ['user-session'] }), [c1, c3]);
  assert.deepEqual(await idsOf({ type: ['mixed', 'agent-task'] }), [c4, c5]);
  assert.deepEqual(await idsOf({ status: ['completed'] }), [c5]);
  assert.deepEqual(await idsOf({ status: ['active'], type: ['agent-task'] }), []);
  assert.deepEqual(await idsOf({ participantId: m.id }), [c1, c3]);
  assert.deepEqual(await idsOf({ parentConversationId: c1 }), [c4]);
  const c3At = all.conversations[2].createdAt;
  assert.deepEqual(await idsOf({ createdAfter: c3At }), [c4, c5]);
  assert.deepEqual(await idsOf({ createdBefore: c3At }), [c1, c2]);
  assert.deepEqual((await m.conn.listConversations()).conversations.map((c) => c.id), [c1, c3]);
});

// ---------------------------------------------------------------------------
// mail/close
// ---------------------------------------------------------------------------

test('mail/close: initiator only, status completed, closed conversations refuse writes (10001)', async () => {
  const a = await agent('closer');
  const b = await agent('worker');
  const outsider = await agent('outsider');
  const id = await conversation(a, [[b, 'worker']]);
  const t = await turn(b, id, 'before the close');
  const w = await watch({ eventTypes: ['mail.closed'], mail: { conversationId: id } }, a);

  await rejectsWithCode(b.conn.closeConversation(id), E.PERMISSION_DENIED, 'a worker may not close');
  await rejectsWithCode(outsider.conn.closeConversation(id), E.NOT_A_PARTICIPANT, 'outsider');
  await rejectsWithCode(a.conn.closeConversation('conv-01HZZZZZZZZZZZZZZZZZZZZZZZ'), E.CONVERSATION_NOT_FOUND, 'unknown');

  const { conversation: closed } = await a.conn.closeConversation(id, 'Task completed successfully');
  assert.equal(closed.status, 'completed');
  assert.equal(typeof closed.closedAt, 'number');
  const [ev] = await w.wait(() => true);
  assert.equal(ev.type, 'mail.closed');
  assert.deepEqual([ev.data.conversationId, ev.data.closedBy, ev.data.reason], [id, a.id, 'Task completed successfully']);

  await rejectsWithCode(a.conn.closeConversation(id), E.CONVERSATION_CLOSED, 'close twice');
  await rejectsWithCode(b.conn.recordTurn({ conversationId: id, ...text('too late') }), E.CONVERSATION_CLOSED, 'turn');
  await rejectsWithCode(outsider.conn.joinConversation({ conversationId: id }), E.CONVERSATION_CLOSED, 'join');
  await rejectsWithCode(a.conn.inviteToConversation({ conversationId: id, participant: { id: outsider.id } }), E.CONVERSATION_CLOSED, 'invite');
  await rejectsWithCode(a.conn.createThread({ conversationId: id, rootTurnId: t.id }), E.CONVERSATION_CLOSED, 'thread');
  // reading stays possible
  assert.deepEqual(ids((await b.conn.listTurns({ conversationId: id })).turns), [t.id]);
  assert.equal((await b.conn.getConversation(id)).conversation.status, 'completed');

  const other = await conversation(a);
  const { conversation: archived } = await a.conn.callExtension('mail/close', { conversationId: other, status: 'archived' });
  assert.equal(archived.status, 'archived');
});

// ---------------------------------------------------------------------------
// mail/join, mail/leave, mail/invite
// ---------------------------------------------------------------------------

test('mail/join: catch-up history and summary; 10004 when already in; mail/leave and removal', async () => {
  const a = await agent('host');
  const j = await agent('joiner');
  const k = await agent('second');
  const { conversation: conv } = await a.conn.createConversation({ subject: 'Release checklist' });
  const id = conv.id;
  const t1 = await turn(a, id, 'Build the release candidate.');
  await sleep(3);
  const t2 = await turn(a, id, 'Run the migration tests.');
  await sleep(3);
  const t3 = await turn(a, id, 'We decided to ship on Friday.');
  const w = await watch({ eventTypes: ['mail.participant.*'], mail: { conversationId: id } }, a);

  const joined = await j.conn.joinConversation({ conversationId: id, role: 'worker', catchUp: { from: t2.timestamp, limit: 1, includeSummary: true } });
  assert.equal(joined.participant.id, j.id);
  assert.equal(joined.participant.role, 'worker');
  assert.equal(joined.conversation.participantCount, 2);
  assert.deepEqual(ids(joined.history), [t2.id], 'history starts at catchUp.from and honours its limit');
  assert.equal(joined.historyCursor, t2.id);
  assert.match(joined.summary, /"Release checklist": 3 turns from 1 participant/);
  assert.match(joined.summary, /ship on Friday/);
  const [ev] = await w.wait(ofType('mail.participant.joined', (d) => d.participant.id === j.id));
  assert.equal(ev.data.participant.role, 'worker');

  const fromTurn = await k.conn.joinConversation({ conversationId: id, catchUp: { from: t1.id } });
  assert.equal(fromTurn.participant.role, 'assistant', 'role defaults to assistant');
  assert.deepEqual(ids(fromTurn.history), [t2.id, t3.id], 'from a turn id: the turns after it');
  await k.conn.leaveConversation(id);
  const bare = await k.conn.joinConversation({ conversationId: id });
  assert.equal(bare.history, undefined, 'no catchUp, no history');

  await rejectsWithCode(j.conn.joinConversation({ conversationId: id }), E.PARTICIPANT_ALREADY_JOINED, 'join twice');
  const m = await agent('climber');
  await rejectsWithCode(m.conn.joinConversation({ conversationId: id, role: 'moderator' }), E.PERMISSION_DENIED, 'self-promotion');
  await rejectsWithCode(m.conn.joinConversation({ conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ' }), E.CONVERSATION_NOT_FOUND, 'unknown');
  await rejectsWithCode(m.conn.joinConversation({ conversationId: id, catchUp: { from: 'turn-nope' } }), E.TURN_NOT_FOUND, 'unknown catch-up turn');

  const left = await j.conn.leaveConversation(id, 'Work complete');
  assert.equal(left.success, true);
  assert.equal(typeof left.leftAt, 'number');
  const [lev] = await w.wait(ofType('mail.participant.left', (d) => d.participantId === j.id));
  assert.equal(lev.data.reason, 'Work complete');
  await rejectsWithCode(j.conn.listTurns({ conversationId: id }), E.NOT_A_PARTICIPANT, 'read after leaving');
  await rejectsWithCode(j.conn.recordTurn({ conversationId: id, ...text('x') }), E.NOT_A_PARTICIPANT, 'write after leaving');
  await rejectsWithCode(j.conn.leaveConversation(id), E.NOT_A_PARTICIPANT, 'leave twice');
  const back = await j.conn.joinConversation({ conversationId: id, role: 'observer' });
  assert.equal(back.participant.role, 'worker', 'a returning participant keeps its role');

  // removing someone else needs canRemove; the target must be in the conversation
  await rejectsWithCode(k.conn.callExtension('mail/leave', { conversationId: id, participantId: j.id }), E.PERMISSION_DENIED, 'assistant removes');
  await rejectsWithCode(a.conn.callExtension('mail/leave', { conversationId: id, participantId: 'nobody' }), E.PARTICIPANT_NOT_FOUND, 'remove a stranger');
  const removed = await a.conn.callExtension('mail/leave', { conversationId: id, participantId: k.id, reason: 'off-topic' });
  assert.equal(removed.success, true);
  const [rev] = await w.wait(ofType('mail.participant.left', (d) => d.participantId === k.id && d.removedBy));
  assert.equal(rev.data.removedBy, a.id);
  await rejectsWithCode(k.conn.getConversation(id), E.NOT_A_PARTICIPANT, 'removed participant');
  assert.equal((await a.conn.getConversation(id)).conversation.participantCount, 2);
  await rejectsWithCode(k.conn.joinConversation({ conversationId: id }), E.PERMISSION_DENIED, 'a removed participant cannot just rejoin');
  await a.conn.inviteToConversation({ conversationId: id, participant: { id: k.id, role: 'observer' } });
  assert.equal((await k.conn.getConversation(id)).conversation.participantCount, 3, 'a new invitation brings it back');
});

test('turn events follow joins and leaves at once, while turns keep coming', async () => {
  // The plugin keeps a conversation's audience between turns; each join or
  // leave must show in the very next turn's event.
  const a = await agent('speaker');
  const j = await agent('comer');
  const { conversation: conv } = await a.conn.createConversation({ subject: uid('roster') });
  const id = conv.id;
  for (let i = 0; i < 3; i += 1) await turn(a, id, `before ${i}`);
  const w = await watch({ eventTypes: ['mail.turn.added', 'mail.participant.joined'], mail: { conversationId: id } }, j);

  await j.conn.joinConversation({ conversationId: id, role: 'worker' });
  const t1 = await turn(a, id, 'after the join');
  await w.wait(ofType('mail.turn.added', (d) => d.turn.id === t1.id));

  await j.conn.leaveConversation(id);
  const t2 = await turn(a, id, 'after the leave');
  // Back in: its own join event comes after anything sent before it.
  await j.conn.joinConversation({ conversationId: id });
  await w.wait(ofType('mail.participant.joined', (d) => d.participant.id === j.id), 2);
  assert.ok(!w.events(ofType('mail.turn.added', (d) => d.turn.id === t2.id)).length, 'a turn recorded after the leave reached the leaver');
  const t3 = await turn(a, id, 'after the return');
  await w.wait(ofType('mail.turn.added', (d) => d.turn.id === t3.id));
});

test('mail/invite: canInvite, no privilege escalation, 10004, invited observers cannot send', async () => {
  const a = await agent('inviter');
  const b = await agent('worker');
  const r = await agent('reviewer');
  const s = await agent('helper');
  const t = await agent('third');
  const id = await conversation(a, [[b, 'worker']]);
  const w = await watch({ eventTypes: ['mail.participant.joined'], mail: { conversationId: id } }, a);

  await rejectsWithCode(b.conn.inviteToConversation({ conversationId: id, participant: { id: r.id } }), E.PERMISSION_DENIED, 'worker lacks canInvite');
  const inv = await a.conn.inviteToConversation({
    conversationId: id,
    participant: { id: r.id, role: 'observer', permissions: { canSend: false, historyAccess: 'from-join' } },
    message: 'Please review the conversation so far.',
  });
  assert.equal(inv.invited, true);
  assert.equal(inv.participant.id, r.id);
  assert.equal(inv.participant.role, 'observer');
  assert.equal(inv.participant.permissions.canSend, false);
  assert.equal(inv.participant.permissions.historyAccess, 'from-join');
  const [ev] = await w.wait(ofType('mail.participant.joined', (d) => d.participant.id === r.id));
  assert.equal(ev.data.invitedBy, a.id);
  assert.equal(ev.data.message, 'Please review the conversation so far.');

  await rejectsWithCode(a.conn.inviteToConversation({ conversationId: id, participant: { id: r.id } }), E.PARTICIPANT_ALREADY_JOINED, 'invite twice');
  await rejectsWithCode(a.conn.inviteToConversation({ conversationId: id, participant: { id: t.id, role: 'initiator' } }), E.PERMISSION_DENIED, 'second initiator');
  await rejectsWithCode(r.conn.recordTurn({ conversationId: id, ...text('may I?') }), E.PERMISSION_DENIED, 'canSend: false');
  await rejectsWithCode(r.conn.createThread({ conversationId: id, rootTurnId: 'turn-x' }), E.PERMISSION_DENIED, 'observers create no threads');

  await a.conn.inviteToConversation({ conversationId: id, participant: { id: s.id, role: 'worker', permissions: { canInvite: true } } });
  await rejectsWithCode(s.conn.inviteToConversation({ conversationId: id, participant: { id: t.id, permissions: { canRemove: true } } }), E.PERMISSION_DENIED, 'cannot grant what one lacks');
  const ok = await s.conn.inviteToConversation({ conversationId: id, participant: { id: t.id, role: 'worker' } });
  assert.equal(ok.participant.invitedBy, s.id);

  const outsider = await agent('outsider');
  await rejectsWithCode(outsider.conn.inviteToConversation({ conversationId: id, participant: { id: 'y' } }), E.NOT_A_PARTICIPANT, 'outsider invites');
  await rejectsWithCode(a.conn.inviteToConversation({ conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ', participant: { id: 'y' } }), E.CONVERSATION_NOT_FOUND, 'unknown');
  await rejectsWithCode(a.conn.callExtension('mail/invite', { conversationId: id }), E.INVALID_PARAMS, 'no participant');
  await rejectsWithCode(a.conn.callExtension('mail/invite', { conversationId: id, participant: { id: 'z', permissions: { historyAccess: 'some' } } }), E.INVALID_PARAMS, 'bad historyAccess');
});

// ---------------------------------------------------------------------------
// mail/turn
// ---------------------------------------------------------------------------

test('mail/turn: content types (10008), threads (10007), replies (10006), params, status updates', async () => {
  const a = await agent('author');
  const b = await agent('peer');
  const outsider = await agent('outsider');
  const id = await conversation(a, [[b, 'worker']]);
  const w = await watch({ eventTypes: ['mail.turn.*'], mail: { conversationId: id } }, a);

  const made = [];
  for (const [contentType, content] of [
    ['text', { text: 'hello' }], ['data', { rows: [1, 2] }], ['event', { event: 'task.started' }],
    ['reference', { uri: 'https://example.com/doc' }], ['x-tool-call', { tool: 'grep', args: ['-r'] }],
  ]) {
    const { turn: t } = await a.conn.recordTurn({ conversationId: id, contentType, content, metadata: { n: made.length } });
    assert.equal(t.contentType, contentType);
    assert.deepEqual(t.content, content);
    assert.deepEqual(t.metadata, { n: made.length });
    assert.deepEqual(t.source, { type: 'explicit', method: 'mail/turn' });
    made.push(t);
  }
  assert.deepEqual(ids((await b.conn.listTurns({ conversationId: id })).turns), ids(made), 'turns come back in order');
  await w.wait(ofType('mail.turn.added'), made.length);

  for (const bad of ['image', 'x-', 'TEXT', '']) {
    await rejectsWithCode(a.conn.recordTurn({ conversationId: id, contentType: bad, content: {} }), E.INVALID_CONTENT_TYPE, `content type ${JSON.stringify(bad)}`);
  }
  await rejectsWithCode(a.conn.recordTurn({ conversationId: id, contentType: 'text' }), E.INVALID_PARAMS, 'no content');
  await rejectsWithCode(a.conn.recordTurn({ conversationId: id, ...text('v'), visibility: { type: 'everyone' } }), E.INVALID_PARAMS, 'bad visibility');
  await rejectsWithCode(a.conn.recordTurn({ conversationId: id, ...text('t'), threadId: 'thread-nope' }), E.THREAD_NOT_FOUND, 'unknown thread');
  await rejectsWithCode(a.conn.recordTurn({ conversationId: id, ...text('r'), inReplyTo: 'turn-nope' }), E.TURN_NOT_FOUND, 'unknown reply target');
  await rejectsWithCode(outsider.conn.recordTurn({ conversationId: id, ...text('hi') }), E.NOT_A_PARTICIPANT, 'outsider');
  await rejectsWithCode(a.conn.recordTurn({ conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ', ...text('hi') }), E.CONVERSATION_NOT_FOUND, 'unknown');

  const reply = await turn(b, id, 'hello back', { inReplyTo: made[0].id });
  assert.equal(reply.inReplyTo, made[0].id);
  assert.equal(reply.participant, b.id);

  // streaming → complete: only the author updates, with mail.turn.updated
  const draft = await turn(a, id, 'draft…', { status: 'streaming' });
  assert.equal(draft.status, 'streaming');
  await rejectsWithCode(b.conn.callExtension('mail/turn', { conversationId: id, turnId: draft.id, status: 'complete' }), E.PERMISSION_DENIED, 'not the author');
  await rejectsWithCode(a.conn.callExtension('mail/turn', { conversationId: id, turnId: 'turn-nope', status: 'complete' }), E.TURN_NOT_FOUND, 'unknown turn');
  const { turn: done } = await a.conn.callExtension('mail/turn', { conversationId: id, turnId: draft.id, status: 'complete', content: { text: 'final' } });
  assert.equal(done.id, draft.id);
  assert.equal(done.status, 'complete');
  assert.deepEqual(done.content, { text: 'final' });
  assert.equal(typeof done.updatedAt, 'number');
  const [upd] = await w.wait(ofType('mail.turn.updated', (d) => d.turnId === draft.id));
  assert.equal(upd.data.status, 'complete');
  assert.equal(upd.data.conversationId, id);
  const listed = (await b.conn.listTurns({ conversationId: id })).turns;
  assert.deepEqual(listed.find((t) => t.id === draft.id).content, { text: 'final' });
  assert.equal(listed.length, made.length + 2, 'an update adds no turn');
});

// ---------------------------------------------------------------------------
// visibility, historyAccess, canObserve, internal turns
// ---------------------------------------------------------------------------

test('turn visibility and historyAccess filter what each reader gets', async () => {
  const a = await agent('lead');
  const b = await agent('worker');
  const c = await agent('watcher');
  const id = await conversation(a, [[b, 'worker'], [c, 'observer']]);
  // Each reader watches on its own connection; an outsider watches too.
  const filter = { eventTypes: ['mail.turn.added'], mail: { conversationId: id } };
  const outsider = await agent('outsider');
  const [wa, wb, wc, wo] = await Promise.all([watch(filter, a), watch(filter, b), watch(filter, c), watch(filter, outsider)]);

  const pub = await turn(a, id, 'for everyone', { visibility: { type: 'all' } });
  const toC = await turn(a, id, 'for the watcher', { visibility: { type: 'participants', ids: [c.id] } });
  const toWorkers = await turn(a, id, 'for workers', { visibility: { type: 'role', roles: ['worker'] } });
  const aPrivate = await turn(a, id, 'note to self', { visibility: { type: 'private' } });
  const internal = await turn(a, id, 'internal reasoning', { metadata: { internal: true } });
  const bPrivate = await turn(b, id, 'worker scratch', { visibility: { type: 'private' } });

  const seenBy = async (h) => ids((await h.conn.listTurns({ conversationId: id })).turns);
  assert.deepEqual(await seenBy(a), ids([pub, toC, toWorkers, aPrivate, internal]), 'the initiator sees its own turns and internal ones, not another\'s private turn');
  assert.deepEqual(await seenBy(b), ids([pub, toWorkers, bPrivate]), 'the worker: all, its role, its own');
  assert.deepEqual(await seenBy(c), ids([pub, toC]), 'the observer: all and the turn addressed to it');

  // the same filtering everywhere turns are read
  assert.deepEqual(ids((await c.conn.replayConversation({ conversationId: id })).turns), ids([pub, toC]));
  const got = await c.conn.getConversation(id, { recentTurns: 10, stats: true });
  assert.deepEqual(ids(got.recentTurns), ids([toC, pub]), 'recentTurns: newest first');
  assert.equal(got.stats.totalTurns, 2);
  await rejectsWithCode(c.conn.listTurns({ conversationId: id, filter: { afterTurnId: aPrivate.id } }), E.TURN_NOT_FOUND, 'an invisible turn is reported as missing');
  await rejectsWithCode(b.conn.recordTurn({ conversationId: id, ...text('re'), inReplyTo: toC.id }), E.TURN_NOT_FOUND, 'cannot reply to what one cannot see');
  await rejectsWithCode(b.conn.createThread({ conversationId: id, rootTurnId: aPrivate.id }), E.TURN_NOT_FOUND, 'cannot root a thread there');

  // turn events follow the same rules: each reader gets exactly the turns it may read, whole
  for (const [h, w, n] of [[a, wa, 5], [b, wb, 3], [c, wc, 2]]) {
    const evs = await w.wait(() => true, n);
    await quietPeriod();
    assert.deepEqual(w.events().map((e) => e.data.turn.id), await seenBy(h), `events of ${h.id} match what it may read`);
    for (const e of evs) assert.notEqual(e.data.turn.content, undefined, 'turn events carry the content to those who may read it');
  }
  assert.deepEqual(wo.events(), [], 'a non-participant gets no mail events');
  const spy = await connectClient(gw);
  const replayed = await spy.conn.replay({ filter: { mail: { conversationId: id } }, limit: 1000 });
  assert.deepEqual(replayed.events, [], 'nor does map/replay show them to a non-participant');

  // historyAccess: from-join sees turns from its join on; none sees only its own
  await sleep(3);
  const d = await agent('late');
  const e = await agent('blind');
  const f = await agent('no-observe');
  await a.conn.inviteToConversation({ conversationId: id, participant: { id: d.id, role: 'worker', permissions: { historyAccess: 'from-join' } } });
  await a.conn.inviteToConversation({ conversationId: id, participant: { id: e.id, role: 'worker', permissions: { historyAccess: 'none' } } });
  await a.conn.inviteToConversation({ conversationId: id, participant: { id: f.id, role: 'worker', permissions: { canObserve: false } } });
  assert.deepEqual(await seenBy(d), [], 'nothing from before the join');
  const after = await turn(a, id, 'after the join');
  const own = await turn(e, id, 'my own words');
  assert.deepEqual(await seenBy(d), ids([after, own]));
  assert.deepEqual(await seenBy(e), ids([own]), 'historyAccess none: only one\'s own turns');
  assert.deepEqual(await seenBy(b), ids([pub, toWorkers, bPrivate, after, own]));
  await rejectsWithCode(f.conn.listTurns({ conversationId: id }), E.PERMISSION_DENIED, 'canObserve: false');
  await rejectsWithCode(f.conn.replayConversation({ conversationId: id }), E.PERMISSION_DENIED, 'canObserve: false replay');
  await rejectsWithCode(f.conn.getConversationSummary({ conversationId: id }), E.PERMISSION_DENIED, 'canObserve: false summary');
  await turn(f, id, 'writing is still allowed');
});

test('capabilities.mail declared false at map/connect is enforced (10003)', async () => {
  const a = await agent('owner');
  const n = await agent('narrow', { capabilities: { mail: { canCreate: false, canViewHistory: false, canInvite: false, canCreateThreads: false } } });
  const j = await agent('nojoin', { capabilities: { mail: { canJoin: false } } });
  await rejectsWithCode(n.conn.createConversation({}), E.PERMISSION_DENIED, 'canCreate: false');
  const id = await conversation(a, [[n, 'moderator']]);
  const t = await turn(n, id, 'sending is still fine');
  await rejectsWithCode(n.conn.listTurns({ conversationId: id }), E.PERMISSION_DENIED, 'canViewHistory: false');
  await rejectsWithCode(n.conn.replayConversation({ conversationId: id }), E.PERMISSION_DENIED, 'canViewHistory: false replay');
  await rejectsWithCode(n.conn.getConversationSummary({ conversationId: id }), E.PERMISSION_DENIED, 'canViewHistory: false summary');
  await rejectsWithCode(n.conn.inviteToConversation({ conversationId: id, participant: { id: 'q' } }), E.PERMISSION_DENIED, 'canInvite: false');
  await rejectsWithCode(n.conn.createThread({ conversationId: id, rootTurnId: t.id }), E.PERMISSION_DENIED, 'canCreateThreads: false');
  await rejectsWithCode(j.conn.joinConversation({ conversationId: id }), E.PERMISSION_DENIED, 'canJoin: false');
});

// ---------------------------------------------------------------------------
// mail/turns/list, mail/replay
// ---------------------------------------------------------------------------

test('mail/turns/list: thread, content types, participant, time and id bounds, order, cursor', async () => {
  const a = await agent('alpha');
  const b = await agent('beta');
  const id = await conversation(a, [[b, 'worker']]);
  const t1 = await turn(a, id, 'one');
  await sleep(3);
  const t2 = (await b.conn.recordTurn({ conversationId: id, contentType: 'data', content: { n: 2 } })).turn;
  await sleep(3);
  const { thread: T } = await a.conn.createThread({ conversationId: id, rootTurnId: t1.id, subject: 'side' });
  const t3 = await turn(a, id, 'three', { threadId: T.id });
  await sleep(3);
  const { thread: T2 } = await b.conn.createThread({ conversationId: id, rootTurnId: t3.id, parentThreadId: T.id });
  const t4 = (await b.conn.recordTurn({ conversationId: id, contentType: 'x-note', content: { note: 4 }, threadId: T2.id })).turn;
  await sleep(3);
  const t5 = await turn(a, id, 'five');

  const list = async (params) => ids((await a.conn.listTurns({ conversationId: id, ...params })).turns);
  assert.deepEqual(await list({}), ids([t1, t2, t3, t4, t5]));
  assert.deepEqual(await list({ filter: { threadId: T.id } }), [t3.id]);
  assert.deepEqual(await list({ filter: { threadId: T.id, includeAllThreads: true } }), [t3.id, t4.id], 'with nested threads');
  assert.deepEqual(await list({ filter: { contentTypes: ['data', 'x-note'] } }), [t2.id, t4.id]);
  assert.deepEqual(await list({ filter: { participantId: b.id } }), [t2.id, t4.id]);
  assert.deepEqual(await list({ filter: { afterTimestamp: t2.timestamp } }), ids([t3, t4, t5]));
  assert.deepEqual(await list({ filter: { beforeTimestamp: t3.timestamp } }), ids([t1, t2]));
  assert.deepEqual(await list({ filter: { afterTimestamp: t1.timestamp, beforeTimestamp: t5.timestamp, participantId: a.id } }), [t3.id]);
  assert.deepEqual(await list({ filter: { beforeTimestamp: Number.MAX_SAFE_INTEGER } }), ids([t1, t2, t3, t4, t5]), 'far-future bound');
  assert.deepEqual(await list({ filter: { afterTimestamp: Number.MAX_SAFE_INTEGER } }), []);
  assert.deepEqual(await list({ filter: { afterTurnId: t2.id } }), ids([t3, t4, t5]));
  assert.deepEqual(await list({ filter: { beforeTurnId: t3.id } }), ids([t1, t2]));
  assert.deepEqual(await list({ order: 'desc' }), ids([t5, t4, t3, t2, t1]));
  assert.deepEqual(await list({ order: 'desc', filter: { beforeTurnId: t4.id }, limit: 2 }), ids([t3, t2]));

  for (const order of ['asc', 'desc']) {
    const pages = [];
    let cursor;
    for (;;) {
      const page = await a.conn.listTurns({ conversationId: id, limit: 2, order, cursor });
      pages.push(ids(page.turns));
      if (!page.hasMore) { assert.equal(page.nextCursor, undefined); break; }
      assert.equal(page.nextCursor, page.turns.at(-1).id);
      cursor = page.nextCursor;
    }
    const expected = order === 'asc' ? [[t1, t2], [t3, t4], [t5]] : [[t5, t4], [t3, t2], [t1]];
    assert.deepEqual(pages, expected.map(ids), `${order} pages`);
  }

  await rejectsWithCode(a.conn.listTurns({ conversationId: id, filter: { threadId: 'thread-nope' } }), E.THREAD_NOT_FOUND, 'unknown thread');
  await rejectsWithCode(a.conn.listTurns({ conversationId: id, filter: { beforeTurnId: 'turn-nope' } }), E.TURN_NOT_FOUND, 'unknown turn');
  await rejectsWithCode(a.conn.listTurns({ conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ' }), E.CONVERSATION_NOT_FOUND, 'unknown conversation');
  await rejectsWithCode(a.conn.listTurns({ conversationId: id, order: 'sideways' }), E.INVALID_PARAMS, 'bad order');
  await rejectsWithCode(a.conn.listTurns({ conversationId: id, cursor: 'garbage' }), E.INVALID_PARAMS, 'bad cursor');
  const outsider = await agent('outsider');
  await rejectsWithCode(outsider.conn.listTurns({ conversationId: id }), E.NOT_A_PARTICIPANT, 'outsider');
});

test('mail/replay: from a turn or a time, thread and type filters, paging and missedCount', async () => {
  const a = await agent('replayer');
  const id = await conversation(a);
  const t = [];
  for (let i = 0; i < 5; i++) {
    const ct = i % 2 ? 'data' : 'text';
    t.push((await a.conn.recordTurn({ conversationId: id, contentType: ct, content: ct === 'text' ? { text: `turn ${i}` } : { i } })).turn);
    await sleep(3);
  }
  const r1 = await a.conn.replayConversation({ conversationId: id, fromTurnId: t[1].id, limit: 2 });
  assert.deepEqual(ids(r1.turns), ids([t[2], t[3]]));
  assert.equal(r1.hasMore, true);
  assert.equal(r1.nextCursor, t[3].id);
  assert.equal(r1.missedCount, 3, 'every turn after the point, not only this page');
  const r2 = await a.conn.replayConversation({ conversationId: id, fromTurnId: r1.nextCursor, limit: 2 });
  assert.deepEqual(ids(r2.turns), [t[4].id]);
  assert.equal(r2.hasMore, false);
  assert.equal(r2.missedCount, 1);
  const all = await a.conn.replayConversation({ conversationId: id });
  assert.deepEqual(ids(all.turns), ids(t));
  assert.equal(all.missedCount, 5);
  const fromTime = await a.conn.replayConversation({ conversationId: id, fromTimestamp: t[3].timestamp });
  assert.deepEqual(ids(fromTime.turns), ids([t[3], t[4]]), 'fromTimestamp is inclusive');
  const data = await a.conn.replayConversation({ conversationId: id, contentTypes: ['data'] });
  assert.deepEqual(ids(data.turns), ids([t[1], t[3]]));
  assert.equal(data.missedCount, 2);
  const { thread } = await a.conn.createThread({ conversationId: id, rootTurnId: t[0].id });
  const inThread = await turn(a, id, 'threaded', { threadId: thread.id });
  assert.deepEqual(ids((await a.conn.replayConversation({ conversationId: id, threadId: thread.id })).turns), [inThread.id]);
  await rejectsWithCode(a.conn.replayConversation({ conversationId: id, fromTurnId: 'turn-nope' }), E.TURN_NOT_FOUND, 'unknown turn');
  await rejectsWithCode(a.conn.replayConversation({ conversationId: id, threadId: 'thread-nope' }), E.THREAD_NOT_FOUND, 'unknown thread');
  await rejectsWithCode(a.conn.replayConversation({ conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ' }), E.CONVERSATION_NOT_FOUND, 'unknown conversation');
});

// ---------------------------------------------------------------------------
// threads
// ---------------------------------------------------------------------------

test('mail/thread/create and mail/thread/list: nesting, limit (10009), counts, paging, errors', async () => {
  const a = await agent('threader');
  const b = await agent('helper');
  const id = await conversation(a, [[b, 'worker']]);
  const root = await turn(a, id, 'root');
  const w = await watch({ eventTypes: ['mail.thread.created'], mail: { conversationId: id } }, a);

  const { thread: T1 } = await a.conn.createThread({ conversationId: id, rootTurnId: root.id, subject: 'Deep dive on React performance' });
  assert.match(T1.id, THREAD_ID);
  assert.deepEqual(
    [T1.conversationId, T1.rootTurnId, T1.subject, T1.createdBy, T1.turnCount, T1.participantCount, T1.parentThreadId],
    [id, root.id, 'Deep dive on React performance', a.id, 0, 0, undefined],
  );
  const [ev] = await w.wait(() => true);
  assert.equal(ev.data.thread.id, T1.id);

  const { thread: T2 } = await b.conn.createThread({ conversationId: id, rootTurnId: root.id, parentThreadId: T1.id });
  assert.equal(T2.parentThreadId, T1.id);
  const { thread: T3 } = await a.conn.createThread({ conversationId: id, rootTurnId: root.id, parentThreadId: T2.id });
  const err = await rejectsWithCode(a.conn.createThread({ conversationId: id, rootTurnId: root.id, parentThreadId: T3.id }), E.THREAD_NESTING_LIMIT, 'fourth level with max_thread_depth = 3');
  assert.equal(err.data.details.maxDepth, 3);
  await rejectsWithCode(a.conn.createThread({ conversationId: id, rootTurnId: 'turn-nope' }), E.TURN_NOT_FOUND, 'unknown root');
  await rejectsWithCode(a.conn.createThread({ conversationId: id, rootTurnId: root.id, parentThreadId: 'thread-nope' }), E.THREAD_NOT_FOUND, 'unknown parent');
  await rejectsWithCode(a.conn.createThread({ conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ', rootTurnId: root.id }), E.CONVERSATION_NOT_FOUND, 'unknown conversation');

  await turn(a, id, 'in T1 (1)', { threadId: T1.id });
  await turn(a, id, 'in T1 (2)', { threadId: T1.id });
  await turn(b, id, 'in T1 (3)', { threadId: T1.id });

  const all = await b.conn.listThreads({ conversationId: id });
  assert.deepEqual(all.threads.map((t) => t.id), [T1.id, T2.id, T3.id]);
  assert.equal(all.hasMore, false);
  const t1 = all.threads[0];
  assert.equal(t1.turnCount, 3);
  assert.equal(t1.participantCount, 2);
  assert.ok(t1.updatedAt >= t1.createdAt);
  assert.deepEqual((await a.conn.listThreads({ conversationId: id, parentThreadId: T1.id })).threads.map((t) => t.id), [T2.id]);
  const p1 = await a.conn.listThreads({ conversationId: id, limit: 2 });
  assert.deepEqual([p1.threads.map((t) => t.id), p1.hasMore, p1.nextCursor], [[T1.id, T2.id], true, T2.id]);
  const p2 = await a.conn.listThreads({ conversationId: id, limit: 2, cursor: p1.nextCursor });
  assert.deepEqual([p2.threads.map((t) => t.id), p2.hasMore], [[T3.id], false]);
  const got = await a.conn.getConversation(id, { threads: true, stats: true });
  assert.equal(got.threads.find((t) => t.id === T1.id).turnCount, 3);
  assert.equal(got.stats.threadCount, 3);

  await rejectsWithCode(a.conn.listThreads({ conversationId: id, parentThreadId: 'thread-nope' }), E.THREAD_NOT_FOUND, 'unknown parent filter');
  const outsider = await agent('outsider');
  await rejectsWithCode(outsider.conn.listThreads({ conversationId: id }), E.NOT_A_PARTICIPANT, 'outsider lists');
  await rejectsWithCode(outsider.conn.createThread({ conversationId: id, rootTurnId: root.id }), E.NOT_A_PARTICIPANT, 'outsider creates');
});

test('max_thread_depth is a per-tenant setting', async () => {
  const s = await connectAgent(gw, { name: uid('shallow'), auth: SHALLOW });
  const { conversation, initialTurn } = await s.conn.createConversation({ initialTurn: text('root') });
  const { thread } = await s.conn.createThread({ conversationId: conversation.id, rootTurnId: initialTurn.id });
  await rejectsWithCode(s.conn.createThread({ conversationId: conversation.id, rootTurnId: initialTurn.id, parentThreadId: thread.id }), E.THREAD_NESTING_LIMIT, 'depth 2 with max_thread_depth = 1');
});

// ---------------------------------------------------------------------------
// mail/summary
// ---------------------------------------------------------------------------

test('mail/summary: extractive summary, key points, decisions, open questions, caching, scope', async () => {
  const a = await agent('lead');
  const b = await agent('eng');
  const { conversation: conv } = await a.conn.createConversation({ subject: 'Cache latency', initialParticipants: [{ id: b.id, role: 'worker' }] });
  const id = conv.id;
  await turn(a, id, 'The cache layer is slow. Cache misses double the p99 latency.');
  await turn(b, id, 'Should we shard the cache?');
  await turn(a, id, 'We decided to add a second cache tier.');
  const q = await turn(b, id, 'What about the eviction policy?');
  await turn(a, id, 'LRU eviction works for this workload.', { inReplyTo: q.id });
  const w = await watch({ eventTypes: ['mail.summary.generated'], mail: { conversationId: id } }, a);

  const s1 = await b.conn.getConversationSummary({ conversationId: id });
  assert.equal(s1.generated, true);
  assert.match(s1.summary, /^"Cache latency": 5 turns from 2 participants/);
  assert.ok(s1.summary.includes(a.id) && s1.summary.includes(b.id), s1.summary);
  assert.ok(s1.keyPoints.length > 0 && s1.keyPoints.length <= 5, JSON.stringify(s1.keyPoints));
  assert.ok(s1.keyPoints.some((k) => /cache/i.test(k)), JSON.stringify(s1.keyPoints));
  assert.deepEqual(s1.keyDecisions, [`${a.id}: We decided to add a second cache tier.`]);
  assert.deepEqual(s1.openQuestions, [`${b.id}: Should we shard the cache?`], 'the answered question is not open');
  assert.deepEqual(s1.participants, [{ id: a.id, turnCount: 3 }, { id: b.id, turnCount: 2 }]);
  const [ev] = await w.wait(() => true);
  assert.equal(ev.data.summary, s1.summary);

  const s2 = await b.conn.getConversationSummary({ conversationId: id });
  assert.equal(s2.generated, false, 'unchanged conversation: the cached summary');
  assert.equal(typeof s2.cachedAt, 'number');
  assert.equal(s2.summary, s1.summary);
  const s3 = await b.conn.getConversationSummary({ conversationId: id, regenerate: true });
  assert.equal(s3.generated, true);
  await turn(b, id, 'Agreed, we will roll it out next week.');
  const s4 = await b.conn.getConversationSummary({ conversationId: id });
  assert.equal(s4.generated, true, 'a new turn invalidates the cache');
  assert.match(s4.summary, /6 turns/);
  assert.equal(s4.keyDecisions.length, 2);

  const only = await b.conn.getConversationSummary({ conversationId: id, include: { keyPoints: true } });
  assert.ok(Array.isArray(only.keyPoints));
  assert.equal(only.keyDecisions, undefined);
  assert.equal(only.openQuestions, undefined);

  const { thread } = await a.conn.createThread({ conversationId: id, rootTurnId: q.id });
  await turn(a, id, 'Eviction needs a benchmark first.', { threadId: thread.id });
  const scoped = await a.conn.getConversationSummary({ conversationId: id, scope: { threadId: thread.id } });
  assert.match(scoped.summary, /1 turn from 1 participant/);
  assert.ok(scoped.keyPoints[0].includes('benchmark'));

  // a reader's summary draws only on the turns that reader may see
  const secret = await turn(a, id, 'Zebra plan: the zebra migration keeps zebra stripes on every zebra node.', { visibility: { type: 'private' } });
  const mine = await a.conn.getConversationSummary({ conversationId: id, regenerate: true });
  const theirs = await b.conn.getConversationSummary({ conversationId: id, regenerate: true });
  assert.ok(mine.keyPoints.some((k) => k.includes('zebra')), JSON.stringify(mine.keyPoints));
  const justIt = await a.conn.getConversationSummary({ conversationId: id, scope: { fromTurnId: secret.id } });
  assert.match(justIt.summary, /1 turn from 1 participant.*zebra/);
  await rejectsWithCode(b.conn.getConversationSummary({ conversationId: id, scope: { fromTurnId: secret.id } }), E.TURN_NOT_FOUND, 'scope on a turn the reader cannot see');
  assert.ok(!JSON.stringify(theirs).includes('zebra'), 'the private turn must not leak into the worker\'s summary');
  const evs = await w.wait(() => true, 6);
  assert.ok(evs.every((e) => !e.data.summary.includes('zebra')), 'nor into the broadcast event');

  const empty = await a.conn.createConversation({ subject: 'Quiet' });
  assert.equal((await a.conn.getConversationSummary({ conversationId: empty.conversation.id })).summary, '"Quiet" has no turns to summarize yet.');
  await rejectsWithCode(a.conn.getConversationSummary({ conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ' }), E.CONVERSATION_NOT_FOUND, 'unknown');
  await rejectsWithCode(a.conn.getConversationSummary({ conversationId: id, scope: { threadId: 'thread-nope' } }), E.THREAD_NOT_FOUND, 'unknown thread');
  await rejectsWithCode(a.conn.getConversationSummary({ conversationId: id, scope: { fromTurnId: 'turn-nope' } }), E.TURN_NOT_FOUND, 'unknown turn');
  const outsider = await agent('outsider');
  await rejectsWithCode(outsider.conn.getConversationSummary({ conversationId: id }), E.NOT_A_PARTICIPANT, 'outsider');
});

// ---------------------------------------------------------------------------
// intercepted turns
// ---------------------------------------------------------------------------

test('map/send with meta.mail: delivered normally and recorded as an intercepted turn', async () => {
  const a = await agent('orchestrator');
  const b = await agent('worker');
  const outsider = await agent('outsider');
  const id = await conversation(a, [[b, 'worker']]);
  const root = await turn(a, id, 'kick-off');
  const { thread } = await a.conn.createThread({ conversationId: id, rootTurnId: root.id });
  const w = await watch({ eventTypes: ['mail.turn.added'], mail: { conversationId: id } }, a);

  const marker = uid('task');
  const payload = { task: 'research', query: 'MAP protocol', marker };
  const sent = await a.conn.sendWithMail({ agent: b.id }, payload, id, { threadId: thread.id });
  assert.deepEqual(sent.delivered, [b.id]);
  const msg = await b.tap.waitUntil(() => b.tap.messages((m) => m.payload?.marker === marker)[0], WAIT_MS, 'the message at the worker');
  assert.equal(msg.meta.mail.conversationId, id, 'the recipient gets meta.mail unchanged');

  const [ev] = await w.wait(ofType('mail.turn.added', (d) => d.turn.source.type === 'intercepted'));
  const t = ev.data.turn;
  assert.match(t.id, TURN_ID);
  assert.deepEqual(t.source, { type: 'intercepted', messageId: sent.messageId });
  assert.equal(t.participant, a.id);
  assert.equal(t.contentType, 'data');
  assert.deepEqual(t.content, payload);
  assert.equal(t.threadId, thread.id);
  const listed = (await b.conn.listTurns({ conversationId: id, filter: { threadId: thread.id } })).turns;
  assert.deepEqual(listed, [t]);

  // a reply carrying inReplyTo and a visibility through raw map/send params
  const reply = await b.conn.send({ agent: a.id }, { answer: 42 }, { mail: { conversationId: id, inReplyTo: t.id, visibility: { type: 'participants', ids: [a.id] } } });
  const r = await eventually(async () => (await a.conn.listTurns({ conversationId: id })).turns.find((x) => x.source.messageId === reply.messageId), 'the intercepted reply');
  assert.equal(r.participant, b.id);
  assert.equal(r.inReplyTo, t.id);
  assert.deepEqual(r.visibility, { type: 'participants', ids: [a.id] });

  // a client session records under its participant id
  const c = await connectClient(gw, { name: uid('client') });
  await a.conn.inviteToConversation({ conversationId: id, participant: { id: c.participantId, role: 'worker' } });
  const fromClient = await c.conn.sendWithMail({ agent: b.id }, { from: 'client' }, id);
  const ct = await eventually(async () => (await a.conn.listTurns({ conversationId: id })).turns.find((x) => x.source.messageId === fromClient.messageId), 'the client\'s turn');
  assert.equal(ct.participant, c.participantId);

  // nothing can be recorded, yet every message is delivered
  const before = (await a.conn.listTurns({ conversationId: id, limit: 500 })).turns.length;
  const m1 = uid('outsider');
  const s1 = await outsider.conn.sendWithMail({ agent: b.id }, { marker: m1 }, id);
  assert.deepEqual(s1.delivered, [b.id], 'a non-participant\'s message is still delivered');
  const m2 = uid('unknown');
  const s2 = await a.conn.sendWithMail({ agent: b.id }, { marker: m2 }, 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ');
  assert.deepEqual(s2.delivered, [b.id]);
  const m3 = uid('badthread');
  await a.conn.sendWithMail({ agent: b.id }, { marker: m3 }, id, { threadId: 'thread-nope' });
  await a.conn.closeConversation(id);
  const m4 = uid('closed');
  const s4 = await a.conn.sendWithMail({ agent: b.id }, { marker: m4 }, id);
  assert.deepEqual(s4.delivered, [b.id], 'a message into a closed conversation is still delivered');
  for (const m of [m1, m2, m3, m4]) await b.tap.waitUntil(() => b.tap.messages((x) => x.payload?.marker === m).length === 1, WAIT_MS, m);
  await quietPeriod();
  assert.equal((await a.conn.listTurns({ conversationId: id, limit: 500 })).turns.length, before, 'none of them became a turn');
});

// ---------------------------------------------------------------------------
// the `mail` subscription filter
// ---------------------------------------------------------------------------

test('map/subscribe filter.mail: conversationId, threadId, participantId, contentType (AND)', async () => {
  const a = await agent('alpha');
  const b = await agent('beta');
  const c1 = await conversation(a, [[b, 'worker']]);
  const c2 = await conversation(a, [[b, 'worker']]);
  const root = await turn(a, c1, 'root');
  const { thread: T } = await a.conn.createThread({ conversationId: c1, rootTurnId: root.id });

  const byConv = await watch({ mail: { conversationId: c1 } }, a);
  const byThread = await watch({ eventTypes: ['mail.turn.added'], mail: { threadId: T.id } }, a);
  const byParticipant = await watch({ eventTypes: ['mail.turn.added'], mail: { participantId: b.id } }, a);
  const byType = await watch({ eventTypes: ['mail.turn.added'], mail: { contentType: 'x-note' } }, a);
  const combined = await watch({ mail: { conversationId: c2, participantId: b.id } }, a);

  const x1 = await turn(a, c1, 'plain in c1');
  const x2 = (await b.conn.recordTurn({ conversationId: c1, contentType: 'x-note', content: { n: 2 }, threadId: T.id })).turn;
  const x3 = await turn(b, c2, 'b in c2');
  const x4 = (await a.conn.recordTurn({ conversationId: c2, contentType: 'x-note', content: { n: 4 } })).turn;
  await b.conn.leaveConversation(c2, 'bye');
  await a.conn.closeConversation(c1);

  await byConv.wait(ofType('mail.closed'));
  await combined.wait(ofType('mail.participant.left'));
  await byType.wait(() => true, 2);
  await quietPeriod();
  const turnIds = (h) => h.events(ofType('mail.turn.added')).map((e) => e.data.turn.id);

  assert.deepEqual(turnIds(byConv), [x1.id, x2.id]);
  assert.ok(byConv.events().every((e) => e.type.startsWith('mail.') && e.data.conversationId === c1), 'only c1 events');
  assert.deepEqual(byConv.events().map((e) => e.type), ['mail.turn.added', 'mail.turn.added', 'mail.closed']);
  assert.deepEqual(turnIds(byThread), [x2.id]);
  assert.deepEqual(turnIds(byParticipant), [x2.id, x3.id]);
  assert.deepEqual(turnIds(byType), [x2.id, x4.id]);
  assert.deepEqual(combined.events().map((e) => [e.type, e.data.turn?.id ?? e.data.participantId]), [
    ['mail.turn.added', x3.id],
    ['mail.participant.left', b.id],
  ]);
});

// ---------------------------------------------------------------------------
// observer clients
// ---------------------------------------------------------------------------

const OBSERVE = { mail: { canObserve: true } };
/** A dashboard: a client that declared capabilities.mail.canObserve at map/connect. */
const observer = (opts = {}) => connectClient(gw, { name: uid('dashboard'), capabilities: OBSERVE, ...opts });
const mailEventsIn = async (h, conversationId) => (await h.conn.replay({ filter: { mail: { conversationId } }, limit: 1000 })).events.map((e) => e.event ?? e);

test('an observer client hears and reads the public turns of conversations it is not in, and writes nothing', async () => {
  const o = await observer();
  const bystander = await connectClient(gw, { name: uid('bystander') });
  const ow = await watch({ eventTypes: ['mail.*'] }, o);
  const a = await agent('lead');
  const b = await agent('worker');
  const res = await a.conn.createConversation({
    subject: uid('subject'), initialParticipants: [{ id: b.id, role: 'worker' }], initialTurn: text('kick-off'),
  });
  const id = res.conversation.id;
  const first = res.initialTurn;
  const pub = await turn(b, id, 'for everyone');
  const hidden = [
    await turn(a, id, 'note to self', { visibility: { type: 'private' } }),
    await turn(a, id, 'for the worker', { visibility: { type: 'participants', ids: [b.id] } }),
    await turn(a, id, 'for the observer role', { visibility: { type: 'role', roles: ['observer'] } }),
    await turn(a, id, 'internal reasoning', { metadata: { internal: true } }),
  ];
  const last = await turn(a, id, 'the end', { visibility: { type: 'all' } });
  const visible = ids([first, pub, last]);

  // Events reach a session in order: once the last turn's is in, the hidden ones would have been too.
  await ow.wait(ofType('mail.turn.added', (d) => d.turn.id === last.id));
  const heard = ow.events((ev) => ev.data?.conversationId === id);
  assert.equal(heard.filter(ofType('mail.created')).length, 1, 'mail.created');
  assert.deepEqual(heard.filter(ofType('mail.participant.joined')).map((e) => e.data.participant.id).sort(), [a.id, b.id].sort());
  assert.deepEqual(heard.filter(ofType('mail.turn.added')).map((e) => e.data.turn.id), visible, 'only public turns are announced to observers');
  assert.deepEqual((await mailEventsIn(o, id)).filter(ofType('mail.turn.added')).map((e) => e.data.turn.id), visible, 'map/replay too');

  // every read of turns shows it the public ones only
  assert.deepEqual(ids((await o.conn.listTurns({ conversationId: id })).turns), visible);
  assert.deepEqual(ids((await o.conn.replayConversation({ conversationId: id })).turns), visible);
  const got = await o.conn.getConversation(id, { participants: true, threads: true, recentTurns: 10, stats: true });
  assert.deepEqual(ids(got.recentTurns), [...visible].reverse());
  assert.equal(got.stats.totalTurns, 3);
  assert.deepEqual(got.participants.map((p) => p.id).sort(), [a.id, b.id].sort());
  for (const t of hidden) {
    await rejectsWithCode(o.conn.listTurns({ conversationId: id, filter: { afterTurnId: t.id } }), E.TURN_NOT_FOUND, 'a hidden turn is reported as missing');
  }
  const { thread } = await a.conn.createThread({ conversationId: id, rootTurnId: pub.id });
  assert.deepEqual((await o.conn.listThreads({ conversationId: id })).threads.map((t) => t.id), [thread.id]);
  await ow.wait(ofType('mail.thread.created', (d) => d.threadId === thread.id));
  // mail/list: every conversation of the tenant, or those of one participant
  const listed = async (filter) => (await o.conn.listConversations({ filter })).conversations.map((c) => c.id);
  assert.deepEqual(await listed({ participantId: b.id }), [id]);
  assert.deepEqual(await listed({ createdAfter: res.conversation.createdAt - 1 }), [id]);

  // writing needs taking part
  const sees = (await o.conn.listTurns({ conversationId: id })).turns;
  await rejectsWithCode(o.conn.recordTurn({ conversationId: id, ...text('hello') }), E.NOT_A_PARTICIPANT, 'turn');
  await rejectsWithCode(o.conn.createThread({ conversationId: id, rootTurnId: pub.id }), E.NOT_A_PARTICIPANT, 'thread');
  await rejectsWithCode(o.conn.inviteToConversation({ conversationId: id, participant: { id: uid('x') } }), E.NOT_A_PARTICIPANT, 'invite');
  await rejectsWithCode(o.conn.leaveConversation(id), E.NOT_A_PARTICIPANT, 'leave');
  await rejectsWithCode(o.conn.closeConversation(id), E.NOT_A_PARTICIPANT, 'close');
  await rejectsWithCode(o.conn.getConversationSummary({ conversationId: id }), E.NOT_A_PARTICIPANT, 'mail/summary is for participants');
  assert.deepEqual((await o.conn.listTurns({ conversationId: id })).turns, sees, 'nothing changed');

  // without the capability a non-participant stays out, and hears nothing
  await rejectsWithCode(bystander.conn.listTurns({ conversationId: id }), E.NOT_A_PARTICIPANT, 'turns');
  await rejectsWithCode(bystander.conn.replayConversation({ conversationId: id }), E.NOT_A_PARTICIPANT, 'replay');
  await rejectsWithCode(bystander.conn.getConversation(id), E.NOT_A_PARTICIPANT, 'get');
  await rejectsWithCode(bystander.conn.listThreads({ conversationId: id }), E.NOT_A_PARTICIPANT, 'threads');
  await rejectsWithCode(bystander.conn.callExtension('mail/presence', { conversationId: id }), E.NOT_A_PARTICIPANT, 'presence');
  assert.deepEqual((await bystander.conn.listConversations({ filter: { participantId: b.id } })).conversations, []);
  assert.deepEqual(await mailEventsIn(bystander, id), [], 'no mail events for a bystander');
  const declaredFalse = await connectClient(gw, { name: uid('nosy'), capabilities: { mail: { canObserve: false } } });
  await rejectsWithCode(declaredFalse.conn.listTurns({ conversationId: id }), E.NOT_A_PARTICIPANT, 'canObserve: false');

  // a participant that also observes reads what either gives it
  const c = await observer();
  await a.conn.inviteToConversation({ conversationId: id, participant: { id: c.participantId, role: 'worker', permissions: { historyAccess: 'none' } } });
  assert.deepEqual(ids((await c.conn.listTurns({ conversationId: id })).turns), visible);
});

test('allow_observers = false: capabilities.mail.canObserve gives nothing in that tenant', async () => {
  const o = await observer({ auth: NO_OBSERVERS });
  assert.equal(o.connectResult.capabilities.mail.canObserve, false, 'map/connect says observers are not admitted');
  const a = await connectAgent(gw, { name: uid('lead'), auth: NO_OBSERVERS });
  const ow = await watch({ eventTypes: ['mail.*'] }, o);
  const { conversation: conv } = await a.conn.createConversation({ subject: 'quiet', initialTurn: text('for participants only') });
  await rejectsWithCode(o.conn.listTurns({ conversationId: conv.id }), E.NOT_A_PARTICIPANT, 'turns');
  await rejectsWithCode(o.conn.getConversation(conv.id), E.NOT_A_PARTICIPANT, 'get');
  await rejectsWithCode(o.conn.callExtension('mail/presence', { conversationId: conv.id }), E.NOT_A_PARTICIPANT, 'presence');
  assert.deepEqual((await o.conn.listConversations()).conversations, [], 'only its own conversations');
  assert.deepEqual(await mailEventsIn(o, conv.id), [], 'no mail events');
  assert.deepEqual(ow.events(), []);
  // the same capability works in a tenant that admits observers
  const elsewhere = await observer();
  assert.equal(elsewhere.connectResult.capabilities.mail.canObserve, true);
});

// ---------------------------------------------------------------------------
// mail/reopen, mail/presence
// ---------------------------------------------------------------------------

test('mail/reopen: initiator or moderator makes a closed conversation active again, with mail.reopened', async () => {
  const a = await agent('lead');
  const b = await agent('worker');
  const m = await agent('moderator');
  const outsider = await agent('outsider');
  const o = await observer();
  const id = await conversation(a, [[b, 'worker'], [m, 'moderator']]);
  const filter = { eventTypes: ['mail.closed', 'mail.reopened'], mail: { conversationId: id } };
  const [wa, wb, wo] = await Promise.all([watch(filter, a), watch(filter, b), watch(filter, o)]);
  const reopen = (h, params = { conversationId: id }) => h.conn.callExtension('mail/reopen', params);

  await a.conn.closeConversation(id, 'done for now');
  await rejectsWithCode(reopen(b), E.PERMISSION_DENIED, 'a worker may not reopen');
  await rejectsWithCode(reopen(outsider), E.NOT_A_PARTICIPANT, 'outsider');
  await rejectsWithCode(reopen(o), E.NOT_A_PARTICIPANT, 'an observer writes nothing');
  await rejectsWithCode(reopen(a, { conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ' }), E.CONVERSATION_NOT_FOUND, 'unknown');
  await rejectsWithCode(reopen(a, {}), E.INVALID_PARAMS, 'no conversationId');

  const { conversation: open } = await reopen(m);
  assert.equal(open.id, id);
  assert.equal(open.status, 'active');
  for (const k of ['closedAt', 'closedBy', 'closeReason']) assert.equal(open[k], undefined, `${k} is cleared`);
  for (const w of [wa, wb, wo]) {
    const evs = await w.wait(() => true, 2);
    assert.deepEqual(evs.map((e) => e.type), ['mail.closed', 'mail.reopened']);
    const { data } = evs[1];
    assert.equal(data.conversationId, id);
    assert.deepEqual(data.conversation, open);
    assert.equal(data.reopenedBy, m.id);
    assert.equal(data.previousStatus, 'completed');
  }
  assert.equal((await b.conn.getConversation(id)).conversation.status, 'active');
  await turn(b, id, 'back to work');

  // reopening an active conversation answers it unchanged and announces nothing
  const again = await reopen(a);
  assert.equal(again.conversation.status, 'active');
  assert.equal(again.conversation.closedAt, undefined);
  await a.conn.callExtension('mail/close', { conversationId: id, status: 'archived' });
  await wa.wait(ofType('mail.closed', (d) => d.status === 'archived'));
  assert.deepEqual(wa.events().map((e) => e.type), ['mail.closed', 'mail.reopened', 'mail.closed']);
  const { conversation: unarchived } = await reopen(a);
  assert.equal(unarchived.status, 'active', 'an archived conversation reopens too');
  const [, , , ev] = await wa.wait(() => true, 4);
  assert.equal(ev.data.previousStatus, 'archived');
});

test('mail/presence: which participants are connected now, and since when', async () => {
  const started = Date.now();
  const a = await agent('lead');
  const b = await agent('worker');
  const c = await connectClient(gw, { name: uid('human') });
  const o = await observer();
  const outsider = await agent('outsider');
  const ghost = uid('ghost');
  const id = await conversation(a, [[b, 'worker'], [c, 'worker']]);
  await a.conn.inviteToConversation({ conversationId: id, participant: { id: ghost } });
  const presence = async (h) => {
    const p = await h.conn.callExtension('mail/presence', { conversationId: id });
    assert.equal(p.conversationId, id);
    return Object.fromEntries(p.participants.map((x) => [x.participantId, x]));
  };

  const { participants: members } = await a.conn.callExtension('mail/get', { conversationId: id, include: { participants: true } });
  /** What presence says of a participant: its role and joinedAt, and whether (and since when) it is connected. */
  const entry = (pid, since) => {
    const { role, joinedAt } = members.find((m) => m.id === pid);
    return since === undefined
      ? { participantId: pid, role, joinedAt, presence: 'offline', online: false }
      : { participantId: pid, role, joinedAt, presence: 'online', online: true, since };
  };

  const now = await presence(a);
  assert.deepEqual(Object.keys(now).sort(), [a.id, b.id, c.participantId, ghost].sort());
  assert.deepEqual(now[b.id], entry(b.id, b.agent.lifecycle.createdAt), 'an agent: since it registered');
  assert.equal(now[b.id].role, 'worker');
  assert.deepEqual(now[a.id], entry(a.id, a.agent.lifecycle.createdAt));
  const human = now[c.participantId];
  assert.deepEqual(human, entry(c.participantId, human.since));
  assert.ok(human.since >= started && human.since <= Date.now(), `a client: since its session connected (${human.since})`);
  assert.deepEqual(now[ghost], entry(ghost), 'never connected');
  assert.deepEqual(await presence(o), now, 'observers may look');
  assert.deepEqual(await presence(b), now);
  await rejectsWithCode(outsider.conn.callExtension('mail/presence', { conversationId: id }), E.NOT_A_PARTICIPANT, 'outsider');
  await rejectsWithCode(a.conn.callExtension('mail/presence', { conversationId: 'conv-01HZZZZZZZZZZZZZZZZZZZZZZZ' }), E.CONVERSATION_NOT_FOUND, 'unknown');

  // a dropped session is offline at once, though it could still resume
  const sub = await a.conn.subscribe({ eventTypes: ['participant_disconnected'] });
  c.ws.terminate();
  await a.tap.waitForEvents(sub.id, (ev) => ev.data?.participantId === c.participantId);
  const later = await presence(a);
  assert.deepEqual(later[c.participantId], entry(c.participantId));
  assert.deepEqual(later[b.id], now[b.id]);

  // who left is no longer listed
  await b.conn.leaveConversation(id);
  assert.deepEqual(Object.keys(await presence(a)).sort(), [a.id, c.participantId, ghost].sort());
});

// ---------------------------------------------------------------------------
// mail/turn.received (mail v1.1)
// ---------------------------------------------------------------------------

/** Declared at map/connect: the session takes part in mail, so it hears of new turns. */
const MAIL = { mail: { canJoin: true } };
const RECEIVED = 'mail/turn.received';

/** The mail/turn.received params a handle's socket got so far. */
const received = (h) => h.tap.frames.filter((f) => f?.method === RECEIVED && !('id' in f)).map((f) => f.params);

/** Wait until `h` got mail/turn.received for `turnId`; its params. */
async function receivedFor(h, turnId) {
  const got = await h.tap.waitUntil(() => received(h).find((p) => p.turn_id === turnId), WAIT_MS, `${RECEIVED} for ${turnId} on ${h.label}`);
  return got;
}

/** What mail v1.1 sends for a turn, field for field. */
const receivedOf = (t) => ({
  conversation_id: t.conversationId,
  turn_id: t.id,
  participant_id: t.participant,
  content_type: t.contentType,
  content: t.content,
  thread_id: t.threadId ?? null,
  created_at: t.timestamp,
});

test('mail/turn.received: each participant session that declared capabilities.mail hears of a new turn, but the author and the undeclared', async () => {
  const a = await agent('author', { capabilities: MAIL });
  const b = await agent('hearer', { capabilities: MAIL });
  const c = await connectClient(gw, { name: uid('human'), capabilities: MAIL });
  const d = await agent('undeclared');
  const heard = [];
  b.conn.onNotification(RECEIVED, (p) => { heard.push(p); });
  const id = await conversation(a, [[b, 'worker'], [c, 'worker'], [d, 'worker']]);

  const t1 = await turn(a, id, 'hello, all');
  for (const h of [b, c]) {
    const p = await receivedFor(h, t1.id);
    assert.deepEqual(p, receivedOf(t1), `${h.label} gets the turn in mail v1.1's field names`);
    assert.deepEqual(Object.keys(p).sort(), ['content', 'content_type', 'conversation_id', 'created_at', 'participant_id', 'thread_id', 'turn_id']);
  }
  assert.deepEqual(heard.map((p) => p.turn_id), [t1.id], "the SDK's onNotification handler fires for it");
  // A notification to d would be queued before a's mail/turn was answered, so before d's next answer.
  await d.conn.callExtension('mail/get', { conversationId: id });
  assert.deepEqual(received(d), [], 'a session that did not declare capabilities.mail gets none');

  // b's turn in a thread: a hears of it (with the thread), b does not
  const { thread } = await a.conn.callExtension('mail/thread/create', { conversationId: id, rootTurnId: t1.id });
  const t2 = await turn(b, id, 'in the thread', { threadId: thread.id });
  assert.deepEqual(await receivedFor(a, t2.id), receivedOf(t2));
  assert.equal((await receivedFor(c, t2.id)).thread_id, thread.id);
  assert.deepEqual(received(a).map((p) => p.turn_id), [t2.id], "the author's own session is not told of its own turn");
  await b.conn.callExtension('mail/get', { conversationId: id });
  assert.deepEqual(received(b).map((p) => p.turn_id), [t1.id], 'nor is b of its own');

  // a private turn reaches no one else; a map/send with meta.mail is a turn like any other
  await turn(a, id, 'note to self', { visibility: { type: 'private' } });
  const payload = { task: uid('task') };
  await a.conn.send({ agent: b.id }, payload, { mail: { conversationId: id } });
  const p = await b.tap.waitUntil(() => received(b).find((x) => x.content?.task === payload.task), WAIT_MS, 'the intercepted turn');
  assert.equal(p.content_type, 'data');
  assert.equal(p.participant_id, a.id);
  const t3 = (await a.conn.callExtension('mail/turns/list', { conversationId: id, order: 'desc', limit: 1 })).turns[0];
  assert.deepEqual(p, receivedOf(t3));
  await receivedFor(c, t3.id);
  assert.deepEqual(received(c).map((x) => x.turn_id), [t1.id, t2.id, t3.id], 'c: each turn it may see, once, in order; not the private one');
  assert.deepEqual(received(d), []);
});

test('mail/turn.received: a participant that disconnects gets the turns it missed once when it resumes', async () => {
  const a = await agent('author', { capabilities: MAIL });
  const name = uid('roamer');
  const r = await connectClient(gw, { name, capabilities: MAIL });
  const id = await conversation(a, [[r, 'worker']]);
  const before = await turn(a, id, 'before the break');
  await receivedFor(r, before.id);

  const resumeToken = await r.conn.disconnect();
  assert.equal(typeof resumeToken, 'string');
  const missed = [await turn(a, id, 'while away 1'), await turn(a, id, 'while away 2')];

  const back = await connectClient(gw, { name, capabilities: MAIL, resumeToken });
  assert.equal(back.sessionId, r.sessionId, 'the same session');
  for (const t of missed) assert.deepEqual(await receivedFor(back, t.id), receivedOf(t));
  const after = await turn(a, id, 'after the resume');
  await receivedFor(back, after.id);
  assert.deepEqual(received(back).map((p) => p.turn_id), [...missed, after].map((t) => t.id), 'each missed turn once, then the live ones');
  assert.deepEqual(received(r).map((p) => p.turn_id), [before.id], 'the first socket got only what came before the break');
});

// ---------------------------------------------------------------------------
// mail off, unknown methods
// ---------------------------------------------------------------------------

test('a tenant with mail disabled gets 10010; an undeclared mail method is -32601', async () => {
  const off = await connectClient(gw, { auth: OFF });
  assert.equal(off.connectResult.capabilities.mail.enabled, false, 'map/connect shows mail as off for this tenant');
  const on = await connectClient(gw);
  assert.equal(on.connectResult.capabilities.mail.enabled, true);
  const o = await connectAgent(gw, { name: uid('off'), auth: OFF });
  await rejectsWithCode(o.conn.createConversation({ subject: 'x' }), E.MAIL_NOT_ENABLED, 'create');
  await rejectsWithCode(o.conn.listConversations(), E.MAIL_NOT_ENABLED, 'list');
  await rejectsWithCode(o.conn.recordTurn({ conversationId: 'conv-x', ...text('x') }), E.MAIL_NOT_ENABLED, 'turn');
  const a = await agent('plain');
  await rejectsWithCode(a.conn.callExtension('mail/forward', {}), E.METHOD_NOT_FOUND, 'unknown mail method');
});
