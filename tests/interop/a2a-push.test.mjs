// The A2A bridge's push notifications, per-sender rate limits, its record
// in mail and its task list for MAP sessions. The official A2A SDK for Python
// (tests/a2a/client.py) sets the configs; a local HTTP endpoint receives the
// notifications.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { startGateway, connectAgent, connectClient, pollUntil, DEFAULT_TENANTS, WAIT_MS } from './harness.mjs';
import { DIST, ACME, runClient, text } from './a2a-sdk.mjs';

let gw;
let hook; // the notification endpoint
let hookUrl;
const pushed = []; // [{path, token, authorization, body}]
const failFirst = new Map(); // path → how many more requests to answer 503
let agent;

const a2a = (args, key = 'acme-key') => runClient(`${gw.baseUrl}/a2a`, key, 'worker', args);

const kind = (u) => Object.keys(u)[0];
const at = (path) => pushed.filter((p) => p.path === path);
const arrived = (path, n) => pollUntil(() => at(path), (l) => l.length >= n, { timeoutMs: WAIT_MS, what: `${n} notifications at ${path}` });

/** The MAP agent: "report" runs a task through working, two artifacts and completed; "hold" keeps it working. */
async function answer(m) {
  const a = m.payload?.a2a;
  if (!a || a.method !== 'SendMessage') return;
  const call = (method, params) => agent.conn.callExtension(method, { taskId: a.taskId, ...params });
  const words = text(a.message) ?? '';
  if (words.startsWith('report')) {
    await call('a2a/task/update', { state: 'working' });
    await call('a2a/task/update', { artifacts: [{ artifactId: 'a1', parts: [{ text: 'part one' }] }] });
    await call('a2a/task/update', { artifacts: [{ artifactId: 'a2', parts: [{ data: { n: 2 } }] }] });
    await call('a2a/reply', { message: { parts: [{ text: 'done' }] } });
  }
  if (words === 'hold') await call('a2a/task/update', { state: 'working' });
}

before(async () => {
  hook = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const left = failFirst.get(req.url) ?? 0;
      if (left > 0) {
        failFirst.set(req.url, left - 1);
        res.writeHead(503).end();
        return;
      }
      pushed.push({ path: req.url, token: req.headers['x-a2a-notification-token'], authorization: req.headers.authorization, body: JSON.parse(body) });
      res.writeHead(200).end();
    });
  });
  await new Promise((r) => hook.listen(0, '127.0.0.1', r));
  hookUrl = `http://127.0.0.1:${hook.address().port}`;
  const acme = DEFAULT_TENANTS.find((t) => t.id === 'acme');
  gw = await startGateway({
    tenants: [
      { id: 'default' },
      {
        ...acme,
        api_keys: ['acme-key', 'acme-key-2'],
        toml: [
          'plugins = ["a2a", "mail"]',
          // Only this address: `localhost` is not allowed, so a config naming it fails.
          'outbound_hosts = { a2a = ["127.0.0.1"] }',
          '[tenants.plugin_config.a2a]',
          'pushRetryBaseMs = 50',
          'pushMaxAttempts = 4',
          'requestsPerMinute = 1000',
        ].join('\n'),
      },
      {
        ...DEFAULT_TENANTS.find((t) => t.id === 'globex'),
        api_keys: ['globex-key', 'globex-key-2'],
        toml: ['plugins = ["a2a"]', '[tenants.plugin_config.a2a]', 'requestsPerMinute = 3'].join('\n'),
      },
    ],
    extraToml: [
      `[plugins.mail]\npath = ${JSON.stringify(join(DIST, 'mail.wasm'))}`,
      `[plugins.a2a]\npath = ${JSON.stringify(join(DIST, 'a2a.wasm'))}\nhttp_prefix = "/a2a"\ndeadline_ms = 20000`,
      '[plugins.a2a.config]\nblockingWaitMs = 15000',
    ].join('\n'),
  });
  agent = await connectAgent(gw, { name: 'Worker', agentId: 'worker', auth: ACME });
  await agent.conn.updateMetadata({ a2a: { skills: [{ id: 'report', name: 'Reports' }] } });
  agent.conn.onMessage((m) => { answer(m).catch(() => {}); });
});

after(async () => {
  await gw?.stop();
  await new Promise((r) => hook?.close(r));
});

test('the card says push notifications are supported', async () => {
  const [card] = await a2a(['card']);
  assert.equal(card.capabilities.pushNotifications, true);
});

