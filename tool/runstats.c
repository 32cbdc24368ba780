/*
 * runstats.c - a run's figures from its metrics and server statistics; see
 * runstats.h.
 *
 * Every step and evaluation line is kept (a few dozen bytes each: a long run
 * of four workers holds some tens of thousands), so the summary can cut the
 * steps at the training end whatever order the lines arrived in.
 */
#include "runstats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fileutil.h"
#include "json.h"
#include "hist.h"
#include "strbuf.h"

/* The progress line's rates cover this many seconds. */
#define LIVE_WINDOW_S 5.0

typedef struct srec {
    uint64_t clock;
    double wall, loss;
    double step_ms, pull_ms, push_ms, compute_ms, pad_ms, delay_ms;
    uint32_t batch;
    uint32_t clock_lag; /* clocks; 0 when the line has none */
    uint32_t epoch;     /* the batch's epoch */
    bool dropped;
} srec_t;

typedef struct wstat {
    srec_t *steps;
    size_t n, cap;
    bool have_run;
    uint64_t clocks, steps_per_epoch, batch;
    double base_step_ms;
    bool have_clock_lag; /* some step line carried "clock_lag" */
    uint64_t clock_lag_max;
    char *straggler;
    char *model;
    char *data;
    bool have_start;
    double loop_start; /* wall - elapsed */
} wstat_t;

typedef struct erec {
    uint64_t clock;
    double wall, elapsed, epoch, accuracy, loss;
    bool final;
} erec_t;

struct zps_runstats {
    uint32_t workers, servers;
    wstat_t *w;
    erec_t *evals;
    size_t ne, ecap;
    zps_json_t **server; /* latest STATS per shard, parsed */
};

int zps_runstats_new(uint32_t workers, uint32_t servers, zps_runstats_t **out)
{
    if (workers == 0 || servers == 0)
        return ZPS_EINVAL;
    zps_runstats_t *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return ZPS_ENOMEM;
    rs->workers = workers;
    rs->servers = servers;
    rs->w = calloc(workers, sizeof(*rs->w));
    rs->server = calloc(servers, sizeof(*rs->server));
    if (!rs->w || !rs->server) {
        zps_runstats_free(rs);
        return ZPS_ENOMEM;
    }
    *out = rs;
    return 0;
}

void zps_runstats_free(zps_runstats_t *rs)
{
    if (!rs)
        return;
    for (uint32_t i = 0; rs->w && i < rs->workers; i++) {
        free(rs->w[i].steps);
        free(rs->w[i].straggler);
        free(rs->w[i].model);
        free(rs->w[i].data);
    }
    for (uint32_t i = 0; rs->server && i < rs->servers; i++)
        zps_json_free(rs->server[i]);
    free(rs->w);
    free(rs->server);
    free(rs->evals);
    free(rs);
}

/* The number under `key` of object o: NaN (num) or 0 (num0) when there is none. */
static double num(const zps_json_t *o, const char *key)
{
    return zps_json_number(zps_json_get(o, key), NAN);
}

static double num0(const zps_json_t *o, const char *key)
{
    return zps_json_number(zps_json_get(o, key), 0.0);
}

double zps_runstats_compute_ms(const zps_json_t *step)
{
    return num0(step, "data_ms") + num0(step, "forward_ms") + num0(step, "backward_ms") +
           num0(step, "copy_ms") + num0(step, "update_ms");
}

static char *dup_string(const zps_json_t *o, const char *key)
{
    const char *s = zps_json_string(zps_json_get(o, key));
    return s ? strdup(s) : NULL;
}

static int add_run(wstat_t *w, const zps_json_t *o)
{
    w->have_run = true;
    w->clocks = (uint64_t)num0(o, "clocks");
    w->steps_per_epoch = (uint64_t)num0(o, "steps_per_epoch");
    w->batch = (uint64_t)num0(o, "batch");
    w->base_step_ms = num0(o, "base_step_ms");
    free(w->straggler);
    free(w->model);
    free(w->data);
    w->straggler = dup_string(o, "straggler");
    w->model = dup_string(o, "model");
    w->data = dup_string(o, "data");
    return 0;
}

static int add_step(wstat_t *w, const zps_json_t *o)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        srec_t *s = realloc(w->steps, cap * sizeof(*s));
        if (!s)
            return ZPS_ENOMEM;
        w->steps = s;
        w->cap = cap;
    }
    srec_t *r = &w->steps[w->n++];
    r->clock = (uint64_t)num0(o, "clock");
    r->wall = num0(o, "wall");
    r->loss = num(o, "loss");
    r->step_ms = num0(o, "step_ms");
    r->pull_ms = num0(o, "pull_ms");
    r->push_ms = num0(o, "push_ms");
    r->compute_ms = zps_runstats_compute_ms(o);
    r->pad_ms = num0(o, "pad_ms");
    r->delay_ms = num0(o, "delay_ms");
    r->batch = (uint32_t)num0(o, "batch");
    r->epoch = (uint32_t)num0(o, "epoch");
    const zps_json_t *lag = zps_json_get(o, "clock_lag");
    r->clock_lag = (uint32_t)zps_json_number(lag, 0.0);
    if (lag) {
        w->have_clock_lag = true;
        if (r->clock_lag > w->clock_lag_max)
            w->clock_lag_max = r->clock_lag;
    }
    r->dropped = zps_json_true(zps_json_get(o, "dropped"));
    if (!w->have_start) {
        w->have_start = true;
        w->loop_start = r->wall - num0(o, "elapsed");
    }
    return 0;
}

