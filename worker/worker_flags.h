/*
 * worker_flags.h - zps-worker's own flags (all but the optimizer's and the
 * straggler flags), defined once as a table: each flag's name, the kind and
 * range of value it takes, and what a bad value is told it should be.
 * zps-worker checks its command line with it; zps launch checks the values it
 * hands to its workers with the same table, before it starts anything, so
 * both refuse a value in the same words.
 *
 * Not here: the optimizer's flags (optimizer/opt_flags.h), the step-time and
 * straggler flags (straggler_flags.h), where each value goes in a
 * zps_trainer_config_t and the checks across flags (worker_main.c), which
 * flags zps launch sets itself (tool/launch_opts.c), the usage text
 * (worker_main.c). No I/O, no allocation except a --servers list; the table
 * is constant and may be read from any thread.
 */
#ifndef ZPS_WORKER_FLAGS_H
#define ZPS_WORKER_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

/* One id per flag, in the order of zps-worker's getopt table. */
typedef enum zps_worker_flag_id {
    ZPS_WORKER_FLAG_SERVERS,
    ZPS_WORKER_FLAG_RANK,
    ZPS_WORKER_FLAG_WORKERS,
    ZPS_WORKER_FLAG_TIMEOUT,
    ZPS_WORKER_FLAG_WAIT_LOG,
    ZPS_WORKER_FLAG_KEY,
    ZPS_WORKER_FLAG_SERVER_KEY,
    ZPS_WORKER_FLAG_NO_SEAL,
    ZPS_WORKER_FLAG_INIT_ONLY,
    ZPS_WORKER_FLAG_LOCAL,
    ZPS_WORKER_FLAG_EVALUATOR,
    ZPS_WORKER_FLAG_NO_EVAL,
    ZPS_WORKER_FLAG_NO_EXCHANGE,
    ZPS_WORKER_FLAG_WIRE_BF16,
    ZPS_WORKER_FLAG_NO_SHM,
    ZPS_WORKER_FLAG_DATA_ASSIGNMENT,
    ZPS_WORKER_FLAG_MODEL,
    ZPS_WORKER_FLAG_DATA,
    ZPS_WORKER_FLAG_DATA_DIR,
    ZPS_WORKER_FLAG_BATCH,
    ZPS_WORKER_FLAG_EPOCHS,
    ZPS_WORKER_FLAG_CLOCKS,
    ZPS_WORKER_FLAG_SEED,
    ZPS_WORKER_FLAG_BACKEND,
    ZPS_WORKER_FLAG_DEVICE,
    ZPS_WORKER_FLAG_BLAS_THREADS,
    ZPS_WORKER_FLAG_NO_FINAL_WAIT,
    ZPS_WORKER_FLAG_EVAL_EVERY,
    ZPS_WORKER_FLAG_METRICS,
    ZPS_WORKER_FLAG_METRICS_LISTEN,
    ZPS_WORKER_FLAG_SAVE_PARAMS,
    ZPS_WORKER_FLAG_NO_PROGRESS,
    ZPS_WORKER_FLAG_PROGRESS_EVERY,
    ZPS_WORKER_FLAG_LOG_LEVEL,
    ZPS_WORKER_FLAG_HELP,
    ZPS_WORKER_FLAG_COUNT,
} zps_worker_flag_id_t;

/* Why --data-assignment shared refuses --clocks, in zps-worker's and zps launch's words. */
#define ZPS_WORKER_SHARED_CLOCKS_WHY                                                               \
    "--data-assignment shared runs whole epochs (--epochs): how many clocks each worker takes "   \
    "is decided as it runs"

