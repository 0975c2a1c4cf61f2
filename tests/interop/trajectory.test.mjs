// The trajectory extension (plugins/trajectory): trajectory/checkpoint, list, get, content,
// the streamed trajectory/content.chunk notifications, the trajectory.checkpoint event with the
// `trajectory {agentId, sessionId}` subscription filter, capabilities and error codes 13000–13004.
// Everything goes through the real SDK (`callExtension`); chunks are read off the frame tap.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync, readFileSync } from 'node:fs';
import { canPerformMethod } from '@multi-agent-protocol/sdk';
import {
  startGateway, connectAgent, connectClient, rejectsWithCode, sourceAgent,
  uid, sleep, pollUntil, metric, DEFAULT_TENANTS, quietPeriod, WAIT_MS,
} from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
/** The version in a standard plugin's Cargo.toml. */
const crateVersion = (plugin) => readFileSync(join(HERE, '..', '..', 'plugins', plugin, 'Cargo.toml'), 'utf8').match(/^version = "([^"]+)"/m)[1];
const TRAJECTORY_WASM = process.env.TRAJECTORY_WASM ?? join(HERE, '..', '..', 'plugins', 'dist', 'trajectory.wasm');
const pluginToml = (extra = '') => `[plugins.trajectory]\npath = ${JSON.stringify(TRAJECTORY_WASM)}\n${extra}`;
/** Large artifacts are uploaded in one trajectory/checkpoint frame. */
const MAX_MESSAGE_BYTES = 16 << 20;
const CHUNK = 'trajectory/content.chunk';

const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');
const call = (h, method, params) => h.conn.callExtension(method, params);

/** A deterministic pseudo-random transcript of about `bytes` UTF-8 bytes, with multi-byte characters. */
function transcript(bytes, seed = 1) {
  const words = ['agent', 'tool_call', 'résumé', 'naïve', '✓ done', '🚀', 'Ωmega', '日本語', '"quoted"', 'back\\slash', 'tab\tbed'];
  let x = seed;
  const lines = [];
  let size = 0;
  for (let turn = 0; size < bytes; turn++) {
    const parts = [];
    for (let i = 0; i < 24; i++) {
      x = (x * 1103515245 + 12345) % 2147483648;
      parts.push(words[x % words.length] + (x % 997));
    }
    const line = JSON.stringify({ turn, text: parts.join(' ') }) + '\n';
    size += Buffer.byteLength(line);
    lines.push(line);
  }
  return lines.join('');
}

/** Chunk notification params of one stream, in arrival order. */
const chunksOf = (tap, streamId) => tap.frames.filter((f) => f?.method === CHUNK && f.params?.streamId === streamId).map((f) => f.params);

/** Wait for the final chunk of a stream, then check the chunk sequence and return the reassembled bytes. */
async function receiveStream(tap, content, ctx) {
  assert.equal(content.streaming, true, `${ctx}: streaming response`);
  assert.equal(typeof content.streamId, 'string', `${ctx}: streamId`);
  assert.equal(content.streamInfo.encoding, 'base64', `${ctx}: streamInfo.encoding`);
  await tap.waitUntil(() => chunksOf(tap, content.streamId).some((c) => c.final), WAIT_MS, `${ctx}: final chunk of ${content.streamId}`);
  const chunks = chunksOf(tap, content.streamId);
  assert.equal(chunks.length, content.streamInfo.totalChunks, `${ctx}: streamInfo.totalChunks`);
  chunks.forEach((c, i) => {
    assert.equal(c.index, i, `${ctx}: chunk indexes are 0..n-1 in order`);
    const last = i === chunks.length - 1;
    assert.equal(c.final, last, `${ctx}: only the last chunk is final`);
    if (last) assert.match(c.checksum, /^[0-9a-f]{64}$/, `${ctx}: final chunk carries the SHA-256 hex`);
    else assert.equal(c.checksum, undefined, `${ctx}: checksum only on the final chunk`);
  });
  const bytes = Buffer.concat(chunks.map((c) => Buffer.from(c.data, 'base64')));
  assert.equal(bytes.length, content.streamInfo.totalBytes, `${ctx}: streamInfo.totalBytes`);
  assert.equal(sha256(bytes), chunks.at(-1).checksum, `${ctx}: the reassembled bytes match the checksum`);
  return { bytes, chunks };
}

