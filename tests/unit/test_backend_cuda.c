/*
 * test_backend_cuda.c - the cuda backend against the cpu backend (the
 * reference) on the same parameters and batches: loss, every gradient
 * element and evaluation, within a relative error of 1e-4.
 *
 * The cuda backend comes from its module (libzps_backend_cuda.so), loaded
 * through the registry as zps-worker loads it; ctest points ZPS_BACKEND_DIR
 * at the build's copy. In a build with CUDA the module must load on any
 * machine, GPU or not: a missing or stale module fails the test.
 *
 * Without a usable GPU (no device, no driver, a driver too old, or a build
 * without CUDA) it prints "skipped" with the reason and exits 77, which
 * ctest reports as SKIPPED (SKIP_RETURN_CODE 77), never as passed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "backend_module.h"
#include "error.h"
#include "model.h"

#define SKIP_CODE 77

/* CUDA_MODULE_FILE, set by the build: the module's file name, or "" in a
 * build without CUDA. */

static uint64_t lcg = 777;

static double uniform(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * 0x1.0p-53;
}

typedef struct pair {
    zps_model_t m;
    zps_backend_t *cpu, *cuda;
} pair_t;

static void make_pair(pair_t *p, const char *spec, size_t max_batch, uint64_t seed)
{
    char err[512];
    assert_int_equal(zps_model_parse(spec, &p->m, err, sizeof(err)), 0);
    zps_backend_opts_t o;
    zps_backend_opts_default(&o);
    o.max_batch = max_batch;
    int rc = zps_backend_new("cpu", &p->m, &o, &p->cpu, err, sizeof(err));
    if (rc)
        fail_msg("cpu: %s", err);
    rc = zps_backend_new("cuda", &p->m, &o, &p->cuda, err, sizeof(err));
    if (rc)
        fail_msg("cuda: %s", err);
    /* He weights plus non-zero biases, identical in both. */
    float *a = zps_backend_params(p->cpu), *b = zps_backend_params(p->cuda);
    zps_model_init_params(&p->m, seed, a);
    for (uint32_t l = 0; l < p->m.layers; l++)
        for (uint32_t j = 0; j < p->m.sizes[l + 1]; j++)
            a[p->m.b_off[l] + j] = (float)(uniform() * 0.2 - 0.1);
    memcpy(b, a, p->m.nparams * sizeof(float));
}

static void free_pair(pair_t *p)
{
    zps_backend_free(p->cpu);
    zps_backend_free(p->cuda);
}

/* One batch of n examples through both backends; compares loss and gradient. */
static void compare_step(pair_t *p, size_t n)
{
    uint32_t in = p->m.sizes[0], k = p->m.sizes[p->m.layers];
    float *x = malloc(n * in * sizeof(float));
    int32_t *label = malloc(n * sizeof(int32_t));
    float *target = malloc(n * sizeof(float));
    assert_non_null(x);
    for (size_t i = 0; i < n * in; i++)
        x[i] = (float)uniform(); /* like pixels in [0, 1) */
    for (size_t i = 0; i < n; i++) {
        label[i] = (int32_t)(uniform() * k);
        target[i] = (float)(uniform() * 4 - 2);
    }
    zps_batch_t b = {.n = n, .x = x, .label = label, .target = target};
    zps_step_stats_t s1, s2;
    assert_int_equal(zps_backend_train_step(p->cpu, &b, &s1), 0);
    assert_int_equal(zps_backend_train_step(p->cuda, &b, &s2), 0);
    assert_true(fabs(s1.loss - s2.loss) <= 1e-4 * fabs(s1.loss));

    const float *g1 = zps_backend_grad(p->cpu), *g2 = zps_backend_grad(p->cuda);
    double diff2 = 0, norm2 = 0, gmax = 0, worst = 0;
    for (uint64_t i = 0; i < p->m.nparams; i++) {
        double d = (double)g1[i] - g2[i];
        diff2 += d * d;
        norm2 += (double)g1[i] * g1[i];
        gmax = fmax(gmax, fabs(g1[i]));
    }
    for (uint64_t i = 0; i < p->m.nparams; i++) {
        /* Element-wise, relative to the element with a floor at 1e-2 of the
         * largest, so sums that cancel to nearly zero (where the two
         * summation orders legitimately differ most) do not dominate. */
        double e = fabs((double)g1[i] - g2[i]) / fmax(fabs(g1[i]), 1e-2 * gmax);
        worst = fmax(worst, e);
    }
    double rel = sqrt(diff2 / norm2);
    char spec[128];
    print_message("%s batch %zu: loss %.6f vs %.6f, gradient relative error %.2e (worst element "
                  "%.2e)\n",
                  zps_model_format(&p->m, spec, sizeof(spec)), n, s1.loss, s2.loss, rel, worst);
    assert_true(rel <= 1e-4);
    assert_true(worst <= 1e-4);
    free(x);
    free(label);
    free(target);
}

