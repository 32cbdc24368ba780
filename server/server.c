/*
 * server.c - the shard daemon's event loop and request handling; see server.h.
 *
 * Every request gets exactly one reply. A request is checked completely
 * before anything changes, so a bad one is answered with an ERROR and leaves
 * the shard as it was. Pulls the rules do not allow yet are parked in the
 * staleness controller and answered from whichever event makes them ready.
 *
 * ZeroMQ's ZMQ_FD is edge-triggered: it signals a change, not a level. So
 * each wake-up drains the socket until ZeroMQ says there is nothing left, and
 * anything that sends outside that drain (timers, signals) drains afterwards.
 */
#include "server.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <zmq.h>

#include "checkpoint.h"
#include "checksum.h"
#include "error.h"
#include "log.h"
#include "hist.h"
#include "store.h"
#include "strbuf.h"
#include "timeutil.h"
#include "wire.h"

/* Messages handled per wake-up before yielding to timers and signals. */
#define DRAIN_BUDGET 256

/* A pull waiting for the rules to allow it. Its address is its token. */
typedef struct parked_pull {
    zps_peer_t peer;
    zps_header_t req;
    uint64_t since_ns;
} parked_pull_t;

/* BSP: one buffered gradient per worker, kept in the message that carried it. */
typedef struct slot {
    bool full;
    zmq_msg_t msg;
    uint32_t batch;
    uint64_t based_on;
} slot_t;

/*
 * A checkpoint on its way to disk: a copy of the shard's state taken on the
 * loop, written by a threadpool thread, reported back on the loop.
 */
typedef struct ckpt_job {
    uv_work_t work;
    struct server *s;
    zps_ckpt_t snap; /* arrays are this job's copies */
    int rc;
    char path[4096];
    char why[512];
    bool has_requester; /* a CHECKPOINT request waits for the outcome */
    zps_peer_t peer;
    zps_header_t req;
    struct ckpt_job *next;
} ckpt_job_t;

/*
 * A buffer for pull replies' payloads. ZeroMQ sends it without copying and
 * calls reply_buf_released, from its I/O thread, once the last reply using
 * it is gone; then it is reused for a later version instead of allocating
 * (and faulting in) a shard-sized block for each one.
 */
#define REPLY_POOL 4
typedef struct reply_buf {
    float *data; /* 64-byte aligned */
    size_t cap;  /* floats */
    atomic_bool busy;
} reply_buf_t;

static void reply_buf_released(void *data, void *hint)
{
    (void)data;
    atomic_store_explicit(&((reply_buf_t *)hint)->busy, false, memory_order_release);
}

typedef struct counters {
    uint64_t msgs_in, msgs_out, bytes_in, bytes_out;
    uint64_t inits, pulls, pushes, heartbeats, stats;
    uint64_t applied, buffered, retries, dropped, steps, errors, replies_dropped;
    uint64_t checkpoints, checkpoint_failures;
    uint64_t errors_by_code[32];
} counters_t;

typedef struct server server_t;
struct server {
    const zps_server_config_t *cfg;
    char endpoint[256];
    char tag[64];

    uv_loop_t loop;
    uv_poll_t poll;
    uv_idle_t idle;
    uv_timer_t liveness;
    uv_signal_t sigint, sigterm;
    bool stopping;

    void *ctx;
    void *sock;
    zps_store_t store;
    zps_consistency_t *st;
    slot_t *slots;   /* [W] */
    uint32_t *ranks; /* [W] scratch for steps */
    const float **grads;
    uint32_t *batches;
    uint64_t *tokens; /* scratch for ready pulls */
    size_t tokens_cap;

    uint64_t *last_seen_ns; /* [W] last message from each worker */
    uint64_t *evictions;    /* [W] */
    uint32_t reply_flags;   /* ZPS_FLAG_* for every reply to the request being handled */

    counters_t count;
    zps_vhist_t update_staleness; /* applied pushes: updates between pull and step */
    zps_thist_t pull_wait;
    uint64_t started_ns;
    uint64_t errors_logged;
    uint64_t error_log_window;

    /* The parameters of one version, as a pull reply's payload. Every pull of
     * that version shares it (ZeroMQ counts references to message content),
     * so W workers pulling the same version cost one copy, not W. */
    zmq_msg_t reply_cache;
    reply_buf_t reply_pool[REPLY_POOL];
    bool reply_cached;
    uint64_t reply_cache_version;
    uint32_t reply_cache_crc;

    ckpt_job_t *ckpt_running; /* on the threadpool */
    ckpt_job_t *ckpt_queue;   /* waiting for it, oldest first */
    size_t ckpt_queued;
    bool ckpt_taken; /* a checkpoint of version ckpt_version exists or is on its way */
    uint64_t ckpt_version;
    char ckpt_last_path[4096];
};

