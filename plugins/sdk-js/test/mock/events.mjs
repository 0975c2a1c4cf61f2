import { state, hostError } from './state.mjs';

function record(type, data, audience) {
  const parsed = JSON.parse(data);
  if (!type || parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw hostError('event type or data refused');
  state.events.push({ type, data: parsed, audience });
}
export const emit = (type, data) => record(type, data);
export const emitTo = (type, data, ids) => record(type, data, { ids });
export const emitFor = (type, data, audience) => record(type, data, audience);
