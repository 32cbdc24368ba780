/*
 * straggler_flags.c - the step-time and straggler flags as one table; see
 * straggler_flags.h.
 */
#include "straggler_flags.h"

#include <getopt.h>
#include <string.h>

#include "error.h"
#include "parse.h"

static int parse_base_step(zps_straggler_flags_t *f, const char *arg)
{
    return zps_parse_double(arg, &f->cfg.base_step_ms);
}

static int parse_slowdown(zps_straggler_flags_t *f, const char *arg)
{
    return zps_parse_double(arg, &f->cfg.slowdown);
}

static int parse_delay(zps_straggler_flags_t *f, const char *arg)
{
    return zps_parse_double(arg, &f->cfg.fixed_ms);
}

static int parse_random(zps_straggler_flags_t *f, const char *arg)
{
    return zps_straggler_parse_random(arg, &f->cfg.dist, &f->cfg.mean_ms);
}

static int parse_intermittent(zps_straggler_flags_t *f, const char *arg)
{
    return zps_straggler_parse_intermittent(arg, &f->cfg.intermittent_k, &f->cfg.intermittent_p);
}

static int parse_pause(zps_straggler_flags_t *f, const char *arg)
{
    if (zps_straggler_parse_pause(arg, &f->cfg.pause_clock, &f->cfg.pause_ms))
        return ZPS_EINVAL;
    f->cfg.pause = true;
    return 0;
}

static int parse_ranks(zps_straggler_flags_t *f, const char *arg)
{
    return zps_straggler_parse_ranks(arg, &f->cfg.ranks);
}

static int parse_seed(zps_straggler_flags_t *f, const char *arg)
{
    if (zps_parse_u64(arg, &f->cfg.seed))
        return ZPS_EINVAL;
    f->have_seed = true;
    return 0;
}

const zps_straggler_flag_t zps_straggler_flag_table[ZPS_STRAGGLER_FLAG_COUNT] = {
    {"base-step-ms", false, parse_base_step, "milliseconds",
     "  --base-step-ms MS      pad each step's compute (data, forward, backward) to MS\n"
     "                         milliseconds by sleeping (default 0: no padding)\n"},
    {"slowdown", true, parse_slowdown, "a factor K >= 1",
     "  --slowdown K           every step's work takes K times as long (K >= 1)\n"},
    {"delay", true, parse_delay, "milliseconds",
     "  --delay MS             a fixed extra delay of MS milliseconds per step\n"},
    {"random-delay", true, parse_random, "exp:MEAN or uniform:MEAN (milliseconds)",
     "  --random-delay D:MEAN  a random delay per step: exp:MEAN (exponential) or\n"
     "                         uniform:MEAN (uniform on [0, 2*MEAN)), milliseconds\n"},
    {"intermittent", true, parse_intermittent, "K:P, a factor and a probability, e.g. 4:0.1",
     "  --intermittent K:P     each step's work takes K times as long with\n"
     "                         probability P\n"},
    {"pause-at", true, parse_pause, "T:MS, a clock and milliseconds, e.g. 100:2000",
     "  --pause-at T:MS        pause MS milliseconds once, in the step of clock T\n"},
    {"straggler-ranks", false, parse_ranks, "all, or ranks and ranges such as 0,2-3",
     "  --straggler-ranks SET  ranks the straggler flags apply to: all (default), or\n"
     "                         a list such as 3 or 0,2-3 (the padding applies to all)\n"},
    {"straggler-seed", false, parse_seed, "a non-negative integer",
     "  --straggler-seed S     seed of the random delays (default: --seed)\n"},
};

void zps_straggler_flags_getopt(struct option *out)
{
    for (int i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++) {
        out[i].name = zps_straggler_flag_table[i].name;
        out[i].has_arg = required_argument;
        out[i].flag = NULL;
        out[i].val = ZPS_STRAGGLER_FLAG_FIRST + i;
    }
}

const zps_straggler_flag_t *zps_straggler_flag_find(const char *name)
{
    for (size_t i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++)
        if (strcmp(zps_straggler_flag_table[i].name, name) == 0)
            return &zps_straggler_flag_table[i];
    return NULL;
}

const zps_straggler_flag_t *zps_straggler_flag_of_code(int code)
{
    if (code < ZPS_STRAGGLER_FLAG_FIRST || code >= ZPS_STRAGGLER_FLAG_END)
        return NULL;
    return &zps_straggler_flag_table[code - ZPS_STRAGGLER_FLAG_FIRST];
}

void zps_straggler_flags_init(zps_straggler_flags_t *f)
{
    zps_straggler_config_default(&f->cfg);
    f->have_seed = false;
}

int zps_straggler_flag_apply(zps_straggler_flags_t *f, const zps_straggler_flag_t *flag,
                             const char *arg, char *why, size_t why_size)
{
    /* A copy, so that a parser that fails halfway leaves f as it was. */
    zps_straggler_flags_t next = *f;
    if (arg && flag->parse(&next, arg) == 0) {
        *f = next;
        return 0;
    }
    if (why)
        snprintf(why, why_size, "invalid --%s '%s': expected %s", flag->name, arg ? arg : "",
                 flag->expect);
    return ZPS_EINVAL;
}

int zps_straggler_flags_finish(zps_straggler_flags_t *f, uint64_t seed, char *why, size_t why_size)
{
    if (!f->have_seed)
        f->cfg.seed = seed;
    return zps_straggler_check(&f->cfg, why, why_size);
}

void zps_straggler_flags_usage(FILE *out)
{
    for (size_t i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++)
        fputs(zps_straggler_flag_table[i].help, out);
}

char *zps_straggler_flags_keys(char *buf, size_t size)
{
    size_t n = 0, left = 0;
    for (size_t i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++)
        left += zps_straggler_flag_table[i].per_rank;
    buf[0] = '\0';
    for (size_t i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++) {
        if (!zps_straggler_flag_table[i].per_rank)
            continue;
        left--;
        const char *sep = n == 0 ? "" : left == 0 ? " or " : ", ";
        if (n < size) {
            int k = snprintf(buf + n, size - n, "%s%s", sep, zps_straggler_flag_table[i].name);
            if (k > 0)
                n += (size_t)k;
        }
    }
    return buf;
}
