// The UAP hub plugin (plugins/uap) seen from MAP with the real SDK client:
// jobs submitted with callExtension, watched through a subscription to
// uap.job.*, and run by an execution agent written with Python grpcio
// (tests/grpc/uap_worker.py) over the gateway's gRPC listener.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { startGateway, connectClient, rejectsWithCode, DEFAULT_TENANTS, quietPeriod } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const UAP_WASM = process.env.UAP_WASM ?? join(ROOT, 'plugins', 'dist', 'uap.wasm');
const PYTHON = process.env.MAP_TEST_PYTHON ?? join(ROOT, 'target', 'pyenv', 'bin', 'python');
const WAIT = 10_000;
const ACME = { method: 'api-key', credential: 'acme-key' };
const GLOBEX = { method: 'api-key', credential: 'globex-key' };

let gw;
let worker;

/** Start the grpcio worker for `type` in tenant acme; resolves with its client id. */
function startWorker(type) {
  const proc = spawn(PYTHON, [join(ROOT, 'tests', 'grpc', 'uap_worker.py'), `127.0.0.1:${gw.port}`, 'acme-key', type], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: proc.stdout });
    lines.on('line', (line) => {
      const m = /^listening (\S+)$/.exec(line.trim());
      if (m) resolve({ proc, clientId: m[1] });
    });
    proc.on('exit', (code) => reject(new Error(`uap_worker exited (${code}): ${stderr}`)));
  });
}

before(async () => {
  assert.ok(existsSync(UAP_WASM), `${UAP_WASM} is missing: run scripts/build-plugins.sh`);
  assert.ok(existsSync(PYTHON), `${PYTHON} is missing: run scripts/setup.sh --tests (it installs grpcio)`);
  gw = await startGateway({
    tenants: DEFAULT_TENANTS,
    extraToml: `[plugins.uap]\npath = ${JSON.stringify(UAP_WASM)}\nmode = "singleton"\ndeadline_ms = 5000\nconfig = { acceptanceTimeoutMs = 2000 }\n`,
  });
  worker = await startWorker('interop');
});

after(async () => {
  worker?.proc.stdin.end();
  worker?.proc.kill();
  await gw?.stop();
});

const call = (h, method, params) => h.conn.callExtension(method, params);

test('map/connect advertises the UAP hub', async () => {
  const c = await connectClient(gw, { auth: ACME });
  assert.deepEqual(c.connectResult.capabilities['x-uap'], { enabled: true, grpcService: 'uap.v1.AgentHub' });
  assert.equal(c.connectResult.capabilities.uap, undefined, 'the group is x-uap');
  const ext = c.connectResult.capabilities.extensions.find((e) => e.methods?.includes('uap/submit'));
  // Experimental: an x- name and URI, never a urn:map:ext: one.
  assert.equal(ext.uri, 'x-uap:1');
  assert.equal(ext.name, 'x-uap');
  assert.deepEqual([...ext.methods].sort(), ['uap/agents', 'uap/cancel', 'uap/get', 'uap/list', 'uap/submit']);
});

