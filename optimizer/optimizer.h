/*
 * optimizer.h - the update math a shard applies to its parameters.
 *
 * Pure computation over arrays: no sockets, no clocks, no logging. The server
 * hands the optimizer one gradient per step (for BSP the example-weighted
 * mean of the workers' gradients, for SSP/ASP one worker's gradient) and the
 * optimizer updates the parameters in place, keeping its state arrays
 * (momentum, moments, accumulators) beside them.
 *
 * Arithmetic contract, relied on by tests that recompute updates by hand:
 * the learning rate of a step is computed in double (schedule, warm-up,
 * lr_scale), rounded once to float32, and every per-element operation is
 * float32 in the order of the formulas in docs/optimizers.md, with no fused
 * multiply-add. The conventions are PyTorch's (torch.optim.SGD, Adam, AdamW,
 * Adagrad). On x86-64 the loops also exist as AVX2 versions, chosen at load
 * time; their results are bit-identical to the baseline ones.
 *
 * Not thread-safe: one optimizer per shard, driven by one thread at a time.
 * Not here: when a step is taken and with which gradient (consistency/), the
 * example-weighted mean of workers' gradients (mean.h), the flags that
 * configure an optimizer (opt_flags.h), saving its state (checkpoint/).
 */
#ifndef ZPS_OPTIMIZER_H
#define ZPS_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum zps_opt_kind {
    ZPS_OPT_SGD = 0,
    ZPS_OPT_MOMENTUM = 1, /* heavy-ball, or Nesterov when cfg.nesterov */
    ZPS_OPT_ADAM = 2,
    ZPS_OPT_ADAMW = 3,
    ZPS_OPT_ADAGRAD = 4,
} zps_opt_kind_t;

typedef enum zps_sched_kind {
    ZPS_SCHED_CONSTANT = 0,
    ZPS_SCHED_STEP = 1,   /* lr * gamma^floor(t / step_every) */
    ZPS_SCHED_COSINE = 2, /* lr_min + (lr - lr_min) * (1 + cos(pi * min(t, T) / T)) / 2 */
} zps_sched_kind_t;

typedef struct zps_opt_config {
    zps_opt_kind_t kind;
    double lr;           /* base learning rate, > 0 */
    double momentum;     /* MOMENTUM: mu in [0, 1) */
    bool nesterov;       /* MOMENTUM: Nesterov's variant */
    double beta1, beta2; /* ADAM, ADAMW: in [0, 1) */
    double eps;          /* ADAM, ADAMW, ADAGRAD: > 0 */
    double weight_decay; /* >= 0; L2 added to the gradient, decoupled for ADAMW */
    zps_sched_kind_t schedule;
    uint64_t step_every;   /* STEP: K >= 1 */
    double gamma;          /* STEP: factor in (0, 1] */
    uint64_t cosine_steps; /* COSINE: T >= 1 */
    double lr_min;         /* COSINE: the floor, in [0, lr] */
    uint64_t warmup;       /* linear warm-up over the first `warmup` steps (0: none) */
} zps_opt_config_t;

/*
 * Defaults: SGD, lr 0.01, momentum 0.9 (not Nesterov), betas 0.9/0.999, eps
 * 1e-8, weight decay 0, constant schedule, gamma 0.1, lr_min 0, no warm-up.
 * step_every and cosine_steps default to 0, which the check refuses: a step
 * or cosine schedule needs its period said out loud.
 */
void zps_opt_config_default(zps_opt_config_t *cfg);

/*
 * Checks every field the chosen optimizer and schedule use (fields they do
 * not use are not judged, except that nesterov is only valid with MOMENTUM).
 * Returns 0, or ZPS_EINVAL with a one-line reason in `why` (which may be
 * NULL; truncated to why_size) that starts with the flag to fix, e.g.
 * "--beta2 must be in [0, 1) (got 1)". lr and eps must also stay positive
 * and finite when rounded to float32.
 */
int zps_opt_config_check(const zps_opt_config_t *cfg, char *why, size_t why_size);

/*
 * Name <-> kind: "sgd", "momentum", "nesterov" (MOMENTUM + nesterov), "adam", "adamw", "adagrad".
 * zps_opt_parse sets cfg->kind, and cfg->nesterov for "nesterov"; the other
 * names leave cfg->nesterov alone, so "--nesterov --optimizer momentum"
 * works in either order. Returns 0, or ZPS_EINVAL for an unknown name
 * (cfg untouched). zps_opt_name returns a static string, "unknown" for a
 * kind out of range.
 */
