/*
 * ckpt_queue.c - checkpoint jobs on the threadpool; see ckpt_queue.h.
 */
#include "ckpt_queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "checkpoint.h"
#include "daemon.h"
#include "error.h"
#include "log.h"
#include "strbuf.h"
#include "timeutil.h"

/*
 * One checkpoint: a copy of the shard's state taken on the loop, written by
 * a threadpool thread, reported back on the loop.
 */
typedef struct zps_ckpt_job {
    uv_work_t work;
    zps_daemon_t *d;
    zps_ckpt_t snap; /* arrays are this job's copies */
    int rc;
    char path[4096];
    char why[512];
    bool has_requester; /* a CHECKPOINT request waits for the outcome */
    zps_peer_t peer;
    zps_header_t req;
    uint64_t started_ns; /* when its write began */
    struct zps_ckpt_job *next;
} zps_ckpt_job_t;

static void job_free(zps_ckpt_job_t *j)
{
    if (!j)
        return;
    free(j->snap.params);
    for (uint32_t i = 0; i < j->snap.nstate; i++)
        free(j->snap.state[i]);
    free(j->snap.pushed);
    free(j->snap.live);
    free(j->snap.dropped);
    zps_assign_state_fini(&j->snap.assign);
    free(j->snap.finished);
    free(j);
}

static float *copy_floats(const float *src, size_t n)
{
    float *c = malloc(n ? n * sizeof(float) : 1);
    if (c && n)
        memcpy(c, src, n * sizeof(float));
    return c;
}

/* Copies the shard's state into a new job. NULL when out of memory. */
static zps_ckpt_job_t *snapshot(zps_daemon_t *d)
{
    zps_ckpt_job_t *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->d = d;
    zps_ckpt_t *c = &j->snap;
    zps_ckpt_init(c);
    const zps_consistency_config_t *cc = &d->cfg->consistency;
    c->shard_index = d->cfg->shard_index;
    c->shard_count = d->cfg->shard_count;
    c->total = d->store.total;
    c->range = d->store.range;
    c->opt = *zps_optimizer_config(d->store.opt);
    c->opt_steps = zps_optimizer_steps(d->store.opt);
    c->mode = cc->mode;
    c->workers = cc->workers;
    c->ssp_bound = cc->ssp_bound;
    c->backup = cc->backup;
    c->pushed = calloc(cc->workers, sizeof(uint64_t));
    c->live = calloc(cc->workers, sizeof(bool));
    c->dropped = calloc(cc->workers, sizeof(uint64_t));
    c->params = copy_floats(d->store.params, d->store.len);
    bool ok = c->pushed && c->live && c->dropped && c->params;
    if (ok)
        c->version = zps_consistency_snapshot(d->consistency, c->pushed, c->live, c->dropped);
    /* Shard 0's shared data assignment, at the same moment as the
     * parameters: the batches these hold are those it counts complete. */
    if (ok && d->assign && zps_assign_has_plan(d->assign)) {
        c->have_assign = true;
        c->finished = calloc(cc->workers, sizeof(bool));
        ok = c->finished && zps_assign_snapshot(d->assign, &c->assign) == 0;
        for (uint32_t w = 0; ok && w < cc->workers; w++)
            c->finished[w] = zps_consistency_finished(d->consistency, w);
    }
    c->nstate = (uint32_t)zps_optimizer_state_count(d->store.opt);
    for (uint32_t i = 0; ok && i < c->nstate; i++) {
        const char *name;
        float *st = zps_optimizer_state(d->store.opt, i, &name);
        snprintf(c->state_names[i], sizeof(c->state_names[i]), "%s", name);
        c->state[i] = copy_floats(st, d->store.len);
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
    zps_ckpt_job_t *j = w->data;
    const zps_server_config_t *cfg = j->d->cfg;
    j->rc = zps_ckpt_write(cfg->checkpoint_dir, &j->snap, j->path, sizeof(j->path), j->why,
                           sizeof(j->why));
    if (j->rc == 0)
        zps_ckpt_prune(cfg->checkpoint_dir, cfg->shard_index, cfg->shard_count,
                       cfg->checkpoint_keep);
}

/* Logs and counts the outcome, and answers the request that asked for it. */
static void report(zps_daemon_t *d, zps_ckpt_job_t *j)
{
    zps_ckpt_queue_t *q = &d->ckpts;
    q->last_rc = j->rc;
    if (j->rc == 0) {
        d->count.checkpoints++;
        /* Only a file on disk counts as saved; a failed write leaves the
         * newest saved version where it was. */
        if (!q->saved || j->snap.version >= q->saved_version) {
            q->saved = true;
            q->saved_version = j->snap.version;
        }
        snprintf(d->ckpts.last_path, sizeof(d->ckpts.last_path), "%s", j->path);
        q->written_ns = zps_now_ns();
        q->write_ns = q->written_ns - j->started_ns;
        zps_info("checkpoint of version %llu written to %s", (unsigned long long)j->snap.version,
                 j->path);
    } else {
        d->count.checkpoint_failures++;
        zps_error("checkpoint of version %llu failed: %s", (unsigned long long)j->snap.version,
                  j->why);
    }
    if (!j->has_requester)
        return;
    zps_request_t r = zps_request_later(&j->peer, &j->req);
    if (j->rc) {
        zps_reply_error(d, &r, j->rc, "checkpoint failed: %s", j->why);
        return;
    }
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "{\"version\":%llu,\"path\":", (unsigned long long)j->snap.version);
    zps_strbuf_json_string(&b, j->path);
    zps_strbuf_printf(&b, "}");
    char *json = zps_strbuf_take(&b);
    zps_header_t h;
    zps_reply_header(d, &r, &h);
    h.model_version = j->snap.version;
    h.json = json;
    zps_reply_send(d, &r, &h);
    free(json);
}

