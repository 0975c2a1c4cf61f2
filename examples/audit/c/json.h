/* A small JSON reader and writer: what the audit extension needs, no more.
 *
 * The reader builds a tree in an arena (freed all at once at the end of a
 * call) and refuses, rather than guesses at, anything that is not RFC 8259
 * JSON: bad syntax, invalid UTF-8, lone surrogates, nesting deeper than
 * JSON_MAX_DEPTH. The writer appends to a growing buffer and always emits
 * valid UTF-8 (the canonical ABI traps on any other string). */
#ifndef AUDIT_JSON_H
#define AUDIT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The host refuses results nested deeper than 128; so does the reader. */
#define JSON_MAX_DEPTH 128

/* ---- arena -------------------------------------------------------------- */

typedef struct arena_chunk arena_chunk;
typedef struct {
    arena_chunk *head;
} arena;

/* NULL when memory is exhausted. */
void *arena_alloc(arena *a, size_t size);
void arena_free(arena *a);

/* ---- reader ------------------------------------------------------------- */

typedef enum { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT } jtype;

typedef struct jval jval;
struct jval {
    jtype type;
    bool boolean;      /* J_BOOL */
    bool is_int;       /* J_NUMBER: no fraction or exponent, fits int64 */
    int64_t integer;   /* J_NUMBER when is_int */
    const char *str;   /* J_STRING: decoded UTF-8; J_NUMBER: the literal */
    size_t len;
    jval *first;       /* J_ARRAY, J_OBJECT: the first member */
    jval *next;        /* the next member of the enclosing array or object */
    const char *key;   /* a member of an object: its decoded name */
    size_t key_len;
};

/* The tree of `len` bytes of JSON text, or NULL when they are not exactly
 * one JSON value (surrounding whitespace allowed) or memory ran out. */
jval *json_parse(arena *a, const char *text, size_t len);

/* The member `key` of an object (the last one when repeated, as in
 * JavaScript and Python), or NULL when absent or `obj` is no object. */
const jval *json_get(const jval *obj, const char *key);

/* Whether `v` is a string equal to the `n` bytes at `s`. */
bool json_str_eq(const jval *v, const char *s, size_t n);

/* ---- writer ------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
    bool failed; /* memory ran out: the text is incomplete */
} jbuf;

void jb_raw(jbuf *b, const char *s, size_t n);
void jb_lit(jbuf *b, const char *s); /* a NUL-terminated literal, as is */
void jb_str(jbuf *b, const char *s, size_t n); /* a quoted, escaped string */
void jb_int(jbuf *b, int64_t v);
void jb_uint(jbuf *b, uint64_t v);
/* A value read by json_parse, written compactly. */
void jb_value(jbuf *b, const jval *v);
/* `v` zero-padded to `width` digits (no quotes). */
void jb_uint_padded(jbuf *b, uint64_t v, int width);
void jb_free(jbuf *b);

/* A counter's decimal text (surrounding whitespace allowed) as an integer;
 * 0 when absent or not a number, as in the other builds. */
int64_t parse_counter(const uint8_t *s, size_t n);

#endif
