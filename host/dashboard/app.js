// The gateway's live dashboard. It holds no data of its own: a MAP observer
// client on /map (agents, scopes, events, mail, trajectory, UAP, A2A tasks) and the admin
// API (tenants, sessions, plugins, /metrics), both with the credentials the
// operator signs in with. Everything from the wire is written as text, never
// as markup.

const STORE = {
  signedIn: 'map-dashboard.signed-in',
  credential: 'map-dashboard.credential',
  adminToken: 'map-dashboard.admin-token',
  /** The MAP session's resume token: a reload or a dropped socket takes the same session up again. */
  resumeToken: 'map-dashboard.resume-token',
  /** Signed in by itself once (on loopback, with no credentials): not again after a sign-out or a refusal. */
  autoTried: 'map-dashboard.auto-tried',
};
const EVENT_ROWS = 200;
/** The A2A tasks listed: the newest ones. */
const A2A_ROWS = 50;
/** How far back the events panel starts when the page opens. */
const HISTORY_MS = 30 * 60 * 1000;
const METRIC_SAMPLES = 60;
const METRICS_EVERY_MS = 2000;
const ADMIN_EVERY_MS = 3000;
const RPC_TIMEOUT_MS = 10000;
const SVG_NS = 'http://www.w3.org/2000/svg';

// ---------------------------------------------------------------------------
// DOM helpers (text only: no markup from the wire)
// ---------------------------------------------------------------------------

const $ = (sel, root = document) => root.querySelector(sel);

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** An HTML element: h('td', {class: 'x'}, 'text', child). */
const h = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);

/** A list item chosen by click or Enter: `kind` is its class, `attr`/`id` name it. */
function selectable(kind, attr, id, selected, onSelect, ...children) {
  return h('li', {
    class: `${kind}${id === selected ? ' selected' : ''}`,
    [attr]: id,
    tabindex: 0,
    onclick: () => onSelect(id),
    onkeydown: (ev) => { if (ev.key === 'Enter') onSelect(id); },
  }, ...children);
}
/** An SVG element. */
const s = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

const clip = (text, n) => {
  const t = String(text ?? '');
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
};
const pad = (n, w = 2) => String(n).padStart(w, '0');
function clock(ms) {
  if (!Number.isFinite(ms)) return '';
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}
function when(ms) {
  if (!Number.isFinite(ms)) return '';
  const d = new Date(ms);
  const today = new Date();
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return d.toDateString() === today.toDateString() ? time : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}
function json(v, n = 160) {
  let t;
  try { t = typeof v === 'string' ? v : JSON.stringify(v); } catch { t = String(v); }
  return clip(t ?? '', n);
}
function pretty(v, n = 20000) {
  let t;
  try { t = typeof v === 'string' ? v : JSON.stringify(v, null, 2); } catch { t = String(v); }
  return clip(t ?? '', n);
}
/** Call fn at most once per `ms`, after the last request. */
function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// ---------------------------------------------------------------------------
// JSON-RPC over WebSocket
// ---------------------------------------------------------------------------

class RpcError extends Error {
  constructor(method, error) {
    super(error?.message ?? 'error');
    this.method = method;
    this.code = error?.code;
    this.data = error?.data;
  }
}

class MapSocket {
  constructor(url, { onNotification, onClose }) {
    this.url = url;
    this.nextId = 1;
    this.pending = new Map();
    this.onNotification = onNotification;
    this.onClose = onClose;
    this.ws = null;
  }

  open() {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url);
      this.ws = ws;
      let opened = false;
      ws.addEventListener('open', () => { opened = true; resolve(); });
      ws.addEventListener('message', (ev) => this.receive(ev.data));
      ws.addEventListener('close', (ev) => {
        for (const p of this.pending.values()) {
          clearTimeout(p.timer);
          p.reject(new RpcError(p.method, { code: -32000, message: 'connection closed' }));
        }
        this.pending.clear();
        if (!opened) reject(new Error(`WebSocket closed (${ev.code})`));
        this.onClose?.(ev);
      });
    });
  }

  get isOpen() {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  receive(text) {
    let msg;
    try { msg = JSON.parse(text); } catch { return; }
    for (const m of Array.isArray(msg) ? msg : [msg]) {
      if (m && 'method' in m) {
        if (!('id' in m)) this.onNotification?.(m.method, m.params ?? {});
        continue;
      }
      const p = this.pending.get(m?.id);
      if (!p) continue;
      this.pending.delete(m.id);
      clearTimeout(p.timer);
      if (m.error) p.reject(new RpcError(p.method, m.error));
      else p.resolve(m.result);
    }
  }

  request(method, params = {}) {
    if (!this.isOpen) return Promise.reject(new RpcError(method, { code: -32000, message: 'not connected' }));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new RpcError(method, { code: -32000, message: `${method}: no answer within ${RPC_TIMEOUT_MS / 1000} s` }));
      }, RPC_TIMEOUT_MS);
      this.pending.set(id, { method, resolve, reject, timer });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  close() {
    const ws = this.ws;
    this.onClose = null;
    this.onNotification = null;
    try { ws?.close(1000, 'dashboard closed'); } catch { /* already closed */ }
  }
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

const state = {
  signedIn: false,
  /** The current sign-in is the automatic one (no credentials, on loopback). */
  auto: false,
  /** Bumped at every sign-in and sign-out: answers to an older one are dropped. */
  epoch: 0,
  credential: '',
  adminToken: '',
  generation: 0,
  sock: null,
  retry: 0,
  retryTimer: null,
  tenant: null,
  participantId: null,
  sessionId: null,
  agents: new Map(),
  scopes: new Map(),
  /** Events that arrive while a snapshot loads, applied again on top of it. */
  replaying: null,
  selectedAgent: null,
  plugins: { mail: null, trajectory: null, uap: null, a2a: null },
  selectedConversation: null,
  selectedCheckpoint: null,
  streams: new Map(),
  admin: { available: null, timer: null, tenant: null, chosen: false, tenants: [] },
  metrics: { timer: null, prev: null, samples: [] },
};

// ---------------------------------------------------------------------------
// Status line and sign-in
// ---------------------------------------------------------------------------

function setStatus(kind, text) {
  const el = $('#status');
  el.dataset.state = kind;
  el.className = `status state-${kind}`;
  el.textContent = text;
}

function showSignin(error) {
  $('#dashboard').hidden = true;
  $('#signout').hidden = true;
  $('#signin-view').hidden = false;
  $('#credential').value = sessionStorage.getItem(STORE.credential) ?? '';
  $('#admin-token').value = sessionStorage.getItem(STORE.adminToken) ?? '';
  const err = $('#signin-error');
  err.hidden = !error;
  err.textContent = error ?? '';
  $('#credential').focus();
}

function start() {
  state.epoch += 1;
  state.signedIn = true;
  state.credential = sessionStorage.getItem(STORE.credential) ?? '';
  state.adminToken = sessionStorage.getItem(STORE.adminToken) ?? '';
  $('#signin-view').hidden = true;
  $('#dashboard').hidden = false;
  $('#signout').hidden = false;
  resetView();
  connectMap();
  startAdmin();
}

function stop() {
  state.epoch += 1;
  state.signedIn = false;
  state.generation += 1;
  clearTimeout(state.retryTimer);
  state.sock?.close();
  state.sock = null;
  clearInterval(state.admin.timer);
  clearInterval(state.metrics.timer);
  state.admin.timer = state.metrics.timer = null;
}

