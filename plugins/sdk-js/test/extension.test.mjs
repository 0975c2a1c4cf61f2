import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { state, reset } from './mock/state.mjs';
import { defineExtension, errorRange, RpcError, invalidParams, collection, events, router, config, metrics, timers, newId, http, log } from '../src/index.js';

beforeEach(reset);

const ERRORS = errorRange(90000, 90999, { storage: 90998 });
const NOT_FOUND = ERRORS.code(90001);
const items = collection('items');

const ext = defineExtension({
  name: 'x-demo',
  version: '1.2.3',
  errors: ERRORS,
  capabilities: () => ({ enabled: true, max: config.get('max', 10) }),
  eventFilters: [{ key: 'demo', eventTypes: 'demo.*', fields: { itemId: ['itemId', 'item.id'] } }],
  methods: {
    'demo/put': (call) => {
      const item = { id: newId('item'), text: call.string('text'), by: call.actor };
      items.put(item.id, item);
      events.emit('demo.put', { itemId: item.id });
      return item;
    },
    'demo/get': (call) => {
      const id = call.string('id');
      const item = items.get(id);
      if (!item) throw new RpcError(NOT_FOUND, `No item ${id}`, { details: { id } });
      return item;
    },
    'demo/page': (call) => ({ limit: call.integer('limit', { min: 1, max: 5, fallback: 2 }), cursor: call.optionalString('cursor') ?? null }),
    'demo/bug': () => null.boom,
    'demo/foreign': () => router.call('other/x', {}),
    'demo/async': async (call) => ({ twice: (await Promise.resolve(call.integer('n'))) * 2 }),
    'demo/nothing': () => undefined,
  },
  observer: {
    interest: ['demo'],
    onSend(message) {
      if (message.payload.fail) throw new Error('observer bug');
      items.put(`seen/${message.id}`, { bytes: message.json.payload.length, ts: message.timestamp });
    },
  },
  init() {
    if (config.get('failInit')) throw new Error('no init today');
  },
  onTimer(id, tag) {
    items.put(`timer/${tag}`, String(id));
  },
  resources: {
    'x-demo/item': {
      list: ({ limit, cursor }) => ({ items: [{ id: 'i1', name: 'one', status: 'open', ownerId: 'p', createdAt: 5, metadata: { a: 1 } }].slice(0, limit), cursor, total: 1 }),
      get: ({ id }) => (id === 'i1' ? { id, name: 'one', status: 'open', ownerId: 'p', createdAt: 5, updatedAt: 6 } : null),
    },
  },
  http: (req) => ({ status: 201, body: { path: req.path, got: req.json() } }),
});

const caller = { tenant: 't', participantId: 'p1', participantType: 'agent', sessionId: 's', agentIds: ['a1'], capabilities: 'null' };
const call = (method, params) => ext.rpc.handle(caller, method, JSON.stringify(params));
/** The `err` of handle, as componentize-js would read it. */
function err(fn) {
  try {
    const r = fn();
    assert.fail(`expected an error, got ${r}`);
  } catch (e) {
    assert.ok(e.payload, `a thrown payload, not ${e}`);
    return { ...e.payload, data: e.payload.data === undefined ? undefined : JSON.parse(e.payload.data) };
  }
}

test('describe is the WIT descriptor, with capabilities from the config', () => {
  state.config = { max: 3 };
  const d = ext.rpc.describe();
  assert.deepEqual({ ...d, capabilities: JSON.parse(d.capabilities) }, {
    name: 'x-demo', version: '1.2.3', uri: 'x-demo:1', capabilityGroup: 'x-demo',
    capabilities: { enabled: true, max: 3 },
    methods: ['demo/put', 'demo/get', 'demo/page', 'demo/bug', 'demo/foreign', 'demo/async', 'demo/nothing'],
    errorRange: [90000n, 90999n],
    eventFilters: [{ key: 'demo', eventTypes: 'demo.*', fields: [{ name: 'itemId', paths: ['itemId', 'item.id'] }] }],
  });
  assert.equal(defineExtension({ name: 'mail', version: '1', errors: [10000, 10999] }).rpc.describe().uri, 'urn:map:ext:mail:1');
});

