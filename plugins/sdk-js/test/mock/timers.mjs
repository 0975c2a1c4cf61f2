import { state, hostError } from './state.mjs';

export function schedule(delayMs, tag) {
  if (delayMs > 7n * 86_400_000n) throw hostError('delay too long');
  state.timers.push({ delayMs, tag });
  return BigInt(state.timers.length);
}
export const cancel = (timer) => timer <= BigInt(state.timers.length);
