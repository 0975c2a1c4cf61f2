// The A2A bridge (plugins/a2a) end to end: the official A2A SDK for Python
// (a2a-sdk, tests/a2a/client.py) is the A2A client, an SDK AgentConnection
// is the MAP agent that opted in with `metadata.a2a` and answers with
// a2a/reply and a2a/task/update. Each client.py run does one step and
// prints what the SDK got as JSON lines.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { existsSync } from 'node:fs';
import { startGateway, connectAgent, connectClient, pollUntil, DEFAULT_TENANTS, WAIT_MS } from './harness.mjs';
import { DIST, PYTHON, ACME, runClient, text, ed25519Keys } from './a2a-sdk.mjs';

let gw;
let helper;
const cardKey = ed25519Keys(); // acme's cards are signed with it
let plain;
const seen = []; // what reached the MAP agent: [{text, meta, a2a}]

/** Run one client.py step; its JSON lines. */
function a2a([agent, ...args], key = 'acme-key') {
  return runClient(`${gw.baseUrl}/a2a`, key, agent, args);
}

/** A JSON-RPC request posted by hand (malformed ones the SDK would not send), as A2A 1.0 unless `headers` say otherwise. */
async function raw(agent, body, headers = {}, path = '') {
  const res = await fetch(`${gw.baseUrl}/a2a/agents/${agent}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'acme-key', 'a2a-version': '1.0', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

/** A JSON-RPC call of `method` with `params` (A2A 1.0 unless `headers` say otherwise). */
const rpc = (method, params, headers = {}) => raw('helper', { jsonrpc: '2.0', id: 1, method, params }, headers);

/** A client's message with this text, as A2A 1.0 writes it. */
const userMessage = (words) => ({ messageId: `m-${Math.random().toString(36).slice(2)}`, role: 'ROLE_USER', parts: [{ text: words }] });


/** Subscriptions the bridge has opened so far (its counter in /metrics, for the acme tenant). */
async function subscriptions() {
  const body = await (await fetch(`${gw.baseUrl}/metrics`)).text();
  const line = body.split('\n').find((l) => l.startsWith('map_plugin_a2a_streams_total{') && l.includes('kind="subscribe"') && l.includes('tenant="acme"'));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

/** Until the MAP agent has seen something that `pred` matches. */
const agentSaw = (pred, what) => pollUntil(() => seen, (s) => s.some(pred), { timeoutMs: WAIT_MS, what });

/** The MAP agent: what it does depends on the message's text. */
async function answer(m) {
  const a = m.payload?.a2a;
  if (!a) return;
  seen.push({ text: text(a.message), meta: m.meta, a2a: a });
  const call = (method, params) => helper.conn.callExtension(method, { taskId: a.taskId, ...params });
  const words = text(a.message) ?? '';
  if (a.method === 'CancelTask') return;
  if (words === 'hello') await call('a2a/reply', { message: { parts: [{ text: 'hello back' }] } });
  if (words.startsWith('report')) {
    await call('a2a/task/update', { state: 'working', message: { parts: [{ text: 'on it' }] } });
    await call('a2a/task/update', { artifacts: [{ artifactId: 'a1', name: 'summary', parts: [{ text: 'line 1' }] }] });
    await call('a2a/task/update', { artifacts: [{ artifactId: 'a2', parts: [{ data: { rows: 2 } }] }] });
    await call('a2a/task/update', { state: 'completed', message: { parts: [{ text: 'done' }] } });
  }
  if (words === 'hold') await call('a2a/task/update', { state: 'working' });
  if (words === 'ask') await call('a2a/task/update', { state: 'input-required', message: { parts: [{ text: 'which one?' }] } });
  if (words === 'the second') await call('a2a/reply', { message: { parts: [{ text: 'ok: the second' }] } });
}

before(async () => {
  assert.ok(existsSync(join(DIST, 'a2a.wasm')), `${DIST}/a2a.wasm is missing: run scripts/build-plugins.sh`);
  assert.ok(existsSync(PYTHON), `${PYTHON} is missing: run scripts/setup.sh --tests`);
  const tenant = (id, extra = []) => ({ ...DEFAULT_TENANTS.find((t) => t.id === id), toml: ['plugins = ["a2a"]', ...extra].join('\n') });
  gw = await startGateway({
    tenants: [{ id: 'default' }, tenant('acme', ['[tenants.plugin_config.a2a]', `cardSigningKey = "${cardKey.secret}"`]), tenant('globex', ['[tenants.plugin_config.a2a]', 'maxTasksPerTenant = 1'])],
    extraToml: [
      '[plugins.a2a]',
      `path = ${JSON.stringify(join(DIST, 'a2a.wasm'))}`,
      'http_prefix = "/a2a"',
      'deadline_ms = 20000',
      '[plugins.a2a.config]',
      // Waits end as soon as the task settles: generous bounds keep a loaded machine from failing them.
      'blockingWaitMs = 15000',
      // Under the gateway's max_message_bytes (65536 here), which the host enforces first.
      'maxRequestBytes = 32768',
      'streamWindowMs = 15000',
    ].join('\n'),
  });
  helper = await connectAgent(gw, { name: 'Helper', agentId: 'helper', auth: ACME });
  await helper.conn.updateMetadata({ a2a: { description: 'Writes reports', skills: [{ id: 'report', name: 'Reports', description: 'Writes a report', tags: ['writing'] }, { name: 'no id: left out' }] } });
  helper.conn.onMessage((m) => { answer(m).catch((e) => seen.push({ error: String(e) })); });
  plain = await connectAgent(gw, { name: 'Plain', agentId: 'plain', auth: ACME });
});

after(async () => { await gw?.stop(); });

test('an opted-in agent has a card the SDK resolves and can join the gateway list; others and other tenants have none', async () => {
  const [card] = await a2a(['helper', 'card']);
  assert.equal(card.name, 'Helper');
  assert.equal(card.description, 'Writes reports');
  const url = `${gw.baseUrl}/a2a/agents/helper`;
  assert.deepEqual(card.supportedInterfaces, [
    { url, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
    { url: `${url}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0' },
    { url, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
  ]);
  assert.deepEqual(card.skills, [{ id: 'report', name: 'Reports', description: 'Writes a report', tags: ['writing'] }]);
  assert.equal(card.capabilities.streaming, true);
  assert.equal((await a2a(['plain', 'card']))[0].error, 'AgentCardResolutionError');
  // The gateway's list: agents that published themselves and still opt in.
  assert.deepEqual(await helper.conn.callExtension('a2a/publish', {}), { published: ['helper'] });
  assert.deepEqual(await plain.conn.callExtension('a2a/publish', {}), { published: [] });
  const list = async (key) => (await fetch(`${gw.baseUrl}/a2a/agents`, { headers: { 'x-api-key': key } })).json();
  assert.deepEqual(await list('acme-key'), { agents: [{ id: 'helper', name: 'Helper', description: 'Writes reports', card: `${url}/.well-known/agent-card.json` }] });
  assert.deepEqual(await list('globex-key'), { agents: [] });
  assert.equal((await a2a(['helper', 'card'], 'globex-key'))[0].error, 'AgentCardResolutionError', 'another tenant sees no such agent');
});

