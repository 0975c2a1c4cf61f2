// The workspace extension (urn:map:ext:workspace:1): the gateway relays workspace/search, list
// and read to the agent named by agentId, over that agent's own session, and answers with what the
// agent answered. The serving agent is examples/workspace-agent's code (folderService and
// answerRequests) around the real SDK's AgentConnection and its server-side
// createWorkspaceHandlers; the caller is the SDK's ClientConnection through callExtension.
// examples/workspace-agent/agent.mjs itself runs as a child process too.
// Checked: the capability group at connect, results, lineRange, paths escaping the root (12003),
// a missing file (12001), an agent without a workspace (12000), unknown and hidden agents (2001),
// missing params (-32602), an agent that never answers (3002 after the configured timeout), and
// an agent on another node of a cluster.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, writeFileSync, symlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import { AgentConnection, websocketStream, waitForOpen } from '@multi-agent-protocol/sdk';
import { createWorkspaceHandlers } from '@multi-agent-protocol/sdk/server';
import { startGateway, startCluster, connectAgent, connectClient, rejectsWithCode, pollUntil, uid, RPC_TIMEOUT_MS } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const EXAMPLE = join(HERE, '..', '..', 'examples', 'workspace-agent');
const { folderService, answerRequests, WORKSPACE } = await import(join(EXAMPLE, 'workspace.mjs'));

const E = { NOT_ENABLED: 12000, NOT_FOUND: 12001, INVALID_PATH: 12003, AGENT_NOT_FOUND: 2001, NOT_RESPONDING: 3002, INVALID_PARAMS: -32602 };
/** The gateway's wait for an agent's answer in these tests (the default is 10 s). */
const TIMEOUT_MS = 800;
const extraToml = `[workspace]\ntimeout_ms = ${TIMEOUT_MS}\n`;
const README = 'line one\nline two\nline three\nline four\n';

