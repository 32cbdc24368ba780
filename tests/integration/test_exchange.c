/*
 * test_exchange.c - one exchange per clock (zps_client_exchange) through
 * real zps-server processes on 127.0.0.1, checked against arithmetic done
 * here:
 *   - BSP, two shards, two workers: each worker's exchange of clock 0 is
 *     answered only once the other has pushed, with the parameters of
 *     clock 1 = w0 - lr * mean(g) computed by hand, and the push's outcome;
 *     the server held it (waited_us) while it waited;
 *   - the same exchange sent again changes nothing: a retry, the same
 *     parameters, the same version;
 *   - ASP: an exchange is answered at once with the parameters after its
 *     own push;
 *   - an exchange waiting on the barrier when its server stops is answered
 *     with an error that says its push was taken (TAKEN), and the client
 *     reports the push taken;
 *   - the STATS counters count exchanges;
 *   - bfloat16 on the wire: the server applies the gradient as rounded here
 *     (with the client's error feedback), keeps float32 parameters, and
 *     replies with them rounded to bfloat16;
 *   - a staged exchange (zps_client_exchange_begin/ready/end): a shard's
 *     request leaves once its slice is declared final, before the rest is
 *     (its server has the push while the other has nothing); the result is
 *     the plain exchange's, by hand; other calls are refused meanwhile; a
 *     non-finite slice after one was sent is ZPS_EPARTIAL naming who took
 *     it, repeated with a finite gradient it completes;
 *   - a model whose shards' payloads travel in several frames each
 *     (wire.h): three clocks of exchanges by two workers equal the
 *     arithmetic done here, bit for bit, and the servers stay within their
 *     stated memory bound.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
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

#define N 10 /* elements; shard 0 holds [0, 5), shard 1 [5, 10) */

static void start(harness_server_t *srv, int shards, const char *mode, const char *workers)
{
    for (int i = 0; i < shards; i++) {
        char shard[32];
        snprintf(shard, sizeof(shard), "%d/%d", i, shards);
        const char *args[] = {"--workers", workers, "--shard",     shard,  "--mode", mode,
                              "--lr",      "0.5",   "--log-level", "warn", NULL};
        assert_int_equal(harness_start(&srv[i], args), 0);
    }
}

static zps_client_t *client(harness_server_t *srv, int shards, int worker)
{
    const char *eps[2];
    for (int i = 0; i < shards; i++)
        eps[i] = srv[i].endpoint;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = worker;
    o.timeout_ms = 20000;
    zps_client_t *c = NULL;
    assert_int_equal(zps_client_new(eps, (size_t)shards, &o, &c), 0);
    return c;
}

static const float w0[N] = {1, 2, 3, 4, 5, -1, -2, -3, -4, -5};

static void grad_of(int worker, float *g)
{
    for (int i = 0; i < N; i++)
        g[i] = (float)(worker + 1) * 0.25f * (float)(i + 1); /* exact in float32 */
}

typedef struct arg {
    harness_server_t *srv;
    int worker;
    float got[N];
    zps_reply_info_t info;
    int rc;
    double ms;
} arg_t;

static void *exchange_worker(void *p)
{
    arg_t *a = p;
    zps_client_t *c = client(a->srv, 2, a->worker);
    float w[N], g[N];
    a->rc = zps_client_pull(c, 0, w, N, NULL);
    grad_of(a->worker, g);
    /* Worker 1 comes late: worker 0's exchange must wait for it. */
    if (a->rc == 0 && a->worker == 1)
        zps_sleep_ms(300);
    uint64_t t0 = zps_now_ns();
    if (a->rc == 0)
        a->rc = zps_client_exchange(c, 0, g, N, 1, a->got, &a->info);
    a->ms = (double)(zps_now_ns() - t0) / 1e6;
    if (a->rc)
        fprintf(stderr, "worker %d: %s\n", a->worker, zps_client_last_error(c));
    zps_client_free(c);
    return NULL;
}

