// Types of the build helper (build.mjs).

export interface BuildOptions {
  /** The plugin module: `export default defineExtension({...})`. */
  source: string;
  /** The gateway's WIT folder (package `map-gateway:plugin`; its package.wit gives the contract version). */
  wit: string;
  /** The world to target: `extension`, `stateful-extension`, `observer`, `intercepting-extension`, `http-extension`, `resources-provider`, … */
  world: string;
  /** Where to write the component (.wasm). */
  out: string;
  /** Keep outbound HTTP (`http.fetch`, over wasi:http/outgoing-handler). Default `false`. */
  http?: boolean;
  /** Also write the bundled module here. */
  bundle?: string;
}

export interface BuildResult {
  out: string;
  /** The contract version the component's imports name. */
  version: string;
  /** The interfaces the world exports, e.g. `["rpc", "send-observer"]`. */
  exports: string[];
}

/** Bundle the module with the SDK (esbuild) and make the component (componentize-js). */
export function build(options: BuildOptions): Promise<BuildResult>;
/** The version `package.wit` of the folder gives `map-gateway:plugin`. */
export function contractVersion(wit: string): Promise<string>;
/** The worlds of the folder's .wit files. */
export function worlds(wit: string): Promise<Record<string, { exports: string[]; includes: string[] }>>;
/** The interfaces a world exports, its includes' too. */
export function worldExports(wit: string, world: string): Promise<string[]>;
/** The entry module the build bundles: the world's exports taken from the plugin module. */
export function entrySource(sourcePath: string, exportsOfWorld: string[]): string;
