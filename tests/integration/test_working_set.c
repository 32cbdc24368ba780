/*
 * test_working_set.c - what a BSP shard holds in an honest run, against the
 * formula docs/protocol.md states for it ("What an honest run holds").
 *
 * A real zps-server holds a shard of P = 64 MiB; W worker threads, each with
 * its own client as zps-worker has, pull the model of clock 0 and then make
 * CLOCKS exchanges. The server's peak resident size (VmHWM) must be within
 * 5% of
 *
 *   base + P x ((1 + k) + W + 1)                      over the socket
 *   base + P x ((1 + k) + 1 + W + W + 1)              through shared memory
 *
 * with base the server's resident size before INIT and k the optimizer's
 * state arrays (0 for SGD, 1 for momentum, 2 for Adam). Over the socket:
 * the parameters and state, the W pushes of a clock kept in their frames
 * until the step, and one reply copy of the new version. Through shared
 * memory: the parameters and state, the reply copy of the first pull (it
 * asks for the session and goes over the socket), the W slots the server
 * reads, a private copy of each worker's push, and one parameter buffer.
 *
 * The formula is computed here from those terms, not taken from the server;
 * what the server holds in flight beyond them (STATS resident_copies: one
 * more reply buffer when ZeroMQ has not yet given the previous version's
 * back) is counted into it, and may be one copy at most.
 * The hard bound (STATS limits.memory_bound_bytes, what no peer can push
 * the server past) is printed beside it: it is several times larger, since
 * it allows for what hostile or slow peers can make a server hold.
 *
 * Skipped under AddressSanitizer, whose allocator keeps freed memory in
 * quarantine and ignores the malloc settings the formula relies on.
 */
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
#include "json.h"

#define P_BYTES (64ull << 20)
#define N (P_BYTES / sizeof(float))
#define CLOCKS 4
#define MAXW 4
#define TOLERANCE 0.05

typedef struct worker_arg {
    const char *endpoint;
    int rank;
    bool shm;
    int rc;
    char error[256];
} worker_arg_t;

