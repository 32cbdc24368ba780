/*
 * test_optimizer.c - the optimizer math against references computed here.
 *
 * Two kinds of reference, both written in this file and independent of
 * optimizer/optimizer.c:
 *   - float64 from the published formulas (PyTorch's SGD, Adam, AdamW and
 *     Adagrad), compared within 1e-6 relative: the code computes the right
 *     thing;
 *   - float32 in the exact operation order of docs/optimizers.md, compared
 *     bit for bit: the documentation tells the truth about the code.
 * Plus the schedules at their boundaries, the configuration check (every bad
 * value is ZPS_EINVAL with a reason naming its flag) and the state arrays.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "optimizer.h"

#define N 37     /* not a multiple of any vector width: the tails are exercised */
#define STEPS 5  /* steps per reference comparison */
#define REL 1e-6 /* float64 reference tolerance, relative */

/* ---- inputs ---------------------------------------------------------------- */

/* Parameters of magnitude 1..3 with alternating signs. */
static void fill_params(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float mag = 1.0f + (float)((i * 7) % 11) / 5.0f;
        p[i] = (i % 2 == 0) ? mag : -mag;
    }
}

/*
 * The gradient of step s: its sign opposes the parameter's (so parameters
 * grow away from 0 and keep a meaningful relative error), its magnitude
 * varies with the element and the step, over a few decades.
 */
static void fill_grad(float *g, size_t n, int s)
{
    for (size_t i = 0; i < n; i++) {
        float mag = (0.25f + (float)((i * 5 + (size_t)s * 3) % 13) / 8.0f) *
                    (i % 3 == 0 ? 0.01f : (i % 3 == 1 ? 1.0f : 20.0f));
        g[i] = (i % 2 == 0) ? -mag : mag;
    }
}

static void assert_close(double got, double ref, double rel, const char *what, size_t i)
{
    double err = fabs(got - ref);
    if (!(err <= rel * fabs(ref) + 1e-30)) {
        print_error("%s[%zu]: got %.9g, reference %.9g (relative error %.3g > %.3g)\n", what, i,
                    got, ref, err / fabs(ref), rel);
        fail();
    }
}

static void assert_same_bits(const float *got, const float *ref, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &ref[i], sizeof(float)) != 0) {
            print_error("%s[%zu]: got %.9g, expected exactly %.9g\n", what, i, (double)got[i],
                        (double)ref[i]);
            fail();
        }
    }
}

static zps_opt_config_t config_of(zps_opt_kind_t kind, double lr)
{
    zps_opt_config_t c;
    zps_opt_config_default(&c);
    c.kind = kind;
    c.lr = lr;
    return c;
}

static zps_optimizer_t *make(const zps_opt_config_t *c, size_t n)
{
    zps_optimizer_t *opt = NULL;
    assert_int_equal(zps_optimizer_new(c, n, &opt), 0);
    assert_non_null(opt);
    return opt;
}

/* ---- float64 references from the published formulas -------------------- */

/*
 * One reference state per element: parameter and up to two state values,
 * in double. Hyperparameters are used as given (double), the step's rate is
 * cfg.lr (these tests use the constant schedule), t counts from 1.
 */
typedef struct ref {
    double p[N], a[N], b[N];
    uint64_t t;
} ref_t;

static void ref_init(ref_t *r, const float *p)
{
    memset(r, 0, sizeof(*r));
    for (size_t i = 0; i < N; i++)
        r->p[i] = p[i];
}

/* SGD (torch.optim.SGD): with momentum mu, b = mu*b + g; Nesterov uses g + mu*b. */
static void ref_sgd_step(ref_t *r, const float *g32, const zps_opt_config_t *c)
{
    r->t++;
    for (size_t i = 0; i < N; i++) {
        double g = (double)g32[i] + c->weight_decay * r->p[i];
        if (c->kind == ZPS_OPT_SGD) {
            r->p[i] -= c->lr * g;
            continue;
        }
        r->a[i] = c->momentum * r->a[i] + g;
        double d = c->nesterov ? g + c->momentum * r->a[i] : r->a[i];
        r->p[i] -= c->lr * d;
    }
}

/* Adam (Kingma & Ba, algorithm 1) with L2; AdamW (Loshchilov & Hutter) decoupled. */
static void ref_adam_step(ref_t *r, const float *g32, const zps_opt_config_t *c)
{
    r->t++;
    double t = (double)r->t;
    for (size_t i = 0; i < N; i++) {
        double g = g32[i];
        if (c->kind == ZPS_OPT_ADAMW)
            r->p[i] -= c->lr * c->weight_decay * r->p[i];
        else
            g += c->weight_decay * r->p[i];
        r->a[i] = c->beta1 * r->a[i] + (1.0 - c->beta1) * g;
        r->b[i] = c->beta2 * r->b[i] + (1.0 - c->beta2) * g * g;
        double mhat = r->a[i] / (1.0 - pow(c->beta1, t));
        double vhat = r->b[i] / (1.0 - pow(c->beta2, t));
        r->p[i] -= c->lr * mhat / (sqrt(vhat) + c->eps);
    }
}

/* AdaGrad (Duchi et al.; torch.optim.Adagrad without lr decay). */
static void ref_adagrad_step(ref_t *r, const float *g32, const zps_opt_config_t *c)
{
    r->t++;
    for (size_t i = 0; i < N; i++) {
        double g = (double)g32[i] + c->weight_decay * r->p[i];
        r->a[i] += g * g;
        r->p[i] -= c->lr * g / (sqrt(r->a[i]) + c->eps);
    }
}