static void test_bsp_exchange(void **state)
{
    (void)state;
    harness_server_t srv[2];
    start(srv, 2, "bsp", "2");
    zps_client_t *c = client(srv, 2, 0);
    assert_int_equal(zps_client_init(c, w0, N), 0);
    zps_client_free(c);

    pthread_t th[2];
    arg_t args[2];
    for (int w = 0; w < 2; w++) {
        args[w] = (arg_t){.srv = srv, .worker = w, .info = ZPS_REPLY_INFO_INIT, .rc = -1};
        pthread_create(&th[w], NULL, exchange_worker, &args[w]);
    }
    for (int w = 0; w < 2; w++) {
        pthread_join(th[w], NULL);
        assert_int_equal(args[w].rc, 0);
    }
    /* w1 = w0 - 0.5 * (g0 + g1) / 2, by hand: g0 + g1 = 0.75 (i + 1). */
    for (int w = 0; w < 2; w++) {
        for (int i = 0; i < N; i++) {
            float want = w0[i] - 0.5f * (0.75f * (float)(i + 1) / 2.0f);
            if (args[w].got[i] != want)
                fail_msg("worker %d element %d: %.9g, expected %.9g", w, i, (double)args[w].got[i],
                         (double)want);
        }
        assert_int_equal(args[w].info.min_version, 1);
        assert_int_equal(args[w].info.next_clock, 1);
        assert_false(args[w].info.retried);
    }
    /* Worker 0 waited for worker 1 at the server, and it says so. */
    assert_true(args[0].ms >= 250.0);
    assert_true(args[0].info.waited_us >= 200000);
    assert_true((double)args[0].info.waited_us / 1000.0 <= args[0].ms + 1.0);
    /* The first to push was buffered; the last one's push took the step. */
    assert_true(args[0].info.buffered);

    /* Sent again: a retry, the same model, nothing applied twice. */
    c = client(srv, 2, 0);
    float g[N], again[N];
    grad_of(0, g);
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_exchange(c, 0, g, N, 1, again, &info), 0);
    assert_true(info.retried);
    assert_int_equal(info.min_version, 1);
    assert_memory_equal(again, args[0].got, sizeof(again));
    char *json = NULL;
    assert_int_equal(zps_client_stats(c, 0, &json), 0);
    assert_non_null(strstr(json, "\"exchanges\":3"));
    assert_non_null(strstr(json, "\"applied\":0")); /* BSP: steps, not pushes applied */
    assert_non_null(strstr(json, "\"steps\":1"));
    if (harness_shm()) {
        /* The twin over shared memory: both workers' exchanges went through
         * it (their pulls asked for the sessions). */
        const char *shm = strstr(json, "\"shm\":{");
        assert_non_null(shm);
        assert_non_null(strstr(shm, "\"pushes\":2,"));
    }
    free(json);
    zps_client_free(c);
    for (int i = 0; i < 2; i++)
        assert_int_equal(harness_stop(&srv[i]), 0);
}

static void test_asp_exchange(void **state)
{
    (void)state;
    harness_server_t srv[2];
    start(srv, 2, "asp", "2");
    zps_client_t *c = client(srv, 2, 0);
    assert_int_equal(zps_client_init(c, w0, N), 0);
    float w[N], g[N], got[N];
    assert_int_equal(zps_client_pull(c, 0, w, N, NULL), 0);
    grad_of(0, g);
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_exchange(c, 0, g, N, 1, got, &info), 0);
    for (int i = 0; i < N; i++)
        assert_true(got[i] == w0[i] - 0.5f * g[i]);
    assert_int_equal(info.min_version, 1);
    assert_true(info.waited_us < 1000000);
    zps_client_free(c);
    for (int i = 0; i < 2; i++)
        assert_int_equal(harness_stop(&srv[i]), 0);
}

/* bfloat16 rounding, worked out here: the nearer neighbour in double precision, ties to even. */
static float bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, sizeof(flo));
    memcpy(&fhi, &hi, sizeof(fhi));
    double dl = fabs((double)x - (double)flo), dh = fabs((double)fhi - (double)x);
    if (dl < dh || (dl == dh && ((lo >> 16) & 1u) == 0))
        return flo;
    return fhi;
}

