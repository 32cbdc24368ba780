/*
 * worker_flags.c - zps-worker's own flags and their value checks as one
 * table; see worker_flags.h.
 */
#include "worker_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model.h"
#include "parse.h"

#define CLUSTER ZPS_WORKER_SECTION_CLUSTER
#define TRAINING ZPS_WORKER_SECTION_TRAINING
#define STEP ZPS_WORKER_SECTION_STEP
#define REPORTING ZPS_WORKER_SECTION_REPORTING

/* clang-format off */
const zps_worker_flag_t zps_worker_flag_table[ZPS_WORKER_FLAG_COUNT] = {
    {ZPS_WORKER_FLAG_SERVERS, "servers", ZPS_WORKER_VALUE_LIST, CLUSTER, 0, 0,
     "comma-separated endpoints"},
    {ZPS_WORKER_FLAG_RANK, "rank", ZPS_WORKER_VALUE_LONG, CLUSTER, 0, 65535,
     "an integer in [0, 65535]"},
    {ZPS_WORKER_FLAG_WORKERS, "workers", ZPS_WORKER_VALUE_LONG, CLUSTER, 1, 65536,
     "an integer in [1, 65536]"},
    {ZPS_WORKER_FLAG_TIMEOUT, "timeout", ZPS_WORKER_VALUE_TIMEOUT, CLUSTER, -1, 86400000,
     "milliseconds >= 1, or -1 to wait forever"},
    {ZPS_WORKER_FLAG_WAIT_LOG, "wait-log-ms", ZPS_WORKER_VALUE_LONG, CLUSTER, 0, 86400000,
     "milliseconds >= 0 (0: never)"},
    {ZPS_WORKER_FLAG_KEY, "key", ZPS_WORKER_VALUE_STRING, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_SERVER_KEY, "server-key", ZPS_WORKER_VALUE_STRING, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_NO_SEAL, "no-seal", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_INIT_ONLY, "init-only", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_LOCAL, "local", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_EVALUATOR, "evaluator", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_NO_EVAL, "no-eval", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_NO_EXCHANGE, "no-exchange", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_WIRE_BF16, "wire-bf16", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_NO_SHM, "no-shm", ZPS_WORKER_VALUE_NONE, CLUSTER, 0, 0, NULL},
    {ZPS_WORKER_FLAG_DATA_ASSIGNMENT, "data-assignment", ZPS_WORKER_VALUE_ASSIGNMENT, CLUSTER, 0,
     0, "static or shared"},
    {ZPS_WORKER_FLAG_MODEL, "model", ZPS_WORKER_VALUE_MODEL, TRAINING, 0, 0,
     "mlp:I-H1-...-O or linear:D"},
    {ZPS_WORKER_FLAG_DATA, "data", ZPS_WORKER_VALUE_DATA, TRAINING, 0, 0,
     "fashion-mnist or synthetic[:OPTIONS]"},
    {ZPS_WORKER_FLAG_DATA_DIR, "data-dir", ZPS_WORKER_VALUE_STRING, TRAINING, 0, 0, NULL},
    {ZPS_WORKER_FLAG_BATCH, "batch", ZPS_WORKER_VALUE_LONG, TRAINING, 1, 1 << 20,
     "an integer in [1, 1048576]"},
    {ZPS_WORKER_FLAG_EPOCHS, "epochs", ZPS_WORKER_VALUE_U64, TRAINING, 1, 1000000,
     "an integer in [1, 1000000]"},
    {ZPS_WORKER_FLAG_CLOCKS, "clocks", ZPS_WORKER_VALUE_U64, TRAINING, 1, -1,
     "a positive integer"},
    {ZPS_WORKER_FLAG_SEED, "seed", ZPS_WORKER_VALUE_U64, TRAINING, 0, -1,
     "a non-negative integer"},
    {ZPS_WORKER_FLAG_BACKEND, "backend", ZPS_WORKER_VALUE_BACKEND, TRAINING, 0, 0,
     "cpu, cuda or auto"},
    {ZPS_WORKER_FLAG_DEVICE, "device", ZPS_WORKER_VALUE_LONG, TRAINING, 0, 1024,
     "a device index"},
    {ZPS_WORKER_FLAG_BLAS_THREADS, "blas-threads", ZPS_WORKER_VALUE_LONG, TRAINING, 1, 1024,
     "an integer in [1, 1024]"},
    {ZPS_WORKER_FLAG_NO_FINAL_WAIT, "no-final-wait", ZPS_WORKER_VALUE_NONE, STEP, 0, 0, NULL},
    {ZPS_WORKER_FLAG_EVAL_EVERY, "eval-every", ZPS_WORKER_VALUE_U64, REPORTING, 0, -1,
     "a non-negative integer"},
    {ZPS_WORKER_FLAG_METRICS, "metrics", ZPS_WORKER_VALUE_STRING, REPORTING, 0, 0, NULL},
    {ZPS_WORKER_FLAG_METRICS_LISTEN, "metrics-listen", ZPS_WORKER_VALUE_STRING, REPORTING, 0, 0,
     NULL},
    {ZPS_WORKER_FLAG_SAVE_PARAMS, "save-params", ZPS_WORKER_VALUE_STRING, REPORTING, 0, 0, NULL},
    {ZPS_WORKER_FLAG_NO_PROGRESS, "no-progress", ZPS_WORKER_VALUE_NONE, REPORTING, 0, 0, NULL},
    {ZPS_WORKER_FLAG_PROGRESS_EVERY, "progress-every", ZPS_WORKER_VALUE_SECONDS, REPORTING, 0, 0,
     "seconds > 0"},
    {ZPS_WORKER_FLAG_LOG_LEVEL, "log-level", ZPS_WORKER_VALUE_LOG_LEVEL, REPORTING, 0, 0,
     "debug, info, warn or error"},
    {ZPS_WORKER_FLAG_HELP, "help", ZPS_WORKER_VALUE_HELP, REPORTING, 0, 0, NULL},
};
/* clang-format on */

