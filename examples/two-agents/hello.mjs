// Two MAP agents talking through map-gateway with the reference TypeScript SDK.
//
//   node hello.mjs [ws://HOST:PORT/map]
//
// The URL comes from the first argument, else MAP_URL, else the address of
// `./scripts/run.sh` (ws://127.0.0.1:4700/map). MAP_API_KEY, when set, logs
// both agents into the tenant of that api key; without it they join the
// gateway's anonymous tenant.
//
// Alice sends Bob a message; Bob answers it with reply(), which addresses the
// sender and sets meta.correlationId to the id of the message it answers.
// Exits 0 once Alice has the reply, 1 on any failure or after 10 s.
import { WebSocket } from 'ws';
import { AgentConnection } from '@multi-agent-protocol/sdk';

// Node 20 has no global WebSocket, and the SDK's connect(url) uses the global.
// (It is only read when connecting, so setting it after the imports is fine.)
globalThis.WebSocket ??= WebSocket;

const url = process.argv[2] ?? process.env.MAP_URL ?? 'ws://127.0.0.1:4700/map';
const auth = process.env.MAP_API_KEY ? { method: 'api-key', token: process.env.MAP_API_KEY } : undefined;
const TIMEOUT_MS = 10_000;

const timer = setTimeout(() => {
  console.error(`no reply within ${TIMEOUT_MS / 1000} s`);
  process.exit(1);
}, TIMEOUT_MS);

let alice;
let bob;
try {
  alice = await AgentConnection.connect(url, { name: 'alice', auth });
  bob = await AgentConnection.connect(url, { name: 'bob', auth });
  console.log(`connected to ${url}: alice is ${alice.agentId}, bob is ${bob.agentId}`);

  // Bob answers the message it receives. The handler must not await the
  // reply: SDK 0.1.15 awaits message handlers inside its read loop, so a
  // handler waiting for the map/send response on its own connection would
  // block the reading of that response until the 30 s request timeout.
  const bobReplied = new Promise((resolve, reject) => {
    bob.onMessage((m) => {
      console.log(`bob   <- ${JSON.stringify(m.payload)} from ${m.from}`);
      bob.reply(m, { text: 'hi alice, bob here' }).then(resolve, reject);
    });
  });

  // Alice waits for the answer to her message.
  const aliceGotReply = new Promise((resolve) => alice.onMessage(resolve));

  const sent = await alice.send({ agent: bob.agentId }, { text: 'hello bob' });
  console.log(`alice -> message ${sent.messageId} delivered to ${JSON.stringify(sent.delivered)}`);

  const r = await bobReplied;
  console.log(`bob   -> reply ${r.messageId} delivered to ${JSON.stringify(r.delivered)}`);
  const m = await aliceGotReply;
  console.log(`alice <- ${JSON.stringify(m.payload)} from ${m.from} (correlationId ${m.meta?.correlationId})`);
  if (m.meta?.correlationId !== sent.messageId) {
    throw new Error(`the reply's correlationId ${m.meta?.correlationId} is not ${sent.messageId}`);
  }
  console.log('ok');
} catch (e) {
  console.error(`failed: ${e?.message ?? e}`);
  process.exitCode = 1;
} finally {
  clearTimeout(timer);
  await Promise.allSettled([alice?.disconnect(), bob?.disconnect()]);
}
// Exit even if the SDK leaves a socket or timer behind.
process.exit(process.exitCode ?? 0);
