/*
 * test_assign.c - the shared data assignment (consistency/assign.h): the
 * plan's arithmetic, the order batches go out in, the leases a worker
 * loses and the ones it names wrongly, and exactly-once completion under a
 * long random run of restarts, lost replies, evictions and retries, checked
 * against a record of every lease kept here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "assign.h"
#include "error.h"

static zps_assign_t *make(uint32_t workers, uint64_t n, uint32_t b, uint32_t epochs)
{
    zps_assign_t *a = NULL;
    assert_int_equal(zps_assign_new(workers, &a), 0);
    zps_assign_plan_t p = {n, b, epochs};
    assert_int_equal(zps_assign_set_plan(a, &p, NULL, 0), 0);
    return a;
}

/* N = 10, b = 3, E = 2: B = 4 batches of 3, 3, 3 and 1 examples, 8 in the run. */
static void test_plan(void **state)
{
    (void)state;
    zps_assign_t *a = make(2, 10, 3, 2);
    assert_int_equal(zps_assign_batches_per_epoch(a), 4);
    assert_int_equal(zps_assign_batches(a), 8);
    const uint32_t sizes[] = {3, 3, 3, 1, 3, 3, 3, 1};
    for (uint64_t g = 0; g < 8; g++)
        assert_int_equal(zps_assign_batch_size(a, g), sizes[g]);
    assert_int_equal(zps_assign_batch_size(a, 8), 0);
    /* Another worker's plan must be the same. */
    zps_assign_plan_t same = {10, 3, 2}, other = {10, 4, 2}, zero = {0, 3, 2};
    char why[256] = "";
    assert_int_equal(zps_assign_set_plan(a, &same, why, sizeof(why)), 0);
    assert_int_equal(zps_assign_set_plan(a, &other, why, sizeof(why)), ZPS_ECONFIG);
    assert_non_null(strstr(why, "batches of 4"));
    zps_assign_free(a);

    zps_assign_t *b = NULL;
    assert_int_equal(zps_assign_new(1, &b), 0);
    assert_false(zps_assign_has_plan(b));
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool ex = true;
    assert_int_equal(zps_assign_lease(b, 0, NULL, 0, 3, out, &ex), 0);
    assert_false(ex); /* no plan: nothing known, nothing exhausted */
    assert_int_equal(zps_assign_set_plan(b, &zero, why, sizeof(why)), ZPS_EINVAL);
    zps_assign_plan_t huge = {UINT64_C(1) << 40, 1, 2};
    assert_int_equal(zps_assign_set_plan(b, &huge, why, sizeof(why)), ZPS_EINVAL);
    zps_assign_free(b);
    assert_int_equal(zps_assign_new(0, &b), ZPS_EINVAL);
}

/* In the run's order, to whoever asks; a completed batch leaves the worker's leases. */
static void test_order(void **state)
{
    (void)state;
    zps_assign_t *a = make(2, 10, 3, 2);
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool ex;
    bool first;
    assert_int_equal(zps_assign_lease(a, 0, NULL, 0, 2, out, &ex), 2);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    assert_int_equal(zps_assign_lease(a, 1, NULL, 0, 2, out, &ex), 2);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 3);
    assert_int_equal(zps_assign_complete(a, 0, 0, 3, &first, NULL, 0), 0);
    assert_true(first);
    uint64_t have0[] = {1};
    assert_int_equal(zps_assign_lease(a, 0, have0, 1, 2, out, &ex), 2);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 4);
    assert_false(ex);
    /* The same request again changes nothing. */
    uint64_t have0b[] = {1, 4};
    assert_int_equal(zps_assign_lease(a, 0, have0b, 2, 2, out, &ex), 2);
    assert_int_equal(zps_assign_next(a), 5);
    /* More than ZPS_ASSIGN_MAX_HELD is ZPS_ASSIGN_MAX_HELD: 1, 4, then 5, 6, 7. */
    assert_int_equal(zps_assign_lease(a, 0, have0b, 2, 100, out, &ex), 5);
    assert_int_equal(out[4], 7);
    assert_true(ex);
    zps_assign_free(a);
}