test('a message is answered: the agent gets map/message with meta.protocol a2a, and its a2a/reply comes back', async () => {
  const [ev] = await a2a(['helper', 'send', 'hello']);
  assert.equal(ev.message.role, 'ROLE_AGENT');
  assert.equal(text(ev.message), 'hello back');
  const got = seen.find((s) => s.text === 'hello');
  assert.equal(got.meta.protocol, 'a2a');
  assert.equal(got.meta.a2a.taskId, ev.message.taskId);
  assert.equal(got.meta.a2a.contextId, ev.message.contextId);
  const [task] = await a2a(['helper', 'get', ev.message.taskId]);
  assert.equal(task.status.state, 'TASK_STATE_COMPLETED');
  assert.deepEqual(task.history.map(text), ['hello', 'hello back']);
});

test('a task goes working → completed with artifacts; a blocking send returns it settled', async () => {
  const [ev] = await a2a(['helper', 'send', 'report q3']);
  const task = ev.task;
  assert.equal(task.status.state, 'TASK_STATE_COMPLETED');
  assert.equal(text(task.status.message), 'done');
  assert.deepEqual(task.artifacts, [
    { artifactId: 'a1', name: 'summary', parts: [{ text: 'line 1' }] },
    { artifactId: 'a2', parts: [{ data: { rows: 2 } }] },
  ]);
  assert.deepEqual(task.history.map(text), ['report q3', 'on it', 'done']);
});

