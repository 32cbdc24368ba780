/*
 * test_straggler.c - the step-time schedule (worker/straggler.c) as a pure
 * function: padding, each kind of injected delay, the ranks it applies to,
 * its seeded randomness (frequencies and means against their distributions'
 * formulas), and the flag parsers and checks with their exact error codes.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "straggler.h"

#define N_DRAWS 20000

static zps_straggler_config_t cfg_default(void)
{
    zps_straggler_config_t c;
    zps_straggler_config_default(&c);
    return c;
}

static void test_default_is_nothing(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    zps_step_delay_t d;
    zps_straggler_delay(&c, 0, 5, 3.0, &d);
    assert_true(d.pad_ms == 0 && d.delay_ms == 0 && d.slowdown_ms == 0 && d.random_ms == 0);
    assert_false(zps_straggler_applies(&c, 0));
    char why[128];
    assert_int_equal(zps_straggler_check(&c, why, sizeof(why)), 0);
    char buf[128];
    assert_string_equal(zps_straggler_describe(&c, 0, buf, sizeof(buf)), "none");
}

static void test_padding(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    c.base_step_ms = 20;
    zps_step_delay_t d;
    zps_straggler_delay(&c, 3, 0, 0.75, &d);
    assert_true(d.pad_ms == 19.25);
    assert_true(d.delay_ms == 0);
    /* Compute longer than the base step: nothing to pad. */
    zps_straggler_delay(&c, 3, 0, 25.0, &d);
    assert_true(d.pad_ms == 0);
    /* A negative or NaN compute time counts as 0. */
    zps_straggler_delay(&c, 3, 0, NAN, &d);
    assert_true(d.pad_ms == 20);
}

static void test_slowdown_scales_the_padded_work(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    c.base_step_ms = 20;
    c.slowdown = 4;
    zps_step_delay_t d;
    /* work = max(compute, base) = 20: the step takes 4 * 20 = 80 ms. */
    zps_straggler_delay(&c, 1, 7, 0.5, &d);
    assert_true(d.slowdown_ms == 60);
    assert_true(d.delay_ms == 60);
    assert_true(d.pad_ms == 19.5);
    /* Without padding the compute itself is the work. */
    c.base_step_ms = 0;
    zps_straggler_delay(&c, 1, 7, 2.5, &d);
    assert_true(d.slowdown_ms == 7.5);
    assert_true(d.pad_ms == 0);
}

static void test_fixed_and_pause(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    c.fixed_ms = 12.5;
    c.pause = true;
    c.pause_clock = 100;
    c.pause_ms = 2000;
    zps_step_delay_t d;
    zps_straggler_delay(&c, 0, 99, 1.0, &d);
    assert_true(d.fixed_ms == 12.5 && d.pause_ms == 0 && d.delay_ms == 12.5);
    zps_straggler_delay(&c, 0, 100, 1.0, &d);
    assert_true(d.pause_ms == 2000 && d.delay_ms == 2012.5);
    zps_straggler_delay(&c, 0, 101, 1.0, &d);
    assert_true(d.pause_ms == 0);
}

static void test_ranks(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    c.base_step_ms = 10;
    c.fixed_ms = 5;
    assert_int_equal(zps_straggler_parse_ranks("1,3-4", &c.ranks), 0);
    bool want[6] = {false, true, false, true, true, false};
    for (uint32_t r = 0; r < 6; r++) {
        zps_step_delay_t d;
        zps_straggler_delay(&c, r, 0, 0.0, &d);
        assert_true(d.pad_ms == 10); /* padding is for everyone */
        assert_true(d.delay_ms == (want[r] ? 5.0 : 0.0));
        assert_int_equal(zps_straggler_applies(&c, r), want[r]);
    }
    char buf[160];
    assert_string_equal(zps_straggler_describe(&c, 3, buf, sizeof(buf)),
                        "base step 10 ms; fixed delay 5 ms; seed 1");
    assert_string_equal(zps_straggler_describe(&c, 2, buf, sizeof(buf)), "base step 10 ms");
}