/* Completions: the size checked, a retry a no-op, another's batch refused. */
static void test_complete(void **state)
{
    (void)state;
    zps_assign_t *a = make(2, 10, 3, 1);
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool ex, first;
    char why[256] = "";
    assert_int_equal(zps_assign_lease(a, 0, NULL, 0, 4, out, &ex), 4);
    assert_int_equal(zps_assign_complete(a, 0, 3, 3, &first, why, sizeof(why)), ZPS_EINVAL);
    assert_non_null(strstr(why, "holds 1 examples"));
    assert_int_equal(zps_assign_complete(a, 1, 3, 1, &first, why, sizeof(why)), ZPS_EINVAL);
    assert_non_null(strstr(why, "not leased to worker 1"));
    assert_int_equal(zps_assign_complete(a, 0, 4, 1, &first, why, sizeof(why)), ZPS_EINVAL);
    assert_int_equal(zps_assign_completed(a), 0);
    assert_int_equal(zps_assign_held(a, 0), 4);
    assert_int_equal(zps_assign_complete(a, 0, 3, 1, &first, NULL, 0), 0);
    assert_true(first);
    assert_int_equal(zps_assign_complete(a, 0, 3, 1, &first, NULL, 0), 0);
    assert_false(first);
    assert_int_equal(zps_assign_completed(a), 1);
    assert_int_equal(zps_assign_epoch_examples(a, 0), 1);
    assert_int_equal(zps_assign_held(a, 0), 3);
    zps_assign_free(a);
}

/*
 * A restarted worker names no lease: its leases go back, ahead of the
 * batches never handed out, and the next worker to ask gets them. A worker
 * that names a lease that is not its own does not get it.
 */
static void test_given_back(void **state)
{
    (void)state;
    zps_assign_t *a = make(2, 30, 3, 1); /* 10 batches */
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool ex, first;
    assert_int_equal(zps_assign_lease(a, 0, NULL, 0, 3, out, &ex), 3); /* 0 1 2 */
    assert_int_equal(zps_assign_lease(a, 1, NULL, 0, 3, out, &ex), 3); /* 3 4 5 */
    /* Worker 1 restarted: it has nothing. Asking for nothing, it gets nothing. */
    assert_int_equal(zps_assign_lease(a, 1, NULL, 0, 0, out, &ex), 0);
    assert_int_equal(zps_assign_queued(a), 3);
    /* Worker 0 completes 0 and asks for 3 more: 3 and 4 come back first. */
    assert_int_equal(zps_assign_complete(a, 0, 0, 3, &first, NULL, 0), 0);
    uint64_t have[] = {1, 2};
    assert_int_equal(zps_assign_lease(a, 0, have, 2, 4, out, &ex), 4);
    assert_int_equal(out[2], 3);
    assert_int_equal(out[3], 4);
    /* Worker 1 names 5 (it is queued, not its) and 1 (worker 0's): neither is kept. */
    uint64_t wrong[] = {5, 1};
    assert_int_equal(zps_assign_lease(a, 1, wrong, 2, 2, out, &ex), 2);
    assert_int_equal(out[0], 5);
    assert_int_equal(out[1], 6);
    assert_int_equal(zps_assign_complete(a, 1, 1, 3, &first, NULL, 0), ZPS_EINVAL);
    /* Evicted: worker 0's leases go back in the run's order. */
    zps_assign_release(a, 0);
    assert_int_equal(zps_assign_held(a, 0), 0);
    assert_int_equal(zps_assign_queued(a), 4);
    uint64_t have1[] = {5, 6};
    assert_int_equal(zps_assign_lease(a, 1, have1, 2, 6, out, &ex), 6);
    const uint64_t want[] = {5, 6, 1, 2, 3, 4};
    assert_memory_equal(out, want, sizeof(want));
    zps_assign_free(a);
}

/* ---- a long random run ---- */

enum { RW = 5, RN = 4999, RB = 7, RE = 3 };

typedef struct sim_worker {
    uint64_t have[ZPS_ASSIGN_MAX_HELD]; /* what the worker believes it holds, oldest first */
    size_t nhave;
    uint32_t speed; /* rounds per batch */
    uint32_t busy;
} sim_worker_t;