static int add_eval(zps_runstats_t *rs, wstat_t *w, const zps_json_t *o)
{
    if (rs->ne == rs->ecap) {
        size_t cap = rs->ecap ? rs->ecap * 2 : 64;
        erec_t *e = realloc(rs->evals, cap * sizeof(*e));
        if (!e)
            return ZPS_ENOMEM;
        rs->evals = e;
        rs->ecap = cap;
    }
    erec_t *e = &rs->evals[rs->ne++];
    e->clock = (uint64_t)num0(o, "clock");
    e->wall = num0(o, "wall");
    /* An evaluator's `elapsed` counts from its own start: its records are
     * placed on the training's time line by their wall clock instead. */
    e->elapsed = w ? num0(o, "elapsed") : NAN;
    e->epoch = num0(o, "epoch");
    e->accuracy = num(o, "test_accuracy");
    e->loss = num(o, "test_loss");
    e->final = zps_json_true(zps_json_get(o, "final"));
    if (w && !w->have_start) {
        w->have_start = true;
        w->loop_start = e->wall - e->elapsed;
    }
    return 0;
}

/* One metrics line of worker w, or of the evaluator when w is NULL (its eval lines only). */
static int add_metrics_line(zps_runstats_t *rs, wstat_t *w, const char *line)
{
    zps_json_t *o = NULL;
    int rc = zps_json_parse(line, &o, NULL, 0);
    if (rc)
        return rc;
    if (o->type != ZPS_JSON_OBJECT) {
        zps_json_free(o);
        return ZPS_EINVAL;
    }
    const char *type = zps_json_string(zps_json_get(o, "type"));
    if (type && strcmp(type, "eval") == 0)
        rc = add_eval(rs, w, o);
    else if (w && type && strcmp(type, "run") == 0)
        rc = add_run(w, o);
    else if (w && type && strcmp(type, "step") == 0)
        rc = add_step(w, o);
    zps_json_free(o);
    return rc;
}

int zps_runstats_add_line(zps_runstats_t *rs, uint32_t rank, const char *line)
{
    if (rank >= rs->workers)
        return ZPS_EINVAL;
    return add_metrics_line(rs, &rs->w[rank], line);
}

int zps_runstats_add_eval_line(zps_runstats_t *rs, const char *line)
{
    return add_metrics_line(rs, NULL, line);
}

/* Seconds from the training start to evaluation e's model (NaN if unknown). */
static double eval_elapsed(const zps_runstats_t *rs, const erec_t *e)
{
    if (isfinite(e->elapsed))
        return e->elapsed;
    double start = INFINITY;
    if (rs->w[0].have_start)
        start = rs->w[0].loop_start;
    else
        for (uint32_t i = 0; i < rs->workers; i++)
            if (rs->w[i].have_start && rs->w[i].loop_start < start)
                start = rs->w[i].loop_start;
    return isfinite(start) ? e->wall - start : NAN;
}

/* The first evaluation with test accuracy >= target, or NULL. */
static const erec_t *first_reaching(const zps_runstats_t *rs, double target)
{
    for (size_t i = 0; i < rs->ne; i++)
        if (isfinite(rs->evals[i].accuracy) && rs->evals[i].accuracy >= target)
            return &rs->evals[i];
    return NULL;
}

bool zps_runstats_target(const zps_runstats_t *rs, double target, double *seconds, uint64_t *clock)
{
    const erec_t *e = first_reaching(rs, target);
    if (!e)
        return false;
    *seconds = eval_elapsed(rs, e);
    *clock = e->clock;
    return true;
}

int zps_runstats_add_server(zps_runstats_t *rs, uint32_t shard, const char *json)
{
    if (shard >= rs->servers)
        return ZPS_EINVAL;
    zps_json_t *o = NULL;
    int rc = zps_json_parse(json, &o, NULL, 0);
    if (rc)
        return rc;
    if (o->type != ZPS_JSON_OBJECT) {
        zps_json_free(o);
        return ZPS_EINVAL;
    }
    zps_json_free(rs->server[shard]);
    rs->server[shard] = o;
    return 0;
}

/* ---- update staleness: the servers' histograms summed over shards ---- */

/* The servers' update staleness histograms (updates; exact counts for 0..63,
 * then one overflow bucket) summed; counting and quantiles are common/hist.c's. */
typedef struct hist {
    zps_vhist_t v;
    double sum; /* mean x count per server: the servers report means */
    bool have;
} hist_t;

/* Samples in bucket b: b < ZPS_VHIST_EXACT, or the overflow bucket when b == ZPS_VHIST_EXACT. */
static uint64_t hist_count(const hist_t *h, int b)
{
    return b < ZPS_VHIST_EXACT ? h->v.counts[b] : h->v.overflow;
}

