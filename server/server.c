/*
 * server.c - the shard daemon's event loop: the socket, the timers, the
 * signals, and the dispatch of each request to its handler; see server.h.
 *
 * Every request gets exactly one reply (handlers.c, reply.c). The loop
 * decodes a request, notes that its worker is alive, and hands it, with its
 * own per-request context, to the handler of its type.
 *
 * ZeroMQ's ZMQ_FD is edge-triggered: it signals a change, not a level. So
 * each wake-up drains the socket until ZeroMQ says there is nothing left, and
 * anything that sends outside that drain (timers, signals, finished
 * checkpoints) drains afterwards.
 *
 * Not here: what a request does (handlers.c), the consistency rules
 * (consistency/), checkpoint writes (ckpt_queue.c), resuming (resume.c),
 * the STATS figures (stats.c).
 */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <zmq.h>

#include "auth.h"
#include "conns.h"
#include "daemon.h"
#include "error.h"
#include "fingerprint.h"
#include "handlers.h"
#include "metrics.h"
#include "log.h"
#include "reply.h"
#include "resume.h"
#include "seal.h"
#include "timeutil.h"
#include "wire.h"

/* Messages handled per wake-up before yielding to timers and signals. */
#define DRAIN_BUDGET 256

/*
 * Replies queued per peer (ZMQ_SNDHWM), stated rather than left to ZeroMQ's
 * default. Not lower: one drain may send DRAIN_BUDGET replies to one peer
 * before ZeroMQ's I/O thread takes any, and a client that sends a burst of
 * requests must get every reply. The queue holds headers and references;
 * the copies of the parameters pull replies carry are bounded apart from it
 * (reply_cache.h).
 */
#define ZPS_MAX_QUEUED_REPLIES 1000

void zps_server_config_default(zps_server_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = "tcp://127.0.0.1:7100";
    cfg->shard_index = 0;
    cfg->shard_count = 1;
    cfg->consistency.mode = ZPS_MODE_BSP;
    cfg->consistency.max_pending = 4;
    cfg->max_message_bytes = 4ull << 30;
    cfg->max_connections_per_host = -1;
    cfg->checkpoint_keep = 3;
    cfg->background_step_bytes = ZPS_BACKGROUND_STEP_BYTES;
    zps_opt_config_default(&cfg->opt);
}

bool zps_endpoint_is_local(const char *endpoint)
{
    if (strncmp(endpoint, "ipc://", 6) == 0 || strncmp(endpoint, "inproc://", 9) == 0)
        return true;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *host = endpoint + 6;
    if (strncmp(host, "localhost:", 10) == 0 || strncmp(host, "[::1]:", 6) == 0)
        return true;
    char addr[64];
    const char *colon = strrchr(host, ':');
    size_t n = colon ? (size_t)(colon - host) : strlen(host);
    if (n == 0 || n >= sizeof(addr))
        return false;
    memcpy(addr, host, n);
    addr[n] = '\0';
    struct in_addr in;
    if (inet_pton(AF_INET, addr, &in) != 1)
        return false;
    return (ntohl(in.s_addr) >> 24) == 127;
}

/* ---- liveness ---- */

/*
 * A worker's silence is judged on time the loop could have heard from it.
 * When the process is stopped (SIGSTOP, a debugger, a VM pause) or starved,
 * wall time runs on while nothing can be read; the heartbeats of that time
 * wait in the kernel and in ZeroMQ. Counting that time as silence would
 * evict live workers the moment the process resumes, before their queued
 * heartbeats are read. So a gap between liveness ticks counts for at most
 * one period, and every tick reads what has arrived before judging.
 */
uint64_t zps_daemon_listening_ns(const zps_daemon_t *d)
{
    uint64_t gap = zps_now_ns() - d->tick_ns;
    return d->listen_ns + (gap < d->listen_cap_ns ? gap : d->listen_cap_ns);
}

/*
 * Any message from a worker shows it is alive. One that had been evicted is
 * admitted again at the current clock, and every reply to this request says
 * so (ZPS_FLAG_REJOINED, with next_clock), so it can skip the clocks it
 * missed.
 */
static void heard_from(zps_daemon_t *d, zps_request_t *r, uint32_t w)
{
    d->last_seen_ns[w] = zps_daemon_listening_ns(d);
    if (zps_consistency_live(d->consistency, w))
        return;
    uint64_t at = zps_consistency_rejoin(d->consistency, w);
    r->reply_flags |= ZPS_FLAG_REJOINED;
    zps_info("worker %u is back: admitted again at clock %llu", w, (unsigned long long)at);
}

/* Evicts workers silent for longer than --worker-timeout; the others go on. */
static void on_liveness(uv_timer_t *t)
{
    zps_daemon_t *d = t->data;
    /* Advance the listening clock: this gap counts for one period at most,
     * and not at all while a BSP step runs off the loop's thread (the
     * workers are waiting for it, as they would for a loop busy with it). */
    uint64_t listen = zps_daemon_listening_ns(d);
    d->tick_ns = zps_now_ns();
    if (!zps_handlers_bsp_stepping(d))
        d->listen_ns = listen;
    /* Hear everything that has arrived before judging anyone silent. When
     * the drain's budget ran out (the idle handle will go on with it), more
     * may be waiting: judge at the next tick instead. */
    zps_daemon_drain(d);
    /* Not while a request is held back for a step off the loop's thread
     * either (those behind it are not read until the step is taken), nor
     * during a BSP step: an eviction changes the quorum of its clock; nor
     * during a check: an eviction may start a step ("Checks"). */
    if (d->stopping || uv_is_active((uv_handle_t *)&d->idle) || d->held ||
        zps_handlers_bsp_stepping(d) || d->check.running)
        return;
    listen = zps_daemon_listening_ns(d);
    uint64_t limit = d->cfg->worker_timeout_ms * 1000000ull;
    bool changed = false;
    for (uint32_t w = 0; w < d->cfg->consistency.workers; w++) {
        uint64_t silent = listen > d->last_seen_ns[w] ? listen - d->last_seen_ns[w] : 0;
        if (zps_consistency_live(d->consistency, w) && silent > limit) {
            zps_consistency_evict(d->consistency, w);
            /* Its batches go to whoever asks next: none is lost. */
            if (d->assign)
                zps_assign_release(d->assign, w);
            d->evictions[w]++;
            changed = true;
            zps_warn("worker %u evicted: silent for %.1f s (--worker-timeout %.1f s); the others "
                     "go on without it",
                     w, (double)silent / 1e9, (double)d->cfg->worker_timeout_ms / 1e3);
        }
    }
    if (!changed)
        return;
    zps_handlers_take_steps(d);
    zps_handlers_answer_ready(d);
    /* Replies were sent outside a drain: ZMQ_FD may have been reset. */
    zps_daemon_drain(d);
}