static unsigned long long rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/*
 * Workers of different speeds complete their oldest lease when their
 * computation ends and ask for up to 3; now and then one restarts (forgets
 * every lease), loses a reply (keeps its previous list), is evicted, or
 * retries a completion. Every reply's leases must be disjoint from every
 * other worker's as the shard has them, each batch completed exactly once,
 * each epoch all N examples; the fast workers take more.
 */
static void test_random_run(void **state)
{
    (void)state;
    zps_assign_t *a = make(RW, RN, RB, RE);
    const uint64_t total = zps_assign_batches(a);
    uint32_t *completions = calloc(total, sizeof(uint32_t));
    uint8_t *owner = calloc(total, sizeof(uint8_t));
    uint64_t done_by[RW] = {0};
    assert_non_null(completions);
    assert_non_null(owner);
    sim_worker_t w[RW];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < RW; i++)
        w[i].speed = i == RW - 1 ? 8 : 2; /* the last is 4x slower */
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool ex = false;
    size_t rounds = 0, restarts = 0, evictions = 0, retries = 0, refused = 0, lost = 0;
    size_t given_back = 0; /* the most leases queued at once */
    for (; rounds < 200000 && zps_assign_completed(a) < total; rounds++) {
        int i = (int)rnd(RW);
        sim_worker_t *s = &w[i];
        uint32_t ev = rnd(1000);
        if (ev < 3) { /* restarted */
            s->nhave = 0;
            restarts++;
        } else if (ev < 5) { /* evicted, then back with its list */
            zps_assign_release(a, (uint32_t)i);
            evictions++;
        }
        if (s->busy > 0) {
            s->busy--;
            continue;
        }
        if (s->nhave > 0) {
            uint64_t g = s->have[0];
            bool first;
            int rc = zps_assign_complete(a, (uint32_t)i, g, zps_assign_batch_size(a, g), &first,
                                         NULL, 0);
            /* A lease lost to an eviction may have gone to another worker. */
            if (rc == 0 && first) {
                completions[g]++;
                done_by[i]++;
            } else {
                refused += rc != 0;
            }
            if (rc == 0 && rnd(10) == 0) { /* a retry of the same push */
                retries++;
                assert_int_equal(zps_assign_complete(a, (uint32_t)i, g, zps_assign_batch_size(a, g),
                                                     &first, NULL, 0),
                                 0);
                assert_false(first);
            }
            memmove(s->have, s->have + 1, (s->nhave - 1) * sizeof(uint64_t));
            s->nhave--;
        }
        size_t n = zps_assign_lease(a, (uint32_t)i, s->have, s->nhave, 3, out, &ex);
        assert_true(n <= 3);
        if (rnd(100) != 0) { /* else the reply is lost: the worker keeps its list */
            memcpy(s->have, out, n * sizeof(uint64_t));
            s->nhave = n;
        } else {
            lost++;
        }
        given_back = zps_assign_queued(a) > given_back ? zps_assign_queued(a) : given_back;
        /* No batch is two workers' lease at once, and none of them is complete. */
        memset(owner, 0, total * sizeof(uint8_t));
        for (int j = 0; j < RW; j++) {
            uint64_t l[ZPS_ASSIGN_MAX_HELD];
            size_t m = zps_assign_leases_of(a, (uint32_t)j, l);
            for (size_t k = 0; k < m; k++) {
                assert_false(zps_assign_is_complete(a, l[k]));
                assert_int_equal(owner[l[k]], 0);
                owner[l[k]] = 1;
            }
        }
        s->busy = s->speed - 1;
    }
    assert_true(rounds < 200000);
    print_message("%zu rounds: %zu restarts, %zu evictions, %zu lost replies, %zu retries, "
                  "%zu completions refused, up to %zu leases queued; the slow worker took %llu "
                  "of %llu batches\n",
                  rounds, restarts, evictions, lost, retries, refused, given_back,
                  (unsigned long long)done_by[RW - 1], (unsigned long long)total);
    /* Every kind of event happened, so the checks below mean something. */
    assert_true(restarts > 0 && evictions > 0 && lost > 0 && retries > 0 && refused > 0);
    assert_true(given_back > 0);
    assert_int_equal(zps_assign_completed(a), total);
    assert_true(ex);
    for (uint64_t g = 0; g < total; g++)
        assert_int_equal(completions[g], 1);
    for (uint32_t e = 0; e < RE; e++) {
        assert_int_equal(zps_assign_epoch_examples(a, e), RN);
        assert_int_equal(zps_assign_epoch_batches(a, e), zps_assign_batches_per_epoch(a));
    }
    /* The slow worker took fewer than half as many as any fast one. */
    for (int i = 0; i < RW - 1; i++)
        assert_true(2 * done_by[RW - 1] < done_by[i]);
    free(completions);
    free(owner);
    zps_assign_free(a);
}

