import { state } from './state.mjs';

export const log = (level, message) => state.logs.push({ level, message });