void zps_server_config_default(zps_server_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = "tcp://127.0.0.1:7100";
    cfg->shard_index = 0;
    cfg->shard_count = 1;
    cfg->stale.mode = ZPS_MODE_BSP;
    cfg->stale.max_pending = 4;
    cfg->max_message_bytes = 4ull << 30;
    cfg->checkpoint_keep = 3;
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

/* ---- replies ---- */

static void count_error(server_t *s, int code)
{
    s->count.errors++;
    unsigned idx = (unsigned)(-code);
    if (idx < 32)
        s->count.errors_by_code[idx]++;
}

/*
 * A flood of bad requests must not become a flood of log lines: at most 20
 * warnings per 10-second window.
 */
static bool log_allowed(server_t *s)
{
    uint64_t window = zps_now_ns() / 10000000000ull;
    if (window != s->error_log_window) {
        s->error_log_window = window;
        s->errors_logged = 0;
    }
    return s->errors_logged++ < 20;
}

/*
 * The pull payload of each version is a copy of the parameters (later pushes
 * change them in place), made once per version with its checksum and shared
 * by every pull of that version. Its buffer comes from a small pool that
 * ZeroMQ hands back once the replies carrying it have left.
 */

/* Drops the cached payload; its buffer returns to the pool once sent. */
static void reply_cache_drop(server_t *s)
{
    if (s->reply_cached)
        zmq_msg_close(&s->reply_cache);
    s->reply_cached = false;
}

/* A free pooled buffer of n floats, marked busy, or NULL when all are in flight. */
static reply_buf_t *reply_buf_take(server_t *s, size_t n)
{
    for (int i = 0; i < REPLY_POOL && n > 0; i++) {
        reply_buf_t *c = &s->reply_pool[i];
        if (atomic_load_explicit(&c->busy, memory_order_acquire))
            continue;
        if (c->cap < n) {
            free(c->data);
            c->data = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
            c->cap = c->data ? n : 0;
        }
        if (c->data) {
            atomic_store(&c->busy, true);
            return c;
        }
    }
    return NULL;
}

/* Makes msg, the current version's parameters with checksum crc, the cache; consumes msg. */
static void reply_cache_install(server_t *s, zmq_msg_t *msg, uint32_t crc)
{
    zmq_msg_init(&s->reply_cache);
    zmq_msg_move(&s->reply_cache, msg);
    zmq_msg_close(msg);
    s->reply_cached = true;
    s->reply_cache_version = zps_consistency_version(s->st);
    s->reply_cache_crc = crc;
}

/* A message around pooled buffer b (which it returns when sent); b is freed on failure. */
static int reply_buf_msg(server_t *s, reply_buf_t *b, zmq_msg_t *msg)
{
    if (zmq_msg_init_data(msg, b->data, s->store.len * sizeof(float), reply_buf_released, b) == 0)
        return 0;
    atomic_store(&b->busy, false);
    return ZPS_ENOMEM;
}

/* The pull payload for the current version; on success *m is a new reference to it. */
static int params_payload(server_t *s, zmq_msg_t *m, uint32_t *crc)
{
    if (!s->reply_cached || s->reply_cache_version != zps_consistency_version(s->st)) {
        size_t n = s->store.len;
        /* Let go of the previous version first: its buffer comes back to the
         * pool as soon as the replies that carry it have left. */
        reply_cache_drop(s);
        reply_buf_t *b = reply_buf_take(s, n);
        zmq_msg_t fresh;
        if (b) {
            if (reply_buf_msg(s, b, &fresh) != 0)
                return ZPS_ENOMEM;
        } else if (zmq_msg_init_size(&fresh, n * sizeof(float)) != 0) {
            /* (No pooled buffer: all are still on their way out to slow readers.) */
            return ZPS_ENOMEM;
        }
        reply_cache_install(
            s, &fresh,
            zps_crc32c_copy(0, zmq_msg_data(&fresh), s->store.params, n * sizeof(float)));
    }
    zmq_msg_init(m);
    if (zmq_msg_copy(m, &s->reply_cache) != 0)
        return ZPS_ENOMEM;
    *crc = s->reply_cache_crc;
    return 0;
}

/* Sends a reply; a PULL reply's payload is the current parameters. */
static void send_reply(server_t *s, const zps_peer_t *peer, zps_header_t *h)
{
    h->reply = true;
    h->version = ZPS_PROTOCOL_VERSION;
    int rc;
    if (zps_wire_wants_payload(h)) {
        zmq_msg_t m;
        if (params_payload(s, &m, &h->checksum) != 0) {
            zps_error("out of memory for a %zu-element reply", s->store.len);
            return;
        }
        s->count.bytes_out += zmq_msg_size(&m);
        rc = zps_wire_send_msg(s->sock, peer, h, &m, ZMQ_DONTWAIT);
    } else {
        rc = zps_wire_send(s->sock, peer, h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
    }
    if (rc) {
        /* ROUTER_MANDATORY: the peer is gone, or it does not read its replies
         * and its queue is full. Dropping is what bounds our memory; a retry,
         * if it comes, is answered again: every request is idempotent. */
        s->count.replies_dropped++;
        if (log_allowed(s))
            zps_warn("reply to worker %d (request %llu) not sent: %s (%s)", h->worker,
                     (unsigned long long)h->request_id, zps_strerror(rc),
                     zmq_strerror(zmq_errno()));
        return;
    }
    s->count.msgs_out++;
}

/* An ERROR reply to request `req`: status `code`, reason printf-formatted. */
__attribute__((format(printf, 5, 6))) static void reply_error(server_t *s, const zps_peer_t *peer,
                                                              const zps_header_t *req, int code,
                                                              const char *fmt, ...)
{
    zps_header_t h;
    zps_header_init(&h, (enum zps_msg_type)(req->type <= ZPS_MSG_TYPE_MAX ? req->type : 0));
    h.request_id = req->request_id;
    h.worker = req->worker;
    h.clock = req->clock;
    h.status = code;
    h.flags = s->reply_flags;
    h.model_version = zps_consistency_version(s->st);
    h.min_clock = zps_consistency_min_clock(s->st);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h.error, sizeof(h.error), fmt, ap);
    va_end(ap);
    count_error(s, code);

    if (log_allowed(s))
        zps_warn("refused request %llu from worker %d: %s (%s)",
                 (unsigned long long)req->request_id, req->worker, h.error, zps_errname(code));
    send_reply(s, peer, &h);
}

/* An OK reply header for `req`, with the shard's current state filled in. */
static void reply_header(server_t *s, const zps_header_t *req, zps_header_t *h)
{
    zps_header_init(h, (enum zps_msg_type)req->type);
    h->request_id = req->request_id;
    h->worker = req->worker;
    h->clock = req->clock;
    h->model_version = zps_consistency_version(s->st);
    h->min_clock = zps_consistency_min_clock(s->st);
    h->total = s->store.total;
    h->shard_index = s->cfg->shard_index;
    h->shard_count = s->cfg->shard_count;
    h->flags |= s->reply_flags;
    if (req->worker >= 0 && (uint32_t)req->worker < s->cfg->stale.workers)
        h->next_clock = zps_consistency_pushed(s->st, (uint32_t)req->worker);
}

static void answer_pull(server_t *s, const zps_peer_t *peer, const zps_header_t *req)
{
    zps_header_t h;
    reply_header(s, req, &h);
    h.offset = s->store.range.lo;
    send_reply(s, peer, &h);
}

/* Answers every parked pull the rules now allow. */
static void answer_ready_pulls(server_t *s)
{
    size_t n;
    while ((n = zps_consistency_take_ready(s->st, s->tokens, s->tokens_cap)) > 0) {
        uint64_t now = zps_now_ns();
        for (size_t i = 0; i < n; i++) {
            parked_pull_t *p = (parked_pull_t *)(uintptr_t)s->tokens[i];
            /* pull_wait is the workers' waiting; an observer waiting for a
             * clock's model (an evaluator) waits by choice. */
            if (p->req.worker >= 0)
                zps_thist_add(&s->pull_wait, now - p->since_ns);
            answer_pull(s, &p->peer, &p->req);
            free(p);
        }
    }
}

/* ---- checkpoints ---- */

static void drain(server_t *s);

static void job_free(ckpt_job_t *j)
{
    if (!j)
        return;
    free(j->snap.params);
    for (uint32_t i = 0; i < j->snap.nstate; i++)
        free(j->snap.state[i]);
    free(j->snap.pushed);
    free(j->snap.live);
    free(j->snap.dropped);
    free(j);
}

static float *copy_floats(const float *src, size_t n)
{
    float *d = malloc(n ? n * sizeof(float) : 1);
    if (d && n)
        memcpy(d, src, n * sizeof(float));
    return d;
}

/* Copies the shard's state into a new job. NULL when out of memory. */
static ckpt_job_t *snapshot(server_t *s)
{
    ckpt_job_t *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->s = s;
    zps_ckpt_t *c = &j->snap;
    zps_ckpt_init(c);
    const zps_consistency_config_t *sc = &s->cfg->stale;
    c->shard_index = s->cfg->shard_index;
    c->shard_count = s->cfg->shard_count;
    c->total = s->store.total;
    c->range = s->store.range;
    c->version = zps_consistency_version(s->st);
    c->opt = *zps_optimizer_config(s->store.opt);
    c->opt_steps = zps_optimizer_steps(s->store.opt);
    c->mode = sc->mode;
    c->workers = sc->workers;
    c->staleness = sc->staleness;
    c->backup = sc->backup;
    c->pushed = calloc(sc->workers, sizeof(uint64_t));
    c->live = calloc(sc->workers, sizeof(bool));
    c->dropped = calloc(sc->workers, sizeof(uint64_t));
    c->params = copy_floats(s->store.params, s->store.len);
    bool ok = c->pushed && c->live && c->dropped && c->params;
    for (uint32_t w = 0; ok && w < sc->workers; w++) {
        /* A push buffered for the step in progress is not in the saved
         * parameters: the restored shard expects it again. */
        uint64_t p = zps_consistency_pushed(s->st, w);
        c->pushed[w] = sc->mode == ZPS_MODE_BSP && p > c->version ? c->version : p;
        c->live[w] = zps_consistency_live(s->st, w);
        c->dropped[w] = zps_consistency_dropped(s->st, w);
    }
    c->nstate = (uint32_t)zps_optimizer_state_count(s->store.opt);
    for (uint32_t i = 0; ok && i < c->nstate; i++) {
        const char *name;
        float *st = zps_optimizer_state(s->store.opt, i, &name);
        snprintf(c->state_names[i], sizeof(c->state_names[i]), "%s", name);
        c->state[i] = copy_floats(st, s->store.len);
        ok = c->state[i] != NULL;
    }
    if (!ok) {
        job_free(j);
        return NULL;
    }
    return j;
}

/* Runs on a threadpool thread: the only blocking file I/O of the daemon. */
static void ckpt_work(uv_work_t *w)
{
    ckpt_job_t *j = w->data;
    const zps_server_config_t *cfg = j->s->cfg;
    j->rc = zps_ckpt_write(cfg->checkpoint_dir, &j->snap, j->path, sizeof(j->path), j->why,
                           sizeof(j->why));
    if (j->rc == 0)
        zps_ckpt_prune(cfg->checkpoint_dir, cfg->shard_index, cfg->shard_count,
                       cfg->checkpoint_keep);
}

static void ckpt_start_next(server_t *s);

static void ckpt_report(server_t *s, ckpt_job_t *j)
{
    if (j->rc == 0) {
        s->count.checkpoints++;
        snprintf(s->ckpt_last_path, sizeof(s->ckpt_last_path), "%s", j->path);
        zps_info("checkpoint of version %llu written to %s", (unsigned long long)j->snap.version,
                 j->path);
    } else {
        s->count.checkpoint_failures++;
        zps_error("checkpoint of version %llu failed: %s", (unsigned long long)j->snap.version,
                  j->why);
    }
    if (!j->has_requester)
        return;
    if (j->rc) {
        reply_error(s, &j->peer, &j->req, j->rc, "checkpoint failed: %s", j->why);
        return;
    }
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "{\"version\":%llu,\"path\":", (unsigned long long)j->snap.version);
    zps_strbuf_json_string(&b, j->path);
    zps_strbuf_printf(&b, "}");
    char *json = zps_strbuf_take(&b);
    zps_header_t h;
    reply_header(s, &j->req, &h);
    h.model_version = j->snap.version;
    h.json = json;
    send_reply(s, &j->peer, &h);
    free(json);
}