/* ---- dispatch ---- */

/*
 * The shared-memory side of a request (shm.h): a new request from a session
 * frees the buffer its last reply named; a PUSH whose gradient is in the
 * session's slot gets it copied out, checked and scanned, as a payload
 * frame would have been on receipt. False when r was refused (answered).
 */
static bool shm_payload(zps_daemon_t *d, zps_request_t *r)
{
    zps_message_t *m = r->msg;
    zps_shm_session_t *x = m->peer.session ? NULL : zps_shm_find(&d->shm, m->peer.fd);
    if (x)
        zps_shm_release(&d->shm, x);
    if (!(m->hdr.flags & ZPS_FLAG_SHM) || m->hdr.type == ZPS_MSG_PULL)
        return true;
    if (m->hdr.type != ZPS_MSG_PUSH) {
        zps_reply_error(d, r, ZPS_EFRAMES, "only a PUSH has its payload in shared memory");
        return false;
    }
    if (!x || m->hdr.worker < 0 || (uint32_t)m->hdr.worker != x->rank) {
        zps_reply_error(d, r, ZPS_ESHM,
                        "a PUSH from shared memory, but this connection has no session for "
                        "worker %d",
                        m->hdr.worker);
        return false;
    }
    size_t bad;
    float mx;
    int rc = zps_shm_take_push(&d->shm, x, m->hdr.length, m->hdr.checksum, &m->payload, &bad, &mx);
    if (rc) {
        zps_reply_error(d, r, rc, "%s",
                        rc == ZPS_ELENGTH     ? "the length is not this shard's"
                        : rc == ZPS_ECHECKSUM ? "the gradient in shared memory fails its CRC32C"
                                              : "out of memory");
        return false;
    }
    m->has_payload = true;
    m->scanned = true;
    m->first_nonfinite = bad;
    m->abs_max = mx;
    return true;
}

/*
 * The requests that read or change the model, its parameters, the buffered
 * pushes or the shared-memory segment: while a step runs off the loop's
 * thread they wait for it (handlers.h).
 */
static bool touches_model(uint32_t type)
{
    return type == ZPS_MSG_INIT || type == ZPS_MSG_PULL || type == ZPS_MSG_PUSH ||
           type == ZPS_MSG_CHECKPOINT || type == ZPS_MSG_SHM;
}

static void answer(zps_daemon_t *d, zps_message_t *m, int rc);
static void serve(zps_daemon_t *d, zps_request_t *r);

/* ---- checks ---- */

/*
 * A payload on the main socket is received unchecked
 * (zps_wire_recv_deferred) and checked -- its CRC32C verified, its values
 * scanned, a bfloat16 one widened -- just before the message is answered:
 * on the loop's thread, or, when the shard and the payload are both of at
 * least --background-step-bytes, on a threadpool thread (uv_queue_work;
 * the check's own chunks go to the helper threads as ever, pool.h).
 * Meanwhile the message waits in d->check, and the loop treats the check as
 * it treats a step off its thread: a request that touches the model, or
 * anything from the connection the check will answer, is held; the rest is
 * served. A check starts only while no step runs, and a step only from an
 * answered request or a liveness tick, neither of which happens during a
 * check: the two never run at once, and the pushes in hand stay what the
 * memory bound counts (zps_daemon_model_known). A sealed socket's payloads
 * are checked as they are opened, on the loop's thread.
 */

/* A step or a check runs off the loop's thread. */
static bool busy(const zps_daemon_t *d)
{
    return zps_handlers_stepping(d) || d->check.running;
}

/* The step or the check off the loop's thread will answer a request of this peer. */
static bool awaits(const zps_daemon_t *d, const zps_peer_t *peer)
{
    return zps_handlers_awaits(d, peer) ||
           (d->check.running && zps_peer_same(&d->check.msg.peer, peer));
}

static bool check_in_background(const zps_daemon_t *d, const zps_message_t *m)
{
    uint64_t b = d->cfg->background_step_bytes;
    return (uint64_t)d->store.len * sizeof(float) >= b && m->hdr.length * sizeof(float) >= b;
}

static void check_work(uv_work_t *w)
{
    zps_check_t *c = w->data;
    uint32_t ms = c->d->cfg->check_delay_ms;
    if (ms) {
        struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
    }
    c->rc = zps_message_check(&c->msg);
}

static void check_after(uv_work_t *w, int status)
{
    zps_check_t *c = w->data;
    zps_daemon_t *d = c->d;
    ZPS_ASSERT(status == 0); /* never cancelled */
    c->running = false;
    zps_message_t m;
    zps_message_move(&m, &c->msg);
    answer(d, &m, c->rc);
    zps_message_close(&m);
    /* Answering may have started a step off the loop: what waits, waits for it. */
    if (!zps_handlers_stepping(d))
        zps_daemon_steps_done(d);
}

/*
 * Checks a message's payload if it has one not yet checked, then answers
 * the message, rc what decoding it said; or moves it to d->check and
 * starts its check off the loop's thread (no step runs: see "Checks").
 */
static void admit(zps_daemon_t *d, zps_message_t *m, int rc)
{
    if (rc == 0 && m->has_payload && !m->scanned) {
        if (check_in_background(d, m)) {
            zps_check_t *c = &d->check;
            zps_message_move(&c->msg, m);
            c->work.data = c;
            int qrc = uv_queue_work(&d->loop, &c->work, check_work, check_after);
            ZPS_ASSERT(qrc == 0); /* it fails only without a work callback */
            c->running = true;
            d->count.checks_background++;
            return;
        }
        rc = zps_message_check(m);
    }
    answer(d, m, rc);
}

