/*
 * worker_main.c - zps-worker's command line: flags into a
 * zps_trainer_config_t, then zps_trainer_run. A bad flag prints the usage
 * and exits 2; a failed run exits 1.
 *
 * Not here: the flags' names, value checks and wording, which are defined
 * once in tables that zps launch reads too (worker_flags.h,
 * straggler_flags.h, optimizer/opt_flags.h); this file builds the getopt
 * table from them, puts each value where it goes and checks the flags
 * against each other. Training itself is trainer.c.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zps/zps.h"
#include "envflags.h"
#include "error.h"
#include "log.h"
#include "metrics_http.h"
#include "opt_flags.h"
#include "straggler_flags.h"
#include "trainer.h"
#include "worker_flags.h"
#include "version.h"
#include "wire.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zps-worker --servers E1,E2,... --rank R --workers W [options]\n"
            "       zps-worker --local [--workers W] [options]\n"
            "\n"
            "Trains a model on a zps cluster (pull, compute the gradient, push, per clock),\n"
            "or with --local in this process alone with the same data order.\n"
            "\n"
            "Cluster:\n"
            "  --servers LIST         server endpoints in shard order, comma-separated\n"
            "  --rank R               this worker's rank in [0, W) (default 0)\n"
            "  --workers W            number of workers (default 1)\n"
            "  --timeout MS           give up on a pull or push after MS ms\n"
            "                         (default -1: wait forever)\n"
            "  --wait-log-ms MS       a pull or push still waiting after MS ms logs which\n"
            "                         server it waits for, then every 3*MS (default 10000;\n"
            "                         0: never)\n"
            "  --key PREFIX.key       this worker's CURVE secret key, for servers started\n"
            "                         with --key (docs/security.md)\n"
            "  --server-key SERVER.pub\n"
            "                         the servers' public key (with --key)\n"
            "  --no-seal              with --key: keep every byte on CURVE instead of sealed\n"
            "                         sessions (an AEAD on a second connection; security.md)\n"
            "  --init-only            rank 0: initialise the servers' model, then exit\n"
            "  --local                no servers: simulate W workers' data order in one\n"
            "                         process and apply the optimizer here\n"
            "  --evaluator            train nothing: observe the servers' model of every\n"
            "                         --eval-every clocks and of the last, evaluate it and\n"
            "                         save it (--save-params); no worker waits for it\n"
            "  --no-eval              worker 0: do not evaluate (an evaluator does)\n"
            "  --no-exchange          push, then pull, in two round trips a clock, instead of\n"
            "                         one exchange (the gradient of clock t and the pull of\n"
            "                         t+1 in one message each way)\n"
            "  --wire-bf16            gradients and parameters as bfloat16 on the wire: half\n"
            "                         the bytes; gradients rounded with error feedback, the\n"
            "                         servers keep float32 (docs/worker.md)\n"
            "  --data-assignment static|shared\n"
            "                         static (default): rank r owns 1/W of every epoch;\n"
            "                         shared: under SSP and ASP the epochs' batches are\n"
            "                         leased from shard 0 to whichever worker asks next,\n"
            "                         each once (BSP keeps static; docs/worker.md)\n"
            "  --no-shm               never ask a server for a shared-memory session: without\n"
            "                         it, servers on this host move the bytes through shared\n"
            "                         memory and the socket carries only headers\n"
            "\n"
            "Training:\n"
            "  --model SPEC           mlp:I-H1-...-O or linear:D (default mlp:784-256-128-10,\n"
            "                         or linear:D for synthetic data)\n"
            "  --data SET             fashion-mnist (default), or synthetic with options\n"
            "                         synthetic:n=N,test=M,dim=D,classes=C,noise=S,seed=X\n"
            "                         (regression; with classes=C >= 2, C classes)\n"
            "  --data-dir DIR         Fashion-MNIST files\n"
            "                         (default /usr/share/datasets/fashion-mnist)\n"
            "  --batch B              examples per worker per clock (default 64)\n"
            "  --epochs E             passes over the training set (default 1)\n"
            "  --clocks K             run exactly K clocks instead of --epochs\n"
            "  --seed S               initialisation, data order, synthetic data (default 1)\n"
            "  --backend NAME         cpu, cuda or auto (default auto: cuda when a device\n"
            "                         works, else cpu)\n"
            "  --device I             CUDA device index (default 0)\n"
            "  --blas-threads N       OpenBLAS threads for the cpu backend (default 1)\n"
            "\n"
            "Optimizer (--local only; a cluster uses the servers' flags):\n"
            "%s"
            "\n"
            "Step time and stragglers (docs/launch.md; every delay is in the metrics):\n",
            zps_opt_flags_usage);
    zps_straggler_flags_usage(f);
    fputs("  --no-final-wait        worker 0 under SSP/ASP: evaluate at once after its last\n"
          "                         clock instead of waiting for the others' last pushes\n"
          "\n"
          "Reporting:\n"
          "  --eval-every K         worker 0 (or the evaluator) evaluates the test set\n"
          "                         every K clocks\n"
          "                         (default 0: only at the end)\n"
          "  --metrics FILE         write JSON lines (run, step, eval records) to FILE\n"
          "  --metrics-listen HOST:PORT\n"
          "                         serve Prometheus metrics (steps, the time of each part\n"
          "                         of a step, loss, accuracy) at http://HOST:PORT/metrics\n"
          "  --save-params FILE     the evaluating process (worker 0, the evaluator or\n"
          "                         --local): write the final parameters to\n"
          "                         FILE as raw little-endian float32\n"
          "  --no-progress          no progress line on stderr\n"
          "  --progress-every S     seconds between progress lines when stderr is not a\n"
          "                         terminal (default 10)\n"
          "  --log-level LEVEL      debug, info, warn, error (default info)\n"
          "  --help                 this text\n",
          f);
}

/*
 * zps-worker's getopt_long table: its own flags section by section, the
 * optimizer's after the training flags and the straggler flags before the
 * step flags, as in the usage. Every name comes from the tables that define
 * the flags (worker_flags.h, opt_flags.h, straggler_flags.h).
 */
