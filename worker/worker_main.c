/*
 * worker_main.c - zps-worker's command line: flags into a
 * zps_trainer_config_t, then zps_trainer_run. A bad flag prints the usage
 * and exits 2; a failed run exits 1.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "opt_flags.h"
#include "parse.h"
#include "trainer.h"

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
            "  --init-only            rank 0: initialise the servers' model, then exit\n"
            "  --local                no servers: simulate W workers' data order in one\n"
            "                         process and apply the optimizer here\n"
            "  --evaluator            train nothing: observe the servers' model of every\n"
            "                         --eval-every clocks and of the last, evaluate it and\n"
            "                         save it (--save-params); no worker waits for it\n"
            "  --no-eval              worker 0: do not evaluate (an evaluator does)\n"
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
            "Step time and stragglers (docs/launch.md; every delay is in the metrics):\n"
            "  --base-step-ms MS      pad each step's compute (data, forward, backward) to MS\n"
            "                         milliseconds by sleeping (default 0: no padding)\n"
            "  --slowdown K           every step's work takes K times as long (K >= 1)\n"
            "  --delay MS             a fixed extra delay of MS milliseconds per step\n"
            "  --random-delay D:MEAN  a random delay per step: exp:MEAN (exponential) or\n"
            "                         uniform:MEAN (uniform on [0, 2*MEAN)), milliseconds\n"
            "  --intermittent K:P     each step's work takes K times as long with\n"
            "                         probability P\n"
            "  --pause-at T:MS        pause MS milliseconds once, in the step of clock T\n"
            "  --straggler-ranks SET  ranks the straggler flags apply to: all (default), or\n"
            "                         a list such as 3 or 0,2-3 (the padding applies to all)\n"
            "  --straggler-seed S     seed of the random delays (default: --seed)\n"
            "  --no-final-wait        worker 0 under SSP/ASP: evaluate at once after its last\n"
            "                         clock instead of waiting for the others' last pushes\n"
            "\n"
            "Reporting:\n"
            "  --eval-every K         worker 0 (or the evaluator) evaluates the test set\n"
            "                         every K clocks\n"
            "                         (default 0: only at the end)\n"
            "  --metrics FILE         write JSON lines (run, step, eval records) to FILE\n"
            "  --save-params FILE     the evaluating process (worker 0, the evaluator or\n"
            "                         --local): write the final parameters to\n"
            "                         FILE as raw little-endian float32\n"
            "  --no-progress          no progress line on stderr\n"
            "  --progress-every S     seconds between progress lines when stderr is not a\n"
            "                         terminal (default 10)\n"
            "  --log-level LEVEL      debug, info, warn, error (default info)\n"
            "  --help                 this text\n",
            zps_opt_flags_usage);
}

enum {
    OPT_SERVERS = 256,
    OPT_RANK,
    OPT_WORKERS,
    OPT_TIMEOUT,
    OPT_WAIT_LOG,
    OPT_INIT_ONLY,
    OPT_LOCAL,
    OPT_EVALUATOR,
    OPT_NO_EVAL,
    OPT_MODEL,
    OPT_DATA,
    OPT_DATA_DIR,
    OPT_BATCH,
    OPT_EPOCHS,
    OPT_CLOCKS,
    OPT_SEED,
    OPT_BACKEND,
    OPT_DEVICE,
    OPT_BLAS_THREADS,
    OPT_BASE_STEP,
    OPT_SLOWDOWN,
    OPT_DELAY,
    OPT_RANDOM_DELAY,
    OPT_INTERMITTENT,
    OPT_PAUSE_AT,
    OPT_STRAGGLER_RANKS,
    OPT_STRAGGLER_SEED,
    OPT_NO_FINAL_WAIT,
    OPT_EVAL_EVERY,
    OPT_METRICS,
    OPT_SAVE_PARAMS,
    OPT_NO_PROGRESS,
    OPT_PROGRESS_EVERY,
    OPT_LOG_LEVEL,
    OPT_HELP,
};

static const struct option options[] = {
    {"servers", required_argument, NULL, OPT_SERVERS},
    {"rank", required_argument, NULL, OPT_RANK},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"wait-log-ms", required_argument, NULL, OPT_WAIT_LOG},
    {"init-only", no_argument, NULL, OPT_INIT_ONLY},
    {"local", no_argument, NULL, OPT_LOCAL},
    {"evaluator", no_argument, NULL, OPT_EVALUATOR},
    {"no-eval", no_argument, NULL, OPT_NO_EVAL},
    {"model", required_argument, NULL, OPT_MODEL},
    {"data", required_argument, NULL, OPT_DATA},
    {"data-dir", required_argument, NULL, OPT_DATA_DIR},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"clocks", required_argument, NULL, OPT_CLOCKS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"blas-threads", required_argument, NULL, OPT_BLAS_THREADS},
    ZPS_OPT_FLAG_OPTIONS,
    {"base-step-ms", required_argument, NULL, OPT_BASE_STEP},
    {"slowdown", required_argument, NULL, OPT_SLOWDOWN},
    {"delay", required_argument, NULL, OPT_DELAY},
    {"random-delay", required_argument, NULL, OPT_RANDOM_DELAY},
    {"intermittent", required_argument, NULL, OPT_INTERMITTENT},
    {"pause-at", required_argument, NULL, OPT_PAUSE_AT},
    {"straggler-ranks", required_argument, NULL, OPT_STRAGGLER_RANKS},
    {"straggler-seed", required_argument, NULL, OPT_STRAGGLER_SEED},
    {"no-final-wait", no_argument, NULL, OPT_NO_FINAL_WAIT},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"save-params", required_argument, NULL, OPT_SAVE_PARAMS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"progress-every", required_argument, NULL, OPT_PROGRESS_EVERY},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* A bad command line: the reason, then the usage, on stderr; exit status 2. */
