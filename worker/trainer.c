/*
 * trainer.c - the training loops of zps-worker; see trainer.h.
 *
 * One iteration, distributed:   pull(t) -> batch -> forward/backward -> pad, delay -> push(t)
 * One iteration, --local:       per simulated worker: batch -> forward/backward, into the
 *                               weighted mean (mean.h) -> pad, delay -> optimizer step
 * Both time every phase and write one metrics line per clock. "pad, delay"
 * sleeps: up to the base step time, then the straggler schedule's delay
 * (straggler.h), so a slow step is slow where a slow computation would be.
 */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zps/zps.h"
#include "data.h"
#include "error.h"
#include "json.h"
#include "log.h"
#include "mean.h"
#include "metrics.h"
#include "metrics_http.h"
#include "model.h"
#include "prom.h"
#include "strbuf.h"
#include "timeutil.h"

/* Evaluation runs in chunks of this many examples (whatever the batch). */
#define EVAL_CHUNK 1024

/*
 * A shared assignment's worker holds this many leases: the batch it
 * computes and two ahead, so a lease never costs it a round trip of its
 * own (each exchange asks for the next), and at the end of an epoch a slow
 * worker keeps no more than two batches the fast ones could have taken.
 */
#define SHARED_LEASES 3

typedef struct trainer {
    const zps_trainer_config_t *cfg;
    zps_dataset_t train, test;
    zps_model_t model;
    char model_spec[256];
    zps_partition_t part;
    zps_data_order_t order;
    bool have_order;
    zps_backend_t *be;
    zps_metrics_t *metrics;
    zps_progress_t progress;
    zps_metrics_http_t *endpoint; /* --metrics-listen, or NULL */
    zps_prom_t prom;              /* what it serves */
    uint64_t published_ns;        /* when the text was last handed to it */

    /* the staging area for one step's batch, [max_batch] examples */
    size_t max_batch;
    uint32_t *idx;
    float *x;
    int32_t *label;
    float *target;

    uint64_t clocks;   /* K */
    bool shared;       /* a shared data assignment is in force (cfg->shared, not BSP) */
    uint64_t shared_clock; /* with it: the clock this worker stopped at */
    double shared_epoch;   /* with it: where in the run the last batch computed was, in epochs */
    bool evaluates;    /* this process evaluates the test set */
    uint64_t loop_ns;  /* start of the training loop */
    uint64_t eval_ns;  /* time spent evaluating */
    uint64_t examples; /* examples computed on */

    /* progress: means since the last shown line */
    double loss_sum;
    uint64_t loss_count;
    double shown_loss; /* the mean loss on the line shown last */
    double pull_ms_sum, push_ms_sum;
    bool have_eval;
    zps_eval_t last_eval;
    zps_eval_t final_eval;
} trainer_t;

/* Hands --metrics-listen's endpoint the figures so far: at most every 250 ms, unless forced. */
static void publish(trainer_t *T, bool force)
{
    if (!T->endpoint)
        return;
    uint64_t now = zps_now_ns();
    if (!force && now - T->published_ns < 250000000ull)
        return;
    T->published_ns = now;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_prom_text(&T->prom, &b);
    char *text = zps_strbuf_take(&b);
    if (text)
        zps_metrics_http_publish(T->endpoint, text, strlen(text));
    free(text);
}

void zps_trainer_config_default(zps_trainer_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->rank = 0;
    cfg->workers = 1;
    cfg->timeout_ms = -1;
    cfg->wait_log_ms = 10000;
    cfg->data = "fashion-mnist";
    cfg->data_dir = ZPS_FASHION_MNIST_DIR;
    cfg->batch = 64;
    cfg->epochs = 1;
    cfg->seed = 1;
    cfg->backend = "auto";
    cfg->blas_threads = 1;
    zps_opt_config_default(&cfg->opt);
    zps_straggler_config_default(&cfg->straggler);
    cfg->final_wait = true;
    cfg->exchange = true;
    cfg->shm = true;
    cfg->evaluate = true;
    cfg->progress = true;
    cfg->progress_interval_s = 10.0;
}

static double ms_since(uint64_t t0)
{
    return (double)(zps_now_ns() - t0) / 1e6;
}

static double elapsed_s(const trainer_t *T)
{
    return (double)(zps_now_ns() - T->loop_ns) / 1e9;
}

/* ---- setup ---- */

static int load(trainer_t *T)
{
    const zps_trainer_config_t *cfg = T->cfg;
    char err[512];
    int rc;

    if (cfg->workers == 0 || cfg->rank >= cfg->workers) {
        zps_error("rank %u is not below the worker count %u", cfg->rank, cfg->workers);
        return ZPS_EINVAL;
    }
    if (cfg->batch == 0) {
        zps_error("the batch size must be at least 1");
        return ZPS_EINVAL;
    }
    uint64_t t0 = zps_now_ns();
    /* An evaluator trains on nothing and a worker that does not evaluate
     * tests nothing: what a process does not use is read for its shape.
     * The training set is only gathered (gather below): kept as bytes. */
    unsigned parts =
        (cfg->evaluator ? 0 : ZPS_DATA_TRAIN | ZPS_DATA_BYTES) | (T->evaluates ? ZPS_DATA_TEST : 0);
    rc = zps_dataset_open_parts(cfg->data, cfg->data_dir, cfg->seed, parts, &T->train, &T->test,
                                err, sizeof(err));
    if (rc) {
        zps_error("data: %s", err);
        return rc;
    }
    const char *what = !(parts & ZPS_DATA_TEST)    ? "the training set loaded"
                       : !(parts & ZPS_DATA_TRAIN) ? "the test set loaded"
                                                   : "loaded";
    zps_info("data %s: %llu training and %llu test examples of %u features, %s in %.2f s",
             cfg->data, (unsigned long long)T->train.n, (unsigned long long)T->test.n, T->train.dim,
             what, ms_since(t0) / 1e3);

    const char *spec = cfg->model;
    char def[64];
    if (!spec) {
        /* The natural model for the data: the MLP for images, the
         * generating model's shape for regression. */
        if (T->train.classes > 0)
            snprintf(def, sizeof(def), "mlp:%u-256-128-%u", T->train.dim, T->train.classes);
        else
            snprintf(def, sizeof(def), "linear:%u", T->train.dim);
        spec = def;
    }
    if ((rc = zps_model_parse(spec, &T->model, err, sizeof(err))) != 0 ||
        (rc = zps_model_check_data(&T->model, &T->train, err, sizeof(err))) != 0) {
        zps_error("%s", err);
        return rc;
    }
    zps_model_format(&T->model, T->model_spec, sizeof(T->model_spec));

    rc = zps_partition_init(&T->part, T->train.n, cfg->workers, cfg->batch, cfg->seed);
    if (rc) {
        zps_error("cannot split %llu examples among %u workers (need at least one each)",
                  (unsigned long long)T->train.n, cfg->workers);
        return rc;
    }
    if ((rc = zps_data_order_init(&T->order, &T->part)) != 0)
        return rc;
    T->have_order = true;
    T->clocks = cfg->clocks ? cfg->clocks : cfg->epochs * T->part.steps;
    if (T->clocks == 0) {
        zps_error("nothing to do: 0 clocks");
        return ZPS_EINVAL;
    }
    return 0;
}