/* ---- checkpoints ---- */

/* Drives a through a few requests: two workers, one restart. */
static void some_history(zps_assign_t *a)
{
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool ex, first;
    assert_int_equal(zps_assign_lease(a, 0, NULL, 0, 3, out, &ex), 3); /* 0 1 2 */
    assert_int_equal(zps_assign_lease(a, 1, NULL, 0, 2, out, &ex), 2); /* 3 4 */
    assert_int_equal(zps_assign_complete(a, 0, 0, 3, &first, NULL, 0), 0);
    assert_int_equal(zps_assign_complete(a, 1, 3, 3, &first, NULL, 0), 0);
    uint64_t have1[] = {4};
    assert_int_equal(zps_assign_lease(a, 1, have1, 1, 3, out, &ex), 3); /* 4 5 6 */
    /* Worker 0 restarted: 1 and 2 go back, worker 1 gets 1. */
    assert_int_equal(zps_assign_lease(a, 0, NULL, 0, 0, out, &ex), 0);
    uint64_t have1b[] = {4, 5, 6};
    assert_int_equal(zps_assign_lease(a, 1, have1b, 3, 4, out, &ex), 4); /* 4 5 6 1 */
}

/* A restored assignment continues exactly as the one it was taken from. */
static void test_snapshot_restore(void **state)
{
    (void)state;
    zps_assign_t *a = make(2, 30, 3, 2); /* 10 batches an epoch, 20 */
    some_history(a);
    zps_assign_state_t st;
    assert_int_equal(zps_assign_snapshot(a, &st), 0);
    assert_int_equal(st.nqueue, 1); /* batch 2 */
    zps_assign_t *b = NULL;
    assert_int_equal(zps_assign_new(2, &b), 0);
    char why[256] = "";
    assert_int_equal(zps_assign_restore(b, &st, why, sizeof(why)), 0);
    assert_int_equal(zps_assign_completed(b), 2);
    assert_int_equal(zps_assign_epoch_examples(b, 0), 6);
    assert_int_equal(zps_assign_next(b), zps_assign_next(a));
    uint64_t oa[ZPS_ASSIGN_MAX_HELD], ob[ZPS_ASSIGN_MAX_HELD];
    bool ea, eb;
    for (int round = 0; round < 12; round++) {
        uint32_t w = (uint32_t)round % 2;
        uint64_t have[ZPS_ASSIGN_MAX_HELD];
        size_t nh = zps_assign_leases_of(a, w, have);
        bool fa = false, fb = false;
        if (nh > 0) {
            uint32_t n = zps_assign_batch_size(a, have[0]);
            assert_int_equal(zps_assign_complete(a, w, have[0], n, &fa, NULL, 0), 0);
            assert_int_equal(zps_assign_complete(b, w, have[0], n, &fb, NULL, 0), 0);
            assert_true(fa && fb);
            memmove(have, have + 1, (nh - 1) * sizeof(uint64_t));
            nh--;
        }
        size_t na = zps_assign_lease(a, w, have, nh, 3, oa, &ea);
        size_t nb = zps_assign_lease(b, w, have, nh, 3, ob, &eb);
        assert_int_equal(na, nb);
        assert_memory_equal(oa, ob, na * sizeof(uint64_t));
        assert_int_equal(ea, eb);
    }
    zps_assign_state_fini(&st);
    zps_assign_free(a);
    zps_assign_free(b);
}

/*
 * A shard resumed from a checkpoint taken earlier: a worker that went on
 * meanwhile names leases the restored shard never gave it; they are left
 * out, the restored ones it does not name go back, and nothing completed
 * after the checkpoint counts.
 */
