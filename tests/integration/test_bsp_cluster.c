/*
 * test_bsp_cluster.c - synchronous training through real zps-server
 * processes on 127.0.0.1, checked against arithmetic done in this file.
 *
 * Workers are threads, each with its own client and its own sockets, so
 * their pulls and pushes interleave as those of separate processes would.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "timeutil.h"

#define MAX_SHARDS 4

typedef struct cluster {
    harness_server_t srv[MAX_SHARDS];
    const char *eps[MAX_SHARDS];
    int shards;
} cluster_t;

/* Starts `shards` servers for `workers` workers with extra flags. */
static void cluster_start(cluster_t *c, int shards, int workers, const char *lr)
{
    memset(c, 0, sizeof(*c));
    c->shards = shards;
    char wbuf[16];
    snprintf(wbuf, sizeof(wbuf), "%d", workers);
    for (int i = 0; i < shards; i++) {
        char shard[32];
        snprintf(shard, sizeof(shard), "%d/%d", i, shards);
        const char *args[] = {"--workers", wbuf, "--shard", shard, "--lr", lr, NULL};
        assert_int_equal(harness_start(&c->srv[i], args), 0);
        c->eps[i] = c->srv[i].endpoint;
    }
}

static void cluster_stop(cluster_t *c)
{
    for (int i = 0; i < c->shards; i++)
        assert_int_equal(harness_stop(&c->srv[i]), 0);
}

static zps_client_t *client(cluster_t *c, int worker)
{
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = worker;
    o.timeout_ms = 20000;
    zps_client_t *cl = NULL;
    assert_int_equal(zps_client_new(c->eps, (size_t)c->shards, &o, &cl), 0);
    return cl;
}

/* ---- the worked example of DESIGN.md ---- */

typedef struct example_arg {
    cluster_t *c;
    int worker;
    uint64_t n;
    const float *grad; /* [n] */
    float *got;        /* [n] the pull for clock 1 */
    int rc;
} example_arg_t;

static void *example_worker(void *p)
{
    example_arg_t *a = p;
    zps_client_t *cl = client(a->c, a->worker);
    float *w = calloc(a->n, sizeof(float));
    a->rc = zps_client_pull(cl, 0, w, a->n, NULL);
    if (a->rc == 0)
        a->rc = zps_client_push(cl, 0, a->grad, a->n, 1, NULL);
    if (a->rc == 0)
        a->rc = zps_client_pull(cl, 1, a->got, a->n, NULL);
    if (a->rc)
        fprintf(stderr, "worker %d: %s\n", a->worker, zps_client_last_error(cl));
    free(w);
    zps_client_free(cl);
    return NULL;
}

/* Runs four workers with gradients g_w[i] = 2(w+1) * scale[i] on equal batches. */
static void run_example(cluster_t *c, uint64_t n, const float *init, const float *scale,
                        float got[4][16])
{
    zps_client_t *cl = client(c, 0);
    assert_int_equal(zps_client_init(cl, init, n), 0);
    zps_client_free(cl);

    float grads[4][16];
    pthread_t th[4];
    example_arg_t args[4];
    for (int w = 0; w < 4; w++) {
        for (uint64_t i = 0; i < n; i++)
            grads[w][i] = (float)(2 * (w + 1)) * scale[i];
        args[w] = (example_arg_t){c, w, n, grads[w], got[w], -1};
        pthread_create(&th[w], NULL, example_worker, &args[w]);
    }
    for (int w = 0; w < 4; w++) {
        pthread_join(th[w], NULL);
        assert_int_equal(args[w].rc, 0);
    }
}

static void test_worked_example_one_shard(void **state)
{
    (void)state;
    cluster_t c;
    cluster_start(&c, 1, 4, "0.1");
    float init[1] = {10.0f}, scale[1] = {1.0f}, got[4][16];
    run_example(&c, 1, init, scale, got);
    /* Not 8 (summing), not 9.8/9.6/9.4/9.2 (each worker alone): the mean. */
    for (int w = 0; w < 4; w++)
        assert_true(got[w][0] == 9.5f);
    cluster_stop(&c);
}

static void test_worked_example_two_shards(void **state)
{
    (void)state;
    cluster_t c;
    cluster_start(&c, 2, 4, "0.1");
    /* Seven elements split 3 + 4; element i starts at 10 + i, gradients scale with i + 1. */
    enum { N = 7 };
    float init[N], scale[N], got[4][16];
    for (int i = 0; i < N; i++) {
        init[i] = 10.0f + (float)i;
        scale[i] = (float)(i + 1);
    }
    run_example(&c, N, init, scale, got);
    for (int w = 0; w < 4; w++) {
        assert_true(got[w][0] == 9.5f);
        for (int i = 0; i < N; i++) {
            /* mean gradient 5(i+1); by hand in double */
            double want = 10.0 + i - 0.1 * 5.0 * (i + 1);
            assert_true(fabs(got[w][i] - want) <= 1e-5);
        }
    }
    cluster_stop(&c);
}

