/*
 * test_soak.c - an ASP cluster under hostile peers: the servers' memory stays
 * within its stated bound, honest workers keep at least half their speed,
 * and every push is accounted for.
 *
 * Two zps-server processes (shards 0/2 and 1/2 of a 1M-float model, 2 MB
 * each) run ASP for 5 workers. Four honest worker processes (ranks 0-3) train through
 * the client library (pull, push a small constant gradient, next clock) for
 * 2D seconds, in windows of about 5 s: in the even windows they are alone,
 * in the odd ones four hostile processes join, one behaviour each, every
 * one rate-limited so that they share the machine's cores instead of taking
 * them:
 *
 *   slow reader   observer pulls, and pulls as worker 4 (a rank of the
 *                 servers' five that no honest worker uses), sent without
 *                 pause, replies never read;
 *   unfinished    1 MiB frames with the "more" flag and never a last frame,
 *                 over ZMTP on a plain TCP socket (a ZeroMQ socket would
 *                 not send them); when the server drops the connection (or
 *                 it stalls), it starts again on a new one;
 *   flood         bursts of observer pulls, pulls and pushes of ranks that
 *                 do not exist, and malformed messages; replies are read;
 *   churn         connections opened and closed in a loop, and 100 idle
 *                 ones held open from a second loopback address.
 *
 * What must hold:
 *   - each server's VmRSS, sampled every 0.5 s, stays within the bound
 *     docs/protocol.md states (and, when the server reports one, within
 *     STATS limits.memory_bound_bytes); the first sample beyond it ends
 *     the run at once, so a server without the bound fails here instead of
 *     growing to gigabytes;
 *   - once every peer has gone, each server holds no more than its size at
 *     start, its state and the buffers it keeps for reuse (RETAINED_COPIES):
 *     what closed connections held has been handed back (release builds:
 *     AddressSanitizer's quarantine keeps freed memory resident);
 *   - the honest workers' steps per second in the hostile windows are at
 *     least half those in the quiet ones, and none of their pulls is
 *     refused with ZPS_EBUSY: worker 4's unread replies hold its own share
 *     of the reply copies, not theirs;
 *   - every push is accounted for: each shard's STATS counts.applied equals
 *     the pushes the honest workers saw it take (the hostile peers never
 *     push as a valid rank), every push a shard did not apply or acknowledge
 *     is one that a peer saw refused with a code and a reason, and nothing
 *     went unanswered.
 *
 * D is ZPS_SOAK_SECONDS (default 25: the whole test takes about a minute);
 * the full soak is ZPS_SOAK_SECONDS=600. ctest runs it under the label
 * "soak", with a timeout that follows ZPS_SOAK_SECONDS
 * (tests/integration/CMakeLists.txt).
 *
 * Every child is forked before this process creates a ZeroMQ context, waits
 * for a start time on a pipe, and reports on another pipe when done; the
 * children die with the test (PR_SET_PDEATHSIG) and the teardown kills by
 * PID whatever is left, on every path.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "checksum.h"
#include "zps/zps.h"
#include "error.h"
#include "fuzz_rng.h"
#include "harness.h"
#include "json.h"
#include "timeutil.h"
#include "wire.h"
#include "zps.pb-c.h"

/* Seconds per phase without ZPS_SOAK_SECONDS: the short mode (CMakeLists.txt sets it). */
#ifndef ZPS_SOAK_DEFAULT_SECONDS
#define ZPS_SOAK_DEFAULT_SECONDS 25
#endif

#define SHARDS 2
#define WORKERS 4
#define RANKS (WORKERS + 1)  /* the servers' --workers: rank 4 is the slow reader's */
#define N (1u << 20)         /* floats in the model */
#define SHARD_N (N / SHARDS) /* floats per shard: 2 MB */
#define SAMPLE_MS 500        /* RSS and STATS sampling period */
#define REPORT_WAIT_NS (30ull * 1000000000ull)
#define FRAME_BYTES (1u << 20) /* the unfinished peer's frames */
#define IDLE_CONNS 100         /* the churn peer's idle connections, over both servers */
#define NCODES 64              /* error codes counted, by -code */

/*
 * The memory bound docs/protocol.md states ("Limits", Memory), from its
 * formula: with P the shard's bytes, k the optimizer's state arrays (0:
 * SGD) and W the workers, under ASP
 *
 *   base + P x ((1 + k) + 1 + (2W + 1) + 4 + (1 + k)) + 256 KiB x (connections open)
 *        + max(4 x (P + 64 KiB + 8 MiB), 64 MiB)
 *
 * where base is 64 MiB (384 MiB in sanitizer builds). Connections open to
 * one server in this test: the tool's 1, 2 per worker (calls and
 * heartbeats), 1 each for the slow reader, the flood, the unfinished peer
 * and the churn, 50 idle ones; CONNS_MAX allows as many again for closed
 * ones the server has not yet seen go.
 */
#define KiB 1024ull
#define MiB (1024ull * 1024ull)
#ifdef ZPS_SANITIZED
#define BOUND_BASE (384 * MiB)
#define SANITIZED 1
#else
#define BOUND_BASE (64 * MiB)
#define SANITIZED 0
#endif
#define CONNS_MAX 96

/*
 * What a server may still hold once every peer has gone, beyond its size at
 * start (before INIT): the parameters (SGD: no state), the pooled reply
 * buffers it keeps for reuse (4 for workers, 2 for observers:
 * server/reply_cache.h), the push buffer the wire pool keeps (ASP: one),
 * in copies of the shard; and RETAINED_SLACK for ZeroMQ's and the
 * allocator's own. What closed connections held (their unfinished
 * messages, the copies their unread replies kept) is handed back
 * (docs/protocol.md, Limits: Memory).
 */
#define RETAINED_COPIES (1 + 4 + 2 + 1)
#define RETAINED_SLACK (16 * MiB)

enum role {
    ROLE_WORKER0 = 0, /* .. WORKERS - 1: honest workers */
    ROLE_SLOW = WORKERS,
    ROLE_UNFINISHED,
    ROLE_FLOOD,
    ROLE_CHURN,
    ROLES,
};

