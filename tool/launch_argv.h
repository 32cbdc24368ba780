/*
 * launch_argv.h - command lines as growable, NULL-terminated string vectors,
 * for zps launch: building a child's argv, finding a flag's value in one
 * (either "--name=value" or "--name value"), and writing one shell-quoted.
 *
 * Not here: what a flag means or which values it takes (launch_opts.h and
 * the tables in worker/ and optimizer/), starting processes (launch.c). No
 * globals; a vector belongs to one thread at a time.
 */
#ifndef ZPS_LAUNCH_ARGV_H
#define ZPS_LAUNCH_ARGV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* v[0..n) are malloc'd copies and v[n] is NULL once anything was pushed.
 * A zero-initialised vector is empty and valid. */
typedef struct zps_argv {
    char **v;
    size_t n, cap;
} zps_argv_t;

/* Appends a copy of str. Returns 0 or ZPS_ENOMEM (s unchanged). */
int zps_argv_push(zps_argv_t *s, const char *str);

/* Appends a formatted string (at most 4095 bytes). Returns 0 or ZPS_ENOMEM. */
__attribute__((format(printf, 2, 3))) int zps_argv_pushf(zps_argv_t *s, const char *fmt, ...);

/* Appends copies of every string of `from`. Returns 0 or ZPS_ENOMEM (s may
 * hold some of them). */
int zps_argv_extend(zps_argv_t *s, const zps_argv_t *from);

/* Frees every string and the array; s is empty after. */
void zps_argv_free(zps_argv_t *s);

/*
 * Reads the flag at args->v[*i], which starts with "--": writes its name
 * (without "--" and "=value") to name[size]. With has_value, returns its
 * value: after '=', or the next item (then *i moves onto it); *missing says
 * that there is none. Without has_value, returns NULL. The value points into
 * args.
 */
const char *zps_argv_flag(const zps_argv_t *args, size_t *i, char *name, size_t size,
                          bool has_value, bool *missing);

/* The value of the last `--flag` in args (either form), or NULL. Points into args. */
const char *zps_argv_last_value(const zps_argv_t *args, const char *flag);

/* Writes argv on one line to f, each word shell-quoted when it needs it. Blocks on f. */
void zps_argv_write(FILE *f, const zps_argv_t *argv);

#endif
