/*
 * consistency.c - the consistency rules; see consistency.h for the contract.
 *
 * The waiting pulls are a small array kept in arrival order: at most
 * max_pending per worker plus as many for observers, so a linear scan after
 * each event costs less than the message that caused it.
 *
 * Not here: anything that touches parameters, sockets, files or the clock.
 */
#include "consistency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define NO_CLOCK UINT64_MAX

typedef struct waiting_pull {
    int32_t worker;
    uint64_t clock;
    uint64_t request_id;
    uint64_t token;
    bool observe; /* an observer waiting for the model of `clock` (zps_consistency_observe) */
    bool by_pushes; /* ... counted in pushes (zps_consistency_observe_pushes) */
} waiting_pull_t;

struct zps_consistency {
    zps_consistency_config_t cfg;
    bool initialized;
    uint64_t version;

    uint64_t *pushed;     /* [W] next expected clock */
    bool *live;           /* [W] */
    bool *finished;       /* [W] the worker said it has no batch left (zps_consistency_finish) */
    uint64_t *dropped;    /* [W] late pushes dropped (BSP with backups or eviction) */
    uint64_t *discarded;  /* [W] BSP: buffered pushes of steps refused (not finite) */
    uint64_t *slot_clock; /* [W] BSP: clock of the buffered push, NO_CLOCK if none */
    uint32_t filled;      /* BSP: slots holding the current clock (= version) */
    bool step_taken;      /* BSP: zps_consistency_step_due handed out the current step */

    waiting_pull_t *waiting; /* [cap] arrival order */
    size_t nwaiting;
    size_t cap;
    uint32_t *waiting_per; /* [W + 1] count per worker; the last entry is the observers' */
};

static const char *const mode_names[] = {"bsp", "ssp", "asp"};

int zps_mode_parse(const char *name, zps_mode_t *out)
{
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, mode_names[i]) == 0) {
            *out = (zps_mode_t)i;
            return 0;
        }
    }
    return ZPS_EINVAL;
}

const char *zps_mode_name(zps_mode_t mode)
{
    return (unsigned)mode < 3 ? mode_names[mode] : "?";
}

int zps_consistency_check_config(const zps_consistency_config_t *cfg, char *why, size_t why_size)
{
    const char *bad = NULL;
    if (cfg->workers < 1 || cfg->workers > 65536)
        bad = "--workers must be between 1 and 65536";
    else if ((unsigned)cfg->mode > ZPS_MODE_ASP)
        bad = "unknown mode";
    else if (cfg->backup >= cfg->workers)
        bad = "--backup-workers must be less than --workers";
    else if (cfg->backup > 0 && cfg->mode != ZPS_MODE_BSP)
        bad = "--backup-workers applies to --mode bsp only";
    else if (cfg->max_pending < 1)
        bad = "the pull queue needs room for at least one pull per worker";
    if (bad) {
        if (why)
            snprintf(why, why_size, "%s", bad);
        return ZPS_EINVAL;
    }
    return 0;
}

int zps_consistency_new(const zps_consistency_config_t *cfg, zps_consistency_t **out, char *why,
                        size_t why_size)
{
    int rc = zps_consistency_check_config(cfg, why, why_size);
    if (rc)
        return rc;

    zps_consistency_t *st = calloc(1, sizeof(*st));
    if (!st)
        return ZPS_ENOMEM;
    size_t w = cfg->workers;
    st->cfg = *cfg;
    st->pushed = calloc(w, sizeof(uint64_t));
    st->live = calloc(w, sizeof(bool));
    st->finished = calloc(w, sizeof(bool));
    st->dropped = calloc(w, sizeof(uint64_t));
    st->discarded = calloc(w, sizeof(uint64_t));
    st->slot_clock = calloc(w, sizeof(uint64_t));
    st->cap = (w + 1) * cfg->max_pending;
    st->waiting = calloc(st->cap, sizeof(waiting_pull_t));
    st->waiting_per = calloc(w + 1, sizeof(uint32_t));
    if (!st->pushed || !st->live || !st->finished || !st->dropped || !st->discarded ||
        !st->slot_clock || !st->waiting || !st->waiting_per) {
        zps_consistency_free(st);
        return ZPS_ENOMEM;
    }
    for (size_t i = 0; i < w; i++) {
        st->live[i] = true;
        st->slot_clock[i] = NO_CLOCK;
    }
    *out = st;
    return 0;
}

