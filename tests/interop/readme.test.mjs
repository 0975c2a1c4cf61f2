// README.md's code blocks and the book's (every page docs/SUMMARY.md lists),
// run as a reader runs them, so they cannot drift.
//
// Every fenced block with a language has a marker on the line before it, an
// HTML comment that the rendered page does not show:
//   <!-- readme-test: run [NAME] -->     run here (NAME: with the setup below)
//   <!-- readme-test: skip: REASON -->   not run here, and why
// A block without one fails this test: a new snippet must be classified. A
// block may take its text from a file with mdBook's `{{#include PATH}}`.
//
// The blocks run page by page (README.md first, then the book in its
// order), each page's in order, against one gateway started as
// scripts/run.sh starts it: `map-gateway serve` without --config, in a
// temporary folder that stands for the checkout (plugins/dist copied in, data
// under ./data), on a free port. `127.0.0.1:4700` and `localhost:4700` in a
// block are rewritten to that port. A shell block runs in bash (set -e, curl
// failing on an HTTP error) with target/debug first on PATH, in a folder that
// carries over from block to block as in a terminal, and so do the shell
// variables a block sets on a line of their own (`T="…"`); a js block runs
// with node; a toml block is checked with `map-gateway check --config`. Where
// a block shows output (a `# {…}` comment under a command, `// → …` after a
// console.log), what ran must have what it shows (… stands for anything).
//
// Every relative link of those pages must lead to a file, and an anchor to a
// heading of its page.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { createServer } from 'node:net';
import { ACPAgentAdapter, ACP_PROTOCOL_VERSION } from '@multi-agent-protocol/sdk';
import { GATEWAY_BIN, connectAgent, connectClient, rawParticipant, rejectsWithCode } from './harness.mjs';
import {
  bookPages, brokenLink, expandIncludes, fencedBlocks, includes, looseJson, missingInOrder, outputsByCommand, relativeLinks,
  separatedScript, shapeMismatch, shellCommands,
} from './readme-blocks.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const PAGES = bookPages(ROOT);
const TEXTS = new Map(PAGES.map((page) => [page, readFileSync(join(ROOT, page), 'utf8')]));
// Each block with its page (`where`: page:line) and its text with includes expanded.
const BLOCKS = PAGES.flatMap((page) => fencedBlocks(TEXTS.get(page)).map((b, n) => {
  let text = b.text;
  try { text = expandIncludes(b.text, join(ROOT, dirname(page))); } catch { /* the links test names it */ }
  return { ...b, text, page, where: `${page}:${b.line}`, key: `${page.replace(/\W+/g, '-')}-${n}` };
}));
// A `plugin new` project builds into the target folder that scripts/test.sh
// builds the generated sdk-example into (same SDK, same lock file), so its
// dependencies are compiled once; `notes/target` points there, and the
// README's paths hold.
const SHARED_TARGET = join(ROOT, 'target', 'scaffold');
const PRELUDE = 'set -eo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n';

let gw; // the gateway: { port, proc, work, wsUrl(), connections, stop() }
let cwd; // the folder the shell blocks are in, carried over like a terminal's
const carried = new Set(); // the shell variables blocks have set, carried over too

before(async () => {
  const work = mkdtempSync(join(tmpdir(), 'map-readme-'));
  mkdirSync(join(work, 'plugins'));
  cpSync(join(ROOT, 'plugins', 'dist'), join(work, 'plugins', 'dist'), { recursive: true });
  symlinkSync(join(HERE, 'node_modules'), join(work, 'node_modules')); // the SDK and ws for js blocks
  gw = await serveLikeRunSh(work);
  cwd = work;
}, { timeout: 120_000 });

after(async () => {
  stopRegistry();
  await gw?.stop();
});

test('every block with a language is marked run or skip (with a reason)', () => {
  const unmarked = BLOCKS.filter((b) => b.lang && !b.marker).map((b) => `${b.where} (${b.lang})`);
  assert.deepEqual(unmarked, [], 'add <!-- readme-test: run --> or <!-- readme-test: skip: REASON --> before each');
  const noReason = BLOCKS.filter((b) => b.marker?.kind === 'skip' && !b.marker.reason).map((b) => b.where);
  assert.deepEqual(noReason, [], 'a skipped block says why');
  const names = BLOCKS.filter((b) => b.marker?.name).map((b) => b.marker.name);
  assert.deepEqual(names.filter((n) => !NAMED[n]), [], 'each run NAME has its setup in this file');
  assert.deepEqual(Object.keys(NAMED).filter((n) => !names.includes(n)), [], 'each setup in this file has its block');
});

test('every page of docs/ is in docs/SUMMARY.md, so its blocks run', () => {
  const all = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? all(join(dir, e.name)) : [join(dir, e.name)]));
  const pages = all(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => relative(ROOT, f));
  assert.deepEqual(pages.filter((p) => p !== join('docs', 'SUMMARY.md') && !PAGES.includes(p)), []);
});

