// An agent serving a folder as its workspace through map-gateway:
//   node agent.mjs [FOLDER] [ws://HOST:PORT/map]
// Clients then call workspace/search, workspace/list and workspace/read
// with this agent's id; the gateway relays each request to this process.
import { WebSocket } from 'ws';
import { AgentConnection, websocketStream, waitForOpen } from '@multi-agent-protocol/sdk';
import { createWorkspaceHandlers } from '@multi-agent-protocol/sdk/server';
import { WORKSPACE, answerRequests, folderService } from './workspace.mjs';

globalThis.WebSocket ??= WebSocket; // Node 20 has no global WebSocket

const folder = process.argv[2] ?? '.';
const url = process.argv[3] ?? process.env.MAP_URL ?? 'ws://127.0.0.1:4700/map';
const auth = process.env.MAP_API_KEY ? { method: 'api-key', credential: process.env.MAP_API_KEY } : undefined;

const fileService = await folderService(folder);
const ws = new WebSocket(url);
await waitForOpen(ws, 10_000);
const stream = answerRequests(websocketStream(ws), createWorkspaceHandlers({ fileService }));
const agent = new AgentConnection(stream, { name: 'workspace', capabilities: WORKSPACE });
await agent.connect({ agentId: process.env.AGENT_ID, auth });
console.log(`serving ${fileService.root} as agent ${agent.agentId} on ${url}`);

process.on('SIGINT', async () => {
  await agent.disconnect().catch(() => {});
  process.exit(0);
});
