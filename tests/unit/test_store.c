/*
 * test_store.c - the synchronous step's arithmetic and the shard's
 * histograms, recomputed by hand.
 */
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
#include "hist.h"
#include "store.h"

static void test_weighted_mean_by_hand(void **state)
{
    (void)state;
    /* Three workers, batches 1, 2, 5: (1*3 + 2*6 + 5*(-3)) / 8 = 0 and
     * (1*1 + 2*2 + 5*4) / 8 = 3.125. */
    const float g0[2] = {3, 1}, g1[2] = {6, 2}, g2[2] = {-3, 4};
    const float *g[3] = {g0, g1, g2};
    const uint32_t n[3] = {1, 2, 5};
    float out[2];
    zps_weighted_mean(g, n, 3, 2, out);
    assert_true(out[0] == 0.0f);
    assert_true(out[1] == 3.125f);

    /* The worked example: 2, 4, 6, 8 on equal batches -> 5, not 20. */
    const float a[1] = {2}, b[1] = {4}, c[1] = {6}, d[1] = {8};
    const float *ex[4] = {a, b, c, d};
    const uint32_t ones[4] = {1, 1, 1, 1};
    zps_weighted_mean(ex, ones, 4, 1, out);
    assert_true(out[0] == 5.0f);
}

/* The summation order is the order given: rank order, not arrival order. */
static void test_order_is_fixed(void **state)
{
    (void)state;
    /* 1e8 + 1 - 1e8 in float32 depends on the order of the terms. */
    const float x[1] = {1e8f}, y[1] = {1.0f}, z[1] = {-1e8f};
    const uint32_t ones[3] = {1, 1, 1};
    const float *xyz[3] = {x, y, z}, *xzy[3] = {x, z, y};
    float o1[1], o2[1];
    zps_weighted_mean(xyz, ones, 3, 1, o1);
    zps_weighted_mean(xzy, ones, 3, 1, o2);
    float acc1 = (1e8f + 1.0f) + -1e8f, acc2 = (1e8f + -1e8f) + 1.0f;
    assert_true(o1[0] == acc1 / 3.0f);
    assert_true(o2[0] == acc2 / 3.0f);
    assert_true(o1[0] != o2[0]);
}

static void test_store_set(void **state)
{
    (void)state;
    zps_store_t s;
    zps_store_init(&s);
    zps_opt_config_t cfg;
    zps_opt_config_default(&cfg);
    cfg.lr = 0.5;
    float v[3] = {1, 2, 3};
    zps_range_t r = {4, 7};
    assert_int_equal(zps_store_set(&s, 10, r, v, &cfg), 0);
    assert_non_null(s.params);
    assert_int_equal(s.len, 3);
    assert_int_equal((uintptr_t)s.params % 64, 0);
    assert_memory_equal(s.params, v, sizeof(v));
    float g[3] = {2, 2, 2};
    zps_store_apply(&s, g, 1.0);
    assert_true(s.params[0] == 0.0f && s.params[2] == 2.0f);
    zps_range_t outside = {8, 12};
    assert_int_equal(zps_store_set(&s, 10, outside, v, &cfg), ZPS_EINVAL);
    assert_true(s.params[0] == 0.0f); /* unchanged */
    zps_store_fini(&s);
}

/*
 * The blocked BSP step equals the mean, then the optimizer step, bit for bit,
 * for every optimizer, for lengths around the block size, over several steps
 * (so the schedule and Adam's bias corrections advance the same way), and its
 * copy of the parameters carries their CRC32C.
 */
