/*
 * parse.h - strict parsing of flag values and lists, and exact float output.
 *
 * Every parser rejects empty strings, trailing garbage and out-of-range
 * values with ZPS_EINVAL and writes its output only on success, so a bad flag
 * never turns silently into 0. All are pure: no I/O, no globals, any
 * thread; they never keep a pointer to their input.
 *
 * Not here: the flags themselves and their messages (optimizer/opt_flags.h,
 * worker/, server/, tool/); shard specs "I/S" (shard.h).
 */
#ifndef ZPS_PARSE_H
#define ZPS_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Each returns 0 or ZPS_EINVAL. Decimal digits only, no sign, up to 2^64 - 1. */
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

/*
 * Parses a comma-separated list of float32 values (each as zps_parse_float).
 * Returns 0 with *out malloc'd (caller frees) and its length in *count,
 * ZPS_EINVAL or ZPS_ENOMEM; outputs are written only on success.
 */
int zps_parse_float_list(const char *s, float **out, size_t *count);

/*
 * Writes the shortest decimal that reads back (strtof) as exactly `v` into
 * buf (at least 32 bytes; "nan", "inf" or "-inf" for those). Returns buf.
 */
char *zps_format_float(float v, char *buf, size_t size);

#endif
