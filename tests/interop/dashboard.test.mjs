// The live dashboard (GET /dashboard) in a real browser: headless Chromium,
// driven with playwright-core, signs in, and the page follows what SDK agents
// do through the gateway: the agent graph (parent and scope edges), the event
// stream, mail conversations and their turns, trajectory checkpoints and their
// content, UAP jobs, A2A tasks, the admin tables (plugins, sessions, with a
// working disconnect button) and the metric sparklines. A second test covers an
// admin token and a tenant credential: a refused token leaves the MAP panels
// working, the right one opens the admin view, the page shows only its tenant,
// and a plugin panel shows only for tenants the plugin is enabled for.
//
// Needs Chromium at /usr/bin/chromium (scripts/setup.sh --tests installs it;
// CHROMIUM_PATH overrides). Leaves a screenshot at target/artifacts/dashboard.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { createHmac } from 'node:crypto';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startGateway, connectAgent, connectClient, DEFAULT_TENANTS } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const DIST = join(ROOT, 'plugins', 'dist');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SCREENSHOT = join(ROOT, 'target', 'artifacts', 'dashboard.png');
/** How long the page may take to show something (the metrics poll every 2 s). */
const WAIT = 15_000;

const JWT_SECRET = '0123456789abcdef-dashboard';

/** An HS256 JWT for the `idp` tenant. */
function jwt(claims) {
  const part = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${part({ alg: 'HS256', typ: 'JWT' })}.${part(claims)}`;
  return `${body}.${createHmac('sha256', JWT_SECRET).update(body).digest('base64url')}`;
}

const sel = (attr, value) => `[${attr}=${JSON.stringify(String(value))}]`;
const pluginToml = (name, extra = '') => `[plugins.${name}]\npath = ${JSON.stringify(join(DIST, `${name}.wasm`))}\n${extra}\n`;

let browser;
before(async () => {
  assert.ok(existsSync(CHROMIUM), `Chromium is missing at ${CHROMIUM}: run scripts/setup.sh --tests (it installs Debian's chromium)`);
  for (const p of ['mail', 'trajectory', 'uap', 'a2a']) {
    assert.ok(existsSync(join(DIST, `${p}.wasm`)), `${p}.wasm is missing: run scripts/build-plugins.sh`);
  }
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
});
after(async () => { await browser?.close(); });

/**
 * The page's JSON-RPC on /map as it crosses the wire: `answered(method, pred)`
 * resolves with the first answer to a request for `method` that `pred`
 * accepts, from those seen since the call.
 */
function watchRpc(page) {
  const waiters = new Set();
  const frames = (payload) => {
    try { return [JSON.parse(String(payload))].flat(); } catch { return []; }
  };
  page.on('websocket', (ws) => {
    if (!new URL(ws.url()).pathname.endsWith('/map')) return;
    // Request ids count from 1 on each socket: one map per socket.
    const sent = new Map();
    ws.on('framesent', ({ payload }) => {
      for (const m of frames(payload)) if (m?.method && 'id' in m) sent.set(m.id, m.method);
    });
    ws.on('framereceived', ({ payload }) => {
      for (const m of frames(payload)) {
        const method = m && !('method' in m) ? sent.get(m.id) : undefined;
        if (!method) continue;
        for (const w of waiters) if (w.method === method && w.pred(m)) { waiters.delete(w); w.resolve(m); }
      }
    });
  });
  return {
    answered(method, pred = () => true) {
      let timer;
      const answer = new Promise((resolve, reject) => {
        const w = { method, pred, resolve };
        waiters.add(w);
        timer = setTimeout(() => { waiters.delete(w); reject(new Error(`no answer to ${method} within ${2 * WAIT} ms`)); }, 2 * WAIT);
      }).finally(() => clearTimeout(timer));
      // Awaited later: a step that fails first must not leave it unhandled.
      answer.catch(() => {});
      return answer;
    },
  };
}

/** A fresh page whose uncaught errors and CSP violations fail the test. */
async function openPage() {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  const rpc = watchRpc(page);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Uncaught|SyntaxError|TypeError/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  return { page, context, problems, rpc };
}

