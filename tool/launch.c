/*
 * launch.c - `zps launch`: a local cluster from one command; see launch.h and
 * docs/launch.md.
 *
 * One libuv loop drives everything: uv_spawn starts the processes, their exit
 * callbacks decide what happens next, one 100 ms timer tails the processes'
 * logs and metrics files, draws the progress line and escalates stops, and
 * the servers' STATS are fetched on the threadpool (the client blocks) so no
 * callback waits on a socket.
 *
 * Every child is started through `zps launch --exec-child PPID BIN ARGS...`,
 * which sets PR_SET_PDEATHSIG before exec'ing BIN: if the launcher dies, even
 * by SIGKILL, the kernel kills its children. Each child also leads its own
 * process group (UV_PROCESS_DETACHED), so a terminal's Ctrl-C reaches only
 * the launcher, which then stops the cluster in order, and a stop signal sent
 * to the group reaches anything the child started.
 *
 * The run's life: start the servers (each binds tcp://127.0.0.1:* and writes
 * its endpoint to a file), then the workers; when worker 0 has evaluated the
 * final model, give the other workers a grace period to finish (a BSP backup
 * straggler may still be pushing clocks that will be dropped), fetch the
 * servers' final STATS, stop the servers, write the summary.
 */
#include "launch.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "client.h"
#include "data.h"
#include "error.h"
#include "log.h"
#include "metrics.h"
#include "model.h"
#include "opt_flags.h"
#include "parse.h"
#include "runstats.h"
#include "straggler.h"
#include "timeutil.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

#define TICK_MS 100
#define STARTUP_TIMEOUT_S 30.0
#define STOP_GRACE_S 5.0       /* SIGTERM, then SIGKILL after this long */
#define FINISH_GRACE_S 5.0     /* after the final evaluation, the workers get this long */
#define EVALUATOR_GRACE_S 60.0 /* after the last worker, the evaluator gets this long */
#define STATS_EVERY_S 1.0
#define MAX_TARGETS 8
#define MAX_STRAGGLER_SPECS 16

/* ---- small string vectors ---- */

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec_t;

static int sv_push(strvec_t *s, const char *str)
{
    if (s->n + 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return ZPS_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    char *copy = strdup(str);
    if (!copy)
        return ZPS_ENOMEM;
    s->v[s->n++] = copy;
    s->v[s->n] = NULL;
    return 0;
}

__attribute__((format(printf, 2, 3))) static int sv_pushf(strvec_t *s, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return sv_push(s, buf);
}

static int sv_extend(strvec_t *s, const strvec_t *from)
{
    for (size_t i = 0; i < from->n; i++)
        if (sv_push(s, from->v[i]))
            return ZPS_ENOMEM;
    return 0;
}

static void sv_free(strvec_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

/* ---- options ---- */

typedef struct straggler_spec {
    zps_rank_set_t ranks;
    strvec_t flags; /* worker flags, e.g. "--slowdown", "4" */
} straggler_spec_t;

typedef struct options {
    uint32_t servers, workers;
    const char *mode;
    uint32_t staleness, backup;
    const char *lr_staleness;
    const char *name;
    const char *runs_dir;
    double targets[MAX_TARGETS];
    size_t target_count;
    double time_limit_s; /* 0: none */
    bool quiet;
    bool progress;
    double progress_every_s;
    const char *server_bin, *worker_bin;
    strvec_t server_args, worker_args;
    bool have_eval_every;
    straggler_spec_t specs[MAX_STRAGGLER_SPECS];
    size_t spec_count;
} options_t;

/* Flags handed on unchanged: to every server, or to every worker. */
enum { TO_SERVER, TO_WORKER };
static const struct passthrough {
    const char *name;
    int has_arg;
    int to;
} passthrough[] = {
    {"optimizer", 1, TO_SERVER},
    {"lr", 1, TO_SERVER},
    {"momentum", 1, TO_SERVER},
    {"nesterov", 0, TO_SERVER},
    {"beta1", 1, TO_SERVER},
    {"beta2", 1, TO_SERVER},
    {"eps", 1, TO_SERVER},
    {"weight-decay", 1, TO_SERVER},
    {"schedule", 1, TO_SERVER},
    {"step-every", 1, TO_SERVER},
    {"gamma", 1, TO_SERVER},
    {"cosine-steps", 1, TO_SERVER},
    {"lr-min", 1, TO_SERVER},
    {"warmup", 1, TO_SERVER},
    {"worker-timeout", 1, TO_SERVER},
    {"max-pending-pulls", 1, TO_SERVER},
    {"model", 1, TO_WORKER},
    {"data", 1, TO_WORKER},
    {"data-dir", 1, TO_WORKER},
    {"batch", 1, TO_WORKER},
    {"epochs", 1, TO_WORKER},
    {"clocks", 1, TO_WORKER},
    {"seed", 1, TO_WORKER},
    {"backend", 1, TO_WORKER},
    {"device", 1, TO_WORKER},
    {"blas-threads", 1, TO_WORKER},
    {"eval-every", 1, TO_WORKER},
    {"base-step-ms", 1, TO_WORKER},
    {"slowdown", 1, TO_WORKER},
    {"delay", 1, TO_WORKER},
    {"random-delay", 1, TO_WORKER},
    {"intermittent", 1, TO_WORKER},
    {"pause-at", 1, TO_WORKER},
    {"straggler-ranks", 1, TO_WORKER},
    {"straggler-seed", 1, TO_WORKER},
    {"no-final-wait", 0, TO_WORKER},
};
#define NPASS (sizeof(passthrough) / sizeof(passthrough[0]))

/* Keys --straggler accepts: worker flags that take a value. */
static const char *const straggler_keys[] = {"slowdown", "delay", "random-delay", "intermittent",
                                             "pause-at"};

static void usage(FILE *f)
{
    fprintf(f, "usage: zps launch [options]\n"
               "\n"
               "Starts a zps cluster on this machine -- S zps-server shards on free loopback\n"
               "ports and W zps-worker processes -- shows one progress line, stops everything\n"
               "when training ends (or on Ctrl-C, or when a process fails) and leaves a run\n"
               "folder RUNS/NAME with each process's log, the metrics, the command lines and\n"
               "summary.json. docs/launch.md has the details.\n"
               "\n"
               "Cluster:\n"
               "  --servers S             server shards (default 2)\n"
               "  --workers W             workers (default 4)\n"
               "  --mode bsp|ssp|asp      consistency (default bsp)\n"
               "  --staleness S           ssp: the staleness bound, S clocks\n"
               "  --backup-workers B      bsp: take each step once W-B pushes are in\n"
               "  --lr-staleness RULE     servers' staleness-aware learning rate (e.g. inverse)\n"
               "  --server-arg ARG        hand ARG to every zps-server (repeatable)\n"
               "  --worker-arg ARG        hand ARG to every zps-worker (repeatable)\n"
               "\n"
               "Handed to every server: --optimizer --lr --momentum --nesterov --beta1 --beta2\n"
               "  --eps --weight-decay --schedule --step-every --gamma --cosine-steps --lr-min\n"
               "  --warmup --worker-timeout --max-pending-pulls\n"
               "Handed to every worker: --model --data --data-dir --batch --epochs --clocks\n"
               "  --seed --backend --device --blas-threads --eval-every (default 250 here)\n"
               "  --base-step-ms --slowdown --delay --random-delay --intermittent --pause-at\n"
               "  --straggler-ranks --straggler-seed --no-final-wait\n"
               "\n"
               "Stragglers for chosen ranks:\n"
               "  --straggler RANKS:KEY=VALUE[,KEY=VALUE...]\n"
               "                          RANKS is all, 3 or 0,2-3; KEY is slowdown, delay,\n"
               "                          random-delay, intermittent or pause-at, with the\n"
               "                          worker flag's value, e.g. --straggler 3:slowdown=4\n"
               "                          or --straggler all:intermittent=4:0.1 (repeatable)\n"
               "\n"
               "Run:\n"
               "  --name NAME             run folder name (default MODE-YYYYmmdd-HHMMSS)\n"
               "  --runs-dir DIR          where run folders go (default runs)\n"
               "  --targets A1,A2,...     accuracy targets for seconds_to_target\n"
               "                          (default 0.85,0.88)\n"
               "  --time-limit SEC        stop and fail after SEC seconds (default: none)\n"
               "  --quiet                 do not echo the processes' output (it is in their logs)\n"
               "  --no-progress           no progress line\n"
               "  --progress-every S      seconds between progress lines when stderr is not a\n"
               "                          terminal (default 10)\n"
               "  --server-bin PATH       zps-server to run (default: beside this zps)\n"
               "  --worker-bin PATH       zps-worker to run (default: beside this zps)\n"
               "  --help                  this text\n"
               "\n"
               "Exit status: 0 training ended and every process exited cleanly; 1 a process\n"
               "failed (named on stderr) or the time limit passed; 2 bad usage; 130 or 143\n"
               "interrupted by SIGINT or SIGTERM.\n");
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zps launch: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'zps launch --help'.\n");
    va_end(ap);
    return EXIT_USAGE;
}

static bool is_straggler_key(const char *k)
{
    for (size_t i = 0; i < sizeof(straggler_keys) / sizeof(straggler_keys[0]); i++)
        if (strcmp(k, straggler_keys[i]) == 0)
            return true;
    return false;
}

/* Checks one straggler flag's value the way zps-worker will. */
static bool straggler_value_ok(const char *key, const char *value)
{
    zps_straggler_config_t sc;
    zps_straggler_config_default(&sc);
    int rc;
    if (strcmp(key, "slowdown") == 0)
        rc = zps_parse_double(value, &sc.slowdown);
    else if (strcmp(key, "delay") == 0)
        rc = zps_parse_double(value, &sc.fixed_ms);
    else if (strcmp(key, "random-delay") == 0)
        rc = zps_straggler_parse_random(value, &sc.dist, &sc.mean_ms);
    else if (strcmp(key, "intermittent") == 0)
        rc = zps_straggler_parse_intermittent(value, &sc.intermittent_k, &sc.intermittent_p);
    else {
        rc = zps_straggler_parse_pause(value, &sc.pause_clock, &sc.pause_ms);
        sc.pause = true;
    }
    char why[256];
    return rc == 0 && zps_straggler_check(&sc, why, sizeof(why)) == 0;
}

/* --straggler RANKS:KEY=VALUE[,KEY=VALUE...] */
static int parse_straggler(options_t *o, const char *arg)
{
    if (o->spec_count == MAX_STRAGGLER_SPECS)
        return usage_error("at most %d --straggler flags", MAX_STRAGGLER_SPECS);
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg)
        return usage_error("invalid --straggler '%s': expected RANKS:KEY=VALUE, e.g. 3:slowdown=4",
                           arg);
    char ranks[256];
    size_t rl = (size_t)(colon - arg);
    if (rl >= sizeof(ranks))
        return usage_error("invalid --straggler '%s': rank list too long", arg);
    memcpy(ranks, arg, rl);
    ranks[rl] = '\0';
    straggler_spec_t *sp = &o->specs[o->spec_count];
    memset(sp, 0, sizeof(*sp));
    if (zps_straggler_parse_ranks(ranks, &sp->ranks))
        return usage_error("invalid --straggler ranks '%s': expected all, or ranks such as 0,2-3",
                           ranks);
    char *rest = strdup(colon + 1);
    if (!rest)
        return EXIT_FAILED;
    int ex = 0;
    char *save = NULL;
    bool any = false;
    for (char *item = strtok_r(rest, ",", &save); item && !ex; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            ex = usage_error("invalid --straggler item '%s': expected KEY=VALUE", item);
            break;
        }
        *eq = '\0';
        const char *key = item, *value = eq + 1;
        if (!is_straggler_key(key))
            ex = usage_error("invalid --straggler key '%s': expected slowdown, delay, "
                             "random-delay, intermittent or pause-at",
                             key);
        else if (!straggler_value_ok(key, value))
            ex = usage_error("invalid --straggler %s=%s (see zps-worker --help for its values)",
                             key, value);
        else if (sv_pushf(&sp->flags, "--%s", key) || sv_push(&sp->flags, value))
            ex = EXIT_FAILED;
        any = true;
    }
    free(rest);
    if (!ex && !any)
        ex = usage_error("invalid --straggler '%s': no KEY=VALUE", arg);
    if (ex) {
        sv_free(&sp->flags);
        return ex;
    }
    o->spec_count++;
    return 0;
}

