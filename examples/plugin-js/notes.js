// notes: a map-gateway extension written in JavaScript.
//
// It implements the `extension` world of wit/ (package map-gateway:plugin)
// and serves four JSON-RPC methods:
//
//   notes/put    {key, text}               -> {note, created}
//   notes/get    {key}                     -> {note}
//   notes/list   {prefix?, limit?, after?} -> {notes, nextCursor?}
//   notes/delete {key}                     -> {deleted: true, key}
//
// A note is {key, text, revision, createdAt, updatedAt, updatedBy}. Notes live
// in the host's `store`, which the host already scopes to (tenant, plugin): the
// plugin never sees a tenant id in a key, and one tenant cannot read another's
// notes. Every write emits a `notes.changed` event into the tenant's MAP event
// stream.
//
// How componentize-js maps the WIT contract onto JavaScript:
// - Each imported interface is an ES module named by its full WIT name
//   (`map-gateway:plugin/store@0.2.6`); its functions are named exports in
//   camelCase.
// - The exported interface `rpc` is an object exported under the interface's
//   name, with one method per WIT function. Record fields are camelCase
//   (`capabilityGroup`, `participantId`), a tuple is an array, an option is a
//   value or `undefined`, a variant is `{tag, val}`, and s64 accepts a number
//   or a BigInt.
// - An imported function returning `result<T, E>` returns T, or throws an
//   error whose `payload` is E.
// - An exported function returning `result<T, E>` returns T; to return E it
//   throws an object whose own `payload` property is E. Any other exception
//   traps the instance (the host then answers -32603 and discards it), so
//   handle() turns unexpected exceptions into -32603 itself and keeps its
//   instance.

import * as store from 'map-gateway:plugin/store@0.2.6';
import { emit } from 'map-gateway:plugin/events@0.2.6';
import { log } from 'map-gateway:plugin/log@0.2.6';
import { all as configAll } from 'map-gateway:plugin/config@0.2.6';

const VERSION = '1.0.0';
const COLLECTION = 'notes';

/** The error codes of this extension: the range is declared in describe(). */
const ERRORS = {
  NOTE_NOT_FOUND: 21000,
  STORAGE_UNAVAILABLE: 21001,
  TEXT_TOO_LARGE: 21002,
};
const ERROR_RANGE = [21000, 21099];
const INVALID_PARAMS = -32602;
const METHOD_NOT_FOUND = -32601;
const INTERNAL_ERROR = -32603;

/** Keys are stored as is; the host allows 512 bytes, we keep it to 256. */
const MAX_KEY_BYTES = 256;
const DEFAULT_LIST_LIMIT = 50;
const MAX_LIST_LIMIT = 100;
/** Default of the `max_text_bytes` config key. */
const DEFAULT_MAX_TEXT_BYTES = 64 * 1024;

const utf8 = new TextEncoder();
const byteLength = (s) => utf8.encode(s).length;

/** A JSON-RPC error returned to the client: thrown, it becomes the `err` of `handle`. */
class RpcError extends Error {
  constructor(code, message, data) {
    super(message);
    // componentize-js reads the error value from an own `payload` property.
    // `data` is a JSON document (the host adds `category` to it).
    this.payload = { code, message, data: data === undefined ? undefined : JSON.stringify(data) };
  }
}

const invalidParams = (message) => new RpcError(INVALID_PARAMS, message);

// ---------------------------------------------------------------------------
// Configuration: the plugin's `config` table overlaid by the tenant's
// `plugin_config.notes`, read fresh on each call (it is a cheap host call, and
// a reload may change it).
// ---------------------------------------------------------------------------

function settings() {
  let cfg = {};
  try {
    cfg = JSON.parse(configAll());
  } catch {
    // The host always passes JSON; fall back to the defaults if it did not.
  }
  const max = cfg.max_text_bytes;
  return {
    maxTextBytes: Number.isSafeInteger(max) && max > 0 ? max : DEFAULT_MAX_TEXT_BYTES,
  };
}

// ---------------------------------------------------------------------------
// Storage helpers: map the host's store-error variant to JSON-RPC errors.
// ---------------------------------------------------------------------------

function storage(what, fn) {
  try {
    return fn();
  } catch (e) {
    const err = e?.payload;
    if (err?.tag === 'invalid') throw invalidParams(`${what}: ${err.val}`);
    if (err?.tag === 'unavailable') {
      throw new RpcError(ERRORS.STORAGE_UNAVAILABLE, `storage unavailable while trying to ${what}; retry later`, {
        reason: err.val,
        retryable: true,
      });
    }
    throw e;
  }
}

function readNote(key) {
  const raw = storage('read the note', () => store.get(COLLECTION, key));
  return raw === undefined ? undefined : JSON.parse(raw);
}

// ---------------------------------------------------------------------------
// Parameter validation
// ---------------------------------------------------------------------------

