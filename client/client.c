/*
 * client.c - libzps's verbs; see zps/zps.h (include/) for the contract and
 * client/internal.h for the rooms they are built from: each verb prepares
 * its requests (call_begin, slices_*), runs one call (call_exchange) or two,
 * and reads what the shards answered.
 */
#include "internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "keys.h"
#include "shard.h"
#include "strbuf.h"
#include "timeutil.h"

int zps_abi_version(void)
{
    return ZPS_ABI_VERSION;
}

/*
 * The structs a caller hands in, as ABI 1 has them: a caller's `size`
 * below these is refused. Fields added later go at their ends; a caller
 * built before them has a smaller `size`, and its missing fields read as
 * their defaults.
 */
#define OPTS_V1_SIZE (offsetof(zps_client_opts_t, curve_server_key) + 32)
#define INFO_V1_SIZE (offsetof(zps_reply_info_t, leases) + ZPS_CLIENT_MAX_LEASES * 8)
#define LEASE_V1_SIZE (offsetof(zps_lease_req_t, done) + 8)

/* What fits of src[sizeof] into a caller's struct of `size` bytes, whose size field stays. */
static void copy_out(void *dst, size_t size, const void *src, size_t full)
{
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t),
           (size < full ? size : full) - sizeof(size_t));
}

/* A caller's struct of `size` bytes into ours of `full` (defaults already there). */
static void copy_in(void *dst, size_t full, const void *src, size_t size)
{
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t),
           (size < full ? size : full) - sizeof(size_t));
}

/* A caller's reply info, checked before a call sends anything (NULL: none wanted). */
static int info_ok(const zps_reply_info_t *info)
{
    return !info || info->size >= INFO_V1_SIZE ? 0 : ZPS_EINVAL;
}

/* What a call found, into the caller's reply info (as much of it as its size holds). */
static void info_out(zps_reply_info_t *info, const zps_reply_info_t *full)
{
    if (info)
        copy_out(info, info->size, full, sizeof(*full));
}

/* Every other call while a staged exchange holds the requests. */
static int staged_busy(zps_client_t *c)
{
    client_set_error(c, "a staged exchange is in progress: zps_client_exchange_end comes first");
    return ZPS_EBUSY;
}

void zps_client_opts_default(zps_client_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->size = sizeof(*opts);
    opts->worker = -1;
    opts->observe = false;
    opts->timeout_ms = 30000;
    opts->retry_ms = 1000;
    opts->heartbeat_ms = 1000;
    opts->wait_log_ms = 10000;
}

int zps_client_opts_set_keys(zps_client_opts_t *opts, const char *key_file,
                             const char *server_key_file, char *why, size_t why_size)
{
    zps_keypair_t kp;
    uint8_t server[ZPS_KEY_BYTES];
    char sub[512];
    int rc = zps_keypair_load(key_file, &kp, sub, sizeof(sub));
    if (rc) {
        zps_set_reason(why, why_size, "--key: %s", sub);
        return rc;
    }
    rc = zps_pubkey_load(server_key_file, server, sub, sizeof(sub));
    if (rc) {
        zps_keypair_clear(&kp);
        zps_set_reason(why, why_size, "--server-key: %s", sub);
        return rc;
    }
    opts->curve = true;
    memcpy(opts->curve_public_key, kp.public_key, ZPS_KEY_BYTES);
    memcpy(opts->curve_secret_key, kp.secret_key, ZPS_KEY_BYTES);
    memcpy(opts->curve_server_key, server, ZPS_KEY_BYTES);
    zps_keypair_clear(&kp);
    return 0;
}

void zps_client_opts_clear(zps_client_opts_t *opts)
{
    volatile uint8_t *secret = opts->curve_secret_key;
    for (size_t i = 0; i < sizeof(opts->curve_secret_key); i++)
        secret[i] = 0;
}

