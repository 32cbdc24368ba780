/*
 * handlers.c - the requests a shard serves; see handlers.h.
 */
#include "handlers.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_queue.h"
#include "daemon.h"
#include "delay_comp.h"
#include "error.h"
#include "json.h"
#include "log.h"
#include "timeutil.h"

/* A pull waiting for the rules to allow it. Its address is its token. */
typedef struct parked_pull {
    zps_peer_t peer;
    zps_header_t req;
    uint64_t since_ns;
    /* The pull of an exchange: what its push's reply would have said. */
    uint32_t carry_flags;
    uint64_t carry_staleness;
} parked_pull_t;

/* ---- checks shared by several requests ---- */

/* Who may send this request (-1, an observer, where observer_ok). */
static bool check_worker(zps_daemon_t *d, zps_request_t *r, bool observer_ok)
{
    char why[ZPS_ERROR_TEXT_MAX];
    int rc =
        zps_consistency_check_worker(d->consistency, r->hdr->worker, observer_ok, why, sizeof(why));
    if (rc == 0)
        return true;
    zps_reply_error(d, r, rc, "%s", why);
    return false;
}

/* The sender's idea of which shard this is, when it states one. */
static bool check_shard(zps_daemon_t *d, zps_request_t *r)
{
    const zps_header_t *req = r->hdr;
    if (req->shard_count == 0 ||
        (req->shard_index == d->cfg->shard_index && req->shard_count == d->cfg->shard_count))
        return true;
    zps_reply_error(d, r, ZPS_ERANGE,
                    "this server is shard %u/%u, the request was meant for shard %u/%u",
                    d->cfg->shard_index, d->cfg->shard_count, req->shard_index, req->shard_count);
    return false;
}

/*
 * The configuration the sender agreed with every shard, when it states one
 * (0: a tool or an older client, unchecked). Checked first: a shard started
 * with other settings than its peers must refuse before anything changes.
 */
static bool check_config(zps_daemon_t *d, zps_request_t *r)
{
    uint64_t mine = d->fingerprint;
    uint64_t theirs = r->hdr->config_fingerprint;
    if (theirs == 0 || theirs == mine)
        return true;
    zps_reply_error(d, r, ZPS_ECONFIG,
                    "configuration fingerprint %016llx is not this shard's %016llx: the shards "
                    "were started with different settings (compare \"config\" in their STATS)",
                    (unsigned long long)theirs, (unsigned long long)mine);
    return false;
}

/* offset/length of the request against this shard's range for N = req->total. */
static bool check_range(zps_daemon_t *d, zps_request_t *r)
{
    const zps_header_t *req = r->hdr;
    zps_range_t range;
    zps_shard_range(req->total, d->cfg->shard_index, d->cfg->shard_count, &range);
    if (req->offset == range.lo && req->length == zps_range_len(range))
        return true;
    zps_reply_error(d, r, ZPS_ERANGE,
                    "range [%llu, %llu) does not match shard %u/%u of a %llu-element model, "
                    "which owns [%llu, %llu)",
                    (unsigned long long)req->offset,
                    (unsigned long long)(req->offset + req->length), d->cfg->shard_index,
                    d->cfg->shard_count, (unsigned long long)req->total,
                    (unsigned long long)range.lo, (unsigned long long)range.hi);
    return false;
}

/* The payload of the request is finite (checked as its checksum was, on receipt). */
static bool check_finite(zps_daemon_t *d, zps_request_t *r)
{
    zps_message_t *m = r->msg;
    size_t bad = 0;
    if (m->scanned) {
        if (m->first_nonfinite >= m->hdr.length)
            return true;
        bad = (size_t)m->first_nonfinite;
    } else {
        /* Payloads in frames are always scanned on receipt. */
        ZPS_ASSERT(!m->frames);
        if (zps_all_finite(zps_message_floats(m), (size_t)m->hdr.length, &bad))
            return true;
    }
    zps_reply_error(d, r, ZPS_ENONFINITE, "element %llu of the payload is %g",
                    (unsigned long long)(m->hdr.offset + bad), (double)zps_message_at(m, bad));
    return false;
}

/* ---- shared data assignment (shard 0; assign.h, docs/worker.md) ---- */

/*
 * The assignment fields of a worker's request, checked on arrival, before
 * anything changes: a lease request (ZPS_FLAG_LEASE) states the run's plan,
 * which must be every worker's, and wants at most ZPS_ASSIGN_MAX_HELD; a
 * push names the batch it completes with that batch's size. Only shard 0
 * holds an assignment, and BSP keeps the fixed one. A shard whose plan is
 * set refuses a push that names no batch: a worker with the fixed
 * assignment among workers that share theirs would train some examples
 * twice and others never.
 */
