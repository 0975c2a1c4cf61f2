// Durable storage (WIT `store`), scoped by the host to (tenant, plugin):
// collections with a codec, paged ranges, atomic batches with
// compare-and-swap and counters, and a retry loop.
import { store as wit } from './host.js';
import { StoreError, storeCall } from './errors.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The host caps a page at 1,000 entries. */
export const MAX_PAGE = 1000;
/** How often `retry` runs an attempt that keeps conflicting. */
export const RETRIES = 10;

/** How a collection turns values into bytes and back. */
export const codecs = Object.freeze({
  json: { encode: (v) => encoder.encode(JSON.stringify(v)), decode: (b) => JSON.parse(decoder.decode(b)) },
  text: { encode: (v) => encoder.encode(String(v)), decode: (b) => decoder.decode(b) },
  bytes: { encode: (v) => v, decode: (b) => b },
});

function codecOf(codec) {
  const c = typeof codec === 'string' ? codecs[codec] : codec;
  if (!c || typeof c.encode !== 'function' || typeof c.decode !== 'function') throw new TypeError(`unknown codec ${codec}`);
  return c;
}

/** A stored value that its codec cannot read: a storage failure, not the caller's fault. */
function decodeAt(codec, name, key, bytes) {
  try {
    return codec.decode(bytes);
  } catch (e) {
    throw new StoreError('invalid', `${name}/${key} cannot be read: ${e?.message ?? e}`);
  }
}

/** A collection of values under string keys (JSON by default: `collection('notes', 'text')` for text). */
export class Collection {
  constructor(name, codec = 'json') {
    if (typeof name !== 'string' || name.length === 0) throw new TypeError('a collection name is a non-empty string');
    this.name = name;
    this.codec = codecOf(codec);
  }

  /** The value under `key`, or `undefined`. */
  get(key) {
    return this.getVersioned(key).value;
  }

  /** `{value, version}`: `version` is 0n when the key is absent (what `expectVersion` takes). */
  getVersioned(key) {
    const [item] = storeCall(() => wit.getMany([{ collection: this.name, key }]));
    if (item === undefined || item === null) return { value: undefined, version: 0n };
    return { value: decodeAt(this.codec, this.name, key, item.value), version: BigInt(item.version) };
  }

  /** The values of several keys in one snapshot (at most 1,000), in order; `undefined` where absent. */
  getMany(keys) {
    const items = storeCall(() => wit.getMany(keys.map((key) => ({ collection: this.name, key }))));
    return items.map((it, i) => (it === undefined || it === null ? undefined : decodeAt(this.codec, this.name, keys[i], it.value)));
  }

  has(key) {
    return storeCall(() => wit.getMany([{ collection: this.name, key }]))[0] != null;
  }

  /** Write `value` under `key` (one atomic write). */
  put(key, value) {
    new Batch().put(this, key, value).apply();
  }

  /** Remove `key`; `true` when it existed. */
  delete(key) {
    return storeCall(() => wit.delete(this.name, key));
  }

  /** How many keys start with `prefix`. */
  count(prefix = '') {
    return Number(storeCall(() => wit.count(this.name, prefix)));
  }

  /** One page: `{entries: [{key, value, version}], next}` (see Range). */
  page(options = {}) {
    return new Range(this, options).page(options.limit ?? 100);
  }

  /** Every entry of a range, read page by page (a generator). */
  entries(options = {}) {
    return new Range(this, options).entries();
  }

  /** A range of keys: `{prefix, after, before, reverse, maxBytes}`. */
  range(options = {}) {
    return new Range(this, options);
  }
}

/** Keys of a collection in byte order, read with `scan-page`. */
export class Range {
  constructor(collection, { prefix = '', after, before, reverse = false, maxBytes = 0 } = {}) {
    Object.assign(this, { collection, prefix, after: after ?? undefined, before: before ?? undefined, reverse, maxBytes });
  }

  /** The range continued past `cursor` (a page's `next`): after it, or before it when reversed. */
  resume(cursor) {
    if (cursor === undefined || cursor === null) return this;
    return new Range(this.collection, { ...this, [this.reverse ? 'before' : 'after']: cursor });
  }

  /** At most `limit` entries (capped at 1,000 and by bytes); `next` is absent when the range is done. */
  page(limit = 100) {
    const { collection: c } = this;
    const options = {
      prefix: this.prefix,
      after: this.after,
      before: this.before,
      limit: Math.max(0, Math.min(MAX_PAGE, Math.trunc(limit))),
      maxBytes: this.maxBytes,
      reverse: this.reverse,
    };
    const page = storeCall(() => wit.scanPage(c.name, options));
    const entries = page.entries.map((e) => ({ key: e.key, value: decodeAt(c.codec, c.name, e.key, e.item.value), version: BigInt(e.item.version) }));
    return { entries, next: page.next ?? undefined };
  }

  /** Every entry, in order, reading 1,000 per host call. */
  *entries() {
    let range = this;
    for (;;) {
      const page = range.page(MAX_PAGE);
      yield* page.entries;
      if (page.next === undefined || page.entries.length === 0) return;
      range = range.resume(page.next);
    }
  }

  /** The first `n` entries (fewer when the range ends first). */
  take(n) {
    const out = [];
    for (const e of this.entries()) {
      if (out.length >= n) break;
      out.push(e);
    }
    return out;
  }
}

/** Decimal counters updated with the store's atomic `add`. */
export class Counter {
  constructor(name) {
    this.name = name;
  }

  /** The counter's value (0 when absent). */
  get(key) {
    const [item] = storeCall(() => wit.getMany([{ collection: this.name, key }]));
    return item == null ? 0 : parseCounter(this.name, key, decoder.decode(item.value));
  }

