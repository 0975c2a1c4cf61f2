// The examples/ folder, black-box:
// - examples/plugin-js: the JavaScript "notes" plugin (notes.wasm, built with
//   componentize-js) loaded by the gateway and driven through the real SDK's
//   callExtension: put/get/list/delete, error codes, per-tenant config, tenant
//   isolation, notes.changed events, and first-call / steady-state latency.
// - examples/two-agents/hello.mjs run as a child process against a gateway.
// - examples/multi-tenant/gateway.toml started as is: each tenant sees its
//   own plugin set and credentials are required.
//
// Needs: examples/plugin-js/notes.wasm (cd examples/plugin-js && npm ci && node build.mjs),
// examples/two-agents/node_modules (cd examples/two-agents && npm ci),
// plugins/dist/{mail,trajectory}.wasm (scripts/build-plugins.sh).
// A missing piece fails the test with the command that builds it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { WebSocket } from 'ws';
import { ClientConnection, websocketStream, waitForOpen } from '@multi-agent-protocol/sdk';
import {
  startGateway, connectAgent, connectClient, rejectsWithCode, uid,
  DEFAULT_TENANTS, GATEWAY_BIN, quietPeriod, RPC_TIMEOUT_MS,
} from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const EXAMPLES = join(ROOT, 'examples');
const NOTES_WASM = process.env.NOTES_WASM ?? join(EXAMPLES, 'plugin-js', 'notes.wasm');
const HELLO = join(EXAMPLES, 'two-agents', 'hello.mjs');
const MULTI_TENANT_TOML = join(EXAMPLES, 'multi-tenant', 'gateway.toml');

const E = { NOTE_NOT_FOUND: 21000, TEXT_TOO_LARGE: 21002, INVALID_PARAMS: -32602 };
const ACME = { method: 'api-key', credential: 'acme-key' };
const GLOBEX = { method: 'api-key', credential: 'globex-key' };
/** globex's per-tenant override of the plugin's max_text_bytes. */
const GLOBEX_MAX_TEXT = 64;

// The JS engine makes notes.wasm a 12 MB component. A debug build of the
// gateway compiles it in about 25 s, more than the harness waits for the ready
// line (20 s), so the first start below compiles it into a data dir's cache
// with a longer wait, and the gateway under test reuses that data dir.
const COMPILE_WAIT_MS = 240_000;
// The first call into a fresh JS instance runs more code than later ones; the
// default deadline of 1 s leaves little margin on a slow debug host.
const notesToml = `[plugins.notes]\npath = ${JSON.stringify(NOTES_WASM)}\ndeadline_ms = 5000\n\n[plugins.notes.config]\nmax_text_bytes = 4096\n`;

/** Spawn `map-gateway serve ARGS` and wait for its ready line; resolves to {proc, port, stderr, stop}. */
async function serve(args, timeoutMs) {
  const proc = spawn(GATEWAY_BIN, ['serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  proc.stderr.setEncoding('utf8').on('data', (d) => { err = (err + d).slice(-20_000); });
  const stop = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    const t = setTimeout(() => proc.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(t);
  };
  const port = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => { stop(); reject(new Error(`gateway not ready within ${timeoutMs} ms; stderr: ${err.slice(-3000)}`)); }, timeoutMs);
    proc.stdout.setEncoding('utf8').on('data', (d) => {
      out += d;
      const m = /map-gateway listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code, sig) => { clearTimeout(timer); reject(new Error(`gateway exited (code ${code}, signal ${sig}) before ready; stderr: ${err.slice(-3000)}`)); });
  });
  return { proc, port, stderr: () => err, stop };
}

// ---------------------------------------------------------------------------
// examples/plugin-js: the notes plugin
// ---------------------------------------------------------------------------

let gw;
let dataRoot;
before(async () => {
  assert.ok(
    existsSync(NOTES_WASM),
    `${NOTES_WASM} is missing: build it with (cd examples/plugin-js && npm ci && node build.mjs)`,
  );
  assert.ok(existsSync(GATEWAY_BIN), `gateway binary not found at ${GATEWAY_BIN} (cargo build -p map-gateway)`);
  dataRoot = mkdtempSync(join(tmpdir(), 'map-examples-'));
  const dataDir = join(dataRoot, 'data');
  const warmToml = join(dataRoot, 'warm.toml');
  writeFileSync(warmToml, `[server]\ndata_dir = ${JSON.stringify(dataDir)}\n\n${notesToml}`);
  const warm = await serve(['--config', warmToml, '--listen', '127.0.0.1:0'], COMPILE_WAIT_MS);
  await warm.stop();

  gw = await startGateway({
    dataDir,
    tenants: [
      DEFAULT_TENANTS[0],
      DEFAULT_TENANTS[1],
      { ...DEFAULT_TENANTS[2], toml: `plugin_config = { notes = { max_text_bytes = ${GLOBEX_MAX_TEXT} } }` },
    ],
    extraToml: notesToml,
  });
});
after(async () => {
  await gw?.stop();
  if (dataRoot) rmSync(dataRoot, { recursive: true, force: true });
});

