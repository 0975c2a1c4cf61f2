/* The JSON reader and writer of json.h. */
#include "json.h"

#include <stdlib.h>
#include <string.h>

/* ---- arena -------------------------------------------------------------- */

struct arena_chunk {
    arena_chunk *prev;
    size_t used, cap;
    uint64_t data[]; /* 8-byte aligned */
};

#define CHUNK_MIN 4096

void *arena_alloc(arena *a, size_t size) {
    if (size > SIZE_MAX / 2) return NULL;
    size = (size + 7) & ~(size_t)7;
    arena_chunk *c = a->head;
    if (c == NULL || c->cap - c->used < size) {
        size_t cap = size > CHUNK_MIN ? size : CHUNK_MIN;
        c = malloc(sizeof(arena_chunk) + cap);
        if (c == NULL) return NULL;
        c->prev = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += size;
    return p;
}

void arena_free(arena *a) {
    while (a->head != NULL) {
        arena_chunk *prev = a->head->prev;
        free(a->head);
        a->head = prev;
    }
}

/* ---- reader ------------------------------------------------------------- */

typedef struct {
    arena *a;
    const unsigned char *p, *end;
    int depth;
} parser;

static jval *parse_value(parser *ps);

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static jval *new_val(parser *ps, jtype type) {
    jval *v = arena_alloc(ps->a, sizeof(jval));
    if (v != NULL) {
        memset(v, 0, sizeof(jval));
        v->type = type;
    }
    return v;
}

/* The length of the UTF-8 sequence starting at p (1 to 4), or 0 when it is
 * not a valid, shortest-form encoding of a scalar value. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;     /* overlong */
        if (c == 0xED) hi = 0x9F;     /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;     /* overlong */
        if (c == 0xF4) hi = 0x8F;     /* above U+10FFFF */
    } else return 0;
    if ((size_t)(end - p) < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

static int hex4(const unsigned char *p, const unsigned char *end) {
    if (end - p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* One escape after the backslash at ps->p; appends its UTF-8 to out. */
static bool parse_escape(parser *ps, char *out, size_t *n) {
    const unsigned char *p = ps->p + 1;
    if (p >= ps->end) return false;
    const char *simple = "\"\"\\\\//b\bf\fn\nr\rt\t";
    for (const char *s = simple; *s; s += 2) {
        if (*p == (unsigned char)s[0]) {
            out[(*n)++] = s[1];
            ps->p = p + 1;
            return true;
        }
    }
    if (*p != 'u') return false;
    int cp = hex4(p + 1, ps->end);
    if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return false; /* lone low surrogate */
    p += 5;
    uint32_t scalar = (uint32_t)cp;
    if (cp >= 0xD800 && cp <= 0xDBFF) { /* needs its low half */
        if (ps->end - p < 6 || p[0] != '\\' || p[1] != 'u') return false;
        int low = hex4(p + 2, ps->end);
        if (low < 0xDC00 || low > 0xDFFF) return false;
        scalar = 0x10000 + (((uint32_t)cp - 0xD800) << 10) + ((uint32_t)low - 0xDC00);
        p += 6;
    }
    *n += put_utf8(out + *n, scalar);
    ps->p = p;
    return true;
}

/* A string at ps->p (on its opening quote), decoded into the arena. */
static bool parse_string(parser *ps, const char **str, size_t *len) {
    const unsigned char *q = ++ps->p;
    while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end) return false;
    /* Decoding never lengthens: an escape is at least as long as its UTF-8. */
    char *out = arena_alloc(ps->a, (size_t)(q - ps->p) + 1);
    if (out == NULL) return false;
    size_t n = 0;
    while (ps->p < q) {
        unsigned char c = *ps->p;
        if (c == '\\') {
            if (!parse_escape(ps, out, &n) || ps->p > q) return false;
        } else if (c < 0x20) {
            return false; /* control characters must be escaped */
        } else {
            size_t k = utf8_seq(ps->p, q);
            if (k == 0) return false;
            memcpy(out + n, ps->p, k);
            n += k;
            ps->p += k;
        }
    }
    out[n] = '\0';
    ps->p = q + 1;
    *str = out;
    *len = n;
    return true;
}

static bool is_digit(const unsigned char *p, const unsigned char *end) {
    return p < end && *p >= '0' && *p <= '9';
}

static jval *parse_number(parser *ps) {
    const unsigned char *start = ps->p, *p = ps->p;
    bool neg = p < ps->end && *p == '-';
    if (neg) p++;
    if (!is_digit(p, ps->end)) return NULL;
    uint64_t mag = 0;
    bool fits = true;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (*p == '0') p++;
    else
        for (; is_digit(p, ps->end); p++) {
            uint64_t d = (uint64_t)(*p - '0');
            if (mag > (limit - d) / 10) fits = false;
            else mag = mag * 10 + d;
        }
    bool integral = true;
    if (p < ps->end && *p == '.') {
        integral = false;
        if (!is_digit(++p, ps->end)) return NULL;
        while (is_digit(p, ps->end)) p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        integral = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (!is_digit(p, ps->end)) return NULL;
        while (is_digit(p, ps->end)) p++;
    }
    jval *v = new_val(ps, J_NUMBER);
    if (v == NULL) return NULL;
    v->is_int = integral && fits;
    if (v->is_int) v->integer = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    v->str = (const char *)start;
    v->len = (size_t)(p - start);
    ps->p = p;
    return v;
}

static bool literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return false;
    ps->p += n;
    return true;
}

/* An array or object at ps->p (on its opening bracket). */
static jval *parse_container(parser *ps, bool object) {
    if (++ps->depth > JSON_MAX_DEPTH) return NULL;
    jval *v = new_val(ps, object ? J_OBJECT : J_ARRAY);
    if (v == NULL) return NULL;
    char close = object ? '}' : ']';
    jval **tail = &v->first;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return v;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        if (object) {
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"' || !parse_string(ps, &key, &key_len)) return NULL;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return NULL;
            ps->p++;
        }
        jval *member = parse_value(ps);
        if (member == NULL) return NULL;
        member->key = key;
        member->key_len = key_len;
        *tail = member;
        tail = &member->next;
        skip_ws(ps);
        if (ps->p >= ps->end) return NULL;
        if (*ps->p == close) break;
        if (*ps->p != ',') return NULL;
        ps->p++;
    }
    ps->p++;
    ps->depth--;
    return v;
}