static bool check_lease(zps_daemon_t *d, zps_request_t *r, bool push)
{
    const zps_header_t *req = r->hdr;
    bool asks = (req->flags & ZPS_FLAG_LEASE) != 0;
    bool names = push && req->lease_done != 0;
    if (!asks && !names) {
        if (push && d->assign && zps_assign_has_plan(d->assign) &&
            d->cfg->consistency.mode != ZPS_MODE_BSP) {
            zps_reply_error(d, r, ZPS_ECONFIG,
                            "this run's workers share their batches (--data-assignment shared): "
                            "a push must name the batch it completes; start every worker with "
                            "the same --data-assignment");
            return false;
        }
        return true;
    }
    if (!d->assign) {
        zps_reply_error(d, r, ZPS_EMODE,
                        "shard %u/%u holds no data assignment: batches are leased from shard 0",
                        d->cfg->shard_index, d->cfg->shard_count);
        return false;
    }
    if (d->cfg->consistency.mode == ZPS_MODE_BSP) {
        zps_reply_error(d, r, ZPS_EMODE,
                        "--mode bsp keeps the fixed data assignment (clock t's batch of rank r, "
                        "so that BSP equals --local): no batch is leased");
        return false;
    }
    if (req->worker < 0) {
        zps_reply_error(d, r, ZPS_EWORKER, "only a worker is handed batches");
        return false;
    }
    char why[ZPS_ERROR_TEXT_MAX];
    if (asks) {
        if (req->lease_want > ZPS_ASSIGN_MAX_HELD) {
            zps_reply_error(d, r, ZPS_EINVAL, "a worker holds at most %d leases, not %u",
                            ZPS_ASSIGN_MAX_HELD, req->lease_want);
            return false;
        }
        zps_assign_plan_t plan = {req->plan_examples, req->plan_batch, req->plan_epochs};
        int rc = zps_assign_set_plan(d->assign, &plan, why, sizeof(why));
        if (rc) {
            zps_reply_error(d, r, rc, "%s", why);
            return false;
        }
    }
    if (names) {
        uint64_t g = req->lease_done - 1;
        uint32_t size = zps_assign_batch_size(d->assign, g);
        if (size == 0 || size != req->batch) {
            zps_reply_error(d, r, ZPS_EBATCH,
                            size == 0 ? "batch %llu is no batch of this run's plan"
                                      : "batch %llu has %u examples, the push says %u",
                            (unsigned long long)g, size, req->batch);
            return false;
        }
    }
    return true;
}

/* A reply to a lease request carries the worker's leases as shard 0 now has them. */
static void add_leases(zps_daemon_t *d, const zps_header_t *req, zps_header_t *h)
{
    if (!d->assign || req->worker < 0 || !(req->flags & ZPS_FLAG_LEASE))
        return;
    bool exhausted = false;
    h->nleases = (uint32_t)zps_assign_lease(d->assign, (uint32_t)req->worker, req->leases,
                                            req->nleases, req->lease_want, h->leases, &exhausted);
    h->flags |= ZPS_FLAG_LEASE | (exhausted ? ZPS_FLAG_EXHAUSTED : 0);
}

/*
 * The push of worker w that names batch lease_done - 1 was applied: the
 * batch is complete. One that is no longer w's lease (handed out again
 * after w was evicted) was applied as on every other shard, which know
 * nothing of leases, but is not counted: its examples are counted once, by
 * the batch's new holder.
 */
static void complete_lease(zps_daemon_t *d, const zps_header_t *req)
{
    if (!d->assign || req->lease_done == 0 || req->worker < 0)
        return;
    bool first = false;
    char why[ZPS_ERROR_TEXT_MAX];
    if (zps_assign_complete(d->assign, (uint32_t)req->worker, req->lease_done - 1, req->batch,
                            &first, why, sizeof(why)) != 0) {
        d->count.lease_lost++;
        zps_warn("push of worker %d at clock %llu applied, its batch not counted: %s",
                 req->worker, (unsigned long long)req->clock, why);
    }
}

/* ---- pulls ---- */

/* carry: the push's flags and staleness when the pull is an exchange's; waited: ns held. */
static void answer_pull(zps_daemon_t *d, const zps_request_t *r, uint32_t carry_flags,
                        uint64_t carry_staleness, uint64_t waited_ns)
{
    zps_header_t h;
    zps_reply_header(d, r, &h);
    h.offset = d->store.range.lo;
    add_leases(d, r->hdr, &h);
    h.flags |= carry_flags;
    h.update_staleness = carry_staleness;
    h.waited_us = waited_ns / 1000;
    zps_reply_send(d, r, &h);
}

void zps_handlers_answer_ready(zps_daemon_t *d)
{
    size_t n;
    while ((n = zps_consistency_take_ready(d->consistency, d->tokens, d->tokens_cap)) > 0) {
        uint64_t now = zps_now_ns();
        for (size_t i = 0; i < n; i++) {
            parked_pull_t *p = (parked_pull_t *)(uintptr_t)d->tokens[i];
            /* pull_wait is the workers' waiting; an observer waiting for a
             * clock's model (an evaluator) waits by choice. */
            if (p->req.worker >= 0)
                zps_thist_add(&d->pull_wait, now - p->since_ns);
            zps_request_t later = zps_request_later(&p->peer, &p->req);
            answer_pull(d, &later, p->carry_flags, p->carry_staleness, now - p->since_ns);
            free(p);
        }
    }
}

void zps_handlers_fail_parked(zps_daemon_t *d)
{
    size_t n;
    while ((n = zps_consistency_take_all(d->consistency, d->tokens, d->tokens_cap)) > 0) {
        for (size_t i = 0; i < n; i++) {
            parked_pull_t *p = (parked_pull_t *)(uintptr_t)d->tokens[i];
            zps_request_t later = zps_request_later(&p->peer, &p->req);
            later.reply_flags = p->carry_flags; /* an exchange's: TAKEN among them */
            zps_reply_error(d, &later, ZPS_ESHUTDOWN, "the server is shutting down");
            free(p);
        }
    }
}

static bool on_connection(uint64_t token, void *arg)
{
    return ((const parked_pull_t *)(uintptr_t)token)->peer.fd == *(const int *)arg;
}