static void test_blocked_step(void **state)
{
    (void)state;
    const zps_opt_kind_t kinds[] = {ZPS_OPT_SGD, ZPS_OPT_MOMENTUM, ZPS_OPT_ADAM, ZPS_OPT_ADAMW,
                                    ZPS_OPT_ADAGRAD};
    const size_t lens[] = {1, ZPS_STORE_BLOCK - 1, ZPS_STORE_BLOCK, ZPS_STORE_BLOCK + 1,
                           3 * ZPS_STORE_BLOCK + 77};
    const uint32_t batches[3] = {5, 16, 3};
    size_t max = lens[sizeof(lens) / sizeof(lens[0]) - 1];
    float *init = malloc(max * sizeof(float));
    float *g[3], *mean = malloc(max * sizeof(float)), *copy = malloc(max * sizeof(float));
    uint32_t x = 99;
    for (int j = 0; j < 3; j++)
        g[j] = malloc(max * sizeof(float));
    for (size_t i = 0; i < max; i++) {
        x = x * 1664525u + 1013904223u;
        init[i] = (float)(int32_t)x / 2147483648.0f;
        for (int j = 0; j < 3; j++) {
            x = x * 1664525u + 1013904223u;
            g[j][i] = (float)(int32_t)x / 1073741824.0f;
        }
    }
    for (size_t a = 0; a < sizeof(kinds) / sizeof(kinds[0]); a++) {
        for (size_t b = 0; b < sizeof(lens) / sizeof(lens[0]); b++) {
            size_t len = lens[b];
            zps_opt_config_t cfg;
            zps_opt_config_default(&cfg);
            cfg.kind = kinds[a];
            cfg.lr = 0.05;
            cfg.weight_decay = 0.01;
            cfg.schedule = ZPS_SCHED_COSINE;
            cfg.cosine_steps = 5;
            cfg.warmup = 2;
            zps_store_t blocked, plain;
            zps_store_init(&blocked);
            zps_store_init(&plain);
            zps_range_t r = {0, len};
            assert_int_equal(zps_store_set(&blocked, len, r, init, &cfg), 0);
            assert_int_equal(zps_store_set(&plain, len, r, init, &cfg), 0);
            for (int step = 0; step < 4; step++) {
                const float *gs[3] = {g[step % 3], g[(step + 1) % 3], g[(step + 2) % 3]};
                size_t k = 1 + (size_t)step % 3;
                uint32_t crc =
                    zps_store_step_mean(&blocked, gs, batches, k, step % 2 ? copy : NULL);
                zps_weighted_mean(gs, batches, k, len, mean);
                zps_store_apply(&plain, mean, 1.0);
                assert_memory_equal(blocked.params, plain.params, len * sizeof(float));
                if (step % 2) {
                    assert_memory_equal(copy, plain.params, len * sizeof(float));
                    assert_int_equal(crc, zps_crc32c(0, plain.params, len * sizeof(float)));
                } else {
                    assert_int_equal(crc, 0);
                }
            }
            for (size_t i = 0; i < zps_optimizer_state_count(plain.opt); i++)
                assert_memory_equal(zps_optimizer_state(blocked.opt, i, NULL),
                                    zps_optimizer_state(plain.opt, i, NULL), len * sizeof(float));
            assert_int_equal(zps_optimizer_steps(blocked.opt), 4);
            zps_store_fini(&blocked);
            zps_store_fini(&plain);
        }
    }
    for (int j = 0; j < 3; j++)
        free(g[j]);
    free(init);
    free(mean);
    free(copy);
}

static void test_value_histogram(void **state)
{
    (void)state;
    zps_vhist_t h;
    memset(&h, 0, sizeof(h));
    assert_int_equal(zps_vhist_quantile(&h, 0.5), 0);
    for (int i = 0; i < 90; i++)
        zps_vhist_add(&h, 0);
    for (int i = 0; i < 9; i++)
        zps_vhist_add(&h, 3);
    zps_vhist_add(&h, 1000);
    assert_int_equal(h.n, 100);
    assert_int_equal(h.max, 1000);
    assert_int_equal(h.overflow, 1);
    assert_int_equal(zps_vhist_quantile(&h, 0.5), 0);
    assert_int_equal(zps_vhist_quantile(&h, 0.95), 3);
    assert_int_equal(zps_vhist_quantile(&h, 0.99), 3);
    assert_int_equal(zps_vhist_quantile(&h, 1.0), 1000);
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_vhist_json(&h, &b);
    char *s = zps_strbuf_take(&b);
    assert_non_null(strstr(s, "\"histogram\":{\"0\":90,\"3\":9,\">=64\":1}"));
    free(s);
}

static void test_time_histogram(void **state)
{
    (void)state;
    zps_thist_t h;
    memset(&h, 0, sizeof(h));
    /* 1..1000 microseconds: p50 near 500 us, p99 near 990 us, within 1/16. */
    for (uint64_t us = 1; us <= 1000; us++)
        zps_thist_add(&h, us * 1000);
    double p50 = (double)zps_thist_quantile(&h, 0.5);
    double p99 = (double)zps_thist_quantile(&h, 0.99);
    assert_true(p50 >= 500e3 && p50 <= 500e3 * (1 + 1.0 / 16));
    assert_true(p99 >= 990e3 && p99 <= 990e3 * (1 + 1.0 / 16));
    assert_int_equal(zps_thist_quantile(&h, 1.0), 1000000);
    /* Small values are exact. */
    zps_thist_t z;
    memset(&z, 0, sizeof(z));
    zps_thist_add(&z, 7);
    assert_int_equal(zps_thist_quantile(&z, 0.5), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weighted_mean_by_hand),
        cmocka_unit_test(test_order_is_fixed),
        cmocka_unit_test(test_store_set),
        cmocka_unit_test(test_value_histogram),
        cmocka_unit_test(test_time_histogram),
        cmocka_unit_test(test_blocked_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