static const char *const role_names[ROLES] = {
    "worker 0", "worker 1", "worker 2", "worker 3", "slow reader", "unfinished", "flood", "churn",
};

/* What every child shares with the test. */
typedef struct board {
    _Atomic int stop; /* set by the test: finish the current step, report, exit */
} board_t;

/* What a child reports when it is done: one struct over its pipe. */
typedef struct report {
    int role;
    int failed; /* the child could not do its part (not a server verdict) */
    char note[240];
    /* Honest workers. */
    uint64_t steps[2];        /* steps finished in quiet and in hostile windows */
    double max_step_ms[2];    /* the longest step in quiet and in hostile windows */
    uint64_t taken[SHARDS];   /* distinct pushes each shard took */
    uint64_t refused[SHARDS]; /* push attempts a shard refused, with a code */
    uint64_t refused_by[SHARDS][NCODES];
    uint64_t unanswered[SHARDS]; /* push attempts a shard did not answer in time */
    uint64_t pull_failures, pulls_busy, rejoined;
    int last_code;
    /* Hostile peers. */
    uint64_t sent, eagain, replies, missing, no_reason, unexpected;
    uint64_t by_code[NCODES];      /* replies by -status (0: OK) */
    uint64_t pushes_sent[SHARDS];  /* flood: pushes of ranks that do not exist */
    uint64_t push_refused[SHARDS]; /* flood: their refusals, each with a code and a reason */
    uint64_t conns, dropped_by_server, stalled, capped, frames;
    uint64_t idle_open, idle_answered;
} report_t;

/* The test's processes and pipes, so that teardown finds them on any path. */
typedef struct soak {
    harness_server_t srv[SHARDS];
    pid_t pid[ROLES];
    int go[ROLES];     /* write end: the start time */
    int report[ROLES]; /* read end */
    board_t *board;
} soak_t;

static soak_t *soak; /* for the children, which inherit it */

/* ---- small helpers ---- */

static double seconds(uint64_t ns)
{
    return (double)ns * 1e-9;
}

static bool stopping(uint64_t end)
{
    return atomic_load(&soak->board->stop) || zps_now_ns() >= end;
}

/* Sleeps until `t` (monotonic ns), in short naps that watch the stop flag. */
static void sleep_until(uint64_t t)
{
    for (uint64_t now = zps_now_ns(); now < t && !atomic_load(&soak->board->stop);
         now = zps_now_ns()) {
        double ms = (double)(t - now) * 1e-6;
        zps_sleep_ms(ms < 50 ? ms : 50);
    }
}

/*
 * The run is 2n windows of W seconds (W about 5 s, n W = D): even windows
 * are quiet, odd ones hostile. Alternating, rather than D quiet then D
 * hostile, keeps a slow spell of the machine from landing on one phase.
 */
static uint64_t window_ns(uint64_t d_ns)
{
    uint64_t n = (d_ns + 2500000000ull) / 5000000000ull;
    return d_ns / (n ? n : 1);
}

/* 0 (quiet) or 1 (hostile): the phase of the window time `now` is in. */
static int phase_at(uint64_t t_go, uint64_t w_ns, uint64_t now)
{
    return now <= t_go ? 0 : (int)(((now - t_go) / w_ns) & 1);
}

/* Seconds of phase p between t_go and t. */
static double phase_seconds(uint64_t t_go, uint64_t w_ns, uint64_t t, int p)
{
    if (t <= t_go)
        return 0;
    uint64_t k = (t - t_go) / w_ns, rest = (t - t_go) % w_ns;
    uint64_t ns = (k / 2) * w_ns + (k % 2 == 1 && p == 0 ? w_ns : 0);
    if ((int)(k & 1) == p)
        ns += rest;
    return seconds(ns);
}

static void note(report_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note, sizeof(r->note), fmt, ap);
    va_end(ap);
}

static unsigned code_index(int code)
{
    unsigned i = (unsigned)(code < 0 ? -code : code);
    return i < NCODES ? i : NCODES - 1;
}

static void *dealer(void *ctx, const char *endpoint)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    if (zmq_connect(s, endpoint) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* A request header for this cluster; the caller sets the rest. */
static Zps__Header request(Zps__MsgType type, int32_t worker, uint64_t id)
{
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = type;
    h.worker = worker;
    h.request_id = id;
    h.total = N;
    return h;
}

/*
 * Sends a packed header and `extra` more frames (each `payload` of `len`
 * bytes, copied), without waiting. Returns 0, or -1 with errno (EAGAIN: the
 * socket's queue is full; nothing was sent).
 */
static int send_request(void *s, const Zps__Header *h, const void *payload, size_t len, int extra)
{
    uint8_t buf[256];
    size_t n = zps__header__get_packed_size(h);
    if (n > sizeof(buf)) {
        errno = EINVAL;
        return -1;
    }
    zps__header__pack(h, buf);
    if (zmq_send(s, buf, n, ZMQ_DONTWAIT | (extra ? ZMQ_SNDMORE : 0)) < 0)
        return -1;
    /* Once the first frame is queued, the rest of the message always is. */
    for (int k = 0; k < extra; k++)
        zmq_send(s, payload, len, k + 1 < extra ? ZMQ_SNDMORE : 0);
    return 0;
}

/*
 * Receives one reply if one is ready within `ms` and counts it into r.
 * Returns its header (caller frees with zps__header__free_unpacked), or
 * NULL when none came or it did not decode (counted as unexpected).
 */
static Zps__Header *recv_reply(void *s, int ms, report_t *r)
{
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0)
        return NULL;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) {
        zmq_msg_close(&m);
        return NULL;
    }
    Zps__Header *h = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    /* A successful pull's payload follows; it is not looked at. */
    while (zmq_msg_more(&m)) {
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0)
            break;
    }
    zmq_msg_close(&m);
    r->replies++;
    if (!h || !h->reply) {
        r->unexpected++;
        if (h)
            zps__header__free_unpacked(h, NULL);
        return NULL;
    }
    r->by_code[code_index(h->status)]++;
    if (h->status != 0 && (!h->error || !h->error[0]))
        r->no_reason++;
    return h;
}

/* ---- honest workers ---- */

