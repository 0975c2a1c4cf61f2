// The container image (Containerfile, scripts/image.sh) with Podman and the real SDK client:
// built on a base made from Debian's packages (once per machine, cached outside the checkout)
// with the test build of the gateway; run as its non-root user with /data a volume and the
// health check answering, on a read-only root; two SDK agents exchange a message through it; SIGTERM stops it
// gracefully within drain_secs; two containers on the machine's PostgreSQL and NATS
// (cluster mode, settings by MAP_GATEWAY__ variables) carry a message across nodes.
//
// Needs podman (scripts/setup.sh --tests installs it with runc and mmdebstrap), PostgreSQL and
// NATS with JetStream (as cluster.test.mjs). Containers use the host's network.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { createServer } from 'node:net';
import { chownSync, mkdirSync, readFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  connectAgent, connectClient, pollUntil, uid, requireNats, requirePostgres, deleteNatsStreams,
  CLUSTER_POSTGRES_URL, CLUSTER_NATS_URL,
} from './harness.mjs';

const run = promisify(execFile);
const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const IMAGE = 'localhost/map-gateway:test';
/** The image's user (Containerfile: USER). */
const UID = 10001;
/** Compiled plugins shared by the test containers, owned by the image's user. */
const CACHE = join(ROOT, 'target', 'container-plugin-cache');
const DRAIN_SECS = 3;

/** A port free on loopback now (containers share the host's network). */
async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * Limits the runtime sets in the container: this process's own, since a runtime without
 * CAP_SYS_RESOURCE may not raise them (Podman's defaults ask 1048576 open files).
 */
function ulimits() {
  const limits = readFileSync('/proc/self/limits', 'utf8');
  const files = /^Max open files\s+(\d+)\s+(\d+)/m.exec(limits);
  return ['--ulimit', `nofile=${files[1]}:${files[2]}`, '--ulimit', 'nproc=16384:16384'];
}

/** `podman run` in the foreground: resolves once the gateway prints its listening line. */
async function startContainer({ name, env = {} }) {
  const port = await freePort();
  const vars = { MAP_GATEWAY__SERVER__LISTEN: `127.0.0.1:${port}`, MAP_GATEWAY__SERVER__CACHE_DIR: '/cache', MAP_GATEWAY__SERVER__DRAIN_SECS: String(DRAIN_SECS), ...env };
  // A read-only root, as the Kubernetes manifests run it: the gateway writes only to /data and /cache.
  const args = ['run', '--rm', '--read-only', '--name', name, '--network', 'host', ...ulimits(), '-v', `${CACHE}:/cache`];
  for (const [k, v] of Object.entries(vars)) args.push('-e', `${k}=${v}`);
  const proc = spawn('podman', [...args, IMAGE], { stdio: ['ignore', 'pipe', 'pipe'] });
  let logs = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => { logs = (logs + d).slice(-20_000); });
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`${name} printed no listening line within 120 s:\n${out}\n${logs}`)), 120_000);
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (d) => {
      out += d;
      if (out.includes(`map-gateway listening on http://127.0.0.1:${port}`)) { clearTimeout(timer); resolve(); }
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`${name} exited (${code}) before listening:\n${out}\n${logs}`)); });
  });
  const connections = new Set();
  return {
    name,
    port,
    url: `ws://127.0.0.1:${port}/map`,
    baseUrl: `http://127.0.0.1:${port}`,
    wsUrl: (path = '/map') => `ws://127.0.0.1:${port}${path}`,
    connections,
    exited,
    logs: () => logs,
    async stop() {
      for (const ws of connections) { try { ws.terminate?.(); } catch { /* gone */ } }
      await run('podman', ['rm', '-f', '-v', '-t', '0', name]).catch(() => {});
      await exited;
    },
  };
}

before(async () => {
  mkdirSync(CACHE, { recursive: true });
  chownSync(CACHE, UID, UID);
  // The release folder of the test build, the Debian base made once per machine, then an image
  // build of a few seconds.
  await run(join(ROOT, 'scripts', 'image.sh'), ['--debug', '--debian-base', '--tag', IMAGE], { cwd: ROOT, maxBuffer: 64 << 20 });
}, { timeout: 900_000 });

