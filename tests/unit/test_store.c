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
    assert_int_equal(zps_store_apply(&s, g, 1.0, NULL), 0);
    assert_true(s.params[0] == 0.0f && s.params[2] == 2.0f);
    zps_range_t outside = {8, 12};
    assert_int_equal(zps_store_set(&s, 10, outside, v, &cfg), ZPS_EINVAL);
    assert_true(s.params[0] == 0.0f); /* unchanged */
    zps_store_fini(&s);
}

/*
 * Deterministic values: init[len] in [-1, 1), and g[j][len] for j < k in
 * [-2, 2), drawn in turn from one LCG seeded with `seed`.
 */
static void fill_values(uint32_t seed, float *init, float **g, int k, size_t len)
{
    uint32_t x = seed;
    for (size_t i = 0; i < len; i++) {
        x = x * 1664525u + 1013904223u;
        init[i] = (float)(int32_t)x / 2147483648.0f;
        for (int j = 0; j < k; j++) {
            x = x * 1664525u + 1013904223u;
            g[j][i] = (float)(int32_t)x / 1073741824.0f;
        }
    }
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
    for (int j = 0; j < 3; j++)
        g[j] = malloc(max * sizeof(float));
    fill_values(99, init, g, 3, max);
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
                assert_int_equal(zps_store_check_mean(&blocked, gs, batches, k, NULL), 0);
                uint32_t crc =
                    zps_store_step_mean(&blocked, gs, batches, k, step % 2 ? copy : NULL);
                zps_weighted_mean(gs, batches, k, len, mean);
                assert_int_equal(zps_store_apply(&plain, mean, 1.0, NULL), 0);
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

/*
 * A step of finite inputs whose result would not be finite is refused whole,
 * for every optimizer, whether it comes from one gradient (SSP/ASP) or from
 * BSP's mean (a huge gradient times a huge batch overflows the mean): the
 * parameters, the optimizer's state and its step count are as before, so the
 * next good step equals that of a twin store that never saw the bad one. The
 * bad element sits in the last block, after blocks a one-pass step would
 * already have changed.
 */
static void test_refuses_nonfinite_step(void **state)
{
    (void)state;
    const char *names[] = {"sgd", "momentum", "nesterov", "adam", "adamw", "adagrad"};
    const size_t len = 3 * ZPS_STORE_BLOCK + 5, bad = 3 * ZPS_STORE_BLOCK + 2;
    float *init = malloc(len * sizeof(float)), *g = malloc(len * sizeof(float));
    float *huge = malloc(len * sizeof(float)), *before = malloc(len * sizeof(float));
    float *st_before = malloc(len * sizeof(float));
    assert_non_null(init);
    assert_non_null(g);
    assert_non_null(huge);
    assert_non_null(before);
    assert_non_null(st_before);
    for (size_t i = 0; i < len; i++) {
        init[i] = (float)(i % 13) * 0.25f - 1.0f;
        g[i] = (float)(i % 7) * 0.125f - 0.375f;
        huge[i] = g[i];
    }
    init[bad] = -3e38f;
    huge[bad] = 3e38f; /* finite; with lr 1 the parameter would pass -FLT_MAX */
    for (size_t a = 0; a < sizeof(names) / sizeof(names[0]); a++) {
        for (int bsp = 0; bsp < 2; bsp++) {
            zps_opt_config_t cfg;
            zps_opt_config_default(&cfg);
            assert_int_equal(zps_opt_parse(names[a], &cfg), 0);
            cfg.lr = 1.0;
            /* Decoupled decay only: an L2 term of -3e38 would overflow Adam's v on its own. */
            cfg.weight_decay = cfg.kind == ZPS_OPT_ADAMW ? 0.01 : 0.0;
            zps_store_t s, twin;
            zps_store_init(&s);
            zps_store_init(&twin);
            zps_range_t r = {0, len};
            assert_int_equal(zps_store_set(&s, len, r, init, &cfg), 0);
            assert_int_equal(zps_store_set(&twin, len, r, init, &cfg), 0);
            /* One good step first, so that the state is not all zero. */
            assert_int_equal(zps_store_apply(&s, g, 1.0, NULL), 0);
            assert_int_equal(zps_store_apply(&twin, g, 1.0, NULL), 0);
            memcpy(before, s.params, len * sizeof(float));
            float *st0 =
                zps_optimizer_state_count(s.opt) ? zps_optimizer_state(s.opt, 0, NULL) : NULL;
            if (st0)
                memcpy(st_before, st0, len * sizeof(float));
            size_t where = 0;
            if (bsp) {
                /* One worker, batch 2^31 - 1: n * g overflows the mean. */
                const float *gs[1] = {g};
                uint32_t n[1] = {2147483647u};
                float *big = malloc(len * sizeof(float));
                assert_non_null(big);
                memcpy(big, g, len * sizeof(float));
                big[bad] = 3e38f;
                gs[0] = big;
                assert_int_equal(zps_store_check_mean(&s, gs, n, 1, &where), ZPS_ENONFINITE);
                free(big);
            } else {
                assert_int_equal(zps_store_apply(&s, huge, 1.0, &where), ZPS_ENONFINITE);
            }
            assert_int_equal(where, 3 * ZPS_STORE_BLOCK);
            assert_memory_equal(s.params, before, len * sizeof(float));
            if (st0)
                assert_memory_equal(st0, st_before, len * sizeof(float));
            assert_int_equal(zps_optimizer_steps(s.opt), 1);
            /* The next good step is the twin's, bit for bit. */
            const float *gs[1] = {g};
            uint32_t n[1] = {3};
            assert_int_equal(zps_store_check_mean(&s, gs, n, 1, NULL), 0);
            zps_store_step_mean(&s, gs, n, 1, NULL);
            assert_int_equal(zps_store_check_mean(&twin, gs, n, 1, NULL), 0);
            zps_store_step_mean(&twin, gs, n, 1, NULL);
            assert_memory_equal(s.params, twin.params, len * sizeof(float));
            zps_store_fini(&s);
            zps_store_fini(&twin);
        }
    }
    free(init);
    free(g);
    free(huge);
    free(before);
    free(st_before);
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

/*
 * Gradients read in segments, as BSP pushes that came in several frames
 * are: the same step as from contiguous copies, bit for bit, with segments
 * of two blocks (the last one short) beside contiguous ones in one step;
 * a non-finite value in a later segment is found in its own block.
 */
static void test_segmented_step(void **state)
{
    (void)state;
    enum { LEN = 5 * ZPS_STORE_BLOCK + 77, SEG = 2 * ZPS_STORE_BLOCK, NSEG = 3 };
    float *init = malloc(LEN * sizeof(float)), *g[2], *copy_a = malloc(LEN * sizeof(float)),
          *copy_b = malloc(LEN * sizeof(float));
    float *pieces[NSEG];
    for (int j = 0; j < 2; j++)
        g[j] = malloc(LEN * sizeof(float));
    fill_values(7, init, g, 2, LEN);
    /* Gradient 0 in segments of its own memory, as frames are. */
    for (int k = 0; k < NSEG; k++) {
        size_t lo = (size_t)k * SEG, n = LEN - lo < SEG ? LEN - lo : SEG;
        pieces[k] = malloc(n * sizeof(float));
        memcpy(pieces[k], g[0] + lo, n * sizeof(float));
    }
    const float *seg0[NSEG] = {pieces[0], pieces[1], pieces[2]};
    const float *seg1[1] = {g[1]};
    const zps_grad_segs_t segs[2] = {{seg0, SEG}, {seg1, LEN}};
    const float *flat[2] = {g[0], g[1]};
    const float *blk[2];
    const uint32_t batches[2] = {3, 8};
    zps_opt_config_t cfg;
    zps_opt_config_default(&cfg);
    cfg.kind = ZPS_OPT_ADAM;
    cfg.lr = 0.01;
    zps_store_t a, b;
    zps_store_init(&a);
    zps_store_init(&b);
    zps_range_t r = {0, LEN};
    assert_int_equal(zps_store_set(&a, LEN, r, init, &cfg), 0);
    assert_int_equal(zps_store_set(&b, LEN, r, init, &cfg), 0);
    for (int step = 0; step < 3; step++) {
        assert_int_equal(zps_store_check_mean_segs(&a, segs, batches, 2, INFINITY, blk, NULL), 0);
        uint32_t ca = zps_store_step_mean_segs(&a, segs, batches, 2, INFINITY, blk, copy_a);
        assert_int_equal(zps_store_check_mean(&b, flat, batches, 2, NULL), 0);
        uint32_t cb = zps_store_step_mean(&b, flat, batches, 2, copy_b);
        assert_int_equal(ca, cb);
        assert_memory_equal(a.params, b.params, LEN * sizeof(float));
        assert_memory_equal(copy_a, copy_b, LEN * sizeof(float));
    }
    pieces[2][ZPS_STORE_BLOCK + 3] = NAN; /* element 2 * SEG + BLOCK + 3 */
    size_t where = 0;
    assert_int_equal(zps_store_check_mean_segs(&a, segs, batches, 2, INFINITY, blk, &where),
                     ZPS_ENONFINITE);
    assert_int_equal(where, 2 * SEG + ZPS_STORE_BLOCK);
    zps_store_fini(&a);
    zps_store_fini(&b);
    for (int k = 0; k < NSEG; k++)
        free(pieces[k]);
    for (int j = 0; j < 2; j++)
        free(g[j]);
    free(init);
    free(copy_a);
    free(copy_b);
}

/*
 * A shard long enough to be cut into chunks for the helper threads (a few
 * of ZPS_STORE_CHUNK_MIN and a remainder): its BSP step, from flat
 * gradients and from gradients in segments, and its SSP/ASP step equal the
 * mean and one optimizer step over the whole array, computed apart from
 * the store, bit for bit, parameters and state; the copy's CRC32C, joined
 * from the chunks', equals the table path's over the whole copy.
 */
static void test_chunked_step(void **state)
{
    (void)state;
    enum { LEN = 3 * ZPS_STORE_CHUNK_MIN + 5 * ZPS_STORE_BLOCK + 77, SEG = 256 * ZPS_STORE_BLOCK };
    const zps_opt_kind_t kinds[] = {ZPS_OPT_SGD, ZPS_OPT_MOMENTUM, ZPS_OPT_ADAM};
    const uint32_t batches[2] = {4, 9};
    float *init = malloc(LEN * sizeof(float)), *g[2], *mean = malloc(LEN * sizeof(float)),
          *copy = malloc(LEN * sizeof(float)), *ref = malloc(LEN * sizeof(float));
    for (int j = 0; j < 2; j++)
        g[j] = malloc(LEN * sizeof(float));
    fill_values(31, init, g, 2, LEN);
    /* Gradient 1 in segments that point into its own array. */
    enum { NSEG = (LEN + SEG - 1) / SEG };
    const float *seg1[NSEG];
    for (int k = 0; k < NSEG; k++)
        seg1[k] = g[1] + (size_t)k * SEG;
    const float *seg0[1] = {g[0]};
    const zps_grad_segs_t segs[2] = {{seg0, LEN}, {seg1, SEG}};
    const float *flat[2] = {g[0], g[1]};
    const float *blk[2];
    zps_weighted_mean(flat, batches, 2, LEN, mean);
    for (size_t a = 0; a < sizeof(kinds) / sizeof(kinds[0]); a++) {
        zps_opt_config_t cfg;
        zps_opt_config_default(&cfg);
        cfg.kind = kinds[a];
        cfg.lr = 0.03;
        zps_optimizer_t *opt;
        assert_int_equal(zps_optimizer_new(&cfg, LEN, &opt), 0);
        memcpy(ref, init, LEN * sizeof(float));
        zps_store_t st_flat, st_segs, st_apply;
        zps_range_t r = {0, LEN};
        zps_store_t *all[3] = {&st_flat, &st_segs, &st_apply};
        for (int i = 0; i < 3; i++) {
            zps_store_init(all[i]);
            assert_int_equal(zps_store_set(all[i], LEN, r, init, &cfg), 0);
        }
        for (int step = 0; step < 3; step++) {
            assert_int_equal(zps_optimizer_step(opt, ref, mean, 1.0), 0);
            uint32_t crc = zps_store_step_mean_bounded(&st_flat, flat, batches, 2, 4.0, copy);
            assert_int_equal(crc, zps_crc32c_sw(0, ref, LEN * sizeof(float)));
            assert_memory_equal(copy, ref, LEN * sizeof(float));
            crc = zps_store_step_mean_segs(&st_segs, segs, batches, 2, 4.0, blk, NULL);
            assert_int_equal(crc, 0);
            assert_int_equal(zps_store_apply_bounded(&st_apply, mean, 4.0, 1.0, NULL), 0);
            for (int i = 0; i < 3; i++)
                assert_memory_equal(all[i]->params, ref, LEN * sizeof(float));
        }
        for (int i = 0; i < 3; i++) {
            for (size_t k = 0; k < zps_optimizer_state_count(opt); k++)
                assert_memory_equal(zps_optimizer_state(all[i]->opt, k, NULL),
                                    zps_optimizer_state(opt, k, NULL), LEN * sizeof(float));
            zps_store_fini(all[i]);
        }
        zps_optimizer_free(opt);
    }
    for (int j = 0; j < 2; j++)
        free(g[j]);
    free(init);
    free(mean);
    free(copy);
    free(ref);
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
        cmocka_unit_test(test_segmented_step),
        cmocka_unit_test(test_chunked_step),
        cmocka_unit_test(test_refuses_nonfinite_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
