/*
 * straggler_flags.h - the step-time and straggler flags (--base-step-ms,
 * --slowdown, --delay, --random-delay, --intermittent, --pause-at,
 * --straggler-ranks, --straggler-seed), defined once as a table: each flag's
 * name, the parser that sets its fields of a zps_straggler_config_t, what a
 * bad value is told it should be, and its usage lines. zps-worker reads its
 * command line with it; zps launch checks the values it hands to workers,
 * and the KEYs of its --straggler, with the same table.
 *
 * A program gives getopt_long the entries of zps_straggler_flags_getopt, hands
 * the codes in [ZPS_STRAGGLER_FLAG_FIRST, ZPS_STRAGGLER_FLAG_END) to
 * zps_straggler_flag_apply and calls zps_straggler_flags_finish after the
 * last flag.
 *
 * Not here: the schedule and the ranges a setting must lie in (straggler.h,
 * zps_straggler_check), the value parsers of the compound values (straggler.h),
 * the getopt loops (worker/worker_main.c, tool/launch_opts.c). No I/O but
 * zps_straggler_flags_usage; no allocation; the table is constant and may be
 * read from any thread.
 */
#ifndef ZPS_STRAGGLER_FLAGS_H
#define ZPS_STRAGGLER_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "straggler.h"

/* The settings described by the flags seen so far. */
typedef struct zps_straggler_flags {
    zps_straggler_config_t cfg; /* starts as zps_straggler_config_default */
    bool have_seed;             /* --straggler-seed was given */
} zps_straggler_flags_t;

typedef struct zps_straggler_flag {
    const char *name; /* the flag without its "--": "slowdown" */
    /* A setting of the ranks it applies to, which zps launch --straggler
     * takes as a KEY (padding, ranks and seed are the run's, not a rank's). */
    bool per_rank;
    /* Sets the flag's fields of f->cfg (and f->have_seed) from `arg`.
     * Returns 0, or ZPS_EINVAL with f untouched. Ranges are not judged here. */
    int (*parse)(zps_straggler_flags_t *f, const char *arg);
    const char *expect; /* what a value should be: "a factor K >= 1" */
    const char *help;   /* its usage lines, indented by two spaces, each ending in '\n' */
} zps_straggler_flag_t;

/* Every flag, in the order of zps-worker's usage. */
#define ZPS_STRAGGLER_FLAG_COUNT 8
extern const zps_straggler_flag_t zps_straggler_flag_table[ZPS_STRAGGLER_FLAG_COUNT];

/* getopt_long codes: ZPS_STRAGGLER_FLAG_FIRST + the flag's index in the table. */
enum {
    ZPS_STRAGGLER_FLAG_FIRST = 0x4100, /* above any single character and the optimizer's */
    ZPS_STRAGGLER_FLAG_END = ZPS_STRAGGLER_FLAG_FIRST + ZPS_STRAGGLER_FLAG_COUNT,
};

struct option; /* <getopt.h> */

/*
 * Writes the table's ZPS_STRAGGLER_FLAG_COUNT getopt_long entries (every flag
 * takes a value) to out[0..COUNT), in table order, with val the flag's code.
 */
void zps_straggler_flags_getopt(struct option *out);

/* The flag named `name` (without "--"), or NULL. */
const zps_straggler_flag_t *zps_straggler_flag_find(const char *name);

/* The flag of getopt code `code`, or NULL when the code is not one of them. */
const zps_straggler_flag_t *zps_straggler_flag_of_code(int code);

/* Defaults: zps_straggler_config_default, no --straggler-seed seen. */
void zps_straggler_flags_init(zps_straggler_flags_t *f);

/*
 * Applies `flag` with value `arg`. Returns 0, or ZPS_EINVAL with
 * "invalid --slowdown 'x': expected a factor K >= 1" in why (f untouched).
 */
int zps_straggler_flag_apply(zps_straggler_flags_t *f, const zps_straggler_flag_t *flag,
                             const char *arg, char *why, size_t why_size);

/*
 * After the last flag: the seed of the random delays becomes `seed` (the
 * run's --seed) unless --straggler-seed was given, then the whole
 * configuration is checked (zps_straggler_check). Returns 0 or ZPS_EINVAL
 * with the reason in why.
 */
int zps_straggler_flags_finish(zps_straggler_flags_t *f, uint64_t seed, char *why, size_t why_size);

/* Writes every flag's usage lines to `out`, in table order. Blocks on the stream. */
void zps_straggler_flags_usage(FILE *out);

/*
 * The per-rank keys as an English list: "slowdown, delay, random-delay,
 * intermittent or pause-at". Returns buf (truncated to size).
 */
char *zps_straggler_flags_keys(char *buf, size_t size);

#endif