int zps_client_new(const char *const *endpoints, size_t count, const zps_client_opts_t *opts,
                   zps_client_t **out)
{
    if (count == 0 || count > 65536 || (opts && opts->size < OPTS_V1_SIZE))
        return ZPS_EINVAL;
    zps_client_t *c = calloc(1, sizeof(*c));
    if (!c)
        return ZPS_ENOMEM;
    zps_client_opts_default(&c->opts);
    if (opts)
        copy_in(&c->opts, sizeof(c->opts), opts, opts->size);
    if (!c->opts.keep_malloc)
        zps_wire_tune_malloc();
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->released, NULL);
    /* Request ids only need to differ between this client's calls; starting
     * from a time-derived value keeps a restarted process from reusing the
     * ids of its previous life while old replies may still be in flight. */
    c->next_id = (zps_now_ns() ^ ((uint64_t)getpid() << 40)) & 0x7fffffffffffffffull;
    c->ctx = zmq_ctx_new();
    c->conns = calloc(count, sizeof(conn_t));
    /* What each connection's sessions poll. */
    c->items = calloc(count * CONN_MAX_SESSIONS * SESSION_MAX_ITEMS, sizeof(zmq_pollitem_t));
    int rc = c->ctx && c->conns && c->items ? 0 : ZPS_ENOMEM;
    c->nconns = count;
    for (size_t i = 0; i < count && rc == 0; i++) {
        conn_t *k = &c->conns[i];
        k->endpoint = strdup(endpoints[i]);
        rc = k->endpoint ? conn_open(c, k) : ZPS_ENOMEM;
        /* Offered a request in this order: shared memory, sealed, the socket. */
        conn_add_session(k, NULL);
        k->sealed = sealed_new(c, k);
        if (k->sealed)
            conn_add_session(k, k->sealed);
        k->shm = shm_new(c);
        if (k->shm)
            conn_add_session(k, k->shm);
    }
    if (rc == 0 && c->opts.worker >= 0 && c->opts.heartbeat_ms > 0)
        rc = heartbeat_start(c);
    if (rc) {
        zps_client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void zps_client_free(zps_client_t *c)
{
    if (!c)
        return;
    heartbeat_stop(c);
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        zps_message_close(&k->reply);
        /* Their sockets go before the context. */
        for (size_t j = 0; j < k->nsessions; j++)
            k->sessions[j]->ops->end(k->sessions[j], k);
        k->nsessions = 0;
        conn_close(k);
        free(k->endpoint);
    }
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    /* ZeroMQ holds none of them now. */
    for (size_t i = 0; i < c->nconns; i++)
        free(c->conns[i].narrow);
    free(c->resid);
    pthread_cond_destroy(&c->released);
    pthread_mutex_destroy(&c->mu);
    free(c->conns);
    free(c->items);
    zps_client_opts_clear(&c->opts);
    free(c);
}

size_t zps_client_server_count(const zps_client_t *c)
{
    return c->nconns;
}

/*
 * Puts the lease request set for this call on shard 0's request: `ask`
 * (a pull, an exchange) asks for leases, `complete` (a push, an exchange)
 * names the batch. Used once: a second attempt of the call within it
 * (shm_copy's pull over the socket) asks for nothing.
 */
static void attach_lease(zps_client_t *c, bool ask, bool complete)
{
    if (!c->lease_set || c->nconns == 0)
        return;
    c->lease_set = false;
    zps_header_t *h = &c->conns[0].req;
    const zps_lease_req_t *l = &c->lease;
    if (complete)
        h->lease_done = l->done;
    if (!ask)
        return;
    h->flags |= ZPS_FLAG_LEASE;
    h->plan_examples = l->examples;
    h->plan_batch = l->batch;
    h->plan_epochs = l->epochs;
    h->lease_want = l->want;
    h->nleases = l->nhave;
    memcpy(h->leases, l->have, l->nhave * sizeof(uint64_t));
}