/* Handles one received message; rc is what decoding it said. */
static void handle(zps_daemon_t *d, zps_message_t *m, int rc)
{
    d->count.msgs_in++;
    d->count.bytes_in += m->bytes;
    /* While a step or check runs off the loop's thread, a request that
     * touches the model waits for it, and so does anything from a
     * connection whose request it will answer, so that its replies stay in
     * order; nothing is read past it meanwhile. */
    if (busy(d) && (awaits(d, &m->peer) || (rc == 0 && touches_model(m->hdr.type)))) {
        zps_message_move(&d->held_msg, m);
        d->held_rc = rc;
        d->held = true;
        return;
    }
    admit(d, m, rc);
}

/* Answers one received message, rc what decoding it said, now. */
static void answer(zps_daemon_t *d, zps_message_t *m, int rc)
{
    zps_request_t r = {&m->peer, &m->hdr, m, 0};
    if (rc != 0) {
        static const char *const what[] = {
            [-ZPS_EPROTO] = "the header frame could not be decoded",
            [-ZPS_EVERSION] = "protocol version mismatch",
            [-ZPS_EFRAMES] = "wrong number of frames for this message type",
            [-ZPS_ELENGTH] = "the payload frame's size does not match the header's length",
            [-ZPS_ECHECKSUM] = "the payload's CRC32C does not match the header's checksum",
            [-ZPS_ETYPE] = "unknown message type",
        };
        const char *text = (unsigned)(-rc) < sizeof(what) / sizeof(what[0]) && what[-rc]
                               ? what[-rc]
                               : zps_strerror(rc);
        if (rc == ZPS_EVERSION)
            zps_reply_error(d, &r, rc, "%s: this server speaks version %u, got %u", text,
                            ZPS_PROTOCOL_VERSION, m->hdr.version);
        else if (rc == ZPS_ETYPE)
            zps_reply_error(d, &r, rc, "%s %u", text, m->hdr.type);
        else
            zps_reply_error(d, &r, rc, "%s", text);
        return;
    }
    if (m->hdr.reply) {
        zps_reply_error(d, &r, ZPS_ETYPE, "a server does not take replies");
        return;
    }
    /* Authorized before anything, liveness included, is touched: a refused
     * request changes nothing. */
    char why[256];
    if (!zps_auth_allows(&d->auth, &m->peer, &m->hdr, why, sizeof(why))) {
        zps_reply_error(d, &r, ZPS_EDENIED, "%s", why);
        return;
    }
    serve(d, &r);
}

/* Serves request r (decoded and authorized). */
static void serve(zps_daemon_t *d, zps_request_t *r)
{
    zps_message_t *m = r->msg;
    if (!shm_payload(d, r))
        return;
    if (m->hdr.worker >= 0 && (uint32_t)m->hdr.worker < d->cfg->consistency.workers)
        heard_from(d, r, (uint32_t)m->hdr.worker);
    switch (m->hdr.type) {
    case ZPS_MSG_INIT:
        zps_handle_init(d, r);
        break;
    case ZPS_MSG_PULL:
        zps_handle_pull(d, r);
        break;
    case ZPS_MSG_PUSH:
        zps_handle_push(d, r);
        break;
    case ZPS_MSG_STATS:
        zps_handle_stats(d, r);
        break;
    case ZPS_MSG_HEARTBEAT:
        zps_handle_heartbeat(d, r);
        break;
    case ZPS_MSG_CHECKPOINT:
        zps_handle_checkpoint(d, r);
        break;
    case ZPS_MSG_RELOAD_KEYS:
        zps_handle_reload_keys(d, r);
        break;
    case ZPS_MSG_SESSION:
        zps_handle_session(d, r);
        break;
    case ZPS_MSG_SHM:
        zps_handle_shm(d, r);
        break;
    default:
        zps_reply_error(d, r, ZPS_EMODE, "message type %u is not served by this server",
                        m->hdr.type);
        break;
    }
}

/* ---- the loop ---- */

static void on_idle(uv_idle_t *h);

/* A connection has closed: its waiting pulls can never be answered. */
static void connection_gone(void *arg, int fd)
{
    zps_handlers_cancel_connection(arg, fd);
}

/* A connection to the main socket has closed: its sealed and shared-memory sessions end with it. */
static void curve_connection_gone(void *arg, int fd)
{
    zps_daemon_t *d = arg;
    zps_sessions_end_fd(&d->sessions, fd);
    zps_shm_end_fd(&d->shm, fd);
    zps_handlers_cancel_connection(d, fd);
}

/* The session a sealed message names (zps_wire_seal_find_fn). */
static struct zps_seal *find_session(void *arg, const unsigned char *id, zps_peer_t *peer)
{
    zps_daemon_t *d = arg;
    zps_session_t *x = zps_sessions_by_id(&d->sessions, id);
    if (!x)
        return NULL;
    x->used_ns = zps_now_ns();
    memcpy(peer->user, x->user, sizeof(peer->user));
    peer->session = x->number;
    return &x->seal;
}

/*
 * A sealed message that could not be opened gets no reply, for nothing in
 * it can be trusted; only a session the server does not know (it ended with
 * its CURVE connection, or the server restarted) is told so, in the clear
 * (ZPS_SEAL_UNKNOWN, the id): the worst a forged notice can do is make a
 * client ask for a new session.
 */
static void refuse_sealed(zps_daemon_t *d, zps_message_t *m)
{
    d->sessions.refused++;
    /* Best effort: a notice that cannot be queued now is not worth keeping. */
    if (m->seal_unknown && m->has_peer)
        (void)zps_wire_send_seal_unknown(d->seal_sock, &m->peer, m->seal_id);
    if (d->sessions.refused <= 10 || d->sessions.refused % 1000 == 0)
        zps_warn("sealed message from %s refused (%llu so far): %s",
                 m->peer.fd >= 0 ? "a connection" : "a peer",
                 (unsigned long long)d->sessions.refused,
                 m->seal_unknown ? "unknown session" : "not a seal, a bad tag or a replay");
}