void zps_handlers_cancel_connection(zps_daemon_t *d, int fd)
{
    if (fd < 0)
        return;
    size_t n;
    while ((n = zps_consistency_take_if(d->consistency, on_connection, &fd, d->tokens,
                                        d->tokens_cap)) > 0) {
        for (size_t i = 0; i < n; i++)
            free((parked_pull_t *)(uintptr_t)d->tokens[i]);
        d->count.pulls_cancelled += n;
    }
}

static void start_pull(zps_daemon_t *d, zps_request_t *r, uint32_t carry_flags,
                       uint64_t carry_staleness);

void zps_handle_pull(zps_daemon_t *d, zps_request_t *r)
{
    const zps_header_t *req = r->hdr;
    d->count.pulls++;
    if (!check_worker(d, r, true) || !check_shard(d, r))
        return;
    /* A client that knows N states the range it expects; one that does not
     * learns it from the reply. */
    if (req->flags & ZPS_FLAG_RANGE) {
        if (zps_consistency_initialized(d->consistency) && req->total != d->store.total) {
            zps_reply_error(d, r, ZPS_ESIZE, "the model has %llu elements, the pull expects %llu",
                            (unsigned long long)d->store.total, (unsigned long long)req->total);
            return;
        }
        if (!check_range(d, r))
            return;
    }
    /* A one-shot tool would wait for nothing it can bring about. */
    if ((req->flags & ZPS_FLAG_NOT_INIT_NOW) && !zps_consistency_initialized(d->consistency)) {
        zps_reply_expected(d, r, ZPS_ENOTINIT, "the model is not initialised yet");
        return;
    }
    /* Last: a lease request sets the run's plan. */
    if (!check_lease(d, r, false))
        return;

    start_pull(d, r, 0, 0);
}

/*
 * Answers, or parks until the rules allow it, the pull r (checked). carry:
 * the flags and update staleness of the push whose exchange it completes
 * (its reply is the push's too), 0 for a pull of its own.
 */
static void start_pull(zps_daemon_t *d, zps_request_t *r, uint32_t carry_flags,
                       uint64_t carry_staleness)
{
    const zps_header_t *req = r->hdr;
    parked_pull_t *p = malloc(sizeof(*p));
    if (!p) {
        zps_reply_error(d, r, ZPS_ENOMEM, "out of memory");
        return;
    }
    char why[ZPS_ERROR_TEXT_MAX];
    zps_pull_result_t res;
    uint64_t existing = 0;
    /* An observer may ask for the model of its clock rather than the
     * current one (an evaluator that must not hold training back). */
    bool observe = req->worker == -1 && (req->flags & ZPS_FLAG_WAIT);
    int rc = observe && (req->flags & ZPS_FLAG_BY_PUSHES)
                 ? zps_consistency_observe_pushes(d->consistency, req->clock, req->request_id,
                                                  (uintptr_t)p, &res, &existing, why, sizeof(why))
             : observe
                 ? zps_consistency_observe(d->consistency, req->clock, req->request_id,
                                           (uintptr_t)p, &res, &existing, why, sizeof(why))
                 : zps_consistency_pull(d->consistency, req->worker, req->clock, req->request_id,
                                        (uintptr_t)p, &res, &existing, why, sizeof(why));
    if (rc) {
        free(p);
        zps_reply_error(d, r, rc, "%s", why);
        return;
    }
    if (res == ZPS_PULL_READY) {
        free(p);
        if (req->worker >= 0)
            zps_thist_add(&d->pull_wait, 0);
        answer_pull(d, r, carry_flags, carry_staleness, 0);
        return;
    }
    if (res == ZPS_PULL_DUPLICATE) {
        /* A resend of a pull that is waiting: answer it once, on the newest
         * route (the client may have reconnected). */
        free(p);
        ((parked_pull_t *)(uintptr_t)existing)->peer = *r->peer;
        return;
    }
    p->peer = *r->peer;
    p->req = *req;
    p->req.json = NULL;
    p->since_ns = zps_now_ns();
    p->carry_flags = carry_flags;
    p->carry_staleness = carry_staleness;
}

/* ---- INIT ---- */

