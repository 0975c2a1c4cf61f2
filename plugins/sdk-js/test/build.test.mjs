// The build helper against the repository's wit/: the contract version and
// the worlds come from there, and the SDK's sources name no version.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { contractVersion, worlds, worldExports, entrySource } from '../build.mjs';

const SDK = join(dirname(fileURLToPath(import.meta.url)), '..');
const WIT = join(SDK, '..', '..', 'wit');

test('the contract version is the one package.wit declares', async () => {
  const text = await readFile(join(WIT, 'package.wit'), 'utf8');
  const version = await contractVersion(WIT);
  assert.match(version, /^\d+\.\d+\.\d+$/);
  assert.ok(text.includes(`package map-gateway:plugin@${version};`));
});

test('the package is versioned with the contract', async () => {
  const pkg = JSON.parse(await readFile(join(SDK, 'package.json'), 'utf8'));
  assert.equal(pkg.version, await contractVersion(WIT));
});

test('the SDK sources import the gateway without a version, only interfaces the imports world has', async () => {
  const imported = new Set();
  for (const file of await readdir(join(SDK, 'src'))) {
    const text = await readFile(join(SDK, 'src', file), 'utf8');
    assert.doesNotMatch(text, /map-gateway:plugin\/[a-z-]+@/, `${file} names a contract version`);
    for (const m of text.matchAll(/from 'map-gateway:plugin\/([a-z-]+)'/g)) imported.add(m[1]);
  }
  const wit = await readFile(join(WIT, 'worlds.wit'), 'utf8');
  const world = /world imports \{([^}]*)\}/.exec(wit)[1];
  const offered = new Set([...world.matchAll(/import ([a-z-]+);/g)].map((m) => m[1]));
  assert.ok(imported.size >= 7, [...imported].join());
  for (const i of imported) assert.ok(offered.has(i), `${i} is not imported by world imports`);
});

test('worlds: the exports of each, includes followed', async () => {
  const all = await worlds(WIT);
  assert.ok(all.extension && all['intercepting-extension']);
  assert.deepEqual(await worldExports(WIT, 'intercepting-extension'), ['rpc', 'send-observer']);
  assert.deepEqual(await worldExports(WIT, 'stateful-extension'), ['rpc', 'lifecycle']);
  assert.deepEqual((await worldExports(WIT, 'plugin')).sort(), ['grpc-handler', 'grpc-unary', 'http-handler', 'lifecycle', 'resources', 'rpc', 'send-observer']);
  await assert.rejects(worldExports(WIT, 'nope'), /no world nope/);
});

test('the entry exports the world\'s interfaces in camelCase, the module\'s own first', () => {
  const src = entrySource('/p/plugin.js', ['rpc', 'send-observer']);
  assert.match(src, /^import \* as module from "\/p\/plugin\.js";/);
  assert.match(src, /export const sendObserver = pick\("sendObserver"\);/);
  assert.match(src, /const pick = \(name\) => module\[name\] \?\? module\.default\?\.\[name\];/);
  assert.match(src, /export const rpc = /);
});