/** Poll until pred() holds (for state outside the frame tap). */
const until = (pred, what, timeoutMs = WAIT_MS) => pollUntil(pred, (v) => v, { timeoutMs, intervalMs: 10, what });

let gw;
before(async () => {
  assert.ok(existsSync(TRAJECTORY_WASM), `${TRAJECTORY_WASM} is missing: run scripts/build-plugins.sh`);
  gw = await startGateway({
    maxMessageBytes: MAX_MESSAGE_BYTES,
    // globex has the extension switched off by its tenant configuration.
    tenants: DEFAULT_TENANTS.map((t) => (t.id === 'globex' ? { ...t, toml: 'plugin_config = { trajectory = { enabled = false } }' } : t)),
    extraToml: pluginToml(),
  });
});
after(async () => { await gw?.stop(); });

test('map/connect advertises the trajectory extension and its capabilities', async () => {
  const c = await connectClient(gw);
  const caps = c.connectResult.capabilities;
  // Reporting is for agents: a client is told so, and the SDK's own check agrees.
  assert.deepEqual(caps.trajectory, { enabled: true, canReport: false, canQuery: true, canRequestContent: true });
  assert.equal(canPerformMethod('trajectory/checkpoint', caps), false);
  assert.equal(canPerformMethod('trajectory/list', caps), true);
  await rejectsWithCode(call(c, 'trajectory/checkpoint', { checkpoint: { id: uid('client') } }), 13004, 'a client reports');
  const agent = await connectAgent(gw, { name: 'caps' });
  const agentCaps = agent.connectResult.capabilities;
  assert.deepEqual(agentCaps.trajectory, { enabled: true, canReport: true, canQuery: true, canRequestContent: true });
  assert.equal(canPerformMethod('trajectory/checkpoint', agentCaps), true);
  await agent.conn.disconnect();
  const ext = caps.extensions.find((e) => e.uri === 'urn:map:ext:trajectory:1');
  assert.ok(ext, `extensions list urn:map:ext:trajectory:1: ${JSON.stringify(caps.extensions)}`);
  assert.deepEqual([...ext.methods].sort(), ['trajectory/checkpoint', 'trajectory/content', 'trajectory/get', 'trajectory/list']);
  // the protocol's version (trajectory 1.0.0), and the plugin's own beside it
  assert.equal(ext.version, '1.0.0', `extension entry: ${JSON.stringify(ext)}`);
  assert.equal(ext.pluginVersion, crateVersion('trajectory'));
});

test('trajectory/checkpoint keeps the client id, sets the server timestamp and defaults agentId', async () => {
  const a = await connectAgent(gw, { name: 'reporter' });
  const id = uid('ckpt');
  const t0 = Date.now();
  const { checkpoint } = await call(a, 'trajectory/checkpoint', {
    checkpoint: {
      id,
      agentId: a.id,
      label: 'Implement JWT middleware',
      sessionId: 'work-1',
      timestamp: 42, // the server sets the timestamp
      metadata: { branch: 'feature/auth', filesTouched: ['src/auth.ts'], tokenUsage: { inputTokens: 5, outputTokens: 7 } },
    },
  });
  const t1 = Date.now();
  assert.equal(checkpoint.id, id, 'client-supplied id kept');
  assert.equal(checkpoint.agentId, a.id);
  assert.ok(checkpoint.timestamp >= t0 && checkpoint.timestamp <= t1, `server timestamp ${checkpoint.timestamp} within [${t0}, ${t1}]`);
  assert.equal(checkpoint.label, 'Implement JWT middleware');
  assert.equal(checkpoint.sessionId, 'work-1');
  assert.deepEqual(checkpoint.metadata, { branch: 'feature/auth', filesTouched: ['src/auth.ts'], tokenUsage: { inputTokens: 5, outputTokens: 7 } });
  assert.deepEqual((await call(a, 'trajectory/get', { checkpointId: id })).checkpoint, checkpoint, 'get returns what was stored');

  const minted = (await call(a, 'trajectory/checkpoint', { checkpoint: { label: 'no id, no agentId' } })).checkpoint;
  assert.match(minted.id, /^ckpt-[0-9A-HJKMNP-TV-Z]{26}$/, 'the server mints an id when none is given');
  assert.equal(minted.agentId, a.id, "agentId defaults to the session's agent");
  assert.equal(minted.sessionId, undefined);
  assert.equal(minted.metadata, undefined);
  const c = await connectClient(gw);
  assert.deepEqual((await call(c, 'trajectory/get', { checkpointId: minted.id })).checkpoint, minted, 'a client reads it too');
});

