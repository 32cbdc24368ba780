/*
 * runstats.h - what `zps launch` learns about a run, and what it concludes:
 * it is fed the workers' metrics lines and the servers' STATS replies, and
 * computes the live progress figures, summary.json and the tables the plots
 * are drawn from. No I/O except zps_runstats_write_tables; no processes.
 *
 * Definitions (docs/launch.md repeats them for readers of summary.json):
 *   training start   worker 0's training loop start (its metrics' wall - elapsed)
 *   training end     the final evaluation: when the final model existed (else the
 *                    last step of any worker)
 *   train_seconds    end - start
 *   evaluations      the evaluator's (zps_runstats_add_eval_line), or worker 0's
 *   seconds_to_target[a]   seconds from the training start to the model of the
 *                    first evaluation with test accuracy >= a (null if none)
 *   examples_per_second    examples of every worker's steps that ended by the
 *                    training end, over train_seconds
 *   pull_wait_share  sum of pull_ms over sum of step_ms, all workers, same steps
 *   update_staleness the servers' histograms of applied pushes' update
 *                    staleness (updates applied between the version a gradient
 *                    was computed on and the one it lands on), summed over
 *                    shards (p50, p99, max, mean)
 *   clock_lag        the workers' step lines' clock lag (clocks: a step's clock
 *                    minus the min_clock its pull saw), same steps as above
 *                    (p50, p99, max, mean); the SSP bound s caps it at s
 *   pushes_dropped   steps whose push came back dropped (worker side)
 *
 * Not thread-safe: one owner. Nothing blocks but zps_runstats_write_tables
 * (file I/O). Lines and STATS replies are parsed when added; the caller
 * keeps ownership of the strings it passes.
 *
 * Not here: starting processes and reading their files (tool/launch.c);
 * writing the metrics lines (worker/metrics.h) and the STATS replies
 * (server/); the histogram arithmetic (common/hist.h).
 */
#ifndef ZPS_RUNSTATS_H
#define ZPS_RUNSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zps_runstats zps_runstats_t;

/* A run of `workers` workers and `servers` shards, nothing seen yet. Returns 0,
 * ZPS_EINVAL (0 workers or servers) or ZPS_ENOMEM; *out written only on success. */
int zps_runstats_new(uint32_t workers, uint32_t servers, zps_runstats_t **out);
void zps_runstats_free(zps_runstats_t *rs); /* NULL is a no-op */

/*
 * One metrics line (a JSON object, no newline needed) of worker `rank`.
 * "run", "step" and "eval" lines are used, others ignored. Returns 0,
 * ZPS_EINVAL (not a JSON object, or rank out of range) or ZPS_ENOMEM.
 */
int zps_runstats_add_line(zps_runstats_t *rs, uint32_t rank, const char *line);

/*
 * One metrics line of the evaluator (zps-worker --evaluator): its "eval"
 * lines are the run's evaluations, placed on the training's time line by
 * their wall clock; other lines are ignored. Returns 0, ZPS_EINVAL or
 * ZPS_ENOMEM.
 */
int zps_runstats_add_eval_line(zps_runstats_t *rs, const char *line);

/* The latest STATS reply of shard `shard` (replaces the previous one). Same returns. */
int zps_runstats_add_server(zps_runstats_t *rs, uint32_t shard, const char *json);

/* Figures for the progress line, at wall-clock time `now` (seconds since the epoch). */
typedef struct zps_runstats_live {
    uint64_t clock_min, clock_max; /* steps done by the slowest and fastest worker */
    uint64_t clocks;               /* clocks each worker runs (0 until known) */
    double examples_per_second;    /* all workers, over the last 5 s */
    double loss;                   /* mean step loss over the last 5 s (NaN: none) */
    double test_accuracy;          /* latest evaluation (NaN: none yet) */
    uint64_t test_clock;
    bool have_update_staleness;
    uint64_t update_staleness_p50, update_staleness_max; /* updates, all shards so far */
    bool have_clock_lag;
    uint64_t clock_lag_max; /* clocks, every worker's steps so far */
    double seconds;         /* since training start (0 before) */
} zps_runstats_live_t;

