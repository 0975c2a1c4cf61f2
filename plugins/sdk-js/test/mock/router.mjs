import { state, hostError } from './state.mjs';

function answer(kind, ...args) {
  state.routed.push({ kind, args });
  const a = state.routeAnswer?.(kind, ...args);
  if (a && a.error) throw hostError(a.error);
  return a;
}
export const send = (to, payload, meta) => answer('send', to, payload, meta) ?? '{"messageId":"m1","delivered":[]}';
export const notify = (participant, method, params) => void answer('notify', participant, method, params);
export const call = (method, params) => answer('call', method, params) ?? 'null';
export const connectedSince = (ids) => ids.map((i) => (i === 'online' ? 1700000000000n : undefined));
export const agent = (id) => (id === 'a1' ? '{"id":"a1","name":"one"}' : undefined);
