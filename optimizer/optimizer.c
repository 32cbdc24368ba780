/*
 * optimizer.c - the update rules a shard applies to its parameters: SGD,
 * momentum (heavy-ball and Nesterov), Adam, AdamW and AdaGrad, with L2 or
 * decoupled weight decay, and the learning-rate schedules.
 *
 * This file is arithmetic only. It never allocates during a step, never logs
 * and never looks at a clock; the server decides when a step happens and with
 * which gradient. The exact float32 order of every formula is written down in
 * docs/optimizers.md and the loops below follow it line by line, so that a
 * test (or a reader) can reproduce any update bit for bit.
 *
 * Speed: a step on a large shard is bound by memory traffic, not arithmetic.
 * Each optimizer is one pass over its arrays (parameters, gradient, state),
 * with every scalar that depends only on the step number (learning rate,
 * bias corrections, decay factor) computed once per step in double and
 * rounded once to float32. The loops are plain, restrict-qualified and
 * branch-free so the compiler vectorises them; server/CMakeLists.txt builds
 * this file with -fno-math-errno (sqrtf becomes one instruction) and the
 * dynamic vector cost model (GCC's -O2 default model refuses loops of
 * unknown length).
 */
#include "optimizer.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "simd.h"

/* State arrays start on a cache line so vector loads never split one. */
#define ZPS_OPT_ALIGN 64

/* The kernels below are written once with compile-time flags and inlined
 * into one specialised loop per variant, so no flag is tested per element. */
#define ZPS_OPT_INLINE static inline __attribute__((always_inline))

/*
 * On x86-64 with glibc every loop is also compiled for AVX2 and the dynamic
 * loader picks that version on CPUs that have it (function multiversioning;
 * the baseline build only assumes SSE2). The results are bit-identical either
 * way: the same IEEE operations, each correctly rounded, in the same order,
 * never contracted. The width matters for Adam and AdaGrad, whose square
 * roots and divisions keep 4-wide SSE2 code below memory bandwidth; an
 * AVX-512 version measured no faster (docs/optimizers.md).
 */
#ifndef ZPS_OPT_LOOP /* -DZPS_OPT_LOOP= builds the baseline loops only */
#define ZPS_OPT_LOOP ZPS_CLONES_AVX2
#endif

struct zps_optimizer {
    zps_opt_config_t cfg;
    size_t n;       /* parameters in the shard */
    uint64_t steps; /* steps applied so far: the next step has t = steps */
    size_t nstate;
    float *state[ZPS_OPT_MAX_STATE]; /* each [n], 64-byte aligned, owned */
    const char *names[ZPS_OPT_MAX_STATE];
};

static const double zps_opt_pi = 3.14159265358979323846;

void zps_opt_config_default(zps_opt_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = ZPS_OPT_SGD;
    cfg->lr = 0.01;
    cfg->momentum = 0.9;
    cfg->nesterov = false;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->eps = 1e-8;
    cfg->weight_decay = 0.0;
    cfg->schedule = ZPS_SCHED_CONSTANT;
    /* No default period for the step and cosine schedules: choosing one of
     * them without saying when it decays is refused by the check. */
    cfg->step_every = 0;
    cfg->gamma = 0.1;
    cfg->cosine_steps = 0;
    cfg->lr_min = 0.0;
    cfg->warmup = 0;
}

