/*
 * backend_cuda.cu - the cuda backend: cuBLAS sgemm for the affine layers and
 * a few small kernels (bias + ReLU, softmax cross-entropy, squared loss,
 * ReLU mask) for the rest, mirroring worker/cpu/backend_cpu.c step by step.
 *
 * The parameter and gradient buffers the trainer sees are pinned host
 * memory (cudaMallocHost), so the per-step upload of the pulled parameters
 * and download of the gradient run at full PCIe speed. Everything else stays
 * on the device. Any CUDA failure at start-up (no driver, a driver too old,
 * no device) is ZPS_ENODEV with the runtime's message, never a crash.
 *
 * Built as a module of its own, libzps_backend_cuda.so, which alone links
 * cuBLAS and the CUDA runtime; zps-worker loads it only when cuda is asked
 * for (backend_module.h). Its one exported symbol is zps_backend_module.
 *
 * Not here: the choice between backends (backend.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "backend.h"
#include "error.h"
#include "log.h"
#include "timeutil.h"
}

namespace
{

struct cuda_ctx {
    zps_model_t m;
    size_t max_batch;
    int device;
    cublasHandle_t blas;
    cudaStream_t stream;
    float *h_params;                        /* pinned [nparams] */
    float *h_grad;                          /* pinned [nparams] */
    float *h_loss;                          /* pinned [max_batch]: per-example losses */
    int32_t *h_correct;                     /* pinned [max_batch]: 1 where argmax == label */
    float *d_params;                        /* [nparams] */
    float *d_grad;                          /* [nparams] */
    float *d_act[ZPS_MODEL_MAX_LAYERS + 1]; /* d_act[l]: [max_batch, sizes[l]], d_act[0] = x */
    float *d_delta[2];                      /* [max_batch, max width] */
    int32_t *d_label;                       /* [max_batch] */
    float *d_target;                        /* [max_batch] */
    float *d_loss;                          /* [max_batch] */
    int32_t *d_correct;                     /* [max_batch] */
    float *d_ones;                          /* [max_batch] of 1.0f, for bias gradients via gemv */
    char desc[384];
};

const int THREADS = 256;

unsigned blocks_for(size_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS);
}

/* z: [rows, cols] += b: [cols], then ReLU when relu != 0. */
__global__ void bias_act_kernel(float *z, const float *b, size_t rows, size_t cols, int relu)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols)
        return;
    float v = z[i] + b[i % cols];
    z[i] = relu && v < 0.0f ? 0.0f : v;
}

/*
 * One thread per example. z: [rows, k] logits, label: [rows]. Writes the
 * example's loss to loss[i], 1/0 for a correct argmax to correct[i], and,
 * when delta is non-NULL, d(mean loss)/dz = (softmax(z) - onehot) * inv_n.
 */
__global__ void softmax_xent_kernel(const float *z, const int32_t *label, size_t rows, int k,
                                    float inv_n, float *delta, float *loss, int32_t *correct)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows)
        return;
    const float *zi = z + i * (size_t)k;
    int arg = 0;
    for (int j = 1; j < k; j++)
        if (zi[j] > zi[arg])
            arg = j;
    float zmax = zi[arg];
    float s = 0.0f;
    for (int j = 0; j < k; j++)
        s += expf(zi[j] - zmax);
    float log_s = logf(s);
    int y = label[i];
    loss[i] = log_s - (zi[y] - zmax);
    correct[i] = arg == y;
    if (delta) {
        float *d = delta + i * (size_t)k;
        for (int j = 0; j < k; j++) {
            float p = expf(zi[j] - zmax - log_s);
            d[j] = (p - (j == y ? 1.0f : 0.0f)) * inv_n;
        }
    }
}

/* pred, target: [rows]; loss = r^2 / 2 with r = pred - target; delta = r * inv_n. */
__global__ void squared_loss_kernel(const float *pred, const float *target, size_t rows,
                                    float inv_n, float *delta, float *loss)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows)
        return;
    float r = pred[i] - target[i];
    loss[i] = 0.5f * r * r;
    if (delta)
        delta[i] = r * inv_n;
}

