/*
 * reply_cache.c - the shared payload of pull replies; see reply_cache.h.
 */
#include "reply_cache.h"

#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "error.h"

/* ZeroMQ's free function for a pooled buffer: called from its I/O thread. */
static void reply_buf_released(void *data, void *hint)
{
    (void)data;
    atomic_store_explicit(&((zps_reply_buf_t *)hint)->busy, false, memory_order_release);
}

void zps_reply_cache_init(zps_reply_cache_t *c)
{
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < ZPS_REPLY_POOL; i++)
        atomic_init(&c->pool[i].busy, false);
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

/* A free pooled buffer of n floats, marked busy, or NULL when all are in flight. */
static zps_reply_buf_t *buf_take(zps_reply_cache_t *c, size_t n)
{
    for (int i = 0; i < ZPS_REPLY_POOL && n > 0; i++) {
        zps_reply_buf_t *b = &c->pool[i];
        if (atomic_load_explicit(&b->busy, memory_order_acquire))
            continue;
        if (b->cap < n) {
            free(b->data);
            b->data = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
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
static int buf_msg(zps_reply_buf_t *b, size_t len, zmq_msg_t *msg)
{
    if (zmq_msg_init_data(msg, b->data, len * sizeof(float), reply_buf_released, b) == 0)
        return 0;
    atomic_store(&b->busy, false);
    return ZPS_ENOMEM;
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
            if (buf_msg(b, len, &fresh) != 0)
                return ZPS_ENOMEM;
        } else if (zmq_msg_init_size(&fresh, len * sizeof(float)) != 0) {
            /* (No pooled buffer: all are still on their way out to slow readers.) */
            return ZPS_ENOMEM;
        }
        install(c, &fresh, version,
                zps_crc32c_copy(0, zmq_msg_data(&fresh), params, len * sizeof(float)));
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

void zps_reply_cache_fill(zps_reply_cache_t *c, zps_reply_buf_t *b, size_t len, uint64_t version,
                          uint32_t crc)
{
    zmq_msg_t fresh;
    if (buf_msg(b, len, &fresh) == 0)
        install(c, &fresh, version, crc);
}
