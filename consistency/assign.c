/*
 * assign.c - shared data assignment; see assign.h for the rules.
 *
 * The leases given back wait in a ring of W * ZPS_ASSIGN_MAX_HELD entries:
 * batches are handed out from the cursor only while the ring is empty, and
 * only leases already held go into it, so leases held plus leases queued
 * never exceed W * ZPS_ASSIGN_MAX_HELD and the ring cannot overflow.
 */
#include "assign.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

struct zps_assign {
    uint32_t workers;
    bool planned;
    zps_assign_plan_t plan;
    uint64_t per_epoch; /* B */
    uint64_t total;     /* E * B */
    uint64_t next;      /* the cursor: batches [next, total) were never handed out */

    uint64_t *held;  /* [W][MAX_HELD], oldest first */
    uint32_t *nheld; /* [W] */

    uint64_t *queue; /* ring of leases given back, [W * MAX_HELD] */
    size_t qhead, qlen, qcap;

    uint8_t *done;            /* [total / 8] one bit per batch: completed */
    uint64_t completed;       /* batches completed */
    uint64_t *epoch_examples; /* [E] */
    uint64_t *epoch_batches;  /* [E] */
};

/* Worker w's row of leases. */
static uint64_t *held_of(const zps_assign_t *a, uint32_t w)
{
    return a->held + (size_t)w * ZPS_ASSIGN_MAX_HELD;
}

static bool bit(const uint8_t *bits, uint64_t g)
{
    return bits[g / 8] >> (g % 8) & 1u;
}

static void set_bit(uint8_t *bits, uint64_t g)
{
    bits[g / 8] |= (uint8_t)(1u << (g % 8));
}

/* Nothing is left to hand out to anyone: every batch is leased or complete. */
static bool exhausted_now(const zps_assign_t *a)
{
    return a->planned && a->qlen == 0 && a->next == a->total;
}

/* Counts completed batch g (its bit already set) in the audit. */
static void count_complete(zps_assign_t *a, uint64_t g)
{
    uint64_t e = g / a->per_epoch;
    a->completed++;
    a->epoch_examples[e] += zps_assign_batch_size(a, g);
    a->epoch_batches[e]++;
}

int zps_assign_new(uint32_t workers, zps_assign_t **out)
{
    if (workers == 0)
        return ZPS_EINVAL;
    zps_assign_t *a = calloc(1, sizeof(*a));
    if (!a)
        return ZPS_ENOMEM;
    a->workers = workers;
    a->qcap = (size_t)workers * ZPS_ASSIGN_MAX_HELD;
    a->held = calloc(a->qcap, sizeof(uint64_t));
    a->nheld = calloc(workers, sizeof(uint32_t));
    a->queue = calloc(a->qcap, sizeof(uint64_t));
    if (!a->held || !a->nheld || !a->queue) {
        zps_assign_free(a);
        return ZPS_ENOMEM;
    }
    *out = a;
    return 0;
}

void zps_assign_free(zps_assign_t *a)
{
    if (!a)
        return;
    free(a->held);
    free(a->nheld);
    free(a->queue);
    free(a->done);
    free(a->epoch_examples);
    free(a->epoch_batches);
    free(a);
}

int zps_assign_set_plan(zps_assign_t *a, const zps_assign_plan_t *p, char *why, size_t why_size)
{
    if (a->planned) {
        if (p->examples == a->plan.examples && p->batch == a->plan.batch &&
            p->epochs == a->plan.epochs)
            return 0;
        zps_set_reason(
            why, why_size,
            "this worker's data plan is %" PRIu64 " examples in batches of %" PRIu32 " for %" PRIu32
            " epochs; the run's is %" PRIu64 ", %" PRIu32 " and %" PRIu32,
            p->examples, p->batch, p->epochs, a->plan.examples, a->plan.batch, a->plan.epochs);
        return ZPS_ECONFIG;
    }
    if (p->examples == 0 || p->batch == 0 || p->epochs == 0) {
        zps_set_reason(why, why_size, "a data plan needs examples, a batch and epochs (all >= 1)");
        return ZPS_EINVAL;
    }
    uint64_t per_epoch = (p->examples - 1) / p->batch + 1;
    if (per_epoch > ZPS_ASSIGN_MAX_BATCHES / p->epochs) {
        zps_set_reason(why, why_size,
                       "a data plan of %" PRIu64 " batches per epoch for %" PRIu32
                       " epochs is more than %" PRIu64 " batches",
                       per_epoch, p->epochs, ZPS_ASSIGN_MAX_BATCHES);
        return ZPS_EINVAL;
    }
    uint64_t total = per_epoch * p->epochs;
    uint8_t *done = calloc((size_t)zps_assign_done_bytes(total), 1);
    uint64_t *ex = calloc(p->epochs, sizeof(uint64_t));
    uint64_t *nb = calloc(p->epochs, sizeof(uint64_t));
    if (!done || !ex || !nb) {
        free(done);
        free(ex);
        free(nb);
        zps_set_reason(why, why_size, "out of memory for a data plan of %" PRIu64 " batches",
                       total);
        return ZPS_ENOMEM;
    }
    a->plan = *p;
    a->per_epoch = per_epoch;
    a->total = total;
    a->done = done;
    a->epoch_examples = ex;
    a->epoch_batches = nb;
    a->planned = true;
    return 0;
}