/* d: [count] zeroed where the ReLU output a: [count] is not positive. */
__global__ void relu_mask_kernel(float *d, const float *a, size_t count)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count && a[i] <= 0.0f)
        d[i] = 0.0f;
}

__global__ void fill_kernel(float *p, float v, size_t count)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        p[i] = v;
}

/* Logs a failed CUDA call made after start-up and turns it into ZPS_ENODEV. */
int cuda_fail(const char *what, cudaError_t e)
{
    zps_error("cuda: %s: %s", what, cudaGetErrorString(e));
    return ZPS_ENODEV;
}

int blas_fail(const char *what, cublasStatus_t s)
{
    zps_error("cuda: %s: cuBLAS status %d", what, (int)s);
    return ZPS_ENODEV;
}

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_fail(#call, e_);                                                           \
    } while (0)

#define BLAS_CHECK(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return blas_fail(#call, s_);                                                           \
    } while (0)

void cuda_destroy(void *opaque)
{
    cuda_ctx *c = (cuda_ctx *)opaque;
    if (!c)
        return;
    /* Every free tolerates NULL; errors at teardown have nowhere to go. */
    cudaFreeHost(c->h_params);
    cudaFreeHost(c->h_grad);
    cudaFreeHost(c->h_loss);
    cudaFreeHost(c->h_correct);
    cudaFree(c->d_params);
    cudaFree(c->d_grad);
    for (int l = 0; l <= ZPS_MODEL_MAX_LAYERS; l++)
        cudaFree(c->d_act[l]);
    cudaFree(c->d_delta[0]);
    cudaFree(c->d_delta[1]);
    cudaFree(c->d_label);
    cudaFree(c->d_target);
    cudaFree(c->d_loss);
    cudaFree(c->d_correct);
    cudaFree(c->d_ones);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

void set_err(char *err, size_t size, const char *what, const char *why)
{
    if (err && size)
        snprintf(err, size, "cuda: %s: %s", what, why);
}

int cuda_create(const zps_model_t *m, const zps_backend_opts_t *o, void **ctx, float **params,
                float **grad, char *err, size_t err_size)
{
    /* Probing the device first: without a driver (or with one too old for
     * this runtime) these calls fail, and that means "no GPU here". */
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        set_err(err, err_size, "no usable device", cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky error for later callers */
        return ZPS_ENODEV;
    }
    if (count == 0 || o->device >= count) {
        char why[64];
        snprintf(why, sizeof(why), "device %d requested, %d present", o->device, count);
        set_err(err, err_size, "no usable device", why);
        return ZPS_ENODEV;
    }
    if ((e = cudaSetDevice(o->device)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) {
        set_err(err, err_size, "cannot use the device", cudaGetErrorString(e));
        cudaGetLastError();
        return ZPS_ENODEV;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, o->device)) != cudaSuccess) {
        set_err(err, err_size, "cudaGetDeviceProperties", cudaGetErrorString(e));
        return ZPS_ENODEV;
    }

    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof(*c));
    if (!c) {
        set_err(err, err_size, "context", "out of memory");
        return ZPS_ENOMEM;
    }
    c->m = *m;
    c->max_batch = o->max_batch;
    c->device = o->device;
    size_t np = (size_t)m->nparams, mb = o->max_batch;
    size_t width = zps_model_max_width(m);
    const char *what = "";

