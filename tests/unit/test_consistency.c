/*
 * test_consistency.c - the consistency rules as tables of events and expected
 * answers, for every mode, without a socket in sight.
 *
 * Each script is a list of steps: an event (push, pull, evict, rejoin, step,
 * refused step or push)
 * and what the state machine must answer. Pull tokens are small integers;
 * after each event the script says which waiting pulls must have become
 * ready ("R" steps list tokens in order).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "consistency.h"

enum op {
    PUSH,    /* a = worker, b = clock, expect = action or error */
    PULL,    /* a = worker, b = clock, c = token, expect = READY/QUEUED/DUP or error */
    READY,   /* tokens expected to come out of take_ready now (c = count, list in toks) */
    STEP,    /* a BSP step must be due for clock b with `c` ranks (list in toks); it is done */
    NOSTEP,  /* no BSP step may be due */
    EVICT,   /* a = worker */
    REJOIN,  /* a = worker, b = expected clock */
    VER,     /* b = expected version, c = expected min_clock */
    OBSERVE, /* an observer asks for the model of clock b, token c; expect as PULL */
    PUSHU,   /* push by worker a at clock b computed on version c; expect = action;
              * toks[0] = its update staleness, toks[1] = 1 / its lr scale */
    CKPT,    /* what a checkpoint records: version b, pushed[] of a workers in toks */
    REFUSE,  /* as STEP, but the step cannot be taken (not finite): it is refused */
    UNAPPLY, /* the push of worker a at clock b, just applied, is refused (not finite) */
    DISC,    /* worker a has had b buffered pushes discarded by refused steps */
    FINISH,  /* worker a says it has no batch left */
    OBSERVEP, /* an observer asks for the model once b * W pushes are in, token c */
    END,
};

#define APPLY_ ZPS_PUSH_APPLY
#define BUF_ ZPS_PUSH_BUFFER
#define RETRY_ ZPS_PUSH_RETRY
#define DROP_ ZPS_PUSH_DROP
#define RDY_ ZPS_PULL_READY
#define Q_ ZPS_PULL_QUEUED
#define DUP_ ZPS_PULL_DUPLICATE

typedef struct step {
    enum op op;
    int a;
    uint64_t b;
    int c;
    int expect;
    int toks[8];
} step_t;

static zps_consistency_t *make_lr(zps_mode_t mode, uint32_t w, uint32_t s, uint32_t backup,
                                  zps_lr_scaling_t lr)
{
    zps_consistency_config_t cfg = {mode, w, s, backup, 4, lr};
    zps_consistency_t *st = NULL;
    char why[128];
    assert_int_equal(zps_consistency_new(&cfg, &st, why, sizeof(why)), 0);
    zps_consistency_set_initialized(st);
    return st;
}

static zps_consistency_t *make(zps_mode_t mode, uint32_t w, uint32_t s, uint32_t backup)
{
    return make_lr(mode, w, s, backup, ZPS_LR_SCALING_NONE);
}

