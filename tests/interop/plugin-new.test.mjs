// A plugin made by `map-gateway plugin new` in each language (Rust on the
// plugin SDK, Python with componentize-py, JavaScript with componentize-js),
// built as generated, answers the real SDK client the same way: the extension
// is listed at map/connect, `sdk-example/put` stores and emits
// `sdk-example.put` to a subscriber, `sdk-example/get` reads back, errors
// keep their codes, and the generated README's "Try it" runs as written.
//
// scripts/test.sh makes and builds the three projects (target/scaffold/); by hand:
//   target/debug/map-gateway plugin new sdk-example --dir target/scaffold/sdk-example
//   (cd target/scaffold/sdk-example && CARGO_TARGET_DIR=.. cargo build --release --target wasm32-wasip2)
//   target/debug/map-gateway plugin new sdk-example --lang python --dir target/scaffold/sdk-example-python
//   target/scaffold/sdk-example-python/build.sh
//   target/debug/map-gateway plugin new sdk-example --lang js --dir target/scaffold/sdk-example-js
//   target/scaffold/sdk-example-js/build.sh
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startGateway, connectClient, connectAgent, rejectsWithCode, GATEWAY_BIN } from './harness.mjs';
import { fencedBlocks, missingInOrder } from './readme-blocks.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const SCAFFOLD = join(HERE, '..', '..', 'target', 'scaffold');
const BUILDS = {
  rust: join(SCAFFOLD, 'wasm32-wasip2', 'release', 'sdk_example.wasm'),
  python: join(SCAFFOLD, 'sdk-example-python', 'sdk-example.wasm'),
  js: join(SCAFFOLD, 'sdk-example-js', 'sdk-example.wasm'),
};
const call = (h, method, params) => h.conn.callExtension(method, params);
// `plugin new` draws the range from the name: 90000 + 1000 × (FNV-1a-32 mod 900).
const NOT_FOUND = 622_001;

for (const [lang, WASM] of Object.entries(BUILDS)) describe(`plugin new --lang ${lang}`, () => {
  let gw;
  before(async () => {
    assert.ok(existsSync(WASM), `${WASM} is missing: build it as the header of this file says (scripts/test.sh does)`);
    // A Python or JavaScript component compiles for a while at its first start.
    gw = await startGateway({ readyTimeoutMs: 120_000, extraToml: `[plugins.sdk-example]\npath = ${JSON.stringify(WASM)}\nmemory_mb = 64\n` });
  }, { timeout: 130_000 });
  after(async () => { await gw?.stop(); });

  test('map/connect lists the generated extension and its capabilities', async () => {
    const c = await connectClient(gw);
    const caps = c.connectResult.capabilities;
    const ext = caps.extensions.find((e) => e.uri === 'x-sdk-example:1');
    assert.ok(ext, `extensions list x-sdk-example:1 (outside the registry: the x- form): ${JSON.stringify(caps.extensions)}`);
    assert.equal(ext.name, 'x-sdk-example');
    assert.deepEqual(ext.methods, ['sdk-example/put', 'sdk-example/get']);
    assert.deepEqual(caps['x-sdk-example'], { enabled: true });
  });

  test('put stores an item and emits sdk-example.put; get reads it back', async () => {
    const watcher = await connectClient(gw, { name: 'watcher' });
    const sub = await watcher.conn.subscribe({ eventTypes: ['sdk-example.put'] });
    const a = await connectAgent(gw, { name: 'writer' });

    const item = await call(a, 'sdk-example/put', { text: 'hello from the SDK client' });
    assert.match(item.id, /^item-[0-9A-HJKMNP-TV-Z]{26}$/);
    assert.equal(item.text, 'hello from the SDK client');
    assert.equal(typeof item.createdAt, 'number');

    const [ev] = await watcher.tap.waitForEvents(sub.id, (e) => e.type === 'sdk-example.put', 1);
    assert.equal(ev.event.data.itemId, item.id);

    const c = await connectClient(gw);
    assert.deepEqual(await call(c, 'sdk-example/get', { itemId: item.id }), item, 'another session reads the stored item');
    const later = await call(a, 'sdk-example/put', { text: 'second' });
    assert.ok(later.id > item.id, 'ids are time-ordered');
  });

  test('errors: the plugin range for a missing item, -32602 for bad params', async () => {
    const c = await connectClient(gw);
    const missing = await rejectsWithCode(call(c, 'sdk-example/get', { itemId: 'item-none' }), NOT_FOUND, 'missing item');
    assert.equal(missing.data.details.itemId, 'item-none');
    const bad = await rejectsWithCode(call(c, 'sdk-example/put', { txt: 'typo' }), -32602, 'missing text');
    assert.match(bad.message, /missing field `text`/);
  });

  test("the generated README's Try it runs as written", async () => {
    // A fresh project's README (what this binary writes now), its js block run with node against this gateway.
    const dir = mkdtempSync(join(tmpdir(), 'plugin-new-readme-'));
    try {
      await promisify(execFile)(GATEWAY_BIN, ['plugin', 'new', 'sdk-example', '--lang', lang, '--dir', join(dir, 'p')]);
      const readme = readFileSync(join(dir, 'p', 'README.md'), 'utf8');
      assert.match(readme, /capabilities\["x-sdk-example"\]/, 'the README names the key map/connect shows the capabilities under');
      const blocks = fencedBlocks(readme).filter((b) => b.lang === 'js');
      assert.equal(blocks.length, 1, 'one js example');
      symlinkSync(join(HERE, 'node_modules'), join(dir, 'node_modules'));
      writeFileSync(join(dir, 'try.mjs'), blocks[0].text.replaceAll('127.0.0.1:4700', `127.0.0.1:${gw.port}`));
      const { stdout } = await promisify(execFile)(process.execPath, [join(dir, 'try.mjs')], { cwd: dir, timeout: 30_000 });
      const shown = [...blocks[0].text.matchAll(/^\s*\/\/ → (.*)$/gm)].map((m) => m[1]);
      assert.ok(shown.length >= 2, 'the block shows what it prints');
      assert.equal(missingInOrder(shown, stdout.replace(/\s+/g, ' ')), null, `it printed what the README shows:\n${stdout}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('tenants keep separate items', async () => {
    const a = await connectAgent(gw, { name: 'acme-writer', auth: { method: 'api-key', credential: 'acme-key' } });
    const item = await call(a, 'sdk-example/put', { text: 'acme only' });
    const other = await connectClient(gw);
    await rejectsWithCode(call(other, 'sdk-example/get', { itemId: item.id }), NOT_FOUND, "another tenant's item");
  });
});