static void test_resumed_earlier(void **state)
{
    (void)state;
    zps_assign_t *a = make(2, 30, 3, 1);
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool ex, first;
    assert_int_equal(zps_assign_lease(a, 0, NULL, 0, 2, out, &ex), 2); /* 0 1 */
    zps_assign_state_t st;
    assert_int_equal(zps_assign_snapshot(a, &st), 0);
    /* After the checkpoint: 0 completed, 2 and 3 leased. */
    assert_int_equal(zps_assign_complete(a, 0, 0, 3, &first, NULL, 0), 0);
    uint64_t h[] = {1};
    assert_int_equal(zps_assign_lease(a, 0, h, 1, 3, out, &ex), 3); /* 1 2 3 */
    zps_assign_t *b = NULL;
    assert_int_equal(zps_assign_new(2, &b), 0);
    assert_int_equal(zps_assign_restore(b, &st, NULL, 0), 0);
    assert_false(zps_assign_is_complete(b, 0));
    /* The worker names 1, 2, 3 (it computed 0 after the checkpoint). */
    uint64_t have[] = {1, 2, 3};
    size_t n = zps_assign_lease(b, 0, have, 3, 3, out, &ex);
    /* 0 went back and comes out again; 1 is kept; 2 and 3 were never its here. */
    assert_int_equal(n, 3);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 0);
    assert_int_equal(out[2], 2);
    assert_int_equal(zps_assign_complete(b, 0, 3, 3, &first, NULL, 0), ZPS_EINVAL);
    zps_assign_state_fini(&st);
    zps_assign_free(a);
    zps_assign_free(b);
}

/* States no run reaches are refused, each with its reason, and change nothing. */
static void test_restore_refuses(void **state)
{
    (void)state;
    zps_assign_t *a = make(2, 30, 3, 2);
    some_history(a); /* next 7; complete 0, 3; queue {2}; held 0: {}, 1: {4 5 6 1} */
    zps_assign_state_t good;
    assert_int_equal(zps_assign_snapshot(a, &good), 0);
    struct {
        int kind;
        uint64_t value;
        const char *msg;
    } cases[] = {
        {0, 21, "next batch 21 is past the run's 20"},
        {1, 9, "lease of batch 9, which was never handed out"},
        {1, 0, "lease of batch 0, which is complete"},
        {1, 4, "batch 4 is leased twice"},
        {2, 8, "batch 8 is complete but was never handed out"},
        {2, 21, "completion bits past the run's end"},
        {3, 9, "worker 1 holds 9 leases, at most 8"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        zps_assign_state_t s;
        assert_int_equal(zps_assign_snapshot(a, &s), 0);
        switch (cases[k].kind) {
        case 0:
            s.next = cases[k].value;
            break;
        case 1:
            s.queue[0] = cases[k].value;
            break;
        case 2:
            s.done[cases[k].value / 8] |= (uint8_t)(1u << (cases[k].value % 8));
            break;
        default:
            s.nheld[1] = (uint32_t)cases[k].value;
            break;
        }
        zps_assign_t *b = NULL;
        assert_int_equal(zps_assign_new(2, &b), 0);
        char why[256] = "";
        assert_int_equal(zps_assign_restore(b, &s, why, sizeof(why)), ZPS_ECORRUPT);
        if (!strstr(why, cases[k].msg))
            fail_msg("case %zu: '%s', expected '%s'", k, why, cases[k].msg);
        assert_false(zps_assign_has_plan(b));
        zps_assign_free(b);
        zps_assign_state_fini(&s);
    }
    zps_assign_t *three = NULL;
    assert_int_equal(zps_assign_new(3, &three), 0);
    char why[256] = "";
    assert_int_equal(zps_assign_restore(three, &good, why, sizeof(why)), ZPS_ECORRUPT);
    assert_non_null(strstr(why, "for 2 workers; this server has 3"));
    zps_assign_free(three);
    zps_assign_state_fini(&good);
    zps_assign_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_complete),
        cmocka_unit_test(test_given_back),
        cmocka_unit_test(test_random_run),
        cmocka_unit_test(test_snapshot_restore),
        cmocka_unit_test(test_resumed_earlier),
        cmocka_unit_test(test_restore_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