static void run(zps_consistency_t *st, const step_t *script)
{
    char why[256];
    for (int i = 0; script[i].op != END; i++) {
        const step_t *s = &script[i];
        char where[64];
        snprintf(where, sizeof(where), "script step %d", i);
        switch (s->op) {
        case PUSH: {
            zps_push_decision_t d;
            int rc = zps_consistency_push(st, (uint32_t)s->a, s->b, s->b, &d, why, sizeof(why));
            if (s->expect < 0) {
                if (rc != s->expect)
                    fail_msg("%s: push w%d t%llu: expected %s, got %s", where, s->a,
                             (unsigned long long)s->b, zps_errname(s->expect), zps_errname(rc));
            } else {
                if (rc != 0)
                    fail_msg("%s: push w%d t%llu failed: %s (%s)", where, s->a,
                             (unsigned long long)s->b, zps_errname(rc), why);
                if ((int)d.action != s->expect)
                    fail_msg("%s: push w%d t%llu: action %d, expected %d", where, s->a,
                             (unsigned long long)s->b, d.action, s->expect);
            }
            break;
        }
        case PULL: {
            zps_pull_result_t r;
            uint64_t existing = 0;
            int rc = zps_consistency_pull(st, s->a, s->b, (uint64_t)s->c, (uint64_t)s->c, &r,
                                          &existing, why, sizeof(why));
            if (s->expect < 0) {
                if (rc != s->expect)
                    fail_msg("%s: pull w%d t%llu: expected %s, got %s", where, s->a,
                             (unsigned long long)s->b, zps_errname(s->expect), zps_errname(rc));
            } else {
                if (rc != 0)
                    fail_msg("%s: pull w%d t%llu failed: %s (%s)", where, s->a,
                             (unsigned long long)s->b, zps_errname(rc), why);
                if ((int)r != s->expect)
                    fail_msg("%s: pull w%d t%llu: result %d, expected %d", where, s->a,
                             (unsigned long long)s->b, r, s->expect);
            }
            break;
        }
        case READY: {
            uint64_t toks[16];
            size_t n = zps_consistency_take_ready(st, toks, 16);
            if ((int)n != s->c)
                fail_msg("%s: %zu pulls ready, expected %d", where, n, s->c);
            for (int k = 0; k < s->c; k++)
                if ((int)toks[k] != s->toks[k])
                    fail_msg("%s: ready pull %d is token %llu, expected %d", where, k,
                             (unsigned long long)toks[k], s->toks[k]);
            break;
        }
        case STEP:
        case REFUSE: {
            uint64_t clock;
            uint32_t ranks[16], k;
            if (!zps_consistency_step_due(st, &clock, ranks, &k))
                fail_msg("%s: a step for clock %llu should be due", where,
                         (unsigned long long)s->b);
            assert_int_equal(clock, s->b);
            assert_int_equal(k, s->c);
            for (int j = 0; j < s->c; j++)
                assert_int_equal(ranks[j], s->toks[j]);
            /* Taken but not done: no second step for the same clock. */
            assert_false(zps_consistency_step_due(st, &clock, ranks, &k));
            if (s->op == REFUSE)
                zps_consistency_step_refused(st);
            else
                zps_consistency_step_done(st);
            break;
        }
        case UNAPPLY:
            zps_consistency_push_refused(st, (uint32_t)s->a, s->b);
            break;
        case DISC:
            if (zps_consistency_discarded(st, (uint32_t)s->a) != s->b)
                fail_msg("%s: worker %d has %llu pushes discarded, expected %llu", where, s->a,
                         (unsigned long long)zps_consistency_discarded(st, (uint32_t)s->a),
                         (unsigned long long)s->b);
            break;
        case NOSTEP: {
            uint64_t clock;
            uint32_t ranks[16], k;
            if (zps_consistency_step_due(st, &clock, ranks, &k))
                fail_msg("%s: no step should be due, got one for clock %llu", where,
                         (unsigned long long)clock);
            break;
        }
        case EVICT:
            zps_consistency_evict(st, (uint32_t)s->a);
            break;
        case FINISH:
            zps_consistency_finish(st, (uint32_t)s->a);
            assert_true(zps_consistency_finished(st, (uint32_t)s->a));
            break;
        case OBSERVEP: {
            zps_pull_result_t r;
            uint64_t existing = 0;
            int rc = zps_consistency_observe_pushes(st, s->b, (uint64_t)s->c, (uint64_t)s->c, &r,
                                                    &existing, why, sizeof(why));
            if (rc != 0 || (int)r != s->expect)
                fail_msg("%s: observe pushes t%llu: rc %s result %d, expected %d", where,
                         (unsigned long long)s->b, zps_errname(rc), rc ? -1 : (int)r, s->expect);
            break;
        }
        case REJOIN:
            assert_int_equal(zps_consistency_rejoin(st, (uint32_t)s->a), s->b);
            break;
        case VER:
            if (zps_consistency_version(st) != s->b ||
                zps_consistency_min_clock(st) != (uint64_t)s->c)
                fail_msg("%s: version %llu min_clock %llu, expected %llu and %d", where,
                         (unsigned long long)zps_consistency_version(st),
                         (unsigned long long)zps_consistency_min_clock(st),
                         (unsigned long long)s->b, s->c);
            break;
        case OBSERVE: {
            zps_pull_result_t r;
            uint64_t existing = 0;
            int rc = zps_consistency_observe(st, s->b, (uint64_t)s->c, (uint64_t)s->c, &r,
                                             &existing, why, sizeof(why));
            if (s->expect < 0 ? rc != s->expect : (rc != 0 || (int)r != s->expect))
                fail_msg("%s: observe t%llu: rc %s result %d, expected %d", where,
                         (unsigned long long)s->b, zps_errname(rc), rc ? -1 : (int)r, s->expect);
            if (r == ZPS_PULL_DUPLICATE && (int)existing != s->c)
                fail_msg("%s: observe t%llu: duplicate of token %llu", where,
                         (unsigned long long)s->b, (unsigned long long)existing);
            break;
        }
        case PUSHU: {
            zps_push_decision_t d;
            int rc = zps_consistency_push(st, (uint32_t)s->a, s->b, (uint64_t)s->c, &d, why,
                                          sizeof(why));
            if (rc != 0)
                fail_msg("%s: push w%d t%llu failed: %s (%s)", where, s->a,
                         (unsigned long long)s->b, zps_errname(rc), why);
            if ((int)d.action != s->expect || d.update_staleness != (uint64_t)s->toks[0] ||
                d.lr_scale != 1.0 / (double)s->toks[1])
                fail_msg("%s: push w%d t%llu on v%d: action %d, update staleness %llu, lr scale "
                         "%g; expected %d, %d, 1/%d",
                         where, s->a, (unsigned long long)s->b, s->c, d.action,
                         (unsigned long long)d.update_staleness, d.lr_scale, s->expect, s->toks[0],
                         s->toks[1]);
            break;
        }
        case CKPT: {
            uint64_t pushed[8];
            bool live[8];
            uint64_t dropped[8];
            uint64_t v = zps_consistency_snapshot(st, pushed, live, dropped);
            if (v != s->b)
                fail_msg("%s: checkpoint of version %llu, expected %llu", where,
                         (unsigned long long)v, (unsigned long long)s->b);
            for (int w = 0; w < s->a; w++) {
                if (pushed[w] != (uint64_t)s->toks[w])
                    fail_msg("%s: checkpoint records pushed[%d] = %llu, expected %d", where, w,
                             (unsigned long long)pushed[w], s->toks[w]);
                if (live[w] != zps_consistency_live(st, (uint32_t)w) ||
                    dropped[w] != zps_consistency_dropped(st, (uint32_t)w))
                    fail_msg("%s: checkpoint of worker %d: live or dropped differ", where, w);
            }
            break;
        }
        case END:
            break;
        }
    }
}

#define E                                                                                          \
    {                                                                                              \
        END, 0, 0, 0, 0,                                                                           \
        {                                                                                          \
            0                                                                                      \
        }                                                                                          \
    }