/* Reads up to `budget` messages of one socket; false when it has none left. */
static bool drain_socket(zps_daemon_t *d, bool sealed, int budget)
{
    void *sock = sealed ? d->seal_sock : d->sock;
    zps_conns_t *conns = sealed ? &d->seal_conns : &d->conns;
    for (int i = 0; i < budget && !d->stopping; i++) {
        /* Read again once the held request is served (zps_daemon_steps_done). */
        if (d->held)
            return false;
        zps_message_t m;
        int rc = sealed ? zps_wire_recv_sealed(sock, ZMQ_DONTWAIT, true, true, find_session, d, &m)
                        : zps_wire_recv_deferred(sock, ZMQ_DONTWAIT, true, &m);
        if (rc == ZPS_EAGAIN)
            return false;
        if (rc == ZPS_ESOCKET) {
            zps_error("receive failed: %s", zmq_strerror(zmq_errno()));
            return false;
        }
        /* A message from a connection accepted since the last events were
         * read (a large first message arrives while the loop is busy): its
         * event first, or its bytes would never count as taken. */
        if (m.peer.fd >= 0 && !zps_conns_knows(conns, m.peer.fd))
            zps_conns_events(conns, sealed ? connection_gone : curve_connection_gone, d);
        zps_conns_took(conns, m.peer.fd, m.wire_bytes);
        /* Over CURVE only a listed key's handshake gets a message through;
         * on the sealed socket, a message whose session exists and whose
         * tags verify (any other failure comes after). */
        if (d->cfg->curve_key &&
            (!sealed || (rc != ZPS_ESEAL && rc != ZPS_ENOMEM && m.peer.session != 0)))
            zps_conns_authenticated(conns, m.peer.fd);
        if (rc == ZPS_ESEAL) {
            refuse_sealed(d, &m);
            d->count.msgs_in++;
            d->count.bytes_in += m.bytes;
        } else {
            d->sessions.opened += sealed;
            handle(d, &m, rc);
        }
        zps_message_close(&m);
    }
    return true;
}

/* Handles what the sockets hold, up to a budget; see the file comment. */
void zps_daemon_drain(zps_daemon_t *d)
{
    /* Connections first: a message read after its connection's events is
     * then never counted against a closed connection that had its descriptor. */
    zps_conns_events(&d->conns, curve_connection_gone, d);
    if (d->seal_sock)
        zps_conns_events(&d->seal_conns, connection_gone, d);
    bool more = drain_socket(d, false, DRAIN_BUDGET);
    if (d->seal_sock && drain_socket(d, true, DRAIN_BUDGET))
        more = true;
    /* More may be waiting, and the edge-triggered fd will not say so again:
     * come back on the next loop iteration, after timers and signals. */
    if (more && !d->stopping)
        uv_idle_start(&d->idle, on_idle);
    else
        uv_idle_stop(&d->idle);
}

static void on_idle(uv_idle_t *h)
{
    zps_daemon_drain(h->data);
}

static void on_signal(uv_signal_t *h, int signum);

void zps_daemon_steps_done(zps_daemon_t *d)
{
    if (d->held) {
        zps_message_t m;
        zps_message_move(&m, &d->held_msg);
        d->held = false;
        if (d->stop_signal) {
            zps_request_t r = {&m.peer, &m.hdr, &m, 0};
            zps_reply_error(d, &r, ZPS_ESHUTDOWN, "the server is shutting down");
        } else {
            admit(d, &m, d->held_rc);
        }
        zps_message_close(&m);
    }
    /* Serving it may have started another step or a check: a signal waits for that one. */
    if (d->stop_signal && !busy(d)) {
        int signum = d->stop_signal;
        d->stop_signal = 0;
        on_signal(signum == SIGINT ? &d->sigint : &d->sigterm, signum);
        return;
    }
    zps_daemon_drain(d);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    (void)events;
    zps_daemon_t *d = h->data;
    if (status < 0)
        zps_warn("poll error: %s", uv_strerror(status));
    zps_daemon_drain(d);
}

static void on_zap(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    zps_daemon_t *d = h->data;
    zps_auth_serve(&d->auth);
}

static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    zps_daemon_t *d = h->data;
    /* Reads a file of at most ZPS_KEYS_FILE_MAX bytes: short, and rare. */
    char why[512];
    zps_auth_reload(&d->auth, "SIGHUP", why, sizeof(why));
}

static void on_conns(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    zps_daemon_t *d = h->data;
    if (h == &d->seal_conns_poll)
        zps_conns_events(&d->seal_conns, connection_gone, d);
    else
        zps_conns_events(&d->conns, curve_connection_gone, d);
}

/*
 * Closed connections' unfinished messages (up to the peer buffer bound
 * each) go back to the heap when ZeroMQ closes them, but the allocator keeps
 * freed memory for later, and a run of hostile connections would leave the
 * server's resident size at its peak for good. Once such connections have
 * let go of TRIM_MIN_BYTES or more, and none for TRIM_SETTLE_NS (ZeroMQ's
 * I/O thread frees them as it tears each one down), the free memory goes
 * back to the kernel (zps_wire_trim_heap: the server's malloc is tuned
 * never to trim by itself, wire.h); at most once per TRIM_EVERY_NS.
 */
#define TRIM_MIN_BYTES (4ull << 20)
#define TRIM_SETTLE_NS 100000000ull
#define TRIM_EVERY_NS 1000000000ull

static void trim_released(zps_daemon_t *d)
{
    zps_conns_t *c = &d->conns;
    uint64_t released = c->released + d->seal_conns.released;
    if (released - c->trimmed < TRIM_MIN_BYTES)
        return;
    uint64_t now = zps_now_ns(), last = c->released_ns > d->seal_conns.released_ns
                                            ? c->released_ns
                                            : d->seal_conns.released_ns;
    if (now - last < TRIM_SETTLE_NS || now - c->trim_ns < TRIM_EVERY_NS)
        return;
    zps_wire_trim_heap();
    c->trimmed = released;
    c->trim_ns = now;
    c->trims++;
}

/* Unread bytes and memory (conns.h), judged after reading what has arrived. */
static void on_watch(uv_timer_t *t)
{
    zps_daemon_t *d = t->data;
    trim_released(d);
    if (d->conns.open == 0 && d->seal_conns.open == 0)
        return;
    zps_daemon_drain(d);
    if (d->stopping || uv_is_active((uv_handle_t *)&d->idle) || d->held)
        return;
    zps_conns_watch(&d->conns);
    if (d->seal_sock)
        zps_conns_watch(&d->seal_conns);
}