test('a config given with the message gets every update of the task, in order, with its token and credentials', async () => {
  const [ev] = await a2a(['send', 'report one', '--push', `${hookUrl}/one`, '--push-token', 'tok-1', '--push-auth', 'Bearer:cred-1']);
  const id = ev.task.id;
  assert.equal(ev.task.status.state, 'TASK_STATE_COMPLETED');
  const got = await arrived('/one', 5);
  assert.deepEqual(got.map((p) => kind(p.body)), ['task', 'statusUpdate', 'artifactUpdate', 'artifactUpdate', 'statusUpdate']);
  assert.equal(got[0].body.task.id, id);
  assert.deepEqual(got.slice(2, 4).map((p) => p.body.artifactUpdate.artifact.artifactId), ['a1', 'a2']);
  assert.equal(got[4].body.statusUpdate.status.state, 'TASK_STATE_COMPLETED');
  assert.equal(text(got[4].body.statusUpdate.status.message), 'done');
  assert.ok(got.every((p) => p.token === 'tok-1' && p.authorization === 'Bearer cred-1'));
});

test('configs on a running task: create, get, list in pages, delete; only the configs left get what follows', async () => {
  const [ev] = await a2a(['send', 'hold', '--immediate']);
  const id = ev.task.id;
  await pollUntil(() => a2a(['get', id]), ([t]) => t.status?.state === 'TASK_STATE_WORKING', { what: 'the task to work' });
  const [kept] = await a2a(['push-set', id, '--push', `${hookUrl}/kept`, '--push-id', 'kept', '--push-token', 'tok-k']);
  assert.deepEqual(kept, { id: 'kept', taskId: id, url: `${hookUrl}/kept`, token: 'tok-k' });
  const [made] = await a2a(['push-set', id, '--push', `${hookUrl}/gone`]);
  assert.ok(made.id, 'an id is made when none is given');
  assert.deepEqual((await a2a(['push-get', id, '--push-id', 'kept']))[0], kept);
  const first = (await a2a(['push-list', id, '--size', '1']))[0];
  assert.equal(first.configs.length, 1);
  const second = (await a2a(['push-list', id, '--size', '1', '--token', first.nextPageToken]))[0];
  assert.deepEqual([...first.configs, ...second.configs].map((c) => c.id).sort(), ['kept', made.id].sort());
  assert.equal(second.nextPageToken ?? '', '');
  assert.deepEqual((await a2a(['push-delete', id, '--push-id', made.id]))[0], { deleted: made.id });
  assert.equal((await a2a(['push-get', id, '--push-id', made.id]))[0].error, 'TaskNotFoundError', 'a config that is gone is not found');
  assert.deepEqual((await a2a(['push-delete', id, '--push-id', made.id]))[0], { deleted: made.id }, 'delete is idempotent (A2A 3.1.10)');
  // Only what happens after a config was made reaches it.
  await agent.conn.callExtension('a2a/task/update', { taskId: id, state: 'completed' });
  const got = await arrived('/kept', 1);
  assert.equal(got.length, 1);
  assert.equal(got[0].body.statusUpdate.status.state, 'TASK_STATE_COMPLETED');
  assert.equal(got[0].token, 'tok-k');
  assert.equal(at('/gone').length, 0);
  // A finished task takes a config too (the specification lists no error for it); nothing more reaches it.
  const [late] = await a2a(['push-set', id, '--push', `${hookUrl}/late`, '--push-id', 'late']);
  assert.deepEqual(late, { id: 'late', taskId: id, url: `${hookUrl}/late` });
  assert.deepEqual((await a2a(['push-get', id, '--push-id', 'late']))[0], late);
  assert.equal((await a2a(['push-set', 'task-none', '--push', `${hookUrl}/x`]))[0].error, 'TaskNotFoundError');
});

test('a failing endpoint is tried again with the same update, and nothing arrives twice or out of order', async () => {
  failFirst.set('/flaky', 2);
  const [ev] = await a2a(['send', 'report flaky', '--push', `${hookUrl}/flaky`]);
  const got = await arrived('/flaky', 5);
  assert.deepEqual(got.map((p) => kind(p.body)), ['task', 'statusUpdate', 'artifactUpdate', 'artifactUpdate', 'statusUpdate']);
  assert.equal(got[0].body.task.id, ev.task.id);
  const metrics = await (await fetch(`${gw.baseUrl}/metrics`)).text();
  const retried = metrics.split('\n').find((l) => l.startsWith('map_plugin_a2a_push_total{') && l.includes('result="retried"') && l.includes('tenant="acme"'));
  assert.ok(retried && Number(retried.split(' ').at(-1)) >= 2, retried);
});