static int parse_targets(options_t *o, const char *arg)
{
    char **items;
    size_t n;
    if (zps_parse_list(arg, &items, &n))
        return usage_error("invalid --targets '%s': expected accuracies such as 0.85,0.88", arg);
    int ex = 0;
    if (n > MAX_TARGETS)
        ex = usage_error("at most %d --targets", MAX_TARGETS);
    for (size_t i = 0; !ex && i < n; i++) {
        double t;
        if (zps_parse_double(items[i], &t) || t < 0 || t > 1)
            ex = usage_error("invalid --targets item '%s': expected an accuracy in [0, 1]",
                             items[i]);
        else
            o->targets[i] = t;
    }
    if (!ex)
        o->target_count = n;
    free(items);
    return ex;
}

enum {
    O_SERVERS = 256,
    O_WORKERS,
    O_MODE,
    O_STALENESS,
    O_BACKUP,
    O_LR_STALENESS,
    O_SERVER_ARG,
    O_WORKER_ARG,
    O_STRAGGLER,
    O_NAME,
    O_RUNS_DIR,
    O_TARGETS,
    O_TIME_LIMIT,
    O_QUIET,
    O_NO_PROGRESS,
    O_PROGRESS_EVERY,
    O_SERVER_BIN,
    O_WORKER_BIN,
    O_HELP,
    O_PASS = 1000, /* + index into passthrough[] */
};

static void options_free(options_t *o)
{
    sv_free(&o->server_args);
    sv_free(&o->worker_args);
    for (size_t i = 0; i < o->spec_count; i++)
        sv_free(&o->specs[i].flags);
}