/* The gradient: small, finite, the same at every step (|g| <= 3e-4). */
static float gradient(uint32_t i, int w)
{
    return 1e-4f * (float)((int)((i + 3u * (uint32_t)w) % 7u) - 3);
}

/*
 * An ASP loop through the client library: pull for clock t, push at clock
 * t, next clock, until the end of the run. A push that a shard did not take
 * is sent again at the same clock (a shard that took it acknowledges it as a
 * retry), so each shard's count of distinct pushes taken is what it applied.
 */
static void run_worker(int w, uint64_t t_go, uint64_t d_ns, report_t *r)
{
    const char *eps[SHARDS];
    for (int s = 0; s < SHARDS; s++)
        eps[s] = soak->srv[s].endpoint;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = w;
    o.timeout_ms = 20000;
    o.retry_ms = 5000;
    o.heartbeat_ms = 500;
    o.wait_log_ms = 0;
    zps_client_t *c = NULL;
    float *p = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    int rc = p && g ? zps_client_new(eps, SHARDS, &o, &c) : ZPS_ENOMEM;
    if (rc) {
        r->failed = 1;
        note(r, "client: %s", zps_strerror(rc));
        goto out;
    }
    for (uint32_t i = 0; i < N; i++)
        g[i] = gradient(i, w);

    uint64_t end = t_go + 2 * d_ns, t = 0;
    bool took[SHARDS] = {false};
    bool pulled = false;
    int attempts = 0, pull_run = 0;
    uint64_t step_start = t_go;
    sleep_until(t_go);
    while (!stopping(end)) {
        zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
        if (!pulled) {
            rc = zps_client_pull(c, t, p, N, &info);
            if (rc) {
                r->pull_failures++;
                r->last_code = rc == ZPS_EREMOTE ? zps_client_last_remote_status(c) : rc;
                r->pulls_busy += r->last_code == ZPS_EBUSY;
                if (++pull_run >= 50) {
                    r->failed = 1;
                    note(r, "pull for clock %" PRIu64 ": %s", t, zps_client_last_error(c));
                    break;
                }
                zps_sleep_ms(20);
                continue;
            }
            pulled = true;
            pull_run = 0;
        }
        rc = zps_client_push(c, t, g, N, 1, &info);
        int code = rc == ZPS_EREMOTE || rc == ZPS_EPARTIAL ? zps_client_last_remote_status(c) : 0;
        bool all = true;
        for (int s = 0; s < SHARDS; s++) {
            if (zps_client_push_taken(c, (size_t)s)) {
                r->taken[s] += !took[s];
                took[s] = true;
            } else if (code) {
                r->refused[s]++;
                r->refused_by[s][code_index(code)]++;
                all = false;
            } else {
                r->unanswered[s]++;
                all = false;
            }
        }
        if (!all) {
            r->last_code = code ? code : rc;
            if (++attempts >= 5) {
                r->failed = 1;
                note(r, "push at clock %" PRIu64 " not taken by every shard after %d tries: %s", t,
                     attempts, zps_client_last_error(c));
                break;
            }
            zps_sleep_ms(50);
            continue;
        }
        uint64_t now = zps_now_ns();
        int phase = phase_at(t_go, window_ns(d_ns), now);
        double ms = (double)(now - step_start) * 1e-6;
        r->steps[phase]++;
        if (ms > r->max_step_ms[phase])
            r->max_step_ms[phase] = ms;
        step_start = now;
        if (info.rejoined)
            r->rejoined++;
        t = info.next_clock > t + 1 ? info.next_clock : t + 1;
        memset(took, 0, sizeof(took));
        pulled = false;
        attempts = 0;
    }
out:
    zps_client_free(c);
    free(p);
    free(g);
}

/* ---- hostile peers ---- */

/* Observer pulls, and pulls as worker WORKERS (rank 4), on a socket whose replies are never read.
 */
