/*
 * test_model.c - model specs and layout, He initialisation, and the cpu
 * backend's arithmetic against an independent float64 implementation in
 * this file: the loss, the gradient (central finite differences), the
 * "mean over the batch" contract, evaluation, and a linear regression that
 * must find the synthetic set's known weights.
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
#include "data.h"
#include "error.h"
#include "model.h"

/* ---- specs and layout ---- */

static void test_parse(void **state)
{
    (void)state;
    zps_model_t m;
    char err[256], buf[256];
    assert_int_equal(zps_model_parse("mlp:784-256-128-10", &m, err, sizeof(err)), 0);
    assert_int_equal(m.kind, ZPS_MODEL_MLP);
    assert_int_equal(m.layers, 3);
    assert_int_equal(m.nparams, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    assert_int_equal(m.w_off[0], 0);
    assert_int_equal(m.b_off[0], 784 * 256);
    assert_int_equal(m.w_off[1], 784 * 256 + 256);
    assert_int_equal(m.b_off[2], m.nparams - 10);
    assert_string_equal(zps_model_format(&m, buf, sizeof(buf)), "mlp:784-256-128-10");
    assert_int_equal(zps_model_max_width(&m), 784);
    assert_int_equal(zps_model_tensor_count(&m), 6);
    zps_tensor_t t;
    zps_model_tensor(&m, 3, &t);
    assert_string_equal(t.name, "b1");
    assert_int_equal(t.offset, m.b_off[1]);
    assert_int_equal(t.rows, 1);
    assert_int_equal(t.cols, 128);
    zps_model_tensor(&m, 4, &t);
    assert_string_equal(t.name, "w2");
    assert_int_equal(t.rows, 128);
    assert_int_equal(t.cols, 10);

    assert_int_equal(zps_model_parse("mlp:784-10", &m, err, sizeof(err)), 0);
    assert_int_equal(m.layers, 1);
    assert_int_equal(m.nparams, 7850);
    assert_int_equal(zps_model_parse("linear:16", &m, err, sizeof(err)), 0);
    assert_int_equal(m.kind, ZPS_MODEL_LINEAR);
    assert_int_equal(m.nparams, 17);
    assert_string_equal(zps_model_format(&m, buf, sizeof(buf)), "linear:16");

    static const char *const bad[] = {
        "mlp:",        "mlp:784",    "mlp:784-1",
        "mlp:784--10", "mlp:0-10",   "mlp:784-10-",
        "mlp:-784-10", "mlp:7x-10",  "linear:",
        "linear:0",    "linear:3-1", "cnn:784-10",
        "mlp 784-10",  "",           "mlp:1-2-3-4-5-6-7-8-9-10-11-12-13-14-15-16-17-18"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        int rc = zps_model_parse(bad[i], &m, err, sizeof(err));
        if (rc != ZPS_EINVAL || !err[0])
            fail_msg("'%s' gave %s '%s'", bad[i], zps_errname(rc), err);
    }
}

static void test_he_init(void **state)
{
    (void)state;
    zps_model_t m;
    assert_int_equal(zps_model_parse("mlp:784-256-10", &m, NULL, 0), 0);
    float *p = malloc(m.nparams * sizeof(float)), *q = malloc(m.nparams * sizeof(float));
    assert_non_null(p);
    assert_non_null(q);
    zps_model_init_params(&m, 3, p);
    zps_model_init_params(&m, 3, q);
    assert_memory_equal(p, q, m.nparams * sizeof(float));
    zps_model_init_params(&m, 4, q);
    assert_memory_not_equal(p, q, m.nparams * sizeof(float));
    for (uint32_t l = 0; l < m.layers; l++) {
        uint64_t nw = (uint64_t)m.sizes[l] * m.sizes[l + 1];
        double s = 0, s2 = 0;
        for (uint64_t i = 0; i < nw; i++) {
            s += p[m.w_off[l] + i];
            s2 += (double)p[m.w_off[l] + i] * p[m.w_off[l] + i];
        }
        double mean = s / (double)nw, sd = sqrt(s2 / (double)nw - mean * mean);
        double want = sqrt(2.0 / m.sizes[l]);
        assert_true(fabs(mean) < 0.05 * want);
        assert_true(fabs(sd - want) < 0.03 * want);
        for (uint32_t j = 0; j < m.sizes[l + 1]; j++)
            assert_true(p[m.b_off[l] + j] == 0.0f);
    }
    free(p);
    free(q);
}

/* ---- float64 reference ---- */

/*
 * The mean loss of `m` with parameters p (float64) on n examples, written
 * from the definitions: affine layers on W [in, out] row-major, ReLU on
 * hidden layers, -log softmax(z)_y or (y_hat - y)^2 / 2.
 */
static double ref_loss(const zps_model_t *m, const double *p, const float *x, const int32_t *label,
                       const float *target, size_t n, size_t *correct)
{
    double act[2][64];
    double total = 0;
    if (correct)
        *correct = 0;
    for (size_t e = 0; e < n; e++) {
        double *a = act[0], *z = act[1];
        for (uint32_t i = 0; i < m->sizes[0]; i++)
            a[i] = x[e * m->sizes[0] + i];
        for (uint32_t l = 0; l < m->layers; l++) {
            uint32_t in = m->sizes[l], out = m->sizes[l + 1];
            for (uint32_t j = 0; j < out; j++) {
                double v = p[m->b_off[l] + j];
                for (uint32_t i = 0; i < in; i++)
                    v += a[i] * p[m->w_off[l] + (uint64_t)i * out + j];
                z[j] = l + 1 < m->layers && v < 0 ? 0 : v;
            }
            double *t = a;
            a = z;
            z = t;
        }
        uint32_t k = m->sizes[m->layers];
        if (m->kind == ZPS_MODEL_LINEAR) {
            double r = a[0] - target[e];
            total += 0.5 * r * r;
            continue;
        }
        double mx = a[0];
        uint32_t arg = 0;
        for (uint32_t j = 1; j < k; j++)
            if (a[j] > mx) {
                mx = a[j];
                arg = j;
            }
        double s = 0;
        for (uint32_t j = 0; j < k; j++)
            s += exp(a[j] - mx);
        total += log(s) + mx - a[label[e]];
        if (correct && (int32_t)arg == label[e])
            (*correct)++;
    }
    return total / (double)n;
}

typedef struct fixture {
    zps_model_t m;
    zps_backend_t *be;
    size_t n;
    float *x;
    int32_t *label;
    float *target;
} fixture_t;

static uint64_t lcg = 12345;

static double uniform(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * 0x1.0p-53;
}

/* A model with random parameters (biases too) and n random examples. */
static void setup(fixture_t *f, const char *spec, size_t n, size_t max_batch)
{
    memset(f, 0, sizeof(*f));
    char err[256];
    assert_int_equal(zps_model_parse(spec, &f->m, err, sizeof(err)), 0);
    zps_backend_opts_t o;
    zps_backend_opts_default(&o);
    o.max_batch = max_batch;
    int rc = zps_backend_new("cpu", &f->m, &o, &f->be, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    float *p = zps_backend_params(f->be);
    for (uint64_t i = 0; i < f->m.nparams; i++)
        p[i] = (float)(uniform() * 2 - 1);
    f->n = n;
    f->x = malloc(n * f->m.sizes[0] * sizeof(float));
    f->label = malloc(n * sizeof(int32_t));
    f->target = malloc(n * sizeof(float));
    for (size_t i = 0; i < n * f->m.sizes[0]; i++)
        f->x[i] = (float)(uniform() * 2 - 1);
    for (size_t i = 0; i < n; i++) {
        f->label[i] = (int32_t)(uniform() * f->m.sizes[f->m.layers]);
        f->target[i] = (float)(uniform() * 4 - 2);
    }
}

static void teardown(fixture_t *f)
{
    zps_backend_free(f->be);
    free(f->x);
    free(f->label);
    free(f->target);
}

/*
 * The backend's loss and gradient against the float64 reference: the loss
 * to float precision, and every gradient element against the central
 * difference (L(p + h e_i) - L(p - h e_i)) / 2h computed in float64.
 */
static void gradient_check(const char *spec, size_t n)
{
    fixture_t f;
    setup(&f, spec, n, n);
    zps_batch_t b = {.n = n, .x = f.x, .label = f.label, .target = f.target};
    zps_step_stats_t st;
    assert_int_equal(zps_backend_train_step(f.be, &b, &st), 0);
    const float *g = zps_backend_grad(f.be);
    const float *pf = zps_backend_params(f.be);
    uint64_t np = f.m.nparams;
    double *p = calloc(np, sizeof(double));
    assert_non_null(p);
    for (uint64_t i = 0; i < np; i++)
        p[i] = pf[i];

    double loss = ref_loss(&f.m, p, f.x, f.label, f.target, n, NULL);
    assert_true(fabs(st.loss - loss) <= 1e-5 * fabs(loss) + 1e-6);

    const double h = 1e-6;
    double worst = 0, gnorm = 0;
    for (uint64_t i = 0; i < np; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double up = ref_loss(&f.m, p, f.x, f.label, f.target, n, NULL);
        p[i] = keep - h;
        double down = ref_loss(&f.m, p, f.x, f.label, f.target, n, NULL);
        p[i] = keep;
        double fd = (up - down) / (2 * h);
        double err = fabs(g[i] - fd) / (fabs(fd) + 1e-4);
        if (err > worst)
            worst = err;
        gnorm += fd * fd;
        if (fabs(g[i] - fd) > 1e-3 * fabs(fd) + 1e-5)
            fail_msg("%s: d loss / d p[%llu]: backend %.9g, finite difference %.9g", spec,
                     (unsigned long long)i, g[i], fd);
    }
    assert_true(gnorm > 1e-6); /* the check compared something */
    print_message("%s on %zu examples: %llu parameters, loss %.6f, worst relative error %.2e\n",
                  spec, n, (unsigned long long)np, st.loss, worst);
    free(p);
    teardown(&f);
}

static void test_gradient_softmax_mlp(void **state)
{
    (void)state;
    gradient_check("mlp:5-4-3", 6);
    gradient_check("mlp:5-4-4-3", 6);
    gradient_check("mlp:7-3", 5);
    gradient_check("mlp:6-9-5-8-4", 11);
}

static void test_gradient_linear(void **state)
{
    (void)state;
    gradient_check("linear:5", 6);
    gradient_check("linear:1", 3);
}

/* The gradient of a batch is the mean of its examples' gradients. */
static void test_mean_gradient(void **state)
{
    (void)state;
    fixture_t f;
    setup(&f, "mlp:5-4-3", 6, 6);
    uint64_t np = f.m.nparams;
    double *sum = calloc(np, sizeof(double));
    for (size_t e = 0; e < 6; e++) {
        zps_batch_t one = {.n = 1, .x = f.x + e * 5, .label = f.label + e};
        assert_int_equal(zps_backend_train_step(f.be, &one, NULL), 0);
        const float *g = zps_backend_grad(f.be);
        for (uint64_t i = 0; i < np; i++)
            sum[i] += g[i];
    }
    zps_batch_t all = {.n = 6, .x = f.x, .label = f.label};
    assert_int_equal(zps_backend_train_step(f.be, &all, NULL), 0);
    const float *g = zps_backend_grad(f.be);
    for (uint64_t i = 0; i < np; i++)
        assert_true(fabs(g[i] - sum[i] / 6) <= 1e-6 + 1e-5 * fabs(sum[i] / 6));
    free(sum);
    teardown(&f);
}

static void test_evaluate(void **state)
{
    (void)state;
    fixture_t f;
    /* 23 examples in chunks of 4: the last chunk is partial. */
    setup(&f, "mlp:5-4-3", 23, 4);
    zps_dataset_t ds = {.n = 23, .dim = 5, .classes = 3, .x = f.x, .label = f.label};
    zps_eval_t ev;
    assert_int_equal(zps_backend_evaluate(f.be, &ds, &ev), 0);
    const float *pf = zps_backend_params(f.be);
    double *p = calloc(f.m.nparams, sizeof(double));
    assert_non_null(p);
    for (uint64_t i = 0; i < f.m.nparams; i++)
        p[i] = pf[i];
    size_t correct;
    double loss = ref_loss(&f.m, p, f.x, f.label, NULL, 23, &correct);
    assert_int_equal(ev.n, 23);
    assert_true(fabs(ev.loss - loss) <= 1e-5 * loss);
    assert_true(ev.accuracy == (double)correct / 23.0);

    /* A data set of the wrong shape is refused. */
    zps_dataset_t wrong = ds;
    wrong.dim = 6;
    assert_int_equal(zps_backend_evaluate(f.be, &wrong, &ev), ZPS_EINVAL);
    wrong = ds;
    wrong.classes = 4;
    assert_int_equal(zps_backend_evaluate(f.be, &wrong, &ev), ZPS_EINVAL);
    free(p);
    teardown(&f);
}

static void test_bad_batches(void **state)
{
    (void)state;
    fixture_t f;
    setup(&f, "mlp:5-4-3", 6, 6);
    zps_batch_t b = {.n = 0, .x = f.x, .label = f.label};
    assert_int_equal(zps_backend_train_step(f.be, &b, NULL), ZPS_EBATCH);
    b.n = 7;
    assert_int_equal(zps_backend_train_step(f.be, &b, NULL), ZPS_EBATCH);
    b.n = 6;
    f.label[3] = 3; /* only classes 0..2 exist */
    assert_int_equal(zps_backend_train_step(f.be, &b, NULL), ZPS_EINVAL);
    f.label[3] = -1;
    assert_int_equal(zps_backend_train_step(f.be, &b, NULL), ZPS_EINVAL);
    b.label = NULL;
    assert_int_equal(zps_backend_train_step(f.be, &b, NULL), ZPS_EINVAL);
    teardown(&f);
}

static void test_registry(void **state)
{
    (void)state;
    zps_model_t m;
    assert_int_equal(zps_model_parse("mlp:5-4-3", &m, NULL, 0), 0);
    zps_backend_opts_t o;
    zps_backend_opts_default(&o);
    zps_backend_t *be = NULL;
    char err[256];
    assert_int_equal(zps_backend_new("tpu", &m, &o, &be, err, sizeof(err)), ZPS_EINVAL);
    assert_non_null(strstr(err, "tpu"));
    assert_null(be);
    /* cuda either works or says why not; it never crashes without a GPU. */
    int rc = zps_backend_new("cuda", &m, &o, &be, err, sizeof(err));
    if (rc == 0) {
        assert_string_equal(zps_backend_name(be), "cuda");
        zps_backend_free(be);
    } else {
        assert_int_equal(rc, ZPS_ENODEV);
        print_message("cuda: %s\n", err);
    }
    assert_int_equal(zps_backend_new("auto", &m, &o, &be, err, sizeof(err)), 0);
    assert_non_null(be);
    /* New buffers start zeroed. */
    for (uint64_t i = 0; i < m.nparams; i++) {
        assert_true(zps_backend_params(be)[i] == 0.0f);
        assert_true(zps_backend_grad(be)[i] == 0.0f);
    }
    zps_backend_free(be);
    o.max_batch = 0;
    assert_int_equal(zps_backend_new("cpu", &m, &o, &be, err, sizeof(err)), ZPS_EINVAL);
    zps_backend_free(NULL);
}

/* Gradient descent on a noise-free synthetic set recovers w* and b*. */
static void test_linear_regression_recovers_weights(void **state)
{
    (void)state;
    zps_synth_opts_t so;
    zps_synth_opts_default(&so, 21);
    so.n = 2000;
    so.dim = 8;
    zps_dataset_t ds;
    assert_int_equal(zps_dataset_synthetic_linear(&so, false, &ds), 0);
    zps_model_t m;
    assert_int_equal(zps_model_parse("linear:8", &m, NULL, 0), 0);
    zps_backend_opts_t o;
    zps_backend_opts_default(&o);
    o.max_batch = 100;
    zps_backend_t *be;
    assert_int_equal(zps_backend_new("cpu", &m, &o, &be, NULL, 0), 0);
    float *p = zps_backend_params(be);
    const float *g = zps_backend_grad(be);
    zps_model_init_params(&m, 1, p);
    for (int epoch = 0; epoch < 20; epoch++)
        for (uint64_t lo = 0; lo < ds.n; lo += 100) {
            zps_batch_t b = {.n = 100, .x = ds.x + lo * 8, .target = ds.target + lo};
            assert_int_equal(zps_backend_train_step(be, &b, NULL), 0);
            for (uint64_t i = 0; i < m.nparams; i++)
                p[i] -= 0.1f * g[i];
        }
    for (int j = 0; j < 8; j++)
        assert_true(fabs(p[m.w_off[0] + j] - ds.true_w[j]) < 1e-3);
    assert_true(fabs(p[m.b_off[0]] - ds.true_b) < 1e-3);
    zps_eval_t ev;
    assert_int_equal(zps_backend_evaluate(be, &ds, &ev), 0);
    assert_true(ev.loss < 1e-6);
    assert_true(isnan(ev.accuracy));
    zps_backend_free(be);
    zps_dataset_fini(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_he_init),
        cmocka_unit_test(test_gradient_softmax_mlp),
        cmocka_unit_test(test_gradient_linear),
        cmocka_unit_test(test_mean_gradient),
        cmocka_unit_test(test_evaluate),
        cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_linear_regression_recovers_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