/* ---- many clocks, random gradients, unequal batches ---- */

enum { RW = 4, RN = 1001, RCLOCKS = 20 };

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The gradient of worker w at clock t, element i: deterministic, in [-1, 1). */
static float rgrad(int w, uint64_t t, uint64_t i)
{
    uint64_t r = mix(((uint64_t)w << 48) ^ (t << 24) ^ i);
    return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint32_t rbatch(int w, uint64_t t)
{
    return 1u + (uint32_t)(mix((uint64_t)w * 977 + t) % 64);
}

static float rinit(uint64_t i)
{
    return (float)((double)(mix(i + 12345) >> 11) / 9007199254740992.0) - 0.5f;
}

typedef struct ref_arg {
    cluster_t *c;
    int worker;
    float *seen; /* [RCLOCKS+1][RN]: what the pull for each clock returned */
    int rc;
} ref_arg_t;

static void *ref_worker(void *p)
{
    ref_arg_t *a = p;
    zps_client_t *cl = client(a->c, a->worker);
    float *g = malloc(RN * sizeof(float));
    for (uint64_t t = 0; t <= RCLOCKS && a->rc == 0; t++) {
        zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
        a->rc = zps_client_pull(cl, t, a->seen + t * RN, RN, &info);
        if (a->rc == 0 && (info.min_version != t || info.max_version != t)) {
            fprintf(stderr, "worker %d: pull for clock %llu answered at version %llu..%llu\n",
                    a->worker, (unsigned long long)t, (unsigned long long)info.min_version,
                    (unsigned long long)info.max_version);
            a->rc = -100;
        }
        if (a->rc || t == RCLOCKS)
            break;
        for (uint64_t i = 0; i < RN; i++)
            g[i] = rgrad(a->worker, t, i);
        a->rc = zps_client_push(cl, t, g, RN, rbatch(a->worker, t), NULL);
    }
    if (a->rc && a->rc != -100)
        fprintf(stderr, "worker %d: %s\n", a->worker, zps_client_last_error(cl));
    free(g);
    zps_client_free(cl);
    return NULL;
}

static void test_bsp_matches_reference(void **state)
{
    (void)state;
    cluster_t c;
    cluster_start(&c, 2, RW, "0.05");
    float *init = malloc(RN * sizeof(float));
    for (uint64_t i = 0; i < RN; i++)
        init[i] = rinit(i);
    zps_client_t *cl = client(&c, 0);
    assert_int_equal(zps_client_init(cl, init, RN), 0);
    zps_client_free(cl);

    pthread_t th[RW];
    ref_arg_t args[RW];
    for (int w = 0; w < RW; w++) {
        args[w] = (ref_arg_t){&c, w, malloc((RCLOCKS + 1) * RN * sizeof(float)), 0};
        pthread_create(&th[w], NULL, ref_worker, &args[w]);
    }
    for (int w = 0; w < RW; w++)
        pthread_join(th[w], NULL);
    for (int w = 0; w < RW; w++)
        assert_int_equal(args[w].rc, 0);

    /* The reference: one process, the DESIGN.md rule in float32 --
     * acc = sum over ranks in order of n_w * g_w, mean = acc / sum n_w,
     * p = p - lr * mean -- and beside it the same in float64. */
    float *p = malloc(RN * sizeof(float));
    double *p64 = malloc(RN * sizeof(double));
    memcpy(p, init, RN * sizeof(float));
    for (uint64_t i = 0; i < RN; i++)
        p64[i] = init[i];
    const float lr = 0.05f;
    for (uint64_t t = 0; t <= RCLOCKS; t++) {
        for (int w = 0; w < RW; w++)
            if (memcmp(args[w].seen + t * RN, p, RN * sizeof(float)) != 0)
                fail_msg("worker %d's pull for clock %llu differs from the reference", w,
                         (unsigned long long)t);
        if (t == RCLOCKS)
            break;
        uint64_t total = 0;
        for (int w = 0; w < RW; w++)
            total += rbatch(w, t);
        for (uint64_t i = 0; i < RN; i++) {
            float acc = (float)rbatch(0, t) * rgrad(0, t, i);
            double acc64 = (double)rbatch(0, t) * rgrad(0, t, i);
            for (int w = 1; w < RW; w++) {
                float term = (float)rbatch(w, t) * rgrad(w, t, i);
                acc = acc + term;
                acc64 += (double)rbatch(w, t) * rgrad(w, t, i);
            }
            float mean = acc / (float)total;
            float delta = lr * mean;
            p[i] = p[i] - delta;
            p64[i] -= 0.05 * (acc64 / (double)total);
        }
    }
    for (uint64_t i = 0; i < RN; i++)
        assert_true(fabs(p[i] - p64[i]) < 1e-5);

    for (int w = 0; w < RW; w++)
        free(args[w].seen);
    free(p);
    free(p64);
    free(init);
    cluster_stop(&c);
}

/* ---- a pull for clock t+1 waits for the last push of clock t ---- */

typedef struct block_arg {
    cluster_t *c;
    atomic_int done;
    float got;
    int rc;
} block_arg_t;

static void *blocked_pull(void *p)
{
    block_arg_t *a = p;
    zps_client_t *cl = client(a->c, 0);
    a->rc = zps_client_pull(cl, 1, &a->got, 1, NULL);
    atomic_store(&a->done, 1);
    zps_client_free(cl);
    return NULL;
}

static void test_pull_blocks_until_last_push(void **state)
{
    (void)state;
    cluster_t c;
    cluster_start(&c, 1, 3, "0.5");
    zps_client_t *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = client(&c, i);
    float init = 1.0f;
    assert_int_equal(zps_client_init(w[0], &init, 1), 0);
    float g0 = 1.0f, g1 = 2.0f, g2 = 6.0f;
    assert_int_equal(zps_client_push(w[0], 0, &g0, 1, 1, NULL), 0);
    assert_int_equal(zps_client_push(w[1], 0, &g1, 1, 1, NULL), 0);

    block_arg_t a = {&c, 0, 0.0f, -1};
    pthread_t th;
    pthread_create(&th, NULL, blocked_pull, &a);
    zps_sleep_ms(400);
    assert_int_equal(atomic_load(&a.done), 0); /* still waiting for worker 2 */

    assert_int_equal(zps_client_push(w[2], 0, &g2, 1, 1, NULL), 0);
    pthread_join(th, NULL);
    assert_int_equal(a.rc, 0);
    /* 1 - 0.5 * (1 + 2 + 6) / 3 = -0.5 */
    assert_true(a.got == -0.5f);
    for (int i = 0; i < 3; i++)
        zps_client_free(w[i]);
    cluster_stop(&c);
}

/* ---- retries and gaps ---- */

static void test_retry_and_gap(void **state)
{
    (void)state;
    cluster_t c;
    cluster_start(&c, 2, 2, "1");
    zps_client_t *w0 = client(&c, 0), *w1 = client(&c, 1);
    float init[3] = {0, 0, 0};
    assert_int_equal(zps_client_init(w0, init, 3), 0);
    /* A second identical INIT is acknowledged; one of another size is refused. */
    assert_int_equal(zps_client_init(w1, init, 3), 0);
    float other[4] = {0};
    assert_int_equal(zps_client_init(w1, other, 4), ZPS_EREMOTE);
    assert_int_equal(zps_client_last_remote_status(w1), ZPS_ESIZE);

    float g[3] = {1, 2, 3}, bogus[3] = {100, 100, 100};
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_push(w0, 0, g, 3, 1, &info), 0);
    assert_true(info.buffered);
    assert_int_equal(zps_client_push(w0, 0, bogus, 3, 1, &info), 0);
    assert_true(info.retried);
    assert_int_equal(zps_client_push(w0, 2, g, 3, 1, &info), ZPS_EREMOTE);
    assert_int_equal(zps_client_last_remote_status(w0), ZPS_ECLOCK);

    assert_int_equal(zps_client_push(w1, 0, g, 3, 1, &info), 0);
    float got[3];
    assert_int_equal(zps_client_pull(w1, 1, got, 3, &info), 0);
    assert_int_equal(info.min_version, 1);
    for (int i = 0; i < 3; i++)
        assert_true(got[i] == -g[i]); /* one step, lr 1, mean of equal gradients */
    /* A retry after the step still changes nothing. */
    assert_int_equal(zps_client_push(w1, 0, bogus, 3, 1, &info), 0);
    assert_true(info.retried);
    assert_int_equal(zps_client_pull(w0, 1, got, 3, &info), 0);
    for (int i = 0; i < 3; i++)
        assert_true(got[i] == -g[i]);
    zps_client_free(w0);
    zps_client_free(w1);
    cluster_stop(&c);
}

/* Servers listed in the wrong order: both sides refuse, loudly. */
static void test_wrong_shard_order(void **state)
{
    (void)state;
    cluster_t c;
    cluster_start(&c, 2, 1, "0.1");
    const char *swapped[2] = {c.eps[1], c.eps[0]};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = 0;
    o.timeout_ms = 5000;
    zps_client_t *cl;
    assert_int_equal(zps_client_new(swapped, 2, &o, &cl), 0);
    float v[5] = {1, 2, 3, 4, 5};
    assert_int_equal(zps_client_init(cl, v, 5), ZPS_EREMOTE);
    assert_int_equal(zps_client_last_remote_status(cl), ZPS_ERANGE);
    assert_non_null(strstr(zps_client_last_error(cl), "shard"));
    zps_client_free(cl);
    cluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example_one_shard),
        cmocka_unit_test(test_worked_example_two_shards),
        cmocka_unit_test(test_bsp_matches_reference),
        cmocka_unit_test(test_pull_blocks_until_last_push),
        cmocka_unit_test(test_retry_and_gap),
        cmocka_unit_test(test_wrong_shard_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
