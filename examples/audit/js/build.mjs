// Builds audit.js into the Wasm component audit.wasm (next to this file)
// for the `intercepting-extension` world of ../../../wit, with the plugin
// SDK's build helper (esbuild bundles audit.js with the SDK, componentize-js
// makes the component).
//
//   npm ci --ignore-scripts && node build.mjs
import { build } from '@map-gateway/plugin-sdk/build';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));

// The audit log makes no HTTP requests: `http` stays off (the default).
await build({
  source: join(HERE, 'audit.js'),
  wit: join(HERE, '..', '..', '..', 'wit'),
  world: 'intercepting-extension',
  out: join(HERE, 'audit.wasm'),
});