static void merge_servers(const zps_runstats_t *rs, hist_t *h)
{
    memset(h, 0, sizeof(*h));
    for (uint32_t s = 0; s < rs->servers; s++) {
        const zps_json_t *st = zps_json_get(rs->server[s], "update_staleness");
        if (!st)
            continue;
        h->have = true;
        double n = num0(st, "count");
        h->sum += num0(st, "mean") * n;
        uint64_t mx = (uint64_t)num0(st, "max");
        if (mx > h->v.max)
            h->v.max = mx;
        const zps_json_t *hist = zps_json_get(st, "histogram");
        for (size_t i = 0; hist && hist->type == ZPS_JSON_OBJECT && i < hist->count; i++) {
            uint64_t c = (uint64_t)zps_json_number(&hist->items[i], 0);
            const char *k = hist->keys[i];
            char *end;
            unsigned long v = strtoul(k, &end, 10);
            if (*k >= '0' && *k <= '9' && *end == '\0' && v < ZPS_VHIST_EXACT)
                h->v.counts[v] += c;
            else
                h->v.overflow += c;
            h->v.n += c;
        }
    }
}

/* ---- the training span ---- */

typedef struct span {
    bool have;
    double start, end;
    const erec_t *final;
} span_t;

static void training_span(const zps_runstats_t *rs, span_t *sp)
{
    memset(sp, 0, sizeof(*sp));
    const wstat_t *w0 = &rs->w[0];
    double start = INFINITY, end = -INFINITY;
    if (w0->have_start) {
        start = w0->loop_start;
    } else {
        for (uint32_t i = 0; i < rs->workers; i++)
            if (rs->w[i].have_start && rs->w[i].loop_start < start)
                start = rs->w[i].loop_start;
    }
    for (size_t i = 0; i < rs->ne; i++)
        if (rs->evals[i].final)
            sp->final = &rs->evals[i];
    if (sp->final) {
        end = sp->final->wall;
    } else {
        for (uint32_t i = 0; i < rs->workers; i++)
            for (size_t k = 0; k < rs->w[i].n; k++)
                if (rs->w[i].steps[k].wall > end)
                    end = rs->w[i].steps[k].wall;
    }
    if (isfinite(start) && isfinite(end) && end >= start) {
        sp->have = true;
        sp->start = start;
        sp->end = end;
    }
}

/* What one worker's steps add up to (milliseconds, counts). */
typedef struct wsum {
    uint64_t steps, examples, dropped;
    double compute_ms, pad_ms, delay_ms, pull_ms, push_ms, step_ms;
    uint64_t last_clock; /* one past the highest clock summed */
} wsum_t;

/* The sums of worker w's steps that ended by `end` (seconds since the epoch). */
static void worker_sums(const wstat_t *w, double end, wsum_t *s)
{
    memset(s, 0, sizeof(*s));
    for (size_t k = 0; k < w->n; k++) {
        const srec_t *r = &w->steps[k];
        if (r->wall > end + 1e-6)
            continue;
        s->steps++;
        s->examples += r->batch;
        s->dropped += r->dropped;
        s->compute_ms += r->compute_ms;
        s->pad_ms += r->pad_ms;
        s->delay_ms += r->delay_ms;
        s->pull_ms += r->pull_ms;
        s->push_ms += r->push_ms;
        s->step_ms += r->step_ms;
        if (r->clock + 1 > s->last_clock)
            s->last_clock = r->clock + 1;
    }
}

void zps_runstats_result(const zps_runstats_t *rs, zps_runstats_result_t *out)
{
    span_t sp;
    training_span(rs, &sp);
    out->final_accuracy = sp.final ? sp.final->accuracy : NAN;
    out->final_loss = sp.final ? sp.final->loss : NAN;
    out->final_clock = sp.final ? sp.final->clock : 0;
    out->train_seconds = sp.have ? sp.end - sp.start : NAN;
    out->examples_per_second = NAN;
    if (sp.have && sp.end > sp.start) {
        uint64_t ex = 0;
        for (uint32_t i = 0; i < rs->workers; i++) {
            wsum_t s;
            worker_sums(&rs->w[i], sp.end, &s);
            ex += s.examples;
        }
        out->examples_per_second = (double)ex / (sp.end - sp.start);
    }
}

