/*
 * json.c - recursive-descent JSON reader; see json.h.
 */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define MAX_DEPTH 64

typedef struct parser {
    const char *p;
    const char *start;
    int depth;
    int rc;
    char *err;
    size_t err_size;
} parser_t;

static void fail(parser_t *ps, int rc, const char *what)
{
    if (ps->rc)
        return;
    ps->rc = rc;
    if (ps->err && ps->err_size)
        snprintf(ps->err, ps->err_size, "%s at offset %zu", what, (size_t)(ps->p - ps->start));
}

static void skip_ws(parser_t *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ps->p++;
}

static void fini(zps_json_t *v)
{
    if (v->type == ZPS_JSON_STRING) {
        free(v->string);
    } else if (v->type == ZPS_JSON_ARRAY || v->type == ZPS_JSON_OBJECT) {
        for (size_t i = 0; i < v->count; i++) {
            fini(&v->items[i]);
            if (v->keys)
                free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof(*v));
}

/* A string literal after its opening quote; returns a malloc'd copy or NULL. */
static char *parse_string(parser_t *ps)
{
    const char *s = ps->p;
    size_t cap = 16, len = 0;
    char *out = malloc(cap);
    if (!out) {
        fail(ps, ZPS_ENOMEM, "out of memory");
        return NULL;
    }
    for (;;) {
        char c = *s++;
        if (c == '\0' || (unsigned char)c < 0x20) {
            ps->p = s - 1;
            fail(ps, ZPS_EINVAL, "unterminated string");
            free(out);
            return NULL;
        }
        if (c == '"')
            break;
        if (c == '\\') {
            char e = *s++;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                c = e;
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            case 'u':
                /* Kept as written: zps writes no \u escapes but control characters. */
                s -= 2;
                c = *s++;
                break;
            default:
                ps->p = s - 1;
                fail(ps, ZPS_EINVAL, "bad escape in string");
                free(out);
                return NULL;
            }
        }
        if (len + 2 > cap) {
            cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) {
                free(out);
                fail(ps, ZPS_ENOMEM, "out of memory");
                return NULL;
            }
            out = grown;
        }
        out[len++] = c;
    }
    out[len] = '\0';
    ps->p = s;
    return out;
}

static void parse_value(parser_t *ps, zps_json_t *v);

/* Grows an array or object's item storage to hold one more. */
static bool push_item(parser_t *ps, zps_json_t *v, size_t *cap, bool keyed)
{
    if (v->count < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 8;
    zps_json_t *items = realloc(v->items, ncap * sizeof(*items));
    if (!items) {
        fail(ps, ZPS_ENOMEM, "out of memory");
        return false;
    }
    v->items = items;
    if (keyed) {
        char **keys = realloc(v->keys, ncap * sizeof(*keys));
        if (!keys) {
            fail(ps, ZPS_ENOMEM, "out of memory");
            return false;
        }
        v->keys = keys;
    }
    *cap = ncap;
    return true;
}

static void parse_container(parser_t *ps, zps_json_t *v, bool object)
{
    v->type = object ? ZPS_JSON_OBJECT : ZPS_JSON_ARRAY;
    if (++ps->depth > MAX_DEPTH) {
        fail(ps, ZPS_EINVAL, "nested too deeply");
        return;
    }
    char close = object ? '}' : ']';
    size_t cap = 0;
    skip_ws(ps);
    if (*ps->p == close) {
        ps->p++;
        ps->depth--;
        return;
    }
    for (;;) {
        skip_ws(ps);
        if (!push_item(ps, v, &cap, object))
            return;
        zps_json_t *item = &v->items[v->count];
        memset(item, 0, sizeof(*item));
        if (object) {
            if (*ps->p != '"') {
                fail(ps, ZPS_EINVAL, "expected a key");
                return;
            }
            ps->p++;
            char *key = parse_string(ps);
            if (!key)
                return;
            v->keys[v->count] = key;
            v->count++; /* owned from here on, so errors below free it */
            skip_ws(ps);
            if (*ps->p != ':') {
                fail(ps, ZPS_EINVAL, "expected ':'");
                return;
            }
            ps->p++;
            parse_value(ps, item);
        } else {
            v->count++;
            parse_value(ps, item);
        }
        if (ps->rc)
            return;
        skip_ws(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            ps->depth--;
            return;
        }
        fail(ps, ZPS_EINVAL, object ? "expected ',' or '}'" : "expected ',' or ']'");
        return;
    }
}

static bool take_word(parser_t *ps, const char *w)
{
    size_t n = strlen(w);
    if (strncmp(ps->p, w, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static void parse_value(parser_t *ps, zps_json_t *v)
{
    skip_ws(ps);
    char c = *ps->p;
    if (c == '{' || c == '[') {
        ps->p++;
        parse_container(ps, v, c == '{');
    } else if (c == '"') {
        ps->p++;
        v->type = ZPS_JSON_STRING;
        v->string = parse_string(ps);
    } else if (take_word(ps, "true")) {
        v->type = ZPS_JSON_BOOL;
        v->boolean = true;
    } else if (take_word(ps, "false")) {
        v->type = ZPS_JSON_BOOL;
    } else if (take_word(ps, "null")) {
        v->type = ZPS_JSON_NULL;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        char *end;
        v->type = ZPS_JSON_NUMBER;
        v->number = strtod(ps->p, &end);
        if (end == ps->p)
            fail(ps, ZPS_EINVAL, "bad number");
        ps->p = end;
    } else {
        fail(ps, ZPS_EINVAL, c ? "unexpected character" : "unexpected end of text");
    }
}

int zps_json_parse(const char *text, zps_json_t **out, char *err, size_t err_size)
{
    parser_t ps = {text, text, 0, 0, err, err_size};
    zps_json_t *v = calloc(1, sizeof(*v));
    if (!v)
        return ZPS_ENOMEM;
    parse_value(&ps, v);
    if (!ps.rc) {
        skip_ws(&ps);
        if (*ps.p)
            fail(&ps, ZPS_EINVAL, "trailing characters");
    }
    if (ps.rc) {
        zps_json_free(v);
        return ps.rc;
    }
    *out = v;
    return 0;
}

void zps_json_free(zps_json_t *v)
{
    if (!v)
        return;
    fini(v);
    free(v);
}

const zps_json_t *zps_json_get(const zps_json_t *v, const char *key)
{
    if (!v || v->type != ZPS_JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < v->count; i++)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

double zps_json_number(const zps_json_t *v, double otherwise)
{
    return v && v->type == ZPS_JSON_NUMBER ? v->number : otherwise;
}

const char *zps_json_string(const zps_json_t *v)
{
    return v && v->type == ZPS_JSON_STRING ? v->string : NULL;
}

bool zps_json_true(const zps_json_t *v)
{
    return v && v->type == ZPS_JSON_BOOL && v->boolean;
}

const zps_json_t *zps_json_at(const zps_json_t *v, size_t i)
{
    if (!v || v->type != ZPS_JSON_ARRAY || i >= v->count)
        return NULL;
    return &v->items[i];
}