/* Writes the reason into why (when given) and returns ZPS_EINVAL. */
__attribute__((format(printf, 3, 4))) static int zps_opt_reject(char *why, size_t why_size,
                                                                const char *fmt, ...)
{
    if (why != NULL && why_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return ZPS_EINVAL;
}

/* x in [0, 1); false for NaN. */
static bool zps_opt_unit_open(double x)
{
    return x >= 0.0 && x < 1.0;
}

int zps_opt_config_check(const zps_opt_config_t *cfg, char *why, size_t why_size)
{
    if (cfg == NULL)
        return zps_opt_reject(why, why_size, "no optimizer configuration");

    switch (cfg->kind) {
    case ZPS_OPT_SGD:
    case ZPS_OPT_MOMENTUM:
    case ZPS_OPT_ADAM:
    case ZPS_OPT_ADAMW:
    case ZPS_OPT_ADAGRAD:
        break;
    default:
        return zps_opt_reject(why, why_size,
                              "--optimizer must be one of sgd, momentum, nesterov, adam, adamw, "
                              "adagrad (got kind %d)",
                              (int)cfg->kind);
    }
    const char *name = zps_opt_name(cfg);

    /* The rate is used as a float32: it must stay positive and finite there. */
    if (!(cfg->lr > 0.0 && cfg->lr <= FLT_MAX && (float)cfg->lr >= FLT_MIN))
        return zps_opt_reject(why, why_size,
                              "--lr must be > 0 and a normal float32 number (got %g)", cfg->lr);
    if (!(cfg->weight_decay >= 0.0 && cfg->weight_decay <= FLT_MAX))
        return zps_opt_reject(why, why_size, "--weight-decay must be a finite number >= 0 (got %g)",
                              cfg->weight_decay);

    if (cfg->nesterov && cfg->kind != ZPS_OPT_MOMENTUM)
        return zps_opt_reject(why, why_size,
                              "--nesterov needs --optimizer momentum or nesterov (got %s)", name);
    if (cfg->kind == ZPS_OPT_MOMENTUM && !zps_opt_unit_open(cfg->momentum))
        return zps_opt_reject(why, why_size, "--momentum must be in [0, 1) (got %g)",
                              cfg->momentum);
    if (cfg->kind == ZPS_OPT_ADAM || cfg->kind == ZPS_OPT_ADAMW) {
        if (!zps_opt_unit_open(cfg->beta1))
            return zps_opt_reject(why, why_size, "--beta1 must be in [0, 1) (got %g)", cfg->beta1);
        if (!zps_opt_unit_open(cfg->beta2))
            return zps_opt_reject(why, why_size, "--beta2 must be in [0, 1) (got %g)", cfg->beta2);
    }
    /* eps keeps a denominator away from zero; if it rounded to 0 in float32 a
     * parameter whose gradient was always 0 would become 0/0. */
    if ((cfg->kind == ZPS_OPT_ADAM || cfg->kind == ZPS_OPT_ADAMW || cfg->kind == ZPS_OPT_ADAGRAD) &&
        !(cfg->eps > 0.0 && cfg->eps <= FLT_MAX && (float)cfg->eps >= FLT_MIN))
        return zps_opt_reject(why, why_size,
                              "--eps must be > 0 and a normal float32 number (got %g)", cfg->eps);

    switch (cfg->schedule) {
    case ZPS_SCHED_CONSTANT:
        break;
    case ZPS_SCHED_STEP:
        if (cfg->step_every < 1)
            return zps_opt_reject(why, why_size, "--step-every must be >= 1 with --schedule step");
        if (!(cfg->gamma > 0.0 && cfg->gamma <= 1.0))
            return zps_opt_reject(why, why_size, "--gamma must be in (0, 1] (got %g)", cfg->gamma);
        break;
    case ZPS_SCHED_COSINE:
        if (cfg->cosine_steps < 1)
            return zps_opt_reject(why, why_size,
                                  "--cosine-steps must be >= 1 with --schedule cosine");
        if (!(cfg->lr_min >= 0.0 && cfg->lr_min <= cfg->lr))
            return zps_opt_reject(why, why_size, "--lr-min must be in [0, --lr %g] (got %g)",
                                  cfg->lr, cfg->lr_min);
        break;
    default:
        return zps_opt_reject(why, why_size,
                              "--schedule must be one of constant, step, cosine (got kind %d)",
                              (int)cfg->schedule);
    }
    return 0;
}

int zps_opt_parse(const char *name, zps_opt_config_t *cfg)
{
    static const struct {
        const char *name;
        zps_opt_kind_t kind;
    } names[] = {
        {"sgd", ZPS_OPT_SGD},   {"momentum", ZPS_OPT_MOMENTUM}, {"nesterov", ZPS_OPT_MOMENTUM},
        {"adam", ZPS_OPT_ADAM}, {"adamw", ZPS_OPT_ADAMW},       {"adagrad", ZPS_OPT_ADAGRAD},
    };
    if (name == NULL || cfg == NULL)
        return ZPS_EINVAL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(name, names[i].name) == 0) {
            cfg->kind = names[i].kind;
            if (strcmp(name, "nesterov") == 0)
                cfg->nesterov = true;
            return 0;
        }
    }
    return ZPS_EINVAL;
}