int zps_opt_parse(const char *name, zps_opt_config_t *cfg);

/*
 * The vectors of n elements an optimizer of this kind keeps besides the
 * parameters: 0 for SGD, 1 for momentum (velocity) and Adagrad (sum of
 * squares), 2 for Adam and AdamW (m, v); 0 for a kind out of range. What a
 * plan counts before any server allocates them (zps launch's memory check).
 */
size_t zps_opt_kind_state_count(zps_opt_kind_t kind);
const char *zps_opt_name(const zps_opt_config_t *cfg);
/* "constant", "step", "cosine"; same conventions. */
int zps_sched_parse(const char *name, zps_sched_kind_t *out);
const char *zps_sched_name(zps_sched_kind_t kind);

/*
 * The learning rate of step t (t = 0 for the first step), before lr_scale:
 * the schedule's value at t, times (t + 1) / warmup while t < warmup.
 * Computed in double; pure, callable from any thread.
 */
double zps_opt_lr_at(const zps_opt_config_t *cfg, uint64_t t);

typedef struct zps_optimizer zps_optimizer_t;

/*
 * Creates an optimizer for `n` parameters with zeroed state and step count 0.
 * `cfg` is copied and must pass zps_opt_config_check. Returns 0, ZPS_EINVAL
 * or ZPS_ENOMEM; *out is written only on success.
 */
int zps_optimizer_new(const zps_opt_config_t *cfg, size_t n, zps_optimizer_t **out);
void zps_optimizer_free(zps_optimizer_t *opt); /* NULL is a no-op */

/*
 * Applies one step: params[n] are updated in place from grad[n] with the
 * learning rate (float)(zps_opt_lr_at(cfg, steps) * lr_scale), then the step
 * count advances. Returns 0, or ZPS_ENONFINITE when the step would make a
 * parameter or a state value Inf or NaN (an overflow of finite inputs): the
 * step is then refused whole and nothing changes, neither the arrays nor the
 * step count. The check is a read-only pass over the same arrays before the
 * step's own pass (zps_optimizer_check), so a step moves the arrays' reads
 * twice. Never allocates; on a large shard it belongs on a worker thread,
 * not in a loop callback. The caller has checked that grad is finite;
 * lr_scale must be finite and >= 0 (asserted). params and grad must not
 * overlap; both stay owned by the caller.
 */
int zps_optimizer_step(zps_optimizer_t *opt, float *restrict params, const float *restrict grad,
                       double lr_scale);

/* Per-step scalars of Adam and AdamW, each rounded once to float32. */
typedef struct zps_opt_adam_scalars {
    float b1, omb1; /* beta1, 1 - beta1 */
    float b2, omb2; /* beta2, 1 - beta2 */
    float rs2;      /* 1 / sqrt(1 - beta2^t) */
    float step;     /* lr / (1 - beta1^t) */
    float eps;
    float wd;    /* L2 coefficient (Adam) */
    float decay; /* 1 - lr * wd (AdamW) */
} zps_opt_adam_scalars_t;

/* What one step needs besides the arrays; filled by zps_optimizer_begin. */
typedef struct zps_opt_step {
    float lr; /* the step's learning rate, rounded once */
    float wd;
    bool has_wd;
    zps_opt_adam_scalars_t adam;
} zps_opt_step_t;

/*
 * One step in pieces, for a caller that produces the gradient a block at a
 * time and applies each block while it is in cache (the server's BSP step
 * computes the workers' mean that way). zps_optimizer_begin fixes the step's
 * scalars from the current step count; zps_optimizer_apply updates elements
 * [lo, lo + len): params and grad point at the block's first element, the
 * state arrays are indexed from lo; zps_optimizer_end advances the step
 * count. begin, then apply over blocks covering [0, n) once each, in any
 * order, then end, gives bit for bit the result of zps_optimizer_step, which
 * is exactly that with one block.
 */
void zps_optimizer_begin(const zps_optimizer_t *opt, double lr_scale, zps_opt_step_t *st);
void zps_optimizer_apply(zps_optimizer_t *opt, const zps_opt_step_t *st, size_t lo, size_t len,
                         float *restrict params, const float *restrict grad);
void zps_optimizer_end(zps_optimizer_t *opt);

/*
 * The check of a step in pieces: true when applying elements [lo, lo + len)
 * with the scalars in st (as zps_optimizer_apply would) leaves every
 * parameter and state value finite. Reads only; computes with the step's own
 * code, so its verdict is exact. A caller that must refuse a step whole
 * checks every block before it applies the first.
 */