static jval *parse_value(parser *ps) {
    skip_ws(ps);
    if (ps->p >= ps->end) return NULL;
    jval *v;
    switch (*ps->p) {
    case '{': return parse_container(ps, true);
    case '[': return parse_container(ps, false);
    case '"':
        v = new_val(ps, J_STRING);
        return v != NULL && parse_string(ps, &v->str, &v->len) ? v : NULL;
    case 't':
    case 'f':
        v = new_val(ps, J_BOOL);
        if (v == NULL) return NULL;
        v->boolean = *ps->p == 't';
        return literal(ps, v->boolean ? "true" : "false") ? v : NULL;
    case 'n':
        v = new_val(ps, J_NULL);
        return v != NULL && literal(ps, "null") ? v : NULL;
    default: return parse_number(ps);
    }
}

jval *json_parse(arena *a, const char *text, size_t len) {
    parser ps = {a, (const unsigned char *)text, (const unsigned char *)text + len, 0};
    jval *v = parse_value(&ps);
    if (v == NULL) return NULL;
    skip_ws(&ps);
    return ps.p == ps.end ? v : NULL;
}

const jval *json_get(const jval *obj, const char *key) {
    if (obj == NULL || obj->type != J_OBJECT) return NULL;
    size_t n = strlen(key);
    const jval *found = NULL;
    for (const jval *m = obj->first; m != NULL; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0) found = m;
    return found;
}

bool json_str_eq(const jval *v, const char *s, size_t n) {
    return v != NULL && v->type == J_STRING && v->len == n && memcmp(v->str, s, n) == 0;
}

/* ---- writer ------------------------------------------------------------- */

static bool jb_reserve(jbuf *b, size_t n) {
    if (b->failed) return false;
    if (n <= b->cap - b->len) return true;
    if (n > SIZE_MAX / 4 - b->len) {
        b->failed = true;
        return false;
    }
    size_t cap = b->cap ? b->cap * 2 : 256;
    if (cap < b->len + n) cap = b->len + n;
    char *buf = realloc(b->buf, cap);
    if (buf == NULL) {
        b->failed = true;
        return false;
    }
    b->buf = buf;
    b->cap = cap;
    return true;
}

void jb_raw(jbuf *b, const char *s, size_t n) {
    if (n == 0 || !jb_reserve(b, n)) return;
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

void jb_lit(jbuf *b, const char *s) { jb_raw(b, s, strlen(s)); }

void jb_str(jbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    jb_raw(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, written in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        jb_raw(b, s + i - run, run);
        run = 0;
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        if (c == '"' || c == '\\') { esc[1] = (char)c; jb_raw(b, esc, 2); }
        else if (c == '\n') jb_raw(b, "\\n", 2);
        else if (c == '\r') jb_raw(b, "\\r", 2);
        else if (c == '\t') jb_raw(b, "\\t", 2);
        else jb_raw(b, esc, 6);
    }
    jb_raw(b, s + n - run, run);
    jb_raw(b, "\"", 1);
}

void jb_uint_padded(jbuf *b, uint64_t v, int width) {
    char digits[24];
    int n = 0;
    do {
        digits[sizeof digits - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n < width && n < (int)sizeof digits) digits[sizeof digits - 1 - n++] = '0';
    jb_raw(b, digits + sizeof digits - n, (size_t)n);
}

void jb_uint(jbuf *b, uint64_t v) { jb_uint_padded(b, v, 1); }

void jb_int(jbuf *b, int64_t v) {
    if (v < 0) {
        jb_raw(b, "-", 1);
        jb_uint(b, (uint64_t)0 - (uint64_t)v);
    } else {
        jb_uint(b, (uint64_t)v);
    }
}

void jb_value(jbuf *b, const jval *v) {
    switch (v->type) {
    case J_NULL: jb_lit(b, "null"); return;
    case J_BOOL: jb_lit(b, v->boolean ? "true" : "false"); return;
    case J_NUMBER: jb_raw(b, v->str, v->len); return;
    case J_STRING: jb_str(b, v->str, v->len); return;
    case J_ARRAY:
    case J_OBJECT:
        jb_raw(b, v->type == J_ARRAY ? "[" : "{", 1);
        for (const jval *m = v->first; m != NULL; m = m->next) {
            if (m != v->first) jb_raw(b, ",", 1);
            if (v->type == J_OBJECT) {
                jb_str(b, m->key, m->key_len);
                jb_raw(b, ":", 1);
            }
            jb_value(b, m);
        }
        jb_raw(b, v->type == J_ARRAY ? "]" : "}", 1);
        return;
    }
}

void jb_free(jbuf *b) {
    free(b->buf);
    *b = (jbuf){0};
}

int64_t parse_counter(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    while (n > i && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    bool neg = i < n && s[i] == '-';
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    if (i == n) return 0;
    uint64_t mag = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (mag > (limit - d) / 10) return 0;
        mag = mag * 10 + d;
    }
    return neg ? (int64_t)(0 - mag) : (int64_t)mag;
}
