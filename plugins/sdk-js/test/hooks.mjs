// Resolve hook: `map-gateway:plugin/<name>` to ./mock/<name>.mjs.
const MOCKS = new URL('./mock/', import.meta.url);

export async function resolve(specifier, context, next) {
  const m = /^map-gateway:plugin\/([a-z-]+)$/.exec(specifier);
  if (m) return { url: new URL(`${m[1]}.mjs`, MOCKS).href, shortCircuit: true };
  return next(specifier, context);
}
