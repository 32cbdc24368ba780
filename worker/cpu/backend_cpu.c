/*
 * backend_cpu.c - the reference backend: OpenBLAS sgemm for the affine
 * layers, plain loops for biases, ReLU and the losses.
 *
 * Every other backend is tested against this one, so it favours clarity:
 * one buffer per layer's activations, the forward pass kept whole for the
 * backward pass, losses summed in double.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "timeutil.h"

typedef struct cpu_ctx {
    zps_model_t m;
    size_t max_batch;
    float *params;                        /* [nparams] */
    float *grad;                          /* [nparams] */
    float *act[ZPS_MODEL_MAX_LAYERS + 1]; /* act[l]: [max_batch, sizes[l]] for l >= 1 */
    float *delta[2];                      /* [max_batch, max width], ping-pong */
    char desc[128];
} cpu_ctx_t;

static void *alloc_floats(size_t n)
{
    /* 64-byte alignment suits every SIMD width OpenBLAS uses. */
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p)
        memset(p, 0, bytes ? bytes : 64);
    return p;
}

static void cpu_destroy(void *opaque)
{
    cpu_ctx_t *c = opaque;
    if (!c)
        return;
    free(c->params);
    free(c->grad);
    for (uint32_t l = 0; l <= ZPS_MODEL_MAX_LAYERS; l++)
        free(c->act[l]);
    free(c->delta[0]);
    free(c->delta[1]);
    free(c);
}

static int cpu_create(const zps_model_t *m, const zps_backend_opts_t *o, void **ctx, float **params,
                      float **grad, char *err, size_t err_size)
{
    cpu_ctx_t *c = calloc(1, sizeof(*c));
    if (!c)
        goto nomem;
    c->m = *m;
    c->max_batch = o->max_batch;
    c->params = alloc_floats(m->nparams);
    c->grad = alloc_floats(m->nparams);
    if (!c->params || !c->grad)
        goto nomem;
    for (uint32_t l = 1; l <= m->layers; l++)
        if (!(c->act[l] = alloc_floats(o->max_batch * m->sizes[l])))
            goto nomem;
    size_t width = zps_model_max_width(m);
    c->delta[0] = alloc_floats(o->max_batch * width);
    c->delta[1] = alloc_floats(o->max_batch * width);
    if (!c->delta[0] || !c->delta[1])
        goto nomem;

    /* Process-wide: several workers on one machine must not each start a
     * thread per core. */
    openblas_set_num_threads(o->blas_threads);
    snprintf(c->desc, sizeof(c->desc), "cpu: OpenBLAS, %d thread%s", o->blas_threads,
             o->blas_threads == 1 ? "" : "s");
    *ctx = c;
    *params = c->params;
    *grad = c->grad;
    return 0;

nomem:
    cpu_destroy(c);
    if (err && err_size)
        snprintf(err, err_size, "cpu: out of memory for the model and a batch of %zu",
                 o->max_batch);
    return ZPS_ENOMEM;
}

/*
 * Forward pass over n examples: act[l+1] = act[l] W_l + b_l, ReLU on hidden
 * layers; act[L] holds the outputs (logits, or the regression prediction).
 * x: [n, sizes[0]].
 */