let gw;
let dir;
let root;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'map-workspace-'));
  root = join(dir, 'root');
  mkdirSync(join(root, 'src'), { recursive: true });
  mkdirSync(join(dir, 'outside'));
  writeFileSync(join(root, 'README.md'), README);
  writeFileSync(join(root, 'src', 'main.rs'), 'fn main() {}\n');
  writeFileSync(join(root, 'src', 'lib.rs'), 'pub fn lib() {}\n');
  writeFileSync(join(dir, 'outside', 'secret.txt'), 'not yours\n');
  // A link inside the root to a folder outside it.
  symlinkSync(join(dir, 'outside'), join(root, 'elsewhere'));
  gw = await startGateway({ extraToml });
});
after(async () => {
  await gw?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * An SDK agent whose workspace requests are answered by `handlers` (the example's folder, by
 * default), declaring `capabilities` at connect and register.
 */
async function workspaceAgent(g, { handlers, capabilities = WORKSPACE, visibility } = {}) {
  const ws = new WebSocket(g.url);
  g.connections.add(ws);
  await waitForOpen(ws, 5000);
  const served = handlers ?? createWorkspaceHandlers({ fileService: await folderService(root) });
  const conn = new AgentConnection(answerRequests(websocketStream(ws), served), { name: uid('ws'), capabilities, visibility, defaultTimeout: RPC_TIMEOUT_MS });
  const { agent } = await conn.connect();
  return { conn, id: agent.id };
}

const call = (c, method, params) => c.conn.callExtension(method, params);

test('map/connect advertises the workspace group and its URI to clients and agents', async () => {
  const c = await connectClient(gw);
  const caps = c.connectResult.capabilities;
  assert.deepEqual(caps.workspace, { enabled: true, canSearch: true, canList: true, canRead: true });
  assert.ok(caps.extensions.some((e) => e.uri === 'urn:map:ext:workspace:1'), JSON.stringify(caps.extensions));
  const a = await connectAgent(gw, { name: uid('caps') });
  assert.equal(a.connectResult.capabilities.workspace.canRead, true);
});

test('list, search and read answer from the agent\'s folder', async () => {
  const agent = await workspaceAgent(gw);
  const c = await connectClient(gw);
  const { files } = await call(c, 'workspace/list', { agentId: agent.id });
  assert.deepEqual(files.map((f) => f.path), ['README.md', 'elsewhere', 'src']);
  const readme = files.find((f) => f.path === 'README.md');
  assert.deepEqual(readme, { path: 'README.md', isDirectory: false, size: README.length, mime: 'text/markdown' });
  assert.deepEqual(files.find((f) => f.path === 'src'), { path: 'src', isDirectory: true });

  const src = await call(c, 'workspace/list', { agentId: agent.id, directory: 'src' });
  assert.deepEqual(src.files.map((f) => f.path), ['src/lib.rs', 'src/main.rs']);

  const byName = await call(c, 'workspace/search', { agentId: agent.id, query: 'main' });
  assert.deepEqual(byName.files.map((f) => f.path), ['src/main.rs']);
  const glob = await call(c, 'workspace/search', { agentId: agent.id, query: '*.rs', cwd: 'src' });
  assert.deepEqual(glob.files.map((f) => f.path), ['src/lib.rs', 'src/main.rs']);
  const one = await call(c, 'workspace/search', { agentId: agent.id, query: '*.rs', limit: 1 });
  assert.equal(one.files.length, 1);

  const whole = await call(c, 'workspace/read', { agentId: agent.id, path: 'README.md' });
  assert.deepEqual(whole, { text: README, mime: 'text/markdown', size: statSync(join(root, 'README.md')).size });
  const part = await call(c, 'workspace/read', { agentId: agent.id, path: 'README.md', lineRange: { start: 2, end: 3 } });
  assert.equal(part.text, 'line two\nline three');
  assert.equal(part.size, README.length, 'size is the file\'s');

  // The agent's own requests still get their answers on the same connection.
  const other = await connectAgent(gw, { name: uid('peer') });
  const sent = await agent.conn.send({ agent: other.id }, { hello: 'peer' });
  assert.deepEqual(sent.delivered, [other.id]);
});

test('paths escaping the root are refused with 12003, a missing file is 12001', async () => {
  const agent = await workspaceAgent(gw);
  const c = await connectClient(gw);
  const read = (path) => call(c, 'workspace/read', { agentId: agent.id, path });
  for (const path of ['../outside/secret.txt', '/etc/passwd', 'src/../../outside/secret.txt', 'elsewhere/secret.txt']) {
    const e = await rejectsWithCode(read(path), E.INVALID_PATH, path);
    assert.equal(e.data?.category, 'workspace');
  }
  await rejectsWithCode(call(c, 'workspace/list', { agentId: agent.id, directory: '..' }), E.INVALID_PATH, 'list ..');
  await rejectsWithCode(call(c, 'workspace/search', { agentId: agent.id, query: 'secret', cwd: 'elsewhere' }), E.INVALID_PATH, 'search through a link');
  await rejectsWithCode(read('nope.txt'), E.NOT_FOUND, 'missing file');
  await rejectsWithCode(read('src'), E.INVALID_PATH, 'a directory');
});

test('missing params are -32602 before anything is relayed', async () => {
  const agent = await workspaceAgent(gw);
  const c = await connectClient(gw);
  await rejectsWithCode(call(c, 'workspace/list', {}), E.INVALID_PARAMS, 'no agentId');
  await rejectsWithCode(call(c, 'workspace/list'), E.INVALID_PARAMS, 'no params at all');
  await rejectsWithCode(call(c, 'workspace/read', { agentId: agent.id }), E.INVALID_PARAMS, 'no path');
  await rejectsWithCode(call(c, 'workspace/search', { agentId: agent.id }), E.INVALID_PARAMS, 'no query');
  await rejectsWithCode(call(c, 'workspace/read', { agentId: agent.id, path: 'README.md', lineRange: { start: 3 } }), E.INVALID_PARAMS, 'half a lineRange');
});

test('an agent without a workspace is 12000; unknown and hidden agents are 2001', async () => {
  const plain = await connectAgent(gw, { name: uid('plain') });
  const hidden = await workspaceAgent(gw, { visibility: 'system' });
  const c = await connectClient(gw);
  await rejectsWithCode(call(c, 'workspace/list', { agentId: plain.id }), E.NOT_ENABLED, 'no workspace declared');
  const noRead = await workspaceAgent(gw, { capabilities: { workspace: { enabled: true, canRead: false } } });
  await rejectsWithCode(call(c, 'workspace/read', { agentId: noRead.id, path: 'README.md' }), E.NOT_ENABLED, 'canRead: false');
  assert.equal((await call(c, 'workspace/list', { agentId: noRead.id })).files.length, 3, 'its other methods still work');
  await rejectsWithCode(call(c, 'workspace/list', { agentId: uid('nobody') }), E.AGENT_NOT_FOUND, 'unknown agent');
  await rejectsWithCode(call(c, 'workspace/list', { agentId: hidden.id }), E.AGENT_NOT_FOUND, 'an agent the caller may not see');
  // The agent's own session sees it.
  assert.equal((await hidden.conn.callExtension('workspace/list', { agentId: hidden.id })).files.length, 3);
});

test('an agent that never answers is 3002 after the configured timeout, and others are unaffected', async () => {
  const never = () => new Promise(() => {});
  const silent = await workspaceAgent(gw, { handlers: { 'workspace/read': never, 'workspace/list': never, 'workspace/search': never } });
  const agent = await workspaceAgent(gw);
  const c = await connectClient(gw);
  const started = Date.now();
  const e = await rejectsWithCode(call(c, 'workspace/read', { agentId: silent.id, path: 'README.md' }), E.NOT_RESPONDING, 'silent agent');
  const took = Date.now() - started;
  assert.ok(took >= TIMEOUT_MS - 50 && took < RPC_TIMEOUT_MS, `answered after ${took} ms`);
  assert.match(e.message, new RegExp(`within ${TIMEOUT_MS} ms`));
  assert.equal((await call(c, 'workspace/list', { agentId: agent.id })).files.length, 3);
});

test('an agent whose connection closes fails the request at once', async () => {
  let arrived;
  const asked = new Promise((r) => { arrived = r; });
  const leaving = await workspaceAgent(gw, { handlers: { 'workspace/list': () => { arrived(); return new Promise(() => {}); } } });
  const c = await connectClient(gw);
  let started;
  const failed = rejectsWithCode(call(c, 'workspace/list', { agentId: leaving.id }), E.NOT_RESPONDING, 'agent gone').then((e) => ({ e, took: Date.now() - started }));
  await asked;
  started = Date.now();
  await leaving.conn.disconnect().catch(() => {});
  const { e, took } = await failed;
  assert.match(e.message, /left before it answered/);
  assert.ok(took < TIMEOUT_MS, `failed after ${took} ms: ${e.message}`);
});

test('an agent on another node of a cluster is asked there', async () => {
  const cluster = await startCluster(['a', 'b'], { extraToml });
  try {
    const agent = await workspaceAgent(cluster.nodes.a);
    const c = await connectClient(cluster.nodes.b);
    const listed = await pollUntil(() => call(c, 'workspace/list', { agentId: agent.id }), (r) => r.files?.length === 3, { what: 'the agent through node b' });
    assert.deepEqual(listed.files.map((f) => f.path), ['README.md', 'elsewhere', 'src']);
    const part = await call(c, 'workspace/read', { agentId: agent.id, path: 'README.md', lineRange: { start: 4, end: 4 } });
    assert.equal(part.text, 'line four');
    await rejectsWithCode(call(c, 'workspace/read', { agentId: agent.id, path: '../outside/secret.txt' }), E.INVALID_PATH, 'escape, across nodes');
  } finally {
    await cluster.stop();
  }
});

test('examples/workspace-agent/agent.mjs serves its folder', async () => {
  assert.ok(existsSync(join(EXAMPLE, 'node_modules')), 'run: cd examples/workspace-agent && npm ci --ignore-scripts');
  const agentId = uid('files');
  const child = spawn(process.execPath, [join(EXAMPLE, 'agent.mjs'), root, gw.url], { env: { ...process.env, AGENT_ID: agentId }, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d) => { err += d; });
  try {
    await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.setEncoding('utf8').on('data', (d) => {
        out += d;
        if (out.includes(`as agent ${agentId}`)) resolve();
      });
      child.once('exit', (code) => reject(new Error(`agent.mjs exited (${code}) before serving: ${out}${err}`)));
    });
    const c = await connectClient(gw);
    const { files } = await call(c, 'workspace/list', { agentId });
    assert.deepEqual(files.map((f) => f.path), ['README.md', 'elsewhere', 'src']);
    await rejectsWithCode(call(c, 'workspace/read', { agentId, path: '../outside/secret.txt' }), E.INVALID_PATH, 'escape');
  } finally {
    child.kill('SIGINT');
  }
});
