// The A2A bridge's outbound direction (plugins/a2a, `a2a/send`): SDK
// AgentConnections are MAP agents that reach A2A agents served by the
// official A2A SDK for Python (tests/a2a/server.py), by a peer name with a
// bearer token from the tenant's configuration or by a card URL, and follow
// the remote tasks through a2a.remote.* events. The remote agent takes each
// step only once a GetTask has shown the one before, so every step shows.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join, dirname } from 'node:path';
import { existsSync, rmSync } from 'node:fs';
import { startGateway, connectAgent, connectClient, pollUntil, rejectsWithCode, DEFAULT_TENANTS } from './harness.mjs';
import { DIST, PYTHON, SERVER, ACME, text, ed25519Keys } from './a2a-sdk.mjs';
const BEARER = 'peer-secret-4711';
const WRONG = 'wrong-secret-0815';
const EVENTS_MS = 15_000;

let gw;
let opts; // the gateway's, for a restart on the same data dir
let killed; // a killed gateway's data dir, removed at the end
let peer; // { proc, base, lines }
let alice;
let bob;
let aliceSub;
const peerKey = ed25519Keys(); // signs the card of the peer's /signed agent
const otherKey = ed25519Keys();

/** Start server.py; resolves once it printed its ready line. */
function startPeer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(PYTHON, [SERVER, '--bearer', BEARER, '--card-key', peerKey.secret], { stdio: ['ignore', 'pipe', 'pipe'] });
    const lines = [];
    let stderr = '';
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (d) => { stderr = (stderr + d).slice(-20_000); });
    proc.once('exit', (code) => reject(new Error(`server.py exited (${code}) before it was ready:\n${stderr}`)));
    createInterface({ input: proc.stdout }).on('line', (line) => {
      const msg = JSON.parse(line);
      lines.push(msg);
      if (msg.ready) resolve({ proc, base: msg.ready, lines, stderr: () => stderr });
    });
  });
}

const send = (h, params) => h.conn.callExtension('a2a/send', params);

/** The a2a.remote.* events `h` got for a remote task, once `done(events)` holds. */
function remoteEvents(h, sub, taskId, done, what) {
  return h.tap.waitUntil(() => {
    const evs = h.tap.events(sub.id).map((p) => p.event).filter((e) => e.data?.remoteTaskId === taskId);
    return done(evs) ? evs : null;
  }, EVENTS_MS, what);
}

const ended = (evs) => evs.some((e) => e.type === 'a2a.remote.status' && e.data.following === false);

/** An event as [type, state, what it carries]. */
const brief = (e) => [e.type.replace('a2a.remote.', ''), e.data.state, e.data.message ? text(e.data.message) : e.data.artifact?.artifactId ?? e.data.following];

before(async () => {
  assert.ok(existsSync(join(DIST, 'a2a.wasm')), `${DIST}/a2a.wasm is missing: run scripts/build-plugins.sh`);
  assert.ok(existsSync(PYTHON), `${PYTHON} is missing: run scripts/setup.sh --tests`);
  peer = await startPeer();
  const tenant = (id, config) => ({ ...DEFAULT_TENANTS.find((t) => t.id === id), toml: ['plugins = ["a2a"]', '[tenants.plugin_config.a2a]', ...config].join('\n') });
  opts = {
    tenants: [
      { id: 'default' },
      tenant('acme', [
        'pollMs = 150',
        `peers.reporter = { url = "${peer.base}/secure", bearer = "${BEARER}" }`,
        `peers.wrongkey = { url = "${peer.base}/secure/.well-known/agent-card.json", headers = { Authorization = "Bearer ${WRONG}" } }`,
        'peers.broken = { url = "ftp://127.0.0.1/x" }',
        `peers.signed = { url = "${peer.base}/signed", cardSigners = ["${otherKey.public}", "${peerKey.public}"] }`,
        `peers.unsigned = { url = "${peer.base}/public", cardSigners = ["${peerKey.public}"] }`,
        `peers.otherkey = { url = "${peer.base}/signed", cardSigners = ["${otherKey.public}"] }`,
        'peers.badsigner = { url = "http://127.0.0.1:1/x", cardSigners = ["ed25519:AAAA"] }',
      ]),
      tenant('globex', ['pollMs = 150', 'followMs = 3000']),
    ],
    extraToml: [
      '[plugins.a2a]',
      `path = ${JSON.stringify(join(DIST, 'a2a.wasm'))}`,
      'http_prefix = "/a2a"',
      'deadline_ms = 20000',
      'outbound_hosts = ["127.0.0.1"]',
    ].join('\n'),
  };
  gw = await startGateway(opts);
  alice = await connectAgent(gw, { name: 'Alice', agentId: 'alice', auth: ACME });
  bob = await connectAgent(gw, { name: 'Bob', agentId: 'bob', auth: ACME });
  aliceSub = await alice.conn.subscribe({ eventTypes: ['a2a.remote.*'] });
});

