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
    if (!isfinite(v)) {
        snprintf(buf, size, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return buf;
    }
    /* The fewest significant digits that read back as v (nine always do)... */
    char sci[32];
    int prec = 1;
    for (; prec <= 9; prec++) {
        snprintf(sci, sizeof(sci), "%.*e", prec - 1, (double)v);
        if (strtof(sci, NULL) == v)
            break;
    }
    /* ...written positionally when that is short (1e-5 <= |v| < 1e16), else
     * in scientific notation. */
    int exp10 = atoi(strchr(sci, 'e') + 1);
    if (exp10 >= -5 && exp10 < 16) {
        int decimals = prec - 1 - exp10;
        snprintf(buf, size, "%.*f", decimals > 0 ? decimals : 0, (double)v);
    } else {
        snprintf(buf, size, "%s", sci);
    }
    return buf;
}