test('every relative link and include of README.md and the book leads somewhere', () => {
  const broken = [];
  for (const page of [...PAGES, join('docs', 'SUMMARY.md'), 'CONTRIBUTING.md', 'CHANGELOG.md'].filter((p) => existsSync(join(ROOT, p)))) {
    const text = TEXTS.get(page) ?? readFileSync(join(ROOT, page), 'utf8');
    for (const { line, target } of relativeLinks(text)) {
      const why = brokenLink(ROOT, page, target);
      if (why) broken.push(`${page}:${line} (${target}): ${why}`);
    }
    for (const { line, spec } of includes(text)) {
      try { expandIncludes(`{{#include ${spec}}}`, join(ROOT, dirname(page))); } catch (e) { broken.push(`${page}:${line}: ${e.message}`); }
    }
  }
  assert.deepEqual(broken, []);
});

for (const block of BLOCKS.filter((b) => b.marker)) {
  const title = `${block.where} ${block.lang}${block.marker.name ? ` (${block.marker.name})` : ''}`;
  if (block.marker.kind === 'skip') {
    test(title, { skip: block.marker.reason }, () => {});
    continue;
  }
  test(title, { timeout: block.marker.name === 'plugin-new' ? 600_000 : 180_000 }, async () => {
    const named = NAMED[block.marker.name] ?? {};
    if (named.run) return named.run(block);
    const state = await named.before?.();
    const text = named.rewrite ? named.rewrite(block.text, state) : block.text;
    if (block.lang === 'js') await runJs(block, text);
    else if (block.lang === 'toml') await checkToml(block, text);
    else await runShell(text);
    await named.after?.(state);
  });
}

// ---------------------------------------------------------------------------
// The blocks that need more than the gateway: by the NAME of their marker
// ---------------------------------------------------------------------------

const NAMED = {
  // An editor's agent command: a coding agent with the role `coder` on the
  // MAP SDK's ACP adapter, and an editor's first two requests on stdin.
  acp: { run: runAcp },
  'plugin-new': {
    after: () => symlinkSync(SHARED_TARGET, join(gw.work, 'notes', 'target')),
  },
  'plugin-loop': {},
  // The local registry walk-through, in the checkout's folder, with the
  // registry on a free port instead of 5000; it is stopped at the end.
  'local-registry': { run: runLocalRegistry },
  // The Rust plugin page's extension as notes/src/lib.rs, in service through the loop.
  'notes-extension': { run: runNotesExtension },
  // The MAMP bridge delivers to an agent whose id is `alice`.
  mamp: {
    before: () => rawParticipant(gw, { participantType: 'agent', name: 'alice', register: { agentId: 'alice' } }),
    after: async (alice) => {
      const m = await alice.nextFrame((f) => f.method === 'map/message', 5000, 'the MAMP message at alice');
      assert.deepEqual(m.params.message.payload.content, [{ type: 'text', text: 'hello' }]);
      alice.close();
    },
  },
  // Something to list: a session with two agents in a scope and a
  // subscription, made for the first block that lists and kept.
  admin: { before: () => adminSession() },
  // That session ended by the block: `sess-…` in it becomes its id.
  'admin-disconnect': {
    before: () => adminSession(),
    rewrite: (text, s) => text.replaceAll('sess-…', s.connectResult.sessionId),
    after: async (s) => assert.equal(await s.closed, 1008, 'the session the block ended closes with 1008'),
  },
};

let admin; // the admin blocks' session, made once
function adminSession() {
  admin ??= (async () => {
    const s = await rawParticipant(gw, { participantType: 'agent', name: 'boss', register: { agentId: 'boss' } });
    await s.call('map/agents/register', { agentId: 'worker' });
    const { scope } = await s.call('map/scopes/create', { name: 'team' });
    for (const agentId of ['boss', 'worker']) await s.call('map/scopes/join', { scopeId: scope.id, agentId });
    await s.call('map/subscribe', { filter: { eventTypes: ['agent_registered'] } });
    s.closed = new Promise((resolve) => s.ws.once('close', (code) => resolve(code)));
    return s;
  })();
  return admin;
}