function requireKey(params) {
  const { key } = params;
  if (typeof key !== 'string' || key.length === 0) throw invalidParams('`key` must be a non-empty string');
  if (byteLength(key) > MAX_KEY_BYTES) throw invalidParams(`\`key\` is at most ${MAX_KEY_BYTES} bytes`);
  return key;
}

function optionalString(params, name) {
  const v = params[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalidParams(`\`${name}\` must be a string`);
  return v;
}

/** Who wrote: the caller's first agent, else its participant id. */
const author = (caller) => caller.agentIds[0] ?? caller.participantId;

// ---------------------------------------------------------------------------
// Methods
// ---------------------------------------------------------------------------

function put(caller, params) {
  const key = requireKey(params);
  const { text } = params;
  if (typeof text !== 'string') throw invalidParams('`text` must be a string');
  const { maxTextBytes } = settings();
  const size = byteLength(text);
  if (size > maxTextBytes) {
    throw new RpcError(ERRORS.TEXT_TOO_LARGE, `text is ${size} bytes; this deployment allows ${maxTextBytes}`, {
      size,
      maxTextBytes,
    });
  }

  const previous = readNote(key);
  const now = new Date().toISOString();
  const note = {
    key,
    text,
    revision: (previous?.revision ?? 0) + 1,
    createdAt: previous?.createdAt ?? now,
    updatedAt: now,
    updatedBy: author(caller),
  };
  // Two concurrent puts of one key may both read the same revision; the last
  // write wins. That is acceptable for notes and keeps the example short.
  storage('write the note', () => store.put(COLLECTION, key, JSON.stringify(note)));
  // Emit only after the write is durable, so a subscriber that reacts to the
  // event finds the note.
  changed({ action: 'put', key, revision: note.revision, created: previous === undefined });
  return { note, created: previous === undefined };
}

function get(_caller, params) {
  const key = requireKey(params);
  const note = readNote(key);
  if (note === undefined) throw notFound(key);
  return { note };
}

function list(_caller, params) {
  const prefix = optionalString(params, 'prefix') ?? '';
  const after = optionalString(params, 'after');
  let limit = params.limit ?? DEFAULT_LIST_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
    throw invalidParams(`\`limit\` must be an integer from 1 to ${MAX_LIST_LIMIT}`);
  }
  // Read one more than asked to learn whether another page exists.
  const entries = storage('list notes', () =>
    store.scan(COLLECTION, { prefix, after, before: undefined, limit: limit + 1, reverse: false }),
  );
  const notes = entries.slice(0, limit).map((e) => JSON.parse(e.value));
  const result = { notes };
  if (entries.length > limit) result.nextCursor = notes[notes.length - 1].key;
  return result;
}

function del(caller, params) {
  const key = requireKey(params);
  const existed = storage('delete the note', () => store.delete(COLLECTION, key));
  if (!existed) throw notFound(key);
  changed({ action: 'delete', key });
  return { deleted: true, key };
}

function notFound(key) {
  return new RpcError(ERRORS.NOTE_NOT_FOUND, `no note with key ${JSON.stringify(key)}`, { key });
}

function changed(data) {
  try {
    emit('notes.changed', JSON.stringify(data));
  } catch (e) {
    // The write already happened; a lost event must not turn it into an error.
    log('warn', `notes.changed not emitted: ${e?.payload ?? e}`);
  }
}

const METHODS = {
  'notes/put': put,
  'notes/get': get,
  'notes/list': list,
  'notes/delete': del,
};

// ---------------------------------------------------------------------------
// The exported `rpc` interface
// ---------------------------------------------------------------------------

export const rpc = {
  describe() {
    return {
      name: 'notes',
      version: VERSION,
      uri: 'urn:example:notes:1',
      capabilityGroup: 'notes',
      capabilities: JSON.stringify({ enabled: true, maxTextBytes: settings().maxTextBytes }),
      methods: Object.keys(METHODS),
      errorRange: ERROR_RANGE,
      // Subscription filter keys over notes.* event data: none.
      eventFilters: [],
    };
  },

  handle(caller, method, paramsJson) {
    try {
      const fn = METHODS[method];
      if (!fn) throw new RpcError(METHOD_NOT_FOUND, `notes has no method ${method}`);
      const params = JSON.parse(paramsJson);
      if (params === null || typeof params !== 'object' || Array.isArray(params)) {
        throw invalidParams('params must be an object');
      }
      return JSON.stringify(fn(caller, params));
    } catch (e) {
      if (e instanceof RpcError) throw e;
      // A bug here: report it as an internal error instead of trapping, which
      // would cost a fresh instance (a JS engine) for the next call.
      log('error', `notes ${method} failed: ${e?.stack ?? e}`);
      throw new RpcError(INTERNAL_ERROR, `notes ${method} failed: ${e?.message ?? e}`);
    }
  },
};