const zps_worker_flag_t *zps_worker_flag_find(const char *name)
{
    for (size_t i = 0; i < ZPS_WORKER_FLAG_COUNT; i++)
        if (strcmp(zps_worker_flag_table[i].name, name) == 0)
            return &zps_worker_flag_table[i];
    return NULL;
}

bool zps_worker_flag_has_value(const zps_worker_flag_t *f)
{
    return f->kind != ZPS_WORKER_VALUE_NONE && f->kind != ZPS_WORKER_VALUE_HELP;
}

int zps_worker_flag_read(const zps_worker_flag_t *f, const char *arg, zps_worker_value_t *out,
                         char *why, size_t why_size)
{
    zps_worker_value_t v;
    memset(&v, 0, sizeof(v));
    v.s = arg;
    bool ok = true;
    if (zps_worker_flag_has_value(f) && !arg)
        ok = false;
    else
        switch (f->kind) {
        case ZPS_WORKER_VALUE_NONE:
        case ZPS_WORKER_VALUE_HELP:
        case ZPS_WORKER_VALUE_STRING:
        case ZPS_WORKER_VALUE_MODEL:
        case ZPS_WORKER_VALUE_DATA:
            break;
        case ZPS_WORKER_VALUE_LIST:
            ok = zps_parse_list(arg, &v.list, &v.count) == 0;
            break;
        case ZPS_WORKER_VALUE_LONG:
            ok = zps_parse_long(arg, f->lo, f->hi, &v.l) == 0;
            break;
        case ZPS_WORKER_VALUE_TIMEOUT:
            ok = zps_parse_long(arg, f->lo, f->hi, &v.l) == 0 && v.l != 0;
            break;
        case ZPS_WORKER_VALUE_U64:
            ok = zps_parse_u64(arg, &v.u) == 0 && v.u >= (uint64_t)f->lo &&
                 (f->hi < 0 || v.u <= (uint64_t)f->hi);
            break;
        case ZPS_WORKER_VALUE_SECONDS:
            ok = zps_parse_double(arg, &v.d) == 0 && v.d > 0;
            break;
        case ZPS_WORKER_VALUE_BACKEND:
            ok = strcmp(arg, "cpu") == 0 || strcmp(arg, "cuda") == 0 || strcmp(arg, "auto") == 0;
            break;
        case ZPS_WORKER_VALUE_LOG_LEVEL:
            ok = zps_log_parse_level(arg, &v.level) == 0;
            break;
        case ZPS_WORKER_VALUE_ASSIGNMENT:
            ok = strcmp(arg, "static") == 0 || strcmp(arg, "shared") == 0;
            break;
        }
    if (!ok) {
        if (why)
            snprintf(why, why_size, "invalid --%s '%s': expected %s", f->name, arg ? arg : "",
                     f->expect ? f->expect : "a value");
        return ZPS_EINVAL;
    }
    *out = v;
    return 0;
}

int zps_worker_flag_check_early(const zps_worker_flag_t *f, const char *arg, char *why,
                                size_t why_size)
{
    zps_worker_value_t v;
    int rc = zps_worker_flag_read(f, arg, &v, why, why_size);
    if (rc != 0)
        return rc;
    free(v.list);
    bool ok = true;
    if (f->kind == ZPS_WORKER_VALUE_MODEL) {
        zps_model_t model;
        char err[256];
        if (zps_model_parse(arg, &model, err, sizeof(err)) != 0) {
            if (why)
                snprintf(why, why_size, "invalid --%s: %s", f->name, err);
            return ZPS_EINVAL;
        }
    } else if (f->kind == ZPS_WORKER_VALUE_DATA) {
        /* data.c has no parse apart from loading; the run checks the options. */
        ok = strcmp(arg, "fashion-mnist") == 0 || strcmp(arg, "synthetic") == 0 ||
             strncmp(arg, "synthetic:", 10) == 0;
    }
    if (!ok) {
        if (why)
            snprintf(why, why_size, "invalid --%s '%s': expected %s", f->name, arg, f->expect);
        return ZPS_EINVAL;
    }
    return 0;
}
