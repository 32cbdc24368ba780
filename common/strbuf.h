/*
 * strbuf.h - a growable text buffer, for building JSON and reports.
 *
 * The buffer owns its memory; zps_strbuf_fini releases it, zps_strbuf_take
 * hands it to the caller. An allocation failure is remembered (`failed`) and
 * later appends do nothing, so builders check once at the end. A buffer is
 * used by one thread at a time; nothing here blocks.
 *
 * Not here: reading JSON (json.h); numbers formatted for reading back
 * exactly (parse.h, zps_format_float).
 */
#ifndef ZPS_STRBUF_H
#define ZPS_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct zps_strbuf {
    char *data; /* always NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
    bool failed;
} zps_strbuf_t;

/* An empty buffer; allocates nothing yet. */
void zps_strbuf_init(zps_strbuf_t *b);
/* Frees the text and leaves `b` empty. */
void zps_strbuf_fini(zps_strbuf_t *b);
/* Returns the text (caller frees) and leaves `b` empty; NULL if an append failed. */
char *zps_strbuf_take(zps_strbuf_t *b);

/* Appends printf-formatted text; on allocation failure sets `failed`. */
void zps_strbuf_printf(zps_strbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends `s` as a JSON string literal, quotes included. */
void zps_strbuf_json_string(zps_strbuf_t *b, const char *s);

#endif
