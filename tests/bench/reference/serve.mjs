// The benchmark's baseline: the SDK's own MAPServer (mail on, trajectory
// handlers added) on a loopback WebSocket port.
// Usage: node serve.mjs mapserver [PORT]   (PORT 0 picks a free one)
// Prints "reference listening on ws://127.0.0.1:PORT" once it accepts.
import { WebSocketServer, WebSocket } from 'ws';

// The SDK's stream helpers look for a global WebSocket, which Node 20 lacks.
globalThis.WebSocket ??= WebSocket;

const { websocketStream } = await import('@multi-agent-protocol/sdk');
const { MAPServer, EventBusImpl, TrajectoryManagerImpl, InMemoryTrajectoryStore, createTrajectoryHandlers } = await import(
  '@multi-agent-protocol/sdk/server'
);

const [kind = 'mapserver', portArg = '0'] = process.argv.slice(2);
if (kind !== 'mapserver') {
  console.error(`unknown server kind ${kind}: only mapserver is served`);
  process.exit(2);
}

const eventBus = new EventBusImpl();
const trajectory = new TrajectoryManagerImpl({ eventBus, store: new InMemoryTrajectoryStore() });
const server = new MAPServer({
  name: 'reference-mapserver',
  version: '0.1.15',
  eventBus,
  mail: { enabled: true },
  additionalHandlers: createTrajectoryHandlers({ trajectory }),
});

// MAPServer 0.1.15 queues messages for agents but never pushes them: hand
// each one to the connection whose session owns the recipient.
server.messages.onDeliver((agentId, message) => {
  const sessionId = server.agents.get(agentId)?.sessionId;
  if (!sessionId) return;
  for (const router of server.connections.values()) {
    let id;
    try {
      id = router.session.id;
    } catch {
      continue; // not connected yet
    }
    if (id === sessionId) {
      router.notify('map/message', { message }).catch(() => {});
      return;
    }
  }
});

// The router takes a writer per outgoing frame and fails when the previous
// write still holds it (two frames in one tick); give it one that queues.
function queuedWrites(stream) {
  let last = Promise.resolve();
  const run = (op) => {
    const done = last.then(async () => {
      const w = stream.writable.getWriter();
      try {
        await op(w);
      } finally {
        try { w.releaseLock(); } catch { /* closed */ }
      }
    });
    last = done.catch(() => {});
    return done;
  };
  const writer = { write: (m) => run((w) => w.write(m)), close: () => run((w) => w.close()), releaseLock() {} };
  return { readable: stream.readable, writable: { getWriter: () => writer } };
}

const wss = new WebSocketServer({ host: '127.0.0.1', port: Number(portArg) });
wss.on('connection', (ws, req) => {
  // The path names the role: /client, /gateway, anything else is an agent.
  const path = new URL(req.url ?? '/', 'ws://local').pathname;
  const role = path.includes('client') ? 'client' : path.includes('gateway') ? 'gateway' : 'agent';
  server.accept(queuedWrites(websocketStream(ws)), { role, transportType: 'websocket' }).start();
});
wss.on('listening', () => console.log(`reference listening on ws://127.0.0.1:${wss.address().port}`));
