// Handshake, framing and JSON-RPC error handling.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { AgentConnection, ClientConnection } from '@multi-agent-protocol/sdk';
import {
  startGateway, connectAgent, connectClient, connectBase, rawSocket, rawParticipant,
  rejectsWithCode, assertMapError, uid, quietPeriod,
} from './harness.mjs';

let gw;
before(async () => { gw = await startGateway({ maxMessageBytes: 65536 }); });
after(async () => { await gw?.stop(); });

test('ClientConnection.connect (static factory) completes map/connect with the SDK result shape', async () => {
  const client = await ClientConnection.connect(gw.url, { name: 'factory-client' });
  try {
    assert.equal(client.isConnected, true);
    assert.equal(typeof client.sessionId, 'string');
    assert.ok(client.sessionId.length > 0, 'sessionId must be non-empty');
    assert.ok(client.serverCapabilities && typeof client.serverCapabilities === 'object', 'capabilities must be an object');
    const list = await client.listAgents();
    assert.ok(Array.isArray(list.agents), 'map/agents/list result must be {agents: []}');
  } finally {
    await client.disconnect();
  }
});

test('map/connect result: protocolVersion 1, sessionId, participantId, capabilities, systemInfo', async () => {
  const c = await connectClient(gw, { name: 'shape-client' });
  const r = c.connectResult;
  assert.equal(r.protocolVersion, 1);
  assert.equal(typeof r.sessionId, 'string');
  assert.ok(r.sessionId.length > 0);
  assert.equal(typeof r.participantId, 'string');
  assert.ok(r.participantId.length > 0);
  assert.equal(typeof r.capabilities, 'object');
  assert.ok(r.capabilities !== null);
  assert.equal(typeof r.systemInfo?.name, 'string', 'systemInfo.name');
  assert.equal(typeof r.systemInfo?.version, 'string', 'systemInfo.version');
  assert.equal(c.conn.sessionId, r.sessionId, 'SDK stores result.sessionId');
  // two connections get different sessions
  const c2 = await connectClient(gw, { name: 'shape-client-2' });
  assert.notEqual(c2.sessionId, c.sessionId);
  assert.notEqual(c2.participantId, c.participantId);
});

test('AgentConnection.connect (static factory) sends map/connect + map/agents/register and gets {agent}', async () => {
  const role = uid('role');
  const agent = await AgentConnection.connect(gw.url, { name: 'factory-agent', role });
  try {
    assert.equal(typeof agent.agentId, 'string');
    assert.ok(agent.agentId.length > 0);
    assert.equal(typeof agent.sessionId, 'string');
    assert.ok(['registered', 'active', 'idle'].includes(agent.state), `fresh agent state should be registered/active/idle, got ${agent.state}`);
    const client = await connectClient(gw);
    const got = await client.conn.getAgent(agent.agentId);
    assert.equal(got.agent.id, agent.agentId);
    assert.equal(got.agent.name, 'factory-agent');
    assert.equal(got.agent.role, role);
  } finally {
    await agent.disconnect();
  }
});

test('map/agents/register honours a given agentId; a duplicate id is error 3000', async () => {
  const id = uid('fixed-agent');
  const a = await connectAgent(gw, { agentId: id, name: 'first' });
  assert.equal(a.id, id);
  assert.equal(a.agent.id, id);
  assert.equal(a.agent.name, 'first');
  assert.equal(typeof a.agent.ownerId, 'string', 'agent.ownerId');
  // same id from another connection
  const b = await connectBase(gw);
  await b.request('map/connect', { protocolVersion: 1, participantType: 'agent' });
  await rejectsWithCode(b.request('map/agents/register', { agentId: id, name: 'second' }), 3000, 'duplicate agentId');
  // the SDK AgentConnection path surfaces the same error
  await rejectsWithCode(connectAgent(gw, { agentId: id, name: 'third' }), 3000, 'duplicate via AgentConnection');
  // the original is untouched
  const c = await connectClient(gw);
  const got = await c.conn.getAgent(id);
  assert.equal(got.agent.name, 'first');
});

test('response id keeps the JSON type of the request id (string and integer)', async () => {
  const raw = await rawSocket(gw);
  const r1 = await raw.request('map/connect', { protocolVersion: 1, participantType: 'client' }, 'conn-abc');
  assert.equal(r1.id, 'conn-abc');
  assert.equal(r1.jsonrpc, '2.0');
  assert.ok(r1.result?.sessionId);
  const r2 = await raw.request('map/agents/list', {}, 42);
  assert.strictEqual(r2.id, 42);
  assert.ok(Array.isArray(r2.result?.agents));
  const r3 = await raw.request('map/agents/list', {}, '42');
  assert.strictEqual(r3.id, '42');
});