function signOut() {
  stop();
  sessionStorage.removeItem(STORE.signedIn);
  sessionStorage.removeItem(STORE.credential);
  sessionStorage.removeItem(STORE.adminToken);
  sessionStorage.removeItem(STORE.resumeToken);
  setStatus('signed-out', 'signed out');
  showSignin();
}

/** The tenant credential was refused: back to the form. */
function authFailed(message) {
  stop();
  sessionStorage.removeItem(STORE.signedIn);
  sessionStorage.removeItem(STORE.resumeToken);
  // The automatic attempt without credentials is no sign-in of the user's: just the form.
  if (state.auto) {
    state.auto = false;
    setStatus('signed-out', 'signed out');
    return showSignin();
  }
  setStatus('refused', `sign-in refused: ${message}`);
  showSignin(message);
}

/** A page on this machine signs in by itself, without credentials (the
 *  anonymous tenant and the admin API answer loopback peers), once. */
function onLoopback() {
  return ['127.0.0.1', 'localhost', '[::1]', '::1'].includes(location.hostname);
}

function resetView() {
  state.tenant = state.sessionId = state.participantId = null;
  state.agents.clear();
  state.scopes.clear();
  state.selectedAgent = null;
  state.selectedConversation = null;
  state.selectedCheckpoint = null;
  state.admin = { available: null, timer: null, tenant: null, chosen: false, tenants: [] };
  state.metrics = { timer: null, prev: null, samples: [] };
  $('#events').replaceChildren();
  $('#agent-detail').hidden = true;
  renderGraph();
  for (const id of ['#mail-conversations', '#trajectory']) $(id).replaceChildren();
  $('#mail-turns').replaceChildren(h('p', { class: 'empty' }, 'Select a conversation to read its turns.'));
  $('#trajectory-content').replaceChildren(h('p', { class: 'empty' }, 'Select a checkpoint to see its content.'));
  for (const id of ['#sessions-table tbody', '#plugins-table tbody', '#uap-jobs tbody', '#uap-agents tbody', '#a2a-tasks tbody', '#tenant-select']) $(id).replaceChildren();
  for (const id of ['#tenant-stats', '#plugins-note', '#metrics-note', '#mail-note', '#trajectory-note', '#a2a-note']) $(id).textContent = '';
  $('#plugins-error').hidden = true;
  $('#admin-unavailable').hidden = true;
  for (const el of document.querySelectorAll('.admin, #panel-metrics, #panel-mail, #panel-trajectory')) el.hidden = false;
  $('#panel-uap').hidden = true;
  $('#panel-a2a').hidden = true;
  state.plugins = { mail: null, trajectory: null, uap: null, a2a: null };
  renderSparklines();
}

// ---------------------------------------------------------------------------
// The MAP connection
// ---------------------------------------------------------------------------

/** The `auth` of map/connect: a JWT (two dots) or `Bearer …` goes as bearer, anything else as an API key. */
function authParams(credential) {
  const c = credential.trim();
  if (!c) return undefined;
  if (/^bearer\s+/i.test(c)) return { method: 'bearer', credential: c.replace(/^bearer\s+/i, '') };
  if (c.split('.').length === 3) return { method: 'bearer', credential: c };
  return { method: 'api-key', credential: c };
}

