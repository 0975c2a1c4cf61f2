// Builds notes.js into the Wasm component notes.wasm (next to this file) for
// the `extension` world of ../../wit, with componentize-js's JS API.
//
//   npm ci && node build.mjs
//
// componentize-js embeds the SpiderMonkey engine (StarlingMonkey), runs the
// top level of notes.js once at build time (Wizer snapshot) and links the WIT
// bindings, so the component starts with the module already evaluated.
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const out = join(HERE, 'notes.wasm');

// componentize-js maps the source's folder into the build sandbox relative to
// the working directory; building from here makes `node examples/plugin-js/build.mjs`
// work from anywhere.
process.chdir(HERE);

const started = Date.now();
const { component } = await componentize({
  sourcePath: join(HERE, 'notes.js'),
  // A folder: every .wit file in it is one package (map-gateway:plugin, whose
  // version package.wit declares and the imports in notes.js name).
  witPath: join(HERE, '..', '..', 'wit'),
  worldName: 'extension',
  // The gateway links WASI 0.2 (wasmtime-wasi), wasi:http/outgoing-handler
  // (reaching only the hosts a deployment lists in `outbound_hosts`) and its
  // own interfaces. These notes make no HTTP requests, so `fetch` (the `http`
  // feature) and `fetch-event` stay out; stdio (console.* and error reports,
  // discarded by the host), random and clocks (Date.now) stay.
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(out, component);

const mb = (component.length / (1024 * 1024)).toFixed(1);
console.log(`wrote ${out} (${mb} MiB) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
