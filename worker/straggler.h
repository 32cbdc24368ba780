/*
 * straggler.h - how long a worker's step is made to take: the base step time
 * (compute padded to a fixed length by sleeping) and the stragglers injected
 * on purpose, as a pure, seeded schedule.
 *
 * A step's "work" is its compute (data, forward, backward) padded up to the
 * base step time. On the ranks it applies to, the schedule then adds:
 *
 *   slowdown K            (K - 1) * work         every step: the step takes K times as long
 *   intermittent K:P      (K - 1) * work         with probability P, independently per step
 *   fixed MS              MS                     every step
 *   random exp:M          Exp(mean M)            every step
 *   random uniform:M      Uniform[0, 2M)         every step
 *   pause T:MS            MS                     once, in the step of clock T
 *
 * The random draws of (seed, rank, clock) come from their own xoshiro256**
 * stream, so a step's delay does not depend on which steps came before, on
 * the order of calls, or on the other settings: the same seed gives every
 * mode of a study the same straggler events.
 *
 * Not here: sleeping and timing (trainer.c), the flags that fill a config
 * (straggler_flags.h). No I/O, no allocation; a config is plain data and may
 * be shared between threads, and every function here may be called from any
 * thread.
 */
#ifndef ZPS_STRAGGLER_H
#define ZPS_STRAGGLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum zps_delay_dist {
    ZPS_DELAY_NONE = 0,
    ZPS_DELAY_EXP,     /* exponential with the given mean */
    ZPS_DELAY_UNIFORM, /* uniform on [0, 2 * mean) */
} zps_delay_dist_t;

/* Ranks a schedule applies to: all, or up to ZPS_STRAGGLER_RANGES ranges [lo, hi]. */
#define ZPS_STRAGGLER_RANGES 16
typedef struct zps_rank_set {
    bool all;
    uint32_t count;
    uint32_t lo[ZPS_STRAGGLER_RANGES], hi[ZPS_STRAGGLER_RANGES];
} zps_rank_set_t;

typedef struct zps_straggler_config {
    double base_step_ms; /* pad every step's compute to this (0: no padding); all ranks */

    zps_rank_set_t ranks;  /* where the settings below apply */
    double slowdown;       /* K >= 1; 1: off */
    double intermittent_k; /* K >= 1; 1: off */
    double intermittent_p; /* P in [0, 1] */
    double fixed_ms;       /* >= 0 */
    zps_delay_dist_t dist;
    double mean_ms; /* random delay mean, >= 0 */
    bool pause;
    uint64_t pause_clock;
    double pause_ms;
    uint64_t seed;
} zps_straggler_config_t;

/* No padding, no stragglers, all ranks, seed 1. */
void zps_straggler_config_default(zps_straggler_config_t *cfg);

/*
 * Checks the ranges of every field. Returns 0, or ZPS_EINVAL with a one-line
 * reason in why that starts with the flag to fix.
 */
int zps_straggler_check(const zps_straggler_config_t *cfg, char *why, size_t why_size);

/* True if any straggler setting (not the padding) is on and applies to `rank`. */
bool zps_straggler_applies(const zps_straggler_config_t *cfg, uint32_t rank);

/* One step's schedule. Every field is in milliseconds and >= 0. */
typedef struct zps_step_delay {
    double pad_ms;          /* base step time minus compute, when compute is shorter */
    double slowdown_ms;     /* persistent slowdown */
    double intermittent_ms; /* intermittent slowdown (0 on steps it misses) */
    double fixed_ms;
    double random_ms;
    double pause_ms;
    double delay_ms; /* the injected delay: the sum of the five above (padding excluded) */
} zps_step_delay_t;

/*
 * The schedule for `rank`'s step at `clock` whose compute took `compute_ms`.
 * A pure function of its arguments; writes *out.
 */
void zps_straggler_delay(const zps_straggler_config_t *cfg, uint32_t rank, uint64_t clock,
                         double compute_ms, zps_step_delay_t *out);

/*
 * Value parsers for the flags. Each returns 0 and fills its outputs, or
 * ZPS_EINVAL (outputs untouched). Ranges are judged by zps_straggler_check.
 *   ranks:         "all", or "R", "R1-R2", comma-separated: "0,2-3"
 *   random:        "exp:MEAN" or "uniform:MEAN" (milliseconds)
 *   intermittent:  "K:P", e.g. "4:0.1"
 *   pause:         "T:MS", e.g. "100:2000"
 */
int zps_straggler_parse_ranks(const char *s, zps_rank_set_t *out);
int zps_straggler_parse_random(const char *s, zps_delay_dist_t *dist, double *mean_ms);
int zps_straggler_parse_intermittent(const char *s, double *k, double *p);
int zps_straggler_parse_pause(const char *s, uint64_t *clock, double *ms);

/* True if `rank` is in the set. */
bool zps_rank_set_has(const zps_rank_set_t *set, uint32_t rank);

/*
 * A one-line description of the settings that apply to `rank`, e.g.
 * "base step 20 ms; slowdown 4" or "base step 20 ms" or "none". Returns buf.
 */
char *zps_straggler_describe(const zps_straggler_config_t *cfg, uint32_t rank, char *buf,
                             size_t size);

#endif
