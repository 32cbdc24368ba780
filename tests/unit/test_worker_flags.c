/*
 * test_worker_flags.c - zps-worker's own flags table (worker/worker_flags.c),
 * which zps-worker reads its command line with and zps launch checks the
 * values it hands on with: each flag's ids and codes, the edges of every
 * range (the bounds are written out here, from zps-worker's usage), the
 * exact refusals, and the checks made early for a supervisor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "worker_flags.h"

static const zps_worker_flag_t *flag(const char *name)
{
    const zps_worker_flag_t *f = zps_worker_flag_find(name);
    assert_non_null(f);
    return f;
}

static void expect_ok(const char *name, const char *arg)
{
    zps_worker_value_t v;
    char why[256] = "";
    if (zps_worker_flag_read(flag(name), arg, &v, why, sizeof(why)) != 0)
        fail_msg("--%s '%s' refused: %s", name, arg ? arg : "(null)", why);
    free(v.list);
}

static void expect_bad(const char *name, const char *arg, const char *want)
{
    zps_worker_value_t v;
    memset(&v, 0x5a, sizeof(v));
    zps_worker_value_t before = v;
    char why[256] = "";
    assert_int_equal(zps_worker_flag_read(flag(name), arg, &v, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, want);
    assert_memory_equal(&v, &before, sizeof(v)); /* untouched */
}

static void test_table_ids(void **state)
{
    (void)state;
    for (int i = 0; i < ZPS_WORKER_FLAG_COUNT; i++) {
        const zps_worker_flag_t *f = &zps_worker_flag_table[i];
        assert_int_equal(f->id, i);
        assert_ptr_equal(zps_worker_flag_find(f->name), f);
        /* A flag that can refuse a value says what it should be. */
        bool refuses = f->kind != ZPS_WORKER_VALUE_NONE && f->kind != ZPS_WORKER_VALUE_HELP &&
                       f->kind != ZPS_WORKER_VALUE_STRING;
        assert_int_equal(f->expect != NULL, refuses);
    }
    assert_null(zps_worker_flag_find("slowdown")); /* straggler_flags.h */
    assert_null(zps_worker_flag_find("lr"));       /* opt_flags.h */
    assert_false(zps_worker_flag_has_value(flag("help")));
    assert_false(zps_worker_flag_has_value(flag("local")));
    assert_true(zps_worker_flag_has_value(flag("data-dir")));
}

static void test_ranges(void **state)
{
    (void)state;
    expect_ok("rank", "0");
    expect_ok("rank", "65535");
    expect_bad("rank", "65536", "invalid --rank '65536': expected an integer in [0, 65535]");
    expect_ok("workers", "65536");
    expect_bad("workers", "0", "invalid --workers '0': expected an integer in [1, 65536]");
    expect_ok("timeout", "-1");
    expect_ok("timeout", "86400000");
    expect_bad("timeout", "0",
               "invalid --timeout '0': expected milliseconds >= 1, or -1 to wait forever");
    expect_bad("timeout", "-2",
               "invalid --timeout '-2': expected milliseconds >= 1, or -1 to wait forever");
    expect_ok("wait-log-ms", "0");
    expect_bad("wait-log-ms", "86400001",
               "invalid --wait-log-ms '86400001': expected milliseconds >= 0 (0: never)");
    expect_ok("batch", "1048576");
    expect_bad("batch", "1048577",
               "invalid --batch '1048577': expected an integer in [1, 1048576]");
    expect_bad("batch", "0", "invalid --batch '0': expected an integer in [1, 1048576]");
    expect_ok("epochs", "1000000");
    expect_bad("epochs", "1000001",
               "invalid --epochs '1000001': expected an integer in [1, 1000000]");
    expect_bad("epochs", "0", "invalid --epochs '0': expected an integer in [1, 1000000]");
    expect_ok("clocks", "18446744073709551615");
    expect_bad("clocks", "0", "invalid --clocks '0': expected a positive integer");
    expect_ok("seed", "0");
    expect_bad("seed", "-1", "invalid --seed '-1': expected a non-negative integer");
    expect_ok("device", "1024");
    expect_bad("device", "1025", "invalid --device '1025': expected a device index");
    expect_bad("blas-threads", "0", "invalid --blas-threads '0': expected an integer in [1, 1024]");
    expect_ok("eval-every", "0");
    expect_bad("eval-every", "x", "invalid --eval-every 'x': expected a non-negative integer");
    expect_ok("progress-every", "0.5");
    expect_bad("progress-every", "0", "invalid --progress-every '0': expected seconds > 0");
    expect_ok("backend", "auto");
    expect_bad("backend", "gpu", "invalid --backend 'gpu': expected cpu, cuda or auto");
    expect_ok("log-level", "warn");
    expect_bad("log-level", "loud",
               "invalid --log-level 'loud': expected debug, info, warn or error");
    expect_bad("servers", "a,,b", "invalid --servers 'a,,b': expected comma-separated endpoints");
    /* A flag that needs a value refuses none. */
    expect_bad("batch", NULL, "invalid --batch '': expected an integer in [1, 1048576]");
}