static void ckpt_after(uv_work_t *w, int status)
{
    ckpt_job_t *j = w->data;
    server_t *s = j->s;
    if (status != 0 && j->rc == 0) {
        j->rc = ZPS_EIO;
        snprintf(j->why, sizeof(j->why), "threadpool: %s", uv_strerror(status));
    }
    s->ckpt_running = NULL;
    ckpt_report(s, j);
    job_free(j);
    ckpt_start_next(s);
    /* Replies were sent outside a drain. */
    drain(s);
}

static void ckpt_start_next(server_t *s)
{
    if (s->ckpt_running || !s->ckpt_queue)
        return;
    ckpt_job_t *j = s->ckpt_queue;
    s->ckpt_queue = j->next;
    s->ckpt_queued--;
    s->ckpt_running = j;
    j->work.data = j;
    int rc = uv_queue_work(&s->loop, &j->work, ckpt_work, ckpt_after);
    if (rc != 0) {
        j->rc = ZPS_EIO;
        snprintf(j->why, sizeof(j->why), "threadpool: %s", uv_strerror(rc));
        s->ckpt_running = NULL;
        ckpt_report(s, j);
        job_free(j);
    }
}

/*
 * Takes a checkpoint of the current version and queues it for writing.
 * `peer`/`req` (may be NULL) are a CHECKPOINT request to answer once it is
 * on disk. Returns 0 or a ZPS_E* code (nothing queued).
 */
static int checkpoint(server_t *s, const zps_peer_t *peer, const zps_header_t *req)
{
    if (!s->cfg->checkpoint_dir)
        return ZPS_EMODE;
    if (!s->store.initialized)
        return ZPS_ENOTINIT;
    /* Writes slower than the checkpoints come must not pile up copies. */
    if (s->ckpt_queued >= 2)
        return ZPS_EBUSY;
    ckpt_job_t *j = snapshot(s);
    if (!j)
        return ZPS_ENOMEM;
    if (peer) {
        j->has_requester = true;
        j->peer = *peer;
        j->req = *req;
        j->req.json = NULL;
    }
    ckpt_job_t **tail = &s->ckpt_queue;
    while (*tail)
        tail = &(*tail)->next;
    *tail = j;
    s->ckpt_queued++;
    s->ckpt_taken = true;
    s->ckpt_version = j->snap.version;
    ckpt_start_next(s);
    return 0;
}

/* After the version moved: a checkpoint when it is a multiple of --checkpoint-every. */
static void maybe_checkpoint(server_t *s)
{
    uint64_t v = zps_consistency_version(s->st);
    uint64_t every = s->cfg->checkpoint_every;
    if (!every || v % every != 0 || (s->ckpt_taken && s->ckpt_version == v))
        return;
    int rc = checkpoint(s, NULL, NULL);
    if (rc)
        zps_error("no checkpoint of version %llu: %s", (unsigned long long)v, zps_strerror(rc));
}

/* ---- request checks shared by INIT, PULL and PUSH ---- */

/* The sender's idea of which shard this is, when it states one. */
static bool check_shard(server_t *s, const zps_peer_t *peer, const zps_header_t *req)
{
    if (req->shard_count == 0 ||
        (req->shard_index == s->cfg->shard_index && req->shard_count == s->cfg->shard_count))
        return true;
    reply_error(s, peer, req, ZPS_ERANGE,
                "this server is shard %u/%u, the request was meant for shard %u/%u",
                s->cfg->shard_index, s->cfg->shard_count, req->shard_index, req->shard_count);
    return false;
}