static void run_slow_reader(void *ctx, uint64_t start, uint64_t end, report_t *r)
{
    void *s[SHARDS];
    for (int k = 0; k < SHARDS; k++) {
        s[k] = zmq_socket(ctx, ZMQ_DEALER);
        /* Take as little as possible: one message, a small kernel buffer. */
        int linger = 0, rcvhwm = 1, rcvbuf = 64 * 1024;
        zmq_setsockopt(s[k], ZMQ_LINGER, &linger, sizeof(linger));
        zmq_setsockopt(s[k], ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
        zmq_setsockopt(s[k], ZMQ_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        zmq_connect(s[k], soak->srv[k].endpoint);
    }
    sleep_until(start);
    r->conns = SHARDS;
    for (uint64_t id = 1; !stopping(end); id++) {
        for (int k = 0; k < SHARDS; k++) {
            Zps__Header h = request(ZPS__MSG_TYPE__MSG_PULL, id % 2 ? -1 : WORKERS, id);
            if (send_request(s[k], &h, NULL, 0, 0) == 0)
                r->sent++;
            else
                r->eagain++;
        }
        zps_sleep_ms(5);
    }
    for (int k = 0; k < SHARDS; k++)
        zmq_close(s[k]);
}

/*
 * A TCP connection to `endpoint` ("tcp://127.0.0.1:PORT") that has said the
 * ZMTP 3.0 greeting and a DEALER's READY (NULL mechanism). Returns a
 * non-blocking descriptor, or -1.
 */
static int zmtp_dealer(const char *endpoint)
{
    unsigned port;
    if (sscanf(endpoint, "tcp://127.0.0.1:%u", &port) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    /* Greeting: signature, version 3.0, mechanism NULL, as-server 0, filler. */
    uint8_t hello[64 + 30] = {0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0, 'N', 'U', 'L', 'L'};
    /* READY: a short command of 28 bytes, Socket-Type DEALER. */
    static const uint8_t ready[30] = {0x04, 28,  5,   'R', 'E', 'A', 'D', 'Y', 11,  'S',
                                      'o',  'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e',
                                      0,    0,   0,   6,   'D', 'E', 'A', 'L', 'E', 'R'};
    memcpy(hello + 64, ready, sizeof(ready));
    if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Reads and drops what the server sent (its greeting); false once it has closed. */
static bool zmtp_alive(int fd)
{
    uint8_t buf[4096];
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (k > 0)
            continue;
        return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
}

/*
 * 1 MiB frames with the "more" flag and never a last frame, 4 every 50 ms
 * (80 MB/s). A ZeroMQ DEALER cannot do this: it keeps the frames of an
 * unfinished message in its own queue and sends none of them, so this peer
 * speaks ZMTP 3.0 over a plain TCP socket. A connection is given up when
 * the server closes it, when it takes nothing for a second (stalled), or
 * after 1024 frames or 10 s, and a new one is made, in turn to each server.
 */
static void run_unfinished(uint64_t start, uint64_t end, report_t *r)
{
    /* One frame: flags MORE | LONG, an 8-byte big-endian size, 1 MiB of bytes. */
    static uint8_t frame[9 + FRAME_BYTES];
    memset(frame, 0xa5, sizeof(frame));
    frame[0] = 0x03;
    for (int i = 0; i < 8; i++)
        frame[1 + i] = (uint8_t)((uint64_t)FRAME_BYTES >> (56 - 8 * i));
    sleep_until(start);
    while (!stopping(end)) {
        int fd = zmtp_dealer(soak->srv[r->conns % SHARDS].endpoint);
        r->conns++;
        if (fd < 0) {
            r->unexpected++;
            zps_sleep_ms(50);
            continue;
        }
        uint64_t opened = zps_now_ns(), progress = opened, frames = 0;
        size_t off = 0; /* bytes of the current frame already sent */
        while (!stopping(end)) {
            size_t budget = 4 * sizeof(frame);
            bool closed = false;
            while (budget > 0) {
                size_t n = sizeof(frame) - off < budget ? sizeof(frame) - off : budget;
                ssize_t k = send(fd, frame + off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                    closed = errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
                    break;
                }
                progress = zps_now_ns();
                budget -= (size_t)k;
                off += (size_t)k;
                if (off == sizeof(frame)) {
                    off = 0;
                    frames++;
                }
            }
            if (closed || !zmtp_alive(fd)) {
                r->dropped_by_server++;
                break;
            }
            uint64_t now = zps_now_ns();
            if (now - progress > 1000000000ull) {
                r->stalled++;
                break;
            }
            if (frames >= 1024 || now - opened > 10ull * 1000000000ull) {
                r->capped++;
                break;
            }
            zps_sleep_ms(50);
        }
        r->frames += frames;
        close(fd);
    }
}

/*
 * Reads the flood's replies from server k until none is outstanding or `ms`
 * pass. A push's reply must refuse it as ZPS_EWORKER, with a reason.
 */
static void flood_replies(void *s, int k, uint64_t *outstanding, int ms, report_t *r)
{
    uint64_t deadline = zps_now_ns() + (uint64_t)ms * 1000000ull;
    while (*outstanding > 0 && zps_now_ns() < deadline) {
        uint64_t before = r->replies;
        Zps__Header *h = recv_reply(s, 100, r);
        *outstanding -= r->replies - before;
        if (!h)
            continue;
        if (h->type == ZPS__MSG_TYPE__MSG_PUSH) {
            if (h->status == ZPS_EWORKER && h->error && h->error[0])
                r->push_refused[k]++;
            else
                r->unexpected++;
        }
        zps__header__free_unpacked(h, NULL);
    }
}

/*
 * Bursts, every 50 ms, to each server in turn: 2 observer pulls; 12 pulls
 * and 12 pushes (empty payload) of ranks that do not exist; 6 malformed
 * messages (an undecodable header, a wrong version, a heartbeat with a
 * frame too many). Replies are read and checked: every one comes, every
 * error has a reason, and the pushes are refused as ZPS_EWORKER. The ranks
 * are drawn from fuzz_rng.h, seeded by the role.
 */
static void run_flood(void *ctx, uint64_t start, uint64_t end, report_t *r)
{
    static const int32_t bad_ranks[] = {RANKS, RANKS + 1, 1000, INT32_MAX, -2, INT32_MIN};
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    void *s[SHARDS];
    for (int k = 0; k < SHARDS; k++)
        s[k] = dealer(ctx, soak->srv[k].endpoint);
    r->conns = SHARDS;
    sleep_until(start);
    uint64_t id = 1, outstanding[SHARDS] = {0, 0};
    for (uint64_t burst = 0; !stopping(end); burst++) {
        int k = (int)(burst % SHARDS);
        for (int j = 0; j < 32; j++) {
            int rc;
            Zps__Header h;
            if (j < 2) {
                h = request(ZPS__MSG_TYPE__MSG_PULL, -1, id++);
                rc = send_request(s[k], &h, NULL, 0, 0);
            } else if (j < 14) {
                h = request(ZPS__MSG_TYPE__MSG_PULL, bad_ranks[below(6)], id++);
                rc = send_request(s[k], &h, NULL, 0, 0);
            } else if (j < 26) {
                h = request(ZPS__MSG_TYPE__MSG_PUSH, bad_ranks[below(6)], id++);
                h.clock = below(4);
                h.batch = 1;
                h.offset = (uint64_t)k * SHARD_N;
                h.length = 0;
                h.checksum = zps_crc32c(0, NULL, 0);
                rc = send_request(s[k], &h, "", 0, 1);
                if (rc == 0)
                    r->pushes_sent[k]++;
            } else if (j < 28) {
                rc = zmq_send(s[k], junk, sizeof(junk), ZMQ_DONTWAIT) < 0 ? -1 : 0;
            } else if (j < 30) {
                h = request(ZPS__MSG_TYPE__MSG_PULL, -1, id++);
                h.version = 99;
                rc = send_request(s[k], &h, NULL, 0, 0);
            } else {
                h = request(ZPS__MSG_TYPE__MSG_HEARTBEAT, -1, id++);
                rc = send_request(s[k], &h, "xx", 2, 1);
            }
            if (rc == 0) {
                r->sent++;
                outstanding[k]++;
            } else {
                r->eagain++;
            }
        }
        /* Every request gets one reply: wait for them, at most 5 s. */
        flood_replies(s[k], k, &outstanding[k], 5000, r);
        zps_sleep_ms(50);
    }
    for (int k = 0; k < SHARDS; k++) {
        flood_replies(s[k], k, &outstanding[k], 2000, r);
        r->missing += outstanding[k];
    }
    for (int k = 0; k < SHARDS; k++)
        zmq_close(s[k]);
}

/*
 * Connections opened, used for one heartbeat and closed, every 10 ms, in
 * turn to each server; and IDLE_CONNS idle connections from 127.0.0.2 held
 * for the whole phase. At the end, each idle connection sends a heartbeat,
 * to see how many of them the servers still serve.
 */
static void run_churn(void *ctx, uint64_t start, uint64_t end, report_t *r)
{
    void *idle[IDLE_CONNS];
    sleep_until(start);
    for (int i = 0; i < IDLE_CONNS; i++) {
        const char *ep = soak->srv[i % SHARDS].endpoint;
        char src[300];
        /* "tcp://127.0.0.2:0;127.0.0.1:PORT": connect from another address. */
        snprintf(src, sizeof(src), "tcp://127.0.0.2:0;%s",
                 strncmp(ep, "tcp://", 6) == 0 ? ep + 6 : ep);
        idle[i] = dealer(ctx, src);
        r->idle_open += idle[i] != NULL;
    }
    uint64_t id = 1;
    for (uint64_t n = 0; !stopping(end); n++) {
        void *s = dealer(ctx, soak->srv[n % SHARDS].endpoint);
        if (!s) {
            r->unexpected++;
            break;
        }
        r->conns++;
        Zps__Header h = request(ZPS__MSG_TYPE__MSG_HEARTBEAT, -1, id++);
        if (send_request(s, &h, NULL, 0, 0) == 0) {
            r->sent++;
            Zps__Header *rep = recv_reply(s, 200, r);
            if (rep)
                zps__header__free_unpacked(rep, NULL);
            else
                r->missing++;
        } else {
            r->eagain++;
        }
        zmq_close(s);
        zps_sleep_ms(10);
    }
    report_t scratch;
    memset(&scratch, 0, sizeof(scratch));
    for (int i = 0; i < IDLE_CONNS; i++) {
        if (!idle[i])
            continue;
        Zps__Header h = request(ZPS__MSG_TYPE__MSG_HEARTBEAT, -1, id++);
        send_request(idle[i], &h, NULL, 0, 0);
    }
    uint64_t deadline = zps_now_ns() + 2000000000ull;
    for (int i = 0; i < IDLE_CONNS; i++) {
        Zps__Header *rep = NULL;
        while (idle[i] && !rep && zps_now_ns() < deadline)
            rep = recv_reply(idle[i], 50, &scratch);
        if (rep) {
            r->idle_answered++;
            zps__header__free_unpacked(rep, NULL);
        }
    }
    for (int i = 0; i < IDLE_CONNS; i++)
        if (idle[i])
            zmq_close(idle[i]);
}

/* ---- processes ---- */

static void write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

/* A child's life: wait for the start time, play its role, report, exit. */
static void child_main(int role, int go_fd, int report_fd, uint64_t d_ns)
{
    uint64_t t_go;
    if (read(go_fd, &t_go, sizeof(t_go)) != (ssize_t)sizeof(t_go))
        _exit(0); /* the test gave up before the start */
    close(go_fd);
    static report_t r;
    memset(&r, 0, sizeof(r));
    r.role = role;
    rng_state = 0x50a4ull + (uint64_t)role;
    uint64_t end = t_go + 2 * d_ns;
    if (role < WORKERS) {
        run_worker(role, t_go, d_ns, &r);
    } else {
        void *ctx = zmq_ctx_new();
        /* Hostile peers play in the odd windows only. */
        const uint64_t w_ns = window_ns(d_ns);
        for (uint64_t start = t_go + w_ns; start + w_ns <= end; start += 2 * w_ns) {
            if (role == ROLE_SLOW)
                run_slow_reader(ctx, start, start + w_ns, &r);
            else if (role == ROLE_UNFINISHED)
                run_unfinished(start, start + w_ns, &r);
            else if (role == ROLE_FLOOD)
                run_flood(ctx, start, start + w_ns, &r);
            else
                run_churn(ctx, start, start + w_ns, &r);
        }
        zmq_ctx_term(ctx);
    }
    write_all(report_fd, &r, sizeof(r));
    close(report_fd);
    _exit(0);
}

static pid_t fork_child(int role, uint64_t d_ns)
{
    int go[2], rep[2];
    if (pipe(go) != 0)
        return -1;
    if (pipe(rep) != 0) {
        close(go[0]);
        close(go[1]);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        /* Keep only this child's own ends. */
        for (int i = 0; i < role; i++) {
            close(soak->go[i]);
            close(soak->report[i]);
        }
        close(go[1]);
        close(rep[0]);
        child_main(role, go[0], rep[1], d_ns);
    }
    close(go[0]);
    close(rep[1]);
    if (pid < 0) {
        close(go[1]);
        close(rep[0]);
        return -1;
    }
    soak->go[role] = go[1];
    soak->report[role] = rep[0];
    soak->pid[role] = pid;
    return pid;
}

/* Kills and reaps every child still there, by PID; closes their pipes. */
static void reap_children(void)
{
    for (int i = 0; i < ROLES; i++) {
        if (soak->pid[i] > 0) {
            kill(soak->pid[i], SIGKILL);
            waitpid(soak->pid[i], NULL, 0);
            soak->pid[i] = 0;
        }
        if (soak->go[i] >= 0)
            close(soak->go[i]);
        if (soak->report[i] >= 0)
            close(soak->report[i]);
        soak->go[i] = soak->report[i] = -1;
    }
}

/* Reads every child's report, waiting at most until `deadline`. got[i] says who reported. */
static void read_reports(report_t *reports, bool *got, uint64_t deadline)
{
    size_t have[ROLES] = {0};
    for (;;) {
        struct pollfd fds[ROLES];
        int idx[ROLES], n = 0;
        for (int i = 0; i < ROLES; i++) {
            if (soak->report[i] >= 0 && have[i] < sizeof(report_t)) {
                fds[n] = (struct pollfd){soak->report[i], POLLIN, 0};
                idx[n++] = i;
            }
        }
        uint64_t now = zps_now_ns();
        if (n == 0 || now >= deadline)
            break;
        if (poll(fds, (nfds_t)n, (int)((deadline - now) / 1000000 + 1)) <= 0)
            continue;
        for (int j = 0; j < n; j++) {
            int i = idx[j];
            if (!(fds[j].revents & (POLLIN | POLLHUP)))
                continue;
            ssize_t k =
                read(soak->report[i], (char *)&reports[i] + have[i], sizeof(report_t) - have[i]);
            if (k > 0) {
                have[i] += (size_t)k;
            } else {
                close(soak->report[i]); /* ended without a whole report */
                soak->report[i] = -1;
            }
        }
    }
    for (int i = 0; i < ROLES; i++)
        got[i] = have[i] == sizeof(report_t);
}

/* ---- STATS ---- */

static double jnum(const zps_json_t *root, const char *obj, const char *key)
{
    const zps_json_t *o = obj ? zps_json_get(root, obj) : root;
    return zps_json_number(zps_json_get(o, key), -1);
}

static zps_json_t *stats_of(zps_client_t *c, int shard)
{
    char *text = NULL;
    zps_json_t *j = NULL;
    if (zps_client_stats(c, (size_t)shard, &text) == 0)
        zps_json_parse(text, &j, NULL, 0);
    free(text);
    return j;
}

/* What a server's limits and hostile counters say, as one line each. */
static void print_stats(int shard, const zps_json_t *j)
{
    const zps_json_t *lim = zps_json_get(j, "limits");
    const zps_json_t *con = zps_json_get(j, "connections");
    const zps_json_t *err = zps_json_get(j, "errors_by_code");
    printf("  shard %d: replies_dropped %.0f, pulls_cancelled %.0f, errors %.0f (", shard,
           jnum(j, "counts", "replies_dropped"), jnum(j, "counts", "pulls_cancelled"),
           jnum(j, "counts", "errors"));
    for (size_t i = 0; err && i < err->count; i++)
        printf("%s%s %.0f", i ? ", " : "", err->keys[i], err->items[i].number);
    printf(")\n");
    if (con) {
        printf("    connections:");
        for (size_t i = 0; i < con->count; i++)
            printf(" %s %.0f", con->keys[i], con->items[i].number);
        printf("\n");
    } else {
        printf("    connections: not in STATS\n");
    }
    if (lim) {
        printf("    limits:");
        for (size_t i = 0; i < lim->count; i++)
            printf(" %s %.0f", lim->keys[i], lim->items[i].number);
        printf("\n");
    } else {
        printf("    limits: not in STATS\n");
    }
}

/* ---- the test ---- */

/* See BOUND_BASE: the bound in bytes, computed here from protocol.md's formula. */
static uint64_t documented_bound(void)
{
    const uint64_t p = SHARD_N * sizeof(float), k = 0, w = RANKS;
    const uint64_t copies = (1 + k) + 1 + (2 * w + 1) + 4 + (1 + k);
    const uint64_t peer_buffer = p + 64 * KiB + 8 * MiB;
    const uint64_t unread = 4 * peer_buffer > 64 * MiB ? 4 * peer_buffer : 64 * MiB;
    return BOUND_BASE + p * copies + 256 * KiB * CONNS_MAX + unread;
}

static uint64_t soak_seconds(void)
{
    const char *s = getenv("ZPS_SOAK_SECONDS");
    char *end;
    unsigned long v = s && *s ? strtoul(s, &end, 10) : 0;
    return s && *s && *end == '\0' && v > 0 ? v : ZPS_SOAK_DEFAULT_SECONDS;
}

static int setup(void **state)
{
    soak = calloc(1, sizeof(*soak));
    if (!soak)
        return -1;
    for (int i = 0; i < ROLES; i++)
        soak->go[i] = soak->report[i] = -1;
    soak->board =
        mmap(NULL, sizeof(board_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (soak->board == MAP_FAILED) {
        free(soak);
        return -1;
    }
    atomic_store(&soak->board->stop, 0);
    *state = soak;
    return 0;
}

/* Runs on every path, failed assertions included: nothing is left behind. */
static int teardown(void **state)
{
    (void)state;
    atomic_store(&soak->board->stop, 1);
    reap_children();
    for (int s = 0; s < SHARDS; s++)
        harness_stop(&soak->srv[s]);
    munmap(soak->board, sizeof(board_t));
    free(soak);
    soak = NULL;
    return 0;
}

static void test_soak(void **state)
{
    (void)state;
    const uint64_t d_s = soak_seconds(), d_ns = d_s * 1000000000ull;
    printf("soak: ASP, %d shards of %u floats, %d honest workers of %d ranks, %" PRIu64
           " s per phase\n",
           SHARDS, SHARD_N, WORKERS, RANKS, d_s);

    long rss_start[SHARDS];
    for (int s = 0; s < SHARDS; s++) {
        char shard[16];
        snprintf(shard, sizeof(shard), "%d/%d", s, SHARDS);
        const char *args[] = {
            "--workers",        "5", "--mode",      "asp",   "--shard", shard, "--lr", "0.001",
            "--worker-timeout", "4", "--log-level", "error", NULL};
        assert_int_equal(harness_start(&soak->srv[s], args), 0);
        rss_start[s] = harness_rss_kb(soak->srv[s].pid);
        assert_true(rss_start[s] > 0);
    }
    /* Every child before any ZeroMQ context of this process. */
    for (int i = 0; i < ROLES; i++)
        assert_true(fork_child(i, d_ns) > 0);

    const char *eps[SHARDS];
    for (int s = 0; s < SHARDS; s++)
        eps[s] = soak->srv[s].endpoint;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = 10000;
    o.wait_log_ms = 0;
    zps_client_t *tool;
    assert_int_equal(zps_client_new(eps, SHARDS, &o, &tool), 0);
    float *zeros = calloc(N, sizeof(float));
    assert_non_null(zeros);
    int init_rc = zps_client_init(tool, zeros, N);
    free(zeros);
    if (init_rc != 0) {
        zps_client_free(tool);
        fail_msg("INIT: %s", zps_strerror(init_rc));
    }

    const long bound_kb = (long)(documented_bound() / KiB);

    /* Go: windows from t_go to t_go + 2D, quiet and hostile in turn. */
    const uint64_t t_go = zps_now_ns() + 200000000ull;
    for (int i = 0; i < ROLES; i++) {
        write_all(soak->go[i], &t_go, sizeof(t_go));
        close(soak->go[i]);
        soak->go[i] = -1;
    }
    long rss_max[2][SHARDS] = {{0}};
    /* The largest memory_bound_bytes and connections.open STATS reported. */
    double stated_max[SHARDS] = {-1, -1}, open_max[SHARDS] = {-1, -1};
    char why_stopped[300] = "";
    uint64_t end = t_go + 2 * d_ns, now;
    while ((now = zps_now_ns()) < end) {
        int phase = phase_at(t_go, window_ns(d_ns), now);
        for (int s = 0; s < SHARDS && !why_stopped[0]; s++) {
            long rss = harness_alive(&soak->srv[s]) ? harness_rss_kb(soak->srv[s].pid) : -1;
            if (rss < 0) {
                snprintf(why_stopped, sizeof(why_stopped), "shard %d exited", s);
                break;
            }
            if (rss > rss_max[phase][s])
                rss_max[phase][s] = rss;
            zps_json_t *j = stats_of(tool, s);
            double stated = j ? jnum(j, "limits", "memory_bound_bytes") : -1;
            double open = j ? jnum(j, "connections", "open") : -1;
            zps_json_free(j);
            if (stated > stated_max[s])
                stated_max[s] = stated;
            if (open > open_max[s])
                open_max[s] = open;
            if (rss > bound_kb)
                snprintf(why_stopped, sizeof(why_stopped),
                         "shard %d RSS %ld kB beyond the bound of docs/protocol.md, %ld kB, "
                         "%.1f s into the run (a %s window)",
                         s, rss, bound_kb, seconds(now - t_go), phase ? "hostile" : "quiet");
            else if (stated > 0 && (double)rss * 1024.0 > stated)
                snprintf(why_stopped, sizeof(why_stopped),
                         "shard %d RSS %ld kB beyond its stated memory_bound_bytes %.0f, "
                         "%.1f s into the run (a %s window)",
                         s, rss, stated, seconds(now - t_go), phase ? "hostile" : "quiet");
        }
        if (why_stopped[0])
            break;
        zps_sleep_ms(SAMPLE_MS);
    }
    uint64_t stop_ns = zps_now_ns();
    if (stop_ns > end)
        stop_ns = end;
    atomic_store(&soak->board->stop, 1);

    static report_t rep[ROLES];
    bool got[ROLES];
    memset(rep, 0, sizeof(rep));
    read_reports(rep, got, zps_now_ns() + REPORT_WAIT_NS);
    reap_children();

    /* Once every peer's connection is gone (only the tool's is left;
     * bounded), what the servers still hold: the state and the buffers
     * they keep for reuse, not what the closed connections held. */
    long rss_end[SHARDS];
    double open_end[SHARDS];
    for (int s = 0; s < SHARDS; s++) {
        open_end[s] = -1;
        for (uint64_t t0 = zps_now_ns(); zps_now_ns() - t0 < 10000000000ull; zps_sleep_ms(50)) {
            zps_json_t *j = stats_of(tool, s);
            open_end[s] = j ? jnum(j, "connections", "open") : -1;
            zps_json_free(j);
            if (open_end[s] >= 0 && open_end[s] <= 1)
                break;
        }
    }
    /* The server trims at most once a second, 100 ms after the last
     * connection that held unread bytes closed. */
    zps_sleep_ms(2500);
    for (int s = 0; s < SHARDS; s++)
        rss_end[s] = harness_alive(&soak->srv[s]) ? harness_rss_kb(soak->srv[s].pid) : -1;

    zps_json_t *st[SHARDS];
    for (int s = 0; s < SHARDS; s++)
        st[s] = stats_of(tool, s);
    zps_client_free(tool);

    /* Rates. */
    uint64_t steps[2] = {0, 0};
    double worst_step[2] = {0, 0};
    for (int w = 0; w < WORKERS; w++)
        for (int p = 0; p < 2; p++) {
            steps[p] += rep[w].steps[p];
            if (rep[w].max_step_ms[p] > worst_step[p])
                worst_step[p] = rep[w].max_step_ms[p];
        }
    double dur[2] = {phase_seconds(t_go, window_ns(d_ns), stop_ns, 0),
                     phase_seconds(t_go, window_ns(d_ns), stop_ns, 1)};
    double rate[2] = {dur[0] > 0 ? (double)steps[0] / dur[0] : 0,
                      dur[1] > 0 ? (double)steps[1] / dur[1] : 0};
    double ratio = rate[0] > 0 ? rate[1] / rate[0] : 0;
    printf("\n  phase               seconds   steps   steps/s   ratio   longest step\n");
    printf("  honest only         %7.1f %7" PRIu64 " %9.1f %7s %11.1f ms\n", dur[0], steps[0],
           rate[0], "", worst_step[0]);
    printf("  honest + hostile    %7.1f %7" PRIu64 " %9.1f %7.2f %11.1f ms\n", dur[1], steps[1],
           rate[1], ratio, worst_step[1]);

    /* Memory. */
    printf("\n  shard   RSS at start     max quiet   max hostile    peers gone   bound "
           "(protocol.md)   "
           "memory_bound_bytes (max)   connections open (max)\n");
    for (int s = 0; s < SHARDS; s++) {
        char stated[32] = "not in STATS", open[32] = "not in STATS";
        if (stated_max[s] > 0)
            snprintf(stated, sizeof(stated), "%.0f kB", stated_max[s] / 1024.0);
        if (open_max[s] >= 0)
            snprintf(open, sizeof(open), "%.0f", open_max[s]);
        printf("  %5d %11ld kB %10ld kB %10ld kB %10ld kB %18ld kB %24s %24s\n", s, rss_start[s],
               rss_max[0][s], rss_max[1][s], rss_end[s], bound_kb, stated, open);
    }

    /* Accounting, per shard. */
    printf("\n  shard   taken by workers   applied   retries   refused (server)   refused "
           "(seen)   unanswered\n");
    char unaccounted[300] = "";
    for (int s = 0; s < SHARDS; s++) {
        uint64_t taken = 0, refused_seen = rep[ROLE_FLOOD].push_refused[s], unanswered = 0;
        for (int w = 0; w < WORKERS; w++) {
            taken += rep[w].taken[s];
            refused_seen += rep[w].refused[s];
            unanswered += rep[w].unanswered[s];
        }
        double pushes = st[s] ? jnum(st[s], "counts", "pushes") : -1;
        double applied = st[s] ? jnum(st[s], "counts", "applied") : -1;
        double retries = st[s] ? jnum(st[s], "counts", "retries") : -1;
        double other =
            st[s] ? jnum(st[s], "counts", "buffered") + jnum(st[s], "counts", "dropped") : -1;
        double refused_server = pushes - applied - retries - other;
        printf("  %5d %18" PRIu64 " %9.0f %9.0f %18.0f %15" PRIu64 " %12" PRIu64 "\n", s, taken,
               applied, retries, refused_server, refused_seen, unanswered);
        if (unaccounted[0])
            continue;
        if (!st[s])
            snprintf(unaccounted, sizeof(unaccounted), "shard %d: no STATS", s);
        else if (applied != (double)taken)
            snprintf(unaccounted, sizeof(unaccounted),
                     "shard %d applied %.0f pushes, the workers saw it take %" PRIu64, s, applied,
                     taken);
        else if (refused_server != (double)refused_seen)
            snprintf(unaccounted, sizeof(unaccounted),
                     "shard %d refused %.0f pushes, the peers saw %" PRIu64
                     " refused with a code and a reason",
                     s, refused_server, refused_seen);
        else if (unanswered)
            snprintf(unaccounted, sizeof(unaccounted),
                     "shard %d left %" PRIu64 " honest pushes unanswered", s, unanswered);
    }

    /* The hostile peers, and what the servers counted of them. */
    printf("\n  peer         conns    sent  eagain  replies  missing  no reason  unexpected\n");
    for (int i = WORKERS; i < ROLES; i++)
        printf("  %-11s %6" PRIu64 " %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %8" PRIu64 " %10" PRIu64
               " %11" PRIu64 "\n",
               role_names[i], rep[i].conns, rep[i].sent, rep[i].eagain, rep[i].replies,
               rep[i].missing, rep[i].no_reason, rep[i].unexpected);
    printf("  unfinished: %" PRIu64 " frames of 1 MiB; connections dropped by a server %" PRIu64
           ", stalled %" PRIu64 ", given up %" PRIu64 "\n",
           rep[ROLE_UNFINISHED].frames, rep[ROLE_UNFINISHED].dropped_by_server,
           rep[ROLE_UNFINISHED].stalled, rep[ROLE_UNFINISHED].capped);
    printf("  churn: %" PRIu64 " idle connections from 127.0.0.2, %" PRIu64
           " of them answered a heartbeat at the end\n",
           rep[ROLE_CHURN].idle_open, rep[ROLE_CHURN].idle_answered);
    for (int s = 0; s < SHARDS; s++)
        if (st[s])
            print_stats(s, st[s]);
    for (int i = 0; i < ROLES; i++) {
        if (!got[i])
            printf("  %s: no report\n", role_names[i]);
        else if (rep[i].note[0])
            printf("  %s: %s\n", role_names[i], rep[i].note);
        if (i < WORKERS && (rep[i].pull_failures || rep[i].rejoined || rep[i].last_code))
            printf("  %s: %" PRIu64 " failed pulls (%" PRIu64 " ZPS_EBUSY), rejoined %" PRIu64
                   " times, last code %s\n",
                   role_names[i], rep[i].pull_failures, rep[i].pulls_busy, rep[i].rejoined,
                   zps_errname(rep[i].last_code));
    }
    if (why_stopped[0])
        printf("  stopped early: %s\n", why_stopped);
    fflush(stdout);

    int stop_rc[SHARDS];
    for (int s = 0; s < SHARDS; s++) {
        zps_json_free(st[s]);
        stop_rc[s] = harness_stop(&soak->srv[s]);
    }

    if (why_stopped[0])
        fail_msg("%s", why_stopped);
    for (int i = 0; i < ROLES; i++) {
        if (!got[i])
            fail_msg("%s sent no report", role_names[i]);
        if (rep[i].failed)
            fail_msg("%s: %s", role_names[i], rep[i].note);
    }
    /* Checked in release builds only: AddressSanitizer's allocator keeps
     * freed blocks in its quarantine (256 MiB) and never gives them to
     * malloc_trim, so its resident size stays near the peak. */
    for (int s = 0; s < SHARDS && !SANITIZED; s++) {
        long allowed = rss_start[s] +
                       (long)((RETAINED_COPIES * SHARD_N * sizeof(float) + RETAINED_SLACK) / KiB);
        if (rss_end[s] < 0 || rss_end[s] > allowed)
            fail_msg("shard %d holds %ld kB once every peer has gone (%.0f connections open), "
                     "more than its %ld kB at start and what it keeps for reuse (%ld kB allowed)",
                     s, rss_end[s], open_end[s], rss_start[s], allowed);
    }
    for (int w = 0; w < WORKERS; w++)
        if (rep[w].pulls_busy)
            fail_msg("%s: %" PRIu64 " pulls refused with ZPS_EBUSY (the slow reader's worker 4 "
                     "holds only its own share of the reply copies)",
                     role_names[w], rep[w].pulls_busy);
    if (ratio < 0.5)
        fail_msg("honest step rate %.1f/s with hostile peers, %.1f/s without: ratio %.2f < 0.5",
                 rate[1], rate[0], ratio);
    if (unaccounted[0])
        fail_msg("a push not accounted for: %s", unaccounted);
    assert_int_equal(rep[ROLE_FLOOD].missing, 0);
    for (int i = WORKERS; i < ROLES; i++) {
        assert_int_equal(rep[i].no_reason, 0);
        assert_int_equal(rep[i].unexpected, 0);
    }
    for (int s = 0; s < SHARDS; s++)
        assert_int_equal(stop_rc[s], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_soak, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