typedef void (*ref_step_fn)(ref_t *r, const float *g32, const zps_opt_config_t *c);

/*
 * Runs STEPS steps of the optimizer and of the reference side by side and
 * compares parameters and state after each step. Returns the final
 * parameters in p_out.
 */
static void run_against_reference(const zps_opt_config_t *c, ref_step_fn ref_step, float *p_out)
{
    zps_optimizer_t *opt = make(c, N);
    float p[N], g[N];
    ref_t r;
    fill_params(p, N);
    ref_init(&r, p);
    for (int s = 0; s < STEPS; s++) {
        fill_grad(g, N, s);
        zps_optimizer_step(opt, p, g, 1.0);
        ref_step(&r, g, c);
        for (size_t i = 0; i < N; i++)
            assert_close(p[i], r.p[i], REL, "param", i);
        size_t ns = zps_optimizer_state_count(opt);
        for (size_t k = 0; k < ns; k++) {
            const float *st = zps_optimizer_state(opt, k, NULL);
            const double *rs = k == 0 ? r.a : r.b;
            for (size_t i = 0; i < N; i++)
                assert_close(st[i], rs[i], REL, "state", i);
        }
    }
    assert_int_equal(zps_optimizer_steps(opt), STEPS);
    if (p_out != NULL)
        memcpy(p_out, p, sizeof(p));
    zps_optimizer_free(opt);
}

/* ---- float32 in the documented order (docs/optimizers.md) ---------------- */

/* The step's rate: lr_at(t) * scale in double, rounded once. */
static float f32_lr(const zps_opt_config_t *c, uint64_t t, double scale)
{
    return (float)(zps_opt_lr_at(c, t) * scale);
}

/*
 * One step of every optimizer in float32, operation by operation as the
 * documentation states them. s0, s1: the state arrays.
 */
static void f32_step(const zps_opt_config_t *c, uint64_t t, float *p, const float *g, float *s0,
                     float *s1, size_t n)
{
    float lr = f32_lr(c, t, 1.0);
    float wd = (float)c->weight_decay;
    bool l2 = c->weight_decay != 0.0 && c->kind != ZPS_OPT_ADAMW;
    double bc1 = 1.0 - pow(c->beta1, (double)(t + 1));
    double bc2 = 1.0 - pow(c->beta2, (double)(t + 1));
    float b1 = (float)c->beta1, omb1 = (float)(1.0 - c->beta1);
    float b2 = (float)c->beta2, omb2 = (float)(1.0 - c->beta2);
    float rs2 = (float)(1.0 / sqrt(bc2));
    float step = (float)((double)lr / bc1);
    float decay = (float)(1.0 - (double)lr * c->weight_decay);
    float eps = (float)c->eps, mu = (float)c->momentum;

    for (size_t i = 0; i < n; i++) {
        float pi = p[i], gi = g[i];
        if (c->kind == ZPS_OPT_ADAMW && c->weight_decay != 0.0)
            pi = pi * decay;
        if (l2)
            gi = gi + wd * pi;
        switch (c->kind) {
        case ZPS_OPT_SGD:
            pi = pi - lr * gi;
            break;
        case ZPS_OPT_MOMENTUM: {
            float b = mu * s0[i] + gi;
            s0[i] = b;
            if (c->nesterov) {
                float look = gi + mu * b;
                pi = pi - lr * look;
            } else {
                pi = pi - lr * b;
            }
            break;
        }
        case ZPS_OPT_ADAM:
        case ZPS_OPT_ADAMW: {
            float m = b1 * s0[i] + omb1 * gi;
            float gg = gi * gi;
            float v = b2 * s1[i] + omb2 * gg;
            s0[i] = m;
            s1[i] = v;
            float den = sqrtf(v) * rs2 + eps;
            float q = m / den;
            pi = pi - step * q;
            break;
        }
        case ZPS_OPT_ADAGRAD: {
            float s = s0[i] + gi * gi;
            s0[i] = s;
            float den = sqrtf(s) + eps;
            float q = gi / den;
            pi = pi - lr * q;
            break;
        }
        }
        p[i] = pi;
    }
}

/* The optimizer and the documented float32 order agree bit for bit. */
static void run_against_f32(const zps_opt_config_t *c)
{
    zps_optimizer_t *opt = make(c, N);
    float p[N], q[N], g[N], s0[N] = {0}, s1[N] = {0};
    fill_params(p, N);
    memcpy(q, p, sizeof(p));
    for (int s = 0; s < STEPS; s++) {
        fill_grad(g, N, s);
        f32_step(c, (uint64_t)s, q, g, s0, s1, N);
        zps_optimizer_step(opt, p, g, 1.0);
        assert_same_bits(p, q, N, zps_opt_name(c));
        if (zps_optimizer_state_count(opt) > 0)
            assert_same_bits(zps_optimizer_state(opt, 0, NULL), s0, N, "state 0");
        if (zps_optimizer_state_count(opt) > 1)
            assert_same_bits(zps_optimizer_state(opt, 1, NULL), s1, N, "state 1");
    }
    zps_optimizer_free(opt);
}

/* ---- tests: update rules -------------------------------------------------- */

