/*
 * trainer.h - zps-worker's training loop, distributed or in one process.
 *
 * Distributed (the default): per clock t, pull the parameters for clock t
 * from the servers, compute the mean gradient of this worker's batch for
 * (epoch, step) of t, push it at clock t. Worker 0 first initialises the
 * servers with the He-initialised parameters; the others simply pull clock
 * 0, which the servers answer once the model exists. The optimizer runs on
 * the servers; a worker only computes gradients. Worker 0 also evaluates
 * the test set every `eval_every` clocks and at the end, unless `evaluate`
 * is off because an evaluator does it.
 *
 * Evaluator (`evaluator`): no training. It pulls the model of every
 * `eval_every`-th clock and of the last as an observer that waits for that
 * clock's model (client.h, `observe`), evaluates it and saves the final
 * model, so that no training worker ever waits for an evaluation.
 *
 * Local (--local): the same model, initialisation and data order in one
 * process without servers: per clock, each of the W simulated workers'
 * batches goes through the backend, and the W gradients are combined with
 * the servers' example-weighted mean in rank order (optimizer/mean.h) before
 * one optimizer step. A BSP cluster of W workers with batch b therefore
 * computes bit for bit what --local --workers W with batch b computes.
 *
 * Not here: flag parsing (worker_flags.h, worker_main.c), the arithmetic
 * (backend.h), the data order rule (data.h), the wire protocol and the
 * servers' replies (client.h), the metrics lines (metrics.h).
 */
#ifndef ZPS_TRAINER_H
#define ZPS_TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "optimizer.h"
#include "straggler.h"

typedef struct zps_trainer_config {
    /* cluster */
    const char *const *servers; /* endpoints, in shard order (distributed only) */
    size_t server_count;
    uint32_t rank;    /* this worker, < workers */
    uint32_t workers; /* W */
    int timeout_ms;   /* client call timeout; -1 waits forever */
    int wait_log_ms;  /* log what a call waits for after this long, then every 3x (0: never) */
    bool local;       /* train in this process, no servers */
    bool init_only;   /* rank 0: initialise the servers and return */
    bool evaluator;   /* observe and evaluate the servers' model; train nothing */
    bool evaluate;    /* rank 0: evaluate (off when an evaluator process does) */

    /* CURVE (docs/security.md): the secret key file (PREFIX.key) and the
     * servers' public key file (SERVER.pub); both NULL: no CURVE */
    const char *key_file;
    const char *server_key_file;
    bool no_seal; /* with keys: every byte over CURVE (zps_client_opts_t.no_seal) */

    /* what to train */
    const char *model;    /* spec (model.h); NULL: the data's default */
    const char *data;     /* "fashion-mnist" or "synthetic[:options]" */
    const char *data_dir; /* where the Fashion-MNIST files are */
    uint32_t batch;       /* b, per worker */
    uint64_t epochs;      /* used when clocks is 0 */
    uint64_t clocks;      /* K iterations; 0: epochs * steps per epoch */
    uint64_t seed;        /* initialisation, data order, synthetic data */

    /* how */
    const char *backend; /* "cpu", "cuda" or "auto" */
    int blas_threads;
    int device;
    zps_opt_config_t opt; /* --local only; the servers hold their own */

    /* step time: the base step time and injected stragglers (straggler.h) */
    zps_straggler_config_t straggler;
    /* Rank 0 under SSP/ASP: before the final evaluation, wait (polling the
     * servers' STATS) until every live worker has pushed its last clock, so
     * the final evaluation sees the final model. BSP's model for the last
     * clock is final by construction. */
    bool final_wait;
    /* One exchange per clock (zps_client_exchange): the push of clock t and
     * the pull of t + 1 in one message each way; off: a push and a pull. */
    bool exchange;
    /* Gradients and parameters as bfloat16 on the wire, gradients with
     * error feedback (zps_client_opts_t.wire_bf16); off: float32. */
    bool wire_bf16;
    /* Ask each server for a shared-memory session (zps_client_opts_t.shm):
     * servers on this host then move the bytes through shared memory. */
    bool shm;
    /* --data-assignment shared (docs/worker.md): under SSP and ASP this
     * worker's batches are leased from shard 0, a few ahead, in the order
     * of the run's batches, and it stops when none is left (epochs, not
     * clocks, fix the run's length); under BSP, and off, rank r computes
     * its fixed share (data.h). An evaluator observes the model of clock t
     * as the one after t * W pushes. */
    bool shared;

    /* reporting */
    uint64_t eval_every;        /* evaluate every K clocks (0: only at the end) */
    const char *metrics_path;   /* JSON lines; NULL: none */
    const char *metrics_listen; /* HOST:PORT of a Prometheus endpoint (prom.h); NULL: none */
    const char *save_params;    /* the final parameters, raw little-endian float32; NULL: none */
    bool progress;              /* progress line on stderr */
    double progress_interval_s; /* period of plain progress lines when stderr is no tty */
} zps_trainer_config_t;

/* No servers, rank 0 of 1, fashion-mnist from /usr/share/datasets/fashion-mnist,
 * batch 64, 1 epoch, seed 1, backend auto, 1 BLAS thread, timeout -1,
 * optimizer defaults of zps_opt_config_default, no padding or stragglers,
 * final_wait on, exchange on, rank 0 evaluates, progress on, 10 s lines. */
void zps_trainer_config_default(zps_trainer_config_t *cfg);

typedef struct zps_trainer_result {
    uint64_t clocks;      /* iterations run */
    uint64_t examples;    /* training examples this process computed gradients on */
    double seconds;       /* training loop, evaluations included */
    double train_seconds; /* training loop without evaluations */
    bool evaluated;       /* `final` holds the final evaluation */
    zps_eval_t final;
    char backend[160]; /* the backend's description */
} zps_trainer_result_t;

/*
 * Runs training as configured. Blocks until done. Returns 0, or a ZPS_E*
 * code after logging a one-line reason (bad configuration: ZPS_EINVAL; data
 * files: ZPS_EIO/ZPS_EDATA/ZPS_ECORRUPT; a backend that cannot run:
 * ZPS_ENODEV; a diverged loss: ZPS_ENONFINITE; any client error). *res is
 * written on success (may be NULL).
 */
int zps_trainer_run(const zps_trainer_config_t *cfg, zps_trainer_result_t *res);

#endif