/* offset/length of the request against this shard's range for N = req->total. */
static bool check_range(server_t *s, const zps_peer_t *peer, const zps_header_t *req)
{
    zps_range_t r;
    zps_shard_range(req->total, s->cfg->shard_index, s->cfg->shard_count, &r);
    if (req->offset == r.lo && req->length == zps_range_len(r))
        return true;
    reply_error(s, peer, req, ZPS_ERANGE,
                "range [%llu, %llu) does not match shard %u/%u of a %llu-element model, "
                "which owns [%llu, %llu)",
                (unsigned long long)req->offset, (unsigned long long)(req->offset + req->length),
                s->cfg->shard_index, s->cfg->shard_count, (unsigned long long)req->total,
                (unsigned long long)r.lo, (unsigned long long)r.hi);
    return false;
}

static bool check_worker(server_t *s, const zps_peer_t *peer, const zps_header_t *req,
                         bool observer_ok)
{
    int32_t w = req->worker;
    uint32_t nw = s->cfg->stale.workers;
    if ((w >= 0 && (uint32_t)w < nw) || (observer_ok && w == -1))
        return true;
    reply_error(s, peer, req, ZPS_EWORKER, "worker %d is not in [0, %u)%s", w, nw,
                observer_ok ? " (or -1 for an observer)" : "");
    return false;
}

/* The payload of m is finite (checked as its checksum was, on receipt). */
static bool check_finite(server_t *s, zps_message_t *m)
{
    const float *v = zps_message_floats(m);
    size_t bad = 0;
    if (m->scanned) {
        if (m->first_nonfinite >= m->hdr.length)
            return true;
        bad = (size_t)m->first_nonfinite;
    } else if (zps_all_finite(v, (size_t)m->hdr.length, &bad)) {
        return true;
    }
    reply_error(s, &m->peer, &m->hdr, ZPS_ENONFINITE, "element %llu of the payload is %g",
                (unsigned long long)(m->hdr.offset + bad), (double)v[bad]);
    return false;
}

/* ---- handlers ---- */

static void handle_init(server_t *s, zps_message_t *m)
{
    const zps_header_t *req = &m->hdr;
    s->count.inits++;
    if (!check_worker(s, &m->peer, req, true) || !check_shard(s, &m->peer, req))
        return;
    if (req->total == 0) {
        reply_error(s, &m->peer, req, ZPS_ESIZE, "a model must have at least one element");
        return;
    }
    if (!check_range(s, &m->peer, req))
        return;
    const float *values = zps_message_floats(m);
    if (!check_finite(s, m))
        return;

    if (s->store.initialized) {
        if (req->total != s->store.total) {
            reply_error(s, &m->peer, req, ZPS_ESIZE,
                        "the model was initialised with %llu elements, this INIT has %llu",
                        (unsigned long long)s->store.total, (unsigned long long)req->total);
            return;
        }
        if (s->store.len && memcmp(values, s->store.params, s->store.len * sizeof(float)) != 0 &&
            zps_consistency_version(s->st) == 0) {
            reply_error(s, &m->peer, req, ZPS_EINITED,
                        "the model was already initialised with other values");
            return;
        }
        /* Identical (or the model has moved on since): acknowledged, nothing changes. */
    } else {
        zps_range_t r = {req->offset, req->offset + req->length};
        int rc = zps_store_set(&s->store, req->total, r, values, &s->cfg->opt);
        if (rc) {
            reply_error(s, &m->peer, req, rc, "cannot hold the model: %s", zps_strerror(rc));
            return;
        }
        zps_consistency_set_initialized(s->st);
        zps_info("initialised by worker %d: N = %llu, range [%llu, %llu), optimizer %s",
                 req->worker, (unsigned long long)req->total, (unsigned long long)r.lo,
                 (unsigned long long)r.hi, zps_opt_name(&s->cfg->opt));
    }
    zps_header_t h;
    reply_header(s, req, &h);
    send_reply(s, &m->peer, &h);
    answer_ready_pulls(s);
}

static void handle_pull(server_t *s, zps_message_t *m)
{
    const zps_header_t *req = &m->hdr;
    s->count.pulls++;
    if (!check_worker(s, &m->peer, req, true) || !check_shard(s, &m->peer, req))
        return;
    /* A client that knows N states the range it expects; one that does not
     * learns it from the reply. */
    if (req->flags & ZPS_FLAG_RANGE) {
        if (s->store.initialized && req->total != s->store.total) {
            reply_error(s, &m->peer, req, ZPS_ESIZE,
                        "the model has %llu elements, the pull expects %llu",
                        (unsigned long long)s->store.total, (unsigned long long)req->total);
            return;
        }
        if (!check_range(s, &m->peer, req))
            return;
    }

    parked_pull_t *p = malloc(sizeof(*p));
    if (!p) {
        reply_error(s, &m->peer, req, ZPS_ENOMEM, "out of memory");
        return;
    }
    char why[ZPS_ERROR_TEXT_MAX];
    zps_pull_result_t res;
    uint64_t existing = 0;
    /* An observer may ask for the model of its clock rather than the
     * current one (an evaluator that must not hold training back). */
    int rc = req->worker == -1 && (req->flags & ZPS_FLAG_WAIT)
                 ? zps_consistency_observe(s->st, req->clock, req->request_id, (uintptr_t)p, &res,
                                     &existing, why, sizeof(why))
                 : zps_consistency_pull(s->st, req->worker, req->clock, req->request_id, (uintptr_t)p,
                                  &res, &existing, why, sizeof(why));
    if (rc) {
        free(p);
        reply_error(s, &m->peer, req, rc, "%s", why);
        return;
    }
    if (res == ZPS_PULL_READY) {
        free(p);
        if (req->worker >= 0)
            zps_thist_add(&s->pull_wait, 0);
        answer_pull(s, &m->peer, req);
        return;
    }
    if (res == ZPS_PULL_DUPLICATE) {
        /* A resend of a pull that is waiting: answer it once, on the newest
         * route (the client may have reconnected). */
        free(p);
        ((parked_pull_t *)(uintptr_t)existing)->peer = m->peer;
        return;
    }
    p->peer = m->peer;
    p->req = *req;
    p->req.json = NULL;
    p->since_ns = zps_now_ns();
}