/* Returns 0, an exit status (usage: 2), or -1 after --help. */
static int parse_options(int argc, char **argv, options_t *o)
{
    static const struct option own[] = {
        {"servers", required_argument, NULL, O_SERVERS},
        {"workers", required_argument, NULL, O_WORKERS},
        {"mode", required_argument, NULL, O_MODE},
        {"staleness", required_argument, NULL, O_STALENESS},
        {"backup-workers", required_argument, NULL, O_BACKUP},
        {"lr-staleness", required_argument, NULL, O_LR_STALENESS},
        {"server-arg", required_argument, NULL, O_SERVER_ARG},
        {"worker-arg", required_argument, NULL, O_WORKER_ARG},
        {"straggler", required_argument, NULL, O_STRAGGLER},
        {"name", required_argument, NULL, O_NAME},
        {"runs-dir", required_argument, NULL, O_RUNS_DIR},
        {"targets", required_argument, NULL, O_TARGETS},
        {"time-limit", required_argument, NULL, O_TIME_LIMIT},
        {"quiet", no_argument, NULL, O_QUIET},
        {"no-progress", no_argument, NULL, O_NO_PROGRESS},
        {"progress-every", required_argument, NULL, O_PROGRESS_EVERY},
        {"server-bin", required_argument, NULL, O_SERVER_BIN},
        {"worker-bin", required_argument, NULL, O_WORKER_BIN},
        {"help", no_argument, NULL, O_HELP},
    };
    const size_t nown = sizeof(own) / sizeof(own[0]);
    struct option all[sizeof(own) / sizeof(own[0]) + NPASS + 1];
    memcpy(all, own, sizeof(own));
    for (size_t i = 0; i < NPASS; i++) {
        all[nown + i].name = passthrough[i].name;
        all[nown + i].has_arg = passthrough[i].has_arg ? required_argument : no_argument;
        all[nown + i].flag = NULL;
        all[nown + i].val = O_PASS + (int)i;
    }
    memset(&all[nown + NPASS], 0, sizeof(all[0]));

    memset(o, 0, sizeof(*o));
    o->servers = 2;
    o->workers = 4;
    o->mode = "bsp";
    o->runs_dir = "runs";
    o->targets[0] = 0.85;
    o->targets[1] = 0.88;
    o->target_count = 2;
    o->progress = true;
    o->progress_every_s = 10.0;
    bool have_staleness = false;

    long l;
    double d;
    int c;
    optind = 1;
    opterr = 1;
    while ((c = getopt_long(argc, argv, "", all, NULL)) != -1) {
        const char *a = optarg;
        int ex = 0;
        switch (c) {
        case O_SERVERS:
            if (zps_parse_long(a, 1, 256, &l))
                return usage_error("invalid --servers '%s': expected an integer in [1, 256]", a);
            o->servers = (uint32_t)l;
            break;
        case O_WORKERS:
            if (zps_parse_long(a, 1, 1024, &l))
                return usage_error("invalid --workers '%s': expected an integer in [1, 1024]", a);
            o->workers = (uint32_t)l;
            break;
        case O_MODE:
            if (strcmp(a, "bsp") != 0 && strcmp(a, "ssp") != 0 && strcmp(a, "asp") != 0)
                return usage_error("invalid --mode '%s': expected bsp, ssp or asp", a);
            o->mode = a;
            break;
        case O_STALENESS:
            if (zps_parse_long(a, 0, 1000000, &l))
                return usage_error("invalid --staleness '%s': expected an integer >= 0", a);
            o->staleness = (uint32_t)l;
            have_staleness = true;
            break;
        case O_BACKUP:
            if (zps_parse_long(a, 0, 65535, &l))
                return usage_error("invalid --backup-workers '%s': expected an integer >= 0", a);
            o->backup = (uint32_t)l;
            break;
        case O_LR_STALENESS:
            o->lr_staleness = a;
            break;
        case O_SERVER_ARG:
            ex = sv_push(&o->server_args, a) ? EXIT_FAILED : 0;
            break;
        case O_WORKER_ARG:
            ex = sv_push(&o->worker_args, a) ? EXIT_FAILED : 0;
            break;
        case O_STRAGGLER:
            ex = parse_straggler(o, a);
            break;
        case O_NAME:
            if (!*a || strchr(a, '/') || strcmp(a, ".") == 0 || strcmp(a, "..") == 0)
                return usage_error("invalid --name '%s': expected a folder name without '/'", a);
            o->name = a;
            break;
        case O_RUNS_DIR:
            o->runs_dir = a;
            break;
        case O_TARGETS:
            ex = parse_targets(o, a);
            break;
        case O_TIME_LIMIT:
            if (zps_parse_double(a, &d) || !(d > 0))
                return usage_error("invalid --time-limit '%s': expected seconds > 0", a);
            o->time_limit_s = d;
            break;
        case O_QUIET:
            o->quiet = true;
            break;
        case O_NO_PROGRESS:
            o->progress = false;
            break;
        case O_PROGRESS_EVERY:
            if (zps_parse_double(a, &d) || !(d > 0))
                return usage_error("invalid --progress-every '%s': expected seconds > 0", a);
            o->progress_every_s = d;
            break;
        case O_SERVER_BIN:
            o->server_bin = a;
            break;
        case O_WORKER_BIN:
            o->worker_bin = a;
            break;
        case O_HELP:
            usage(stdout);
            return -1;
        default:
            if (c >= O_PASS && c < O_PASS + (int)NPASS) {
                const struct passthrough *p = &passthrough[c - O_PASS];
                strvec_t *to = p->to == TO_SERVER ? &o->server_args : &o->worker_args;
                if (strcmp(p->name, "eval-every") == 0)
                    o->have_eval_every = true;
                if (sv_pushf(to, "--%s", p->name) || (p->has_arg && sv_push(to, a)))
                    ex = EXIT_FAILED;
                break;
            }
            fprintf(stderr, "Try 'zps launch --help'.\n");
            return EXIT_USAGE;
        }
        if (ex)
            return ex;
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (have_staleness && strcmp(o->mode, "ssp") != 0)
        return usage_error("--staleness applies to --mode ssp only");
    if (o->backup > 0 && strcmp(o->mode, "bsp") != 0)
        return usage_error("--backup-workers applies to --mode bsp only");
    if (o->backup >= o->workers)
        return usage_error("--backup-workers %u must be less than --workers %u", o->backup,
                           o->workers);
    for (size_t i = 0; i < o->spec_count; i++) {
        const zps_rank_set_t *rs = &o->specs[i].ranks;
        for (uint32_t k = 0; !rs->all && k < rs->count; k++)
            if (rs->lo[k] >= o->workers)
                return usage_error("--straggler names rank %u, but there are %u workers", rs->lo[k],
                                   o->workers);
    }
    return 0;
}

/* ---- checking what the children will be handed, before anything starts ---- */

/*
 * A bad value handed on to W workers would make each of them print its
 * usage and exit, after the run folder was made and the servers started. So
 * every value launch hands on is checked here first, with the parsers the
 * children use (common/parse.c, model.c, straggler.c, optimizer/opt_flags.c)
 * and the ranges and wording of zps-worker's and zps-server's own checks,
 * and a bad one is refused in one line.
 */
typedef enum {
    WF_NONE,   /* no value */
    WF_ANY,    /* a value the worker reads as it is (a path, a file name) */
    WF_OWN,    /* set by launch for every worker: not to be given */
    WF_LONG,   /* an integer in [lo, hi] */
    WF_U64,    /* a non-negative integer in [lo, hi] (hi < 0: no upper bound) */
    WF_DOUBLE, /* a finite number (the straggler check bounds it further) */
    WF_TIMEOUT,
    WF_BACKEND,
    WF_MODEL,
    WF_DATA,
    WF_LOG_LEVEL,
    WF_RANDOM,
    WF_INTERMITTENT,
    WF_PAUSE,
    WF_RANKS,
} wf_kind_t;

static const struct worker_flag {
    const char *name;
    wf_kind_t kind;
    long lo, hi;
    const char *expect;
} worker_flags[] = {
    {"servers", WF_OWN, 0, 0, NULL},
    {"rank", WF_OWN, 0, 0, NULL},
    {"workers", WF_OWN, 0, 0, NULL},
    {"metrics", WF_OWN, 0, 0, NULL},
    {"local", WF_OWN, 0, 0, NULL},
    {"init-only", WF_OWN, 0, 0, NULL},
    {"evaluator", WF_OWN, 0, 0, NULL},
    {"no-eval", WF_OWN, 0, 0, NULL},
    {"timeout", WF_TIMEOUT, -1, 86400000, "milliseconds >= 1, or -1 to wait forever"},
    {"wait-log-ms", WF_LONG, 0, 86400000, "milliseconds >= 0 (0: never)"},
    {"model", WF_MODEL, 0, 0, "mlp:I-H1-...-O or linear:D"},
    {"data", WF_DATA, 0, 0, "fashion-mnist or synthetic[:OPTIONS]"},
    {"data-dir", WF_ANY, 0, 0, NULL},
    {"batch", WF_LONG, 1, 1 << 20, "an integer in [1, 1048576]"},
    {"epochs", WF_U64, 1, 1000000, "an integer in [1, 1000000]"},
    {"clocks", WF_U64, 1, -1, "a positive integer"},
    {"seed", WF_U64, 0, -1, "a non-negative integer"},
    {"backend", WF_BACKEND, 0, 0, "cpu, cuda or auto"},
    {"device", WF_LONG, 0, 1024, "a device index"},
    {"blas-threads", WF_LONG, 1, 1024, "an integer in [1, 1024]"},
    {"base-step-ms", WF_DOUBLE, 0, 0, "milliseconds"},
    {"slowdown", WF_DOUBLE, 0, 0, "a factor K >= 1"},
    {"delay", WF_DOUBLE, 0, 0, "milliseconds"},
    {"random-delay", WF_RANDOM, 0, 0, "exp:MEAN or uniform:MEAN (milliseconds)"},
    {"intermittent", WF_INTERMITTENT, 0, 0, "K:P, a factor and a probability, e.g. 4:0.1"},
    {"pause-at", WF_PAUSE, 0, 0, "T:MS, a clock and milliseconds, e.g. 100:2000"},
    {"straggler-ranks", WF_RANKS, 0, 0, "all, or ranks and ranges such as 0,2-3"},
    {"straggler-seed", WF_U64, 0, -1, "a non-negative integer"},
    {"no-final-wait", WF_NONE, 0, 0, NULL},
    {"eval-every", WF_U64, 0, -1, "a non-negative integer"},
    {"save-params", WF_ANY, 0, 0, NULL},
    {"no-progress", WF_NONE, 0, 0, NULL},
    {"progress-every", WF_DOUBLE, 0, 0, "seconds > 0"},
    {"log-level", WF_LOG_LEVEL, 0, 0, "debug, info, warn or error"},
};

/* zps-server's and zps-worker --local's optimizer flags (optimizer/opt_flags.h). */
static const struct option optimizer_flags[] = {ZPS_OPT_FLAG_OPTIONS};

/* "--name=value" or "--name" then "value": splits args[*i] and takes its value. */
static const char *flag_value(const strvec_t *args, size_t *i, char *name, size_t size,
                              bool has_value, bool *missing)
{
    const char *item = args->v[*i] + 2;
    const char *eq = strchr(item, '=');
    size_t len = eq ? (size_t)(eq - item) : strlen(item);
    snprintf(name, size, "%.*s", (int)len, item);
    *missing = false;
    if (!has_value)
        return NULL;
    if (eq)
        return eq + 1;
    if (*i + 1 >= args->n) {
        *missing = true;
        return NULL;
    }
    return args->v[++*i];
}

static const struct worker_flag *find_worker_flag(const char *name)
{
    for (size_t i = 0; i < sizeof(worker_flags) / sizeof(worker_flags[0]); i++)
        if (strcmp(worker_flags[i].name, name) == 0)
            return &worker_flags[i];
    return NULL;
}

static const struct option *find_optimizer_flag(const char *name)
{
    for (size_t i = 0; i < sizeof(optimizer_flags) / sizeof(optimizer_flags[0]); i++)
        if (strcmp(optimizer_flags[i].name, name) == 0)
            return &optimizer_flags[i];
    return NULL;
}

/* Checks one worker flag's value v and applies the straggler ones to sc. */
static bool worker_value_ok(const struct worker_flag *f, const char *v, zps_straggler_config_t *sc,
                            char *why, size_t size)
{
    long l;
    uint64_t u;
    double d;
    enum zps_log_level lv;
    zps_model_t model;
    char err[256];
    bool ok = true;
    switch (f->kind) {
    case WF_NONE:
    case WF_ANY:
    case WF_OWN:
        break;
    case WF_LONG:
        ok = zps_parse_long(v, f->lo, f->hi, &l) == 0;
        break;
    case WF_U64:
        ok = zps_parse_u64(v, &u) == 0 && u >= (uint64_t)f->lo &&
             (f->hi < 0 || u <= (uint64_t)f->hi);
        break;
    case WF_TIMEOUT:
        ok = zps_parse_long(v, f->lo, f->hi, &l) == 0 && l != 0;
        break;
    case WF_DOUBLE:
        ok = zps_parse_double(v, &d) == 0;
        if (ok && strcmp(f->name, "base-step-ms") == 0)
            sc->base_step_ms = d;
        else if (ok && strcmp(f->name, "slowdown") == 0)
            sc->slowdown = d;
        else if (ok && strcmp(f->name, "delay") == 0)
            sc->fixed_ms = d;
        else if (ok && strcmp(f->name, "progress-every") == 0)
            ok = d > 0;
        break;
    case WF_BACKEND:
        ok = strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0 || strcmp(v, "auto") == 0;
        break;
    case WF_MODEL:
        if (zps_model_parse(v, &model, err, sizeof(err)) != 0) {
            snprintf(why, size, "invalid --model: %s", err);
            return false;
        }
        break;
    case WF_DATA:
        /* data.c has no parse apart from loading; the worker checks the options. */
        ok = strcmp(v, "fashion-mnist") == 0 || strcmp(v, "synthetic") == 0 ||
             strncmp(v, "synthetic:", 10) == 0;
        break;
    case WF_LOG_LEVEL:
        ok = zps_log_parse_level(v, &lv) == 0;
        break;
    case WF_RANDOM:
        ok = zps_straggler_parse_random(v, &sc->dist, &sc->mean_ms) == 0;
        break;
    case WF_INTERMITTENT:
        ok = zps_straggler_parse_intermittent(v, &sc->intermittent_k, &sc->intermittent_p) == 0;
        break;
    case WF_PAUSE:
        ok = zps_straggler_parse_pause(v, &sc->pause_clock, &sc->pause_ms) == 0;
        sc->pause = true;
        break;
    case WF_RANKS:
        ok = zps_straggler_parse_ranks(v, &sc->ranks) == 0;
        break;
    }
    if (!ok)
        snprintf(why, size, "invalid --%s '%s': expected %s", f->name, v, f->expect);
    return ok;
}

/* Walks worker flags as they will appear on a worker's command line. */
static bool worker_args_ok(const strvec_t *args, zps_straggler_config_t *sc, bool *epochs,
                           bool *clocks, char *why, size_t size)
{
    char name[64];
    for (size_t i = 0; i < args->n; i++) {
        if (strncmp(args->v[i], "--", 2) != 0) {
            snprintf(why, size, "invalid --worker-arg '%s': expected a zps-worker flag",
                     args->v[i]);
            return false;
        }
        bool missing;
        flag_value(args, &(size_t){i}, name, sizeof(name), false, &missing);
        const struct worker_flag *f = find_worker_flag(name);
        const struct option *of = f ? NULL : find_optimizer_flag(name);
        if (!f && !of) {
            snprintf(why, size, "unknown zps-worker flag '--%s' (see zps-worker --help)", name);
            return false;
        }
        if (f && f->kind == WF_OWN) {
            snprintf(why, size, "--%s is set by zps launch for every worker", name);
            return false;
        }
        bool has_value = f ? f->kind != WF_NONE : of->has_arg == required_argument;
        const char *v = flag_value(args, &i, name, sizeof(name), has_value, &missing);
        if (missing) {
            snprintf(why, size, "--%s needs a value", name);
            return false;
        }
        if (f && !worker_value_ok(f, v, sc, why, size))
            return false;
        *epochs = *epochs || strcmp(name, "epochs") == 0;
        *clocks = *clocks || strcmp(name, "clocks") == 0;
    }
    return true;
}

/* The flags that reach zps-server: the optimizer's, and launch's own server flags. */
static bool server_args_ok(const options_t *o, char *why, size_t size)
{
    zps_opt_flags_t optf;
    zps_opt_flags_init(&optf);
    char name[64];
    double d;
    long l;
    for (size_t i = 0; i < o->server_args.n; i++) {
        if (strncmp(o->server_args.v[i], "--", 2) != 0)
            continue; /* a --server-arg value of a flag launch does not know */
        bool missing;
        flag_value(&o->server_args, &(size_t){i}, name, sizeof(name), false, &missing);
        const struct option *of = find_optimizer_flag(name);
        bool timeout = strcmp(name, "worker-timeout") == 0;
        bool pending = strcmp(name, "max-pending-pulls") == 0;
        if (!of && !timeout && !pending)
            continue; /* zps-server checks the flags launch does not hand on itself */
        bool has_value = !of || of->has_arg == required_argument;
        const char *v = flag_value(&o->server_args, &i, name, sizeof(name), has_value, &missing);
        if (missing) {
            snprintf(why, size, "--%s needs a value", name);
            return false;
        }
        if (of && zps_opt_flag_apply(&optf, of->val, v, why, size) != 0)
            return false;
        if (timeout && (zps_parse_double(v, &d) || d < 0 || d > 86400)) {
            snprintf(why, size, "invalid --worker-timeout '%s': expected seconds in [0, 86400]", v);
            return false;
        }
        if (pending && zps_parse_long(v, 1, 1024, &l)) {
            snprintf(why, size,
                     "invalid --max-pending-pulls '%s': expected an integer in [1, 1024]", v);
            return false;
        }
    }
    if (zps_opt_flags_finish(&optf, why, size) != 0)
        return false;
    if (o->lr_staleness && strcmp(o->lr_staleness, "none") != 0 &&
        strcmp(o->lr_staleness, "inverse") != 0) {
        snprintf(why, size, "invalid --lr-staleness '%s': expected none or inverse",
                 o->lr_staleness);
        return false;
    }
    if (o->lr_staleness && strcmp(o->lr_staleness, "inverse") == 0 && strcmp(o->mode, "bsp") == 0) {
        snprintf(why, size,
                 "--lr-staleness applies to pushes applied on arrival (--mode ssp or "
                 "asp); BSP steps are never stale");
        return false;
    }
    return true;
}

/*
 * Checks every value launch will hand to its servers and workers, each
 * worker with the straggler flags of its rank. Returns 0, or prints one line
 * naming the bad value and returns EXIT_USAGE. Creates and starts nothing.
 */
static int check_child_flags(const options_t *o)
{
    char why[512];
    if (!server_args_ok(o, why, sizeof(why))) {
        fprintf(stderr, "zps launch: %s\n", why);
        return EXIT_USAGE;
    }
    for (uint32_t r = 0; r < o->workers; r++) {
        zps_straggler_config_t sc;
        zps_straggler_config_default(&sc);
        bool epochs = false, clocks = false;
        bool ok = worker_args_ok(&o->worker_args, &sc, &epochs, &clocks, why, sizeof(why));
        for (size_t s = 0; ok && s < o->spec_count; s++)
            if (zps_rank_set_has(&o->specs[s].ranks, r))
                ok = worker_args_ok(&o->specs[s].flags, &sc, &epochs, &clocks, why, sizeof(why));
        if (ok && epochs && clocks) {
            snprintf(why, sizeof(why), "give --epochs or --clocks, not both");
            ok = false;
        }
        if (ok && zps_straggler_check(&sc, why, sizeof(why)) != 0)
            ok = false;
        if (!ok) {
            fprintf(stderr, "zps launch: %s\n", why);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* ---- planning: the settings a run gets when the user gives none ---- */

/*
 * zps launch's default recipe, chosen so that the shortest command trains a
 * good model (docs/launch.md shows the runs that chose it): batch 32 per
 * worker, 6 epochs, momentum 0.9 with a cosine schedule over the run's
 * optimizer steps, and a learning rate of 0.05 per 128 examples in a step
 * (linear scaling: BSP steps on W*b examples, BSP with B backups on (W-B)*b,
 * SSP and ASP on one worker's b). Each part applies only when the user gave
 * nothing for it: any optimizer flag replaces the whole optimizer recipe.
 */
#define RECIPE_BATCH 32
#define RECIPE_EPOCHS 6
#define RECIPE_MOMENTUM "0.9"
#define RECIPE_LR_PER_EXAMPLE (0.05 / 128.0)

/* The value of the last `--name` in args (either form), or NULL. */
static const char *last_value(const strvec_t *args, const char *flag)
{
    const char *v = NULL;
    char name[64];
    for (size_t i = 0; i < args->n; i++) {
        if (strncmp(args->v[i], "--", 2) != 0)
            continue;
        bool missing;
        flag_value(args, &(size_t){i}, name, sizeof(name), false, &missing);
        if (strcmp(name, flag) != 0)
            continue;
        const char *got = flag_value(args, &i, name, sizeof(name), true, &missing);
        if (!missing)
            v = got;
    }
    return v;
}

static bool any_optimizer_flag(const strvec_t *args)
{
    char name[64];
    for (size_t i = 0; i < args->n; i++) {
        bool missing;
        if (strncmp(args->v[i], "--", 2) == 0 &&
            (flag_value(args, &(size_t){i}, name, sizeof(name), false, &missing),
             find_optimizer_flag(name)))
            return true;
    }
    return false;
}

/*
 * Adds the default recipe's flags for whatever the user left unsaid, and
 * says what the run will do in one line. Needs the number of training
 * examples (read from the data's header, not loaded) to turn epochs into
 * clocks. Returns 0, or EXIT_USAGE after one line on stderr.
 */
static int plan_run(options_t *o)
{
    strvec_t *wa = &o->worker_args, *sa = &o->server_args;
    const char *bv = last_value(wa, "batch"), *ev = last_value(wa, "epochs");
    const char *kv = last_value(wa, "clocks"), *data = last_value(wa, "data");
    const char *dir = last_value(wa, "data-dir");
    uint64_t batch = RECIPE_BATCH, epochs = RECIPE_EPOCHS, clocks = 0, n = 0;
    int bad = 0;
    if (bv)
        zps_parse_u64(bv, &batch); /* checked by check_child_flags */
    else
        bad |= sv_push(wa, "--batch") || sv_pushf(wa, "%d", RECIPE_BATCH);
    if (ev)
        zps_parse_u64(ev, &epochs);
    if (kv)
        zps_parse_u64(kv, &clocks);
    else if (!ev)
        bad |= sv_push(wa, "--epochs") || sv_pushf(wa, "%d", RECIPE_EPOCHS);
    char err[512];
    if (zps_dataset_train_size(data ? data : "fashion-mnist", dir ? dir : ZPS_FASHION_MNIST_DIR, &n,
                               err, sizeof(err)) != 0) {
        fprintf(stderr, "zps launch: %s\n", err);
        return EXIT_USAGE;
    }
    if (n < o->workers) {
        fprintf(stderr, "zps launch: %llu training examples cannot be split among %u workers\n",
                (unsigned long long)n, o->workers);
        return EXIT_USAGE;
    }
    /* The partition rule of worker/data.h: S = ceil(floor(N/W) / b). */
    uint64_t steps = (n / o->workers + batch - 1) / batch;
    if (!kv)
        clocks = epochs * steps;
    if (!o->have_eval_every) {
        uint64_t every = steps / 2 ? steps / 2 : 1;
        bad |= sv_push(wa, "--eval-every") || sv_pushf(wa, "%llu", (unsigned long long)every);
        o->have_eval_every = true;
    }
    char recipe[256] = "";
    if (!any_optimizer_flag(sa)) {
        bool on_arrival = strcmp(o->mode, "bsp") != 0;
        uint64_t per_step = on_arrival ? batch : (uint64_t)(o->workers - o->backup) * batch;
        uint64_t steps_total = on_arrival ? clocks * o->workers : clocks;
        double lr = RECIPE_LR_PER_EXAMPLE * (double)per_step;
        bad |= sv_push(sa, "--optimizer") || sv_push(sa, "momentum") || sv_push(sa, "--momentum") ||
               sv_push(sa, RECIPE_MOMENTUM) || sv_push(sa, "--lr") || sv_pushf(sa, "%.6g", lr) ||
               sv_push(sa, "--schedule") || sv_push(sa, "cosine") ||
               sv_push(sa, "--cosine-steps") ||
               sv_pushf(sa, "%llu", (unsigned long long)(steps_total ? steps_total : 1));
        snprintf(recipe, sizeof(recipe),
                 "; momentum %s, lr %.6g (%llu examples a step), cosine over %llu steps",
                 RECIPE_MOMENTUM, lr, (unsigned long long)per_step,
                 (unsigned long long)steps_total);
    }
    if (bad) {
        fprintf(stderr, "zps launch: out of memory\n");
        return EXIT_FAILED;
    }
    const char *every = last_value(wa, "eval-every");
    fprintf(stderr,
            "zps launch: batch %llu per worker, %llu clocks (%.2f epochs of %llu steps)%s; "
            "evaluation every %s clocks%s\n",
            (unsigned long long)batch, (unsigned long long)clocks,
            steps ? (double)clocks / (double)steps : 0.0, (unsigned long long)steps, recipe,
            every ? every : "?",
            recipe[0] ? " (the default recipe: any optimizer flag replaces it)" : "");
    return 0;
}

/* ---- the running cluster ---- */

typedef enum phase {
    PH_SERVERS,  /* servers starting: waiting for their endpoint files */
    PH_TRAINING, /* workers running */
    PH_STATS,    /* workers done: fetching the final STATS */
    PH_SHUTDOWN, /* servers asked to stop */
    PH_ABORT,    /* a failure, a signal or the time limit: everything asked to stop */
} phase_t;

typedef struct tail {
    FILE *f;
    char *buf;
    size_t len, cap;
} tail_t;

typedef struct child {
    struct launch *L;
    char name[32]; /* "server 0", "worker 3", "evaluator" */
    char file[32]; /* "server-0", "worker-3", "evaluator" */
    bool server;
    bool evaluator; /* zps-worker --evaluator: observes and evaluates, trains nothing */
    uint32_t index;
    strvec_t argv; /* the command line, argv[0] the binary */
    char log_path[PATH_MAX + 64];
    char endpoint_path[PATH_MAX + 64];
    char metrics_path[PATH_MAX + 64];
    char endpoint[256];
    uv_process_t proc;
    bool spawned, running, stopped_by_us, killed;
    uint64_t term_ns; /* when we sent SIGTERM */
    int pid;
    int64_t exit_status;
    int term_signal;
    tail_t log, metrics;
} child_t;

typedef struct launch {
    options_t *o;
    char self[PATH_MAX];
    char server_bin[PATH_MAX], worker_bin[PATH_MAX];
    char dir[PATH_MAX]; /* the run folder, absolute */
    char name[256];
    strvec_t own_argv; /* the launcher's own command line */

    uv_loop_t loop;
    uv_timer_t tick;
    uv_signal_t sig[3];
    uv_work_t work;
    bool closing;

    child_t *servers;
    child_t *workers;   /* [W + 1]: the W workers, then the evaluator */
    child_t *evaluator; /* &workers[W] */
    phase_t phase;
    uint64_t start_ns, phase_ns, last_stats_ns, finish_ns;
    bool training_done;       /* the evaluator exited 0: the final model is evaluated */
    uint64_t workers_done_ns; /* when the last worker exited (0: not yet) */
    bool finish_stopped;      /* the remaining workers were asked to stop after it */

    zps_runstats_t *rs;
    zps_client_t *client;
    bool stats_busy;
    bool stats_final;  /* the fetch in flight started after every worker had exited */
    char **stats_json; /* [S], filled on the threadpool */
    int *stats_rc;
    FILE *stats_file;

    zps_progress_t progress;
    const char *status; /* "ok", "failed", "interrupted", "timeout" */
    int exit_code;
    char failed[32];
    char why[512];
} launch_t;

static double secs_since(uint64_t t0)
{
    return (double)(zps_now_ns() - t0) / 1e9;
}

/* The worker processes, the evaluator included. */
static uint32_t kids(const launch_t *L)
{
    return L->o->workers + 1;
}

/* A launcher message on stderr, after breaking the progress line. */
__attribute__((format(printf, 2, 3))) static void say(launch_t *L, const char *fmt, ...)
{
    zps_progress_break(&L->progress);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zps launch: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* Shell-quotes one word into b when it needs it. */
static void quote_word(FILE *f, const char *w)
{
    bool plain = *w != '\0';
    for (const char *p = w; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("-_./=:,+@%", *p)))
            plain = false;
    if (plain) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = w; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

static void write_command(FILE *f, const strvec_t *argv)
{
    for (size_t i = 0; i < argv->n; i++) {
        if (i)
            fputc(' ', f);
        quote_word(f, argv->v[i]);
    }
    fputc('\n', f);
}

static FILE *open_in_run(launch_t *L, const char *name, const char *mode)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", L->dir, name);
    return fopen(path, mode);
}

/* ---- stopping ---- */

static void signal_child(child_t *c, int sig)
{
    if (!c->running || c->pid <= 0)
        return;
    /* The child leads its own group: signal the group, so anything it
     * started goes too; a stopped process cannot act on SIGTERM. */
    if (sig != SIGKILL) {
        kill(-c->pid, SIGCONT);
        kill(c->pid, SIGCONT);
    }
    if (kill(-c->pid, sig) != 0)
        kill(c->pid, sig);
}

/* SIGTERM, once; the tick sends SIGKILL STOP_GRACE_S later to whoever is left. */
static void stop_child(child_t *c)
{
    if (!c->running || c->stopped_by_us)
        return;
    c->stopped_by_us = true;
    c->term_ns = zps_now_ns();
    signal_child(c, SIGTERM);
}

static void stop_children(launch_t *L, bool servers, bool workers)
{
    for (uint32_t i = 0; workers && i < kids(L); i++)
        stop_child(&L->workers[i]);
    for (uint32_t i = 0; servers && i < L->o->servers; i++)
        stop_child(&L->servers[i]);
}

/* Whoever was asked to stop STOP_GRACE_S ago and has not: SIGKILL. */
static void kill_late(launch_t *L, bool now)
{
    child_t *sets[2] = {L->workers, L->servers};
    uint32_t counts[2] = {kids(L), L->o->servers};
    for (int k = 0; k < 2; k++) {
        for (uint32_t i = 0; i < counts[k]; i++) {
            child_t *c = &sets[k][i];
            if (c->running && c->stopped_by_us && !c->killed &&
                (now || secs_since(c->term_ns) > STOP_GRACE_S)) {
                c->killed = true;
                signal_child(c, SIGKILL);
            }
        }
    }
}

/* Stops everything because of `why`; the first reason wins. */
__attribute__((format(printf, 4, 5))) static void
abort_run(launch_t *L, const char *status, const child_t *who, const char *fmt, ...)
{
    if (L->phase != PH_ABORT) {
        L->phase = PH_ABORT;
        L->status = status;
        if (who)
            snprintf(L->failed, sizeof(L->failed), "%s", who->name);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(L->why, sizeof(L->why), fmt, ap);
        va_end(ap);
        say(L, "%s; stopping the cluster", L->why);
    }
    stop_children(L, true, true);
}

static bool any_running(const launch_t *L)
{
    for (uint32_t i = 0; i < L->o->servers; i++)
        if (L->servers[i].running)
            return true;
    for (uint32_t i = 0; i < kids(L); i++)
        if (L->workers[i].running)
            return true;
    return false;
}

static void on_handle_closed(uv_handle_t *h)
{
    (void)h;
}

/* Everything has exited and nothing is in flight: let the loop end. */
static void maybe_finish(launch_t *L)
{
    if (L->closing || any_running(L) || L->stats_busy)
        return;
    if (L->phase == PH_TRAINING || L->phase == PH_SERVERS || L->phase == PH_STATS)
        return;
    L->closing = true;
    uv_timer_stop(&L->tick);
    uv_close((uv_handle_t *)&L->tick, on_handle_closed);
    for (int i = 0; i < 3; i++) {
        uv_signal_stop(&L->sig[i]);
        uv_close((uv_handle_t *)&L->sig[i], on_handle_closed);
    }
}

/* ---- tailing files ---- */

/* Calls fn for every complete line added to the file since the last call. */
static void tail_lines(tail_t *t, const char *path, void (*fn)(child_t *, char *), child_t *c,
                       bool flush_partial)
{
    if (!t->f) {
        t->f = fopen(path, "r");
        if (!t->f)
            return;
    }
    char chunk[8192];
    size_t got;
    clearerr(t->f);
    while ((got = fread(chunk, 1, sizeof(chunk), t->f)) > 0) {
        for (size_t i = 0; i < got; i++) {
            if (t->len + 1 >= t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 4096;
                char *b = realloc(t->buf, cap);
                if (!b)
                    return; /* drops the line; the file keeps it */
                t->buf = b;
                t->cap = cap;
            }
            if (chunk[i] == '\n') {
                t->buf[t->len] = '\0';
                fn(c, t->buf);
                t->len = 0;
            } else {
                t->buf[t->len++] = chunk[i];
            }
        }
    }
    if (flush_partial && t->len) {
        t->buf[t->len] = '\0';
        fn(c, t->buf);
        t->len = 0;
    }
}

static void tail_close(tail_t *t)
{
    if (t->f)
        fclose(t->f);
    free(t->buf);
    memset(t, 0, sizeof(*t));
}

static void echo_line(child_t *c, char *line)
{
    launch_t *L = c->L;
    if (L->o->quiet)
        return;
    zps_progress_break(&L->progress);
    fprintf(stderr, "%-8s | %s\n", c->name, line);
}

static void metrics_line(child_t *c, char *line)
{
    if (!*line)
        return;
    if (c->evaluator)
        zps_runstats_add_eval_line(c->L->rs, line);
    else
        zps_runstats_add_line(c->L->rs, c->index, line);
}

static void tail_all(launch_t *L, bool final)
{
    for (uint32_t i = 0; i < L->o->servers; i++)
        if (L->servers[i].spawned)
            tail_lines(&L->servers[i].log, L->servers[i].log_path, echo_line, &L->servers[i],
                       final);
    for (uint32_t i = 0; i < kids(L); i++) {
        child_t *c = &L->workers[i];
        if (!c->spawned)
            continue;
        tail_lines(&c->log, c->log_path, echo_line, c, final);
        /* A partial metrics line is still being written: never flush it. */
        tail_lines(&c->metrics, c->metrics_path, metrics_line, c, false);
    }
}

/* ---- progress ---- */

static void show_progress(launch_t *L, bool force)
{
    if (!L->o->progress || L->phase == PH_SERVERS)
        return;
    zps_runstats_live_t lv;
    zps_runstats_live(L->rs, zps_wall_seconds(), &lv);
    char line[512];
    size_t n = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < sizeof(line)) {                                                                    \
            int k_ = snprintf(line + n, sizeof(line) - n, __VA_ARGS__);                            \
            if (k_ > 0)                                                                            \
                n += (size_t)k_;                                                                   \
        }                                                                                          \
    } while (0)
    PUT("[launch] %s %ux%u | ", L->o->mode, L->o->servers, L->o->workers);
    if (lv.seconds <= 0) {
        /* No worker has trained a step yet: they are loading data. */
        PUT("starting: workers loading data | %.1f s", secs_since(L->start_ns));
        zps_progress_show(&L->progress, line, force);
        return;
    }
    PUT("clock ");
    if (lv.clock_min == lv.clock_max)
        PUT("%llu", (unsigned long long)lv.clock_min);
    else
        PUT("%llu-%llu", (unsigned long long)lv.clock_min, (unsigned long long)lv.clock_max);
    if (lv.clocks)
        PUT("/%llu", (unsigned long long)lv.clocks);
    PUT(" | %.0f ex/s", lv.examples_per_second);
    if (isfinite(lv.loss))
        PUT(" | loss %.4f", lv.loss);
    if (isfinite(lv.test_accuracy))
        PUT(" | test acc %.4f @%llu", lv.test_accuracy, (unsigned long long)lv.test_clock);
    if (lv.have_update_staleness)
        PUT(" | update staleness p50 %llu max %llu updates",
            (unsigned long long)lv.update_staleness_p50,
            (unsigned long long)lv.update_staleness_max);
    if (lv.have_clock_lag)
        PUT(" | lag max %llu clocks", (unsigned long long)lv.clock_lag_max);
    PUT(" | %.1f s", secs_since(L->start_ns));
#undef PUT
    zps_progress_show(&L->progress, line, force);
}

/* ---- server statistics, on the threadpool ---- */

static void stats_work(uv_work_t *req)
{
    launch_t *L = req->data;
    for (uint32_t i = 0; i < L->o->servers; i++) {
        L->stats_json[i] = NULL;
        L->stats_rc[i] = zps_client_stats(L->client, i, &L->stats_json[i]);
    }
}

static void stop_servers(launch_t *L);
static void fetch_stats(launch_t *L);

static void stats_done(uv_work_t *req, int status)
{
    launch_t *L = req->data;
    (void)status;
    L->stats_busy = false;
    bool final = L->phase == PH_STATS;
    double wall = zps_wall_seconds();
    for (uint32_t i = 0; i < L->o->servers; i++) {
        if (L->stats_rc[i] == 0 && L->stats_json[i]) {
            zps_runstats_add_server(L->rs, i, L->stats_json[i]);
            if (L->stats_file) {
                fprintf(L->stats_file, "{\"wall\":%.6f,\"shard\":%u,\"final\":%s,\"stats\":%s}\n",
                        wall, i, final ? "true" : "false", L->stats_json[i]);
                fflush(L->stats_file);
            }
        } else if (final) {
            say(L, "could not fetch the final statistics of server %u: %s", i,
                zps_strerror(L->stats_rc[i]));
        }
        free(L->stats_json[i]);
        L->stats_json[i] = NULL;
    }
    /* A periodic fetch that was in flight when the last worker exited may
     * predate its last pushes: fetch again for the final figures. */
    if (L->phase == PH_STATS) {
        if (final && L->stats_final)
            stop_servers(L);
        else
            fetch_stats(L);
    }
    maybe_finish(L);
}

static void fetch_stats(launch_t *L)
{
    if (L->stats_busy || !L->client)
        return;
    L->stats_busy = true;
    L->stats_final = L->phase == PH_STATS;
    L->last_stats_ns = zps_now_ns();
    L->work.data = L;
    if (uv_queue_work(&L->loop, &L->work, stats_work, stats_done) != 0) {
        L->stats_busy = false;
        if (L->phase == PH_STATS)
            stop_servers(L);
    }
}

/* ---- spawning ---- */

static void on_child_exit(uv_process_t *p, int64_t exit_status, int term_signal);

static int spawn(launch_t *L, child_t *c)
{
    int fd = open(c->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        say(L, "cannot create %s: %s", c->log_path, strerror(errno));
        return ZPS_EIO;
    }
    /* zps launch --exec-child PPID BIN ARGS...: see the file comment. */
    strvec_t args = {0};
    int rc = sv_push(&args, L->self) || sv_push(&args, "launch") ||
                     sv_push(&args, "--exec-child") || sv_pushf(&args, "%d", (int)getpid()) ||
                     sv_extend(&args, &c->argv)
                 ? ZPS_ENOMEM
                 : 0;
    if (rc == 0) {
        uv_stdio_container_t stdio[3];
        stdio[0].flags = UV_IGNORE;
        stdio[1].flags = UV_INHERIT_FD;
        stdio[1].data.fd = fd;
        stdio[2].flags = UV_INHERIT_FD;
        stdio[2].data.fd = fd;
        uv_process_options_t po;
        memset(&po, 0, sizeof(po));
        po.file = L->self;
        po.args = args.v;
        po.exit_cb = on_child_exit;
        po.flags = UV_PROCESS_DETACHED;
        po.stdio_count = 3;
        po.stdio = stdio;
        c->proc.data = c;
        int uvrc = uv_spawn(&L->loop, &c->proc, &po);
        if (uvrc != 0) {
            say(L, "cannot start %s (%s): %s", c->name, c->argv.v[0], uv_strerror(uvrc));
            /* uv_spawn initialised the handle even on failure; it must be closed. */
            uv_close((uv_handle_t *)&c->proc, on_handle_closed);
            rc = ZPS_EIO;
        } else {
            c->spawned = true;
            c->running = true;
            c->pid = c->proc.pid;
            FILE *f = open_in_run(L, "processes.tsv", "a");
            if (f) {
                fprintf(f, "%s\t%s\t%d\n", c->file, c->name, c->pid);
                fclose(f);
            }
        }
    }
    sv_free(&args);
    close(fd);
    return rc;
}

/*
 * Starts child c with the command line in c->argv, first writing it to cmds
 * (commands.txt, when open). `bad` says that building the command line ran
 * out of memory. False when the run has been aborted.
 */
static bool start_child(launch_t *L, child_t *c, FILE *cmds, int bad)
{
    if (bad) {
        abort_run(L, "failed", NULL, "out of memory");
        return false;
    }
    if (cmds) {
        fprintf(cmds, "# %s\n", c->name);
        write_command(cmds, &c->argv);
    }
    if (spawn(L, c) != 0) {
        abort_run(L, "failed", c, "%s could not be started", c->name);
        return false;
    }
    return true;
}

static void start_workers(launch_t *L)
{
    strvec_t eps = {0};
    char list[8192];
    size_t n = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < L->o->servers; i++) {
        int k = snprintf(list + n, sizeof(list) - n, "%s%s", i ? "," : "", L->servers[i].endpoint);
        if (k > 0)
            n += (size_t)k;
        sv_push(&eps, L->servers[i].endpoint);
    }
    zps_client_opts_t co;
    zps_client_opts_default(&co);
    co.worker = -1;
    co.timeout_ms = 2000;
    co.retry_ms = 500;
    if (zps_client_new((const char *const *)eps.v, eps.n, &co, &L->client) != 0)
        L->client = NULL; /* no live statistics; the run goes on */
    sv_free(&eps);

    FILE *cmds = open_in_run(L, "commands.txt", "a");
    /* The evaluator first, so that its pull for the first evaluation clock
     * is parked before the workers get there. It gets the workers' flags
     * (model, data, clocks, --save-params...), not their stragglers. */
    child_t *e = L->evaluator;
    int ebad = sv_push(&e->argv, L->worker_bin) || sv_push(&e->argv, "--servers") ||
               sv_push(&e->argv, list) || sv_push(&e->argv, "--evaluator") ||
               sv_push(&e->argv, "--workers") || sv_pushf(&e->argv, "%u", L->o->workers) ||
               sv_push(&e->argv, "--metrics") || sv_push(&e->argv, e->metrics_path) ||
               sv_push(&e->argv, "--no-progress") || sv_extend(&e->argv, &L->o->worker_args);
    if (!start_child(L, e, cmds, ebad)) {
        if (cmds)
            fclose(cmds);
        return;
    }
    for (uint32_t r = 0; r < L->o->workers; r++) {
        child_t *c = &L->workers[r];
        strvec_t *a = &c->argv;
        int bad = sv_push(a, L->worker_bin) || sv_push(a, "--servers") || sv_push(a, list) ||
                  sv_push(a, "--rank") || sv_pushf(a, "%u", r) || sv_push(a, "--workers") ||
                  sv_pushf(a, "%u", L->o->workers) || sv_push(a, "--metrics") ||
                  sv_push(a, c->metrics_path) || sv_push(a, "--no-progress");
        /* The evaluator evaluates: no training worker stops for it. */
        if (r == 0)
            bad = bad || sv_push(a, "--no-eval");
        bad = bad || sv_extend(a, &L->o->worker_args);
        for (size_t s = 0; s < L->o->spec_count; s++)
            if (zps_rank_set_has(&L->o->specs[s].ranks, r))
                bad = bad || sv_extend(a, &L->o->specs[s].flags);
        if (!start_child(L, c, cmds, bad))
            break;
    }
    if (cmds)
        fclose(cmds);
}

static void start_servers(launch_t *L)
{
    FILE *cmds = open_in_run(L, "commands.txt", "a");
    for (uint32_t i = 0; i < L->o->servers; i++) {
        child_t *c = &L->servers[i];
        strvec_t *a = &c->argv;
        int bad = sv_push(a, L->server_bin) || sv_push(a, "--listen") ||
                  sv_push(a, "tcp://127.0.0.1:*") || sv_push(a, "--endpoint-file") ||
                  sv_push(a, c->endpoint_path) || sv_push(a, "--shard") ||
                  sv_pushf(a, "%u/%u", i, L->o->servers) || sv_push(a, "--workers") ||
                  sv_pushf(a, "%u", L->o->workers) || sv_push(a, "--mode") ||
                  sv_push(a, L->o->mode);
        if (strcmp(L->o->mode, "ssp") == 0)
            bad = bad || sv_push(a, "--staleness") || sv_pushf(a, "%u", L->o->staleness);
        if (L->o->backup)
            bad = bad || sv_push(a, "--backup-workers") || sv_pushf(a, "%u", L->o->backup);
        if (L->o->lr_staleness)
            bad = bad || sv_push(a, "--lr-staleness") || sv_push(a, L->o->lr_staleness);
        bad = bad || sv_extend(a, &L->o->server_args);
        if (!start_child(L, c, cmds, bad))
            break;
    }
    if (cmds)
        fclose(cmds);
}

/* True once every server has written its endpoint file. */
static bool servers_listening(launch_t *L)
{
    for (uint32_t i = 0; i < L->o->servers; i++) {
        child_t *c = &L->servers[i];
        if (c->endpoint[0])
            continue;
        FILE *f = fopen(c->endpoint_path, "r");
        if (!f)
            return false;
        bool ok = fgets(c->endpoint, sizeof(c->endpoint), f) != NULL;
        fclose(f);
        c->endpoint[strcspn(c->endpoint, "\r\n")] = '\0';
        if (!ok || !c->endpoint[0]) {
            c->endpoint[0] = '\0';
            return false;
        }
    }
    return true;
}

static void stop_servers(launch_t *L)
{
    if (L->phase == PH_ABORT)
        return;
    L->phase = PH_SHUTDOWN;
    stop_children(L, true, false);
}

/* Describes how a child ended: "exited with status 1", "was killed by signal 9 (Killed)". */
static void describe_exit(const child_t *c, char *buf, size_t size)
{
    if (c->term_signal)
        snprintf(buf, size, "was killed by signal %d (%s)", c->term_signal,
                 strsignal(c->term_signal));
    else
        snprintf(buf, size, "exited with status %lld", (long long)c->exit_status);
}

static void on_child_exit(uv_process_t *p, int64_t exit_status, int term_signal)
{
    child_t *c = p->data;
    launch_t *L = c->L;
    c->running = false;
    c->exit_status = exit_status;
    c->term_signal = term_signal;
    uv_close((uv_handle_t *)p, on_handle_closed);
    bool clean = exit_status == 0 && term_signal == 0;
    char how[128];
    describe_exit(c, how, sizeof(how));

    if (L->phase == PH_ABORT) {
        /* Stopping anyway: only what we did not ask for is news. */
    } else if (c->server) {
        if (L->phase == PH_SERVERS)
            abort_run(L, "failed", c, "%s (pid %d) %s before it was listening", c->name, c->pid,
                      how);
        else if (L->phase != PH_SHUTDOWN)
            abort_run(L, "failed", c, "%s (pid %d) %s while the workers were training", c->name,
                      c->pid, how);
        else if (!clean && !c->killed)
            say(L, "%s (pid %d) %s while shutting down", c->name, c->pid, how);
    } else if (!clean && !(c->stopped_by_us && L->training_done)) {
        abort_run(L, "failed", c, "%s (pid %d) %s", c->name, c->pid, how);
    } else {
        if (c->evaluator && clean) {
            L->training_done = true;
            L->finish_ns = zps_now_ns();
        }
        if (c->stopped_by_us && L->training_done)
            say(L, "%s stopped after training ended (its remaining pushes would be dropped)",
                c->name);
        bool workers_done = true;
        for (uint32_t i = 0; i < L->o->workers; i++)
            if (L->workers[i].running || !L->workers[i].spawned)
                workers_done = false;
        if (workers_done && !L->workers_done_ns)
            L->workers_done_ns = zps_now_ns();
        bool all_done = workers_done && !L->evaluator->running && L->evaluator->spawned;
        if (all_done && L->phase == PH_TRAINING) {
            L->phase = PH_STATS;
            fetch_stats(L);
            if (!L->stats_busy) /* no client, or the threadpool refused */
                stop_servers(L);
        }
    }
    maybe_finish(L);
}

static void on_tick(uv_timer_t *t)
{
    launch_t *L = t->data;
    tail_all(L, false);
    double now_s = secs_since(L->start_ns);

    if (L->phase == PH_SERVERS) {
        if (servers_listening(L)) {
            L->phase = PH_TRAINING;
            L->phase_ns = zps_now_ns();
            start_workers(L);
        } else if (secs_since(L->phase_ns) > STARTUP_TIMEOUT_S) {
            abort_run(L, "failed", NULL, "the servers did not start listening within %.0f s",
                      STARTUP_TIMEOUT_S);
        }
    }
    if (L->phase == PH_TRAINING) {
        if (secs_since(L->last_stats_ns) >= STATS_EVERY_S)
            fetch_stats(L);
        /* The evaluator has evaluated the final model; the others had their grace. */
        if (L->training_done && !L->finish_stopped && secs_since(L->finish_ns) > FINISH_GRACE_S) {
            L->finish_stopped = true;
            stop_children(L, false, true);
        }
        /* Every worker is done, so the final model exists: an evaluator that
         * still has not read it is stuck. */
        if (L->workers_done_ns && L->evaluator->running &&
            secs_since(L->workers_done_ns) > EVALUATOR_GRACE_S)
            abort_run(L, "failed", L->evaluator,
                      "the evaluator has not evaluated the final model %.0f s after the last "
                      "worker ended",
                      EVALUATOR_GRACE_S);
    }
    if (L->o->time_limit_s > 0 && now_s > L->o->time_limit_s && L->phase != PH_ABORT &&
        L->phase != PH_SHUTDOWN)
        abort_run(L, "timeout", NULL, "the time limit of %g s has passed", L->o->time_limit_s);
    kill_late(L, false);
    show_progress(L, false);
    maybe_finish(L);
}

static void on_signal(uv_signal_t *h, int signum)
{
    launch_t *L = h->data;
    if (L->phase == PH_ABORT && L->status && strcmp(L->status, "interrupted") == 0) {
        /* A second Ctrl-C: do not wait for the grace period. */
        kill_late(L, true);
        return;
    }
    if (L->phase != PH_ABORT)
        L->exit_code = 128 + signum;
    abort_run(L, "interrupted", NULL, "%s received",
              signum == SIGINT ? "SIGINT" : strsignal(signum));
}

/* ---- set-up ---- */

static int find_binary(const char *given, const char *env, const char *self_dir,
                       const char *const *rel, const char *name, char *out, size_t size)
{
    const char *e = getenv(env);
    if (given || (e && *e)) {
        const char *p = given ? given : e;
        if (access(p, X_OK) != 0)
            return ZPS_EINVAL;
        if (!realpath(p, out))
            snprintf(out, size, "%s", p);
        return 0;
    }
    char path[PATH_MAX * 2];
    for (size_t i = 0; rel[i]; i++) {
        snprintf(path, sizeof(path), "%s/%s", self_dir, rel[i]);
        if (access(path, X_OK) == 0 && realpath(path, out))
            return 0;
    }
    const char *pathenv = getenv("PATH");
    char *copy = pathenv ? strdup(pathenv) : NULL;
    char *save = NULL;
    for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save)) {
        snprintf(path, sizeof(path), "%s/%s", d, name);
        if (access(path, X_OK) == 0 && realpath(path, out)) {
            free(copy);
            return 0;
        }
    }
    free(copy);
    return ZPS_EINVAL;
}

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Creates the run folder; a default name gets -2, -3... when taken. */
static int make_run_dir(launch_t *L)
{
    const options_t *o = L->o;
    if (mkdir_p(o->runs_dir) != 0) {
        fprintf(stderr, "zps launch: cannot create %s: %s\n", o->runs_dir, strerror(errno));
        return EXIT_FAILED;
    }
    char base[200];
    if (o->name) {
        snprintf(base, sizeof(base), "%s", o->name);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
        if (strcmp(o->mode, "ssp") == 0)
            snprintf(base, sizeof(base), "ssp%u-%s", o->staleness, stamp);
        else if (o->backup)
            snprintf(base, sizeof(base), "bsp-b%u-%s", o->backup, stamp);
        else
            snprintf(base, sizeof(base), "%s-%s", o->mode, stamp);
    }
    char path[PATH_MAX];
    for (int k = 1; k < 1000; k++) {
        if (k == 1)
            snprintf(L->name, sizeof(L->name), "%s", base);
        else
            snprintf(L->name, sizeof(L->name), "%s-%d", base, k);
        snprintf(path, sizeof(path), "%s/%s", o->runs_dir, L->name);
        if (mkdir(path, 0755) == 0)
            break;
        if (errno != EEXIST || o->name) {
            fprintf(stderr, "zps launch: cannot create the run folder %s: %s\n", path,
                    errno == EEXIST ? "it exists already (choose another --name)"
                                    : strerror(errno));
            return errno == EEXIST ? EXIT_USAGE : EXIT_FAILED;
        }
    }
    if (!realpath(path, L->dir)) {
        fprintf(stderr, "zps launch: %s: %s\n", path, strerror(errno));
        return EXIT_FAILED;
    }
    return 0;
}