const call = (h, method, params) => h.conn.callExtension(method, params);
const ms = (t0) => Number((performance.now() - t0).toFixed(2));

// Runs first, so that its first call is the tenant's first notes call.
test('notes: first-call and steady-state latency through the gateway', async (t) => {
  const a = await connectAgent(gw, { name: uid('bench'), auth: ACME });
  const key = uid('bench');
  let t0 = performance.now();
  await call(a, 'notes/put', { key, text: 'first' });
  const first = ms(t0);

  const N = 200;
  const samples = [];
  for (let i = 0; i < N; i++) {
    t0 = performance.now();
    await call(a, 'notes/get', { key });
    samples.push(performance.now() - t0);
  }
  samples.sort((x, y) => x - y);
  const q = (p) => samples[Math.min(N - 1, Math.floor(p * N))].toFixed(2);
  t.diagnostic(`notes first call (notes/put) ${first} ms; notes/get over ${N} calls: p50 ${q(0.5)} ms, p90 ${q(0.9)} ms, p99 ${q(0.99)} ms`);
  assert.ok(first < RPC_TIMEOUT_MS, 'the first call answers');
});

test('notes: map/connect advertises the extension; per-tenant config shapes it', async () => {
  const a = await connectAgent(gw, { name: uid('caps'), auth: ACME });
  const g = await connectAgent(gw, { name: uid('caps'), auth: GLOBEX });
  for (const [h, max] of [[a, 4096], [g, GLOBEX_MAX_TEXT]]) {
    const caps = h.connectResult.capabilities;
    assert.deepEqual(caps.notes, { enabled: true, maxTextBytes: max }, `capabilities.notes: ${JSON.stringify(caps.notes)}`);
    const ext = caps.extensions.find((x) => x.uri === 'urn:example:notes:1');
    assert.ok(ext, `capabilities.extensions lists urn:example:notes:1: ${JSON.stringify(caps.extensions)}`);
    assert.equal(ext.name, 'notes');
    assert.equal(ext.version, '1.0.0');
    assert.deepEqual([...ext.methods].sort(), ['notes/delete', 'notes/get', 'notes/list', 'notes/put']);
  }
});

test('notes: put, get, overwrite, delete, and 21000 for a missing note', async () => {
  const a = await connectAgent(gw, { name: uid('writer'), auth: ACME });
  const key = uid('todo');

  const created = await call(a, 'notes/put', { key, text: 'buy milk' });
  assert.equal(created.created, true);
  assert.equal(created.note.key, key);
  assert.equal(created.note.text, 'buy milk');
  assert.equal(created.note.revision, 1);
  assert.equal(created.note.updatedBy, a.id, 'updatedBy is the calling agent');
  assert.ok(!Number.isNaN(Date.parse(created.note.createdAt)), `createdAt is a timestamp: ${created.note.createdAt}`);

  const got = await call(a, 'notes/get', { key });
  assert.deepEqual(got.note, created.note);

  const updated = await call(a, 'notes/put', { key, text: 'buy oat milk ✓' });
  assert.equal(updated.created, false);
  assert.equal(updated.note.revision, 2);
  assert.equal(updated.note.createdAt, created.note.createdAt, 'createdAt survives an overwrite');
  assert.equal((await call(a, 'notes/get', { key })).note.text, 'buy oat milk ✓');

  assert.deepEqual(await call(a, 'notes/delete', { key }), { deleted: true, key });

  const err = await rejectsWithCode(call(a, 'notes/get', { key }), E.NOTE_NOT_FOUND, 'get after delete');
  assert.equal(err.data?.key, key, `error data names the key: ${JSON.stringify(err.data)}`);
  await rejectsWithCode(call(a, 'notes/delete', { key }), E.NOTE_NOT_FOUND, 'delete twice');
});