int zps_client_set_lease(zps_client_t *c, const zps_lease_req_t *req)
{
    if (c->staged.on)
        return staged_busy(c);
    if (!req) {
        c->lease_set = false;
        return 0;
    }
    if (req->size < LEASE_V1_SIZE || req->nhave > ZPS_CLIENT_MAX_LEASES ||
        req->want > ZPS_CLIENT_MAX_LEASES)
        return ZPS_EINVAL;
    memset(&c->lease, 0, sizeof(c->lease));
    copy_in(&c->lease, sizeof(c->lease), req, req->size);
    c->lease.size = sizeof(c->lease);
    c->lease_set = true;
    return 0;
}

int zps_client_finish(zps_client_t *c)
{
    if (c->staged.on)
        return staged_busy(c);
    call_begin(c, ZPS_MSG_HEARTBEAT);
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].req.flags |= ZPS_FLAG_FINISHED;
    int rc = call_exchange(c, false);
    for (size_t i = 0; i < c->nconns; i++)
        zps_message_close(&c->conns[i].reply);
    return rc;
}

/* INIT requests for every shard, checksummed and checked for finite values. */
static int prepare_init(zps_client_t *c, const float *values, uint64_t n)
{
    call_begin(c, ZPS_MSG_INIT);
    slices_attach(c, values, n);
    return slices_sum(c, "initial value");
}

int zps_client_init(zps_client_t *c, const float *values, uint64_t n)
{
    if (c->staged.on)
        return staged_busy(c);
    if (n == 0 || !values)
        return ZPS_EINVAL;
    bool refusal = false;
    int rc = config_probe(c, n, &refusal);
    if (rc == 0)
        rc = prepare_init(c, values, n);
    if (rc == 0 && refusal) {
        /* The shards that will refuse get the INIT alone: their refusal is
         * the answer, and no other shard is initialised meanwhile. Should
         * they take it after all, the others get it next. */
        for (size_t i = 0; i < c->nconns; i++)
            c->conns[i].active = c->conns[i].refuses;
        rc = call_exchange(c, false);
        if (rc == 0)
            rc = prepare_init(c, values, n);
    }
    if (rc == 0)
        rc = call_exchange(c, false);
    if (rc == 0)
        c->total = n;
    return rc;
}

/* Checks the pull replies against the range rule; sets *total. */
static int check_pull_replies(zps_client_t *c, uint64_t *total)
{
    uint64_t n = c->conns[0].reply.hdr.total;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        const zps_header_t *h = &k->reply.hdr;
        if (h->total != n) {
            client_set_error(c, "%s: reports a %llu-element model, %s reports %llu", k->endpoint,
                             (unsigned long long)h->total, c->conns[0].endpoint,
                             (unsigned long long)n);
            return ZPS_ESIZE;
        }
        zps_range_t r;
        zps_shard_range(n, (uint32_t)i, (uint32_t)c->nconns, &r);
        if (h->offset != r.lo || h->length != zps_range_len(r)) {
            client_set_error(c,
                             "%s: holds [%llu, %llu), but as shard %zu of %zu it should hold "
                             "[%llu, %llu)",
                             k->endpoint, (unsigned long long)h->offset,
                             (unsigned long long)(h->offset + h->length), i, c->nconns,
                             (unsigned long long)r.lo, (unsigned long long)r.hi);
            return ZPS_ERANGE;
        }
    }
    *total = n;
    return 0;
}

static int copy_pulled(zps_client_t *c, float *out)
{
    int rc = 0;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        const zps_header_t *h = &k->reply.hdr;
        if (rc == 0 && (h->flags & ZPS_FLAG_SHM)) {
            rc = shm_copy(k->shm, c, k, out + h->offset);
        } else if (rc == 0 && zps_message_copy_verified(&k->reply, out + h->offset) != 0) {
            client_set_error(c, "%s: the pulled parameters fail their checksum", k->endpoint);
            rc = ZPS_ECHECKSUM;
        }
        k->version = h->model_version;
        zps_message_close(&k->reply);
    }
    return rc;
}

