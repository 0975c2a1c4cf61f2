// audit: a per-tenant audit log of `map/send` traffic, in JavaScript.
//
// World `intercepting-extension` of ../../../wit (map-gateway:plugin):
// it exports `rpc` (the audit/* methods) and `send-observer` (every map/send
// of the tenant). The same extension exists in Rust and Python; ../README.md
// is the behaviour all three share.
//
//   audit/list   {limit?, cursor?} -> {records, nextCursor}
//   audit/stats  {}                -> {total, bySender: {<sender>: n}}
//   audit/forget {from}            -> {removed}
//
// Storage (the host scopes it to (tenant, plugin)):
//   records/<timestamp, 13 digits>/<message id>  the record as JSON (UTF-8)
//   counters/total                               decimal text, via `add`
//   counters/from/<sender>                       decimal text, via `add`
//
// componentize-js specifics used here: u64/s64 arrive as BigInt and are given
// as BigInt; list<u8> is a Uint8Array; a variant is {tag, val}; an imported
// result<T, E> returns T or throws an error whose `payload` is E; an exported
// result's `err` is thrown as an object with an own `payload` property. Any
// other exception traps the instance, so nothing else may escape.

import * as store from 'map-gateway:plugin/store@0.2.4';
import { emit } from 'map-gateway:plugin/events@0.2.4';
import { log } from 'map-gateway:plugin/log@0.2.4';
import { counterAdd } from 'map-gateway:plugin/metrics@0.2.4';

const VERSION = '1.0.0';
const ERROR_RANGE = [22000, 22099];
const INTERNAL = 22099;
const INVALID_PARAMS = -32602;
const METHOD_NOT_FOUND = -32601;

const RECORDS = 'records';
const COUNTERS = 'counters';
const TOTAL = 'total';
const FROM_PREFIX = 'from/';

const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 200;
/** The host caps a page at 1000 entries. */
const PAGE = 1000;
/** Attempts of a commit the host answers with `conflict` (PostgreSQL only, without conditions). */
const ATTEMPTS = 3;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A JSON-RPC error: thrown, it becomes the `err` of `handle`. */
class RpcError extends Error {
  constructor(code, message, data) {
    super(message);
    // componentize-js reads the error value from an own `payload` property.
    this.payload = { code, message, data: data === undefined ? undefined : JSON.stringify(data) };
  }
}

const invalidParams = (message) => new RpcError(INVALID_PARAMS, message);

/** Why a host call failed, as text (store errors are {tag, val}). */
function reason(e) {
  const p = e?.payload;
  if (p !== undefined) return typeof p === 'string' ? p : `${p.tag ?? 'error'}: ${p.val ?? JSON.stringify(p)}`;
  return e?.message ?? String(e);
}

function commitOnce(ops) {
  for (let attempt = 1; ; attempt++) {
    const outcome = store.commit(ops);
    if (outcome.tag === 'committed') return outcome.val;
    if (attempt >= ATTEMPTS) throw new Error(`store commit conflicted ${ATTEMPTS} times (operation ${outcome.val})`);
  }
}

/** Every entry of a collection under a prefix, in key order, page by page. */
function* scanAll(collection, prefix) {
  let after;
  for (;;) {
    const page = store.scanPage(collection, { prefix, after, before: undefined, limit: PAGE, maxBytes: 0, reverse: false });
    yield* page.entries;
    if (page.next === undefined || page.entries.length === 0) return;
    after = page.next;
  }
}

/** A counter's value: decimal text, absent as 0. */
const counter = (text) => (text === undefined ? 0 : Number.parseInt(text, 10) || 0);

// ---------------------------------------------------------------------------
// Observer
// ---------------------------------------------------------------------------

function record(message) {
  const timestamp = Number(message.timestamp);
  const key = `${String(timestamp).padStart(13, '0')}/${message.id}`;
  let protocol = null;
  try {
    const meta = JSON.parse(message.meta);
    if (meta !== null && typeof meta === 'object' && typeof meta.protocol === 'string') protocol = meta.protocol;
  } catch {
    // The host always passes JSON; a meta that is not is no protocol.
  }
  return {
    key,
    id: message.id,
    from: message.from,
    to: JSON.parse(message.to),
    timestamp,
    payloadBytes: encoder.encode(message.payload).length,
    protocol,
    delivered: message.delivered.length,
  };
}

