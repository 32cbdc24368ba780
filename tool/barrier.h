/*
 * barrier.h - who a shard's synchronous barrier waits for, read from its
 * STATS: the one computation behind `zps top`'s "waiting for" line and the
 * one `zps launch` adds to its progress line when the clock stalls.
 *
 * From docs/consistency.md, with pushed[w] the next clock a shard expects
 * from worker w (STATS `clocks`) and v its model version:
 *
 *   BSP  the step for clock v is taken once every live worker (W-B of them
 *        with B backup workers, never more than are live) has pushed v. It
 *        holds the others when some live worker has pushed v (pushed[w] > v)
 *        and the quorum is not reached: it waits for the live workers with
 *        pushed[w] <= v.
 *   SSP  a pull for clock t is answered once min_clock >= t - s. The fastest
 *        live worker f pulls for t = pushed[f] next; it is held when some
 *        live worker u has pushed[u] < t - s, and those are the ones it waits
 *        for.
 *   ASP  nothing ever waits.
 *
 * Evicted workers hold nobody back, so they are never named. Pure: plain
 * structs in and out, no I/O, no clock. Not thread-safe per struct.
 *
 * Not here: fetching STATS (zps/zps.h), drawing the screen (top.c),
 * the consistency rules themselves (consistency/consistency.c).
 */
#ifndef ZPS_BARRIER_H
#define ZPS_BARRIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "consistency.h"
#include "json.h"

/* What the rule needs of one shard's STATS. */
typedef struct zps_barrier_shard {
    uint32_t shard;
    zps_mode_t mode;
    uint32_t staleness_bound; /* SSP s, clocks */
    uint32_t backup_workers;  /* BSP B */
    bool initialized;
    uint64_t version;   /* v: optimizer steps applied */
    uint64_t min_clock; /* min over live workers of pushed[w] */
    uint32_t workers;   /* W */
    uint64_t *clocks;   /* [W] pushed[w] */
    bool *live;         /* [W] */
    double *silent_ms;  /* [W] how long since the shard last heard from w */
} zps_barrier_shard_t;

/*
 * Reads one shard's STATS reply (a parsed JSON object) into *out, whose
 * arrays it allocates (release with zps_barrier_shard_fini). Returns 0,
 * ZPS_EINVAL (not a STATS object: a field missing or of the wrong type, an
 * unknown mode, arrays not of W items) or ZPS_ENOMEM; *out is written only
 * on success. `stats` is only read.
 */
int zps_barrier_shard_parse(const zps_json_t *stats, zps_barrier_shard_t *out);
void zps_barrier_shard_fini(zps_barrier_shard_t *s); /* NULL, or a zeroed struct: no-op */

/* Ranks named in a wait at most; the rest are counted. */
#define ZPS_BARRIER_NAMED 4

typedef struct zps_barrier_wait {
    bool holding;    /* a live worker waits on the barrier */
    uint64_t clock;  /* BSP: the step's clock (v); SSP: the held pull's clock */
    uint32_t needed; /* pushes still needed to release it (BSP with backups: may be < count) */
    uint32_t count;  /* live workers whose push would release it */
    uint32_t rank[ZPS_BARRIER_NAMED]; /* the first of them, in rank order */
} zps_barrier_wait_t;

/* Who shard `s` waits for, by the rule above. Never fails; *out is always written. */
void zps_barrier_wait(const zps_barrier_shard_t *s, zps_barrier_wait_t *out);

/*
 * The "waiting for" line, e.g. "clock 812: waiting for worker 3, last heard
 * 14 s ago" (more workers: "...; worker 5, last heard 0.2 s ago"; BSP with
 * backups: "waiting for 1 push of worker 2, ...; worker 3, ..."; beyond
 * ZPS_BARRIER_NAMED: "and N more"). `held_s` >= 0 appends "; held N s" (how
 * long the shard's version has not moved, which only a caller watching over
 * time knows); < 0 appends nothing. Writes at most `size` bytes including
 * the NUL (truncating) and returns the length it wrote; an empty string
 * when nothing holds.
 */
size_t zps_barrier_line(const zps_barrier_shard_t *s, const zps_barrier_wait_t *w, double held_s,
                        char *buf, size_t size);

#endif