/** Open an A2A task for `agentId` through the bridge's HTTP endpoint; its id. */
async function openA2aTask(gw, agentId, key, text) {
  const res = await fetch(`${gw.baseUrl}/a2a/agents/${encodeURIComponent(agentId)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, 'a2a-version': '1.0' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'SendMessage',
      params: {
        message: { messageId: `m-${process.pid}-${Date.now()}`, role: 'ROLE_USER', parts: [{ text }] },
        configuration: { returnImmediately: true },
      },
    }),
  });
  const body = await res.json();
  assert.equal(res.status, 200, `SendMessage: ${JSON.stringify(body)}`);
  const id = body.result?.task?.id;
  assert.ok(id, `SendMessage answered a task: ${JSON.stringify(body)}`);
  return id;
}

async function signIn(page, { credential = '', adminToken = '' } = {}) {
  // On loopback the page has signed in by itself (no credentials): sign out first.
  await page.waitForSelector('#signin:visible, #signout:visible');
  if (await page.isVisible('#signout')) await page.click('#signout');
  await page.waitForSelector('#signin', { state: 'visible' });
  await page.fill('#credential', credential);
  await page.fill('#admin-token', adminToken);
  await page.click('#signin-submit');
}

async function waitConnected(page) {
  await page.waitForSelector('.status[data-state="connected"]');
  const text = await page.textContent('.status');
  assert.match(text, /^connected\b/, `status line: ${text}`);
  return text;
}

test('the dashboard follows agents, scopes, events, mail, trajectory, UAP, A2A, plugins, sessions and metrics live', async () => {
  const gw = await startGateway({
    tenants: [
      { id: 'default', api_keys: ['default-key'], toml: 'plugins = ["mail", "trajectory", "uap", "a2a"]' },
      ...DEFAULT_TENANTS.filter((t) => t.id !== 'default'),
    ],
    extraToml: pluginToml('mail') + pluginToml('trajectory') + pluginToml('uap', 'mode = "singleton"\ndeadline_ms = 5000') + pluginToml('a2a', 'http_prefix = "/a2a"'),
  });
  const { page, context, problems } = await openPage();
  try {
    const resp = await page.goto(`${gw.baseUrl}/dashboard`);
    assert.equal(resp.status(), 200, 'GET /dashboard');
    assert.match(resp.headers()['content-type'] ?? '', /^text\/html/);
    for (const [path, type] of [['/dashboard/app.js', /javascript/], ['/dashboard/style.css', /^text\/css/]]) {
      const r = await fetch(`${gw.baseUrl}${path}`);
      assert.equal(r.status, 200, `GET ${path}`);
      assert.match(r.headers.get('content-type') ?? '', type, `${path} content-type`);
    }

    // On loopback the page signs in by itself: the anonymous tenant, the admin API.
    const status = await waitConnected(page);
    assert.equal(await page.isVisible('#signin'), false, 'no sign-in form on loopback without credentials');
    assert.match(status, /tenant default/);

    // Two agents, the second a child of the first, both in one scope.
    const scope = `team-${process.pid}`;
    const lead = await connectAgent(gw, { name: 'lead', role: 'planner', scopes: [scope] });
    const worker = await connectAgent(gw, { name: 'worker', role: 'coder', parent: lead.id });
    await worker.conn.joinScope(scope);

    await page.waitForSelector(`#graph ${sel('data-agent-id', lead.id)}`);
    await page.waitForSelector(`#graph ${sel('data-agent-id', worker.id)}`);
    assert.match(await page.textContent(`#graph ${sel('data-agent-id', lead.id)}`), /lead/);
    assert.match(await page.textContent(`#graph ${sel('data-agent-id', worker.id)}`), /worker/);
    // (a straight edge has an empty box: attached, not visible)
    await page.waitForSelector(`#graph path.edge-parent${sel('data-from', lead.id)}${sel('data-to', worker.id)}`, { state: 'attached' });
    await page.waitForSelector(`#graph ${sel('data-scope-id', scope)}`);
    await page.waitForFunction((s) => document.querySelectorAll(`#graph path.edge-scope[data-scope="${s}"]`).length === 2, scope);

    // A message between them shows in the stream, highlighted.
    await lead.conn.send({ agent: worker.id }, { text: 'hello from the lead' });
    const sent = await page.waitForSelector('.event-row[data-event-type="message_sent"]');
    assert.match(await sent.textContent(), /hello from the lead/);
    assert.ok(await sent.evaluate((el) => el.classList.contains('msg')), 'message rows are highlighted');
    await page.waitForSelector('.event-row[data-event-type="agent_registered"]');

    // Wire text is shown as text, never as markup.
    await lead.conn.send({ agent: worker.id }, { text: '<img src=x id=injected><b>bold</b>' });
    await page.waitForFunction(() => [...document.querySelectorAll('.event-row')].some((r) => r.textContent.includes('<b>bold</b>')));
    assert.equal(await page.$$eval('#events img, #events b, #injected', (els) => els.length), 0, 'payload markup must not become elements');

    // Mail: a conversation and a turn; clicking it loads the turns.
    const { conversation } = await lead.conn.createConversation({
      subject: 'release plan',
      initialParticipants: [{ id: worker.id, role: 'worker' }],
    });
    await lead.conn.recordTurn({ conversationId: conversation.id, contentType: 'text', content: { text: 'ship it on Friday' } });
    const conv = await page.waitForSelector(`#mail-conversations ${sel('data-conversation-id', conversation.id)}`);
    assert.match(await conv.textContent(), /release plan/);
    await conv.click();
    await page.waitForFunction(() => [...document.querySelectorAll('#mail-turns .turn')].some((t) => t.textContent.includes('ship it on Friday')));
    // A later turn arrives by itself in the open conversation.
    await worker.conn.recordTurn({ conversationId: conversation.id, contentType: 'text', content: { text: 'agreed' } });
    await page.waitForFunction(() => [...document.querySelectorAll('#mail-turns .turn')].some((t) => t.textContent.includes('agreed')));

    // Trajectory: a checkpoint with content, listed under its agent.
    const checkpointId = `ckpt-${process.pid}`;
    await worker.conn.callExtension('trajectory/checkpoint', {
      checkpoint: { id: checkpointId, label: 'parser written', metadata: { files: 3 } },
      content: { notes: 'the parser handles nested scopes' },
    });
    const cp = await page.waitForSelector(`#trajectory ${sel('data-checkpoint-id', checkpointId)}`);
    assert.match(await cp.textContent(), /parser written/);
    await cp.click();
    await page.waitForFunction(() => document.querySelector('#trajectory-content')?.textContent.includes('the parser handles nested scopes'));

    // UAP: the panel shows once the plugin answers; a submitted job is listed.
    const submitter = await connectClient(gw, { name: 'submitter' });
    const { job } = await submitter.conn.callExtension('uap/submit', { kind: 'test', type: 'dashboard-check' });
    await page.waitForSelector('#panel-uap', { state: 'visible' });
    await page.waitForSelector(`#uap-jobs tr.uap-job${sel('data-job-id', job.id)}`);

    // A2A: a task opened over the bridge's HTTP endpoint for an agent that
    // opted in is listed with its agent and state, and follows the agent's updates.
    const a2aAgent = await connectAgent(gw, { name: 'a2a-helper', agentId: `a2a-helper-${process.pid}` });
    await a2aAgent.conn.updateMetadata({ a2a: { skills: [] } });
    const taskId = await openA2aTask(gw, a2aAgent.id, 'default-key', 'summarise the release');
    await page.waitForSelector('#panel-a2a', { state: 'visible' });
    const taskRow = `#a2a-tasks tr.a2a-task${sel('data-task-id', taskId)}`;
    await page.waitForSelector(`${taskRow}.state-submitted`);
    const cells = async () => page.$eval(taskRow, (tr) => Object.fromEntries([...tr.cells].map((td) => [td.className.replace(/^num /, ''), td.textContent])));
    let row = await cells();
    assert.equal(row.agent, 'a2a-helper', 'the agent by its name');
    assert.equal(await page.getAttribute(`${taskRow} td.agent`, 'title'), a2aAgent.id);
    assert.deepEqual([row.state, row.messages, row.artifacts], ['submitted', '1', '0']);
    assert.match(row.updated, /^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d$/);
    const created = await page.waitForSelector(`.event-row[data-event-type="a2a.task.created"]`);
    assert.match(await created.textContent(), new RegExp(`${taskId} · a2a-helper · submitted`));
    // The agent works on it and adds an artifact, then completes it: the row follows.
    await a2aAgent.conn.callExtension('a2a/task/update', { taskId, state: 'working', artifacts: [{ artifactId: 'notes', parts: [{ text: 'draft' }] }] });
    await page.waitForSelector(`${taskRow}.state-working`);
    row = await cells();
    assert.deepEqual([row.state, row.artifacts], ['working', '1']);
    await a2aAgent.conn.callExtension('a2a/task/update', { taskId, state: 'completed', message: { parts: [{ text: 'done' }] } });
    await page.waitForSelector(`${taskRow}.state-completed`);
    row = await cells();
    assert.deepEqual([row.state, row.messages, row.artifacts], ['completed', '2', '1']);
    assert.equal(await page.$$eval(`${taskRow}.state-working, ${taskRow}.state-submitted`, (els) => els.length), 0, 'one state class at a time');
    await page.waitForFunction((id) => [...document.querySelectorAll('.event-row[data-event-type="a2a.task.status"]')].some((r) => r.textContent.includes(`${id} · a2a-helper · completed`)), taskId);
    await page.waitForFunction((id) => [...document.querySelectorAll('.event-row[data-event-type="a2a.task.artifact"]')].some((r) => r.textContent.includes(`${id} · a2a-helper · working · artifact notes`)), taskId);

    // Admin: the plugins and sessions tables.
    for (const p of ['mail', 'trajectory', 'uap', 'a2a']) await page.waitForSelector(`#plugins-table tr.plugin-row${sel('data-plugin', p)}${sel('data-tenant', 'default')}`);
    await page.waitForFunction(() => Number(document.querySelector('#plugins-table tr.plugin-row[data-plugin="mail"][data-tenant="default"] td.num')?.textContent) > 0);
    for (const h of [lead, worker, submitter]) await page.waitForSelector(`#sessions-table tr.session-row${sel('data-session-id', h.sessionId)}`);
    await page.waitForSelector('#sessions-table tr.session-row.mine');
    assert.equal(await page.isVisible('#admin-unavailable'), false);

    // Metrics: the sparklines have lines (the poll runs every 2 s; rates need two samples).
    await page.waitForFunction(() => {
      const lines = [...document.querySelectorAll('svg.sparkline polyline')];
      return lines.length >= 4 && lines.every((l) => (l.getAttribute('points') ?? '').trim().split(/\s+/).length >= 2);
    });
    await page.waitForFunction(() => Number(document.querySelector('.metric[data-metric="connections"] .value')?.textContent) >= 4);

    mkdirSync(dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });

    // Disconnect the worker's session from the sessions table: its socket
    // closes, its agent leaves the graph and its row the table.
    const closed = new Promise((resolve) => worker.ws.addEventListener('close', (ev) => resolve(ev.code)));
    await page.click(`#sessions-table button.disconnect${sel('data-session-id', worker.sessionId)}`);
    await page.waitForSelector(`#graph ${sel('data-agent-id', worker.id)}`, { state: 'detached' });
    await page.waitForSelector(`#sessions-table tr.session-row${sel('data-session-id', worker.sessionId)}`, { state: 'detached' });
    let timer;
    const code = await Promise.race([closed, new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('the worker socket stayed open')), WAIT); })])
      .finally(() => clearTimeout(timer));
    assert.notEqual(code, 1000, `the gateway closed the disconnected session's socket (code ${code})`);
    assert.ok(await page.$(`#graph ${sel('data-agent-id', lead.id)}`), 'the lead stays');
    await page.waitForSelector('.event-row[data-event-type="agent_unregistered"]');

    // Disconnecting the page's own session: it reconnects (a new session) and reads the graph again.
    const own = await page.getAttribute('#sessions-table tr.session-row.mine', 'data-session-id');
    await page.click(`#sessions-table button.disconnect${sel('data-session-id', own)}`);
    await page.waitForFunction((old) => {
      const mine = document.querySelector('#sessions-table tr.session-row.mine');
      return mine && mine.dataset.sessionId !== old && document.querySelector('.status').dataset.state === 'connected';
    }, own);
    await page.waitForSelector(`#graph ${sel('data-agent-id', lead.id)}`);

    // A reload stays signed in (sessionStorage), takes up the same session and reads the graph again.
    const before = await page.getAttribute('#sessions-table tr.session-row.mine', 'data-session-id');
    await page.reload();
    assert.match(await waitConnected(page), /resumed/);
    assert.equal(await page.isVisible('#signin'), false, 'no sign-in form after a reload');
    await page.waitForSelector(`#graph ${sel('data-agent-id', lead.id)}`);
    assert.equal(await page.$(`#graph ${sel('data-agent-id', worker.id)}`), null);
    await page.waitForSelector(`#sessions-table tr.session-row.mine${sel('data-session-id', before)}`);
    // The resumed session still has its subscription: new events keep coming.
    await lead.conn.send({ agent: lead.id }, { text: 'after the reload' });
    await page.waitForFunction(() => [...document.querySelectorAll('.event-row[data-event-type="message_sent"]')].some((r) => r.textContent.includes('after the reload')));

    assert.deepEqual(problems, [], 'the page logged no errors');
  } finally {
    await context.close();
    await gw.stop();
  }
});