static const struct option optimizer_options[] = {ZPS_OPT_FLAG_OPTIONS};
#define N_OPTIMIZER (sizeof(optimizer_options) / sizeof(optimizer_options[0]))
#define N_OPTIONS (ZPS_WORKER_FLAG_COUNT + N_OPTIMIZER + ZPS_STRAGGLER_FLAG_COUNT + 1)

static size_t add_section(struct option *out, size_t n, zps_worker_flag_section_t section)
{
    for (size_t i = 0; i < ZPS_WORKER_FLAG_COUNT; i++) {
        const zps_worker_flag_t *f = &zps_worker_flag_table[i];
        if (f->section != section)
            continue;
        out[n].name = f->name;
        out[n].has_arg = zps_worker_flag_has_value(f) ? required_argument : no_argument;
        out[n].flag = NULL;
        out[n].val = ZPS_WORKER_FLAG_FIRST + (int)f->id;
        n++;
    }
    return n;
}

/* Fills options[N_OPTIONS], the last entry all zeros. */
static void build_options(struct option *options)
{
    size_t n = add_section(options, 0, ZPS_WORKER_SECTION_CLUSTER);
    n = add_section(options, n, ZPS_WORKER_SECTION_TRAINING);
    memcpy(options + n, optimizer_options, sizeof(optimizer_options));
    n += N_OPTIMIZER;
    zps_straggler_flags_getopt(options + n);
    n += ZPS_STRAGGLER_FLAG_COUNT;
    n = add_section(options, n, ZPS_WORKER_SECTION_STEP);
    n = add_section(options, n, ZPS_WORKER_SECTION_REPORTING);
    memset(&options[n], 0, sizeof(options[n]));
}