after(async () => {
  await gw?.stop();
  if (killed) rmSync(dirname(killed), { recursive: true, force: true });
  if (peer && peer.proc.exitCode === null) {
    const exited = new Promise((r) => peer.proc.once('exit', r));
    peer.proc.kill('SIGTERM');
    await exited;
  }
});

test('by peer name with its bearer: the remote task steps arrive in order, each once, and a2a/remote/get shows the record', async () => {
  const answer = await send(alice, { to: 'reporter', message: 'report q3' });
  assert.equal(answer.state, 'submitted');
  assert.equal(answer.task.id, answer.taskId);
  assert.equal(answer.task.status.state, 'TASK_STATE_SUBMITTED');
  assert.equal(text(answer.task.history[0]), 'report q3');
  const evs = await remoteEvents(alice, aliceSub, answer.taskId, ended, 'the remote task to end');
  assert.deepEqual(evs.map(brief), [
    ['status', 'submitted', true],
    ['message', 'working', 'on it'],
    ['status', 'working', true],
    ['artifact', 'working', 'a1'],
    ['message', 'completed', 'done'],
    ['status', 'completed', false],
  ]);
  assert.deepEqual(evs[3].data.artifact, { artifactId: 'a1', name: 'summary', parts: [{ text: 'line 1' }] });
  for (const e of evs) {
    assert.deepEqual([e.data.peer, e.data.agentId, e.data.contextId], ['reporter', 'alice', answer.contextId]);
    assert.equal(e.data.message?.role ?? 'ROLE_AGENT', 'ROLE_AGENT');
  }
  // What the peer saw: the bearer on every request, A2A-Version 1.0, a send that returns at once.
  const secure = peer.lines.filter((l) => l.path?.startsWith('/secure'));
  assert.ok(secure.length >= 5 && secure.every((l) => l.authorized), JSON.stringify(secure));
  assert.ok(secure.filter((l) => l.http === 'POST').every((l) => l.a2aVersion === '1.0'));
  assert.deepEqual(peer.lines.find((l) => l.rpc === 'SendMessage' && l.text === 'report q3'), { rpc: 'SendMessage', text: 'report q3', taskId: null, returnImmediately: true });

  const rec = await alice.conn.callExtension('a2a/remote/get', { taskId: answer.taskId });
  assert.equal(rec.state, 'completed');
  assert.equal(rec.status.state, 'TASK_STATE_COMPLETED');
  assert.equal(text(rec.status.message), 'done');
  assert.deepEqual(rec.artifacts, [evs[3].data.artifact]);
  assert.deepEqual([rec.peer, rec.agentId, rec.contextId, rec.following, rec.nextPollAt, rec.failures], ['reporter', 'alice', answer.contextId, false, null, 0]);
  const err = await rejectsWithCode(bob.conn.callExtension('a2a/remote/get', { taskId: answer.taskId }), 93001, "another agent's remote task");
  assert.equal(err.data.details.taskId, answer.taskId);
  await rejectsWithCode(alice.conn.callExtension('a2a/remote/get', { taskId: 'no-such-task' }), 93017, 'an unknown remote task');
  // The peer's credentials are in no answer, event or record.
  assert.ok(!JSON.stringify([answer, evs, rec]).includes(BEARER));
});

test('by card URL: a direct message is the answer and one a2a.remote.message event; the card is fetched once', async () => {
  const cardUrl = `${peer.base}/public/.well-known/agent-card.json`;
  const answer = await send(alice, { to: cardUrl, message: [{ text: 'hello' }] });
  assert.deepEqual([answer.taskId, answer.state, answer.message.role, text(answer.message)], [null, null, 'ROLE_AGENT', 'hello back']);
  assert.equal(answer.contextId, answer.message.contextId);
  const [ev] = await alice.tap.waitUntil(() => {
    const evs = alice.tap.events(aliceSub.id).map((p) => p.event).filter((e) => e.data?.message?.messageId === answer.message.messageId);
    return evs.length ? evs : null;
  }, EVENTS_MS, 'the message event');
  assert.equal(ev.type, 'a2a.remote.message');
  assert.deepEqual([ev.data.peer, ev.data.agentId, ev.data.contextId, ev.data.remoteTaskId], [cardUrl, 'alice', answer.contextId, null]);
  // The agent's base URL finds the same card, from the cache.
  const again = await send(alice, { to: `${peer.base}/public`, message: 'hello', contextId: answer.contextId });
  assert.equal(text(again.message), 'hello back');
  assert.equal(peer.lines.filter((l) => l.http === 'GET' && l.path === '/public/.well-known/agent-card.json').length, 1);
});