test('streaming: the updates of a task arrive in order and end at its terminal state', async () => {
  const events = await a2a(['helper', 'send', 'report streamed', '--stream']);
  const kinds = events.map((e) => Object.keys(e)[0]);
  assert.deepEqual(kinds, ['task', 'statusUpdate', 'artifactUpdate', 'artifactUpdate', 'statusUpdate']);
  assert.equal(events[0].task.status.state, 'TASK_STATE_SUBMITTED');
  assert.equal(events[1].statusUpdate.status.state, 'TASK_STATE_WORKING');
  assert.deepEqual(events.slice(2, 4).map((e) => e.artifactUpdate.artifact.artifactId), ['a1', 'a2']);
  assert.equal(events[4].statusUpdate.status.state, 'TASK_STATE_COMPLETED');
  assert.ok(events.every((e) => (e.task?.id ?? Object.values(e)[0].taskId) === events[0].task.id));
});

test('input-required: the next message of the same task reaches the agent and completes it', async () => {
  const [ev] = await a2a(['helper', 'send', 'ask']);
  assert.equal(ev.task.status.state, 'TASK_STATE_INPUT_REQUIRED');
  assert.equal(text(ev.task.status.message), 'which one?');
  const [next] = await a2a(['helper', 'send', 'the second', '--task', ev.task.id, '--context', ev.task.contextId]);
  assert.equal(text(next.message), 'ok: the second');
  assert.equal(seen.find((s) => s.text === 'the second').a2a.taskId, ev.task.id);
});

test('cancel: a working task is canceled, the agent is told, a subscriber sees the end; terminal tasks stay final', async () => {
  const [ev] = await a2a(['helper', 'send', 'hold', '--immediate']);
  const id = ev.task.id;
  await agentSaw((s) => s.a2a?.taskId === id, 'the hold message');
  const before = await subscriptions();
  const sub = a2a(['helper', 'subscribe', id]);
  // Cancel once the subscription is open, so that it sees the end.
  await pollUntil(subscriptions, (n) => n > before, { what: 'the subscription to open' });
  const [canceled] = await a2a(['helper', 'cancel', id]);
  assert.equal(canceled.status.state, 'TASK_STATE_CANCELED');
  const events = await sub;
  assert.equal(events[0].task.id, id);
  assert.equal(events.at(-1).statusUpdate.status.state, 'TASK_STATE_CANCELED');
  await agentSaw((s) => s.a2a?.method === 'CancelTask' && s.a2a.taskId === id, 'the cancel notice');
  assert.equal((await a2a(['helper', 'cancel', id]))[0].error, 'TaskNotCancelableError');
  await assert.rejects(helper.conn.callExtension('a2a/task/update', { taskId: id, state: 'completed' }), (e) => e.code === 93002);
  assert.equal((await a2a(['helper', 'get', 'task-none']))[0].error, 'TaskNotFoundError');
});

test('ListTasks pages through the agent tasks newest first, with filters', async () => {
  const all = (await a2a(['helper', 'list', '--size', '100']))[0];
  assert.ok(all.tasks.length >= 5, JSON.stringify(all));
  assert.equal(all.totalSize, all.tasks.length);
  const seenIds = [];
  let token = '';
  for (let page = 0; page < 10; page++) {
    const [res] = await a2a(['helper', 'list', '--size', '2', ...(token ? ['--token', token] : [])]);
    assert.ok(res.tasks.length <= 2);
    seenIds.push(...res.tasks.map((t) => t.id));
    token = res.nextPageToken ?? '';
    if (!token) break;
  }
  assert.deepEqual(seenIds, all.tasks.map((t) => t.id), 'pages hold every task once, in order');
  const canceled = (await a2a(['helper', 'list', '--state', 'TASK_STATE_CANCELED']))[0];
  assert.ok(canceled.tasks.length >= 1 && canceled.tasks.every((t) => t.status.state === 'TASK_STATE_CANCELED'));
  assert.equal((await a2a(['plain', 'list']))[0].error, 'AgentCardResolutionError');
});

