// Shared harness for the map-gateway interop suite.
//
// - startGateway(): writes a temp TOML config, spawns `map-gateway serve`, waits for
//   the ready line on stdout and returns a handle with the WebSocket URL.
// - connectAgent()/connectClient(): real @multi-agent-protocol/sdk AgentConnection /
//   ClientConnection over a `ws` WebSocket, with a raw frame tap so tests can see
//   every frame the gateway pushes (map/message, map/event).
// - rawSocket(): a bare WebSocket for raw / malformed frames.
// - Inbox helpers to assert that a message reached exactly the right recipients.
//
// Everything opened through a gateway handle is closed by gw.stop().

import { spawn } from 'node:child_process';
import { connect as netConnect } from 'node:net';
import { mkdtempSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { WebSocket as WsWebSocket } from 'ws';
import {
  AgentConnection,
  ClientConnection,
  BaseConnection,
  GatewayConnection,
  websocketStream,
  waitForOpen,
} from '@multi-agent-protocol/sdk';

// Node 20 has no global WebSocket; the SDK's websocket helpers use the global.
if (typeof globalThis.WebSocket === 'undefined') {
  globalThis.WebSocket = WsWebSocket;
}

const HERE = dirname(fileURLToPath(import.meta.url));
export const GATEWAY_BIN =
  process.env.GATEWAY_BIN ?? join(HERE, '..', '..', 'target', 'debug', 'map-gateway');

/** Per-request timeout for SDK calls: a missing response fails fast instead of hanging 30 s. */
export const RPC_TIMEOUT_MS = 3000;
/** How long to wait for an expected notification. */
export const WAIT_MS = 1500;
/**
 * Quiet period used to assert that nothing (more) arrives. Time must pass for that: a slow
 * machine can only hide a stray frame from such a check, never fail a correct gateway.
 * Where a later frame on the same socket can serve as a barrier, tests wait for it instead.
 */
export const QUIET_MS = 300;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/**
 * Let the quiet period pass before checking that nothing (more) arrived: an
 * absence takes time to show, so here the time itself is what is tested.
 */
export const quietPeriod = () => sleep(QUIET_MS);

let uniq = 0;
/** A short unique token for ids / payload markers. */
export function uid(prefix = 'x') {
  uniq += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${uniq}`;
}

// ---------------------------------------------------------------------------
// Gateway process
// ---------------------------------------------------------------------------

export const DEFAULT_TENANTS = [
  { id: 'default' },
  { id: 'acme', api_keys: ['acme-key'], bearer_tokens: ['acme-token'] },
  { id: 'globex', api_keys: ['globex-key'], bearer_tokens: ['globex-token'] },
];

function tomlString(s) {
  return JSON.stringify(String(s)); // JSON string escapes are valid TOML basic strings
}

export function renderConfig({
  dataDir,
  maxMessageBytes = 65536,
  resumeWindowSecs = 300,
  anonymousTenant = 'default',
  tenants = DEFAULT_TENANTS,
  extraToml = '',
} = {}) {
  const lines = [
    '[server]',
    `listen = "127.0.0.1:0"`,
    `data_dir = ${tomlString(dataDir)}`,
    `max_message_bytes = ${maxMessageBytes}`,
    `resume_window_secs = ${resumeWindowSecs}`,
    '',
    '[auth]',
    `anonymous_tenant = ${tomlString(anonymousTenant)}`,
    '',
  ];
  for (const t of tenants) {
    lines.push('[[tenants]]', `id = ${tomlString(t.id)}`);
    if (t.api_keys) lines.push(`api_keys = [${t.api_keys.map(tomlString).join(', ')}]`);
    if (t.bearer_tokens) lines.push(`bearer_tokens = [${t.bearer_tokens.map(tomlString).join(', ')}]`);
    if (t.toml) lines.push(t.toml);
    lines.push('');
  }
  // Extra sections (e.g. [plugins.mail]); tenant-scoped keys go through `tenants[].toml`.
  if (extraToml) lines.push(extraToml);
  return lines.join('\n');
}

const READY_RE = /^map-gateway listening on http:\/\/127\.0\.0\.1:(\d+)\s*$/;

/**
 * Start a gateway with a fresh temp data dir and config.
 * Returns { url, port, baseUrl, stop(), stderr(), connections:Set }.
 */
export async function startGateway(opts = {}) {
  if (process.env.GATEWAY_URL) return externalServer(process.env.GATEWAY_URL);
  if (!existsSync(GATEWAY_BIN)) {
    throw new Error(`gateway binary not found at ${GATEWAY_BIN} (build it: cargo build -p map-gateway, or set GATEWAY_BIN)`);
  }
  // opts.dataDir reuses a data dir (restart tests); it is then not removed on stop.
  const dir = mkdtempSync(join(tmpdir(), 'map-interop-'));
  const dataDir = opts.dataDir ?? join(dir, 'data');
  const configPath = join(dir, 'gateway.toml');
  writeFileSync(configPath, renderConfig({ ...opts, dataDir }));

  const proc = spawn(GATEWAY_BIN, ['serve', '--config', configPath, '--listen', '127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, RUST_BACKTRACE: '1' },
  });
  let stderrBuf = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => {
    stderrBuf += d;
    if (stderrBuf.length > 200_000) stderrBuf = stderrBuf.slice(-100_000);
  });

  const removeDir = () => { try { rmSync(dir, { recursive: true, force: true }); } catch { /* ignore */ } };
  // opts.readyTimeoutMs: longer for large plugins, which compile at the first start.
  const readyMs = opts.readyTimeoutMs ?? 20_000;
  const port = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      cleanup();
      proc.kill('SIGKILL');
      removeDir();
      reject(new Error(`gateway did not print its ready line within ${readyMs / 1000} s.\nstdout: ${out}\nstderr: ${stderrBuf.slice(-4000)}`));
    }, readyMs);
    const onData = (d) => {
      out += d;
      for (const line of out.split('\n')) {
        const m = READY_RE.exec(line.trim());
        if (m) {
          cleanup();
          resolve(Number(m[1]));
          return;
        }
      }
    };
    const onExit = (code, sig) => {
      cleanup();
      removeDir();
      reject(new Error(`gateway exited before ready (code ${code}, signal ${sig}).\nstdout: ${out}\nstderr: ${stderrBuf.slice(-4000)}`));
    };
    function cleanup() {
      clearTimeout(timer);
      proc.stdout.off('data', onData);
      proc.off('exit', onExit);
    }
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', onData);
    proc.on('exit', onExit);
  });
  // keep draining stdout so the child never blocks on a full pipe
  proc.stdout.on('data', () => {});

  const connections = new Set();
  const gw = {
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    url: `ws://127.0.0.1:${port}/map`,
    wsUrl: (path = '/map') => `ws://127.0.0.1:${port}${path}`,
    configPath,
    proc,
    connections,
    stderr: () => stderrBuf,
    dataDir,
    /** kill -9: no shutdown, no flush; the data dir stays. */
    async kill() {
      for (const ws of connections) {
        try { ws.terminate?.(); } catch { /* ignore */ }
      }
      connections.clear();
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGKILL');
        await exited;
      }
    },
    async stop() {
      for (const ws of connections) {
        try { ws.terminate?.(); } catch { /* ignore */ }
      }
      connections.clear();
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 3000);
        await exited;
        clearTimeout(t);
      }
      removeDir();
    },
  };
  return gw;
}