test('trajectory.checkpoint events and the subscription filter trajectory {agentId, sessionId}', async () => {
  const w = await connectClient(gw, { name: 'trajectory-watcher' });
  const a = await connectAgent(gw, { name: 'ev-a' });
  const b = await connectAgent(gw, { name: 'ev-b' });
  const [s1, s2] = [uid('work'), uid('work')];
  const byAgent = await w.conn.subscribe({ trajectory: { agentId: a.id } });
  const bySession = await w.conn.subscribe({ trajectory: { sessionId: s1 } });
  const byBoth = await w.conn.subscribe({ trajectory: { agentId: b.id, sessionId: s1 } });
  const byType = await w.conn.subscribe({ eventTypes: ['trajectory.checkpoint'] });

  const a1 = (await call(a, 'trajectory/checkpoint', { checkpoint: { id: uid('a1'), sessionId: s1, label: 'a in s1' } })).checkpoint;
  const a2 = (await call(a, 'trajectory/checkpoint', { checkpoint: { id: uid('a2'), sessionId: s2, label: 'a in s2' } })).checkpoint;
  const b1 = (await call(b, 'trajectory/checkpoint', { checkpoint: { id: uid('b1'), sessionId: s1, label: 'b in s1' } })).checkpoint;
  const b2 = (await call(b, 'trajectory/checkpoint', { checkpoint: { id: uid('b2'), sessionId: s2, label: 'b in s2' } })).checkpoint;

  const isCheckpoint = (e) => e.type === 'trajectory.checkpoint';
  const expect = [['agentId', byAgent, [a1, a2]], ['sessionId', bySession, [a1, b1]], ['agentId+sessionId', byBoth, [b1]], ['eventTypes', byType, [a1, a2, b1, b2]]];
  for (const [, sub, cps] of expect) await w.tap.waitForEvents(sub.id, isCheckpoint, cps.length);
  await quietPeriod();
  for (const [name, sub, cps] of expect) {
    const evs = w.tap.events(sub.id).map((p) => p.event).filter(isCheckpoint);
    assert.deepEqual(evs.map((e) => e.data.checkpoint), cps, `filter on ${name} gets exactly its checkpoints, in order`);
  }
  const ev = w.tap.events(byAgent.id)[0].event;
  assert.equal(sourceAgent(ev), a.id, 'the event comes from the reporting agent');
  assert.equal(typeof ev.id, 'string');
  assert.equal(typeof ev.timestamp, 'number');
});