static void start_next(zps_daemon_t *d);
static void exit_continue(zps_daemon_t *d);

/* Back on the loop once the threadpool is done with job w. */
static void ckpt_after(uv_work_t *w, int status)
{
    zps_ckpt_job_t *j = w->data;
    zps_daemon_t *d = j->d;
    if (status != 0 && j->rc == 0) {
        j->rc = ZPS_EIO;
        snprintf(j->why, sizeof(j->why), "threadpool: %s", uv_strerror(status));
    }
    d->ckpts.running = NULL;
    report(d, j);
    job_free(j);
    start_next(d);
    exit_continue(d);
    /* Replies were sent outside a drain. */
    zps_daemon_drain(d);
}

static void start_next(zps_daemon_t *d)
{
    zps_ckpt_queue_t *q = &d->ckpts;
    if (q->running || !q->waiting)
        return;
    zps_ckpt_job_t *j = q->waiting;
    q->waiting = j->next;
    q->nwaiting--;
    q->running = j;
    j->work.data = j;
    j->started_ns = zps_now_ns();
    int rc = uv_queue_work(&d->loop, &j->work, ckpt_work, ckpt_after);
    if (rc != 0) {
        j->rc = ZPS_EIO;
        snprintf(j->why, sizeof(j->why), "threadpool: %s", uv_strerror(rc));
        q->running = NULL;
        report(d, j);
        job_free(j);
    }
}

int zps_ckpt_queue_take(zps_daemon_t *d, const zps_request_t *r)
{
    zps_ckpt_queue_t *q = &d->ckpts;
    if (!d->cfg->checkpoint_dir)
        return ZPS_EMODE;
    if (!zps_consistency_initialized(d->consistency))
        return ZPS_ENOTINIT;
    /* Writes slower than the checkpoints come must not pile up copies. */
    if (q->nwaiting >= 2)
        return ZPS_EBUSY;
    zps_ckpt_job_t *j = snapshot(d);
    if (!j)
        return ZPS_ENOMEM;
    if (r) {
        j->has_requester = true;
        j->peer = *r->peer;
        j->req = *r->hdr;
        j->req.json = NULL;
    }
    zps_ckpt_job_t **tail = &q->waiting;
    while (*tail)
        tail = &(*tail)->next;
    *tail = j;
    q->nwaiting++;
    q->taken = true;
    q->version = j->snap.version;
    start_next(d);
    return 0;
}