  /** Add `delta` (may be negative) in one commit; the new value. */
  add(key, delta = 1) {
    const batch = new Batch();
    batch.add(this, key, delta);
    return batch.apply().counters[0];
  }

  /** Every counter under `prefix`, as `{key: value}`, keys without the prefix. */
  all(prefix = '') {
    const out = {};
    for (const e of new Range(new Collection(this.name, 'text'), { prefix }).entries()) {
      out[e.key.slice(prefix.length)] = parseCounter(this.name, e.key, e.value);
    }
    return out;
  }
}

function parseCounter(name, key, text) {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new StoreError('invalid', `${name}/${key} is not a counter: ${text}`);
  return n;
}

const nameOf = (c) => (typeof c === 'string' ? c : c.name);
const encodeFor = (c, value) => (typeof c === 'string' ? codecs.json : c.codec ?? codecs.json).encode(value);

/**
 * Writes and conditions applied by one `commit`: when every condition holds,
 * every put, delete and add in order; otherwise none. Collections are given
 * as Collection/Counter objects or names (a name's values are JSON).
 */
export class Batch {
  constructor() {
    this.ops = [];
    this.conditions = 0;
  }

  put(collection, key, value) {
    this.ops.push({ tag: 'put', val: { collection: nameOf(collection), key, value: encodeFor(collection, value) } });
    return this;
  }

  delete(collection, key) {
    this.ops.push({ tag: 'delete', val: { collection: nameOf(collection), key } });
    return this;
  }

  /** Add `delta` to a counter; its new value is in `counters` of the result, in order of the adds. */
  add(counter, key, delta = 1) {
    this.ops.push({ tag: 'add', val: { collection: nameOf(counter), key, delta: BigInt(delta) } });
    return this;
  }

  /** The key's version must be `version` (0n: absent), as `getVersioned` returned it. */
  expectVersion(collection, key, version) {
    this.conditions++;
    this.ops.push({ tag: 'expect-version', val: { collection: nameOf(collection), key, version: BigInt(version) } });
    return this;
  }

  expectAbsent(collection, key) {
    return this.expectVersion(collection, key, 0n);
  }

  /** The key must hold `value` (encoded by the collection's codec); `undefined`: absent. */
  expectValue(collection, key, value) {
    this.conditions++;
    const bytes = value === undefined ? undefined : encodeFor(collection, value);
    this.ops.push({ tag: 'expect-value', val: { collection: nameOf(collection), key, value: bytes } });
    return this;
  }

  get length() {
    return this.ops.length;
  }

  /**
   * `{committed: true, version, counters}` or `{committed: false, conflict:
   * {index, collection, key}}`. An empty batch commits without a host call.
   */
  commit() {
    if (this.ops.length === 0) return { committed: true, version: 0n, counters: [] };
    const outcome = storeCall(() => wit.commit(this.ops));
    if (outcome.tag === 'committed') {
      return { committed: true, version: BigInt(outcome.val.version), counters: Array.from(outcome.val.counters, Number) };
    }
    const index = Number(outcome.val);
    const op = this.ops[index]?.val ?? {};
    return { committed: false, conflict: { index, collection: op.collection, key: op.key } };
  }

  /**
   * Commit a batch whose conflicts are not expected: without conditions a
   * conflict comes only from concurrent transactions (PostgreSQL), and the
   * same writes are committed again; a failed condition is a StoreError.
   */
  apply() {
    for (let attempt = 1; ; attempt++) {
      const outcome = this.commit();
      if (outcome.committed) return outcome;
      if (this.conditions > 0 || attempt >= RETRIES) {
        const { collection, key } = outcome.conflict;
        throw new StoreError('unavailable', `a concurrent update changed ${collection}/${key}; retry`);
      }
    }
  }
}

/** What a `retry` attempt returns to be run again. */
export const RETRY = Symbol('retry');

/**
 * Run `attempt` (read, decide, commit a conditional batch) until it returns
 * something other than RETRY, at most `times` times; then a StoreError.
 */
export function retry(attempt, times = RETRIES) {
  for (let i = 0; i < times; i++) {
    const result = attempt();
    if (result !== RETRY) return result;
  }
  throw new StoreError('unavailable', 'too many concurrent updates of the same data; retry');
}

/** Keys whose byte order is the order wanted: escaped parts, fixed-width numbers. */
export const keys = Object.freeze({
  /** An id safe as one key part: `%` becomes `%25`, `/` becomes `%2F`. */
  escape: (part) => part.replaceAll('%', '%25').replaceAll('/', '%2F'),
  unescape: (part) => part.replaceAll('%2F', '/').replaceAll('%25', '%'),
  join: (...parts) => parts.join('/'),
  /** `join(parts) + '/'`: the prefix of every key under these parts. */
  prefix: (...parts) => `${parts.join('/')}/`,
  /** A non-negative integer in `width` digits (default 20): byte order is numeric order. */
  number: (n, width = 20) => String(n).padStart(width, '0'),
});

export const collection = (name, codec) => new Collection(name, codec);
export const counter = (name) => new Counter(name);

/** Raw access: the WIT functions with errors as StoreError. */
export const raw = Object.freeze({
  get: (collection, key) => storeCall(() => wit.get(collection, key)) ?? undefined,
  put: (collection, key, value) => storeCall(() => wit.put(collection, key, value)),
  delete: (collection, key) => storeCall(() => wit.delete(collection, key)),
  getMany: (refs) => storeCall(() => wit.getMany(refs)),
  scanPage: (collection, options) => storeCall(() => wit.scanPage(collection, options)),
  commit: (ops) => storeCall(() => wit.commit(ops)),
});
