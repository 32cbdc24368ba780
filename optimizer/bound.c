/*
 * bound.c - upper bounds on what an optimizer step can compute, so that the
 * exact check of a step (zps_optimizer_check, a whole extra read pass) runs
 * only when a few scalar operations cannot prove the step finite.
 *
 * The bounds follow the kernels of optimizer.c operation by operation, with
 * the step's own float32 scalars, in double. Each float32 operation rounds
 * to nearest, so its result is at most |exact| * (1 + 2^-24), plus at most
 * half the smallest subnormal when it underflows; up() adds more than both
 * to every intermediate bound, so a bound is an upper bound on the float32
 * value itself and stays one over any number of steps. Divisions are only by
 * a denominator >= eps > 0 (eps is a normal float32 number: the config check
 * says so), square roots only of arrays that stay >= 0.
 *
 * Not here: the formulas themselves (optimizer.c), who keeps the bounds (the
 * server's store, or a caller of zps_optimizer_step_bounded).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "optimizer.h"
#include "simd.h"

/* One float32 rounding of a non-negative bound x, rounded up generously. */
static double up(double x)
{
    return x * (1.0 + 1e-6) + (double)FLT_MIN;
}

/* The running maximum of every bound a step computes. */
typedef struct worst {
    double max;
} worst_t;

/* Records x (a bound) and returns it. NaN makes the whole proof fail. */
static double seen(worst_t *w, double x)
{
    if (!(x <= w->max))
        w->max = x != x ? INFINITY : x;
    return x;
}

/* g' = g + wd * p when the step has an L2 term. */
static double bound_l2(worst_t *w, const zps_opt_step_t *st, bool l2, double g, double p)
{
    if (!l2)
        return g;
    return seen(w, up(g + seen(w, up(fabs((double)st->wd) * p))));
}

bool zps_optimizer_bound(const zps_optimizer_t *opt, const zps_opt_step_t *st,
                         const zps_opt_bounds_t *in, double g_max, zps_opt_bounds_t *out)
{
    const zps_opt_config_t *c = zps_optimizer_config(opt);
    worst_t w = {0.0};
    zps_opt_bounds_t o = *in;
    double lr = fabs((double)st->lr);
    double g = seen(&w, g_max);
    seen(&w, in->p);

    switch (c->kind) {
    case ZPS_OPT_SGD: {
        /* p = p - lr * (g + wd * p) */
        double gi = bound_l2(&w, st, st->has_wd, g, in->p);
        o.p = seen(&w, up(in->p + seen(&w, up(lr * gi))));
        break;
    }
    case ZPS_OPT_MOMENTUM: {
        /* b = mu * b + g';  p = p - lr * b, or Nesterov's p = p - lr * (g' + mu * b) */
        double mu = fabs((double)(float)c->momentum);
        double b = seen(&w, in->state[0]);
        double gi = bound_l2(&w, st, st->has_wd, g, in->p);
        double bi = seen(&w, up(seen(&w, up(mu * b)) + gi));
        double d = bi;
        if (c->nesterov)
            d = seen(&w, up(gi + seen(&w, up(mu * bi))));
        o.state[0] = bi;
        o.p = seen(&w, up(in->p + seen(&w, up(lr * d))));
        break;
    }
    case ZPS_OPT_ADAM:
    case ZPS_OPT_ADAMW: {
        const zps_opt_adam_scalars_t *s = &st->adam;
        bool decoupled = c->kind == ZPS_OPT_ADAMW;
        double m = seen(&w, in->state[0]);
        double v = seen(&w, in->state[1]);
        /* AdamW: p = p * decay first; decay = 1 - lr * wd may be negative. */
        double pi = in->p;
        if (st->has_wd && decoupled)
            pi = seen(&w, up(fabs((double)s->decay) * pi));
        double gi = bound_l2(&w, st, st->has_wd && !decoupled, g, pi);
        /* m = b1 * m + (1 - b1) * g';  v = b2 * v + (1 - b2) * (g' * g') */
        double mi =
            seen(&w, up(seen(&w, up((double)s->b1 * m)) + seen(&w, up((double)s->omb1 * gi))));
        double gg = seen(&w, up(gi * gi));
        double vi =
            seen(&w, up(seen(&w, up((double)s->b2 * v)) + seen(&w, up((double)s->omb2 * gg))));
        /* den = sqrt(v) * rs2 + eps, at least eps: v >= 0 and rs2 >= 1. */
        double sq = seen(&w, up(sqrt(vi)));
        seen(&w, up(seen(&w, up(sq * (double)s->rs2)) + (double)s->eps));
        double ratio = seen(&w, up(mi / (double)s->eps));
        double delta = seen(&w, up(fabs((double)s->step) * ratio));
        o.state[0] = mi;
        o.state[1] = vi;
        o.p = seen(&w, up(pi + delta));
        break;
    }
    case ZPS_OPT_ADAGRAD: {
        /* s = s + g' * g';  p = p - lr * (g' / (sqrt(s) + eps)) */
        double eps = (double)(float)c->eps;
        double sum = seen(&w, in->state[0]);
        double gi = bound_l2(&w, st, st->has_wd, g, in->p);
        double si = seen(&w, up(sum + seen(&w, up(gi * gi))));
        seen(&w, up(seen(&w, up(sqrt(si))) + eps));
        double ratio = seen(&w, up(gi / eps));
        o.state[0] = si;
        o.p = seen(&w, up(in->p + seen(&w, up(lr * ratio))));
        break;
    }
    default:
        w.max = INFINITY;
        break;
    }
    *out = o;
    return w.max <= ZPS_OPT_SAFE;
}