bool zps_assign_has_plan(const zps_assign_t *a)
{
    return a->planned;
}

uint64_t zps_assign_batches_per_epoch(const zps_assign_t *a)
{
    return a->per_epoch;
}

uint64_t zps_assign_batches(const zps_assign_t *a)
{
    return a->total;
}

uint32_t zps_assign_batch_size(const zps_assign_t *a, uint64_t g)
{
    if (!a->planned || g >= a->total)
        return 0;
    uint64_t lo = (g % a->per_epoch) * a->plan.batch;
    uint64_t n = a->plan.examples - lo;
    return n < a->plan.batch ? (uint32_t)n : a->plan.batch;
}

bool zps_assign_is_complete(const zps_assign_t *a, uint64_t g)
{
    return a->planned && g < a->total && bit(a->done, g);
}

/* Index of g among w's leases, or -1. */
static int find_held(const zps_assign_t *a, uint32_t w, uint64_t g)
{
    const uint64_t *h = held_of(a, w);
    for (uint32_t i = 0; i < a->nheld[w]; i++)
        if (h[i] == g)
            return (int)i;
    return -1;
}

static void drop_held(zps_assign_t *a, uint32_t w, int i)
{
    uint64_t *h = held_of(a, w);
    memmove(h + i, h + i + 1, (a->nheld[w] - (uint32_t)i - 1) * sizeof(uint64_t));
    a->nheld[w]--;
}

int zps_assign_complete(zps_assign_t *a, uint32_t w, uint64_t g, uint32_t examples, bool *first,
                        char *why, size_t why_size)
{
    *first = false;
    if (w >= a->workers || !a->planned || g >= a->total) {
        zps_set_reason(why, why_size, "batch %" PRIu64 " is not a batch of this run's plan", g);
        return ZPS_EINVAL;
    }
    uint32_t size = zps_assign_batch_size(a, g);
    if (examples != size) {
        zps_set_reason(why, why_size,
                       "batch %" PRIu64 " holds %" PRIu32 " examples, the push says %" PRIu32, g,
                       size, examples);
        return ZPS_EINVAL;
    }
    if (zps_assign_is_complete(a, g))
        return 0;
    int i = find_held(a, w, g);
    if (i < 0) {
        zps_set_reason(why, why_size,
                       "batch %" PRIu64 " is not leased to worker %" PRIu32
                       " (it was handed out again)",
                       g, w);
        return ZPS_EINVAL;
    }
    drop_held(a, w, i);
    set_bit(a->done, g);
    count_complete(a, g);
    *first = true;
    return 0;
}

static void enqueue(zps_assign_t *a, uint64_t g)
{
    /* assign.c's opening comment: the ring cannot overflow. */
    ZPS_ASSERT(a->qlen < a->qcap);
    a->queue[(a->qhead + a->qlen) % a->qcap] = g;
    a->qlen++;
}

/* A lease given back goes before the ones not yet handed out, oldest (lowest) first. */
static void give_back(zps_assign_t *a, uint64_t g)
{
    enqueue(a, g);
    /* Keep the ring sorted, so that batches still go out in the run's order. */
    for (size_t i = a->qlen - 1; i > 0; i--) {
        uint64_t *x = &a->queue[(a->qhead + i) % a->qcap];
        uint64_t *y = &a->queue[(a->qhead + i - 1) % a->qcap];
        if (*y <= *x)
            break;
        uint64_t t = *x;
        *x = *y;
        *y = t;
    }
}