test('trajectory/list: agent, session and time filters, newest first, cursor pagination', async () => {
  const a = await connectAgent(gw, { name: 'list-a' });
  const b = await connectAgent(gw, { name: 'list-b' });
  const [s1, s2] = [uid('ls'), uid('ls')];
  const reported = [];
  for (let i = 0; i < 7; i++) {
    reported.push((await call(a, 'trajectory/checkpoint', { checkpoint: { id: uid(`la${i}`), sessionId: i % 2 ? s2 : s1, label: `step ${i}` } })).checkpoint);
    await sleep(3); // distinct timestamps for the time filters
  }
  const bs = [];
  for (let i = 0; i < 2; i++) bs.push((await call(b, 'trajectory/checkpoint', { checkpoint: { id: uid(`lb${i}`), sessionId: s1 } })).checkpoint);
  const newestFirst = (cps) => [...cps].reverse();
  const c = await connectClient(gw);

  const all = await call(c, 'trajectory/list', { filter: { agentId: a.id } });
  assert.deepEqual(all.checkpoints, newestFirst(reported), "a's checkpoints, newest first");
  assert.equal(all.hasMore, false);
  assert.equal(all.nextCursor, undefined);

  // Pages of 3: 3 + 3 + 1, each continuing below the previous page's last checkpoint.
  const pages = [];
  let cursor;
  do {
    const page = await call(c, 'trajectory/list', { filter: { agentId: a.id }, limit: 3, ...(cursor ? { cursor } : {}) });
    pages.push(page);
    cursor = page.nextCursor;
    if (page.hasMore) assert.equal(cursor, page.checkpoints.at(-1).id, 'nextCursor is the last checkpoint of the page');
    else assert.equal(cursor, undefined, 'no nextCursor on the last page');
  } while (cursor && pages.length < 10);
  assert.deepEqual(pages.map((p) => p.checkpoints.length), [3, 3, 1]);
  assert.deepEqual(pages.map((p) => p.hasMore), [true, true, false]);
  assert.deepEqual(pages.flatMap((p) => p.checkpoints), all.checkpoints, 'pages concatenate to the whole list, no gaps or repeats');

  const inS1 = await call(c, 'trajectory/list', { filter: { sessionId: s1 } });
  assert.deepEqual(inS1.checkpoints, newestFirst([...reported.filter((cp) => cp.sessionId === s1), ...bs]), 'session filter spans agents');
  const aInS1 = await call(c, 'trajectory/list', { filter: { agentId: a.id, sessionId: s1 } });
  assert.deepEqual(aInS1.checkpoints, newestFirst(reported.filter((cp) => cp.sessionId === s1)), 'agent AND session');
  const bInS2 = await call(c, 'trajectory/list', { filter: { agentId: b.id, sessionId: s2 } });
  assert.deepEqual(bInS2, { checkpoints: [], hasMore: false });

  const mid = reported[3].timestamp;
  const after = await call(c, 'trajectory/list', { filter: { agentId: a.id, afterTimestamp: mid } });
  assert.deepEqual(after.checkpoints, newestFirst(reported.filter((cp) => cp.timestamp > mid)), 'afterTimestamp is exclusive');
  const beforeMid = await call(c, 'trajectory/list', { filter: { agentId: a.id, beforeTimestamp: mid } });
  assert.deepEqual(beforeMid.checkpoints, newestFirst(reported.filter((cp) => cp.timestamp < mid)), 'beforeTimestamp is exclusive');
  const window = await call(c, 'trajectory/list', { filter: { agentId: a.id, afterTimestamp: reported[1].timestamp, beforeTimestamp: reported[5].timestamp }, limit: 2 });
  assert.deepEqual(window.checkpoints, [reported[4], reported[3]]);
  assert.equal(window.hasMore, true);
  const rest = await call(c, 'trajectory/list', { filter: { agentId: a.id, afterTimestamp: reported[1].timestamp, beforeTimestamp: reported[5].timestamp }, limit: 2, cursor: window.nextCursor });
  assert.deepEqual(rest.checkpoints, [reported[2]], 'the cursor and the time window combine');
  assert.equal(rest.hasMore, false);

  const everyone = await call(c, 'trajectory/list', { limit: 2 });
  assert.deepEqual(everyone.checkpoints, newestFirst(bs), 'no filter: the whole tenant, newest first');
  assert.equal(everyone.hasMore, true);
  const fromAgent = await call(a, 'trajectory/list', { filter: { agentId: b.id }, limit: 1 });
  assert.deepEqual(fromAgent.checkpoints, [bs[1]], 'agents query too');
});

test('trajectory/get and trajectory/content of an unknown checkpoint: 13001', async () => {
  const c = await connectClient(gw);
  const missing = uid('missing');
  const e = await rejectsWithCode(call(c, 'trajectory/get', { checkpointId: missing }), 13001, 'get unknown');
  assert.equal(e.data.category, 'trajectory');
  await rejectsWithCode(call(c, 'trajectory/content', { checkpointId: missing }), 13001, 'content unknown');
});

