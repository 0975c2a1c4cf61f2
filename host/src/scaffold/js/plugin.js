// The `@NAME@` extension for map-gateway, in JavaScript (componentize-js):
// `@NAME@/put` stores an item and emits `@NAME@.put`, `@NAME@/get` reads one
// back. World `extension` of wit/ (map-gateway:plugin): it exports `rpc`.
//
// componentize-js: an imported result<T, E> returns T or throws an error
// whose `payload` is E; to answer an error, throw an object with an own
// `payload` ({code, message, data}). Any other exception traps the instance
// (the client gets -32603 and the instance is discarded).

import * as store from 'map-gateway:plugin/store@@CONTRACT_VERSION@';
import { emit } from 'map-gateway:plugin/events@@CONTRACT_VERSION@';

const NAME = '@NAME@';
// The error codes: 1000 from 90000 up, as the MAP registry asks of
// extensions it does not list (the gateway refuses overlapping ranges).
const ERROR_RANGE = [@ERR_FIRST@n, @ERR_LAST@n];
const ITEM_NOT_FOUND = @ERR_NOT_FOUND@;
const INTERNAL = @ERR_LAST@;
const ITEMS = 'items';

class RpcError extends Error {
  constructor(code, message, details) {
    super(message);
    this.payload = { code, message, data: details === undefined ? undefined : JSON.stringify({ details }) };
  }
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
let last = { ms: 0, rand: 0n };

/** `prefix-<ULID>`: time-ordered, unique (random part bumped within one millisecond). */
function newId(prefix) {
  let ms = Date.now();
  let rand;
  if (ms <= last.ms) {
    ms = last.ms;
    rand = last.rand + 1n;
  } else {
    rand = 0n;
    for (const b of crypto.getRandomValues(new Uint8Array(10))) rand = (rand << 8n) | BigInt(b);
    rand >>= 1n;
  }
  last = { ms, rand };
  let n = (BigInt(ms) << 80n) | rand;
  let out = '';
  for (let i = 0; i < 26; i++) {
    out = CROCKFORD[Number(n & 31n)] + out;
    n >>= 5n;
  }
  return `${prefix}-${out}`;
}

function field(params, name) {
  if (typeof params?.[name] !== 'string') throw new RpcError(-32602, `Invalid params: missing field \`${name}\` (a string)`);
  return params[name];
}

const METHODS = {
  [`${NAME}/put`]: (caller, params) => {
    const item = { id: newId('item'), text: field(params, 'text'), createdBy: caller.participantId, createdAt: Date.now() };
    store.put(ITEMS, item.id, JSON.stringify(item));
    emit(`${NAME}.put`, JSON.stringify({ itemId: item.id, createdBy: item.createdBy }));
    return item;
  },
  [`${NAME}/get`]: (caller, params) => {
    const itemId = field(params, 'itemId');
    const stored = store.get(ITEMS, itemId);
    if (stored === undefined || stored === null) throw new RpcError(ITEM_NOT_FOUND, `No item ${itemId}`, { itemId });
    return JSON.parse(stored);
  },
};

export const rpc = {
  describe() {
    return {
      // Outside the MAP registry: the x- form.
      name: `x-${NAME}`,
      version: '0.1.0',
      uri: `x-${NAME}:1`,
      capabilityGroup: `x-${NAME}`,
      capabilities: JSON.stringify({ enabled: true }),
      methods: Object.keys(METHODS),
      errorRange: ERROR_RANGE,
      eventFilters: [],
    };
  },
  handle(caller, method, params) {
    try {
      return JSON.stringify(METHODS[method](caller, JSON.parse(params)));
    } catch (e) {
      if (e instanceof RpcError) throw e;
      throw new RpcError(INTERNAL, `${method} failed: ${e?.message ?? e}`);
    }
  },
};