/**
 * Debugging aid only: GATEWAY_URL=ws://127.0.0.1:PORT points the suite at an already running
 * server (e.g. the SDK reference server) instead of spawning the gateway. Config-dependent
 * tests (tenants, auth, message size) are meaningless in that mode.
 */
function externalServer(url) {
  const u = new URL(url);
  const connections = new Set();
  return {
    port: Number(u.port),
    baseUrl: `http://${u.host}`,
    url,
    wsUrl: (path = '/map') => `ws://${u.host}${path}`,
    connections,
    stderr: () => '',
    async stop() {
      for (const ws of connections) { try { ws.terminate?.(); } catch { /* ignore */ } }
      connections.clear();
    },
  };
}

// ---------------------------------------------------------------------------
// Cluster mode: several gateways on one PostgreSQL and one NATS (JetStream)
// ---------------------------------------------------------------------------

/** PostgreSQL the cluster nodes share (plugin state); same default and override as the Rust tests. */
export const CLUSTER_POSTGRES_URL = process.env.MAP_TEST_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';
/** NATS server with JetStream the cluster nodes share; same default and override as the Rust tests. */
export const CLUSTER_NATS_URL = process.env.MAP_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

/** host, port, user, password of a nats:// or postgres:// URL. */
function hostPort(url, defaultPort) {
  const u = new URL(url);
  return {
    host: (u.hostname || '127.0.0.1').replace(/^\[|\]$/g, ''),
    port: Number(u.port || defaultPort),
    user: decodeURIComponent(u.username),
    pass: decodeURIComponent(u.password),
  };
}

