/*
 * backend.h - the one interface through which the trainer computes: a loss
 * and the mean gradient of a batch, and the loss and accuracy of a data set,
 * for a model laid out as in model.h.
 *
 * A backend owns two host buffers of nparams floats each: the parameters it
 * computes with and the gradient it writes. The trainer pulls parameters
 * straight into the first and pushes the second, so there is no extra copy
 * (the cuda backend allocates both pinned, for fast transfers).
 *
 * Backends are a table of function pointers (zps_backend_ops_t) plus a
 * context. backend.c is the registry: the only place that knows which
 * backends exist and the only place with #ifdef ZPS_CUDA. The cpu backend
 * (OpenBLAS) is linked in and is the reference every other backend is
 * tested against; the cuda backend is a loadable module
 * (libzps_backend_cuda.so, see backend_module.h), so that zps-worker links
 * no CUDA library and a run without a GPU never loads cuBLAS.
 *
 * Threading: a backend is used by one thread at a time. Every call blocks
 * until its results are in host memory.
 *
 * Not here: the model's layout and initialisation (model.h); the data sets
 * and their order (data.h); the optimizer, which runs on the servers or in
 * --local mode (optimizer/); finding and loading a module file
 * (backend_module.h).
 */
#ifndef ZPS_BACKEND_H
#define ZPS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "model.h"

/* A batch in host memory; the backend only reads it. */
typedef struct zps_batch {
    size_t n;             /* examples, 1..max_batch */
    const float *x;       /* [n, sizes[0]] */
    const int32_t *label; /* [n], classes in [0, sizes[L]) (MLP) */
    const float *target;  /* [n] (linear) */
} zps_batch_t;

/* What one forward+backward pass measured. */
typedef struct zps_step_stats {
    double loss;        /* mean loss over the batch */
    double forward_ms;  /* forward pass and loss */
    double backward_ms; /* backward pass down to the gradient in host memory */
    double copy_ms;     /* host<->device copies (0 on cpu) */
} zps_step_stats_t;

/* Result of an evaluation. */
typedef struct zps_eval {
    double loss;     /* mean loss over the set */
    double accuracy; /* fraction of argmax == label; NaN for regression */
    uint64_t n;      /* examples evaluated */
} zps_eval_t;

typedef struct zps_backend_opts {
    size_t max_batch; /* largest batch train_step and evaluate will see at once */
    int blas_threads; /* cpu: OpenBLAS threads (process-wide), >= 1 */
    int device;       /* cuda: device index */
} zps_backend_opts_t;

/* max_batch 256, blas_threads 1, device 0. */
void zps_backend_opts_default(zps_backend_opts_t *o);

typedef struct zps_backend zps_backend_t;

/*
 * Creates backend `name` ("cpu", "cuda" or "auto") for model `m` (copied).
 * "cuda" loads the cuda module on first use (blocks for its start-up,
 * about 0.2 s). "auto" takes cuda when an NVIDIA driver is installed, the
 * module loads and a device works, and otherwise cpu; it looks for the
 * driver library first, so a machine without one never loads the module.
 * Why cuda was passed over is logged once per process, at debug level (at
 * warn when the driver is there but the module is missing or broken).
 * Returns 0; ZPS_ENODEV when the named backend cannot run here (no driver,
 * no device, no module, a module of another ABI); ZPS_EINVAL for an unknown
 * name or bad options; ZPS_ENOMEM. A one-line reason goes to err[err_size]
 * (may be NULL). *out is written only on success. The new backend's
 * parameter and gradient buffers are zeroed. May be called from any thread.
 */
int zps_backend_new(const char *name, const zps_model_t *m, const zps_backend_opts_t *o,
                    zps_backend_t **out, char *err, size_t err_size);
void zps_backend_free(zps_backend_t *be); /* NULL is a no-op */

/* "cpu" or "cuda": a static string. */
const char *zps_backend_name(const zps_backend_t *be);
/* A one-line description for logs ("cpu: OpenBLAS 0.3.21, 1 thread"), owned
 * by the backend and valid until zps_backend_free. */
const char *zps_backend_describe(const zps_backend_t *be);

/*
 * The parameter buffer [nparams]: write the parameters here (a pull, an
 * optimizer step) before train_step or evaluate. Owned by the backend,
 * valid until zps_backend_free.
 */
float *zps_backend_params(zps_backend_t *be);

/* The gradient buffer [nparams], written by train_step. Owned by the backend. */
float *zps_backend_grad(zps_backend_t *be);

/*
 * Forward and backward pass on `b` with the current parameters: writes the
 * MEAN gradient over the batch into the gradient buffer and the stats into
 * *st. Returns 0, ZPS_EBATCH (n is 0 or above max_batch), ZPS_EINVAL (a
 * missing label/target array or a label out of range) or ZPS_ENODEV (a
 * device failure, logged); the gradient is unspecified after a failure.
 */
int zps_backend_train_step(zps_backend_t *be, const zps_batch_t *b, zps_step_stats_t *st);

/*
 * Mean loss and accuracy of the current parameters over all of `ds`, in
 * chunks of max_batch. Returns 0, ZPS_EINVAL (the set does not fit the
 * model) or ZPS_ENODEV.
 */
int zps_backend_evaluate(zps_backend_t *be, const zps_dataset_t *ds, zps_eval_t *out);

/* ---- for backend implementations ---- */

typedef struct zps_backend_ops {
    const char *name;
    /*
     * Allocates the context and the two host buffers (zeroed). Returns 0,
     * ZPS_ENODEV (cannot run here), ZPS_ENOMEM, with a reason in err.
     */
    int (*create)(const zps_model_t *m, const zps_backend_opts_t *o, void **ctx, float **params,
                  float **grad, char *err, size_t err_size);
    void (*destroy)(void *ctx);
    /* Batch already validated by the registry. */
    int (*train_step)(void *ctx, const zps_batch_t *b, zps_step_stats_t *st);
    /* Data set already checked against the model. */
    int (*evaluate)(void *ctx, const zps_dataset_t *ds, zps_eval_t *out);
    const char *(*describe)(void *ctx);
} zps_backend_ops_t;

/* Defined by worker/cpu/backend_cpu.c. */
extern const zps_backend_ops_t zps_backend_cpu_ops;

/*
 * A backend module (a shared library, loaded by backend_module.c) exports
 * one function, ZPS_BACKEND_ENTRY: it writes the ZPS_BACKEND_ABI it was
 * compiled with to *abi and returns its ops table (static, never freed).
 * The loader refuses a module whose ABI differs. Bump ZPS_BACKEND_ABI
 * whenever zps_backend_ops_t or a struct it passes (zps_model_t,
 * zps_backend_opts_t, zps_batch_t, zps_step_stats_t, zps_eval_t,
 * zps_dataset_t) changes layout or meaning; the entry's own signature never
 * changes. A module calls zps_log, zps_now_ns and zps_model_* of the
 * executable that loads it, which is linked with its symbols exported.
 */
#define ZPS_BACKEND_ABI 1
#define ZPS_BACKEND_ENTRY "zps_backend_module"
typedef const zps_backend_ops_t *zps_backend_entry_fn(uint32_t *abi);

#endif