test('a host the deployment does not allow is given up on, with an a2a.task.push_failed event', async () => {
  const w = await connectClient(gw, { auth: ACME });
  const sub = await w.conn.subscribe({ eventTypes: ['a2a.task.push_failed'] });
  const port = new URL(hookUrl).port;
  const [ev] = await a2a(['send', 'hold', '--immediate', '--push', `http://localhost:${port}/denied`]);
  const [failed] = await w.tap.waitForEvents(sub.id, (e) => e.data?.taskId === ev.task.id, 1, WAIT_MS);
  assert.match(failed.event.data.reason, /not among the hosts/);
  assert.equal(failed.event.data.url, `http://localhost:${port}/denied`);
  assert.equal(at('/denied').length, 0);
});

test('bad configs get -32602 and nothing is recorded', async () => {
  const before = (await agent.conn.callExtension('a2a/tasks', { limit: 500 })).tasks.length;
  for (const push of ['ftp://127.0.0.1/x', 'not a url']) {
    assert.equal((await a2a(['send', 'hold', '--push', push]))[0].error, 'InvalidParamsError', push);
  }
  const res = await fetch(`${gw.baseUrl}/a2a/agents/worker`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'acme-key', 'a2a-version': '1.0' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'hold' }] }, configuration: { taskPushNotificationConfig: { url: `${hookUrl}/x`, authentication: { scheme: 'Basic', credentials: 'a\r\nx-evil: 1' } } } } }),
  });
  assert.equal((await res.json()).error.code, -32602);
  assert.equal((await agent.conn.callExtension('a2a/tasks', { limit: 500 })).tasks.length, before);
});

test('a task is recorded in mail: a conversation with the agent, a turn per message and artifact', async () => {
  const [ev] = await a2a(['send', 'report for mail']);
  const id = ev.task.id;
  const { conversations } = await agent.conn.callExtension('mail/list', { limit: 100 });
  const conv = conversations.find((c) => c.subject === `A2A task ${id}`);
  assert.ok(conv, JSON.stringify(conversations.map((c) => c.subject)));
  const turns = await pollUntil(async () => (await agent.conn.callExtension('mail/turns/list', { conversationId: conv.id })).turns ?? [], (t) => t.length >= 4, { what: 'the mail turns' });
  const a2aOf = (t) => t.content?.a2a ?? t.content?.data?.a2a;
  const shapes = turns.map((t) => (a2aOf(t).message ? `message:${text(a2aOf(t).message)}` : `artifact:${a2aOf(t).artifact.artifactId}`));
  assert.deepEqual(shapes, ['message:report for mail', 'artifact:a1', 'artifact:a2', 'message:done']);
  assert.equal(a2aOf(turns.at(-1)).state, 'completed');
});

test('a2a/tasks lists the tenant tasks newest first, in pages, for any of its sessions', async () => {
  const w = await connectClient(gw, { auth: ACME });
  const all = (await w.conn.callExtension('a2a/tasks', { limit: 500 })).tasks;
  assert.ok(all.length >= 5);
  assert.ok(all.every((t) => t.agentId === 'worker' && typeof t.state === 'string' && !('history' in t)));
  const pages = [];
  let before;
  for (let i = 0; i < 20; i++) {
    const r = await w.conn.callExtension('a2a/tasks', { limit: 2, ...(before ? { before } : {}) });
    pages.push(...r.tasks.map((t) => t.id));
    if (!r.next) break;
    before = r.next;
  }
  assert.deepEqual(pages, all.map((t) => t.id));
  await assert.rejects(w.conn.callExtension('a2a/tasks', { limit: 0 }), (e) => e.code === -32602);
  const g = await connectClient(gw, { auth: { method: 'api-key', credential: 'globex-key' } });
  assert.deepEqual((await g.conn.callExtension('a2a/tasks', {})).tasks, [], 'another tenant sees none of them');
});

test('per-sender rate limits: past requestsPerMinute a sender gets 429 with Retry-After; other senders go on', async () => {
  const get = (key) => fetch(`${gw.baseUrl}/a2a/agents`, { headers: { 'x-api-key': key } });
  // The window slides (no fresh allowance when the clock's minute turns), so the test may start at any time.
  const statuses = [];
  for (let i = 0; i < 4; i++) statuses.push((await get('globex-key')).status);
  assert.deepEqual(statuses, [200, 200, 200, 429]);
  const limited = await get('globex-key');
  assert.equal(limited.status, 429);
  assert.ok(Number(limited.headers.get('retry-after')) >= 1);
  assert.equal((await limited.json()).error.code, -32603);
  assert.equal((await get('globex-key-2')).status, 200, 'another principal of the tenant has its own count');
  // A client cannot pass for another sender.
  const forged = await fetch(`${gw.baseUrl}/a2a/agents`, { headers: { 'x-api-key': 'globex-key', 'x-map-principal': 'someone-else' } });
  assert.equal(forged.status, 429);
});