async function connectMap() {
  const gen = ++state.generation;
  const live = () => gen === state.generation && state.signedIn;
  clearTimeout(state.retryTimer);
  setStatus('connecting', 'connecting…');
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/map`;
  const sock = new MapSocket(url, {
    onNotification: (method, params) => { if (live()) onNotification(method, params); },
    onClose: (ev) => { if (live()) scheduleReconnect(`connection closed (${ev.code}${ev.reason ? `: ${ev.reason}` : ''})`); },
  });
  state.sock = sock;
  try {
    await sock.open();
  } catch {
    return; // onClose schedules the retry
  }
  if (!live()) return;
  const params = {
    protocolVersion: 1,
    participantType: 'client',
    name: 'dashboard',
    capabilities: { mail: { canObserve: true } },
  };
  const auth = authParams(state.credential);
  if (auth) params.auth = auth;
  // A token the gateway no longer knows (the session ended) just opens a new session.
  const resumeToken = sessionStorage.getItem(STORE.resumeToken);
  if (resumeToken) params.resumeToken = resumeToken;
  let result;
  try {
    result = await sock.request('map/connect', params);
  } catch (e) {
    if (!live()) return;
    if (e.code >= 1000 && e.code < 2000) return authFailed(e.message);
    const wait = e.data?.retryAfterMs;
    sock.close();
    return scheduleReconnect(e.message, wait);
  }
  if (!live()) return;
  if (result?.authRequired) {
    sock.close();
    // A refused credential is answered with authRequired and the reason.
    return authFailed(result.error?.message ?? 'this gateway admits no anonymous peers: give a tenant credential');
  }
  state.retry = 0;
  state.auto = false;
  if (result.resumeToken) sessionStorage.setItem(STORE.resumeToken, result.resumeToken);
  else sessionStorage.removeItem(STORE.resumeToken);
  state.sessionId = result.sessionId;
  state.participantId = result.participantId;
  state.tenant = result.principal?.claims?.tenant ?? null;
  if (!state.admin.chosen && state.tenant && state.tenant !== state.admin.tenant) {
    state.admin.tenant = state.tenant;
    refreshAdmin();
  }
  setStatus('connected', `connected · tenant ${state.tenant ?? '?'} · ${result.principal?.id ?? 'anonymous'}${result.reconnected ? ' · resumed' : ''}`);
  try {
    // A resumed session keeps its subscription (and gets the events parked while away).
    if (!result.reconnected) await sock.request('map/subscribe', {});
    await loadSnapshot();
    if (!result.reconnected) await loadRecentEvents();
  } catch (e) {
    if (live() && sock.isOpen) setStatus('connected', `connected · tenant ${state.tenant ?? '?'} · loading failed: ${e.message}`);
  }
  if (!live()) return;
  probePlugins();
}

function scheduleReconnect(why, waitMs) {
  if (!state.signedIn) return;
  clearTimeout(state.retryTimer);
  state.sock = null;
  const delay = waitMs ?? Math.min(15000, 500 * 2 ** state.retry) * (0.8 + Math.random() * 0.4);
  state.retry += 1;
  setStatus('offline', `offline: ${why}; retrying in ${(delay / 1000).toFixed(1)} s`);
  state.retryTimer = setTimeout(() => { if (state.signedIn) connectMap(); }, delay);
}

const rpc = (method, params) => (state.sock ? state.sock.request(method, params) : Promise.reject(new RpcError(method, { code: -32000, message: 'not connected' })));

/** Agents and scopes afresh, then the events that arrived meanwhile. */
async function loadSnapshot() {
  state.replaying = [];
  try {
    const agents = [];
    let cursor;
    do {
      const page = await rpc('map/agents/list', cursor ? { limit: 1000, cursor } : { limit: 1000 });
      agents.push(...(page.agents ?? []));
      cursor = page.nextCursor;
    } while (cursor);
    const { scopes = [] } = await rpc('map/scopes/list', {});
    state.agents = new Map(agents.map((a) => [a.id, a]));
    state.scopes = new Map(scopes.map((sc) => [sc.id, sc]));
    for (const ev of state.replaying) if (ev.type !== 'subscription.overflow') applyToGraph(ev);
  } finally {
    state.replaying = null;
  }
  scheduleGraph();
}

function onNotification(method, params) {
  if (method === 'map/event') {
    const ev = params.event ?? {};
    addEventRow(ev, params.eventId);
    if (state.replaying) state.replaying.push(ev);
    applyToGraph(ev);
    scheduleGraph();
    reactToEvent(ev);
  } else if (method === 'trajectory/content.chunk') {
    onChunk(params);
  }
}

// ---------------------------------------------------------------------------
// Agents and scopes
// ---------------------------------------------------------------------------

function applyToGraph(ev) {
  const d = ev.data ?? {};
  const agentId = d.agentId ?? d.agent?.id;
  switch (ev.type) {
    case 'agent_registered':
    case 'agent_state_changed':
    case 'agent_orphaned':
    case 'agent_updated':
      if (d.agent?.id) state.agents.set(d.agent.id, d.agent);
      break;
    case 'agent_unregistered':
      if (agentId) state.agents.delete(agentId);
      if (state.selectedAgent === agentId) state.selectedAgent = null;
      break;
    case 'scope_created':
      if (d.scope?.id) state.scopes.set(d.scope.id, d.scope);
      break;
    case 'scope_deleted': {
      const id = d.scopeId ?? d.scope?.id;
      state.scopes.delete(id);
      for (const a of state.agents.values()) if (a.scopes?.includes(id)) a.scopes = a.scopes.filter((x) => x !== id);
      break;
    }
    case 'scope_member_joined':
    case 'scope_member_left': {
      const a = state.agents.get(agentId);
      if (!a || !d.scopeId) break;
      const rest = (a.scopes ?? []).filter((x) => x !== d.scopeId);
      a.scopes = ev.type === 'scope_member_joined' ? [...rest, d.scopeId] : rest;
      break;
    }
    case 'subscription.overflow':
      // Events were lost: read the graph again.
      loadSnapshot().catch(() => {});
      break;
    default:
  }
}

let graphQueued = false;
function scheduleGraph() {
  if (graphQueued) return;
  graphQueued = true;
  requestAnimationFrame(() => {
    graphQueued = false;
    renderGraph();
  });
}

const NODE_W = 156;
const NODE_H = 40;
const GAP_X = 22;
const GAP_Y = 58;
const PAD = 16;

const byCreation = (a, b) => (a.lifecycle?.createdAt ?? 0) - (b.lifecycle?.createdAt ?? 0) || String(a.id).localeCompare(String(b.id));

/** A layered tree: leaves left to right, parents centred over their children, scopes in a row below. */
function layout() {
  const agents = [...state.agents.values()].sort(byCreation);
  const children = new Map();
  const roots = [];
  for (const a of agents) {
    if (a.parent && state.agents.has(a.parent) && a.parent !== a.id) {
      if (!children.has(a.parent)) children.set(a.parent, []);
      children.get(a.parent).push(a);
    } else {
      roots.push(a);
    }
  }
  const pos = new Map();
  let nextX = PAD;
  let maxDepth = -1;
  const place = (a, depth) => {
    if (pos.has(a.id)) return;
    pos.set(a.id, null); // guards against cycles
    maxDepth = Math.max(maxDepth, depth);
    const kids = (children.get(a.id) ?? []).filter((k) => !pos.has(k.id));
    for (const k of kids) place(k, depth + 1);
    const placed = kids.map((k) => pos.get(k.id)).filter(Boolean);
    let x;
    if (placed.length) {
      x = (placed[0].x + placed[placed.length - 1].x) / 2;
    } else {
      x = nextX;
      nextX += NODE_W + GAP_X;
    }
    pos.set(a.id, { x, y: PAD + depth * (NODE_H + GAP_Y) });
  };
  for (const r of roots) place(r, 0);
  // Agents caught in a parent cycle have no root: place them as roots.
  for (const a of agents) if (!pos.get(a.id)) { pos.delete(a.id); place(a, 0); }

  // Scopes: every known scope plus any an agent names that we cannot list.
  const scopeIds = new Set(state.scopes.keys());
  for (const a of agents) for (const sc of a.scopes ?? []) scopeIds.add(sc);
  const scopeY = PAD + (maxDepth + 1) * (NODE_H + GAP_Y) + (maxDepth >= 0 ? 10 : 0);
  const scopes = [...scopeIds].map((id) => {
    const members = agents.filter((a) => a.scopes?.includes(id));
    const xs = members.map((m) => pos.get(m.id).x + NODE_W / 2);
    const label = `scope ${state.scopes.get(id)?.name ?? id}`;
    const w = Math.min(220, Math.max(96, clip(label, 28).length * 7 + 24));
    return { id, members, label, w, want: xs.length ? xs.reduce((p, c) => p + c, 0) / xs.length : Infinity };
  });
  scopes.sort((a, b) => a.want - b.want || a.id.localeCompare(b.id));
  let edge = PAD;
  for (const sc of scopes) {
    const centre = Number.isFinite(sc.want) ? sc.want : edge + sc.w / 2;
    sc.x = Math.max(edge, centre - sc.w / 2);
    sc.y = scopeY;
    edge = sc.x + sc.w + GAP_X;
  }
  const width = Math.max(nextX, edge) + PAD;
  const height = (scopes.length ? scopeY + 30 : PAD + (maxDepth + 1) * (NODE_H + GAP_Y) - GAP_Y) + PAD;
  return { agents, children, pos, scopes, width, height };
}

function renderGraph() {
  const svg = $('#graph');
  const { agents, pos, scopes, width, height } = layout();
  const scopeCount = new Set([...state.scopes.keys(), ...agents.flatMap((a) => a.scopes ?? [])]).size;
  $('#graph-count').textContent = `${agents.length} agent${agents.length === 1 ? '' : 's'}, ${scopeCount} scope${scopeCount === 1 ? '' : 's'}`;
  if (!agents.length && !scopes.length) {
    svg.setAttribute('width', 320);
    svg.setAttribute('height', 60);
    svg.setAttribute('viewBox', '0 0 320 60');
    svg.replaceChildren(s('text', { x: PAD, y: 34, class: 'empty' }, 'No agents registered in this tenant yet.'));
    return;
  }
  svg.setAttribute('width', Math.max(width, 320));
  svg.setAttribute('height', Math.max(height, 60));
  svg.setAttribute('viewBox', `0 0 ${Math.max(width, 320)} ${Math.max(height, 60)}`);
  const scopeEdges = s('g', { class: 'edges scope-edges' });
  const edges = s('g', { class: 'edges' });
  const nodes = s('g', { class: 'nodes' });
  for (const a of agents) {
    const p = pos.get(a.id);
    if (a.parent && pos.get(a.parent)) {
      const q = pos.get(a.parent);
      const x1 = q.x + NODE_W / 2;
      const y1 = q.y + NODE_H;
      const x2 = p.x + NODE_W / 2;
      const y2 = p.y;
      const my = (y1 + y2) / 2;
      edges.append(s('path', { class: 'edge edge-parent', 'data-from': a.parent, 'data-to': a.id, d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}` }));
    }
  }
  for (const sc of scopes) {
    for (const m of sc.members) {
      const p = pos.get(m.id);
      // From the agent's right side, so that it does not run along a parent edge.
      const x1 = p.x + NODE_W;
      const y1 = p.y + NODE_H / 2;
      const x2 = sc.x + sc.w / 2;
      const y2 = sc.y;
      scopeEdges.append(s('path', {
        class: 'edge edge-scope', 'data-scope': sc.id, 'data-agent': m.id,
        d: `M${x1},${y1} C${x1 + 36},${y1} ${x2},${y2 - 36} ${x2},${y2}`,
      }));
    }
    nodes.append(s('g', { class: 'node scope', 'data-scope-id': sc.id, transform: `translate(${sc.x},${sc.y})` },
      s('title', {}, `scope ${sc.id}: ${sc.members.length} member${sc.members.length === 1 ? '' : 's'}`),
      s('rect', { width: sc.w, height: 26, rx: 13 }),
      s('text', { x: sc.w / 2, y: 17, 'text-anchor': 'middle' }, clip(sc.label, 28))));
  }
  for (const a of agents) {
    const p = pos.get(a.id);
    const sub = [a.role, a.state].filter(Boolean).join(' · ');
    const g = s('g', {
      class: `node agent state-${String(a.state ?? 'unknown').replace(/[^a-z0-9-]/gi, '')}${state.selectedAgent === a.id ? ' selected' : ''}`,
      'data-agent-id': a.id,
      transform: `translate(${p.x},${p.y})`,
      tabindex: 0,
      role: 'button',
      onclick: () => selectAgent(a.id),
      onkeydown: (ev) => { if (ev.key === 'Enter' || ev.key === ' ') selectAgent(a.id); },
    },
    s('title', {}, `${a.name ?? ''} ${a.id}`.trim()),
    s('rect', { width: NODE_W, height: NODE_H, rx: 7 }),
    s('circle', { class: 'dot', cx: 12, cy: 14, r: 4 }),
    s('text', { class: 'name', x: 22, y: 18 }, clip(a.name ?? a.id, 20)),
    s('text', { class: 'sub', x: 12, y: 32 }, clip(sub, 24)));
    nodes.append(g);
  }
  svg.replaceChildren(scopeEdges, edges, nodes);
  showAgentDetail();
}

