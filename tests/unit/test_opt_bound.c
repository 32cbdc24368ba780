/*
 * test_opt_bound.c - the bounds that let a step skip its overflow check
 * (optimizer.h, zps_optimizer_bound): for every optimizer, over random and
 * adversarial configurations, a proven step really stays finite and every
 * array ends within its bound; steps that overflow are never proven and
 * are still refused whole; the bounded paths give the plain ones' results
 * bit for bit; the receive scan's max|g| is the payload's.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "checksum.h"
#include "error.h"
#include "mean.h"
#include "optimizer.h"
#include "store.h"
#include "wire.h"

static const char *const names[] = {"sgd", "momentum", "nesterov", "adam", "adamw", "adagrad"};
#define NAMES (sizeof(names) / sizeof(names[0]))

/* A small deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* 10^u for u uniform in [lo, hi]. */
static double log_uniform(double lo, double hi)
{
    return pow(10.0, lo + (hi - lo) * uniform());
}

/* max|x[i]| in double, computed here, not by the code under test. */
static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

static bool all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* Values of magnitude up to `scale`, spread over many decades, both signs. */
static void fill(float *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) {
        double v = scale * log_uniform(-12.0, 0.0) * (uniform() < 0.5 ? -1.0 : 1.0);
        x[i] = (float)v;
    }
    x[n / 2] = (float)scale; /* the maximum itself */
}

static void random_config(zps_opt_config_t *cfg, size_t which)
{
    zps_opt_config_default(cfg);
    assert_int_equal(zps_opt_parse(names[which], cfg), 0);
    cfg->lr = log_uniform(-6.0, 6.0);
    cfg->eps = uniform() < 0.2 ? (double)FLT_MIN * log_uniform(0.0, 3.0) : log_uniform(-12.0, 0.0);
    cfg->weight_decay = uniform() < 0.5 ? 0.0 : log_uniform(-4.0, 2.0);
    cfg->momentum = uniform() < 0.2 ? 0.0 : 1.0 - log_uniform(-6.0, 0.0) * 0.999;
    cfg->beta1 = uniform() < 0.2 ? 0.0 : 1.0 - log_uniform(-6.0, 0.0) * 0.999;
    cfg->beta2 = uniform() < 0.2 ? 0.0 : 1.0 - log_uniform(-8.0, 0.0) * 0.999;
    cfg->warmup = uniform() < 0.3 ? 4 : 0;
    if (uniform() < 0.3) {
        cfg->schedule = ZPS_SCHED_COSINE;
        cfg->cosine_steps = 6;
        cfg->lr_min = cfg->lr * 0.1;
    }
    assert_int_equal(zps_opt_config_check(cfg, NULL, 0), 0);
}

/*
 * Random steps with the bounds carried forward, never re-measured: whenever
 * the bound proves a step, the real step (with its exact check) is taken,
 * finite, and every array ends within the bound computed before it.
 */
static void test_bound_holds(void **state)
{
    (void)state;
    enum { N = 193, CONFIGS = 400, STEPS = 6 };
    float *p = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    assert_non_null(p);
    assert_non_null(g);
    unsigned proven = 0, unproven = 0;
    for (size_t which = 0; which < NAMES; which++) {
        for (int c = 0; c < CONFIGS; c++) {
            zps_opt_config_t cfg;
            random_config(&cfg, which);
            zps_optimizer_t *opt;
            assert_int_equal(zps_optimizer_new(&cfg, N, &opt), 0);
            double p_scale = log_uniform(-3.0, c % 4 == 0 ? 36.0 : 6.0);
            fill(p, N, p_scale);
            zps_opt_bounds_t b;
            zps_optimizer_measure(opt, p, &b);
            assert_true(b.p == max_abs(p, N));
            for (int t = 0; t < STEPS; t++) {
                /* Gradients up to near and past the threshold's square root
                 * (Adam's and AdaGrad's g*g) and the threshold itself. */
                double g_scale = log_uniform(-6.0, c % 3 == 0 ? 37.5 : 8.0);
                fill(g, N, g_scale);
                double lr_scale = uniform() < 0.7 ? 1.0 : log_uniform(-3.0, 1.0);
                zps_opt_step_t st;
                zps_optimizer_begin(opt, lr_scale, &st);
                zps_opt_bounds_t next;
                bool ok = zps_optimizer_bound(opt, &st, &b, max_abs(g, N), &next);
                int rc = zps_optimizer_step(opt, p, g, lr_scale);
                if (!ok) {
                    unproven++;
                    if (rc != 0)
                        continue;
                    /* Taken on the exact check: measure afresh, as the store does. */
                    zps_optimizer_measure(opt, p, &b);
                    continue;
                }
                proven++;
                assert_int_equal(rc, 0);
                assert_true(all_finite(p, N));
                assert_true(max_abs(p, N) <= next.p);
                assert_true(next.p <= ZPS_OPT_SAFE);
                for (size_t k = 0; k < zps_optimizer_state_count(opt); k++) {
                    const float *x = zps_optimizer_state(opt, k, NULL);
                    assert_true(all_finite(x, N));
                    assert_true(max_abs(x, N) <= next.state[k]);
                    assert_true(next.state[k] <= ZPS_OPT_SAFE);
                }
                b = next;
            }
            zps_optimizer_free(opt);
        }
    }
    /* Both outcomes were exercised. */
    assert_true(proven > 1000);
    assert_true(unproven > 100);
    free(p);
    free(g);
}

