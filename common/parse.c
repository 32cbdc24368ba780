/*
 * parse.c - see parse.h.
 */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

int zps_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return ZPS_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return ZPS_EINVAL;
    *out = v;
    return 0;
}

int zps_parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return ZPS_EINVAL;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return ZPS_EINVAL;
    *out = v;
    return 0;
}

int zps_parse_double(const char *s, double *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return ZPS_EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return ZPS_EINVAL;
    *out = v;
    return 0;
}

int zps_parse_float(const char *s, float *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return ZPS_EINVAL;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v))
        return ZPS_EINVAL;
    *out = v;
    return 0;
}

int zps_parse_list(const char *s, char ***out, size_t *count)
{
    if (!s || !*s)
        return ZPS_EINVAL;
    size_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    size_t len = strlen(s);
    char **v = malloc((n + 1) * sizeof(char *) + len + 1);
    if (!v)
        return ZPS_ENOMEM;
    char *text = (char *)(v + n + 1);
    memcpy(text, s, len + 1);
    size_t i = 0;
    for (char *item = text;; i++) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        if (!*item) {
            free(v);
            return ZPS_EINVAL;
        }
        v[i] = item;
        if (!comma)
            break;
        item = comma + 1;
    }
    v[n] = NULL;
    *out = v;
    *count = n;
    return 0;
}

int zps_parse_float_list(const char *s, float **out, size_t *count)
{
    char **items;
    size_t n;
    int rc = zps_parse_list(s, &items, &n);
    if (rc)
        return rc;
    float *v = malloc(n * sizeof(float));
    if (!v) {
        free(items);
        return ZPS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (zps_parse_float(items[i], &v[i]) != 0) {
            free(items);
            free(v);
            return ZPS_EINVAL;
        }
    }
    free(items);
    *out = v;
    *count = n;
    return 0;
}

char *zps_format_float(float v, char *buf, size_t size)
{
    /* Nine significant digits always round-trip a float32; try fewer first. */
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, size, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v || isnan(v))
            return buf;
    }
    return buf;
}
