/*
 * json.h - a small JSON reader for what zps itself writes: metrics lines and
 * server STATS replies. It builds a tree of values from one document.
 *
 * Not a general-purpose library: numbers are doubles (integers up to 2^53
 * are exact), strings are kept as written between the quotes with the
 * escapes \" \\ \/ \b \f \n \r \t decoded (\uXXXX is kept verbatim), and
 * nesting is limited to 64 levels. Objects keep their keys in order; lookup is
 * linear, which is what objects of a few dozen keys want.
 *
 * A tree is owned by the caller of zps_json_parse and released with
 * zps_json_free. Not thread-safe per tree; distinct trees are independent.
 * Nothing here blocks. The accessors return pointers into the tree, valid
 * until zps_json_free.
 *
 * Not here: writing JSON (strbuf.h, zps_strbuf_json_string); what the
 * documents mean (worker/metrics.h, tool/runstats.h, server/).
 */
#ifndef ZPS_JSON_H
#define ZPS_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum zps_json_type {
    ZPS_JSON_NULL,
    ZPS_JSON_BOOL,
    ZPS_JSON_NUMBER,
    ZPS_JSON_STRING,
    ZPS_JSON_ARRAY,
    ZPS_JSON_OBJECT,
} zps_json_type_t;

typedef struct zps_json zps_json_t;
struct zps_json {
    zps_json_type_t type;
    bool boolean;
    double number;
    char *string;      /* STRING: NUL-terminated */
    size_t count;      /* ARRAY, OBJECT: number of items */
    zps_json_t *items; /* ARRAY, OBJECT: [count] values */
    char **keys;       /* OBJECT: [count] keys */
};

/*
 * Parses one JSON document (surrounding white space allowed). Returns 0 and
 * *out (caller frees with zps_json_free), ZPS_EINVAL with a reason and its
 * byte offset in err ("expected ':' at offset 5"; err may be NULL), or
 * ZPS_ENOMEM. *out is written only on success; `text` is only read.
 */
int zps_json_parse(const char *text, zps_json_t **out, char *err, size_t err_size);
void zps_json_free(zps_json_t *v); /* NULL is a no-op */

/* The value under `key` of an object, or NULL (also when v is not an object). */
const zps_json_t *zps_json_get(const zps_json_t *v, const char *key);
/* The number v holds, or `otherwise` when v is NULL or not a number. */
double zps_json_number(const zps_json_t *v, double otherwise);
/* The string v holds, or NULL. */
const char *zps_json_string(const zps_json_t *v);
/* True when v is the boolean true (false when NULL or anything else). */
bool zps_json_true(const zps_json_t *v);
/* Item i of an array, or NULL. */
const zps_json_t *zps_json_at(const zps_json_t *v, size_t i);

#endif
