// Types of @map-gateway/plugin-sdk, written from the gateway's WIT contract
// (wit/, package map-gateway:plugin). JSON values cross as parsed values;
// u64/s64 that may exceed 2^53 (versions, timer ids) as bigint.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// ---- types.wit -------------------------------------------------------------

/** The participant on whose behalf the gateway calls the plugin (WIT `caller`). */
export interface Caller {
  tenant: string;
  participantId: string;
  /** `client`, `agent`, `gateway` or `system`. */
  participantType: string;
  sessionId: string;
  agentIds: string[];
  /** The capabilities declared at `map/connect`, as JSON text (`Call.capabilities` parses them). */
  capabilities: string;
}

// ---- errors ----------------------------------------------------------------

export const codes: {
  readonly PARSE_ERROR: -32700;
  readonly INVALID_REQUEST: -32600;
  readonly METHOD_NOT_FOUND: -32601;
  readonly INVALID_PARAMS: -32602;
  readonly INTERNAL_ERROR: -32603;
};

/** The inclusive range of codes an extension answers with (the descriptor's `error-range`). */
export class ErrorRange {
  /** Refuses an empty range and one that overlaps JSON-RPC's or the MAP core's codes. */
  constructor(first: number, last: number, options?: { storage?: number; internal?: number });
  readonly first: number;
  readonly last: number;
  /** The code storage failures are answered with (default `last`). */
  readonly storage: number;
  /** The code any other exception is answered with (default `last`). */
  readonly internal: number;
  /** `code`, checked to lie in the range (throws otherwise). */
  code(code: number): number;
  contains(code: number): boolean;
}
export function errorRange(first: number, last: number, options?: { storage?: number; internal?: number }): ErrorRange;

export interface RpcErrorOptions {
  /** Sent as `data.details`. */
  details?: unknown;
  /** Sent as `data.retryable: true`. */
  retryable?: boolean;
}

/** A JSON-RPC error answered to the client: throw it from a handler. */
export class RpcError extends Error {
  constructor(code: number, message: string, options?: RpcErrorOptions);
  readonly code: number;
  readonly details: unknown;
  readonly retryable: boolean;
  /** `{details?, retryable?}`, or undefined when empty (the host adds `category`). */
  readonly data: { details?: unknown; retryable?: true } | undefined;
}
/** -32602 with `Invalid params: <message>`. */
export function invalidParams(message: string, options?: RpcErrorOptions): RpcError;
export function methodNotFound(method: string): RpcError;
export function internalError(message: string, options?: RpcErrorOptions): RpcError;
/** `code` (of the range) with `details`. */
export function notFound(code: number, message: string, details?: unknown): RpcError;

/** A storage call failed (WIT `store-error`): answered with the range's storage code. */
export class StoreError extends Error {
  readonly kind: 'invalid' | 'unavailable';
  readonly reason: string;
}
/** A host call with a string error failed (events, metrics, timers, fetch). */
export class HostError extends Error {
  readonly reason: string;
}

// ---- calls -----------------------------------------------------------------

/** One call of a method. Accessors answer -32602 for params that do not fit. */
export class Call {
  readonly caller: Caller;
  readonly method: string;
  /** The request's params (a JSON object). */
  readonly params: Record<string, Json>;
  /** The caller's first agent, else its participant id. */
  readonly actor: string;
  /** The capabilities declared at `map/connect` (`{}` when none). */
  readonly capabilities: Record<string, Json>;
  string(name: string): string;
  /** Absent or null: undefined. */
  optionalString(name: string): string | undefined;
  /** Absent or null: `fallback` (required without one). */
  integer(name: string, options?: { min?: number; max?: number; fallback?: number }): number;
  boolean(name: string, fallback?: boolean): boolean;
  object(name: string, fallback?: Record<string, Json>): Record<string, Json>;
}

/** A method: its result is the JSON-RPC result (`undefined` is `null`). */
export type Handler = (call: Call) => unknown | Promise<unknown>;

// ---- rpc.wit, send-observer.wit, lifecycle.wit, resources.wit, http.wit -----

export interface EventFilter {
  /** The key in `map/subscribe {filter: {<key>: {...}}}`. */
  key: string;
  /** A type or `prefix.*`. */
  eventTypes: string;
  /** field name → dot-separated paths in the event's `data`, tried in order. */
  fields: Record<string, string | string[]> | { name: string; paths: string[] }[];
}

/** A delivered `map/send` (WIT `sent-message`), its JSON parsed. */
export interface SentMessage {
  id: string;
  from: string;
  to: Json;
  /** Unix milliseconds. */
  timestamp: number;
  payload: Json;
  meta: Record<string, Json>;
  delivered: string[];
  /** `to`, `payload` and `meta` as the host passed them (JSON text). */
  json: { to: string; payload: string; meta: string };
}

export interface Observer {
  /** Top-level `meta` keys wanted; empty or absent: every message. */
  interest?: string[];
  /** A throw is logged and loses this message only. */
  onSend(message: SentMessage, caller: Caller): void | Promise<void>;
}