static void test_values(void **state)
{
    (void)state;
    zps_worker_value_t v;
    char why[256];
    assert_int_equal(
        zps_worker_flag_read(flag("servers"), "tcp://a:1,tcp://b:2", &v, why, sizeof(why)), 0);
    assert_int_equal(v.count, 2);
    assert_string_equal(v.list[1], "tcp://b:2");
    free(v.list);
    assert_int_equal(zps_worker_flag_read(flag("timeout"), "250", &v, why, sizeof(why)), 0);
    assert_int_equal(v.l, 250);
    assert_int_equal(zps_worker_flag_read(flag("epochs"), "6", &v, why, sizeof(why)), 0);
    assert_int_equal(v.u, 6);
    assert_int_equal(zps_worker_flag_read(flag("progress-every"), "2.5", &v, why, sizeof(why)), 0);
    assert_true(v.d == 2.5);
    assert_int_equal(zps_worker_flag_read(flag("log-level"), "error", &v, why, sizeof(why)), 0);
    assert_int_equal(v.level, ZPS_LOG_ERROR);
    assert_int_equal(zps_worker_flag_read(flag("no-eval"), NULL, &v, why, sizeof(why)), 0);
    /* Model and data are taken as they are when the command line is read... */
    assert_int_equal(zps_worker_flag_read(flag("model"), "mlp:784", &v, why, sizeof(why)), 0);
    assert_string_equal(v.s, "mlp:784");
    assert_int_equal(zps_worker_flag_read(flag("data"), "mnist", &v, why, sizeof(why)), 0);
}

/* ...and judged up front by zps_worker_flag_check_early. */
static void test_check_early(void **state)
{
    (void)state;
    char why[256] = "";
    assert_int_equal(zps_worker_flag_check_early(flag("model"), "mlp:784-10", why, sizeof(why)), 0);
    assert_int_equal(zps_worker_flag_check_early(flag("model"), "mlp:784", why, sizeof(why)),
                     ZPS_EINVAL);
    assert_int_equal(strncmp(why, "invalid --model: ", 17), 0);
    assert_int_equal(zps_worker_flag_check_early(flag("data"), "synthetic:n=10", why, sizeof(why)),
                     0);
    assert_int_equal(zps_worker_flag_check_early(flag("data"), "fashion-mnist", why, sizeof(why)),
                     0);
    assert_int_equal(zps_worker_flag_check_early(flag("data"), "mnist", why, sizeof(why)),
                     ZPS_EINVAL);
    assert_string_equal(why, "invalid --data 'mnist': expected fashion-mnist or "
                             "synthetic[:OPTIONS]");
    /* The other kinds as zps_worker_flag_read judges them. */
    assert_int_equal(zps_worker_flag_check_early(flag("batch"), "0", why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "invalid --batch '0': expected an integer in [1, 1048576]");
    assert_int_equal(zps_worker_flag_check_early(flag("servers"), "a,b", why, sizeof(why)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_ids),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_check_early),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
