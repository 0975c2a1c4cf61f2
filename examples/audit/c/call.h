/* What every method and the observer share: the call's state (its arena
 * and, once something failed, the JSON-RPC error to return), store calls
 * that turn a store-error or repeated conflict into 22099, and logging. */
#ifndef AUDIT_CALL_H
#define AUDIT_CALL_H

#include "intercepting_extension.h"
#include "json.h"

typedef intercepting_extension_string_t str_t;
typedef map_gateway_plugin_store_op_t op_t;
typedef map_gateway_plugin_store_page_t page_t;

#define INVALID_PARAMS (-32602)
#define METHOD_NOT_FOUND (-32601)
#define ERROR_RANGE_FIRST 22000
#define ERROR_RANGE_LAST 22099
#define PLUGIN_FAILURE 22099 /* an unexpected failure: the instance is kept */

typedef struct {
    arena mem;       /* parse trees and op lists of this call */
    int64_t code;    /* 0 until fail() */
    jbuf message;    /* text */
    jbuf data;       /* a JSON object, or empty for none */
} call;

/* A borrowed view of a NUL-terminated string or of n bytes. */
str_t str_of(const char *s);
str_t str_n(const char *s, size_t n);

/* Records the error the call returns; always false, to `return fail(...)`. */
bool fail(call *c, int64_t code, const char *message);

/* The store calls of the plugin: false (with the call failed) on a
 * store-error. Results are the caller's to free. */
bool store_get(call *c, const char *collection, const char *key, intercepting_extension_option_string_t *out);
bool store_page(call *c, const char *collection, const char *prefix, const str_t *after, uint32_t limit, page_t *out);
/* Applies ops atomically, once: true when applied; false with `*conflict`
 * set when a concurrent transaction got in the way (only PostgreSQL: the
 * plugin writes no conditions), false with the call failed on a store-error. */
bool store_commit_once(call *c, const char *what, op_t *ops, size_t n, bool *conflict);
/* The same, with a conflict retried, ATTEMPTS times in all. */
bool store_commit(call *c, const char *what, op_t *ops, size_t n);
#define ATTEMPTS 3
/* Fails the call after ATTEMPTS conflicts. */
bool fail_conflicts(call *c, const char *what);

/* Operations of a commit; their strings are borrowed. */
op_t op_add(const char *collection, str_t key, int64_t delta);
op_t op_put(const char *collection, str_t key, const char *value, size_t n);
op_t op_delete(const char *collection, str_t key);

/* A log line `prefix` + `detail` at `level` (MAP_GATEWAY_PLUGIN_LOG_LEVEL_*). */
void log_line(map_gateway_plugin_log_level_t level, const char *prefix, const char *detail, size_t n);

/* Frees the call's arena and error (not what was handed to the host). */
void call_end(call *c);

#endif