test('methods answer JSON; errors keep their codes and details', () => {
  const item = JSON.parse(call('demo/put', { text: 'hi' }));
  assert.match(item.id, /^item-[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.equal(item.by, 'a1');
  assert.deepEqual(state.events, [{ type: 'demo.put', data: { itemId: item.id }, audience: undefined }]);
  assert.deepEqual(JSON.parse(call('demo/get', { id: item.id })), item);
  assert.deepEqual(err(() => call('demo/get', { id: 'none' })), { code: 90001, message: 'No item none', data: { details: { id: 'none' } } });
  assert.equal(err(() => call('demo/put', { txt: 1 })).message, 'Invalid params: missing field `text`');
  assert.equal(err(() => call('demo/put', { text: 1 })).code, -32602);
  assert.equal(err(() => call('demo/none', {})).code, -32601);
  assert.equal(err(() => ext.rpc.handle(caller, 'demo/get', '[1]')).code, -32602);
  assert.equal(call('demo/nothing', {}), 'null');
});

test('integer params are checked; null and absent are the default', () => {
  assert.deepEqual(JSON.parse(call('demo/page', { limit: null, cursor: null })), { limit: 2, cursor: null });
  for (const limit of [0, 6, 1.5, '3', true]) assert.equal(err(() => call('demo/page', { limit })).code, -32602, String(limit));
  assert.equal(err(() => call('demo/page', { cursor: 5 })).code, -32602);
});

test('storage failures take the storage code, bugs and foreign codes the internal one', () => {
  state.failStore = { tag: 'unavailable', val: 'down' };
  assert.deepEqual(err(() => call('demo/get', { id: 'x' })), { code: 90998, message: 'storage unavailable: down', data: { retryable: true } });
  state.failStore = undefined;
  const bug = err(() => call('demo/bug', {}));
  assert.equal(bug.code, 90999);
  assert.ok(state.logs.some((l) => l.level === 'error' && l.message.includes('demo/bug')));
  state.routeAnswer = () => ({ error: { code: 12000n, message: 'elsewhere', data: '{"x":1}' } });
  const foreign = err(() => call('demo/foreign', {}));
  assert.equal(foreign.code, 90999);
  assert.deepEqual(foreign.data.details, { code: 12000, data: { details: { x: 1 } } });
  state.routeAnswer = () => ({ error: { code: -32602n, message: 'bad', data: undefined } });
  assert.equal(err(() => call('demo/foreign', {})).code, -32602, 'JSON-RPC codes pass through');
});

test('async handlers resolve to JSON and reject with the payload', async () => {
  assert.equal(await call('demo/async', { n: 21 }), '{"twice":42}');
  await assert.rejects(call('demo/async', {}), (e) => e.payload.code === -32602);
});

test('the observer gets parsed messages with their JSON texts; a failure is logged, not thrown', () => {
  assert.deepEqual(ext.sendObserver.interest(), ['demo']);
  const msg = { id: 'm1', from: 'a', to: '{"agent":"b"}', timestamp: 7n, payload: '{"t":"é"}', meta: '{}', delivered: ['b'] };
  ext.sendObserver.onSend(caller, msg);
  assert.deepEqual(items.get('seen/m1'), { bytes: 9, ts: 7 });
  ext.sendObserver.onSend(caller, { ...msg, id: 'm2', payload: '{"fail":true}' });
  assert.ok(state.logs.some((l) => l.message.includes('m2') && l.message.includes('observer bug')));
});

test('lifecycle: init failures are the err string, timers reach onTimer', () => {
  ext.lifecycle.init();
  state.config = { failInit: true };
  assert.throws(() => ext.lifecycle.init(), (e) => e.payload === 'no init today');
  ext.lifecycle.onTimer(4n, 'tick');
  assert.equal(items.get('timer/tick'), '4');
  assert.equal(timers.schedule(1000, 'later'), 1n);
  assert.deepEqual(state.timers, [{ delayMs: 1000n, tag: 'later' }]);
  assert.throws(() => timers.schedule(8 * 86_400_000, 'x'), /delay too long/);
});

test('resources list and get in the WIT record form', () => {
  assert.deepEqual(ext.resources.kinds(), ['x-demo/item']);
  const page = ext.resources.list(caller, 'x-demo/item', '{}', undefined, 10);
  assert.deepEqual(page.items[0], { id: 'i1', name: 'one', status: 'open', ownerId: 'p', createdAt: 5n, updatedAt: 5n, metadata: '{"a":1}' });
  assert.equal(page.total, 1n);
  assert.equal(ext.resources.get(caller, 'x-demo/item', 'nope'), undefined);
  assert.equal(ext.resources.get(caller, 'x-demo/item', 'i1').updatedAt, 6n);
});

test('http: JSON bodies in and out', () => {
  const body = new TextEncoder().encode('{"a":1}');
  const r = ext.httpHandler.handle({ method: 'POST', path: '/x', query: '', headers: [['content-type', 'application/json']], body });
  assert.equal(r.status, 201);
  assert.deepEqual(r.headers, [['content-type', 'application/json']]);
  assert.deepEqual(JSON.parse(new TextDecoder().decode(r.body)), { path: '/x', got: { a: 1 } });
});

test('imports: events with audiences, router, metrics, config, log', async () => {
  events.emit('x.y', { a: 1 }, { to: ['p2'] });
  events.emit('x.z', { a: 2 }, { to: [], capability: 'x.canSee' });
  assert.equal(events.emit('', { a: 3 }), false, 'a refused event is false and a warning');
  assert.deepEqual(state.events.map((e) => e.audience), [{ ids: ['p2'] }, { ids: [], capability: 'x.canSee' }]);
  assert.ok(state.logs.some((l) => l.level === 'warn'));
  assert.deepEqual(router.send({ agent: 'b' }, { hi: 1 }), { messageId: 'm1', delivered: [] });
  assert.deepEqual(state.routed[0].args, ['{"agent":"b"}', '{"hi":1}', undefined]);
  assert.deepEqual(router.connectedSince(['online', 'offline']), [1700000000000, undefined]);
  assert.deepEqual(router.agent('a1'), { id: 'a1', name: 'one' });
  assert.equal(router.agent('zz'), undefined);
  assert.equal(metrics.counterAdd('hits_total', { kind: 'a' }), true);
  assert.equal(metrics.counterAdd('Bad', {}), false);
  assert.deepEqual(state.metrics[0], { kind: 'counter', name: 'hits_total', labels: [['kind', 'a']], delta: 1n });
  state.config = { a: 1 };
  assert.deepEqual(config.all(), { a: 1 });
  assert.equal(config.get('b', 'dflt'), 'dflt');
  log.info('hello');
  assert.deepEqual(state.logs.at(-1), { level: 'info', message: 'hello' });
});

test('http.fetch needs the build\'s fetch; postJson sends JSON', async (t) => {
  const real = globalThis.fetch;
  t.after(() => { globalThis.fetch = real; });
  globalThis.fetch = undefined;
  await assert.rejects(http.fetch('http://x'), /outbound HTTP is off/);
  const sent = [];
  globalThis.fetch = async (url, init) => {
    sent.push({ url, init });
    return { status: 204, text: async () => '' };
  };
  assert.deepEqual(await http.postJson('http://127.0.0.1/hook', { a: 1 }), { status: 204, body: '' });
  assert.deepEqual(sent, [{ url: 'http://127.0.0.1/hook', init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' } }]);
});

test('ids are time-ordered and error ranges refuse reserved codes', () => {
  const a = newId('n');
  const b = newId('n');
  assert.ok(a < b);
  assert.throws(() => errorRange(-32700, -32000), /reserved/);
  assert.throws(() => errorRange(5000, 5999), /reserved/);
  assert.throws(() => ERRORS.code(91000), /outside/);
  assert.throws(() => defineExtension({ name: 'x', version: '1' }), /errors/);
  assert.equal(invalidParams('x').code, -32602);
});
