/*
 * reply_cache.c - the shared payload of pull replies; see reply_cache.h.
 *
 * Threads: the loop's thread takes copies, pins and references; ZeroMQ's
 * I/O thread only lets go of them (reply_released). A pin's buffer is
 * written by the loop only while no reply counts on the pin, and read by
 * the I/O thread only before it lets go of its own reply, so the two never
 * race on it.
 */
#include "reply_cache.h"

#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "checksum.h"
#include "error.h"

/* Lets go of one hold on b; the last one frees it (a pooled buffer is then free for reuse). */
static void buf_unref(zps_reply_buf_t *b)
{
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->fresh) {
        zps_reply_cache_t *c = b->cache;
        free(b->data);
        free(b);
        atomic_fetch_sub_explicit(&c->fresh, 1, memory_order_release);
    }
}

/* ZeroMQ's free function for one reply: called from its I/O thread, once
 * the reply has been written out or dropped. */
static void reply_released(void *data, void *hint)
{
    (void)data;
    zps_reply_pin_t *p = hint;
    zps_reply_buf_t *b = p->buf;
    atomic_fetch_sub_explicit(&p->replies, 1, memory_order_release);
    buf_unref(b);
}

int zps_reply_cache_init(zps_reply_cache_t *c, size_t pool, size_t ranks, size_t share, bool bf16)
{
    memset(c, 0, sizeof(*c));
    c->bf16 = bf16;
    for (int i = 0; i < ZPS_REPLY_POOL; i++) {
        atomic_init(&c->pool[i].refs, 0);
        c->pool[i].cache = c;
    }
    atomic_init(&c->fresh, 0);
    c->pool_size = pool < ZPS_REPLY_POOL ? pool : ZPS_REPLY_POOL;
    c->ranks = ranks ? ranks : 1;
    c->share = share ? share : 1;
    c->max_copies = c->ranks * c->share + 1;
    c->pins = calloc(c->ranks * c->share, sizeof(*c->pins));
    if (!c->pins)
        return ZPS_ENOMEM;
    for (size_t i = 0; i < c->ranks * c->share; i++)
        atomic_init(&c->pins[i].replies, 0);
    return 0;
}

void zps_reply_cache_drop(zps_reply_cache_t *c)
{
    if (c->cur)
        buf_unref(c->cur);
    c->cur = NULL;
}

void zps_reply_cache_fini(zps_reply_cache_t *c)
{
    for (int i = 0; i < ZPS_REPLY_POOL; i++) {
        free(c->pool[i].data);
        c->pool[i].data = NULL;
        c->pool[i].cap = 0;
    }
    free(c->pins);
    c->pins = NULL;
}

/* Bytes of one element of c's copies. */
static size_t elem_bytes(const zps_reply_cache_t *c)
{
    return c->bf16 ? sizeof(uint16_t) : sizeof(float);
}

/* A free pooled buffer of n elements, held once, or NULL when all are held. */
static zps_reply_buf_t *buf_take(zps_reply_cache_t *c, size_t n)
{
    for (size_t i = 0; i < c->pool_size && n > 0; i++) {
        zps_reply_buf_t *b = &c->pool[i];
        if (atomic_load_explicit(&b->refs, memory_order_acquire) != 0)
            continue;
        if (b->cap < n) {
            free(b->data);
            b->data = aligned_alloc(64, (n * elem_bytes(c) + 63) & ~(size_t)63);
            b->cap = b->data ? n : 0;
        }
        if (b->data) {
            atomic_store(&b->refs, 1);
            return b;
        }
    }
    return NULL;
}

/* A fresh copy of n elements outside the pool, held once; NULL without memory or at max_copies. */
static zps_reply_buf_t *fresh_take(zps_reply_cache_t *c, size_t n, int *rc)
{
    /* Only this thread adds copies; the I/O thread only removes them. The
     * shares bound the copies alive already; this is the same bound again. */
    *rc = ZPS_EBUSY;
    if (c->pool_size + atomic_load_explicit(&c->fresh, memory_order_acquire) >= c->max_copies)
        return NULL;
    *rc = ZPS_ENOMEM;
    zps_reply_buf_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->data = malloc(n * elem_bytes(c));
    if (!b->data) {
        free(b);
        return NULL;
    }
    b->cap = n;
    b->fresh = true;
    b->cache = c;
    atomic_init(&b->refs, 1);
    size_t alive = atomic_fetch_add(&c->fresh, 1) + 1;
    if (alive > c->fresh_peak)
        c->fresh_peak = alive;
    return b;
}

