import { state, hostError } from './state.mjs';

export function counterAdd(name, labels, delta) {
  if (typeof delta !== 'bigint') throw new TypeError('u64 must be a BigInt');
  if (!/^[a-z][a-z0-9_]*$/.test(name)) throw hostError(`bad metric name ${name}`);
  state.metrics.push({ kind: 'counter', name, labels, delta });
}
export function gaugeSet(name, labels, value) {
  state.metrics.push({ kind: 'gauge', name, labels, value });
}