void zps_consistency_free(zps_consistency_t *st)
{
    if (!st)
        return;
    free(st->pushed);
    free(st->live);
    free(st->finished);
    free(st->dropped);
    free(st->discarded);
    free(st->slot_clock);
    free(st->waiting);
    free(st->waiting_per);
    free(st);
}

void zps_consistency_set_initialized(zps_consistency_t *st)
{
    st->initialized = true;
}

bool zps_consistency_initialized(const zps_consistency_t *st)
{
    return st->initialized;
}

int zps_consistency_check_worker(const zps_consistency_t *st, int64_t w, bool observer_ok,
                                 char *why, size_t why_size)
{
    if ((w >= 0 && w < (int64_t)st->cfg.workers) || (observer_ok && w == -1))
        return 0;
    zps_set_reason(why, why_size, "worker %lld is not in [0, %u)%s", (long long)w, st->cfg.workers,
                   observer_ok ? " (or -1 for an observer)" : "");
    return ZPS_EWORKER;
}

int zps_consistency_check_push(const zps_consistency_t *st, uint64_t t, char *why, size_t why_size)
{
    if (st->initialized)
        return 0;
    zps_set_reason(why, why_size, "push at clock %llu before the model was initialised",
                   (unsigned long long)t);
    return ZPS_ENOTINIT;
}

/* The factor of the learning rate for a push applied with update staleness u. */
static double lr_scale(zps_lr_scaling_t rule, uint64_t u)
{
    return rule == ZPS_LR_SCALING_INVERSE ? 1.0 / (1.0 + (double)u) : 1.0;
}

/* Updates between version `based_on` and version v (0 if based_on is not older). */
static uint64_t update_staleness(uint64_t v, uint64_t based_on)
{
    return v > based_on ? v - based_on : 0;
}

uint64_t zps_consistency_min_clock(const zps_consistency_t *st)
{
    uint64_t m = NO_CLOCK;
    uint64_t any = 0;
    for (uint32_t w = 0; w < st->cfg.workers; w++) {
        if (st->live[w] && !st->finished[w] && st->pushed[w] < m)
            m = st->pushed[w];
        if (st->pushed[w] > any)
            any = st->pushed[w];
    }
    /* With every worker evicted or finished nobody holds the others back. */
    return m == NO_CLOCK ? any : m;
}

static uint32_t live_count(const zps_consistency_t *st)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < st->cfg.workers; w++)
        n += st->live[w];
    return n;
}

/* BSP: pushes needed for a step: W-B of the workers, never more than are live. */
static uint32_t step_quorum(const zps_consistency_t *st)
{
    uint32_t need = st->cfg.workers - st->cfg.backup;
    uint32_t live = live_count(st);
    if (live < need)
        need = live;
    return need ? need : 1;
}

int zps_consistency_push(zps_consistency_t *st, uint32_t w, uint64_t t, uint64_t based_on,
                         zps_push_decision_t *out, char *why, size_t why_size)
{
    int rc = zps_consistency_check_worker(st, w, false, why, why_size);
    if (rc == 0)
        rc = zps_consistency_check_push(st, t, why, why_size);
    if (rc)
        return rc;
    if (t < st->pushed[w]) {
        *out = (zps_push_decision_t){ZPS_PUSH_RETRY, 0, 1.0};
        return 0;
    }
    if (t > st->pushed[w]) {
        zps_set_reason(why, why_size,
                       "push at clock %llu skips ahead: the next clock expected is %llu",
                       (unsigned long long)t, (unsigned long long)st->pushed[w]);
        return ZPS_ECLOCK;
    }

    if (st->cfg.mode != ZPS_MODE_BSP) {
        uint64_t u = update_staleness(st->version, based_on);
        *out = (zps_push_decision_t){ZPS_PUSH_APPLY, u, lr_scale(st->cfg.lr_scaling, u)};
        st->pushed[w] = t + 1;
        st->finished[w] = false; /* it was handed more batches */
        st->version++;
        return 0;
    }

    /* BSP: the step being collected is the one for clock v. */
    if (t > st->version) {
        zps_set_reason(why, why_size,
                       "push at clock %llu before the model for that clock exists (version %llu)",
                       (unsigned long long)t, (unsigned long long)st->version);
        return ZPS_ECLOCK;
    }
    st->pushed[w] = t + 1;
    if (t < st->version || st->step_taken) {
        st->dropped[w]++;
        *out = (zps_push_decision_t){ZPS_PUSH_DROP, 0, 1.0};
        return 0;
    }
    /* A buffered push is applied by the step from version t (= v now) to
     * t + 1, so its update staleness is known already. */
    st->slot_clock[w] = t;
    st->filled++;
    *out = (zps_push_decision_t){ZPS_PUSH_BUFFER, update_staleness(st->version, based_on), 1.0};
    return 0;
}

