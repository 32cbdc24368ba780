/*
 * barrier.c - who a shard's barrier waits for; see barrier.h for the rule.
 */
#include "barrier.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* A non-negative integer field that a double holds exactly. */
static bool get_u64(const zps_json_t *o, const char *key, uint64_t *out)
{
    const zps_json_t *v = zps_json_get(o, key);
    if (!v || v->type != ZPS_JSON_NUMBER || !(v->number >= 0) || v->number > 9007199254740992.0)
        return false;
    *out = (uint64_t)v->number;
    return true;
}

/* An array field of exactly n items of the given type. */
static const zps_json_t *get_array(const zps_json_t *o, const char *key, size_t n,
                                   zps_json_type_t item)
{
    const zps_json_t *a = zps_json_get(o, key);
    if (!a || a->type != ZPS_JSON_ARRAY || a->count != n)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (a->items[i].type != item)
            return NULL;
    return a;
}

int zps_barrier_shard_parse(const zps_json_t *stats, zps_barrier_shard_t *out)
{
    zps_barrier_shard_t s;
    memset(&s, 0, sizeof(s));
    if (!stats || stats->type != ZPS_JSON_OBJECT)
        return ZPS_EINVAL;
    uint64_t shard, bound, backup, workers;
    const char *mode = zps_json_string(zps_json_get(stats, "mode"));
    if (!get_u64(stats, "shard", &shard) || !get_u64(stats, "version", &s.version) ||
        !get_u64(stats, "min_clock", &s.min_clock) || !get_u64(stats, "workers", &workers) ||
        !get_u64(stats, "staleness_bound", &bound) || !get_u64(stats, "backup_workers", &backup) ||
        !mode || zps_mode_parse(mode, &s.mode) != 0 || workers == 0 || workers > 65536 ||
        shard > UINT32_MAX || bound > UINT32_MAX || backup > UINT32_MAX)
        return ZPS_EINVAL;
    s.shard = (uint32_t)shard;
    s.staleness_bound = (uint32_t)bound;
    s.backup_workers = (uint32_t)backup;
    s.workers = (uint32_t)workers;
    s.initialized = zps_json_true(zps_json_get(stats, "initialized"));
    const zps_json_t *clocks = get_array(stats, "clocks", workers, ZPS_JSON_NUMBER);
    const zps_json_t *live = get_array(stats, "live", workers, ZPS_JSON_BOOL);
    const zps_json_t *silent = get_array(stats, "silent_ms", workers, ZPS_JSON_NUMBER);
    if (!clocks || !live || !silent)
        return ZPS_EINVAL;
    s.clocks = calloc(workers, sizeof(*s.clocks));
    s.live = calloc(workers, sizeof(*s.live));
    s.silent_ms = calloc(workers, sizeof(*s.silent_ms));
    if (!s.clocks || !s.live || !s.silent_ms) {
        zps_barrier_shard_fini(&s);
        return ZPS_ENOMEM;
    }
    for (size_t w = 0; w < workers; w++) {
        double c = clocks->items[w].number;
        if (!(c >= 0) || c > 9007199254740992.0) {
            zps_barrier_shard_fini(&s);
            return ZPS_EINVAL;
        }
        s.clocks[w] = (uint64_t)c;
        s.live[w] = live->items[w].boolean;
        s.silent_ms[w] = silent->items[w].number;
    }
    *out = s;
    return 0;
}

void zps_barrier_shard_fini(zps_barrier_shard_t *s)
{
    if (!s)
        return;
    free(s->clocks);
    free(s->live);
    free(s->silent_ms);
    s->clocks = NULL;
    s->live = NULL;
    s->silent_ms = NULL;
}

static void name(zps_barrier_wait_t *out, uint32_t w)
{
    if (out->count < ZPS_BARRIER_NAMED)
        out->rank[out->count] = w;
    out->count++;
}

