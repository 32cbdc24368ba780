/*
 * launch_opts.c - zps launch's flags and the check of what its children will
 * be handed; see launch_opts.h.
 */
#include "launch_opts.h"

#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "delay_comp.h"
#include "error.h"
#include "opt_flags.h"
#include "parse.h"
#include "straggler_flags.h"
#include "worker_flags.h"

/*
 * Flags handed on unchanged: to every server, or to every worker. The
 * optimizer's flags (zps-server's, opt_flags.h) and the step-time and
 * straggler flags (zps-worker's, straggler_flags.h) come from the tables
 * that define them; pass_table lists all of them in the order of the getopt
 * table, which is the order of the usage.
 */
enum { TO_SERVER, TO_WORKER };
typedef struct passthrough {
    const char *name;
    int has_arg;
    int to;
} passthrough_t;

static const struct option optimizer_flags[] = {ZPS_OPT_FLAG_OPTIONS};
static const passthrough_t server_pass[] = {
    {"worker-timeout", 1, TO_SERVER},
    {"max-pending-pulls", 1, TO_SERVER},
};
/* zps-worker's flags (worker_flags.h) launch hands on as they are. */
static const char *const worker_pass[] = {
    "model",   "data",         "data-dir",   "batch",          "epochs",
    "clocks",  "seed",         "backend",    "device",         "blas-threads",
    "eval-every", "data-assignment",
};
/* ...and after the straggler flags, in the order of zps-worker's usage. */
static const char *const worker_pass_last[] = {"no-final-wait"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define NPASS                                                                                      \
    (COUNT(optimizer_flags) + COUNT(server_pass) + COUNT(worker_pass) + ZPS_STRAGGLER_FLAG_COUNT + \
     COUNT(worker_pass_last))

/* A zps-worker flag handed on: whether it takes a value is zps-worker's to say. */
static passthrough_t to_worker(const char *name)
{
    const zps_worker_flag_t *f = zps_worker_flag_find(name);
    ZPS_ASSERT(f != NULL);
    return (passthrough_t){f->name, zps_worker_flag_has_value(f), TO_WORKER};
}

/* Fills pass[NPASS]: the optimizer's flags, the servers', the workers', the
 * straggler flags, the workers' last. */
static void pass_table(passthrough_t *pass)
{
    size_t n = 0;
    for (size_t i = 0; i < COUNT(optimizer_flags); i++)
        pass[n++] = (passthrough_t){optimizer_flags[i].name,
                                    optimizer_flags[i].has_arg == required_argument, TO_SERVER};
    for (size_t i = 0; i < COUNT(server_pass); i++)
        pass[n++] = server_pass[i];
    for (size_t i = 0; i < COUNT(worker_pass); i++)
        pass[n++] = to_worker(worker_pass[i]);
    for (size_t i = 0; i < ZPS_STRAGGLER_FLAG_COUNT; i++)
        pass[n++] = (passthrough_t){zps_straggler_flag_table[i].name, 1, TO_WORKER};
    for (size_t i = 0; i < COUNT(worker_pass_last); i++)
        pass[n++] = to_worker(worker_pass_last[i]);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: zps launch [options]\n"
               "       zps launch [options] -- COMMAND ARGS...\n"
               "\n"
               "Starts a zps cluster on this machine -- S zps-server shards on free loopback\n"
               "ports and W zps-worker processes -- shows one progress line, stops everything\n"
               "when training ends (or on Ctrl-C, or when a process fails) and leaves a run\n"
               "folder RUNS/NAME with each process's log, the metrics, the command lines and\n"
               "summary.json. docs/launch.md has the details.\n"
               "\n"
               "Your own command: after '--', COMMAND ARGS runs once per worker rank instead of\n"
               "zps-worker (no evaluator, no model from launch: rank 0 initialises it), with\n"
               "ZPS_SERVERS (the endpoints in shard order), ZPS_RANK, ZPS_WORKERS and\n"
               "ZPS_METRICS (its metrics file, JSON lines as zps-worker's) in its environment,\n"
               "and with --keys ZPS_KEY and ZPS_SERVER_KEY (its key files). The run ends when\n"
               "every command has exited: all 0 is success. zps-worker's flags (--model,\n"
               "--batch, --worker-arg, --straggler, ...) are refused with a command; the\n"
               "servers get the optimizer flags given, else zps-server's defaults.\n"
               "\n"
               "Cluster:\n"
               "  --servers S             server shards (default 2)\n"
               "  --workers W             workers (default 4)\n"
               "  --mode bsp|ssp|asp      consistency (default bsp)\n"
               "  --staleness S           ssp: the staleness bound, S clocks\n"
               "  --backup-workers B      bsp: take each step once W-B pushes are in\n"
               "  --lr-staleness RULE     servers' staleness-aware learning rate (e.g. inverse)\n"
               "  --delay-compensation L  ssp, asp: the servers compensate each gradient for\n"
               "                          the updates since its pull, g + L*g*g*(w_now - w_pulled)\n"
               "                          (DC-ASGD; docs/consistency.md)\n"
               "  --server-arg ARG        hand ARG to every zps-server (repeatable)\n"
               "  --worker-arg ARG        hand ARG to every zps-worker (repeatable)\n"
               "  --keys                  CURVE on every connection: generate the run's keys\n"
               "                          in RUN/keys (0700; a pair for the servers, one per\n"
               "                          worker, worker 0's an admin key, reader keys for the\n"
               "                          evaluator and launch) and authorized_keys, and hand\n"
               "                          each process the path of its own secret key only.\n"
               "                          Slower (CURVE encrypts every frame); for trying the\n"
               "                          secure setup, or on a machine shared with users you\n"
               "                          do not trust. Default: loopback without keys\n"
               "  --hosts FILE            run the cluster on other machines over ssh: one host\n"
               "                          a line, HOST [servers=N] [workers=M]; without counts\n"
               "                          --servers and --workers are spread over the hosts\n"
               "                          in order. Implies --keys. zps must be at the same\n"
               "                          path on every host (docs/cluster.md)\n"
               "  --ssh CMD               --hosts: the ssh command, words split on blanks\n"
               "                          (default ssh; e.g. 'ssh -F cluster.conf')\n"
               "  --port P                --hosts: a host's servers listen on P, P+1, ...\n"
               "                          (default 7100)\n"
               "\n"
               "Handed to every server: --optimizer --lr --momentum --nesterov --beta1 --beta2\n"
               "  --eps --weight-decay --schedule --step-every --gamma --cosine-steps --lr-min\n"
               "  --warmup --worker-timeout --max-pending-pulls\n"
               "Handed to every worker: --model --data --data-dir --batch --epochs --clocks\n"
               "  --seed --backend --device --blas-threads --eval-every (default: every\n"
               "  half epoch here) --data-assignment static|shared (shared: under ssp and\n"
               "  asp each epoch's batches go to whichever worker asks next; docs/worker.md)\n"
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
               "  --stop-at ACC           stop training once the evaluator has seen test\n"
               "                          accuracy ACC (a budget: the run ends as finished;\n"
               "                          accuracy is seen at --eval-every's clocks)\n"
               "  --quiet                 do not echo the processes' output (it is in their logs)\n"
               "  --no-memory-check       start even when the estimate of the processes' memory\n"
               "                          exceeds what this host has available (local runs\n"
               "                          only; docs/launch.md gives the estimate)\n"
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

/* getopt_long's own messages (opterr) name the program "launch" and not
 * "zps launch"; this says the same in ours. arg is the word getopt stopped
 * at: an option it does not know, one that is a prefix of several, or one
 * missing its value or given one it does not take. */
static void bad_option(const struct option *all, const char *arg)
{
    if (strncmp(arg, "--", 2) != 0) {
        fprintf(stderr, "zps launch: invalid option '%s'\n", arg);
        return;
    }
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    const struct option *exact = NULL;
    int matches = 0;
    for (const struct option *p = all; p->name; p++) {
        if (strncmp(p->name, name, len) != 0)
            continue;
        matches++;
        if (strlen(p->name) == len)
            exact = p;
    }
    if (matches > 1 && !exact) {
        fprintf(stderr, "zps launch: option '--%.*s' is ambiguous; possibilities:", (int)len, name);
        for (const struct option *p = all; p->name; p++)
            if (strncmp(p->name, name, len) == 0)
                fprintf(stderr, " '--%s'", p->name);
        fputc('\n', stderr);
    } else if (matches == 0) {
        fprintf(stderr, "zps launch: unrecognized option '--%.*s'\n", (int)len, name);
    } else if (name[len] == '=') {
        fprintf(stderr, "zps launch: option '--%.*s' takes no value\n", (int)len, name);
    } else {
        fprintf(stderr, "zps launch: option '--%.*s' needs a value\n", (int)len, name);
    }
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zps launch: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'zps launch --help'.\n");
    va_end(ap);
    return ZPS_LAUNCH_EXIT_USAGE;
}

/*
 * The --straggler KEY named `key`: a per-rank setting of the straggler flags
 * table (straggler_flags.h), or NULL.
 */
static const zps_straggler_flag_t *straggler_key(const char *key)
{
    const zps_straggler_flag_t *f = zps_straggler_flag_find(key);
    return f && f->per_rank ? f : NULL;
}

/* Checks one straggler flag's value the way zps-worker will. */
static bool straggler_value_ok(const zps_straggler_flag_t *f, const char *value)
{
    zps_straggler_flags_t sf;
    zps_straggler_flags_init(&sf);
    char why[256];
    return zps_straggler_flag_apply(&sf, f, value, NULL, 0) == 0 &&
           zps_straggler_check(&sf.cfg, why, sizeof(why)) == 0;
}

/* --straggler RANKS:KEY=VALUE[,KEY=VALUE...] */
static int parse_straggler(zps_launch_opts_t *o, const char *arg)
{
    if (o->spec_count == ZPS_LAUNCH_MAX_STRAGGLERS)
        return usage_error("at most %d --straggler flags", ZPS_LAUNCH_MAX_STRAGGLERS);
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
    zps_launch_straggler_t *sp = &o->specs[o->spec_count];
    memset(sp, 0, sizeof(*sp));
    if (zps_straggler_parse_ranks(ranks, &sp->ranks))
        return usage_error("invalid --straggler ranks '%s': expected all, or ranks such as 0,2-3",
                           ranks);
    char *rest = strdup(colon + 1);
    if (!rest)
        return ZPS_LAUNCH_EXIT_FAILED;
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
        const zps_straggler_flag_t *f = straggler_key(key);
        char keys[128];
        if (!f)
            ex = usage_error("invalid --straggler key '%s': expected %s", key,
                             zps_straggler_flags_keys(keys, sizeof(keys)));
        else if (!straggler_value_ok(f, value))
            ex = usage_error("invalid --straggler %s=%s (see zps-worker --help for its values)",
                             key, value);
        else if (zps_argv_pushf(&sp->flags, "--%s", key) || zps_argv_push(&sp->flags, value))
            ex = ZPS_LAUNCH_EXIT_FAILED;
        any = true;
    }
    free(rest);
    if (!ex && !any)
        ex = usage_error("invalid --straggler '%s': no KEY=VALUE", arg);
    if (ex) {
        zps_argv_free(&sp->flags);
        return ex;
    }
    o->spec_count++;
    return 0;
}

static int parse_targets(zps_launch_opts_t *o, const char *arg)
{
    char **items;
    size_t n;
    if (zps_parse_list(arg, &items, &n))
        return usage_error("invalid --targets '%s': expected accuracies such as 0.85,0.88", arg);
    int ex = 0;
    if (n > ZPS_LAUNCH_MAX_TARGETS)
        ex = usage_error("at most %d --targets", ZPS_LAUNCH_MAX_TARGETS);
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
    O_DELAY_COMP,
    O_STOP_AT,
    O_SERVER_ARG,
    O_WORKER_ARG,
    O_KEYS,
    O_HOSTS,
    O_SSH,
    O_PORT,
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
    O_NO_MEMORY_CHECK,
    O_HELP,
    O_PASS = 1000, /* + index into pass_table's table */
};

/* --data-assignment as the workers will see it: the command line's, else the environment's. */
static const char *data_assignment(const zps_launch_opts_t *o)
{
    const char *v = zps_argv_last_value(&o->worker_args, "data-assignment");
    return v ? v : zps_argv_last_value(&o->env_worker_args, "data-assignment");
}

bool zps_launch_shared(const zps_launch_opts_t *o)
{
    const char *v = data_assignment(o);
    return v && strcmp(v, "shared") == 0 && strcmp(o->mode, "bsp") != 0;
}

void zps_launch_opts_free(zps_launch_opts_t *o)
{
    zps_argv_free(&o->server_args);
    zps_argv_free(&o->worker_args);
    zps_argv_free(&o->env_server_args);
    zps_argv_free(&o->env_worker_args);
    zps_argv_free(&o->env_set_aside);
    for (size_t i = 0; i < o->spec_count; i++)
        zps_argv_free(&o->specs[i].flags);
}

int zps_launch_opts_parse(int argc, char **argv, zps_launch_opts_t *o)
{
    static const struct option own[] = {
        {"servers", required_argument, NULL, O_SERVERS},
        {"workers", required_argument, NULL, O_WORKERS},
        {"mode", required_argument, NULL, O_MODE},
        {"staleness", required_argument, NULL, O_STALENESS},
        {"backup-workers", required_argument, NULL, O_BACKUP},
        {"lr-staleness", required_argument, NULL, O_LR_STALENESS},
        {"delay-compensation", required_argument, NULL, O_DELAY_COMP},
        {"stop-at", required_argument, NULL, O_STOP_AT},
        {"server-arg", required_argument, NULL, O_SERVER_ARG},
        {"worker-arg", required_argument, NULL, O_WORKER_ARG},
        {"keys", no_argument, NULL, O_KEYS},
        {"hosts", required_argument, NULL, O_HOSTS},
        {"ssh", required_argument, NULL, O_SSH},
        {"port", required_argument, NULL, O_PORT},
        {"straggler", required_argument, NULL, O_STRAGGLER},
        {"name", required_argument, NULL, O_NAME},
        {"runs-dir", required_argument, NULL, O_RUNS_DIR},
        {"targets", required_argument, NULL, O_TARGETS},
        {"time-limit", required_argument, NULL, O_TIME_LIMIT},
        {"quiet", no_argument, NULL, O_QUIET},
        {"no-memory-check", no_argument, NULL, O_NO_MEMORY_CHECK},
        {"no-progress", no_argument, NULL, O_NO_PROGRESS},
        {"progress-every", required_argument, NULL, O_PROGRESS_EVERY},
        {"server-bin", required_argument, NULL, O_SERVER_BIN},
        {"worker-bin", required_argument, NULL, O_WORKER_BIN},
        {"help", no_argument, NULL, O_HELP},
    };
    const size_t nown = sizeof(own) / sizeof(own[0]);
    passthrough_t pass[NPASS];
    pass_table(pass);
    struct option all[sizeof(own) / sizeof(own[0]) + NPASS + 1];
    memcpy(all, own, sizeof(own));
    for (size_t i = 0; i < NPASS; i++) {
        all[nown + i].name = pass[i].name;
        all[nown + i].has_arg = pass[i].has_arg ? required_argument : no_argument;
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
    /* The first flag given that only zps-worker takes: refused with a command. */
    const char *worker_only = NULL;
    optind = 1;
    opterr = 0; /* bad_option says what was wrong, with our prefix */
    /* "+": no reordering, so that the words after "--" (a command and its
     * own flags) are never read as ours; `last` is where getopt stood after
     * the latest option, to tell the "--" that ends ours from a value "--". */
    int last = 1;
    while ((c = getopt_long(argc, argv, "+", all, NULL)) != -1) {
        const char *a = optarg;
        int ex = 0;
        last = optind;
        switch (c) {
        case O_SERVERS:
            if (zps_parse_long(a, 1, 256, &l))
                return usage_error("invalid --servers '%s': expected an integer in [1, 256]", a);
            o->servers = (uint32_t)l;
            o->servers_set = true;
            break;
        case O_WORKERS:
            if (zps_parse_long(a, 1, 1024, &l))
                return usage_error("invalid --workers '%s': expected an integer in [1, 1024]", a);
            o->workers = (uint32_t)l;
            o->workers_set = true;
            break;
        case O_MODE:
            if (strcmp(a, "bsp") != 0 && strcmp(a, "ssp") != 0 && strcmp(a, "asp") != 0)
                return usage_error("invalid --mode '%s': expected bsp, ssp or asp", a);
            o->mode = a;
            break;
        case O_STALENESS:
            if (zps_parse_long(a, 0, 1000000, &l))
                return usage_error("invalid --staleness '%s': expected an integer >= 0", a);
            o->ssp_bound = (uint32_t)l;
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
        case O_DELAY_COMP:
            if (zps_parse_double(a, &d) || !(d >= 0 && d <= ZPS_DELAY_COMP_MAX))
                return usage_error("invalid --delay-compensation '%s': expected a number in "
                                   "[0, 1e6]",
                                   a);
            o->delay_comp = d > 0 ? a : NULL;
            break;
        case O_STOP_AT:
            if (zps_parse_double(a, &d) || !(d > 0 && d <= 1))
                return usage_error("invalid --stop-at '%s': expected a test accuracy in (0, 1]",
                                   a);
            o->stop_at = d;
            break;
        case O_SERVER_ARG:
            ex = zps_argv_push(&o->server_args, a) ? ZPS_LAUNCH_EXIT_FAILED : 0;
            break;
        case O_WORKER_ARG:
            worker_only = worker_only ? worker_only : "worker-arg";
            ex = zps_argv_push(&o->worker_args, a) ? ZPS_LAUNCH_EXIT_FAILED : 0;
            break;
        case O_KEYS:
            o->keys = true;
            break;
        case O_HOSTS:
            o->hosts = a;
            break;
        case O_SSH:
            if (!*a)
                return usage_error("invalid --ssh '': expected a command such as 'ssh -F FILE'");
            o->ssh = a;
            break;
        case O_PORT:
            if (zps_parse_long(a, 1, 65000, &l))
                return usage_error("invalid --port '%s': expected an integer in [1, 65000]", a);
            o->port = (uint32_t)l;
            break;
        case O_STRAGGLER:
            worker_only = worker_only ? worker_only : "straggler";
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
        case O_NO_MEMORY_CHECK:
            o->no_memory_check = true;
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
            worker_only = worker_only ? worker_only : "worker-bin";
            o->worker_bin = a;
            break;
        case O_HELP:
            usage(stdout);
            return -1;
        default:
            if (c >= O_PASS && c < O_PASS + (int)NPASS) {
                const passthrough_t *p = &pass[c - O_PASS];
                zps_argv_t *to = p->to == TO_SERVER ? &o->server_args : &o->worker_args;
                if (p->to == TO_WORKER && !worker_only)
                    worker_only = p->name;
                if (strcmp(p->name, "eval-every") == 0)
                    o->have_eval_every = true;
                if (zps_argv_pushf(to, "--%s", p->name) || (p->has_arg && zps_argv_push(to, a)))
                    ex = ZPS_LAUNCH_EXIT_FAILED;
                break;
            }
            bad_option(all, argv[optind - 1]);
            fprintf(stderr, "Try 'zps launch --help'.\n");
            return ZPS_LAUNCH_EXIT_USAGE;
        }
        if (ex)
            return ex;
    }
    /* getopt_long stepped over the "--" that ends launch's flags only when
     * optind moved one word past where the last option ended. */
    if (optind == last + 1 && last < argc && strcmp(argv[last], "--") == 0) {
        if (optind == argc)
            return usage_error("'--' needs a COMMAND after it: zps launch [options] -- COMMAND "
                               "ARGS...");
        o->command = argv + optind;
        o->command_n = (size_t)(argc - optind);
    } else if (optind < argc) {
        return usage_error("unexpected argument '%s'", argv[optind]);
    }
    if (o->command && worker_only)
        return usage_error("--%s is for zps-worker, and with a command (-- %s) no zps-worker "
                           "runs: give the command its own flags after '--'",
                           worker_only, o->command[0]);
    if (have_staleness && strcmp(o->mode, "ssp") != 0)
        return usage_error("--staleness applies to --mode ssp only");
    if (strcmp(o->mode, "ssp") == 0 && (!have_staleness || o->ssp_bound == 0))
        return usage_error("--mode ssp needs --staleness S (S >= 1: a worker may run S clocks "
                           "ahead of the slowest; SSP(0) is BSP without a barrier step, so ask "
                           "for --mode bsp)");
    if (o->backup > 0 && strcmp(o->mode, "bsp") != 0)
        return usage_error("--backup-workers applies to --mode bsp only");
    /* The target a run stops at is one of those it times. */
    bool listed = false;
    for (size_t i = 0; i < o->target_count; i++)
        listed = listed || o->targets[i] == o->stop_at;
    if (o->stop_at > 0 && !listed && o->target_count < ZPS_LAUNCH_MAX_TARGETS)
        o->targets[o->target_count++] = o->stop_at;
    if (o->ssh && !o->hosts)
        return usage_error("--ssh applies to --hosts only");
    if (o->port && !o->hosts)
        return usage_error("--port applies to --hosts only");
    if (o->hosts) {
        o->keys = true; /* across hosts, always */
        if (!o->ssh)
            o->ssh = "ssh";
        if (!o->port)
            o->port = 7100;
        return 0; /* the counts are checked once the hosts file is read */
    }
    return zps_launch_opts_check_counts(o);
}

int zps_launch_opts_check_counts(const zps_launch_opts_t *o)
{
    if (o->backup >= o->workers)
        return usage_error("--backup-workers %u must be less than the %u workers", o->backup,
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
 * every value launch hands on is checked here first, with the tables the
 * children read their flags with (worker/worker_flags.c,
 * worker/straggler_flags.c, optimizer/opt_flags.c) and so with their ranges
 * and wording, and a bad one is refused in one line.
 */

/* zps-worker flags that launch sets for every worker itself. */
static const char *const launch_sets[] = {"servers", "rank",      "workers",   "metrics",
                                          "local",   "init-only", "evaluator", "no-eval"};

/* ...and with --keys, the key flags of every process. */
static const char *const launch_sets_keys[] = {"key", "server-key", "authorized-keys", "insecure"};

static bool is_key_flag(const char *name)
{
    for (size_t i = 0; i < COUNT(launch_sets_keys); i++)
        if (strcmp(launch_sets_keys[i], name) == 0)
            return true;
    return false;
}

static bool set_by_launch(const char *name, bool keys)
{
    for (size_t i = 0; i < COUNT(launch_sets); i++)
        if (strcmp(launch_sets[i], name) == 0)
            return true;
    for (size_t i = 0; keys && i < COUNT(launch_sets_keys); i++)
        if (strcmp(launch_sets_keys[i], name) == 0)
            return true;
    return false;
}

static const struct option *find_optimizer_flag(const char *name)
{
    for (size_t i = 0; i < COUNT(optimizer_flags); i++)
        if (strcmp(optimizer_flags[i].name, name) == 0)
            return &optimizer_flags[i];
    return NULL;
}

/* zps-server flags that launch sets for every server itself. */
static const char *const server_sets[] = {
    "listen",         "endpoint-file", "shard",       "workers",           "mode",
    "staleness",      "backup-workers", "lr-staleness", "delay-compensation"};

static bool server_set_by_launch(const char *name, bool keys)
{
    for (size_t i = 0; i < COUNT(server_sets); i++)
        if (strcmp(server_sets[i], name) == 0)
            return true;
    for (size_t i = 0; keys && i < COUNT(launch_sets_keys); i++)
        if (strcmp(launch_sets_keys[i], name) == 0)
            return true;
    return false;
}

/* The flags launch sets that it takes itself, to set them for every process. */
static bool own_flag(const char *name)
{
    static const char *const own[] = {"workers",      "mode",
                                      "staleness",    "backup-workers",
                                      "lr-staleness", "delay-compensation"};
    for (size_t i = 0; i < COUNT(own); i++)
        if (strcmp(own[i], name) == 0)
            return true;
    return false;
}

/* Appends "--name" or "--name=value" to a, as envflags.h reads variable
 * `var`: a no-value flag is given by 1/true/yes, left out by 0/false/no/"";
 * an empty value of a flag that takes one is ignored. */
static int env_flag(zps_argv_t *a, const char *var, const char *name, bool has_value, const char *v)
{
    if (has_value)
        return *v ? zps_argv_pushf(a, "--%s=%s", name, v) : 0;
    static const char *const yes[] = {"1", "true", "yes"}, *const no[] = {"0", "false", "no", ""};
    for (size_t i = 0; i < COUNT(no); i++)
        if (strcasecmp(v, no[i]) == 0)
            return 0;
    for (size_t i = 0; i < COUNT(yes); i++)
        if (strcasecmp(v, yes[i]) == 0)
            return zps_argv_pushf(a, "--%s", name);
    return usage_error("%s='%s' in the environment: --%s takes no value; expected 1, true or "
                       "yes (or 0, false, no)",
                       var, v, name);
}

int zps_launch_opts_env(zps_launch_opts_t *o, char **envp)
{
    size_t used = 0;
    o->env_names[0] = '\0';
    for (char **e = envp; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "ZPS_", 4) != 0 || !eq || (size_t)(eq - *e) > 60)
            continue;
        char var[64], name[64];
        snprintf(var, sizeof(var), "%.*s", (int)(eq - *e), *e);
        size_t n = 0;
        for (const char *p = var + 4; *p; p++)
            name[n++] = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
        name[n] = '\0';
        const char *v = eq + 1;
        const zps_worker_flag_t *f = zps_worker_flag_find(name);
        if (f && f->kind == ZPS_WORKER_VALUE_HELP)
            f = NULL;
        const zps_straggler_flag_t *stf = zps_straggler_flag_find(name);
        const struct option *of = find_optimizer_flag(name);
        bool server_own =
            strcmp(name, "worker-timeout") == 0 || strcmp(name, "max-pending-pulls") == 0;
        if (o->keys && is_key_flag(name)) {
            if (zps_argv_push(&o->env_set_aside, *e))
                return ZPS_LAUNCH_EXIT_FAILED;
            continue;
        }
        bool worker_conflict = (f || stf) && set_by_launch(name, o->keys);
        if (worker_conflict || server_set_by_launch(name, o->keys))
            return usage_error("%s in the environment sets --%s, which zps launch gives every "
                               "%s itself: unset it%s",
                               var, name, worker_conflict ? "worker" : "server",
                               own_flag(name) ? " (or give zps launch the flag)" : "");
        int rc = 0;
        if (f || stf)
            rc = env_flag(&o->env_worker_args, var, name, f ? zps_worker_flag_has_value(f) : true,
                          v);
        if (rc == 0 && (of || server_own))
            rc = env_flag(&o->env_server_args, var, name,
                          server_own || of->has_arg == required_argument, v);
        if (rc)
            return rc == ZPS_ENOMEM ? ZPS_LAUNCH_EXIT_FAILED : rc;
        if ((f || stf || of || server_own) && used + strlen(*e) + 2 < sizeof(o->env_names))
            used += (size_t)snprintf(o->env_names + used, sizeof(o->env_names) - used, "%s%s",
                                     used ? " " : "", *e);
    }
    return 0;
}

bool zps_launch_is_optimizer_flag(const char *name)
{
    return find_optimizer_flag(name) != NULL;
}

/* Walks worker flags as they will appear on a worker's command line,
 * applying the straggler flags to sf. */
static bool worker_args_ok(const zps_argv_t *args, bool keys, zps_straggler_flags_t *sf,
                           bool *epochs, bool *clocks, char *why, size_t size)
{
    char name[64];
    for (size_t i = 0; i < args->n; i++) {
        if (strncmp(args->v[i], "--", 2) != 0) {
            snprintf(why, size, "invalid --worker-arg '%s': expected a zps-worker flag",
                     args->v[i]);
            return false;
        }
        bool missing;
        zps_argv_flag(args, &(size_t){i}, name, sizeof(name), false, &missing);
        /* --help is zps-worker's, but no setting a worker can be handed. */
        const zps_worker_flag_t *f = zps_worker_flag_find(name);
        if (f && f->kind == ZPS_WORKER_VALUE_HELP)
            f = NULL;
        const zps_straggler_flag_t *stf = f ? NULL : zps_straggler_flag_find(name);
        const struct option *of = f || stf ? NULL : find_optimizer_flag(name);
        if (!f && !stf && !of) {
            snprintf(why, size, "unknown zps-worker flag '--%s' (see zps-worker --help)", name);
            return false;
        }
        if (f && set_by_launch(name, keys)) {
            snprintf(why, size, "--%s is set by zps launch for every worker%s", name,
                     keys && !set_by_launch(name, false) ? " with --keys" : "");
            return false;
        }
        bool has_value = f     ? zps_worker_flag_has_value(f)
                         : stf ? true
                               : of->has_arg == required_argument;
        const char *v = zps_argv_flag(args, &i, name, sizeof(name), has_value, &missing);
        if (missing) {
            snprintf(why, size, "--%s needs a value", name);
            return false;
        }
        if (f && zps_worker_flag_check_early(f, v, why, size) != 0)
            return false;
        if (stf && zps_straggler_flag_apply(sf, stf, v, why, size) != 0)
            return false;
        *epochs = *epochs || strcmp(name, "epochs") == 0;
        *clocks = *clocks || strcmp(name, "clocks") == 0;
    }
    return true;
}

/* The flags that reach zps-server: the optimizer's, and launch's own server flags. */
static bool server_args_ok(const zps_launch_opts_t *o, const zps_argv_t *args, char *why,
                           size_t size)
{
    zps_opt_flags_t optf;
    zps_opt_flags_init(&optf);
    char name[64];
    double d;
    long l;
    for (size_t i = 0; i < args->n; i++) {
        if (strncmp(args->v[i], "--", 2) != 0)
            continue; /* a --server-arg value of a flag launch does not know */
        bool missing;
        zps_argv_flag(args, &(size_t){i}, name, sizeof(name), false, &missing);
        if (o->keys && set_by_launch(name, true)) {
            snprintf(why, size, "--%s is set by zps launch for every server with --keys", name);
            return false;
        }
        const struct option *of = find_optimizer_flag(name);
        bool timeout = strcmp(name, "worker-timeout") == 0;
        bool pending = strcmp(name, "max-pending-pulls") == 0;
        if (!of && !timeout && !pending)
            continue; /* zps-server checks the flags launch does not hand on itself */
        bool has_value = !of || of->has_arg == required_argument;
        const char *v = zps_argv_flag(args, &i, name, sizeof(name), has_value, &missing);
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
    if (o->delay_comp && strcmp(o->mode, "bsp") == 0) {
        snprintf(why, size,
                 "--delay-compensation applies to pushes applied on arrival (--mode ssp or "
                 "asp); BSP steps are never stale");
        return false;
    }
    return true;
}

/* Each worker is checked with the straggler flags of its rank, as it will get them. */
int zps_launch_opts_check(const zps_launch_opts_t *o)
{
    char why[512];
    /* The servers read the variables before their command line. */
    zps_argv_t sargs = {0};
    if (zps_argv_extend(&sargs, &o->env_server_args) || zps_argv_extend(&sargs, &o->server_args)) {
        zps_argv_free(&sargs);
        return ZPS_LAUNCH_EXIT_FAILED;
    }
    bool sok = server_args_ok(o, &sargs, why, sizeof(why));
    zps_argv_free(&sargs);
    if (!sok) {
        fprintf(stderr, "zps launch: %s%s%s\n", why,
                o->env_server_args.n ? "; from the environment: " : "", o->env_names);
        return ZPS_LAUNCH_EXIT_USAGE;
    }
    for (uint32_t r = 0; r < o->workers; r++) {
        zps_straggler_flags_t sf;
        zps_straggler_flags_init(&sf);
        bool epochs = false, clocks = false;
        bool ok =
            worker_args_ok(&o->env_worker_args, o->keys, &sf, &epochs, &clocks, why, sizeof(why));
        if (!ok) {
            fprintf(stderr, "zps launch: %s; from the environment: %s\n", why, o->env_names);
            return ZPS_LAUNCH_EXIT_USAGE;
        }
        ok = worker_args_ok(&o->worker_args, o->keys, &sf, &epochs, &clocks, why, sizeof(why));
        for (size_t s = 0; ok && s < o->spec_count; s++)
            if (zps_rank_set_has(&o->specs[s].ranks, r))
                ok = worker_args_ok(&o->specs[s].flags, o->keys, &sf, &epochs, &clocks, why,
                                    sizeof(why));
        if (ok && epochs && clocks) {
            snprintf(why, sizeof(why), "give --epochs or --clocks, not both");
            ok = false;
        }
        if (ok && clocks && zps_launch_shared(o)) {
            snprintf(why, sizeof(why), "%s", ZPS_WORKER_SHARED_CLOCKS_WHY);
            ok = false;
        }
        if (ok && zps_straggler_check(&sf.cfg, why, sizeof(why)) != 0)
            ok = false;
        if (!ok) {
            fprintf(stderr, "zps launch: %s\n", why);
            return ZPS_LAUNCH_EXIT_USAGE;
        }
    }
    return 0;
}