test('trajectory/content: small artifacts inline, include, metadata, 13002 when there is nothing to serve', async () => {
  const a = await connectAgent(gw, { name: 'content-a' });
  const id = uid('inline');
  const context = { files: ['a.ts', 'b.ts'], nested: { n: 1.5, ok: true, none: null } };
  const res = await call(a, 'trajectory/checkpoint', {
    checkpoint: { id, metadata: { agent: 'Claude Code', commitHash: 'abc123' } },
    content: { prompts: 'Fix the bug in auth.ts', context, notes: 'héllo ✓ 🚀\n"quoted"', empty: '' },
  });
  const digest = (s) => sha256(Buffer.from(s, 'utf8'));
  assert.deepEqual(res.artifacts.find((x) => x.name === 'prompts'), { name: 'prompts', totalBytes: 22, checksum: digest('Fix the bug in auth.ts') });
  const c = await connectClient(gw);

  const { content } = await call(c, 'trajectory/content', { checkpointId: id });
  assert.equal(content.streaming, false);
  assert.equal(content.checkpointId, id);
  assert.deepEqual(content.artifacts, {
    metadata: { agent: 'Claude Code', commitHash: 'abc123' }, // the well-known artifact, from the checkpoint
    prompts: 'Fix the bug in auth.ts',
    context,
    notes: 'héllo ✓ 🚀\n"quoted"',
    empty: '',
  });
  assert.equal(content.streamId, undefined);

  const some = (await call(c, 'trajectory/content', { checkpointId: id, include: ['notes', 'transcript'] })).content;
  assert.deepEqual(some.artifacts, { notes: 'héllo ✓ 🚀\n"quoted"' }, 'include selects artifacts');
  assert.deepEqual(some.unavailable, ['transcript'], 'names the checkpoint lacks are listed');

  const none = await rejectsWithCode(call(c, 'trajectory/content', { checkpointId: id, include: ['transcript'] }), 13002, 'only missing artifacts');
  assert.deepEqual(none.data.details.unavailable, ['transcript']);
  const bare = (await call(a, 'trajectory/checkpoint', { checkpoint: { id: uid('bare') } })).checkpoint;
  await rejectsWithCode(call(c, 'trajectory/content', { checkpointId: bare.id }), 13002, 'checkpoint without content');
  await quietPeriod();
  assert.equal(c.tap.frames.filter((f) => f?.method === CHUNK).length, 0, 'nothing was streamed');
});

test('a several-MB artifact streams as ordered base64 chunks that reassemble byte for byte', async () => {
  const a = await connectAgent(gw, { name: 'streamer' });
  const big = transcript(5 * 1024 * 1024, 7);
  const original = Buffer.from(big, 'utf8');
  assert.ok(original.length > 5 * 1024 * 1024);
  const id = uid('big');
  const res = await call(a, 'trajectory/checkpoint', {
    checkpoint: { id, label: 'long session', sessionId: uid('work') },
    content: { transcript: big, prompts: 'small prompt' },
  });
  assert.deepEqual(res.artifacts.find((x) => x.name === 'transcript'), { name: 'transcript', totalBytes: original.length, checksum: sha256(original) });

  // A client, reading chunks off its socket.
  const c = await connectClient(gw);
  const { content } = await call(c, 'trajectory/content', { checkpointId: id });
  assert.equal(content.checkpointId, id);
  assert.equal(content.streamArtifact, 'transcript');
  assert.deepEqual(content.artifacts, { prompts: 'small prompt' }, 'small artifacts stay inline next to the stream');
  assert.equal(content.streamInfo.totalBytes, original.length);
  const { bytes, chunks } = await receiveStream(c.tap, content, 'client stream');
  assert.ok(chunks.length > 1, 'a several-MB artifact comes in several chunks');
  assert.ok(bytes.equals(original), 'the reassembled artifact is the reported one, byte for byte');
  assert.equal(chunks.at(-1).checksum, sha256(original));
  assert.equal(bytes.toString('utf8'), big);

  // An agent, through the SDK's own notification handlers.
  const viaSdk = [];
  a.conn.onNotification(CHUNK, (p) => { viaSdk.push(p); });
  const again = (await call(a, 'trajectory/content', { checkpointId: id, include: ['transcript'] })).content;
  assert.notEqual(again.streamId, content.streamId, 'every stream has its own id');
  await receiveStream(a.tap, again, 'agent stream');
  await until(() => viaSdk.filter((p) => p.streamId === again.streamId).length === again.streamInfo.totalChunks, 'SDK onNotification chunks');
  const sdkBytes = Buffer.concat(viaSdk.filter((p) => p.streamId === again.streamId).map((p) => Buffer.from(p.data, 'base64')));
  assert.ok(sdkBytes.equals(original), 'AgentConnection.onNotification sees the same stream');
  assert.equal(c.tap.frames.filter((f) => f?.params?.streamId === again.streamId).length, 0, "chunks go only to the requester's session");
});