test('a remote task that fails, and one continued from input-required to completed', async () => {
  const failed = await send(alice, { to: 'reporter', message: 'fail' });
  const evs = await remoteEvents(alice, aliceSub, failed.taskId, ended, 'the failing task to end');
  assert.deepEqual(evs.map(brief), [['status', 'submitted', true], ['message', 'failed', 'cannot do that'], ['status', 'failed', false]]);
  assert.equal((await alice.conn.callExtension('a2a/remote/get', { taskId: failed.taskId })).state, 'failed');

  const asked = await send(alice, { to: 'reporter', message: 'ask' });
  await remoteEvents(alice, aliceSub, asked.taskId, (e) => e.some((x) => x.data.state === 'input-required' && x.type === 'a2a.remote.status'), 'input-required');
  const next = await send(alice, { to: 'reporter', message: 'the second', taskId: asked.taskId, contextId: asked.contextId });
  assert.deepEqual([next.taskId, next.state, text(next.task.status.message)], [asked.taskId, 'completed', 'ok: the second']);
  const all = await remoteEvents(alice, aliceSub, asked.taskId, ended, 'the continued task to end');
  assert.deepEqual(all.map(brief), [
    ['status', 'submitted', true],
    ['message', 'input-required', 'which one?'],
    ['status', 'input-required', true],
    ['message', 'completed', 'ok: the second'],
    ['status', 'completed', false],
  ]);
  const rec = await alice.conn.callExtension('a2a/remote/get', { taskId: asked.taskId });
  assert.deepEqual([rec.state, rec.following], ['completed', false]);
});

test('failures: unknown peers, hosts not in outbound_hosts, bad cards, refused credentials, remote errors, no answer', async () => {
  const unknown = await rejectsWithCode(send(alice, { to: 'nobody', message: 'hi' }), 93010, 'an unknown peer');
  assert.match(unknown.message, /no A2A peer "nobody"/);
  assert.match((await rejectsWithCode(send(alice, { to: 'broken', message: 'hi' }), 93010, 'a misconfigured peer')).message, /misconfigured/);

  const port = new URL(peer.base).port;
  const denied = await rejectsWithCode(send(alice, { to: `http://localhost:${port}/public`, message: 'hi' }), 93011, 'a host not in outbound_hosts');
  assert.match(denied.message, /outbound_hosts/);
  assert.equal(denied.data.details.host, `localhost:${port}`);

  assert.match((await rejectsWithCode(send(alice, { to: `${peer.base}/grpc-only`, message: 'hi' }), 93013, 'a card without JSON-RPC')).message, /no JSON-RPC interface/);
  assert.match((await rejectsWithCode(send(alice, { to: `${peer.base}/junk`, message: 'hi' }), 93013, 'a malformed card')).message, /name must be a string/);
  assert.equal((await rejectsWithCode(send(alice, { to: `${peer.base}/nothing-here`, message: 'hi' }), 93013, 'no card')).data.details.status, 404);

  const refused = await rejectsWithCode(send(alice, { to: 'wrongkey', message: 'hi' }), 93015, 'a wrong bearer');
  assert.equal(refused.data.details.status, 401);
  assert.ok(peer.lines.some((l) => l.path === '/secure/.well-known/agent-card.json' && !l.authorized), 'the peer saw the wrong credentials');
  assert.ok(!JSON.stringify([refused.message, refused.data]).includes(WRONG));

  const remote = await rejectsWithCode(send(alice, { to: 'reporter', message: 'hi', taskId: 'no-such-task' }), 93014, 'a remote JSON-RPC error');
  assert.equal(remote.data.details.code, -32001);
  assert.match(remote.data.details.message, /not found/);

  const down = await rejectsWithCode(send(alice, { to: 'http://127.0.0.1:1/agent', message: 'hi' }), 93012, 'a peer that does not answer');
  assert.equal(down.data.retryable, true);
});

test('signed cards (A2A 8.4): a peer whose config names cardSigners is reached only when one of them signed its card (the SDK signer)', async () => {
  const answer = await send(alice, { to: 'signed', message: 'hello' });
  assert.equal(text(answer.message), 'hello back');
  assert.match((await rejectsWithCode(send(alice, { to: 'unsigned', message: 'hello' }), 93013, 'an unsigned card')).message, /not signed/);
  assert.match((await rejectsWithCode(send(alice, { to: 'otherkey', message: 'hello' }), 93013, 'a card signed by another key')).message, /no signature/);
  assert.match((await rejectsWithCode(send(alice, { to: 'badsigner', message: 'hello' }), 93010, 'a signer that is not a key')).message, /cardSigners/);
});