test('malformed requests get the JSON-RPC and A2A errors', async () => {
  const msg = { messageId: 'm1', role: 'ROLE_USER', parts: [{ text: 'hi' }] };
  const code = (r) => r.body.error?.code;
  assert.equal(code(await raw('helper', '{not json')), -32700);
  assert.equal(code(await raw('helper', [{ jsonrpc: '2.0', id: 1, method: 'GetTask' }])), -32600);
  assert.equal(code(await raw('helper', { jsonrpc: '1.0', id: 1, method: 'GetTask' })), -32600);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'tasks/explode' })), -32601);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: [] })), -32602);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 7 } })), -32602);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { ...msg, role: 'ROLE_AGENT' } } })), -32602);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { ...msg, parts: [{ text: 'a', data: {} }] } } })), -32602);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { ...msg, parts: [{ url: 'file:///etc/passwd' }] } } })), -32602);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'ListTasks', params: { pageSize: 1000 } })), -32602);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } }, { 'a2a-version': '9.9' })), -32009);
  assert.equal(code(await raw('helper', { jsonrpc: '2.0', id: 1, method: 'CreateTaskPushNotificationConfig', params: {} })), -32602);
  const big = await raw('helper', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { ...msg, parts: [{ text: 'x'.repeat(40_000) }] } } });
  assert.equal(big.status, 413);
  assert.equal(code(big), -32600);
  const r = await raw('helper', { jsonrpc: '2.0', id: 'abc', method: 'GetTask', params: { id: 'task-none' } });
  assert.deepEqual([r.body.id, code(r)], ['abc', -32001]);
  await assert.rejects(helper.conn.callExtension('a2a/reply', { taskId: 'task-none', message: { parts: [{ text: 'x' }] } }), (e) => e.code === 93000);
});

test('tenant walls: tasks are the tenant own, and a tenant holds at most its limit', async () => {
  const [ev] = await a2a(['helper', 'send', 'hold', '--immediate']);
  const other = await raw('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: ev.task.id } }, { 'x-api-key': 'globex-key' });
  assert.equal(other.status, 404, 'no agent helper in globex');
  const g = await connectAgent(gw, { name: 'G', agentId: 'g-agent', auth: { method: 'api-key', credential: 'globex-key' } });
  await g.conn.updateMetadata({ a2a: { skills: [] } });
  assert.equal((await a2a(['g-agent', 'get', ev.task.id], 'globex-key'))[0].error, 'TaskNotFoundError');
  assert.ok((await a2a(['g-agent', 'send', 'one', '--immediate'], 'globex-key'))[0].task);
  const refused = (await a2a(['g-agent', 'send', 'two', '--immediate'], 'globex-key'))[0];
  assert.match(refused.message ?? '', /limit/);
});

test('a2a.task.* events reach MAP subscribers', async () => {
  const w = await connectClient(gw, { auth: ACME });
  const sub = await w.conn.subscribe({ eventTypes: ['a2a.task.*'] });
  const [ev] = await a2a(['helper', 'send', 'report events']);
  const events = await w.tap.waitForEvents(sub.id, (e) => e.data?.taskId === ev.task.id, 5, WAIT_MS);
  assert.deepEqual(events.map((p) => p.event.type), ['a2a.task.created', 'a2a.task.status', 'a2a.task.artifact', 'a2a.task.artifact', 'a2a.task.status']);
  assert.deepEqual(events.map((p) => p.event.data.state), ['submitted', 'working', 'working', 'working', 'completed']);
  assert.equal(events[0].event.data.agentId, 'helper');
});

test('A2A 0.3: the SDK on its 0.3 transport gets the same answers, in 0.3 shapes on the wire', async () => {
  const [hello] = await a2a(['helper', 'send', 'hello', '--v03']);
  assert.equal(text(hello.message), 'hello back');
  const [ev] = await a2a(['helper', 'send', 'report old', '--v03']);
  assert.equal(ev.task.status.state, 'TASK_STATE_COMPLETED');
  assert.deepEqual(ev.task.artifacts.map((a) => a.artifactId), ['a1', 'a2']);
  const events = await a2a(['helper', 'send', 'report old streamed', '--v03', '--stream']);
  assert.equal(events.at(-1).statusUpdate.status.state, 'TASK_STATE_COMPLETED');
  assert.deepEqual(events.filter((e) => e.artifactUpdate).map((e) => e.artifactUpdate.artifact.artifactId), ['a1', 'a2']);
  assert.equal((await a2a(['helper', 'cancel', ev.task.id, '--v03']))[0].error, 'TaskNotCancelableError');
  const r = await raw('helper', { jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: ev.task.id } }, { 'a2a-version': '0.3' });
  const t = r.body.result;
  assert.deepEqual([t.kind, t.status.state, t.history[0].role, t.history[0].parts[0]], ['task', 'completed', 'user', { kind: 'text', text: 'report old' }]);
  assert.deepEqual(t.artifacts[1].parts[0], { kind: 'data', data: { rows: 2 } });
});