void zps_handle_init(zps_daemon_t *d, zps_request_t *r)
{
    const zps_header_t *req = r->hdr;
    d->count.inits++;
    if (!check_config(d, r) || !check_worker(d, r, true) || !check_shard(d, r))
        return;
    if (req->total == 0) {
        zps_reply_error(d, r, ZPS_ESIZE, "a model must have at least one element");
        return;
    }
    if (!check_range(d, r))
        return;
    if (!check_finite(d, r))
        return;
    /* The values are read where they arrived, one frame or several: made
     * into one buffer first, that buffer would stay in the payload pool for
     * the rest of the run, a copy of the shard that nothing reuses under BSP. */
    if (zps_consistency_initialized(d->consistency)) {
        if (req->total != d->store.total) {
            zps_reply_error(d, r, ZPS_ESIZE,
                            "the model was initialised with %llu elements, this INIT has %llu",
                            (unsigned long long)d->store.total, (unsigned long long)req->total);
            return;
        }
        if (d->store.len && !zps_message_equals(r->msg, d->store.params) &&
            zps_consistency_version(d->consistency) == 0) {
            zps_reply_error(d, r, ZPS_EINITED,
                            "the model was already initialised with other values");
            return;
        }
        /* Identical (or the model has moved on since): acknowledged, nothing
         * changes, and its frames go back to the kernel as the first INIT's
         * did: a resend after a reconnection must not stay in the heap. */
        zps_message_drop_payload(r->msg);
        zps_wire_trim_heap();
    } else {
        zps_range_t range = {req->offset, req->offset + req->length};
        int rc = zps_store_set(&d->store, req->total, range, NULL, &d->cfg->opt);
        if (rc) {
            zps_reply_error(d, r, rc, "cannot hold the model: %s", zps_strerror(rc));
            return;
        }
        zps_message_copy_out(r->msg, d->store.params);
        /* The values are in the store: the frames they came in go back to
         * the kernel now, not into the heap for the rest of the run
         * (docs/protocol.md, "What an honest run holds"). */
        zps_message_drop_payload(r->msg);
        zps_wire_trim_heap();
        zps_consistency_set_initialized(d->consistency);
        zps_daemon_model_known(d);
        zps_info("initialised by worker %d: N = %llu, range [%llu, %llu), optimizer %s",
                 req->worker, (unsigned long long)req->total, (unsigned long long)range.lo,
                 (unsigned long long)range.hi, zps_opt_name(&d->cfg->opt));
    }
    zps_header_t h;
    zps_reply_header(d, r, &h);
    zps_reply_send(d, r, &h);
    zps_handlers_answer_ready(d);
}

/* ---- steps ---- */

/*
 * A BSP step is taken in three parts: step_begin (loop thread) gathers the
 * k pushes and reserves the buffer its reply copy goes to, step_compute (any
 * thread) checks that the result is finite and takes it, step_end (loop
 * thread) releases the pushes and moves the clock on. Under SSP and ASP a
 * push applied on arrival is the one step_compute does. A shard of at least
 * --background-step-bytes runs step_compute on a threadpool thread
 * (uv_queue_work; the step's own chunks then go to the helper threads as
 * ever, pool.h): the loop goes on with connections, timers, signals and the
 * requests that do not touch the model, and holds back the first one that
 * does (server.c) until the steps due are taken and answered. Nothing the
 * step reads or writes -- the store, the pushes, the reserved buffer, the
 * scratch arrays -- is touched by the loop meanwhile.
 */

static bool in_background(const zps_daemon_t *d)
{
    return (uint64_t)d->store.len * sizeof(float) >= d->cfg->background_step_bytes;
}

static void step_work(uv_work_t *w);
static void step_after(uv_work_t *w, int status);

/*
 * Queues d->step's step_compute on the threadpool. uv_queue_work fails only
 * without a work callback, and nothing here cancels the request.
 */
static void queue_step(zps_daemon_t *d)
{
    zps_step_t *s = &d->step;
    s->work.data = s;
    int rc = uv_queue_work(&d->loop, &s->work, step_work, step_after);
    ZPS_ASSERT(rc == 0);
    s->running = true;
    d->count.steps_background++;
}

/* Gathers the next step that is due into d->step; false when none is. */
static bool step_begin(zps_daemon_t *d)
{
    zps_step_t *s = &d->step;
    uint32_t k;
    if (!zps_consistency_step_due(d->consistency, &s->clock, d->ranks, &k))
        return false;
    s->k = k;
    /* The largest |g| of all k pushes: the store's bound on the mean. */
    s->g_max = 0.0;
    for (uint32_t j = 0; j < k; j++) {
        zps_slot_t *sl = &d->slots[d->ranks[j]];
        ZPS_ASSERT(sl->full);
        d->segs[j] = (zps_grad_segs_t){sl->grad.seg, sl->grad.seg_len};
        d->batches[j] = sl->batch;
        s->g_max = !(sl->abs_max <= s->g_max) ? (double)sl->abs_max : s->g_max;
    }
    /* Every worker pulls the version this step makes: its payload is
     * copied and checksummed in the step's own pass over memory, into
     * shared memory while workers read from there (shm.h). */
    s->buf = NULL;
    s->shm_buf = -1;
    s->dst = zps_shm_reserve(&d->shm, &s->shm_buf);
    if (!s->dst) {
        s->buf = zps_reply_cache_reserve(&d->reply_cache, d->store.len);
        s->dst = s->buf ? s->buf->data : NULL;
    }
    s->ok = false;
    s->where = 0;
    s->crc = 0;
    return true;
}

/*
 * Applies a push's gradient on arrival (SSP, ASP). With delay compensation
 * and the parameters worker dc_rank (>= 0) was last sent, the gradient is
 * compensated first (optimizer/delay_comp.h) and checked exactly: the bound
 * g_max is of the gradient as it came.
 */
static int apply_push(zps_daemon_t *d, const float *grad, double g_max, double lr_scale,
                      int32_t dc_rank, size_t *where)
{
    if (dc_rank >= 0 && d->dc_sent[dc_rank]) {
        zps_delay_compensate(d->dc_grad, grad, d->store.params,
                             d->dc_pulled + (size_t)dc_rank * d->store.len,
                             (float)d->cfg->delay_comp, d->store.len);
        grad = d->dc_grad;
        g_max = INFINITY;
    }
    return zps_store_apply_bounded(&d->store, grad, g_max, lr_scale, where);
}

