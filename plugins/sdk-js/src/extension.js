// One object declares the extension; `defineExtension` turns it into the
// exported interfaces componentize-js binds (rpc, sendObserver, lifecycle,
// resources, httpHandler). Nothing a handler throws escapes: an exception
// leaving an export would trap the instance.
import { ErrorRange, RpcError, methodNotFound, invalidParams, toRpcError, wireError, errResult, explain } from './errors.js';
import { Call, isObject } from './call.js';
import { log } from './imports.js';

const isThenable = (v) => v !== null && typeof v === 'object' && typeof v.then === 'function';

/** Run `fn`, then `done` on its value, awaiting it when it is a Promise (an `async` handler). */
function settle(fn, done, failed) {
  let value;
  try {
    value = fn();
  } catch (e) {
    return failed(e);
  }
  return isThenable(value) ? value.then(done, failed) : done(value);
}

function descriptor(def, range) {
  const name = def.name;
  const caps = typeof def.capabilities === 'function' ? def.capabilities() : (def.capabilities ?? { enabled: true });
  return {
    name,
    version: def.version,
    // Like the Rust SDK: `x-` names are outside the MAP registry and take the `x-NAME:1` form.
    uri: def.uri ?? (name.startsWith('x-') ? `${name}:1` : `urn:map:ext:${name}:1`),
    capabilityGroup: def.capabilityGroup ?? name,
    capabilities: JSON.stringify(caps),
    methods: Object.keys(def.methods ?? {}),
    errorRange: [BigInt(range.first), BigInt(range.last)],
    eventFilters: (def.eventFilters ?? []).map((f) => ({
      key: f.key,
      eventTypes: f.eventTypes,
      fields: Array.isArray(f.fields)
        ? f.fields
        : Object.entries(f.fields ?? {}).map(([field, paths]) => ({ name: field, paths: typeof paths === 'string' ? [paths] : paths })),
    })),
  };
}

function rpcExport(def, range) {
  const methods = def.methods ?? {};
  const fail = (method) => (e) => {
    throw errResult(wireError(toRpcError(e, range, (what) => log.error(`${def.name} ${method} failed: ${what}`))));
  };
  return {
    describe: () => descriptor(def, range),
    handle(caller, method, paramsJson) {
      return settle(
        () => {
          const handler = Object.hasOwn(methods, method) ? methods[method] : undefined;
          if (typeof handler !== 'function') throw methodNotFound(method);
          const params = JSON.parse(paramsJson);
          if (!isObject(params)) throw invalidParams('params must be an object');
          return handler(new Call(caller, method, params));
        },
        (result) => JSON.stringify(result === undefined ? null : result),
        fail(method),
      );
    },
  };
}

/** The WIT `sent-message` with its JSON parsed; the texts as the host gave them stay under `json`. */
function sentMessage(m) {
  return {
    id: m.id,
    from: m.from,
    to: JSON.parse(m.to),
    timestamp: Number(m.timestamp),
    payload: JSON.parse(m.payload),
    meta: JSON.parse(m.meta),
    delivered: m.delivered,
    json: { to: m.to, payload: m.payload, meta: m.meta },
  };
}

function observerExport(def) {
  const observer = typeof def.observer === 'function' ? { onSend: def.observer } : (def.observer ?? {});
  const report = (id) => (e) => log.error(`${def.name}: message ${id} not observed: ${explain(e)}`);
  return {
    interest: () => observer.interest ?? [],
    onSend(caller, message) {
      // A trap would lose only this message, but would also cost a fresh instance.
      return settle(() => observer.onSend?.(sentMessage(message), caller), () => undefined, report(message?.id));
    },
  };
}