static int make_backend(trainer_t *T)
{
    const zps_trainer_config_t *cfg = T->cfg;
    uint64_t per_worker = zps_partition_max_batch(&T->part);
    /* --local computes one simulated worker's batch at a time, too. */
    uint64_t mb = per_worker;
    if (mb > T->train.n)
        mb = T->train.n;
    T->max_batch = (size_t)mb;
    T->idx = malloc(T->max_batch * sizeof(uint32_t));
    T->x = malloc(T->max_batch * T->train.dim * sizeof(float));
    T->label = malloc(T->max_batch * sizeof(int32_t));
    T->target = malloc(T->max_batch * sizeof(float));
    if (!T->idx || !T->x || !T->label || !T->target) {
        zps_error("out of memory for a batch of %zu", T->max_batch);
        return ZPS_ENOMEM;
    }

    zps_backend_opts_t bo;
    zps_backend_opts_default(&bo);
    bo.max_batch = T->max_batch;
    if (T->evaluates && bo.max_batch < EVAL_CHUNK)
        bo.max_batch = EVAL_CHUNK;
    bo.blas_threads = cfg->blas_threads;
    bo.device = cfg->device;
    char err[512];
    int rc = zps_backend_new(cfg->backend, &T->model, &bo, &T->be, err, sizeof(err));
    if (rc) {
        zps_error("backend: %s", err);
        return rc;
    }
    zps_info("model %s: %llu parameters; backend %s", T->model_spec,
             (unsigned long long)T->model.nparams, zps_backend_describe(T->be));
    return 0;
}

/* The run line's step-time settings: what this rank was asked to do. */
static void write_straggler(zps_strbuf_t *b, const zps_trainer_config_t *cfg)
{
    const zps_straggler_config_t *sc = &cfg->straggler;
    uint32_t rank = cfg->local ? 0 : cfg->rank;
    bool on = zps_straggler_applies(sc, rank);
    char desc[256];
    zps_strbuf_printf(b, "\"base_step_ms\":%.9g,\"straggler\":", sc->base_step_ms);
    zps_strbuf_json_string(b, zps_straggler_describe(sc, rank, desc, sizeof(desc)));
    zps_strbuf_printf(b,
                      ",\"straggler_applies\":%s,\"slowdown\":%.9g,\"intermittent_k\":%.9g,"
                      "\"intermittent_p\":%.9g,\"fixed_delay_ms\":%.9g,\"random_delay\":\"%s\","
                      "\"random_delay_mean_ms\":%.9g,",
                      on ? "true" : "false", on ? sc->slowdown : 1.0, on ? sc->intermittent_k : 1.0,
                      on ? sc->intermittent_p : 0.0, on ? sc->fixed_ms : 0.0,
                      !on || sc->dist == ZPS_DELAY_NONE ? "none"
                      : sc->dist == ZPS_DELAY_EXP       ? "exp"
                                                        : "uniform",
                      on ? sc->mean_ms : 0.0);
    if (on && sc->pause)
        zps_strbuf_printf(b, "\"pause_clock\":%llu,\"pause_ms\":%.9g,",
                          (unsigned long long)sc->pause_clock, sc->pause_ms);
    zps_strbuf_printf(b, "\"straggler_seed\":%llu,", (unsigned long long)sc->seed);
}

/* The "run" line: everything needed to interpret (or repeat) the stream. */
static int write_run_header(trainer_t *T)
{
    const zps_trainer_config_t *cfg = T->cfg;
    if (!T->metrics)
        return 0;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "{\"type\":\"run\",\"mode\":\"%s\",\"rank\":%u,\"workers\":%u,",
                      cfg->local       ? "local"
                      : cfg->evaluator ? "evaluator"
                                       : "distributed",
                      cfg->rank, cfg->workers);
    zps_strbuf_printf(&b, "\"model\":");
    zps_strbuf_json_string(&b, T->model_spec);
    zps_strbuf_printf(&b, ",\"params\":%llu,\"data\":", (unsigned long long)T->model.nparams);
    zps_strbuf_json_string(&b, cfg->data);
    zps_strbuf_printf(&b,
                      ",\"train_examples\":%llu,\"test_examples\":%llu,\"batch\":%u,"
                      "\"steps_per_epoch\":%llu,\"clocks\":%llu,\"seed\":%llu,\"backend\":",
                      (unsigned long long)T->train.n, (unsigned long long)T->test.n, cfg->batch,
                      (unsigned long long)T->part.steps, (unsigned long long)T->clocks,
                      (unsigned long long)cfg->seed);
    zps_strbuf_json_string(&b, zps_backend_describe(T->be));
    zps_strbuf_printf(&b, ",\"blas_threads\":%d,\"eval_every\":%llu,", cfg->blas_threads,
                      (unsigned long long)cfg->eval_every);
    write_straggler(&b, cfg);
    if (cfg->local) {
        zps_strbuf_printf(&b, "\"optimizer\":");
        zps_strbuf_json_string(&b, zps_opt_name(&cfg->opt));
        zps_strbuf_printf(&b,
                          ",\"lr\":%.9g,\"momentum\":%.9g,\"nesterov\":%s,\"weight_decay\":%.9g,"
                          "\"schedule\":",
                          cfg->opt.lr, cfg->opt.momentum, cfg->opt.nesterov ? "true" : "false",
                          cfg->opt.weight_decay);
        zps_strbuf_json_string(&b, zps_sched_name(cfg->opt.schedule));
        zps_strbuf_printf(&b, ",\"warmup\":%llu,", (unsigned long long)cfg->opt.warmup);
    } else {
        zps_strbuf_printf(&b, "\"servers\":[");
        for (size_t i = 0; i < cfg->server_count; i++) {
            if (i)
                zps_strbuf_printf(&b, ",");
            zps_strbuf_json_string(&b, cfg->servers[i]);
        }
        zps_strbuf_printf(&b, "],");
    }
    zps_strbuf_printf(&b, "\"wall\":%.6f}", zps_wall_seconds());
    char *line = zps_strbuf_take(&b);
    if (!line)
        return ZPS_ENOMEM;
    int rc = zps_metrics_raw(T->metrics, line);
    free(line);
    return rc;
}