test('one stream per request: further large artifacts are deferred to another request', async () => {
  const a = await connectAgent(gw, { name: 'two-large' });
  const logA = transcript(200_000, 3);
  const logB = transcript(150_000, 4);
  const id = uid('two');
  await call(a, 'trajectory/checkpoint', { checkpoint: { id }, content: { 'a-log': logA, 'b-log': logB, summary: 'short' } });
  const c = await connectClient(gw);
  const first = (await call(c, 'trajectory/content', { checkpointId: id })).content;
  assert.equal(first.streamArtifact, 'a-log');
  assert.deepEqual(first.deferred, ['b-log']);
  assert.deepEqual(first.artifacts, { summary: 'short' });
  assert.equal((await receiveStream(c.tap, first, 'a-log')).bytes.toString('utf8'), logA);
  const second = (await call(c, 'trajectory/content', { checkpointId: id, include: first.deferred })).content;
  assert.equal(second.streamArtifact, 'b-log');
  assert.equal(second.deferred, undefined);
  assert.equal((await receiveStream(c.tap, second, 'b-log')).bytes.toString('utf8'), logB);
});

test('only agents report, and only for agents their session owns (13004)', async () => {
  const a = await connectAgent(gw, { name: 'owner-a' });
  const b = await connectAgent(gw, { name: 'owner-b' });
  const c = await connectClient(gw);
  await rejectsWithCode(call(c, 'trajectory/checkpoint', { checkpoint: { id: uid('by-client') } }), 13004, 'a client reports');
  const forOther = await rejectsWithCode(call(a, 'trajectory/checkpoint', { checkpoint: { id: uid('x'), agentId: b.id } }), 13004, 'report for an agent of another session');
  assert.equal(forOther.data.category, 'trajectory');

  const id = uid('owned');
  const original = (await call(b, 'trajectory/checkpoint', { checkpoint: { id, label: 'by b' } })).checkpoint;
  await rejectsWithCode(call(a, 'trajectory/checkpoint', { checkpoint: { id, label: 'hijack' } }), 13004, "overwrite another agent's checkpoint");
  assert.deepEqual((await call(c, 'trajectory/get', { checkpointId: id })).checkpoint, original, 'unchanged');

  // Its own agent may report the same id again: the checkpoint is replaced, listed once.
  await sleep(2); // a later timestamp (they are in ms)
  const replaced = (await call(b, 'trajectory/checkpoint', { checkpoint: { id, label: 'by b, again' } })).checkpoint;
  assert.equal(replaced.label, 'by b, again');
  assert.ok(replaced.timestamp >= original.timestamp);
  assert.deepEqual((await call(c, 'trajectory/get', { checkpointId: id })).checkpoint, replaced);
  const listed = (await call(c, 'trajectory/list', { filter: { agentId: b.id } })).checkpoints;
  assert.deepEqual(listed, [replaced], 'the replaced checkpoint is listed once, with its new fields');
});

test('declared capabilities are enforced per participant (13004)', async () => {
  const reporter = await connectAgent(gw, { name: 'caps-reporter' });
  const id = uid('caps');
  await call(reporter, 'trajectory/checkpoint', { checkpoint: { id }, content: { notes: 'n' } });

  const agent = await connectAgent(gw, { name: 'no-report', capabilities: { trajectory: { canReport: false } } });
  await rejectsWithCode(call(agent, 'trajectory/checkpoint', { checkpoint: { id: uid('nr') } }), 13004, 'canReport: false');
  const seen = (await call(agent, 'trajectory/list', { filter: { agentId: reporter.id } })).checkpoints;
  assert.deepEqual(seen.map((cp) => cp.id), [id], 'it may still query');

  const noQuery = await connectClient(gw, { capabilities: { trajectory: { canQuery: false } } });
  await rejectsWithCode(call(noQuery, 'trajectory/list', {}), 13004, 'list with canQuery: false');
  await rejectsWithCode(call(noQuery, 'trajectory/get', { checkpointId: id }), 13004, 'get with canQuery: false');
  assert.deepEqual((await call(noQuery, 'trajectory/content', { checkpointId: id })).content.artifacts, { notes: 'n' }, 'content needs only canRequestContent');

  const noContent = await connectClient(gw, { capabilities: { trajectory: { canRequestContent: false } } });
  await rejectsWithCode(call(noContent, 'trajectory/content', { checkpointId: id }), 13004, 'content with canRequestContent: false');
  assert.equal((await call(noContent, 'trajectory/get', { checkpointId: id })).checkpoint.id, id, 'it may still query');
});

