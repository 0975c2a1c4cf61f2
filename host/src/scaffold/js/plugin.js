// The `@NAME@` extension for map-gateway, in JavaScript on the plugin SDK
// (sdk/, imported as @map-gateway/plugin-sdk): `@NAME@/put` stores an item
// and emits `@NAME@.put`, `@NAME@/get` reads one back. sdk/README.md shows
// the store, batches, errors, events and the other worlds (observers,
// timers, resources, HTTP).
import { defineExtension, errorRange, collection, events, newId, RpcError } from '@map-gateway/plugin-sdk';

// The error codes this extension answers with, besides JSON-RPC's: 1000
// from 90000 up, as the MAP registry asks of extensions it does not list.
// The gateway refuses a range that overlaps another extension's in a
// tenant (and says which): move it then.
const ERRORS = errorRange(@ERR_FIRST@, @ERR_LAST@);
const ITEM_NOT_FOUND = ERRORS.code(@ERR_NOT_FOUND@);

/** Items `{id, text, createdBy, createdAt}`, as JSON, under their id. */
const ITEMS = collection('items');

export default defineExtension({
  // Outside the MAP registry: the name x-@NAME@, the URI x-@NAME@:1,
  // capabilities {"enabled": true} under "x-@NAME@".
  name: 'x-@NAME@',
  version: '0.1.0',
  errors: ERRORS,
  methods: {
    // `@NAME@/put {text}`: the stored item (a missing `text` answers -32602).
    '@NAME@/put': (call) => {
      const item = { id: newId('item'), text: call.string('text'), createdBy: call.caller.participantId, createdAt: Date.now() };
      ITEMS.put(item.id, item);
      events.emit('@NAME@.put', { itemId: item.id, createdBy: item.createdBy });
      return item;
    },
    // `@NAME@/get {itemId}`: the item, or error @ERR_NOT_FOUND@.
    '@NAME@/get': (call) => {
      const itemId = call.string('itemId');
      const item = ITEMS.get(itemId);
      if (item === undefined) throw new RpcError(ITEM_NOT_FOUND, `No item ${itemId}`, { details: { itemId } });
      return item;
    },
  },
});