function observe(message) {
  const rec = record(message);
  commitOnce([
    { tag: 'add', val: { collection: COUNTERS, key: TOTAL, delta: 1n } },
    { tag: 'add', val: { collection: COUNTERS, key: FROM_PREFIX + rec.from, delta: 1n } },
    { tag: 'put', val: { collection: RECORDS, key: rec.key, value: encoder.encode(JSON.stringify(rec)) } },
  ]);
  try {
    emit('audit.recorded', JSON.stringify({ key: rec.key, id: rec.id, from: rec.from }));
  } catch (e) {
    log('warn', `audit.recorded not emitted: ${reason(e)}`);
  }
  try {
    counterAdd('audit_records_total', [], 1n);
  } catch {
    // A refused metric (metrics off records nothing, but never fails) is not worth a log line per message.
  }
}

export const sendObserver = {
  interest() {
    return [];
  },

  onSend(_caller, message) {
    try {
      observe(message);
    } catch (e) {
      // A trap would only lose this message, but would also cost a fresh instance.
      try {
        log('error', `audit: message ${message?.id} not recorded: ${reason(e)}`);
      } catch {
        // Nothing left to do.
      }
    }
  },
};

// ---------------------------------------------------------------------------
// Methods
// ---------------------------------------------------------------------------

/** `params[name]`: absent or null is `undefined`, anything else must be a string. */
function optionalString(params, name) {
  const v = params[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalidParams(`\`${name}\` must be a string`);
  return v;
}

function list(params) {
  const limit = params.limit ?? DEFAULT_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw invalidParams(`\`limit\` must be an integer from 1 to ${MAX_LIMIT}`);
  }
  const cursor = optionalString(params, 'cursor');
  const page = store.scanPage(RECORDS, { prefix: '', after: cursor, before: undefined, limit, maxBytes: 0, reverse: false });
  return {
    records: page.entries.map((e) => JSON.parse(decoder.decode(e.item.value))),
    nextCursor: page.next ?? null,
  };
}

function stats(_params) {
  const total = counter(store.get(COUNTERS, TOTAL));
  const bySender = {};
  for (const e of scanAll(COUNTERS, FROM_PREFIX)) {
    bySender[e.key.slice(FROM_PREFIX.length)] = counter(decoder.decode(e.item.value));
  }
  return { total, bySender };
}

function forget(params) {
  const from = params.from;
  if (typeof from !== 'string') throw invalidParams('`from` must be a string');
  for (let attempt = 1; ; attempt++) {
    const ops = [];
    for (const e of scanAll(RECORDS, '')) {
      let rec;
      try {
        rec = JSON.parse(decoder.decode(e.item.value));
      } catch {
        continue;
      }
      if (rec?.from === from) ops.push({ tag: 'delete', val: { collection: RECORDS, key: e.key } });
    }
    const removed = ops.length;
    ops.push({ tag: 'delete', val: { collection: COUNTERS, key: FROM_PREFIX + from } });
    if (removed > 0) ops.push({ tag: 'add', val: { collection: COUNTERS, key: TOTAL, delta: BigInt(-removed) } });
    const outcome = store.commit(ops);
    if (outcome.tag === 'committed') return { removed };
    if (attempt >= ATTEMPTS) throw new Error(`store commit conflicted ${ATTEMPTS} times (operation ${outcome.val})`);
  }
}

const METHODS = {
  'audit/list': list,
  'audit/stats': stats,
  'audit/forget': forget,
};

// ---------------------------------------------------------------------------
// The exported `rpc` interface
// ---------------------------------------------------------------------------

export const rpc = {
  describe() {
    return {
      name: 'audit',
      version: VERSION,
      uri: 'urn:example:audit:1',
      capabilityGroup: 'audit',
      capabilities: JSON.stringify({ enabled: true }),
      methods: Object.keys(METHODS),
      errorRange: ERROR_RANGE,
      eventFilters: [],
    };
  },

  handle(_caller, method, paramsJson) {
    try {
      const fn = METHODS[method];
      if (!fn) throw new RpcError(METHOD_NOT_FOUND, `audit has no method ${method}`);
      const params = JSON.parse(paramsJson);
      if (params === null || typeof params !== 'object' || Array.isArray(params)) {
        throw invalidParams('params must be an object');
      }
      return JSON.stringify(fn(params));
    } catch (e) {
      if (e instanceof RpcError) throw e;
      // Anything else (a store error, a bug) is 22099; it must not escape,
      // or the instance traps and is thrown away.
      const message = `audit ${method} failed: ${reason(e)}`;
      try {
        log('error', message);
      } catch {
        // Logging is best effort.
      }
      throw new RpcError(INTERNAL, message);
    }
  },
};