test('notes: list by prefix, in key order, with limit and nextCursor', async () => {
  const a = await connectAgent(gw, { name: uid('lister'), auth: ACME });
  const p = `${uid('list')}/`;
  const keys = ['c', 'a', 'e', 'b', 'd'].map((k) => p + k);
  for (const key of keys) await call(a, 'notes/put', { key, text: `note ${key}` });
  await call(a, 'notes/put', { key: `${uid('other')}/a`, text: 'not in the prefix' });

  const all = await call(a, 'notes/list', { prefix: p });
  assert.deepEqual(all.notes.map((n) => n.key), [...keys].sort(), 'every note of the prefix, in key order');
  assert.equal(all.nextCursor, undefined, 'no cursor on the last page');

  const page1 = await call(a, 'notes/list', { prefix: p, limit: 2 });
  assert.deepEqual(page1.notes.map((n) => n.key), [p + 'a', p + 'b']);
  assert.equal(page1.nextCursor, p + 'b');
  const page2 = await call(a, 'notes/list', { prefix: p, limit: 2, after: page1.nextCursor });
  assert.deepEqual(page2.notes.map((n) => n.key), [p + 'c', p + 'd']);
  const page3 = await call(a, 'notes/list', { prefix: p, limit: 2, after: page2.nextCursor });
  assert.deepEqual(page3.notes.map((n) => n.key), [p + 'e']);
  assert.equal(page3.nextCursor, undefined);

  const none = await call(a, 'notes/list', { prefix: uid('empty') });
  assert.deepEqual(none, { notes: [] });
});

test('notes: invalid params are -32602, text over the tenant limit is 21002', async () => {
  const a = await connectAgent(gw, { name: uid('bad'), auth: ACME });
  const g = await connectAgent(gw, { name: uid('bad'), auth: GLOBEX });
  await rejectsWithCode(call(a, 'notes/get', {}), E.INVALID_PARAMS, 'missing key');
  await rejectsWithCode(call(a, 'notes/put', { key: '', text: 'x' }), E.INVALID_PARAMS, 'empty key');
  await rejectsWithCode(call(a, 'notes/put', { key: 'k', text: 42 }), E.INVALID_PARAMS, 'text not a string');
  await rejectsWithCode(call(a, 'notes/put', { key: 'x'.repeat(257), text: 'x' }), E.INVALID_PARAMS, 'key over 256 bytes');
  await rejectsWithCode(call(a, 'notes/list', { limit: 0 }), E.INVALID_PARAMS, 'limit 0');
  await rejectsWithCode(call(a, 'notes/list', { limit: 101 }), E.INVALID_PARAMS, 'limit over 100');
  await rejectsWithCode(call(a, 'notes/list', { prefix: 7 }), E.INVALID_PARAMS, 'prefix not a string');

  // globex allows 64 bytes, acme 4096: the tenant's plugin_config wins.
  const text = 'x'.repeat(GLOBEX_MAX_TEXT + 1);
  const err = await rejectsWithCode(call(g, 'notes/put', { key: uid('big'), text }), E.TEXT_TOO_LARGE, 'globex over its limit');
  assert.equal(err.data?.maxTextBytes, GLOBEX_MAX_TEXT, JSON.stringify(err.data));
  const ok = await call(a, 'notes/put', { key: uid('big'), text });
  assert.equal(ok.note.text, text, 'the same text fits acme');
});

test('notes: each tenant has its own notes', async () => {
  const a = await connectAgent(gw, { name: uid('acme'), auth: ACME });
  const g = await connectAgent(gw, { name: uid('globex'), auth: GLOBEX });
  const d = await connectAgent(gw, { name: uid('anon') }); // the anonymous tenant "default"
  const p = `${uid('iso')}/`;

  await call(a, 'notes/put', { key: `${p}plan`, text: 'acme plan' });
  await rejectsWithCode(call(g, 'notes/get', { key: `${p}plan` }), E.NOTE_NOT_FOUND, 'globex reads acme key');
  await rejectsWithCode(call(d, 'notes/get', { key: `${p}plan` }), E.NOTE_NOT_FOUND, 'default reads acme key');
  assert.deepEqual((await call(g, 'notes/list', { prefix: p })).notes, [], 'globex lists nothing of acme');
  await rejectsWithCode(call(g, 'notes/delete', { key: `${p}plan` }), E.NOTE_NOT_FOUND, 'globex deletes acme key');

  // The same key in another tenant is another note.
  const gn = await call(g, 'notes/put', { key: `${p}plan`, text: 'globex plan' });
  assert.equal(gn.created, true, 'globex creates its own note under the same key');
  assert.equal((await call(a, 'notes/get', { key: `${p}plan` })).note.text, 'acme plan');
  assert.equal((await call(g, 'notes/get', { key: `${p}plan` })).note.text, 'globex plan');
  assert.deepEqual((await call(a, 'notes/list', { prefix: p })).notes.map((n) => n.text), ['acme plan']);
});

