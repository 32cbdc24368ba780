/*
 * backend.c - the backend registry: which backends this build has, how
 * "auto" chooses, and the checks every backend relies on. The only file of
 * the trainer that mentions ZPS_CUDA.
 *
 * cpu is linked in. cuda is a module (backend_module.h), loaded at most once
 * per process and only when asked for, by name or by "auto" on a machine
 * with an NVIDIA driver.
 */
#include "backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_module.h"
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

/* The cuda module's file name; the build puts it beside zps-worker and
 * installs it where backend_module.h looks. */
#ifdef ZPS_CUDA
static const char *const cuda_module = "libzps_backend_cuda.so";
#else
static const char *const cuda_module = NULL;
#endif

/* What this process found out about CUDA, each part once. */
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static char no_driver[256]; /* why there is no NVIDIA driver; "" when there is one */
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const zps_backend_ops_t *cuda_ops; /* NULL when the module did not load */
static char cuda_why[768];                /* why it did not */
static atomic_flag auto_said = ATOMIC_FLAG_INIT;

static void probe_driver(void)
{
    /* Every CUDA runtime needs the driver's library; when it is absent the
     * answer costs one failed open instead of loading cuBLAS to find out.
     * When present it stays open: the runtime opens it again anyway. */
    if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL))
        zps_set_reason(no_driver, sizeof(no_driver), "cuda: no NVIDIA driver (%s)", dlerror());
}

static void load_cuda(void)
{
    if (!cuda_module)
        zps_set_reason(cuda_why, sizeof(cuda_why),
                       "cuda: this build has no CUDA backend module (built without nvcc)");
    else
        zps_backend_module_load(cuda_module, &cuda_ops, cuda_why, sizeof(cuda_why));
}

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
    if (strcmp(name, "cpu") == 0)
        return create_with(&zps_backend_cpu_ops, m, o, out, err, err_size);
    if (strcmp(name, "cuda") == 0) {
        /* Asked for by name: the module first, so that a missing or stale
         * one is reported as such on any machine, then the driver. */
        pthread_once(&cuda_once, load_cuda);
        if (!cuda_ops) {
            zps_set_reason(err, err_size, "%s", cuda_why);
            return ZPS_ENODEV;
        }
        pthread_once(&driver_once, probe_driver);
        if (no_driver[0]) {
            zps_set_reason(err, err_size, "%s", no_driver);
            return ZPS_ENODEV;
        }
        return create_with(cuda_ops, m, o, out, err, err_size);
    }
    if (strcmp(name, "auto") == 0) {
        /* cuda when it works, else cpu. Why cuda was passed over is a fact
         * about the machine, said once at debug level; the trainer's info
         * line names the backend in use. A driver without a loadable
         * module is a broken install, and worth a warning. */
        char why[768] = "";
        enum zps_log_level level = ZPS_LOG_DEBUG;
        pthread_once(&driver_once, probe_driver);
        if (no_driver[0]) {
            zps_set_reason(why, sizeof(why), "%s", no_driver);
        } else {
            pthread_once(&cuda_once, load_cuda);
            if (!cuda_ops) {
                zps_set_reason(why, sizeof(why), "%s", cuda_why);
                if (cuda_module)
                    level = ZPS_LOG_WARN;
            } else {
                int rc = create_with(cuda_ops, m, o, out, why, sizeof(why));
                if (rc == 0)
                    return 0;
                if (rc != ZPS_ENODEV) {
                    zps_set_reason(err, err_size, "%s", why);
                    return rc;
                }
            }
        }
        if (!atomic_flag_test_and_set(&auto_said))
            zps_log(level, "backend auto: %s; using cpu", why);
        return create_with(&zps_backend_cpu_ops, m, o, out, err, err_size);
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