const char *zps_opt_name(const zps_opt_config_t *cfg)
{
    switch (cfg->kind) {
    case ZPS_OPT_SGD:
        return "sgd";
    case ZPS_OPT_MOMENTUM:
        return cfg->nesterov ? "nesterov" : "momentum";
    case ZPS_OPT_ADAM:
        return "adam";
    case ZPS_OPT_ADAMW:
        return "adamw";
    case ZPS_OPT_ADAGRAD:
        return "adagrad";
    }
    return "unknown";
}

int zps_sched_parse(const char *name, zps_sched_kind_t *out)
{
    if (name == NULL || out == NULL)
        return ZPS_EINVAL;
    if (strcmp(name, "constant") == 0)
        *out = ZPS_SCHED_CONSTANT;
    else if (strcmp(name, "step") == 0)
        *out = ZPS_SCHED_STEP;
    else if (strcmp(name, "cosine") == 0)
        *out = ZPS_SCHED_COSINE;
    else
        return ZPS_EINVAL;
    return 0;
}

const char *zps_sched_name(zps_sched_kind_t kind)
{
    switch (kind) {
    case ZPS_SCHED_CONSTANT:
        return "constant";
    case ZPS_SCHED_STEP:
        return "step";
    case ZPS_SCHED_COSINE:
        return "cosine";
    }
    return "unknown";
}

double zps_opt_lr_at(const zps_opt_config_t *cfg, uint64_t t)
{
    double lr = cfg->lr;

    /* A zero period only reaches here from a config that failed the check;
     * it means "no decay" rather than a division by zero. */
    if (cfg->schedule == ZPS_SCHED_STEP && cfg->step_every > 0) {
        lr = cfg->lr * pow(cfg->gamma, (double)(t / cfg->step_every));
    } else if (cfg->schedule == ZPS_SCHED_COSINE && cfg->cosine_steps > 0) {
        uint64_t tc = t < cfg->cosine_steps ? t : cfg->cosine_steps;
        double c = cos(zps_opt_pi * (double)tc / (double)cfg->cosine_steps);
        lr = cfg->lr_min + (cfg->lr - cfg->lr_min) * (1.0 + c) / 2.0;
    }
    /* The factor is formed first so that it is exactly 1 at t = warmup - 1. */
    if (t < cfg->warmup)
        lr = lr * ((double)(t + 1) / (double)cfg->warmup);
    return lr;
}

/* Rounds n floats up to whole cache lines (at least one), or 0 on overflow. */
static size_t zps_opt_state_bytes(size_t n)
{
    if (n > (SIZE_MAX - ZPS_OPT_ALIGN) / sizeof(float))
        return 0;
    size_t bytes = n * sizeof(float);
    bytes = (bytes + ZPS_OPT_ALIGN - 1) / ZPS_OPT_ALIGN * ZPS_OPT_ALIGN;
    return bytes > 0 ? bytes : ZPS_OPT_ALIGN;
}

size_t zps_opt_kind_state_count(zps_opt_kind_t kind)
{
    switch (kind) {
    case ZPS_OPT_SGD:
        return 0;
    case ZPS_OPT_MOMENTUM:
    case ZPS_OPT_ADAGRAD:
        return 1;
    case ZPS_OPT_ADAM:
    case ZPS_OPT_ADAMW:
        return 2;
    }
    return 0;
}

int zps_optimizer_new(const zps_opt_config_t *cfg, size_t n, zps_optimizer_t **out)
{
    if (out == NULL || zps_opt_config_check(cfg, NULL, 0) != 0)
        return ZPS_EINVAL;
    size_t bytes = zps_opt_state_bytes(n);
    if (bytes == 0)
        return ZPS_ENOMEM;

    zps_optimizer_t *opt = calloc(1, sizeof(*opt));
    if (opt == NULL)
        return ZPS_ENOMEM;
    opt->cfg = *cfg;
    opt->n = n;
    opt->nstate = zps_opt_kind_state_count(cfg->kind);
    switch (cfg->kind) {
    case ZPS_OPT_SGD:
        break;
    case ZPS_OPT_MOMENTUM:
        opt->names[0] = "velocity";
        break;
    case ZPS_OPT_ADAM:
    case ZPS_OPT_ADAMW:
        opt->names[0] = "m";
        opt->names[1] = "v";
        break;
    case ZPS_OPT_ADAGRAD:
        opt->names[0] = "sum_sq";
        break;
    }
    for (size_t i = 0; i < opt->nstate; i++) {
        opt->state[i] = aligned_alloc(ZPS_OPT_ALIGN, bytes);
        if (opt->state[i] == NULL)
            goto fail;
        memset(opt->state[i], 0, bytes);
    }
    *out = opt;
    return 0;

fail:
    zps_optimizer_free(opt);
    return ZPS_ENOMEM;
}

