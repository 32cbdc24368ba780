/*
 * backend.c - the backend registry: which backends this build has, how
 * "auto" chooses, and the checks every backend relies on. The only file of
 * the trainer that mentions ZPS_CUDA.
 */
#include "backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"

struct zps_backend {
    const zps_backend_ops_t *ops;
    void *ctx;
    zps_model_t model;
    size_t max_batch;
    float *params; /* [nparams], owned by ctx */
    float *grad;   /* [nparams], owned by ctx */
};

/* The backends compiled into this build, in the order "auto" tries them. */
static const zps_backend_ops_t *const registry[] = {
#ifdef ZPS_CUDA
    &zps_backend_cuda_ops,
#endif
    &zps_backend_cpu_ops,
};
#define REGISTRY_SIZE (sizeof(registry) / sizeof(registry[0]))

void zps_backend_opts_default(zps_backend_opts_t *o)
{
    o->max_batch = 256;
    o->blas_threads = 1;
    o->device = 0;
}

static int create_with(const zps_backend_ops_t *ops, const zps_model_t *m,
                       const zps_backend_opts_t *o, zps_backend_t **out, char *err, size_t err_size)
{
    zps_backend_t *be = calloc(1, sizeof(*be));
    if (!be) {
        zps_set_reason(err, err_size, "out of memory");
        return ZPS_ENOMEM;
    }
    int rc = ops->create(m, o, &be->ctx, &be->params, &be->grad, err, err_size);
    if (rc) {
        free(be);
        return rc;
    }
    be->ops = ops;
    be->model = *m;
    be->max_batch = o->max_batch;
    *out = be;
    return 0;
}

int zps_backend_new(const char *name, const zps_model_t *m, const zps_backend_opts_t *o,
                    zps_backend_t **out, char *err, size_t err_size)
{
    if (!name || !m || !o || !out) {
        zps_set_reason(err, err_size, "missing argument");
        return ZPS_EINVAL;
    }
    if (o->max_batch == 0 || o->max_batch > (1u << 24) || o->blas_threads < 1 || o->device < 0) {
        zps_set_reason(err, err_size,
                       "bad backend options (max_batch %zu, blas_threads %d, device %d)",
                       o->max_batch, o->blas_threads, o->device);
        return ZPS_EINVAL;
    }
    if (strcmp(name, "auto") == 0) {
        /* Try each compiled backend in order; the last (cpu) always exists. */
        char why[256] = "not compiled in (built without CUDA)";
        for (size_t i = 0; i < REGISTRY_SIZE; i++) {
            int rc = create_with(registry[i], m, o, out, why, sizeof(why));
            if (rc == 0) {
                zps_info("backend auto: using %s", zps_backend_describe(*out));
                return 0;
            }
            if (rc != ZPS_ENODEV) {
                zps_set_reason(err, err_size, "%s", why);
                return rc;
            }
            zps_info("backend auto: %s unusable (%s); trying the next", registry[i]->name, why);
        }
        zps_set_reason(err, err_size, "no backend usable");
        return ZPS_ENODEV;
    }
    for (size_t i = 0; i < REGISTRY_SIZE; i++)
        if (strcmp(name, registry[i]->name) == 0)
            return create_with(registry[i], m, o, out, err, err_size);
    if (strcmp(name, "cuda") == 0) {
        zps_set_reason(err, err_size,
                       "cuda: this zps-worker was built without CUDA (nvcc not found)");
        return ZPS_ENODEV;
    }
    zps_set_reason(err, err_size, "unknown backend '%s' (cpu, cuda or auto)", name);
    return ZPS_EINVAL;
}

void zps_backend_free(zps_backend_t *be)
{
    if (!be)
        return;
    be->ops->destroy(be->ctx);
    free(be);
}

const char *zps_backend_name(const zps_backend_t *be)
{
    return be->ops->name;
}

const char *zps_backend_describe(const zps_backend_t *be)
{
    return be->ops->describe(be->ctx);
}

const zps_model_t *zps_backend_model(const zps_backend_t *be)
{
    return &be->model;
}

size_t zps_backend_max_batch(const zps_backend_t *be)
{
    return be->max_batch;
}

float *zps_backend_params(zps_backend_t *be)
{
    return be->params;
}

float *zps_backend_grad(zps_backend_t *be)
{
    return be->grad;
}

int zps_backend_train_step(zps_backend_t *be, const zps_batch_t *b, zps_step_stats_t *st)
{
    if (b->n == 0 || b->n > be->max_batch)
        return ZPS_EBATCH;
    if (!b->x)
        return ZPS_EINVAL;
    if (be->model.kind == ZPS_MODEL_MLP) {
        /* Labels index rows of the softmax; a bad one would read out of
         * bounds in every backend, so it is refused here once. */
        if (!b->label)
            return ZPS_EINVAL;
        int32_t classes = (int32_t)be->model.sizes[be->model.layers];
        for (size_t i = 0; i < b->n; i++)
            if (b->label[i] < 0 || b->label[i] >= classes)
                return ZPS_EINVAL;
    } else if (!b->target) {
        return ZPS_EINVAL;
    }
    zps_step_stats_t s = {0};
    int rc = be->ops->train_step(be->ctx, b, &s);
    if (rc == 0 && st)
        *st = s;
    return rc;
}

int zps_backend_evaluate(zps_backend_t *be, const zps_dataset_t *ds, zps_eval_t *out)
{
    if (zps_model_check_data(&be->model, ds, NULL, 0) != 0 || ds->n == 0)
        return ZPS_EINVAL;
    return be->ops->evaluate(be->ctx, ds, out);
}