void zps_ckpt_queue_maybe(zps_daemon_t *d)
{
    uint64_t v = zps_consistency_version(d->consistency);
    uint64_t every = d->cfg->checkpoint_every;
    if (!every || v % every != 0 || (d->ckpts.taken && d->ckpts.version == v))
        return;
    int rc = zps_ckpt_queue_take(d, NULL);
    if (rc)
        zps_error("no checkpoint of version %llu: %s", (unsigned long long)v, zps_strerror(rc));
}

/* SIGTERM's checkpoint was not written, and will not be: says so, once. */
static void exit_give_up(zps_daemon_t *d, uint64_t v)
{
    zps_ckpt_queue_t *q = &d->ckpts;
    q->exit_given_up = true;
    if (q->saved)
        zps_error("the shard's state at version %llu is NOT saved: %u shutdown checkpoint "
                  "attempt%s failed; the newest checkpoint on disk is version %llu (%s)",
                  (unsigned long long)v, q->exit_attempts, q->exit_attempts == 1 ? "" : "s",
                  (unsigned long long)q->saved_version, q->last_path);
    else
        zps_error("the shard's state at version %llu is NOT saved: %u shutdown checkpoint "
                  "attempt%s failed, and no checkpoint of it is on disk",
                  (unsigned long long)v, q->exit_attempts, q->exit_attempts == 1 ? "" : "s");
}

/*
 * Once no checkpoint is in flight after SIGTERM: done when the current
 * version is saved, else the next attempt, or giving up. The state does not
 * change any more (the shard stopped taking requests), so a write that
 * failed because the state itself is invalid is not retried.
 */
static void exit_continue(zps_daemon_t *d)
{
    zps_ckpt_queue_t *q = &d->ckpts;
    while (q->at_exit && !q->exit_given_up && !q->running && !q->waiting) {
        uint64_t v = zps_consistency_version(d->consistency);
        if (q->saved && q->saved_version == v)
            return;
        if (q->exit_attempts >= ZPS_CKPT_EXIT_ATTEMPTS ||
            (q->exit_attempts > 0 && q->last_rc == ZPS_EINVAL)) {
            exit_give_up(d, v);
            return;
        }
        q->exit_attempts++;
        if (q->exit_attempts > 1)
            zps_warn("retrying the shutdown checkpoint of version %llu (attempt %u of %d)",
                     (unsigned long long)v, q->exit_attempts, ZPS_CKPT_EXIT_ATTEMPTS);
        int rc = zps_ckpt_queue_take(d, NULL);
        if (rc) {
            q->last_rc = rc;
            zps_error("no checkpoint at shutdown: %s", zps_strerror(rc));
        }
    }
}

void zps_ckpt_queue_at_exit(zps_daemon_t *d)
{
    if (!d->cfg->checkpoint_dir || !zps_consistency_initialized(d->consistency))
        return;
    d->ckpts.at_exit = true;
    exit_continue(d);
}

bool zps_ckpt_queue_unsaved(const zps_daemon_t *d)
{
    const zps_ckpt_queue_t *q = &d->ckpts;
    return q->at_exit && !(q->saved && q->saved_version == zps_consistency_version(d->consistency));
}

void zps_ckpt_queue_fini(zps_ckpt_queue_t *q)
{
    while (q->waiting) {
        zps_ckpt_job_t *j = q->waiting;
        q->waiting = j->next;
        job_free(j);
    }
    q->nwaiting = 0;
}