/* ---- one step's pieces ---- */

/* Gathers worker w's batch for (epoch, step) into the staging area; returns its size. */
static size_t gather(trainer_t *T, uint64_t epoch, uint64_t step, uint32_t w)
{
    size_t n = zps_data_order_batch(&T->order, epoch, w, step, T->idx);
    ZPS_ASSERT(n <= T->max_batch);
    zps_dataset_gather(&T->train, T->idx, n, T->x, T->label, T->target);
    return n;
}

/* Gathers batch g of a shared assignment (data.h) into the staging area; returns its size. */
static size_t gather_shared(trainer_t *T, uint64_t g)
{
    size_t n = zps_data_order_shared(&T->order, g, T->idx);
    ZPS_ASSERT(n <= T->max_batch);
    zps_dataset_gather(&T->train, T->idx, n, T->x, T->label, T->target);
    return n;
}

static void show_progress(trainer_t *T, uint64_t clock, bool force)
{
    if (!T->cfg->progress)
        return;
    char line[256], who[32];
    if (T->cfg->local)
        snprintf(who, sizeof(who), "[local]");
    else if (T->cfg->evaluator)
        snprintf(who, sizeof(who), "[evaluator]");
    else
        snprintf(who, sizeof(who), "[worker %u]", T->cfg->rank);
    double el = elapsed_s(T);
    double train_s = el - (double)T->eval_ns / 1e9;
    double rate = train_s > 0 ? (double)T->examples / train_s : 0.0;
    if (T->loss_count)
        T->shown_loss = T->loss_sum / (double)T->loss_count;
    /* A shared assignment's worker runs as many clocks as it gets batches:
     * its progress is its last batch's place in the run. */
    int len =
        T->shared && !T->cfg->evaluator
            ? snprintf(line, sizeof(line), "%s epoch %.2f/%llu clock %llu loss %.4f %.0f ex/s",
                       who, T->shared_epoch, (unsigned long long)T->cfg->epochs,
                       (unsigned long long)clock, T->shown_loss, rate)
        : T->cfg->evaluator
            ? snprintf(line, sizeof(line), "%s epoch %.2f/%.2f clock %llu/%llu", who,
                       (double)clock / (double)T->part.steps,
                       (double)T->clocks / (double)T->part.steps, (unsigned long long)clock,
                       (unsigned long long)T->clocks)
            : snprintf(line, sizeof(line), "%s epoch %.2f/%.2f clock %llu/%llu loss %.4f %.0f ex/s",
                       who, (double)clock / (double)T->part.steps,
                       (double)T->clocks / (double)T->part.steps, (unsigned long long)clock,
                       (unsigned long long)T->clocks, T->shown_loss, rate);
    if (!T->cfg->local && T->loss_count && len > 0 && (size_t)len < sizeof(line))
        len += snprintf(line + len, sizeof(line) - (size_t)len, " pull %.1f push %.1f ms",
                        T->pull_ms_sum / (double)T->loss_count,
                        T->push_ms_sum / (double)T->loss_count);
    if (T->have_eval && len > 0 && (size_t)len < sizeof(line)) {
        if (isnan(T->last_eval.accuracy))
            snprintf(line + len, sizeof(line) - (size_t)len, " | test loss %.4f",
                     T->last_eval.loss);
        else
            snprintf(line + len, sizeof(line) - (size_t)len, " | test acc %.4f loss %.4f",
                     T->last_eval.accuracy, T->last_eval.loss);
    }
    if (zps_progress_show(&T->progress, line, force)) {
        T->loss_sum = 0;
        T->loss_count = 0;
        T->pull_ms_sum = T->push_ms_sum = 0;
    }
}

/*
 * --save-params: the final model as raw little-endian float32 (the layout of
 * model.h), for comparing runs; written by the process that evaluates.
 */
static int save_params(trainer_t *T)
{
    const char *path = T->cfg->save_params;
    if (!path)
        return 0;
    FILE *f = fopen(path, "wb");
    size_t n = T->model.nparams;
    bool ok = f && fwrite(zps_backend_params(T->be), sizeof(float), n, f) == n;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok) {
        zps_error("cannot write the parameters to %s: %s", path, strerror(errno));
        return ZPS_EIO;
    }
    return 0;
}

/*
 * Evaluates the backend's current parameters (the model after `clock`
 * steps). The record's wall and elapsed are when the evaluation began: when
 * that model existed, not when its test loss was known. `seen` (an
 * evaluator's pull, else NULL) adds the shards' model versions.
 */
static int evaluate(trainer_t *T, uint64_t clock, bool final, const zps_reply_info_t *seen)
{
    uint64_t t0 = zps_now_ns();
    double wall = zps_wall_seconds(), elapsed = elapsed_s(T);
    zps_eval_t ev;
    int rc = zps_backend_evaluate(T->be, &T->test, &ev);
    if (rc) {
        zps_progress_break(&T->progress);
        zps_error("evaluation at clock %llu failed: %s", (unsigned long long)clock,
                  zps_strerror(rc));
        return rc;
    }
    uint64_t dt = zps_now_ns() - t0;
    T->eval_ns += dt;
    T->have_eval = true;
    T->last_eval = ev;
    if (final)
        T->final_eval = ev;
    zps_eval_record_t r = {
        .rank = T->cfg->evaluator ? -1 : (int)T->cfg->rank,
        .clock = clock,
        .epoch = (double)clock / (double)T->part.steps,
        .wall = wall,
        .elapsed = elapsed,
        .loss = ev.loss,
        .accuracy = ev.accuracy,
        .n = ev.n,
        .eval_ms = (double)dt / 1e6,
        .final = final,
        .have_versions = seen != NULL,
        .version_min = seen ? seen->min_version : 0,
        .version_max = seen ? seen->max_version : 0,
    };
    zps_prom_eval(&T->prom, &r);
    publish(T, true);
    if ((rc = zps_metrics_eval(T->metrics, &r)) != 0) {
        zps_error("cannot write the metrics file");
        return rc;
    }
    show_progress(T, clock, true);
    return 0;
}

static bool eval_due(const trainer_t *T, uint64_t t)
{
    return T->evaluates && T->cfg->eval_every && t > 0 && t % T->cfg->eval_every == 0;
}

