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
#define SEND_AGAIN_MS 50  /* a request the socket could not take is tried again after this */
#define WAIT_LOG_FACTOR 3 /* later wait records come this many times further apart */

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

/* Counts a payload lent to ZeroMQ without copying; returns the callback that gives it back. */
zps_wire_free_fn *call_lend_payload(zps_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->inflight++;
    pthread_mutex_unlock(&c->mu);
    return payload_released;
}

/* The ends of k's sessions that may have lost what was sent on them. */
static unsigned session_losses(const conn_t *k)
{
    unsigned n = 0;
    for (size_t j = 0; j < k->nsessions; j++)
        n += k->sessions[j]->lost;
    return n;
}

/* Whether the connection was up at some moment of the call in progress. */
static bool up_in_call(const conn_t *k)
{
    return k->was_up || k->up || k->handshakes != k->handshakes_at;
}

/*
 * Sends k's request through the first of its sessions that carries it
 * (the plain socket carries everything), each given a copy of the header
 * to mark as it sends it.
 */
static int call_send(zps_client_t *c, conn_t *k)
{
    int rc = SESSION_PASS;
    for (size_t j = 0; j < k->nsessions && rc == SESSION_PASS; j++) {
        zps_header_t h = k->req;
        session_t *s = k->sessions[j];
        rc = s->ops->send(s, c, k, &h);
    }
    if (rc == SESSION_PASS)
        rc = ZPS_ESOCKET; /* no session takes it: none is there */
    if (rc && rc != ZPS_EAGAIN)
        client_set_error(c, "%s: send failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
    if (rc == 0) {
        k->lost_seen = session_losses(k);
        k->drops_at_send = k->drops + k->lost_seen;
    }
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
        k->started = false;
        k->staged = 0;
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
    return req->type == ZPS_MSG_PUSH && (req->flags & ZPS_FLAG_EXCHANGE) && h->type == ZPS_MSG_PULL;
}

/*
 * Takes the replies that have come for shard k, from each of its sessions;
 * what a session asked for itself it claims. Returns 0 (no reply of this
 * call left to read), or the shard's failure.
 */
static int take_reply(zps_client_t *c, conn_t *k)
{
    for (;;) {
        zps_message_t m;
        int rc = ZPS_EAGAIN;
        session_t *from = NULL;
        for (size_t j = 0; j < k->nsessions && rc == ZPS_EAGAIN; j++) {
            from = k->sessions[j];
            rc = from->ops->recv(from, c, k, &m);
        }
        if (rc == ZPS_EAGAIN)
            return 0;
        if (rc == ZPS_ESOCKET) {
            client_set_error(c, "%s: receive failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
            return rc;
        }
        bool claimed = false;
        for (size_t j = 0; j < k->nsessions && !claimed; j++) {
            session_t *s = k->sessions[j];
            claimed = s->ops->claim && s->ops->claim(s, c, k, from, &m);
        }
        if (claimed) {
            zps_message_close(&m);
            continue;
        }
        bool ours = m.hdr.reply && m.hdr.request_id == k->req.request_id;
        if (!ours || !k->pending) {
            /* A reply to an earlier request (answered twice after a resend,
             * or after that call gave up): not ours to use. */
            zps_message_close(&m);
            continue;
        }
        if (rc == 0 && !reply_fits(&k->req, &m.hdr)) {
            client_set_error(c,
                             "%s: a reply of type %u to our %s request: not a zps server's answer",
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
/*
 * Sends k's request for the first time in this call, and arms its resend
 * timer; call_wait then carries it to its reply. Returns 0 (sent, or not
 * yet: ZeroMQ's queue is full, the wait tries again within SEND_AGAIN_MS)
 * or the send's failure.
 */
int call_start(zps_client_t *c, conn_t *k)
{
    uint64_t now = zps_now_ns();
    conn_read_monitor(k);
    k->was_up = k->up;
    k->handshakes_at = k->handshakes;
    k->pending = true;
    k->started = true;
    k->backoff_ms = c->opts.retry_ms;
    k->resend_at_ns =
        c->opts.retry_ms > 0 ? now + (uint64_t)c->opts.retry_ms * 1000000ull : UINT64_MAX;
    int rc = call_send(c, k);
    if (rc == ZPS_EAGAIN) {
        rc = 0;
        k->resend_at_ns = now + SEND_AGAIN_MS * 1000000ull;
    }
    return rc;
}

/* Sends every active shard's request and waits for the replies (call_wait). */
int call_exchange(zps_client_t *c, bool all)
{
    int rc = 0;
    for (size_t i = 0; i < c->nconns && rc == 0; i++)
        if (c->conns[i].active)
            rc = call_start(c, &c->conns[i]);
    return call_wait(c, all, rc);
}

/*
 * Waits for the replies to the requests call_start sent, resending as the
 * file's head says, until every one is in or the call's timeout (counted
 * from here) expires. `all`: a shard's refusal or bad reply is noted in its
 * outcome and the others are still waited for; otherwise the first ends
 * the call. `rc`: a failure of the sends, which ends the call at once.
 */
int call_wait(zps_client_t *c, bool all, int rc)
{
    int first = 0; /* with `all`: the first shard's failure */
    uint64_t now = zps_now_ns();
    const uint64_t start = now;
    uint64_t deadline =
        c->opts.timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)c->opts.timeout_ms * 1000000ull;
    uint64_t log_at =
        c->opts.wait_log_ms > 0 ? now + (uint64_t)c->opts.wait_log_ms * 1000000ull : UINT64_MAX;
    size_t waiting = 0;
    for (size_t i = 0; i < c->nconns; i++)
        waiting += c->conns[i].pending;

    while (rc == 0 && waiting > 0) {
        now = zps_now_ns();
        /* What happened meanwhile, to each connection and its sessions; a
         * session that lost what it carried has its request sent again now. */
        uint64_t sessions_wake = UINT64_MAX;
        for (size_t i = 0; i < c->nconns; i++) {
            conn_t *k = &c->conns[i];
            if (!k->pending)
                continue;
            conn_read_monitor(k);
            for (size_t j = 0; j < k->nsessions; j++) {
                session_t *s = k->sessions[j];
                uint64_t w = s->ops->wake(s, c, k, now);
                sessions_wake = w < sessions_wake ? w : sessions_wake;
            }
            unsigned lost = session_losses(k);
            if (lost != k->lost_seen) {
                k->lost_seen = lost;
                k->resend_at_ns = now;
            }
        }
        /* A handshake the server refused will not succeed on a retry: say
         * so now rather than at the deadline. */
        for (size_t i = 0; i < c->nconns && rc == 0; i++) {
            conn_t *k = &c->conns[i];
            if (k->pending && k->auth_failed && !k->up) {
                client_set_error(
                    c, "authentication failed for %s (%s)", k->endpoint,
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
            bool logged = k->logged_at == k->connects + 1; /* no connection since */
            if (!k->pending || (logged && !c->opts.fail_on_refused))
                continue;
            int e = conn_failed_attempt(k);
            if (e == 0)
                continue;
            char words[128];
            conn_connect_words(e, words, sizeof(words));
            if (c->opts.fail_on_refused && (e == ECONNREFUSED || e == ENOENT)) {
                client_set_error(c, "%s: %s", k->endpoint, words);
                k->outcome = rc = ZPS_EUNREACHABLE;
            } else if (!logged && c->opts.wait_log_ms > 0) {
                zps_warn("waiting for server %zu at %s: %s, retrying", i, k->endpoint, words);
                k->logged_at = k->connects + 1;
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
                    c->conns[i].outcome =
                        up_in_call(&c->conns[i]) ? ZPS_ETIMEDOUT : ZPS_EUNREACHABLE;
            for (size_t i = 0; i < c->nconns; i++) {
                conn_t *k = &c->conns[i];
                if (k->pending && !up_in_call(k)) {
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
                if (k->pending && !up_in_call(k) && k->tcp_seen) {
                    rc = k->outcome = ZPS_EAUTH;
                    client_set_error(
                        c,
                        "authentication failed for %s: connected, but no CURVE handshake "
                        "completed within %s (is --server-key this server's key?)",
                        k->endpoint, took);
                }
            }
            for (size_t i = 0; rc == ZPS_ETIMEDOUT && i < c->nconns; i++) {
                if (c->conns[i].pending) {
                    client_set_error(c, "%s: connected, but no reply within %s",
                                     c->conns[i].endpoint, took);
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
        wake = sessions_wake < wake ? sessions_wake : wake;
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
            bool ended = k->drops + session_losses(k) != k->drops_at_send;
            if (k->resend_at_ns <= now && carries && k->up && !ended) {
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
            /* Every session's sockets: a refused handshake ends the call now. */
            for (size_t j = 0; j < k->nsessions; j++)
                n += k->sessions[j]->ops->poll(k->sessions[j], k, &c->items[n]);
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
