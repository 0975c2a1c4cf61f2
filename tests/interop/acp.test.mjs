// ACP through the gateway: the official ACP TypeScript library
// (@agentclientprotocol/sdk) plays the editor, and a MAP agent built with the
// MAP SDK's ACPAgentAdapter plays the coding agent. The gateway bridges the
// two, over its /acp WebSocket and over `map-gateway acp` on stdio, launched
// as a subprocess the way an editor launches an agent.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { Readable, Writable } from 'node:stream';
import { WebSocket } from 'ws';
import * as acp from '@agentclientprotocol/sdk';
import { createWebSocketStream } from '@agentclientprotocol/sdk/experimental/ws-client';
import { ACPAgentAdapter, ACP_PROTOCOL_VERSION, ACPStreamConnection } from '@multi-agent-protocol/sdk';
import { startGateway, connectAgent, connectClient, GATEWAY_BIN, uid, WAIT_MS } from './harness.mjs';

let gw;

before(async () => {
  gw = await startGateway({ extraToml: '[acp]\nclient_request_timeout_ms = 1500\n' });
});

after(async () => {
  await gw?.stop();
});

/** A coding agent on the MAP SDK's adapter. Prompts: "edit" asks for
 * permission and reads a file, "wait" runs until cancelled, "hang" never ends,
 * "ask" asks for permission and reports what came back (or the failure). */
async function codingAgent(role) {
  const agent = await connectAgent(gw, { name: `coder-${uid()}`, role });
  const cancelled = new Map();
  const loaded = [];
  const adapter = new ACPAgentAdapter(agent.conn, {
    initialize: async () => ({ protocolVersion: ACP_PROTOCOL_VERSION, agentCapabilities: { loadSession: false } }),
    newSession: async () => ({ sessionId: `sess-${uid()}` }),
    loadSession: async (params) => {
      loaded.push(params.sessionId);
      return {};
    },
    prompt: async (params, ctx) => {
      const text = params.prompt.map((p) => p.text).join(' ');
      const say = (t) => adapter.sendSessionUpdate(ctx.streamId, {
        sessionId: params.sessionId, update: { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: t } },
      });
      await say(`working on: ${text}`);
      if (text === 'edit') {
        const permission = await adapter.requestPermission(ctx.streamId, {
          sessionId: params.sessionId,
          toolCall: { toolCallId: 'edit-1', title: 'Edit src/main.rs' },
          options: [{ optionId: 'allow', name: 'Allow', kind: 'allow_once' }, { optionId: 'reject', name: 'Reject', kind: 'reject_once' }],
        });
        const file = await adapter.readTextFile(ctx.streamId, { sessionId: params.sessionId, path: '/work/src/main.rs' });
        await adapter.writeTextFile(ctx.streamId, { sessionId: params.sessionId, path: '/work/src/lib.rs', content: 'pub fn lib() {}\n' });
        const terminal = await adapter.createTerminal(ctx.streamId, { sessionId: params.sessionId, command: 'cargo', args: ['test'] });
        await say(`permission ${permission.outcome.optionId}; the file has ${file.content.length} bytes; terminal ${terminal.terminalId}`);
        return { stopReason: 'end_turn' };
      }
      if (text === 'ask') {
        try {
          const answer = await adapter.requestPermission(ctx.streamId, { sessionId: params.sessionId, toolCall: { toolCallId: 'q' }, options: [{ optionId: 'ok', name: 'OK', kind: 'allow_once' }] });
          await say(`answered ${JSON.stringify(answer)}`);
        } catch (e) {
          await say(`no answer: ${e.message}`);
        }
        return { stopReason: 'end_turn' };
      }
      if (text === 'wait') {
        await new Promise((resolve) => cancelled.set(params.sessionId, resolve));
        return { stopReason: 'cancelled' };
      }
      if (text === 'hang') return new Promise(() => {});
      return { stopReason: 'end_turn' };
    },
    cancel: async (params) => {
      cancelled.get(params.sessionId)?.();
    },
  });
  return { agent, adapter, loaded };
}

/** An editor on the official ACP library: records updates, answers
 * permission requests with `permission` (or never, when it is null), serves
 * files from `files`. */