static void child_init(launch_t *L, child_t *c, bool server, uint32_t index)
{
    c->L = L;
    c->server = server;
    c->index = index;
    c->evaluator = !server && index == L->o->workers;
    if (c->evaluator) {
        snprintf(c->name, sizeof(c->name), "evaluator");
        snprintf(c->file, sizeof(c->file), "evaluator");
    } else {
        snprintf(c->name, sizeof(c->name), "%s %u", server ? "server" : "worker", index);
        snprintf(c->file, sizeof(c->file), "%s-%u", server ? "server" : "worker", index);
    }
    snprintf(c->log_path, sizeof(c->log_path), "%s/%s.log", L->dir, c->file);
    snprintf(c->endpoint_path, sizeof(c->endpoint_path), "%s/%s.endpoint", L->dir, c->file);
    snprintf(c->metrics_path, sizeof(c->metrics_path), "%s/%s.jsonl", L->dir, c->file);
}

/* ---- the end ---- */

static void print_tail_of_log(const child_t *c)
{
    FILE *f = fopen(c->log_path, "r");
    if (!f)
        return;
    char lines[8][512];
    int n = 0;
    char buf[512];
    while (fgets(buf, sizeof(buf), f)) {
        buf[strcspn(buf, "\n")] = '\0';
        snprintf(lines[n % 8], sizeof(lines[0]), "%s", buf);
        n++;
    }
    fclose(f);
    int first = n > 8 ? n - 8 : 0;
    for (int i = first; i < n; i++)
        fprintf(stderr, "%-8s | %s\n", c->name, lines[i % 8]);
}