test('unparsable frame → -32700 with id null, connection stays open and usable', async () => {
  const raw = await rawSocket(gw);
  raw.sendText('{"jsonrpc":"2.0","id":1,"method":"map/connect",');
  const err = await raw.nextFrame((f) => f && f.error, 1500, 'parse error response');
  assert.equal(err.jsonrpc, '2.0');
  assert.strictEqual(err.id, null);
  assertMapError(err.error, -32700, 'parse error');
  raw.sendText('this is not json at all');
  const err2 = await raw.nextFrame((f) => f && f.error, 1500, 'second parse error');
  assertMapError(err2.error, -32700, 'parse error 2');
  assert.ok(raw.isOpen(), 'socket must stay open after a parse error');
  const ok = await raw.request('map/connect', { protocolVersion: 1, participantType: 'client' }, 7);
  assert.ok(ok.result?.sessionId, `map/connect after parse errors must work, got ${JSON.stringify(ok)}`);
  const list = await raw.request('map/agents/list', {}, 8);
  assert.ok(Array.isArray(list.result?.agents));
});

test('object without jsonrpc "2.0" or without method → -32600, connection usable', async () => {
  const raw = await rawSocket(gw);
  await raw.call('map/connect', { protocolVersion: 1, participantType: 'client' });
  raw.send({ id: 501, method: 'map/agents/list', params: {} });
  let f = await raw.nextFrame((x) => x && x.id === 501, 1500, 'response to request without jsonrpc');
  assertMapError(f.error, -32600, 'missing jsonrpc');
  raw.send({ jsonrpc: '1.0', id: 502, method: 'map/agents/list', params: {} });
  f = await raw.nextFrame((x) => x && x.id === 502, 1500, 'response to jsonrpc 1.0 request');
  assertMapError(f.error, -32600, 'wrong jsonrpc version');
  raw.send({ jsonrpc: '2.0', id: 503 });
  f = await raw.nextFrame((x) => x && x.id === 503, 1500, 'response to request without method');
  assertMapError(f.error, -32600, 'missing method');
  raw.send({ jsonrpc: '2.0', id: 504, method: 17 });
  f = await raw.nextFrame((x) => x && (x.id === 504 || (x.id === null && x.error)), 1500, 'response to non-string method');
  assertMapError(f.error, -32600, 'non-string method');
  raw.sendText('42');
  f = await raw.nextFrame((x) => x && x.error && x.id === null, 1500, 'response to a bare number');
  assertMapError(f.error, -32600, 'non-object frame');
  assert.ok(raw.isOpen());
  const list = await raw.call('map/agents/list', {});
  assert.ok(Array.isArray(list.agents));
});

test('unknown method → -32601 (BaseConnection)', async () => {
  const b = await connectBase(gw);
  await b.request('map/connect', { protocolVersion: 1, participantType: 'client' });
  await rejectsWithCode(b.request('map/does-not-exist', {}), -32601, 'unknown map/ method');
  await rejectsWithCode(b.request('totally/unknown', { a: 1 }), -32601, 'unknown method');
  // still usable
  const list = await b.request('map/agents/list', {});
  assert.ok(Array.isArray(list.agents));
});

test('invalid params → -32602', async () => {
  const b = await connectBase(gw);
  await b.request('map/connect', { protocolVersion: 1, participantType: 'agent' });
  await b.request('map/agents/register', { name: 'params-sender' });
  await rejectsWithCode(b.request('map/send', { payload: { x: 1 } }), -32602, 'map/send without to');
  await rejectsWithCode(b.request('map/agents/get', {}), -32602, 'map/agents/get without agentId');
  await rejectsWithCode(b.request('map/agents/get', { agentId: 12345 }), -32602, 'map/agents/get with numeric agentId');
  await rejectsWithCode(b.request('map/send', { to: 12, payload: {} }), -32602, 'map/send with numeric to');
  await rejectsWithCode(b.request('map/scopes/join', { agentId: 'x' }), -32602, 'map/scopes/join without scopeId');
});