void zps_runstats_live(const zps_runstats_t *rs, double now, zps_runstats_live_t *out)
{
    memset(out, 0, sizeof(*out));
    out->loss = NAN;
    out->test_accuracy = NAN;
    out->clock_min = UINT64_MAX;
    double loss_sum = 0, ex = 0, first = INFINITY;
    uint64_t loss_n = 0;
    for (uint32_t i = 0; i < rs->workers; i++) {
        const wstat_t *w = &rs->w[i];
        uint64_t done = w->n ? w->steps[w->n - 1].clock + 1 : 0;
        if (done < out->clock_min)
            out->clock_min = done;
        if (done > out->clock_max)
            out->clock_max = done;
        if (w->clocks > out->clocks)
            out->clocks = w->clocks;
        if (w->have_start && w->loop_start < first)
            first = w->loop_start;
        for (size_t k = w->n; k-- > 0;) {
            const srec_t *r = &w->steps[k];
            if (r->wall < now - LIVE_WINDOW_S)
                break;
            ex += r->batch;
            if (isfinite(r->loss)) {
                loss_sum += r->loss;
                loss_n++;
            }
        }
    }
    if (out->clock_min == UINT64_MAX)
        out->clock_min = 0;
    const wstat_t *w0 = &rs->w[0];
    double start = w0->have_start ? w0->loop_start : first;
    if (isfinite(start) && now > start) {
        out->seconds = now - start;
        double window = out->seconds < LIVE_WINDOW_S ? out->seconds : LIVE_WINDOW_S;
        out->examples_per_second = window > 0 ? ex / window : 0;
    }
    if (loss_n)
        out->loss = loss_sum / (double)loss_n;
    for (size_t i = rs->ne; i-- > 0;) {
        if (isfinite(rs->evals[i].accuracy)) {
            out->test_accuracy = rs->evals[i].accuracy;
            out->test_clock = rs->evals[i].clock;
            break;
        }
    }
    hist_t h;
    merge_servers(rs, &h);
    if (h.have && h.v.n) {
        out->have_update_staleness = true;
        out->update_staleness_p50 = zps_vhist_quantile(&h.v, 0.5);
        out->update_staleness_max = h.v.max;
    }
    for (uint32_t i = 0; i < rs->workers; i++) {
        if (rs->w[i].have_clock_lag) {
            out->have_clock_lag = true;
            if (rs->w[i].clock_lag_max > out->clock_lag_max)
                out->clock_lag_max = rs->w[i].clock_lag_max;
        }
    }
}

/* ---- summary.json ---- */

/* "key": v with `prec` digits after the point (prec < 0: 9 significant digits), or null. */
static void jnum(zps_strbuf_t *b, const char *key, double v, int prec)
{
    zps_strbuf_printf(b, "\"%s\": ", key);
    if (!isfinite(v))
        zps_strbuf_printf(b, "null");
    else if (prec < 0)
        zps_strbuf_printf(b, "%.9g", v);
    else
        zps_strbuf_printf(b, "%.*f", prec, v);
}

static void jstr(zps_strbuf_t *b, const char *key, const char *v)
{
    zps_strbuf_printf(b, "\"%s\": ", key);
    if (v)
        zps_strbuf_json_string(b, v);
    else
        zps_strbuf_printf(b, "null");
}

/* The target as its key: the shortest decimal, "0.85". */
static void target_key(double t, char *buf, size_t size)
{
    snprintf(buf, size, "%.15g", t);
}

