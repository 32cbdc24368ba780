/*
 * reply.c - building and sending replies; see reply.h.
 */
#include "reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "error.h"
#include "log.h"
#include "timeutil.h"

/*
 * A flood of bad requests must not become a flood of log lines: at most 20
 * warnings per 10-second window.
 */
static bool log_allowed(zps_daemon_t *d)
{
    uint64_t window = zps_now_ns() / 10000000000ull;
    if (window != d->error_log_window) {
        d->error_log_window = window;
        d->errors_logged = 0;
    }
    return d->errors_logged++ < 20;
}

/*
 * A pull reply to a worker with a shared-memory session that asked for one
 * (shm.h): the parameters go into a buffer lent to the session, and h says
 * which. False when the reply carries them itself.
 */
static bool shm_reply(zps_daemon_t *d, const zps_request_t *r, zps_header_t *h)
{
    if (!(r->hdr->flags & ZPS_FLAG_SHM) || h->worker < 0 || r->peer->session)
        return false;
    zps_shm_session_t *x = zps_shm_find(&d->shm, r->peer->fd);
    if (!x || x->rank != (uint32_t)h->worker)
        return false;
    uint32_t buf, crc;
    if (zps_shm_lend(&d->shm, x, d->store.params, d->store.len,
                     zps_consistency_version(d->consistency), &buf, &crc) != 0)
        return false;
    h->flags |= ZPS_FLAG_SHM;
    h->shm_buffer = buf;
    h->checksum = crc;
    h->length = d->store.len;
    return true;
}