function lifecycleExport(def) {
  return {
    init() {
      return settle(() => def.init?.(), () => undefined, (e) => {
        throw errResult(e instanceof Error ? e.message : String(e));
      });
    },
    onTimer(timer, tag) {
      const report = (e) => log.error(`${def.name}: timer ${timer} (${tag}) failed: ${explain(e)}`);
      return settle(() => {
        if (!def.onTimer) return log.warn(`timer ${timer} (${tag}) fired, but ${def.name} has no onTimer`);
        return def.onTimer(BigInt(timer), tag);
      }, () => undefined, report);
    },
  };
}

function resourceItem(it) {
  return {
    id: it.id,
    name: it.name,
    status: it.status,
    ownerId: it.ownerId,
    createdAt: BigInt(it.createdAt),
    updatedAt: BigInt(it.updatedAt ?? it.createdAt),
    metadata: JSON.stringify(it.metadata ?? {}),
  };
}

function resourcesExport(def, range) {
  const kinds = def.resources ?? {};
  const fail = (what) => (e) => {
    throw errResult(wireError(toRpcError(e, range, (m) => log.error(`${def.name} ${what} failed: ${m}`))));
  };
  const provider = (kind) => {
    if (!Object.hasOwn(kinds, kind)) throw invalidParams(`no resource type ${kind}`);
    return kinds[kind];
  };
  return {
    kinds: () => Object.keys(kinds),
    list(caller, kind, filterJson, cursor, limit) {
      const filter = JSON.parse(filterJson);
      return settle(
        () => provider(kind).list({ caller, filter, cursor: cursor ?? undefined, limit }),
        (page) => ({
          items: (page?.items ?? []).map(resourceItem),
          cursor: page?.cursor ?? undefined,
          total: page?.total === undefined || page?.total === null ? undefined : BigInt(page.total),
        }),
        fail(`list of ${kind}`),
      );
    },
    get(caller, kind, id) {
      return settle(() => provider(kind).get({ caller, id }), (it) => (it == null ? undefined : resourceItem(it)), fail(`get of ${kind}`));
    },
  };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function httpResponse(r) {
  const headers = Object.entries(r?.headers ?? {}).map(([k, v]) => [k.toLowerCase(), String(v)]);
  let body = r?.body ?? new Uint8Array();
  if (typeof body === 'string') body = encoder.encode(body);
  else if (!(body instanceof Uint8Array)) {
    body = encoder.encode(JSON.stringify(body));
    if (!headers.some(([k]) => k === 'content-type')) headers.push(['content-type', 'application/json']);
  }
  return { status: r?.status ?? 200, headers, body };
}

function httpExport(def) {
  return {
    handle(request) {
      const req = {
        ...request,
        headers: Object.fromEntries(request.headers),
        text: () => decoder.decode(request.body),
        json: () => JSON.parse(decoder.decode(request.body)),
      };
      return settle(() => def.http(req), httpResponse, (e) => {
        log.error(`${def.name} HTTP ${request.method} ${request.path} failed: ${explain(e)}`);
        return httpResponse({ status: 500, body: { error: 'internal error' } });
      });
    },
  };
}

/**
 * Declare an extension; `export default` the result from the plugin's
 * module. The build helper exports the interfaces its world names.
 */
export function defineExtension(def) {
  if (typeof def?.name !== 'string' || def.name.length === 0) throw new TypeError('defineExtension: `name` is required');
  if (typeof def.version !== 'string') throw new TypeError('defineExtension: `version` is required');
  const range = def.errors instanceof ErrorRange ? def.errors : Array.isArray(def.errors) ? new ErrorRange(...def.errors) : undefined;
  if (!range) throw new TypeError('defineExtension: `errors` is an errorRange(first, last) or [first, last]');
  for (const [method, handler] of Object.entries(def.methods ?? {})) {
    if (typeof handler !== 'function') throw new TypeError(`defineExtension: the handler of ${method} is not a function`);
  }
  return Object.freeze({
    definition: def,
    errors: range,
    rpc: rpcExport(def, range),
    sendObserver: observerExport(def),
    lifecycle: lifecycleExport(def),
    resources: resourcesExport(def, range),
    httpHandler: httpExport(def),
  });
}

export { RpcError };