void zps_assign_release(zps_assign_t *a, uint32_t w)
{
    if (w >= a->workers)
        return;
    uint64_t *h = held_of(a, w);
    for (uint32_t i = 0; i < a->nheld[w]; i++)
        give_back(a, h[i]);
    a->nheld[w] = 0;
}

size_t zps_assign_lease(zps_assign_t *a, uint32_t w, const uint64_t *have, size_t nhave,
                        uint32_t want, uint64_t *out, bool *exhausted)
{
    *exhausted = exhausted_now(a);
    if (w >= a->workers)
        return 0;
    uint64_t *h = held_of(a, w);
    /* What the shard has for w and w no longer has goes back. */
    for (uint32_t i = 0; i < a->nheld[w];) {
        bool kept = false;
        for (size_t k = 0; k < nhave && !kept; k++)
            kept = have[k] == h[i];
        if (kept) {
            i++;
        } else {
            give_back(a, h[i]);
            drop_held(a, w, (int)i);
        }
    }
    if (want > ZPS_ASSIGN_MAX_HELD)
        want = ZPS_ASSIGN_MAX_HELD;
    while (a->planned && a->nheld[w] < want) {
        uint64_t g;
        if (a->qlen > 0) {
            g = a->queue[a->qhead];
            a->qhead = (a->qhead + 1) % a->qcap;
            a->qlen--;
        } else if (a->next < a->total) {
            g = a->next++;
        } else {
            break;
        }
        h[a->nheld[w]++] = g;
    }
    memcpy(out, h, a->nheld[w] * sizeof(uint64_t));
    *exhausted = exhausted_now(a);
    return a->nheld[w];
}

uint64_t zps_assign_next(const zps_assign_t *a)
{
    return a->next;
}

size_t zps_assign_queued(const zps_assign_t *a)
{
    return a->qlen;
}

size_t zps_assign_held(const zps_assign_t *a, uint32_t w)
{
    return w < a->workers ? a->nheld[w] : 0;
}

size_t zps_assign_leases_of(const zps_assign_t *a, uint32_t w, uint64_t *out)
{
    if (w >= a->workers)
        return 0;
    memcpy(out, held_of(a, w), a->nheld[w] * sizeof(uint64_t));
    return a->nheld[w];
}

uint64_t zps_assign_completed(const zps_assign_t *a)
{
    return a->completed;
}

uint64_t zps_assign_epoch_examples(const zps_assign_t *a, uint32_t e)
{
    return a->planned && e < a->plan.epochs ? a->epoch_examples[e] : 0;
}

uint64_t zps_assign_epoch_batches(const zps_assign_t *a, uint32_t e)
{
    return a->planned && e < a->plan.epochs ? a->epoch_batches[e] : 0;
}

/* ---- checkpoints ---- */

uint64_t zps_assign_done_bytes(uint64_t batches)
{
    return batches / 8 + 1;
}

void zps_assign_state_fini(zps_assign_state_t *s)
{
    if (!s)
        return;
    free(s->queue);
    free(s->held);
    free(s->nheld);
    free(s->done);
    memset(s, 0, sizeof(*s));
}

int zps_assign_snapshot(const zps_assign_t *a, zps_assign_state_t *out)
{
    memset(out, 0, sizeof(*out));
    out->workers = a->workers;
    if (!a->planned)
        return 0;
    out->plan = a->plan;
    out->next = a->next;
    out->nqueue = a->qlen;
    out->queue = malloc((a->qlen ? a->qlen : 1) * sizeof(uint64_t));
    out->held = malloc(a->qcap * sizeof(uint64_t));
    out->nheld = malloc(a->workers * sizeof(uint32_t));
    out->done = malloc((size_t)zps_assign_done_bytes(a->total));
    if (!out->queue || !out->held || !out->nheld || !out->done) {
        zps_assign_state_fini(out);
        return ZPS_ENOMEM;
    }
    for (size_t i = 0; i < a->qlen; i++)
        out->queue[i] = a->queue[(a->qhead + i) % a->qcap];
    memcpy(out->held, a->held, a->qcap * sizeof(uint64_t));
    memcpy(out->nheld, a->nheld, a->workers * sizeof(uint32_t));
    memcpy(out->done, a->done, (size_t)zps_assign_done_bytes(a->total));
    return 0;
}