async function runAcp(block) {
  const coder = await connectAgent(gw, { name: 'coder', role: 'coder' });
  new ACPAgentAdapter(coder.conn, {
    initialize: async () => ({ protocolVersion: ACP_PROTOCOL_VERSION, agentCapabilities: { loadSession: false } }),
    newSession: async () => ({ sessionId: 'sess-readme' }),
    prompt: async () => ({ stopReason: 'end_turn' }),
    cancel: async () => {},
  });
  const proc = spawn('bash', ['-c', PRELUDE + atPort(block.text)], { cwd, env: blockEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  const answers = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  const ask = async (id, method, params) => {
    proc.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, params })}\n`);
    const line = await Promise.race([answers.next(), exited.then((code) => assert.fail(`the bridge exited (${code}): ${stderr}`))]);
    const answer = JSON.parse(line.value);
    assert.equal(answer.id, id);
    assert.ok(answer.result, `${method}: ${line.value}\n${stderr}`);
    return answer.result;
  };
  const init = await ask(1, 'initialize', { protocolVersion: ACP_PROTOCOL_VERSION, clientCapabilities: {} });
  assert.equal(init.protocolVersion, ACP_PROTOCOL_VERSION);
  assert.deepEqual(await ask(2, 'session/new', { cwd: '/tmp', mcpServers: [] }), { sessionId: 'sess-readme' });
  proc.stdin.end();
  assert.equal(await exited, 0, `the bridge ends with its editor's input: ${stderr}`);
  await coder.conn.disconnect();
}

let registryPort; // the local registry's port, once a block started it

async function runLocalRegistry(block) {
  registryPort ??= await freePort();
  await runShell(block.text.replaceAll('127.0.0.1:5000', `127.0.0.1:${registryPort}`), { dir: gw.work });
}

/** The registry the walk-through started (its pid in registry.pid), if it did. */
function stopRegistry() {
  if (!gw) return;
  let pid;
  try { pid = Number(readFileSync(join(gw.work, 'registry.pid'), 'utf8')); } catch { return; }
  try { process.kill(pid, 'SIGTERM'); } catch { /* already gone */ }
}

/** A port nothing listens on now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function runNotesExtension(block) {
  writeFileSync(join(gw.work, 'notes', 'src', 'lib.rs'), block.text);
  const loop = BLOCKS.find((b) => b.marker?.name === 'plugin-loop');
  await runShell(loop.text, { dir: join(gw.work, 'notes'), checkOutput: false }); // its output shows the generated plugin

  const c = await connectClient(gw);
  assert.ok(c.connectResult.capabilities.extensions.some((e) => e.uri === 'x-notes:1'), 'x-notes:1 is listed');
  const sub = await c.conn.subscribe({ eventTypes: ['notes.put'] });
  const note = await c.conn.callExtension('notes/put', { text: 'from the README' });
  assert.match(note.id, /^note-/);
  assert.equal(note.text, 'from the README');
  const [ev] = await c.tap.waitForEvents(sub.id, (e) => e.type === 'notes.put', 1);
  assert.equal(ev.event.data.noteId, note.id);
  assert.deepEqual(await c.conn.callExtension('notes/get', { noteId: note.id }), note);
  const missing = await rejectsWithCode(c.conn.callExtension('notes/get', { noteId: 'note-none' }), 90001, 'a missing note');
  assert.equal(missing.message, 'No such note');
  await rejectsWithCode(c.conn.callExtension('notes/put', { txt: 'typo' }), -32602, 'a missing field');
  await c.conn.disconnect();
}

// ---------------------------------------------------------------------------
// Running blocks
// ---------------------------------------------------------------------------

/** The gateway's port instead of 4700: each run takes a free port. */
const atPort = (text) => text.replace(/\b(localhost|127\.0\.0\.1):4700\b/g, `$1:${gw.port}`);

/** The blocks' environment: this build's map-gateway first on PATH, no credentials from outside. */
function blockEnv() {
  const env = { ...process.env, PATH: `${dirname(GATEWAY_BIN)}:${process.env.PATH}`, CARGO_TARGET_DIR: SHARED_TARGET };
  for (const k of ['MAP_GATEWAY_API_KEY', 'MAP_GATEWAY_TOKEN', 'ADMIN_TOKEN', 'RUST_BACKTRACE']) delete env[k];
  return env;
}

