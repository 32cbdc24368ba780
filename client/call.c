/*
 * call.c - the call engine. Every call is one exchange: build a request per
 * shard (call_begin), send them all, then poll the sockets until each
 * shard's reply with the call's request id is in, resending what is
 * unanswered and discarding replies to earlier requests (call_exchange).
 *
 * Gradients are pushed without copying: each shard's slice is handed to
 * ZeroMQ with a release callback that counts down `inflight`. Before a call
 * returns it waits for that count to reach zero, so the caller's buffer is
 * never read after the call. A request that may never leave (its server is
 * gone) would hold its buffer forever, so a failed call closes that shard's
 * socket, which makes ZeroMQ drop and release it, and opens a new one
 * (conn_reset). Owns conn_t's request, reply and outcome fields, the
 * client's zero-copy count and its last error.
 */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "log.h"
#include "timeutil.h"

#define RETRY_MAX_MS 8000
#define SEND_AGAIN_MS 50     /* a request the socket could not take is tried again after this */
#define WAIT_LOG_FACTOR 3    /* later wait records come this many times further apart */

__attribute__((format(printf, 2, 3))) void client_set_error(zps_client_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

/* ZeroMQ's release callback, run on its I/O thread. */
static void payload_released(void *data, void *hint)
{
    (void)data;
    zps_client_t *c = hint;
    pthread_mutex_lock(&c->mu);
    if (--c->inflight == 0)
        pthread_cond_broadcast(&c->released);
    pthread_mutex_unlock(&c->mu);
}

/* Waits until ZeroMQ holds no payload of ours, for at most ms (-1: forever). True when none. */
static bool wait_released(zps_client_t *c, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (ms >= 0) {
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&c->mu);
    while (c->inflight > 0) {
        if (ms < 0)
            pthread_cond_wait(&c->released, &c->mu);
        else if (pthread_cond_timedwait(&c->released, &c->mu, &until) == ETIMEDOUT)
            break;
    }
    bool done = c->inflight == 0;
    pthread_mutex_unlock(&c->mu);
    return done;
}

static int call_send(zps_client_t *c, conn_t *k)
{
    if (!k->sock)
        return ZPS_ESOCKET;
    if (k->shm_state == SHM_WANTED)
        shm_ask(c, k);
    if (shm_use(k)) {
        /* Only the header: the payload, if any, is in the slot. */
        int rc = zps_wire_send(k->sock, NULL, &k->req, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
        if (rc && rc != ZPS_EAGAIN)
            client_set_error(c, "%s: send failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
        if (rc == 0)
            k->drops_at_send = k->drops;
        return rc;
    }
    if (k->seal_state == SEAL_WANTED)
        seal_ask(c, k);
    if (k->seal_state == SEAL_ON) {
        /* Sealed into a message of its own: the caller's buffer is free at once. */
        int rc =
            zps_wire_send_sealed(k->dsock, NULL, &k->req, k->payload, k->payload ? k->count : 0,
                                 k->payload != NULL, &k->seal, ZMQ_DONTWAIT);
        if (rc && rc != ZPS_EAGAIN)
            client_set_error(c, "%s: send failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
        if (rc == 0)
            k->drops_at_send = k->drops;
        if (rc == 0 && !k->seal_tcp && k->seal_wait_ns == 0)
            k->seal_wait_ns = zps_now_ns();
        return rc;
    }
    zps_wire_free_fn *ffn = NULL;
    if (k->payload && k->count > 0) {
        pthread_mutex_lock(&c->mu);
        c->inflight++;
        pthread_mutex_unlock(&c->mu);
        ffn = payload_released;
    }
    /* A DEALER queues while its server is away, but not while it has no
     * pipe at all, as after a refused CURVE handshake until it reconnects:
     * so never wait here. ZPS_EAGAIN (nothing sent, the payload released)
     * is for the caller to try again soon. A payload's checksum was computed
     * with its finite check (slices_sum). */
    int rc = k->payload ? zps_wire_send_summed(k->sock, NULL, &k->req, k->payload, k->count, ffn, c,
                                               ZMQ_DONTWAIT)
                        : zps_wire_send(k->sock, NULL, &k->req, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
    if (rc && rc != ZPS_EAGAIN)
        client_set_error(c, "%s: send failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
    if (rc == 0)
        k->drops_at_send = k->drops;
    return rc;
}

/* Prepares request headers for every shard; the caller then fills in specifics. */
void call_begin(zps_client_t *c, enum zps_msg_type type)
{
    uint64_t id = ++c->next_id;
    c->err[0] = '\0';
    c->remote_status = 0;
    c->call = NULL;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        zps_message_close(&k->reply);
        k->have_reply = false;
        k->outcome = 0;
        k->took = false;
        k->active = true;
        k->pending = false;
        k->payload = NULL;
        k->count = 0;
        zps_header_init(&k->req, type);
        k->req.worker = c->opts.worker;
        k->req.request_id = id;
        k->req.shard_index = (uint32_t)i;
        k->req.shard_count = (uint32_t)c->nconns;
        /* What changes a shard says which configuration it was agreed for. */
        if (type == ZPS_MSG_INIT || type == ZPS_MSG_PUSH)
            k->req.config_fingerprint = c->fingerprint;
        if (c->opts.wire_bf16 && (type == ZPS_MSG_PULL || type == ZPS_MSG_PUSH))
            k->req.flags |= ZPS_FLAG_BF16;
        if (c->opts.fail_not_initialised && type == ZPS_MSG_PULL)
            k->req.flags |= ZPS_FLAG_NOT_INIT_NOW;
    }
}

static const char *request_name(const zps_header_t *h)
{
    switch (h->type) {
    case ZPS_MSG_INIT:
        return "init";
    case ZPS_MSG_PULL:
        return "pull";
    case ZPS_MSG_PUSH:
        return h->flags & ZPS_FLAG_EXCHANGE ? "exchange" : "push";
    case ZPS_MSG_STATS:
        return "stats";
    case ZPS_MSG_HEARTBEAT:
        return "heartbeat";
    case ZPS_MSG_CHECKPOINT:
        return "checkpoint";
    case ZPS_MSG_RELOAD_KEYS:
        return "reload-keys";
    default:
        return "request";
    }
}

/* Whether a reply of h's type answers request req: its own type, or PULL for an exchange. */
static bool reply_fits(const zps_header_t *req, const zps_header_t *h)
{
    if (h->type == req->type)
        return true;
    return req->type == ZPS_MSG_PUSH && (req->flags & ZPS_FLAG_EXCHANGE) &&
           h->type == ZPS_MSG_PULL;
}

/* Takes one reply off shard k's socket, if one is there. */
static int take_reply(zps_client_t *c, conn_t *k)
{
    for (;;) {
        zps_message_t m;
        /* Pull payloads are checksummed while they are copied out (copy_pulled). */
        int rc = zps_wire_recv_deferred(k->sock, ZMQ_DONTWAIT, false, &m);
        bool sealed = false;
        if (rc == ZPS_EAGAIN && k->dsock) {
            rc = zps_wire_recv_sealed(k->dsock, ZMQ_DONTWAIT, false, false, seal_find, k, &m);
            sealed = true;
        }
        if (rc == ZPS_EAGAIN)
            return 0;
        if (rc == ZPS_ESOCKET) {
            client_set_error(c, "%s: receive failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
            return rc;
        }
        if (sealed && rc == ZPS_ESEAL) {
            /* Nothing of it can be trusted. Only the server's notice that it
             * does not know the session changes anything: ask for a new one
             * and send again what it did not take. */
            if (m.seal_unknown && k->seal_state == SEAL_ON &&
                memcmp(m.seal_id, k->seal.id, ZPS_SEAL_ID_BYTES) == 0) {
                zps_debug("%s: the server no longer knows our sealed session", k->endpoint);
                seal_end(k);
                k->drops++;
                if (k->pending)
                    k->resend_at_ns = zps_now_ns();
            }
            zps_message_close(&m);
            continue;
        }
        if (!sealed && m.hdr.reply && m.hdr.type == ZPS_MSG_SESSION) {
            if (k->seal_state == SEAL_ASKED && m.hdr.request_id == k->seal_request_id)
                seal_granted(c, k, &m);
            zps_message_close(&m);
            continue;
        }
        if (!sealed && m.hdr.reply && m.hdr.type == ZPS_MSG_SHM) {
            if (k->shm_state == SHM_ASKED && m.hdr.request_id == k->shm_request_id)
                shm_granted(c, k, &m);
            zps_message_close(&m);
            continue;
        }
        bool ours = m.hdr.reply && m.hdr.request_id == k->req.request_id;
        if (ours && k->pending && (m.hdr.status == ZPS_ESHM || m.hdr.status == ZPS_ECHECKSUM) &&
            (k->req.flags & ZPS_FLAG_SHM)) {
            /* The server has no session for this connection (it dropped
             * and came back, or its segment is gone): over the socket, at
             * once; ask again. A gradient that failed its checksum in the
             * slot was scribbled on there by another process of this user:
             * over the socket, and the slot is not used again. */
            if (m.hdr.status == ZPS_ECHECKSUM)
                shm_give_up(k, "the gradient in its shared-memory slot was changed under us "
                               "(it failed its checksum at the server)");
            else
                zps_debug("%s: the server has no shared-memory session for us", k->endpoint);
            zps_message_close(&m);
            shm_end(k);
            if (call_send(c, k) != 0)
                k->resend_at_ns = zps_now_ns() + SEND_AGAIN_MS * 1000000ull;
            continue;
        }
        if (!ours || !k->pending) {
            /* A reply to an earlier request (answered twice after a resend,
             * or after that call gave up): not ours to use. */
            zps_message_close(&m);
            continue;
        }
        if (rc == 0 && !reply_fits(&k->req, &m.hdr)) {
            client_set_error(c, "%s: a reply of type %u to our %s request: not a zps server's answer",
                      k->endpoint, (unsigned)m.hdr.type, request_name(&k->req));
            zps_message_close(&m);
            return ZPS_ETYPE;
        }
        if (rc) {
            client_set_error(c, "%s: bad reply: %s", k->endpoint, zps_strerror(rc));
            zps_message_close(&m);
            return rc;
        }
        k->reply = m;
        k->have_reply = true;
        k->pending = false;
        if (m.hdr.status != 0) {
            k->outcome = ZPS_EREMOTE;
            /* The first refusal of the call is the one reported. */
            if (c->remote_status == 0) {
                c->remote_status = m.hdr.status;
                client_set_error(c, "%s: %s (%s)", k->endpoint,
                          m.hdr.error[0] ? m.hdr.error : zps_strerror(m.hdr.status),
                          zps_errname(m.hdr.status));
            }
            return ZPS_EREMOTE;
        }
    }
}

/* "10 s", or "1500 ms" for a time that is not whole seconds. */
static const char *format_ms(long ms, char *buf, size_t size)
{
    if (ms % 1000 == 0)
        snprintf(buf, size, "%ld s", ms / 1000);
    else
        snprintf(buf, size, "%ld ms", ms);
    return buf;
}

/* One record per server the call still waits for: which, for what, how long. */
static void log_waiting(zps_client_t *c, uint64_t since_ns, uint64_t now)
{
    char what[64], took[32];
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (!k->pending)
            continue;
        if (c->call)
            snprintf(what, sizeof(what), "%s", c->call);
        else if (k->req.type == ZPS_MSG_PULL || k->req.type == ZPS_MSG_PUSH)
            snprintf(what, sizeof(what), "%s (clock %llu)", request_name(&k->req),
                     (unsigned long long)k->req.clock);
        else
            snprintf(what, sizeof(what), "%s", request_name(&k->req));
        long ms = (long)((now - since_ns) / 1000000ull);
        format_ms(ms >= 1000 ? (ms + 500) / 1000 * 1000 : ms, took, sizeof(took));
        char why[400];
        if (k->up) {
            zps_info("waiting for server %zu at %s: no answer to %s for %s", i, k->endpoint, what,
                     took);
        } else {
            if (k->connect_errno)
                conn_connect_words(k->connect_errno, why, sizeof(why));
            else
                conn_why_unanswered(k->endpoint, why, sizeof(why));
            zps_warn("waiting for server %zu at %s: no answer to %s for %s (not connected: %s)", i,
                     k->endpoint, what, took, why);
        }
    }
}

/*
 * Sends the prepared requests of the active shards and waits for their
 * replies. Without `all` the first failure ends the wait; with it, a shard
 * that refuses or answers badly does not stop the wait for the others, so
 * each shard's outcome is known (k->outcome) and the first failure is
 * returned. On failure, every shard still waiting has its socket replaced;
 * either way no payload of the caller's is held by ZeroMQ on return.
 */
int call_exchange(zps_client_t *c, bool all)
{
    int rc = 0;
    int first = 0; /* with `all`: the first shard's failure */
    uint64_t now = zps_now_ns();
    const uint64_t start = now;
    uint64_t deadline =
        c->opts.timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)c->opts.timeout_ms * 1000000ull;
    uint64_t log_at =
        c->opts.wait_log_ms > 0 ? now + (uint64_t)c->opts.wait_log_ms * 1000000ull : UINT64_MAX;
    size_t waiting = 0;
    for (size_t i = 0; i < c->nconns && rc == 0; i++) {
        conn_t *k = &c->conns[i];
        if (!k->active)
            continue;
        conn_read_monitor(k);
        k->up_in_call = k->up;
        k->pending = true;
        k->backoff_ms = c->opts.retry_ms;
        k->resend_at_ns =
            c->opts.retry_ms > 0 ? now + (uint64_t)c->opts.retry_ms * 1000000ull : UINT64_MAX;
        rc = call_send(c, k);
        if (rc == ZPS_EAGAIN) {
            rc = 0;
            k->resend_at_ns = now + SEND_AGAIN_MS * 1000000ull;
        }
        waiting++;
    }

    while (rc == 0 && waiting > 0) {
        now = zps_now_ns();
        for (size_t i = 0; i < c->nconns; i++) {
            if (c->conns[i].pending) {
                conn_read_monitor(&c->conns[i]);
                seal_check_reached(&c->conns[i], now);
            }
        }
        /* A handshake the server refused will not succeed on a retry: say
         * so now rather than at the deadline. */
        for (size_t i = 0; i < c->nconns && rc == 0; i++) {
            conn_t *k = &c->conns[i];
            if (k->pending && k->auth_failed && !k->up) {
                client_set_error(c, "authentication failed for %s (%s)", k->endpoint,
                          k->auth_failed == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                              ? "the server does not accept this key"
                          : c->opts.curve
                              ? "the CURVE handshake failed: is --server-key this server's key?"
                              : "the server requires CURVE: give --key and --server-key");
                k->outcome = rc = ZPS_EAUTH;
            }
        }
        if (rc)
            break;
        /* A failed connection attempt: find out why, once per failure. A
         * refusal ends a one-shot caller's call now (fail_on_refused);
         * anyone else keeps waiting (ZeroMQ tries again), and is told at once
         * what it waits for and why. */
        for (size_t i = 0; i < c->nconns && rc == 0; i++) {
            conn_t *k = &c->conns[i];
            if (!k->pending || !k->retried || k->up ||
                (k->refusal_logged && !c->opts.fail_on_refused))
                continue;
            k->retried = false;
            k->connect_errno = conn_connect_reason(k->endpoint, 500);
            if (k->connect_errno == 0)
                continue;
            char words[128];
            conn_connect_words(k->connect_errno, words, sizeof(words));
            if (c->opts.fail_on_refused &&
                (k->connect_errno == ECONNREFUSED || k->connect_errno == ENOENT)) {
                client_set_error(c, "%s: %s", k->endpoint, words);
                k->outcome = rc = ZPS_EUNREACHABLE;
            } else if (!k->refusal_logged && c->opts.wait_log_ms > 0) {
                zps_warn("waiting for server %zu at %s: %s, retrying", i, k->endpoint, words);
                k->refusal_logged = true;
            }
        }
        if (rc)
            break;
        if (now >= deadline) {
            /* Name a server that was never there first: that is the likelier mistake. */
            char took[32];
            format_ms(c->opts.timeout_ms, took, sizeof(took));
            rc = ZPS_ETIMEDOUT;
            for (size_t i = 0; i < c->nconns; i++)
                if (c->conns[i].pending)
                    c->conns[i].outcome = c->conns[i].up_in_call ? ZPS_ETIMEDOUT : ZPS_EUNREACHABLE;
            for (size_t i = 0; i < c->nconns; i++) {
                conn_t *k = &c->conns[i];
                if (k->pending && !k->up_in_call) {
                    rc = ZPS_EUNREACHABLE;
                    char why[400];
                    conn_why_unanswered(k->endpoint, why, sizeof(why));
                    client_set_error(c, "no answer from %s within %s (%s)", k->endpoint, took, why);
                    break;
                }
            }
            /* With CURVE, a server that accepts the connection but never
             * completes the handshake holds another key than --server-key
             * (or is not a CURVE server). */
            for (size_t i = 0; c->opts.curve && rc == ZPS_EUNREACHABLE && i < c->nconns; i++) {
                conn_t *k = &c->conns[i];
                if (k->pending && !k->up_in_call && k->tcp_seen) {
                    rc = k->outcome = ZPS_EAUTH;
                    client_set_error(c,
                              "authentication failed for %s: connected, but no CURVE handshake "
                              "completed within %s (is --server-key this server's key?)",
                              k->endpoint, took);
                }
            }
            for (size_t i = 0; rc == ZPS_ETIMEDOUT && i < c->nconns; i++) {
                if (c->conns[i].pending) {
                    client_set_error(c, "%s: connected, but no reply within %s", c->conns[i].endpoint,
                              took);
                    break;
                }
            }
            break;
        }
        if (now >= log_at) {
            log_waiting(c, start, now);
            log_at = now + (uint64_t)c->opts.wait_log_ms * WAIT_LOG_FACTOR * 1000000ull;
        }
        uint64_t wake = deadline < log_at ? deadline : log_at;
        size_t n = 0;
        for (size_t i = 0; i < c->nconns; i++) {
            conn_t *k = &c->conns[i];
            if (!k->pending)
                continue;
            /* A request that carries values (INIT, PUSH, an exchange) is
             * sent again only when the connection it went out on has ended
             * since: TCP loses nothing while it lasts, and a shard's worth of
             * values sent twice is held twice by the server until the second
             * is acknowledged (an INIT of 64 MiB slowed past retry_ms by a
             * busy machine was). An exchange also waits on its rule as a
             * pull does. */
            bool carries = k->req.type == ZPS_MSG_INIT || k->req.type == ZPS_MSG_PUSH;
            if (k->resend_at_ns <= now && carries && k->up && k->drops == k->drops_at_send) {
                k->resend_at_ns = now + (uint64_t)k->backoff_ms * 1000000ull;
            } else if (k->resend_at_ns <= now) {
                zps_debug("%s: no reply after %d ms, sending request %llu again", k->endpoint,
                          k->backoff_ms, (unsigned long long)k->req.request_id);
                rc = call_send(c, k);
                if (rc == ZPS_EAGAIN) {
                    rc = 0;
                    k->resend_at_ns = now + SEND_AGAIN_MS * 1000000ull;
                } else if (rc != 0) {
                    break;
                } else if (c->opts.retry_ms <= 0) {
                    k->resend_at_ns = UINT64_MAX; /* sent once, as asked */
                } else {
                    k->backoff_ms =
                        k->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : k->backoff_ms * 2;
                    k->resend_at_ns = now + (uint64_t)k->backoff_ms * 1000000ull;
                }
            }
            if (k->resend_at_ns < wake)
                wake = k->resend_at_ns;
            if (k->seal_state == SEAL_ON && !k->seal_tcp && k->seal_wait_ns &&
                k->seal_wait_ns + SEAL_CONNECT_MS * 1000000ull < wake)
                wake = k->seal_wait_ns + SEAL_CONNECT_MS * 1000000ull;
            c->items[n].socket = k->sock;
            c->items[n].fd = 0;
            c->items[n].events = ZMQ_POLLIN;
            c->items[n].revents = 0;
            n++;
            /* The monitors too: a refused handshake ends the call now. */
            void *more[3] = {k->mon, k->dsock, k->dmon};
            for (size_t j = 0; j < 3; j++) {
                if (!more[j])
                    continue;
                c->items[n].socket = more[j];
                c->items[n].fd = 0;
                c->items[n].events = ZMQ_POLLIN;
                c->items[n].revents = 0;
                n++;
            }
        }
        if (rc)
            break;
        long wait_ms = wake == UINT64_MAX ? -1 : (long)((wake - now + 999999) / 1000000);
        if (zmq_poll(c->items, (int)n, wait_ms) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            client_set_error(c, "poll failed: %s", zmq_strerror(zmq_errno()));
            rc = ZPS_ESOCKET;
            break;
        }
        for (size_t i = 0; i < c->nconns && rc == 0; i++) {
            conn_t *k = &c->conns[i];
            if (!k->pending)
                continue;
            rc = take_reply(c, k);
            if (rc && all && rc != ZPS_ESOCKET) {
                /* This shard's answer is in, a refusal or a bad reply: note
                 * it, and keep waiting for the others'. */
                k->outcome = rc;
                k->pending = false;
                first = first ? first : rc;
                rc = 0;
            }
            if (!k->pending)
                waiting--;
        }
    }
    if (rc == 0)
        rc = first;

    if (rc) {
        /* Give ZeroMQ a moment to finish what it is sending, then drop what
         * cannot leave, so the caller's buffer is free. */
        if (!wait_released(c, 50)) {
            for (size_t i = 0; i < c->nconns; i++)
                if (c->conns[i].pending)
                    conn_reset(c, &c->conns[i]);
        }
        for (size_t i = 0; i < c->nconns; i++)
            c->conns[i].pending = false;
    }
    /* Normally immediate: a reply means the server had the whole payload. */
    while (!wait_released(c, 5000))
        zps_warn("still waiting for ZeroMQ to release a pushed buffer");
    return rc;
}

/* The replies that said OK, folded into info (NULL: nothing to do). */
void call_collect_info(zps_client_t *c, zps_reply_info_t *info)
{
    if (!info)
        return;
    memset(info, 0, sizeof(*info));
    info->min_version = UINT64_MAX;
    info->min_clock = UINT64_MAX;
    bool first = true;
    for (size_t i = 0; i < c->nconns; i++) {
        if (!c->conns[i].have_reply || c->conns[i].reply.hdr.status != 0)
            continue;
        const zps_header_t *h = &c->conns[i].reply.hdr;
        if (h->model_version < info->min_version)
            info->min_version = h->model_version;
        if (h->model_version > info->max_version)
            info->max_version = h->model_version;
        if (h->min_clock < info->min_clock)
            info->min_clock = h->min_clock;
        if (h->update_staleness > info->update_staleness)
            info->update_staleness = h->update_staleness;
        if (first || h->next_clock < info->next_clock)
            info->next_clock = h->next_clock;
        first = false;
        info->retried |= (h->flags & ZPS_FLAG_RETRY) != 0;
        info->dropped |= (h->flags & ZPS_FLAG_DROPPED) != 0;
        info->buffered |= (h->flags & ZPS_FLAG_BUFFERED) != 0;
        info->rejoined |= (h->flags & ZPS_FLAG_REJOINED) != 0;
        if (h->waited_us > info->waited_us)
            info->waited_us = h->waited_us;
        if (i == 0 && (h->flags & ZPS_FLAG_LEASE)) {
            info->leased = true;
            info->exhausted = (h->flags & ZPS_FLAG_EXHAUSTED) != 0;
            info->nleases = h->nleases <= ZPS_CLIENT_MAX_LEASES ? h->nleases : 0;
            memcpy(info->leases, h->leases, info->nleases * sizeof(uint64_t));
        }
    }
}

const char *zps_client_last_error(const zps_client_t *c)
{
    return c->err;
}

int zps_client_last_remote_status(const zps_client_t *c)
{
    return c->remote_status;
}
