/* audit: a per-tenant audit log of `map/send` traffic, in C. The same
 * extension exists in Rust, Python and JavaScript; the behaviour is
 * specified in ../README.md and held by tests/interop/audit.test.mjs.
 *
 * World `intercepting-extension` of ../../../wit, through the bindings
 * wit-bindgen generates (intercepting_extension.h): exports `rpc` and
 * `send-observer`.
 *
 *   on-send  -> one commit: counters/total += 1, counters/from/<sender> += 1,
 *               records/<ts 13 digits>/<id> = the record;
 *               then event `audit.recorded`, metric `audit_records_total`
 *   audit/list   {limit?, cursor?} -> {records, nextCursor}
 *   audit/stats  {}                -> {total, bySender}
 *   audit/forget {from}            -> {removed}
 *
 * Ownership follows the canonical ABI as wit-bindgen maps it: arguments of
 * an export are the export's to free; what it returns is freed by the
 * generated post-return function with free(), so it must come from malloc. */
#include "call.h"

#include <stdlib.h>
#include <string.h>

#define RECORDS "records"   /* <timestamp, 13 digits>/<message id> -> JSON record */
#define COUNTERS "counters" /* total, from/<sender>: decimal text (store `add`) */
#define TOTAL "total"
#define FROM_PREFIX "from/"
#define DEFAULT_LIMIT 50
#define MAX_LIMIT 200
#define SCAN_PAGE 1000 /* the host's cap on one page */

/* ---- methods -------------------------------------------------------------- */

static bool audit_list(call *c, const jval *params, jbuf *out) {
    const jval *limit = json_get(params, "limit"), *cursor = json_get(params, "cursor");
    int64_t n = DEFAULT_LIMIT;
    if (limit != NULL && limit->type != J_NULL) {
        if (limit->type != J_NUMBER || !limit->is_int || limit->integer < 1 || limit->integer > MAX_LIMIT)
            return fail(c, INVALID_PARAMS, "`limit` must be an integer from 1 to 200");
        n = limit->integer;
    }
    if (cursor != NULL && cursor->type != J_NULL && cursor->type != J_STRING)
        return fail(c, INVALID_PARAMS, "`cursor` must be a string");
    str_t after = cursor != NULL && cursor->type == J_STRING ? str_n(cursor->str, cursor->len) : str_n("", 0);
    page_t page;
    if (!store_page(c, RECORDS, "", cursor != NULL && cursor->type == J_STRING ? &after : NULL, (uint32_t)n, &page))
        return false;
    bool ok = true;
    jb_lit(out, "{\"records\":[");
    for (size_t i = 0; i < page.entries.len && ok; i++) {
        map_gateway_plugin_store_item_t *item = &page.entries.ptr[i].item;
        const jval *record = json_parse(&c->mem, (const char *)item->value.ptr, item->value.len);
        if (record == NULL) ok = fail(c, PLUGIN_FAILURE, "a stored record is not JSON");
        else {
            if (i > 0) jb_lit(out, ",");
            jb_value(out, record);
        }
    }
    jb_lit(out, "],\"nextCursor\":");
    if (page.next.is_some) jb_str(out, (const char *)page.next.val.ptr, page.next.val.len);
    else jb_lit(out, "null");
    jb_lit(out, "}");
    map_gateway_plugin_store_page_free(&page);
    return ok;
}

static bool audit_stats(call *c, const jval *params, jbuf *out) {
    (void)params;
    intercepting_extension_option_string_t total;
    if (!store_get(c, COUNTERS, TOTAL, &total)) return false;
    jb_lit(out, "{\"total\":");
    jb_int(out, total.is_some ? parse_counter(total.val.ptr, total.val.len) : 0);
    intercepting_extension_option_string_free(&total);
    jb_lit(out, ",\"bySender\":{");
    const size_t skip = strlen(FROM_PREFIX);
    bool first = true, more = true;
    str_t after = {0};
    for (bool paged = false; more; paged = true) {
        page_t page;
        bool ok = store_page(c, COUNTERS, FROM_PREFIX, paged ? &after : NULL, SCAN_PAGE, &page);
        intercepting_extension_string_free(&after);
        if (!ok) return false;
        for (size_t i = 0; i < page.entries.len; i++) {
            map_gateway_plugin_store_keyed_item_t *e = &page.entries.ptr[i];
            if (e->key.len < skip) continue; /* the scan's prefix rules it out */
            if (!first) jb_lit(out, ",");
            first = false;
            jb_str(out, (const char *)e->key.ptr + skip, e->key.len - skip);
            jb_lit(out, ":");
            jb_int(out, parse_counter(e->item.value.ptr, e->item.value.len));
        }
        more = page.next.is_some && page.entries.len > 0;
        if (more) { /* keep the cursor, free the rest */
            after = page.next.val;
            page.next.is_some = false;
        }
        map_gateway_plugin_store_page_free(&page);
    }
    jb_lit(out, "}}");
    return true;
}