test('every error carries a google.rpc.ErrorInfo in error.data (A2A 9.5)', async () => {
  const r = await rpc('GetTask', { id: 'task-none' });
  assert.equal(r.body.error.code, -32001);
  assert.deepEqual(r.body.error.data, [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'TASK_NOT_FOUND', domain: 'a2a-protocol.org', metadata: { taskId: 'task-none' } }]);
  const reasons = async (res) => (await res).body.error.data.map((d) => [d['@type'], d.reason, d.domain]);
  const info = (reason) => [['type.googleapis.com/google.rpc.ErrorInfo', reason, 'a2a-protocol.org']];
  assert.deepEqual(await reasons(rpc('GetTask', { id: 7 })), info('INVALID_PARAMS'));
  assert.deepEqual(await reasons(rpc('Explode', {})), info('METHOD_NOT_FOUND'));
  assert.deepEqual(await reasons(rpc('GetTask', { id: 'x' }, { 'a2a-version': '9.9' })), info('VERSION_NOT_SUPPORTED'));
  assert.deepEqual(await reasons(rpc('GetExtendedAgentCard', {})), info('EXTENDED_AGENT_CARD_NOT_CONFIGURED'));
  assert.deepEqual(await reasons(raw('helper', '{not json')), info('INVALID_REQUEST'));
  // The official SDK reads it: its error is the A2A error the reason names.
  assert.equal((await a2a(['helper', 'get', 'task-none']))[0].error, 'TaskNotFoundError');
});

test('unknown fields are ignored and proto field names (snake_case) are read as the official SDKs read them', async () => {
  const r = await rpc('SendMessage', {
    message: { message_id: 'm-snake', role: 'ROLE_USER', parts: [{ text: 'hello', media_type: 'text/plain', futureField: 1 }], futureField: 'x' },
    configuration: { history_length: 5, futureOption: true },
    tckExtraParam: 42,
  });
  assert.equal(text(r.body.result?.message), 'hello back', JSON.stringify(r.body));
  const id = r.body.result.message.taskId;
  const got = await rpc('GetTask', { id, history_length: 1, somethingNew: {} });
  assert.deepEqual(got.body.result.history.map(text), ['hello back']);
  assert.equal((await rpc('ListTasks', { page_size: 1, context_id: r.body.result.message.contextId, newFilter: 'x' })).body.result.tasks[0].id, id);
});

test('historyLength has no upper bound; 0 leaves history out (A2A 3.2.4)', async () => {
  const [ev] = await a2a(['helper', 'send', 'hello']);
  const id = ev.message.taskId;
  assert.deepEqual((await rpc('GetTask', { id, historyLength: 5000 })).body.result.history.map(text), ['hello', 'hello back']);
  const none = (await rpc('GetTask', { id, historyLength: 0 })).body.result;
  assert.equal(none.id, id);
  assert.equal('history' in none, false);
  assert.equal((await rpc('GetTask', { id, historyLength: -1 })).body.error.code, -32602);
});

test('a message without role is refused (A2A 4.1.4: role is required)', async () => {
  const { role, ...noRole } = userMessage('hello');
  assert.equal(role, 'ROLE_USER');
  const r = await rpc('SendMessage', { message: noRole });
  assert.equal(r.body.error.code, -32602);
  assert.match(r.body.error.message, /role/);
});

test('a request without id is checked like any other and answered with id null, as the official SDK does', async () => {
  const noId = (body) => raw('helper', { jsonrpc: '2.0', ...body });
  const unknown = await noId({ method: 'message/ssend', params: {} });
  assert.deepEqual([unknown.status, unknown.body.id, unknown.body.error.code], [200, null, -32601]);
  assert.equal((await noId({ method: 'SendMessage', params: { '': 'not a message' } })).body.error.code, -32602);
  assert.equal((await noId({ method: 'GetTask', params: { id: 'task-none' } })).body.error.code, -32001);
  const { body } = await noId({ method: 'ListTasks', params: { pageSize: 1 } });
  assert.deepEqual([body.id, body.result.tasks.length], [null, 1]);
  assert.equal((await raw('helper', { jsonrpc: '2.0', id: { bad: 'type' }, method: 'GetTask', params: {} })).body.error.code, -32600);
});

