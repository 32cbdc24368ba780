/*
 * launch_opts.h - zps launch's command line: its own flags into a
 * zps_launch_opts_t, the flags it hands on unchanged to every server or
 * worker, --straggler RANKS:KEY=VALUE, and the check of every value a child
 * will be handed, made before anything is created or started so that a bad
 * one is refused in one line (exit 2) rather than by W workers' usages.
 *
 * A worker's values are judged with zps-worker's own tables (worker_flags.h,
 * straggler_flags.h), a server's optimizer flags with zps-server's
 * (opt_flags.h), so launch and the children refuse the same values in the
 * same words.
 *
 * Not here: the default recipe filled in for what the user left unsaid
 * (launch_plan.h), running anything (launch.c). Nothing here starts a
 * process or touches the file system; the functions print to stdout (help)
 * and stderr (usage errors) only. Main thread of zps launch.
 */
#ifndef ZPS_LAUNCH_OPTS_H
#define ZPS_LAUNCH_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "launch_argv.h"
#include "straggler.h"

/* zps launch's exit statuses besides 0 (see launch.h). */
enum { ZPS_LAUNCH_EXIT_FAILED = 1, ZPS_LAUNCH_EXIT_USAGE = 2 };

#define ZPS_LAUNCH_MAX_TARGETS 8
#define ZPS_LAUNCH_MAX_STRAGGLERS 16

/* One --straggler: the ranks, and the worker flags they get. */
typedef struct zps_launch_straggler {
    zps_rank_set_t ranks;
    zps_argv_t flags; /* worker flags, e.g. "--slowdown", "4" */
} zps_launch_straggler_t;

typedef struct zps_launch_opts {
    uint32_t servers, workers;
    const char *mode; /* "bsp", "ssp" or "asp" */
    uint32_t ssp_bound, backup;
    const char *lr_staleness;
    const char *delay_comp; /* --delay-compensation LAMBDA, as given; NULL: off */
    const char *name;
    const char *runs_dir;
    double targets[ZPS_LAUNCH_MAX_TARGETS];
    size_t target_count;
    double time_limit_s; /* 0: none */
    double stop_at;      /* --stop-at ACC: stop once the evaluator saw it; 0: none */
    bool quiet;
    bool no_memory_check; /* --no-memory-check */
    bool progress;
    double progress_every_s;
    const char *server_bin, *worker_bin;
    zps_argv_t server_args, worker_args; /* handed to every server, every worker */
    bool have_eval_every;
    bool keys; /* --keys: CURVE keys in RUN/keys for every process (launch_keys.h) */
    bool servers_set, workers_set; /* given as flags */
    const char *hosts;             /* --hosts FILE: over ssh (launch_hosts.h); implies keys */
    const char *ssh;               /* --ssh CMD (default "ssh") */
    uint32_t port;                 /* --port: a host's first server port (default 7100) */
    zps_launch_straggler_t specs[ZPS_LAUNCH_MAX_STRAGGLERS];
    size_t spec_count;
    /* `zps launch [flags] -- COMMAND ARGS...`: the words after "--", pointing
     * into argv (command[command_n] is argv's NULL). The command runs once per
     * worker rank instead of zps-worker, told the cluster by its environment
     * (docs/launch.md); no evaluator, no C model. NULL without. */
    char **command;
    size_t command_n;
    /* The ZPS_* variables that name a flag of the workers or the servers, as
     * those flags (zps_launch_opts_env): the children read the variables
     * themselves, before their command line; launch checks and plans with
     * these copies. env_names: "ZPS_DELAY=3 ..." for their messages.
     * env_set_aside: with --keys, the key variables (ZPS_KEY, ...) that the
     * run's own keys replace, NAME=VALUE; not handed to any process. */
    zps_argv_t env_worker_args, env_server_args, env_set_aside;
    char env_names[512];
    /* Written by zps_launch_plan: the data's shape and the batch per worker. */
    zps_data_shape_t data_shape;
    uint64_t batch;
} zps_launch_opts_t;

/*
 * Reads `zps launch` flags (argv[0] = "launch") into *o, which it
 * initialises; the strings of o point into argv. Returns 0, -1 after
 * printing --help to stdout, or an exit status (ZPS_LAUNCH_EXIT_USAGE after
 * one line and a hint on stderr; ZPS_LAUNCH_EXIT_FAILED out of memory).
 * Whatever it returns, zps_launch_opts_free(o) releases o. Uses getopt_long:
 * main thread only.
 */
int zps_launch_opts_parse(int argc, char **argv, zps_launch_opts_t *o);

/*
 * The checks that depend on the number of workers (--backup-workers, the
 * ranks of --straggler): made by zps_launch_opts_parse, and again once a
 * hosts file has set the counts. 0 or ZPS_LAUNCH_EXIT_USAGE after one line.
 */
int zps_launch_opts_check_counts(const zps_launch_opts_t *o);

/*
 * Reads the ZPS_* variables of envp that name a flag of zps-worker or
 * zps-server (envflags.h: ZPS_WEIGHT_DECAY is --weight-decay) into
 * o->env_worker_args and o->env_server_args, so that the checks and the plan
 * see what the children will. A variable naming a flag that launch gives
 * every process itself (ZPS_MODE, ZPS_RANK, ...) would be overridden
 * without a word: it is refused. With --keys, the key variables (ZPS_KEY,
 * ZPS_SERVER_KEY, ZPS_AUTHORIZED_KEYS, ZPS_INSECURE) are a shell's setting
 * for the zps commands and the run's keys replace them: they go to
 * o->env_set_aside instead, for launch to name and hold back. Returns 0, ZPS_LAUNCH_EXIT_USAGE
 * after one line on stderr, or ZPS_LAUNCH_EXIT_FAILED (out of memory).
 */
int zps_launch_opts_env(zps_launch_opts_t *o, char **envp);

/*
 * Whether the workers share their batches: --data-assignment shared (from
 * the command line or ZPS_DATA_ASSIGNMENT) under ssp or asp (bsp keeps the
 * fixed assignment).
 */
bool zps_launch_shared(const zps_launch_opts_t *o);

/* Frees what zps_launch_opts_parse (and zps_launch_plan) allocated in o. */
void zps_launch_opts_free(zps_launch_opts_t *o);

/*
 * Checks every value launch will hand to its servers and workers, each
 * worker with the straggler flags of its rank. Returns 0, or prints one line
 * naming the bad value on stderr and returns ZPS_LAUNCH_EXIT_USAGE. Creates
 * and starts nothing.
 */
int zps_launch_opts_check(const zps_launch_opts_t *o);

/* True if `name` (without "--") is one of zps-server's optimizer flags. */
bool zps_launch_is_optimizer_flag(const char *name);

#endif
