/*
 * straggler.c - the base step time and injected stragglers; see straggler.h.
 */
#include "straggler.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "parse.h"
#include "rng.h"

/* Seeds straggler streams apart from the data order and initialisation streams. */
#define STRAGGLER_SALT 0x73747261676c6572ull /* "straglr" */

void zps_straggler_config_default(zps_straggler_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->ranks.all = true;
    cfg->slowdown = 1.0;
    cfg->intermittent_k = 1.0;
    cfg->intermittent_p = 0.0;
    cfg->seed = 1;
}

bool zps_rank_set_has(const zps_rank_set_t *set, uint32_t rank)
{
    if (set->all)
        return true;
    for (uint32_t i = 0; i < set->count; i++)
        if (rank >= set->lo[i] && rank <= set->hi[i])
            return true;
    return false;
}

static bool any_setting(const zps_straggler_config_t *cfg)
{
    return cfg->slowdown > 1.0 || (cfg->intermittent_k > 1.0 && cfg->intermittent_p > 0.0) ||
           cfg->fixed_ms > 0.0 || (cfg->dist != ZPS_DELAY_NONE && cfg->mean_ms > 0.0) || cfg->pause;
}

bool zps_straggler_applies(const zps_straggler_config_t *cfg, uint32_t rank)
{
    return any_setting(cfg) && zps_rank_set_has(&cfg->ranks, rank);
}

/* A bounded, finite millisecond value: a day is more than any study needs. */
static bool ms_ok(double v)
{
    return isfinite(v) && v >= 0.0 && v <= 86400000.0;
}

int zps_straggler_check(const zps_straggler_config_t *cfg, char *why, size_t why_size)
{
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, why_size, __VA_ARGS__);                                                      \
        return ZPS_EINVAL;                                                                         \
    } while (0)
    if (!ms_ok(cfg->base_step_ms))
        BAD("--base-step-ms must be in [0, 86400000] milliseconds (got %g)", cfg->base_step_ms);
    if (!(isfinite(cfg->slowdown) && cfg->slowdown >= 1.0 && cfg->slowdown <= 1000.0))
        BAD("--slowdown must be in [1, 1000] (got %g)", cfg->slowdown);
    if (!(isfinite(cfg->intermittent_k) && cfg->intermittent_k >= 1.0 &&
          cfg->intermittent_k <= 1000.0))
        BAD("--intermittent K must be in [1, 1000] (got %g)", cfg->intermittent_k);
    if (!(cfg->intermittent_p >= 0.0 && cfg->intermittent_p <= 1.0))
        BAD("--intermittent P must be a probability in [0, 1] (got %g)", cfg->intermittent_p);
    if (!ms_ok(cfg->fixed_ms))
        BAD("--delay must be in [0, 86400000] milliseconds (got %g)", cfg->fixed_ms);
    if (!ms_ok(cfg->mean_ms))
        BAD("--random-delay mean must be in [0, 86400000] milliseconds (got %g)", cfg->mean_ms);
    if (cfg->pause && !ms_ok(cfg->pause_ms))
        BAD("--pause-at MS must be in [0, 86400000] milliseconds (got %g)", cfg->pause_ms);
    if (!cfg->ranks.all) {
        if (cfg->ranks.count == 0)
            BAD("--straggler-ranks names no rank");
        for (uint32_t i = 0; i < cfg->ranks.count; i++)
            if (cfg->ranks.lo[i] > cfg->ranks.hi[i])
                BAD("--straggler-ranks: range %u-%u is empty", cfg->ranks.lo[i], cfg->ranks.hi[i]);
    }
    return 0;
#undef BAD
}

void zps_straggler_delay(const zps_straggler_config_t *cfg, uint32_t rank, uint64_t clock,
                         double compute_ms, zps_step_delay_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!(compute_ms > 0.0))
        compute_ms = 0.0;
    double work = compute_ms;
    if (cfg->base_step_ms > compute_ms) {
        out->pad_ms = cfg->base_step_ms - compute_ms;
        work = cfg->base_step_ms;
    }
    if (!zps_straggler_applies(cfg, rank))
        return;

    /* Two uniforms per (seed, rank, clock), always both drawn in this order,
     * so turning one setting on does not change the other's draws. Ranks are
     * below 2^16 and clocks below 2^47 in any run this tool can make. */
    zps_rng_t r;
    zps_rng_seed(&r, cfg->seed ^ STRAGGLER_SALT, ((uint64_t)rank << 47) ^ clock);
    double u_hit = zps_rng_uniform(&r);
    double u_delay = zps_rng_uniform(&r);

    if (cfg->slowdown > 1.0)
        out->slowdown_ms = (cfg->slowdown - 1.0) * work;
    if (cfg->intermittent_k > 1.0 && u_hit < cfg->intermittent_p)
        out->intermittent_ms = (cfg->intermittent_k - 1.0) * work;
    out->fixed_ms = cfg->fixed_ms;
    if (cfg->mean_ms > 0.0) {
        if (cfg->dist == ZPS_DELAY_EXP)
            out->random_ms = -cfg->mean_ms * log1p(-u_delay); /* 1 - u in (0, 1] */
        else if (cfg->dist == ZPS_DELAY_UNIFORM)
            out->random_ms = 2.0 * cfg->mean_ms * u_delay;
    }
    if (cfg->pause && clock == cfg->pause_clock)
        out->pause_ms = cfg->pause_ms;
    out->delay_ms =
        out->slowdown_ms + out->intermittent_ms + out->fixed_ms + out->random_ms + out->pause_ms;
}