test('A2A-Version decides the behaviour: none means 0.3 (A2A 3.6.2), a method of the other version gets -32009', async () => {
  const ask = (method, params, version) => raw('helper', { jsonrpc: '2.0', id: 1, method, params }, version === undefined ? { 'a2a-version': '' } : { 'a2a-version': version });
  const code = async (r) => (await r).body.error?.code ?? 'ok';
  assert.equal(await code(ask('SendMessage', { message: userMessage('hello') })), -32009, 'no header: 0.3, which has no SendMessage');
  assert.equal(await code(ask('GetTask', { id: 'task-none' }, '0.3')), -32009);
  assert.equal(await code(ask('tasks/get', { id: 'task-none' }, '1.0')), -32009, '1.0 has no tasks/get');
  assert.equal(await code(ask('tasks/get', { id: 'task-none' })), -32001, 'no header: 0.3 methods are served');
  assert.equal(await code(ask('tasks/get', { id: 'task-none' }, '0.3.0')), -32001, 'the patch number does not count');
  assert.equal(await code(ask('GetTask', { id: 'task-none' }, '1.0.1')), -32001);
  assert.equal(await code(ask('GetTask', { id: 'task-none' }, '2.0')), -32009);
  // A2A 3.6.1: the version may come as a query parameter instead.
  const q = await fetch(`${gw.baseUrl}/a2a/agents/helper?A2A-Version=1.0`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'acme-key' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'task-none' } }),
  });
  assert.equal((await q.json()).error.code, -32001);
});