function editor({ permission = 'allow', files = { '/work/src/main.rs': 'fn main() {}\n' } } = {}) {
  const updates = watchedList();
  const requests = [];
  const app = acp.client({ name: 'test-editor' })
    .onNotification(acp.methods.client.session.update, ({ params }) => { updates.push(params); })
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      requests.push({ method: 'session/request_permission', params });
      if (permission === null) return new Promise(() => {});
      return { outcome: { outcome: 'selected', optionId: permission } };
    })
    .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
      requests.push({ method: 'fs/read_text_file', params });
      return { content: files[params.path] ?? '' };
    })
    .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) => {
      requests.push({ method: 'fs/write_text_file', params });
      return {};
    })
    .onRequest(acp.methods.client.terminal.create, ({ params }) => {
      requests.push({ method: 'terminal/create', params });
      return { terminalId: 'term-1' };
    });
  return { app, updates: updates.items, updated: updates.until, requests };
}

const text = (updates) => updates.map((u) => u.update?.content?.text).filter(Boolean);

function overWebSocket(target) {
  return createWebSocketStream(`ws://127.0.0.1:${gw.port}/acp?agent=${encodeURIComponent(target)}`, { WebSocket });
}

async function session(agentApi) {
  const init = await agentApi.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: false }, terminal: false },
  });
  assert.equal(init.protocolVersion, acp.PROTOCOL_VERSION, 'the editor is answered in its own protocol version');
  const { sessionId } = await agentApi.request(acp.methods.agent.session.new, { cwd: '/work', mcpServers: [] });
  assert.match(sessionId, /^sess-/);
  return sessionId;
}

test('over WebSocket: initialize, a session, a prompt with streamed updates, a permission and a file read served by the editor', async () => {
  const { agent, loaded } = await codingAgent('coder');
  const ed = editor();
  await ed.app.connectWith(overWebSocket(agent.id), async (a) => {
    const sessionId = await session(a);
    await a.request(acp.methods.agent.session.load, { sessionId, cwd: '/work', mcpServers: [] });
    assert.deepEqual(loaded, [sessionId]);
    const plain = await a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'hello' }] });
    assert.equal(plain.stopReason, 'end_turn');
    const edit = await a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'edit' }] });
    assert.equal(edit.stopReason, 'end_turn');
  });
  assert.deepEqual(text(ed.updates), ['working on: hello', 'working on: edit', 'permission allow; the file has 13 bytes; terminal term-1']);
  assert.deepEqual(ed.requests.map((r) => r.method), ['session/request_permission', 'fs/read_text_file', 'fs/write_text_file', 'terminal/create'],
    'the SDK\'s request_permission reaches the editor as ACP\'s session/request_permission');
  assert.equal(ed.requests[0].params.toolCall.toolCallId, 'edit-1');
  assert.equal(ed.requests[1].params.path, '/work/src/main.rs');
  assert.equal(ed.requests[2].params.content, 'pub fn lib() {}\n');
  assert.deepEqual(ed.requests[3].params.args, ['test']);
});

test("the MAP SDK's own ACP client (ACPStreamConnection over MAP) reaches an ACPAgentAdapter agent through the gateway", async () => {
  // This client reads the agent's answers from `message_delivered` events
  // (`data.message.payload`), and unsubscribes after saying goodbye.
  const { agent } = await codingAgent(`sdk-acp-${uid()}`);
  const client = await connectClient(gw);
  const updates = [];
  const permissions = [];
  const stream = new ACPStreamConnection(client.conn, {
    targetAgent: agent.id,
    timeout: WAIT_MS,
    client: {
      requestPermission: async (params) => {
        permissions.push(params);
        return { outcome: { outcome: 'selected', optionId: 'allow' } };
      },
      sessionUpdate: async (params) => { updates.push(params); },
      readTextFile: async () => ({ content: 'fn main() {}\n' }),
      writeTextFile: async () => ({}),
      createTerminal: async () => ({ terminalId: 'term-sdk' }),
    },
  });
  const init = await stream.initialize({ protocolVersion: ACP_PROTOCOL_VERSION, clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true } });
  assert.equal(init.protocolVersion, ACP_PROTOCOL_VERSION);
  const session = await stream.newSession({ cwd: '/work', mcpServers: [] });
  assert.match(session.sessionId, /^sess-/);
  const done = await stream.prompt({ sessionId: session.sessionId, prompt: [{ type: 'text', text: 'edit' }] });
  assert.equal(done.stopReason, 'end_turn');
  assert.equal(permissions.length, 1);
  assert.deepEqual(text(updates), ['working on: edit', 'permission allow; the file has 13 bytes; terminal term-sdk']);
  // Newer SDKs close their streams when the client disconnects, so the
  // stream's unsubscribe comes after the goodbye: it must still work.
  await client.conn.disconnect();
  await stream.close();
  assert.equal(stream.isClosed, true);
});