static int record_step(trainer_t *T, zps_step_record_t *r)
{
    r->rank = (int)T->cfg->rank;
    r->wall = zps_wall_seconds();
    r->elapsed = elapsed_s(T);
    T->loss_sum += r->loss;
    T->loss_count++;
    T->pull_ms_sum += r->pull_ms;
    T->push_ms_sum += r->push_ms;
    T->examples += r->batch;
    int rc = zps_metrics_step(T->metrics, r);
    if (rc)
        zps_error("cannot write the metrics file");
    zps_prom_step(&T->prom, r);
    publish(T, r->clock + 1 == T->clocks);
    /* The last step's line is forced unless the final evaluation will
     * show it anyway. */
    show_progress(T, r->clock + 1, r->clock + 1 == T->clocks && !T->evaluates);
    return rc;
}

static int train_batch(trainer_t *T, size_t n, uint64_t clock, zps_step_record_t *r)
{
    zps_batch_t b = {.n = n, .x = T->x, .label = T->label, .target = T->target};
    zps_step_stats_t st;
    int rc = zps_backend_train_step(T->be, &b, &st);
    if (rc) {
        zps_progress_break(&T->progress);
        zps_error("forward/backward at clock %llu failed: %s", (unsigned long long)clock,
                  zps_strerror(rc));
        return rc;
    }
    r->loss = st.loss;
    r->forward_ms = st.forward_ms;
    r->backward_ms = st.backward_ms;
    r->copy_ms = st.copy_ms;
    if (!isfinite(st.loss)) {
        zps_progress_break(&T->progress);
        zps_error("the loss is %g at clock %llu: training diverged (learning rate too high?)",
                  st.loss, (unsigned long long)clock);
        return ZPS_ENONFINITE;
    }
    return 0;
}

/*
 * Sleeps this step's padding and injected delay (the compute took
 * `compute_ms`) and records both, measured, with the schedule's parts.
 */
static void inject_delay(trainer_t *T, uint64_t clock, double compute_ms, zps_step_record_t *r)
{
    const zps_trainer_config_t *cfg = T->cfg;
    zps_step_delay_t d;
    zps_straggler_delay(&cfg->straggler, cfg->local ? 0 : cfg->rank, clock, compute_ms, &d);
    uint64_t t0 = zps_now_ns();
    zps_sleep_ms(d.pad_ms);
    uint64_t t1 = zps_now_ns();
    zps_sleep_ms(d.delay_ms);
    r->pad_ms = (double)(t1 - t0) / 1e6;
    r->delay_ms = ms_since(t1);
    r->slowdown_ms = d.slowdown_ms;
    r->intermittent_ms = d.intermittent_ms;
    r->fixed_delay_ms = d.fixed_ms;
    r->random_delay_ms = d.random_ms;
    r->pause_ms = d.pause_ms;
}

/* ---- the loops ---- */

/*
 * --local's gradient for clock t, into mean[nparams]: each simulated
 * worker's batch goes through the backend on its own, as that worker would
 * compute it, and the W gradients are combined with the servers' example-
 * weighted mean in rank order (mean.h). That is the gradient over the union
 * of the batches, and computed this way a BSP cluster equals --local bit for
 * bit, not just up to rounding: one gradient over the union batch rounds
 * differently, a difference of 1e-7 flips a ReLU now and then, and training
 * amplifies it (momentum with 4 workers ended 6% apart after 200 clocks).
 * Fills the record's batch, loss (the example-weighted mean) and timings.
 */
static int local_gradient(trainer_t *T, uint64_t t, uint32_t *counts, float *mean,
                          zps_step_record_t *r)
{
    const uint32_t W = T->cfg->workers;
    const float *grad = zps_backend_grad(T->be);
    zps_partition_clock(&T->part, t, &r->epoch, &r->step);
    uint64_t total = 0;
    for (uint32_t w = 0; w < W; w++) {
        uint64_t lo, hi;
        zps_partition_batch_range(&T->part, w, r->step, &lo, &hi);
        counts[w] = (uint32_t)(hi - lo);
        total += counts[w];
    }
    const float denom = zps_mean_denominator(counts, W);
    double loss = 0.0;
    for (uint32_t w = 0; w < W; w++) {
        uint64_t t0 = zps_now_ns();
        size_t n = gather(T, r->epoch, r->step, w);
        ZPS_ASSERT(n == counts[w]);
        r->data_ms += ms_since(t0);
        zps_step_record_t one = {.clock = t};
        int rc = train_batch(T, n, t, &one);
        if (rc)
            return rc;
        r->forward_ms += one.forward_ms;
        r->backward_ms += one.backward_ms;
        r->copy_ms += one.copy_ms;
        loss += one.loss * (double)n;
        uint64_t t1 = zps_now_ns();
        zps_weighted_mean_term(mean, grad, (float)counts[w], denom, w, W, T->model.nparams);
        r->update_ms += ms_since(t1);
    }
    r->batch = total;
    r->loss = loss / (double)total;
    return 0;
}

static int run_local(trainer_t *T)
{
    const zps_trainer_config_t *cfg = T->cfg;
    char why[256];
    zps_optimizer_t *opt = NULL;
    uint32_t *counts = NULL;
    float *mean = NULL;
    int rc = zps_opt_config_check(&cfg->opt, why, sizeof(why));
    if (rc) {
        zps_error("optimizer: %s", why);
        return rc;
    }
    if ((rc = zps_optimizer_new(&cfg->opt, T->model.nparams, &opt)) != 0) {
        zps_error("optimizer: %s", zps_strerror(rc));
        return rc;
    }
    counts = malloc(cfg->workers * sizeof(*counts));
    mean = malloc((T->model.nparams ? T->model.nparams : 1) * sizeof(*mean));
    if (!counts || !mean) {
        zps_error("out of memory for the mean gradient of %llu parameters",
                  (unsigned long long)T->model.nparams);
        rc = ZPS_ENOMEM;
        goto done;
    }
    float *params = zps_backend_params(T->be);
    zps_model_init_params(&T->model, cfg->seed, params);
    zps_info("local training: %u simulated workers x batch %u, %llu steps per epoch, %llu "
             "clocks, optimizer %s lr %g",
             cfg->workers, cfg->batch, (unsigned long long)T->part.steps,
             (unsigned long long)T->clocks, zps_opt_name(&cfg->opt), cfg->opt.lr);

    T->loop_ns = zps_now_ns();
    uint64_t refused = 0;
    for (uint64_t t = 0; t < T->clocks; t++) {
        if (eval_due(T, t) && (rc = evaluate(T, t, false, NULL)) != 0)
            goto done;
        uint64_t t0 = zps_now_ns();
        zps_step_record_t r = {.clock = t};
        if ((rc = local_gradient(T, t, counts, mean, &r)) != 0)
            goto done;
        inject_delay(T, t, ms_since(t0), &r);
        uint64_t t1 = zps_now_ns();
        /* As a BSP shard does: a step that would make a parameter or the
         * optimizer's state non-finite is refused whole, and the clock moves
         * on with the parameters as they were (docs/consistency.md). */
        if (zps_optimizer_step(opt, params, mean, 1.0) == ZPS_ENONFINITE) {
            refused++;
            r.dropped = true;
            if ((refused & (refused - 1)) == 0) /* the 1st, 2nd, 4th, ... */
                zps_warn("clock %llu: the step would make a parameter or the optimizer's state "
                         "non-finite: refused, parameters unchanged (%llu refused so far)",
                         (unsigned long long)t, (unsigned long long)refused);
        }
        r.update_ms += ms_since(t1);
        r.version = t;
        r.step_ms = ms_since(t0);
        if ((rc = record_step(T, &r)) != 0)
            goto done;
    }
    rc = T->evaluates ? evaluate(T, T->clocks, true, NULL) : 0;
    if (rc == 0)
        rc = save_params(T);
done:
    free(mean);
    free(counts);
    zps_optimizer_free(opt);
    return rc;
}