static void test_sgd_exact(void **state)
{
    (void)state;
    /* p = p - (float)lr * g, bit for bit, including a scaled rate. */
    zps_opt_config_t c = config_of(ZPS_OPT_SGD, 0.1);
    zps_optimizer_t *opt = make(&c, N);
    float p[N], q[N], g[N];
    fill_params(p, N);
    memcpy(q, p, sizeof(p));
    const double scales[] = {1.0, 0.5, 1.0 / 3.0, 1.0};
    for (int s = 0; s < 4; s++) {
        fill_grad(g, N, s);
        float lr = (float)(0.1 * scales[s]);
        for (size_t i = 0; i < N; i++)
            q[i] = q[i] - lr * g[i];
        zps_optimizer_step(opt, p, g, scales[s]);
        assert_same_bits(p, q, N, "sgd param");
    }
    assert_int_equal(zps_optimizer_steps(opt), 4);
    zps_optimizer_free(opt);

    /* The design's worked example: w = 10, mean gradient 5, lr 0.1 -> 9.5. */
    zps_optimizer_t *one = make(&c, 1);
    float w = 10.0f, mean = (2.0f + 4.0f + 6.0f + 8.0f) / 4.0f;
    zps_optimizer_step(one, &w, &mean, 1.0);
    assert_true(w == 10.0f - (float)0.1 * 5.0f);
    assert_true(fabs(w - 9.5) < 1e-6);
    zps_optimizer_free(one);
}

static void test_sgd_reference(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_SGD, 0.05);
    run_against_reference(&c, ref_sgd_step, NULL);
    run_against_f32(&c);
    c.weight_decay = 0.01;
    run_against_reference(&c, ref_sgd_step, NULL);
    run_against_f32(&c);
}

static void test_momentum(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_MOMENTUM, 0.02);
    c.momentum = 0.9;
    float heavy[N], nest[N];
    run_against_reference(&c, ref_sgd_step, heavy);
    run_against_f32(&c);
    c.nesterov = true;
    run_against_reference(&c, ref_sgd_step, nest);
    run_against_f32(&c);
    /* Nesterov looks ahead: after several steps the two differ. */
    for (size_t i = 0; i < N; i++)
        assert_true(fabs((double)heavy[i] - nest[i]) > 1e-4 * fabs((double)heavy[i]));

    c.weight_decay = 0.1;
    run_against_reference(&c, ref_sgd_step, NULL);
    run_against_f32(&c);
    c.nesterov = false;
    run_against_reference(&c, ref_sgd_step, NULL);
    run_against_f32(&c);
}

static void test_nesterov_first_step(void **state)
{
    (void)state;
    /* From zero velocity, heavy-ball moves lr*g and Nesterov lr*(1 + mu)*g. */
    zps_opt_config_t c = config_of(ZPS_OPT_MOMENTUM, 0.125);
    c.momentum = 0.5;
    zps_optimizer_t *heavy = make(&c, 1);
    c.nesterov = true;
    zps_optimizer_t *nest = make(&c, 1);
    float ph = 1.0f, pn = 1.0f, g = 2.0f;
    zps_optimizer_step(heavy, &ph, &g, 1.0);
    zps_optimizer_step(nest, &pn, &g, 1.0);
    assert_true(ph == 1.0f - 0.125f * 2.0f);
    assert_true(pn == 1.0f - 0.125f * 3.0f);
    /* Second step, same gradient: b = 0.5*2 + 2 = 3. */
    zps_optimizer_step(heavy, &ph, &g, 1.0);
    zps_optimizer_step(nest, &pn, &g, 1.0);
    assert_true(ph == 0.75f - 0.125f * 3.0f);
    assert_true(pn == 0.625f - 0.125f * (2.0f + 0.5f * 3.0f));
    assert_string_equal(zps_opt_name(zps_optimizer_config(nest)), "nesterov");
    zps_optimizer_free(heavy);
    zps_optimizer_free(nest);
}

static void test_adam(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_ADAM, 0.1);
    run_against_reference(&c, ref_adam_step, NULL);
    run_against_f32(&c);
    c.beta1 = 0.5;
    c.beta2 = 0.75;
    c.eps = 1e-3;
    run_against_reference(&c, ref_adam_step, NULL);
    run_against_f32(&c);
    c.beta1 = 0.0; /* RMSProp with bias correction */
    run_against_reference(&c, ref_adam_step, NULL);
    run_against_f32(&c);
    c = config_of(ZPS_OPT_ADAM, 0.1);
    c.weight_decay = 0.05;
    run_against_reference(&c, ref_adam_step, NULL);
    run_against_f32(&c);
}