static void summary_targets(zps_strbuf_t *b, const zps_runstats_t *rs, const zps_run_info_t *in,
                            bool epochs)
{
    zps_strbuf_printf(b, "{");
    for (size_t t = 0; t < in->target_count; t++) {
        char key[32];
        target_key(in->targets[t], key, sizeof(key));
        const erec_t *e = first_reaching(rs, in->targets[t]);
        double found = !e ? NAN : epochs ? e->epoch : eval_elapsed(rs, e);
        zps_strbuf_printf(b, "%s", t ? ", " : "");
        jnum(b, key, found, 3);
    }
    zps_strbuf_printf(b, "}");
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of v[n] (sorted, n >= 1) by the rule zps_vhist_quantile
 * applies to update staleness: the sample of rank max(1, floor(q * n)). */
static uint64_t sorted_quantile(const uint64_t *v, size_t n, double q)
{
    size_t need = (size_t)(q * (double)n);
    return v[(need < 1 ? 1 : need) - 1];
}

/*
 * "clock_lag": the workers' step lines' clock lag (clocks), every worker's
 * steps that ended by `end`, exact quantiles; nulls when no step line carried
 * one. Returns 0 or ZPS_ENOMEM.
 */
static int summary_clock_lag(zps_strbuf_t *b, const zps_runstats_t *rs, double end)
{
    size_t n = 0;
    bool have = false;
    for (uint32_t i = 0; i < rs->workers; i++) {
        have = have || rs->w[i].have_clock_lag;
        n += rs->w[i].n;
    }
    uint64_t *v = have && n ? malloc(n * sizeof(*v)) : NULL;
    if (have && n && !v)
        return ZPS_ENOMEM;
    size_t k = 0;
    double sum = 0;
    for (uint32_t i = 0; v && i < rs->workers; i++) {
        for (size_t j = 0; j < rs->w[i].n; j++) {
            const srec_t *r = &rs->w[i].steps[j];
            if (r->wall > end + 1e-6)
                continue;
            v[k++] = r->clock_lag;
            sum += r->clock_lag;
        }
    }
    if (k) {
        qsort(v, k, sizeof(*v), cmp_u64);
        zps_strbuf_printf(b,
                          "  \"clock_lag\": {\"count\": %zu, \"p50\": %llu, \"p99\": %llu, "
                          "\"max\": %llu, \"mean\": %.4f},\n",
                          k, (unsigned long long)sorted_quantile(v, k, 0.5),
                          (unsigned long long)sorted_quantile(v, k, 0.99),
                          (unsigned long long)v[k - 1], sum / (double)k);
    } else {
        zps_strbuf_printf(b, "  \"clock_lag\": {\"count\": 0, \"p50\": null, \"p99\": null, "
                             "\"max\": null, \"mean\": null},\n");
    }
    free(v);
    return 0;
}

static void summary_servers(zps_strbuf_t *b, const zps_runstats_t *rs)
{
    uint64_t dropped_max = 0;
    bool have = false;
    zps_strbuf_printf(b, "  \"server_pull_wait_ms\": [");
    for (uint32_t s = 0; s < rs->servers; s++) {
        const zps_json_t *pw = zps_json_get(rs->server[s], "pull_wait");
        zps_strbuf_printf(b, "%s{", s ? ", " : "");
        jnum(b, "p50", num(pw, "p50_ms"), 3);
        zps_strbuf_printf(b, ", ");
        jnum(b, "p99", num(pw, "p99_ms"), 3);
        zps_strbuf_printf(b, ", ");
        jnum(b, "max", num(pw, "max_ms"), 3);
        zps_strbuf_printf(b, ", ");
        jnum(b, "mean", num(pw, "mean_ms"), 3);
        zps_strbuf_printf(b, "}");
        const zps_json_t *counts = zps_json_get(rs->server[s], "counts");
        if (counts) {
            have = true;
            uint64_t d = (uint64_t)num0(counts, "dropped");
            if (d > dropped_max)
                dropped_max = d;
        }
    }
    zps_strbuf_printf(b, "],\n  ");
    jnum(b, "server_pushes_dropped", have ? (double)dropped_max : NAN, 0);
    zps_strbuf_printf(b, ",\n  \"server_versions\": [");
    for (uint32_t s = 0; s < rs->servers; s++) {
        zps_strbuf_printf(b, "%s", s ? ", " : "");
        double v = num(rs->server[s], "version");
        if (isfinite(v))
            zps_strbuf_printf(b, "%.0f", v);
        else
            zps_strbuf_printf(b, "null");
    }
    zps_strbuf_printf(b, "],\n");
}

/*
 * "examples_seen" and "examples_seen_per_epoch": the training examples used,
 * per epoch. A shared assignment's are shard 0's audit (its STATS'
 * assignment.examples_per_epoch: each batch completed once). A fixed
 * assignment's follow from the workers' step records, which the partition
 * rule (data.h) makes distinct within an epoch: each (epoch, rank, step) is
 * its own piece of the epoch's permutation. A push dropped as too late
 * (backup workers) trained nothing and is not counted.
 */
static void examples_seen(zps_strbuf_t *b, const zps_runstats_t *rs, bool shared)
{
    uint64_t per[4096];
    size_t ne = 0;
    bool have = false;
    if (shared) {
        const zps_json_t *a = zps_json_get(rs->server[0], "assignment");
        const zps_json_t *ex = zps_json_get(a, "examples_per_epoch");
        if (ex && ex->type == ZPS_JSON_ARRAY) {
            have = true;
            for (size_t e = 0; e < ex->count && ne < 4096; e++)
                per[ne++] = (uint64_t)zps_json_number(zps_json_at(ex, e), 0);
        }
    } else {
        for (uint32_t w = 0; w < rs->workers; w++) {
            for (size_t i = 0; i < rs->w[w].n; i++) {
                const srec_t *r = &rs->w[w].steps[i];
                if (r->epoch >= 4096 || r->dropped)
                    continue;
                while (ne <= r->epoch)
                    per[ne++] = 0;
                per[r->epoch] += r->batch;
                have = true;
            }
        }
    }
    uint64_t sum = 0;
    for (size_t e = 0; e < ne; e++)
        sum += per[e];
    if (!have) {
        zps_strbuf_printf(b, "\"examples_seen\": null,\n  \"examples_seen_per_epoch\": null");
        return;
    }
    zps_strbuf_printf(b, "\"examples_seen\": %llu,\n  \"examples_seen_per_epoch\": [",
                      (unsigned long long)sum);
    for (size_t e = 0; e < ne; e++)
        zps_strbuf_printf(b, "%s%llu", e ? ", " : "", (unsigned long long)per[e]);
    zps_strbuf_printf(b, "]");
}

char *zps_runstats_summary(const zps_runstats_t *rs, const zps_run_info_t *in)
{
    span_t sp;
    training_span(rs, &sp);
    zps_runstats_result_t res;
    zps_runstats_result(rs, &res);
    hist_t h;
    merge_servers(rs, &h);
    const wstat_t *w0 = &rs->w[0];

    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "{\n  ");
    jstr(&b, "name", in->name);
    zps_strbuf_printf(&b, ",\n  ");
    jstr(&b, "status", in->status);
    zps_strbuf_printf(&b, ",\n  ");
    jstr(&b, "failed_process", in->failed);
    zps_strbuf_printf(&b, ",\n  ");
    jstr(&b, "mode", in->mode);
    zps_strbuf_printf(&b, ",\n  \"staleness_bound\": %u,\n  \"backup_workers\": %u,\n  ",
                      in->staleness_bound, in->backup_workers);
    jstr(&b, "lr_staleness", in->lr_staleness);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "delay_compensation", in->delay_comp, -1);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "stop_at", in->stop_at > 0 ? in->stop_at : NAN, -1);
    /* Why training ended: its clocks were done, the target was seen, or time ran out. */
    const char *reason = in->stop_reason;
    if (!reason && in->status && strcmp(in->status, "ok") == 0)
        reason = "finished";
    else if (!reason && in->status && strcmp(in->status, "timeout") == 0)
        reason = "time_limit";
    zps_strbuf_printf(&b, ",\n  ");
    jstr(&b, "stop_reason", reason);
    zps_strbuf_printf(&b, ",\n  ");
    jstr(&b, "data_assignment", in->shared ? "shared" : "static");
    zps_strbuf_printf(&b, ",\n  ");
    examples_seen(&b, rs, in->shared);
    zps_strbuf_printf(&b, ",\n  \"workers\": %u,\n  \"servers\": %u,\n  ", rs->workers,
                      rs->servers);
    jstr(&b, "model", w0->model);
    zps_strbuf_printf(&b, ",\n  ");
    jstr(&b, "data", w0->data);
    zps_strbuf_printf(&b,
                      ",\n  \"batch_per_worker\": %llu,\n  \"clocks\": %llu,\n  "
                      "\"steps_per_epoch\": %llu,\n  ",
                      (unsigned long long)w0->batch, (unsigned long long)w0->clocks,
                      (unsigned long long)w0->steps_per_epoch);
    jnum(&b, "base_step_ms", w0->have_run ? w0->base_step_ms : NAN, -1);
    zps_strbuf_printf(&b, ",\n  \"server_args\": [");
    for (size_t i = 0; i < in->server_arg_count; i++) {
        zps_strbuf_printf(&b, "%s", i ? ", " : "");
        zps_strbuf_json_string(&b, in->server_args[i]);
    }
    zps_strbuf_printf(&b, "],\n  \"environment\": {");
    for (size_t i = 0; i < in->environment_count; i++) {
        const char *kv = in->environment[i];
        const char *eq = strchr(kv, '=');
        size_t n = eq ? (size_t)(eq - kv) : strlen(kv);
        char *name = strndup(kv, n);
        zps_strbuf_printf(&b, "%s", i ? ", " : "");
        zps_strbuf_json_string(&b, name ? name : "?");
        zps_strbuf_printf(&b, ": ");
        zps_strbuf_json_string(&b, eq ? eq + 1 : "");
        free(name);
    }
    zps_strbuf_printf(&b, "},\n  \"stragglers\": [");
    for (uint32_t i = 0; i < rs->workers; i++) {
        zps_strbuf_printf(&b, "%s", i ? ", " : "");
        if (rs->w[i].straggler)
            zps_strbuf_json_string(&b, rs->w[i].straggler);
        else
            zps_strbuf_printf(&b, "null");
    }
    zps_strbuf_printf(&b, "],\n  ");
    jnum(&b, "final_test_accuracy", res.final_accuracy, 4);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "final_test_loss", res.final_loss, -1);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "final_clock", sp.final ? (double)sp.final->clock : NAN, 0);
    /* The latest evaluation, final or not: what an interrupted run learned. */
    const erec_t *last = NULL;
    for (size_t i = 0; i < rs->ne; i++)
        if (!last || rs->evals[i].clock >= last->clock)
            last = &rs->evals[i];
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "last_test_accuracy", last ? last->accuracy : NAN, 4);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "last_test_loss", last ? last->loss : NAN, -1);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "last_eval_clock", last ? (double)last->clock : NAN, 0);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "wall_seconds", in->wall_seconds, 3);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "train_seconds", res.train_seconds, 3);
    zps_strbuf_printf(&b, ",\n  ");
    jnum(&b, "examples_per_second", res.examples_per_second, 1);
    zps_strbuf_printf(&b, ",\n  \"seconds_to_target\": ");
    summary_targets(&b, rs, in, false);
    zps_strbuf_printf(&b, ",\n  \"epochs_to_target\": ");
    summary_targets(&b, rs, in, true);

    /* Per worker, within the training span. */
    double pull_all = 0, step_all = 0;
    uint64_t dropped_all = 0;
    zps_strbuf_printf(&b, ",\n  \"per_worker\": [");
    for (uint32_t i = 0; i < rs->workers; i++) {
        wsum_t s;
        worker_sums(&rs->w[i], sp.have ? sp.end : INFINITY, &s);
        pull_all += s.pull_ms;
        step_all += s.step_ms;
        dropped_all += s.dropped;
        double other = s.step_ms - s.compute_ms - s.pad_ms - s.delay_ms - s.pull_ms - s.push_ms;
        zps_strbuf_printf(&b,
                          "%s\n    {\"rank\": %u, \"steps\": %llu, \"examples\": %llu, "
                          "\"dropped\": %llu, \"compute_s\": %.3f, \"pad_s\": %.3f, "
                          "\"delay_s\": %.3f, \"pull_s\": %.3f, \"push_s\": %.3f, "
                          "\"other_s\": %.3f, \"mean_step_ms\": %.3f, \"pull_wait_share\": ",
                          i ? "," : "", i, (unsigned long long)s.steps,
                          (unsigned long long)s.examples, (unsigned long long)s.dropped,
                          s.compute_ms / 1e3, s.pad_ms / 1e3, s.delay_ms / 1e3, s.pull_ms / 1e3,
                          s.push_ms / 1e3, other / 1e3,
                          s.steps ? s.step_ms / (double)s.steps : 0.0);
        if (s.step_ms > 0)
            zps_strbuf_printf(&b, "%.4f}", s.pull_ms / s.step_ms);
        else
            zps_strbuf_printf(&b, "null}");
    }
    zps_strbuf_printf(&b, "\n  ],\n  ");
    jnum(&b, "pull_wait_share", step_all > 0 ? pull_all / step_all : NAN, 4);
    zps_strbuf_printf(&b, ",\n  \"pushes_dropped\": %llu,\n  \"update_staleness\": ",
                      (unsigned long long)dropped_all);
    if (h.have) {
        zps_strbuf_printf(&b,
                          "{\"count\": %llu, \"p50\": %llu, \"p99\": %llu, \"max\": %llu, "
                          "\"mean\": %.4f, \"histogram\": {",
                          (unsigned long long)h.v.n,
                          (unsigned long long)zps_vhist_quantile(&h.v, 0.5),
                          (unsigned long long)zps_vhist_quantile(&h.v, 0.99),
                          (unsigned long long)h.v.max, h.v.n ? h.sum / (double)h.v.n : 0.0);
        const char *sep = "";
        for (int v = 0; v <= ZPS_VHIST_EXACT; v++) {
            if (!hist_count(&h, v))
                continue;
            if (v < ZPS_VHIST_EXACT)
                zps_strbuf_printf(&b, "%s\"%d\": %llu", sep, v,
                                  (unsigned long long)hist_count(&h, v));
            else
                zps_strbuf_printf(&b, "%s\">=%d\": %llu", sep, ZPS_VHIST_EXACT,
                                  (unsigned long long)hist_count(&h, v));
            sep = ", ";
        }
        zps_strbuf_printf(&b, "}},\n");
    } else {
        zps_strbuf_printf(&b, "{\"count\": 0, \"p50\": null, \"p99\": null, \"max\": null, "
                              "\"mean\": null, \"histogram\": {}},\n");
    }
    if (summary_clock_lag(&b, rs, sp.have ? sp.end : INFINITY)) {
        zps_strbuf_fini(&b);
        return NULL;
    }
    summary_servers(&b, rs);
    zps_strbuf_printf(&b, "  \"targets\": [");
    for (size_t t = 0; t < in->target_count; t++)
        zps_strbuf_printf(&b, "%s%.15g", t ? ", " : "", in->targets[t]);
    zps_strbuf_printf(&b, "]\n}\n");
    return zps_strbuf_take(&b);
}