/** A resource (WIT `resources.item`); times in Unix milliseconds. */
export interface ResourceItem {
  id: string;
  name: string;
  status: string;
  ownerId: string;
  createdAt: number | bigint;
  /** Default `createdAt`. */
  updatedAt?: number | bigint;
  metadata?: Record<string, Json>;
}
export interface ResourceType {
  list(args: { caller: Caller; filter: Record<string, Json>; cursor?: string; limit: number }):
    { items: ResourceItem[]; cursor?: string; total?: number } | Promise<{ items: ResourceItem[]; cursor?: string; total?: number }>;
  /** null or undefined: absent or not visible to the caller (the client gets -32004). */
  get(args: { caller: Caller; id: string }): ResourceItem | null | undefined | Promise<ResourceItem | null | undefined>;
}

export interface HttpRequest {
  method: string;
  /** Below the plugin's prefix, starting with `/`. */
  path: string;
  query: string;
  /** Lower-case names. */
  headers: Record<string, string>;
  body: Uint8Array;
  text(): string;
  json(): Json;
}
export interface HttpResponse {
  status?: number;
  headers?: Record<string, string>;
  /** A string, bytes, or a JSON value (sent with content-type application/json). */
  body?: string | Uint8Array | Json;
}

/** Everything an extension is, in one object. */
export interface ExtensionDefinition {
  /** Short name, e.g. `mail`; `x-…` for one outside the MAP registry. */
  name: string;
  version: string;
  /** Default `x-NAME:1` for an `x-` name, else `urn:map:ext:NAME:1`. */
  uri?: string;
  /** Default the name. */
  capabilityGroup?: string;
  /** Default `{enabled: true}`; a function is called at each `describe` (per tenant: `config` works). */
  capabilities?: Record<string, Json> | (() => Record<string, Json>);
  errors: ErrorRange | [number, number];
  /** method name → handler (world with `rpc`). */
  methods?: Record<string, Handler>;
  eventFilters?: EventFilter[];
  /** World with `send-observer`. */
  observer?: Observer | Observer['onSend'];
  /** World with `lifecycle`: runs once per instance; a throw fails it. */
  init?(): void | Promise<void>;
  /** World with `lifecycle`: a timer scheduled with `timers.schedule` is due. */
  onTimer?(id: bigint, tag: string): void | Promise<void>;
  /** World with `resources`: type (`<namespace>/<name>`) → provider. */
  resources?: Record<string, ResourceType>;
  /** World with `http-handler`: a throw answers 500. */
  http?(request: HttpRequest): HttpResponse | Promise<HttpResponse>;
}

/** The exported interfaces, as componentize-js binds them. */
export interface Extension {
  readonly definition: ExtensionDefinition;
  readonly errors: ErrorRange;
  readonly rpc: object;
  readonly sendObserver: object;
  readonly lifecycle: object;
  readonly resources: object;
  readonly httpHandler: object;
}

/** Declare the extension; `export default` the result. */
export function defineExtension(definition: ExtensionDefinition): Extension;

// ---- store.wit ---------------------------------------------------------------

export interface Codec<T> {
  encode(value: T): Uint8Array;
  decode(bytes: Uint8Array): T;
}
export interface Entry<T> {
  key: string;
  value: T;
  version: bigint;
}
export interface Page<T> {
  entries: Entry<T>[];
  /** Absent when the range is done; else pass it to `resume`. */
  next?: string;
}
export interface RangeOptions {
  prefix?: string;
  after?: string | null;
  before?: string | null;
  reverse?: boolean;
  /** Stop a page before this many bytes (0: the plugin's memory allowance). */
  maxBytes?: number;
}

export class Collection<T = Json> {
  constructor(name: string, codec?: 'json' | 'text' | 'bytes' | Codec<T>);
  readonly name: string;
  get(key: string): T | undefined;
  /** version 0n: absent. */
  getVersioned(key: string): { value: T | undefined; version: bigint };
  /** One snapshot, at most 1,000 keys. */
  getMany(keys: string[]): (T | undefined)[];
  has(key: string): boolean;
  put(key: string, value: T): void;
  delete(key: string): boolean;
  count(prefix?: string): number;
  page(options?: RangeOptions & { limit?: number }): Page<T>;
  entries(options?: RangeOptions): Generator<Entry<T>>;
  range(options?: RangeOptions): Range<T>;
}

export class Range<T = Json> {
  /** Continue after `cursor` (before it when reversed); null/undefined: unchanged. */
  resume(cursor: string | null | undefined): Range<T>;
  /** At most `limit` entries (capped at 1,000 and by bytes). */
  page(limit?: number): Page<T>;
  entries(): Generator<Entry<T>>;
  take(n: number): Entry<T>[];
}