/**
 * A minimal NATS text-protocol client: enough to check the server (INFO) and to make
 * JetStream API requests (request/reply through an inbox). Not for production use.
 */
export async function natsConnect(url = CLUSTER_NATS_URL, timeoutMs = 3000) {
  const { host, port, user, pass } = hostPort(url, 4222);
  const sock = netConnect({ host, port });
  let buf = Buffer.alloc(0);
  let wake = null;
  let failure = null;
  sock.on('data', (d) => { buf = Buffer.concat([buf, d]); wake?.(); });
  sock.on('error', (e) => { failure = e; wake?.(); });
  sock.on('close', () => { failure ??= new Error('connection closed'); wake?.(); });
  const waitData = (deadline) => new Promise((resolve, reject) => {
    const t = setTimeout(() => { wake = null; reject(new Error(`no answer from NATS at ${url} within ${timeoutMs} ms`)); }, Math.max(0, deadline - Date.now()));
    wake = () => { clearTimeout(t); wake = null; resolve(); };
  });
  const readLine = async (deadline) => {
    for (;;) {
      const i = buf.indexOf('\r\n');
      if (i >= 0) { const line = buf.subarray(0, i).toString('utf8'); buf = buf.subarray(i + 2); return line; }
      if (failure) throw new Error(`NATS at ${url}: ${failure.message}`);
      await waitData(deadline);
    }
  };
  const readBytes = async (n, deadline) => {
    while (buf.length < n) {
      if (failure) throw new Error(`NATS at ${url}: ${failure.message}`);
      await waitData(deadline);
    }
    const out = buf.subarray(0, n); buf = buf.subarray(n); return out;
  };
  const deadline0 = Date.now() + timeoutMs;
  let first;
  try {
    first = await readLine(deadline0);
  } catch (e) {
    sock.destroy();
    throw e;
  }
  if (!first.startsWith('INFO ')) { sock.destroy(); throw new Error(`not a NATS server at ${url} (first line ${JSON.stringify(first)})`); }
  const info = JSON.parse(first.slice(5));
  const connectOpts = { verbose: false, pedantic: false, name: 'map-gateway-interop' };
  if (user && pass) { connectOpts.user = user; connectOpts.pass = pass; } else if (user) connectOpts.auth_token = user;
  const inbox = `_INBOX.${uid('interop').replace(/[^A-Za-z0-9_-]/g, '_')}`;
  sock.write(`CONNECT ${JSON.stringify(connectOpts)}\r\nSUB ${inbox} 1\r\n`);
  return {
    info,
    /** Request on `subject`; resolves with the reply's JSON. */
    async request(subject, payload = '') {
      const body = Buffer.from(payload, 'utf8');
      sock.write(`PUB ${subject} ${inbox} ${body.length}\r\n`);
      sock.write(Buffer.concat([body, Buffer.from('\r\n')]));
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const line = await readLine(deadline);
        if (line === 'PING') { sock.write('PONG\r\n'); continue; }
        if (line.startsWith('-ERR')) throw new Error(`NATS ${subject}: ${line}`);
        if (line.startsWith('MSG ')) {
          const len = Number(line.split(' ').at(-1));
          const data = await readBytes(len + 2, deadline);
          return JSON.parse(data.subarray(0, len).toString('utf8'));
        }
      }
    },
    close() { sock.destroy(); },
  };
}

