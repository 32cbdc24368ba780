/*
 * parse.h - strict parsing of flag values and lists, and exact float output.
 *
 * Every parser rejects empty strings, trailing garbage and out-of-range
 * values with ZPS_EINVAL and writes its output only on success, so a bad flag
 * never turns silently into 0.
 */
#ifndef ZPS_PARSE_H
#define ZPS_PARSE_H

#include <stddef.h>
#include <stdint.h>

int zps_parse_u64(const char *s, uint64_t *out);
/* Accepts values in [min, max]. */
int zps_parse_long(const char *s, long min, long max, long *out);
/* Finite values only. */
int zps_parse_double(const char *s, double *out);
/* Finite values that fit a float32. */
int zps_parse_float(const char *s, float *out);

/*
 * Splits "a,b,c" into a NULL-terminated array of strings. The array and the
 * strings are one allocation: free(*out) releases everything. Empty items are
 * refused. Returns 0, ZPS_EINVAL or ZPS_ENOMEM.
 */
int zps_parse_list(const char *s, char ***out, size_t *count);

/* Parses a comma-separated list of float32 values; *out is malloc'd. */
int zps_parse_float_list(const char *s, float **out, size_t *count);

/*
 * Writes the shortest decimal that reads back (strtof) as exactly `v` into
 * buf (at least 32 bytes). Returns buf.
 */
char *zps_format_float(float v, char *buf, size_t size);

#endif