void zps_daemon_model_known(zps_daemon_t *d)
{
    const zps_server_config_t *cfg = d->cfg;
    uint64_t p = (uint64_t)d->store.len * sizeof(float);
    uint64_t k = zps_optimizer_state_count(d->store.opt);
    uint64_t w = cfg->consistency.workers;
    /* Copies of the shard's size the server may hold (conns.h states the
     * bound built on it): the parameters and optimizer state; BSP's
     * buffered pushes and the one being handled; the reply caches'
     * copies (reply_cache.h), the bfloat16 ones at half the size; a
     * checkpoint's copy of the state; the shared-memory segment. In halves
     * of a copy: */
    uint64_t reply = ZPS_REPLY_SHARE * w + 1 + ZPS_REPLY_OBSERVER_COPIES;
    /* The shared-memory segment (shm.h): a slot per worker, w + 2 buffers;
     * and two private copies of each worker's pushes. Counted once the
     * segment exists (the first session's grant calls this again), as
     * connections are counted while they are open: a shard that no worker
     * on its host uses never holds it. */
    uint64_t shm = zps_shm_ready(&d->shm) ? 4 * w + 2 : 0;
    /* Pushes in hand: BSP's w buffered and the one being handled; under
     * SSP and ASP the one being handled, and with applies off the loop's
     * thread (handlers.c) the one applied meanwhile. */
    bool bsp = cfg->consistency.mode == ZPS_MODE_BSP;
    uint64_t in_hand = (bsp ? w : p >= cfg->background_step_bytes ? 1 : 0) + 1;
    /* Delay compensation: what each worker was sent, and the gradient made from it. */
    uint64_t dc = cfg->delay_comp > 0 && !bsp ? w + 1 : 0;
    if (dc && !d->dc_pulled && !d->dc_failed && d->store.len) {
        size_t len = d->store.len;
        d->dc_pulled = len <= SIZE_MAX / sizeof(float) / w ? malloc(len * w * sizeof(float)) : NULL;
        d->dc_sent = calloc(w, sizeof(bool));
        d->dc_grad = malloc(len * sizeof(float));
        if (!d->dc_pulled || !d->dc_sent || !d->dc_grad) {
            free(d->dc_pulled);
            free(d->dc_sent);
            free(d->dc_grad);
            d->dc_pulled = d->dc_grad = NULL;
            d->dc_sent = NULL;
            d->dc_failed = true;
            zps_error("no memory for delay compensation's %llu copies of the shard (%llu bytes "
                      "each): every push will be refused",
                      (unsigned long long)dc, (unsigned long long)p);
        }
    }
    uint64_t halves = 2 * ((1 + k) + in_hand + reply + (1 + k) + shm + dc) + reply;
    /* ZeroMQ's own frame limit cannot follow: a listener keeps the options
     * it was bound with. The unread-bytes bound does the work. */
    uint64_t max_message = p + ZPS_MAX_HEADER_BYTES;
    if (max_message > cfg->max_message_bytes)
        max_message = cfg->max_message_bytes;
    zps_conns_set_limits(&d->conns, max_message, p * halves / 2);
    if (d->seal_sock)
        zps_conns_set_limits(&d->seal_conns, max_message, p * halves / 2);
    /* Payloads made one buffer (bfloat16 pushes widened, SSP/ASP pushes in
     * several frames) come from buffers kept for the next ones (wire.h): at
     * most as many as the pushes in hand above, which are counted already
     * (free ones and those in use together never outnumber the most in use
     * at once). INIT's values go into the store from where they arrived. */
    zps_wire_pool_limit(p * ((cfg->consistency.mode == ZPS_MODE_BSP ? w : 0) + 1));
}

/* Hands the endpoint's thread the shard's metrics as they are now. */
static void on_publish(uv_timer_t *t)
{
    zps_daemon_t *d = t->data;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_metrics_text(d, &b);
    char *text = zps_strbuf_take(&b);
    if (text)
        zps_metrics_http_publish(d->metrics, text, strlen(text));
    free(text);
}

static void on_close(uv_handle_t *h)
{
    (void)h;
}

static void stop(zps_daemon_t *d, const char *why)
{
    if (d->stopping)
        return;
    zps_info("%s: shutting down (version %llu)", why,
             (unsigned long long)zps_consistency_version(d->consistency));
    /* Fail the pulls still waiting so their workers learn now, not at a timeout. */
    zps_handlers_fail_parked(d);
    d->stopping = true;
    uv_poll_stop(&d->poll);
    uv_close((uv_handle_t *)&d->poll, on_close);
    uv_close((uv_handle_t *)&d->idle, on_close);
    uv_close((uv_handle_t *)&d->liveness, on_close);
    uv_poll_stop(&d->conns_poll);
    uv_close((uv_handle_t *)&d->conns_poll, on_close);
    if (d->seal_sock) {
        uv_poll_stop(&d->seal_poll);
        uv_close((uv_handle_t *)&d->seal_poll, on_close);
        uv_poll_stop(&d->seal_conns_poll);
        uv_close((uv_handle_t *)&d->seal_conns_poll, on_close);
    }
    uv_close((uv_handle_t *)&d->watch, on_close);
    if (d->metrics)
        uv_close((uv_handle_t *)&d->publish, on_close);
    uv_close((uv_handle_t *)&d->sigint, on_close);
    uv_close((uv_handle_t *)&d->sigterm, on_close);
    if (d->auth.path) {
        uv_poll_stop(&d->zap_poll);
        uv_close((uv_handle_t *)&d->zap_poll, on_close);
        uv_close((uv_handle_t *)&d->sighup, on_close);
    }
}

static void on_signal(uv_signal_t *h, int signum)
{
    zps_daemon_t *d = h->data;
    /* The step running off the loop's thread writes the parameters, and a
     * check's push is answered once checked: the shutdown's checkpoint, and
     * the end of the loop, wait for them. */
    if (busy(d)) {
        if (!d->stop_signal)
            zps_info("%s: stopping once the %s in progress is done",
                     signum == SIGINT ? "SIGINT" : "SIGTERM",
                     d->check.running ? "check of a received payload" : "step");
        if (d->stop_signal != SIGTERM) /* SIGTERM's promise of a checkpoint stands */
            d->stop_signal = signum;
        return;
    }
    /* SIGTERM is the operator's "stop now, keep the work": the state goes to
     * disk before the shard goes away (the loop runs until it is written). */
    if (signum == SIGTERM)
        zps_ckpt_queue_at_exit(d);
    stop(d, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* ---- start and end ---- */

static int write_endpoint_file(const char *path, const char *endpoint)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return ZPS_EIO;
    int ok = fprintf(f, "%s\n", endpoint) > 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return ZPS_EIO;
    }
    return 0;
}