static int client_failed(trainer_t *T, zps_client_t *c, const char *what, uint64_t clock, int rc)
{
    zps_progress_break(&T->progress);
    zps_error("%s at clock %llu failed: %s (%s)", what, (unsigned long long)clock,
              zps_client_last_error(c), zps_errname(rc));
    return rc;
}

/*
 * Whether shard `json` (a STATS reply) still waits for some live worker's
 * last push; *bsp is set when the shard runs BSP. A reply that cannot be
 * read counts as finished (and is logged): waiting is a courtesy to the
 * final evaluation, never a reason to hang.
 */
static bool shard_waits(const char *json, uint64_t clocks, bool shared, bool *bsp)
{
    zps_json_t *st = NULL;
    char err[128];
    if (zps_json_parse(json, &st, err, sizeof(err)) != 0) {
        zps_warn("cannot read a server's STATS reply (%s); not waiting for the other workers", err);
        return false;
    }
    const char *mode = zps_json_string(zps_json_get(st, "mode"));
    const zps_json_t *pushed = zps_json_get(st, "clocks");
    const zps_json_t *live = zps_json_get(st, "live");
    const zps_json_t *finished = zps_json_get(st, "finished");
    bool waits = false;
    *bsp = mode && strcmp(mode, "bsp") == 0;
    for (size_t w = 0; !*bsp && pushed && w < pushed->count; w++) {
        const zps_json_t *l = zps_json_at(live, w);
        bool is_live = !l || l->type != ZPS_JSON_BOOL || l->boolean;
        /* Workers of a shared assignment run different numbers of clocks:
         * each says when it has finished. */
        if (shared) {
            const zps_json_t *f = zps_json_at(finished, w);
            if (is_live && !(f && f->type == ZPS_JSON_BOOL && f->boolean))
                waits = true;
        } else if (is_live && zps_json_number(zps_json_at(pushed, w), 0) < (double)clocks) {
            waits = true;
        }
    }
    zps_json_free(st);
    return waits;
}

/*
 * SSP and ASP apply pushes as they arrive: the model is final only when
 * every live worker has pushed its last clock. Polls the servers' STATS
 * until then (BSP returns at once). Honours --timeout.
 */
static int wait_for_peers(trainer_t *T, zps_client_t *c)
{
    uint64_t t0 = zps_now_ns();
    bool logged = false;
    for (;;) {
        bool waits = false, bsp = false;
        for (size_t i = 0; i < T->cfg->server_count && !waits && !bsp; i++) {
            char *json = NULL;
            int rc = zps_client_stats(c, i, &json);
            if (rc)
                return client_failed(T, c, "stats before the final evaluation", T->clocks, rc);
            waits = shard_waits(json, T->clocks, T->shared, &bsp);
            free(json);
        }
        if (!waits || bsp)
            return 0;
        if (!logged) {
            zps_progress_break(&T->progress);
            zps_info("waiting for the other workers' last pushes before the final evaluation");
            logged = true;
        }
        if (T->cfg->timeout_ms > 0 && ms_since(t0) > T->cfg->timeout_ms) {
            zps_error("the other workers did not finish within --timeout %d ms",
                      T->cfg->timeout_ms);
            return ZPS_ETIMEDOUT;
        }
        zps_sleep_ms(20);
    }
}

/* CURVE for the client's sockets, when the configuration names keys. */
static int secure_opts(const zps_trainer_config_t *cfg, zps_client_opts_t *co)
{
    if (!cfg->key_file)
        return 0;
    char why[1024];
    int rc = zps_client_opts_set_keys(co, cfg->key_file, cfg->server_key_file, why, sizeof(why));
    if (rc)
        zps_error("%s", why);
    co->no_seal = cfg->no_seal;
    return rc;
}

/*
 * Every server must count the workers this one was told of: a worker of W
 * in a cluster of another W would wait at a barrier that never opens, or
 * train on a data share that overlaps another's. Each server's STATS says
 * its --workers (`config`); another value is ZPS_ECONFIG, at once.
 */
static int check_workers(const zps_trainer_config_t *cfg, zps_client_t *client)
{
    for (size_t i = 0; i < cfg->server_count; i++) {
        char *json = NULL;
        int rc = zps_client_stats(client, i, &json);
        if (rc) {
            zps_error("asking server %zu at %s for its configuration failed: %s (%s)", i,
                      cfg->servers[i], zps_client_last_error(client), zps_errname(rc));
            return rc;
        }
        zps_json_t *o = NULL;
        double w = -1;
        if (zps_json_parse(json, &o, NULL, 0) == 0)
            w = zps_json_number(zps_json_get(zps_json_get(o, "config"), "workers"), -1);
        zps_json_free(o);
        free(json);
        if (w < 0) {
            zps_error("server %zu at %s does not say how many workers it serves", i,
                      cfg->servers[i]);
            return ZPS_EPROTO;
        }
        if (w != (double)cfg->workers) {
            zps_error("server %zu at %s serves --workers %.0f; this worker was started with "
                      "--workers %u: start every worker and server with the same count (%s)",
                      i, cfg->servers[i], w, cfg->workers, zps_errname(ZPS_ECONFIG));
            return ZPS_ECONFIG;
        }
    }
    return 0;
}