test('bad params are refused with -32602, as is a caller without an agent', async () => {
  const bad = [
    {},
    { to: 'reporter' },
    { to: 'reporter', message: 'hi', priority: 1 },
    { to: 'reporter', message: 42 },
    { to: 'reporter', message: '' },
    { to: 'reporter', message: [] },
    { to: 'reporter', message: [{ text: 'a', data: {} }] },
    { to: 'reporter', message: [{ url: 'file:///etc/passwd' }] },
    { to: 'reporter', message: 'hi', contextId: 'not an id' },
    { to: 'reporter', message: 'hi', taskId: 7 },
    { to: 'reporter', message: 'hi', from: 'bob' },
    { to: '', message: 'hi' },
    { to: 'http://user:pw@127.0.0.1/agent', message: 'hi' },
  ];
  for (const params of bad) await rejectsWithCode(send(alice, params), -32602, JSON.stringify(params));
  for (const params of [{}, { taskId: 5 }, { taskId: 'x', more: 1 }]) {
    await rejectsWithCode(alice.conn.callExtension('a2a/remote/get', params), -32602, JSON.stringify(params));
  }
  const client = await connectClient(gw, { auth: ACME });
  assert.match((await rejectsWithCode(client.conn.callExtension('a2a/send', { to: 'reporter', message: 'hi' }), -32602, 'no agent')).message, /register/);
  // `from` names one of the caller's own agents.
  const own = await send(bob, { to: 'reporter', message: 'hello', from: 'bob' });
  assert.equal(text(own.message), 'hello back');
});

test('a task that does not end is followed for followMs, then the agent is told it is no longer followed', async () => {
  const g = await connectAgent(gw, { name: 'G', agentId: 'g-agent', auth: { method: 'api-key', credential: 'globex-key' } });
  const sub = await g.conn.subscribe({ eventTypes: ['a2a.remote.*'] });
  await rejectsWithCode(send(g, { to: 'reporter', message: 'hi' }), 93010, "acme's peers are not globex's");
  const answer = await send(g, { to: `${peer.base}/public`, message: 'hold' });
  const evs = await remoteEvents(g, sub, answer.taskId, ended, 'following to stop');
  assert.deepEqual(evs.map(brief), [['status', 'submitted', true], ['status', 'working', true], ['status', 'working', false]]);
  assert.match(evs[2].data.reason, /followMs/);
  const rec = await g.conn.callExtension('a2a/remote/get', { taskId: answer.taskId });
  assert.deepEqual([rec.state, rec.following, rec.nextPollAt], ['working', false, null]);
  assert.match(rec.stopped, /followMs/);
  await rejectsWithCode(alice.conn.callExtension('a2a/remote/get', { taskId: answer.taskId }), 93017, "another tenant's remote task");
});

test('no change was reported twice', async () => {
  const seen = new Set();
  for (const { event: e } of alice.tap.events(aliceSub.id)) {
    const key = JSON.stringify([e.data.remoteTaskId, e.type, e.data.state, e.data.message?.messageId, e.data.artifact?.artifactId]);
    assert.ok(!seen.has(key), `reported twice: ${key}`);
    seen.add(key);
  }
  assert.ok(seen.size >= 16, `${seen.size} events`);
});

test('following survives a kill -9: after a restart on the same data dir the task is followed to its end', async () => {
  const answer = await send(alice, { to: 'reporter', message: 'report after restart' });
  await remoteEvents(alice, aliceSub, answer.taskId, (evs) => evs.some((e) => e.data.state === 'working'), 'the task working');
  // The remote agent now waits for a GetTask to show it working: only a poll after the restart moves it on.
  const mark = peer.lines.length;
  await gw.kill();
  killed = gw.dataDir;
  gw = await startGateway({ ...opts, dataDir: killed });
  const again = await connectAgent(gw, { name: 'Alice', agentId: 'alice', auth: ACME });
  const get = () => again.conn.callExtension('a2a/remote/get', { taskId: answer.taskId });
  const rec = await pollUntil(get, (r) => r.state === 'completed', { timeoutMs: EVENTS_MS, what: 'the remote task completed after the restart' });
  assert.deepEqual([rec.following, rec.artifacts.map((a) => a.artifactId), text(rec.status.message)], [false, ['a1'], 'done']);
  assert.ok(peer.lines.slice(mark).some((l) => l.rpc === 'GetTask' && l.id === answer.taskId), 'polled by the restarted gateway');
});