/* The command line with the flags of ZPS_* variables before it (envflags.h);
 * static, so that its memory is the program's until exit. */
static zps_envflags_t env;

/* A bad command line: the reason, then the usage, on stderr; exit status 2. */
static int bad_usage(const char *why)
{
    if (why)
        fprintf(stderr, "zps-worker: %s\n", why);
    if (why && env.used[0])
        fprintf(stderr, "zps-worker: (flags from the environment: %s)\n", env.used);
    if (why)
        fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        zps_version_print("zps-worker");
        return 0;
    }
    zps_wire_tune_malloc();
    int rc = 2;
    zps_trainer_config_t cfg;
    zps_trainer_config_default(&cfg);
    char **servers = NULL;
    bool have_epochs = false, have_clocks = false;
    zps_opt_flags_t optf;
    zps_opt_flags_init(&optf);
    zps_straggler_flags_t stf;
    zps_straggler_flags_init(&stf);
    char why[1024];
    bool have_servers = false;
    struct option options[N_OPTIONS];
    build_options(options);
    int erc = zps_envflags_build(argc, argv, options, &env, why, sizeof(why));
    if (erc != 0)
        return bad_usage(erc == ZPS_ENOMEM ? "out of memory" : why);
    argc = env.argc;
    argv = env.argv;

    int c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        const char *a = optarg;
        /* The optimizer flags are zps-server's own (optimizer/opt_flags.c). */
        if (c >= ZPS_OPT_FLAG_FIRST && c < ZPS_OPT_FLAG_END) {
            if (zps_opt_flag_apply(&optf, c, a, why, sizeof(why)) != 0) {
                rc = bad_usage(why);
                goto out;
            }
            continue;
        }
        /* The step-time and straggler flags, shared with zps launch. */
        const zps_straggler_flag_t *sf = zps_straggler_flag_of_code(c);
        if (sf) {
            if (zps_straggler_flag_apply(&stf, sf, a, why, sizeof(why)) != 0) {
                rc = bad_usage(why);
                goto out;
            }
            continue;
        }
        if (c < ZPS_WORKER_FLAG_FIRST || c >= ZPS_WORKER_FLAG_FIRST + ZPS_WORKER_FLAG_COUNT) {
            /* getopt_long has named the bad flag already. */
            rc = bad_usage(NULL);
            goto out;
        }
        zps_worker_value_t v;
        if (zps_worker_flag_read(&zps_worker_flag_table[c - ZPS_WORKER_FLAG_FIRST], a, &v, why,
                                 sizeof(why)) != 0) {
            rc = bad_usage(why);
            goto out;
        }
        switch ((zps_worker_flag_id_t)(c - ZPS_WORKER_FLAG_FIRST)) {
        case ZPS_WORKER_FLAG_SERVERS:
            free(servers);
            servers = v.list;
            cfg.servers = (const char *const *)servers;
            cfg.server_count = v.count;
            have_servers = true;
            break;
        case ZPS_WORKER_FLAG_RANK:
            cfg.rank = (uint32_t)v.l;
            break;
        case ZPS_WORKER_FLAG_WORKERS:
            cfg.workers = (uint32_t)v.l;
            break;
        case ZPS_WORKER_FLAG_TIMEOUT:
            cfg.timeout_ms = (int)v.l;
            break;
        case ZPS_WORKER_FLAG_WAIT_LOG:
            cfg.wait_log_ms = (int)v.l;
            break;
        case ZPS_WORKER_FLAG_KEY:
            cfg.key_file = a;
            break;
        case ZPS_WORKER_FLAG_SERVER_KEY:
            cfg.server_key_file = a;
            break;
        case ZPS_WORKER_FLAG_INIT_ONLY:
            cfg.init_only = true;
            break;
        case ZPS_WORKER_FLAG_LOCAL:
            cfg.local = true;
            break;
        case ZPS_WORKER_FLAG_EVALUATOR:
            cfg.evaluator = true;
            break;
        case ZPS_WORKER_FLAG_NO_EVAL:
            cfg.evaluate = false;
            break;
        case ZPS_WORKER_FLAG_MODEL:
            cfg.model = a;
            break;
        case ZPS_WORKER_FLAG_DATA:
            cfg.data = a;
            break;
        case ZPS_WORKER_FLAG_DATA_DIR:
            cfg.data_dir = a;
            break;
        case ZPS_WORKER_FLAG_BATCH:
            cfg.batch = (uint32_t)v.l;
            break;
        case ZPS_WORKER_FLAG_EPOCHS:
            cfg.epochs = v.u;
            have_epochs = true;
            break;
        case ZPS_WORKER_FLAG_CLOCKS:
            cfg.clocks = v.u;
            have_clocks = true;
            break;
        case ZPS_WORKER_FLAG_SEED:
            cfg.seed = v.u;
            break;
        case ZPS_WORKER_FLAG_BACKEND:
            cfg.backend = a;
            break;
        case ZPS_WORKER_FLAG_DEVICE:
            cfg.device = (int)v.l;
            break;
        case ZPS_WORKER_FLAG_BLAS_THREADS:
            cfg.blas_threads = (int)v.l;
            break;
        case ZPS_WORKER_FLAG_NO_EXCHANGE:
            cfg.exchange = false;
            break;
        case ZPS_WORKER_FLAG_WIRE_BF16:
            cfg.wire_bf16 = true;
            break;
        case ZPS_WORKER_FLAG_NO_SHM:
            cfg.shm = false;
            break;
        case ZPS_WORKER_FLAG_DATA_ASSIGNMENT:
            cfg.shared = strcmp(a, "shared") == 0;
            break;
        case ZPS_WORKER_FLAG_NO_SEAL:
            cfg.no_seal = true;
            break;
        case ZPS_WORKER_FLAG_NO_FINAL_WAIT:
            cfg.final_wait = false;
            break;
        case ZPS_WORKER_FLAG_EVAL_EVERY:
            cfg.eval_every = v.u;
            break;
        case ZPS_WORKER_FLAG_METRICS:
            cfg.metrics_path = a;
            break;
        case ZPS_WORKER_FLAG_METRICS_LISTEN: {
            char bad[256];
            if (zps_metrics_http_check(a, bad, sizeof(bad)) != 0) {
                snprintf(why, sizeof(why), "--metrics-listen: %s", bad);
                rc = bad_usage(why);
                goto out;
            }
            cfg.metrics_listen = a;
            break;
        }
        case ZPS_WORKER_FLAG_SAVE_PARAMS:
            cfg.save_params = a;
            break;
        case ZPS_WORKER_FLAG_NO_PROGRESS:
            cfg.progress = false;
            break;
        case ZPS_WORKER_FLAG_PROGRESS_EVERY:
            cfg.progress_interval_s = v.d;
            break;
        case ZPS_WORKER_FLAG_LOG_LEVEL:
            zps_set_log_level(v.level);
            break;
        case ZPS_WORKER_FLAG_HELP:
            usage(stdout);
            rc = 0;
            goto out;
        case ZPS_WORKER_FLAG_COUNT:
            break;
        }
    }
    if (optind < argc) {
        snprintf(why, sizeof(why), "unexpected argument '%s'", argv[optind]);
        rc = bad_usage(why);
        goto out;
    }
    if (have_epochs && have_clocks) {
        rc = bad_usage("give --epochs or --clocks, not both");
        goto out;
    }
    if (cfg.shared && have_clocks) {
        rc = bad_usage(ZPS_WORKER_SHARED_CLOCKS_WHY);
        goto out;
    }
    if (cfg.shared && cfg.local) {
        rc = bad_usage("--data-assignment shared needs servers: --local simulates the fixed "
                       "assignment");
        goto out;
    }
    if (cfg.rank >= cfg.workers) {
        snprintf(why, sizeof(why), "--rank %u must be below --workers %u", cfg.rank, cfg.workers);
        rc = bad_usage(why);
        goto out;
    }
    if (cfg.local && (have_servers || cfg.init_only)) {
        rc = bad_usage("--local trains without servers: drop --servers and --init-only");
        goto out;
    }
    if (!cfg.local && !have_servers) {
        rc = bad_usage("--servers is required (or --local to train without servers)");
        goto out;
    }
    if (cfg.evaluator && (cfg.local || cfg.init_only || !cfg.evaluate)) {
        rc = bad_usage("--evaluator only observes and evaluates: drop --local, --init-only and "
                       "--no-eval");
        goto out;
    }
    if (!cfg.key_file != !cfg.server_key_file) {
        rc = bad_usage("--key and --server-key go together");
        goto out;
    }
    if (cfg.key_file) {
        /* A key file that cannot be used (a secret others may read) is a
         * usage error, found before anything starts. */
        zps_client_opts_t probe;
        zps_client_opts_default(&probe);
        int krc =
            zps_client_opts_set_keys(&probe, cfg.key_file, cfg.server_key_file, why, sizeof(why));
        zps_client_opts_clear(&probe);
        if (krc != 0) {
            rc = bad_usage(why);
            goto out;
        }
    }
    if (cfg.init_only && cfg.rank != 0) {
        rc = bad_usage("--init-only is for worker 0, which initialises the model");
        goto out;
    }
    if (cfg.local && zps_opt_flags_finish(&optf, why, sizeof(why)) != 0) {
        rc = bad_usage(why);
        goto out;
    }
    cfg.opt = optf.cfg;
    if (zps_straggler_flags_finish(&stf, cfg.seed, why, sizeof(why)) != 0) {
        rc = bad_usage(why);
        goto out;
    }
    cfg.straggler = stf.cfg;
    const zps_straggler_config_t *sc = &cfg.straggler;

    char tag[32];
    if (cfg.local)
        snprintf(tag, sizeof(tag), "local");
    else if (cfg.evaluator)
        snprintf(tag, sizeof(tag), "evaluator");
    else
        snprintf(tag, sizeof(tag), "worker %u", cfg.rank);
    zps_log_set_tag(tag);
    if (env.used[0])
        zps_info("flags from the environment: %s", env.used);
    if (!cfg.local && optf.any)
        zps_warn("optimizer flags are ignored without --local: the servers apply their own");
    char desc[256];
    uint32_t me = cfg.local ? 0 : cfg.rank;
    if (!cfg.evaluator && (sc->base_step_ms > 0 || zps_straggler_applies(sc, me)))
        zps_info("step time: %s", zps_straggler_describe(sc, me, desc, sizeof(desc)));

    zps_trainer_result_t res;
    if (zps_trainer_run(&cfg, &res) != 0) {
        rc = 1;
        goto out;
    }
    rc = 0;
    if (cfg.init_only)
        goto out;
    if (!cfg.evaluator)
        zps_info("%llu training examples in %.2f s without evaluations: %.0f examples/s (%s)",
                 (unsigned long long)res.examples, res.train_seconds,
                 res.train_seconds > 0 ? (double)res.examples / res.train_seconds : 0.0,
                 res.backend);
    if (!res.evaluated)
        goto out;
    if (isnan(res.final.accuracy))
        printf("final test loss %.6g after %llu clocks, %.1f s\n", res.final.loss,
               (unsigned long long)res.clocks, res.seconds);
    else
        printf("final test accuracy %.4f (loss %.4f) after %llu clocks, %.1f s\n",
               res.final.accuracy, res.final.loss, (unsigned long long)res.clocks, res.seconds);
out:
    free(servers);
    return rc;
}