static void test_adam_bias_correction(void **state)
{
    (void)state;
    /*
     * With bias correction the first step is lr * g / (|g| + eps): about lr
     * whatever the gradient's scale. Without it, it would be
     * lr * 0.1 g / (0.0316 |g|), about 3.16 lr.
     */
    zps_opt_config_t c = config_of(ZPS_OPT_ADAM, 0.01);
    zps_optimizer_t *opt = make(&c, 4);
    float p[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    float g[4] = {1e-3f, 1.0f, 1e3f, -5.0f};
    zps_optimizer_step(opt, p, g, 1.0);
    for (size_t i = 0; i < 4; i++) {
        double want = 1.0 - 0.01 * (double)g[i] / (fabs((double)g[i]) + 1e-8);
        assert_close(p[i], want, REL, "adam first step", i);
    }
    /* Second step, same gradient: m-hat = g and v-hat = g^2 again. */
    zps_optimizer_step(opt, p, g, 1.0);
    for (size_t i = 0; i < 4; i++) {
        double want = 1.0 - 2.0 * 0.01 * (double)g[i] / (fabs((double)g[i]) + 1e-8);
        assert_close(p[i], want, REL, "adam second step", i);
    }
    zps_optimizer_free(opt);
}

static void test_adamw(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_ADAMW, 0.1);
    c.weight_decay = 0.1;
    float decoupled[N], coupled[N];
    run_against_reference(&c, ref_adam_step, decoupled);
    run_against_f32(&c);
    c.kind = ZPS_OPT_ADAM;
    run_against_reference(&c, ref_adam_step, coupled);
    /* Decoupled decay is not Adam + L2: the L2 term is normalised by v. */
    size_t differ = 0;
    for (size_t i = 0; i < N; i++)
        differ += fabs((double)decoupled[i] - coupled[i]) > 1e-4 * fabs((double)coupled[i]);
    assert_true(differ == N);

    /* Without weight decay AdamW is Adam, bit for bit. */
    zps_opt_config_t a = config_of(ZPS_OPT_ADAM, 0.1), w = config_of(ZPS_OPT_ADAMW, 0.1);
    zps_optimizer_t *oa = make(&a, N), *ow = make(&w, N);
    float pa[N], pw[N], g[N];
    fill_params(pa, N);
    fill_params(pw, N);
    for (int s = 0; s < 3; s++) {
        fill_grad(g, N, s);
        zps_optimizer_step(oa, pa, g, 1.0);
        zps_optimizer_step(ow, pw, g, 1.0);
    }
    assert_same_bits(pw, pa, N, "adamw wd=0");
    zps_optimizer_free(oa);
    zps_optimizer_free(ow);

    /* With a zero gradient AdamW only decays: p * (1 - lr*wd) per step. */
    zps_opt_config_t z = config_of(ZPS_OPT_ADAMW, 0.5);
    z.weight_decay = 0.25;
    zps_optimizer_t *oz = make(&z, 1);
    float p = 2.0f, zero = 0.0f;
    zps_optimizer_step(oz, &p, &zero, 1.0);
    zps_optimizer_step(oz, &p, &zero, 1.0);
    assert_true(p == 2.0f * 0.875f * 0.875f);
    zps_optimizer_free(oz);
}

static void test_adagrad(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_ADAGRAD, 0.1);
    run_against_reference(&c, ref_adagrad_step, NULL);
    run_against_f32(&c);
    c.eps = 1e-2;
    /* Large enough that g + wd*p never nearly cancels with these inputs. */
    c.weight_decay = 0.05;
    run_against_reference(&c, ref_adagrad_step, NULL);
    run_against_f32(&c);
}

static void test_step_follows_schedule(void **state)
{
    (void)state;
    /* Each step uses lr_at(t) * scale rounded once; check SGD bit for bit. */
    zps_opt_config_t c = config_of(ZPS_OPT_SGD, 0.3);
    c.schedule = ZPS_SCHED_STEP;
    c.step_every = 2;
    c.gamma = 0.1;
    c.warmup = 3;
    zps_optimizer_t *opt = make(&c, N);
    float p[N], q[N], g[N];
    fill_params(p, N);
    memcpy(q, p, sizeof(p));
    for (uint64_t t = 0; t < 7; t++) {
        fill_grad(g, N, (int)t);
        double sched = 0.3 * pow(0.1, (double)(t / 2));
        if (t < 3)
            sched *= (double)(t + 1) / 3.0;
        float lr = (float)(sched * 0.75);
        for (size_t i = 0; i < N; i++)
            q[i] = q[i] - lr * g[i];
        zps_optimizer_step(opt, p, g, 0.75);
        assert_same_bits(p, q, N, "scheduled sgd");
    }
    zps_optimizer_free(opt);
}

static void test_set_steps(void **state)
{
    (void)state;
    /*
     * A restored Adam at step 9 with zero moments: the update uses t = 10,
     * m-hat = 0.1 g / (1 - 0.9^10), v-hat = 0.001 g^2 / (1 - 0.999^10).
     */
    zps_opt_config_t c = config_of(ZPS_OPT_ADAM, 0.01);
    zps_optimizer_t *opt = make(&c, 3);
    zps_optimizer_set_steps(opt, 9);
    assert_int_equal(zps_optimizer_steps(opt), 9);
    float p[3] = {1.0f, -2.0f, 3.0f}, g[3] = {0.5f, -1.0f, 2.0f};
    zps_optimizer_step(opt, p, g, 1.0);
    assert_int_equal(zps_optimizer_steps(opt), 10);
    const double init[3] = {1.0, -2.0, 3.0};
    for (size_t i = 0; i < 3; i++) {
        double mh = 0.1 * g[i] / (1.0 - pow(0.9, 10.0));
        double vh = 0.001 * (double)g[i] * g[i] / (1.0 - pow(0.999, 10.0));
        double want = init[i] - 0.01 * mh / (sqrt(vh) + 1e-8);
        assert_close(p[i], want, REL, "adam restored", i);
        /* ... which is not the first-step update (about lr * sign(g)). */
        assert_true(fabs(p[i] - (init[i] - 0.01 * (g[i] > 0 ? 1 : -1))) > 1e-3);
    }
    zps_optimizer_free(opt);

    /* set_steps also moves the schedule: warm-up is over at step 5. */
    zps_opt_config_t w = config_of(ZPS_OPT_SGD, 0.5);
    w.warmup = 4;
    zps_optimizer_t *ow = make(&w, 1);
    zps_optimizer_set_steps(ow, 5);
    float x = 1.0f, one = 1.0f;
    zps_optimizer_step(ow, &x, &one, 1.0);
    assert_true(x == 0.5f);
    zps_optimizer_free(ow);
}

