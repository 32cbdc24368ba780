/*
 * reply_cache.c - the shared payload of pull replies; see reply_cache.h.
 */
#include "reply_cache.h"

#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "checksum.h"
#include "error.h"

/* ZeroMQ's free function for a pooled buffer: called from its I/O thread. */
static void reply_buf_released(void *data, void *hint)
{
    (void)data;
    atomic_store_explicit(&((zps_reply_buf_t *)hint)->busy, false, memory_order_release);
}

/* ZeroMQ's free function for a fresh copy: called from its I/O thread. */
static void fresh_released(void *data, void *hint)
{
    free(data);
    atomic_fetch_sub_explicit(&((zps_reply_cache_t *)hint)->fresh, 1, memory_order_release);
}

void zps_reply_cache_init(zps_reply_cache_t *c, size_t pool, size_t max_copies, bool bf16)
{
    memset(c, 0, sizeof(*c));
    c->bf16 = bf16;
    for (int i = 0; i < ZPS_REPLY_POOL; i++)
        atomic_init(&c->pool[i].busy, false);
    atomic_init(&c->fresh, 0);
    c->pool_size = pool < ZPS_REPLY_POOL ? pool : ZPS_REPLY_POOL;
    c->max_copies = max_copies > c->pool_size ? max_copies : c->pool_size;
}

void zps_reply_cache_drop(zps_reply_cache_t *c)
{
    if (c->cached)
        zmq_msg_close(&c->msg);
    c->cached = false;
}

void zps_reply_cache_fini(zps_reply_cache_t *c)
{
    for (int i = 0; i < ZPS_REPLY_POOL; i++) {
        free(c->pool[i].data);
        c->pool[i].data = NULL;
        c->pool[i].cap = 0;
    }
}

/* Bytes of one element of c's copies. */
static size_t elem_bytes(const zps_reply_cache_t *c)
{
    return c->bf16 ? sizeof(uint16_t) : sizeof(float);
}

/* A free pooled buffer of n elements, marked busy, or NULL when all are in flight. */
static zps_reply_buf_t *buf_take(zps_reply_cache_t *c, size_t n)
{
    for (size_t i = 0; i < c->pool_size && n > 0; i++) {
        zps_reply_buf_t *b = &c->pool[i];
        if (atomic_load_explicit(&b->busy, memory_order_acquire))
            continue;
        if (b->cap < n) {
            free(b->data);
            b->data = aligned_alloc(64, (n * elem_bytes(c) + 63) & ~(size_t)63);
            b->cap = b->data ? n : 0;
        }
        if (b->data) {
            atomic_store(&b->busy, true);
            return b;
        }
    }
    return NULL;
}

/* A message around pooled buffer b (which it returns when sent); b is freed on failure. */
static int buf_msg(const zps_reply_cache_t *c, zps_reply_buf_t *b, size_t len, zmq_msg_t *msg)
{
    if (zmq_msg_init_data(msg, b->data, len * elem_bytes(c), reply_buf_released, b) == 0)
        return 0;
    atomic_store(&b->busy, false);
    return ZPS_ENOMEM;
}

/* A fresh copy of n floats outside the pool, counted in c->fresh; ZPS_EBUSY at max_copies. */
static int fresh_msg(zps_reply_cache_t *c, size_t n, zmq_msg_t *msg)
{
    if (n == 0) /* an empty shard: nothing to hold */
        return zmq_msg_init_size(msg, 0) == 0 ? 0 : ZPS_ENOMEM;
    /* Only this thread adds copies; the I/O thread only removes them. */
    if (c->pool_size + atomic_load_explicit(&c->fresh, memory_order_acquire) >= c->max_copies)
        return ZPS_EBUSY;
    void *data = malloc(n * elem_bytes(c));
    if (!data)
        return ZPS_ENOMEM;
    size_t alive = atomic_fetch_add(&c->fresh, 1) + 1;
    if (alive > c->fresh_peak)
        c->fresh_peak = alive;
    if (zmq_msg_init_data(msg, data, n * elem_bytes(c), fresh_released, c) != 0) {
        free(data);
        atomic_fetch_sub(&c->fresh, 1);
        return ZPS_ENOMEM;
    }
    return 0;
}

/* Makes msg the cached payload of `version` with checksum crc; consumes msg. */
static void install(zps_reply_cache_t *c, zmq_msg_t *msg, uint64_t version, uint32_t crc)
{
    zmq_msg_init(&c->msg);
    zmq_msg_move(&c->msg, msg);
    zmq_msg_close(msg);
    c->cached = true;
    c->version = version;
    c->crc = crc;
}

int zps_reply_cache_get(zps_reply_cache_t *c, const float *params, size_t len, uint64_t version,
                        zmq_msg_t *m, uint32_t *crc)
{
    if (!c->cached || c->version != version) {
        /* Let go of the previous version first: its buffer comes back to the
         * pool as soon as the replies that carry it have left. */
        zps_reply_cache_drop(c);
        zps_reply_buf_t *b = buf_take(c, len);
        zmq_msg_t fresh;
        if (b) {
            if (buf_msg(c, b, len, &fresh) != 0)
                return ZPS_ENOMEM;
        } else {
            /* Every pooled buffer is still on its way out to slow readers. A
             * fresh copy is made while the copies alive stay within
             * max_copies; beyond that, readers that fall behind would hold
             * memory without bound: refuse. */
            int rc = fresh_msg(c, len, &fresh);
            if (rc)
                return rc;
        }
        install(c, &fresh, version,
                c->bf16 ? zps_bf16_narrow(zmq_msg_data(&fresh), params, len)
                        : zps_crc32c_copy(0, zmq_msg_data(&fresh), params, len * sizeof(float)));
    }
    zmq_msg_init(m);
    if (zmq_msg_copy(m, &c->msg) != 0)
        return ZPS_ENOMEM;
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
    atomic_store(&b->busy, false);
}

void zps_reply_cache_fill(zps_reply_cache_t *c, zps_reply_buf_t *b, size_t len, uint64_t version,
                          uint32_t crc)
{
    zmq_msg_t fresh;
    if (buf_msg(c, b, len, &fresh) == 0)
        install(c, &fresh, version, crc);
}