/* The largest magnitude's bits (sign cleared) of v[n]; *neg gets whether a
 * value below zero (not -0) occurs. Unsigned integer operations only, so the
 * loop vectorises without any floating-point licence. */
ZPS_CLONES_AVX2 static uint32_t abs_max_bits(const float *v, size_t n, uint32_t *neg)
{
    uint32_t mx = 0, ng = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], sizeof(b));
        uint32_t a = b & 0x7fffffffu;
        mx = a > mx ? a : mx;
        ng |= (uint32_t)(b > 0x80000000u);
    }
    *neg = ng;
    return mx;
}

/* The magnitude whose bits are `bits`, or INFINITY for Inf and NaN. */
static float from_bits(uint32_t bits)
{
    if (bits >= 0x7f800000u)
        return INFINITY;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

float zps_abs_max(const float *v, size_t n)
{
    uint32_t neg;
    return n ? from_bits(abs_max_bits(v, n, &neg)) : 0.0f;
}

void zps_optimizer_measure(const zps_optimizer_t *opt, const float *params, zps_opt_bounds_t *out)
{
    size_t n = zps_optimizer_size(opt);
    const zps_opt_config_t *c = zps_optimizer_config(opt);
    zps_opt_bounds_t b = {0};
    b.p = zps_abs_max(params, n);
    size_t ns = zps_optimizer_state_count(opt);
    for (size_t k = 0; k < ns; k++) {
        /* The arrays are only read; the accessor is the checkpoint reader's. */
        const float *x = zps_optimizer_state((zps_optimizer_t *)opt, k, NULL);
        uint32_t neg = 0;
        float mx = n ? from_bits(abs_max_bits(x, n, &neg)) : 0.0f;
        bool rooted = (k == 1 && (c->kind == ZPS_OPT_ADAM || c->kind == ZPS_OPT_ADAMW)) ||
                      (k == 0 && c->kind == ZPS_OPT_ADAGRAD);
        b.state[k] = rooted && neg ? INFINITY : (double)mx;
    }
    *out = b;
}

int zps_optimizer_step_bounded(zps_optimizer_t *opt, float *restrict params,
                               const float *restrict grad, double lr_scale, double g_max,
                               zps_opt_bounds_t *bounds)
{
    ZPS_ASSERT(opt != NULL && bounds != NULL);
    size_t n = zps_optimizer_size(opt);
    ZPS_ASSERT(n == 0 || (params != NULL && grad != NULL));
    zps_opt_step_t st;
    zps_optimizer_begin(opt, lr_scale, &st);
    zps_opt_bounds_t next;
    bool proven = zps_optimizer_bound(opt, &st, bounds, g_max, &next);
    if (!proven && !zps_optimizer_check(opt, &st, 0, n, params, grad))
        return ZPS_ENONFINITE;
    zps_optimizer_apply(opt, &st, 0, n, params, grad);
    zps_optimizer_end(opt);
    if (proven)
        *bounds = next;
    else
        zps_optimizer_measure(opt, params, bounds);
    return 0;
}