/* One record key of a sender, kept in the call's arena. */
typedef struct key_node {
    str_t key;
    struct key_node *next;
} key_node;

/* The keys of every record `from` sent, in a list; false on a failure. */
static bool sender_records(call *c, const jval *from, key_node **keys, size_t *count) {
    *keys = NULL;
    *count = 0;
    str_t after = {0};
    for (bool paged = false, more = true; more; paged = true) {
        page_t page;
        bool ok = store_page(c, RECORDS, "", paged ? &after : NULL, SCAN_PAGE, &page);
        intercepting_extension_string_free(&after);
        if (!ok) return false;
        for (size_t i = 0; ok && i < page.entries.len; i++) {
            map_gateway_plugin_store_keyed_item_t *e = &page.entries.ptr[i];
            const jval *record = json_parse(&c->mem, (const char *)e->item.value.ptr, e->item.value.len);
            if (record == NULL) ok = fail(c, PLUGIN_FAILURE, "a stored record is not JSON");
            else if (json_str_eq(json_get(record, "from"), from->str, from->len)) {
                key_node *node = arena_alloc(&c->mem, sizeof(key_node));
                char *key = arena_alloc(&c->mem, e->key.len + 1);
                if (node == NULL || key == NULL) ok = fail(c, PLUGIN_FAILURE, "out of memory");
                else {
                    memcpy(key, e->key.ptr, e->key.len);
                    *node = (key_node){str_n(key, e->key.len), *keys};
                    *keys = node;
                    ++*count;
                }
            }
        }
        more = ok && page.next.is_some && page.entries.len > 0;
        if (more) { /* keep the cursor, free the rest */
            after = page.next.val;
            page.next.is_some = false;
        }
        map_gateway_plugin_store_page_free(&page);
        if (!ok) return false;
    }
    return true;
}

/* One attempt at forgetting: reads the sender's records and deletes them
 * with its counter, in one commit; `*conflict` when it must be tried again. */
static bool forget_once(call *c, const jval *from, str_t counter, size_t *removed, bool *conflict) {
    key_node *keys;
    *conflict = false;
    if (!sender_records(c, from, &keys, removed)) return false;
    op_t *ops = arena_alloc(&c->mem, (*removed + 2) * sizeof(op_t));
    if (ops == NULL) return fail(c, PLUGIN_FAILURE, "out of memory");
    size_t n = 0;
    for (key_node *k = keys; k != NULL; k = k->next) ops[n++] = op_delete(RECORDS, k->key);
    ops[n++] = op_delete(COUNTERS, counter);
    if (*removed > 0) ops[n++] = op_add(COUNTERS, str_of(TOTAL), -(int64_t)*removed);
    return store_commit_once(c, "forget", ops, n, conflict);
}

static bool audit_forget(call *c, const jval *params, jbuf *out) {
    const jval *from = json_get(params, "from");
    if (from == NULL || from->type != J_STRING) return fail(c, INVALID_PARAMS, "`from` must be a string");
    jbuf counter = {0};
    jb_lit(&counter, FROM_PREFIX);
    jb_raw(&counter, from->str, from->len);
    if (counter.failed) return fail(c, PLUGIN_FAILURE, "out of memory");
    size_t removed = 0;
    bool ok = false, conflict = true;
    /* After a conflict the records may have changed: they are read again. */
    for (int attempt = 0; !ok && conflict && attempt < ATTEMPTS; attempt++)
        ok = forget_once(c, from, str_n(counter.buf, counter.len), &removed, &conflict);
    jb_free(&counter);
    if (!ok) return conflict ? fail_conflicts(c, "forget") : false;
    jb_lit(out, "{\"removed\":");
    jb_uint(out, removed);
    jb_lit(out, "}");
    return true;
}

typedef bool (*method_fn)(call *, const jval *, jbuf *);
static const struct {
    const char *name;
    method_fn fn;
} METHODS[] = {{"audit/list", audit_list}, {"audit/stats", audit_stats}, {"audit/forget", audit_forget}};
#define METHOD_COUNT (sizeof METHODS / sizeof METHODS[0])

