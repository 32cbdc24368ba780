/*
 * hist.h - two histograms that count without allocating: one over small
 * integers (a shard's update staleness of applied pushes, in updates) and one
 * over durations with about 6% resolution (how long pulls waited).
 *
 * Plain structs, zeroed to start; no I/O, no locking: whoever owns one (a
 * server's loop, the launcher reading a run) updates it from one thread.
 * Not here: what a shard counts about itself (server/), how `zps launch`
 * merges the servers' histograms (tool/runstats.c).
 */
#ifndef ZPS_HIST_H
#define ZPS_HIST_H

#include <stdint.h>

#include "strbuf.h"

/* Integer histogram: exact counts for 0..ZPS_VHIST_EXACT-1, one overflow bucket. */
#define ZPS_VHIST_EXACT 64
typedef struct zps_vhist {
    uint64_t counts[ZPS_VHIST_EXACT];
    uint64_t overflow;
    uint64_t n;
    uint64_t max;
    uint64_t sum;
} zps_vhist_t;

/* Counts one sample. Never allocates or fails. */
void zps_vhist_add(zps_vhist_t *h, uint64_t value);
/* The sample of rank max(1, floor(q * n)) in sorted order (0 when empty); a
 * rank beyond the exact buckets gives the maximum. */
uint64_t zps_vhist_quantile(const zps_vhist_t *h, double q);
/* Appends {"count":..,"max":..,"mean":..,"p50":..,"p99":..,"histogram":{"0":n,...}}. */
void zps_vhist_json(const zps_vhist_t *h, zps_strbuf_t *b);

/* Samples <= v (exact: values below ZPS_VHIST_EXACT are counted one by one). */
uint64_t zps_vhist_count_le(const zps_vhist_t *h, uint64_t v);

/* Duration histogram, in nanoseconds: 16 sub-buckets per power of two. */
#define ZPS_THIST_SUB 16
#define ZPS_THIST_BUCKETS (64 * ZPS_THIST_SUB)
typedef struct zps_thist {
    uint64_t counts[ZPS_THIST_BUCKETS];
    uint64_t n;
    uint64_t max_ns;
    uint64_t sum_ns;
} zps_thist_t;

/* Counts one duration. Never allocates or fails. */
void zps_thist_add(zps_thist_t *h, uint64_t ns);
/* The top of the bucket that holds the sample of rank max(1, floor(q * n)),
 * capped at the maximum: at most 1/16 above it. Exact max for q = 1; 0 when empty. */
uint64_t zps_thist_quantile(const zps_thist_t *h, double q);
/* Appends {"count":..,"mean_ms":..,"p50_ms":..,"p99_ms":..,"max_ms":..}. */
void zps_thist_json(const zps_thist_t *h, zps_strbuf_t *b);

/*
 * Samples in the buckets that lie wholly at or below `ns`: the samples <= ns
 * to within one bucket (1/16 of a power of two) below ns.
 */
uint64_t zps_thist_count_le(const zps_thist_t *h, uint64_t ns);

#endif
