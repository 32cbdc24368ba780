/*
 * test_opt_flags.c - the optimizer's command-line flags (optimizer/opt_flags.h):
 * each flag lands in its own field and nowhere else, bad values are refused
 * with ZPS_EINVAL and the exact message, and zps_opt_flags_finish applies
 * --nesterov and the configuration check.
 */
#include <getopt.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "opt_flags.h"

/* Applies one flag to fresh flags; asserts it is taken. */
static zps_opt_flags_t apply_ok(int code, const char *arg)
{
    zps_opt_flags_t f;
    zps_opt_flags_init(&f);
    char why[256] = "";
    assert_int_equal(zps_opt_flag_apply(&f, code, arg, why, sizeof(why)), 0);
    assert_true(f.any);
    return f;
}

/* Every field of a equals b's. */
static void assert_same_config(const zps_opt_config_t *a, const zps_opt_config_t *b)
{
    assert_int_equal(a->kind, b->kind);
    assert_true(a->lr == b->lr);
    assert_true(a->momentum == b->momentum);
    assert_int_equal(a->nesterov, b->nesterov);
    assert_true(a->beta1 == b->beta1);
    assert_true(a->beta2 == b->beta2);
    assert_true(a->eps == b->eps);
    assert_true(a->weight_decay == b->weight_decay);
    assert_int_equal(a->schedule, b->schedule);
    assert_true(a->step_every == b->step_every);
    assert_true(a->gamma == b->gamma);
    assert_true(a->cosine_steps == b->cosine_steps);
    assert_true(a->lr_min == b->lr_min);
    assert_true(a->warmup == b->warmup);
}

static void test_init_is_default(void **state)
{
    (void)state;
    zps_opt_flags_t f;
    memset(&f, 0xa5, sizeof(f));
    zps_opt_flags_init(&f);
    zps_opt_config_t d;
    zps_opt_config_default(&d);
    assert_same_config(&f.cfg, &d);
    assert_false(f.nesterov);
    assert_false(f.any);
    /* The defaults by hand (optimizer.h). */
    assert_int_equal(f.cfg.kind, ZPS_OPT_SGD);
    assert_true(f.cfg.lr == 0.01);
    assert_true(f.cfg.momentum == 0.9);
    assert_true(f.cfg.beta1 == 0.9);
    assert_true(f.cfg.beta2 == 0.999);
    assert_true(f.cfg.eps == 1e-8);
    assert_true(f.cfg.weight_decay == 0.0);
    assert_int_equal(f.cfg.schedule, ZPS_SCHED_CONSTANT);
    assert_true(f.cfg.gamma == 0.1);
    assert_true(f.cfg.warmup == 0);
}

/* Each flag sets exactly its field: the rest stays at the defaults. */
static void test_each_flag_sets_its_field(void **state)
{
    (void)state;
    zps_opt_config_t want;

#define CHECK_FLAG(code, arg, field, value)                                                        \
    do {                                                                                           \
        zps_opt_flags_t f = apply_ok(code, arg);                                                   \
        zps_opt_config_default(&want);                                                             \
        want.field = value;                                                                        \
        assert_same_config(&f.cfg, &want);                                                         \
        assert_false(f.nesterov);                                                                  \
    } while (0)

    CHECK_FLAG(ZPS_OPT_FLAG_OPTIMIZER, "sgd", kind, ZPS_OPT_SGD);
    CHECK_FLAG(ZPS_OPT_FLAG_OPTIMIZER, "momentum", kind, ZPS_OPT_MOMENTUM);
    CHECK_FLAG(ZPS_OPT_FLAG_OPTIMIZER, "adam", kind, ZPS_OPT_ADAM);
    CHECK_FLAG(ZPS_OPT_FLAG_OPTIMIZER, "adamw", kind, ZPS_OPT_ADAMW);
    CHECK_FLAG(ZPS_OPT_FLAG_OPTIMIZER, "adagrad", kind, ZPS_OPT_ADAGRAD);
    CHECK_FLAG(ZPS_OPT_FLAG_LR, "0.25", lr, 0.25);
    CHECK_FLAG(ZPS_OPT_FLAG_MOMENTUM, "0.5", momentum, 0.5);
    CHECK_FLAG(ZPS_OPT_FLAG_BETA1, "0.8", beta1, 0.8);
    CHECK_FLAG(ZPS_OPT_FLAG_BETA2, "0.99", beta2, 0.99);
    CHECK_FLAG(ZPS_OPT_FLAG_EPS, "1e-6", eps, 1e-6);
    CHECK_FLAG(ZPS_OPT_FLAG_WEIGHT_DECAY, "0.0005", weight_decay, 0.0005);
    CHECK_FLAG(ZPS_OPT_FLAG_SCHEDULE, "constant", schedule, ZPS_SCHED_CONSTANT);
    CHECK_FLAG(ZPS_OPT_FLAG_SCHEDULE, "step", schedule, ZPS_SCHED_STEP);
    CHECK_FLAG(ZPS_OPT_FLAG_SCHEDULE, "cosine", schedule, ZPS_SCHED_COSINE);
    CHECK_FLAG(ZPS_OPT_FLAG_STEP_EVERY, "100", step_every, 100);
    CHECK_FLAG(ZPS_OPT_FLAG_GAMMA, "0.5", gamma, 0.5);
    CHECK_FLAG(ZPS_OPT_FLAG_COSINE_STEPS, "18446744073709551615", cosine_steps, UINT64_MAX);
    CHECK_FLAG(ZPS_OPT_FLAG_LR_MIN, "0.001", lr_min, 0.001);
    CHECK_FLAG(ZPS_OPT_FLAG_WARMUP, "0", warmup, 0);
    CHECK_FLAG(ZPS_OPT_FLAG_WARMUP, "7", warmup, 7);
#undef CHECK_FLAG

    /* "nesterov" as a name is momentum with Nesterov's variant. */
    zps_opt_flags_t f = apply_ok(ZPS_OPT_FLAG_OPTIMIZER, "nesterov");
    assert_int_equal(f.cfg.kind, ZPS_OPT_MOMENTUM);
    assert_true(f.cfg.nesterov);

    /* --nesterov only records the wish; finish applies it. */
    f = apply_ok(ZPS_OPT_FLAG_NESTEROV, NULL);
    assert_true(f.nesterov);
    zps_opt_config_default(&want);
    assert_same_config(&f.cfg, &want);
}