/*
 * The address to bind for `listen`. ZeroMQ binds TCP to an interface name or
 * a numeric address, never to a host name, so tcp://localhost:P (which the
 * loopback check accepts) binds to 127.0.0.1:P: the endpoint file then holds
 * the numeric endpoint the clients can use. Everything else is unchanged.
 */
static int bind_address(const char *listen, char *out, size_t size)
{
    int n;
    if (strncmp(listen, "tcp://localhost:", 16) == 0)
        n = snprintf(out, size, "tcp://127.0.0.1:%s", listen + 16);
    else
        n = snprintf(out, size, "%s", listen);
    return n < 0 || (size_t)n >= size ? ZPS_EINVAL : 0;
}

/* A ROUTER with the options both of the server's sockets have. */
static void *new_router(zps_daemon_t *d)
{
    void *s = zmq_socket(d->ctx, ZMQ_ROUTER);
    if (!s)
        return NULL;
    int one = 1, linger = 1000, hwm = ZPS_MAX_QUEUED_REPLIES;
    int64_t maxmsg = (int64_t)d->cfg->max_message_bytes;
    /* With ROUTER_MANDATORY a reply beyond the peer's queue fails at once
     * and is dropped and counted (reply.c). */
    zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    return s;
}

/*
 * The sealed socket (sessions.h): a plain ROUTER on the CURVE socket's
 * address, at --seal-port or a port the system picks, with the same limits.
 * Anyone may connect to it; nothing it carries is opened without a session
 * granted over CURVE.
 */
static int open_seal_socket(zps_daemon_t *d, const char *where, uint32_t max, uint32_t per_host)
{
    const zps_server_config_t *cfg = d->cfg;
    if (zps_seal_library_init() != 0) {
        zps_error("libsodium cannot start: no sealed sessions");
        return ZPS_ESOCKET;
    }
    int rc = zps_sessions_open(&d->sessions, max);
    if (rc)
        return rc;
    char addr[sizeof(d->seal_endpoint)];
    const char *colon = strrchr(where, ':');
    int n = colon ? snprintf(addr, sizeof(addr), "%.*s:", (int)(colon - where), where) : -1;
    if (n < 0 || (size_t)n >= sizeof(addr) - 8) {
        zps_error("cannot derive the sealed socket's address from %s", where);
        return ZPS_EINVAL;
    }
    if (cfg->seal_port)
        snprintf(addr + n, sizeof(addr) - (size_t)n, "%u", (unsigned)cfg->seal_port);
    else
        snprintf(addr + n, sizeof(addr) - (size_t)n, "*");
    d->seal_sock = new_router(d);
    if (!d->seal_sock)
        return ZPS_ESOCKET;
    int one = 1;
    if (strncmp(addr, "tcp://[", 7) == 0)
        zmq_setsockopt(d->seal_sock, ZMQ_IPV6, &one, sizeof(one));
    rc = zps_conns_open(&d->seal_conns, d->ctx, d->seal_sock, max, per_host);
    if (rc) {
        zps_error("cannot follow the sealed socket's connections: %s", zmq_strerror(zmq_errno()));
        return rc;
    }
    zps_conns_set_limits(&d->seal_conns, cfg->max_message_bytes, 0);
    zps_conns_set_keyed(&d->seal_conns, true);
    if (zmq_bind(d->seal_sock, addr) != 0) {
        zps_error("cannot listen for sealed sessions on %s: %s (--seal-port, or --no-seal)", addr,
                  zmq_strerror(zmq_errno()));
        return ZPS_ESOCKET;
    }
    size_t len = sizeof(d->seal_endpoint);
    if (zmq_getsockopt(d->seal_sock, ZMQ_LAST_ENDPOINT, d->seal_endpoint, &len) != 0)
        snprintf(d->seal_endpoint, sizeof(d->seal_endpoint), "%s", addr);
    const char *port = strrchr(d->seal_endpoint, ':');
    long p = port ? strtol(port + 1, NULL, 10) : 0;
    if (p <= 0 || p > 65535) {
        zps_error("cannot tell the sealed socket's port from %s", d->seal_endpoint);
        return ZPS_ESOCKET;
    }
    d->seal_port_bound = (uint16_t)p;
    return 0;
}

