// A folder as an agent's workspace, for the MAP workspace extension
// (workspace/search, workspace/list, workspace/read), and a way for an SDK
// agent to answer the requests the gateway relays to it. Only Node's own
// modules: agent.mjs and the gateway's tests bring the SDK.
//
// - folderService(root) implements the SDK's WorkspaceFileService
//   (search, list, read), which the SDK's createWorkspaceHandlers (from
//   '@multi-agent-protocol/sdk/server') turns into the three methods.
//   No path leaves the root, symbolic links included (12003); a missing
//   file is 12001, an unreadable one 12002.
// - answerRequests(stream, handlers) wraps an SDK stream so that requests
//   for those methods are answered there; everything else passes through
//   to the AgentConnection built on it. (AgentConnection itself answers
//   every request with -32601: it has no request handlers.)
// - WORKSPACE: the capabilities by which an agent says it serves one.

import { promises as fs } from 'node:fs';
import { extname, join, relative, resolve, sep } from 'node:path';

/** Declared at map/connect and map/agents/register (AgentConnection sends both). */
export const WORKSPACE = { workspace: { enabled: true, canSearch: true, canList: true, canRead: true } };

export const ERRORS = { NOT_FOUND: 12001, DENIED: 12002, INVALID_PATH: 12003 };

/** Largest file read whole (bytes): more is refused rather than sent in one frame. */
const MAX_READ_BYTES = 1 << 20;
/** Entries a search looks at before it stops. */
const MAX_SEARCHED = 20_000;

const MIME = {
  '.md': 'text/markdown', '.txt': 'text/plain', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.ts': 'text/x-typescript', '.json': 'application/json', '.html': 'text/html', '.css': 'text/css',
  '.rs': 'text/x-rust', '.py': 'text/x-python', '.toml': 'application/toml', '.yaml': 'application/yaml',
  '.yml': 'application/yaml', '.wit': 'text/plain', '.sh': 'text/x-shellscript', '.png': 'image/png',
  '.jpg': 'image/jpeg', '.gif': 'image/gif', '.svg': 'image/svg+xml', '.pdf': 'application/pdf',
};

/** The MIME type guessed from a name's extension. */
export const mimeOf = (name) => MIME[extname(name).toLowerCase()] ?? 'application/octet-stream';

/** Names in code-point order, the same on every machine. */
const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

function fail(code, message) {
  return Object.assign(new Error(message), { code });
}

/** An fs error as the extension's error. */
function refused(e, path) {
  if (e.code === 'ENOENT' || e.code === 'ENOTDIR') return fail(ERRORS.NOT_FOUND, `No such file: ${path}`);
  if (e.code === 'EACCES' || e.code === 'EPERM') return fail(ERRORS.DENIED, `Permission denied: ${path}`);
  return e;
}

