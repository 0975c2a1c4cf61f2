// map/auth/expiring with the real SDK: a session whose JWT expires within five minutes gets the
// notification once, with Unix-ms times (principal.expiresAt too), again after map/auth/refresh
// moves the expiry and after a resume, never for a credential that does not expire. Sent by a
// client, the method is unknown as a request and ignored as a notification.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { AgentConnection, ClientConnection, websocketStream } from '@multi-agent-protocol/sdk';
import { WebSocket } from 'ws';
import {
  startGateway, connectClient, rawParticipant, uid, DEFAULT_TENANTS, RPC_TIMEOUT_MS,
} from './harness.mjs';

const SECRET = '0123456789abcdef-expiring';
const EXPIRING = 'map/auth/expiring';
/** The notice goes out this long before the expiry. */
const NOTICE_BEFORE_MS = 5 * 60 * 1000;

/** An HS256 JWT for the `idp` tenant, expiring `inSecs` from now; its `exp` in ms too. */
function jwt(sub, inSecs) {
  const exp = Math.floor(Date.now() / 1000) + inSecs;
  const part = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub, exp })}`;
  return { token: `${body}.${createHmac('sha256', SECRET).update(body).digest('base64url')}`, expMs: exp * 1000 };
}

let gw;
before(async () => {
  gw = await startGateway({ tenants: [...DEFAULT_TENANTS, { id: 'idp', toml: `jwt = { secret = ${JSON.stringify(SECRET)} }` }] });
});
after(async () => { await gw?.stop(); });

async function openWs(path) {
  const ws = new WebSocket(gw.wsUrl(path));
  gw.connections.add(ws);
  await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
  return ws;
}

/** An SDK AgentConnection with its map/auth/expiring hook set before it connects; the notices it got. */
async function agentWithHook(auth) {
  const conn = new AgentConnection(websocketStream(await openWs('/agent')), { name: uid('expiring'), defaultTimeout: RPC_TIMEOUT_MS });
  const notices = [];
  const waiters = new Set();
  conn.onNotification(EXPIRING, (params) => {
    notices.push(params);
    for (const w of [...waiters]) w();
  });
  /** Wait until `n` notices have come. */
  const waitFor = (n, timeoutMs = 5000) => new Promise((resolve, reject) => {
    const check = () => { if (notices.length >= n) { clearTimeout(t); waiters.delete(check); resolve(notices[n - 1]); } };
    const t = setTimeout(() => { waiters.delete(check); reject(new Error(`${n} ${EXPIRING} notice(s) within ${timeoutMs} ms; got ${JSON.stringify(notices)}`)); }, timeoutMs);
    waiters.add(check);
    check();
  });
  const res = await conn.connect({ auth });
  return { conn, notices, waitFor, connectResult: res.connection };
}

/** A notice for an expiry at `expMs`, sent just now: Unix ms throughout. */
function assertNotice(n, expMs, ctx) {
  const now = Date.now();
  assert.equal(n.expiresAt, expMs, `${ctx}: expiresAt is the JWT's exp in ms: ${JSON.stringify(n)}`);
  assert.ok(n.expiresInMs >= 0 && n.expiresInMs <= NOTICE_BEFORE_MS && Math.abs(now + n.expiresInMs - expMs) < 5000, `${ctx}: expiresInMs counts down to it: ${JSON.stringify(n)}`);
  assert.ok(n.refreshBefore <= expMs && n.refreshBefore > now - 5000, `${ctx}: refreshBefore (ms) is before the expiry and not in the past: ${JSON.stringify(n)}`);
}

test('a JWT expiring in seconds: one notice via AgentConnection.onNotification, re-armed by a refresh that moves the expiry', async () => {
  const sub = uid('worker');
  const first = jwt(sub, 2);
  const agent = await agentWithHook({ method: 'bearer', credential: first.token });
  assert.equal(agent.connectResult.principal.expiresAt, first.expMs, 'principal.expiresAt at connect is Unix ms');
  assertNotice(await agent.waitFor(1), first.expMs, 'first');

  // The same expiry again (the same token) is not announced twice. The notice would follow the
  // refresh's answer at once, so the answer to a later request on this socket is the barrier.
  const same = await agent.conn.refreshAuth({ method: 'bearer', token: first.token });
  assert.equal(same.success, true, JSON.stringify(same));
  assert.equal(same.principal.expiresAt, first.expMs);
  await agent.conn.callExtension('map/agents/list', {});
  assert.equal(agent.notices.length, 1, `one notice per expiry: ${JSON.stringify(agent.notices)}`);

  const second = jwt(sub, 4);
  const refreshed = await agent.conn.refreshAuth({ method: 'bearer', token: second.token });
  assert.equal(refreshed.success, true, JSON.stringify(refreshed));
  assert.equal(refreshed.principal.expiresAt, second.expMs, 'principal.expiresAt after the refresh is the new exp in ms');
  assertNotice(await agent.waitFor(2), second.expMs, 'after the refresh');
  await agent.conn.callExtension('map/agents/list', {});
  assert.equal(agent.notices.length, 2);
});

