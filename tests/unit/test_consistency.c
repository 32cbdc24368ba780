/*
 * test_consistency.c - the consistency rules as tables of events and expected
 * answers, for every mode, without a socket in sight.
 *
 * Each script is a list of steps: an event (push, pull, evict, rejoin, step)
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
    PUSH,   /* a = worker, b = clock, expect = action or error */
    PULL,   /* a = worker, b = clock, c = token, expect = READY/QUEUED/DUP or error */
    READY,  /* tokens expected to come out of take_ready now (c = count, list in toks) */
    STEP,   /* a BSP step must be due for clock b with `c` ranks (list in toks); it is done */
    NOSTEP, /* no BSP step may be due */
    EVICT,  /* a = worker */
    REJOIN, /* a = worker, b = expected clock */
    VER,    /* b = expected version, c = expected min_clock */
    OBSERVE, /* an observer asks for the model of clock b, token c; expect as PULL */
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

static zps_consistency_t *make(zps_mode_t mode, uint32_t w, uint32_t s, uint32_t backup)
{
    zps_consistency_config_t cfg = {mode, w, s, backup, 4};
    zps_consistency_t *st = NULL;
    char why[128];
    assert_int_equal(zps_consistency_new(&cfg, &st, why, sizeof(why)), 0);
    zps_consistency_set_initialized(st);
    return st;
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
            int rc = zps_consistency_pull(st, s->a, s->b, (uint64_t)s->c, (uint64_t)s->c, &r, &existing,
                                    why, sizeof(why));
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
        case STEP: {
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
            zps_consistency_step_done(st);
            break;
        }
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
        case REJOIN:
            assert_int_equal(zps_consistency_rejoin(st, (uint32_t)s->a), s->b);
            break;
        case VER:
            if (zps_consistency_version(st) != s->b || zps_consistency_min_clock(st) != (uint64_t)s->c)
                fail_msg("%s: version %llu min_clock %llu, expected %llu and %d", where,
                         (unsigned long long)zps_consistency_version(st),
                         (unsigned long long)zps_consistency_min_clock(st), (unsigned long long)s->b,
                         s->c);
            break;
        case OBSERVE: {
            zps_pull_result_t r;
            uint64_t existing = 0;
            int rc = zps_consistency_observe(st, s->b, (uint64_t)s->c, (uint64_t)s->c, &r, &existing,
                                       why, sizeof(why));
            if (s->expect < 0 ? rc != s->expect : (rc != 0 || (int)r != s->expect))
                fail_msg("%s: observe t%llu: rc %s result %d, expected %d", where,
                         (unsigned long long)s->b, zps_errname(rc), rc ? -1 : (int)r, s->expect);
            if (r == ZPS_PULL_DUPLICATE && (int)existing != s->c)
                fail_msg("%s: observe t%llu: duplicate of token %llu", where,
                         (unsigned long long)s->b, (unsigned long long)existing);
            break;
        }
        case END:
            break;
        }
    }
}

#define E {END, 0, 0, 0, 0, {0}}

/* The worked example: four workers, one clock; every pull for clock 1 waits for the step. */
static void test_bsp_four_workers(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 4, 0, 0);
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
    run(st, script);
    zps_consistency_free(st);
}

/* Retries are acknowledged and not applied again; gaps are refused and change nothing. */
static void test_bsp_retry_and_gaps(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 2, 0, 0);
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
    run(st, script);
    zps_consistency_free(st);
}

/* SSP s=2, W=2: worker 0 may pull clocks 0, 1, 2 before worker 1 pushes
 * anything; its pull for clock 3 waits until worker 1 pushes clock 0. */
static void test_ssp_bound(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 2, 2, 0);
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
    run(st, script);
    zps_consistency_free(st);
}

/* SSP with s = 0 is BSP's pull rule with pushes applied one at a time. */
static void test_ssp_zero(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 3, 0, 0);
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
    run(st, script);
    zps_consistency_free(st);
}

static void test_asp(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_ASP, 2, 0, 0);
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
    run(st, script);
    zps_consistency_free(st);
}

/* BSP W=4 B=1: the step completes without the slowest worker, whose late push
 * is acknowledged as dropped and counted, and whose next pull is served. */
static void test_bsp_backup(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 4, 0, 1);
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
    run(st, script);
    zps_consistency_free(st);
}

static void test_ssp_evict_rejoin(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_SSP, 2, 0, 0);
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
    run(st, script);
    zps_consistency_free(st);
}

static void test_observer_and_init(void **state)
{
    (void)state;
    zps_consistency_config_t cfg = {ZPS_MODE_BSP, 2, 0, 0, 2};
    zps_consistency_t *st;
    assert_int_equal(zps_consistency_new(&cfg, &st, NULL, 0), 0);
    zps_push_decision_t d;
    assert_int_equal(zps_consistency_push(st, 0, 0, 0, &d, NULL, 0), ZPS_ENOTINIT);
    const step_t before[] = {
        {PULL, -1, 7, 1, Q_, {0}}, /* observers see the model at once, once it exists */
        {PULL, 0, 0, 2, Q_, {0}},
        {PULL, 0, 0, 2, DUP_, {0}},
        {PULL, -1, 0, 3, Q_, {0}},
        {PULL, -1, 0, 4, ZPS_EBUSY, {0}},
        {READY, 0, 0, 0, 0, {0}},
        E,
    };
    run(st, before);
    zps_consistency_set_initialized(st);
    const step_t after[] = {
        {READY, 0, 0, 3, 0, {1, 2, 3}},
        {PULL, -1, 99, 5, RDY_, {0}},
        E,
    };
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
    run(st, bsp);
    zps_consistency_free(st);

    /* SSP(2): worker 0 may run 2 clocks ahead of worker 1; the observer of
     * clock 2 waits until worker 1 has pushed clocks 0 and 1 too. */
    st = make(ZPS_MODE_SSP, 2, 2, 0);
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
    run(st, ssp);
    zps_consistency_free(st);

    st = make(ZPS_MODE_ASP, 2, 0, 0);
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
    run(st, asp);
    zps_consistency_free(st);
}

/* The waiting room is bounded per worker: a flood gets ZPS_EBUSY, not memory. */
static void test_pending_bound(void **state)
{
    (void)state;
    zps_consistency_t *st = make(ZPS_MODE_BSP, 2, 0, 0);
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
    run(st, script);
    uint64_t toks[4];
    assert_int_equal(zps_consistency_take_all(st, toks, 4), 0);
    zps_consistency_free(st);
}

static void test_config_errors(void **state)
{
    (void)state;
    zps_consistency_t *st = NULL;
    char why[128];
    zps_consistency_config_t bad[] = {
        {ZPS_MODE_BSP, 0, 0, 0, 4},  /* no workers */
        {ZPS_MODE_BSP, 2, 0, 2, 4},  /* B >= W */
        {ZPS_MODE_SSP, 2, 1, 1, 4},  /* backups outside BSP */
        {ZPS_MODE_BSP, 2, 0, 0, 0},  /* no room for pulls */
        {(zps_mode_t)7, 2, 0, 0, 4}, /* unknown mode */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        assert_int_equal(zps_consistency_new(&bad[i], &st, why, sizeof(why)), ZPS_EINVAL);
        assert_true(strlen(why) > 0);
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
        cmocka_unit_test(test_ssp_evict_rejoin),
        cmocka_unit_test(test_observer_and_init),
        cmocka_unit_test(test_observe_clock),
        cmocka_unit_test(test_pending_bound),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
