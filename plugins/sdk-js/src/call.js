// One call of a method: the caller, the params and checked accessors that
// answer -32602 for params that do not fit.
import { invalidParams } from './errors.js';

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

export class Call {
  constructor(caller, method, params) {
    /** The WIT `caller` record: tenant, participantId, participantType, sessionId, agentIds, capabilities (JSON text). */
    this.caller = caller;
    this.method = method;
    /** The request's params, a JSON object. */
    this.params = params;
  }

  /** The caller's first agent, else its participant id (who "did" it). */
  get actor() {
    return this.caller.agentIds?.[0] ?? this.caller.participantId;
  }

  /** The capabilities the caller declared at `map/connect` (`{}` when none). */
  get capabilities() {
    try {
      const caps = JSON.parse(this.caller.capabilities);
      return isObject(caps) ? caps : {};
    } catch {
      return {};
    }
  }

  /** A required string. */
  string(name) {
    const v = this.params[name];
    if (v === undefined || v === null) throw invalidParams(`missing field \`${name}\``);
    if (typeof v !== 'string') throw invalidParams(`\`${name}\` must be a string`);
    return v;
  }

  /** A string, or `undefined` when absent or null. */
  optionalString(name) {
    const v = this.params[name];
    return v === undefined || v === null ? undefined : this.string(name);
  }

  /** An integer in [min, max]; absent or null is `fallback` (required when no fallback). */
  integer(name, { min = Number.MIN_SAFE_INTEGER, max = Number.MAX_SAFE_INTEGER, fallback } = {}) {
    const v = this.params[name];
    if ((v === undefined || v === null) && fallback !== undefined) return fallback;
    if (v === undefined || v === null) throw invalidParams(`missing field \`${name}\``);
    if (!Number.isInteger(v) || v < min || v > max) throw invalidParams(`\`${name}\` must be an integer from ${min} to ${max}`);
    return v;
  }

  /** A boolean; absent or null is `fallback` (required when no fallback). */
  boolean(name, fallback) {
    const v = this.params[name];
    if ((v === undefined || v === null) && fallback !== undefined) return fallback;
    if (typeof v !== 'boolean') throw invalidParams(v === undefined || v === null ? `missing field \`${name}\`` : `\`${name}\` must be a boolean`);
    return v;
  }

  /** A JSON object; absent or null is `fallback` (required when no fallback). */
  object(name, fallback) {
    const v = this.params[name];
    if ((v === undefined || v === null) && fallback !== undefined) return fallback;
    if (!isObject(v)) throw invalidParams(v === undefined || v === null ? `missing field \`${name}\`` : `\`${name}\` must be an object`);
    return v;
  }
}

export { isObject };
