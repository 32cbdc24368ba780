/*
 * prom.h - a worker's figures in the Prometheus text exposition format, for
 * `zps-worker --metrics-listen HOST:PORT` (common/metrics_http.h serves
 * them).
 *
 * The trainer feeds every step record (metrics.h) and every evaluation in;
 * the text says how far the worker is and where its time goes: steps and
 * examples, the seconds of each part of a step (data, forward, backward,
 * device copies, pull wait, push, --local's update, padding, injected
 * delay) as counters, the last loss, clock lag and test accuracy as gauges.
 * Every series is labelled rank="R" (-1: the evaluator). The names are an
 * external interface; docs/operations.md lists them.
 *
 * Pure: no sockets, no clocks. Not here: the JSON lines of --metrics
 * (metrics.c), serving the text (common/metrics_http.c).
 */
#ifndef ZPS_PROM_H
#define ZPS_PROM_H

#include <stdbool.h>
#include <stdint.h>

#include "metrics.h"
#include "strbuf.h"

/* The parts of a step, as counted in zps_worker_step_seconds_total{part}. */
enum {
    ZPS_PROM_DATA,
    ZPS_PROM_FORWARD,
    ZPS_PROM_BACKWARD,
    ZPS_PROM_COPY,
    ZPS_PROM_PULL,
    ZPS_PROM_PUSH,
    ZPS_PROM_UPDATE,
    ZPS_PROM_PAD,
    ZPS_PROM_DELAY,
    ZPS_PROM_PARTS,
};

typedef struct zps_prom {
    int rank;
    uint64_t steps, examples, dropped;
    double step_s;                 /* whole steps */
    double part_s[ZPS_PROM_PARTS]; /* by part */
    bool have_step;
    uint64_t clock;     /* the last step's clock + 1 */
    double loss;        /* the last step's */
    uint64_t clock_lag; /* the last step's */
    uint64_t evals;
    bool have_eval;
    double test_loss, test_accuracy; /* the last evaluation's */
} zps_prom_t;

void zps_prom_init(zps_prom_t *p, int rank);

/* Counts one step. */
void zps_prom_step(zps_prom_t *p, const zps_step_record_t *r);

/* Notes one evaluation. */
void zps_prom_eval(zps_prom_t *p, const zps_eval_record_t *r);

/* Appends the text exposition of everything counted so far. */
void zps_prom_text(const zps_prom_t *p, zps_strbuf_t *b);

#endif