/* Every shard's PULL request is for `clock`; an observer may wait for its model. */
static void set_pull_clock(zps_client_t *c, uint64_t clock)
{
    for (size_t i = 0; i < c->nconns; i++) {
        c->conns[i].req.clock = clock;
        if (c->opts.worker == -1 && c->opts.observe)
            c->conns[i].req.flags |=
                ZPS_FLAG_WAIT | (c->opts.observe_pushes ? ZPS_FLAG_BY_PUSHES : 0);
    }
}

/*
 * Every shard answered a pull (or an exchange) of an n-element model: checks
 * the replies' ranges and configurations and copies the parameters into
 * out[n]. `refused` ends the message of a configuration that differs.
 */
static int take_pulled(zps_client_t *c, float *out, uint64_t n, zps_reply_info_t *info,
                       const char *refused)
{
    uint64_t total = 0;
    int rc = check_pull_replies(c, &total);
    if (rc == 0 && total != n) {
        client_set_error(c, "the servers hold a %llu-element model, not %llu",
                         (unsigned long long)total, (unsigned long long)n);
        rc = ZPS_ESIZE;
    }
    if (rc == 0) {
        config_note(c);
        rc = config_agree(c, refused);
    }
    if (rc)
        return rc;
    call_collect_info(c, info);
    rc = copy_pulled(c, out);
    if (rc == 0)
        c->total = n;
    return rc;
}

static int pull_once(zps_client_t *c, uint64_t clock, float *out, uint64_t n,
                     zps_reply_info_t *info)
{
    call_begin(c, ZPS_MSG_PULL);
    slices_attach(c, NULL, n);
    set_pull_clock(c, clock);
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].req.flags |= ZPS_FLAG_RANGE;
    attach_lease(c, true, false);
    int rc = call_exchange(c, false);
    return rc ? rc : take_pulled(c, out, n, info, "the pull is refused");
}

/* A pull whose parameters could not be had from shared memory (shm_copy) is made again over the
 * socket: a pull changes nothing at the server. */
int zps_client_pull(zps_client_t *c, uint64_t clock, float *out, uint64_t n, zps_reply_info_t *info)
{
    if (c->staged.on)
        return staged_busy(c);
    if (n == 0 || !out || info_ok(info))
        return ZPS_EINVAL;
    zps_reply_info_t full = {.size = sizeof(full)};
    zps_reply_info_t *fi = info ? &full : NULL;
    int rc = pull_once(c, clock, out, n, fi);
    if (rc == ZPS_ESHM)
        rc = pull_once(c, clock, out, n, fi);
    info_out(info, &full);
    return rc;
}

static int pull_alloc_once(zps_client_t *c, uint64_t clock, float **out, uint64_t *n,
                           zps_reply_info_t *info)
{
    call_begin(c, ZPS_MSG_PULL);
    set_pull_clock(c, clock);
    int rc = call_exchange(c, false);
    uint64_t total = 0;
    if (rc == 0)
        rc = check_pull_replies(c, &total);
    if (rc == 0) {
        config_note(c);
        rc = config_agree(c, "the pull is refused");
    }
    if (rc)
        return rc;
    float *v = malloc(total * sizeof(float));
    if (!v)
        return ZPS_ENOMEM;
    call_collect_info(c, info);
    rc = copy_pulled(c, v);
    if (rc) {
        free(v);
        return rc;
    }
    c->total = total;
    *out = v;
    *n = total;
    return 0;
}