test('a page opened after the fact shows the recent events from replay, once each, below the live ones', async () => {
  const gw = await startGateway({});
  const lead = await connectAgent(gw, { name: 'early-lead' });
  await lead.conn.send({ agent: lead.id }, { text: 'before the page opened' });
  const { page, context, problems } = await openPage();
  try {
    await page.goto(`${gw.baseUrl}/dashboard`);
    await waitConnected(page);
    const early = await page.waitForSelector('.event-row.past[data-event-type="message_sent"]');
    assert.match(await early.textContent(), /before the page opened/);
    await page.waitForSelector('.event-row.past[data-event-type="agent_registered"]');
    await lead.conn.send({ agent: lead.id }, { text: 'after the page opened' });
    const live = await page.waitForSelector('.event-row:not(.past)[data-event-type="message_sent"]');
    assert.match(await live.textContent(), /after the page opened/);
    const rows = await page.$$eval('.event-row', (els) => els.map((el) => ({ id: el.dataset.eventId, past: el.classList.contains('past') })));
    assert.equal(new Set(rows.map((r) => r.id)).size, rows.length, 'each event shows once');
    assert.ok(rows.findIndex((r) => r.past) > rows.findIndex((r) => !r.past), 'older events sit below the live ones');
    assert.deepEqual(problems, [], 'the page logged no errors');
  } finally {
    await context.close();
    await gw.stop();
  }
});