/* ---- tables ---- */

/* A new table in the run folder dirfd: O_EXCL|O_NOFOLLOW, never through a planted name. */
static FILE *open_table(int dirfd, const char *name, const char *header)
{
    FILE *f = zps_file_fcreate_at(dirfd, name);
    if (f)
        fprintf(f, "# %s\n", header);
    return f;
}

static int close_table(FILE *f)
{
    if (!f)
        return ZPS_EIO;
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0)
        bad = true;
    return bad ? ZPS_EIO : 0;
}

/* Mean loss per clock over every worker's step at that clock. */
static int write_loss(const zps_runstats_t *rs, FILE *f)
{
    uint64_t clocks = 0;
    for (uint32_t i = 0; i < rs->workers; i++)
        for (size_t k = 0; k < rs->w[i].n; k++)
            if (rs->w[i].steps[k].clock + 1 > clocks)
                clocks = rs->w[i].steps[k].clock + 1;
    double *sum = calloc(clocks ? clocks : 1, sizeof(double));
    uint32_t *cnt = calloc(clocks ? clocks : 1, sizeof(uint32_t));
    if (!sum || !cnt) {
        free(sum);
        free(cnt);
        return ZPS_ENOMEM;
    }
    for (uint32_t i = 0; i < rs->workers; i++) {
        for (size_t k = 0; k < rs->w[i].n; k++) {
            const srec_t *r = &rs->w[i].steps[k];
            if (isfinite(r->loss)) {
                sum[r->clock] += r->loss;
                cnt[r->clock]++;
            }
        }
    }
    double spe = rs->w[0].steps_per_epoch ? (double)rs->w[0].steps_per_epoch : NAN;
    for (uint64_t c = 0; c < clocks; c++)
        if (cnt[c])
            fprintf(f, "%llu\t%.6f\t%.6f\t%u\n", (unsigned long long)c, (double)c / spe,
                    sum[c] / cnt[c], cnt[c]);
    free(sum);
    free(cnt);
    return 0;
}