int zps_client_pull_alloc(zps_client_t *c, uint64_t clock, float **out, uint64_t *n,
                          zps_reply_info_t *info)
{
    if (c->staged.on)
        return staged_busy(c);
    if (info_ok(info))
        return ZPS_EINVAL;
    zps_reply_info_t full = {.size = sizeof(full)};
    zps_reply_info_t *fi = info ? &full : NULL;
    int rc = pull_alloc_once(c, clock, out, n, fi);
    if (rc == ZPS_ESHM)
        rc = pull_alloc_once(c, clock, out, n, fi);
    info_out(info, &full);
    return rc;
}

/*
 * A push that failed at some shard: when another took it, the call's answer
 * is ZPS_EPARTIAL with c->err naming who took it and why the others did not;
 * otherwise `rc`, the exchange's own failure.
 */
static int push_outcome(zps_client_t *c, uint64_t clock, int rc)
{
    size_t took = 0;
    for (size_t i = 0; i < c->nconns; i++)
        took += c->conns[i].took;
    if (took == 0)
        return rc;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "push at clock %llu taken by shard", (unsigned long long)clock);
    const char *sep = took > 1 ? "s " : " ";
    for (size_t i = 0; i < c->nconns; i++) {
        if (c->conns[i].took) {
            zps_strbuf_printf(&b, "%s%zu", sep, i);
            sep = ", ";
        }
    }
    zps_strbuf_printf(&b, " only; not by");
    sep = " ";
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (k->took)
            continue;
        zps_strbuf_printf(&b, "%sshard %zu at %s: ", sep, i, k->endpoint);
        sep = "; ";
        if (k->outcome == ZPS_EREMOTE)
            zps_strbuf_printf(&b, "%s (%s)",
                              k->reply.hdr.error[0] ? k->reply.hdr.error
                                                    : zps_strerror(k->reply.hdr.status),
                              zps_errname(k->reply.hdr.status));
        else
            zps_strbuf_printf(&b, "%s (%s)", zps_strerror(k->outcome), zps_errname(k->outcome));
    }
    char *text = zps_strbuf_take(&b);
    client_set_error(c, "%s", text ? text : "push taken by some shards only");
    free(text);
    return ZPS_EPARTIAL;
}

/* Every shard's PUSH header: the clock, the batch, the version it was computed from, `flags`;
 * and the lease request an exchange or a push carries. */
static void push_headers(zps_client_t *c, uint64_t clock, uint32_t batch, uint32_t flags)
{
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        k->req.clock = clock;
        k->req.batch = batch;
        k->req.model_version = k->version;
        k->req.flags |= flags;
    }
    attach_lease(c, (flags & ZPS_FLAG_EXCHANGE) != 0, true);
}

/* The PUSH requests of grad[n] at `clock`, checked finite and summed; `flags` added. */
static int prepare_push(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                        uint32_t batch, uint32_t flags)
{
    call_begin(c, ZPS_MSG_PUSH);
    slices_attach(c, grad, n);
    int rc = c->opts.wire_bf16 ? slices_narrow(c, n, "gradient element")
                               : slices_sum(c, "gradient element");
    if (rc)
        return rc;
    push_headers(c, clock, batch, flags);
    return 0;
}

static int push(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n, uint32_t batch,
                zps_reply_info_t *info)
{
    int rc = prepare_push(c, clock, grad, n, batch, 0);
    if (rc)
        return rc;
    /* Every shard's answer is awaited, so a push some shard took is never
     * reported as one that failed. */
    rc = call_exchange(c, true);
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        k->took = k->have_reply && k->reply.hdr.status == 0;
    }
    if (rc)
        rc = push_outcome(c, clock, rc);
    if (rc == 0 || rc == ZPS_EPARTIAL)
        call_collect_info(c, info);
    for (size_t i = 0; i < c->nconns; i++)
        zps_message_close(&c->conns[i].reply);
    return rc;
}

/*
 * What became of an exchange whose requests call_wait has carried (rc its
 * outcome): the push's outcome when a shard did not take it, else the
 * pull's parameters into out[n].
 */