/* A worker's life in zps-worker's order: the model of clock 0, then one exchange a clock. */
static void *worker_main(void *p)
{
    worker_arg_t *a = p;
    const char *eps[1] = {a->endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = a->rank;
    o.timeout_ms = 60000;
    o.shm = a->shm;
    zps_client_t *c = NULL;
    float *grad = malloc(N * sizeof(float)), *params = malloc(N * sizeof(float));
    a->rc = zps_client_new(eps, 1, &o, &c);
    if (a->rc == 0 && grad && params) {
        for (size_t i = 0; i < N; i++)
            grad[i] = (float)((i + (size_t)a->rank) % 89) * 0.01f;
        a->rc = zps_client_pull(c, 0, params, N, NULL);
        for (uint64_t t = 0; a->rc == 0 && t < CLOCKS; t++)
            a->rc = zps_client_exchange(c, t, grad, N, 16, params, NULL);
        if (a->rc)
            snprintf(a->error, sizeof(a->error), "%s", zps_client_last_error(c));
    }
    zps_client_free(c);
    free(grad);
    free(params);
    return NULL;
}

static long long stat_number(const char *json, const char *object, const char *key)
{
    zps_json_t *j = NULL;
    assert_int_equal(zps_json_parse(json, &j, NULL, 0), 0);
    double v = zps_json_number(zps_json_get(zps_json_get(j, object), key), -1);
    zps_json_free(j);
    return (long long)v;
}

/* One run: W workers, optimizer `opt` with k state arrays, over the socket or shared memory. */
typedef struct run_case {
    const char *name;
    int workers;
    const char *opt;
    int k;
    bool shm;
} run_case_t;

static void test_run(void **state)
{
    const run_case_t *rc = *state;
    int workers = rc->workers, k = rc->k;
    const char *opt = rc->opt;
    bool shm = rc->shm;
    char w[8];
    snprintf(w, sizeof(w), "%d", workers);
    const char *args[] = {"--workers",   w,      "--optimizer",           opt, "--lr", "1e-9",
                          "--log-level", "warn", shm ? NULL : "--no-shm", NULL};
    harness_server_t srv;
    assert_int_equal(harness_start(&srv, args), 0);
    long base_kb = harness_rss_kb(srv.pid);
    assert_true(base_kb > 0);

    const char *eps[1] = {srv.endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = -1;
    o.timeout_ms = 60000;
    zps_client_t *admin = NULL;
    assert_int_equal(zps_client_new(eps, 1, &o, &admin), 0);
    float *init = calloc(N, sizeof(float));
    assert_non_null(init);
    for (size_t i = 0; i < N; i++)
        init[i] = (float)(i % 101) * 0.001f;
    assert_int_equal(zps_client_init(admin, init, N), 0);
    free(init);

    pthread_t th[MAXW];
    worker_arg_t a[MAXW];
    for (int r = 0; r < workers; r++) {
        a[r] = (worker_arg_t){.endpoint = srv.endpoint, .rank = r, .shm = shm, .rc = -1};
        assert_int_equal(pthread_create(&th[r], NULL, worker_main, &a[r]), 0);
    }
    for (int r = 0; r < workers; r++) {
        assert_int_equal(pthread_join(th[r], NULL), 0);
        if (a[r].rc != 0)
            fail_msg("worker %d: %s (%s)", r, a[r].error, zps_strerror(a[r].rc));
    }
    long peak_kb = harness_peak_rss_kb(srv.pid);

    char *json = NULL;
    assert_int_equal(zps_client_stats(admin, 0, &json), 0);
    long long shm_pushes = stat_number(json, "shm", "pushes");
    long long bound = stat_number(json, "limits", "memory_bound_bytes");
    long long replies = stat_number(json, "resident_copies", "replies");
    long long observer = stat_number(json, "resident_copies", "observer_replies");
    long long shm_bufs = stat_number(json, "resident_copies", "shm_buffers");
    long long shm_private = stat_number(json, "resident_copies", "shm_private");
    free(json);
    zps_client_free(admin);
    assert_int_equal(harness_stop(&srv), 0);

    /* Every exchange after the first pull went through shared memory, or none did. */
    assert_int_equal(shm_pushes, shm ? (long long)workers * CLOCKS : 0);

    /*
     * The copies of the parameters in flight, as the server counted them
     * (STATS resident_copies), against what the formula names. A pull
     * reply's buffer comes back when ZeroMQ's I/O thread has written the
     * reply out, and on a busy machine that thread may still hold the
     * previous version's when the next step writes: the step then takes
     * one more buffer. Nothing else can add one in an honest BSP run:
     * shared-memory buffers are let go of by each session's next request,
     * before the step that writes over them, and a push's private copy
     * is closed by the step that consumes it. So the count may exceed the
     * formula's by one copy at most, and the peak is checked against the
     * formula with the copies really held.
     */
    long long named = shm ? 1 + 1 + workers : 1; /* replies (+ shm buffers + private copies) */
    long long held = replies + observer + (shm ? shm_bufs + shm_private : 0);
    long long extra = held - named;
    if (extra < 0 || extra > 1)
        fail_msg("the shard held %lld copies in flight (replies %lld, observer %lld, shm "
                 "buffers %lld, private %lld) where the formula names %lld: at most one more "
                 "may be in flight",
                 held, replies, observer, shm_bufs, shm_private, named);
    /* The parameters and state, then the W pushes' frames (socket) or the W slots (shm). */
    unsigned copies = (unsigned)((1 + k) + workers + held);
    double p_kb = (double)P_BYTES / 1024.0;
    double want_kb = (double)base_kb + p_kb * copies;
    double off = ((double)peak_kb - want_kb) / want_kb;
    printf("%-9s W=%d %-8s: peak %.1f MiB, working set %.1f MiB (%.1f + %u x %.0f, %lld in "
           "flight beyond the formula) %+.2f%%; hard bound %.1f MiB\n",
           shm ? "shm" : "socket", workers, opt, peak_kb / 1024.0, want_kb / 1024.0,
           base_kb / 1024.0, copies, p_kb / 1024.0, extra, 100.0 * off, (double)bound / 1048576.0);
    if (!(off <= TOLERANCE && off >= -TOLERANCE))
        fail_msg("the shard's peak resident size is %.2f%% from its working set", 100.0 * off);
}

static const run_case_t cases[] = {
    {"socket_sgd", 2, "sgd", 0, false},
    {"socket_adam", 2, "adam", 2, false},
    {"socket_momentum_four", 4, "momentum", 1, false},
    {"shm_sgd", 2, "sgd", 0, true},
    {"shm_adam_four", 4, "adam", 2, true},
};

int main(void)
{
#ifdef ZPS_SANITIZED
    printf("test_working_set: skipped: AddressSanitizer's allocator keeps freed memory in "
           "quarantine\n");
    return 77;
#endif
    /* This test chooses each run's transport, and plain connections: the
     * suite-wide switches would change what the server holds. */
    unsetenv("ZPS_TEST_SHM");
    unsetenv("ZPS_NO_SHM");
    unsetenv("ZPS_TEST_SECURE");
    struct CMUnitTest tests[sizeof(cases) / sizeof(cases[0])];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tests[i] = (struct CMUnitTest)cmocka_unit_test_prestate(test_run, (void *)&cases[i]);
        tests[i].name = cases[i].name;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
