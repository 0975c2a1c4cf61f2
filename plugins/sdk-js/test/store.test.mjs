import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { state, reset } from './mock/state.mjs';
import { collection, counter, Batch, retry, RETRY, keys, StoreError } from '../src/index.js';

beforeEach(reset);

test('a JSON collection writes, reads, versions and deletes', () => {
  const notes = collection('notes');
  assert.equal(notes.get('n1'), undefined);
  assert.deepEqual(notes.getVersioned('n1'), { value: undefined, version: 0n });
  notes.put('n1', { text: 'hi' });
  const v = notes.getVersioned('n1');
  assert.deepEqual(v.value, { text: 'hi' });
  assert.equal(typeof v.version, 'bigint');
  assert.ok(notes.has('n1'));
  assert.deepEqual(notes.getMany(['n1', 'n2']), [{ text: 'hi' }, undefined]);
  assert.equal(notes.count(), 1);
  assert.equal(notes.delete('n1'), true);
  assert.equal(notes.delete('n1'), false);
});

test('ranges read page by page with cursors, forwards and reversed', () => {
  const c = collection('items', 'text');
  for (let i = 0; i < 5; i++) c.put(keys.join('a', keys.number(i, 3)), `v${i}`);
  c.put('b/000', 'other');
  const first = c.page({ prefix: 'a/', limit: 2 });
  assert.deepEqual(first.entries.map((e) => e.value), ['v0', 'v1']);
  const second = c.range({ prefix: 'a/' }).resume(first.next).page(10);
  assert.deepEqual(second.entries.map((e) => e.value), ['v2', 'v3', 'v4']);
  assert.equal(second.next, undefined);
  const back = c.range({ prefix: 'a/', reverse: true });
  const p = back.page(2);
  assert.deepEqual(p.entries.map((e) => e.value), ['v4', 'v3']);
  assert.deepEqual(back.resume(p.next).take(5).map((e) => e.value), ['v2', 'v1', 'v0']);
  assert.equal([...c.entries({ prefix: 'a/' })].length, 5);
});

test('counters add atomically and list under a prefix', () => {
  const hits = counter('hits');
  assert.equal(hits.get('x'), 0);
  assert.equal(hits.add('from/x'), 1);
  assert.equal(hits.add('from/x', 4), 5);
  assert.equal(hits.add('from/y', -2), -2);
  assert.deepEqual(hits.all('from/'), { x: 5, y: -2 });
});

test('a batch applies writes, deletes and adds in one commit, or none when a condition fails', () => {
  const notes = collection('notes');
  const totals = counter('totals');
  notes.put('gone', 1);
  const done = new Batch().put(notes, 'a', { n: 1 }).delete(notes, 'gone').add(totals, 'all', 2).commit();
  assert.equal(done.committed, true);
  assert.deepEqual(done.counters, [2]);
  assert.equal(notes.get('gone'), undefined);

  const stale = new Batch().expectVersion(notes, 'a', 1n).put(notes, 'a', { n: 2 }).commit();
  assert.deepEqual(stale, { committed: false, conflict: { index: 0, collection: 'notes', key: 'a' } });
  assert.deepEqual(notes.get('a'), { n: 1 });
  assert.equal(new Batch().expectAbsent(notes, 'a').put(notes, 'a', 0).commit().committed, false);
  assert.equal(new Batch().expectValue(notes, 'a', { n: 1 }).put(notes, 'a', { n: 3 }).commit().committed, true);
  assert.throws(() => new Batch().expectAbsent(notes, 'a').apply(), StoreError);
});

test('apply commits again after a conflict without conditions; retry reruns a read-modify-write', () => {
  const notes = collection('notes');
  state.conflictAt = 0;
  assert.equal(new Batch().put(notes, 'k', 1).apply().committed, true);
  assert.equal(notes.get('k'), 1);

  let runs = 0;
  const next = retry(() => {
    runs++;
    const cur = notes.getVersioned('k');
    if (runs === 1) notes.put('k', 10); // someone else wrote in between
    const out = new Batch().expectVersion(notes, 'k', cur.version).put(notes, 'k', cur.value + 1).commit();
    return out.committed ? cur.value + 1 : RETRY;
  });
  assert.equal(runs, 2);
  assert.equal(next, 11);
  assert.throws(() => retry(() => RETRY, 3), /too many concurrent updates/);
});

test('store errors become StoreErrors; unreadable values are storage failures', () => {
  const notes = collection('notes');
  state.failStore = { tag: 'unavailable', val: 'database down' };
  assert.throws(() => notes.get('a'), (e) => e instanceof StoreError && e.kind === 'unavailable' && /database down/.test(e.message));
  state.failStore = undefined;
  collection('notes', 'text').put('bad', '{not json');
  assert.throws(() => notes.get('bad'), (e) => e instanceof StoreError && e.kind === 'invalid');
});

test('keys escape separators and write numbers in fixed width', () => {
  assert.equal(keys.escape('a/b%'), 'a%2Fb%25');
  assert.equal(keys.unescape(keys.escape('50%/x%2F')), '50%/x%2F');
  assert.equal(keys.prefix('conv', keys.escape('a/b')), 'conv/a%2Fb/');
  assert.equal(keys.number(42, 5), '00042');
  assert.ok(keys.number(9) < keys.number(10));
});
