/*
 * prom.c - a worker's metrics in Prometheus' text format; see prom.h.
 */
#include "prom.h"

#include <math.h>
#include <string.h>

static const char *const part_names[ZPS_PROM_PARTS] = {
    "data", "forward", "backward", "copy", "pull", "push", "update", "pad", "delay",
};

void zps_prom_init(zps_prom_t *p, int rank)
{
    memset(p, 0, sizeof(*p));
    p->rank = rank;
}

void zps_prom_step(zps_prom_t *p, const zps_step_record_t *r)
{
    const double ms[ZPS_PROM_PARTS] = {
        r->data_ms, r->forward_ms, r->backward_ms, r->copy_ms,  r->pull_ms,
        r->push_ms, r->update_ms,  r->pad_ms,      r->delay_ms,
    };
    for (int i = 0; i < ZPS_PROM_PARTS; i++)
        p->part_s[i] += ms[i] / 1e3;
    p->step_s += r->step_ms / 1e3;
    p->steps++;
    p->examples += r->batch;
    p->dropped += r->dropped;
    p->have_step = true;
    p->clock = r->clock + 1;
    p->loss = r->loss;
    p->clock_lag = r->clock_lag;
}

void zps_prom_eval(zps_prom_t *p, const zps_eval_record_t *r)
{
    p->evals++;
    p->have_eval = true;
    p->test_loss = r->loss;
    p->test_accuracy = r->accuracy;
}

static void series(zps_strbuf_t *b, const zps_prom_t *p, const char *name, const char *type,
                   const char *help, double v)
{
    zps_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s{rank=\"%d\"} %.17g\n", name, help, name,
                      type, name, p->rank, v);
}

void zps_prom_text(const zps_prom_t *p, zps_strbuf_t *b)
{
    series(b, p, "zps_worker_steps_total", "counter", "Steps (clocks) this worker has taken.",
           (double)p->steps);
    series(b, p, "zps_worker_examples_total", "counter", "Training examples this worker has used.",
           (double)p->examples);
    series(b, p, "zps_worker_pushes_dropped_total", "counter",
           "Pushes the servers acknowledged as too late for their step.", (double)p->dropped);
    series(b, p, "zps_worker_step_duration_seconds_total", "counter", "Seconds of whole steps.",
           p->step_s);
    zps_strbuf_printf(b, "# HELP zps_worker_step_seconds_total Seconds of each part of the steps.\n"
                         "# TYPE zps_worker_step_seconds_total counter\n");
    for (int i = 0; i < ZPS_PROM_PARTS; i++)
        zps_strbuf_printf(b, "zps_worker_step_seconds_total{rank=\"%d\",part=\"%s\"} %.9f\n",
                          p->rank, part_names[i], p->part_s[i]);
    if (p->have_step) {
        series(b, p, "zps_worker_next_clock", "gauge", "The clock this worker computes next.",
               (double)p->clock);
        series(b, p, "zps_worker_loss", "gauge", "Mean training loss of the last step's batch.",
               p->loss);
        series(b, p, "zps_worker_pull_clock_lag_clocks", "gauge",
               "Clocks between the last step's clock and the slowest worker's, at its pull.",
               (double)p->clock_lag);
    }
    series(b, p, "zps_worker_evaluations_total", "counter", "Test-set evaluations.",
           (double)p->evals);
    if (p->have_eval) {
        series(b, p, "zps_worker_test_loss", "gauge", "Mean test loss of the last evaluation.",
               p->test_loss);
        if (!isnan(p->test_accuracy))
            series(b, p, "zps_worker_test_accuracy", "gauge",
                   "Test accuracy of the last evaluation.", p->test_accuracy);
    }
}
