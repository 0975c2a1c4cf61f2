// The build helper: bundles a plugin module with this SDK into one ES module
// (esbuild), then makes the Wasm component (componentize-js).
//
//   import { build } from '@map-gateway/plugin-sdk/build';
//   await build({ source: 'plugin.js', wit: 'wit', world: 'extension', out: 'plugin.wasm' });
//
// The SDK imports the gateway's interfaces without a version
// ('map-gateway:plugin/store'); the bundle gets the version wit/package.wit
// declares, so the component always names the contract it was bound against.
// componentize-js and esbuild are the plugin project's own devDependencies,
// resolved from the project's folder.
import { readFile, readdir, writeFile, mkdtemp, rm } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SDK = dirname(fileURLToPath(import.meta.url));
const PACKAGE = 'map-gateway:plugin';

/** Interface export names as componentize-js expects them (kebab-case to camelCase). */
const camel = (s) => s.replace(/-([a-z])/g, (_, c) => c.toUpperCase());

/** The version `package.wit` gives `map-gateway:plugin`. */
export async function contractVersion(wit) {
  const text = await readFile(join(wit, 'package.wit'), 'utf8');
  const m = text.match(/^\s*package\s+map-gateway:plugin@([0-9A-Za-z.+-]+)\s*;/m);
  if (!m) throw new Error(`${join(wit, 'package.wit')} declares no \`package ${PACKAGE}@…;\``);
  return m[1];
}

/** Every world of the folder's .wit files: name → {exports, includes}. */
export async function worlds(wit) {
  const out = {};
  for (const file of (await readdir(wit)).filter((f) => f.endsWith('.wit')).sort()) {
    const text = (await readFile(join(wit, file), 'utf8')).replace(/\/\/.*$/gm, '');
    for (const m of text.matchAll(/\bworld\s+([a-z0-9-]+)\s*\{([^}]*)\}/g)) {
      out[m[1]] = {
        exports: [...m[2].matchAll(/\bexport\s+([a-z0-9-]+)\s*;/g)].map((x) => x[1]),
        includes: [...m[2].matchAll(/\binclude\s+([a-z0-9-]+)\s*;/g)].map((x) => x[1]),
      };
    }
  }
  return out;
}

/** The interfaces `world` exports, its includes' too. */
export async function worldExports(wit, world) {
  const all = await worlds(wit);
  const seen = new Set();
  const walk = (name) => {
    const w = all[name];
    if (!w) throw new Error(`no world ${name} in ${wit} (worlds: ${Object.keys(all).join(', ')})`);
    if (seen.has(name)) return [];
    seen.add(name);
    return [...w.exports, ...w.includes.flatMap(walk)];
  };
  return walk(world);
}

/** The ES module that exports, for each interface of the world, the module's own export or the SDK's. */
export function entrySource(sourcePath, exportsOfWorld) {
  const names = exportsOfWorld.map(camel);
  const lines = [
    `import * as module from ${JSON.stringify(sourcePath)};`,
    'const pick = (name) => module[name] ?? module.default?.[name];',
  ];
  for (const name of names) lines.push(`export const ${name} = pick(${JSON.stringify(name)});`);
  // The module's top level runs at build time (a Wizer snapshot): a wrong module fails the build.
  lines.push(`for (const [name, value] of Object.entries({ ${names.join(', ')} })) {`);
  lines.push("  if (value === undefined) throw new Error(`the plugin exports no ${name}: \\`export default defineExtension({...})\\``);");
  lines.push('}');
  return `${lines.join('\n')}\n`;
}

/** esbuild plugin: the SDK from this folder, and versioned specifiers for the gateway's interfaces. */
function contractPlugin(version) {
  return {
    name: 'map-gateway-contract',
    setup(b) {
      b.onResolve({ filter: /^@map-gateway\/plugin-sdk$/ }, () => ({ path: join(SDK, 'src', 'index.js') }));
      b.onResolve({ filter: /^map-gateway:plugin\// }, (args) => {
        const [iface, given] = args.path.slice(PACKAGE.length + 1).split('@');
        if (given !== undefined && given !== version) {
          return { errors: [{ text: `${args.path} names contract ${given}, but the WIT folder declares ${version}` }] };
        }
        return { path: `${PACKAGE}/${iface}@${version}`, external: true };
      });
      b.onResolve({ filter: /^wasi:/ }, (args) => ({ path: args.path, external: true }));
    },
  };
}

/** Import a package installed in the project (componentize-js is ESM only, so no require.resolve). */
async function importFrom(dir, name) {
  for (let d = resolve(dir); ; d = dirname(d)) {
    const pkgDir = join(d, 'node_modules', ...name.split('/'));
    if (existsSync(join(pkgDir, 'package.json'))) {
      const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
      const exp = typeof pkg.exports === 'string' ? pkg.exports : (pkg.exports?.['.'] ?? pkg.exports);
      const main = (typeof exp === 'string' ? exp : (exp?.import ?? exp?.default ?? exp?.node)) ?? pkg.module ?? pkg.main ?? 'index.js';
      return import(pathToFileURL(join(pkgDir, typeof main === 'string' ? main : main.default)).href);
    }
    if (dirname(d) === d) throw new Error(`${name} is not installed in ${dir}: npm install first`);
  }
}

/**
 * Build `source` into the component `out`.
 * @param {object} o
 * @param {string} o.source the plugin module (`export default defineExtension({...})`)
 * @param {string} o.wit the gateway's WIT folder
 * @param {string} o.world the world to target (`extension`, `intercepting-extension`, …)
 * @param {string} o.out where to write the .wasm
 * @param {boolean} [o.http] keep outbound HTTP (`fetch`); off by default
 * @param {string} [o.bundle] also write the bundled module here (to read what was built)
 */
export async function build({ source, wit, world, out, http = false, bundle }) {
  const started = Date.now();
  const project = dirname(resolve(source));
  const witDir = resolve(wit);
  const version = await contractVersion(witDir);
  const exportsOfWorld = await worldExports(witDir, world);
  const esbuild = await importFrom(project, 'esbuild');
  const { componentize } = await importFrom(project, '@bytecodealliance/componentize-js');

  const bundled = await esbuild.build({
    stdin: { contents: entrySource(resolve(source), exportsOfWorld), resolveDir: project, sourcefile: 'entry.js' },
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    write: false,
    logLevel: 'warning',
    plugins: [contractPlugin(version)],
  });
  const code = bundled.outputFiles[0].text;
  if (bundle) await writeFile(bundle, code);

  // componentize-js maps the source's folder into its build sandbox; a
  // folder of its own holds just the bundle.
  const tmp = await mkdtemp(join(tmpdir(), 'map-plugin-'));
  try {
    const sourcePath = join(tmp, 'plugin.bundle.js');
    await writeFile(sourcePath, code);
    const { component } = await componentize({
      sourcePath,
      witPath: witDir,
      worldName: world,
      // The gateway does not bind `fetch-event` (wasi:http/incoming-handler);
      // `http` is `fetch` over wasi:http/outgoing-handler.
      disableFeatures: http ? ['fetch-event'] : ['http', 'fetch-event'],
    });
    await writeFile(out, component);
    const mb = (component.length / 1048576).toFixed(1);
    console.log(`wrote ${out} (${mb} MiB, ${world}, ${PACKAGE}@${version}) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return { out, version, exports: exportsOfWorld };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