/* Steps that overflow are never proven, and the bounded step still refuses them whole. */
static void test_overflow_never_proven(void **state)
{
    (void)state;
    enum { N = 64 };
    float p[N], g[N], p0[N];
    unsigned refused = 0, taken = 0;
    for (size_t which = 0; which < NAMES; which++) {
        for (int c = 0; c < 200; c++) {
            zps_opt_config_t cfg;
            random_config(&cfg, which);
            zps_optimizer_t *opt;
            assert_int_equal(zps_optimizer_new(&cfg, N, &opt), 0);
            fill(p, N, log_uniform(0.0, 38.0));
            fill(g, N, log_uniform(30.0, 38.5));
            zps_opt_bounds_t b, next;
            zps_optimizer_measure(opt, p, &b);
            zps_opt_step_t st;
            zps_optimizer_begin(opt, 1.0, &st);
            bool ok = zps_optimizer_bound(opt, &st, &b, max_abs(g, N), &next);
            /* The exact verdict of the step's own check. */
            bool finite = zps_optimizer_check(opt, &st, 0, N, p, g);
            if (ok)
                assert_true(finite);
            memcpy(p0, p, sizeof(p));
            zps_opt_bounds_t kept = b;
            int rc = zps_optimizer_step_bounded(opt, p, g, 1.0, max_abs(g, N), &b);
            assert_int_equal(rc, finite ? 0 : ZPS_ENONFINITE);
            refused += !finite;
            taken += finite;
            if (!finite) {
                assert_memory_equal(p, p0, sizeof(p));
                assert_memory_equal(&b, &kept, sizeof(b));
                assert_int_equal(zps_optimizer_steps(opt), 0);
            } else {
                assert_true(all_finite(p, N));
                assert_true(max_abs(p, N) <= b.p);
            }
            zps_optimizer_free(opt);
        }
    }
    assert_true(refused > 100);
    assert_true(taken > 100);
}

/* zps_optimizer_step_bounded is zps_optimizer_step, bit for bit, either path. */
static void test_bounded_step_is_the_step(void **state)
{
    (void)state;
    enum { N = 301 };
    float p[N], q[N], g[N];
    for (size_t which = 0; which < NAMES; which++) {
        zps_opt_config_t cfg;
        random_config(&cfg, which);
        zps_optimizer_t *a, *b;
        assert_int_equal(zps_optimizer_new(&cfg, N, &a), 0);
        assert_int_equal(zps_optimizer_new(&cfg, N, &b), 0);
        fill(p, N, 10.0);
        memcpy(q, p, sizeof(p));
        zps_opt_bounds_t bd;
        zps_optimizer_measure(b, q, &bd);
        for (int t = 0; t < 20; t++) {
            fill(g, N, t == 7 ? 1e30 : 1.0);
            /* An unknown max|g| now and then: the exact path. */
            double gm = t % 5 == 3 ? INFINITY : max_abs(g, N);
            int ra = zps_optimizer_step(a, p, g, 1.0);
            int rb = zps_optimizer_step_bounded(b, q, g, 1.0, gm, &bd);
            assert_int_equal(ra, rb);
            assert_memory_equal(p, q, sizeof(p));
            for (size_t k = 0; k < zps_optimizer_state_count(a); k++)
                assert_memory_equal(zps_optimizer_state(a, k, NULL),
                                    zps_optimizer_state(b, k, NULL), N * sizeof(float));
        }
        zps_optimizer_free(a);
        zps_optimizer_free(b);
    }
}