function selectAgent(id) {
  state.selectedAgent = state.selectedAgent === id ? null : id;
  renderGraph();
}

function showAgentDetail() {
  const el = $('#agent-detail');
  const a = state.selectedAgent && state.agents.get(state.selectedAgent);
  el.hidden = !a;
  el.textContent = a ? pretty(a, 4000) : '';
}

const agentLabel = (id) => {
  const a = state.agents.get(id);
  return a?.name ? `${a.name}` : String(id ?? '');
};

// ---------------------------------------------------------------------------
// Live events
// ---------------------------------------------------------------------------

function addressText(to) {
  if (to === null || to === undefined) return '?';
  if (typeof to === 'string') return agentLabel(to);
  if (to.agent) return agentLabel(to.agent);
  if (to.agents) return to.agents.map(agentLabel).join(', ');
  if (to.scope) return `scope ${to.scope}`;
  if (to.role) return `role ${to.role}`;
  if (to.broadcast) return 'broadcast';
  return json(to, 60);
}

function summary(ev) {
  const d = ev.data ?? {};
  const t = String(ev.type ?? '');
  switch (t) {
    case 'message_sent': {
      const m = d.message ?? {};
      const n = Array.isArray(d.recipients) ? ` (${d.recipients.length} reached)` : '';
      return `${agentLabel(m.from)} → ${addressText(m.to)}${n}: ${json(m.payload, 140)}`;
    }
    case 'message_delivered':
      return `${d.messageId ?? ''} delivered to ${(d.delivered ?? []).map(agentLabel).join(', ') || 'nobody'}`;
    case 'message_failed':
      return `${d.messageId ?? ''} failed: ${json(d.failed ?? d.reason, 120)}`;
    case 'agent_state_changed':
      return `${d.name ?? d.agentId}: ${d.previousState} → ${d.newState}${d.reason ? ` (${d.reason})` : ''}`;
    case 'agent_registered':
      return `${d.name ?? d.agentId}${d.role ? ` as ${d.role}` : ''}${d.agent?.parent ? `, child of ${agentLabel(d.agent.parent)}` : ''}`;
    case 'agent_unregistered':
    case 'agent_orphaned':
      return `${d.name ?? d.agentId}${d.reason ? `: ${d.reason}` : ''}`;
    case 'scope_member_joined':
    case 'scope_member_left':
      return `${agentLabel(d.agentId)} ${t.endsWith('joined') ? 'joined' : 'left'} ${d.scopeId}`;
    case 'scope_created':
    case 'scope_deleted':
      return `${d.name ?? d.scopeId}`;
    case 'participant_connected':
    case 'participant_disconnected':
      return `${d.participantType ?? ''} ${d.participantId ?? ''}${d.reason ? `: ${d.reason}` : ''}`;
    default:
  }
  if (t.startsWith('mail.')) {
    const turn = d.turn;
    if (turn) return `${d.conversationId ?? turn.conversationId}: ${agentLabel(turn.participant)}: ${json(turn.content?.text ?? turn.content, 120)}`;
    return `${d.conversationId ?? d.conversation?.id ?? ''} ${json(d.conversation?.subject ?? '', 80)}`;
  }
  if (t.startsWith('trajectory.')) return `${agentLabel(d.checkpoint?.agentId ?? d.agentId)}: ${d.checkpoint?.label ?? d.checkpoint?.id ?? d.checkpointId ?? ''}`;
  if (t.startsWith('uap.')) return `${d.jobId ?? d.agent?.clientId ?? ''} ${d.status ?? d.job?.status ?? ''} ${d.reason ?? d.message ?? ''}`.trim();
  if (t.startsWith('a2a.')) {
    const parts = [d.taskId, d.agentId ? agentLabel(d.agentId) : null, d.state];
    if (d.artifactId) parts.push(`artifact ${d.artifactId}`);
    if (d.reason) parts.push(`push to ${clip(d.url, 60)} failed (attempt ${d.attempts ?? '?'}): ${clip(d.reason, 80)}`);
    return parts.filter((x) => x !== undefined && x !== null && x !== '').join(' · ');
  }
  return json(d, 160);
}

function eventMatches(li, needle) {
  return !needle || li.textContent.toLowerCase().includes(needle);
}

function eventRow(ev, eventId) {
  const type = String(ev.type ?? 'unknown');
  const msg = type === 'message_sent' || type === 'message_delivered';
  const li = h('li', { class: `event-row${msg ? ' msg' : ''}${type.includes('failed') || type.includes('overflow') ? ' bad' : ''}`, 'data-event-type': type, 'data-event-id': eventId ?? ev.id },
    h('time', { datetime: Number.isFinite(ev.timestamp) ? new Date(ev.timestamp).toISOString() : undefined }, clock(ev.timestamp)),
    h('span', { class: 'type' }, type),
    h('span', { class: 'source', title: ev.source ?? '' }, clip(agentLabel(ev.source), 28)),
    h('span', { class: 'summary' }, summary(ev)));
  li.title = json(ev.data, 2000);
  li.hidden = !eventMatches(li, $('#event-filter').value.trim().toLowerCase());
  return li;
}

function addEventRow(ev, eventId) {
  const list = $('#events');
  list.prepend(eventRow(ev, eventId));
  while (list.children.length > EVENT_ROWS) list.lastElementChild.remove();
}

/**
 * The events from before the page opened (the last 30 minutes the log
 * still holds), below the live ones: a page opened after something
 * happened shows it. Live rows that also came back from replay stay once.
 */
