// An in-memory `store` with the WIT's semantics: byte-ordered keys, versions, atomic commits.
import { state, hostError } from './state.mjs';

const enc = new TextEncoder();
const dec = new TextDecoder();
const id = (c, k) => `${c}\u0000${k}`;

function check() {
  if (state.failStore) throw hostError(state.failStore);
}

function rows(collection, o) {
  const out = [];
  for (const [k, v] of state.data) {
    const [c, key] = k.split('\u0000');
    if (c !== collection || !key.startsWith(o.prefix)) continue;
    if (o.after !== undefined && !(key > o.after)) continue;
    if (o.before !== undefined && !(key < o.before)) continue;
    out.push({ key, item: { ...v } });
  }
  out.sort((a, b) => (a.key < b.key ? -1 : 1));
  if (o.reverse) out.reverse();
  return out;
}

export function get(collection, key) {
  check();
  const v = state.data.get(id(collection, key));
  return v === undefined ? undefined : dec.decode(v.value);
}

export function put(collection, key, value) {
  check();
  state.data.set(id(collection, key), { value: enc.encode(value), version: ++state.version });
}

function del(collection, key) {
  check();
  return state.data.delete(id(collection, key));
}
export { del as delete };

export function count(collection, prefix) {
  check();
  return BigInt(rows(collection, { prefix }).length);
}

export function getMany(keys) {
  check();
  return keys.map((k) => state.data.get(id(k.collection, k.key)));
}

export function scanPage(collection, o) {
  check();
  const all = rows(collection, o);
  const entries = all.slice(0, Math.min(o.limit, 1000));
  return { entries, next: all.length > entries.length && entries.length > 0 ? entries.at(-1).key : undefined };
}

export function commit(ops) {
  check();
  if (state.conflictAt !== undefined) {
    const index = state.conflictAt;
    state.conflictAt = undefined;
    return { tag: 'conflict', val: index };
  }
  for (const [i, op] of ops.entries()) {
    const cur = state.data.get(id(op.val.collection, op.val.key));
    if (op.tag === 'expect-version' && (cur?.version ?? 0n) !== op.val.version) return { tag: 'conflict', val: i };
    if (op.tag === 'expect-value') {
      const want = op.val.value === undefined ? undefined : dec.decode(op.val.value);
      if ((cur === undefined ? undefined : dec.decode(cur.value)) !== want) return { tag: 'conflict', val: i };
    }
  }
  const version = ++state.version;
  const counters = [];
  for (const op of ops) {
    const k = id(op.val.collection, op.val.key);
    if (op.tag === 'put') state.data.set(k, { value: op.val.value, version });
    if (op.tag === 'delete') state.data.delete(k);
    if (op.tag === 'add') {
      if (typeof op.val.delta !== 'bigint') throw new TypeError('s64 delta must be a BigInt');
      const cur = state.data.get(k);
      const n = BigInt(cur === undefined ? 0 : dec.decode(cur.value)) + op.val.delta;
      state.data.set(k, { value: enc.encode(String(n)), version });
      counters.push(n);
    }
  }
  // componentize-js gives a list<s64> as a BigInt64Array.
  return { tag: 'committed', val: { version, counters: BigInt64Array.from(counters) } };
}
