// The release archive (scripts/release.sh, with the test build of the gateway): unpacked into an
// empty folder, its files match SHA256SUMS, the gateway links nothing but glibc, `--version` names
// the version, commit and plugin contract, the bill of materials lists the crates, and
// `bin/map-gateway serve --config gateway.toml` serves the README's quick start with the
// standard plugins, whose signatures the configuration requires.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fencedBlocks, missingInOrder } from './readme-blocks.mjs';
import { connectClient } from './harness.mjs';

const run = promisify(execFile);
const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');

let work;
let folder;
let gateway;
let port;

before(async () => {
  work = mkdtempSync(join(tmpdir(), 'map-release-'));
  const { stdout } = await run(join(ROOT, 'scripts', 'release.sh'), ['--debug', '--out', join(work, 'out')], { cwd: ROOT, maxBuffer: 64 << 20 });
  const archive = stdout.trim().split('\n').at(-1);
  assert.match(basename(archive), /^map-gateway-\d+\.\d+\.\d+-x86_64-linux-gnu\.tar\.gz$/);
  const empty = join(work, 'unpacked');
  mkdirSync(empty);
  await run('tar', ['xzf', archive, '-C', empty]);
  folder = join(empty, readdirSync(empty)[0]);
}, { timeout: 900_000 });

after(async () => {
  if (gateway && gateway.exitCode === null) {
    const exited = new Promise((r) => gateway.once('exit', r));
    gateway.kill('SIGTERM');
    await exited;
  }
  if (work) rmSync(work, { recursive: true, force: true });
});

test('the archive holds the gateway, signed plugins, configurations, README, licence, SHA256SUMS and an SBOM', async () => {
  const files = readdirSync(folder).sort();
  for (const f of ['bin', 'plugins', 'gateway.toml', 'container.toml', 'Containerfile', 'README.md', 'LICENSE', 'SHA256SUMS', 'sbom.cdx.json', 'plugin-signers.pub']) {
    assert.ok(files.includes(f), `${f} in ${files}`);
  }
  const plugins = readdirSync(join(folder, 'plugins'));
  for (const p of ['mail', 'trajectory', 'tasks', 'uap', 'mamp', 'a2a']) {
    assert.ok(plugins.includes(`${p}.wasm`) && plugins.includes(`${p}.wasm.sig`), `${p}.wasm and its signature: ${plugins}`);
  }
  const { stdout } = await run('sha256sum', ['-c', 'SHA256SUMS'], { cwd: folder });
  assert.ok(stdout.split('\n').filter(Boolean).every((l) => l.endsWith(': OK')), stdout);
  assert.match(stdout, /bin\/map-gateway: OK/);
  const sbom = JSON.parse(readFileSync(join(folder, 'sbom.cdx.json'), 'utf8'));
  assert.equal(sbom.bomFormat, 'CycloneDX');
  const purls = sbom.components.map((c) => c.purl).filter(Boolean);
  for (const crate of ['tokio', 'wasmtime', 'wit-bindgen']) assert.ok(purls.some((p) => p.startsWith(`pkg:cargo/${crate}@`)), `${crate} in the SBOM`);
});

test('the gateway needs only glibc and names its version, commit and plugin contract', async () => {
  const bin = join(folder, 'bin', 'map-gateway');
  const { stdout: ldd } = await run('ldd', [bin]);
  const libs = ldd.split('\n').map((l) => l.trim().split(/\s/)[0]).filter(Boolean);
  const glibc = /^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libgcc_s\.so\.1|\/lib64\/ld-linux-x86-64\.so\.2)$/;
  assert.deepEqual(libs.filter((l) => !glibc.test(l)), [], `linked: ${ldd}`);
  const { stdout } = await run(bin, ['--version'], { env: {} });
  const wit = readFileSync(join(ROOT, 'wit', 'package.wit'), 'utf8');
  const contract = /package map-gateway:plugin@([\d.]+);/.exec(wit)[1];
  const { stdout: head } = await run('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: ROOT });
  assert.match(stdout, new RegExp(`^map-gateway \\d+\\.\\d+\\.\\d+ \\(commit ${head.trim()}(-modified)?, plugin contract map-gateway:plugin@${contract.replaceAll('.', '\\.')}\\)`));
});

test("the README's quick start runs against `bin/map-gateway serve --config gateway.toml`", { timeout: 180_000 }, async () => {
  // Nothing from the checkout: the unpacked folder, a bare environment (the plugin cache of
  // the test gateways, given as a variable, spares compiling the plugins again).
  const env = { PATH: '/usr/bin:/bin', MAP_GATEWAY__SERVER__CACHE_DIR: join(ROOT, 'target', 'test-plugin-cache') };
  gateway = spawn('bin/map-gateway', ['serve', '--config', 'gateway.toml', '--listen', '127.0.0.1:0'], { cwd: folder, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let logs = '';
  gateway.stderr.on('data', (d) => { logs = (logs + d).slice(-20_000); });
  port = await new Promise((resolve, reject) => {
    let out = '';
    gateway.stdout.on('data', (d) => {
      out += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    gateway.once('exit', (code) => reject(new Error(`exited (${code}) before listening:\n${out}\n${logs}`)));
  });
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('## Quick start');
  const block = fencedBlocks(readme.slice(start)).find((b) => b.lang === 'js');
  const file = join(HERE, `release-quick-start-${process.pid}.mjs`);
  writeFileSync(file, block.text.replaceAll('127.0.0.1:4700', `127.0.0.1:${port}`));
  try {
    const { stdout } = await run('node', [file], { cwd: HERE });
    const shown = [...block.text.matchAll(/^\s*\/\/ → (.*)$/gm)].map((m) => m[1]);
    assert.equal(missingInOrder(shown, stdout.replace(/\s+/g, ' ')), null, `printed:\n${stdout}`);
  } finally {
    rmSync(file, { force: true });
  }
  // The standard plugins loaded, their signatures checked against plugin_signers.
  const gw = { url: `ws://127.0.0.1:${port}/map`, wsUrl: (p = '/map') => `ws://127.0.0.1:${port}${p}`, connections: new Set() };
  const client = await connectClient(gw);
  const names = client.connectResult.capabilities.extensions.map((e) => e.name);
  for (const p of ['mail', 'trajectory']) assert.ok(names.includes(p), `${p} loaded: ${JSON.stringify(names)}\n${logs}`);
  client.ws.close();
  assert.doesNotMatch(logs, /unsigned|signature .*refused/i);
});
