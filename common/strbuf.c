/*
 * strbuf.c - see strbuf.h.
 */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void zps_strbuf_init(zps_strbuf_t *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->failed = false;
}

void zps_strbuf_fini(zps_strbuf_t *b)
{
    free(b->data);
    zps_strbuf_init(b);
}

char *zps_strbuf_take(zps_strbuf_t *b)
{
    char *s = b->failed ? NULL : b->data;
    if (b->failed)
        free(b->data);
    else if (!s)
        s = calloc(1, 1);
    zps_strbuf_init(b);
    return s;
}

static bool reserve(zps_strbuf_t *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void zps_strbuf_printf(zps_strbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void zps_strbuf_json_string(zps_strbuf_t *b, const char *s)
{
    zps_strbuf_printf(b, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            zps_strbuf_printf(b, "\\%c", c);
        else if (c < 0x20)
            zps_strbuf_printf(b, "\\u%04x", c);
        else
            zps_strbuf_printf(b, "%c", c);
    }
    zps_strbuf_printf(b, "\"");
}