static int exchange_finish(zps_client_t *c, uint64_t clock, float *out, uint64_t n,
                           zps_reply_info_t *info, int rc)
{
    /* A shard whose pull failed after it took the push says so (TAKEN). */
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        k->took = k->have_reply &&
                  (k->reply.hdr.status == 0 || (k->reply.hdr.flags & ZPS_FLAG_TAKEN) != 0);
    }
    if (rc) {
        size_t took = 0;
        for (size_t i = 0; i < c->nconns; i++)
            took += c->conns[i].took;
        /* Taken everywhere, the pull failed: the pull's failure, as zps_client_pull's. */
        if (took < c->nconns)
            rc = push_outcome(c, clock, rc);
        if (rc == ZPS_EPARTIAL)
            call_collect_info(c, info);
        for (size_t i = 0; i < c->nconns; i++)
            zps_message_close(&c->conns[i].reply);
        return rc;
    }
    rc = take_pulled(c, out, n, info, "the exchange's pull is refused");
    /* The push is taken; the parameters it brought back could not be had from shared memory
     * (shm_copy): the pull of the next clock again, over the socket (info stays the exchange's). */
    return rc == ZPS_ESHM ? pull_once(c, clock + 1, out, n, NULL) : rc;
}

static int exchange(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n, uint32_t batch,
                    float *out, zps_reply_info_t *info)
{
    int rc = prepare_push(c, clock, grad, n, batch, ZPS_FLAG_EXCHANGE);
    if (rc)
        return rc;
    return exchange_finish(c, clock, out, n, info, call_exchange(c, true));
}

int zps_client_push(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n, uint32_t batch,
                    zps_reply_info_t *info)
{
    if (c->staged.on)
        return staged_busy(c);
    if (n == 0 || !grad || info_ok(info))
        return ZPS_EINVAL;
    zps_reply_info_t full = {.size = sizeof(full)};
    int rc = push(c, clock, grad, n, batch, info ? &full : NULL);
    info_out(info, &full);
    return rc;
}

int zps_client_exchange(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                        uint32_t batch, float *out, zps_reply_info_t *info)
{
    if (c->staged.on)
        return staged_busy(c);
    if (n == 0 || !grad || !out || clock == UINT64_MAX || info_ok(info))
        return ZPS_EINVAL;
    zps_reply_info_t full = {.size = sizeof(full)};
    int rc = exchange(c, clock, grad, n, batch, out, info ? &full : NULL);
    info_out(info, &full);
    return rc;
}

int zps_client_exchange_begin(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                              uint32_t batch, float *out)
{
    if (c->staged.on)
        return staged_busy(c);
    if (n == 0 || !grad || !out || clock == UINT64_MAX)
        return ZPS_EINVAL;
    call_begin(c, ZPS_MSG_PUSH);
    slices_attach(c, grad, n);
    int rc = c->opts.wire_bf16 ? slices_narrow_prepare(c, n) : 0;
    if (rc)
        return rc;
    push_headers(c, clock, batch, ZPS_FLAG_EXCHANGE);
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].active = false; /* until its slice is sent */
    c->staged.on = true;
    c->staged.clock = clock;
    c->staged.n = n;
    c->staged.out = out;
    c->staged.rc = 0;
    c->staged.send_rc = 0;
    return 0;
}

/* Shard k's slice is final: checked (and summed or narrowed), then its request sent. */
static void staged_send(zps_client_t *c, conn_t *k)
{
    if (k->started || c->staged.rc || c->staged.send_rc)
        return;
    int rc = c->opts.wire_bf16 ? slices_narrow_one(c, k, "gradient element")
                               : slices_sum_one(c, k, "gradient element");
    if (rc) {
        c->staged.rc = rc; /* this slice and those not sent yet go nowhere */
        return;
    }
    k->active = true;
    c->staged.send_rc = call_start(c, k);
}