test('notes: writes emit notes.changed to the tenant\'s subscribers only', async () => {
  const a = await connectAgent(gw, { name: uid('writer'), auth: ACME });
  const watchAcme = await connectClient(gw, { name: uid('watch'), auth: ACME });
  const watchGlobex = await connectClient(gw, { name: uid('watch'), auth: GLOBEX });
  const subA = await watchAcme.conn.subscribe({ eventTypes: ['notes.changed'] });
  const subG = await watchGlobex.conn.subscribe({ eventTypes: ['notes.changed'] });
  const key = uid('evt');
  const mine = (ev) => ev.type === 'notes.changed' && ev.data?.key === key;

  await call(a, 'notes/put', { key, text: 'one' });
  await call(a, 'notes/put', { key, text: 'two' });
  await call(a, 'notes/delete', { key });
  await rejectsWithCode(call(a, 'notes/delete', { key }), E.NOTE_NOT_FOUND, 'failed delete');

  const evs = (await watchAcme.tap.waitForEvents(subA.id, mine, 3)).map((p) => p.event);
  assert.deepEqual(evs.map((e) => e.data), [
    { action: 'put', key, revision: 1, created: true },
    { action: 'put', key, revision: 2, created: false },
    { action: 'delete', key },
  ]);
  await quietPeriod();
  assert.equal(watchAcme.tap.events(subA.id).filter((p) => mine(p.event)).length, 3, 'a failed delete emits nothing');
  assert.equal(watchGlobex.tap.events(subG.id).length, 0, 'globex sees no acme event');
});

// ---------------------------------------------------------------------------
// examples/two-agents
// ---------------------------------------------------------------------------

test('two-agents/hello.mjs: alice messages bob, bob replies, exit 0', async () => {
  assert.ok(
    existsSync(join(EXAMPLES, 'two-agents', 'node_modules', '@multi-agent-protocol', 'sdk')),
    'examples/two-agents has no node_modules: run (cd examples/two-agents && npm ci)',
  );
  const { stdout } = await promisify(execFile)(process.execPath, [HELLO, gw.url], { timeout: 20_000 });
  assert.match(stdout, /^connected to ws:\/\/127\.0\.0\.1:\d+\/map: alice is agent-\S+, bob is agent-\S+$/m);
  assert.match(stdout, /^bob {3}<- \{"text":"hello bob"\} from agent-/m);
  assert.match(stdout, /^bob {3}-> reply msg-\S+ delivered to \["agent-/m);
  assert.match(stdout, /^alice <- \{"text":"hi alice, bob here"\} from agent-\S+ \(correlationId msg-\S+\)$/m);
  assert.match(stdout, /^ok$/m);

  // MAP_API_KEY puts both agents in that tenant.
  const acme = await promisify(execFile)(process.execPath, [HELLO], {
    timeout: 20_000,
    env: { ...process.env, MAP_URL: gw.url, MAP_API_KEY: 'acme-key' },
  });
  assert.match(acme.stdout, /^ok$/m);
});

// ---------------------------------------------------------------------------
// examples/multi-tenant
// ---------------------------------------------------------------------------

test('multi-tenant/gateway.toml starts; each tenant sees its own plugins; credentials are required', async () => {
  for (const p of ['mail', 'trajectory']) {
    const wasm = join(ROOT, 'plugins', 'dist', `${p}.wasm`);
    assert.ok(existsSync(wasm), `${wasm} is missing: run scripts/build-plugins.sh`);
  }
  const dataDir = join(dataRoot, 'multi-tenant');
  const mt = await serve(['--config', MULTI_TENANT_TOML, '--listen', '127.0.0.1:0', '--data-dir', dataDir], 60_000);
  const sockets = [];
  const connect = async (auth) => {
    const ws = new WebSocket(`ws://127.0.0.1:${mt.port}/map`);
    sockets.push(ws);
    await waitForOpen(ws, 5000);
    const conn = new ClientConnection(websocketStream(ws), { defaultTimeout: RPC_TIMEOUT_MS });
    return { conn, result: await conn.connect({ auth }) };
  };
  const uris = (r) => r.capabilities.extensions.map((x) => x.uri).filter((u) => /mail|trajectory/.test(u)).sort();
  try {
    const acme = await connect({ method: 'bearer', token: 'acme-token' });
    assert.deepEqual(uris(acme.result), ['urn:map:ext:mail:1'], JSON.stringify(acme.result.capabilities.extensions));
    await rejectsWithCode(acme.conn.callExtension('trajectory/list', {}), -32601, 'trajectory is not enabled for acme');

    const globex = await connect({ method: 'api-key', credential: 'globex-key' });
    assert.deepEqual(uris(globex.result), ['urn:map:ext:mail:1', 'urn:map:ext:trajectory:1'], JSON.stringify(globex.result.capabilities.extensions));
    const ci = await connect({ method: 'bearer', token: 'globex-ci-token' });
    assert.equal(ci.result.capabilities.trajectory?.enabled, true, 'the second bearer token also leads to globex');

    const anon = await connect(undefined);
    assert.ok(anon.result.authRequired, `no anonymous tenant: ${JSON.stringify(anon.result)}`);
  } finally {
    for (const ws of sockets) ws.terminate();
    await mt.stop();
  }
});