/** Throw, saying so, unless PostgreSQL accepts TCP connections at `url`. */
export async function requirePostgres(url = CLUSTER_POSTGRES_URL, timeoutMs = 3000) {
  const { host, port } = hostPort(url, 5432);
  await new Promise((resolve, reject) => {
    const sock = netConnect({ host, port });
    const fail = (why) => {
      sock.destroy();
      reject(new Error(`PostgreSQL is not reachable at ${url} (${why}); the cluster tests need it (set MAP_TEST_POSTGRES_URL to another server)`));
    };
    const t = setTimeout(() => fail(`no connection within ${timeoutMs} ms`), timeoutMs);
    sock.once('connect', () => { clearTimeout(t); sock.destroy(); resolve(); });
    sock.once('error', (e) => { clearTimeout(t); fail(e.message); });
  });
}

/** Throw, saying so, unless a NATS server with JetStream answers at `url`. */
export async function requireNats(url = CLUSTER_NATS_URL) {
  let nats;
  try {
    nats = await natsConnect(url);
  } catch (e) {
    throw new Error(`NATS is not reachable at ${url} (${e.message}); the cluster tests need a NATS server with JetStream (set MAP_TEST_NATS_URL to another one)`);
  }
  nats.close();
  if (nats.info.jetstream !== true) {
    throw new Error(`the NATS server at ${url} runs without JetStream (start it with -js): INFO ${JSON.stringify(nats.info)}`);
  }
}

/**
 * Best effort: delete every JetStream stream whose name contains the cluster's name
 * (its event log, directory, KV buckets), so runs do not pile up on the shared server.
 */
export async function deleteNatsStreams(clusterName, url = CLUSTER_NATS_URL) {
  const normal = (s) => s.toLowerCase().replace(/[-.]/g, '_');
  const needle = normal(clusterName);
  let nats;
  try { nats = await natsConnect(url); } catch { return; }
  try {
    const doomed = [];
    for (let offset = 0, page = 0; page < 1000; page++) {
      const r = await nats.request('$JS.API.STREAM.NAMES', JSON.stringify({ offset }));
      const names = Array.isArray(r.streams) ? r.streams : [];
      offset += names.length;
      doomed.push(...names.filter((n) => normal(n).includes(needle)));
      if (names.length === 0 || offset >= (r.total ?? 0)) break;
    }
    for (const name of doomed) {
      try { await nats.request(`$JS.API.STREAM.DELETE.${name}`); } catch { /* ignore */ }
    }
  } catch { /* best effort */ } finally {
    nats.close();
  }
}

/** The `[storage]` and `[cluster]` sections of one node's config. */
export function clusterToml({ node, name, postgresUrl = CLUSTER_POSTGRES_URL, natsUrl = CLUSTER_NATS_URL, presenceTimeoutMs = 2000 }) {
  return [
    '[storage]',
    `url = ${tomlString(postgresUrl)}`,
    '[cluster]',
    `nats = ${tomlString(natsUrl)}`,
    `node = ${tomlString(node)}`,
    `name = ${tomlString(name)}`,
    `presence_timeout_ms = ${presenceTimeoutMs}`,
    '',
  ].join('\n');
}

/**
 * Start gateway nodes of one cluster (a unique cluster name per call), one after the other in
 * the given order, sharing PostgreSQL and NATS. Fails (never skips) when either is missing.
 * opts: { presenceTimeoutMs, extraToml (appended after [cluster]), ...startGateway opts }.
 * Returns { name, nodes: {a: gw, …}, stop() } — stop() stops every node and deletes the
 * cluster's NATS streams.
 */
