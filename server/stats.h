/*
 * stats.h - the shard's counters, and the JSON of a STATS reply built from
 * them and from the rest of the shard's state.
 *
 * The counters are plain integers, bumped on the loop's thread wherever the
 * event happens (handlers.c, reply.c, ckpt_queue.c); this file reads them
 * and never changes the shard. The JSON's keys are an external interface
 * (zps launch, the tests and docs read them): they never change.
 *
 * Not here: the histograms' own arithmetic (common/hist.h), the handler of
 * a STATS request (handlers.c).
 */
#ifndef ZPS_STATS_H
#define ZPS_STATS_H

#include <stdint.h>

struct zps_daemon;

typedef struct zps_counters {
    uint64_t msgs_in, msgs_out, bytes_in, bytes_out;
    uint64_t inits, pulls, pushes, heartbeats, stats;
    uint64_t applied, buffered, retries, dropped, steps, errors, replies_dropped;
    /* Shared data assignment (shard 0): pushes applied whose batch was no longer the
     * worker's lease (handed out again after an eviction), so not counted; finish notices. */
    uint64_t lease_lost, finished;
    uint64_t checkpoints, checkpoint_failures;
    uint64_t steps_refused;      /* steps (BSP) or pushes applied on arrival refused: not finite */
    uint64_t checks_background;  /* received payloads checked off the loop's thread */
    uint64_t steps_background;   /* BSP steps and pushes applied, off the loop's thread */
    uint64_t buffered_discarded; /* BSP: buffered pushes of refused steps */
    uint64_t pulls_cancelled;    /* waiting pulls whose connection closed */
    uint64_t exchanges;          /* pushes that were exchanges (each also counts as a pull) */
    uint64_t errors_by_code[32]; /* by -code */
    uint64_t not_initialised;    /* ZPS_ENOTINIT replies: a cluster's start (a worker's
                                  * shared-memory session asked for before INIT), not errors */
} zps_counters_t;

/* Counts one ERROR reply with status `code` (a ZPS_E* code): in errors and
 * errors_by_code, but ZPS_ENOTINIT in not_initialised alone. */
void zps_counters_error(zps_counters_t *c, int code);

/*
 * The STATS reply's JSON for the shard's current state. Returns a string the
 * caller frees, or NULL when out of memory. Loop thread; does not block.
 */
char *zps_stats_json(const struct zps_daemon *d);

#endif
