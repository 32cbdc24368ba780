/*
 * test_overflow.c - finite gradients whose step would overflow.
 *
 * BSP: a gradient of 3e38 on a batch of 2^31 - 1 overflows the
 * example-weighted mean. ASP: 3e38 at lr 10 takes a parameter past
 * -FLT_MAX. Either step is refused whole and the parameters do not change.
 * ASP: the pusher gets ZPS_ENONFINITE, nothing changes, and the same clock
 * may be pushed again. BSP: the step's pushes are discarded and counted, the
 * completing push is answered DROPPED, and the clock moves on.
 */
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

static zps_client_t *worker_client(const char *endpoint, int w)
{
    const char *eps[1] = {endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = w;
    o.timeout_ms = 5000;
    zps_client_t *c;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    return c;
}

static void expect_stats(zps_client_t *c, const char *const *keys)
{
    char *json = NULL;
    assert_int_equal(zps_client_stats(c, 0, &json), 0);
    for (int i = 0; keys[i]; i++)
        if (!strstr(json, keys[i]))
            fail_msg("STATS lacks %s: %s", keys[i], json);
    free(json);
}

static void test_bsp_mean_overflow(void **state)
{
    (void)state;
    harness_server_t s;
    const char *args[] = {"--workers", "1", "--mode", "bsp", "--lr", "0.1", NULL};
    assert_int_equal(harness_start(&s, args), 0);
    zps_client_t *c = worker_client(s.endpoint, 0);

    float w[2] = {10.0f, 1.0f}, got[2];
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_init(c, w, 2), 0);
    assert_int_equal(zps_client_pull(c, 0, got, 2, &info), 0);
    float huge[2] = {3e38f, 1.0f};
    assert_int_equal(zps_client_push(c, 0, huge, 2, 2147483647u, &info), 0);
    assert_true(info.dropped);
    assert_false(info.buffered);

    /* The clock moved on; the parameters did not. */
    assert_int_equal(zps_client_pull(c, 1, got, 2, &info), 0);
    assert_int_equal(info.max_version, 1);
    assert_true(got[0] == 10.0f && got[1] == 1.0f);
    const char *const keys[] = {"\"steps_refused\":1", "\"buffered_discarded\":1",
                                "\"discarded_per_worker\":[1]", "\"steps\":0", NULL};
    expect_stats(c, keys);

    /* The next step is an ordinary one. */
    float g[2] = {1.0f, 2.0f};
    assert_int_equal(zps_client_push(c, 1, g, 2, 1, &info), 0);
    assert_int_equal(zps_client_pull(c, 2, got, 2, &info), 0);
    assert_true(got[0] == 10.0f - 0.1f * 1.0f && got[1] == 1.0f - 0.1f * 2.0f);

    zps_client_free(c);
    harness_stop(&s);
}

static void test_asp_step_overflow(void **state)
{
    (void)state;
    harness_server_t s;
    const char *args[] = {"--workers", "1", "--mode", "asp", "--lr", "10", NULL};
    assert_int_equal(harness_start(&s, args), 0);
    zps_client_t *c = worker_client(s.endpoint, 0);

    float w[2] = {-1e38f, 1.0f}, got[2];
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_init(c, w, 2), 0);
    float huge[2] = {3e38f, 0.5f};
    assert_int_equal(zps_client_push(c, 0, huge, 2, 1, &info), ZPS_EREMOTE);
    assert_int_equal(zps_client_last_remote_status(c), ZPS_ENONFINITE);
    assert_int_equal(zps_client_pull(c, 0, got, 2, &info), 0);
    assert_int_equal(info.max_version, 0);
    assert_true(got[0] == -1e38f && got[1] == 1.0f);
    const char *const keys[] = {"\"steps_refused\":1", "\"applied\":0", NULL};
    expect_stats(c, keys);

    /* Nothing happened: the same clock is pushed again, and applied. */
    float g[2] = {0.25f, 0.5f};
    assert_int_equal(zps_client_push(c, 0, g, 2, 1, &info), 0);
    assert_false(info.retried);
    assert_int_equal(zps_client_pull(c, 1, got, 2, &info), 0);
    assert_true(got[0] == -1e38f - 10.0f * 0.25f && got[1] == 1.0f - 10.0f * 0.5f);

    zps_client_free(c);
    harness_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bsp_mean_overflow),
        cmocka_unit_test(test_asp_step_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