static int bad_usage(const char *why)
{
    if (why)
        fprintf(stderr, "zps-worker: %s\n\n", why);
    usage(stderr);
    return 2;
}

static int bad_flag(const char *flag, const char *value, const char *expect)
{
    char why[512];
    snprintf(why, sizeof(why), "invalid %s '%s': expected %s", flag, value ? value : "", expect);
    return bad_usage(why);
}

/* Leaves the option loop through `out`, so the server list is freed. */
#define BAD_FLAG(flag, value, expect)                                                              \
    do {                                                                                           \
        rc = bad_flag(flag, value, expect);                                                        \
        goto out;                                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    int rc = 2;
    zps_trainer_config_t cfg;
    zps_trainer_config_default(&cfg);
    char **servers = NULL;
    bool have_epochs = false, have_clocks = false;
    zps_opt_flags_t optf;
    zps_opt_flags_init(&optf);
    char why[256];
    bool have_servers = false, have_straggler_seed = false;
    zps_straggler_config_t *sc = &cfg.straggler;
    long l;
    uint64_t u;
    double d;

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
        switch (c) {
        case OPT_SERVERS:
            free(servers);
            servers = NULL;
            if (zps_parse_list(a, &servers, &cfg.server_count))
                BAD_FLAG("--servers", a, "comma-separated endpoints");
            cfg.servers = (const char *const *)servers;
            have_servers = true;
            break;
        case OPT_RANK:
            if (zps_parse_long(a, 0, 65535, &l))
                BAD_FLAG("--rank", a, "an integer in [0, 65535]");
            cfg.rank = (uint32_t)l;
            break;
        case OPT_WORKERS:
            if (zps_parse_long(a, 1, 65536, &l))
                BAD_FLAG("--workers", a, "an integer in [1, 65536]");
            cfg.workers = (uint32_t)l;
            break;
        case OPT_TIMEOUT:
            if (zps_parse_long(a, -1, 86400000, &l) || l == 0)
                BAD_FLAG("--timeout", a, "milliseconds >= 1, or -1 to wait forever");
            cfg.timeout_ms = (int)l;
            break;
        case OPT_WAIT_LOG:
            if (zps_parse_long(a, 0, 86400000, &l))
                BAD_FLAG("--wait-log-ms", a, "milliseconds >= 0 (0: never)");
            cfg.wait_log_ms = (int)l;
            break;
        case OPT_INIT_ONLY:
            cfg.init_only = true;
            break;
        case OPT_LOCAL:
            cfg.local = true;
            break;
        case OPT_EVALUATOR:
            cfg.evaluator = true;
            break;
        case OPT_NO_EVAL:
            cfg.evaluate = false;
            break;
        case OPT_MODEL:
            cfg.model = a;
            break;
        case OPT_DATA:
            cfg.data = a;
            break;
        case OPT_DATA_DIR:
            cfg.data_dir = a;
            break;
        case OPT_BATCH:
            if (zps_parse_long(a, 1, 1 << 20, &l))
                BAD_FLAG("--batch", a, "an integer in [1, 1048576]");
            cfg.batch = (uint32_t)l;
            break;
        case OPT_EPOCHS:
            if (zps_parse_u64(a, &u) || u == 0 || u > 1000000)
                BAD_FLAG("--epochs", a, "an integer in [1, 1000000]");
            cfg.epochs = u;
            have_epochs = true;
            break;
        case OPT_CLOCKS:
            if (zps_parse_u64(a, &u) || u == 0)
                BAD_FLAG("--clocks", a, "a positive integer");
            cfg.clocks = u;
            have_clocks = true;
            break;
        case OPT_SEED:
            if (zps_parse_u64(a, &u))
                BAD_FLAG("--seed", a, "a non-negative integer");
            cfg.seed = u;
            break;
        case OPT_BACKEND:
            if (strcmp(a, "cpu") != 0 && strcmp(a, "cuda") != 0 && strcmp(a, "auto") != 0)
                BAD_FLAG("--backend", a, "cpu, cuda or auto");
            cfg.backend = a;
            break;
        case OPT_DEVICE:
            if (zps_parse_long(a, 0, 1024, &l))
                BAD_FLAG("--device", a, "a device index");
            cfg.device = (int)l;
            break;
        case OPT_BLAS_THREADS:
            if (zps_parse_long(a, 1, 1024, &l))
                BAD_FLAG("--blas-threads", a, "an integer in [1, 1024]");
            cfg.blas_threads = (int)l;
            break;
        case OPT_BASE_STEP:
            if (zps_parse_double(a, &sc->base_step_ms))
                BAD_FLAG("--base-step-ms", a, "milliseconds");
            break;
        case OPT_SLOWDOWN:
            if (zps_parse_double(a, &sc->slowdown))
                BAD_FLAG("--slowdown", a, "a factor K >= 1");
            break;
        case OPT_DELAY:
            if (zps_parse_double(a, &sc->fixed_ms))
                BAD_FLAG("--delay", a, "milliseconds");
            break;
        case OPT_RANDOM_DELAY:
            if (zps_straggler_parse_random(a, &sc->dist, &sc->mean_ms))
                BAD_FLAG("--random-delay", a, "exp:MEAN or uniform:MEAN (milliseconds)");
            break;
        case OPT_INTERMITTENT:
            if (zps_straggler_parse_intermittent(a, &sc->intermittent_k, &sc->intermittent_p))
                BAD_FLAG("--intermittent", a, "K:P, a factor and a probability, e.g. 4:0.1");
            break;
        case OPT_PAUSE_AT:
            if (zps_straggler_parse_pause(a, &sc->pause_clock, &sc->pause_ms))
                BAD_FLAG("--pause-at", a, "T:MS, a clock and milliseconds, e.g. 100:2000");
            sc->pause = true;
            break;
        case OPT_STRAGGLER_RANKS:
            if (zps_straggler_parse_ranks(a, &sc->ranks))
                BAD_FLAG("--straggler-ranks", a, "all, or ranks and ranges such as 0,2-3");
            break;
        case OPT_STRAGGLER_SEED:
            if (zps_parse_u64(a, &sc->seed))
                BAD_FLAG("--straggler-seed", a, "a non-negative integer");
            have_straggler_seed = true;
            break;
        case OPT_NO_FINAL_WAIT:
            cfg.final_wait = false;
            break;
        case OPT_EVAL_EVERY:
            if (zps_parse_u64(a, &u))
                BAD_FLAG("--eval-every", a, "a non-negative integer");
            cfg.eval_every = u;
            break;
        case OPT_METRICS:
            cfg.metrics_path = a;
            break;
        case OPT_SAVE_PARAMS:
            cfg.save_params = a;
            break;
        case OPT_NO_PROGRESS:
            cfg.progress = false;
            break;
        case OPT_PROGRESS_EVERY:
            if (zps_parse_double(a, &d) || !(d > 0))
                BAD_FLAG("--progress-every", a, "seconds > 0");
            cfg.progress_interval_s = d;
            break;
        case OPT_LOG_LEVEL: {
            enum zps_log_level lv;
            if (zps_log_parse_level(a, &lv))
                BAD_FLAG("--log-level", a, "debug, info, warn or error");
            zps_log_set_level(lv);
            break;
        }
        case OPT_HELP:
            usage(stdout);
            rc = 0;
            goto out;
        default:
            /* getopt_long has named the bad flag already. */
            rc = bad_usage(NULL);
            goto out;
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
    if (cfg.init_only && cfg.rank != 0) {
        rc = bad_usage("--init-only is for worker 0, which initialises the model");
        goto out;
    }
    if (cfg.local && zps_opt_flags_finish(&optf, why, sizeof(why)) != 0) {
        rc = bad_usage(why);
        goto out;
    }
    cfg.opt = optf.cfg;
    if (!have_straggler_seed)
        sc->seed = cfg.seed;
    if (zps_straggler_check(sc, why, sizeof(why)) != 0) {
        rc = bad_usage(why);
        goto out;
    }

    char tag[32];
    if (cfg.local)
        snprintf(tag, sizeof(tag), "local");
    else if (cfg.evaluator)
        snprintf(tag, sizeof(tag), "evaluator");
    else
        snprintf(tag, sizeof(tag), "worker %u", cfg.rank);
    zps_log_set_tag(tag);
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