/* Fills *out from what has been added so far. Never fails. */
void zps_runstats_live(const zps_runstats_t *rs, double now, zps_runstats_live_t *out);

/* What the launcher knows that the metrics do not. */
typedef struct zps_run_info {
    const char *name;
    const char *mode; /* "bsp", "ssp", "asp" */
    uint32_t staleness_bound;
    uint32_t backup_workers;
    const char *lr_staleness; /* NULL: not set */
    double delay_comp;        /* the servers' --delay-compensation lambda; 0: off */
    double stop_at;           /* --stop-at ACC; 0: none */
    const char *stop_reason;  /* "target" when --stop-at stopped it; NULL: it ran to its end */
    bool shared;              /* the batches were shared (--data-assignment shared, not BSP) */
    const double *targets;    /* accuracy targets for seconds_to_target */
    size_t target_count;
    double wall_seconds;            /* the launcher's whole run, first spawn to last exit */
    const char *status;             /* "ok", "failed", "interrupted", "timeout" */
    const char *failed;             /* the process that failed, or NULL */
    const char *const *server_args; /* flags every server got beyond the cluster's */
    size_t server_arg_count;
    const char *const *environment; /* the launcher's ZPS_* variables, NAME=VALUE */
    size_t environment_count;
} zps_run_info_t;

/* summary.json's text (one object, pretty enough to read); malloc'd (caller
 * frees), NULL on ENOMEM. `info` is only read. */
char *zps_runstats_summary(const zps_runstats_t *rs, const zps_run_info_t *info);

/* Headline figures, for the launcher's last line. NaN where unknown. */
typedef struct zps_runstats_result {
    double final_accuracy, final_loss;
    uint64_t final_clock;
    double train_seconds;
    double examples_per_second;
} zps_runstats_result_t;
void zps_runstats_result(const zps_runstats_t *rs, zps_runstats_result_t *out);

/*
 * The first evaluation whose test accuracy reached `target`: true with the
 * seconds from the training start to its model and its clock; false if none.
 */
bool zps_runstats_target(const zps_runstats_t *rs, double target, double *seconds, uint64_t *clock);

/*
 * Writes the tables into the run folder `dir` (tab-separated, a '#' header line each):
 *   eval.tsv       elapsed_s clock epoch test_accuracy test_loss
 *   loss.tsv       clock epoch mean_loss workers        (mean over the workers' steps at a clock)
 *   update_staleness.tsv  update_staleness count share  (servers' histogram, summed over shards)
 *   workers.tsv    rank compute_s pad_s delay_s pull_s push_s other_s steps dropped
 *   summary.tsv    summary.json's headline figures as one row (for scripts without
 *                  a JSON reader): name status mode staleness_bound backup_workers
 *                  lr_staleness workers servers base_step_ms final_test_accuracy
 *                  train_seconds wall_seconds examples_per_second pull_wait_share
 *                  update_staleness_p50 update_staleness_p99 update_staleness_max
 *                  pushes_dropped, then
 *                  seconds_to_<target> per target; "NA" where unknown
 * Each is a new file in the directory descriptor `dir` (the run folder,
 * launch_rundir.h), made with O_EXCL|O_NOFOLLOW: a table that exists
 * already, or a link planted under its name, is not written.
 * Returns 0 or ZPS_EIO (a table that could not be written; the others are
 * still tried). Blocks on the file system.
 */
int zps_runstats_write_tables(const zps_runstats_t *rs, const zps_run_info_t *info, int dir);

struct zps_json;
/*
 * The compute time of one step record of a worker's metrics (a parsed
 * "step" line), in ms: data, forward, backward, the cuda backend's
 * host-device copies, and --local's update; a missing field counts 0. The
 * one definition the summary's compute_s and zps top's split share.
 */
double zps_runstats_compute_ms(const struct zps_json *step);

#endif