static void take_bsp_steps(server_t *s)
{
    uint64_t clock;
    uint32_t k;
    while (zps_consistency_step_due(s->st, &clock, s->ranks, &k)) {
        uint64_t steps_before = zps_consistency_version(s->st);
        for (uint32_t j = 0; j < k; j++) {
            slot_t *sl = &s->slots[s->ranks[j]];
            ZPS_ASSERT(sl->full);
            s->grads[j] = zmq_msg_data(&sl->msg);
            s->batches[j] = sl->batch;
            zps_vhist_add(&s->update_staleness,
                          steps_before > sl->based_on ? steps_before - sl->based_on : 0);
        }
        /* Every worker pulls the version this step makes: its payload is
         * copied and checksummed in the step's own pass over memory. */
        reply_cache_drop(s);
        reply_buf_t *b = reply_buf_take(s, s->store.len);
        uint32_t crc = zps_store_step_mean(&s->store, s->grads, s->batches, k, b ? b->data : NULL);
        for (uint32_t j = 0; j < k; j++) {
            slot_t *sl = &s->slots[s->ranks[j]];
            zmq_msg_close(&sl->msg);
            sl->full = false;
        }
        zps_consistency_step_done(s->st);
        zmq_msg_t fresh;
        if (b && reply_buf_msg(s, b, &fresh) == 0)
            reply_cache_install(s, &fresh, crc);
        s->count.steps++;
        zps_debug("step for clock %llu from %u pushes", (unsigned long long)clock, k);
        maybe_checkpoint(s);
    }
}

static void handle_push(server_t *s, zps_message_t *m)
{
    const zps_header_t *req = &m->hdr;
    s->count.pushes++;
    if (!check_worker(s, &m->peer, req, false) || !check_shard(s, &m->peer, req))
        return;
    if (!s->store.initialized) {
        reply_error(s, &m->peer, req, ZPS_ENOTINIT,
                    "push at clock %llu before the model was initialised",
                    (unsigned long long)req->clock);
        return;
    }
    if (req->total != s->store.total) {
        reply_error(s, &m->peer, req, ZPS_ESIZE, "the model has %llu elements, the push has %llu",
                    (unsigned long long)s->store.total, (unsigned long long)req->total);
        return;
    }
    if (!check_range(s, &m->peer, req))
        return;
    if (req->batch == 0) {
        reply_error(s, &m->peer, req, ZPS_EBATCH, "a gradient must come from at least one example");
        return;
    }
    const float *grad = zps_message_floats(m);
    if (!check_finite(s, m))
        return;

    char why[ZPS_ERROR_TEXT_MAX];
    zps_push_decision_t d;
    int rc = zps_consistency_push(s->st, (uint32_t)req->worker, req->clock, req->model_version, &d, why,
                            sizeof(why));
    if (rc) {
        reply_error(s, &m->peer, req, rc, "%s", why);
        return;
    }

    zps_header_t h;
    switch (d.action) {
    case ZPS_PUSH_APPLY:
        zps_store_apply(&s->store, grad,
                        s->cfg->lr_staleness == ZPS_LR_STALENESS_INVERSE
                            ? 1.0 / (1.0 + (double)d.staleness)
                            : 1.0);
        zps_vhist_add(&s->update_staleness, d.staleness);
        s->count.applied++;
        maybe_checkpoint(s);
        reply_header(s, req, &h);
        h.staleness = d.staleness;
        break;
    case ZPS_PUSH_BUFFER: {
        slot_t *sl = &s->slots[req->worker];
        ZPS_ASSERT(!sl->full);
        zmq_msg_init(&sl->msg);
        zmq_msg_move(&sl->msg, &m->payload);
        sl->full = true;
        sl->batch = req->batch;
        sl->based_on = req->model_version;
        s->count.buffered++;
        reply_header(s, req, &h);
        h.flags |= ZPS_FLAG_BUFFERED;
        break;
    }
    case ZPS_PUSH_RETRY:
        s->count.retries++;
        reply_header(s, req, &h);
        h.flags |= ZPS_FLAG_RETRY;
        break;
    case ZPS_PUSH_DROP:
    default:
        s->count.dropped++;
        reply_header(s, req, &h);
        h.flags |= ZPS_FLAG_DROPPED;
        break;
    }
    send_reply(s, &m->peer, &h);
    take_bsp_steps(s);
    answer_ready_pulls(s);
}

static char *stats_json(server_t *s)
{
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    const zps_consistency_config_t *sc = &s->cfg->stale;
    zps_strbuf_printf(&b, "{\"shard\":%u,\"shards\":%u,\"endpoint\":", s->cfg->shard_index,
                      s->cfg->shard_count);
    zps_strbuf_json_string(&b, s->endpoint);
    zps_strbuf_printf(&b,
                      ",\"initialized\":%s,\"total\":%llu,\"range\":[%llu,%llu],"
                      "\"version\":%llu,\"min_clock\":%llu,\"mode\":\"%s\",\"staleness_bound\":%u,"
                      "\"backup_workers\":%u,\"optimizer\":\"%s\",\"lr_staleness\":\"%s\","
                      "\"worker_timeout_s\":%.3f,\"workers\":%u,",
                      s->store.initialized ? "true" : "false", (unsigned long long)s->store.total,
                      (unsigned long long)s->store.range.lo, (unsigned long long)s->store.range.hi,
                      (unsigned long long)zps_consistency_version(s->st),
                      (unsigned long long)zps_consistency_min_clock(s->st), zps_mode_name(sc->mode),
                      sc->staleness, sc->backup, zps_opt_name(&s->cfg->opt),
                      s->cfg->lr_staleness == ZPS_LR_STALENESS_INVERSE ? "inverse" : "none",
                      (double)s->cfg->worker_timeout_ms / 1e3, sc->workers);
    zps_strbuf_printf(&b, "\"clocks\":[");
    for (uint32_t w = 0; w < sc->workers; w++)
        zps_strbuf_printf(&b, "%s%llu", w ? "," : "",
                          (unsigned long long)zps_consistency_pushed(s->st, w));
    zps_strbuf_printf(&b, "],\"live\":[");
    for (uint32_t w = 0; w < sc->workers; w++)
        zps_strbuf_printf(&b, "%s%s", w ? "," : "", zps_consistency_live(s->st, w) ? "true" : "false");
    zps_strbuf_printf(&b, "],\"evictions\":[");
    for (uint32_t w = 0; w < sc->workers; w++)
        zps_strbuf_printf(&b, "%s%llu", w ? "," : "", (unsigned long long)s->evictions[w]);
    uint64_t now = zps_now_ns();
    zps_strbuf_printf(&b, "],\"silent_ms\":[");
    for (uint32_t w = 0; w < sc->workers; w++)
        zps_strbuf_printf(&b, "%s%.1f", w ? "," : "", (double)(now - s->last_seen_ns[w]) / 1e6);
    zps_strbuf_printf(&b, "],\"dropped_per_worker\":[");
    for (uint32_t w = 0; w < sc->workers; w++)
        zps_strbuf_printf(&b, "%s%llu", w ? "," : "",
                          (unsigned long long)zps_consistency_dropped(s->st, w));
    const counters_t *c = &s->count;
    zps_strbuf_printf(&b,
                      "],\"pending_pulls\":%zu,\"counts\":{\"messages_in\":%llu,"
                      "\"messages_out\":%llu,\"bytes_in\":%llu,\"bytes_out\":%llu,\"inits\":%llu,"
                      "\"pulls\":%llu,\"pushes\":%llu,\"applied\":%llu,\"buffered\":%llu,"
                      "\"steps\":%llu,\"retries\":%llu,\"dropped\":%llu,\"heartbeats\":%llu,"
                      "\"stats\":%llu,\"errors\":%llu,\"replies_dropped\":%llu},"
                      "\"errors_by_code\":{",
                      zps_consistency_pending(s->st), (unsigned long long)c->msgs_in,
                      (unsigned long long)c->msgs_out, (unsigned long long)c->bytes_in,
                      (unsigned long long)c->bytes_out, (unsigned long long)c->inits,
                      (unsigned long long)c->pulls, (unsigned long long)c->pushes,
                      (unsigned long long)c->applied, (unsigned long long)c->buffered,
                      (unsigned long long)c->steps, (unsigned long long)c->retries,
                      (unsigned long long)c->dropped, (unsigned long long)c->heartbeats,
                      (unsigned long long)c->stats, (unsigned long long)c->errors,
                      (unsigned long long)c->replies_dropped);
    const char *sep = "";
    for (int i = 1; i < 32; i++) {
        if (c->errors_by_code[i]) {
            zps_strbuf_printf(&b, "%s\"%s\":%llu", sep, zps_errname(-i),
                              (unsigned long long)c->errors_by_code[i]);
            sep = ",";
        }
    }
    zps_strbuf_printf(&b, "},\"update_staleness\":");
    zps_vhist_json(&s->update_staleness, &b);
    zps_strbuf_printf(&b, ",\"pull_wait\":");
    zps_thist_json(&s->pull_wait, &b);
    zps_strbuf_printf(&b, ",\"checkpoints\":{\"written\":%llu,\"failed\":%llu,\"last\":",
                      (unsigned long long)s->count.checkpoints,
                      (unsigned long long)s->count.checkpoint_failures);
    zps_strbuf_json_string(&b, s->ckpt_last_path);
    zps_strbuf_printf(&b, "}");
    zps_strbuf_printf(&b, ",\"uptime_s\":%.3f}", (double)(zps_now_ns() - s->started_ns) / 1e9);
    return zps_strbuf_take(&b);
}

