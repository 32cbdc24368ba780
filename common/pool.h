/*
 * pool.h - the process's helper threads, for work cut into chunks.
 *
 * One job at a time runs on the pool: its chunks are taken in turn, by an
 * atomic counter, by the calling thread and every helper, and the call
 * returns once every chunk is done. A caller that finds the pool busy with
 * another caller's job runs its own alone, so a job never waits for
 * another. The helpers (at most 7, no more than the CPUs less one) start
 * at the first call of zps_pool_run or zps_pool_lanes, take no signals and
 * live as long as the process.
 *
 * Used where one pass over a large buffer is cut into independent pieces:
 * sealing and opening a payload's chunks (seal.h), a shard's optimizer step
 * (server/store.h), a long copy's or scan's checksum (checksum.h, wire.h).
 * A chunk function's own zps_pool_run runs on its thread alone.
 */
#ifndef ZPS_POOL_H
#define ZPS_POOL_H

#include <stddef.h>

/* The most threads that run one job's chunks: the caller and the helpers. */
#define ZPS_POOL_LANES_MAX 8

/*
 * fn(arg, chunk, lane) for one chunk; lane names the thread that runs it
 * (0: the caller; 1 to zps_pool_lanes() - 1: a helper), so that a job can
 * give each thread its own scratch. No two chunks run on one lane at once.
 */
typedef void (*zps_pool_fn)(void *arg, size_t chunk, unsigned lane);

/*
 * How a pass over a long buffer is cut: chunks of at least
 * ZPS_POOL_CHUNK_MIN bytes (about what one thread's pass takes while
 * another is woken), at most ZPS_POOL_CHUNKS_MAX of them.
 * zps_pool_chunk(len, unit) is the chunk for len bytes, a multiple of unit;
 * zps_pool_chunks(len, chunk) how many it makes (0 for len 0). A buffer
 * below 2 ZPS_POOL_CHUNK_MIN is one chunk.
 */
#define ZPS_POOL_CHUNK_MIN ((size_t)1 << 20)
#define ZPS_POOL_CHUNKS_MAX 64
size_t zps_pool_chunk(size_t len, size_t unit);
size_t zps_pool_chunks(size_t len, size_t chunk);

/* The length of piece i of len cut into pieces of `chunk` (the last one the rest). */
static inline size_t zps_pool_piece(size_t i, size_t chunk, size_t len)
{
    return len - i * chunk < chunk ? len - i * chunk : chunk;
}

/* Runs fn for every chunk in [0, chunks), in any order; returns when all are done. */
void zps_pool_run(size_t chunks, zps_pool_fn fn, void *arg);

/* How many lanes a job may run on (starts the helpers): 1 to ZPS_POOL_LANES_MAX. */
unsigned zps_pool_lanes(void);

/*
 * At most `lanes` lanes for the jobs that start after it (clamped to 1 to
 * ZPS_POOL_LANES_MAX; 1: every job on its caller alone). For benchmarks
 * that compare one thread with several in one process.
 */
void zps_pool_cap(unsigned lanes);

#endif