/* Whether shard 0 runs BSP (a shared assignment then keeps the fixed one), from its STATS. */
static int shard0_bsp(const zps_trainer_config_t *cfg, zps_client_t *client, bool *bsp)
{
    char *json = NULL;
    int rc = zps_client_stats(client, 0, &json);
    if (rc) {
        zps_error("asking server 0 at %s for its mode failed: %s (%s)", cfg->servers[0],
                  zps_client_last_error(client), zps_errname(rc));
        return rc;
    }
    zps_json_t *o = NULL;
    const char *mode = NULL;
    if (zps_json_parse(json, &o, NULL, 0) == 0)
        mode = zps_json_string(zps_json_get(o, "mode"));
    *bsp = mode && strcmp(mode, "bsp") == 0;
    zps_json_free(o);
    free(json);
    return 0;
}

/*
 * After the pull of clock t (its reply info, t0 when it began): the step
 * record's pull figures, then the evaluation due at t, which sees exactly
 * the parameters this clock computes on; its time is kept out of the
 * step's timings (t0 moves on by it).
 */
static int after_pull(trainer_t *T, uint64_t t, const zps_reply_info_t *info, uint64_t *t0,
                      zps_step_record_t *r)
{
    r->pull_ms = ms_since(*t0);
    r->version = info->min_version;
    r->clock_lag = t > info->min_clock ? t - info->min_clock : 0;
    if (eval_due(T, t)) {
        uint64_t te = zps_now_ns();
        int rc = evaluate(T, t, false, NULL);
        if (rc)
            return rc;
        *t0 += zps_now_ns() - te;
    }
    return 0;
}

/*
 * Sends clock t's gradient of nb examples: one exchange (the parameters
 * then hold clock t + 1's model) or a push. Its timings and whether it was
 * dropped go into r, the replies' info into *pinfo.
 */
static int send_gradient(trainer_t *T, zps_client_t *client, uint64_t t, bool exchange, size_t nb,
                         zps_reply_info_t *pinfo, zps_step_record_t *r)
{
    float *params = zps_backend_params(T->be);
    const float *grad = zps_backend_grad(T->be);
    uint64_t n = T->model.nparams;
    uint64_t t2 = zps_now_ns();
    int rc;
    if (exchange) {
        if ((rc = zps_client_exchange(client, t, grad, n, (uint32_t)nb, params, pinfo)) != 0)
            return client_failed(T, client, "exchange", t, rc);
        /* The time the shards held it for their rule is waiting for the
         * next model, as a pull's is; the rest is the transfer. */
        double total = ms_since(t2);
        double waited = (double)pinfo->waited_us / 1000.0;
        if (waited > total)
            waited = total;
        r->push_ms = total - waited;
        r->pull_ms += waited;
    } else {
        if ((rc = zps_client_push(client, t, grad, n, (uint32_t)nb, pinfo)) != 0)
            return client_failed(T, client, "push", t, rc);
        r->push_ms = ms_since(t2);
    }
    r->dropped = pinfo->dropped;
    return 0;
}

/* The leases a reply brought (when it answered a lease request) become the worker's queue. */
static void take_leases(const zps_reply_info_t *info, uint64_t *q, size_t *nq, bool *exhausted)
{
    if (!info->leased)
        return;
    memcpy(q, info->leases, info->nleases * sizeof(uint64_t));
    *nq = info->nleases;
    *exhausted = info->exhausted;
}

/* The lease request of this worker's next call: it still has q[from..nq); `done` completes. */
static void ask_leases(zps_client_t *client, zps_lease_req_t *lr, const uint64_t *q, size_t nq,
                       size_t from, uint64_t done)
{
    lr->nhave = (uint32_t)(nq - from);
    memcpy(lr->have, q + from, lr->nhave * sizeof(uint64_t));
    lr->done = done;
    int rc = zps_client_set_lease(client, lr);
    ZPS_ASSERT(rc == 0);
}

/*
 * The training loop of a shared assignment (docs/worker.md). Per clock t:
 * the oldest of this worker's leases, batch g, is computed and pushed at
 * t, the push naming g; every pull and exchange asks shard 0 for leases up
 * to SHARED_LEASES, naming those the worker still has, and its reply is
 * the worker's queue. The worker stops when it holds no lease and shard 0
 * has none left to hand out, and tells every shard (zps_client_finish).
 */
static int train_shared(trainer_t *T, zps_client_t *client)
{
    const zps_trainer_config_t *cfg = T->cfg;
    float *params = zps_backend_params(T->be);
    uint64_t n = T->model.nparams;
    uint64_t B = zps_shared_batches_per_epoch(&T->part);
    zps_lease_req_t lr = {.size = sizeof(zps_lease_req_t),
                          .examples = T->train.n,
                          .batch = cfg->batch,
                          .epochs = (uint32_t)cfg->epochs,
                          .want = SHARED_LEASES};
    uint64_t q[ZPS_CLIENT_MAX_LEASES];
    size_t nq = 0;
    bool have = false, exhausted = false;
    /* Pulls in a row whose reply carried no leases (one made again over
     * the socket after shared memory failed): asked again, a few times. */
    int unanswered = 0;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    int rc;
    uint64_t t = 0;
    for (;;) {
        uint64_t t0 = zps_now_ns();
        zps_step_record_t r = {.clock = t};
        if (!have) {
            ask_leases(client, &lr, q, nq, 0, 0);
            if ((rc = zps_client_pull(client, t, params, n, &info)) != 0)
                return client_failed(T, client, "pull", t, rc);
            take_leases(&info, q, &nq, &exhausted);
            unanswered = info.leased ? 0 : unanswered;
        }
        have = false;
        if (info.next_clock > t) {
            zps_progress_break(&T->progress);
            zps_info("the servers expect clock %llu from this worker, not %llu: resuming there",
                     (unsigned long long)info.next_clock, (unsigned long long)t);
            t = info.next_clock;
            continue;
        }
        if (nq == 0) {
            if (!info.leased && ++unanswered <= 3)
                continue;
            if (!exhausted)
                zps_warn("shard 0 handed this worker no batch and did not say none is left: "
                         "stopping");
            break;
        }
        uint64_t g = q[0];
        if ((rc = after_pull(T, t, &info, &t0, &r)) != 0)
            return rc;
        uint64_t t1 = zps_now_ns();
        r.shared = true;
        r.batch_id = g;
        r.epoch = g / B;
        r.step = g % B;
        size_t nb = gather_shared(T, g);
        r.batch = nb;
        r.data_ms = ms_since(t1);
        if ((rc = train_batch(T, nb, t, &r)) != 0)
            return rc;
        inject_delay(T, t, ms_since(t1), &r);
        zps_reply_info_t pinfo = ZPS_REPLY_INFO_INIT;
        ask_leases(client, &lr, q, nq, 1, g + 1);
        if ((rc = send_gradient(T, client, t, cfg->exchange, nb, &pinfo, &r)) != 0)
            return rc;
        if (cfg->exchange) {
            info = pinfo;
            have = true;
        }
        if (pinfo.leased) {
            take_leases(&pinfo, q, &nq, &exhausted);
        } else {
            memmove(q, q + 1, (nq - 1) * sizeof(uint64_t));
            nq--;
        }
        r.step_ms = ms_since(t0);
        T->shared_epoch = (double)(g + 1) / (double)B;
        if ((rc = record_step(T, &r)) != 0)
            return rc;
        t++;
    }
    T->shared_clock = t;
    zps_progress_break(&T->progress);
    zps_info("no batch left: %llu clocks, %llu examples; finishing", (unsigned long long)t,
             (unsigned long long)T->examples);
    if ((rc = zps_client_finish(client)) != 0)
        return client_failed(T, client, "finishing", t, rc);
    return 0;
}