/* ---- tests: schedules ----------------------------------------------------- */

static void assert_lr(const zps_opt_config_t *c, uint64_t t, double want)
{
    double got = zps_opt_lr_at(c, t);
    if (!(fabs(got - want) <= 1e-12 * fabs(want) + 1e-300)) {
        print_error("lr_at(%llu) = %.17g, want %.17g\n", (unsigned long long)t, got, want);
        fail();
    }
}

static void test_schedule_constant_and_warmup(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_SGD, 0.1);
    assert_true(zps_opt_lr_at(&c, 0) == 0.1);
    assert_true(zps_opt_lr_at(&c, 123456789) == 0.1);

    c.warmup = 4;
    assert_lr(&c, 0, 0.025);
    assert_lr(&c, 1, 0.05);
    assert_lr(&c, 2, 0.075);
    /* The last warm-up step and the first after it are the full rate, exactly. */
    assert_true(zps_opt_lr_at(&c, 3) == 0.1);
    assert_true(zps_opt_lr_at(&c, 4) == 0.1);
    assert_true(zps_opt_lr_at(&c, 1000) == 0.1);

    c.warmup = 1;
    assert_true(zps_opt_lr_at(&c, 0) == 0.1);
    c.warmup = 7;
    assert_true(zps_opt_lr_at(&c, 6) == 0.1);
    assert_lr(&c, 0, 0.1 / 7.0);
}

static void test_schedule_step(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_SGD, 0.1);
    c.schedule = ZPS_SCHED_STEP;
    c.step_every = 3;
    c.gamma = 0.5;
    /* gamma = 0.5 scales by powers of two: exact. */
    assert_true(zps_opt_lr_at(&c, 0) == 0.1);
    assert_true(zps_opt_lr_at(&c, 2) == 0.1);
    assert_true(zps_opt_lr_at(&c, 3) == 0.05);
    assert_true(zps_opt_lr_at(&c, 5) == 0.05);
    assert_true(zps_opt_lr_at(&c, 6) == 0.025);
    assert_true(zps_opt_lr_at(&c, 30) == 0.1 / 1024.0);

    c.gamma = 0.3;
    assert_lr(&c, 8, 0.1 * 0.3 * 0.3);
    assert_lr(&c, 9, 0.1 * 0.3 * 0.3 * 0.3);
    c.gamma = 1.0;
    assert_true(zps_opt_lr_at(&c, 1000) == 0.1);

    /* Warm-up multiplies the schedule's value at the same t. */
    c.gamma = 0.5;
    c.step_every = 2;
    c.warmup = 4;
    assert_lr(&c, 0, 0.1 * 0.25);
    assert_lr(&c, 1, 0.1 * 0.5);
    assert_lr(&c, 2, 0.05 * 0.75);
    assert_true(zps_opt_lr_at(&c, 3) == 0.05);  /* t = warmup - 1 */
    assert_true(zps_opt_lr_at(&c, 4) == 0.025); /* t = warmup */
}

static void test_schedule_cosine(void **state)
{
    (void)state;
    zps_opt_config_t c = config_of(ZPS_OPT_SGD, 0.1);
    c.schedule = ZPS_SCHED_COSINE;
    c.cosine_steps = 10;
    c.lr_min = 0.01;
    assert_lr(&c, 0, 0.1);
    /* cos(pi/5) = (1 + sqrt 5)/4 */
    assert_lr(&c, 2, 0.01 + 0.09 * (1.0 + (1.0 + sqrt(5.0)) / 4.0) / 2.0);
    assert_lr(&c, 5, 0.055);
    /* cos(4pi/5) = -(1 + sqrt 5)/4 */
    assert_lr(&c, 8, 0.01 + 0.09 * (1.0 - (1.0 + sqrt(5.0)) / 4.0) / 2.0);
    /* The end and beyond: the floor, exactly. */
    assert_true(zps_opt_lr_at(&c, 10) == 0.01);
    assert_true(zps_opt_lr_at(&c, 11) == 0.01);
    assert_true(zps_opt_lr_at(&c, UINT64_MAX) == 0.01);
    for (uint64_t t = 1; t <= 10; t++)
        assert_true(zps_opt_lr_at(&c, t) < zps_opt_lr_at(&c, t - 1));

    c.lr_min = 0.0;
    assert_true(zps_opt_lr_at(&c, 10) == 0.0);
    assert_lr(&c, 5, 0.05);
    c.lr_min = 0.1; /* floor = lr: constant */
    assert_lr(&c, 3, 0.1);

    /* With warm-up: the cosine's value at t, scaled up to t = warmup - 1. */
    c.lr_min = 0.01;
    c.warmup = 5;
    assert_lr(&c, 0, 0.1 * 0.2);
    assert_lr(&c, 2, (0.01 + 0.09 * (1.0 + (1.0 + sqrt(5.0)) / 4.0) / 2.0) * 0.6);
    double at4 = 0.01 + 0.09 * (1.0 + cos(3.14159265358979323846 * 0.4)) / 2.0;
    assert_lr(&c, 4, at4);
    assert_lr(&c, 5, 0.055);
    c.warmup = 20; /* warm-up longer than the cosine: the floor, ramped */
    assert_lr(&c, 14, 0.01 * 15.0 / 20.0);
}

