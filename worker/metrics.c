/*
 * metrics.c - the JSON-lines metrics stream and the progress line; see
 * metrics.h.
 */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "strbuf.h"
#include "timeutil.h"

struct zps_metrics {
    FILE *f;
    bool failed;
};

int zps_metrics_open(const char *path, zps_metrics_t **out, char *err, size_t err_size)
{
    zps_metrics_t *m = calloc(1, sizeof(*m));
    if (!m)
        return ZPS_ENOMEM;
    m->f = fopen(path, "w");
    if (!m->f) {
        if (err && err_size)
            snprintf(err, err_size, "%s: cannot open for writing: %s", path, strerror(errno));
        free(m);
        return ZPS_EIO;
    }
    *out = m;
    return 0;
}

int zps_metrics_close(zps_metrics_t *m)
{
    if (!m)
        return 0;
    bool failed = m->failed;
    if (fclose(m->f) != 0)
        failed = true;
    free(m);
    return failed ? ZPS_EIO : 0;
}

int zps_metrics_raw(zps_metrics_t *m, const char *json)
{
    if (!m)
        return 0;
    /* One line per record, flushed at once: a crashed or killed run still
     * leaves every finished step on disk, and a reader can tail the file. */
    if (fputs(json, m->f) == EOF || fputc('\n', m->f) == EOF || fflush(m->f) != 0)
        m->failed = true;
    return m->failed ? ZPS_EIO : 0;
}

/* A double as JSON: shortest round-trip-ish form, null for NaN/inf. */
static void json_num(zps_strbuf_t *b, const char *key, double v, bool last)
{
    if (isfinite(v))
        zps_strbuf_printf(b, "\"%s\":%.9g%s", key, v, last ? "" : ",");
    else
        zps_strbuf_printf(b, "\"%s\":null%s", key, last ? "" : ",");
}

/* Milliseconds to the microsecond. */
static void json_ms(zps_strbuf_t *b, const char *key, double v)
{
    zps_strbuf_printf(b, "\"%s\":%.3f,", key, v);
}

static int emit(zps_metrics_t *m, zps_strbuf_t *b)
{
    char *line = zps_strbuf_take(b);
    if (!line)
        return ZPS_ENOMEM;
    int rc = zps_metrics_raw(m, line);
    free(line);
    return rc;
}

int zps_metrics_step(zps_metrics_t *m, const zps_step_record_t *r)
{
    if (!m)
        return 0;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b,
                      "{\"type\":\"step\",\"rank\":%d,\"clock\":%llu,\"epoch\":%llu,\"step\":%llu,"
                      "\"wall\":%.6f,\"elapsed\":%.6f,",
                      r->rank, (unsigned long long)r->clock, (unsigned long long)r->epoch,
                      (unsigned long long)r->step, r->wall, r->elapsed);
    json_num(&b, "loss", r->loss, false);
    zps_strbuf_printf(&b, "\"batch\":%llu,\"version\":%llu,\"clock_lag\":%llu,",
                      (unsigned long long)r->batch, (unsigned long long)r->version,
                      (unsigned long long)r->clock_lag);
    if (r->shared)
        zps_strbuf_printf(&b, "\"batch_id\":%llu,", (unsigned long long)r->batch_id);
    json_ms(&b, "data_ms", r->data_ms);
    json_ms(&b, "forward_ms", r->forward_ms);
    json_ms(&b, "backward_ms", r->backward_ms);
    json_ms(&b, "copy_ms", r->copy_ms);
    json_ms(&b, "pull_ms", r->pull_ms);
    json_ms(&b, "push_ms", r->push_ms);
    json_ms(&b, "update_ms", r->update_ms);
    json_ms(&b, "pad_ms", r->pad_ms);
    json_ms(&b, "delay_ms", r->delay_ms);
    json_ms(&b, "slowdown_ms", r->slowdown_ms);
    json_ms(&b, "intermittent_ms", r->intermittent_ms);
    json_ms(&b, "fixed_delay_ms", r->fixed_delay_ms);
    json_ms(&b, "random_delay_ms", r->random_delay_ms);
    json_ms(&b, "pause_ms", r->pause_ms);
    zps_strbuf_printf(&b, "\"dropped\":%s,\"step_ms\":%.3f}", r->dropped ? "true" : "false",
                      r->step_ms);
    return emit(m, &b);
}

int zps_metrics_eval(zps_metrics_t *m, const zps_eval_record_t *r)
{
    if (!m)
        return 0;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b,
                      "{\"type\":\"eval\",\"rank\":%d,\"clock\":%llu,\"epoch\":%.6f,"
                      "\"wall\":%.6f,\"elapsed\":%.6f,",
                      r->rank, (unsigned long long)r->clock, r->epoch, r->wall, r->elapsed);
    json_num(&b, "test_loss", r->loss, false);
    json_num(&b, "test_accuracy", r->accuracy, false);
    if (r->have_versions)
        zps_strbuf_printf(&b, "\"version_min\":%llu,\"version_max\":%llu,",
                          (unsigned long long)r->version_min, (unsigned long long)r->version_max);
    zps_strbuf_printf(&b, "\"examples\":%llu,\"eval_ms\":%.3f,\"final\":%s}",
                      (unsigned long long)r->n, r->eval_ms, r->final ? "true" : "false");
    return emit(m, &b);
}

void zps_progress_init(zps_progress_t *p, FILE *f, bool enabled, double interval_s)
{
    p->f = f;
    p->tty = isatty(fileno(f)) == 1;
    p->drawn = false;
    p->enabled = enabled;
    p->interval_s = interval_s;
    p->last_ns = 0;
}

bool zps_progress_show(zps_progress_t *p, const char *line, bool force)
{
    if (!p->enabled)
        return false;
    uint64_t now = zps_now_ns();
    double since = (double)(now - p->last_ns) / 1e9;
    if (p->tty) {
        if (!force && p->last_ns && since < 0.1)
            return false;
        /* \033[K clears what a longer previous line left behind. */
        fprintf(p->f, "\r%s\033[K", line);
        fflush(p->f);
        p->drawn = true;
    } else {
        if (!force && p->last_ns && since < p->interval_s)
            return false;
        fprintf(p->f, "%s\n", line);
    }
    p->last_ns = now;
    return true;
}

void zps_progress_break(zps_progress_t *p)
{
    if (p->enabled && p->tty && p->drawn) {
        fputc('\n', p->f);
        fflush(p->f);
    }
    p->drawn = false;
}
