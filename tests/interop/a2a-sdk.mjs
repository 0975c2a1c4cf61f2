// What the A2A bridge's tests share: where the built plugin and the official
// A2A SDK for Python (target/a2a-pyenv) are, and a run of tests/a2a/client.py.
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const DIST = join(ROOT, 'plugins', 'dist');
export const PYTHON = process.env.A2A_PYTHON ?? join(ROOT, 'target', 'a2a-pyenv', 'bin', 'python');
export const CLIENT = join(ROOT, 'tests', 'a2a', 'client.py');
export const SERVER = join(ROOT, 'tests', 'a2a', 'server.py');
export const ACME = { method: 'api-key', credential: 'acme-key' };

/** One client.py step against `<base>/agents/<agent>` with an API key: its JSON lines. */
export function runClient(base, key, agent, args) {
  return new Promise((resolve, reject) => {
    execFile(PYTHON, [CLIENT, base, key, agent, ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`client.py ${args.join(' ')}: ${err.message}\n${stderr}`));
      resolve(stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)));
    });
  });
}

/** The first part's text of a message. */
export const text = (m) => m?.parts?.[0]?.text;

/** An Ed25519 key pair written as `map-gateway plugin keygen` writes one: {secret: 'ed25519-secret:…', public: 'ed25519:…'}. */
export function ed25519Keys() {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const last32 = (der) => der.subarray(der.length - 32).toString('base64');
  return {
    secret: `ed25519-secret:${last32(privateKey.export({ format: 'der', type: 'pkcs8' }))}`,
    public: `ed25519:${last32(publicKey.export({ format: 'der', type: 'spki' }))}`,
  };
}