void zps_optimizer_free(zps_optimizer_t *opt)
{
    if (opt == NULL)
        return;
    for (size_t i = 0; i < ZPS_OPT_MAX_STATE; i++)
        free(opt->state[i]);
    free(opt);
}

/*
 * The kernels. Each is one pass over [n] floats; the float32 order of the
 * operations is the one documented in docs/optimizers.md (the build has
 * -ffp-contract=off, so no multiply-add is fused). `l2` adds the L2 term
 * g' = g + wd * p to the gradient, `decay` applies AdamW's p = p * decay first.
 *
 * With `dry` a kernel stores nothing: it computes every value the step would
 * write and returns nonzero when one of them is not finite. The arithmetic is
 * the same inlined code, so the check and the step agree bit for bit.
 */

/* Nonzero when x is Inf or NaN: a bit test, branch-free, so the loops stay vectorised. */
ZPS_OPT_INLINE uint32_t zps_opt_nonfinite(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    return (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
}

/* p, g: [n] */
ZPS_OPT_INLINE uint32_t zps_opt_sgd_kernel(size_t n, float *restrict p, const float *restrict g,
                                           float lr, float wd, bool l2, bool dry)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        if (l2)
            gi = gi + wd * p[i];
        float pi = p[i] - lr * gi;
        if (dry)
            bad |= zps_opt_nonfinite(pi);
        else
            p[i] = pi;
    }
    return bad;
}

/* p, g, b (velocity): [n] */
ZPS_OPT_INLINE uint32_t zps_opt_momentum_kernel(size_t n, float *restrict p,
                                                const float *restrict g, float *restrict b,
                                                float lr, float mu, float wd, bool l2,
                                                bool nesterov, bool dry)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        if (l2)
            gi = gi + wd * p[i];
        float bi = mu * b[i] + gi;
        float pi;
        if (nesterov)
            pi = p[i] - lr * (gi + mu * bi);
        else
            pi = p[i] - lr * bi;
        if (dry) {
            bad |= zps_opt_nonfinite(bi) | zps_opt_nonfinite(pi);
        } else {
            b[i] = bi;
            p[i] = pi;
        }
    }
    return bad;
}

/* p, g, m, v: [n] */
ZPS_OPT_INLINE uint32_t zps_opt_adam_kernel(size_t n, float *restrict p, const float *restrict g,
                                            float *restrict m, float *restrict v,
                                            zps_opt_adam_scalars_t s, bool l2, bool decay, bool dry)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float pi = p[i];
        float gi = g[i];
        if (decay)
            pi = pi * s.decay;
        if (l2)
            gi = gi + s.wd * pi;
        float mi = s.b1 * m[i] + s.omb1 * gi;
        float vi = s.b2 * v[i] + s.omb2 * (gi * gi);
        float den = sqrtf(vi) * s.rs2 + s.eps;
        float pn = pi - s.step * (mi / den);
        if (dry) {
            bad |= zps_opt_nonfinite(mi) | zps_opt_nonfinite(vi) | zps_opt_nonfinite(pn);
        } else {
            m[i] = mi;
            v[i] = vi;
            p[i] = pn;
        }
    }
    return bad;
}

/* p, g, s (sum of squares): [n] */
ZPS_OPT_INLINE uint32_t zps_opt_adagrad_kernel(size_t n, float *restrict p, const float *restrict g,
                                               float *restrict s, float lr, float eps, float wd,
                                               bool l2, bool dry)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        if (l2)
            gi = gi + wd * p[i];
        float si = s[i] + gi * gi;
        float pi = p[i] - lr * (gi / (sqrtf(si) + eps));
        if (dry) {
            bad |= zps_opt_nonfinite(si) | zps_opt_nonfinite(pi);
        } else {
            s[i] = si;
            p[i] = pi;
        }
    }
    return bad;
}

