// One extension, four languages: the audit example (examples/audit) built
// in Rust (plugin SDK), Python (componentize-py), JavaScript
// (componentize-js) and C (wit-bindgen, clang), each loaded as `audit` and
// held to the same behaviour through the MAP SDK client.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startGateway, connectAgent, connectClient, WAIT_MS } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const EXAMPLES = join(HERE, '..', '..', 'examples', 'audit');
const BUILDS = {
  rust: join(HERE, '..', '..', 'target', 'guests', 'wasm32-wasip2', 'release', 'audit.wasm'),
  python: join(EXAMPLES, 'python', 'audit.wasm'),
  js: join(EXAMPLES, 'js', 'audit.wasm'),
  c: join(EXAMPLES, 'c', 'audit.wasm'),
};
// Compiling a large component the first time takes a while on a busy machine.
const START_MS = 120_000;

for (const [lang, wasm] of Object.entries(BUILDS)) {
  describe(`audit in ${lang}`, () => {
    let gw;
    let webhook;
    const hooked = [];

    before(async () => {
      assert.ok(existsSync(wasm), `${wasm} is missing: run scripts/build-plugins.sh --fixtures`);
      webhook = createServer((req, res) => {
        let body = '';
        req.on('data', (d) => { body += d; });
        req.on('end', () => {
          hooked.push({ method: req.method, type: req.headers['content-type'], body: JSON.parse(body) });
          res.writeHead(204);
          res.end();
        });
      });
      await new Promise((r) => webhook.listen(0, '127.0.0.1', r));
      const hook = `http://127.0.0.1:${webhook.address().port}/audit`;
      gw = await startGateway({
        readyTimeoutMs: START_MS,
        extraToml: `[plugins.audit]\npath = ${JSON.stringify(wasm)}\nmemory_mb = 64\ndeadline_ms = 5000\nconfig = { webhook = ${JSON.stringify(hook)} }\noutbound_hosts = ["127.0.0.1"]\n`,
      });
    }, { timeout: START_MS + 10_000 });

    after(async () => {
      await gw?.stop();
      webhook?.close();
    });

    const call = (h, method, params) => h.conn.callExtension(method, params);

    test('every map/send is recorded once, counted per sender, paged oldest first, and announced', async () => {
      const alice = await connectAgent(gw, { name: 'alice' });
      const bob = await connectAgent(gw, { name: 'bob' });
      const watcher = await connectClient(gw, { name: 'watcher' });
      const sub = await watcher.conn.subscribe({ eventTypes: ['audit.recorded'] });
      const payloads = [{ n: 1 }, { text: 'héllo ✓' }, { n: 3 }];
      for (const p of payloads) await alice.conn.send({ agent: bob.id }, p);
      await bob.conn.send({ agent: alice.id }, { reply: true }, { protocol: 'acp' });
      await watcher.tap.waitForEvents(sub.id, () => true, 4, WAIT_MS * 4);
      const announced = watcher.tap.events(sub.id).map((p) => p.event.data);
      assert.deepEqual(announced.map((d) => d.from), [alice.id, alice.id, alice.id, bob.id]);

      const stats = await call(watcher, 'audit/stats', {});
      assert.deepEqual(stats, { total: 4, bySender: { [alice.id]: 3, [bob.id]: 1 } });

      const first = await call(watcher, 'audit/list', { limit: 3 });
      assert.equal(first.records.length, 3);
      assert.equal(typeof first.nextCursor, 'string');
      const second = await call(watcher, 'audit/list', { limit: 3, cursor: first.nextCursor });
      assert.equal(second.records.length, 1);
      assert.equal(second.nextCursor, null);
      const records = [...first.records, ...second.records];
      assert.deepEqual(records.map((r) => r.key), [...records.map((r) => r.key)].sort(), 'oldest first');
      assert.deepEqual(records.map((r) => r.key), announced.map((d) => d.key));
      const [r0, r1, , r3] = records;
      assert.equal(r0.from, alice.id);
      assert.deepEqual(r0.to, { agent: bob.id });
      assert.equal(r0.delivered, 1);
      assert.equal(r0.protocol, null);
      assert.equal(r0.key, `${String(r0.timestamp).padStart(13, '0')}/${r0.id}`);
      assert.equal(r1.payloadBytes, Buffer.byteLength(JSON.stringify(payloads[1])), 'UTF-8 bytes of the payload text');
      assert.equal(r3.protocol, 'acp');
      assert.equal(r3.from, bob.id);
      assert.deepEqual(await call(watcher, 'audit/list', {}), { records, nextCursor: null }, 'default limit 50');

      const text = await (await fetch(`http://127.0.0.1:${gw.port}/metrics`)).text();
      assert.match(text, /^map_plugin_audit_records_total\{tenant="default",plugin="audit"\} 4$/m, text);
    });

    test('forget removes a sender\'s records and counter in one commit', async () => {
      const carol = await connectAgent(gw, { name: 'carol' });
      const dave = await connectAgent(gw, { name: 'dave' });
      const watcher = await connectClient(gw, { name: 'watcher' });
      const sub = await watcher.conn.subscribe({ eventTypes: ['audit.recorded'] });
      await carol.conn.send({ agent: dave.id }, { x: 1 });
      await carol.conn.send({ agent: dave.id }, { x: 2 });
      await dave.conn.send({ agent: carol.id }, { x: 3 });
      await watcher.tap.waitForEvents(sub.id, () => true, 3, WAIT_MS * 4);
      const before = await call(watcher, 'audit/stats', {});
      assert.deepEqual(await call(watcher, 'audit/forget', { from: carol.id }), { removed: 2 });
      const after = await call(watcher, 'audit/stats', {});
      assert.equal(after.total, before.total - 2);
      assert.equal(after.bySender[carol.id], undefined);
      assert.equal(after.bySender[dave.id], 1);
      const { records } = await call(watcher, 'audit/list', { limit: 200 });
      assert.ok(!records.some((r) => r.from === carol.id));
      assert.deepEqual(await call(watcher, 'audit/forget', { from: 'nobody' }), { removed: 0 });
    });

    test('bad params are -32602, unknown methods -32601', async () => {
      const c = await connectClient(gw, { name: 'prober' });
      for (const [method, params] of [
        ['audit/list', { limit: 0 }], ['audit/list', { limit: 201 }], ['audit/list', { limit: 1.5 }],
        ['audit/list', { limit: '3' }], ['audit/list', { limit: true }], ['audit/list', { cursor: 5 }],
        ['audit/forget', {}], ['audit/forget', { from: 7 }],
      ]) {
        await assert.rejects(call(c, method, params), (e) => e.code === -32602, `${method} ${JSON.stringify(params)}`);
      }
      await assert.rejects(call(c, 'audit/nothing', {}), (e) => e.code === -32601);
    });

    if (lang === 'rust') {
      test('audit/export POSTs the stats to the allowed webhook through wasi:http', async () => {
        const c = await connectClient(gw, { name: 'exporter' });
        const stats = await call(c, 'audit/stats', {});
        assert.deepEqual(await call(c, 'audit/export', {}), { status: 204 });
        assert.equal(hooked.length, 1);
        assert.equal(hooked[0].method, 'POST');
        assert.equal(hooked[0].type, 'application/json');
        assert.deepEqual(hooked[0].body, stats);
      });
    }
  });
}