test('an admin token and a tenant credential: refused admin keeps the MAP view, the right token opens it, one tenant only', async () => {
  // The A2A bridge is loaded, but not for acme: its page has no A2A panel, idp's has.
  const gw = await startGateway({
    tenants: [
      ...DEFAULT_TENANTS.map((t) => (t.id === 'acme' ? { ...t, toml: 'plugins = []' } : t)),
      { id: 'idp', toml: `jwt = { secret = ${JSON.stringify(JWT_SECRET)} }` },
    ],
    extraToml: `[admin]\ntoken = "admin-secret"\n${pluginToml('a2a', 'http_prefix = "/a2a"')}`,
  });
  const { page, context, problems, rpc } = await openPage();
  const a2aRefused = () => rpc.answered('a2a/tasks', (m) => m.error?.code === -32601);
  try {
    const other = await connectAgent(gw, { name: 'default-tenant-agent' });
    const mine = await connectAgent(gw, { name: 'acme-agent', auth: { method: 'api-key', credential: 'acme-key' } });
    await page.goto(`${gw.baseUrl}/dashboard`);

    // A wrong tenant credential goes back to the form with the reason.
    await signIn(page, { credential: 'not-a-key' });
    await page.waitForSelector('#signin-error', { state: 'visible' });
    assert.match(await page.textContent('.status'), /refused/);

    // The right credential with a wrong admin token: MAP panels, no admin view.
    let refused = a2aRefused();
    await signIn(page, { credential: 'acme-key', adminToken: 'wrong' });
    assert.match(await waitConnected(page), /tenant acme/);
    await page.waitForSelector(`#graph ${sel('data-agent-id', mine.id)}`);
    assert.equal(await page.$(`#graph ${sel('data-agent-id', other.id)}`), null, 'another tenant\'s agent is not shown');
    await page.waitForSelector('#admin-unavailable', { state: 'visible' });
    assert.match(await page.textContent('#admin-unavailable'), /admin view unavailable/);
    assert.equal(await page.isVisible('#panel-plugins'), false);
    assert.equal(await page.isVisible('#panel-sessions'), false);
    assert.equal(await page.isVisible('#panel-graph'), true);
    // No plugins are enabled here: their panels hide once the methods answer -32601.
    for (const panel of ['#panel-mail', '#panel-trajectory', '#panel-uap']) await page.waitForSelector(panel, { state: 'hidden' });
    await refused;
    assert.equal(await page.isVisible('#panel-a2a'), false, 'no A2A panel where a2a/tasks answers -32601');

    // Sign out, then in with the admin token: sessions of the caller's tenant.
    await page.click('#signout');
    await signIn(page, { credential: 'acme-key', adminToken: 'admin-secret' });
    await waitConnected(page);
    await page.waitForSelector(`#sessions-table tr.session-row${sel('data-session-id', mine.sessionId)}`);
    assert.equal(await page.$eval('#tenant-select', (s) => s.value), 'acme');
    assert.equal(await page.$(`#sessions-table tr.session-row${sel('data-session-id', other.sessionId)}`), null);
    assert.equal(await page.isVisible('#admin-unavailable'), false);
    await page.waitForSelector('svg.sparkline polyline');

    // The operator may look at another tenant.
    await page.selectOption('#tenant-select', 'default');
    await page.waitForSelector(`#sessions-table tr.session-row${sel('data-session-id', other.sessionId)}`);

    // A JWT (two dots) goes as a bearer credential: its tenant, its subject.
    await page.click('#signout');
    await signIn(page, { credential: jwt({ sub: 'operator-7', exp: Math.floor(Date.now() / 1000) + 600 }), adminToken: 'admin-secret' });
    assert.match(await waitConnected(page), /tenant idp · operator-7/);
    await page.waitForSelector('#sessions-table tr.session-row.mine');
    assert.equal(await page.$eval('#tenant-select', (s) => s.value), 'idp');
    // idp has the A2A bridge (no plugin list: all of them): its panel shows, with no tasks yet.
    await page.waitForSelector('#panel-a2a', { state: 'visible' });
    assert.equal(await page.textContent('#a2a-tasks tbody'), 'No A2A tasks.');

    // Back to acme: the panel hides again once a2a/tasks answers -32601.
    refused = a2aRefused();
    await page.click('#signout');
    await signIn(page, { credential: 'acme-key', adminToken: 'admin-secret' });
    await waitConnected(page);
    await refused;
    assert.equal(await page.isVisible('#panel-a2a'), false, 'the A2A panel hides again');
    assert.equal(await page.$$eval('#a2a-tasks tbody tr', (els) => els.length), 0, 'no rows of the previous tenant');

    assert.deepEqual(problems, [], 'the page logged no errors');
  } finally {
    await context.close();
    await gw.stop();
  }
});
