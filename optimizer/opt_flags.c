/*
 * opt_flags.c - see opt_flags.h.
 */
#include "opt_flags.h"

#include <stdio.h>

#include "error.h"
#include "parse.h"

const char zps_opt_flags_usage[] =
    "  --optimizer NAME       sgd, momentum, nesterov, adam, adamw, adagrad (default sgd)\n"
    "  --lr X                 learning rate (default 0.01)\n"
    "  --momentum MU          momentum, nesterov (default 0.9)\n"
    "  --nesterov             use Nesterov's momentum\n"
    "  --beta1 B1, --beta2 B2 adam, adamw (default 0.9, 0.999)\n"
    "  --eps E                adam, adamw, adagrad (default 1e-8)\n"
    "  --weight-decay WD      L2 penalty; decoupled for adamw (default 0)\n"
    "  --schedule NAME        constant, step, cosine (default constant)\n"
    "  --step-every K         step schedule: multiply lr by gamma every K steps\n"
    "  --gamma G              step schedule factor (default 0.1)\n"
    "  --cosine-steps T       cosine schedule length in steps\n"
    "  --lr-min X             cosine schedule floor (default 0)\n"
    "  --warmup K             linear warm-up over the first K steps (default 0)\n";

void zps_opt_flags_init(zps_opt_flags_t *f)
{
    zps_opt_config_default(&f->cfg);
    f->nesterov = false;
    f->any = false;
}

static int bad(char *why, size_t n, const char *flag, const char *arg, const char *expect)
{
    if (why)
        snprintf(why, n, "invalid %s '%s': expected %s", flag, arg ? arg : "", expect);
    return ZPS_EINVAL;
}

int zps_opt_flag_apply(zps_opt_flags_t *f, int code, const char *arg, char *why, size_t why_size)
{
    zps_opt_config_t *c = &f->cfg;
    uint64_t u;
    f->any = true;
    switch (code) {
    case ZPS_OPT_FLAG_OPTIMIZER:
        return zps_opt_parse(arg, c) ? bad(why, why_size, "--optimizer", arg,
                                           "sgd, momentum, nesterov, adam, adamw or adagrad")
                                     : 0;
    case ZPS_OPT_FLAG_LR:
        return zps_parse_double(arg, &c->lr) ? bad(why, why_size, "--lr", arg, "a number") : 0;
    case ZPS_OPT_FLAG_MOMENTUM:
        return zps_parse_double(arg, &c->momentum)
                   ? bad(why, why_size, "--momentum", arg, "a number")
                   : 0;
    case ZPS_OPT_FLAG_NESTEROV:
        f->nesterov = true;
        return 0;
    case ZPS_OPT_FLAG_BETA1:
        return zps_parse_double(arg, &c->beta1) ? bad(why, why_size, "--beta1", arg, "a number")
                                                : 0;
    case ZPS_OPT_FLAG_BETA2:
        return zps_parse_double(arg, &c->beta2) ? bad(why, why_size, "--beta2", arg, "a number")
                                                : 0;
    case ZPS_OPT_FLAG_EPS:
        return zps_parse_double(arg, &c->eps) ? bad(why, why_size, "--eps", arg, "a number") : 0;
    case ZPS_OPT_FLAG_WEIGHT_DECAY:
        return zps_parse_double(arg, &c->weight_decay)
                   ? bad(why, why_size, "--weight-decay", arg, "a number")
                   : 0;
    case ZPS_OPT_FLAG_SCHEDULE:
        return zps_sched_parse(arg, &c->schedule)
                   ? bad(why, why_size, "--schedule", arg, "constant, step or cosine")
                   : 0;
    case ZPS_OPT_FLAG_STEP_EVERY:
        if (zps_parse_u64(arg, &u))
            return bad(why, why_size, "--step-every", arg, "a positive integer");
        c->step_every = u;
        return 0;
    case ZPS_OPT_FLAG_GAMMA:
        return zps_parse_double(arg, &c->gamma) ? bad(why, why_size, "--gamma", arg, "a number")
                                                : 0;
    case ZPS_OPT_FLAG_COSINE_STEPS:
        if (zps_parse_u64(arg, &u))
            return bad(why, why_size, "--cosine-steps", arg, "a positive integer");
        c->cosine_steps = u;
        return 0;
    case ZPS_OPT_FLAG_LR_MIN:
        return zps_parse_double(arg, &c->lr_min) ? bad(why, why_size, "--lr-min", arg, "a number")
                                                 : 0;
    case ZPS_OPT_FLAG_WARMUP:
        if (zps_parse_u64(arg, &u))
            return bad(why, why_size, "--warmup", arg, "a non-negative integer");
        c->warmup = u;
        return 0;
    }
    if (why)
        snprintf(why, why_size, "not an optimizer flag");
    return ZPS_EINVAL;
}

int zps_opt_flags_finish(zps_opt_flags_t *f, char *why, size_t why_size)
{
    if (f->nesterov) {
        if (f->cfg.kind != ZPS_OPT_MOMENTUM) {
            if (why)
                snprintf(why, why_size, "--nesterov needs --optimizer momentum");
            return ZPS_EINVAL;
        }
        f->cfg.nesterov = true;
    }
    return zps_opt_config_check(&f->cfg, why, why_size);
}
