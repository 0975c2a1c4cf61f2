// Trajectory data is durable: checkpoints, their order, their inline and streamed artifacts all
// survive a SIGKILL of the gateway (no shutdown, no flush), and reporting carries on after it.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startGateway, connectAgent, connectClient, uid, sleep, WAIT_MS } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const WASM = process.env.TRAJECTORY_WASM ?? join(HERE, '..', '..', 'plugins', 'dist', 'trajectory.wasm');
const options = { maxMessageBytes: 16 << 20, extraToml: `[plugins.trajectory]\npath = ${JSON.stringify(WASM)}\n` };
const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');
const call = (h, method, params) => h.conn.callExtension(method, params);

/** Fetch one streamed artifact on a client handle and return its bytes (checked against the final checksum). */
async function download(client, checkpointId, name) {
  const { content } = await call(client, 'trajectory/content', { checkpointId, include: [name] });
  assert.equal(content.streaming, true, `${name} is streamed`);
  assert.equal(content.streamArtifact, name);
  const chunksOf = () => client.tap.frames.filter((f) => f?.method === 'trajectory/content.chunk' && f.params.streamId === content.streamId).map((f) => f.params);
  await client.tap.waitUntil(() => chunksOf().some((c) => c.final), WAIT_MS, `final chunk of ${name}`);
  const chunks = chunksOf();
  assert.deepEqual(chunks.map((c) => c.index), [...chunks.keys()], 'chunks in order');
  const bytes = Buffer.concat(chunks.map((c) => Buffer.from(c.data, 'base64')));
  assert.equal(sha256(bytes), chunks.at(-1).checksum, 'checksum of the reassembled artifact');
  return bytes;
}

const gateways = [];
after(async () => {
  // Newest first: the first gateway's temp dir holds the shared data dir.
  for (const g of gateways.reverse()) await g.stop();
});

test('checkpoints and their artifacts survive a SIGKILL of the gateway', async () => {
  const first = await startGateway(options);
  gateways.push(first);
  const agentA = uid('restart-a');
  const agentB = uid('restart-b');
  const work = uid('work');
  const a = await connectAgent(first, { agentId: agentA, name: 'restart-a' });
  const b = await connectAgent(first, { agentId: agentB, name: 'restart-b' });
  assert.equal(a.id, agentA);

  const big = Array.from({ length: 40_000 }, (_, i) => `{"turn":${i},"text":"résumé ✓ ${i * 7919 % 104729}"}`).join('\n');
  const reported = [];
  reported.push((await call(a, 'trajectory/checkpoint', { checkpoint: { id: uid('r1'), sessionId: work, label: 'plan', metadata: { step: 1 } } })).checkpoint);
  await sleep(2); // distinct timestamps (they are in ms)
  reported.push((await call(b, 'trajectory/checkpoint', { checkpoint: { id: uid('r2'), sessionId: work, label: 'review' }, content: { prompts: 'review it', context: { files: ['x.ts'] } } })).checkpoint);
  await sleep(2);
  const withTranscript = await call(a, 'trajectory/checkpoint', { checkpoint: { id: uid('r3'), sessionId: work, label: 'implement' }, content: { transcript: big, prompts: 'implement it' } });
  reported.push(withTranscript.checkpoint);
  const transcriptSum = withTranscript.artifacts.find((x) => x.name === 'transcript').checksum;
  assert.equal(transcriptSum, sha256(Buffer.from(big, 'utf8')));

  const c1 = await connectClient(first);
  const listed = await call(c1, 'trajectory/list', { filter: { sessionId: work } });
  assert.deepEqual(listed.checkpoints, [...reported].reverse());

  await first.kill();
  const second = await startGateway({ ...options, dataDir: first.dataDir });
  gateways.push(second);

  const c2 = await connectClient(second);
  assert.deepEqual(await call(c2, 'trajectory/list', { filter: { sessionId: work } }), listed, 'the same list after the restart');
  assert.deepEqual((await call(c2, 'trajectory/list', { filter: { agentId: agentA } })).checkpoints, [reported[2], reported[0]], 'agent index survived');
  assert.deepEqual((await call(c2, 'trajectory/list', { filter: { agentId: agentB, sessionId: work } })).checkpoints, [reported[1]], 'agent+session index survived');
  for (const cp of reported) {
    assert.deepEqual((await call(c2, 'trajectory/get', { checkpointId: cp.id })).checkpoint, cp, `get ${cp.id}`);
  }
  const inline = (await call(c2, 'trajectory/content', { checkpointId: reported[1].id })).content;
  assert.deepEqual(inline.artifacts, { prompts: 'review it', context: { files: ['x.ts'] } }, 'inline artifacts survived');
  const bytes = await download(c2, reported[2].id, 'transcript');
  assert.equal(sha256(bytes), transcriptSum);
  assert.equal(bytes.toString('utf8'), big, 'the streamed artifact survived byte for byte');

  // The same agents come back (same ids) and carry on: new checkpoints come first, old ones stay.
  const a2 = await connectAgent(second, { agentId: agentA, name: 'restart-a' });
  const later = (await call(a2, 'trajectory/checkpoint', { checkpoint: { id: uid('r4'), sessionId: work, label: 'after restart' } })).checkpoint;
  assert.ok(later.timestamp >= reported[2].timestamp);
  const relisted = await call(c2, 'trajectory/list', { filter: { sessionId: work } });
  assert.deepEqual(relisted.checkpoints, [later, ...[...reported].reverse()]);
  // Its own checkpoint from before the restart can be replaced by the re-registered agent.
  const replaced = (await call(a2, 'trajectory/checkpoint', { checkpoint: { id: reported[0].id, sessionId: work, label: 'plan v2' } })).checkpoint;
  assert.equal(replaced.label, 'plan v2');
  const final = (await call(c2, 'trajectory/list', { filter: { sessionId: work } })).checkpoints;
  assert.deepEqual(final.map((cp) => cp.id), [reported[0].id, later.id, reported[2].id, reported[1].id]);
});