/* Whether lease g is acceptable (below the cursor, not complete, not seen); marks it seen. */
static bool lease_ok(const zps_assign_state_t *s, uint8_t *seen, uint64_t g, char *why,
                     size_t why_size, const char *where)
{
    if (g >= s->next) {
        zps_set_reason(why, why_size,
                       "%s: lease of batch %" PRIu64 ", which was never handed out (next %" PRIu64
                       ")",
                       where, g, s->next);
        return false;
    }
    if (bit(s->done, g)) {
        zps_set_reason(why, why_size, "%s: lease of batch %" PRIu64 ", which is complete", where,
                       g);
        return false;
    }
    if (bit(seen, g)) {
        zps_set_reason(why, why_size, "%s: batch %" PRIu64 " is leased twice", where, g);
        return false;
    }
    set_bit(seen, g);
    return true;
}

int zps_assign_restore(zps_assign_t *a, const zps_assign_state_t *s, char *why, size_t why_size)
{
    ZPS_ASSERT(!a->planned);
    if (s->workers != a->workers) {
        zps_set_reason(why, why_size,
                       "data assignment for %" PRIu32 " workers; this server has %" PRIu32,
                       s->workers, a->workers);
        return ZPS_ECORRUPT;
    }
    if (s->plan.examples == 0)
        return 0; /* no plan was set: nothing to restore */
    zps_assign_t *t = NULL;
    char reason[256];
    if (zps_assign_new(a->workers, &t) != 0)
        return ZPS_ENOMEM;
    int rc = zps_assign_set_plan(t, &s->plan, reason, sizeof(reason));
    if (rc) {
        zps_assign_free(t);
        zps_set_reason(why, why_size, "data assignment: %s", reason);
        return rc == ZPS_ENOMEM ? ZPS_ENOMEM : ZPS_ECORRUPT;
    }
    uint8_t *seen = calloc((size_t)zps_assign_done_bytes(t->total), 1);
    if (!seen) {
        zps_assign_free(t);
        return ZPS_ENOMEM;
    }
    rc = ZPS_ECORRUPT;
    if (s->next > t->total) {
        zps_set_reason(why, why_size,
                       "data assignment: next batch %" PRIu64 " is past the run's %" PRIu64,
                       s->next, t->total);
        goto out;
    }
    for (uint64_t g = s->next; g < t->total; g++) {
        if (bit(s->done, g)) {
            zps_set_reason(why, why_size,
                           "data assignment: batch %" PRIu64 " is complete but was never handed "
                           "out",
                           g);
            goto out;
        }
    }
    /* No bit past the last batch. */
    for (uint64_t g = t->total; g < 8 * zps_assign_done_bytes(t->total); g++) {
        if (bit(s->done, g)) {
            zps_set_reason(why, why_size, "data assignment: completion bits past the run's end");
            goto out;
        }
    }
    if (s->nqueue > t->qcap) {
        zps_set_reason(why, why_size, "data assignment: %zu leases queued, at most %zu", s->nqueue,
                       t->qcap);
        goto out;
    }
    for (size_t i = 0; i < s->nqueue; i++)
        if (!lease_ok(s, seen, s->queue[i], why, why_size, "data assignment's queue"))
            goto out;
    for (uint32_t w = 0; w < a->workers; w++) {
        if (s->nheld[w] > ZPS_ASSIGN_MAX_HELD) {
            zps_set_reason(why, why_size,
                           "data assignment: worker %" PRIu32 " holds %" PRIu32
                           " leases, at most %d",
                           w, s->nheld[w], ZPS_ASSIGN_MAX_HELD);
            goto out;
        }
        for (uint32_t i = 0; i < s->nheld[w]; i++)
            if (!lease_ok(s, seen, s->held[(size_t)w * ZPS_ASSIGN_MAX_HELD + i], why, why_size,
                          "data assignment"))
                goto out;
    }
    /* Accepted: t takes the state, and a takes t's arrays. */
    t->next = s->next;
    for (size_t i = 0; i < s->nqueue; i++)
        give_back(t, s->queue[i]);
    memcpy(t->held, s->held, t->qcap * sizeof(uint64_t));
    memcpy(t->nheld, s->nheld, t->workers * sizeof(uint32_t));
    memcpy(t->done, s->done, (size_t)zps_assign_done_bytes(t->total));
    for (uint64_t g = 0; g < t->next; g++)
        if (bit(t->done, g))
            count_complete(t, g);
    zps_assign_t tmp = *a;
    *a = *t;
    *t = tmp;
    rc = 0;
out:
    free(seen);
    zps_assign_free(t);
    return rc;
}