/* One specialised, separately compiled loop per variant; `dry` as the kernels'. */
ZPS_OPT_LOOP static uint32_t zps_opt_sgd(size_t n, float *restrict p, const float *restrict g,
                                         float lr, bool dry)
{
    return dry ? zps_opt_sgd_kernel(n, p, g, lr, 0.0f, false, true)
               : zps_opt_sgd_kernel(n, p, g, lr, 0.0f, false, false);
}

ZPS_OPT_LOOP static uint32_t zps_opt_sgd_l2(size_t n, float *restrict p, const float *restrict g,
                                            float lr, float wd, bool dry)
{
    return dry ? zps_opt_sgd_kernel(n, p, g, lr, wd, true, true)
               : zps_opt_sgd_kernel(n, p, g, lr, wd, true, false);
}

ZPS_OPT_LOOP static uint32_t zps_opt_momentum(size_t n, float *restrict p, const float *restrict g,
                                              float *restrict b, float lr, float mu, float wd,
                                              bool l2, bool nesterov, bool dry)
{
    if (dry) {
        if (nesterov)
            return l2 ? zps_opt_momentum_kernel(n, p, g, b, lr, mu, wd, true, true, true)
                      : zps_opt_momentum_kernel(n, p, g, b, lr, mu, 0.0f, false, true, true);
        return l2 ? zps_opt_momentum_kernel(n, p, g, b, lr, mu, wd, true, false, true)
                  : zps_opt_momentum_kernel(n, p, g, b, lr, mu, 0.0f, false, false, true);
    }
    if (nesterov)
        return l2 ? zps_opt_momentum_kernel(n, p, g, b, lr, mu, wd, true, true, false)
                  : zps_opt_momentum_kernel(n, p, g, b, lr, mu, 0.0f, false, true, false);
    return l2 ? zps_opt_momentum_kernel(n, p, g, b, lr, mu, wd, true, false, false)
              : zps_opt_momentum_kernel(n, p, g, b, lr, mu, 0.0f, false, false, false);
}

ZPS_OPT_LOOP static uint32_t zps_opt_adam(size_t n, float *restrict p, const float *restrict g,
                                          float *restrict m, float *restrict v,
                                          zps_opt_adam_scalars_t s, bool l2, bool decay, bool dry)
{
    if (dry) {
        if (decay)
            return zps_opt_adam_kernel(n, p, g, m, v, s, false, true, true);
        return l2 ? zps_opt_adam_kernel(n, p, g, m, v, s, true, false, true)
                  : zps_opt_adam_kernel(n, p, g, m, v, s, false, false, true);
    }
    if (decay)
        return zps_opt_adam_kernel(n, p, g, m, v, s, false, true, false);
    return l2 ? zps_opt_adam_kernel(n, p, g, m, v, s, true, false, false)
              : zps_opt_adam_kernel(n, p, g, m, v, s, false, false, false);
}

ZPS_OPT_LOOP static uint32_t zps_opt_adagrad(size_t n, float *restrict p, const float *restrict g,
                                             float *restrict s, float lr, float eps, float wd,
                                             bool l2, bool dry)
{
    if (dry)
        return l2 ? zps_opt_adagrad_kernel(n, p, g, s, lr, eps, wd, true, true)
                  : zps_opt_adagrad_kernel(n, p, g, s, lr, eps, 0.0f, false, true);
    return l2 ? zps_opt_adagrad_kernel(n, p, g, s, lr, eps, wd, true, false)
              : zps_opt_adagrad_kernel(n, p, g, s, lr, eps, 0.0f, false, false);
}

void zps_optimizer_begin(const zps_optimizer_t *opt, double lr_scale, zps_opt_step_t *st)
{
    ZPS_ASSERT(opt != NULL);
    ZPS_ASSERT(lr_scale >= 0.0 && lr_scale <= DBL_MAX);
    const zps_opt_config_t *c = &opt->cfg;
    memset(st, 0, sizeof(*st));
    /* The step's rate: schedule and warm-up and scale in double, one rounding. */
    st->lr = (float)(zps_opt_lr_at(c, opt->steps) * lr_scale);
    /* Weight decay 0 skips the term entirely, as PyTorch does. */
    st->has_wd = c->weight_decay != 0.0;
    st->wd = (float)c->weight_decay;
    if (c->kind == ZPS_OPT_ADAM || c->kind == ZPS_OPT_ADAMW) {
        /* Bias corrections use the 1-based step number. */
        double t = (double)opt->steps + 1.0;
        double bc1 = 1.0 - pow(c->beta1, t);
        double bc2 = 1.0 - pow(c->beta2, t);
        st->adam = (zps_opt_adam_scalars_t){
            .b1 = (float)c->beta1,
            .omb1 = (float)(1.0 - c->beta1),
            .b2 = (float)c->beta2,
            .omb2 = (float)(1.0 - c->beta2),
            .rs2 = (float)(1.0 / sqrt(bc2)),
            .step = (float)((double)st->lr / bc1),
            .eps = (float)c->eps,
            .wd = st->wd,
            .decay = (float)(1.0 - (double)st->lr * c->weight_decay),
        };
    }
}