/*
 * BSP: whether the step for clock v may be taken. Only live workers are
 * waited for: it is due once the live workers' pushes of clock v reach the
 * quorum. A push buffered by a worker evicted since is kept (it was
 * acknowledged as buffered) and joins the step, but is not counted towards
 * the quorum, so it cannot stand in for a live worker that has not pushed
 * yet. With no live worker left, any buffered push makes the step due.
 */
static bool step_ready(const zps_consistency_t *st)
{
    if (st->cfg.mode != ZPS_MODE_BSP || st->step_taken || st->filled == 0)
        return false;
    uint32_t live = live_count(st), live_filled = 0;
    if (live == 0)
        return true;
    for (uint32_t w = 0; w < st->cfg.workers; w++)
        live_filled += st->live[w] && st->slot_clock[w] == st->version;
    return live_filled >= step_quorum(st);
}

bool zps_consistency_step_due(zps_consistency_t *st, uint64_t *clock, uint32_t *ranks,
                              uint32_t *count)
{
    if (!step_ready(st))
        return false;
    uint32_t n = 0;
    for (uint32_t w = 0; w < st->cfg.workers; w++)
        if (st->slot_clock[w] == st->version)
            ranks[n++] = w;
    ZPS_ASSERT(n == st->filled);
    *clock = st->version;
    *count = n;
    st->step_taken = true;
    return true;
}

/* Ends the step in progress: its slots are empty and the clock moves on. */
static void step_end(zps_consistency_t *st, bool refused)
{
    ZPS_ASSERT(st->step_taken);
    for (uint32_t w = 0; w < st->cfg.workers; w++) {
        if (st->slot_clock[w] == st->version) {
            st->slot_clock[w] = NO_CLOCK;
            st->discarded[w] += refused;
        }
    }
    st->filled = 0;
    st->step_taken = false;
    st->version++;
}

void zps_consistency_step_done(zps_consistency_t *st)
{
    step_end(st, false);
}

void zps_consistency_step_refused(zps_consistency_t *st)
{
    step_end(st, true);
}

void zps_consistency_push_refused(zps_consistency_t *st, uint32_t w, uint64_t t)
{
    ZPS_ASSERT(st->cfg.mode != ZPS_MODE_BSP && w < st->cfg.workers);
    ZPS_ASSERT(st->pushed[w] == t + 1 && st->version > 0);
    st->pushed[w] = t;
    st->version--;
}

static bool pull_ready(const zps_consistency_t *st, int32_t w, uint64_t t)
{
    if (!st->initialized)
        return false;
    if (w < 0)
        return true;
    switch (st->cfg.mode) {
    case ZPS_MODE_BSP:
        return st->version >= t;
    case ZPS_MODE_SSP: {
        uint64_t bound = st->cfg.ssp_bound;
        return t <= bound || zps_consistency_min_clock(st) >= t - bound;
    }
    case ZPS_MODE_ASP:
        return true;
    }
    return false;
}

/* The model of clock t exists: every update of every clock before t is in. */
static bool model_of_clock_ready(const zps_consistency_t *st, uint64_t t)
{
    if (!st->initialized)
        return false;
    if (st->cfg.mode == ZPS_MODE_BSP)
        return st->version >= t;
    return zps_consistency_min_clock(st) >= t;
}

