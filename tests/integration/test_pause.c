/*
 * test_pause.c - a BSP server stopped (SIGSTOP) for longer than
 * --worker-timeout, then continued, while its workers keep sending
 * heartbeats.
 *
 * The process could not read during the pause, so the pause is not the
 * workers' silence: nobody may be evicted when it resumes, and the gradient
 * buffered before the pause must be in its clock's step together with the
 * one pushed after. Reference: w = 10 - 0.1 * (2 + 4) / 2 = 9.7 (float32
 * arithmetic of the server, recomputed here).
 */
#include <setjmp.h>
#include <signal.h>
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

static zps_client_t *worker_client(const char *endpoint, int w)
{
    const char *eps[1] = {endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = w;
    o.timeout_ms = 15000; /* longer than the pause: calls wait it out */
    o.heartbeat_ms = 200;
    zps_client_t *c;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    return c;
}

static void test_pause_keeps_buffered_push(void **state)
{
    (void)state;
    harness_server_t s;
    const char *args[] = {"--workers",        "2", "--mode", "bsp", "--lr", "0.1",
                          "--worker-timeout", "2", NULL};
    assert_int_equal(harness_start(&s, args), 0);
    zps_client_t *c0 = worker_client(s.endpoint, 0);
    zps_client_t *c1 = worker_client(s.endpoint, 1);

    float w = 10.0f, g0 = 2.0f, g1 = 4.0f, got = 0;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_init(c0, &w, 1), 0);
    assert_int_equal(zps_client_pull(c0, 0, &got, 1, &info), 0);
    assert_int_equal(zps_client_pull(c1, 0, &got, 1, &info), 0);
    assert_int_equal(zps_client_push(c0, 0, &g0, 1, 1, &info), 0);
    assert_true(info.buffered);

    /* Stopped 5 s, 2.5 times the timeout, while both workers send heartbeats. */
    harness_signal(&s, SIGSTOP);
    zps_sleep_ms(5000);
    harness_signal(&s, SIGCONT);

    int rc = zps_client_push(c1, 0, &g1, 1, 1, &info);
    assert_int_equal(rc, 0);
    assert_false(info.retried);
    assert_false(info.rejoined);
    assert_true(info.buffered);
    assert_int_equal(zps_client_pull(c1, 1, &got, 1, &info), 0);
    float mean = (1.0f * g0 + 1.0f * g1) / 2.0f;
    float want = w - 0.1f * mean;
    if (got != want)
        fail_msg("pull for clock 1 gave %.9g, expected %.9g (both gradients in the step)",
                 (double)got, (double)want);

    char *json = NULL;
    assert_int_equal(zps_client_stats(c0, 0, &json), 0);
    if (!strstr(json, "\"evictions\":[0,0]") || !strstr(json, "\"live\":[true,true]"))
        fail_msg("a worker was evicted across the pause: %s", json);
    free(json);

    zps_client_free(c0);
    zps_client_free(c1);
    harness_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pause_keeps_buffered_push),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