typedef enum zps_worker_flag_kind {
    ZPS_WORKER_VALUE_NONE,      /* takes no value */
    ZPS_WORKER_VALUE_HELP,      /* --help: no value, and no setting of a run */
    ZPS_WORKER_VALUE_STRING,    /* a value taken as it is (a path, a file name) */
    ZPS_WORKER_VALUE_LIST,      /* comma-separated items (zps_parse_list) */
    ZPS_WORKER_VALUE_LONG,      /* an integer in [lo, hi] */
    ZPS_WORKER_VALUE_TIMEOUT,   /* an integer in [lo, hi] other than 0 */
    ZPS_WORKER_VALUE_U64,       /* a non-negative integer in [lo, hi]; hi < 0: no bound */
    ZPS_WORKER_VALUE_SECONDS,   /* a finite number > 0 */
    ZPS_WORKER_VALUE_BACKEND,   /* cpu, cuda or auto */
    ZPS_WORKER_VALUE_LOG_LEVEL, /* debug, info, warn or error */
    ZPS_WORKER_VALUE_ASSIGNMENT, /* static or shared (--data-assignment) */
    /* Taken as they are while the command line is read; the run refuses a
     * bad one when it starts (exit 1). zps_worker_flag_check_early judges
     * them up front. */
    ZPS_WORKER_VALUE_MODEL, /* a model spec (model.h) */
    ZPS_WORKER_VALUE_DATA,  /* fashion-mnist or synthetic[:OPTIONS] */
} zps_worker_flag_kind_t;

/* The section of zps-worker's usage (and getopt table) a flag is in. */
typedef enum zps_worker_flag_section {
    ZPS_WORKER_SECTION_CLUSTER,   /* before the optimizer's flags */
    ZPS_WORKER_SECTION_TRAINING,  /* before the optimizer's flags */
    ZPS_WORKER_SECTION_STEP,      /* after the straggler flags */
    ZPS_WORKER_SECTION_REPORTING, /* last */
} zps_worker_flag_section_t;

typedef struct zps_worker_flag {
    zps_worker_flag_id_t id; /* its index in the table */
    const char *name;        /* without the "--" */
    zps_worker_flag_kind_t kind;
    zps_worker_flag_section_t section;
    long lo, hi;        /* LONG, TIMEOUT and U64 bounds */
    const char *expect; /* what a value should be (NULL for kinds that refuse nothing) */
} zps_worker_flag_t;

extern const zps_worker_flag_t zps_worker_flag_table[ZPS_WORKER_FLAG_COUNT];

/* getopt_long codes: ZPS_WORKER_FLAG_FIRST + the flag's id. */
enum { ZPS_WORKER_FLAG_FIRST = 256 };

/* A flag's value, read. Which member is set depends on the kind. */
typedef struct zps_worker_value {
    long l;                   /* LONG, TIMEOUT */
    uint64_t u;               /* U64 */
    double d;                 /* SECONDS */
    const char *s;            /* STRING, BACKEND, MODEL, DATA: the argument itself */
    char **list;              /* LIST: malloc'd, one allocation (zps_parse_list) */
    size_t count;             /* LIST: items in list */
    enum zps_log_level level; /* LOG_LEVEL */
} zps_worker_value_t;

/* The flag named `name` (without "--"), or NULL. */
const zps_worker_flag_t *zps_worker_flag_find(const char *name);

/* True if the flag takes a value. */
bool zps_worker_flag_has_value(const zps_worker_flag_t *f);

/*
 * Reads `arg` (NULL for a flag without a value) as zps-worker does when it
 * reads its command line. Returns 0 and fills *out, or ZPS_EINVAL with
 * "invalid --batch '0': expected an integer in [1, 1048576]" in why (*out
 * untouched). On success with a LIST flag, out->list is the caller's to
 * free().
 */
int zps_worker_flag_read(const zps_worker_flag_t *f, const char *arg, zps_worker_value_t *out,
                         char *why, size_t why_size);

/*
 * Judges `arg` as zps_worker_flag_read does, and a model spec or a data set's
 * name as the run will when it starts ("invalid --model: ..."), for a program
 * that hands the flag on and wants it refused before anything starts.
 * Returns 0 or ZPS_EINVAL with the reason in why. Allocates
 * nothing that outlives the call.
 */
int zps_worker_flag_check_early(const zps_worker_flag_t *f, const char *arg, char *why,
                                size_t why_size);

#endif