void zps_reply_send(zps_daemon_t *d, const zps_request_t *r, zps_header_t *h)
{
    h->reply = true;
    h->version = ZPS_PROTOCOL_VERSION;
    int rc;
    /* A request that came sealed is answered sealed, on the socket it came
     * on; a session that has ended since (its CURVE connection closed) gets
     * nothing: its client opens a new one and asks again. */
    bool payload = zps_wire_wants_payload(h);
    zps_session_t *session = NULL;
    if (r->peer->session) {
        session = zps_sessions_by_number(&d->sessions, r->peer->session);
        if (!session) {
            d->count.replies_dropped++;
            return;
        }
        session->used_ns = zps_now_ns();
    }
    if (zps_wire_wants_payload(h) && shm_reply(d, r, h)) {
        rc = zps_wire_send(d->sock, r->peer, h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
    } else if (zps_wire_wants_payload(h)) {
        /* Observers have a cache of their own: replies they leave unread
         * cannot hold the copies the workers' pulls need; and in the
         * workers' cache each rank holds its own share, so a rank that
         * does not read its replies is refused, not the others. A client
         * that asks for bfloat16 gets the parameters rounded, from caches
         * of their own. */
        bool bf16 = (r->hdr->flags & ZPS_FLAG_BF16) != 0;
        zps_reply_cache_t *cache = h->worker < 0
                                       ? (bf16 ? &d->observer_cache16 : &d->observer_cache)
                                       : (bf16 ? &d->reply_cache16 : &d->reply_cache);
        if (bf16)
            h->flags |= ZPS_FLAG_BF16;
        zmq_msg_t m;
        size_t rank = h->worker < 0 ? 0 : (size_t)h->worker;
        int got =
            zps_reply_cache_get(cache, d->store.params, d->store.len,
                                zps_consistency_version(d->consistency), rank, &m, &h->checksum);
        if (got == ZPS_EBUSY) {
            if (h->worker < 0)
                zps_reply_error(d, r, ZPS_EBUSY,
                                "observers' replies not yet read hold their %zu copies of the "
                                "parameters; pull again later",
                                cache->share);
            else
                zps_reply_error(d, r, ZPS_EBUSY,
                                "worker %d's replies not yet read hold its %zu copies of the "
                                "parameters; read them, then pull again",
                                h->worker, cache->share);
            return;
        }
        if (got != 0) {
            zps_error("out of memory for a %zu-element reply", d->store.len);
            return;
        }
        d->count.bytes_out += zmq_msg_size(&m);
        rc = session ? zps_wire_send_msg_sealed(d->seal_sock, r->peer, h, &m, &session->seal,
                                                ZMQ_DONTWAIT)
                     : zps_wire_send_msg(d->sock, r->peer, h, &m, ZMQ_DONTWAIT);
    } else if (session) {
        rc = zps_wire_send_sealed(d->seal_sock, r->peer, h, NULL, 0, false, &session->seal,
                                  ZMQ_DONTWAIT);
    } else {
        rc = zps_wire_send(d->sock, r->peer, h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
    }
    if (rc) {
        /* ROUTER_MANDATORY: the peer is gone, or it does not read its replies
         * and its queue is full. Dropping is what bounds our memory; a retry,
         * if it comes, is answered again: every request is idempotent. */
        d->count.replies_dropped++;
        if (log_allowed(d))
            zps_warn("reply to worker %d (request %llu) not sent: %s (%s)", h->worker,
                     (unsigned long long)h->request_id, zps_strerror(rc),
                     zmq_strerror(zmq_errno()));
        return;
    }
    d->count.msgs_out++;
    /* Delay compensation compares the parameters a worker's next push was
     * computed on with those it is applied to: keep what it was sent. */
    if (payload && d->dc_pulled && h->worker >= 0 &&
        (uint32_t)h->worker < d->cfg->consistency.workers && h->status == 0) {
        memcpy(d->dc_pulled + (size_t)h->worker * d->store.len, d->store.params,
               d->store.len * sizeof(float));
        d->dc_sent[h->worker] = true;
    }
}

/* An ERROR reply, logged at `level` (WARN rate-limited, DEBUG as it comes). */
static void reply_error(zps_daemon_t *d, const zps_request_t *r, enum zps_log_level level, int code,
                        const char *fmt, va_list ap)
{
    const zps_header_t *req = r->hdr;
    zps_header_t h;
    zps_header_init(&h, (enum zps_msg_type)(req->type <= ZPS_MSG_TYPE_MAX ? req->type : 0));
    h.request_id = req->request_id;
    h.worker = req->worker;
    h.clock = req->clock;
    h.status = code;
    h.flags = r->reply_flags;
    h.model_version = zps_consistency_version(d->consistency);
    h.min_clock = zps_consistency_min_clock(d->consistency);
    h.config_fingerprint = d->fingerprint;
    vsnprintf(h.error, sizeof(h.error), fmt, ap);
    zps_counters_error(&d->count, code);

    if (level != ZPS_LOG_WARN || log_allowed(d))
        zps_log(level, "refused request %llu from worker %d: %s (%s)",
                (unsigned long long)req->request_id, req->worker, h.error, zps_errname(code));
    zps_reply_send(d, r, &h);
}

void zps_reply_error(zps_daemon_t *d, const zps_request_t *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_error(d, r, ZPS_LOG_WARN, code, fmt, ap);
    va_end(ap);
}

void zps_reply_expected(zps_daemon_t *d, const zps_request_t *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_error(d, r, ZPS_LOG_DEBUG, code, fmt, ap);
    va_end(ap);
}

void zps_reply_header(const zps_daemon_t *d, const zps_request_t *r, zps_header_t *h)
{
    const zps_header_t *req = r->hdr;
    zps_header_init(h, (enum zps_msg_type)req->type);
    h->request_id = req->request_id;
    h->worker = req->worker;
    h->clock = req->clock;
    h->model_version = zps_consistency_version(d->consistency);
    h->min_clock = zps_consistency_min_clock(d->consistency);
    h->total = d->store.total;
    h->shard_index = d->cfg->shard_index;
    h->shard_count = d->cfg->shard_count;
    h->config_fingerprint = d->fingerprint;
    h->flags |= r->reply_flags;
    if (req->worker >= 0 && (uint32_t)req->worker < d->cfg->consistency.workers)
        h->next_clock = zps_consistency_pushed(d->consistency, (uint32_t)req->worker);
}