test('the agent is found by role, and cancel ends a running prompt', async () => {
  const role = `reviewer-${uid()}`;
  await codingAgent(role);
  const ed = editor();
  await ed.app.connectWith(overWebSocket(role), async (a) => {
    const sessionId = await session(a);
    const running = a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'wait' }] });
    await ed.updated(() => text(ed.updates).includes('working on: wait'));
    await a.notify(acp.methods.agent.session.cancel, { sessionId });
    assert.equal((await running).stopReason, 'cancelled');
  });
});

test('an editor that does not answer: the agent hears so after the configured timeout', async () => {
  const { agent } = await codingAgent('coder');
  const ed = editor({ permission: null });
  await ed.app.connectWith(overWebSocket(agent.id), async (a) => {
    const sessionId = await session(a);
    const done = await a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'ask' }] });
    assert.equal(done.stopReason, 'end_turn');
  });
  const last = text(ed.updates).at(-1);
  assert.match(last, /^no answer: .*did not answer within 1\.5 s/, last);
});

test('the agent disconnecting mid-prompt fails the prompt with a clear error, and later requests too', async () => {
  const { agent } = await codingAgent('coder');
  const ed = editor();
  await ed.app.connectWith(overWebSocket(agent.id), async (a) => {
    const sessionId = await session(a);
    const running = a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'hang' }] });
    await ed.updated(() => text(ed.updates).includes('working on: hang'));
    await agent.conn.disconnect();
    await assert.rejects(running, (e) => /went away before answering session\/prompt/.test(e.message ?? JSON.stringify(e)));
    await assert.rejects(a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'again' }] }),
      (e) => /not available/.test(e.message ?? JSON.stringify(e)));
  });
});

test('an agent killed without a goodbye: its prompt fails, and later requests fail at once', async () => {
  const { agent } = await codingAgent('coder');
  const ed = editor();
  await ed.app.connectWith(overWebSocket(agent.id), async (a) => {
    const sessionId = await session(a);
    const running = a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'hang' }] });
    await ed.updated(() => text(ed.updates).includes('working on: hang'));
    agent.ws.terminate();
    await assert.rejects(running, (e) => /went away before answering session\/prompt/.test(e.message ?? JSON.stringify(e)));
    // Still registered while its session may resume, but not available.
    for (const method of [acp.methods.agent.session.new, acp.methods.agent.session.prompt]) {
      const params = method === acp.methods.agent.session.new ? { cwd: '/work', mcpServers: [] } : { sessionId, prompt: [{ type: 'text', text: 'again' }] };
      await assert.rejects(soon(a.request(method, params)), (e) => /The MAP agent is not available/.test(e.message ?? JSON.stringify(e)));
    }
  });
});

test('an editor bound by role moves to the next live agent with that role when its agent is killed', async () => {
  const role = `builder-${uid()}`;
  const first = await codingAgent(role);
  await codingAgent(role);
  const ed = editor();
  await ed.app.connectWith(overWebSocket(role), async (a) => {
    const sessionId = await session(a);
    const running = a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'hang' }] });
    await ed.updated(() => text(ed.updates).includes('working on: hang'));
    first.agent.ws.terminate();
    await assert.rejects(running, (e) => /went away before answering session\/prompt/.test(e.message ?? JSON.stringify(e)));
    const next = await soon(session(a));
    const done = await a.request(acp.methods.agent.session.prompt, { sessionId: next, prompt: [{ type: 'text', text: 'hello' }] });
    assert.equal(done.stopReason, 'end_turn');
  });
});