export async function startCluster(names = ['a', 'b'], opts = {}) {
  if (process.env.GATEWAY_URL) throw new Error('cluster tests start their own gateway nodes; unset GATEWAY_URL');
  await requireNats();
  await requirePostgres();
  const { presenceTimeoutMs = 2000, extraToml = '', ...gwOpts } = opts;
  const name = uid('interop');
  const nodes = {};
  const cluster = {
    name,
    nodes,
    async stop() {
      await Promise.all(Object.values(nodes).map((gw) => gw.stop()));
      await deleteNatsStreams(name);
    },
  };
  try {
    for (const node of names) {
      nodes[node] = await startGateway({
        ...gwOpts,
        extraToml: clusterToml({ node, name, presenceTimeoutMs }) + extraToml,
      });
    }
  } catch (e) {
    await cluster.stop();
    throw e;
  }
  return cluster;
}

/** One sample of the gateway's `/metrics`, by its name and labels as written (0 when absent). */
export async function metric(gw, series) {
  const text = await (await fetch(`${gw.baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

/** Connections open on the gateway for one transport (`websocket`, `http`, `acp`). */
export const openConnections = (gw, transport) => metric(gw, `map_connections_open{transport="${transport}"}`);

/**
 * Call `fn` until `pred(value)` holds (polling, for asynchronous replication); returns that value.
 * Errors thrown by `fn` count as "not yet". Fails after timeoutMs with the last value or error.
 */
export async function pollUntil(fn, pred, { timeoutMs = 10_000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  let lastError;
  for (;;) {
    try {
      last = await fn();
      lastError = undefined;
      if (pred(last)) return last;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() >= deadline) {
      const tail = lastError ? `last error: ${lastError.message}` : `last value: ${JSON.stringify(last)?.slice(0, 1500)}`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; ${tail}`);
    }
    await sleep(intervalMs);
  }
}

// ---------------------------------------------------------------------------
// Frame tap: records every frame the gateway sends on a socket
// ---------------------------------------------------------------------------

export class FrameTap {
  constructor(ws) {
    this.frames = [];
    this.waiters = new Set();
    ws.addEventListener('message', (ev) => {
      let msg;
      try {
        msg = JSON.parse(typeof ev.data === 'string' ? ev.data : Buffer.from(ev.data).toString('utf8'));
      } catch {
        msg = { __unparsable: String(ev.data) };
      }
      this.frames.push(msg);
      for (const w of [...this.waiters]) w();
    });
  }