static void test_mlp_matches_cpu(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p, "mlp:784-256-128-10", 257, 5);
    size_t sizes[] = {1, 7, 64, 65, 257};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        compare_step(&p, sizes[i]);
    free_pair(&p);

    /* Odd shapes: nothing is a multiple of a tile size. */
    make_pair(&p, "mlp:37-19-23-5", 33, 6);
    compare_step(&p, 33);
    compare_step(&p, 2);
    free_pair(&p);
    make_pair(&p, "mlp:784-10", 100, 7);
    compare_step(&p, 100);
    free_pair(&p);
}

static void test_linear_matches_cpu(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p, "linear:13", 50, 8);
    compare_step(&p, 50);
    compare_step(&p, 3);
    free_pair(&p);
}

static void test_evaluate_matches_cpu(void **state)
{
    (void)state;
    pair_t p;
    make_pair(&p, "mlp:784-256-128-10", 512, 9);
    enum { N = 3000 };
    zps_dataset_t ds = {.n = N, .dim = 784, .classes = 10};
    ds.x = malloc((size_t)N * 784 * sizeof(float));
    ds.label = malloc(N * sizeof(int32_t));
    assert_non_null(ds.x);
    for (size_t i = 0; i < (size_t)N * 784; i++)
        ds.x[i] = (float)uniform();
    for (size_t i = 0; i < N; i++)
        ds.label[i] = (int32_t)(uniform() * 10);
    zps_eval_t e1, e2;
    assert_int_equal(zps_backend_evaluate(p.cpu, &ds, &e1), 0);
    assert_int_equal(zps_backend_evaluate(p.cuda, &ds, &e2), 0);
    print_message("evaluate on %d: loss %.6f vs %.6f, accuracy %.4f vs %.4f\n", N, e1.loss, e2.loss,
                  e1.accuracy, e2.accuracy);
    assert_int_equal(e1.n, e2.n);
    assert_true(fabs(e1.loss - e2.loss) <= 1e-4 * e1.loss);
    /* An argmax may flip on a near tie; allow two examples of 3000. */
    assert_true(fabs(e1.accuracy - e2.accuracy) <= 2.0 / N + 1e-12);
    free(ds.x);
    free(ds.label);
    free_pair(&p);
}

int main(void)
{
    zps_model_t m;
    zps_backend_t *be = NULL;
    zps_backend_opts_t o;
    char err[1024] = "";
    /* The module loads, with every symbol it needs, whether or not a GPU is
     * here; only the lack of a GPU may skip the test. */
    const zps_backend_ops_t *ops = NULL;
    if (CUDA_MODULE_FILE[0]) {
        if (zps_backend_module_load(CUDA_MODULE_FILE, &ops, err, sizeof(err)) != 0) {
            printf("test_backend_cuda: %s\n", err);
            return 1;
        }
        printf("test_backend_cuda: module %s loaded (backend %s)\n", CUDA_MODULE_FILE, ops->name);
    }
    /* Then a device: without a usable one the whole test is skipped. */
    zps_backend_opts_default(&o);
    ZPS_ASSERT(zps_model_parse("mlp:4-3", &m, NULL, 0) == 0);
    int rc = zps_backend_new("cuda", &m, &o, &be, err, sizeof(err));
    if (rc == ZPS_ENODEV) {
        printf("test_backend_cuda: skipped: %s\n", err);
        return SKIP_CODE;
    }
    if (rc != 0) {
        printf("test_backend_cuda: cannot create the cuda backend: %s (%s)\n", err,
               zps_errname(rc));
        return 1;
    }
    printf("test_backend_cuda: %s\n", zps_backend_describe(be));
    zps_backend_free(be);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_matches_cpu),
        cmocka_unit_test(test_linear_matches_cpu),
        cmocka_unit_test(test_evaluate_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