/* Binomial frequency of intermittent slow steps, and the delay when hit. */
static void test_intermittent_frequency(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    c.base_step_ms = 20;
    c.intermittent_k = 4;
    c.intermittent_p = 0.1;
    c.seed = 42;
    unsigned hits = 0;
    for (uint64_t t = 0; t < N_DRAWS; t++) {
        zps_step_delay_t d;
        zps_straggler_delay(&c, 2, t, 1.0, &d);
        if (d.intermittent_ms > 0) {
            assert_true(d.intermittent_ms == 60); /* (4 - 1) * 20 */
            hits++;
        } else {
            assert_true(d.delay_ms == 0);
        }
    }
    /* mean n p = 2000, sd sqrt(n p (1 - p)) = 42.4: five sd either side. */
    double sd = sqrt(N_DRAWS * 0.1 * 0.9);
    assert_true(fabs((double)hits - N_DRAWS * 0.1) < 5 * sd);
    /* p = 0 never, p = 1 always. */
    c.intermittent_p = 0;
    for (uint64_t t = 0; t < 1000; t++) {
        zps_step_delay_t d;
        zps_straggler_delay(&c, 2, t, 1.0, &d);
        assert_true(d.intermittent_ms == 0);
    }
    c.intermittent_p = 1;
    for (uint64_t t = 0; t < 1000; t++) {
        zps_step_delay_t d;
        zps_straggler_delay(&c, 2, t, 1.0, &d);
        assert_true(d.intermittent_ms == 60);
    }
}

static void moments(const zps_straggler_config_t *c, double *mean, double *sd, double *lo,
                    double *hi)
{
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (uint64_t t = 0; t < N_DRAWS; t++) {
        zps_step_delay_t d;
        zps_straggler_delay(c, 0, t, 0.0, &d);
        assert_true(d.delay_ms == d.random_ms);
        s += d.random_ms;
        s2 += d.random_ms * d.random_ms;
        if (d.random_ms < *lo)
            *lo = d.random_ms;
        if (d.random_ms > *hi)
            *hi = d.random_ms;
    }
    *mean = s / N_DRAWS;
    *sd = sqrt(s2 / N_DRAWS - *mean * *mean);
}

static void test_random_distributions(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    double mean, sd, lo, hi;
    /* Exponential, mean 10: sd 10, so the sample mean's sd is 10/sqrt(n) = 0.071. */
    assert_int_equal(zps_straggler_parse_random("exp:10", &c.dist, &c.mean_ms), 0);
    moments(&c, &mean, &sd, &lo, &hi);
    assert_true(fabs(mean - 10) < 5 * 10 / sqrt(N_DRAWS));
    assert_true(fabs(sd - 10) < 0.5);
    assert_true(lo >= 0);
    /* Uniform on [0, 20): mean 10, sd 20/sqrt(12) = 5.77. */
    assert_int_equal(zps_straggler_parse_random("uniform:10", &c.dist, &c.mean_ms), 0);
    moments(&c, &mean, &sd, &lo, &hi);
    assert_true(fabs(mean - 10) < 5 * (20 / sqrt(12)) / sqrt(N_DRAWS));
    assert_true(fabs(sd - 20 / sqrt(12)) < 0.2);
    assert_true(lo >= 0 && hi < 20);
}

/* A step's delay is a function of (seed, rank, clock) alone. */
static void test_seeded_and_order_free(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    c.dist = ZPS_DELAY_EXP;
    c.mean_ms = 5;
    c.seed = 7;
    double forward[64], backward[64];
    for (uint64_t t = 0; t < 64; t++) {
        zps_step_delay_t d;
        zps_straggler_delay(&c, 1, t, 0.0, &d);
        forward[t] = d.random_ms;
    }
    for (uint64_t t = 64; t-- > 0;) {
        zps_step_delay_t d;
        zps_straggler_delay(&c, 1, t, 0.0, &d);
        backward[t] = d.random_ms;
    }
    assert_memory_equal(forward, backward, sizeof(forward));

    /* Another seed, another rank: other draws. */
    zps_step_delay_t a, b, e;
    zps_straggler_delay(&c, 1, 3, 0.0, &a);
    zps_straggler_delay(&c, 2, 3, 0.0, &b);
    c.seed = 8;
    zps_straggler_delay(&c, 1, 3, 0.0, &e);
    assert_true(a.random_ms != b.random_ms);
    assert_true(a.random_ms != e.random_ms);

    /* Turning another setting on does not move the random draws. */
    c.seed = 7;
    c.intermittent_k = 4;
    c.intermittent_p = 0.5;
    c.slowdown = 2;
    zps_step_delay_t f;
    zps_straggler_delay(&c, 1, 3, 0.0, &f);
    assert_true(f.random_ms == a.random_ms);
}