/* ---- tests: names and configuration -------------------------------------- */

static void test_defaults_and_names(void **state)
{
    (void)state;
    zps_opt_config_t c;
    memset(&c, 0xa5, sizeof(c));
    zps_opt_config_default(&c);
    assert_int_equal(c.kind, ZPS_OPT_SGD);
    assert_true(c.lr == 0.01 && c.momentum == 0.9 && c.beta1 == 0.9 && c.beta2 == 0.999);
    assert_true(c.eps == 1e-8 && c.weight_decay == 0.0 && !c.nesterov);
    assert_int_equal(c.schedule, ZPS_SCHED_CONSTANT);
    assert_int_equal(c.warmup, 0);
    assert_int_equal(zps_opt_config_check(&c, NULL, 0), 0);

    const char *names[] = {"sgd", "momentum", "nesterov", "adam", "adamw", "adagrad"};
    const zps_opt_kind_t kinds[] = {ZPS_OPT_SGD,  ZPS_OPT_MOMENTUM, ZPS_OPT_MOMENTUM,
                                    ZPS_OPT_ADAM, ZPS_OPT_ADAMW,    ZPS_OPT_ADAGRAD};
    for (size_t i = 0; i < 6; i++) {
        zps_opt_config_default(&c);
        assert_int_equal(zps_opt_parse(names[i], &c), 0);
        assert_int_equal(c.kind, kinds[i]);
        assert_int_equal(c.nesterov, i == 2);
        assert_string_equal(zps_opt_name(&c), names[i]);
        assert_int_equal(zps_opt_config_check(&c, NULL, 0), 0);
    }
    /* "momentum" keeps a --nesterov given before it. */
    zps_opt_config_default(&c);
    c.nesterov = true;
    assert_int_equal(zps_opt_parse("momentum", &c), 0);
    assert_true(c.nesterov);
    /* Unknown names change nothing. */
    zps_opt_config_default(&c);
    assert_int_equal(zps_opt_parse("rmsprop", &c), ZPS_EINVAL);
    assert_int_equal(zps_opt_parse("", &c), ZPS_EINVAL);
    assert_int_equal(zps_opt_parse("SGD", &c), ZPS_EINVAL);
    assert_int_equal(zps_opt_parse(NULL, &c), ZPS_EINVAL);
    assert_int_equal(c.kind, ZPS_OPT_SGD);

    zps_sched_kind_t k = ZPS_SCHED_COSINE;
    assert_int_equal(zps_sched_parse("constant", &k), 0);
    assert_int_equal(k, ZPS_SCHED_CONSTANT);
    assert_int_equal(zps_sched_parse("step", &k), 0);
    assert_int_equal(k, ZPS_SCHED_STEP);
    assert_int_equal(zps_sched_parse("cosine", &k), 0);
    assert_int_equal(k, ZPS_SCHED_COSINE);
    assert_int_equal(zps_sched_parse("linear", &k), ZPS_EINVAL);
    assert_int_equal(k, ZPS_SCHED_COSINE);
    assert_string_equal(zps_sched_name(ZPS_SCHED_CONSTANT), "constant");
    assert_string_equal(zps_sched_name(ZPS_SCHED_STEP), "step");
    assert_string_equal(zps_sched_name(ZPS_SCHED_COSINE), "cosine");
}

/* One bad value: the change to a valid config, and the flag its reason names. */
typedef struct bad_case {
    const char *flag;
    zps_opt_kind_t kind;
    int field;
    double value;
} bad_case_t;

enum {
    F_KIND,
    F_LR,
    F_WD,
    F_MOMENTUM,
    F_NESTEROV,
    F_BETA1,
    F_BETA2,
    F_EPS,
    F_SCHED,
    F_STEP_EVERY,
    F_GAMMA,
    F_COSINE_STEPS,
    F_LR_MIN,
};

static void apply_bad(zps_opt_config_t *c, const bad_case_t *b)
{
    c->kind = b->kind;
    switch (b->field) {
    case F_KIND:
        c->kind = (zps_opt_kind_t)(int)b->value;
        break;
    case F_LR:
        c->lr = b->value;
        break;
    case F_WD:
        c->weight_decay = b->value;
        break;
    case F_MOMENTUM:
        c->momentum = b->value;
        break;
    case F_NESTEROV:
        c->nesterov = true;
        break;
    case F_BETA1:
        c->beta1 = b->value;
        break;
    case F_BETA2:
        c->beta2 = b->value;
        break;
    case F_EPS:
        c->eps = b->value;
        break;
    case F_SCHED:
        c->schedule = (zps_sched_kind_t)(int)b->value;
        break;
    case F_STEP_EVERY:
        c->schedule = ZPS_SCHED_STEP;
        c->step_every = 0;
        break;
    case F_GAMMA:
        c->schedule = ZPS_SCHED_STEP;
        c->step_every = 10;
        c->gamma = b->value;
        break;
    case F_COSINE_STEPS:
        c->schedule = ZPS_SCHED_COSINE;
        c->cosine_steps = 0;
        break;
    case F_LR_MIN:
        c->schedule = ZPS_SCHED_COSINE;
        c->cosine_steps = 100;
        c->lr_min = b->value;
        break;
    }
}

