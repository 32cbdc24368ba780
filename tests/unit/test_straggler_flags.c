/*
 * test_straggler_flags.c - the step-time and straggler flags table
 * (worker/straggler_flags.c) that zps-worker and zps launch both read: every
 * flag sets its own fields and no other, a bad value is refused with
 * ZPS_EINVAL in exact words and leaves the settings as they were, the getopt
 * codes map back to the table, and the usage and the --straggler KEY list
 * name every flag. The expected configurations are written out by hand here.
 */
#include <getopt.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "straggler_flags.h"

static void assert_cfg_equal(const zps_straggler_config_t *a, const zps_straggler_config_t *b)
{
    assert_true(a->base_step_ms == b->base_step_ms);
    assert_int_equal(a->ranks.all, b->ranks.all);
    assert_int_equal(a->ranks.count, b->ranks.count);
    for (uint32_t i = 0; i < a->ranks.count; i++) {
        assert_int_equal(a->ranks.lo[i], b->ranks.lo[i]);
        assert_int_equal(a->ranks.hi[i], b->ranks.hi[i]);
    }
    assert_true(a->slowdown == b->slowdown);
    assert_true(a->intermittent_k == b->intermittent_k);
    assert_true(a->intermittent_p == b->intermittent_p);
    assert_true(a->fixed_ms == b->fixed_ms);
    assert_int_equal(a->dist, b->dist);
    assert_true(a->mean_ms == b->mean_ms);
    assert_int_equal(a->pause, b->pause);
    assert_int_equal(a->pause_clock, b->pause_clock);
    assert_true(a->pause_ms == b->pause_ms);
    assert_int_equal(a->seed, b->seed);
}

/* The defaults as straggler.h states them, written out. */
static zps_straggler_config_t defaults(void)
{
    zps_straggler_config_t c;
    memset(&c, 0, sizeof(c));
    c.ranks.all = true;
    c.slowdown = 1.0;
    c.intermittent_k = 1.0;
    c.intermittent_p = 0.0;
    c.seed = 1;
    return c;
}

typedef struct good_case {
    const char *name, *arg;
    bool seed_given;
    zps_straggler_config_t want;
} good_case_t;

/* One good value per flag and the configuration it must give. */
static size_t good_cases(good_case_t *out)
{
    size_t n = 0;
    zps_straggler_config_t c;

    c = defaults();
    c.base_step_ms = 20.5;
    out[n++] = (good_case_t){"base-step-ms", "20.5", false, c};
    c = defaults();
    c.slowdown = 4;
    out[n++] = (good_case_t){"slowdown", "4", false, c};
    c = defaults();
    c.fixed_ms = 12.5;
    out[n++] = (good_case_t){"delay", "12.5", false, c};
    c = defaults();
    c.dist = ZPS_DELAY_UNIFORM;
    c.mean_ms = 3;
    out[n++] = (good_case_t){"random-delay", "uniform:3", false, c};
    c = defaults();
    c.intermittent_k = 4;
    c.intermittent_p = 0.25;
    out[n++] = (good_case_t){"intermittent", "4:0.25", false, c};
    c = defaults();
    c.pause = true;
    c.pause_clock = 100;
    c.pause_ms = 2000;
    out[n++] = (good_case_t){"pause-at", "100:2000", false, c};
    c = defaults();
    c.ranks.all = false;
    c.ranks.count = 2;
    c.ranks.lo[0] = 0;
    c.ranks.hi[0] = 0;
    c.ranks.lo[1] = 2;
    c.ranks.hi[1] = 3;
    out[n++] = (good_case_t){"straggler-ranks", "0,2-3", false, c};
    c = defaults();
    c.seed = 77;
    out[n++] = (good_case_t){"straggler-seed", "77", true, c};
    return n;
}

static void test_every_flag_sets_its_fields(void **state)
{
    (void)state;
    good_case_t cases[16];
    size_t n = good_cases(cases);
    /* One case per flag of the table, and none left out. */
    assert_int_equal(n, ZPS_STRAGGLER_FLAG_COUNT);
    for (size_t i = 0; i < n; i++) {
        const zps_straggler_flag_t *f = zps_straggler_flag_find(cases[i].name);
        assert_non_null(f);
        assert_string_equal(zps_straggler_flag_table[i].name, cases[i].name);
        zps_straggler_flags_t sf;
        zps_straggler_flags_init(&sf);
        char why[256] = "";
        assert_int_equal(zps_straggler_flag_apply(&sf, f, cases[i].arg, why, sizeof(why)), 0);
        assert_cfg_equal(&sf.cfg, &cases[i].want);
        assert_int_equal(sf.have_seed, cases[i].seed_given);
    }
    assert_null(zps_straggler_flag_find("bogus"));
    assert_null(zps_straggler_flag_find("--slowdown"));
}

