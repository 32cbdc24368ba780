/*
 * opt_flags.h - the optimizer's command-line flags, defined once for every
 * program that takes them: zps-server (where the optimizer runs in a
 * cluster) and zps-worker --local (where it runs in the one process).
 *
 * A program puts ZPS_OPT_FLAG_OPTIONS into its getopt_long table, hands the
 * codes in [ZPS_OPT_FLAG_FIRST, ZPS_OPT_FLAG_END) to zps_opt_flag_apply and
 * calls zps_opt_flags_finish after the last flag. Every function here is
 * pure (no I/O, no globals) and may be called from any thread.
 * Not here: what the values mean and their valid ranges beyond the flags'
 * syntax (optimizer.h, zps_opt_config_check); the straggler flags (worker/).
 */
#ifndef ZPS_OPT_FLAGS_H
#define ZPS_OPT_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

#include "optimizer.h"

enum {
    ZPS_OPT_FLAG_FIRST = 0x4000, /* above any single-character option */
    ZPS_OPT_FLAG_OPTIMIZER = ZPS_OPT_FLAG_FIRST,
    ZPS_OPT_FLAG_LR,
    ZPS_OPT_FLAG_MOMENTUM,
    ZPS_OPT_FLAG_NESTEROV,
    ZPS_OPT_FLAG_BETA1,
    ZPS_OPT_FLAG_BETA2,
    ZPS_OPT_FLAG_EPS,
    ZPS_OPT_FLAG_WEIGHT_DECAY,
    ZPS_OPT_FLAG_SCHEDULE,
    ZPS_OPT_FLAG_STEP_EVERY,
    ZPS_OPT_FLAG_GAMMA,
    ZPS_OPT_FLAG_COSINE_STEPS,
    ZPS_OPT_FLAG_LR_MIN,
    ZPS_OPT_FLAG_WARMUP,
    ZPS_OPT_FLAG_END,
};

/* getopt_long entries (<getopt.h>), for inside a struct option initializer. */
/* One getopt_long entry per line. */
/* clang-format off */
#define ZPS_OPT_FLAG_OPTIONS                                                                       \
    {"optimizer", required_argument, NULL, ZPS_OPT_FLAG_OPTIMIZER},                                \
    {"lr", required_argument, NULL, ZPS_OPT_FLAG_LR},                                              \
    {"momentum", required_argument, NULL, ZPS_OPT_FLAG_MOMENTUM},                                  \
    {"nesterov", no_argument, NULL, ZPS_OPT_FLAG_NESTEROV},                                        \
    {"beta1", required_argument, NULL, ZPS_OPT_FLAG_BETA1},                                        \
    {"beta2", required_argument, NULL, ZPS_OPT_FLAG_BETA2},                                        \
    {"eps", required_argument, NULL, ZPS_OPT_FLAG_EPS},                                            \
    {"weight-decay", required_argument, NULL, ZPS_OPT_FLAG_WEIGHT_DECAY},                          \
    {"schedule", required_argument, NULL, ZPS_OPT_FLAG_SCHEDULE},                                  \
    {"step-every", required_argument, NULL, ZPS_OPT_FLAG_STEP_EVERY},                              \
    {"gamma", required_argument, NULL, ZPS_OPT_FLAG_GAMMA},                                        \
    {"cosine-steps", required_argument, NULL, ZPS_OPT_FLAG_COSINE_STEPS},                          \
    {"lr-min", required_argument, NULL, ZPS_OPT_FLAG_LR_MIN},                                      \
    {"warmup", required_argument, NULL, ZPS_OPT_FLAG_WARMUP}
/* clang-format on */

/* The flags' usage lines, indented by two spaces, ending in a newline. */
extern const char zps_opt_flags_usage[];

/* The optimizer being described by the flags seen so far. */
typedef struct zps_opt_flags {
    zps_opt_config_t cfg; /* starts as zps_opt_config_default */
    bool nesterov;        /* --nesterov was given */
    bool any;             /* any optimizer flag was given */
} zps_opt_flags_t;

void zps_opt_flags_init(zps_opt_flags_t *f);

/*
 * Applies flag `code` with argument `arg` (NULL for --nesterov). Returns 0,
 * or ZPS_EINVAL with "invalid --lr 'x': expected a number" in why.
 */
int zps_opt_flag_apply(zps_opt_flags_t *f, int code, const char *arg, char *why, size_t why_size);

/*
 * After the last flag: applies --nesterov (which needs --optimizer momentum)
 * and checks the whole configuration (zps_opt_config_check). Returns 0 or
 * ZPS_EINVAL with the reason in why.
 */
int zps_opt_flags_finish(zps_opt_flags_t *f, char *why, size_t why_size);

#endif