/*
 * The pin of `rank` for a reply carrying b: the one already counting b's
 * replies, else a free one (then set to b). NULL when the rank's replies in
 * flight hold `share` other copies. With b NULL: whether a free pin exists.
 */
static zps_reply_pin_t *pin_for(zps_reply_cache_t *c, size_t rank, const zps_reply_buf_t *b)
{
    zps_reply_pin_t *p = &c->pins[rank * c->share], *free_pin = NULL;
    for (size_t i = 0; i < c->share; i++) {
        if (atomic_load_explicit(&p[i].replies, memory_order_acquire) == 0) {
            if (!free_pin)
                free_pin = &p[i];
        } else if (b && p[i].buf == b) {
            return &p[i];
        }
    }
    return free_pin;
}

int zps_reply_cache_get(zps_reply_cache_t *c, const float *params, size_t len, uint64_t version,
                        size_t rank, zmq_msg_t *m, uint32_t *crc)
{
    if (len == 0) { /* an empty shard: nothing to hold */
        *crc = 0;
        return zmq_msg_init_size(m, 0) == 0 ? 0 : ZPS_ENOMEM;
    }
    if (rank >= c->ranks)
        rank = c->ranks - 1;
    bool fresh_version = !c->cur || c->version != version;
    /* A new version is a copy no pin of this rank holds: refused before
     * anything is copied when the rank's share is all held. */
    zps_reply_pin_t *pin = pin_for(c, rank, fresh_version ? NULL : c->cur);
    if (!pin) {
        c->refused++;
        return ZPS_EBUSY;
    }
    if (fresh_version) {
        /* Let go of the previous version first: its buffer comes back to the
         * pool as soon as the replies that carry it have left. */
        zps_reply_cache_drop(c);
        zps_reply_buf_t *b = buf_take(c, len);
        if (!b) {
            /* Every pooled buffer is still on its way out to readers. */
            int rc;
            b = fresh_take(c, len, &rc);
            if (!b) {
                c->refused += rc == ZPS_EBUSY;
                return rc;
            }
        }
        c->cur = b;
        c->version = version;
        c->crc = c->bf16 ? zps_bf16_narrow(b->data, params, len)
                         : zps_crc32c_copy(0, b->data, params, len * sizeof(float));
    }
    zps_reply_buf_t *b = c->cur;
    if (atomic_load_explicit(&pin->replies, memory_order_acquire) == 0)
        pin->buf = b;
    atomic_fetch_add_explicit(&pin->replies, 1, memory_order_acq_rel);
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_acq_rel);
    if (zmq_msg_init_data(m, b->data, len * elem_bytes(c), reply_released, pin) != 0) {
        reply_released(NULL, pin);
        return ZPS_ENOMEM;
    }
    *crc = c->crc;
    return 0;
}

zps_reply_buf_t *zps_reply_cache_reserve(zps_reply_cache_t *c, size_t len)
{
    zps_reply_cache_drop(c);
    return buf_take(c, len);
}

size_t zps_reply_cache_copies_peak(const zps_reply_cache_t *c)
{
    size_t n = c->fresh_peak;
    for (int i = 0; i < ZPS_REPLY_POOL; i++)
        n += c->pool[i].data != NULL;
    return n;
}

void zps_reply_cache_unreserve(zps_reply_cache_t *c, zps_reply_buf_t *b)
{
    (void)c;
    buf_unref(b);
}

void zps_reply_cache_fill(zps_reply_cache_t *c, zps_reply_buf_t *b, size_t len, uint64_t version,
                          uint32_t crc)
{
    (void)len;
    zps_reply_cache_drop(c);
    c->cur = b;
    c->version = version;
    c->crc = crc;
}