static void test_bf16_exchange(void **state)
{
    (void)state;
    harness_server_t srv[2];
    start(srv, 2, "asp", "1");
    zps_client_t *c = client(srv, 2, 0);
    assert_int_equal(zps_client_init(c, w0, N), 0); /* INIT: float32, exact */
    zps_client_free(c);

    const char *eps[2] = {srv[0].endpoint, srv[1].endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = 0;
    o.timeout_ms = 20000;
    o.wire_bf16 = true;
    assert_int_equal(zps_client_new(eps, 2, &o, &c), 0);
    float w[N], g[N], got[N], server[N], resid[N];
    /* The pull: w0 rounded (w0 is exact in bfloat16). */
    assert_int_equal(zps_client_pull(c, 0, w, N, NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_true(w[i] == w0[i]);
        g[i] = 0.1f * (float)(i + 1) + 0.003f; /* not a bfloat16 */
        server[i] = w0[i];
        resid[i] = 0;
    }
    for (uint64_t t = 0; t < 3; t++) {
        zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
        assert_int_equal(zps_client_exchange(c, t, g, N, 1, got, &info), 0);
        for (int i = 0; i < N; i++) {
            /* Error feedback, by hand: the rounded sum goes, the rest stays. */
            float v = g[i] + resid[i];
            float q = bf16_of(v);
            resid[i] = v - q;
            assert_true(q != v);
            server[i] = server[i] - 0.5f * q; /* ASP, SGD lr 0.5 */
            if (got[i] != bf16_of(server[i]))
                fail_msg("clock %llu, element %d: got %.9g, want %.9g (server %.9g)",
                         (unsigned long long)t, i, (double)got[i], (double)bf16_of(server[i]),
                         (double)server[i]);
        }
    }
    zps_client_free(c);
    /* The server keeps float32: a float32 pull gets every bit. */
    c = client(srv, 2, -1);
    assert_int_equal(zps_client_pull(c, 0, w, N, NULL), 0);
    for (int i = 0; i < N; i++)
        assert_true(w[i] == server[i]);
    zps_client_free(c);
    for (int i = 0; i < 2; i++)
        assert_int_equal(harness_stop(&srv[i]), 0);
}

typedef struct stop_arg {
    harness_server_t *srv;
    int rc;
    bool taken;
    char why[256];
} stop_arg_t;

static void *waiting_worker(void *p)
{
    stop_arg_t *a = p;
    zps_client_t *c = client(a->srv, 1, 0);
    float w[N], g[N];
    a->rc = zps_client_pull(c, 0, w, N, NULL);
    grad_of(0, g);
    if (a->rc == 0)
        a->rc = zps_client_exchange(c, 0, g, N, 1, w, NULL);
    a->taken = zps_client_push_taken(c, 0);
    snprintf(a->why, sizeof(a->why), "%s", zps_client_last_error(c));
    zps_client_free(c);
    return NULL;
}

static void test_stop_while_waiting(void **state)
{
    (void)state;
    harness_server_t srv[1];
    start(srv, 1, "bsp", "2"); /* worker 1 never comes */
    zps_client_t *c = client(srv, 1, 0);
    assert_int_equal(zps_client_init(c, w0, N), 0);
    zps_client_free(c);
    stop_arg_t a = {.srv = srv, .rc = 1};
    pthread_t th;
    pthread_create(&th, NULL, waiting_worker, &a);
    /* Until the exchange is parked: the server counts it. */
    zps_client_t *obs = client(srv, 1, -1);
    bool parked = false;
    for (int i = 0; i < 200 && !parked; i++) {
        char *json = NULL;
        if (zps_client_stats(obs, 0, &json) == 0)
            parked = strstr(json, "\"exchanges\":1") != NULL;
        free(json);
        if (!parked)
            zps_sleep_ms(20);
    }
    zps_client_free(obs);
    assert_true(parked);
    assert_int_equal(harness_stop(&srv[0]), 0);
    pthread_join(th, NULL);
    assert_int_equal(a.rc, ZPS_EREMOTE);
    assert_true(a.taken);
    assert_non_null(strstr(a.why, "shutting down"));
}

/* A model of LN elements: 3 MiB per shard, four frames each way. */
#define LN (1536u * 1024u + 4u)
#define LCLOCKS 3

typedef struct large_arg {
    harness_server_t *srv;
    int worker;
    float *got; /* LN, the parameters of the last clock */
    int rc;
} large_arg_t;

/* g[i] = (worker + 1) / 4 * (i % 7 + 1): exact, and so is every sum below. */
static void large_grad(int worker, float *g)
{
    for (uint32_t i = 0; i < LN; i++)
        g[i] = (float)(worker + 1) * 0.25f * (float)(i % 7 + 1);
}

static void *large_worker(void *p)
{
    large_arg_t *a = p;
    zps_client_t *c = client(a->srv, 2, a->worker);
    float *g = malloc(LN * sizeof(float));
    large_grad(a->worker, g);
    a->rc = zps_client_pull(c, 0, a->got, LN, NULL);
    for (uint64_t t = 0; t < LCLOCKS && a->rc == 0; t++)
        a->rc = zps_client_exchange(c, t, g, LN, 1, a->got, NULL);
    if (a->rc)
        fprintf(stderr, "worker %d: %s\n", a->worker, zps_client_last_error(c));
    free(g);
    zps_client_free(c);
    return NULL;
}

static void test_large_exchange(void **state)
{
    (void)state;
    harness_server_t srv[2];
    start(srv, 2, "bsp", "2");
    float *init = malloc(LN * sizeof(float));
    for (uint32_t i = 0; i < LN; i++)
        init[i] = (float)(i % 1000) * 0.5f - 100.0f;
    zps_client_t *c = client(srv, 2, -1);
    assert_int_equal(zps_client_init(c, init, LN), 0);

    pthread_t th[2];
    large_arg_t args[2];
    for (int w = 0; w < 2; w++) {
        args[w] = (large_arg_t){.srv = srv, .worker = w, .got = malloc(LN * sizeof(float))};
        pthread_create(&th[w], NULL, large_worker, &args[w]);
    }
    for (int w = 0; w < 2; w++)
        pthread_join(th[w], NULL);
    for (int w = 0; w < 2; w++)
        assert_int_equal(args[w].rc, 0);
    /* Each clock: w -= 0.5 * (g0 + g1) / 2 = 0.1875 * (i % 7 + 1), exact. */
    for (int w = 0; w < 2; w++) {
        for (uint32_t i = 0; i < LN; i++) {
            float want = init[i];
            for (int t = 0; t < LCLOCKS; t++)
                want -= 0.1875f * (float)(i % 7 + 1);
            if (args[w].got[i] != want)
                fail_msg("worker %d element %u: %.9g, expected %.9g", w, i, (double)args[w].got[i],
                         (double)want);
        }
        free(args[w].got);
    }
    for (int k = 0; k < 2; k++) {
        char *json = NULL;
        assert_int_equal(zps_client_stats(c, (size_t)k, &json), 0);
        assert_non_null(strstr(json, "\"steps\":3"));
        const char *b = strstr(json, "\"memory_bound_bytes\":");
        assert_non_null(b);
        double bound = atof(b + strlen("\"memory_bound_bytes\":"));
        long rss = harness_rss_kb(srv[k].pid);
        printf("shard %d: RSS %.1f MiB, stated bound %.1f MiB\n", k, rss / 1024.0,
               bound / 1048576.0);
        assert_true(rss > 0 && (double)rss * 1024.0 <= bound);
        free(json);
    }
    zps_client_free(c);
    free(init);
    for (int i = 0; i < 2; i++)
        assert_int_equal(harness_stop(&srv[i]), 0);
}

/* Shard `shard`'s "clocks" entry for worker 0 as its STATS say (-1: no answer). */
static int pushed_clocks(zps_client_t *obs, size_t shard)
{
    char *json = NULL;
    if (zps_client_stats(obs, shard, &json) != 0)
        return -1;
    const char *p = strstr(json, "\"clocks\":[");
    int v = p ? atoi(p + strlen("\"clocks\":[")) : -1;
    free(json);
    return v;
}

static void test_staged_exchange(void **state)
{
    (void)state;
    harness_server_t srv[2];
    start(srv, 2, "bsp", "1");
    zps_client_t *c = client(srv, 2, 0);
    zps_client_t *obs = client(srv, 2, -1);
    assert_int_equal(zps_client_init(c, w0, N), 0);
    float w[N], g[N], got[N], want[N];
    assert_int_equal(zps_client_pull(c, 0, w, N, NULL), 0);
    grad_of(0, g);
    for (int i = 0; i < N; i++)
        got[i] = -99.0f;

    assert_int_equal(zps_client_exchange_ready(c, 0, 1), ZPS_EINVAL); /* none begun */
    assert_int_equal(zps_client_exchange_begin(c, 0, g, N, 1, got), 0);
    assert_int_equal(zps_client_exchange_begin(c, 0, g, N, 1, got), ZPS_EBUSY);
    assert_int_equal(zps_client_pull(c, 0, w, N, NULL), ZPS_EBUSY);
    assert_int_equal(zps_client_exchange_ready(c, 5, 8), 0); /* part of shard 1: nothing yet */
    assert_int_equal(pushed_clocks(obs, 1), 0);
    assert_int_equal(zps_client_exchange_ready(c, 8, 10), 0); /* shard 1's slice is final */
    int on1 = 0;
    for (int tries = 0; tries < 200 && on1 != 1; tries++) {
        on1 = pushed_clocks(obs, 1);
        if (on1 != 1)
            zps_sleep_ms(50);
    }
    assert_int_equal(on1, 1);                          /* shard 1 has the push... */
    assert_int_equal(pushed_clocks(obs, 0), 0);        /* ...shard 0 nothing */
    assert_true(got[0] == -99.0f && got[9] == -99.0f); /* out untouched before the end */
    assert_int_equal(zps_client_exchange_ready(c, 9, 10), ZPS_EINVAL); /* declared twice */
    assert_int_equal(zps_client_exchange_ready(c, 0, N + 1), ZPS_EINVAL);
    assert_int_equal(zps_client_exchange_ready(c, 0, 5), 0);
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_exchange_end(c, &info), 0);
    assert_int_equal(zps_client_exchange_end(c, &info), ZPS_EINVAL);
    for (int i = 0; i < N; i++) {
        want[i] = w0[i] - 0.5f * g[i];
        if (got[i] != want[i])
            fail_msg("element %d: %.9g, expected %.9g", i, (double)got[i], (double)want[i]);
    }
    assert_int_equal(info.min_version, 1);
    assert_int_equal(info.next_clock, 1);

    /* Shard 1's slice goes, shard 0's is not finite: taken by shard 1 only. */
    float bad[N];
    memcpy(bad, g, sizeof(bad));
    bad[2] = NAN;
    assert_int_equal(zps_client_exchange_begin(c, 1, bad, N, 1, got), 0);
    assert_int_equal(zps_client_exchange_ready(c, 5, 10), 0);
    assert_int_equal(zps_client_exchange_ready(c, 0, 5), ZPS_ENONFINITE);
    assert_int_equal(zps_client_exchange_end(c, &info), ZPS_EPARTIAL);
    assert_true(zps_client_push_taken(c, 1));
    assert_false(zps_client_push_taken(c, 0));
    assert_non_null(strstr(zps_client_last_error(c), "shard 0"));
    /* The same exchange with a finite gradient: shard 1 acknowledges a retry. */
    assert_int_equal(zps_client_exchange(c, 1, g, N, 1, got, &info), 0);
    assert_true(info.retried);
    for (int i = 0; i < N; i++)
        assert_true(got[i] == want[i] - 0.5f * g[i]);

    /* Not finite in the first slice end sends: nothing sent at all. */
    assert_int_equal(zps_client_exchange_begin(c, 2, bad, N, 1, got), 0);
    assert_int_equal(zps_client_exchange_end(c, &info), ZPS_ENONFINITE);
    assert_false(zps_client_push_taken(c, 0));
    assert_false(zps_client_push_taken(c, 1));
    assert_int_equal(pushed_clocks(obs, 1), 2);
    zps_client_free(obs);
    zps_client_free(c);
    for (int i = 0; i < 2; i++)
        assert_int_equal(harness_stop(&srv[i]), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bsp_exchange),       cmocka_unit_test(test_asp_exchange),
        cmocka_unit_test(test_stop_while_waiting), cmocka_unit_test(test_bf16_exchange),
        cmocka_unit_test(test_large_exchange),     cmocka_unit_test(test_staged_exchange),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