describe('the image, one container', () => {
  let gw;
  before(async () => { gw = await startContainer({ name: uid('map-gw-test') }); }, { timeout: 180_000 });
  after(async () => { await gw?.stop(); });

  test('runs as a non-root user with /data a volume, and reports healthy', async () => {
    const { stdout } = await run('podman', ['inspect', gw.name, '--format', '{{.Config.User}} {{range .Mounts}}{{.Destination}} {{end}}']);
    assert.match(stdout.trim(), new RegExp(`^${UID}:${UID} .*/data`), `user and mounts: ${stdout}`);
    const { stdout: top } = await run('podman', ['top', gw.name, 'huser', 'args']);
    assert.match(top, new RegExp(`${UID}\\s+/usr/local/bin/map-gateway serve`), `the gateway's process: ${top}`);
    // The image's HEALTHCHECK (map-gateway health: GET /readyz), run by the engine.
    const health = await run('podman', ['healthcheck', 'run', gw.name]).then(() => 'healthy', (e) => `unhealthy: ${e.stdout}${e.stderr}`);
    assert.equal(health, 'healthy');
    const { stdout: version } = await run('podman', ['run', '--rm', ...ulimits(), IMAGE, '--version']);
    assert.match(version, /^map-gateway \d+\.\d+\.\d+ \(commit [0-9a-f]{12}(-modified)?, plugin contract map-gateway:plugin@\d+\.\d+\.\d+\)/);
  });

  test('two SDK agents exchange a message through the container; the standard plugins are loaded', async () => {
    const alice = await connectAgent(gw, { name: 'alice' });
    const bob = await connectAgent(gw, { name: 'bob' });
    const marker = uid('hello');
    const sent = await alice.conn.send({ agent: bob.id }, { marker });
    assert.deepEqual(sent.delivered, [bob.id], `map/send through the container: ${JSON.stringify(sent)}`);
    const got = await pollUntil(() => bob.sdkMessages.find((m) => m?.payload?.marker === marker), Boolean, { timeoutMs: 3000, what: 'bob.onMessage' });
    assert.equal(got.from, alice.id);
    const client = await connectClient(gw);
    const names = client.connectResult.capabilities.extensions.map((e) => e.name);
    for (const plugin of ['mail', 'trajectory']) assert.ok(names.includes(plugin), `the signed ${plugin} plugin is loaded: ${JSON.stringify(names)}`);
  });
});

test('SIGTERM: the container drains and exits 0 within drain_secs', { timeout: 180_000 }, async () => {
  const gw = await startContainer({ name: uid('map-gw-term') });
  try {
    const client = await connectClient(gw, { name: 'held-open' });
    const closed = new Promise((resolve) => client.ws.addEventListener('close', (e) => resolve(e.code)));
    const t0 = Date.now();
    await run('podman', ['kill', '--signal', 'TERM', gw.name]);
    const { code } = await gw.exited;
    const took = Date.now() - t0;
    assert.equal(code, 0, `exit status after SIGTERM:\n${gw.logs().slice(-3000)}`);
    assert.ok(took < (DRAIN_SECS + 2) * 1000, `stopped in ${took} ms, drain_secs is ${DRAIN_SECS}`);
    assert.equal(await closed, 1001, 'the open WebSocket is closed with 1001 (going away)');
    assert.match(gw.logs(), /shutting down/);
  } finally {
    await gw.stop();
  }
});

describe('two containers on PostgreSQL and NATS', () => {
  const cluster = uid('container');
  let a;
  let b;
  before(async () => {
    await requireNats();
    await requirePostgres();
    const env = (node) => ({
      MAP_GATEWAY__STORAGE__URL: CLUSTER_POSTGRES_URL,
      MAP_GATEWAY__CLUSTER__NATS: CLUSTER_NATS_URL,
      MAP_GATEWAY__CLUSTER__NAME: cluster,
      MAP_GATEWAY__CLUSTER__NODE: node,
    });
    a = await startContainer({ name: `${cluster}-a`, env: env('a') });
    b = await startContainer({ name: `${cluster}-b`, env: env('b') });
  }, { timeout: 300_000 });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await deleteNatsStreams(cluster);
  });

  test('an SDK client on node a reaches an SDK agent on node b', async () => {
    const agent = await connectAgent(b, { name: 'agent-on-b' });
    const client = await connectClient(a, { name: 'client-on-a' });
    await pollUntil(() => client.conn.listAgents(), (r) => r.agents.some((x) => x.id === agent.id), { timeoutMs: 10_000, what: `agent ${agent.id} listed on node a` });
    const marker = uid('across');
    const sent = await client.conn.send(agent.id, { marker });
    assert.deepEqual(sent.delivered, [agent.id], `map/send on node a: ${JSON.stringify(sent)}`);
    const got = await pollUntil(() => agent.sdkMessages.find((m) => m?.payload?.marker === marker), Boolean, { timeoutMs: 10_000, what: 'the message on node b' });
    assert.equal(got.id, sent.messageId);
    const ready = await (await fetch(`${b.baseUrl}/readyz`)).json();
    assert.equal(ready.status, 'ready');
  });
});
