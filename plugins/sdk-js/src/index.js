// @map-gateway/plugin-sdk: write map-gateway plugins in JavaScript
// (componentize-js). See README.md and index.d.ts.
export { defineExtension } from './extension.js';
export { Call } from './call.js';
export {
  codes, ErrorRange, errorRange, RpcError, StoreError, HostError,
  invalidParams, methodNotFound, internalError, notFound,
} from './errors.js';
export * as store from './store.js';
export { Collection, Counter, Batch, Range, collection, counter, retry, RETRY, keys } from './store.js';
export { events, router, config, metrics, log, timers, newId, now } from './imports.js';
import { fetch, postJson } from './imports.js';

/** Outbound HTTP (needs a build with `http: true` and the host in `outbound_hosts`). */
export const http = Object.freeze({ fetch, postJson });