static int finish(launch_t *L)
{
    tail_all(L, true);
    show_progress(L, true);
    zps_progress_break(&L->progress);
    const options_t *o = L->o;
    double wall = secs_since(L->start_ns);
    const char *status = L->status ? L->status : "ok";

    zps_run_info_t info;
    memset(&info, 0, sizeof(info));
    info.name = L->name;
    info.mode = o->mode;
    info.staleness_bound = o->staleness;
    info.backup_workers = o->backup;
    info.lr_staleness = o->lr_staleness;
    info.targets = o->targets;
    info.target_count = o->target_count;
    info.wall_seconds = wall;
    info.status = status;
    info.failed = L->failed[0] ? L->failed : NULL;
    info.server_args = (const char *const *)o->server_args.v;
    info.server_arg_count = o->server_args.n;
    char *summary = zps_runstats_summary(L->rs, &info);
    FILE *f = summary ? open_in_run(L, "summary.json", "w") : NULL;
    bool wrote = f && fputs(summary, f) != EOF;
    if (f && fclose(f) != 0)
        wrote = false;
    free(summary);
    if (!wrote)
        say(L, "cannot write %s/summary.json", L->dir);
    if (zps_runstats_write_tables(L->rs, &info, L->dir) != 0)
        say(L, "cannot write the tables in %s", L->dir);

    char rel[PATH_MAX + 300];
    snprintf(rel, sizeof(rel), "%s/%s", o->runs_dir, L->name);
    if (strcmp(status, "ok") != 0) {
        const child_t *who = NULL;
        for (uint32_t i = 0; i < o->servers; i++)
            if (strcmp(L->servers[i].name, L->failed) == 0)
                who = &L->servers[i];
        for (uint32_t i = 0; i < kids(L); i++)
            if (strcmp(L->workers[i].name, L->failed) == 0)
                who = &L->workers[i];
        if (who && o->quiet)
            print_tail_of_log(who);
        if (who)
            fprintf(stderr, "zps launch: failed: %s; its log: %s/%s.log\n", L->why, rel, who->file);
        else
            fprintf(stderr, "zps launch: %s: %s; run folder %s\n",
                    strcmp(status, "interrupted") == 0 ? "interrupted" : "failed", L->why, rel);
        return L->exit_code ? L->exit_code : EXIT_FAILED;
    }
    zps_runstats_result_t res;
    zps_runstats_result(L->rs, &res);
    if (isfinite(res.final_accuracy))
        printf("final test accuracy %.4f (loss %.4f) after %llu clocks: %s, %u servers x %u "
               "workers, %.1f s training, %.0f examples/s; run folder %s\n",
               res.final_accuracy, res.final_loss, (unsigned long long)res.final_clock, o->mode,
               o->servers, o->workers, res.train_seconds, res.examples_per_second, rel);
    else if (isfinite(res.final_loss))
        printf("final test loss %.6g after %llu clocks: %s, %u servers x %u workers, %.1f s "
               "training; run folder %s\n",
               res.final_loss, (unsigned long long)res.final_clock, o->mode, o->servers, o->workers,
               res.train_seconds, rel);
    else
        printf("training ended without a final evaluation; run folder %s\n", rel);
    /* How long each accuracy target took: the figure a user compares runs by. */
    for (size_t t = 0; t < o->target_count && isfinite(res.final_accuracy); t++) {
        double sec;
        uint64_t clock;
        if (zps_runstats_target(L->rs, o->targets[t], &sec, &clock))
            printf("test accuracy %g reached after %.1f s of training (clock %llu)\n",
                   o->targets[t], sec, (unsigned long long)clock);
        else
            printf("test accuracy %g not reached\n", o->targets[t]);
    }
    fflush(stdout);
    return 0;
}