/* Elements [lo, lo + len) of one step: applied, or (dry) only checked. */
static uint32_t zps_opt_block(zps_optimizer_t *opt, const zps_opt_step_t *st, size_t lo, size_t len,
                              float *restrict params, const float *restrict grad, bool dry)
{
    ZPS_ASSERT(lo <= opt->n && len <= opt->n - lo);
    ZPS_ASSERT(len == 0 || (params != NULL && grad != NULL));
    const zps_opt_config_t *c = &opt->cfg;
    switch (c->kind) {
    case ZPS_OPT_SGD:
        return st->has_wd ? zps_opt_sgd_l2(len, params, grad, st->lr, st->wd, dry)
                          : zps_opt_sgd(len, params, grad, st->lr, dry);
    case ZPS_OPT_MOMENTUM:
        return zps_opt_momentum(len, params, grad, opt->state[0] + lo, st->lr, (float)c->momentum,
                                st->wd, st->has_wd, c->nesterov, dry);
    case ZPS_OPT_ADAM:
    case ZPS_OPT_ADAMW: {
        bool decoupled = c->kind == ZPS_OPT_ADAMW;
        return zps_opt_adam(len, params, grad, opt->state[0] + lo, opt->state[1] + lo, st->adam,
                            st->has_wd && !decoupled, st->has_wd && decoupled, dry);
    }
    case ZPS_OPT_ADAGRAD:
        return zps_opt_adagrad(len, params, grad, opt->state[0] + lo, st->lr, (float)c->eps, st->wd,
                               st->has_wd, dry);
    }
    return 0;
}

void zps_optimizer_apply(zps_optimizer_t *opt, const zps_opt_step_t *st, size_t lo, size_t len,
                         float *restrict params, const float *restrict grad)
{
    (void)zps_opt_block(opt, st, lo, len, params, grad, false);
}

bool zps_optimizer_check(const zps_optimizer_t *opt, const zps_opt_step_t *st, size_t lo,
                         size_t len, const float *params, const float *grad)
{
    /* A dry block writes nothing: the casts only let it share the step's code. */
    return zps_opt_block((zps_optimizer_t *)opt, st, lo, len, (float *)params, grad, true) == 0;
}

void zps_optimizer_end(zps_optimizer_t *opt)
{
    opt->steps++;
}

int zps_optimizer_step(zps_optimizer_t *opt, float *restrict params, const float *restrict grad,
                       double lr_scale)
{
    ZPS_ASSERT(opt != NULL);
    ZPS_ASSERT(opt->n == 0 || (params != NULL && grad != NULL));
    zps_opt_step_t st;
    zps_optimizer_begin(opt, lr_scale, &st);
    if (!zps_optimizer_check(opt, &st, 0, opt->n, params, grad))
        return ZPS_ENONFINITE;
    zps_optimizer_apply(opt, &st, 0, opt->n, params, grad);
    zps_optimizer_end(opt);
    return 0;
}

const zps_opt_config_t *zps_optimizer_config(const zps_optimizer_t *opt)
{
    return &opt->cfg;
}

size_t zps_optimizer_size(const zps_optimizer_t *opt)
{
    return opt->n;
}

uint64_t zps_optimizer_steps(const zps_optimizer_t *opt)
{
    return opt->steps;
}

void zps_optimizer_set_steps(zps_optimizer_t *opt, uint64_t steps)
{
    opt->steps = steps;
}

size_t zps_optimizer_state_count(const zps_optimizer_t *opt)
{
    return opt->nstate;
}

float *zps_optimizer_state(zps_optimizer_t *opt, size_t i, const char **name)
{
    if (i >= opt->nstate)
        return NULL;
    if (name != NULL)
        *name = opt->names[i];
    return opt->state[i];
}