static int open_socket(zps_daemon_t *d)
{
    const zps_server_config_t *cfg = d->cfg;
    d->ctx = zmq_ctx_new();
    if (!d->ctx)
        return ZPS_ESOCKET;
    d->sock = new_router(d);
    if (!d->sock)
        return ZPS_ESOCKET;
    int one = 1;
    uint32_t max = zps_conns_default_max();
    if (cfg->max_connections)
        max = cfg->max_connections;
    uint32_t per_host = max / 4 < 64 ? 64 : max / 4;
    if (cfg->max_connections_per_host >= 0)
        per_host = (uint32_t)cfg->max_connections_per_host;
    int rc = zps_conns_open(&d->conns, d->ctx, d->sock, max, per_host);
    if (rc) {
        zps_error("cannot follow the socket's connections: %s", zmq_strerror(zmq_errno()));
        return rc;
    }
    zps_conns_set_limits(&d->conns, cfg->max_message_bytes, 0);
    if (cfg->curve_key) {
        /* The ZAP handler is bound before the ROUTER, so no handshake
         * happens without it. */
        rc = zps_auth_open(&d->auth, d->ctx, cfg->authorized_keys, cfg->consistency.workers);
        if (rc)
            return rc;
        zps_conns_set_keyed(&d->conns, true);
        if (zmq_setsockopt(d->sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
            zmq_setsockopt(d->sock, ZMQ_CURVE_SECRETKEY, cfg->curve_key->secret_key,
                           ZPS_KEY_BYTES) != 0 ||
            zmq_setsockopt(d->sock, ZMQ_ZAP_DOMAIN, "zps", 3) != 0) {
            zps_error("cannot make the socket a CURVE server: %s", zmq_strerror(zmq_errno()));
            return ZPS_ESOCKET;
        }
    }
    char where[sizeof(d->endpoint)];
    if (bind_address(cfg->listen, where, sizeof(where)) != 0) {
        zps_error("cannot listen on %s: the address is too long", cfg->listen);
        return ZPS_ESOCKET;
    }
    if (strncmp(where, "tcp://[", 7) == 0)
        zmq_setsockopt(d->sock, ZMQ_IPV6, &one, sizeof(one));
    if (zmq_bind(d->sock, where) != 0) {
        int e = zmq_errno();
        /* ZeroMQ says ENODEV for a name that is neither an interface nor
         * resolves to an address of this host. */
        zps_error("cannot listen on %s: %s%s", cfg->listen, zmq_strerror(e),
                  e == ENODEV ? " (give an interface name such as eth0, an address of this "
                                "host, or a host name that resolves to one; docs/cluster.md)"
                              : "");
        return ZPS_ESOCKET;
    }
    size_t len = sizeof(d->endpoint);
    if (zmq_getsockopt(d->sock, ZMQ_LAST_ENDPOINT, d->endpoint, &len) != 0)
        snprintf(d->endpoint, sizeof(d->endpoint), "%s", cfg->listen);
    if (cfg->curve_key && !cfg->no_seal && strncmp(where, "tcp://", 6) == 0)
        return open_seal_socket(d, where, max, per_host);
    return 0;
}

static void release(zps_daemon_t *d)
{
    zps_metrics_http_stop(d->metrics);
    d->metrics = NULL;
    if (d->held) {
        zps_message_close(&d->held_msg);
        d->held = false;
    }
    if (d->step.apply) {
        zps_message_close(&d->step.apply_msg);
        d->step.apply = false;
    }
    if (d->slots) {
        for (uint32_t w = 0; w < d->cfg->consistency.workers; w++)
            if (d->slots[w].full)
                zps_payload_close(&d->slots[w].grad);
    }
    free(d->slots);
    free(d->dc_pulled);
    free(d->dc_sent);
    free(d->dc_grad);
    free(d->last_seen_ns);
    free(d->evictions);
    free(d->ranks);
    free(d->grads);
    free(d->segs);
    free(d->batches);
    free(d->tokens);
    zps_ckpt_queue_fini(&d->ckpts);
    zps_reply_cache_drop(&d->reply_cache);
    zps_reply_cache_drop(&d->observer_cache);
    zps_reply_cache_drop(&d->reply_cache16);
    zps_reply_cache_drop(&d->observer_cache16);
    zps_shm_destroy(&d->shm);
    zps_consistency_free(d->consistency);
    zps_assign_free(d->assign);
    zps_store_fini(&d->store);
    if (d->sock && d->conns.monitor)
        zmq_socket_monitor(d->sock, NULL, 0);
    if (d->seal_sock && d->seal_conns.monitor)
        zmq_socket_monitor(d->seal_sock, NULL, 0);
    zps_auth_close(&d->auth);
    zps_conns_close(&d->conns);
    zps_conns_close(&d->seal_conns);
    zps_sessions_close(&d->sessions);
    if (d->sock)
        zmq_close(d->sock);
    if (d->seal_sock)
        zmq_close(d->seal_sock);
    if (d->ctx)
        zmq_ctx_term(d->ctx);
    /* After zmq_ctx_term ZeroMQ holds no message: every buffer is ours again. */
    zps_reply_cache_fini(&d->reply_cache);
    zps_reply_cache_fini(&d->observer_cache);
    zps_reply_cache_fini(&d->reply_cache16);
    zps_reply_cache_fini(&d->observer_cache16);
}

int zps_server_run(const zps_server_config_t *cfg, bool *unsaved)
{
    if (unsaved)
        *unsaved = false;
    zps_daemon_t d;
    memset(&d, 0, sizeof(d));
    d.cfg = cfg;
    d.step.d = &d;
    d.check.d = &d;
    d.fingerprint = zps_fingerprint(cfg);
    d.started_ns = zps_now_ns();
    zps_store_init(&d.store);
    bool caches = true;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        caches &= zps_reply_cache_init(bf16 ? &d.reply_cache16 : &d.reply_cache, ZPS_REPLY_POOL,
                                       cfg->consistency.workers, ZPS_REPLY_SHARE, bf16) == 0;
        caches &= zps_reply_cache_init(bf16 ? &d.observer_cache16 : &d.observer_cache,
                                       ZPS_REPLY_OBSERVER_POOL, 1, ZPS_REPLY_OBSERVER_COPIES - 1,
                                       bf16) == 0;
    }
    if (!caches) {
        release(&d);
        return ZPS_ENOMEM;
    }
    snprintf(d.tag, sizeof(d.tag), "shard %u/%u", cfg->shard_index, cfg->shard_count);
    zps_log_set_tag(d.tag);

    if (!cfg->curve_key != !cfg->authorized_keys) {
        zps_error("a CURVE server needs both a key pair and an authorized keys file");
        return ZPS_EINVAL;
    }
    if (!cfg->curve_key && !zps_endpoint_is_local(cfg->listen)) {
        if (!cfg->insecure) {
            zps_error("refusing to listen on %s without encryption; give --key and "
                      "--authorized-keys, or pass --insecure to accept unauthenticated peers "
                      "from the network",
                      cfg->listen);
            return ZPS_EINVAL;
        }
        zps_warn("INSECURE: listening on %s without authentication or encryption: anyone who "
                 "can reach it can push as any worker, overwrite the model and read it "
                 "(docs/security.md)",
                 cfg->listen);
    }
    char why[256];
    int rc = zps_consistency_new(&cfg->consistency, &d.consistency, why, sizeof(why));
    if (rc) {
        zps_error("%s", rc == ZPS_EINVAL ? why : zps_strerror(rc));
        return rc;
    }
    uint32_t w = cfg->consistency.workers;
    /* Shard 0 hands out the batches of a shared data assignment: it
     * acknowledges every push, so a batch is completed in the same step
     * that applies its gradient (docs/worker.md). */
    if (cfg->shard_index == 0 && (rc = zps_assign_new(w, &d.assign)) != 0) {
        release(&d);
        return rc;
    }
    d.slots = calloc(w, sizeof(zps_slot_t));
    d.ranks = calloc(w, sizeof(uint32_t));
    d.grads = calloc(w, sizeof(float *));
    d.segs = calloc(w, sizeof(zps_grad_segs_t));
    d.batches = calloc(w, sizeof(uint32_t));
    d.tokens_cap = 64;
    d.tokens = calloc(d.tokens_cap, sizeof(uint64_t));
    d.last_seen_ns = calloc(w, sizeof(uint64_t));
    d.evictions = calloc(w, sizeof(uint64_t));
    if (!d.slots || !d.ranks || !d.grads || !d.segs || !d.batches || !d.tokens || !d.last_seen_ns ||
        !d.evictions) {
        release(&d);
        return ZPS_ENOMEM;
    }
    if (cfg->resume || cfg->resume_from) {
        rc = zps_resume(&d);
        if (rc) {
            release(&d);
            return rc;
        }
    }
    rc = open_socket(&d);
    if (rc) {
        release(&d);
        return rc;
    }

    int fd;
    size_t fdlen = sizeof(fd);
    zmq_getsockopt(d.sock, ZMQ_FD, &fd, &fdlen);
    uv_loop_init(&d.loop);
    uv_poll_init(&d.loop, &d.poll, fd);
    uv_idle_init(&d.loop, &d.idle);
    uv_timer_init(&d.loop, &d.liveness);
    uv_signal_init(&d.loop, &d.sigint);
    uv_signal_init(&d.loop, &d.sigterm);
    d.poll.data = d.idle.data = d.liveness.data = d.sigint.data = d.sigterm.data = &d;
    uv_poll_start(&d.poll, UV_READABLE, on_poll);
    uv_poll_init(&d.loop, &d.conns_poll, zps_conns_fd(&d.conns));
    uv_timer_init(&d.loop, &d.watch);
    d.conns_poll.data = d.watch.data = &d;
    uv_poll_start(&d.conns_poll, UV_READABLE, on_conns);
    if (d.seal_sock) {
        int sfd;
        size_t sfdlen = sizeof(sfd);
        zmq_getsockopt(d.seal_sock, ZMQ_FD, &sfd, &sfdlen);
        uv_poll_init(&d.loop, &d.seal_poll, sfd);
        uv_poll_init(&d.loop, &d.seal_conns_poll, zps_conns_fd(&d.seal_conns));
        d.seal_poll.data = d.seal_conns_poll.data = &d;
        uv_poll_start(&d.seal_poll, UV_READABLE, on_poll);
        uv_poll_start(&d.seal_conns_poll, UV_READABLE, on_conns);
    }
    uv_timer_start(&d.watch, on_watch, ZPS_CONNS_WATCH_MS, ZPS_CONNS_WATCH_MS);
    if (zps_consistency_initialized(d.consistency))
        zps_daemon_model_known(&d);
    /* A worker that never shows up counts as silent from the start. The
     * listening clock starts at wall time; without ticks it is wall time. */
    d.listen_ns = d.tick_ns = d.started_ns;
    d.listen_cap_ns = UINT64_MAX;
    for (uint32_t i = 0; i < w; i++)
        d.last_seen_ns[i] = d.started_ns;
    if (cfg->worker_timeout_ms > 0) {
        uint64_t every = cfg->worker_timeout_ms / 4;
        every = every < 20 ? 20 : every > 1000 ? 1000 : every;
        d.listen_cap_ns = every * 1000000ull;
        uv_timer_start(&d.liveness, on_liveness, every, every);
    }
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    if (d.auth.path) {
        uv_poll_init(&d.loop, &d.zap_poll, zps_auth_fd(&d.auth));
        uv_signal_init(&d.loop, &d.sighup);
        d.zap_poll.data = d.sighup.data = &d;
        uv_poll_start(&d.zap_poll, UV_READABLE, on_zap);
        uv_signal_start(&d.sighup, on_sighup, SIGHUP);
        /* A handshake that asked before the poll started would not wake it. */
        zps_auth_serve(&d.auth);
    }

    if (cfg->metrics_listen) {
        char reason[256];
        rc = zps_metrics_http_start(cfg->metrics_listen, &d.metrics, reason, sizeof(reason));
        if (rc) {
            zps_error("--metrics-listen: %s", reason);
            stop(&d, "start-up failure");
            uv_run(&d.loop, UV_RUN_DEFAULT);
            uv_loop_close(&d.loop);
            release(&d);
            return rc;
        }
        uv_timer_init(&d.loop, &d.publish);
        d.publish.data = &d;
        on_publish(&d.publish);
        uv_timer_start(&d.publish, on_publish, 1000, 1000);
        zps_info("metrics on http://%s/metrics", zps_metrics_http_address(d.metrics));
    }
    zps_info("listening on %s: %u workers, mode %s, optimizer %s, lr %g", d.endpoint, w,
             zps_mode_name(cfg->consistency.mode), zps_opt_name(&cfg->opt), cfg->opt.lr);
    if (d.seal_sock)
        zps_info("sealed sessions on %s (%s)", d.seal_endpoint,
                 zps_seal_cipher_available(ZPS_SEAL_AES256GCM)
                     ? "AES-256-GCM with clients that have AES-NI, else XChaCha20-Poly1305"
                     : "XChaCha20-Poly1305: this CPU has no AES-NI");
    if (cfg->endpoint_file && write_endpoint_file(cfg->endpoint_file, d.endpoint) != 0) {
        zps_error("cannot write %s: %s", cfg->endpoint_file, strerror(errno));
        stop(&d, "start-up failure");
        rc = ZPS_EIO;
    }
    /* Anything that arrived before the poll started would not wake us. */
    zps_daemon_drain(&d);
    uv_run(&d.loop, UV_RUN_DEFAULT);
    uv_loop_close(&d.loop);
    /* SIGTERM promised the state on disk; an exit that broke that promise
     * must not look like a clean one. */
    bool lost = zps_ckpt_queue_unsaved(&d);
    release(&d);
    if (lost) {
        zps_error("stopped without saving the shard's state (exit status 3)");
        if (unsaved)
            *unsaved = true;
        return rc ? rc : ZPS_EIO;
    }
    zps_info("stopped");
    return rc;
}
