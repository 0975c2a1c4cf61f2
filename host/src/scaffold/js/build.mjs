// Builds plugin.js into @NAME@.wasm: the SDK's build helper bundles it with
// the SDK (esbuild) and makes the component (componentize-js) against wit/.
import { build } from '@map-gateway/plugin-sdk/build';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
await build({
  source: join(HERE, 'plugin.js'),
  wit: join(HERE, 'wit'),
  // `extension` exports rpc; see wit/worlds.wit for observers, timers (stateful-extension), resources.
  world: 'extension',
  out: join(HERE, '@NAME@.wasm'),
  // http: true to use http.fetch (and list the hosts in the plugin's outbound_hosts).
});