/** Decimal counters changed by the store's atomic `add`. */
export class Counter {
  constructor(name: string);
  readonly name: string;
  /** 0 when absent. */
  get(key: string): number;
  /** The new value. */
  add(key: string, delta?: number | bigint): number;
  /** key (without the prefix) → value. */
  all(prefix?: string): Record<string, number>;
}

export type Committed = { committed: true; version: bigint; counters: number[] };
export type Conflicted = { committed: false; conflict: { index: number; collection: string; key: string } };

/** Writes and conditions applied by one atomic `commit`. Names stand for JSON collections. */
export class Batch {
  put<T>(collection: Collection<T> | string, key: string, value: T): this;
  delete(collection: Collection<any> | Counter | string, key: string): this;
  add(counter: Counter | string, key: string, delta?: number | bigint): this;
  expectVersion(collection: Collection<any> | Counter | string, key: string, version: bigint | number): this;
  expectAbsent(collection: Collection<any> | Counter | string, key: string): this;
  expectValue<T>(collection: Collection<T> | string, key: string, value: T | undefined): this;
  readonly length: number;
  commit(): Committed | Conflicted;
  /** Commit, again after a conflict without conditions; a failed condition throws a StoreError. */
  apply(): Committed;
}

export const RETRY: unique symbol;
/** Run `attempt` until it returns something other than RETRY (at most `times`, default 10). */
export function retry<R>(attempt: () => R | typeof RETRY, times?: number): R;
export function collection<T = Json>(name: string, codec?: 'json' | 'text' | 'bytes' | Codec<T>): Collection<T>;
export function counter(name: string): Counter;

export const keys: {
  escape(part: string): string;
  unescape(part: string): string;
  join(...parts: string[]): string;
  prefix(...parts: string[]): string;
  number(n: number | bigint, width?: number): string;
};

export namespace store {
  export { Collection, Counter, Batch, Range, collection, counter, retry, RETRY, keys };
  export const MAX_PAGE: 1000;
  export const RETRIES: number;
  export const codecs: { json: Codec<Json>; text: Codec<string>; bytes: Codec<Uint8Array> };
  /** The WIT functions as they are, errors as StoreError. */
  export const raw: {
    get(collection: string, key: string): string | undefined;
    put(collection: string, key: string, value: string): void;
    delete(collection: string, key: string): boolean;
    getMany(refs: { collection: string; key: string }[]): ({ value: Uint8Array; version: bigint } | undefined)[];
    scanPage(collection: string, options: { prefix: string; after?: string; before?: string; limit: number; maxBytes: number; reverse: boolean }):
      { entries: { key: string; item: { value: Uint8Array; version: bigint } }[]; next?: string };
    commit(ops: { tag: string; val: object }[]): { tag: 'committed'; val: { version: bigint; counters: BigInt64Array } } | { tag: 'conflict'; val: number };
  };
}

// ---- events.wit, router.wit, config.wit, metrics.wit, log.wit, timers -----------

export interface Audience {
  /** Participant and agent ids. */
  to?: string[];
  /** Also sessions whose declared capabilities hold `true` at this dotted path. */
  capability?: string;
}
export const events: {
  /** `false` (and a warning in the log) when the host refused it. */
  emit(type: string, data: Record<string, Json>, audience?: Audience): boolean;
  emitOrThrow(type: string, data: Record<string, Json>, audience?: Audience): void;
};

export const router: {
  /** `map/send` as the caller: `{messageId, delivered}`. */
  send(to: Json, payload: Json, meta?: Record<string, Json>): { messageId: string; delivered: string[] };
  notify(participantId: string, method: string, params?: Record<string, Json>): void;
  /** Another extension's method as the caller; its error is thrown as an RpcError with its code. */
  call(method: string, params?: Record<string, Json>): Json;
  /** Unix ms since each id has been connected, or undefined. */
  connectedSince(ids: string[]): (number | undefined)[];
  agent(id: string): Record<string, Json> | undefined;
};

export const config: {
  all(): Record<string, Json>;
  get<T = Json>(key: string, fallback?: T): T;
};

export const metrics: {
  /** `map_plugin_<name>`; `false` (and a warning) when refused. */
  counterAdd(name: string, labels?: Record<string, string>, delta?: number | bigint): boolean;
  gaugeSet(name: string, labels: Record<string, string> | undefined, value: number): boolean;
};

export const log: {
  trace(message: string): void;
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
};

export const timers: {
  /** Needs `lifecycle` in the world; at most 7 days. The timer's id. */
  schedule(delayMs: number | bigint, tag?: string): bigint;
  cancel(id: bigint | number): boolean;
};

/** Outbound HTTP over wasi:http: build with `http: true`; the host must be in `outbound_hosts`. */
export const http: {
  fetch(url: string, init?: RequestInit): Promise<Response>;
  postJson(url: string, value: Json, headers?: Record<string, string>): Promise<{ status: number; body: string }>;
};

/** `prefix-<ULID>`: unique, time-ordered. */
export function newId(prefix?: string): string;
/** Unix milliseconds. */
export function now(): number;