static void expect_refused(const char *name, const char *arg, const char *want_why)
{
    const zps_straggler_flag_t *f = zps_straggler_flag_find(name);
    assert_non_null(f);
    zps_straggler_flags_t sf;
    zps_straggler_flags_init(&sf);
    sf.cfg.fixed_ms = 7; /* something set before: must survive */
    char why[256] = "";
    assert_int_equal(zps_straggler_flag_apply(&sf, f, arg, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, want_why);
    zps_straggler_config_t want = defaults();
    want.fixed_ms = 7;
    assert_cfg_equal(&sf.cfg, &want);
    assert_false(sf.have_seed);
}

static void test_bad_values_are_refused_word_for_word(void **state)
{
    (void)state;
    expect_refused("base-step-ms", "x", "invalid --base-step-ms 'x': expected milliseconds");
    expect_refused("slowdown", "", "invalid --slowdown '': expected a factor K >= 1");
    expect_refused("slowdown", "inf", "invalid --slowdown 'inf': expected a factor K >= 1");
    expect_refused("delay", "5ms", "invalid --delay '5ms': expected milliseconds");
    expect_refused("random-delay", "exp",
                   "invalid --random-delay 'exp': expected exp:MEAN or uniform:MEAN "
                   "(milliseconds)");
    expect_refused("random-delay", "gauss:3",
                   "invalid --random-delay 'gauss:3': expected exp:MEAN or uniform:MEAN "
                   "(milliseconds)");
    expect_refused("intermittent", "4",
                   "invalid --intermittent '4': expected K:P, a factor and a probability, "
                   "e.g. 4:0.1");
    expect_refused("pause-at", "5",
                   "invalid --pause-at '5': expected T:MS, a clock and milliseconds, "
                   "e.g. 100:2000");
    expect_refused("pause-at", "-1:5",
                   "invalid --pause-at '-1:5': expected T:MS, a clock and milliseconds, "
                   "e.g. 100:2000");
    expect_refused("straggler-ranks", "3-1",
                   "invalid --straggler-ranks '3-1': expected all, or ranks and ranges such as "
                   "0,2-3");
    expect_refused("straggler-seed", "-1",
                   "invalid --straggler-seed '-1': expected a non-negative integer");
    /* A missing value (NULL) is refused, not read. */
    expect_refused("delay", NULL, "invalid --delay '': expected milliseconds");
}

/* Ranges are judged after the last flag, by zps_straggler_check. */
static void test_finish(void **state)
{
    (void)state;
    zps_straggler_flags_t sf;
    char why[256] = "";
    zps_straggler_flags_init(&sf);
    assert_int_equal(zps_straggler_flags_finish(&sf, 42, why, sizeof(why)), 0);
    assert_int_equal(sf.cfg.seed, 42); /* the run's --seed */

    zps_straggler_flags_init(&sf);
    assert_int_equal(zps_straggler_flag_apply(&sf, zps_straggler_flag_find("straggler-seed"), "9",
                                              why, sizeof(why)),
                     0);
    assert_int_equal(zps_straggler_flags_finish(&sf, 42, why, sizeof(why)), 0);
    assert_int_equal(sf.cfg.seed, 9); /* --straggler-seed wins */

    zps_straggler_flags_init(&sf);
    assert_int_equal(
        zps_straggler_flag_apply(&sf, zps_straggler_flag_find("slowdown"), "0.5", why, sizeof(why)),
        0);
    assert_int_equal(zps_straggler_flags_finish(&sf, 1, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "--slowdown must be in [1, 1000] (got 0.5)");
}

static void test_getopt_codes(void **state)
{
    (void)state;
    struct option opts[ZPS_STRAGGLER_FLAG_COUNT];
    zps_straggler_flags_getopt(opts);
    for (int i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++) {
        assert_string_equal(opts[i].name, zps_straggler_flag_table[i].name);
        assert_int_equal(opts[i].has_arg, required_argument);
        assert_null(opts[i].flag);
        assert_int_equal(opts[i].val, ZPS_STRAGGLER_FLAG_FIRST + i);
        assert_ptr_equal(zps_straggler_flag_of_code(opts[i].val), &zps_straggler_flag_table[i]);
    }
    assert_null(zps_straggler_flag_of_code(ZPS_STRAGGLER_FLAG_FIRST - 1));
    assert_null(zps_straggler_flag_of_code(ZPS_STRAGGLER_FLAG_END));
    assert_null(zps_straggler_flag_of_code('?'));
}

static void test_help_names_every_flag(void **state)
{
    (void)state;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_non_null(f);
    zps_straggler_flags_usage(f);
    assert_int_equal(fclose(f), 0);
    /* Each flag's lines start with "  --NAME ", in table order, and end in '\n'. */
    const char *at = text;
    for (size_t i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++) {
        const zps_straggler_flag_t *fl = &zps_straggler_flag_table[i];
        char head[64];
        snprintf(head, sizeof(head), "  --%s ", fl->name);
        assert_int_equal(strncmp(fl->help, head, strlen(head)), 0);
        assert_true(fl->help[strlen(fl->help) - 1] == '\n');
        assert_non_null(fl->expect);
        const char *found = strstr(at, head);
        assert_non_null(found);
        at = found + strlen(head);
    }
    free(text);
}

static void test_per_rank_keys(void **state)
{
    (void)state;
    char buf[128];
    assert_string_equal(zps_straggler_flags_keys(buf, sizeof(buf)),
                        "slowdown, delay, random-delay, intermittent or pause-at");
    /* The run's own settings are not a rank's. */
    assert_false(zps_straggler_flag_find("base-step-ms")->per_rank);
    assert_false(zps_straggler_flag_find("straggler-ranks")->per_rank);
    assert_false(zps_straggler_flag_find("straggler-seed")->per_rank);
    /* Truncated, still terminated. */
    assert_string_equal(zps_straggler_flags_keys(buf, 9), "slowdown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_flag_sets_its_fields),
        cmocka_unit_test(test_bad_values_are_refused_word_for_word),
        cmocka_unit_test(test_finish),
        cmocka_unit_test(test_getopt_codes),
        cmocka_unit_test(test_help_names_every_flag),
        cmocka_unit_test(test_per_rank_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