/* `zps launch --exec-child PPID BIN ARGS...`: see the file comment. */
static int exec_child(char **argv)
{
    long ppid;
    if (zps_parse_long(argv[2], 1, LONG_MAX, &ppid))
        return 127;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The launcher may have died before prctl took effect. */
    if ((long)getppid() != ppid)
        return 127;
    execv(argv[3], argv + 3);
    fprintf(stderr, "zps launch: cannot run %s: %s\n", argv[3], strerror(errno));
    return 127;
}

int zps_cmd_launch(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "--exec-child") == 0)
        return exec_child(argv);

    options_t o;
    int ex = parse_options(argc, argv, &o);
    if (ex == 0)
        ex = check_child_flags(&o);
    if (ex == 0)
        ex = plan_run(&o);
    if (ex) {
        options_free(&o);
        return ex < 0 ? 0 : ex;
    }

    launch_t *L = calloc(1, sizeof(*L));
    if (!L) {
        options_free(&o);
        return EXIT_FAILED;
    }
    L->o = &o;
    ex = EXIT_FAILED;
    ssize_t sl = readlink("/proc/self/exe", L->self, sizeof(L->self) - 1);
    if (sl <= 0) {
        fprintf(stderr, "zps launch: cannot find this program: %s\n", strerror(errno));
        goto out;
    }
    L->self[sl] = '\0';
    char self_dir[PATH_MAX];
    snprintf(self_dir, sizeof(self_dir), "%s", L->self);
    *strrchr(self_dir, '/') = '\0';
    static const char *const srel[] = {"zps-server", NULL};
    static const char *const wrel[] = {"zps-worker", NULL};
    if (find_binary(o.server_bin, "ZPS_SERVER_BIN", self_dir, srel, "zps-server", L->server_bin,
                    sizeof(L->server_bin))) {
        fprintf(stderr, "zps launch: cannot find zps-server %s (give --server-bin)\n",
                o.server_bin ? o.server_bin : "beside this zps or in PATH");
        ex = EXIT_USAGE;
        goto out;
    }
    if (find_binary(o.worker_bin, "ZPS_WORKER_BIN", self_dir, wrel, "zps-worker", L->worker_bin,
                    sizeof(L->worker_bin))) {
        fprintf(stderr, "zps launch: cannot find zps-worker %s (give --worker-bin)\n",
                o.worker_bin ? o.worker_bin : "beside this zps or in PATH");
        ex = EXIT_USAGE;
        goto out;
    }
    if ((ex = make_run_dir(L)) != 0)
        goto out;
    ex = EXIT_FAILED;
    if (zps_runstats_new(o.workers, o.servers, &L->rs) != 0)
        goto out;
    L->servers = calloc(o.servers, sizeof(child_t));
    L->workers = calloc(o.workers + 1, sizeof(child_t));
    L->stats_json = calloc(o.servers, sizeof(char *));
    L->stats_rc = calloc(o.servers, sizeof(int));
    if (!L->servers || !L->workers || !L->stats_json || !L->stats_rc)
        goto out;
    for (uint32_t i = 0; i < o.servers; i++)
        child_init(L, &L->servers[i], true, i);
    for (uint32_t i = 0; i < kids(L); i++)
        child_init(L, &L->workers[i], false, i);
    L->evaluator = &L->workers[o.workers];

    FILE *cmds = open_in_run(L, "commands.txt", "w");
    if (cmds) {
        fprintf(cmds, "# zps launch, run from %s\n",
                getcwd(self_dir, sizeof(self_dir)) ? self_dir : "?");
        strvec_t me = {0};
        sv_push(&me, L->self);
        for (int i = 0; i < argc; i++)
            sv_push(&me, argv[i]);
        write_command(cmds, &me);
        sv_free(&me);
        fclose(cmds);
    }
    L->stats_file = open_in_run(L, "stats.jsonl", "w");

    zps_progress_init(&L->progress, stderr, o.progress, o.progress_every_s);
    fprintf(stderr, "zps launch: %s, %u servers, %u workers; run folder %s/%s\n", o.mode, o.servers,
            o.workers, o.runs_dir, L->name);

    uv_loop_init(&L->loop);
    uv_timer_init(&L->loop, &L->tick);
    L->tick.data = L;
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&L->loop, &L->sig[i]);
        L->sig[i].data = L;
        uv_signal_start(&L->sig[i], on_signal, sigs[i]);
    }
    L->start_ns = L->phase_ns = zps_now_ns();
    L->phase = PH_SERVERS;
    start_servers(L);
    uv_timer_start(&L->tick, on_tick, TICK_MS, TICK_MS);
    maybe_finish(L);
    uv_run(&L->loop, UV_RUN_DEFAULT);
    uv_loop_close(&L->loop);
    ex = finish(L);

out:
    if (L->stats_file)
        fclose(L->stats_file);
    zps_client_free(L->client);
    for (uint32_t i = 0; L->servers && i < o.servers; i++) {
        sv_free(&L->servers[i].argv);
        tail_close(&L->servers[i].log);
    }
    for (uint32_t i = 0; L->workers && i < kids(L); i++) {
        sv_free(&L->workers[i].argv);
        tail_close(&L->workers[i].log);
        tail_close(&L->workers[i].metrics);
    }
    free(L->servers);
    free(L->workers);
    free(L->stats_json);
    free(L->stats_rc);
    zps_runstats_free(L->rs);
    free(L);
    options_free(&o);
    return ex;
}