/** The WorkspaceFileService of the folder `root`. */
export async function folderService(root) {
  const top = await fs.realpath(root);
  const inside = (p) => p === top || p.startsWith(top + sep);
  const rel = (p) => relative(top, p).split(sep).join('/') || '.';

  /** `path` under the root, symbolic links resolved; never outside it. */
  async function place(path = '.') {
    if (typeof path !== 'string' || path.includes('\0')) throw fail(ERRORS.INVALID_PATH, 'Invalid path');
    const lexical = resolve(top, path);
    if (!inside(lexical)) throw fail(ERRORS.INVALID_PATH, `Path escapes the workspace: ${path}`);
    let real;
    try {
      real = await fs.realpath(lexical);
    } catch (e) {
      throw refused(e, path);
    }
    if (!inside(real)) throw fail(ERRORS.INVALID_PATH, `Path escapes the workspace: ${path}`);
    return real;
  }

  /** A FileResult; a symbolic link is what it points to (which may be outside: then it is only named). */
  async function entry(full, dirent) {
    const path = rel(full);
    const stat = dirent.isDirectory() ? null : await fs.stat(full).catch(() => null);
    if (dirent.isDirectory() || stat?.isDirectory()) return { path, isDirectory: true };
    return { path, isDirectory: false, ...(stat ? { size: stat.size } : {}), mime: mimeOf(dirent.name) };
  }

  async function list(_agentId, directory = '.') {
    const dir = await place(directory);
    let dirents;
    try {
      dirents = await fs.readdir(dir, { withFileTypes: true });
    } catch (e) {
      if (e.code === 'ENOTDIR') throw fail(ERRORS.INVALID_PATH, `Not a directory: ${directory}`);
      throw refused(e, directory);
    }
    dirents.sort(byName);
    return Promise.all(dirents.map((d) => entry(join(dir, d.name), d)));
  }

  /** Names containing `query` (case-insensitive), or matching it as a glob (`*`, `?`). */
  function matcher(query) {
    if (!/[*?]/.test(query)) return (name) => name.toLowerCase().includes(query.toLowerCase());
    const re = new RegExp(`^${query.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`, 'i');
    return (name) => re.test(name);
  }

  async function search(_agentId, query, { cwd = '.', limit = 50 } = {}) {
    const matches = matcher(query);
    const found = [];
    const queue = [await place(cwd)];
    let seen = 0;
    while (queue.length > 0 && found.length < limit && seen < MAX_SEARCHED) {
      const dir = queue.shift();
      const dirents = await fs.readdir(dir, { withFileTypes: true }).catch(() => []);
      dirents.sort(byName);
      for (const d of dirents) {
        seen += 1;
        const full = join(dir, d.name);
        if (d.isDirectory()) queue.push(full); // symbolic links are not followed
        if (matches(d.name) && found.length < limit) found.push(await entry(full, d));
      }
    }
    return found;
  }

  async function read(_agentId, path, lineRange) {
    const file = await place(path);
    const stat = await fs.stat(file).catch((e) => { throw refused(e, path); });
    if (stat.isDirectory()) throw fail(ERRORS.INVALID_PATH, `Not a file: ${path}`);
    if (stat.size > MAX_READ_BYTES) throw fail(ERRORS.DENIED, `${path} is larger than ${MAX_READ_BYTES} bytes`);
    const bytes = await fs.readFile(file).catch((e) => { throw refused(e, path); });
    if (bytes.includes(0)) throw fail(ERRORS.INVALID_PATH, `Not a text file: ${path}`);
    let text = bytes.toString('utf8');
    if (lineRange) {
      // 1-indexed, both ends included.
      text = text.split('\n').slice(lineRange.start - 1, lineRange.end).join('\n');
    }
    return { text, mime: mimeOf(path), size: stat.size };
  }

  return { root: top, search, list, read };
}

/**
 * Wrap an SDK stream ({readable, writable} of JSON-RPC objects, as
 * websocketStream gives) so that requests for one of `handlers` (method →
 * async (params, ctx) => result) are answered here; the rest passes
 * through. Build the AgentConnection on the stream this returns.
 */
export function answerRequests(stream, handlers) {
  // One writer for both the connection's messages and the answers, so writes never collide.
  const out = stream.writable.getWriter();
  const answer = async ({ id, method, params }) => {
    let response;
    try {
      const result = await handlers[method](params ?? {}, {});
      response = { jsonrpc: '2.0', id, result: result ?? null };
    } catch (e) {
      const code = Number.isInteger(e?.code) ? e.code : -32603;
      response = { jsonrpc: '2.0', id, error: { code, message: e?.message ?? String(e) } };
    }
    await out.write(response).catch(() => {});
  };
  const readable = stream.readable.pipeThrough(new TransformStream({
    transform(message, controller) {
      const isRequest = message && typeof message.method === 'string' && message.id !== undefined && message.id !== null;
      if (isRequest && Object.hasOwn(handlers, message.method)) {
        void answer(message);
      } else {
        controller.enqueue(message);
      }
    },
  }));
  const writable = new WritableStream({
    write: (message) => out.write(message),
    close: () => out.close(),
    abort: (reason) => out.abort(reason),
  });
  return { readable, writable };
}