int zps_client_exchange_ready(zps_client_t *c, uint64_t lo, uint64_t hi)
{
    if (!c->staged.on || lo > hi || hi > c->staged.n)
        return ZPS_EINVAL;
    int rc = 0;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        uint64_t a = lo > k->req.offset ? lo : k->req.offset;
        uint64_t b = hi < k->req.offset + k->count ? hi : k->req.offset + k->count;
        if (a >= b)
            continue;
        if (k->staged + (b - a) > k->count) {
            client_set_error(c, "exchange_ready: elements of shard %zu's slice declared twice", i);
            rc = ZPS_EINVAL;
            continue;
        }
        k->staged += b - a;
        if (k->staged == k->count)
            staged_send(c, k);
    }
    if (c->staged.send_rc)
        return c->staged.send_rc;
    return c->staged.rc ? c->staged.rc : rc;
}

int zps_client_exchange_end(zps_client_t *c, zps_reply_info_t *info)
{
    if (!c->staged.on)
        return ZPS_EINVAL;
    int bad_info = info_ok(info);
    for (size_t i = 0; i < c->nconns; i++)
        staged_send(c, &c->conns[i]);
    c->staged.on = false;
    /* A slice that could not be sent: the shards that have the push are
     * still heard, so the outcome names who took it (ZPS_EPARTIAL). */
    for (size_t i = 0; i < c->nconns; i++)
        if (!c->conns[i].started)
            c->conns[i].outcome = c->staged.rc;
    char why[sizeof(c->err)];
    snprintf(why, sizeof(why), "%s", c->err);
    int rc = call_wait(c, true, c->staged.send_rc);
    if (rc == 0 && c->staged.rc) {
        rc = c->staged.rc;
        snprintf(c->err, sizeof(c->err), "%s", why);
    }
    zps_reply_info_t full = {.size = sizeof(full)};
    rc = exchange_finish(c, c->staged.clock, c->staged.out, c->staged.n, bad_info ? NULL : &full,
                         rc);
    if (bad_info)
        return ZPS_EINVAL;
    info_out(info, &full);
    return rc;
}

bool zps_client_push_taken(const zps_client_t *c, size_t index)
{
    return index < c->nconns && c->conns[index].took;
}

/* A request of `type` to every shard whose replies' json make one line each in *report. */
static int ask_every_shard(zps_client_t *c, enum zps_msg_type type, char **report)
{
    call_begin(c, type);
    int rc = call_exchange(c, false);
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    for (size_t i = 0; i < c->nconns; i++) {
        if (rc == 0)
            zps_strbuf_printf(&b, "%s\n", c->conns[i].reply.json ? c->conns[i].reply.json : "{}");
        zps_message_close(&c->conns[i].reply);
    }
    if (rc) {
        zps_strbuf_fini(&b);
        return rc;
    }
    *report = zps_strbuf_take(&b);
    return *report ? 0 : ZPS_ENOMEM;
}

int zps_client_checkpoint(zps_client_t *c, char **report)
{
    if (c->staged.on)
        return staged_busy(c);
    return ask_every_shard(c, ZPS_MSG_CHECKPOINT, report);
}

int zps_client_reload_keys(zps_client_t *c, char **report)
{
    if (c->staged.on)
        return staged_busy(c);
    return ask_every_shard(c, ZPS_MSG_RELOAD_KEYS, report);
}

int zps_client_stats(zps_client_t *c, size_t index, char **json)
{
    if (c->staged.on)
        return staged_busy(c);
    if (index >= c->nconns)
        return ZPS_EINVAL;
    /* One shard only: ask it alone, so a dead neighbour cannot time this out. */
    call_begin(c, ZPS_MSG_STATS);
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].active = i == index;
    conn_t *k = &c->conns[index];
    int rc = call_exchange(c, false);
    if (rc == 0) {
        *json = strdup(k->reply.json ? k->reply.json : "{}");
        if (!*json)
            rc = ZPS_ENOMEM;
    }
    zps_message_close(&k->reply);
    return rc;
}