/** Run a shell block in `dir` (by default the carried-over folder) and check the output it shows. */
async function runShell(text, { dir = cwd, checkOutput = true } = {}) {
  const cmds = shellCommands(atPort(text));
  const pwdFile = join(gw.work, '.readme-pwd');
  const varsFile = join(gw.work, '.readme-vars');
  const names = [...carried, ...cmds.flatMap((c) => [...c.text.matchAll(/^\s*(?:export\s+)?([A-Za-z_]\w*)=/gm)].map((m) => m[1]))];
  const restore = carried.size ? `. ${JSON.stringify(varsFile)}\n` : '';
  const keep = names.length ? `declare -p ${[...new Set(names)].join(' ')} > ${JSON.stringify(varsFile)} 2>/dev/null || true\n` : '';
  const script = `${PRELUDE}${restore}${separatedScript(cmds)}\npwd > ${JSON.stringify(pwdFile)}\n${keep}`;
  const r = await run('bash', ['-c', script], dir);
  assert.equal(r.code, 0, `the block failed (exit ${r.code}):\n${text}\nstdout: ${r.stdout.slice(-3000)}\nstderr: ${r.stderr.slice(-3000)}\nthe gateway's log: ${gw.stderr().slice(-2000)}`);
  for (const n of names) carried.add(n);
  if (dir === cwd) cwd = readFileSync(pwdFile, 'utf8').trim();
  if (!checkOutput) return;
  const outputs = outputsByCommand(r.stdout);
  for (const [i, c] of cmds.entries()) {
    // `# {a, b}` after a listing names the fields of its elements.
    const fields = /^\{\s*(\w+(?:\s*,\s*\w+)*)\s*\}$/.exec(c.inline ?? '')?.[1].split(/\s*,\s*/);
    if (!c.expect && !fields) continue;
    const out = (outputs.get(i) ?? '').trim();
    let actual;
    try { actual = JSON.parse(out); } catch { assert.fail(`${c.text}\nprinted no JSON: ${out.slice(0, 2000)}`); }
    if (c.expect) {
      const miss = shapeMismatch(looseJson(c.expect), actual);
      assert.equal(miss, null, `${c.text}\nshows ${c.expect}\nbut printed ${out.slice(0, 2000)}`);
    }
    if (fields) {
      const lists = Object.values(actual).filter(Array.isArray);
      assert.equal(lists.length, 1, `${c.text}\nprinted no listing: ${out.slice(0, 2000)}`);
      const miss = shapeMismatch([Object.fromEntries(fields.map((f) => [f, null]))], lists[0]);
      assert.equal(miss, null, `${c.text}\nshows elements {${fields.join(', ')}}\nbut printed ${out.slice(0, 2000)}`);
    }
  }
}

/** A js block as a module in the folder (where node_modules has the SDK and ws), run with node. */
async function runJs(block, text) {
  const file = join(gw.work, `readme-${block.key}.mjs`);
  writeFileSync(file, atPort(text));
  const r = await run('node', [file], gw.work);
  assert.equal(r.code, 0, `node failed (exit ${r.code}):\n${r.stdout}\n${r.stderr}`);
  const shown = [...text.matchAll(/^\s*\/\/ → (.*)$/gm)].map((m) => m[1]);
  const printed = r.stdout.replace(/\s+/g, ' ');
  assert.equal(missingInOrder(shown, printed), null, `the output shown is not what it printed:\n${r.stdout}`);
}

/**
 * A toml block as a configuration file in a folder of its own, checked by
 * `map-gateway check`. Beside it, plugins/dist holds the one plugin the
 * blocks name (mail), so that a block without a `[plugins]` table (which
 * loads every component there) compiles one plugin, not all of them.
 */
async function checkToml(block, text) {
  const dir = join(gw.work, `check-${block.key}`);
  const plugins = join(gw.work, 'check-plugins');
  if (!existsSync(plugins)) {
    mkdirSync(join(plugins, 'dist'), { recursive: true });
    for (const f of ['mail.wasm', 'mail.toml']) cpSync(join(gw.work, 'plugins', 'dist', f), join(plugins, 'dist', f));
  }
  mkdirSync(dir);
  symlinkSync(plugins, join(dir, 'plugins'));
  writeFileSync(join(dir, 'gateway.toml'), text);
  const r = await run(GATEWAY_BIN, ['check', '--config', join(dir, 'gateway.toml')], dir);
  assert.equal(r.code, 0, `map-gateway check refused it: ${r.stderr.slice(-3000)}`);
  assert.match(r.stdout, /configuration OK/);
}

/** Run a program to its end: { code, stdout, stderr }. */
function run(program, args, dir) {
  return new Promise((resolve, reject) => {
    const proc = spawn(program, args, { cwd: dir, env: blockEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    proc.stderr.setEncoding('utf8').on('data', (d) => { stderr = (stderr + d).slice(-50_000); });
    proc.on('error', reject);
    proc.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** `map-gateway serve` as scripts/run.sh runs it (no --config), in `work`, on a free port. */
async function serveLikeRunSh(work) {
  const proc = spawn(GATEWAY_BIN, ['serve', '--listen', '127.0.0.1:0'], { cwd: work, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.setEncoding('utf8').on('data', (d) => { stderr = (stderr + d).slice(-20_000); });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d) => {
      out += d;
      const m = /map-gateway listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`the gateway exited (${code}) before it listened: ${stderr}`)));
  });
  const connections = new Set();
  return {
    port,
    work,
    connections,
    stderr: () => stderr,
    wsUrl: (path = '/map') => `ws://127.0.0.1:${port}${path}`,
    async stop() {
      for (const ws of connections) ws.terminate();
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
      rmSync(work, { recursive: true, force: true });
    },
  };
}