  /** Wait until pred(frames) returns a truthy value; returns that value. */
  waitUntil(pred, timeoutMs = WAIT_MS, what = 'condition') {
    return new Promise((resolve, reject) => {
      const check = () => {
        let v;
        try { v = pred(this.frames); } catch (e) { done(); reject(e); return; }
        if (v) { done(); resolve(v); }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; frames seen: ${summarize(this.frames)}`));
      }, timeoutMs);
      const done = () => { clearTimeout(timer); this.waiters.delete(check); };
      this.waiters.add(check);
      check();
    });
  }

  /** All map/message notifications (params), in arrival order. */
  messageNotifications() {
    return this.frames.filter((f) => f && f.method === 'map/message' && !('id' in f));
  }

  /** Messages (params.message) delivered on this socket. */
  messages(pred = () => true) {
    return this.messageNotifications().map((f) => f.params?.message ?? f.params).filter(pred);
  }

  /** map/event notification params, optionally for one subscription. */
  events(subscriptionId) {
    return this.frames
      .filter((f) => f && f.method === 'map/event')
      .map((f) => f.params)
      .filter((p) => subscriptionId === undefined || p?.subscriptionId === subscriptionId);
  }

  /** Wait for at least n map/event params for a subscription matching pred. */
  waitForEvents(subscriptionId, pred, n = 1, timeoutMs = WAIT_MS) {
    return this.waitUntil(() => {
      const evs = this.events(subscriptionId).filter((p) => pred(p.event, p));
      return evs.length >= n ? evs : null;
    }, timeoutMs, `${n} map/event(s) on subscription ${subscriptionId}`);
  }
}

function summarize(frames) {
  const s = JSON.stringify(frames.slice(-8));
  return s.length > 1500 ? s.slice(0, 1500) + '…' : s;
}

// ---------------------------------------------------------------------------
// SDK connections
// ---------------------------------------------------------------------------

async function openWs(gw, path) {
  const ws = new WsWebSocket(gw.wsUrl(path));
  gw.connections.add(ws);
  ws.addEventListener('close', () => gw.connections.delete(ws));
  await waitForOpen(ws, 5000);
  return ws;
}

/**
 * Connect and register an agent with the SDK's AgentConnection
 * (map/connect + map/agents/register).
 * opts: { name, role, parent, scopes, visibility, capabilities, agentId, auth, path }
 * Returns a handle { conn, id, sessionId, participantId, connectResult, agent, ws, tap, sdkMessages }.
 */
export async function connectAgent(gw, opts = {}) {
  const ws = await openWs(gw, opts.path ?? '/agent');
  const tap = new FrameTap(ws);
  const conn = new AgentConnection(websocketStream(ws), {
    name: opts.name,
    role: opts.role,
    parent: opts.parent,
    scopes: opts.scopes,
    visibility: opts.visibility,
    capabilities: opts.capabilities,
    defaultTimeout: RPC_TIMEOUT_MS,
  });
  const sdkMessages = [];
  conn.onMessage((m) => { sdkMessages.push(m); });
  const res = await conn.connect({ agentId: opts.agentId, auth: opts.auth });
  return {
    kind: 'agent',
    label: opts.name ?? res.agent.id,
    conn,
    ws,
    tap,
    sdkMessages,
    id: res.agent.id,
    agent: res.agent,
    connectResult: res.connection,
    sessionId: res.connection.sessionId,
    participantId: res.connection.participantId,
  };
}

/**
 * Connect a ClientConnection (map/connect with participantType client).
 * opts: { name, auth, capabilities, resumeToken, sessionId, path }
 */
export async function connectClient(gw, opts = {}) {
  const ws = await openWs(gw, opts.path ?? '/client');
  const tap = new FrameTap(ws);
  const conn = new ClientConnection(websocketStream(ws), {
    name: opts.name,
    capabilities: opts.capabilities,
    defaultTimeout: RPC_TIMEOUT_MS,
  });
  const connectResult = await conn.connect({
    auth: opts.auth,
    resumeToken: opts.resumeToken,
    sessionId: opts.sessionId,
  });
  return {
    kind: 'client',
    label: opts.name ?? connectResult.participantId,
    conn,
    ws,
    tap,
    connectResult,
    sessionId: connectResult.sessionId,
    participantId: connectResult.participantId,
  };
}

/** A BaseConnection (SDK JSON-RPC layer, no MAP semantics) for hand-built requests. */
export async function connectBase(gw, path = '/map') {
  const ws = await openWs(gw, path);
  const tap = new FrameTap(ws);
  const conn = new BaseConnection(websocketStream(ws), { defaultTimeout: RPC_TIMEOUT_MS });
  return { conn, ws, tap, request: (m, p) => conn.sendRequest(m, p) };
}

/** Raw WebSocket: send arbitrary text, read raw frames. */
export async function rawSocket(gw, path = '/map') {
  const ws = await openWs(gw, path);
  const tap = new FrameTap(ws);
  let nextId = 1000;
  const raw = {
    ws,
    tap,
    sendText(text) { ws.send(text); },
    send(obj) { ws.send(JSON.stringify(obj)); },
    /** Wait for the first not-yet-consumed frame matching pred. */
    async nextFrame(pred = () => true, timeoutMs = WAIT_MS, what = 'a frame') {
      const start = raw._cursor ?? 0;
      const f = await tap.waitUntil((frames) => {
        for (let i = start; i < frames.length; i++) if (pred(frames[i])) return { i, f: frames[i] };
        return null;
      }, timeoutMs, what);
      raw._cursor = f.i + 1;
      return f.f;
    },
    /** Send a request object (id auto-assigned unless given) and return the full response frame. */
    async request(method, params, id) {
      const rid = id ?? nextId++;
      const msg = { jsonrpc: '2.0', id: rid, method };
      if (params !== undefined) msg.params = params;
      ws.send(JSON.stringify(msg));
      return tap.waitUntil(
        (frames) => frames.find((f) => f && !Array.isArray(f) && !('method' in f) && f.id === rid),
        RPC_TIMEOUT_MS,
        `response to ${method} (id ${JSON.stringify(rid)})`,
      );
    },
    /** Request that must succeed; returns result. */
    async call(method, params) {
      const resp = await raw.request(method, params);
      if (resp.error) {
        const e = new Error(`${method} failed: ${JSON.stringify(resp.error)}`);
        e.code = resp.error.code;
        e.data = resp.error.data;
        throw e;
      }
      return resp.result;
    },
    isOpen() { return ws.readyState === WsWebSocket.OPEN; },
    close() { ws.terminate(); },
  };
  return raw;
}

/** Raw socket that has done map/connect (and optionally registered an agent). */
export async function rawParticipant(gw, { participantType = 'client', name, auth, register, resumeToken } = {}) {
  const raw = await rawSocket(gw);
  const params = { protocolVersion: 1, participantType };
  if (name) params.name = name;
  if (auth) params.auth = auth;
  if (resumeToken) params.resumeToken = resumeToken;
  raw.connectResult = await raw.call('map/connect', params);
  if (register) {
    raw.agent = (await raw.call('map/agents/register', register)).agent;
  }
  return raw;
}

// ---------------------------------------------------------------------------
// Assertions
// ---------------------------------------------------------------------------

const CATEGORY_BY_FAMILY = (code) => {
  if (code === -32603) return ['internal'];
  if (code <= -32000 && code >= -32768) return ['protocol'];
  if (code >= 1000 && code < 2000) return ['auth'];
  if (code >= 2000 && code < 3000) return ['routing'];
  if (code >= 3000 && code < 4000) return ['agent'];
  if (code >= 4000 && code < 5000) return ['resource'];
  if (code >= 5000 && code < 6000) return ['federation'];
  return null;
};

/** Check a JSON-RPC error object: code in `codes`, message string, data.category of the code's family. */
export function assertMapError(error, codes, ctx = '') {
  const list = Array.isArray(codes) ? codes : [codes];
  assert.ok(error && typeof error === 'object', `${ctx}: expected an error object, got ${JSON.stringify(error)}`);
  assert.ok(list.includes(error.code), `${ctx}: expected error code ${list.join(' or ')}, got ${error.code} (${error.message}) data=${JSON.stringify(error.data)}`);
  assert.equal(typeof error.message, 'string', `${ctx}: error.message must be a string`);
  const cats = CATEGORY_BY_FAMILY(error.code);
  assert.ok(error.data && typeof error.data.category === 'string', `${ctx}: error ${error.code} must carry data.category, got data=${JSON.stringify(error.data)}`);
  if (cats) assert.ok(cats.includes(error.data.category), `${ctx}: error ${error.code} should have data.category ${cats.join('|')}, got ${error.data.category}`);
  return error;
}

/** Await a promise that must reject with a MAP error (SDK MAPRequestError) with one of the codes. */
export async function rejectsWithCode(promise, codes, ctx = '') {
  let err;
  try {
    const v = await promise;
    assert.fail(`${ctx}: expected error ${[].concat(codes).join('/')} but the call succeeded with ${JSON.stringify(v)}`);
  } catch (e) {
    if (e?.code === 'ERR_ASSERTION') throw e;
    err = e;
  }
  assertMapError({ code: err.code, message: err.message, data: err.data }, codes, ctx);
  return err;
}

/** Normalise an event type so `agent.registered` and `agent_registered` compare equal. */
export const normType = (t) => String(t ?? '').replace(/\./g, '_');

/**
 * The agent an event comes from. The SDK client types declare `event.source` as a participant/agent
 * id string; the SDK's MAPServer emits `{agentId, ...}`. The SDK client itself never reads it, so
 * both forms are accepted.
 */
export const sourceAgent = (ev) => (ev && typeof ev.source === 'object' && ev.source !== null ? ev.source.agentId : ev?.source);

/** Does the JSON of x mention the string id? (used with unique ids only) */
export const mentions = (x, id) => JSON.stringify(x ?? null).includes(JSON.stringify(String(id)).slice(1, -1));

/** Participant handles' message inbox for a unique marker. */
export function inboxFor(h, marker) {
  return h.tap.messages((m) => m?.payload && m.payload.marker === marker);
}

/**
 * Assert that the message carrying `marker` reached exactly `expected` handles (one copy each)
 * and none of the other handles in `everyone`. Handles in `ignore` are not checked (e.g. the
 * sender, where the spec does not say whether a sender receives its own broadcast).
 * Returns Map(handle -> message).
 */
export async function expectExactRecipients(everyone, expected, marker, { ignore = [], timeoutMs = WAIT_MS } = {}) {
  const got = new Map();
  await Promise.all(expected.map(async (h) => {
    await h.tap.waitUntil(() => inboxFor(h, marker).length >= 1, timeoutMs, `map/message ${marker} at ${h.label}`);
  }));
  await quietPeriod();
  for (const h of everyone) {
    if (ignore.includes(h)) continue;
    const n = inboxFor(h, marker).length;
    if (expected.includes(h)) {
      assert.equal(n, 1, `${h.label} should receive exactly one copy of ${marker}, got ${n}`);
      got.set(h, inboxFor(h, marker)[0]);
    } else {
      assert.equal(n, 0, `${h.label} must NOT receive ${marker}, but got ${n}: ${JSON.stringify(inboxFor(h, marker))}`);
    }
  }
  return got;
}

/** Assert nobody in `everyone` got a message with `marker` within the quiet period. */
export async function expectNobodyGot(everyone, marker, waitMs = QUIET_MS) {
  await sleep(waitMs); // an absence: the time is what is tested
  for (const h of everyone) {
    assert.equal(inboxFor(h, marker).length, 0, `${h.label} must not receive ${marker}`);
  }
}

/** Compare two event ids for "orderable": numeric if both are integers, else plain string order. */
export function eventIdLess(a, b) {
  const na = /^\d+$/.test(String(a)), nb = /^\d+$/.test(String(b));
  if (na && nb) return BigInt(a) < BigInt(b);
  return String(a) < String(b);
}

/** Agent ids in a list result, accepting only the SDK shape {agents: Agent[]}. */
export function agentIds(listResult) {
  assert.ok(listResult && Array.isArray(listResult.agents), `map/agents/list must return {agents: [...]}, got ${JSON.stringify(listResult)}`);
  return listResult.agents.map((a) => a.id);
}

// ---------------------------------------------------------------------------
// Federation: the SDK's GatewayConnection
// ---------------------------------------------------------------------------

/**
 * Connect the SDK's GatewayConnection (map/connect with participantType gateway).
 * opts: { name, auth, routing, path }. Every frame the SDK writes is kept in `sent`
 * (parsed), so tests can check what the SDK itself put on the wire.
 * Returns { conn, ws, tap, sent, connectResult, sessionId }.
 */
export async function connectGateway(gw, opts = {}) {
  const ws = await openWs(gw, opts.path ?? '/map');
  const tap = new FrameTap(ws);
  const sent = [];
  const send = ws.send.bind(ws);
  ws.send = (data, ...rest) => {
    try { sent.push(JSON.parse(String(data))); } catch { sent.push({ __unparsable: String(data) }); }
    return send(data, ...rest);
  };
  const conn = new GatewayConnection(websocketStream(ws), {
    name: opts.name,
    routing: opts.routing,
    defaultTimeout: RPC_TIMEOUT_MS,
  });
  const connectResult = await conn.connect({ auth: opts.auth });
  return { conn, ws, tap, sent, connectResult, sessionId: connectResult.sessionId };
}