/* Every worker has finished or been evicted: the model is final. */
static bool all_done(const zps_consistency_t *st)
{
    for (uint32_t w = 0; w < st->cfg.workers; w++)
        if (st->live[w] && !st->finished[w])
            return false;
    return true;
}

/* The model once t * W pushes are in, or the final one (zps_consistency_observe_pushes). */
static bool model_of_pushes_ready(const zps_consistency_t *st, uint64_t t)
{
    if (!st->initialized)
        return false;
    if (st->cfg.mode == ZPS_MODE_BSP)
        return st->version >= t;
    uint64_t W = st->cfg.workers;
    return (t <= UINT64_MAX / W && st->version >= t * W) || all_done(st);
}

static bool waiting_ready(const zps_consistency_t *st, const waiting_pull_t *p)
{
    if (p->observe)
        return p->by_pushes ? model_of_pushes_ready(st, p->clock)
                            : model_of_clock_ready(st, p->clock);
    return pull_ready(st, p->worker, p->clock);
}

static uint32_t pool_of(const zps_consistency_t *st, int32_t w)
{
    return w < 0 ? st->cfg.workers : (uint32_t)w;
}

/* Parks pull (w, t) unless it is a duplicate or its pool is full. */
static int park(zps_consistency_t *st, int32_t w, bool observe, bool by_pushes, uint64_t t,
                uint64_t request_id, uint64_t token, zps_pull_result_t *out, uint64_t *existing,
                char *why, size_t why_size)
{
    for (size_t i = 0; i < st->nwaiting; i++) {
        const waiting_pull_t *p = &st->waiting[i];
        if (p->worker == w && p->observe == observe && p->by_pushes == by_pushes &&
            p->request_id == request_id && p->clock == t) {
            *existing = p->token;
            *out = ZPS_PULL_DUPLICATE;
            return 0;
        }
    }
    uint32_t pool = pool_of(st, w);
    if (st->waiting_per[pool] >= st->cfg.max_pending) {
        zps_set_reason(why, why_size, "%u pulls of this worker are already waiting (the limit)",
                       st->waiting_per[pool]);
        return ZPS_EBUSY;
    }
    ZPS_ASSERT(st->nwaiting < st->cap);
    st->waiting[st->nwaiting++] = (waiting_pull_t){w, t, request_id, token, observe, by_pushes};
    st->waiting_per[pool]++;
    *out = ZPS_PULL_QUEUED;
    return 0;
}

int zps_consistency_pull(zps_consistency_t *st, int32_t w, uint64_t t, uint64_t request_id,
                         uint64_t token, zps_pull_result_t *out, uint64_t *existing, char *why,
                         size_t why_size)
{
    int rc = zps_consistency_check_worker(st, w, true, why, why_size);
    if (rc)
        return rc;
    if (w >= 0 && t > st->pushed[w]) {
        zps_set_reason(why, why_size,
                       "pull for clock %llu skips ahead: this worker's next push is for clock %llu",
                       (unsigned long long)t, (unsigned long long)st->pushed[w]);
        return ZPS_ECLOCK;
    }
    if (pull_ready(st, w, t)) {
        *out = ZPS_PULL_READY;
        return 0;
    }
    return park(st, w, false, false, t, request_id, token, out, existing, why, why_size);
}

int zps_consistency_observe(zps_consistency_t *st, uint64_t t, uint64_t request_id, uint64_t token,
                            zps_pull_result_t *out, uint64_t *existing, char *why, size_t why_size)
{
    if (model_of_clock_ready(st, t)) {
        *out = ZPS_PULL_READY;
        return 0;
    }
    return park(st, -1, true, false, t, request_id, token, out, existing, why, why_size);
}

int zps_consistency_observe_pushes(zps_consistency_t *st, uint64_t t, uint64_t request_id,
                                   uint64_t token, zps_pull_result_t *out, uint64_t *existing,
                                   char *why, size_t why_size)
{
    if (model_of_pushes_ready(st, t)) {
        *out = ZPS_PULL_READY;
        return 0;
    }
    return park(st, -1, true, true, t, request_id, token, out, existing, why, why_size);
}

void zps_consistency_finish(zps_consistency_t *st, uint32_t w)
{
    if (w < st->cfg.workers)
        st->finished[w] = true;
}