static int run_distributed(trainer_t *T)
{
    const zps_trainer_config_t *cfg = T->cfg;
    if (cfg->server_count == 0) {
        zps_error("no servers: give --servers E1,E2,... (or --local)");
        return ZPS_EINVAL;
    }
    zps_client_opts_t co;
    zps_client_opts_default(&co);
    co.worker = (int)cfg->rank;
    co.timeout_ms = cfg->timeout_ms;
    co.wait_log_ms = cfg->wait_log_ms;
    co.wire_bf16 = cfg->wire_bf16;
    co.shm = cfg->shm;
    zps_client_t *client = NULL;
    int rc = secure_opts(cfg, &co);
    if (rc == 0)
        rc = zps_client_new(cfg->servers, cfg->server_count, &co, &client);
    zps_client_opts_clear(&co);
    if (rc) {
        zps_error("cannot create the client: %s", zps_strerror(rc));
        return rc;
    }
    float *params = zps_backend_params(T->be);
    uint64_t n = T->model.nparams;

    bool bsp = false;
    if ((rc = check_workers(cfg, client)) != 0 ||
        (cfg->shared && (rc = shard0_bsp(cfg, client, &bsp)) != 0))
        goto done;
    if (cfg->shared && bsp)
        zps_info("--mode bsp keeps the fixed data assignment (clock t's batch of rank r, so "
                 "that BSP equals --local): --data-assignment shared changes nothing here");
    T->shared = cfg->shared && !bsp;
    if (cfg->rank == 0) {
        zps_model_init_params(&T->model, cfg->seed, params);
        if ((rc = zps_client_init(client, params, n)) != 0) {
            zps_error("initialising the servers failed: %s (%s)", zps_client_last_error(client),
                      zps_errname(rc));
            goto done;
        }
        zps_info("initialised %zu server(s) with %llu parameters (seed %llu)", cfg->server_count,
                 (unsigned long long)n, (unsigned long long)cfg->seed);
        if (cfg->init_only)
            goto done;
    }
    if (T->shared) {
        zps_info("worker %u of %u: batch %u, %llu epochs of %llu batches shared with the "
                 "others, leased from shard 0",
                 cfg->rank, cfg->workers, cfg->batch, (unsigned long long)cfg->epochs,
                 (unsigned long long)zps_shared_batches_per_epoch(&T->part));
        T->loop_ns = zps_now_ns();
        if ((rc = train_shared(T, client)) != 0)
            goto done;
        goto final;
    }
    zps_info("worker %u of %u: batch %u, %llu steps per epoch, %llu clocks", cfg->rank,
             cfg->workers, cfg->batch, (unsigned long long)T->part.steps,
             (unsigned long long)T->clocks);

    T->loop_ns = zps_now_ns();
    /* With one exchange per clock, the exchange of clock t brings the
     * model of t + 1: `have` says params already hold this clock's. */
    bool have = false;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    for (uint64_t t = 0; t < T->clocks; t++) {
        uint64_t t0 = zps_now_ns();
        zps_step_record_t r = {.clock = t};
        if (!have && (rc = zps_client_pull(client, t, params, n, &info)) != 0) {
            rc = client_failed(T, client, "pull", t, rc);
            goto done;
        }
        have = false;
        if (info.next_clock > t) {
            /* The shards expect a later clock from this worker: they were
             * resumed from a checkpoint, or evicted it and took it back at
             * the present. Clocks in between would only be retries. */
            zps_progress_break(&T->progress);
            zps_info("the servers expect clock %llu from this worker, not %llu: resuming there",
                     (unsigned long long)info.next_clock, (unsigned long long)t);
            t = info.next_clock - 1; /* the loop's t++ lands on next_clock */
            continue;
        }
        if ((rc = after_pull(T, t, &info, &t0, &r)) != 0)
            goto done;
        uint64_t t1 = zps_now_ns();
        zps_partition_clock(&T->part, t, &r.epoch, &r.step);
        size_t nb = gather(T, r.epoch, r.step, cfg->rank);
        r.batch = nb;
        r.data_ms = ms_since(t1);
        if ((rc = train_batch(T, nb, t, &r)) != 0)
            goto done;
        inject_delay(T, t, ms_since(t1), &r);
        zps_reply_info_t pinfo = ZPS_REPLY_INFO_INIT;
        bool exchange = cfg->exchange && t + 1 < T->clocks;
        if ((rc = send_gradient(T, client, t, exchange, nb, &pinfo, &r)) != 0)
            goto done;
        if (exchange) {
            info = pinfo;
            have = true;
        }
        r.step_ms = ms_since(t0);
        if ((rc = record_step(T, &r)) != 0)
            goto done;
    }
final:
    if (T->evaluates) {
        if (cfg->final_wait && (rc = wait_for_peers(T, client)) != 0)
            goto done;
        /* The final model: for BSP, version K exists once every worker has
         * pushed its last clock. A shared assignment's worker pulls at the
         * clock it stopped at (its own count). */
        uint64_t last = T->shared ? T->shared_clock : T->clocks;
        if ((rc = zps_client_pull(client, last, params, n, &info)) != 0) {
            rc = client_failed(T, client, "final pull", T->clocks, rc);
            goto done;
        }
        rc = evaluate(T, T->clocks, true, NULL);
        if (rc == 0)
            rc = save_params(T);
    }
done:
    zps_client_free(client);
    return rc;
}

/* One observer pull, run on a thread of its own while the last model is evaluated. */
typedef struct observe_job {
    zps_client_t *client;
    uint64_t clock;
    uint64_t last; /* the final clock: with a shared assignment, the model once all finished */
    bool shared;
    float *out;
    uint64_t n;
    zps_reply_info_t info;
    int rc;
} observe_job_t;