test('a job submitted over MAP runs on a grpcio agent, and its events arrive in order', async () => {
  const watcher = await connectClient(gw, { auth: ACME });
  const all = await watcher.conn.subscribe({ eventTypes: ['uap.job.*'] });
  const c = await connectClient(gw, { auth: ACME });
  const { agents } = await call(c, 'uap/agents', {});
  assert.ok(agents.some((a) => a.clientId === worker.clientId && a.available && a.capabilities[0].test.type === 'interop'), JSON.stringify(agents));

  const data = Buffer.from('print("hello")\n').toString('base64');
  const { job } = await call(c, 'uap/submit', {
    kind: 'test', type: 'interop',
    payloads: [{ type: 'script', attachment: { name: 'hello.py', mimeType: 'text/x-python', data }, metadata: { lang: 'python' } }],
  });
  assert.equal(job.kind, 'test');
  const byJob = await watcher.conn.subscribe({ uap: { jobId: job.id } });
  const mine = (e) => e.data?.jobId === job.id;
  await watcher.tap.waitForEvents(all.id, (e) => mine(e) && e.type === 'uap.job.completed', 1, WAIT);
  await quietPeriod();
  const types = watcher.tap.events(all.id).map((p) => p.event).filter(mine).map((e) => e.type);
  assert.deepEqual(types, ['uap.job.submitted', 'uap.job.proposed', 'uap.job.status', 'uap.job.status', 'uap.job.telemetry', 'uap.job.completed'], types.join(', '));
  const events = watcher.tap.events(all.id).map((p) => p.event).filter(mine);
  assert.equal(events[1].data.agent, worker.clientId);
  assert.equal(events[3].data.state, 'TEST_STATE_RUNNING');
  assert.equal(events[4].data.telemetry.message, 'checked hello.py');
  assert.equal(events[5].data.job.result.reports[0].name, 'hello.py');
  // The filter on jobId sees the events of this job that came after it was made.
  assert.ok(watcher.tap.events(byJob.id).map((p) => p.event).every(mine));

  const got = await call(c, 'uap/get', { jobId: job.id });
  assert.equal(got.job.status, 'completed');
  assert.equal(got.job.result.status.state, 'TEST_STATE_COMPLETED');
  assert.deepEqual(got.history.map((h) => h.status).slice(0, 3), ['queued', 'proposed', 'running']);
  const listed = await call(c, 'uap/list', { status: 'completed' });
  assert.ok(listed.jobs.some((j) => j.id === job.id));
});

test('payload metadata reaches the agent as submitted, nulls and all, and comes back unchanged in the result', async () => {
  const c = await connectClient(gw, { auth: ACME });
  const sub = await c.conn.subscribe({ eventTypes: ['uap.job.completed'] });
  // Every kind of JSON value, nested; the two doubles are ones a best-effort parser reads one bit off.
  const metadata = {
    s: 'text', empty: '', n: null, yes: true, no: false, i: 42, neg: -7, zero: 0, frac: 0.011399999999999999, tiny: -1.7969314742435888e-9,
    list: [1, 'two', null, [null, [3.25]], {}, []],
    obj: { nested: { n: null, list: [{ a: null }], deeper: { ok: true } }, empty: {} },
  };
  const data = Buffer.from('{}').toString('base64');
  const { job } = await call(c, 'uap/submit', {
    kind: 'test', type: 'interop',
    payloads: [{ type: 'config', attachment: { name: 'meta.json', mimeType: 'application/json', data }, metadata }],
  });
  const [done] = await c.tap.waitForEvents(sub.id, (e) => e.data?.jobId === job.id, 1, WAIT);
  // The worker echoes what it got, and lists the values it got without a kind.
  const expected = { echo: metadata, unset: [] };
  assert.deepEqual(done.event.data.job.result.summary.metadata, expected);
  assert.deepEqual((await call(c, 'uap/get', { jobId: job.id })).job.result.summary.metadata, expected);
});

test('UAP errors: unknown job, finished job, bad params; another tenant sees nothing', async () => {
  const c = await connectClient(gw, { auth: ACME });
  await rejectsWithCode(call(c, 'uap/get', { jobId: 'job-none' }), 91000, 'unknown job');
  const { job } = await call(c, 'uap/submit', { kind: 'test', type: 'nobody-runs-this' });
  assert.equal((await call(c, 'uap/cancel', { jobId: job.id })).job.status, 'cancelled');
  await rejectsWithCode(call(c, 'uap/cancel', { jobId: job.id }), 91001, 'already cancelled');
  await rejectsWithCode(call(c, 'uap/submit', { kind: 'test' }), -32602, 'no type');
  const other = await connectClient(gw, { auth: GLOBEX });
  assert.deepEqual((await call(other, 'uap/list', {})).jobs, []);
  assert.deepEqual((await call(other, 'uap/agents', {})).agents, []);
});
