// Builds audit.js into the Wasm component audit.wasm (next to this file) for
// the `intercepting-extension` world of ../../../wit, with componentize-js's
// JS API.
//
//   npm ci --ignore-scripts && node build.mjs
//
// componentize-js embeds the SpiderMonkey engine (StarlingMonkey), runs the
// top level of audit.js once at build time (Wizer snapshot) and links the WIT
// bindings, so the component starts with the module already evaluated.
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const out = join(HERE, 'audit.wasm');

// componentize-js maps the source's folder into the build sandbox relative to
// the working directory; building from here makes
// `node examples/audit/js/build.mjs` work from anywhere.
process.chdir(HERE);

const started = Date.now();
const { component } = await componentize({
  sourcePath: join(HERE, 'audit.js'),
  // A folder: every .wit file in it is one package (map-gateway:plugin, whose
  // version package.wit declares and the imports in audit.js name).
  witPath: join(HERE, '..', '..', '..', 'wit'),
  // Exports `rpc` and `send-observer`.
  worldName: 'intercepting-extension',
  // The audit log makes no HTTP requests, so `fetch` (the `http` feature)
  // stays out, and the gateway does not bind `fetch-event`
  // (wasi:http/incoming-handler). stdio, random and clocks stay.
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(out, component);

const mb = (component.length / (1024 * 1024)).toFixed(1);
console.log(`wrote ${out} (${mb} MiB) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
