/*
 * shard.h - which part of the model a shard owns.
 *
 * The model is one flat float32 vector of N elements. Shard i of S owns the
 * contiguous range [floor(i*N/S), floor((i+1)*N/S)). Servers and clients both
 * call this one function, so they cannot disagree about it. When N < S some
 * shards own an empty range; that is legal and such a shard still takes part
 * in every clock. Pure functions; any thread.
 *
 * Not here: splitting and assembling vectors by range (client/slices.c, client.c);
 * holding a shard's values (server/); a shard's checkpoint (checkpoint/).
 */
#ifndef ZPS_SHARD_H
#define ZPS_SHARD_H

#include <stdint.h>

typedef struct zps_range {
    uint64_t lo; /* first element owned */
    uint64_t hi; /* one past the last element owned */
} zps_range_t;

/*
 * Computes the range of shard `index` of `count` for a model of `n` elements.
 * Returns 0, or ZPS_EINVAL when count == 0 or index >= count; *out is
 * written only on success.
 */
int zps_shard_range(uint64_t n, uint32_t index, uint32_t count, zps_range_t *out);

static inline uint64_t zps_range_len(zps_range_t r)
{
    return r.hi - r.lo;
}

/*
 * Parses "I/S" (for example "1/4") into index and count; requires S >= 1,
 * I < S. Returns 0 or ZPS_EINVAL; outputs are written only on success.
 */
int zps_shard_parse(const char *text, uint32_t *index, uint32_t *count);

#endif