/* A refused value: ZPS_EINVAL, the exact message, and the field untouched. */
static void check_refused(int code, const char *arg, const char *message)
{
    zps_opt_flags_t f;
    zps_opt_flags_init(&f);
    char why[256] = "";
    assert_int_equal(zps_opt_flag_apply(&f, code, arg, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, message);
    zps_opt_config_t d;
    zps_opt_config_default(&d);
    assert_same_config(&f.cfg, &d);
}

static void test_bad_values(void **state)
{
    (void)state;
    check_refused(ZPS_OPT_FLAG_OPTIMIZER, "rmsprop",
                  "invalid --optimizer 'rmsprop': expected sgd, momentum, nesterov, adam, adamw or "
                  "adagrad");
    check_refused(ZPS_OPT_FLAG_LR, "x", "invalid --lr 'x': expected a number");
    check_refused(ZPS_OPT_FLAG_LR, "", "invalid --lr '': expected a number");
    check_refused(ZPS_OPT_FLAG_LR, "nan", "invalid --lr 'nan': expected a number");
    check_refused(ZPS_OPT_FLAG_LR, "0.1 ", "invalid --lr '0.1 ': expected a number");
    check_refused(ZPS_OPT_FLAG_MOMENTUM, "0.9x", "invalid --momentum '0.9x': expected a number");
    check_refused(ZPS_OPT_FLAG_BETA1, "inf", "invalid --beta1 'inf': expected a number");
    check_refused(ZPS_OPT_FLAG_BETA2, "1e999", "invalid --beta2 '1e999': expected a number");
    check_refused(ZPS_OPT_FLAG_EPS, "small", "invalid --eps 'small': expected a number");
    check_refused(ZPS_OPT_FLAG_WEIGHT_DECAY, "-", "invalid --weight-decay '-': expected a number");
    check_refused(ZPS_OPT_FLAG_SCHEDULE, "linear",
                  "invalid --schedule 'linear': expected constant, step or cosine");
    check_refused(ZPS_OPT_FLAG_STEP_EVERY, "-1",
                  "invalid --step-every '-1': expected a positive integer");
    check_refused(ZPS_OPT_FLAG_STEP_EVERY, "1.5",
                  "invalid --step-every '1.5': expected a positive integer");
    check_refused(ZPS_OPT_FLAG_GAMMA, "half", "invalid --gamma 'half': expected a number");
    check_refused(ZPS_OPT_FLAG_COSINE_STEPS, "18446744073709551616",
                  "invalid --cosine-steps '18446744073709551616': expected a positive integer");
    check_refused(ZPS_OPT_FLAG_LR_MIN, "0,1", "invalid --lr-min '0,1': expected a number");
    check_refused(ZPS_OPT_FLAG_WARMUP, "+3",
                  "invalid --warmup '+3': expected a non-negative integer");
    /* A missing argument reads as empty. */
    check_refused(ZPS_OPT_FLAG_GAMMA, NULL, "invalid --gamma '': expected a number");
    /* A code outside the table. */
    check_refused(ZPS_OPT_FLAG_END, "1", "not an optimizer flag");
    check_refused(ZPS_OPT_FLAG_FIRST - 1, "1", "not an optimizer flag");

    /* why may be NULL. */
    zps_opt_flags_t f;
    zps_opt_flags_init(&f);
    assert_int_equal(zps_opt_flag_apply(&f, ZPS_OPT_FLAG_LR, "x", NULL, 0), ZPS_EINVAL);
}

/* Applies flags in order, then finish; returns finish's code and why. */
static int run_flags(const int *codes, const char *const *args, size_t n, zps_opt_flags_t *f,
                     char *why, size_t why_size)
{
    zps_opt_flags_init(f);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(zps_opt_flag_apply(f, codes[i], args[i], why, why_size), 0);
    return zps_opt_flags_finish(f, why, why_size);
}

static void test_finish(void **state)
{
    (void)state;
    zps_opt_flags_t f;
    char why[256];

    /* Nothing given: the defaults pass. */
    zps_opt_flags_init(&f);
    assert_int_equal(zps_opt_flags_finish(&f, why, sizeof(why)), 0);
    assert_false(f.any);

    /* --nesterov with momentum, in either order. */
    int c1[] = {ZPS_OPT_FLAG_NESTEROV, ZPS_OPT_FLAG_OPTIMIZER};
    const char *a1[] = {NULL, "momentum"};
    assert_int_equal(run_flags(c1, a1, 2, &f, why, sizeof(why)), 0);
    assert_true(f.cfg.nesterov);
    assert_int_equal(f.cfg.kind, ZPS_OPT_MOMENTUM);
    int c2[] = {ZPS_OPT_FLAG_OPTIMIZER, ZPS_OPT_FLAG_NESTEROV};
    const char *a2[] = {"momentum", NULL};
    assert_int_equal(run_flags(c2, a2, 2, &f, why, sizeof(why)), 0);
    assert_true(f.cfg.nesterov);

    /* --nesterov with anything else. */
    int c3[] = {ZPS_OPT_FLAG_NESTEROV};
    const char *a3[] = {NULL};
    assert_int_equal(run_flags(c3, a3, 1, &f, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "--nesterov needs --optimizer momentum");
    assert_false(f.cfg.nesterov);

    /* The configuration check runs last, with its own messages. */
    int c4[] = {ZPS_OPT_FLAG_SCHEDULE};
    const char *a4[] = {"step"};
    assert_int_equal(run_flags(c4, a4, 1, &f, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "--step-every must be >= 1 with --schedule step");

    int c5[] = {ZPS_OPT_FLAG_SCHEDULE, ZPS_OPT_FLAG_STEP_EVERY, ZPS_OPT_FLAG_GAMMA};
    const char *a5[] = {"step", "10", "0.5"};
    assert_int_equal(run_flags(c5, a5, 3, &f, why, sizeof(why)), 0);
    assert_true(f.cfg.step_every == 10);
    assert_true(f.cfg.gamma == 0.5);

    int c6[] = {ZPS_OPT_FLAG_OPTIMIZER, ZPS_OPT_FLAG_BETA2};
    const char *a6[] = {"adam", "1"};
    assert_int_equal(run_flags(c6, a6, 2, &f, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "--beta2 must be in [0, 1) (got 1)");

    int c7[] = {ZPS_OPT_FLAG_LR};
    const char *a7[] = {"-0.5"};
    assert_int_equal(run_flags(c7, a7, 1, &f, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "--lr must be > 0 and a normal float32 number (got -0.5)");

    /* A later flag overrides an earlier one. */
    int c8[] = {ZPS_OPT_FLAG_LR, ZPS_OPT_FLAG_LR};
    const char *a8[] = {"0.5", "0.125"};
    assert_int_equal(run_flags(c8, a8, 2, &f, why, sizeof(why)), 0);
    assert_true(f.cfg.lr == 0.125);
}

/* Every flag in the getopt table is one apply knows, and the other way round. */
static void test_table_and_usage(void **state)
{
    (void)state;
    static const struct option table[] = {ZPS_OPT_FLAG_OPTIONS};
    size_t n = sizeof(table) / sizeof(table[0]);
    assert_int_equal(n, ZPS_OPT_FLAG_END - ZPS_OPT_FLAG_FIRST);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(table[i].val, ZPS_OPT_FLAG_FIRST + (int)i);
        assert_null(table[i].flag);
        assert_int_equal(table[i].has_arg, table[i].val == ZPS_OPT_FLAG_NESTEROV ? 0 : 1);
        /* Named in the usage text as "--name". */
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s ", table[i].name);
        assert_non_null(strstr(zps_opt_flags_usage, flag));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_is_default), cmocka_unit_test(test_each_flag_sets_its_field),
        cmocka_unit_test(test_bad_values),      cmocka_unit_test(test_finish),
        cmocka_unit_test(test_table_and_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
