// audit: a per-tenant audit log of `map/send` traffic, in JavaScript, on
// the JavaScript plugin SDK (plugins/sdk-js).
//
// World `intercepting-extension` of ../../../wit: `rpc` (the audit/*
// methods) and `send-observer` (every map/send of the tenant). The same
// extension exists in Rust and Python; ../README.md is the behaviour all
// three share.
//
// Storage (the host scopes it to (tenant, plugin)):
//   records/<timestamp, 13 digits>/<message id>  the record as JSON
//   counters/total, counters/from/<sender>       decimal counters, via `add`
import { defineExtension, errorRange, collection, counter, keys, Batch, events, metrics } from '@map-gateway/plugin-sdk';

const RECORDS = collection('records');
const COUNTERS = counter('counters');
const TOTAL = 'total';
const FROM = 'from/';
const MAX_LIMIT = 200;

const utf8 = new TextEncoder();

/** The record of one delivered message, under a key that sorts by time. */
function record(message) {
  const { meta } = message;
  return {
    key: keys.join(keys.number(message.timestamp, 13), message.id),
    id: message.id,
    from: message.from,
    to: message.to,
    timestamp: message.timestamp,
    // The UTF-8 length of the payload's JSON text as the host passed it.
    payloadBytes: utf8.encode(message.json.payload).length,
    protocol: meta !== null && typeof meta === 'object' && typeof meta.protocol === 'string' ? meta.protocol : null,
    delivered: message.delivered.length,
  };
}

function observe(message) {
  const rec = record(message);
  new Batch()
    .add(COUNTERS, TOTAL, 1)
    .add(COUNTERS, FROM + rec.from, 1)
    .put(RECORDS, rec.key, rec)
    .apply();
  events.emit('audit.recorded', { key: rec.key, id: rec.id, from: rec.from });
  metrics.counterAdd('audit_records_total');
}

/** `audit/list {limit?, cursor?}`: records oldest first. */
function list(call) {
  const limit = call.integer('limit', { min: 1, max: MAX_LIMIT, fallback: 50 });
  const page = RECORDS.range().resume(call.optionalString('cursor')).page(limit);
  return { records: page.entries.map((e) => e.value), nextCursor: page.next ?? null };
}

/** `audit/stats {}`: the counters. */
function stats() {
  return { total: COUNTERS.get(TOTAL), bySender: COUNTERS.all(FROM) };
}

/** `audit/forget {from}`: that sender's records and counter, in one commit. */
function forget(call) {
  const from = call.string('from');
  const batch = new Batch();
  for (const e of RECORDS.entries()) if (e.value?.from === from) batch.delete(RECORDS, e.key);
  const removed = batch.length;
  batch.delete(COUNTERS, FROM + from);
  if (removed > 0) batch.add(COUNTERS, TOTAL, -removed);
  batch.apply();
  return { removed };
}

export default defineExtension({
  name: 'audit',
  version: '1.0.0',
  uri: 'urn:example:audit:1',
  // Storage failures and anything unexpected answer 22099.
  errors: errorRange(22000, 22099),
  methods: { 'audit/list': list, 'audit/stats': stats, 'audit/forget': forget },
  // Every message: `interest` is empty.
  observer: { onSend: observe },
});