async function loadRecentEvents() {
  const since = Date.now() - HISTORY_MS;
  const past = [];
  let after;
  for (let pages = 0; pages < 10; pages += 1) {
    const page = await rpc('map/replay', after ? { afterEventId: after, limit: 1000 } : { fromTimestamp: since, limit: 1000 });
    past.push(...(page.events ?? []));
    if (!page.hasMore || !page.events?.length) break;
    after = page.events[page.events.length - 1].eventId;
  }
  const list = $('#events');
  const shown = new Set([...list.children].map((li) => li.dataset.eventId));
  const older = past.filter((e) => !shown.has(e.eventId)).slice(-EVENT_ROWS).reverse();
  for (const e of older) {
    if (list.children.length >= EVENT_ROWS) break;
    const li = eventRow({ ...e.event, timestamp: e.event?.timestamp ?? e.timestamp }, e.eventId);
    li.classList.add('past');
    list.append(li);
  }
}

function filterEvents() {
  const needle = $('#event-filter').value.trim().toLowerCase();
  for (const li of $('#events').children) li.hidden = !eventMatches(li, needle);
}

// ---------------------------------------------------------------------------
// Plugin panels: mail, trajectory, UAP, A2A
// ---------------------------------------------------------------------------

const refreshMail = debounce(() => loadMail(), 250);
const refreshTurns = debounce(() => loadTurns(), 250);
const refreshTrajectory = debounce(() => loadTrajectory(), 250);
const refreshUap = debounce(() => loadUap(), 250);
const refreshA2a = debounce(() => loadA2a(), 250);
const refreshAdmin = debounce(() => pollAdmin(), 400);

function reactToEvent(ev) {
  const t = String(ev.type ?? '');
  const d = ev.data ?? {};
  if (t.startsWith('mail.') && state.plugins.mail) {
    refreshMail();
    const conv = d.conversationId ?? d.conversation?.id ?? d.turn?.conversationId;
    if (conv && conv === state.selectedConversation) refreshTurns();
  } else if (t.startsWith('trajectory.') && state.plugins.trajectory) {
    refreshTrajectory();
  } else if (t.startsWith('uap.') && state.plugins.uap) {
    refreshUap();
  } else if (t.startsWith('a2a.')) {
    // Even with the panel hidden: the event says the plugin is loaded now.
    refreshA2a();
  }
  if (t.startsWith('participant_') || t === 'agent_registered' || t === 'agent_unregistered') refreshAdmin();
}

/** Mark a plugin panel: loaded (true), not loaded here (false: hidden), or failing (message). */
function pluginPanel(name, ok, error) {
  const panel = $(`#panel-${name}`);
  state.plugins[name] = ok;
  panel.hidden = ok === false;
  const note = $(`#${name}-note`);
  if (note) note.textContent = error ? `unavailable: ${error}` : '';
}

async function probePlugins() {
  await Promise.all([loadMail(), loadTrajectory(), loadUap(), loadA2a()]);
}

/** Run a plugin's read; -32601 means the plugin is not loaded for this tenant. */
async function pluginCall(name, method, params) {
  try {
    const r = await rpc(method, params);
    if (state.plugins[name] !== true) pluginPanel(name, true);
    return r;
  } catch (e) {
    if (e.code === -32601) pluginPanel(name, false);
    else if (state.sock?.isOpen) pluginPanel(name, state.plugins[name] ?? true, e.message);
    return null;
  }
}

async function loadMail() {
  const r = await pluginCall('mail', 'mail/list', { limit: 100 });
  if (!r) return;
  const list = $('#mail-conversations');
  const convs = [...(r.conversations ?? [])].sort((a, b) => (b.updatedAt ?? 0) - (a.updatedAt ?? 0));
  if (!convs.length) {
    list.replaceChildren(h('li', { class: 'empty' }, 'No conversations yet.'));
    return;
  }
  list.replaceChildren(...convs.map((c) => selectable('conversation', 'data-conversation-id', c.id, state.selectedConversation, selectConversation,
  h('span', { class: 'subject' }, clip(c.subject || c.id, 60)),
  h('span', { class: 'meta' }, `${c.type ?? ''} · ${c.status ?? ''} · ${c.participantCount ?? 0} participant${c.participantCount === 1 ? '' : 's'} · ${when(c.updatedAt ?? c.createdAt)}`))));
}

function selectConversation(id) {
  state.selectedConversation = id;
  for (const li of $('#mail-conversations').children) li.classList.toggle('selected', li.dataset.conversationId === id);
  loadTurns();
}

function contentText(content) {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (typeof content.text === 'string') return content.text;
  return pretty(content, 4000);
}

async function loadTurns() {
  const id = state.selectedConversation;
  const box = $('#mail-turns');
  if (!id) return;
  let r;
  try {
    r = await rpc('mail/turns/list', { conversationId: id, limit: 200 });
  } catch (e) {
    box.replaceChildren(h('p', { class: 'error' }, `turns unavailable: ${e.message}`));
    return;
  }
  if (id !== state.selectedConversation) return;
  const turns = r.turns ?? [];
  box.replaceChildren(
    h('h3', {}, `${turns.length} turn${turns.length === 1 ? '' : 's'}${r.hasMore ? ' (first page)' : ''}`),
    ...(turns.length ? turns.map((t) => h('article', { class: 'turn', 'data-turn-id': t.id },
      h('header', {},
        h('strong', {}, agentLabel(t.participant)),
        h('span', { class: 'meta' }, ` ${when(t.timestamp)} · ${t.contentType ?? ''}${t.threadId ? ` · thread ${t.threadId}` : ''}${t.status && t.status !== 'complete' ? ` · ${t.status}` : ''}`)),
      h('p', { class: 'body' }, clip(contentText(t.content), 4000)))) : [h('p', { class: 'empty' }, 'No turns visible to observers.')]));
}

async function loadTrajectory() {
  const r = await pluginCall('trajectory', 'trajectory/list', { limit: 200 });
  if (!r) return;
  const box = $('#trajectory');
  const cps = r.checkpoints ?? [];
  if (!cps.length) {
    box.replaceChildren(h('p', { class: 'empty' }, 'No checkpoints yet.'));
    return;
  }
  const byAgent = new Map();
  for (const c of cps) {
    if (!byAgent.has(c.agentId)) byAgent.set(c.agentId, []);
    byAgent.get(c.agentId).push(c);
  }
  box.replaceChildren(...[...byAgent].map(([agentId, list]) => h('div', { class: 'agent-checkpoints', 'data-agent-id-ref': agentId },
    h('h3', {}, agentLabel(agentId), h('small', { class: 'note' }, ` ${list.length}`)),
    h('ul', { class: 'list' }, ...list.map((c) => selectable('checkpoint', 'data-checkpoint-id', c.id, state.selectedCheckpoint, selectCheckpoint,
    h('span', { class: 'subject' }, clip(c.label || c.id, 60)),
    h('span', { class: 'meta' }, `${when(c.timestamp)}${c.sessionId ? ` · ${c.sessionId}` : ''}`)))))));
}

function selectCheckpoint(id) {
  state.selectedCheckpoint = id;
  for (const li of document.querySelectorAll('#trajectory .checkpoint')) li.classList.toggle('selected', li.dataset.checkpointId === id);
  loadCheckpoint(id);
}

function artifactBlock(name, text, note) {
  return h('section', { class: 'artifact', 'data-artifact': name },
    h('h4', {}, name, note ? h('small', { class: 'note' }, ` ${note}`) : null),
    h('pre', {}, clip(text, 20000)));
}

