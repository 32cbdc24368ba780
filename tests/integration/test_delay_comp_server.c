/*
 * test_delay_comp_server.c - delay compensation (zps-server --delay-compensation)
 * through two real ASP shards: each push's gradient g is applied as
 *
 *     g + lambda * g * g * (w_now - w_pulled)
 *
 * where w_pulled is what the server last sent the pushing worker (a pull's
 * or an exchange's reply) and w_now is the shard's parameters as the push
 * arrives. Two workers interleave pulls, pushes and an exchange; every
 * value is a short binary fraction, so the float32 arithmetic is exact and
 * the expected parameters are those worked out by hand (the first
 * compensated step, below) and by the float64 reference in this file.
 * Also: BSP refuses the flag, and with lambda 0 the same pushes give plain
 * SGD's parameters.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "harness.h"

enum { N = 6 };
#define LR 0.5
#define LAMBDA 2.0

static const float w0[N] = {1, 2, -1, 0.5f, 3, -2};
static const float g0[N] = {1, 0.5f, -0.5f, 2, -1, 4};
static const float g1[N] = {0.5f, -1, 2, 0.25f, 1, 0};

/* SGD with the compensated gradient, in float64: w -= lr * (g + lambda g^2 (w - pulled)). */
static void ref_push(double *w, const float *g, const double *pulled, double lambda)
{
    for (int i = 0; i < N; i++)
        w[i] -= LR * ((double)g[i] + lambda * (double)g[i] * (double)g[i] * (w[i] - pulled[i]));
}

static zps_client_t *client(const char **eps, int w)
{
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = w;
    o.timeout_ms = 20000;
    zps_client_t *c = NULL;
    assert_int_equal(zps_client_new(eps, 2, &o, &c), 0);
    return c;
}

static void start(harness_server_t *srv, const char **eps, const char *lambda)
{
    static char shard[2][8];
    for (int s = 0; s < 2; s++) {
        snprintf(shard[s], sizeof(shard[s]), "%d/2", s);
        const char *args[] = {"--workers", "2",   "--shard",     shard[s], "--mode",
                              "asp",       "--lr", "0.5",        "--delay-compensation",
                              lambda,      NULL};
        assert_int_equal(harness_start(&srv[s], args), 0);
        eps[s] = srv[s].endpoint;
    }
}

static void assert_params(zps_client_t *c, uint64_t clock, const double *want)
{
    float got[N];
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(c, clock, got, N, &info), 0);
    for (int i = 0; i < N; i++)
        if ((double)got[i] != want[i])
            fail_msg("element %d: %.9g, expected %.9g", i, (double)got[i], want[i]);
}

/* The sequence of both tests; lambda is the servers'. */
static void run(double lambda, const char *flag)
{
    harness_server_t srv[2];
    const char *eps[2];
    start(srv, eps, flag);
    zps_client_t *c0 = client(eps, 0), *c1 = client(eps, 1);
    float p[N];
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    double w[N], sent0[N], sent1[N];
    for (int i = 0; i < N; i++)
        w[i] = w0[i];
    assert_int_equal(zps_client_init(c0, w0, N), 0);

    /* Both pull the initial model; worker 1's push then finds it unchanged. */
    assert_int_equal(zps_client_pull(c0, 0, p, N, &info), 0);
    memcpy(sent0, w, sizeof(w));
    assert_int_equal(zps_client_pull(c1, 0, p, N, &info), 0);
    memcpy(sent1, w, sizeof(w));
    assert_int_equal(zps_client_push(c1, 0, g1, N, 1, &info), 0);
    ref_push(w, g1, sent1, lambda);
    /* Worker 0's gradient is one update stale. */
    assert_int_equal(zps_client_push(c0, 0, g0, N, 1, &info), 0);
    ref_push(w, g0, sent0, lambda);
    if (lambda == LAMBDA) {
        /* By hand: w1 = w0 - 0.5 g1 = (0.75, 2.5, -2, 0.375, 2.5, -2); d = w1 - w0;
         * g0 + 2 g0^2 d = (0.5, 0.75, -1, 1, -2, 4); w2 = w1 - 0.5 of that. */
        const double w2[N] = {0.5, 2.125, -1.5, -0.125, 3.5, -4};
        for (int i = 0; i < N; i++)
            assert_true(w[i] == w2[i]);
    } else {
        const double w2[N] = {0.25, 2.25, -1.75, -0.625, 3, -4}; /* plain SGD */
        for (int i = 0; i < N; i++)
            assert_true(w[i] == w2[i]);
    }
    assert_params(c0, 1, w);
    memcpy(sent0, w, sizeof(w));
    /* An exchange: worker 0's push finds what it was just sent (no
     * compensation), and its reply is what worker 0 holds next. */
    assert_int_equal(zps_client_exchange(c0, 1, g0, N, 1, p, &info), 0);
    ref_push(w, g0, sent0, lambda);
    memcpy(sent0, w, sizeof(w));
    for (int i = 0; i < N; i++)
        assert_true((double)p[i] == w[i]);
    /* Worker 1 has been sent nothing since the initial model: three updates stale. */
    assert_int_equal(zps_client_push(c1, 1, g1, N, 1, &info), 0);
    ref_push(w, g1, sent1, lambda);
    assert_int_equal(zps_client_push(c0, 2, g0, N, 1, &info), 0);
    ref_push(w, g0, sent0, lambda);
    assert_params(c1, 2, w);

    zps_client_free(c0);
    zps_client_free(c1);
    for (int s = 0; s < 2; s++)
        assert_int_equal(harness_stop(&srv[s]), 0);
}

static void test_compensated(void **state)
{
    (void)state;
    run(LAMBDA, "2");
}

static void test_lambda_zero_is_plain(void **state)
{
    (void)state;
    run(0.0, "0");
}

/* A BSP server refuses the flag: its steps' gradients are never stale. */
static void test_bsp_refuses(void **state)
{
    (void)state;
    const char *argv[] = {harness_server_bin(), "--workers", "2", "--mode", "bsp",
                          "--delay-compensation", "1", "--listen", "tcp://127.0.0.1:0", NULL};
    pid_t pid = harness_spawn(argv, NULL, NULL);
    assert_true(pid > 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compensated),
        cmocka_unit_test(test_lambda_zero_is_plain),
        cmocka_unit_test(test_bsp_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
