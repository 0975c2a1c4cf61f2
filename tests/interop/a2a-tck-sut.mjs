// The system under test of the official A2A conformance kit (a2aproject/a2a-tck),
// played by the A2A bridge: a gateway with the a2a plugin for the anonymous
// tenant, and a MAP agent `tck` that does what the kit's scenarios
// (scenarios/*.feature) ask of an agent, chosen by the prefix of the
// client's messageId. Not a test: it prints the URL to give the kit as
// --sut-host and runs until it is stopped (docs/contributing/testing.md).
//
//   node tests/interop/a2a-tck-sut.mjs        (GATEWAY_BIN as for the interop suite)
import { createServer } from 'node:http';
import { join } from 'node:path';
import { startGateway, connectAgent } from './harness.mjs';
import { DIST } from './a2a-sdk.mjs';

const text = (t) => ({ parts: [{ text: t }] });
const done = { state: 'completed' };
const file = { raw: Buffer.from('tck').toString('base64'), mediaType: 'text/plain', filename: 'output.txt' };

/** What the agent does for a messageId prefix: a list of [method, params] (longer prefixes first). */
const SCENARIOS = [
  ['tck-stream-artifact-chunked', [['working'], ['artifact', [{ text: 'chunk-1 ' }]], ['artifact', [{ text: 'chunk-2' }]], ['update', done]]],
  ['test-resubscribe-message-id', [['working'], ['wait', 4000], ['update', done]]],
  ['tck-stream-artifact-text', [['working'], ['artifact', [{ text: 'Streamed text content' }]], ['update', done]]],
  ['tck-stream-artifact-file', [['working'], ['artifact', [file]], ['update', done]]],
  ['tck-stream-ordering-001', [['working'], ['artifact', [{ text: 'Ordered output' }]], ['update', done]]],
  ['tck-stream-001', [['working'], ['artifact', [{ text: 'Stream hello from TCK' }]], ['update', done]]],
  ['tck-stream-002', [['update', done]]],
  ['tck-stream-003', [['working'], ['artifact', [{ text: 'Stream task lifecycle' }]], ['update', done]]],
  ['tck-artifact-file-url', [['artifact', [{ url: 'https://example.com/output.txt', mediaType: 'text/plain', filename: 'output.txt' }]], ['update', done]]],
  ['tck-artifact-file', [['artifact', [file]], ['update', done]]],
  ['tck-artifact-text', [['artifact', [{ text: 'Generated text content' }]], ['update', done]]],
  ['tck-artifact-data', [['artifact', [{ data: { key: 'value', count: 42 } }]], ['update', done]]],
  ['tck-message-response', [['reply', text('Direct message response')]]],
  ['tck-input-required', [['update', { state: 'input-required' }]]],
  ['tck-reject-task', [['update', { state: 'rejected', message: text('rejected') }]]],
  ['tck-complete-task', [['update', { state: 'completed', message: text('Hello from TCK') }]]],
];

/**
 * The steps for a message: its scenario's; else, for the 1.0 line's other
 * ids (`tck-…`), an echo that completes the task; else (the 0.3 line, which
 * continues and cancels the tasks it opens) the task goes to working and stays there.
 */
export function steps(messageId) {
  const hit = SCENARIOS.find(([prefix]) => messageId.startsWith(prefix));
  if (hit) return hit[1];
  return messageId.startsWith('tck-') ? [['update', { state: 'completed', message: text(`Unhandled messageId prefix: ${messageId}`) }]] : [['working']];
}

/** Play a message's scenario on task `taskId` with `call(method, params)`. */
export async function play(call, taskId, messageId) {
  let n = 0;
  for (const [what, arg] of steps(messageId)) {
    if (what === 'working') await call('a2a/task/update', { taskId, state: 'working' });
    if (what === 'artifact') await call('a2a/task/update', { taskId, artifacts: [{ artifactId: `artifact-${++n}`, parts: arg }] });
    if (what === 'update') await call('a2a/task/update', { taskId, ...arg });
    if (what === 'reply') await call('a2a/reply', { taskId, message: arg });
    if (what === 'wait') await new Promise((r) => setTimeout(r, arg));
  }
}

async function main() {
  const gw = await startGateway({
    tenants: [{ id: 'default', toml: ['plugins = ["a2a"]', 'outbound_hosts = { a2a = ["127.0.0.1", "localhost"] }'].join('\n') }],
    extraToml: [
      '[plugins.a2a]',
      `path = ${JSON.stringify(join(DIST, 'a2a.wasm'))}`,
      'http_prefix = "/a2a"',
      'deadline_ms = 30000',
      '[plugins.a2a.config]',
      'requestsPerMinute = 100000',
      // A send to a task that stays working answers with it after this wait.
      'blockingWaitMs = 1000',
    ].join('\n'),
  });
  const agent = await connectAgent(gw, { name: 'TCK', agentId: 'tck' });
  await agent.conn.updateMetadata({ a2a: { description: 'Plays the A2A conformance kit scenarios', skills: [{ id: 'tck', name: 'TCK', description: 'Conformance scenarios', tags: ['tck'] }] } });
  const call = (method, params) => agent.conn.callExtension(method, params);
  agent.conn.onMessage((m) => {
    const a = m.payload?.a2a;
    if (a?.method !== 'SendMessage') return;
    play(call, a.taskId, a.message?.messageId ?? '').catch((e) => console.error(`scenario ${a.message?.messageId}: ${e.message}`));
  });
  const url = `${gw.baseUrl}/a2a/agents/tck`;
  // The kit's 0.3 line reads the card at its host's root, where the gateway
  // has none: a relay on a port of its own serves the agent's card there and
  // passes every other request to the agent's URL as it came.
  const relay = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const path = req.url === '/.well-known/agent-card.json' ? '/.well-known/agent-card.json' : req.url.replace(/^\/$/, '');
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !['host', 'content-length', 'connection'].includes(k)));
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const answer = await fetch(`${url}${path}`, { method: req.method, headers, body });
    res.writeHead(answer.status, Object.fromEntries([...answer.headers].filter(([k]) => !['content-length', 'content-encoding', 'transfer-encoding'].includes(k))));
    res.end(Buffer.from(await answer.arrayBuffer()));
  });
  await new Promise((r) => relay.listen(0, '127.0.0.1', r));
  console.log(`1.0 line (--sut-host): ${url}`);
  console.log(`0.3 line (--sut-url):  http://127.0.0.1:${relay.address().port}`);
  const stop = async () => { await gw.stop(); process.exit(0); };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

if (import.meta.url === `file://${process.argv[1]}`) main();