/* The mean's bound: its partial sums and quotient, and the overflow of test_overflow. */
static void test_mean_bound(void **state)
{
    (void)state;
    double m;
    const uint32_t one[1] = {2147483647u};
    /* 3e38 times a batch of 2^31 - 1 overflows the sum before the division. */
    assert_false(zps_mean_bound(one, 1, 3e38, &m));
    assert_true(isinf(m));
    const uint32_t n[3] = {1, 2, 5};
    assert_true(zps_mean_bound(n, 3, 4.0, &m));
    assert_true(m >= 4.0 && m <= 4.0 * 1.0001);
    /* Random gradients: the bound covers the mean actually computed. */
    enum { LEN = 100, K = 4 };
    float gs[K][LEN], out[LEN];
    const float *gp[K];
    uint32_t bs[K];
    for (int c = 0; c < 200; c++) {
        double scale = log_uniform(-5.0, 37.0);
        double gm = 0.0;
        for (int j = 0; j < K; j++) {
            fill(gs[j], LEN, scale);
            gp[j] = gs[j];
            bs[j] = (uint32_t)log_uniform(0.0, 9.0);
            gm = fmax(gm, max_abs(gs[j], LEN));
        }
        zps_weighted_mean(gp, bs, K, LEN, out);
        if (zps_mean_bound(bs, K, gm, &m)) {
            assert_true(all_finite(out, LEN));
            assert_true(max_abs(out, LEN) <= m);
        }
    }
}

/*
 * The store: bounded steps (ASP and BSP) give the plain steps' results bit
 * for bit, and the overflow cases of test_refuses_nonfinite_step are refused
 * through the bounded entry points too, with nothing changed.
 */
static void test_store_bounded(void **state)
{
    (void)state;
    size_t len = 3 * ZPS_STORE_BLOCK + 17, bad = 3 * ZPS_STORE_BLOCK + 5;
    float *init = malloc(len * sizeof(float)), *g = malloc(len * sizeof(float));
    float *huge = malloc(len * sizeof(float)), *before = malloc(len * sizeof(float));
    assert_non_null(init);
    assert_non_null(g);
    assert_non_null(huge);
    assert_non_null(before);
    for (size_t i = 0; i < len; i++) {
        init[i] = (float)(i % 13) * 0.25f - 1.0f;
        g[i] = (float)(i % 7) * 0.125f - 0.375f;
        huge[i] = g[i];
    }
    init[bad] = -3e38f;
    huge[bad] = 3e38f;
    double g_max = max_abs(g, len);
    for (size_t a = 0; a < NAMES; a++) {
        zps_opt_config_t cfg;
        zps_opt_config_default(&cfg);
        assert_int_equal(zps_opt_parse(names[a], &cfg), 0);
        cfg.lr = 1.0;
        cfg.weight_decay = cfg.kind == ZPS_OPT_ADAMW ? 0.01 : 0.0;
        zps_store_t s, twin;
        zps_store_init(&s);
        zps_store_init(&twin);
        zps_range_t r = {0, len};
        assert_int_equal(zps_store_set(&s, len, r, init, &cfg), 0);
        assert_int_equal(zps_store_set(&twin, len, r, init, &cfg), 0);
        for (int t = 0; t < 3; t++) {
            assert_int_equal(zps_store_apply_bounded(&s, g, g_max, 1.0, NULL), 0);
            assert_int_equal(zps_store_apply(&twin, g, 1.0, NULL), 0);
        }
        assert_memory_equal(s.params, twin.params, len * sizeof(float));
        memcpy(before, s.params, len * sizeof(float));
        size_t where = 0;
        /* ASP: lr * 3e38 passes -FLT_MAX at `bad`. */
        assert_int_equal(zps_store_apply_bounded(&s, huge, max_abs(huge, len), 1.0, &where),
                         ZPS_ENONFINITE);
        assert_int_equal(where, 3 * ZPS_STORE_BLOCK);
        /* BSP: batch 2^31 - 1 times 3e38 overflows the mean. */
        const float *gs[1] = {huge};
        uint32_t n[1] = {2147483647u};
        assert_int_equal(zps_store_check_mean_bounded(&s, gs, n, 1, 3e38, &where), ZPS_ENONFINITE);
        assert_int_equal(where, 3 * ZPS_STORE_BLOCK);
        assert_memory_equal(s.params, before, len * sizeof(float));
        assert_int_equal(zps_optimizer_steps(s.opt), 3);
        zps_store_fini(&s);
        zps_store_fini(&twin);

        /* From a model of ordinary values the bounds prove every step
         * (bounds_known stays set), and the results are the plain steps'. */
        init[bad] = -1.0f;
        assert_int_equal(zps_store_set(&s, len, r, init, &cfg), 0);
        assert_int_equal(zps_store_set(&twin, len, r, init, &cfg), 0);
        init[bad] = -3e38f;
        for (int t = 0; t < 3; t++) {
            assert_int_equal(zps_store_apply_bounded(&s, g, g_max, 1.0, NULL), 0);
            assert_true(s.bounds_known);
            assert_int_equal(zps_store_apply(&twin, g, 1.0, NULL), 0);
        }
        assert_memory_equal(s.params, twin.params, len * sizeof(float));
        const float *gg[2] = {g, g};
        uint32_t nn[2] = {3, 5};
        for (int t = 0; t < 3; t++) {
            assert_int_equal(zps_store_check_mean_bounded(&s, gg, nn, 2, g_max, NULL), 0);
            uint32_t c1 = zps_store_step_mean_bounded(&s, gg, nn, 2, g_max, before);
            assert_int_equal(zps_store_check_mean(&twin, gg, nn, 2, NULL), 0);
            uint32_t c2 = zps_store_step_mean(&twin, gg, nn, 2, NULL);
            (void)c1;
            (void)c2;
            assert_memory_equal(s.params, twin.params, len * sizeof(float));
            assert_memory_equal(before, s.params, len * sizeof(float));
            assert_true(s.bounds_known);
        }
        zps_store_fini(&s);
        zps_store_fini(&twin);
    }
    free(init);
    free(g);
    free(huge);
    free(before);
}