/* The worked example: four workers, one clock; every pull for clock 1 waits for the step. */
static void test_bsp_four_workers(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 4, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PULL, 0, 0, 1, RDY_, {0}},
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PULL, 0, 1, 10, Q_, {0}}, /* clock 1 does not exist yet */
        {PUSH, 1, 0, 0, BUF_, {0}},
        {PUSH, 2, 0, 0, BUF_, {0}},
        {NOSTEP, 0, 0, 0, 0, {0}},
        {READY, 0, 0, 0, 0, {0}},
        {PULL, 1, 1, 11, Q_, {0}},
        {PUSH, 3, 0, 0, BUF_, {0}},
        {READY, 0, 0, 0, 0, {0}}, /* the step is due but not applied: still nothing */
        {STEP, 0, 0, 4, 0, {0, 1, 2, 3}},
        {READY, 0, 0, 2, 0, {10, 11}},
        {VER, 0, 1, 1, 0, {0}},
        {PULL, 3, 1, 12, RDY_, {0}},
        {PULL, 2, 0, 13, RDY_, {0}}, /* an old clock is answered with what exists */
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/* Retries are acknowledged and not applied again; gaps are refused and change nothing. */
static void test_bsp_retry_and_gaps(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 2, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PUSH, 0, 0, 0, RETRY_, {0}},
        {PUSH, 0, 2, 0, ZPS_ECLOCK, {0}}, /* skips clock 1 */
        {PUSH, 0, 1, 0, ZPS_ECLOCK, {0}}, /* the model for clock 1 does not exist yet */
        {PULL, 0, 2, 1, ZPS_ECLOCK, {0}}, /* worker 0 has pushed only clock 0 */
        {NOSTEP, 0, 0, 0, 0, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {STEP, 0, 0, 2, 0, {0, 1}},
        {PUSH, 1, 0, 0, RETRY_, {0}}, /* a retry after its step: still nothing applied */
        {NOSTEP, 0, 0, 0, 0, {0}},
        {VER, 0, 1, 1, 0, {0}},
        {PUSH, 0, 1, 0, BUF_, {0}},
        {PUSH, 5, 1, 0, ZPS_EWORKER, {0}},
        {PULL, -2, 0, 2, ZPS_EWORKER, {0}},
        {PULL, 2, 0, 2, ZPS_EWORKER, {0}},
        {VER, 0, 1, 1, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/* SSP s=2, W=2: worker 0 may pull clocks 0, 1, 2 before worker 1 pushes
 * anything; its pull for clock 3 waits until worker 1 pushes clock 0. */
static void test_ssp_bound(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 2, 2, 0);
    /* clang-format off */
    const step_t script[] = {
        {PULL, 0, 0, 1, RDY_, {0}},
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PULL, 0, 1, 2, RDY_, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {PULL, 0, 2, 3, RDY_, {0}},
        {PUSH, 0, 2, 0, APPLY_, {0}},
        {VER, 0, 3, 0, 0, {0}},
        {PULL, 0, 3, 4, Q_, {0}},
        {PULL, 1, 0, 5, RDY_, {0}}, /* the slow worker is never held back */
        {READY, 0, 0, 0, 0, {0}},
        {PUSH, 1, 0, 0, APPLY_, {0}},
        {READY, 0, 0, 1, 0, {4}},
        {VER, 0, 4, 1, 0, {0}},
        {PUSH, 0, 3, 0, APPLY_, {0}},
        {PULL, 0, 4, 6, Q_, {0}}, /* needs min_clock >= 2 */
        {PUSH, 1, 1, 0, APPLY_, {0}},
        {READY, 0, 0, 1, 0, {6}},
        {PUSH, 1, 1, 0, RETRY_, {0}},
        {PUSH, 1, 3, 0, ZPS_ECLOCK, {0}},
        {VER, 0, 6, 2, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/* SSP with s = 0 is BSP's pull rule with pushes applied one at a time. */
static void test_ssp_zero(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 3, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PULL, 0, 1, 1, Q_, {0}},
        {PUSH, 1, 0, 0, APPLY_, {0}},
        {READY, 0, 0, 0, 0, {0}},
        {PUSH, 2, 0, 0, APPLY_, {0}},
        {READY, 0, 0, 1, 0, {1}},
        {VER, 0, 3, 1, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

static void test_asp(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_ASP, 2, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PULL, 0, 0, 1, RDY_, {0}},
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {PUSH, 0, 2, 0, APPLY_, {0}},
        {PULL, 0, 3, 2, RDY_, {0}}, /* worker 1 has pushed nothing: no matter */
        {PUSH, 0, 2, 0, RETRY_, {0}},
        {PUSH, 0, 5, 0, ZPS_ECLOCK, {0}},
        {VER, 0, 3, 0, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/* BSP W=4 B=1: the step completes without the slowest worker, whose late push
 * is acknowledged as dropped and counted, and whose next pull is served. */
static void test_bsp_backup(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 4, 0, 1);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PUSH, 2, 0, 0, BUF_, {0}},
        {NOSTEP, 0, 0, 0, 0, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {STEP, 0, 0, 3, 0, {0, 1, 2}},
        {PUSH, 3, 0, 0, DROP_, {0}},
        {PUSH, 3, 0, 0, RETRY_, {0}},
        {PULL, 3, 1, 1, RDY_, {0}},
        {VER, 0, 1, 1, 0, {0}},
        /* Next clock: the slowest is a different worker. */
        {PUSH, 3, 1, 0, BUF_, {0}},
        {PUSH, 1, 1, 0, BUF_, {0}},
        {PUSH, 0, 1, 0, BUF_, {0}},
        {STEP, 0, 1, 3, 0, {0, 1, 3}},
        {PUSH, 2, 1, 0, DROP_, {0}},
        {VER, 0, 2, 2, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    assert_int_equal(zps_consistency_dropped(st, 3), 1);
    assert_int_equal(zps_consistency_dropped(st, 2), 1);
    assert_int_equal(zps_consistency_dropped(st, 0), 0);
    zps_consistency_free(st);
}

/* A push that arrives while its clock's step is being applied is dropped. */
static void test_bsp_backup_step_in_flight(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 3, 0, 1);
    uint64_t clock;
    uint32_t ranks[3], k;
    zps_push_decision_t d;
    assert_int_equal(zps_consistency_push(st, 0, 0, 0, &d, NULL, 0), 0);
    assert_int_equal(zps_consistency_push(st, 1, 0, 0, &d, NULL, 0), 0);
    assert_true(zps_consistency_step_due(st, &clock, ranks, &k));
    assert_int_equal(zps_consistency_push(st, 2, 0, 0, &d, NULL, 0), 0);
    assert_int_equal(d.action, ZPS_PUSH_DROP);
    zps_consistency_step_done(st);
    assert_int_equal(zps_consistency_version(st), 1);
    zps_consistency_free(st);
}

static void test_bsp_evict_rejoin(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 3, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {PULL, 0, 1, 1, Q_, {0}},
        {NOSTEP, 0, 0, 0, 0, {0}},
        {EVICT, 2, 0, 0, 0, {0}},
        {STEP, 0, 0, 2, 0, {0, 1}},
        {READY, 0, 0, 1, 0, {1}},
        {PUSH, 0, 1, 0, BUF_, {0}},
        {PUSH, 1, 1, 0, BUF_, {0}},
        {STEP, 0, 1, 2, 0, {0, 1}},
        {VER, 0, 2, 2, 0, {0}},
        {REJOIN, 2, 2, 0, 0, {0}}, /* back at the current clock */
        {PUSH, 2, 0, 0, RETRY_, {0}},
        {PUSH, 0, 2, 0, BUF_, {0}},
        {PUSH, 1, 2, 0, BUF_, {0}},
        {NOSTEP, 0, 0, 0, 0, {0}}, /* it counts again */
        {PUSH, 2, 2, 0, BUF_, {0}},
        {STEP, 0, 2, 3, 0, {0, 1, 2}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/*
 * A worker evicted after its push was buffered: the push was acknowledged, so
 * it is kept and joins its clock's step, but it does not stand in for a live
 * worker that has not pushed yet (the step waits for that one). With no live
 * worker left, the buffered pushes make the step at once.
 */
static void test_bsp_evicted_buffered_push(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 2, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PULL, 1, 0, 1, RDY_, {0}},
        {PULL, 0, 1, 2, Q_, {0}},
        {EVICT, 0, 0, 0, 0, {0}},
        {NOSTEP, 0, 0, 0, 0, {0}},   /* worker 1 is live and has not pushed */
        {READY, 0, 0, 0, 0, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {STEP, 0, 0, 2, 0, {0, 1}},  /* both gradients, in rank order */
        {READY, 0, 0, 1, 0, {2}},
        {VER, 0, 1, 1, 0, {0}},      /* min_clock over live workers: worker 1's */
        {REJOIN, 0, 1, 0, 0, {0}},
        {PUSH, 0, 1, 0, BUF_, {0}},
        {EVICT, 0, 0, 0, 0, {0}},
        {EVICT, 1, 0, 0, 0, {0}},
        {STEP, 0, 1, 1, 0, {0}},     /* nobody live to wait for: the step is taken */
        {DISC, 0, 0, 0, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);

    /* With a backup worker: only live pushes count towards W-B. */
    st = make(ZPS_MODE_BSP, 3, 0, 1);
    /* clang-format off */
    const step_t backup[] = {
        {PUSH, 2, 0, 0, BUF_, {0}},
        {EVICT, 2, 0, 0, 0, {0}},
        {PUSH, 0, 0, 0, BUF_, {0}},
        {NOSTEP, 0, 0, 0, 0, {0}},   /* quorum min(W-B, live) = 2 live pushes */
        {PUSH, 1, 0, 0, BUF_, {0}},
        {STEP, 0, 0, 3, 0, {0, 1, 2}},
        E,
    };
    /* clang-format on */
    run(st, backup);
    zps_consistency_free(st);
}

/*
 * BSP: a step whose result would not be finite is refused. The clock still
 * moves on (pulls for the next clock are answered, pushes of the refused
 * clock are retries), and every contributing push is counted as discarded.
 */
static void test_bsp_refused_step(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 2, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PULL, 0, 1, 1, Q_, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {REFUSE, 0, 0, 2, 0, {0, 1}},
        {READY, 0, 0, 1, 0, {1}},
        {VER, 0, 1, 1, 0, {0}},
        {DISC, 0, 1, 0, 0, {0}},
        {DISC, 1, 1, 0, 0, {0}},
        {PUSH, 1, 0, 0, RETRY_, {0}},
        {PUSH, 0, 1, 0, BUF_, {0}},
        {PUSH, 1, 1, 0, BUF_, {0}},
        {STEP, 0, 1, 2, 0, {0, 1}},
        {VER, 0, 2, 2, 0, {0}},
        {DISC, 0, 1, 0, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/*
 * SSP and ASP: a push applied on arrival whose step would not be finite is
 * refused as if it had never arrived: the version and the worker's clock go
 * back, waiting pulls stay waiting, and the same clock may be pushed again.
 */
static void test_refused_push_on_arrival(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_ASP, 2, 0, 0);
    /* clang-format off */
    const step_t asp[] = {
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {VER, 0, 1, 0, 0, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {UNAPPLY, 0, 1, 0, 0, {0}},
        {VER, 0, 1, 0, 0, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},  /* not a retry: it was never taken */
        {VER, 0, 2, 0, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, asp);
    zps_consistency_free(st);

    st = make(ZPS_MODE_SSP, 2, 0, 0);
    /* clang-format off */
    const step_t ssp[] = {
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PULL, 0, 1, 1, Q_, {0}},      /* waits for worker 1's clock 0 */
        {PUSH, 1, 0, 0, APPLY_, {0}},
        {UNAPPLY, 1, 0, 0, 0, {0}},
        {READY, 0, 0, 0, 0, {0}},      /* still waits */
        {VER, 0, 1, 0, 0, {0}},
        {PUSH, 1, 0, 0, APPLY_, {0}},
        {READY, 0, 0, 1, 0, {1}},
        {VER, 0, 2, 1, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, ssp);
    zps_consistency_free(st);
}

static void test_ssp_evict_rejoin(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 2, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PULL, 0, 1, 1, Q_, {0}},
        {EVICT, 1, 0, 0, 0, {0}},
        {READY, 0, 0, 1, 0, {1}},
        {VER, 0, 1, 1, 0, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {PUSH, 0, 2, 0, APPLY_, {0}},
        {VER, 0, 3, 3, 0, {0}},
        {REJOIN, 1, 3, 0, 0, {0}},
        {PUSH, 0, 3, 0, APPLY_, {0}},
        {PULL, 0, 4, 2, Q_, {0}}, /* worker 1 holds it back again */
        {PUSH, 1, 3, 0, APPLY_, {0}},
        {READY, 0, 0, 1, 0, {2}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

static void test_observer_and_init(void **state)
{
    (void)state;
    zps_consistency_config_t cfg = {ZPS_MODE_BSP, 2, 0, 0, 2, ZPS_LR_SCALING_NONE};
    zps_consistency_t *st;
    assert_int_equal(zps_consistency_new(&cfg, &st, NULL, 0), 0);
    zps_push_decision_t d;
    assert_int_equal(zps_consistency_push(st, 0, 0, 0, &d, NULL, 0), ZPS_ENOTINIT);
    /* clang-format off */
    const step_t before[] = {
        {PULL, -1, 7, 1, Q_, {0}}, /* observers see the model at once, once it exists */
        {PULL, 0, 0, 2, Q_, {0}},
        {PULL, 0, 0, 2, DUP_, {0}},
        {PULL, -1, 0, 3, Q_, {0}},
        {PULL, -1, 0, 4, ZPS_EBUSY, {0}},
        {READY, 0, 0, 0, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, before);
    zps_consistency_set_initialized(st);
    /* clang-format off */
    const step_t after[] = {
        {READY, 0, 0, 3, 0, {1, 2, 3}},
        {PULL, -1, 99, 5, RDY_, {0}},
        E,
    };
    /* clang-format on */
    run(st, after);
    assert_int_equal(zps_consistency_pending(st), 0);
    zps_consistency_free(st);
}

/*
 * An observer asking for the model OF clock t (an evaluator) waits for it --
 * BSP: version t; SSP and ASP: every worker has pushed every clock before t
 * -- and never holds a worker back.
 */
static void test_observe_clock(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 2, 0, 0);
    /* clang-format off */
    const step_t bsp[] = {
        {OBSERVE, 0, 0, 1, RDY_, {0}}, /* the model of clock 0 is the initial one */
        {OBSERVE, 0, 1, 2, Q_, {0}},
        {OBSERVE, 0, 1, 2, DUP_, {0}},
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PULL, 0, 1, 3, Q_, {0}},
        {READY, 0, 0, 0, 0, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {STEP, 0, 0, 2, 0, {0, 1}},
        {READY, 0, 0, 2, 0, {2, 3}}, /* exactly version 1, the observer among the workers */
        {OBSERVE, 0, 3, 4, Q_, {0}},
        {OBSERVE, 0, 2, 5, Q_, {0}},
        {OBSERVE, 0, 4, 6, Q_, {0}},
        {OBSERVE, 0, 5, 7, Q_, {0}},
        {OBSERVE, 0, 6, 8, ZPS_EBUSY, {0}}, /* the observers' pool holds max_pending (4) */
        {PUSH, 0, 1, 0, BUF_, {0}},
        {PUSH, 1, 1, 0, BUF_, {0}},
        {STEP, 0, 1, 2, 0, {0, 1}},
        {READY, 0, 0, 1, 0, {5}},
        E,
    };
    /* clang-format on */
    run(st, bsp);
    zps_consistency_free(st);

    /* SSP(2): worker 0 may run 2 clocks ahead of worker 1; the observer of
     * clock 2 waits until worker 1 has pushed clocks 0 and 1 too. */
    st = make(ZPS_MODE_SSP, 2, 2, 0);
    /* clang-format off */
    const step_t ssp[] = {
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {PULL, 0, 2, 1, RDY_, {0}},
        {OBSERVE, 0, 2, 2, Q_, {0}},
        {PUSH, 1, 0, 0, APPLY_, {0}},
        {READY, 0, 0, 0, 0, {0}},
        {PUSH, 1, 1, 0, APPLY_, {0}},
        {READY, 0, 0, 1, 0, {2}},
        E,
    };
    /* clang-format on */
    run(st, ssp);
    zps_consistency_free(st);

    st = make(ZPS_MODE_ASP, 2, 0, 0);
    /* clang-format off */
    const step_t asp[] = {
        {OBSERVE, 0, 1, 1, Q_, {0}},
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {PULL, 0, 2, 2, RDY_, {0}},
        {READY, 0, 0, 0, 0, {0}},
        {EVICT, 1, 0, 0, 0, {0}}, /* a worker gone for good no longer counts */
        {READY, 0, 0, 1, 0, {1}},
        E,
    };
    /* clang-format on */
    run(st, asp);
    zps_consistency_free(st);
}

/*
 * A shared data assignment's workers run different numbers of clocks: one
 * that says it has finished no longer holds SSP's bound or min_clock back,
 * an observer counting in pushes gets the model once t * W pushes are in or
 * once everyone has finished, and a finished worker that pushes again is
 * counted again.
 */
static void test_finish(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 2, 1, 0);
    /* clang-format off */
    const step_t ssp[] = {
        {PUSH, 1, 0, 0, APPLY_, {0}},
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {PULL, 0, 2, 1, RDY_, {0}},    /* min_clock 1 >= 2 - 1 */
        {PUSH, 0, 2, 0, APPLY_, {0}},
        {PULL, 0, 3, 2, Q_, {0}},      /* needs min_clock >= 2: worker 1 is at 1 */
        {OBSERVEP, 0, 2, 3, RDY_, {0}}, /* 4 pushes: 4 are in */
        {OBSERVEP, 0, 3, 4, Q_, {0}},  /* 6 pushes: only 4 are in */
        {READY, 0, 0, 0, 0, {0}},
        {VER, 0, 4, 1, 0, {0}},
        {FINISH, 1, 0, 0, 0, {0}},     /* worker 1 has no batch left */
        {VER, 0, 4, 3, 0, {0}},        /* min_clock is worker 0's alone */
        {READY, 0, 0, 1, 0, {2}},
        {PUSH, 0, 3, 0, APPLY_, {0}},
        {READY, 0, 0, 0, 0, {0}},      /* 5 pushes, worker 0 goes on */
        {FINISH, 0, 0, 0, 0, {0}},     /* everyone finished: the final model */
        {READY, 0, 0, 1, 0, {4}},
        E,
    };
    /* clang-format on */
    run(st, ssp);
    zps_consistency_free(st);

    st = make(ZPS_MODE_ASP, 2, 0, 0);
    /* clang-format off */
    const step_t asp[] = {
        {OBSERVEP, 0, 1, 1, Q_, {0}},  /* the model after 2 pushes */
        {OBSERVEP, 0, UINT64_MAX, 2, Q_, {0}}, /* the final model */
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {READY, 0, 0, 0, 0, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},  /* two pushes, both of worker 0 */
        {READY, 0, 0, 1, 0, {1}},
        {OBSERVE, 0, 1, 3, Q_, {0}},   /* counted in clocks, worker 1 holds it back */
        {FINISH, 0, 0, 0, 0, {0}},
        {READY, 0, 0, 0, 0, {0}},      /* worker 1 has not finished */
        {FINISH, 1, 0, 0, 0, {0}},
        {READY, 0, 0, 2, 0, {2, 3}},
        {PUSH, 1, 0, 0, APPLY_, {0}},  /* handed a batch after all: counted again */
        {OBSERVEP, 0, UINT64_MAX, 4, Q_, {0}},
        {FINISH, 1, 0, 0, 0, {0}},
        {READY, 0, 0, 1, 0, {4}},
        E,
    };
    /* clang-format on */
    run(st, asp);
    assert_false(zps_consistency_finished(st, 5));
    zps_consistency_free(st);
}

/* The waiting room is bounded per worker: a flood gets ZPS_EBUSY, not memory. */
static void test_pending_bound(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 2, 0, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PULL, 0, 1, 1, Q_, {0}},
        {PULL, 0, 1, 2, Q_, {0}},
        {PULL, 0, 1, 3, Q_, {0}},
        {PULL, 0, 1, 4, Q_, {0}},
        {PULL, 0, 1, 5, ZPS_EBUSY, {0}},
        {PULL, 0, 1, 4, DUP_, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {STEP, 0, 0, 2, 0, {0, 1}},
        {READY, 0, 0, 4, 0, {1, 2, 3, 4}},
        {PULL, 0, 1, 5, RDY_, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    uint64_t toks[4];
    assert_int_equal(zps_consistency_take_all(st, toks, 4), 0);
    zps_consistency_free(st);
}

/*
 * Update staleness: the updates applied between the version a gradient was
 * computed on (c) and the version it lands on. With --lr-staleness inverse a
 * push applied on arrival runs at lr / (1 + u). Every figure below is counted
 * by hand from the version before the push.
 */
static void test_update_staleness_asp_inverse(void **state)
{
    (void)state;
    zps_consistency_t *st = make_lr(ZPS_MODE_ASP, 2, 0, 0, ZPS_LR_SCALING_INVERSE);
    /* clang-format off */
    const step_t script[] = {
        {PUSHU, 0, 0, 0, APPLY_, {0, 1}}, /* v 0 -> 1, computed on v0: fresh */
        {PUSHU, 1, 0, 0, APPLY_, {1, 2}}, /* v 1 -> 2, on v0: one update missed, lr/2 */
        {PUSHU, 1, 1, 0, APPLY_, {2, 3}}, /* v 2 -> 3, still on v0: lr/3 */
        {PUSHU, 0, 1, 1, APPLY_, {2, 3}}, /* v 3 -> 4, on v1 */
        {PUSHU, 0, 2, 4, APPLY_, {0, 1}}, /* v 4 -> 5, on v4 */
        {PUSHU, 0, 2, 0, RETRY_, {0, 1}}, /* a retry is not applied, not scaled */
        {PUSHU, 1, 2, 9, APPLY_, {0, 1}}, /* a version from the future counts as fresh */
        {VER, 0, 6, 3, 0, {0}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/* The same events under SSP without scaling: the same figures, the rate untouched. */
static void test_update_staleness_ssp_none(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 2, 3, 0);
    /* clang-format off */
    const step_t script[] = {
        {PUSHU, 0, 0, 0, APPLY_, {0, 1}},
        {PUSHU, 1, 0, 0, APPLY_, {1, 1}},
        {PUSHU, 1, 1, 0, APPLY_, {2, 1}},
        {PUSHU, 0, 1, 1, APPLY_, {2, 1}},
        {PUSHU, 0, 2, 4, APPLY_, {0, 1}},
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/*
 * BSP: a buffered push's update staleness is that of the step that applies
 * it (version t to t + 1), never scaled, even when the config asks for it.
 * With one backup, a worker whose push was dropped pulled the old version:
 * its next push is one update stale.
 */
static void test_update_staleness_bsp(void **state)
{
    (void)state;
    zps_consistency_t *st = make_lr(ZPS_MODE_BSP, 3, 0, 1, ZPS_LR_SCALING_INVERSE);
    /* clang-format off */
    const step_t script[] = {
        {PUSHU, 0, 0, 0, BUF_, {0, 1}},
        {PUSHU, 1, 0, 0, BUF_, {0, 1}},
        {STEP, 0, 0, 2, 0, {0, 1}},
        {PUSHU, 2, 0, 0, DROP_, {0, 1}}, /* too late for the step of clock 0 */
        {PUSHU, 2, 1, 0, BUF_, {1, 1}}, /* computed on v0, applied by the step 1 -> 2 */
        {PUSHU, 0, 1, 1, BUF_, {0, 1}},
        {STEP, 0, 1, 2, 0, {0, 2}},
        {VER, 0, 2, 1, 0, {0}}, /* worker 1 has pushed clock 0 only */
        E,
    };
    /* clang-format on */
    run(st, script);
    zps_consistency_free(st);
}

/*
 * What a checkpoint records. Under BSP a push buffered for the step in
 * progress is not in the saved parameters, so pushed[w] is clamped to the
 * version and the restored shard takes that push again; SSP and ASP apply
 * pushes on arrival and record pushed[] as it is.
 */
static void test_checkpoint_clocks(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 3, 0, 0);
    /* clang-format off */
    const step_t bsp[] = {
        {CKPT, 3, 0, 0, 0, {0, 0, 0}},
        {PUSH, 0, 0, 0, BUF_, {0}},
        {PUSH, 1, 0, 0, BUF_, {0}},
        {CKPT, 3, 0, 0, 0, {0, 0, 0}}, /* pushed is {1, 1, 0}: two buffered pushes not saved */
        {PUSH, 2, 0, 0, BUF_, {0}},
        {STEP, 0, 0, 3, 0, {0, 1, 2}},
        {CKPT, 3, 1, 0, 0, {1, 1, 1}},
        {PUSH, 1, 1, 0, BUF_, {0}},
        {EVICT, 2, 0, 0, 0, {0}},
        {CKPT, 3, 1, 0, 0, {1, 1, 1}}, /* pushed is {1, 2, 1} */
        E,
    };
    /* clang-format on */
    run(st, bsp);

    /* Restored from that checkpoint, worker 1's push of clock 1 is expected again. */
    uint64_t pushed[3], dropped[3];
    bool live[3];
    uint64_t v = zps_consistency_snapshot(st, pushed, live, dropped);
    zps_consistency_free(st);
    zps_consistency_config_t cfg = {ZPS_MODE_BSP, 3, 0, 0, 4, ZPS_LR_SCALING_NONE};
    assert_int_equal(zps_consistency_new(&cfg, &st, NULL, 0), 0);
    assert_false(zps_consistency_initialized(st));
    zps_consistency_restore(st, v, pushed, live, dropped);
    assert_true(zps_consistency_initialized(st));
    assert_false(zps_consistency_live(st, 2));
    /* clang-format off */
    const step_t restored[] = {
        {PUSH, 1, 1, 0, BUF_, {0}},
        {PUSH, 0, 1, 0, BUF_, {0}},
        {STEP, 0, 1, 2, 0, {0, 1}}, /* worker 2 is still evicted */
        {CKPT, 3, 2, 0, 0, {2, 2, 1}},
        E,
    };
    /* clang-format on */
    run(st, restored);
    zps_consistency_free(st);

    st = make(ZPS_MODE_SSP, 2, 2, 0);
    /* clang-format off */
    const step_t ssp[] = {
        {PUSH, 0, 0, 0, APPLY_, {0}},
        {PUSH, 0, 1, 0, APPLY_, {0}},
        {CKPT, 2, 2, 0, 0, {2, 0}}, /* recorded as it is: both pushes are applied */
        E,
    };
    /* clang-format on */
    run(st, ssp);
    zps_consistency_free(st);
}

/*
 * The checks a request meets before its payload is looked at, and that
 * push and pull make again themselves: who may send, and whether the model
 * exists yet. One wording for both.
 */
static void test_request_checks(void **state)
{
    (void)state;
    zps_consistency_config_t cfg = {ZPS_MODE_ASP, 3, 0, 0, 4, ZPS_LR_SCALING_NONE};
    zps_consistency_t *st;
    assert_int_equal(zps_consistency_new(&cfg, &st, NULL, 0), 0);
    static const struct {
        int64_t w;
        bool observer_ok;
        int expect;
    } table[] = {
        {0, false, 0},           {2, false, 0},
        {3, false, ZPS_EWORKER}, {-1, false, ZPS_EWORKER},
        {-1, true, 0},           {-2, true, ZPS_EWORKER},
        {3, true, ZPS_EWORKER},  {(int64_t)UINT32_MAX, false, ZPS_EWORKER},
    };
    char why[256];
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        why[0] = '\0';
        int rc =
            zps_consistency_check_worker(st, table[i].w, table[i].observer_ok, why, sizeof(why));
        if (rc != table[i].expect)
            fail_msg("worker %lld (observer ok %d): %s, expected %s", (long long)table[i].w,
                     table[i].observer_ok, zps_errname(rc), zps_errname(table[i].expect));
    }
    assert_int_equal(zps_consistency_check_worker(st, -1, false, why, sizeof(why)), ZPS_EWORKER);
    assert_string_equal(why, "worker -1 is not in [0, 3)");
    assert_int_equal(zps_consistency_check_worker(st, 5, true, why, sizeof(why)), ZPS_EWORKER);
    assert_string_equal(why, "worker 5 is not in [0, 3) (or -1 for an observer)");

    /* Before INIT: refused by the check and by the push alike, in the same words. */
    char why_push[256];
    zps_push_decision_t d;
    assert_false(zps_consistency_initialized(st));
    assert_int_equal(zps_consistency_check_push(st, 7, why, sizeof(why)), ZPS_ENOTINIT);
    assert_string_equal(why, "push at clock 7 before the model was initialised");
    assert_int_equal(zps_consistency_push(st, 0, 7, 0, &d, why_push, sizeof(why_push)),
                     ZPS_ENOTINIT);
    assert_string_equal(why_push, why);
    assert_int_equal(zps_consistency_push(st, 3, 0, 0, &d, why_push, sizeof(why_push)),
                     ZPS_EWORKER);
    assert_string_equal(why_push, "worker 3 is not in [0, 3)");
    zps_consistency_set_initialized(st);
    assert_true(zps_consistency_initialized(st));
    assert_int_equal(zps_consistency_check_push(st, 7, why, sizeof(why)), 0);
    assert_int_equal(zps_consistency_push(st, 0, 0, 0, &d, NULL, 0), 0);
    assert_int_equal(d.action, ZPS_PUSH_APPLY);
    zps_consistency_free(st);
}

static void test_config_errors(void **state)
{
    (void)state;
    zps_consistency_t *st = NULL;
    char why[128];
    zps_consistency_config_t bad[] = {
        {ZPS_MODE_BSP, 0, 0, 0, 4, ZPS_LR_SCALING_NONE},  /* no workers */
        {ZPS_MODE_BSP, 2, 0, 2, 4, ZPS_LR_SCALING_NONE},  /* B >= W */
        {ZPS_MODE_SSP, 2, 1, 1, 4, ZPS_LR_SCALING_NONE},  /* backups outside BSP */
        {ZPS_MODE_BSP, 2, 0, 0, 0, ZPS_LR_SCALING_NONE},  /* no room for pulls */
        {(zps_mode_t)7, 2, 0, 0, 4, ZPS_LR_SCALING_NONE}, /* unknown mode */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        assert_int_equal(zps_consistency_new(&bad[i], &st, why, sizeof(why)), ZPS_EINVAL);
        assert_true(strlen(why) > 0);
        char checked[128];
        assert_int_equal(zps_consistency_check_config(&bad[i], checked, sizeof(checked)),
                         ZPS_EINVAL);
        assert_string_equal(checked, why);
    }
    zps_mode_t m;
    assert_int_equal(zps_mode_parse("ssp", &m), 0);
    assert_int_equal(m, ZPS_MODE_SSP);
    assert_int_equal(zps_mode_parse("sync", &m), ZPS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bsp_four_workers),
        cmocka_unit_test(test_bsp_retry_and_gaps),
        cmocka_unit_test(test_ssp_bound),
        cmocka_unit_test(test_ssp_zero),
        cmocka_unit_test(test_asp),
        cmocka_unit_test(test_bsp_backup),
        cmocka_unit_test(test_bsp_backup_step_in_flight),
        cmocka_unit_test(test_bsp_evict_rejoin),
        cmocka_unit_test(test_bsp_evicted_buffered_push),
        cmocka_unit_test(test_bsp_refused_step),
        cmocka_unit_test(test_refused_push_on_arrival),
        cmocka_unit_test(test_ssp_evict_rejoin),
        cmocka_unit_test(test_observer_and_init),
        cmocka_unit_test(test_observe_clock),
        cmocka_unit_test(test_pending_bound),
        cmocka_unit_test(test_finish),
        cmocka_unit_test(test_update_staleness_asp_inverse),
        cmocka_unit_test(test_update_staleness_ssp_none),
        cmocka_unit_test(test_update_staleness_bsp),
        cmocka_unit_test(test_checkpoint_clocks),
        cmocka_unit_test(test_request_checks),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