#define TRY(call, name)                                                                            \
    do {                                                                                           \
        what = name;                                                                               \
        if ((e = (call)) != cudaSuccess)                                                           \
            goto fail;                                                                             \
    } while (0)

    TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    TRY(cudaMallocHost((void **)&c->h_params, np * sizeof(float)), "pinned parameters");
    TRY(cudaMallocHost((void **)&c->h_grad, np * sizeof(float)), "pinned gradient");
    TRY(cudaMallocHost((void **)&c->h_loss, mb * sizeof(float)), "pinned losses");
    TRY(cudaMallocHost((void **)&c->h_correct, mb * sizeof(int32_t)), "pinned predictions");
    TRY(cudaMalloc((void **)&c->d_params, np * sizeof(float)), "device parameters");
    TRY(cudaMalloc((void **)&c->d_grad, np * sizeof(float)), "device gradient");
    for (uint32_t l = 0; l <= m->layers; l++)
        TRY(cudaMalloc((void **)&c->d_act[l], mb * m->sizes[l] * sizeof(float)), "activations");
    TRY(cudaMalloc((void **)&c->d_delta[0], mb * width * sizeof(float)), "deltas");
    TRY(cudaMalloc((void **)&c->d_delta[1], mb * width * sizeof(float)), "deltas");
    TRY(cudaMalloc((void **)&c->d_label, mb * sizeof(int32_t)), "labels");
    TRY(cudaMalloc((void **)&c->d_target, mb * sizeof(float)), "targets");
    TRY(cudaMalloc((void **)&c->d_loss, mb * sizeof(float)), "losses");
    TRY(cudaMalloc((void **)&c->d_correct, mb * sizeof(int32_t)), "predictions");
    TRY(cudaMalloc((void **)&c->d_ones, mb * sizeof(float)), "ones");
#undef TRY

    fill_kernel<<<blocks_for(mb), THREADS, 0, c->stream>>>(c->d_ones, 1.0f, mb);
    what = "initialising buffers";
    if ((e = cudaGetLastError()) != cudaSuccess ||
        (e = cudaStreamSynchronize(c->stream)) != cudaSuccess)
        goto fail;
    {
        cublasStatus_t s = cublasCreate(&c->blas);
        if (s != CUBLAS_STATUS_SUCCESS) {
            char why[64];
            snprintf(why, sizeof(why), "cuBLAS status %d", (int)s);
            set_err(err, err_size, "cublasCreate", why);
            cuda_destroy(c);
            return ZPS_ENODEV;
        }
        /* Plain float32 arithmetic (no TF32), so results match the cpu backend. */
        if (cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS ||
            cublasSetMathMode(c->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS) {
            set_err(err, err_size, "cublas setup", "failed");
            cuda_destroy(c);
            return ZPS_ENODEV;
        }
    }
    memset(c->h_params, 0, np * sizeof(float));
    memset(c->h_grad, 0, np * sizeof(float));
    snprintf(c->desc, sizeof(c->desc), "cuda: %s (sm_%d%d, %.0f GiB), device %d", prop.name,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             o->device);
    *ctx = c;
    *params = c->h_params;
    *grad = c->h_grad;
    return 0;

fail:
    set_err(err, err_size, what, cudaGetErrorString(e));
    cudaGetLastError();
    cuda_destroy(c);
    return e == cudaErrorMemoryAllocation ? ZPS_ENOMEM : ZPS_ENODEV;
}

/*
 * Forward pass on n examples already in d_act[0]: d_act[l+1] = d_act[l] W_l
 * + b_l, ReLU on hidden layers. cuBLAS is column-major: a row-major [r, c]
 * matrix is its transpose to cuBLAS, so z = a w (row-major) is computed as
 * z^T = w^T a^T, i.e. sgemm(N, N, m = out, n = rows, k = in).
 */
int forward(cuda_ctx *c, size_t n)
{
    const zps_model_t *m = &c->m;
    const float one = 1.0f, zero = 0.0f;
    for (uint32_t l = 0; l < m->layers; l++) {
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        const float *w = c->d_params + m->w_off[l]; /* [in, out] */
        const float *b = c->d_params + m->b_off[l]; /* [out] */
        /* z: [n, out] = a: [n, in] x w: [in, out] */
        BLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, out, (int)n, in, &one, w, out,
                               c->d_act[l], in, &zero, c->d_act[l + 1], out));
        size_t count = n * (size_t)out;
        bias_act_kernel<<<blocks_for(count), THREADS, 0, c->stream>>>(
            c->d_act[l + 1], b, n, (size_t)out, l + 1 < m->layers);
        CUDA_CHECK(cudaGetLastError());
    }
    return 0;
}