static void *observe_main(void *arg)
{
    observe_job_t *j = arg;
    /* Clock UINT64_MAX, counted in pushes, is ready only once every worker has finished. */
    uint64_t clock = j->shared && j->clock == j->last ? UINT64_MAX : j->clock;
    j->rc = zps_client_pull(j->client, clock, j->out, j->n, &j->info);
    return NULL;
}

/*
 * --evaluator: no training. Pulls the model OF clocks E, 2E, ... and K as an
 * observer (client.h, `observe`): each pull is parked on every shard until
 * that clock's model exists -- under BSP exactly version t, under SSP/ASP
 * once every worker has pushed every clock before t -- and no worker ever
 * waits for it. The pull of the next clock is sent, from a thread of its
 * own, before the current model is evaluated, so it is parked on the shards
 * while the evaluation runs: the exact version is read unless evaluating one
 * model takes longer than the clocks until the next one's. Evaluates each,
 * writes eval records with the versions read, and saves the final model
 * (--save-params). A late evaluator gets a later model and records its
 * versions.
 */
static int run_evaluator(trainer_t *T)
{
    const zps_trainer_config_t *cfg = T->cfg;
    zps_client_t *client = NULL;
    zps_client_opts_t co;
    zps_client_opts_default(&co);
    co.worker = -1;
    co.observe = true;
    co.observe_pushes = cfg->shared;
    co.timeout_ms = cfg->timeout_ms;
    co.wait_log_ms = cfg->wait_log_ms;
    int rc = secure_opts(cfg, &co);
    if (rc == 0)
        rc = zps_client_new(cfg->servers, cfg->server_count, &co, &client);
    zps_client_opts_clear(&co);
    if (rc) {
        zps_error("cannot create the client: %s", zps_strerror(rc));
        return rc;
    }
    float *params = zps_backend_params(T->be);
    uint64_t n = T->model.nparams;
    bool bsp = false;
    if (cfg->shared && (rc = shard0_bsp(cfg, client, &bsp)) != 0) {
        zps_client_free(client);
        return rc;
    }
    T->shared = cfg->shared && !bsp;
    /* The next model arrives here while the current one is evaluated. */
    float *staged = malloc(n * sizeof(float));
    if (!staged) {
        zps_client_free(client);
        zps_error("cannot allocate %llu parameters for the next model", (unsigned long long)n);
        return ZPS_ENOMEM;
    }
    uint64_t every = cfg->eval_every ? cfg->eval_every : T->clocks;
    zps_info("evaluator: the model of every %llu clocks and of clock %llu, as an observer",
             (unsigned long long)every, (unsigned long long)T->clocks);
    T->loop_ns = zps_now_ns();
    observe_job_t job = {.info = ZPS_REPLY_INFO_INIT,
                         .client = client,
                         .clock = every < T->clocks ? every : T->clocks,
                         .last = T->clocks,
                         .shared = T->shared,
                         .out = staged,
                         .n = n};
    observe_main(&job);
    for (;;) {
        uint64_t t = job.clock;
        if (job.rc != 0) {
            rc = client_failed(T, client, "observing the model", t, job.rc);
            goto done;
        }
        memcpy(params, staged, n * sizeof(float));
        zps_reply_info_t info = job.info;
        bool ahead = false;
        pthread_t thread;
        if (t < T->clocks) {
            job.clock = t + every < T->clocks ? t + every : T->clocks;
            ahead = pthread_create(&thread, NULL, observe_main, &job) == 0;
        }
        rc = evaluate(T, t, t == T->clocks, &info);
        if (ahead)
            pthread_join(thread, NULL);
        if (rc != 0 || t == T->clocks)
            break;
        if (!ahead) /* no thread: pull it now, after the evaluation */
            observe_main(&job);
    }
    if (rc == 0)
        rc = save_params(T);
done:
    free(staged);
    zps_client_free(client);
    return rc;
}

int zps_trainer_run(const zps_trainer_config_t *cfg, zps_trainer_result_t *res)
{
    trainer_t T;
    memset(&T, 0, sizeof(T));
    T.cfg = cfg;
    T.evaluates = cfg->evaluator || (cfg->rank == 0 && !cfg->init_only && cfg->evaluate);
    T.shown_loss = NAN;
    T.loop_ns = zps_now_ns();
    zps_progress_init(&T.progress, stderr, cfg->progress, cfg->progress_interval_s);

    int rc = load(&T);
    if (rc == 0)
        rc = make_backend(&T);
    if (rc == 0 && cfg->metrics_path) {
        char err[512];
        rc = zps_metrics_open(cfg->metrics_path, &T.metrics, err, sizeof(err));
        if (rc)
            zps_error("metrics: %s", err);
    }
    zps_prom_init(&T.prom, cfg->evaluator ? -1 : (int)cfg->rank);
    if (rc == 0 && cfg->metrics_listen) {
        char why[256];
        rc = zps_metrics_http_start(cfg->metrics_listen, &T.endpoint, why, sizeof(why));
        if (rc)
            zps_error("--metrics-listen: %s", why);
        else
            zps_info("metrics on http://%s/metrics", zps_metrics_http_address(T.endpoint));
        publish(&T, true);
    }
    if (rc == 0)
        rc = write_run_header(&T);
    if (rc == 0)
        rc = cfg->local ? run_local(&T) : cfg->evaluator ? run_evaluator(&T) : run_distributed(&T);
    zps_progress_break(&T.progress);

    if (rc == 0 && res) {
        memset(res, 0, sizeof(*res));
        res->clocks = cfg->init_only ? 0 : T.clocks;
        res->examples = T.examples;
        res->seconds = elapsed_s(&T);
        res->train_seconds = res->seconds - (double)T.eval_ns / 1e9;
        res->evaluated = T.evaluates;
        res->final = T.final_eval;
        snprintf(res->backend, sizeof(res->backend), "%s", zps_backend_describe(T.be));
    }
    zps_metrics_http_stop(T.endpoint);
    int mrc = zps_metrics_close(T.metrics);
    if (rc == 0 && mrc) {
        zps_error("metrics: writing %s failed", cfg->metrics_path);
        rc = mrc;
    }
    zps_backend_free(T.be);
    if (T.have_order)
        zps_data_order_fini(&T.order);
    zps_dataset_fini(&T.train);
    zps_dataset_fini(&T.test);
    free(T.idx);
    free(T.x);
    free(T.label);
    free(T.target);
    return rc;
}