test('map/connect with an unsupported protocolVersion or participantType is rejected with -32602', async () => {
  const b = await connectBase(gw);
  await rejectsWithCode(b.request('map/connect', { protocolVersion: 1, participantType: 'martian' }), -32602, 'bad participantType');
  const b2 = await connectBase(gw);
  await rejectsWithCode(b2.request('map/connect', { protocolVersion: 'one', participantType: 'client' }), -32602, 'non-integer protocolVersion');
});

test('notifications (no id) get no answer', async () => {
  const raw = await rawSocket(gw);
  await raw.call('map/connect', { protocolVersion: 1, participantType: 'client' });
  const before = raw.tap.frames.length;
  raw.send({ jsonrpc: '2.0', method: 'map/agents/list', params: {} });
  raw.send({ jsonrpc: '2.0', method: 'no/such/notification', params: {} });
  await quietPeriod();
  const r = await raw.request('map/agents/list', {}, 'after-notif');
  const after = raw.tap.frames.slice(before);
  assert.equal(after.length, 1, `only the response to the request may arrive, got ${JSON.stringify(after)}`);
  assert.equal(after[0].id, 'after-notif');
  assert.ok(Array.isArray(r.result.agents));
});

test('a JSON array (batch) is answered with an array of responses', async () => {
  const raw = await rawSocket(gw);
  raw.send([
    { jsonrpc: '2.0', id: 'b1', method: 'map/connect', params: { protocolVersion: 1, participantType: 'client' } },
  ]);
  let arr = await raw.nextFrame((f) => Array.isArray(f), 1500, 'batch response');
  assert.equal(arr.length, 1);
  assert.equal(arr[0].id, 'b1');
  assert.ok(arr[0].result?.sessionId);

  raw.send([
    { jsonrpc: '2.0', id: 'b2', method: 'map/agents/list', params: {} },
    { jsonrpc: '2.0', method: 'map/agents/list', params: {} }, // notification: no response entry
    { jsonrpc: '2.0', id: 'b3', method: 'map/nope', params: {} },
    { jsonrpc: '2.0', id: 'b4', method: 'map/scopes/list', params: {} },
  ]);
  arr = await raw.nextFrame((f) => Array.isArray(f), 1500, 'second batch response');
  assert.equal(arr.length, 3, `three requests → three responses, got ${JSON.stringify(arr)}`);
  const byId = Object.fromEntries(arr.map((r) => [r.id, r]));
  assert.ok(Array.isArray(byId.b2?.result?.agents), 'b2 result');
  assertMapError(byId.b3?.error, -32601, 'b3 unknown method in batch');
  assert.ok(Array.isArray(byId.b4?.result?.scopes), 'b4 scopes list');
  assert.ok(raw.isOpen());
});

test('a frame over max_message_bytes gets an error and the connection stays usable', async () => {
  const raw = await rawSocket(gw);
  await raw.call('map/connect', { protocolVersion: 1, participantType: 'agent' });
  const me = (await raw.call('map/agents/register', { name: 'big-sender' })).agent;
  const big = 'x'.repeat(70_000);
  raw.send({ jsonrpc: '2.0', id: 'big-1', method: 'map/send', params: { to: { agent: me.id }, payload: { big } } });
  const f = await raw.nextFrame((x) => x && x.error && (x.id === 'big-1' || x.id === null), 2000, 'error for oversized frame');
  assertMapError(f.error, [-32600, 4000, 4001, 4002], 'oversized frame');
  // The next answer comes after anything the gateway sent on the socket before it, a close included.
  const list = await raw.call('map/agents/list', {});
  assert.ok(raw.isOpen(), 'socket must stay open after an oversized frame');
  assert.ok(list.agents.some((a) => a.id === me.id), 'session still works after the oversized frame');
  // a frame comfortably under the limit still goes through
  const ok = await raw.call('map/send', { to: { agent: me.id }, payload: { small: 'y'.repeat(1000) } });
  assert.equal(typeof ok.messageId, 'string');
});

test('map/disconnect → {success: true, resumeToken}; ClientConnection.disconnect() returns the token', async () => {
  const raw = await rawParticipant(gw, { participantType: 'client' });
  const r = await raw.call('map/disconnect', { reason: 'test' });
  assert.equal(r.success, true);
  assert.equal(typeof r.resumeToken, 'string');
  assert.ok(r.resumeToken.length > 0);

  const c = await connectClient(gw);
  const token = await c.conn.disconnect('bye');
  assert.equal(typeof token, 'string', 'ClientConnection.disconnect() reads result.resumeToken');
  assert.ok(token.length > 0);
  assert.equal(c.conn.isConnected, false);
});