bool zps_optimizer_check(const zps_optimizer_t *opt, const zps_opt_step_t *st, size_t lo,
                         size_t len, const float *params, const float *grad);

/*
 * Skipping the check when it cannot fail. A step's check reads every array
 * once more than the step itself; on a large shard that halves its speed.
 * The bounds below let a caller that knows upper bounds on the magnitudes of
 * its arrays and of the gradient prove, with a few scalar operations, that a
 * step cannot overflow, and take the check only when the proof fails.
 *
 * zps_opt_bounds_t holds upper bounds on max|x| over each array: the
 * parameters and each state array (in zps_optimizer_state's order). A value
 * of INFINITY means "unknown"; every bound here is an upper bound on the
 * float32 values themselves, rounding included.
 */
#define ZPS_OPT_MAX_STATE 2

/* Every bound, intermediate or final, at or below this proves a step finite:
 * well under FLT_MAX (about 3.4e38), though the bounds already include the
 * float32 rounding of each operation. */
#define ZPS_OPT_SAFE 1e37

typedef struct zps_opt_bounds {
    double p;                        /* max |params[i]| */
    double state[ZPS_OPT_MAX_STATE]; /* max |state k [i]| */
} zps_opt_bounds_t;

/*
 * The bounds after the step st (from zps_optimizer_begin) given bounds `in`
 * before it and g_max >= max|grad[i]| (INFINITY when unknown), in *out.
 * Returns true when every value the step computes, intermediate or stored,
 * is bounded by ZPS_OPT_SAFE: the step then cannot make anything non-finite
 * and its check can be skipped. On false, *out is still written but may be
 * INFINITY or NaN; the caller then checks the step exactly and measures the
 * arrays afresh (zps_optimizer_measure) if it is taken. Pure; any thread.
 */
bool zps_optimizer_bound(const zps_optimizer_t *opt, const zps_opt_step_t *st,
                         const zps_opt_bounds_t *in, double g_max, zps_opt_bounds_t *out);

/*
 * The exact maxima of |params[i]| (params: [n]) and of each state array, in
 * one read pass. A non-finite value, or a negative one in an array that must
 * stay >= 0 (Adam's v, AdaGrad's sum_sq, whose square roots are taken),
 * gives INFINITY, so that no bound is ever proven from it. Any thread, as
 * long as nothing writes the arrays meanwhile.
 */
void zps_optimizer_measure(const zps_optimizer_t *opt, const float *params, zps_opt_bounds_t *out);

/*
 * max|v[i]| over v[n] (0 for n == 0), or INFINITY when a value is Inf or NaN.
 * One branch-free read pass.
 */
float zps_abs_max(const float *v, size_t n);

/*
 * As zps_optimizer_step, with the bounds the caller keeps for these arrays
 * (*bounds: the params given and this optimizer's state; set them with
 * zps_optimizer_measure before the first step) and g_max >= max|grad[i]|
 * (INFINITY when unknown). When zps_optimizer_bound proves the step finite
 * it is taken in one pass; otherwise it is checked first, exactly as
 * zps_optimizer_step does, and if taken the arrays are measured afresh.
 * Same results, bit for bit, as zps_optimizer_step; *bounds is updated
 * when the step is taken, untouched when it is refused (ZPS_ENONFINITE).
 */
int zps_optimizer_step_bounded(zps_optimizer_t *opt, float *restrict params,
                               const float *restrict grad, double lr_scale, double g_max,
                               zps_opt_bounds_t *bounds);

const zps_opt_config_t *zps_optimizer_config(const zps_optimizer_t *opt);
size_t zps_optimizer_size(const zps_optimizer_t *opt);
uint64_t zps_optimizer_steps(const zps_optimizer_t *opt);
/* Sets the step count (restoring a checkpoint). */
void zps_optimizer_set_steps(zps_optimizer_t *opt, uint64_t steps);

/*
 * The optimizer's state arrays, each of zps_optimizer_size() floats, for
 * checkpoints: SGD has none, MOMENTUM one ("velocity"), ADAM/ADAMW two
 * ("m", "v"), ADAGRAD one ("sum_sq"). The arrays stay owned by the optimizer;
 * a checkpoint reader may write into them.
 */
size_t zps_optimizer_state_count(const zps_optimizer_t *opt);
float *zps_optimizer_state(zps_optimizer_t *opt, size_t i, const char **name);

#endif
