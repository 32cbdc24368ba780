/*
 * metrics.h - what a training process reports: the JSON-lines metrics
 * stream (one object per line, for machines) and the one-line progress
 * display on stderr (for people).
 *
 * The metrics file holds three kinds of line, told apart by "type":
 *   "run"   once at the start: the configuration (written by the trainer),
 *   "step"  one per clock: timings, loss, batch, clock lag,
 *   "eval"  one per evaluation on the test set.
 * The field list is in docs/worker.md. Times are milliseconds unless the
 * name says seconds; "wall" is seconds since the Unix epoch and "elapsed"
 * seconds since the trainer started. Numbers are printed with enough digits
 * to read back what was computed; NaN (accuracy of a regression) is null.
 *
 * Not thread-safe; one writer per process. Every record is written and
 * flushed before its call returns, so the calls block on the file system.
 *
 * Not here: what the numbers are measured from (worker/trainer.c); reading
 * the lines back into a run's figures (tool/runstats.h); log records
 * (common/log.h).
 */
#ifndef ZPS_METRICS_H
#define ZPS_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct zps_step_record {
    int rank;
    uint64_t clock;     /* global iteration t */
    uint64_t epoch;     /* t / S; with a shared assignment the batch's epoch, g / B */
    uint64_t step;      /* t % S; with a shared assignment the batch's place in it, g % B */
    bool shared;        /* the batch was leased (a shared assignment): batch_id is set */
    uint64_t batch_id;  /* its number in the run, g = epoch * B + step */
    double wall;        /* seconds since the epoch, at the end of the step */
    double elapsed;     /* seconds since the trainer started */
    double loss;        /* mean loss over this step's batch */
    uint64_t batch;     /* examples in this step's batch */
    uint64_t version;   /* model version the pull returned (lowest over shards) */
    uint64_t clock_lag; /* clocks: clock - min_clock seen at the pull, never negative */
    double data_ms;     /* index lookup and gathering the batch */
    double forward_ms;  /* forward pass and loss */
    double backward_ms; /* backward pass down to the host gradient */
    double copy_ms;     /* host<->device copies inside the backend (cuda) */
    double pull_ms;     /* waiting for the pull (includes BSP barrier time) */
    double push_ms;     /* the push, until every shard acknowledged */
    double update_ms;   /* --local: the optimizer step; 0 when distributed */
    double pad_ms;      /* sleeping to pad compute to the base step time (measured) */
    double delay_ms;    /* sleeping for the injected straggler delay (measured) */
    /* The straggler schedule's parts of this step's delay, as asked (straggler.h). */
    double slowdown_ms;
    double intermittent_ms;
    double fixed_delay_ms;
    double random_delay_ms;
    double pause_ms;
    bool dropped;   /* the push came back dropped as too late (BSP backup workers) */
    double step_ms; /* the whole iteration */
} zps_step_record_t;

typedef struct zps_eval_record {
    int rank;
    uint64_t clock; /* parameters after `clock` optimizer steps */
    double epoch;   /* clock / S, as a fraction of epochs */
    double wall;
    double elapsed;
    double loss;     /* mean test loss */
    double accuracy; /* NaN for regression */
    uint64_t n;      /* test examples */
    double eval_ms;
    bool final; /* the evaluation at the end of training */
    /* An evaluator's record (rank -1): the shards' model versions it read,
     * lowest and highest (equal when the model is one version). */
    bool have_versions;
    uint64_t version_min, version_max;
} zps_eval_record_t;

typedef struct zps_metrics zps_metrics_t;

/*
 * Opens (truncates) `path` for writing. Returns 0, ZPS_EIO (with errno's
 * text in err) or ZPS_ENOMEM; *out written only on success.
 */
int zps_metrics_open(const char *path, zps_metrics_t **out, char *err, size_t err_size);
/* Flushes, closes and frees; returns 0 or ZPS_EIO if anything failed to be
 * written. NULL: 0. */
int zps_metrics_close(zps_metrics_t *m);

/* Each writes one line, flushed, and returns 0, ZPS_EIO (this or an earlier
 * write failed) or ZPS_ENOMEM. The record is only read. `m` may be NULL (then
 * they do nothing and return 0). */
int zps_metrics_step(zps_metrics_t *m, const zps_step_record_t *r);
int zps_metrics_eval(zps_metrics_t *m, const zps_eval_record_t *r);
/* `json` is one complete JSON object without the newline. */
int zps_metrics_raw(zps_metrics_t *m, const char *json);

/*
 * The progress line. On a terminal it is redrawn in place (\r) at most
 * every 100 ms; otherwise a plain line is printed every `interval_s`
 * seconds. zps_progress_break ends a drawn line before other output (a log
 * record, the final result).
 */
typedef struct zps_progress {
    FILE *f;
    bool tty;
    bool drawn; /* a \r line is on screen without a newline */
    bool enabled;
    double interval_s; /* non-tty period */
    uint64_t last_ns;
} zps_progress_t;

/* Fills *p for stream f (not owned); whether f is a terminal is asked once, here. */
void zps_progress_init(zps_progress_t *p, FILE *f, bool enabled, double interval_s);
/* Shows `line` if it is time to (or `force`); returns whether it did. */
bool zps_progress_show(zps_progress_t *p, const char *line, bool force);
/* Ends a line drawn in place with a newline; does nothing otherwise. */
void zps_progress_break(zps_progress_t *p);

#endif
