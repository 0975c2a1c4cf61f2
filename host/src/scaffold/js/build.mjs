// Builds plugin.js into @NAME@.wasm with componentize-js.
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
process.chdir(HERE);
const { component } = await componentize({
  sourcePath: join(HERE, 'plugin.js'),
  witPath: join(HERE, 'wit'),
  worldName: 'extension',
  // No outbound HTTP here; add it back (and list the hosts in outbound_hosts) to use fetch.
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(join(HERE, '@NAME@.wasm'), component);
console.log(`built ${join(HERE, '@NAME@.wasm')} (${(component.length / 1048576).toFixed(1)} MiB)`);
