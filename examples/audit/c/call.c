/* The shared parts of call.h. */
#include "call.h"

#include <string.h>

str_t str_of(const char *s) { return str_n(s, strlen(s)); }

str_t str_n(const char *s, size_t n) { return (str_t){(uint8_t *)s, n}; }

bool fail(call *c, int64_t code, const char *message) {
    c->code = code;
    jb_free(&c->message);
    jb_lit(&c->message, message);
    return false;
}

/* 22099 with the store's reason, then frees the store-error. */
static bool store_failed(call *c, const char *what, map_gateway_plugin_store_store_error_t *e) {
    bool invalid = e->tag == MAP_GATEWAY_PLUGIN_STORE_STORE_ERROR_INVALID;
    str_t reason = invalid ? e->val.invalid : e->val.unavailable;
    fail(c, PLUGIN_FAILURE, "storage failed (");
    jb_lit(&c->message, what);
    jb_lit(&c->message, "): ");
    jb_raw(&c->message, (const char *)reason.ptr, reason.len);
    jb_free(&c->data);
    jb_lit(&c->data, "{\"reason\":");
    jb_str(&c->data, (const char *)reason.ptr, reason.len);
    jb_lit(&c->data, invalid ? ",\"kind\":\"invalid\"}" : ",\"kind\":\"unavailable\"}");
    map_gateway_plugin_store_store_error_free(e);
    return false;
}

bool store_get(call *c, const char *collection, const char *key, intercepting_extension_option_string_t *out) {
    str_t coll = str_of(collection), k = str_of(key);
    map_gateway_plugin_store_store_error_t e;
    if (!map_gateway_plugin_store_get(&coll, &k, out, &e)) return store_failed(c, "get", &e);
    return true;
}

bool store_page(call *c, const char *collection, const char *prefix, const str_t *after, uint32_t limit, page_t *out) {
    str_t coll = str_of(collection);
    map_gateway_plugin_store_page_options_t options = {
        .prefix = str_of(prefix),
        .after = {after != NULL, after != NULL ? *after : str_n("", 0)},
        .before = {false, str_n("", 0)},
        .limit = limit,
        .max_bytes = 0, /* the plugin's memory allowance */
        .reverse = false,
    };
    map_gateway_plugin_store_store_error_t e;
    if (!map_gateway_plugin_store_scan_page(&coll, &options, out, &e)) return store_failed(c, "scan", &e);
    return true;
}

bool store_commit_once(call *c, const char *what, op_t *ops, size_t n, bool *conflict) {
    map_gateway_plugin_store_list_op_t list = {ops, n};
    map_gateway_plugin_store_outcome_t outcome;
    map_gateway_plugin_store_store_error_t e;
    *conflict = false;
    if (!map_gateway_plugin_store_commit(&list, &outcome, &e)) return store_failed(c, what, &e);
    *conflict = outcome.tag == MAP_GATEWAY_PLUGIN_STORE_OUTCOME_CONFLICT;
    map_gateway_plugin_store_outcome_free(&outcome);
    return !*conflict;
}

bool store_commit(call *c, const char *what, op_t *ops, size_t n) {
    bool conflict = true;
    for (int attempt = 0; conflict && attempt < ATTEMPTS; attempt++)
        if (store_commit_once(c, what, ops, n, &conflict)) return true;
    return conflict ? fail_conflicts(c, what) : false;
}

bool fail_conflicts(call *c, const char *what) {
    fail(c, PLUGIN_FAILURE, "storage conflict (");
    jb_lit(&c->message, what);
    jb_lit(&c->message, ") ");
    jb_uint(&c->message, ATTEMPTS);
    jb_lit(&c->message, " times");
    return false;
}

op_t op_add(const char *collection, str_t key, int64_t delta) {
    op_t op = {.tag = MAP_GATEWAY_PLUGIN_STORE_OP_ADD};
    op.val.add = (map_gateway_plugin_store_add_op_t){str_of(collection), key, delta};
    return op;
}

op_t op_put(const char *collection, str_t key, const char *value, size_t n) {
    op_t op = {.tag = MAP_GATEWAY_PLUGIN_STORE_OP_PUT};
    op.val.put = (map_gateway_plugin_store_put_op_t){str_of(collection), key, {(uint8_t *)value, n}};
    return op;
}

op_t op_delete(const char *collection, str_t key) {
    op_t op = {.tag = MAP_GATEWAY_PLUGIN_STORE_OP_DELETE};
    op.val.delete_ = (map_gateway_plugin_store_key_ref_t){str_of(collection), key};
    return op;
}

void log_line(map_gateway_plugin_log_level_t level, const char *prefix, const char *detail, size_t n) {
    jbuf line = {0};
    jb_lit(&line, prefix);
    jb_raw(&line, detail, n);
    if (!line.failed) {
        str_t text = str_n(line.buf, line.len);
        map_gateway_plugin_log_log(level, &text);
    }
    jb_free(&line);
}

void call_end(call *c) {
    arena_free(&c->mem);
    jb_free(&c->message);
    jb_free(&c->data);
}