/* Per-example losses (and correct flags) into d_loss/d_correct; delta may be NULL. */
int loss_kernel(cuda_ctx *c, size_t n, float *delta)
{
    const zps_model_t *m = &c->m;
    const float *out = c->d_act[m->layers];
    float inv_n = 1.0f / (float)n;
    if (m->kind == ZPS_MODEL_LINEAR)
        squared_loss_kernel<<<blocks_for(n), THREADS, 0, c->stream>>>(out, c->d_target, n, inv_n,
                                                                      delta, c->d_loss);
    else
        softmax_xent_kernel<<<blocks_for(n), THREADS, 0, c->stream>>>(
            out, c->d_label, n, (int)m->sizes[m->layers], inv_n, delta, c->d_loss, c->d_correct);
    CUDA_CHECK(cudaGetLastError());
    return 0;
}

/* Copies the per-example results back and sums them on the host in double. */
int fetch_losses(cuda_ctx *c, size_t n, double *sum, uint64_t *correct)
{
    CUDA_CHECK(cudaMemcpyAsync(c->h_loss, c->d_loss, n * sizeof(float), cudaMemcpyDeviceToHost,
                               c->stream));
    if (correct && c->m.kind == ZPS_MODEL_MLP)
        CUDA_CHECK(cudaMemcpyAsync(c->h_correct, c->d_correct, n * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    for (size_t i = 0; i < n; i++)
        *sum += c->h_loss[i];
    if (correct && c->m.kind == ZPS_MODEL_MLP)
        for (size_t i = 0; i < n; i++)
            *correct += (uint64_t)c->h_correct[i];
    return 0;
}

/* Uploads a batch's inputs and labels/targets to the device. */
int upload_batch(cuda_ctx *c, const float *x, const int32_t *label, const float *target, size_t n)
{
    const zps_model_t *m = &c->m;
    CUDA_CHECK(cudaMemcpyAsync(c->d_act[0], x, n * m->sizes[0] * sizeof(float),
                               cudaMemcpyHostToDevice, c->stream));
    if (m->kind == ZPS_MODEL_MLP)
        CUDA_CHECK(cudaMemcpyAsync(c->d_label, label, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   c->stream));
    else
        CUDA_CHECK(cudaMemcpyAsync(c->d_target, target, n * sizeof(float), cudaMemcpyHostToDevice,
                                   c->stream));
    return 0;
}

int cuda_train_step(void *opaque, const zps_batch_t *b, zps_step_stats_t *st)
{
    cuda_ctx *c = (cuda_ctx *)opaque;
    const zps_model_t *m = &c->m;
    size_t n = b->n;
    int rc;
    const float one = 1.0f, zero = 0.0f;

    uint64_t t0 = zps_now_ns();
    CUDA_CHECK(cudaMemcpyAsync(c->d_params, c->h_params, m->nparams * sizeof(float),
                               cudaMemcpyHostToDevice, c->stream));
    if ((rc = upload_batch(c, b->x, b->label, b->target, n)) != 0)
        return rc;
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    uint64_t t1 = zps_now_ns();

    float *dz = c->d_delta[0], *da = c->d_delta[1];
    if ((rc = forward(c, n)) != 0 || (rc = loss_kernel(c, n, dz)) != 0)
        return rc;
    double sum = 0.0;
    if ((rc = fetch_losses(c, n, &sum, NULL)) != 0)
        return rc;
    uint64_t t2 = zps_now_ns();

    for (uint32_t l = m->layers; l-- > 0;) {
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        const float *a = c->d_act[l];        /* [n, in] */
        float *gw = c->d_grad + m->w_off[l]; /* [in, out] */
        float *gb = c->d_grad + m->b_off[l]; /* [out] */
        /* gw: [in, out] = a^T: [in, n] x dz: [n, out]; column-major:
         * gw^T [out, in] = dz^T [out, n] x a [n, in]. */
        BLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, out, in, (int)n, &one, dz, out, a,
                               in, &zero, gw, out));
        /* gb: [out] = dz^T [out, n] x ones [n]. */
        BLAS_CHECK(cublasSgemv(c->blas, CUBLAS_OP_N, out, (int)n, &one, dz, out, c->d_ones, 1,
                               &zero, gb, 1));
        if (l == 0)
            break;
        /* da: [n, in] = dz: [n, out] x w^T: [out, in]; column-major:
         * da^T [in, n] = w [in, out] x dz^T [out, n], where w is the
         * transpose of cuBLAS's view [out, in] of our row-major buffer. */
        const float *w = c->d_params + m->w_off[l];
        BLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, in, (int)n, out, &one, w, out, dz,
                               out, &zero, da, in));
        size_t count = n * (size_t)in;
        relu_mask_kernel<<<blocks_for(count), THREADS, 0, c->stream>>>(da, a, count);
        CUDA_CHECK(cudaGetLastError());
        float *t = dz;
        dz = da;
        da = t;
    }
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    uint64_t t3 = zps_now_ns();
    CUDA_CHECK(cudaMemcpyAsync(c->h_grad, c->d_grad, m->nparams * sizeof(float),
                               cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    uint64_t t4 = zps_now_ns();

    st->loss = sum / (double)n;
    st->copy_ms = (double)((t1 - t0) + (t4 - t3)) / 1e6;
    st->forward_ms = (double)(t2 - t1) / 1e6;
    st->backward_ms = (double)(t3 - t2) / 1e6;
    return 0;
}

int cuda_evaluate(void *opaque, const zps_dataset_t *ds, zps_eval_t *out)
{
    cuda_ctx *c = (cuda_ctx *)opaque;
    int rc;
    CUDA_CHECK(cudaMemcpyAsync(c->d_params, c->h_params, c->m.nparams * sizeof(float),
                               cudaMemcpyHostToDevice, c->stream));
    double sum = 0.0;
    uint64_t correct = 0;
    for (uint64_t lo = 0; lo < ds->n; lo += c->max_batch) {
        size_t n = (size_t)(ds->n - lo < c->max_batch ? ds->n - lo : c->max_batch);
        if ((rc = upload_batch(c, ds->x + lo * ds->dim, ds->label ? ds->label + lo : NULL,
                               ds->target ? ds->target + lo : NULL, n)) != 0 ||
            (rc = forward(c, n)) != 0 || (rc = loss_kernel(c, n, NULL)) != 0 ||
            (rc = fetch_losses(c, n, &sum, &correct)) != 0)
            return rc;
    }
    out->n = ds->n;
    out->loss = sum / (double)ds->n;
    out->accuracy = c->m.kind == ZPS_MODEL_MLP ? (double)correct / (double)ds->n : NAN;
    return 0;
}

const char *cuda_describe(void *opaque)
{
    return ((cuda_ctx *)opaque)->desc;
}

const zps_backend_ops_t cuda_ops = {
    "cuda",          /* name */
    cuda_create,     /* create */
    cuda_destroy,    /* destroy */
    cuda_train_step, /* train_step */
    cuda_evaluate,   /* evaluate */
    cuda_describe,   /* describe */
};

} // namespace

/* The module's one exported symbol (backend.h, ZPS_BACKEND_ENTRY); the
 * declaration checks it against the loader's type. */
extern "C" __attribute__((visibility("default"))) zps_backend_entry_fn zps_backend_module;

extern "C" const zps_backend_ops_t *zps_backend_module(uint32_t *abi)
{
    *abi = ZPS_BACKEND_ABI;
    return &cuda_ops;
}