bool zps_consistency_finished(const zps_consistency_t *st, uint32_t w)
{
    return w < st->cfg.workers && st->finished[w];
}

/* Which waiting pulls take_where removes. */
typedef struct take_rule {
    bool all;                                 /* every one */
    bool (*match)(uint64_t token, void *arg); /* or those it matches; else the ready ones */
    void *arg;
} take_rule_t;

/* Removes the waiting pulls the rule picks, oldest first; writes their tokens. */
static size_t take_where(zps_consistency_t *st, const take_rule_t *rule, uint64_t *tokens,
                         size_t max)
{
    size_t n = 0, kept = 0;
    for (size_t i = 0; i < st->nwaiting; i++) {
        waiting_pull_t p = st->waiting[i];
        bool pick = rule->all     ? true
                    : rule->match ? rule->match(p.token, rule->arg)
                                  : waiting_ready(st, &p);
        if (n < max && pick) {
            tokens[n++] = p.token;
            st->waiting_per[pool_of(st, p.worker)]--;
        } else {
            st->waiting[kept++] = p;
        }
    }
    st->nwaiting = kept;
    return n;
}

size_t zps_consistency_take_ready(zps_consistency_t *st, uint64_t *tokens, size_t max)
{
    take_rule_t rule = {false, NULL, NULL};
    return take_where(st, &rule, tokens, max);
}

size_t zps_consistency_take_all(zps_consistency_t *st, uint64_t *tokens, size_t max)
{
    take_rule_t rule = {true, NULL, NULL};
    return take_where(st, &rule, tokens, max);
}

size_t zps_consistency_take_if(zps_consistency_t *st, bool (*match)(uint64_t token, void *arg),
                               void *arg, uint64_t *tokens, size_t max)
{
    take_rule_t rule = {false, match, arg};
    return take_where(st, &rule, tokens, max);
}

void zps_consistency_evict(zps_consistency_t *st, uint32_t w)
{
    if (w < st->cfg.workers)
        st->live[w] = false;
}

uint64_t zps_consistency_rejoin(zps_consistency_t *st, uint32_t w)
{
    if (w >= st->cfg.workers)
        return 0;
    uint64_t at = st->cfg.mode == ZPS_MODE_BSP ? st->version : zps_consistency_min_clock(st);
    st->live[w] = true;
    if (st->pushed[w] < at)
        st->pushed[w] = at;
    return st->pushed[w];
}

uint64_t zps_consistency_version(const zps_consistency_t *st)
{
    return st->version;
}

uint64_t zps_consistency_pushed(const zps_consistency_t *st, uint32_t w)
{
    return w < st->cfg.workers ? st->pushed[w] : 0;
}

bool zps_consistency_live(const zps_consistency_t *st, uint32_t w)
{
    return w < st->cfg.workers && st->live[w];
}

uint64_t zps_consistency_dropped(const zps_consistency_t *st, uint32_t w)
{
    return w < st->cfg.workers ? st->dropped[w] : 0;
}

uint64_t zps_consistency_discarded(const zps_consistency_t *st, uint32_t w)
{
    return w < st->cfg.workers ? st->discarded[w] : 0;
}

size_t zps_consistency_pending(const zps_consistency_t *st)
{
    return st->nwaiting;
}

uint64_t zps_consistency_snapshot(const zps_consistency_t *st, uint64_t *pushed, bool *live,
                                  uint64_t *dropped)
{
    for (uint32_t w = 0; w < st->cfg.workers; w++) {
        uint64_t p = st->pushed[w];
        pushed[w] = st->cfg.mode == ZPS_MODE_BSP && p > st->version ? st->version : p;
        live[w] = st->live[w];
        dropped[w] = st->dropped[w];
    }
    return st->version;
}

void zps_consistency_restore(zps_consistency_t *st, uint64_t version, const uint64_t *pushed,
                             const bool *live, const uint64_t *dropped)
{
    st->initialized = true;
    st->version = version;
    st->filled = 0;
    st->step_taken = false;
    for (uint32_t w = 0; w < st->cfg.workers; w++) {
        st->pushed[w] = pushed[w];
        st->live[w] = live[w];
        st->dropped[w] = dropped[w];
        st->slot_clock[w] = NO_CLOCK;
        st->finished[w] = false;
    }
}
