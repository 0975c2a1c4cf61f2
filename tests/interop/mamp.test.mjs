// The MAMP bridge (plugins/mamp) with the real SDK client as the MAP agent:
// an external system POSTs a MAMP message, the agent (AgentConnection)
// receives it, answers with callExtension('mamp/send'), and the answer
// reaches the external system's own HTTP endpoint (a node:http server in
// this test) in the same conversation, with the peer's Bearer key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { startGateway, connectAgent, DEFAULT_TENANTS, WAIT_MS } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const DIST = join(HERE, '..', '..', 'plugins', 'dist');

let gw;
let peer;
const received = [];

before(async () => {
  assert.ok(existsSync(join(DIST, 'mamp.wasm')), `${DIST}/mamp.wasm is missing: run scripts/build-plugins.sh`);
  // The external system's endpoint: it records what it gets and answers as a MAMP receiver.
  peer = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const message = JSON.parse(body);
      received.push({ path: req.url, authorization: req.headers.authorization, message });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ conversation_id: message.conversation_id, message_id: message.message_id, status: 'received' }));
    });
  });
  await new Promise((r) => peer.listen(0, '127.0.0.1', r));
  const port = peer.address().port;
  const acme = DEFAULT_TENANTS.find((t) => t.id === 'acme');
  gw = await startGateway({
    tenants: [
      { id: 'default' },
      {
        ...acme,
        toml: [
          'plugins = ["mail", "mamp"]',
          'outbound_hosts = { mamp = ["127.0.0.1"] }',
          '[tenants.plugin_config.mamp]',
          'domain = "gw.example"',
          `peers = { "peer.example" = { url = "http://127.0.0.1:${port}", key = "peer-key" } }`,
        ].join('\n'),
      },
    ],
    extraToml: [
      `[plugins.mail]\npath = ${JSON.stringify(join(DIST, 'mail.wasm'))}`,
      `[plugins.mamp]\npath = ${JSON.stringify(join(DIST, 'mamp.wasm'))}\nhttp_prefix = "/mamp"`,
    ].join('\n'),
  });
});

after(async () => {
  await gw?.stop();
  await new Promise((r) => peer?.close(r));
});

test('an external message reaches an SDK agent, whose answer reaches the external endpoint in the same conversation', async () => {
  const alice = await connectAgent(gw, { name: 'alice', agentId: 'alice', auth: { method: 'api-key', credential: 'acme-key' } });
  const message = {
    protocol: 'mamp/1.0',
    message_id: 'ext-1',
    from: 'agent://peer.example/bob',
    to: 'agent://gw.example/alice',
    content: 'can you review the plan?',
    metadata: { timestamp: '2026-11-23T10:00:00Z' },
  };
  const res = await fetch(`${gw.baseUrl}/mamp/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer acme-token' },
    body: JSON.stringify(message),
  });
  assert.equal(res.status, 200);
  const answer = await res.json();
  assert.equal(answer.status, 'received');
  const conversationId = answer.conversation_id;

  await alice.tap.waitUntil(() => alice.tap.messages().length >= 1, WAIT_MS, 'the MAMP message');
  const got = alice.tap.messages()[0];
  assert.deepEqual(got.payload.content, [{ type: 'text', text: 'can you review the plan?' }]);
  assert.equal(got.meta.protocol, 'mamp');
  assert.equal(got.meta.mail.conversationId, conversationId);

  // Answered at once: the bridge recorded the message before delivering it.
  const sent = await alice.conn.callExtension('mamp/send', { conversationId: got.meta.mail.conversationId, content: [{ type: 'text', text: 'yes, on it' }] });
  assert.equal(sent.status, 'sent');
  assert.equal(sent.conversationId, conversationId);
  assert.equal(received.length, 1);
  const out = received[0];
  assert.equal(out.path, '/mamp/v1/messages');
  assert.equal(out.authorization, 'Bearer peer-key');
  assert.equal(out.message.conversation_id, conversationId);
  assert.equal(out.message.from, 'agent://gw.example/alice');
  assert.equal(out.message.to, 'agent://peer.example/bob');
  assert.deepEqual(out.message.content, [{ type: 'text', text: 'yes, on it' }]);

  // Both messages are turns of the mail conversation, in order.
  const { turns } = await alice.conn.callExtension('mail/turns/list', { conversationId });
  assert.deepEqual(turns.map((t) => t.content.content[0].text), ['can you review the plan?', 'yes, on it']);
});
