// What the mocked host recorded, and switches that make it fail; tests reset it.
export const state = {};

export function reset() {
  Object.assign(state, {
    data: new Map(), // `${collection}\u0000${key}` -> {value: Uint8Array, version: bigint}
    version: 0n,
    events: [],
    logs: [],
    metrics: [],
    timers: [],
    config: {},
    routed: [],
    routeAnswer: undefined, // (method, params) => JSON text, or throws
    failStore: undefined, // {tag, val}: every store call fails with it
    conflictAt: undefined, // index a commit reports as conflicting (once)
  });
}
reset();

/** An imported function's `err`, thrown the way componentize-js throws it. */
export function hostError(payload) {
  const e = new Error('host error');
  e.payload = payload;
  return e;
}