static void test_config_check(void **state)
{
    (void)state;
    const double nan = NAN, inf = INFINITY;
    const bad_case_t cases[] = {
        {"--optimizer", ZPS_OPT_SGD, F_KIND, 5},
        {"--optimizer", ZPS_OPT_SGD, F_KIND, -1},
        {"--lr", ZPS_OPT_SGD, F_LR, 0},
        {"--lr", ZPS_OPT_ADAM, F_LR, -0.1},
        {"--lr", ZPS_OPT_SGD, F_LR, nan},
        {"--lr", ZPS_OPT_SGD, F_LR, inf},
        {"--lr", ZPS_OPT_SGD, F_LR, 1e-50}, /* zero in float32 */
        {"--lr", ZPS_OPT_SGD, F_LR, 1e39},  /* infinite in float32 */
        {"--weight-decay", ZPS_OPT_SGD, F_WD, -1e-4},
        {"--weight-decay", ZPS_OPT_ADAMW, F_WD, nan},
        {"--weight-decay", ZPS_OPT_ADAGRAD, F_WD, inf},
        {"--momentum", ZPS_OPT_MOMENTUM, F_MOMENTUM, 1.0},
        {"--momentum", ZPS_OPT_MOMENTUM, F_MOMENTUM, -0.5},
        {"--momentum", ZPS_OPT_MOMENTUM, F_MOMENTUM, nan},
        {"--nesterov", ZPS_OPT_SGD, F_NESTEROV, 0},
        {"--nesterov", ZPS_OPT_ADAM, F_NESTEROV, 0},
        {"--beta1", ZPS_OPT_ADAM, F_BETA1, 1.0},
        {"--beta1", ZPS_OPT_ADAMW, F_BETA1, -0.1},
        {"--beta1", ZPS_OPT_ADAM, F_BETA1, nan},
        {"--beta2", ZPS_OPT_ADAM, F_BETA2, 1.0},
        {"--beta2", ZPS_OPT_ADAMW, F_BETA2, 1.5},
        {"--beta2", ZPS_OPT_ADAM, F_BETA2, nan},
        {"--eps", ZPS_OPT_ADAM, F_EPS, 0},
        {"--eps", ZPS_OPT_ADAMW, F_EPS, -1e-8},
        {"--eps", ZPS_OPT_ADAGRAD, F_EPS, nan},
        {"--eps", ZPS_OPT_ADAGRAD, F_EPS, 1e-50}, /* zero in float32 */
        {"--eps", ZPS_OPT_ADAM, F_EPS, inf},
        {"--schedule", ZPS_OPT_SGD, F_SCHED, 3},
        {"--step-every", ZPS_OPT_SGD, F_STEP_EVERY, 0},
        {"--gamma", ZPS_OPT_SGD, F_GAMMA, 0},
        {"--gamma", ZPS_OPT_SGD, F_GAMMA, 1.5},
        {"--gamma", ZPS_OPT_SGD, F_GAMMA, nan},
        {"--cosine-steps", ZPS_OPT_SGD, F_COSINE_STEPS, 0},
        {"--lr-min", ZPS_OPT_SGD, F_LR_MIN, -0.001},
        {"--lr-min", ZPS_OPT_SGD, F_LR_MIN, 0.02}, /* above --lr 0.01 */
        {"--lr-min", ZPS_OPT_SGD, F_LR_MIN, nan},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        zps_opt_config_t c;
        zps_opt_config_default(&c);
        apply_bad(&c, &cases[i]);
        char why[160] = "";
        int rc = zps_opt_config_check(&c, why, sizeof(why));
        if (rc != ZPS_EINVAL || strstr(why, cases[i].flag) != why || strchr(why, '\n')) {
            print_error("case %zu (%s %g): rc %d, reason \"%s\"\n", i, cases[i].flag,
                        cases[i].value, rc, why);
            fail();
        }
        assert_int_equal(zps_opt_config_check(&c, NULL, 0), ZPS_EINVAL);
        /* A short buffer gets a truncated, terminated reason. */
        char tiny[8];
        assert_int_equal(zps_opt_config_check(&c, tiny, sizeof(tiny)), ZPS_EINVAL);
        assert_true(strlen(tiny) < sizeof(tiny));
        /* And no optimizer is made from it. */
        zps_optimizer_t *opt = (zps_optimizer_t *)&c;
        assert_int_equal(zps_optimizer_new(&c, 4, &opt), ZPS_EINVAL);
        assert_ptr_equal(opt, (zps_optimizer_t *)&c);
    }

    /* The wording, for one of them. */
    zps_opt_config_t c = config_of(ZPS_OPT_ADAM, 0.001);
    c.beta2 = 1.0;
    char why[160];
    assert_int_equal(zps_opt_config_check(&c, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "--beta2 must be in [0, 1) (got 1)");

    /* Fields the chosen optimizer does not use are not judged. */
    c = config_of(ZPS_OPT_SGD, 0.1);
    c.beta2 = 7.0;
    c.momentum = -1.0;
    c.eps = 0.0;
    c.gamma = 0.0;
    c.cosine_steps = 0;
    assert_int_equal(zps_opt_config_check(&c, why, sizeof(why)), 0);
    /* Edges that are valid. */
    c = config_of(ZPS_OPT_MOMENTUM, 0.1);
    c.momentum = 0.0;
    c.nesterov = true;
    assert_int_equal(zps_opt_config_check(&c, NULL, 0), 0);
    c = config_of(ZPS_OPT_ADAM, 0.1);
    c.beta1 = 0.0;
    c.beta2 = 0.0;
    c.schedule = ZPS_SCHED_COSINE;
    c.cosine_steps = 1;
    c.lr_min = 0.1;
    c.warmup = 1000;
    assert_int_equal(zps_opt_config_check(&c, NULL, 0), 0);
    assert_int_equal(zps_opt_config_check(NULL, why, sizeof(why)), ZPS_EINVAL);
}

/* ---- tests: state arrays and lifetimes ----------------------------------- */

static void test_state_arrays(void **state)
{
    (void)state;
    const struct {
        zps_opt_kind_t kind;
        size_t count;
        const char *names[2];
    } want[] = {
        {ZPS_OPT_SGD, 0, {NULL, NULL}},         {ZPS_OPT_MOMENTUM, 1, {"velocity", NULL}},
        {ZPS_OPT_ADAM, 2, {"m", "v"}},          {ZPS_OPT_ADAMW, 2, {"m", "v"}},
        {ZPS_OPT_ADAGRAD, 1, {"sum_sq", NULL}},
    };
    for (size_t k = 0; k < 5; k++) {
        zps_opt_config_t c = config_of(want[k].kind, 0.1);
        zps_optimizer_t *opt = make(&c, 1001);
        assert_int_equal(zps_optimizer_size(opt), 1001);
        assert_int_equal(zps_optimizer_steps(opt), 0);
        assert_int_equal(zps_optimizer_config(opt)->kind, want[k].kind);
        assert_int_equal(zps_optimizer_state_count(opt), want[k].count);
        for (size_t i = 0; i < want[k].count; i++) {
            const char *name = NULL;
            float *s = zps_optimizer_state(opt, i, &name);
            assert_non_null(s);
            assert_string_equal(name, want[k].names[i]);
            assert_int_equal((uintptr_t)s % 64, 0);
            for (size_t j = 0; j < 1001; j++)
                assert_true(s[j] == 0.0f);
            assert_ptr_equal(zps_optimizer_state(opt, i, NULL), s);
        }
        const char *untouched = "untouched";
        assert_null(zps_optimizer_state(opt, want[k].count, &untouched));
        assert_string_equal(untouched, "untouched");
        zps_optimizer_free(opt);
    }
}

static void test_state_restore(void **state)
{
    (void)state;
    /* Writing the state (a checkpoint reader does) continues the run exactly. */
    zps_opt_config_t c = config_of(ZPS_OPT_ADAM, 0.05);
    c.weight_decay = 0.01;
    zps_optimizer_t *a = make(&c, N), *b = make(&c, N);
    float pa[N], pb[N], g[N];
    fill_params(pa, N);
    for (int s = 0; s < 3; s++) {
        fill_grad(g, N, s);
        zps_optimizer_step(a, pa, g, 1.0);
    }
    memcpy(pb, pa, sizeof(pa));
    for (size_t i = 0; i < 2; i++)
        memcpy(zps_optimizer_state(b, i, NULL), zps_optimizer_state(a, i, NULL), N * sizeof(float));
    zps_optimizer_set_steps(b, zps_optimizer_steps(a));
    for (int s = 3; s < 6; s++) {
        fill_grad(g, N, s);
        zps_optimizer_step(a, pa, g, 1.0);
        zps_optimizer_step(b, pb, g, 1.0);
    }
    assert_same_bits(pb, pa, N, "restored param");
    assert_same_bits(zps_optimizer_state(b, 1, NULL), zps_optimizer_state(a, 1, NULL), N, "v");
    zps_optimizer_free(a);
    zps_optimizer_free(b);
}

static void test_lifetimes(void **state)
{
    (void)state;
    zps_optimizer_free(NULL);
    /* An empty shard is legal: steps only count. */
    zps_opt_config_t c = config_of(ZPS_OPT_ADAM, 0.1);
    zps_optimizer_t *opt = make(&c, 0);
    zps_optimizer_step(opt, NULL, NULL, 1.0);
    assert_int_equal(zps_optimizer_steps(opt), 1);
    assert_int_equal(zps_optimizer_size(opt), 0);
    zps_optimizer_free(opt);
    /* Sizes that cannot be allocated fail cleanly. */
    zps_optimizer_t *big = NULL;
    assert_int_equal(zps_optimizer_new(&c, SIZE_MAX / 2, &big), ZPS_ENOMEM);
    assert_null(big);
    assert_int_equal(zps_optimizer_new(&c, 4, NULL), ZPS_EINVAL);
    /* The optimizer keeps its own copy of the config. */
    opt = make(&c, 4);
    c.lr = 5.0;
    assert_true(zps_optimizer_config(opt)->lr == 0.1);
    zps_optimizer_free(opt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_exact),
        cmocka_unit_test(test_sgd_reference),
        cmocka_unit_test(test_momentum),
        cmocka_unit_test(test_nesterov_first_step),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_bias_correction),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_adagrad),
        cmocka_unit_test(test_step_follows_schedule),
        cmocka_unit_test(test_set_steps),
        cmocka_unit_test(test_schedule_constant_and_warmup),
        cmocka_unit_test(test_schedule_step),
        cmocka_unit_test(test_schedule_cosine),
        cmocka_unit_test(test_defaults_and_names),
        cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_state_arrays),
        cmocka_unit_test(test_state_restore),
        cmocka_unit_test(test_lifetimes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