/* BSP: the step for clock v waits for the live workers that have not pushed v. */
static void wait_bsp(const zps_barrier_shard_t *s, zps_barrier_wait_t *out)
{
    uint64_t v = s->version;
    uint32_t live = 0, pushed = 0;
    for (uint32_t w = 0; w < s->workers; w++) {
        if (!s->live[w])
            continue;
        live++;
        if (s->clocks[w] > v)
            pushed++;
    }
    /* The quorum as consistency.c counts it: W-B, never more than are live. */
    uint32_t quorum = s->workers - (s->backup_workers < s->workers ? s->backup_workers : 0);
    if (live < quorum)
        quorum = live;
    if (quorum == 0)
        quorum = 1;
    /* Nobody has pushed v: every live worker is computing, none is held. */
    if (pushed == 0 || pushed >= quorum)
        return;
    out->holding = true;
    out->clock = v;
    out->needed = quorum - pushed;
    for (uint32_t w = 0; w < s->workers; w++)
        if (s->live[w] && s->clocks[w] <= v)
            name(out, w);
}

/* SSP: the fastest live worker's next pull, for clock t = pushed[f], waits
 * until every live worker u has pushed[u] >= t - s. */
static void wait_ssp(const zps_barrier_shard_t *s, zps_barrier_wait_t *out)
{
    bool any = false;
    uint64_t t = 0;
    for (uint32_t w = 0; w < s->workers; w++) {
        if (s->live[w] && (!any || s->clocks[w] > t)) {
            t = s->clocks[w];
            any = true;
        }
    }
    if (!any || t <= s->staleness_bound)
        return;
    uint64_t need = t - s->staleness_bound; /* every live worker's pushed[u] >= need */
    for (uint32_t w = 0; w < s->workers; w++)
        if (s->live[w] && s->clocks[w] < need)
            name(out, w);
    if (out->count == 0)
        return;
    out->holding = true;
    out->clock = t;
    out->needed = out->count;
}

void zps_barrier_wait(const zps_barrier_shard_t *s, zps_barrier_wait_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!s->initialized || !s->clocks)
        return;
    if (s->mode == ZPS_MODE_BSP)
        wait_bsp(s, out);
    else if (s->mode == ZPS_MODE_SSP)
        wait_ssp(s, out);
}

/* Appends to buf[*n..size), truncating; *n counts what was written. */
__attribute__((format(printf, 4, 5))) static void put(char *buf, size_t size, size_t *n,
                                                      const char *fmt, ...)
{
    if (*n + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, size - *n, fmt, ap);
    va_end(ap);
    if (k > 0)
        *n += (size_t)k < size - *n ? (size_t)k : size - *n - 1;
}

/* "14 s" from 14000 ms; tenths below 10 s, where they still tell something. */
static void put_seconds(char *buf, size_t size, size_t *n, double ms)
{
    double sec = ms / 1e3;
    if (sec < 10)
        put(buf, size, n, "%.1f s", sec);
    else
        put(buf, size, n, "%.0f s", sec);
}

size_t zps_barrier_line(const zps_barrier_shard_t *s, const zps_barrier_wait_t *w, double held_s,
                        char *buf, size_t size)
{
    size_t n = 0;
    if (size == 0)
        return 0;
    buf[0] = '\0';
    if (!w->holding)
        return 0;
    put(buf, size, &n, "clock %llu: waiting for ", (unsigned long long)w->clock);
    if (w->needed < w->count)
        put(buf, size, &n, "%u push%s of ", w->needed, w->needed == 1 ? "" : "es");
    uint32_t named = w->count < ZPS_BARRIER_NAMED ? w->count : ZPS_BARRIER_NAMED;
    for (uint32_t i = 0; i < named; i++) {
        uint32_t r = w->rank[i];
        put(buf, size, &n, "%sworker %u, last heard ", i ? "; " : "", r);
        put_seconds(buf, size, &n, r < s->workers ? s->silent_ms[r] : 0);
        put(buf, size, &n, " ago");
    }
    if (w->count > named)
        put(buf, size, &n, "; and %u more", w->count - named);
    if (held_s >= 0) {
        put(buf, size, &n, "; held ");
        put_seconds(buf, size, &n, held_s * 1e3);
    }
    return n;
}