static void handle_stats(server_t *s, zps_message_t *m)
{
    s->count.stats++;
    char *json = stats_json(s);
    if (!json) {
        reply_error(s, &m->peer, &m->hdr, ZPS_ENOMEM, "out of memory");
        return;
    }
    zps_header_t h;
    reply_header(s, &m->hdr, &h);
    h.json = json;
    send_reply(s, &m->peer, &h);
    free(json);
}

static void handle_checkpoint(server_t *s, zps_message_t *m)
{
    if (!check_worker(s, &m->peer, &m->hdr, true) || !check_shard(s, &m->peer, &m->hdr))
        return;
    int rc = checkpoint(s, &m->peer, &m->hdr);
    if (rc == ZPS_EMODE)
        reply_error(s, &m->peer, &m->hdr, rc, "this server has no --checkpoint-dir");
    else if (rc == ZPS_ENOTINIT)
        reply_error(s, &m->peer, &m->hdr, rc, "nothing to save: the model is not initialised");
    else if (rc)
        reply_error(s, &m->peer, &m->hdr, rc, "cannot take a checkpoint now: %s", zps_strerror(rc));
    /* On success the reply comes when the file is on disk. */
}

static void handle_heartbeat(server_t *s, zps_message_t *m)
{
    s->count.heartbeats++;
    if (!check_worker(s, &m->peer, &m->hdr, true))
        return;
    zps_header_t h;
    reply_header(s, &m->hdr, &h);
    send_reply(s, &m->peer, &h);
}

/*
 * Any message from a worker shows it is alive. One that had been evicted is
 * admitted again at the current clock, and the reply to this request says so
 * (ZPS_FLAG_REJOINED, with next_clock), so it can skip the clocks it missed.
 */
static void heard_from(server_t *s, uint32_t w)
{
    s->last_seen_ns[w] = zps_now_ns();
    if (zps_consistency_live(s->st, w))
        return;
    uint64_t at = zps_consistency_rejoin(s->st, w);
    s->reply_flags |= ZPS_FLAG_REJOINED;
    zps_info("worker %u is back: admitted again at clock %llu", w, (unsigned long long)at);
}

static void drain(server_t *s);

/* Evicts workers silent for longer than --worker-timeout; the others go on. */
static void on_liveness(uv_timer_t *t)
{
    server_t *s = t->data;
    uint64_t now = zps_now_ns();
    uint64_t limit = s->cfg->worker_timeout_ms * 1000000ull;
    bool changed = false;
    for (uint32_t w = 0; w < s->cfg->stale.workers; w++) {
        if (zps_consistency_live(s->st, w) && now - s->last_seen_ns[w] > limit) {
            zps_consistency_evict(s->st, w);
            s->evictions[w]++;
            changed = true;
            zps_warn("worker %u evicted: silent for %.1f s (--worker-timeout %.1f s); the others "
                     "go on without it",
                     w, (double)(now - s->last_seen_ns[w]) / 1e9,
                     (double)s->cfg->worker_timeout_ms / 1e3);
        }
    }
    if (!changed)
        return;
    take_bsp_steps(s);
    answer_ready_pulls(s);
    /* Replies were sent outside a drain: ZMQ_FD may have been reset. */
    drain(s);
}

static void handle(server_t *s, zps_message_t *m, int rc)
{
    s->count.msgs_in++;
    s->count.bytes_in += m->bytes;
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
            reply_error(s, &m->peer, &m->hdr, rc, "%s: this server speaks version %u, got %u", text,
                        ZPS_PROTOCOL_VERSION, m->hdr.version);
        else if (rc == ZPS_ETYPE)
            reply_error(s, &m->peer, &m->hdr, rc, "%s %u", text, m->hdr.type);
        else
            reply_error(s, &m->peer, &m->hdr, rc, "%s", text);
        return;
    }
    if (m->hdr.reply) {
        reply_error(s, &m->peer, &m->hdr, ZPS_ETYPE, "a server does not take replies");
        return;
    }
    s->reply_flags = 0;
    if (m->hdr.worker >= 0 && (uint32_t)m->hdr.worker < s->cfg->stale.workers)
        heard_from(s, (uint32_t)m->hdr.worker);
    switch (m->hdr.type) {
    case ZPS_MSG_INIT:
        handle_init(s, m);
        break;
    case ZPS_MSG_PULL:
        handle_pull(s, m);
        break;
    case ZPS_MSG_PUSH:
        handle_push(s, m);
        break;
    case ZPS_MSG_STATS:
        handle_stats(s, m);
        break;
    case ZPS_MSG_HEARTBEAT:
        handle_heartbeat(s, m);
        break;
    case ZPS_MSG_CHECKPOINT:
        handle_checkpoint(s, m);
        break;
    default:
        reply_error(s, &m->peer, &m->hdr, ZPS_EMODE, "message type %u is not served by this server",
                    m->hdr.type);
        break;
    }
    s->reply_flags = 0;
}

/* ---- the loop ---- */

static void on_idle(uv_idle_t *h);