/* The receive scan's max|g|: the payload's, INFINITY with a non-finite value. */
static void test_scan_max(void **state)
{
    (void)state;
    enum { N = 20000 };
    float *v = malloc(N * sizeof(float));
    assert_non_null(v);
    fill(v, N, 1.0);
    v[N / 2] = 0.5f;
    v[12345] = -7.25f;
    size_t bad, bad2;
    float mx;
    uint32_t crc = zps_crc_scan(v, N, &bad);
    assert_int_equal(zps_crc_scan_max(v, N, &bad2, &mx), crc);
    assert_int_equal(bad2, N);
    assert_true(mx == 7.25f);
    v[15000] = NAN;
    v[17000] = -INFINITY;
    crc = zps_crc_scan(v, N, &bad);
    assert_int_equal(zps_crc_scan_max(v, N, &bad2, &mx), crc);
    assert_int_equal(bad2, 15000);
    assert_true(isinf(mx));
    assert_int_equal(zps_crc_scan_max(v, 0, &bad2, &mx), zps_crc_scan(v, 0, &bad));
    assert_true(mx == 0.0f);
    assert_true(zps_abs_max(v, 12346) == 7.25f);
    free(v);

    /* Long enough to be cut into chunks for the helper threads: the CRC is
     * the table path's over the whole, the first bad value the first one
     * though a later chunk has one too, the copy the same bytes. */
    enum { LONG = (3 << 20) / 4 + 12345 };
    v = malloc(LONG * sizeof(float));
    float *copy = malloc(LONG * sizeof(float));
    assert_non_null(v);
    assert_non_null(copy);
    fill(v, LONG, 1.0);
    v[LONG - 5] = 9.5f;
    uint32_t whole = zps_crc32c_sw(0, v, LONG * sizeof(float));
    assert_int_equal(zps_crc_scan_max(v, LONG, &bad, &mx), whole);
    assert_int_equal(bad, LONG);
    assert_true(mx == 9.5f);
    assert_int_equal(zps_crc_copy_scan_max(copy, v, LONG, &bad, &mx), whole);
    assert_memory_equal(copy, v, LONG * sizeof(float));
    v[LONG - 3] = NAN;
    v[(1 << 20) / 4 + 77] = INFINITY;
    whole = zps_crc32c_sw(0, v, LONG * sizeof(float));
    assert_int_equal(zps_crc_scan(v, LONG, &bad), whole);
    assert_int_equal(bad, (1 << 20) / 4 + 77);
    assert_int_equal(zps_crc_copy_scan_max(copy, v, LONG, &bad2, &mx), whole);
    assert_int_equal(bad2, bad);
    assert_true(isinf(mx));
    memset(copy, 0, LONG * sizeof(float));
    assert_int_equal(zps_crc_copy_out_scan_max(copy, v, LONG, &bad2, &mx), whole);
    assert_int_equal(bad2, bad);
    assert_true(isinf(mx));
    assert_memory_equal(copy, v, LONG * sizeof(float));
    free(v);
    free(copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_holds),
        cmocka_unit_test(test_overflow_never_proven),
        cmocka_unit_test(test_bounded_step_is_the_step),
        cmocka_unit_test(test_mean_bound),
        cmocka_unit_test(test_store_bounded),
        cmocka_unit_test(test_scan_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