async function loadCheckpoint(id, include) {
  const box = $('#trajectory-content');
  let cp;
  let content;
  try {
    if (!include) cp = (await rpc('trajectory/get', { checkpointId: id })).checkpoint;
    content = (await rpc('trajectory/content', include ? { checkpointId: id, include } : { checkpointId: id })).content;
  } catch (e) {
    if (!include) {
      box.replaceChildren(h('p', { class: 'error' }, `content unavailable: ${e.message}`));
      if (cp) box.prepend(h('pre', {}, pretty(cp, 4000)));
    }
    return;
  }
  if (id !== state.selectedCheckpoint) return;
  if (!include) {
    box.replaceChildren(h('h3', {}, cp?.label ?? id), h('p', { class: 'meta' }, `${agentLabel(cp?.agentId)} · ${when(cp?.timestamp)} · ${id}`));
  }
  for (const [name, value] of Object.entries(content?.artifacts ?? {})) box.append(artifactBlock(name, typeof value === 'string' ? value : pretty(value)));
  if (content?.streaming && content.streamId) {
    const target = artifactBlock(content.streamArtifact ?? 'artifact', 'receiving…', `${content.streamInfo?.totalBytes ?? '?'} bytes, streamed`);
    box.append(target);
    state.streams.set(content.streamId, { chunks: [], target: $('pre', target) });
  }
  for (const name of content?.deferred ?? []) {
    box.append(h('p', {}, h('button', { type: 'button', class: 'quiet', onclick: (ev) => { ev.target.remove(); loadCheckpoint(id, [name]); } }, `load ${name}`)));
  }
}

function onChunk(p) {
  const st = state.streams.get(p.streamId);
  if (!st) return;
  st.chunks[p.index] = p.data;
  if (!p.final) return;
  state.streams.delete(p.streamId);
  try {
    const bin = atob(st.chunks.join(''));
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    st.target.textContent = clip(new TextDecoder().decode(bytes), 20000);
  } catch {
    // Chunks are base64 each: decode them one by one.
    const parts = st.chunks.map((c) => Uint8Array.from(atob(c), (x) => x.charCodeAt(0)));
    const all = new Uint8Array(parts.reduce((n, x) => n + x.length, 0));
    let at = 0;
    for (const x of parts) { all.set(x, at); at += x.length; }
    st.target.textContent = clip(new TextDecoder().decode(all), 20000);
  }
}