/* Handles what the socket holds, up to a budget; see the file comment. */
static void drain(server_t *s)
{
    for (int i = 0; i < DRAIN_BUDGET && !s->stopping; i++) {
        zps_message_t m;
        int rc = zps_wire_recv(s->sock, ZMQ_DONTWAIT, true, &m);
        if (rc == ZPS_EAGAIN) {
            uv_idle_stop(&s->idle);
            return;
        }
        if (rc == ZPS_ESOCKET) {
            zps_error("receive failed: %s", zmq_strerror(zmq_errno()));
            uv_idle_stop(&s->idle);
            return;
        }
        handle(s, &m, rc);
        zps_message_close(&m);
    }
    /* More may be waiting, and the edge-triggered fd will not say so again:
     * come back on the next loop iteration, after timers and signals. */
    if (!s->stopping)
        uv_idle_start(&s->idle, on_idle);
}

static void on_idle(uv_idle_t *h)
{
    drain(h->data);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    (void)events;
    server_t *s = h->data;
    if (status < 0)
        zps_warn("poll error: %s", uv_strerror(status));
    drain(s);
}

static void on_close(uv_handle_t *h)
{
    (void)h;
}

static void stop(server_t *s, const char *why)
{
    if (s->stopping)
        return;
    zps_info("%s: shutting down (version %llu)", why, (unsigned long long)zps_consistency_version(s->st));
    /* Fail the pulls still waiting so their workers learn now, not at a timeout. */
    size_t n;
    while ((n = zps_consistency_take_all(s->st, s->tokens, s->tokens_cap)) > 0) {
        for (size_t i = 0; i < n; i++) {
            parked_pull_t *p = (parked_pull_t *)(uintptr_t)s->tokens[i];
            reply_error(s, &p->peer, &p->req, ZPS_ESHUTDOWN, "the server is shutting down");
            free(p);
        }
    }
    s->stopping = true;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, on_close);
    uv_close((uv_handle_t *)&s->idle, on_close);
    uv_close((uv_handle_t *)&s->liveness, on_close);
    uv_close((uv_handle_t *)&s->sigint, on_close);
    uv_close((uv_handle_t *)&s->sigterm, on_close);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server_t *s = h->data;
    /* SIGTERM is the operator's "stop now, keep the work": the state goes to
     * disk before the shard goes away (the loop runs until it is written). */
    if (signum == SIGTERM && s->cfg->checkpoint_dir && s->store.initialized &&
        !(s->ckpt_taken && s->ckpt_version == zps_consistency_version(s->st))) {
        int rc = checkpoint(s, NULL, NULL);
        if (rc)
            zps_error("no checkpoint at shutdown: %s", zps_strerror(rc));
    }
    stop(s, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* Optimizer settings a restart may change (the kind may not): names those that differ. */
static void note_optimizer_changes(const zps_opt_config_t *was, const zps_opt_config_t *now)
{
    char diff[512] = "";
    size_t n = 0;
#define ZPS_OPT_DIFF(field, flag)                                                                  \
    if (was->field != now->field && n < sizeof(diff))                                              \
        n += (size_t)snprintf(diff + n, sizeof(diff) - n, " " flag);
    ZPS_OPT_DIFF(lr, "--lr")
    ZPS_OPT_DIFF(momentum, "--momentum")
    ZPS_OPT_DIFF(nesterov, "--nesterov")
    ZPS_OPT_DIFF(beta1, "--beta1")
    ZPS_OPT_DIFF(beta2, "--beta2")
    ZPS_OPT_DIFF(eps, "--eps")
    ZPS_OPT_DIFF(weight_decay, "--weight-decay")
    ZPS_OPT_DIFF(schedule, "--schedule")
    ZPS_OPT_DIFF(step_every, "--step-every")
    ZPS_OPT_DIFF(gamma, "--gamma")
    ZPS_OPT_DIFF(cosine_steps, "--cosine-steps")
    ZPS_OPT_DIFF(lr_min, "--lr-min")
    ZPS_OPT_DIFF(warmup, "--warmup")
#undef ZPS_OPT_DIFF
    if (n)
        zps_warn("optimizer settings differ from the checkpoint's (%s ); continuing with this "
                 "command line's",
                 diff + 1);
}

/*
 * --resume / --resume-from: loads a checkpoint into the store and the
 * staleness controller. Returns 0 (also when --resume finds no checkpoint at
 * all: the shard starts empty), or a ZPS_E* code after logging why the
 * shard must not start.
 */
static int resume(server_t *s)
{
    const zps_server_config_t *cfg = s->cfg;
    zps_ckpt_t ck;
    zps_ckpt_init(&ck);
    char path[4096] = "", why[2048] = "";
    int rc;
    if (cfg->resume_from) {
        snprintf(path, sizeof(path), "%s", cfg->resume_from);
        rc = zps_ckpt_read(path, &ck, why, sizeof(why));
        if (rc == 0 && (rc = zps_ckpt_check_shard(&ck, cfg->shard_index, cfg->shard_count, 0, why,
                                                  sizeof(why))) != 0)
            zps_ckpt_fini(&ck);
    } else {
        rc = zps_ckpt_find_latest(cfg->checkpoint_dir, cfg->shard_index, cfg->shard_count, &ck,
                                  path, sizeof(path), why, sizeof(why));
        /* The report names every newer file that was skipped, and why. */
        if (rc == 0 && why[0])
            zps_warn("skipped checkpoints: %s", why);
        if (rc == ZPS_EIO) {
            zps_info("--resume: %s; starting empty", why);
            return 0;
        }
    }
    if (rc) {
        zps_error("cannot resume from %s: %s", path[0] ? path : cfg->checkpoint_dir, why);
        return rc;
    }

    const zps_consistency_config_t *sc = &cfg->stale;
    if (ck.mode != sc->mode || ck.workers != sc->workers || ck.staleness != sc->staleness ||
        ck.backup != sc->backup) {
        zps_error("cannot resume from %s: it was written by a %s shard for %u workers "
                  "(staleness %u, %u backup), this one is %s for %u (staleness %u, %u backup)",
                  path, zps_mode_name(ck.mode), ck.workers, ck.staleness, ck.backup,
                  zps_mode_name(sc->mode), sc->workers, sc->staleness, sc->backup);
        zps_ckpt_fini(&ck);
        return ZPS_EINVAL;
    }
    if (ck.opt.kind != cfg->opt.kind || ck.opt.nesterov != cfg->opt.nesterov) {
        zps_error("cannot resume from %s: its optimizer is %s, this shard's is %s (their state "
                  "differs)",
                  path, zps_opt_name(&ck.opt), zps_opt_name(&cfg->opt));
        zps_ckpt_fini(&ck);
        return ZPS_EINVAL;
    }
    note_optimizer_changes(&ck.opt, &cfg->opt);
    rc = zps_store_set(&s->store, ck.total, ck.range, ck.params, &cfg->opt);
    if (rc) {
        zps_error("cannot resume from %s: %s", path, zps_strerror(rc));
        zps_ckpt_fini(&ck);
        return rc;
    }
    for (uint32_t i = 0; i < ck.nstate; i++) {
        const char *name;
        float *st = zps_optimizer_state(s->store.opt, i, &name);
        ZPS_ASSERT(strcmp(name, ck.state_names[i]) == 0);
        if (s->store.len)
            memcpy(st, ck.state[i], s->store.len * sizeof(float));
    }
    zps_optimizer_set_steps(s->store.opt, ck.opt_steps);
    zps_consistency_restore(s->st, ck.version, ck.pushed, ck.live, ck.dropped);
    s->ckpt_taken = true;
    s->ckpt_version = ck.version;
    snprintf(s->ckpt_last_path, sizeof(s->ckpt_last_path), "%s", path);
    zps_info("resumed from %s: version %llu, N = %llu, range [%llu, %llu), optimizer step %llu",
             path, (unsigned long long)ck.version, (unsigned long long)ck.total,
             (unsigned long long)ck.range.lo, (unsigned long long)ck.range.hi,
             (unsigned long long)ck.opt_steps);
    zps_ckpt_fini(&ck);
    return 0;
}

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

static int open_socket(server_t *s)
{
    const zps_server_config_t *cfg = s->cfg;
    s->ctx = zmq_ctx_new();
    if (!s->ctx)
        return ZPS_ESOCKET;
    s->sock = zmq_socket(s->ctx, ZMQ_ROUTER);
    if (!s->sock)
        return ZPS_ESOCKET;
    int one = 1, linger = 1000;
    int64_t maxmsg = (int64_t)cfg->max_message_bytes;
    zmq_setsockopt(s->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    if (zmq_bind(s->sock, cfg->listen) != 0) {
        zps_error("cannot listen on %s: %s", cfg->listen, zmq_strerror(zmq_errno()));
        return ZPS_ESOCKET;
    }
    size_t len = sizeof(s->endpoint);
    if (zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, s->endpoint, &len) != 0)
        snprintf(s->endpoint, sizeof(s->endpoint), "%s", cfg->listen);
    return 0;
}

static void release(server_t *s)
{
    if (s->slots) {
        for (uint32_t w = 0; w < s->cfg->stale.workers; w++)
            if (s->slots[w].full)
                zmq_msg_close(&s->slots[w].msg);
    }
    free(s->slots);
    free(s->last_seen_ns);
    free(s->evictions);
    free(s->ranks);
    free(s->grads);
    free(s->batches);
    free(s->tokens);
    while (s->ckpt_queue) {
        ckpt_job_t *j = s->ckpt_queue;
        s->ckpt_queue = j->next;
        job_free(j);
    }
    if (s->reply_cached)
        zmq_msg_close(&s->reply_cache);
    s->reply_cached = false;
    zps_consistency_free(s->st);
    zps_store_fini(&s->store);
    if (s->sock)
        zmq_close(s->sock);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
    /* After zmq_ctx_term ZeroMQ holds no message: every buffer is ours again. */
    for (int i = 0; i < REPLY_POOL; i++)
        free(s->reply_pool[i].data);
}

int zps_server_run(const zps_server_config_t *cfg)
{
    server_t s;
    memset(&s, 0, sizeof(s));
    s.cfg = cfg;
    s.started_ns = zps_now_ns();
    zps_store_init(&s.store);
    snprintf(s.tag, sizeof(s.tag), "shard %u/%u", cfg->shard_index, cfg->shard_count);
    zps_log_set_tag(s.tag);

    if (!cfg->insecure && !zps_endpoint_is_local(cfg->listen)) {
        zps_error("refusing to listen on %s without encryption; pass --insecure to accept "
                  "unauthenticated peers from the network",
                  cfg->listen);
        return ZPS_EINVAL;
    }
    char why[256];
    int rc = zps_consistency_new(&cfg->stale, &s.st, why, sizeof(why));
    if (rc) {
        zps_error("%s", rc == ZPS_EINVAL ? why : zps_strerror(rc));
        return rc;
    }
    uint32_t w = cfg->stale.workers;
    s.slots = calloc(w, sizeof(slot_t));
    s.ranks = calloc(w, sizeof(uint32_t));
    s.grads = calloc(w, sizeof(float *));
    s.batches = calloc(w, sizeof(uint32_t));
    s.tokens_cap = 64;
    s.tokens = calloc(s.tokens_cap, sizeof(uint64_t));
    s.last_seen_ns = calloc(w, sizeof(uint64_t));
    s.evictions = calloc(w, sizeof(uint64_t));
    if (!s.slots || !s.ranks || !s.grads || !s.batches || !s.tokens || !s.last_seen_ns ||
        !s.evictions) {
        release(&s);
        return ZPS_ENOMEM;
    }
    if (cfg->resume || cfg->resume_from) {
        rc = resume(&s);
        if (rc) {
            release(&s);
            return rc;
        }
    }
    rc = open_socket(&s);
    if (rc) {
        release(&s);
        return rc;
    }

    int fd;
    size_t fdlen = sizeof(fd);
    zmq_getsockopt(s.sock, ZMQ_FD, &fd, &fdlen);
    uv_loop_init(&s.loop);
    uv_poll_init(&s.loop, &s.poll, fd);
    uv_idle_init(&s.loop, &s.idle);
    uv_timer_init(&s.loop, &s.liveness);
    uv_signal_init(&s.loop, &s.sigint);
    uv_signal_init(&s.loop, &s.sigterm);
    s.poll.data = s.idle.data = s.liveness.data = s.sigint.data = s.sigterm.data = &s;
    uv_poll_start(&s.poll, UV_READABLE, on_poll);
    /* A worker that never shows up counts as silent from the start. */
    for (uint32_t i = 0; i < w; i++)
        s.last_seen_ns[i] = s.started_ns;
    if (cfg->worker_timeout_ms > 0) {
        uint64_t every = cfg->worker_timeout_ms / 4;
        every = every < 20 ? 20 : every > 1000 ? 1000 : every;
        uv_timer_start(&s.liveness, on_liveness, every, every);
    }
    uv_signal_start(&s.sigint, on_signal, SIGINT);
    uv_signal_start(&s.sigterm, on_signal, SIGTERM);

    zps_info("listening on %s: %u workers, mode %s, optimizer %s, lr %g", s.endpoint, w,
             zps_mode_name(cfg->stale.mode), zps_opt_name(&cfg->opt), cfg->opt.lr);
    if (cfg->endpoint_file && write_endpoint_file(cfg->endpoint_file, s.endpoint) != 0) {
        zps_error("cannot write %s: %s", cfg->endpoint_file, strerror(errno));
        stop(&s, "start-up failure");
        rc = ZPS_EIO;
    }
    /* Anything that arrived before the poll started would not wake us. */
    drain(&s);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    uv_loop_close(&s.loop);
    release(&s);
    zps_info("stopped");
    return rc;
}