test('a body that is not declared JSON gets 415 and -32005 ContentTypeNotSupported', async () => {
  const r = await raw('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } }, { 'content-type': 'text/plain' });
  assert.deepEqual([r.status, r.body.error.code, r.body.error.data[0].reason], [415, -32005, 'CONTENT_TYPE_NOT_SUPPORTED']);
  assert.equal((await raw('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } }, { 'content-type': 'application/a2a+json' })).body.error.code, -32001);
  const rest = await fetch(`${gw.baseUrl}/a2a/agents/helper/rest/message:send`, { method: 'POST', headers: { 'x-api-key': 'acme-key', 'a2a-version': '1.0', 'content-type': 'text/plain' }, body: 'hello' });
  assert.deepEqual([rest.status, (await rest.json()).error.details[0].reason], [415, 'CONTENT_TYPE_NOT_SUPPORTED']);
});

test('a stream refused before it opens is a plain JSON-RPC error, as the official SDK server answers it (not an SSE body)', async () => {
  const [ev] = await a2a(['helper', 'send', 'hello']);
  const r = await rpc('SubscribeToTask', { id: ev.message.taskId });
  assert.match(r.headers.get('content-type'), /application\/json/);
  assert.equal(r.body.error.code, -32004);
  const bad = await rpc('SendStreamingMessage', { message: { messageId: 'm' } });
  assert.deepEqual([bad.headers.get('content-type').startsWith('application/json'), bad.body.error.code], [true, -32602]);
});

test('the card: 0.3 fields, Cache-Control and an ETag that a conditional request revalidates; URLs with a trailing slash', async () => {
  const url = `${gw.baseUrl}/a2a/agents/helper`;
  const get = (u, headers = {}) => fetch(u, { headers: { 'x-api-key': 'acme-key', ...headers } });
  const res = await get(`${url}/.well-known/agent-card.json`);
  const card = await res.json();
  assert.deepEqual([card.url, card.preferredTransport, card.protocolVersion], [url, 'JSONRPC', '0.3.0']);
  assert.match(res.headers.get('cache-control'), /max-age=\d+/);
  const etag = res.headers.get('etag');
  assert.match(etag, /^W\/"[0-9a-f]+"$/);
  const again = await get(`${url}/.well-known/agent-card.json`, { 'if-none-match': etag });
  assert.deepEqual([again.status, again.headers.get('etag'), await again.text()], [304, etag, '']);
  assert.equal((await get(`${url}/.well-known/agent-card.json`, { 'if-none-match': '"other"' })).status, 200);
  const slash = await get(`${url}/.well-known/agent-card.json/`);
  assert.deepEqual(await slash.json(), card);
  assert.equal((await raw('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'task-none' } }, {}, '/')).body.error.code, -32001);
  // An A2A 0.3 client reads the card by its 0.3 fields: the SDK's 0.3 card parser resolves it.
  const [old] = await a2a(['helper', 'card', '--v03-card']);
  assert.deepEqual(old.supportedInterfaces, [{ url, protocolBinding: 'JSONRPC', protocolVersion: '0.3.0' }]);
});

test('A2A 0.3 push notification config methods: the SDK on its 0.3 transport sets, gets, lists and deletes', async () => {
  const [ev] = await a2a(['helper', 'send', 'hold', '--immediate']);
  const id = ev.task.id;
  const hook = 'http://127.0.0.1:9/hook';
  const [set] = await a2a(['helper', 'push-set', id, '--push', hook, '--push-id', 'old-1', '--push-token', 'tok', '--push-auth', 'Bearer:c', '--v03']);
  assert.deepEqual(set, { id: 'old-1', taskId: id, url: hook, token: 'tok', authentication: { scheme: 'Bearer', credentials: 'c' } });
  assert.deepEqual((await a2a(['helper', 'push-get', id, '--push-id', 'old-1', '--v03']))[0], set);
  assert.deepEqual((await a2a(['helper', 'push-list', id, '--v03']))[0].configs, [set]);
  // On the wire: 0.3's shapes.
  const wire = await raw('helper', { jsonrpc: '2.0', id: 1, method: 'tasks/pushNotificationConfig/get', params: { id, pushNotificationConfigId: 'old-1' } }, { 'a2a-version': '0.3' });
  assert.deepEqual(wire.body.result, { taskId: id, pushNotificationConfig: { id: 'old-1', url: hook, token: 'tok', authentication: { schemes: ['Bearer'], credentials: 'c' } } });
  assert.deepEqual((await a2a(['helper', 'push-delete', id, '--push-id', 'old-1', '--v03']))[0], { deleted: 'old-1' });
  assert.deepEqual((await a2a(['helper', 'push-list', id, '--v03']))[0].configs ?? [], []);
  const del = await raw('helper', { jsonrpc: '2.0', id: 1, method: 'tasks/pushNotificationConfig/delete', params: { id, pushNotificationConfigId: 'old-1' } }, { 'a2a-version': '0.3' });
  assert.deepEqual(del.body, { jsonrpc: '2.0', id: 1, result: null });
  await a2a(['helper', 'cancel', id]);
});

test('the HTTP+JSON binding: the SDK on its REST transport sends, streams, gets, lists and cancels, over the same tasks as JSON-RPC', async () => {
  const rest = (args) => a2a(['helper', ...args, '--binding', 'HTTP+JSON']);
  const [hello] = await rest(['send', 'hello']);
  assert.equal(text(hello.message), 'hello back');
  const [ev] = await rest(['send', 'report over rest']);
  assert.equal(ev.task.status.state, 'TASK_STATE_COMPLETED');
  assert.deepEqual(ev.task.artifacts.map((a) => a.artifactId), ['a1', 'a2']);
  // One store: the task made over HTTP+JSON is the one JSON-RPC gets, and the other way round.
  assert.deepEqual((await a2a(['helper', 'get', ev.task.id]))[0], (await rest(['get', ev.task.id]))[0]);
  assert.equal((await rest(['get', hello.message.taskId]))[0].status.state, 'TASK_STATE_COMPLETED');
  const events = await rest(['send', 'report rest streamed', '--stream']);
  assert.deepEqual(events.map((e) => Object.keys(e)[0]), ['task', 'statusUpdate', 'artifactUpdate', 'artifactUpdate', 'statusUpdate']);
  const listed = (await rest(['list', '--context', ev.task.contextId]))[0];
  assert.deepEqual(listed.tasks.map((t) => t.id), [ev.task.id]);
  const [held] = await rest(['send', 'hold', '--immediate']);
  await agentSaw((s) => s.a2a?.taskId === held.task.id, 'the hold message');
  assert.equal((await rest(['cancel', held.task.id]))[0].status.state, 'TASK_STATE_CANCELED');
  assert.equal((await rest(['cancel', held.task.id]))[0].error, 'TaskNotCancelableError');
  assert.equal((await rest(['get', 'task-none']))[0].error, 'TaskNotFoundError');
  const hook = 'http://127.0.0.1:9/hook';
  const [set] = await rest(['push-set', held.task.id, '--push', hook, '--push-id', 'r1']);
  assert.deepEqual(set, { id: 'r1', taskId: held.task.id, url: hook });
  assert.deepEqual((await rest(['push-get', held.task.id, '--push-id', 'r1']))[0], set);
  assert.deepEqual((await rest(['push-list', held.task.id]))[0].configs, [set]);
  assert.deepEqual((await rest(['push-delete', held.task.id, '--push-id', 'r1']))[0], { deleted: 'r1' });
  assert.deepEqual((await rest(['push-delete', held.task.id, '--push-id', 'r1']))[0], { deleted: 'r1' }, 'idempotent');
});

test('HTTP+JSON errors are google.rpc.Status objects with the HTTP status of A2A 5.4 and an ErrorInfo', async () => {
  const base = `${gw.baseUrl}/a2a/agents/helper/rest`;
  const call = async (method, path, { body, version = '1.0' } = {}) => {
    const headers = { 'x-api-key': 'acme-key', ...(version === null ? {} : { 'a2a-version': version }), ...(body ? { 'content-type': 'application/json' } : {}) };
    const res = await fetch(`${base}${path}`, { method, headers, body: body && JSON.stringify(body) });
    return { status: res.status, body: await res.json() };
  };
  const missing = await call('GET', '/tasks/task-none');
  assert.equal(missing.status, 404);
  assert.deepEqual(missing.body, { error: { code: 404, status: 'NOT_FOUND', message: 'task task-none not found', details: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'TASK_NOT_FOUND', domain: 'a2a-protocol.org', metadata: { taskId: 'task-none' } }] } });
  const bad = await call('POST', '/message:send', { body: { message: { messageId: 'm', parts: [{ text: 'x' }] } } });
  assert.deepEqual([bad.status, bad.body.error.status, bad.body.error.details[0].reason], [400, 'INVALID_ARGUMENT', 'INVALID_PARAMS']);
  const old = await call('GET', '/tasks/task-none', { version: null });
  assert.deepEqual([old.status, old.body.error.details[0].reason], [400, 'VERSION_NOT_SUPPORTED']);
  assert.equal((await call('GET', '/tasks/task-none', { version: '9.0' })).body.error.details[0].reason, 'VERSION_NOT_SUPPORTED');
  assert.equal((await call('PUT', '/tasks/x')).status, 404);
  const [ev] = await a2a(['helper', 'send', 'hello']);
  const again = await call('POST', `/tasks/${ev.message.taskId}:cancel`);
  assert.deepEqual([again.status, again.body.error.status, again.body.error.details[0].reason], [400, 'FAILED_PRECONDITION', 'TASK_NOT_CANCELABLE']);
  const got = await call('GET', `/tasks/${ev.message.taskId}?historyLength=1`);
  assert.deepEqual(got.body.history.map(text), ['hello back']);
  const page = await call('GET', `/tasks?contextId=${encodeURIComponent(ev.message.contextId)}&pageSize=1&includeArtifacts=true`);
  assert.deepEqual(page.body.tasks.map((t) => t.id), [ev.message.taskId]);
});

test('signed cards (A2A 8.4): the card carries a JWS the SDK verifies with the configured key, and with no other', async () => {
  const [ok] = await a2a(['helper', 'card', '--verify', cardKey.public]);
  assert.deepEqual(ok, { verified: true, signatures: 1 });
  const protectedHeader = JSON.parse(Buffer.from((await a2a(['helper', 'card']))[0].signatures[0].protected, 'base64url'));
  assert.deepEqual([protectedHeader.alg, protectedHeader.typ], ['EdDSA', 'JOSE']);
  assert.match(protectedHeader.kid, /^[0-9a-f]{16}$/);
  assert.equal((await a2a(['helper', 'card', '--verify', ed25519Keys().public]))[0].error, 'InvalidSignaturesError');
  // globex configured no key: its cards are not signed.
  assert.equal((await a2a(['g-agent', 'card'], 'globex-key'))[0].signatures, undefined);
});