/* ---- exports: rpc ------------------------------------------------------- */

void exports_map_gateway_plugin_rpc_describe(exports_map_gateway_plugin_rpc_descriptor_t *ret) {
    /* The same descriptor as the Rust, Python and JavaScript builds. */
    intercepting_extension_string_dup(&ret->name, "audit");
    intercepting_extension_string_dup(&ret->version, "1.0.0");
    intercepting_extension_string_dup(&ret->uri, "urn:example:audit:1");
    intercepting_extension_string_dup(&ret->capability_group, "audit");
    intercepting_extension_string_dup(&ret->capabilities, "{\"enabled\":true}");
    ret->methods.len = METHOD_COUNT;
    ret->methods.ptr = malloc(METHOD_COUNT * sizeof(str_t));
    if (ret->methods.ptr == NULL) abort(); /* no memory at load: nothing to serve */
    for (size_t i = 0; i < METHOD_COUNT; i++) intercepting_extension_string_dup(&ret->methods.ptr[i], METHODS[i].name);
    ret->error_range.f0 = ERROR_RANGE_FIRST;
    ret->error_range.f1 = ERROR_RANGE_LAST;
    ret->event_filters.ptr = NULL;
    ret->event_filters.len = 0;
}

/* Runs a method on the params' text; its result goes to `out`. */
static bool dispatch(call *c, const str_t *method, const str_t *params, jbuf *out) {
    for (size_t i = 0; i < METHOD_COUNT; i++) {
        if (strlen(METHODS[i].name) != method->len || memcmp(METHODS[i].name, method->ptr, method->len) != 0) continue;
        const jval *args = json_parse(&c->mem, (const char *)params->ptr, params->len);
        if (args == NULL) /* the host passes well-formed JSON: this is what the reader refuses */
            return fail(c, INVALID_PARAMS, "params must be JSON of valid Unicode (no lone surrogates), nested at most 128 deep");
        if (args->type != J_OBJECT) return fail(c, INVALID_PARAMS, "params must be an object");
        return METHODS[i].fn(c, args, out);
    }
    fail(c, METHOD_NOT_FOUND, "audit has no method ");
    jb_raw(&c->message, (const char *)method->ptr, method->len);
    return false;
}

bool exports_map_gateway_plugin_rpc_handle(exports_map_gateway_plugin_rpc_caller_t *caller, str_t *method,
                                           exports_map_gateway_plugin_rpc_json_t *params,
                                           exports_map_gateway_plugin_rpc_json_t *ret,
                                           exports_map_gateway_plugin_rpc_rpc_error_t *err) {
    call c = {0};
    jbuf out = {0};
    bool ok = dispatch(&c, method, params, &out);
    if (ok && out.failed) ok = fail(&c, PLUGIN_FAILURE, "out of memory");
    if (ok) {
        *ret = str_n(out.buf, out.len); /* freed by the post-return function */
    } else {
        jb_free(&out);
        if (c.code == PLUGIN_FAILURE)
            log_line(MAP_GATEWAY_PLUGIN_LOG_LEVEL_ERROR, "audit: ", c.message.buf, c.message.failed ? 0 : c.message.len);
        err->code = c.code;
        /* Handed over to the host as they are; an incomplete one is dropped. */
        err->message = c.message.failed ? str_n("", 0) : str_n(c.message.buf, c.message.len);
        err->data.is_some = c.data.len > 0 && !c.data.failed;
        err->data.val = err->data.is_some ? str_n(c.data.buf, c.data.len) : str_n("", 0);
        if (!c.message.failed && c.message.len > 0) c.message = (jbuf){0};
        if (err->data.is_some) c.data = (jbuf){0};
    }
    call_end(&c);
    exports_map_gateway_plugin_rpc_caller_free(caller);
    intercepting_extension_string_free(method);
    exports_map_gateway_plugin_rpc_json_free(params);
    return ok;
}

/* ---- exports: send-observer ---------------------------------------------- */

void exports_map_gateway_plugin_send_observer_interest(intercepting_extension_list_string_t *ret) {
    ret->ptr = NULL; /* every message */
    ret->len = 0;
}

typedef exports_map_gateway_plugin_send_observer_sent_message_t sent_t;