async function loadUap() {
  const r = await pluginCall('uap', 'uap/list', { limit: 50 });
  if (!r) return;
  const jobs = r.jobs ?? [];
  $('#uap-jobs tbody').replaceChildren(...(jobs.length ? jobs.map((j) => h('tr', { class: `uap-job status-${String(j.status).replace(/[^a-z]/g, '')}`, 'data-job-id': j.id },
    h('td', { title: j.id }, clip(j.id, 14)),
    h('td', {}, j.kind ?? ''),
    h('td', {}, j.type ?? ''),
    h('td', { title: j.error ?? '' }, j.status ?? ''),
    h('td', {}, typeof j.agent === 'string' ? clip(j.agent, 20) : json(j.agent?.displayName ?? j.agent ?? '', 20)),
    h('td', {}, when(j.updatedAt ?? j.createdAt)))) : [h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No jobs.'))]));
  let agents = [];
  try { agents = (await rpc('uap/agents', {})).agents ?? []; } catch { /* keep the jobs */ }
  $('#uap-agents tbody').replaceChildren(...(agents.length ? agents.map((a) => h('tr', { class: 'uap-agent', 'data-client-id': a.clientId },
    h('td', { title: a.clientId }, a.displayName || clip(a.clientId, 20)),
    h('td', {}, json((a.capabilities ?? []).map((c) => Object.entries(c).map(([k, v]) => `${k}:${v?.type ?? json(v, 30)}`).join(' ')), 80)),
    h('td', { class: a.available ? 'ok' : 'muted' }, a.available ? 'listening' : 'away'))) : [h('tr', {}, h('td', { colspan: 3, class: 'empty' }, 'No execution agents registered.'))]));
}

/** A task's state as a class name: `state-input-required`. */
const stateClass = (st) => `state-${String(st ?? 'unknown').replace(/[^a-z-]/gi, '').toLowerCase() || 'unknown'}`;

async function loadA2a() {
  const r = await pluginCall('a2a', 'a2a/tasks', { limit: A2A_ROWS });
  if (!r) return;
  const tasks = r.tasks ?? [];
  $('#a2a-note').textContent = r.next ? `the newest ${tasks.length}` : tasks.length ? `${tasks.length}` : '';
  $('#a2a-tasks tbody').replaceChildren(...(tasks.length ? tasks.map((t) => h('tr', {
    class: `a2a-task ${stateClass(t.state)}`,
    'data-task-id': t.id,
    'data-state': t.state,
    title: `task ${t.id}\ncontext ${t.contextId ?? ''}\ncreated ${when(t.createdMs)}`,
  },
  h('td', { class: 'task', title: t.id }, clip(t.id, 18)),
  h('td', { class: 'agent', title: t.agentId ?? '' }, clip(agentLabel(t.agentId), 20)),
  h('td', { class: 'state' }, t.state ?? ''),
  h('td', { class: 'num messages' }, t.messages ?? 0),
  h('td', { class: 'num artifacts' }, t.artifacts ?? 0),
  h('td', { class: 'updated' }, when(Date.parse(t.updatedAt ?? '') || t.createdMs)))) : [h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No A2A tasks.'))]));
}

// ---------------------------------------------------------------------------
// Admin: tenants, sessions, plugins
// ---------------------------------------------------------------------------

class AdminDenied extends Error {}
/** An answer to a request made before the latest sign-in or sign-out. */
class Stale extends Error {}
/** Errors a panel does not show: they end the whole poll. */
const passOn = (e) => e instanceof AdminDenied || e instanceof Stale;

async function admin(path, init = {}) {
  const headers = { Accept: 'application/json, text/plain' };
  if (state.adminToken) headers.Authorization = `Bearer ${state.adminToken}`;
  const epoch = state.epoch;
  const r = await fetch(path, { ...init, headers, credentials: 'same-origin', cache: 'no-store' });
  if (epoch !== state.epoch) throw new Stale(path);
  if (r.status === 401 || r.status === 403) {
    let why = `${r.status}`;
    try { why = (await r.json()).error ?? why; } catch { /* not JSON */ }
    throw new AdminDenied(why);
  }
  if (!r.ok) {
    const e = new Error(`${path}: HTTP ${r.status} ${clip(await r.text(), 120)}`);
    e.status = r.status;
    throw e;
  }
  return r;
}

function adminUnavailable(why) {
  state.admin.available = false;
  clearInterval(state.admin.timer);
  clearInterval(state.metrics.timer);
  // Never retry a refused token on a timer: refusals count toward the address's throttle.
  state.admin.timer = state.metrics.timer = null;
  for (const el of document.querySelectorAll('.admin, #panel-metrics')) el.hidden = true;
  const el = $('#admin-unavailable');
  el.hidden = false;
  el.textContent = `admin view unavailable: ${why}`;
}

function startAdmin() {
  state.admin.available = null;
  adminBusy = metricsBusy = false;
  pollAdmin();
  pollMetrics();
  state.admin.timer = setInterval(pollAdmin, ADMIN_EVERY_MS);
  state.metrics.timer = setInterval(pollMetrics, METRICS_EVERY_MS);
}

let adminBusy = false;
async function pollAdmin() {
  if (!state.signedIn || state.admin.available === false || adminBusy) return;
  adminBusy = true;
  try {
    await Promise.all([loadTenants().then(loadSessions), loadPlugins()]);
    state.admin.available = true;
  } catch (e) {
    if (e instanceof AdminDenied) adminUnavailable(e.message);
  } finally {
    adminBusy = false;
  }
}

async function loadTenants() {
  let tenants;
  try {
    tenants = (await (await admin('/admin/tenants')).json()).tenants ?? [];
  } catch (e) {
    if (passOn(e)) throw e;
    tenants = state.tenant ? [{ id: state.tenant }] : [];
  }
  state.admin.tenants = tenants;
  const select = $('#tenant-select');
  // The page's own tenant, until the operator picks another.
  const listed = (id) => id && tenants.some((t) => t.id === id);
  if (!listed(state.admin.tenant) || (!state.admin.chosen && listed(state.tenant))) {
    state.admin.tenant = listed(state.tenant) ? state.tenant : tenants[0]?.id ?? null;
  }
  const ids = tenants.map((t) => t.id);
  if ([...select.options].map((o) => o.value).join('\n') !== ids.join('\n')) {
    select.replaceChildren(...ids.map((id) => h('option', { value: id }, id)));
  }
  if (state.admin.tenant) select.value = state.admin.tenant;
  const t = tenants.find((x) => x.id === state.admin.tenant);
  $('#tenant-stats').textContent = t && 'sessions' in t
    ? `${t.sessions} sessions · ${t.agents} agents · ${t.scopes} scopes · ${t.subscriptions} subscriptions · event log ${t.eventLog?.events ?? 0} events, ${formatBytes(t.eventLog?.bytes ?? 0)}${t.plugins ? ` · plugins ${t.plugins.join(', ') || 'none'}` : ''}`
    : '';
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

async function loadSessions() {
  const tenant = state.admin.tenant;
  const body = $('#sessions-table tbody');
  if (!tenant) {
    body.replaceChildren(h('tr', {}, h('td', { colspan: 10, class: 'empty' }, 'No tenant.')));
    return;
  }
  let sessions;
  try {
    sessions = (await (await admin(`/admin/sessions?tenant=${encodeURIComponent(tenant)}`)).json()).sessions ?? [];
  } catch (e) {
    if (passOn(e)) throw e;
    body.replaceChildren(h('tr', {}, h('td', { colspan: 10, class: 'error' }, `sessions unavailable: ${e.message}`)));
    return;
  }
  if (tenant !== state.admin.tenant) return;
  body.replaceChildren(...(sessions.length ? sessions.map(sessionRow) : [h('tr', {}, h('td', { colspan: 10, class: 'empty' }, 'No sessions.'))]));
}

function sessionRow(x) {
  const mine = x.id === state.sessionId;
  const agents = x.agents ?? [];
  return h('tr', { class: `session-row${mine ? ' mine' : ''}${x.connected ? '' : ' offline'}`, 'data-session-id': x.id },
    h('td', { title: x.id }, clip(x.id, 16)),
    h('td', { title: x.participantId }, clip(x.participantId, 18)),
    h('td', {}, x.participantType ?? ''),
    h('td', {}, `${x.name ?? ''}${mine ? ' (this page)' : ''}`),
    h('td', {}, x.principal ?? ''),
    h('td', { class: x.connected ? 'ok' : 'muted' }, x.connected ? 'online' : `offline${x.disconnectedAt ? ` since ${when(x.disconnectedAt)}` : ''}`),
    h('td', {}, when(x.createdAt)),
    h('td', { title: agents.join('\n') }, clip(agents.map(agentLabel).join(', '), 48)),
    h('td', {}, x.subscriptions ?? ''),
    h('td', {}, h('button', {
      type: 'button',
      class: 'disconnect danger',
      'data-session-id': x.id,
      title: 'End this session now: its connection closes and its agents go',
      onclick: (ev) => disconnectSession(x.id, ev.currentTarget),
    }, 'Disconnect')));
}

async function disconnectSession(id, button) {
  button.disabled = true;
  button.textContent = 'disconnecting…';
  try {
    await admin(`/admin/sessions/${encodeURIComponent(id)}`, { method: 'DELETE' });
  } catch (e) {
    if (e instanceof Stale) return;
    if (e instanceof AdminDenied) return adminUnavailable(e.message);
    button.textContent = 'failed';
    button.title = e.message;
  }
  refreshAdmin();
}

function callCount(calls, k) {
  return Number(calls?.[k] ?? 0);
}

function healthText(hl) {
  if (!hl) return { text: '—', cls: 'muted' };
  if (hl.busy) return { text: 'busy', cls: 'ok' };
  const failures = hl.failures ? `, ${hl.failures} failure${hl.failures === 1 ? '' : 's'}` : '';
  return {
    text: `${hl.running ? 'running' : 'not running'}${failures}${hl.lastError ? `: ${hl.lastError}` : ''}`,
    cls: hl.lastError || hl.failures ? 'bad' : hl.running ? 'ok' : 'muted',
  };
}

async function loadPlugins() {
  let r;
  try {
    r = await (await admin('/admin/plugins')).json();
  } catch (e) {
    if (passOn(e)) throw e;
    $('#plugins-error').hidden = false;
    $('#plugins-error').textContent = e.message;
    return;
  }
  const loaded = r.plugins ?? [];
  const byName = new Map(loaded.map((p) => [p.name, p]));
  $('#plugins-note').textContent = loaded.length
    ? `${loaded.length} loaded: ${loaded.map((p) => `${p.name} ${p.version ?? ''}`.trim()).join(', ')}`
    : 'none loaded';
  const err = $('#plugins-error');
  err.hidden = !r.lastError;
  err.textContent = r.lastError ? `last reload error: ${r.lastError}` : '';
  const rows = (r.tenants ?? []).slice().sort((a, b) => String(a.plugin).localeCompare(String(b.plugin)) || String(a.tenant).localeCompare(String(b.tenant)));
  const known = new Set(['ok', 'error', 'trap', 'timeout']);
  const body = $('#plugins-table tbody');
  const trs = rows.map((t) => {
    const p = byName.get(t.plugin) ?? {};
    const other = Object.entries(t.calls ?? {}).filter(([k]) => !known.has(k)).reduce((n, [, v]) => n + Number(v || 0), 0);
    const inst = t.instances ?? {};
    const hl = healthText(t.health);
    const last = (t.recentFailures ?? [])[0];
    const bad = callCount(t.calls, 'trap') + callCount(t.calls, 'timeout') + other > 0;
    return h('tr', { class: `plugin-row${bad ? ' failing' : ''}`, 'data-plugin': t.plugin, 'data-tenant': t.tenant },
      h('td', { title: `${p.path ?? ''}\n${p.digest ?? ''}` }, t.plugin),
      h('td', {}, t.tenant),
      h('td', {}, t.version ?? p.version ?? ''),
      h('td', {}, t.mode ?? ''),
      h('td', { class: 'num' }, callCount(t.calls, 'ok')),
      h('td', { class: `num${callCount(t.calls, 'error') ? ' warn' : ''}` }, callCount(t.calls, 'error')),
      h('td', { class: `num${callCount(t.calls, 'trap') ? ' bad' : ''}` }, callCount(t.calls, 'trap')),
      h('td', { class: `num${callCount(t.calls, 'timeout') ? ' bad' : ''}` }, callCount(t.calls, 'timeout')),
      h('td', { class: `num${other ? ' bad' : ''}`, title: json(t.calls, 200) }, other),
      h('td', {}, `${inst.idle ?? 0} idle · ${inst.busy ?? 0} busy${inst.max ? ` / ${inst.max}` : ''}`),
      h('td', { class: hl.cls }, clip(hl.text, 80)),
      h('td', { title: last?.reason ?? '' }, last ? `${when(last.at)} ${last.outcome}: ${clip(last.reason, 60)}` : '—'));
  });
  // Plugins loaded but bound to no tenant still get a row.
  for (const p of loaded) {
    if (!rows.some((t) => t.plugin === p.name)) {
      trs.push(h('tr', { class: 'plugin-row', 'data-plugin': p.name, 'data-tenant': '' },
        h('td', { title: `${p.path ?? ''}\n${p.digest ?? ''}` }, p.name), h('td', { class: 'muted' }, 'no tenant'), h('td', {}, p.version ?? ''),
        h('td', { colspan: 9, class: 'muted' }, 'loaded, enabled for no tenant')));
    }
  }
  body.replaceChildren(...(trs.length ? trs : [h('tr', {}, h('td', { colspan: 12, class: 'empty' }, 'No plugins.'))]));
}

// ---------------------------------------------------------------------------
// Metrics: Prometheus text, sparklines
// ---------------------------------------------------------------------------

const SERIES = [
  { key: 'requests', label: 'Requests /s', metric: 'map_requests_total', rate: true },
  { key: 'connections', label: 'Live connections', metric: 'map_connections_open' },
  { key: 'sessions', label: 'MAP sessions', metric: 'map_sessions_open' },
  { key: 'plugin-calls', label: 'Plugin calls /s', metric: 'map_plugin_calls_total', rate: true },
  { key: 'delivered', label: 'Messages delivered /s', metric: 'map_messages_delivered_total', rate: true },
];

/** Parse the Prometheus text format into [{name, labels, value}]. */
export function parsePrometheus(text) {
  const out = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)/.exec(line);
    if (!m) continue;
    const name = m[1];
    let i = name.length;
    const labels = {};
    if (line[i] === '{') {
      i += 1;
      while (i < line.length && line[i] !== '}') {
        const km = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"/.exec(line.slice(i));
        if (!km) break;
        i += km[0].length;
        let v = '';
        while (i < line.length && line[i] !== '"') {
          if (line[i] === '\\' && i + 1 < line.length) {
            const n = line[i + 1];
            v += n === 'n' ? '\n' : n;
            i += 2;
          } else {
            v += line[i];
            i += 1;
          }
        }
        i += 1; // closing quote
        labels[km[1]] = v;
        while (i < line.length && (line[i] === ',' || line[i] === ' ')) i += 1;
      }
      i += 1; // closing brace
    }
    const rest = line.slice(i).trim().split(/\s+/);
    const value = rest[0] === '+Inf' ? Infinity : rest[0] === '-Inf' ? -Infinity : Number(rest[0]);
    if (rest[0] !== undefined && !Number.isNaN(value)) out.push({ name, labels, value });
  }
  return out;
}

const sumOf = (samples, name) => samples.filter((x) => x.name === name).reduce((n, x) => n + x.value, 0);

let metricsBusy = false;
async function pollMetrics() {
  if (!state.signedIn || state.admin.available === false || metricsBusy) return;
  metricsBusy = true;
  try {
    const r = await admin('/metrics', { headers: { Accept: 'text/plain' } });
    const parsed = parsePrometheus(await r.text());
    const now = performance.now();
    const totals = Object.fromEntries(SERIES.map((x) => [x.key, sumOf(parsed, x.metric)]));
    const prev = state.metrics.prev;
    const sample = { at: Date.now() };
    for (const x of SERIES) {
      if (!x.rate) sample[x.key] = totals[x.key];
      else if (prev) sample[x.key] = Math.max(0, totals[x.key] - prev.totals[x.key]) / Math.max(0.001, (now - prev.now) / 1000);
    }
    state.metrics.prev = { now, totals };
    if (prev || SERIES.every((x) => !x.rate)) {
      state.metrics.samples.push(sample);
      if (state.metrics.samples.length > METRIC_SAMPLES) state.metrics.samples.shift();
    }
    $('#metrics-note').textContent = `every ${METRICS_EVERY_MS / 1000} s, last ${METRIC_SAMPLES} samples`;
    renderSparklines();
  } catch (e) {
    if (e instanceof Stale) return;
    if (e instanceof AdminDenied) adminUnavailable(e.message);
    else $('#metrics-note').textContent = e.status === 404 ? 'metrics are off (server.metrics = false)' : `unavailable: ${e.message}`;
  } finally {
    metricsBusy = false;
  }
}

function fmt(v) {
  if (v === undefined || v === null || !Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 100) return Math.round(v).toLocaleString();
  return (Math.round(v * 10) / 10).toString();
}

function renderSparklines() {
  const box = $('#sparklines');
  const samples = state.metrics.samples;
  const W = 220;
  const H = 44;
  box.replaceChildren(...SERIES.map((x) => {
    const values = samples.map((p) => p[x.key]).filter((v) => Number.isFinite(v));
    const last = values.at(-1);
    const max = Math.max(1, ...values);
    const svg = s('svg', { class: 'sparkline', 'data-metric': x.key, viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': `${x.label}: ${fmt(last)}` });
    svg.append(s('line', { class: 'baseline', x1: 0, y1: H - 1, x2: W, y2: H - 1 }));
    if (values.length >= 2) {
      // The samples so far span the width (the chart zooms out until it holds METRIC_SAMPLES).
      const step = W / (values.length - 1);
      const x0 = 0;
      const pts = values.map((v, i) => `${(x0 + i * step).toFixed(1)},${(H - 2 - (v / max) * (H - 6)).toFixed(1)}`);
      svg.append(s('path', { class: 'area', d: `M${x0.toFixed(1)},${H - 1} L${pts.join(' L')} L${W},${H - 1} Z` }));
      svg.append(s('polyline', { class: 'line', points: pts.join(' ') }));
    }
    return h('figure', { class: 'metric', 'data-metric': x.key },
      h('figcaption', {}, h('span', {}, x.label), h('b', { class: 'value' }, fmt(last))),
      svg,
      h('small', { class: 'note' }, values.length ? `max ${fmt(Math.max(...values))}` : 'waiting for samples'));
  }));
}

// ---------------------------------------------------------------------------
// Wiring
// ---------------------------------------------------------------------------

function init() {
  $('#signin').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(STORE.credential, $('#credential').value.trim());
    sessionStorage.setItem(STORE.adminToken, $('#admin-token').value.trim());
    sessionStorage.setItem(STORE.signedIn, '1');
    start();
  });
  $('#signout').addEventListener('click', signOut);
  $('#event-filter').addEventListener('input', filterEvents);
  $('#tenant-select').addEventListener('change', (ev) => {
    state.admin.tenant = ev.target.value;
    state.admin.chosen = true;
    loadTenants().then(loadSessions).catch((e) => { if (e instanceof AdminDenied) adminUnavailable(e.message); });
  });
  if (sessionStorage.getItem(STORE.signedIn) === '1') start();
  else if (onLoopback() && sessionStorage.getItem(STORE.autoTried) !== '1') {
    sessionStorage.setItem(STORE.autoTried, '1');
    sessionStorage.setItem(STORE.credential, '');
    sessionStorage.setItem(STORE.adminToken, '');
    sessionStorage.setItem(STORE.signedIn, '1');
    state.auto = true;
    start();
  } else {
    setStatus('signed-out', 'signed out');
    showSignin();
  }
}

init();
