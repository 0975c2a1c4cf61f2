// The gateway's other imports with JSON handled: events, router, config,
// metrics, log, timers; outbound HTTP; ids.
import * as host from './host.js';
import { RpcError, HostError, hostCall, hostPayload } from './errors.js';

const json = (value, what) => {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`${what} is not JSON`);
  return text;
};
const parse = (text) => (text === undefined || text === null ? undefined : JSON.parse(text));

/** Log lines in the gateway's log, tagged with tenant and plugin. Never throws. */
export const log = Object.freeze(
  Object.fromEntries(
    ['trace', 'debug', 'info', 'warn', 'error'].map((level) => [
      level,
      (message) => {
        try {
          host.log.log(level, String(message));
        } catch {
          // Logging is best effort.
        }
      },
    ]),
  ),
);

export const events = Object.freeze({
  /**
   * Emit an event into the tenant's stream (`data` a JSON object). With
   * `{to: ids}` only those participants and agents receive it; with
   * `{capability: 'mail.canObserve'}` also sessions that declared it. `false`
   * (and a warning in the log) when the host refused it: an event is not
   * worth failing a call whose writes are done.
   */
  emit(type, data, audience) {
    try {
      emitOrThrow(type, data, audience);
      return true;
    } catch (e) {
      log.warn(`event ${type} not emitted: ${e?.message ?? e}`);
      return false;
    }
  },
  /** Like `emit`, but a refusal throws a HostError. */
  emitOrThrow,
});

function emitOrThrow(type, data, audience) {
  const body = json(data, 'event data');
  if (audience === undefined) return hostCall('emit', () => host.events.emit(type, body));
  const ids = audience.to ?? [];
  if (audience.capability === undefined) return hostCall('emit', () => host.events.emitTo(type, body, ids));
  return hostCall('emit', () => host.events.emitFor(type, body, { ids, capability: audience.capability }));
}

/** A router call's `rpc-error` as an RpcError with the code it came with. */
function routed(fn) {
  try {
    return fn();
  } catch (e) {
    const p = hostPayload(e);
    if (p && typeof p === 'object' && 'code' in p) {
      const data = parse(p.data);
      throw new RpcError(Number(p.code), p.message, data === undefined ? {} : { details: data });
    }
    throw e;
  }
}

export const router = Object.freeze({
  /** Send a MAP message as the caller: `{messageId, delivered}`. */
  send: (to, payload, meta) => JSON.parse(routed(() => host.router.send(json(to, 'to'), json(payload ?? null, 'payload'), meta === undefined ? undefined : json(meta, 'meta')))),
  /** Push a JSON-RPC notification to a participant's session. */
  notify: (participantId, method, params = {}) => routed(() => host.router.notify(participantId, method, json(params, 'params'))),
  /** Call another extension's method as the caller; its error is thrown as an RpcError with its code. */
  call: (method, params = {}) => JSON.parse(routed(() => host.router.call(method, json(params, 'params')))),
  /** For each id, since when (Unix ms) it has been connected, or `undefined`. */
  connectedSince: (ids) => host.router.connectedSince(ids).map((t) => (t === undefined || t === null ? undefined : Number(t))),
  /** An agent as the caller may see it, or `undefined`. */
  agent: (id) => parse(host.router.agent(id)),
});

let configCache;

export const config = Object.freeze({
  /** The whole configuration (`{}` when none): the plugin's `config`, overlaid by the tenant's. */
  all() {
    configCache ??= JSON.parse(host.config.all());
    return configCache;
  },
  /** One top-level key, or `fallback` when it is absent. */
  get(key, fallback) {
    const value = parse(host.config.get(key));
    return value === undefined ? fallback : value;
  },
});

const labelList = (labels = {}) => Object.entries(labels).map(([k, v]) => [k, String(v)]);

export const metrics = Object.freeze({
  /** Add to the counter `map_plugin_<name>`; `false` (and a warning) when refused. */
  counterAdd: (name, labels, delta = 1) => metric(name, () => host.metrics.counterAdd(name, labelList(labels), BigInt(delta))),
  /** Set the gauge `map_plugin_<name>`; `false` (and a warning) when refused. */
  gaugeSet: (name, labels, value) => metric(name, () => host.metrics.gaugeSet(name, labelList(labels), Number(value))),
});

function metric(name, fn) {
  try {
    hostCall('metric', fn);
    return true;
  } catch (e) {
    log.warn(`metric ${name}: ${e?.message ?? e}`);
    return false;
  }
}

export const timers = Object.freeze({
  /** Call the extension's `onTimer(id, tag)` after `delayMs` (needs `lifecycle` in the world); the timer's id. */
  schedule: (delayMs, tag = '') => BigInt(hostCall('timer', () => host.timers.schedule(BigInt(delayMs), tag))),
  /** `true` when the timer was pending and now will not fire. */
  cancel: (id) => host.timers.cancel(BigInt(id)),
});

/**
 * Outbound HTTP through `wasi:http/outgoing-handler`: the global `fetch` of
 * componentize-js, present when the component is built with `http: true`.
 * It reaches only hosts the deployment lists in the plugin's
 * `outbound_hosts`. It returns a Promise, so the handler that uses it is
 * `async`.
 */
export function fetch(url, init) {
  if (typeof globalThis.fetch !== 'function') {
    return Promise.reject(new HostError('fetch', 'outbound HTTP is off in this build: build it with `http: true`'));
  }
  return globalThis.fetch(url, init);
}

/** POST `value` as JSON; `{status, body}` with the response's text. */
export async function postJson(url, value, headers = {}) {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: json(value, 'body') });
  return { status: response.status, body: await response.text() };
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
let last = { ms: 0, rand: 0n };

/** `prefix-<ULID>`: unique and time-ordered (within a millisecond, the random part counts up). */
export function newId(prefix) {
  let ms = Date.now();
  let rand;
  if (ms <= last.ms) {
    ms = last.ms;
    rand = last.rand + 1n;
  } else {
    rand = 0n;
    for (const b of crypto.getRandomValues(new Uint8Array(10))) rand = (rand << 8n) | BigInt(b);
    rand >>= 1n; // room to count up
  }
  last = { ms, rand };
  let n = (BigInt(ms) << 80n) | rand;
  let out = '';
  for (let i = 0; i < 26; i++) {
    out = CROCKFORD[Number(n & 31n)] + out;
    n >>= 5n;
  }
  return prefix ? `${prefix}-${out}` : out;
}

/** Unix milliseconds. */
export const now = () => Date.now();