/* A number for summary.tsv: NA when unknown. */
static void tsv_num(FILE *f, double v, int prec)
{
    if (isfinite(v))
        fprintf(f, "\t%.*f", prec, v);
    else
        fprintf(f, "\tNA");
}

static int write_summary_row(const zps_runstats_t *rs, const zps_run_info_t *in, FILE *f)
{
    zps_runstats_result_t res;
    zps_runstats_result(rs, &res);
    hist_t h;
    merge_servers(rs, &h);
    span_t sp;
    training_span(rs, &sp);
    double pull = 0, step = 0;
    uint64_t dropped = 0;
    for (uint32_t i = 0; i < rs->workers; i++) {
        wsum_t s;
        worker_sums(&rs->w[i], sp.have ? sp.end : INFINITY, &s);
        pull += s.pull_ms;
        step += s.step_ms;
        dropped += s.dropped;
    }
    fprintf(f, "%s\t%s\t%s\t%u\t%u\t%s\t%u\t%u", in->name ? in->name : "NA",
            in->status ? in->status : "NA", in->mode ? in->mode : "NA", in->staleness_bound,
            in->backup_workers, in->lr_staleness ? in->lr_staleness : "none", rs->workers,
            rs->servers);
    tsv_num(f, rs->w[0].have_run ? rs->w[0].base_step_ms : NAN, 3);
    tsv_num(f, res.final_accuracy, 4);
    tsv_num(f, res.train_seconds, 3);
    tsv_num(f, in->wall_seconds, 3);
    tsv_num(f, res.examples_per_second, 1);
    tsv_num(f, step > 0 ? pull / step : NAN, 4);
    tsv_num(f, h.have && h.v.n ? (double)zps_vhist_quantile(&h.v, 0.5) : NAN, 0);
    tsv_num(f, h.have && h.v.n ? (double)zps_vhist_quantile(&h.v, 0.99) : NAN, 0);
    tsv_num(f, h.have && h.v.n ? (double)h.v.max : NAN, 0);
    fprintf(f, "\t%llu", (unsigned long long)dropped);
    for (size_t t = 0; t < in->target_count; t++) {
        const erec_t *e = first_reaching(rs, in->targets[t]);
        tsv_num(f, e ? eval_elapsed(rs, e) : NAN, 3);
    }
    fprintf(f, "\n");
    return 0;
}