static void step_compute(zps_step_t *s)
{
    zps_daemon_t *d = s->d;
    if (d->cfg->step_delay_ms) {
        struct timespec t = {d->cfg->step_delay_ms / 1000,
                             (long)(d->cfg->step_delay_ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
    }
    if (s->apply) {
        s->rc = apply_push(d, zps_message_floats(&s->apply_msg), s->g_max, s->lr_scale,
                           s->dc_rank, &s->where);
        return;
    }
    s->ok = zps_store_check_mean_segs(&d->store, d->segs, d->batches, s->k, s->g_max, d->grads,
                                      &s->where) == 0;
    if (s->ok)
        s->crc = zps_store_step_mean_segs(&d->store, d->segs, d->batches, s->k, s->g_max, d->grads,
                                          s->dst);
}

/*
 * A step whose result would not be finite is refused (consistency.h,
 * zps_consistency_step_refused): the parameters stay as they are, the clock
 * moves on, and its buffered pushes are discarded, counted and logged.
 */
static void step_end(zps_daemon_t *d)
{
    zps_step_t *s = &d->step;
    if (s->ok)
        for (uint32_t j = 0; j < s->k; j++)
            zps_vhist_add(&d->update_staleness, d->slots[d->ranks[j]].update_staleness);
    for (uint32_t j = 0; j < s->k; j++) {
        zps_slot_t *sl = &d->slots[d->ranks[j]];
        zps_payload_close(&sl->grad);
        sl->full = false;
    }
    if (s->ok) {
        zps_consistency_step_done(d->consistency);
        if (s->buf)
            zps_reply_cache_fill(&d->reply_cache, s->buf, d->store.len,
                                 zps_consistency_version(d->consistency), s->crc);
        if (s->shm_buf >= 0)
            zps_shm_fill(&d->shm, s->shm_buf, zps_consistency_version(d->consistency), s->crc);
        d->count.steps++;
        zps_debug("step for clock %llu from %u pushes", (unsigned long long)s->clock, s->k);
    } else {
        /* Nothing was written: the reserved buffer goes back unused. */
        if (s->buf)
            zps_reply_cache_unreserve(&d->reply_cache, s->buf);
        zps_consistency_step_refused(d->consistency);
        d->count.steps_refused++;
        d->count.buffered_discarded += s->k;
        s->refused++;
        zps_warn("step for clock %llu refused: it would make a parameter or optimizer state "
                 "non-finite from element %llu; its %u buffered pushes are discarded (STATS "
                 "buffered_discarded) and the clock goes on with the parameters unchanged",
                 (unsigned long long)s->clock, (unsigned long long)(d->store.range.lo + s->where),
                 s->k);
    }
    s->buf = NULL;
    s->dst = NULL;
    zps_ckpt_queue_maybe(d);
}

static void step_work(uv_work_t *w)
{
    step_compute(w->data);
}

static void finish_push(zps_daemon_t *d);
static void finish_apply(zps_daemon_t *d);
static bool take_steps(zps_daemon_t *d);

static void step_after(uv_work_t *w, int status)
{
    zps_step_t *s = w->data;
    zps_daemon_t *d = s->d;
    ZPS_ASSERT(status == 0); /* never cancelled */
    s->running = false;
    if (s->apply) {
        finish_apply(d);
        zps_daemon_steps_done(d);
        return;
    }
    step_end(d);
    if (take_steps(d))
        return; /* the next one due runs: what waits, waits for it too */
    if (s->answer_push)
        finish_push(d);
    zps_handlers_answer_ready(d);
    zps_daemon_steps_done(d);
}

/*
 * Takes every BSP step that is due, adding those refused to d->step.refused.
 * True when one was left running off the loop's thread: the rest (the next
 * steps, the answers) then follows from step_after.
 */
static bool take_steps(zps_daemon_t *d)
{
    zps_step_t *s = &d->step;
    if (s->running)
        return true;
    while (step_begin(d)) {
        if (in_background(d)) {
            queue_step(d);
            return true;
        }
        step_compute(s);
        step_end(d);
    }
    return false;
}

void zps_handlers_take_steps(zps_daemon_t *d)
{
    (void)take_steps(d);
}

bool zps_handlers_stepping(const zps_daemon_t *d)
{
    return d->step.running;
}

bool zps_handlers_bsp_stepping(const zps_daemon_t *d)
{
    return d->step.running && !d->step.apply;
}

bool zps_handlers_awaits(const zps_daemon_t *d, const zps_peer_t *peer)
{
    const zps_step_t *s = &d->step;
    if (!s->running)
        return false;
    if (s->apply)
        return zps_peer_same(&s->apply_msg.peer, peer);
    return s->answer_push && zps_peer_same(&s->push_peer, peer);
}

/* ---- PUSH ---- */

static void push_done(zps_daemon_t *d, zps_request_t *r, zps_header_t *h, bool exchange);

/*
 * A push applied on arrival (SSP, ASP) after the store said rc: refused
 * whole when its step would not be finite (answered; false), else counted
 * and its reply header made in *h.
 */
static bool applied(zps_daemon_t *d, zps_request_t *r, int rc, size_t where,
                    uint64_t update_staleness, zps_header_t *h)
{
    const zps_header_t *req = r->hdr;
    if (rc) {
        /* Refused whole: as if the push had never arrived. */
        zps_consistency_push_refused(d->consistency, (uint32_t)req->worker, req->clock);
        d->count.steps_refused++;
        zps_warn("push of worker %lld at clock %llu refused: its step would make a value "
                 "non-finite from element %llu",
                 (long long)req->worker, (unsigned long long)req->clock,
                 (unsigned long long)(d->store.range.lo + where));
        zps_reply_error(d, r, ZPS_ENONFINITE,
                        "this step would make a parameter or optimizer state non-finite "
                        "(from element %llu): refused, nothing changed",
                        (unsigned long long)(d->store.range.lo + where));
        return false;
    }
    zps_vhist_add(&d->update_staleness, update_staleness);
    d->count.applied++;
    complete_lease(d, req);
    zps_ckpt_queue_maybe(d);
    zps_reply_header(d, r, h);
    h->update_staleness = update_staleness;
    return true;
}

/* The push applied off the loop's thread, answered now that it is. */
static void finish_apply(zps_daemon_t *d)
{
    zps_step_t *s = &d->step;
    zps_message_t m;
    zps_message_move(&m, &s->apply_msg);
    s->apply = false;
    zps_request_t r = {&m.peer, &m.hdr, &m, s->push_reply_flags};
    zps_header_t h;
    if (applied(d, &r, s->rc, s->where, s->update_staleness, &h))
        push_done(d, &r, &h, (m.hdr.flags & ZPS_FLAG_EXCHANGE) != 0);
    zps_message_close(&m);
}

/* The push whose BSP step ran off the loop's thread, answered now that it is taken. */
static void finish_push(zps_daemon_t *d)
{
    zps_step_t *s = &d->step;
    s->answer_push = false;
    zps_request_t r = {&s->push_peer, &s->push_req, NULL, s->push_reply_flags};
    zps_header_t h = s->push_reply;
    h.flags |= s->refused ? ZPS_FLAG_DROPPED : ZPS_FLAG_BUFFERED;
    push_done(d, &r, &h, (s->push_req.flags & ZPS_FLAG_EXCHANGE) != 0);
}

void zps_handle_push(zps_daemon_t *d, zps_request_t *r)
{
    const zps_header_t *req = r->hdr;
    char why[ZPS_ERROR_TEXT_MAX];
    d->count.pushes++;
    if (!check_config(d, r) || !check_worker(d, r, false) || !check_shard(d, r))
        return;
    bool exchange = (req->flags & ZPS_FLAG_EXCHANGE) != 0;
    /* The lease request of an exchange is its pull's. */
    if ((req->flags & ZPS_FLAG_LEASE) && !exchange) {
        zps_reply_error(d, r, ZPS_EINVAL, "batches are leased with a pull or an exchange");
        return;
    }
    int rc = zps_consistency_check_push(d->consistency, req->clock, why, sizeof(why));
    if (rc) {
        zps_reply_error(d, r, rc, "%s", why);
        return;
    }
    if (exchange && req->clock == UINT64_MAX) {
        zps_reply_error(d, r, ZPS_ECLOCK, "an exchange at clock %llu has no next clock to pull",
                        (unsigned long long)req->clock);
        return;
    }
    if (req->total != d->store.total) {
        zps_reply_error(d, r, ZPS_ESIZE, "the model has %llu elements, the push has %llu",
                        (unsigned long long)d->store.total, (unsigned long long)req->total);
        return;
    }
    if (!check_range(d, r))
        return;
    if (req->batch == 0) {
        zps_reply_error(d, r, ZPS_EBATCH, "a gradient must come from at least one example");
        return;
    }
    if (!check_finite(d, r))
        return;
    if (d->dc_failed && d->cfg->consistency.mode != ZPS_MODE_BSP) {
        zps_reply_error(d, r, ZPS_ENOMEM,
                        "the server has no memory for delay compensation's copies of the "
                        "parameters: no push can be applied");
        return;
    }
    /* Last of the checks: a lease request sets the run's plan. */
    if (!check_lease(d, r, true))
        return;
    /* max|g|, found by the receive scan; unknown without it (exact check). */
    float g_max = r->msg->scanned ? r->msg->abs_max : INFINITY;
    /* Where the gradient is read: BSP keeps it where ZeroMQ received it, in
     * the frames it came in, until its step; SSP and ASP apply it at once,
     * from one buffer. */
    bool bsp = d->cfg->consistency.mode == ZPS_MODE_BSP;
    zps_payload_t got;
    memset(&got, 0, sizeof(got));
    if ((bsp ? zps_payload_take(&got, r->msg) : zps_message_flatten(r->msg)) != 0) {
        zps_reply_error(d, r, ZPS_ENOMEM, "out of memory");
        return;
    }
    const float *grad = zps_message_floats(r->msg);

    zps_push_decision_t dec;
    rc = zps_consistency_push(d->consistency, (uint32_t)req->worker, req->clock, req->model_version,
                              &dec, why, sizeof(why));
    if (rc) {
        zps_payload_close(&got);
        zps_reply_error(d, r, rc, "%s", why);
        return;
    }

    zps_header_t h;
    size_t where = 0;
    if (dec.action == ZPS_PUSH_APPLY || dec.action == ZPS_PUSH_BUFFER) {
        /* Clock lag: how far this push is behind the furthest one taken. */
        if (req->clock > d->furthest_clock)
            d->furthest_clock = req->clock;
        zps_vhist_add(&d->clock_lag, d->furthest_clock - req->clock);
    }
    switch (dec.action) {
    case ZPS_PUSH_APPLY: {
        int32_t dc_rank = d->dc_pulled ? req->worker : -1;
        if (in_background(d)) {
            /* Applied off the loop's thread, the message kept until then. */
            zps_step_t *s = &d->step;
            s->apply = true;
            s->g_max = g_max;
            s->lr_scale = dec.lr_scale;
            s->update_staleness = dec.update_staleness;
            s->push_reply_flags = r->reply_flags;
            s->where = 0;
            s->dc_rank = dc_rank;
            zps_message_move(&s->apply_msg, r->msg);
            queue_step(d);
            return;
        }
        rc = apply_push(d, grad, g_max, dec.lr_scale, dc_rank, &where);
        if (!applied(d, r, rc, where, dec.update_staleness, &h))
            return;
        break;
    }
    case ZPS_PUSH_BUFFER: {
        zps_slot_t *sl = &d->slots[req->worker];
        ZPS_ASSERT(!sl->full);
        zps_payload_move(&sl->grad, &got);
        sl->full = true;
        sl->batch = req->batch;
        sl->abs_max = g_max;
        sl->update_staleness = dec.update_staleness;
        d->count.buffered++;
        /* The step this push completes is taken before the reply, so that
         * its pusher hears of a refused one: its push was not used. */
        zps_reply_header(d, r, &h);
        zps_step_t *s = &d->step;
        s->refused = 0;
        if (take_steps(d)) {
            /* Running off the loop's thread: answered from step_after. */
            s->answer_push = true;
            s->push_peer = *r->peer;
            s->push_req = *req;
            s->push_req.json = NULL;
            s->push_reply = h;
            s->push_reply_flags = r->reply_flags;
            zps_payload_close(&got);
            return;
        }
        h.flags |= s->refused ? ZPS_FLAG_DROPPED : ZPS_FLAG_BUFFERED;
        break;
    }
    case ZPS_PUSH_RETRY:
        d->count.retries++;
        zps_reply_header(d, r, &h);
        h.flags |= ZPS_FLAG_RETRY;
        break;
    case ZPS_PUSH_DROP:
    default:
        d->count.dropped++;
        zps_reply_header(d, r, &h);
        h.flags |= ZPS_FLAG_DROPPED;
        break;
    }
    zps_payload_close(&got); /* a retry's or a dropped push's: not kept */
    push_done(d, r, &h, exchange);
}

/* The rest of a push once its reply h is known: sent, or the exchange's pull started. */
static void push_done(zps_daemon_t *d, zps_request_t *r, zps_header_t *h, bool exchange)
{
    const zps_header_t *req = r->hdr;
    if (!exchange) {
        zps_reply_send(d, r, h);
        zps_handlers_take_steps(d);
        zps_handlers_answer_ready(d);
        return;
    }
    /* One exchange per clock: the reply is the pull of the next clock, once
     * the rules allow it (under BSP, once the step this push belongs to is
     * taken), carrying what the push's own reply would have said. A resend
     * is a retried push and a pull that is waiting or answered again:
     * nothing changes twice. */
    d->count.exchanges++;
    d->count.pulls++;
    zps_handlers_take_steps(d);
    zps_header_t pull = *req;
    pull.type = ZPS_MSG_PULL;
    pull.clock = req->clock + 1;
    /* The parameters as the gradient came: bfloat16, shared memory. */
    pull.flags = req->flags & (ZPS_FLAG_BF16 | ZPS_FLAG_SHM | ZPS_FLAG_LEASE);
    pull.json = NULL;
    /* Every reply to it, an error of its pull too, says the push was taken. */
    uint32_t carry =
        (h->flags & (ZPS_FLAG_RETRY | ZPS_FLAG_DROPPED | ZPS_FLAG_BUFFERED)) | ZPS_FLAG_TAKEN;
    zps_request_t pr = *r;
    pr.hdr = &pull;
    pr.reply_flags |= carry;
    start_pull(d, &pr, carry, h->update_staleness);
    zps_handlers_answer_ready(d);
}

/* ---- STATS, HEARTBEAT, CHECKPOINT ---- */

void zps_handle_stats(zps_daemon_t *d, zps_request_t *r)
{
    d->count.stats++;
    char *json = zps_stats_json(d);
    if (!json) {
        zps_reply_error(d, r, ZPS_ENOMEM, "out of memory");
        return;
    }
    zps_header_t h;
    zps_reply_header(d, r, &h);
    h.json = json;
    zps_reply_send(d, r, &h);
    free(json);
}

void zps_handle_heartbeat(zps_daemon_t *d, zps_request_t *r)
{
    d->count.heartbeats++;
    if (!check_worker(d, r, true))
        return;
    if ((r->hdr->flags & ZPS_FLAG_FINISHED) && r->hdr->worker >= 0) {
        /* It has no batch left: SSP's bound and the final model no longer
         * wait for it. A lease it still held (it should hold none) goes to
         * whoever asks next. */
        uint32_t w = (uint32_t)r->hdr->worker;
        d->count.finished++;
        zps_consistency_finish(d->consistency, w);
        if (d->assign && zps_assign_held(d->assign, w) > 0)
            zps_assign_release(d->assign, w);
        zps_info("worker %u finished at clock %llu", w,
                 (unsigned long long)zps_consistency_pushed(d->consistency, w));
    }
    zps_header_t h;
    zps_reply_header(d, r, &h);
    zps_reply_send(d, r, &h);
    if (r->hdr->flags & ZPS_FLAG_FINISHED)
        zps_handlers_answer_ready(d);
}

void zps_handle_reload_keys(zps_daemon_t *d, zps_request_t *r)
{
    /* Authorized as an admin's request (auth.c) before it gets here. */
    if (!d->cfg->authorized_keys) {
        zps_reply_error(d, r, ZPS_EMODE,
                        "this server has no --authorized-keys: there is nothing to reload");
        return;
    }
    char why[512], who[96];
    snprintf(who, sizeof(who), "RELOAD_KEYS from %.8s...", r->peer->user);
    int rc = zps_auth_reload(&d->auth, who, why, sizeof(why));
    if (rc) {
        zps_reply_error(d, r, rc, "kept the authorized keys in force (%zu): %s",
                        zps_auth_key_count(&d->auth), why);
        return;
    }
    char json[64];
    snprintf(json, sizeof(json), "{\"keys\":%zu}", zps_auth_key_count(&d->auth));
    zps_header_t h;
    zps_reply_header(d, r, &h);
    h.json = json;
    zps_reply_send(d, r, &h);
}

void zps_handle_session(zps_daemon_t *d, zps_request_t *r)
{
    if (!d->seal_sock) {
        zps_reply_error(d, r, ZPS_EMODE,
                        "this server grants no sealed sessions (they need --key on a tcp:// "
                        "address, without --no-seal)");
        return;
    }
    if (r->peer->session || !r->peer->user[0]) {
        zps_reply_error(d, r, ZPS_EMODE, "a session is asked for over a CURVE connection");
        return;
    }
    /* AES-256-GCM when both ends have AES-NI; the client says whether it does. */
    bool peer_aes = false;
    zps_json_t *req = NULL;
    if (r->hdr->json && zps_json_parse(r->hdr->json, &req, NULL, 0) == 0)
        peer_aes = zps_json_true(zps_json_get(req, "aes"));
    zps_json_free(req);
    zps_session_t *x = zps_sessions_grant(&d->sessions, r->peer->fd, r->peer->user,
                                          zps_seal_cipher_choose(peer_aes));
    if (!x) {
        zps_reply_error(d, r, ZPS_ENOMEM, "out of memory");
        return;
    }
    char id[2 * ZPS_SEAL_ID_BYTES + 1], key[2 * ZPS_SEAL_KEY_BYTES + 1], json[256];
    zps_seal_hex(x->seal.id, ZPS_SEAL_ID_BYTES, id);
    zps_seal_hex(x->seal.key, ZPS_SEAL_KEY_BYTES, key);
    snprintf(json, sizeof(json),
             "{\"session\":\"%s\",\"key\":\"%s\",\"cipher\":\"%s\",\"port\":%u}", id, key,
             zps_seal_cipher_name(x->seal.cipher), (unsigned)d->seal_port_bound);
    zps_header_t h;
    zps_reply_header(d, r, &h);
    h.json = json;
    /* Over the CURVE connection it was asked on: only that client reads it. */
    zps_reply_send(d, r, &h);
    sodium_memzero(key, sizeof(key));
    sodium_memzero(json, sizeof(json));
}

void zps_handle_shm(zps_daemon_t *d, zps_request_t *r)
{
    const zps_header_t *req = r->hdr;
    if (d->cfg->no_shm) {
        zps_reply_error(d, r, ZPS_EMODE, "this server grants no shared-memory sessions (--no-shm)");
        return;
    }
    if (!check_worker(d, r, false)) /* a worker's rank: no observer */
        return;
    if (r->peer->session || r->peer->fd < 0) {
        zps_reply_error(d, r, ZPS_EMODE,
                        "a shared-memory session is asked for over the worker's own connection");
        return;
    }
    if (!zps_consistency_initialized(d->consistency) || d->store.len == 0) {
        zps_reply_expected(d, r, ZPS_ENOTINIT, "no shared memory before the model is initialised");
        return;
    }
    char why[ZPS_ERROR_TEXT_MAX];
    if (!zps_shm_ready(&d->shm)) {
        int rc = zps_shm_create(&d->shm, d->store.len, d->cfg->consistency.workers,
                                d->cfg->shard_index, why, sizeof(why));
        if (rc) {
            zps_reply_error(d, r, rc, "%s", why);
            return;
        }
        zps_info("shared memory %s for workers on this host (%llu bytes)", d->shm.name,
                 (unsigned long long)zps_shm_bytes(&d->shm));
        zps_daemon_model_known(d); /* the memory bound now counts the segment */
    }
    if (!zps_shm_grant(&d->shm, r->peer->fd, (uint32_t)req->worker, why, sizeof(why))) {
        zps_reply_error(d, r, ZPS_EBUSY, "%s", why);
        return;
    }
    char token[2 * ZPS_SHM_TOKEN_BYTES + 1], json[256];
    zps_seal_hex(d->shm.layout.token, ZPS_SHM_TOKEN_BYTES, token);
    snprintf(json, sizeof(json), "{\"name\":\"%s\",\"token\":\"%s\"}", d->shm.name, token);
    zps_header_t h;
    zps_reply_header(d, r, &h);
    h.json = json;
    zps_reply_send(d, r, &h);
}

void zps_handle_checkpoint(zps_daemon_t *d, zps_request_t *r)
{
    if (!check_worker(d, r, true) || !check_shard(d, r))
        return;
    int rc = zps_ckpt_queue_take(d, r);
    if (rc == ZPS_EMODE)
        zps_reply_error(d, r, rc, "this server has no --checkpoint-dir");
    else if (rc == ZPS_ENOTINIT)
        zps_reply_error(d, r, rc, "nothing to save: the model is not initialised");
    else if (rc)
        zps_reply_error(d, r, rc, "cannot take a checkpoint now: %s", zps_strerror(rc));
    /* On success the reply comes when the file is on disk. */
}