test('an unknown agent, and a missing ?agent=, are refused clearly', async () => {
  const ed = editor();
  await ed.app.connectWith(overWebSocket('nobody-has-this-role'), async (a) => {
    await assert.rejects(a.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} }),
      (e) => /no MAP agent has the id or role/.test(e.message ?? JSON.stringify(e)));
  });
  // Credentials the gateway refuses: said at the first request, not mistaken for a missing agent.
  const bad = new WebSocket(`ws://127.0.0.1:${gw.port}/acp?agent=coder`, { headers: { 'x-api-key': 'not-a-key' } });
  await new Promise((r, j) => { bad.once('open', r); bad.once('error', j); });
  const answer = new Promise((r) => bad.once('message', (d) => r(JSON.parse(d.toString()))));
  bad.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: 1, clientCapabilities: {} } }));
  const init = await answer;
  assert.equal(init.id, 1);
  assert.match(init.error.message, /map\/connect failed/, JSON.stringify(init));
  bad.close();

  const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/acp`);
  const refused = await new Promise((resolve) => ws.once('unexpected-response', (_req, res) => {
    let body = '';
    res.on('data', (d) => { body += d; });
    res.on('end', () => resolve({ status: res.statusCode, body }));
  }));
  assert.equal(refused.status, 400);
  assert.match(refused.body, /agent=/);
});

test('ACP-compat methods answer from MAP for an ACP-only client', async () => {
  const { agent } = await codingAgent('coder');
  const watcher = await connectClient(gw, { name: 'watcher' });
  const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/acp?agent=${agent.id}`);
  await new Promise((r, j) => { ws.once('open', r); ws.once('error', j); });
  const answers = new Map();
  const events = watchedList();
  ws.on('message', (d) => {
    const m = JSON.parse(d.toString());
    if (m.method === '_map/event') events.push(m.params);
    else if (m.id !== undefined) answers.get(m.id)?.(m);
  });
  const call = (id, method, params) => new Promise((resolve) => { answers.set(id, resolve); ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params })); });
  const list = await call(1, '_map/agent.list', {});
  assert.ok(list.result.agents.some((x) => x.id === agent.id), JSON.stringify(list));
  const graph = await call(2, '_map/hierarchy.get', {});
  assert.ok(graph.result.nodes ?? graph.result.agents, JSON.stringify(graph));
  assert.ok(Array.isArray((await call(3, '_map/scope.list', {})).result.scopes));
  const sub = await call(4, '_map/subscribe', { filter: { eventTypes: ['message_sent'] } });
  assert.ok(sub.result.subscriptionId);
  const sent = await call(5, '_map/send', { to: { agent: agent.id }, payload: { note: 'from an ACP-only client' } });
  assert.deepEqual(sent.result.delivered, [agent.id]);
  const broadcast = await call(6, '_map/broadcast', { payload: { hello: 'everyone' } });
  assert.ok(broadcast.result.delivered.length >= 2, JSON.stringify(broadcast));
  const tasks = await call(7, '_map/task.list', {});
  assert.equal(tasks.error?.code, -32601, 'this gateway loads neither the tasks extension nor the UAP hub');
  assert.match(tasks.error.message, /UAP/);
  assert.equal((await call(8, '_map/nothing', {})).error.code, -32601);
  await events.until(() => events.items.length >= 2);
  assert.ok(events.items.every((e) => e.event.type === 'message_sent'));
  ws.close();
  await watcher.conn.disconnect();
});

test('over stdio: map-gateway acp launched as the editor launches an agent', async () => {
  const { agent } = await codingAgent('coder');
  const child = spawn(GATEWAY_BIN, ['acp', '--agent', agent.id, '--url', `ws://127.0.0.1:${gw.port}/map`], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const ed = editor({ permission: 'reject' });
  try {
    await ed.app.connectWith(stream, async (a) => {
      const sessionId = await session(a);
      const edit = await a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'edit' }] });
      assert.equal(edit.stopReason, 'end_turn');
      const running = a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'wait' }] });
      await ed.updated(() => text(ed.updates).includes('working on: wait'));
      await a.notify(acp.methods.agent.session.cancel, { sessionId });
      assert.equal((await running).stopReason, 'cancelled');
      // The agent going mid-prompt reaches the editor through the subprocess too.
      const hanging = a.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'hang' }] });
      await ed.updated(() => text(ed.updates).includes('working on: hang'));
      await agent.conn.disconnect();
      await assert.rejects(hanging, (e) => /went away before answering session\/prompt/.test(e.message ?? JSON.stringify(e)));
    });
  } finally {
    child.stdin.end();
  }
  const code = await new Promise((resolve) => child.once('exit', resolve));
  assert.equal(code, 0, stderr);
  assert.ok(text(ed.updates).includes('permission reject; the file has 13 bytes; terminal term-1'), JSON.stringify(ed.updates));
});

/** `promise`, or a rejection when it is not settled within `ms`. */
function soon(promise, ms = WAIT_MS * 2) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms).unref())]);
}

/** A list whose `until(cond)` resolves as soon as a push makes `cond` true. */
function watchedList() {
  const items = [];
  const waiting = new Set();
  return {
    items,
    push(x) {
      items.push(x);
      for (const w of waiting) if (w.cond()) { waiting.delete(w); w.resolve(); }
    },
    until(cond, ms = WAIT_MS * 2) {
      if (cond()) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const w = { cond, resolve };
        waiting.add(w);
        setTimeout(() => { if (waiting.delete(w)) reject(new Error('condition not met in time')); }, ms).unref();
      });
    },
  };
}