static void forward(cpu_ctx_t *c, const float *x, size_t n)
{
    const zps_model_t *m = &c->m;
    for (uint32_t l = 0; l < m->layers; l++) {
        const float *a = l == 0 ? x : c->act[l];
        float *z = c->act[l + 1];
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        const float *w = c->params + m->w_off[l]; /* [in, out] */
        const float *b = c->params + m->b_off[l]; /* [out] */
        /* z: [n, out] = a: [n, in] x w: [in, out] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, out, in, 1.0f, a, in, w, out,
                    0.0f, z, out);
        int relu = l + 1 < m->layers;
        for (size_t i = 0; i < n; i++) {
            float *zi = z + i * (size_t)out;
            for (int j = 0; j < out; j++) {
                float v = zi[j] + b[j];
                zi[j] = relu && v < 0.0f ? 0.0f : v;
            }
        }
    }
}

/*
 * Loss of the outputs act[L] against the batch: returns the SUM of the
 * per-example losses (double), counts correct argmax predictions into
 * *correct, and when delta is non-NULL writes d(mean loss)/d(outputs)
 * [n, sizes[L]] into it.
 */
static double loss_and_delta(cpu_ctx_t *c, size_t n, const int32_t *label, const float *target,
                             float *delta, uint64_t *correct)
{
    const zps_model_t *m = &c->m;
    const float *out = c->act[m->layers];
    int k = (int)m->sizes[m->layers];
    float inv_n = 1.0f / (float)n;
    double sum = 0.0;
    if (m->kind == ZPS_MODEL_LINEAR) {
        for (size_t i = 0; i < n; i++) {
            float r = out[i] - target[i];
            sum += 0.5 * (double)r * (double)r;
            if (delta)
                delta[i] = r * inv_n;
        }
        return sum;
    }
    for (size_t i = 0; i < n; i++) {
        const float *z = out + i * (size_t)k;
        /* Stable softmax: shift by the row maximum so exp() never overflows. */
        int arg = 0;
        for (int j = 1; j < k; j++)
            if (z[j] > z[arg])
                arg = j;
        float zmax = z[arg];
        float s = 0.0f;
        for (int j = 0; j < k; j++)
            s += expf(z[j] - zmax);
        float log_s = logf(s);
        int y = label[i];
        /* -log softmax(z)_y = log(sum exp(z - max)) - (z_y - max) */
        sum += (double)log_s - (double)(z[y] - zmax);
        if (correct && arg == y)
            (*correct)++;
        if (delta) {
            float *d = delta + i * (size_t)k;
            for (int j = 0; j < k; j++) {
                float p = expf(z[j] - zmax - log_s);
                d[j] = (p - (j == y ? 1.0f : 0.0f)) * inv_n;
            }
        }
    }
    return sum;
}

static int cpu_train_step(void *opaque, const zps_batch_t *b, zps_step_stats_t *st)
{
    cpu_ctx_t *c = opaque;
    const zps_model_t *m = &c->m;
    size_t n = b->n;
    uint64_t t0 = zps_now_ns();

    forward(c, b->x, n);
    float *dz = c->delta[0], *da = c->delta[1];
    st->loss = loss_and_delta(c, n, b->label, b->target, dz, NULL) / (double)n;
    uint64_t t1 = zps_now_ns();

    /* dz holds d(mean loss)/dz_l for the layer being processed. */
    for (uint32_t l = m->layers; l-- > 0;) {
        const float *a = l == 0 ? b->x : c->act[l]; /* [n, in] */
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        float *gw = c->grad + m->w_off[l]; /* [in, out] */
        float *gb = c->grad + m->b_off[l]; /* [out] */
        /* gw: [in, out] = a^T: [in, n] x dz: [n, out] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, (int)n, 1.0f, a, in, dz, out,
                    0.0f, gw, out);
        for (int j = 0; j < out; j++)
            gb[j] = 0.0f;
        for (size_t i = 0; i < n; i++) {
            const float *di = dz + i * (size_t)out;
            for (int j = 0; j < out; j++)
                gb[j] += di[j];
        }
        if (l == 0)
            break;
        /* da: [n, in] = dz: [n, out] x w^T: [out, in]; then the ReLU mask:
         * a = relu(z) > 0 exactly where z > 0. */
        const float *w = c->params + m->w_off[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, in, out, 1.0f, dz, out, w, out,
                    0.0f, da, in);
        for (size_t i = 0; i < n * (size_t)in; i++)
            if (a[i] <= 0.0f)
                da[i] = 0.0f;
        float *t = dz;
        dz = da;
        da = t;
    }
    uint64_t t2 = zps_now_ns();
    st->forward_ms = (double)(t1 - t0) / 1e6;
    st->backward_ms = (double)(t2 - t1) / 1e6;
    st->copy_ms = 0.0;
    return 0;
}

static int cpu_evaluate(void *opaque, const zps_dataset_t *ds, zps_eval_t *out)
{
    cpu_ctx_t *c = opaque;
    double sum = 0.0;
    uint64_t correct = 0;
    for (uint64_t lo = 0; lo < ds->n; lo += c->max_batch) {
        size_t n = (size_t)(ds->n - lo < c->max_batch ? ds->n - lo : c->max_batch);
        forward(c, ds->x + lo * ds->dim, n);
        sum += loss_and_delta(c, n, ds->label ? ds->label + lo : NULL,
                              ds->target ? ds->target + lo : NULL, NULL, &correct);
    }
    out->n = ds->n;
    out->loss = sum / (double)ds->n;
    out->accuracy = c->m.kind == ZPS_MODEL_MLP ? (double)correct / (double)ds->n : NAN;
    return 0;
}

static const char *cpu_describe(void *opaque)
{
    return ((cpu_ctx_t *)opaque)->desc;
}

const zps_backend_ops_t zps_backend_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .train_step = cpu_train_step,
    .evaluate = cpu_evaluate,
    .describe = cpu_describe,
};