/* Splits "A:B" at the first ':' into a (copied) head and tail. */
static int split2(const char *s, char *a, size_t a_size, const char **b)
{
    const char *colon = strchr(s, ':');
    if (!colon || colon == s || colon[1] == '\0' || (size_t)(colon - s) >= a_size)
        return ZPS_EINVAL;
    memcpy(a, s, (size_t)(colon - s));
    a[colon - s] = '\0';
    *b = colon + 1;
    return 0;
}

static int parse_rank(const char *s, size_t n, uint32_t *out)
{
    char buf[16];
    if (n == 0 || n >= sizeof(buf))
        return ZPS_EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    long v;
    if (zps_parse_long(buf, 0, 65535, &v))
        return ZPS_EINVAL;
    *out = (uint32_t)v;
    return 0;
}

int zps_straggler_parse_ranks(const char *s, zps_rank_set_t *out)
{
    zps_rank_set_t set;
    memset(&set, 0, sizeof(set));
    if (!s || !*s)
        return ZPS_EINVAL;
    if (strcmp(s, "all") == 0) {
        set.all = true;
        *out = set;
        return 0;
    }
    const char *p = s;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (set.count == ZPS_STRAGGLER_RANGES)
            return ZPS_EINVAL;
        const char *dash = memchr(p, '-', n);
        uint32_t lo, hi;
        if (dash) {
            if (parse_rank(p, (size_t)(dash - p), &lo) ||
                parse_rank(dash + 1, n - (size_t)(dash - p) - 1, &hi) || lo > hi)
                return ZPS_EINVAL;
        } else {
            if (parse_rank(p, n, &lo))
                return ZPS_EINVAL;
            hi = lo;
        }
        set.lo[set.count] = lo;
        set.hi[set.count] = hi;
        set.count++;
        if (!end)
            break;
        p = end + 1;
    }
    *out = set;
    return 0;
}

int zps_straggler_parse_random(const char *s, zps_delay_dist_t *dist, double *mean_ms)
{
    char kind[16];
    const char *rest;
    double m;
    if (!s || split2(s, kind, sizeof(kind), &rest) || zps_parse_double(rest, &m))
        return ZPS_EINVAL;
    zps_delay_dist_t d;
    if (strcmp(kind, "exp") == 0)
        d = ZPS_DELAY_EXP;
    else if (strcmp(kind, "uniform") == 0)
        d = ZPS_DELAY_UNIFORM;
    else
        return ZPS_EINVAL;
    *dist = d;
    *mean_ms = m;
    return 0;
}

int zps_straggler_parse_intermittent(const char *s, double *k, double *p)
{
    char head[64];
    const char *rest;
    double kv, pv;
    if (!s || split2(s, head, sizeof(head), &rest) || zps_parse_double(head, &kv) ||
        zps_parse_double(rest, &pv))
        return ZPS_EINVAL;
    *k = kv;
    *p = pv;
    return 0;
}

int zps_straggler_parse_pause(const char *s, uint64_t *clock, double *ms)
{
    char head[64];
    const char *rest;
    uint64_t c;
    double m;
    if (!s || split2(s, head, sizeof(head), &rest) || zps_parse_u64(head, &c) ||
        zps_parse_double(rest, &m))
        return ZPS_EINVAL;
    *clock = c;
    *ms = m;
    return 0;
}

char *zps_straggler_describe(const zps_straggler_config_t *cfg, uint32_t rank, char *buf,
                             size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (len < size) {                                                                          \
            int k_ = snprintf(buf + len, size - len, "%s", len ? "; " : "");                       \
            if (k_ > 0)                                                                            \
                len += (size_t)k_;                                                                 \
        }                                                                                          \
        if (len < size) {                                                                          \
            int k_ = snprintf(buf + len, size - len, __VA_ARGS__);                                 \
            if (k_ > 0)                                                                            \
                len += (size_t)k_;                                                                 \
        }                                                                                          \
    } while (0)
    if (cfg->base_step_ms > 0)
        ADD("base step %g ms", cfg->base_step_ms);
    if (zps_straggler_applies(cfg, rank)) {
        if (cfg->slowdown > 1.0)
            ADD("slowdown %g", cfg->slowdown);
        if (cfg->intermittent_k > 1.0 && cfg->intermittent_p > 0.0)
            ADD("intermittent %gx with p %g", cfg->intermittent_k, cfg->intermittent_p);
        if (cfg->fixed_ms > 0)
            ADD("fixed delay %g ms", cfg->fixed_ms);
        if (cfg->dist != ZPS_DELAY_NONE && cfg->mean_ms > 0)
            ADD("random delay %s mean %g ms", cfg->dist == ZPS_DELAY_EXP ? "exp" : "uniform",
                cfg->mean_ms);
        if (cfg->pause)
            ADD("pause %g ms at clock %llu", cfg->pause_ms, (unsigned long long)cfg->pause_clock);
        ADD("seed %llu", (unsigned long long)cfg->seed);
    }
    if (len == 0)
        snprintf(buf, size, "none");
#undef ADD
    return buf;
}