test('malformed params are -32602', async () => {
  const a = await connectAgent(gw, { name: 'bad-params' });
  const cases = [
    ['trajectory/checkpoint', {}],
    ['trajectory/checkpoint', { checkpoint: { id: '' } }],
    ['trajectory/checkpoint', { checkpoint: { id: 'x'.repeat(300) } }],
    ['trajectory/checkpoint', { checkpoint: { metadata: 'not an object' } }],
    ['trajectory/checkpoint', { checkpoint: {}, content: ['not', 'a', 'map'] }],
    ['trajectory/list', { limit: 0 }],
    ['trajectory/list', { filter: { afterTimestamp: 'yesterday' } }],
    ['trajectory/list', { cursor: uid('no-such-checkpoint') }],
    ['trajectory/get', {}],
    ['trajectory/content', { include: ['transcript'] }],
  ];
  for (const [method, params] of cases) {
    await rejectsWithCode(call(a, method, params), -32602, `${method} ${JSON.stringify(params)}`);
  }
});

test('a tenant with the extension switched off answers 13000', async () => {
  const auth = { method: 'api-key', credential: 'globex-key' };
  const agent = await connectAgent(gw, { name: 'globex-agent', auth });
  const c = await connectClient(gw, { auth });
  assert.equal(c.connectResult.capabilities.trajectory.enabled, false, 'map/connect shows trajectory as off for this tenant');
  await rejectsWithCode(call(agent, 'trajectory/checkpoint', { checkpoint: { id: uid('off') } }), 13000, 'checkpoint');
  await rejectsWithCode(call(c, 'trajectory/list', {}), 13000, 'list');
  await rejectsWithCode(call(c, 'trajectory/get', { checkpointId: 'x' }), 13000, 'get');
  await rejectsWithCode(call(c, 'trajectory/content', { checkpointId: 'x' }), 13000, 'content');
});

test('tenants keep separate trajectories', async () => {
  const acme = await connectAgent(gw, { name: 'acme-reporter', auth: { method: 'api-key', credential: 'acme-key' } });
  const id = uid('acme');
  await call(acme, 'trajectory/checkpoint', { checkpoint: { id } });
  const local = await connectClient(gw);
  await rejectsWithCode(call(local, 'trajectory/get', { checkpointId: id }), 13001, "another tenant's checkpoint");
  const acmeClient = await connectClient(gw, { auth: { method: 'api-key', credential: 'acme-key' } });
  assert.equal((await call(acmeClient, 'trajectory/get', { checkpointId: id })).checkpoint.id, id);
});

test('a stream the client does not read fails with 13003 instead of queueing without bound', async () => {
  // A small outbound queue: chunks for the caller wait (after the response) in a
  // buffer as large as the queue; a longer stream is refused whole (2003 → 13003).
  const tight = await startGateway({
    maxMessageBytes: 32 << 20,
    extraToml: `[limits]\noutbox_frames = 16\n${pluginToml('deadline_ms = 10000\nmemory_mb = 256\n[plugins.trajectory.config]\nchunk_bytes = 65536\n')}`,
  });
  try {
    const a = await connectAgent(tight, { name: 'flood' });
    const big = 'x'.repeat(16 * 1024 * 1024);
    const id = uid('flood');
    await call(a, 'trajectory/checkpoint', { checkpoint: { id }, content: { transcript: big } });
    const c = await connectClient(tight);
    c.ws._socket.pause(); // stop reading: kernel buffers, then the gateway's queue, fill up
    const calls = 'map_plugin_calls_total{plugin="trajectory",outcome="ok"}'; // a plugin's own error is an ok call
    const before = await metric(tight, calls);
    const pending = call(c, 'trajectory/content', { checkpointId: id }).then((v) => ({ v }), (e) => ({ e }));
    // The gateway ends the call while the client still reads nothing.
    await pollUntil(() => metric(tight, calls), (n) => n > before, { timeoutMs: WAIT_MS * 10, intervalMs: 20, what: 'trajectory/content to end' });
    c.ws._socket.resume();
    const { v, e } = await pending;
    assert.equal(v, undefined, `expected 13003, got ${JSON.stringify(v)?.slice(0, 300)}`);
    const err = await rejectsWithCode(Promise.reject(e), 13003, 'stream into a full queue');
    const streamId = err.data.details.streamId;
    assert.equal(typeof streamId, 'string');
    await quietPeriod();
    const got = chunksOf(c.tap, streamId);
    assert.equal(got.length, 0, 'a failed stream sends no partial chunks');
  } finally {
    await tight.stop();
  }
});
