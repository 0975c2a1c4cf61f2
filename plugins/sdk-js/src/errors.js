// JSON-RPC errors: thrown by handlers, answered as the WIT `rpc-error`.

/** The JSON-RPC codes a plugin may answer with besides its own range. */
export const codes = Object.freeze({
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
});

/** Codes no extension range may touch: JSON-RPC's and the MAP core's. */
const RESERVED = [[-32768, -32000], [1000, 9999], [16000, 16999]];

export const isJsonRpcCode = (code) => code >= -32700 && code <= -32600;

/** The inclusive range of codes an extension answers with (its descriptor's `error-range`). */
export class ErrorRange {
  /**
   * @param {number} first
   * @param {number} last
   * @param {{storage?: number, internal?: number}} [options] codes of storage failures and of
   *   unexpected exceptions (both default to `last`)
   */
  constructor(first, last, options = {}) {
    if (!Number.isSafeInteger(first) || !Number.isSafeInteger(last) || first > last) {
      throw new TypeError(`error range [${first}, ${last}]: two integers, first <= last`);
    }
    for (const [lo, hi] of RESERVED) {
      if (!(last < lo || first > hi)) throw new RangeError(`error range [${first}, ${last}] overlaps the reserved codes ${lo}..${hi}`);
    }
    this.first = first;
    this.last = last;
    this.storage = this.code(options.storage ?? last);
    this.internal = this.code(options.internal ?? last);
    Object.freeze(this);
  }

  /** `code`, checked to lie in the range (a module's top level runs at build time, so a bad code fails the build). */
  code(code) {
    if (!this.contains(code)) throw new RangeError(`error code ${code} is outside the range ${this.first}..${this.last}`);
    return code;
  }

  contains(code) {
    return Number.isInteger(code) && this.first <= code && code <= this.last;
  }
}

/** `errorRange(20000, 20999)`, or with `{storage, internal}` codes. */
export const errorRange = (first, last, options) => new ErrorRange(first, last, options);

/**
 * An error answered to the client. `details` and `retryable` go into its
 * `data` as `{details, retryable}` (the host adds `category`).
 */
export class RpcError extends Error {
  /**
   * @param {number} code a JSON-RPC code or one of the extension's range
   * @param {string} message
   * @param {{details?: unknown, retryable?: boolean}} [options]
   */
  constructor(code, message, options = {}) {
    super(message);
    this.name = 'RpcError';
    this.code = code;
    this.details = options.details;
    this.retryable = options.retryable === true;
  }

  /** The error's `data`, or `undefined` when it has none. */
  get data() {
    const data = {};
    if (this.details !== undefined) data.details = this.details;
    if (this.retryable) data.retryable = true;
    return Object.keys(data).length > 0 ? data : undefined;
  }
}

export const invalidParams = (message, options) => new RpcError(codes.INVALID_PARAMS, `Invalid params: ${message}`, options);
export const methodNotFound = (method) => new RpcError(codes.METHOD_NOT_FOUND, `Method not found: ${method}`);
export const internalError = (message, options) => new RpcError(codes.INTERNAL_ERROR, message, options);

/** `code` of the range with `details` (a shorthand for a "no such thing" answer). */
export const notFound = (code, message, details) => new RpcError(code, message, details === undefined ? {} : { details });

/** A storage call failed: `kind` is the WIT `store-error` case (`invalid` or `unavailable`). */
export class StoreError extends Error {
  constructor(kind, reason) {
    super(`storage ${kind}: ${reason}`);
    this.name = 'StoreError';
    this.kind = kind;
    this.reason = reason;
  }
}

/** A host call that failed with a `string` error (events, metrics, timers). */
export class HostError extends Error {
  constructor(what, reason) {
    super(`${what}: ${reason}`);
    this.name = 'HostError';
    this.reason = reason;
  }
}

/** An exception as text for the log: SpiderMonkey's `stack` holds no message. */
export function explain(e) {
  if (!(e instanceof Error)) return String(e);
  return e.stack ? `${e.message}\n${e.stack}` : e.message;
}

/** The `err` value of a host import's `result`, as componentize-js throws it. */
export const hostPayload = (e) => (e !== null && typeof e === 'object' && 'payload' in e ? e.payload : undefined);

/** Run a store import, turning its `store-error` into a StoreError. */
export function storeCall(fn) {
  try {
    return fn();
  } catch (e) {
    const p = hostPayload(e);
    if (p && typeof p === 'object' && typeof p.tag === 'string') throw new StoreError(p.tag, String(p.val));
    throw e;
  }
}

/** Run an import whose error is a string, turning it into a HostError. */
export function hostCall(what, fn) {
  try {
    return fn();
  } catch (e) {
    const p = hostPayload(e);
    if (typeof p === 'string') throw new HostError(what, p);
    throw e;
  }
}

/**
 * Any exception as the RpcError to answer: RpcErrors whose code the host
 * accepts as they are, storage failures as the range's storage code, and
 * anything else (a bug, a code outside the range) as its internal code.
 * `report` receives what was turned into the internal code.
 */
export function toRpcError(e, range, report) {
  if (e instanceof RpcError && (isJsonRpcCode(e.code) || range.contains(e.code))) return e;
  if (e instanceof StoreError) {
    return new RpcError(range.storage, e.message, e.kind === 'unavailable' ? { retryable: true } : {});
  }
  const message = e instanceof Error ? e.message : String(e);
  report?.(e instanceof RpcError ? `error code ${e.code} is outside the range: ${message}` : explain(e));
  return new RpcError(range.internal, message, e instanceof RpcError ? { details: { code: e.code, data: e.data } } : {});
}

/** The WIT `rpc-error` record for an RpcError (what componentize-js reads from `payload`). */
export function wireError(err) {
  const data = err.data;
  return { code: err.code, message: err.message, data: data === undefined ? undefined : JSON.stringify(data) };
}

/** A thrown value that componentize-js answers as an exported result's `err`. */
export function errResult(payload) {
  const e = new Error(typeof payload === 'string' ? payload : payload.message);
  e.payload = payload;
  return e;
}