static void test_parse(void **state)
{
    (void)state;
    zps_rank_set_t rs;
    assert_int_equal(zps_straggler_parse_ranks("all", &rs), 0);
    assert_true(rs.all);
    assert_int_equal(zps_straggler_parse_ranks("3", &rs), 0);
    assert_true(!rs.all && rs.count == 1 && rs.lo[0] == 3 && rs.hi[0] == 3);
    assert_int_equal(zps_straggler_parse_ranks("0,2-3", &rs), 0);
    assert_true(rs.count == 2 && rs.lo[1] == 2 && rs.hi[1] == 3);
    const char *bad_ranks[] = {"", "a", "3-1", "1,,2", "-1", "70000", "1-", ",1", "1,"};
    for (size_t i = 0; i < sizeof(bad_ranks) / sizeof(bad_ranks[0]); i++)
        assert_int_equal(zps_straggler_parse_ranks(bad_ranks[i], &rs), ZPS_EINVAL);

    zps_delay_dist_t dist = ZPS_DELAY_NONE;
    double m = -1;
    assert_int_equal(zps_straggler_parse_random("exp:20", &dist, &m), 0);
    assert_true(dist == ZPS_DELAY_EXP && m == 20);
    assert_int_equal(zps_straggler_parse_random("uniform:2.5", &dist, &m), 0);
    assert_true(dist == ZPS_DELAY_UNIFORM && m == 2.5);
    const char *bad_random[] = {"gauss:3", "exp:", "exp", ":3", "exp:x", "exp:inf"};
    for (size_t i = 0; i < sizeof(bad_random) / sizeof(bad_random[0]); i++) {
        dist = ZPS_DELAY_NONE;
        assert_int_equal(zps_straggler_parse_random(bad_random[i], &dist, &m), ZPS_EINVAL);
        assert_true(dist == ZPS_DELAY_NONE); /* untouched on failure */
    }

    double k, p;
    assert_int_equal(zps_straggler_parse_intermittent("4:0.1", &k, &p), 0);
    assert_true(k == 4 && p == 0.1);
    assert_int_equal(zps_straggler_parse_intermittent("4", &k, &p), ZPS_EINVAL);
    assert_int_equal(zps_straggler_parse_intermittent("x:0.1", &k, &p), ZPS_EINVAL);

    uint64_t clock;
    double ms;
    assert_int_equal(zps_straggler_parse_pause("100:2000", &clock, &ms), 0);
    assert_true(clock == 100 && ms == 2000);
    assert_int_equal(zps_straggler_parse_pause("-1:5", &clock, &ms), ZPS_EINVAL);
    assert_int_equal(zps_straggler_parse_pause("5", &clock, &ms), ZPS_EINVAL);
}

static void expect_bad(zps_straggler_config_t c, const char *flag)
{
    char why[256];
    assert_int_equal(zps_straggler_check(&c, why, sizeof(why)), ZPS_EINVAL);
    assert_int_equal(strncmp(why, flag, strlen(flag)), 0);
}

static void test_check(void **state)
{
    (void)state;
    zps_straggler_config_t c = cfg_default();
    c.slowdown = 0.5;
    expect_bad(c, "--slowdown");
    c = cfg_default();
    c.intermittent_p = 1.5;
    expect_bad(c, "--intermittent P");
    c = cfg_default();
    c.intermittent_k = 0.9;
    expect_bad(c, "--intermittent K");
    c = cfg_default();
    c.fixed_ms = -1;
    expect_bad(c, "--delay");
    c = cfg_default();
    c.mean_ms = NAN;
    expect_bad(c, "--random-delay");
    c = cfg_default();
    c.base_step_ms = -5;
    expect_bad(c, "--base-step-ms");
    c = cfg_default();
    c.pause = true;
    c.pause_ms = -1;
    expect_bad(c, "--pause-at");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_is_nothing),
        cmocka_unit_test(test_padding),
        cmocka_unit_test(test_slowdown_scales_the_padded_work),
        cmocka_unit_test(test_fixed_and_pause),
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_intermittent_frequency),
        cmocka_unit_test(test_random_distributions),
        cmocka_unit_test(test_seeded_and_order_free),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