test('an expiry further off is announced by its timer, five minutes ahead', async () => {
  const token = jwt(uid('later'), 5 * 60 + 2);
  const agent = await agentWithHook({ method: 'bearer', credential: token.token });
  await agent.conn.callExtension('map/agents/list', {});
  assert.equal(agent.notices.length, 0, 'not yet due at connect');
  assertNotice(await agent.waitFor(1, 6000), token.expMs, 'from the timer');
});

test('a refresh without a credential moves the expiry to the new access token\'s; a key session never gets a notice', async () => {
  const token = jwt(uid('client'), 3);
  const raw = await rawParticipant(gw, { auth: { method: 'bearer', token: token.token } });
  assert.equal(raw.connectResult.principal.expiresAt, token.expMs);
  await raw.nextFrame((f) => f.method === EXPIRING, 5000, 'the notice');
  const r = await raw.call('map/auth/refresh', {});
  assert.equal(typeof r.accessToken, 'string');
  assert.ok(r.expiresAt > Date.now() + NOTICE_BEFORE_MS, `the gateway's token lasts longer: ${r.expiresAt}`);
  assert.equal(r.principal.expiresAt, r.expiresAt, 'the session now expires with the new token');

  const keyed = await connectClient(gw, { name: uid('keyed'), auth: { method: 'api-key', credential: 'acme-key' } });
  assert.equal(keyed.connectResult.principal.expiresAt, undefined, 'a key does not expire');
  const refreshed = await keyed.conn.refreshAuth({ method: 'api-key', credential: 'acme-key' });
  assert.equal(refreshed.principal.expiresAt, undefined);
  await keyed.conn.listAgents();
  assert.ok(!keyed.tap.frames.some((f) => f?.method === EXPIRING), 'no notice for a key');
});

test('a resumed session is armed again for its new connection', async () => {
  const token = jwt(uid('resumer'), 3);
  const auth = { method: 'bearer', credential: token.token };
  const first = await connectClient(gw, { name: uid('resumer'), auth });
  await first.tap.waitUntil((fs) => fs.some((f) => f?.method === EXPIRING), 5000, 'the notice before the resume');
  const resumeToken = await first.conn.disconnect();
  const ws = await openWs('/client');
  const frames = [];
  ws.on('message', (d) => frames.push(JSON.parse(String(d))));
  const resumed = new ClientConnection(websocketStream(ws), { defaultTimeout: RPC_TIMEOUT_MS });
  const r = await resumed.connect({ auth, resumeToken });
  assert.equal(r.reconnected, true);
  assert.equal(r.principal.expiresAt, token.expMs);
  await resumed.listAgents();
  const got = frames.filter((f) => f.method === EXPIRING);
  assert.equal(got.length, 1, `one notice on the resumed connection: ${JSON.stringify(frames.map((f) => f.method ?? f.id))}`);
  assertNotice(got[0].params, token.expMs, 'after the resume');
});

test('sent by a client: as a request -32601, as a notification ignored', async () => {
  const raw = await rawParticipant(gw, {});
  const resp = await raw.request(EXPIRING, { expiresAt: Date.now() + 1000 });
  assert.equal(resp.error?.code, -32601, JSON.stringify(resp));
  raw.send({ jsonrpc: '2.0', method: EXPIRING, params: { expiresAt: Date.now() + 1000 } });
  const after = await raw.request('map/agents/list', {});
  assert.ok(after.result, 'the connection goes on');
  const unanswered = raw.tap.frames.filter((f) => f && 'id' in f && f.id === null);
  assert.deepEqual(unanswered, [], 'a notification gets no answer, not even an error');
});