/* The stored record of a message (key order as in the other builds). */
static void write_record(call *c, const sent_t *m, str_t key, jbuf *out) {
    const jval *to = json_parse(&c->mem, (const char *)m->to.ptr, m->to.len);
    const jval *meta = json_parse(&c->mem, (const char *)m->meta.ptr, m->meta.len);
    const jval *protocol = json_get(meta, "protocol");
    jb_lit(out, "{\"key\":");
    jb_str(out, (const char *)key.ptr, key.len);
    jb_lit(out, ",\"id\":");
    jb_str(out, (const char *)m->id.ptr, m->id.len);
    jb_lit(out, ",\"from\":");
    jb_str(out, (const char *)m->from.ptr, m->from.len);
    jb_lit(out, ",\"to\":");
    if (to != NULL) jb_value(out, to);
    else jb_lit(out, "null");
    jb_lit(out, ",\"timestamp\":");
    jb_uint(out, m->timestamp);
    jb_lit(out, ",\"payloadBytes\":");
    jb_uint(out, m->payload.len); /* the UTF-8 length of the payload's JSON text */
    jb_lit(out, ",\"protocol\":");
    if (protocol != NULL && protocol->type == J_STRING) jb_str(out, protocol->str, protocol->len);
    else jb_lit(out, "null");
    jb_lit(out, ",\"delivered\":");
    jb_uint(out, m->delivered.len);
    jb_lit(out, "}");
}

/* Records one message; false (with c failed) when it could not. */
static bool record(call *c, const sent_t *m, jbuf *key) {
    jbuf counter = {0}, value = {0};
    jb_uint_padded(key, m->timestamp, 13);
    jb_lit(key, "/");
    jb_raw(key, (const char *)m->id.ptr, m->id.len);
    jb_lit(&counter, FROM_PREFIX);
    jb_raw(&counter, (const char *)m->from.ptr, m->from.len);
    write_record(c, m, str_n(key->buf, key->len), &value);
    bool ok = !(key->failed || counter.failed || value.failed) || fail(c, PLUGIN_FAILURE, "out of memory");
    if (ok) {
        op_t ops[3] = {
            op_add(COUNTERS, str_of(TOTAL), 1),
            op_add(COUNTERS, str_n(counter.buf, counter.len), 1),
            op_put(RECORDS, str_n(key->buf, key->len), value.buf, value.len),
        };
        ok = store_commit(c, "record", ops, 3);
    }
    jb_free(&counter);
    jb_free(&value);
    return ok;
}

/* Announces a recorded message; the record stays when the host refuses. */
static void announce(const sent_t *m, const jbuf *key) {
    jbuf data = {0};
    jb_lit(&data, "{\"key\":");
    jb_str(&data, key->buf, key->len);
    jb_lit(&data, ",\"id\":");
    jb_str(&data, (const char *)m->id.ptr, m->id.len);
    jb_lit(&data, ",\"from\":");
    jb_str(&data, (const char *)m->from.ptr, m->from.len);
    jb_lit(&data, "}");
    str_t why;
    if (!data.failed) {
        str_t type = str_of("audit.recorded"), json = str_n(data.buf, data.len);
        if (!map_gateway_plugin_events_emit(&type, &json, &why)) {
            log_line(MAP_GATEWAY_PLUGIN_LOG_LEVEL_WARN, "audit.recorded not emitted: ", (const char *)why.ptr, why.len);
            intercepting_extension_string_free(&why);
        }
    }
    jb_free(&data);
    str_t metric = str_of("audit_records_total");
    intercepting_extension_list_label_t labels = {NULL, 0};
    if (!map_gateway_plugin_metrics_counter_add(&metric, &labels, 1, &why)) {
        log_line(MAP_GATEWAY_PLUGIN_LOG_LEVEL_WARN, "metric audit_records_total refused: ", (const char *)why.ptr, why.len);
        intercepting_extension_string_free(&why);
    }
}

void exports_map_gateway_plugin_send_observer_on_send(exports_map_gateway_plugin_send_observer_caller_t *caller,
                                                      sent_t *message) {
    call c = {0};
    jbuf key = {0};
    if (record(&c, message, &key)) {
        announce(message, &key);
    } else { /* never trap: the message is just not recorded */
        jbuf line = {0};
        jb_raw(&line, (const char *)message->id.ptr, message->id.len);
        jb_lit(&line, " not recorded: ");
        jb_raw(&line, c.message.buf, c.message.failed ? 0 : c.message.len);
        log_line(MAP_GATEWAY_PLUGIN_LOG_LEVEL_WARN, "audit: ", line.buf, line.failed ? 0 : line.len);
        jb_free(&line);
    }
    jb_free(&key);
    call_end(&c);
    exports_map_gateway_plugin_send_observer_caller_free(caller);
    exports_map_gateway_plugin_send_observer_sent_message_free(message);
}