int zps_runstats_write_tables(const zps_runstats_t *rs, const zps_run_info_t *info, int dir)
{
    int rc = 0;
    char header[1024];
    size_t hl = (size_t)snprintf(
        header, sizeof(header),
        "name\tstatus\tmode\tstaleness_bound\tbackup_workers\tlr_staleness\tworkers\tservers\t"
        "base_step_ms\tfinal_test_accuracy\ttrain_seconds\twall_seconds\texamples_per_second\t"
        "pull_wait_share\tupdate_staleness_p50\tupdate_staleness_p99\tupdate_staleness_max\t"
        "pushes_dropped");
    for (size_t t = 0; t < info->target_count && hl < sizeof(header); t++) {
        char key[32];
        target_key(info->targets[t], key, sizeof(key));
        hl += (size_t)snprintf(header + hl, sizeof(header) - hl, "\tseconds_to_%s", key);
    }
    FILE *f = open_table(dir, "summary.tsv", header);
    if (f && write_summary_row(rs, info, f))
        rc = ZPS_EIO;
    if (close_table(f))
        rc = ZPS_EIO;

    f = open_table(dir, "eval.tsv", "elapsed_s\tclock\tepoch\ttest_accuracy\ttest_loss");
    for (size_t i = 0; f && i < rs->ne; i++) {
        const erec_t *e = &rs->evals[i];
        fprintf(f, "%.3f\t%llu\t%.4f\t%.4f\t%.6f\n", eval_elapsed(rs, e),
                (unsigned long long)e->clock, e->epoch, isfinite(e->accuracy) ? e->accuracy : NAN,
                e->loss);
    }
    if (close_table(f))
        rc = ZPS_EIO;

    f = open_table(dir, "loss.tsv", "clock\tepoch\tmean_loss\tworkers");
    if (f && write_loss(rs, f))
        rc = ZPS_EIO;
    if (close_table(f))
        rc = ZPS_EIO;

    hist_t h;
    merge_servers(rs, &h);
    f = open_table(dir, "update_staleness.tsv", "update_staleness\tcount\tshare");
    for (int v = 0; f && v <= ZPS_VHIST_EXACT; v++)
        if (hist_count(&h, v))
            fprintf(f, "%d\t%llu\t%.6f\n", v, (unsigned long long)hist_count(&h, v),
                    (double)hist_count(&h, v) / (double)h.v.n);
    if (close_table(f))
        rc = ZPS_EIO;

    span_t sp;
    training_span(rs, &sp);
    f = open_table(dir, "workers.tsv",
                   "rank\tcompute_s\tpad_s\tdelay_s\tpull_s\tpush_s\tother_s\tsteps\tdropped");
    for (uint32_t i = 0; f && i < rs->workers; i++) {
        wsum_t s;
        worker_sums(&rs->w[i], sp.have ? sp.end : INFINITY, &s);
        double other = s.step_ms - s.compute_ms - s.pad_ms - s.delay_ms - s.pull_ms - s.push_ms;
        fprintf(f, "%u\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%llu\t%llu\n", i, s.compute_ms / 1e3,
                s.pad_ms / 1e3, s.delay_ms / 1e3, s.pull_ms / 1e3, s.push_ms / 1e3,
                other > 0 ? other / 1e3 : 0.0, (unsigned long long)s.steps,
                (unsigned long long)s.dropped);
    }
    if (close_table(f))
        rc = ZPS_EIO;
    return rc;
}
