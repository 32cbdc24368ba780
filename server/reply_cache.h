/*
 * reply_cache.h - the payload of pull replies: one copy of the parameters
 * per model version, shared by every pull of that version, in buffers from a
 * small pool.
 *
 * Later pushes change the parameters in place, so a pull reply carries a
 * copy, made once per version with its CRC32C. ZeroMQ counts references to
 * message content: W workers pulling the same version cost one copy, not W.
 * ZeroMQ sends the copy without copying it again and hands its buffer back,
 * from its I/O thread, once the last reply carrying it has left; the buffer
 * is then reused for a later version instead of allocating (and faulting
 * in) a shard-sized block for each one.
 *
 * The copies alive at once are bounded, per rank. A peer that never reads
 * its replies keeps the copies they carry alive (ZeroMQ queues up to its
 * high-water mark per peer, server.c), and under ASP every push makes a new
 * version. So each reply is its own message around the shared copy, whose
 * release ZeroMQ reports (from its I/O thread) to the rank the reply went
 * to: the replies a rank has not read may hold at most `share` distinct
 * copies (its pins), and a pull of that rank that would need another is
 * refused (ZPS_EBUSY), to that rank alone. Other ranks' pulls never wait on
 * its copies: they hold their own share. The copies alive at once are then
 * at most ranks x share + 1 (the cached one, which no reply may hold yet).
 * The server keeps two caches, one for workers (a share per worker rank)
 * and one for observers (one share for all of them, so that observers that
 * do not read cannot take the workers' copies, reply.c), and the same two
 * again for clients that ask for the parameters in bfloat16
 * (ZPS_FLAG_BF16), at half the bytes.
 *
 * Not here: sending the replies (reply.c), the parameters themselves
 * (store.h), when a version changes (consistency/). Every function runs on
 * the loop's thread, except the release callback ZeroMQ calls internally.
 */
#ifndef ZPS_REPLY_CACHE_H
#define ZPS_REPLY_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define ZPS_REPLY_POOL 4 /* most pooled buffers of a cache */

/*
 * The caches' bounds, in copies of the shard's parameters. Workers: a share
 * of ZPS_REPLY_SHARE copies per rank (the reply being read, and one more: a
 * resent pull's, or a buffer ZeroMQ has not handed back yet), so at most
 * W x ZPS_REPLY_SHARE + 1 alive. Observers: one share of
 * ZPS_REPLY_OBSERVER_COPIES - 1 for all of them, so at most
 * ZPS_REPLY_OBSERVER_COPIES alive; a pool of ZPS_REPLY_OBSERVER_POOL.
 */
#define ZPS_REPLY_SHARE 2
#define ZPS_REPLY_OBSERVER_POOL 2
#define ZPS_REPLY_OBSERVER_COPIES 4

struct zps_reply_cache;

/*
 * One copy of the parameters: a pooled buffer, or a fresh one allocated
 * when every pooled buffer is held. Free (and, if fresh, freed) when no one
 * holds it: the cache while it is the cached copy (or reserved for a step),
 * and each reply in flight that carries it.
 */
typedef struct zps_reply_buf {
    void *data; /* 64-byte aligned: float32 values, or bfloat16 in a bf16 cache */
    size_t cap; /* elements */
    atomic_uint refs;
    bool fresh; /* allocated outside the pool: freed, with this struct, at refs 0 */
    struct zps_reply_cache *cache;
} zps_reply_buf_t;

/* One of a rank's `share` pins: a copy its unread replies hold. */
typedef struct zps_reply_pin {
    zps_reply_buf_t *buf; /* meaningful while replies > 0 */
    atomic_uint replies;  /* this rank's replies in flight that carry buf */
} zps_reply_pin_t;

typedef struct zps_reply_cache {
    zps_reply_buf_t pool[ZPS_REPLY_POOL];
    size_t pool_size;      /* pooled buffers used, <= ZPS_REPLY_POOL */
    size_t ranks, share;   /* pins: share per rank */
    zps_reply_pin_t *pins; /* [ranks * share] */
    size_t max_copies;     /* ranks x share + 1: copies alive at once, pooled and fresh */
    atomic_size_t fresh;   /* fresh copies alive (outside the pool) */
    size_t fresh_peak;     /* the most fresh copies alive at once (only the loop adds them) */
    zps_reply_buf_t *cur;  /* the cached copy (the cache holds it), or NULL */
    uint64_t version;      /* of the cached copy */
    uint32_t crc;          /* its CRC32C */
    bool bf16;             /* its copies are bfloat16 (ZPS_FLAG_BF16 replies), not float32 */
    uint64_t refused;      /* pulls refused: their rank's share was held */
} zps_reply_cache_t;

/*
 * An empty cache that keeps up to `pool` reusable buffers (at most
 * ZPS_REPLY_POOL) and gives each of `ranks` ranks a share of `share`
 * copies. Nothing shard-sized is allocated until a pull needs it. `bf16`:
 * its copies are the parameters rounded to bfloat16 (bf16.h), half the
 * bytes, for the clients that ask for them. Returns 0 or ZPS_ENOMEM.
 */
int zps_reply_cache_init(zps_reply_cache_t *c, size_t pool, size_t ranks, size_t share, bool bf16);

/*
 * Drops the cached payload (the cache's reference to it); its buffer returns
 * to the pool once the replies carrying it have left.
 */
void zps_reply_cache_drop(zps_reply_cache_t *c);

/*
 * Frees the pool and the pins. Call only once ZeroMQ holds no message built
 * on it (after zmq_ctx_term), and after zps_reply_cache_drop.
 */
void zps_reply_cache_fini(zps_reply_cache_t *c);

/*
 * The pull payload of `version` for a reply to rank `rank` (< ranks):
 * params[len] (float32), copied (or rounded to bfloat16, in a bf16 cache)
 * and checksummed unless the cache holds that version already. On success
 * *m is a new message around the shared copy, counted against the rank's
 * share until ZeroMQ lets go of it (the caller sends or closes it), and
 * *crc its CRC32C; returns 0, ZPS_EBUSY when the rank's unread replies hold
 * its whole share of copies and this one is not among them, or ZPS_ENOMEM
 * (*m not initialised on failure).
 */
int zps_reply_cache_get(zps_reply_cache_t *c, const float *params, size_t len, uint64_t version,
                        size_t rank, zmq_msg_t *m, uint32_t *crc);

/*
 * For a step that writes the next version's copy in its own pass over
 * memory: drops the cached payload and reserves a free pooled buffer of len
 * elements (float32: not for a bf16 cache). Returns it, or NULL when every buffer is still in
 * flight (the next pull then copies the parameters itself).
 */
zps_reply_buf_t *zps_reply_cache_reserve(zps_reply_cache_t *c, size_t len);

/*
 * The most copies of the parameters this cache has held at once, as an upper
 * bound: the pooled buffers that hold memory (kept for reuse, their pages
 * stay resident) plus the peak of fresh copies. STATS `resident_copies`.
 */
size_t zps_reply_cache_copies_peak(const zps_reply_cache_t *c);

/* b (from zps_reply_cache_reserve) was not written after all: back to the pool. */
void zps_reply_cache_unreserve(zps_reply_cache_t *c, zps_reply_buf_t *b);

/*
 * Makes b (from zps_reply_cache_reserve, its first len floats written with
 * checksum crc) the cached payload of `version`. On failure the buffer goes
 * back to the pool and the cache stays empty.
 */
void zps_reply_cache_fill(zps_reply_cache_t *c, zps_reply_buf_t *b, size_t len, uint64_t version,
                          uint32_t crc);

#endif
