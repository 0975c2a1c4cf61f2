import { state } from './state.mjs';

export const all = () => JSON.stringify(state.config);
export const get = (key) => (key in state.config ? JSON.stringify(state.config[key]) : undefined);
