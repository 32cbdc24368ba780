/*
 * main.c - zps-server's command line: flags into a zps_server_config_t,
 * then zps_server_run. A bad flag prints the usage and exits 2.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "delay_comp.h"
#include "envflags.h"
#include "error.h"
#include "keys.h"
#include "log.h"
#include "metrics_http.h"
#include "opt_flags.h"
#include "parse.h"
#include "server.h"
#include "shard.h"
#include "version.h"
#include "wire.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zps-server --workers W [options]\n"
            "\n"
            "Serves one shard of a zps model over ZeroMQ.\n"
            "\n"
            "Cluster:\n"
            "  --listen ENDPOINT      ZeroMQ endpoint to bind (default tcp://127.0.0.1:7100;\n"
            "                         tcp://127.0.0.1:* picks a free port)\n"
            "  --shard I/S            this server holds shard I of S (default 0/1)\n"
            "  --workers W            number of training workers (required)\n"
            "  --endpoint-file FILE   write the bound endpoint to FILE once listening\n"
            "  --insecure             allow a non-loopback endpoint without encryption\n"
            "                         (on the command line: ZPS_INSECURE=1 alone is refused)\n"
            "\n"
            "Security (docs/security.md):\n"
            "  --key PREFIX.key       this server's CURVE secret key (zps keygen; mode 0600):\n"
            "                         every connection is then authenticated and encrypted\n"
            "  --authorized-keys FILE the keys that may connect, and their roles (worker\n"
            "                         RANKS, admin, reader); reloaded on SIGHUP\n"
            "                         Loopback needs neither; any other address needs both,\n"
            "                         or --insecure\n"
            "  --seal-port P          with --key on tcp://: the port of the sealed socket,\n"
            "                         where clients granted a session over CURVE send their\n"
            "                         AEAD-sealed messages (default 0: a free port)\n"
            "  --no-seal              grant no sealed sessions: every byte goes over CURVE\n"
            "  --no-shm               grant no shared-memory sessions to workers on this host:\n"
            "                         every byte goes over the socket\n"
            "\n"
            "Consistency:\n"
            "  --mode bsp|ssp|asp     synchronous, bounded-stale or asynchronous (default bsp)\n"
            "  --staleness S          SSP: a pull for clock t waits until every worker has\n"
            "                         pushed clock t-S-1 (default 0)\n"
            "  --backup-workers B     BSP: take each step once W-B pushes are in (default 0)\n"
            "  --max-pending-pulls K  waiting pulls allowed per worker (default 4)\n"
            "  --lr-staleness RULE    pushes applied on arrival (ssp, asp): none (default), or\n"
            "                         inverse: lr / (1 + update staleness) (Zhang et al. 2016)\n"
            "  --delay-compensation L pushes applied on arrival (ssp, asp): each gradient g\n"
            "                         becomes g + L*g*g*(w_now - w_pulled), DC-ASGD (Zheng et\n"
            "                         al. 2017), w_pulled the parameters last sent to its\n"
            "                         worker: a copy of the shard per worker (default 0: off)\n"
            "  --worker-timeout SEC   evict a worker silent for SEC seconds so the others go\n"
            "                         on; it rejoins at the current clock (default 0: never)\n"
            "  --background-step-bytes B\n"
            "                         take the optimizer steps of a shard of at least B bytes\n"
            "                         (BSP's, or each push applied under SSP and ASP), and\n"
            "                         the checks of the payloads as large it receives, on a\n"
            "                         helper thread, serving meanwhile what does not touch\n"
            "                         the model (default 16777216; 0: every step and check)\n"
            "  --step-delay-ms MS     fault injection: every step first waits MS ms, as a\n"
            "                         slow server would (default 0)\n"
            "  --check-delay-ms MS    fault injection: every check off the loop's thread\n"
            "                         first waits MS ms (default 0)\n"
            "\n"
            "Optimizer (applied on the server; formulas in docs/optimizers.md):\n"
            "%s"
            "\n"
            "Checkpoints (format in docs/checkpoint.md):\n"
            "  --checkpoint-dir DIR   where this shard's checkpoints go (created if missing,\n"
            "                         and checked with a probe file at start); one is also\n"
            "                         written on SIGTERM and on `zps checkpoint`\n"
            "  --checkpoint-every K   write one whenever the model version is a multiple of K\n"
            "  --checkpoint-keep K    keep the newest K of this shard (default 3)\n"
            "  --resume               start from the newest valid checkpoint in DIR (a corrupt\n"
            "                         newest file is reported and the one before it used)\n"
            "  --resume-from FILE     start from this checkpoint\n"
            "\n"
            "Limits (whoever the peer is; docs/protocol.md):\n"
            "  --max-connections N    connections open at once (default: three quarters of\n"
            "                         the descriptor limit, which is raised to its hard\n"
            "                         limit, and at most 4096)\n"
            "  --max-connections-per-host N\n"
            "                         connections open from one address (default: a quarter\n"
            "                         of --max-connections, at least 64; 0: no limit)\n"
            "  --max-message-bytes B  the largest message accepted until the model is\n"
            "                         initialised (default 4294967296); after, the shard's\n"
            "                         payload plus 64 KiB when that is smaller\n"
            "\n"
            "Monitoring (docs/operations.md):\n"
            "  --metrics-listen HOST:PORT\n"
            "                         serve Prometheus metrics at http://HOST:PORT/metrics\n"
            "                         (HOST numeric or localhost; port 0 picks one, logged\n"
            "                         and shown by zps stats as \"metrics\")\n"
            "\n"
            "Other:\n"
            "  --log-level LEVEL      debug, info, warn, error (default info)\n"
            "  --help                 this text\n"
            "\n"
            "Exit status: 0 stopped cleanly (on SIGTERM with --checkpoint-dir: its state\n"
            "saved); 1 could not start, or failed; 2 bad usage, or a --checkpoint-dir it\n"
            "cannot write; 3 stopped on SIGTERM without saving its state (the shutdown\n"
            "checkpoint failed, retries included; the reason is logged).\n",
            zps_opt_flags_usage);
}

enum {
    OPT_LISTEN = 256,
    OPT_SHARD,
    OPT_WORKERS,
    OPT_ENDPOINT_FILE,
    OPT_INSECURE,
    OPT_KEY,
    OPT_AUTHORIZED_KEYS,
    OPT_SEAL_PORT,
    OPT_NO_SEAL,
    OPT_NO_SHM,
    OPT_MODE,
    OPT_STALENESS,
    OPT_BACKUP,
    OPT_MAX_PENDING,
    OPT_LR_STALENESS,
    OPT_DELAY_COMP,
    OPT_WORKER_TIMEOUT,
    OPT_BACKGROUND_STEP,
    OPT_STEP_DELAY,
    OPT_CHECK_DELAY,
    OPT_CKPT_DIR,
    OPT_CKPT_EVERY,
    OPT_CKPT_KEEP,
    OPT_RESUME,
    OPT_RESUME_FROM,
    OPT_LOG_LEVEL,
    OPT_MAX_CONNS,
    OPT_MAX_CONNS_HOST,
    OPT_MAX_MESSAGE,
    OPT_METRICS_LISTEN,
    OPT_HELP,
};

static const struct option options[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"shard", required_argument, NULL, OPT_SHARD},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"endpoint-file", required_argument, NULL, OPT_ENDPOINT_FILE},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"key", required_argument, NULL, OPT_KEY},
    {"authorized-keys", required_argument, NULL, OPT_AUTHORIZED_KEYS},
    {"seal-port", required_argument, NULL, OPT_SEAL_PORT},
    {"no-seal", no_argument, NULL, OPT_NO_SEAL},
    {"no-shm", no_argument, NULL, OPT_NO_SHM},
    {"mode", required_argument, NULL, OPT_MODE},
    {"staleness", required_argument, NULL, OPT_STALENESS},
    {"backup-workers", required_argument, NULL, OPT_BACKUP},
    {"max-pending-pulls", required_argument, NULL, OPT_MAX_PENDING},
    {"lr-staleness", required_argument, NULL, OPT_LR_STALENESS},
    {"delay-compensation", required_argument, NULL, OPT_DELAY_COMP},
    {"worker-timeout", required_argument, NULL, OPT_WORKER_TIMEOUT},
    {"background-step-bytes", required_argument, NULL, OPT_BACKGROUND_STEP},
    {"step-delay-ms", required_argument, NULL, OPT_STEP_DELAY},
    {"check-delay-ms", required_argument, NULL, OPT_CHECK_DELAY},
    ZPS_OPT_FLAG_OPTIONS,
    {"checkpoint-dir", required_argument, NULL, OPT_CKPT_DIR},
    {"checkpoint-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"checkpoint-keep", required_argument, NULL, OPT_CKPT_KEEP},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"resume-from", required_argument, NULL, OPT_RESUME_FROM},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNS},
    {"max-connections-per-host", required_argument, NULL, OPT_MAX_CONNS_HOST},
    {"max-message-bytes", required_argument, NULL, OPT_MAX_MESSAGE},
    {"metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* The command line with the flags of ZPS_* variables before it (envflags.h);
 * static, so that its memory is the program's until exit. */
static zps_envflags_t env;

static int bad_flag(const char *flag, const char *value, const char *expect)
{
    fprintf(stderr, "zps-server: invalid %s '%s': expected %s\n", flag, value ? value : "", expect);
    if (env.used[0])
        fprintf(stderr, "zps-server: (flags from the environment: %s)\n", env.used);
    fprintf(stderr, "Try 'zps-server --help'.\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        zps_version_print("zps-server");
        return 0;
    }
    zps_wire_tune_malloc();
    zps_server_config_t cfg;
    zps_server_config_default(&cfg);
    bool have_workers = false;
    zps_opt_flags_t optf;
    zps_opt_flags_init(&optf);
    long l;
    uint64_t u;
    double d;
    const char *key_file = NULL;

    char env_why[256];
    int erc = zps_envflags_build(argc, argv, options, &env, env_why, sizeof(env_why));
    if (erc != 0) {
        fprintf(stderr, "zps-server: %s\n", erc == ZPS_ENOMEM ? "out of memory" : env_why);
        return 2;
    }
    /* env.argv is argv[0], the flags from the environment, then the command
     * line: an option at index i <= env_flags came from a variable. */
    const int env_flags = env.argc - argc;
    bool insecure_from_env = false;
    argc = env.argc;
    argv = env.argv;

    int c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        const char *a = optarg;
        switch (c) {
        case OPT_LISTEN:
            cfg.listen = a;
            break;
        case OPT_SHARD:
            if (zps_shard_parse(a, &cfg.shard_index, &cfg.shard_count))
                return bad_flag("--shard", a, "I/S with 0 <= I < S");
            break;
        case OPT_WORKERS:
            if (zps_parse_long(a, 1, 65536, &l))
                return bad_flag("--workers", a, "an integer in [1, 65536]");
            cfg.consistency.workers = (uint32_t)l;
            have_workers = true;
            break;
        case OPT_ENDPOINT_FILE:
            cfg.endpoint_file = a;
            break;
        case OPT_INSECURE:
            /* ZPS_INSECURE alone does not open the network: an environment
             * is inherited, and set far from the command it affects. */
            if (optind - 1 <= env_flags)
                insecure_from_env = true;
            else
                cfg.insecure = true;
            break;
        case OPT_KEY:
            key_file = a;
            break;
        case OPT_AUTHORIZED_KEYS:
            cfg.authorized_keys = a;
            break;
        case OPT_SEAL_PORT:
            if (zps_parse_long(a, 0, 65535, &l))
                return bad_flag("--seal-port", a, "a port number in [0, 65535]");
            cfg.seal_port = (uint16_t)l;
            break;
        case OPT_NO_SEAL:
            cfg.no_seal = true;
            break;
        case OPT_NO_SHM:
            cfg.no_shm = true;
            break;
        case OPT_MODE:
            if (zps_mode_parse(a, &cfg.consistency.mode))
                return bad_flag("--mode", a, "bsp, ssp or asp");
            break;
        case OPT_STALENESS:
            if (zps_parse_long(a, 0, 1000000, &l))
                return bad_flag("--staleness", a, "an integer in [0, 1000000]");
            cfg.consistency.ssp_bound = (uint32_t)l;
            break;
        case OPT_BACKUP:
            if (zps_parse_long(a, 0, 65535, &l))
                return bad_flag("--backup-workers", a, "an integer in [0, 65535]");
            cfg.consistency.backup = (uint32_t)l;
            break;
        case OPT_MAX_PENDING:
            if (zps_parse_long(a, 1, 1024, &l))
                return bad_flag("--max-pending-pulls", a, "an integer in [1, 1024]");
            cfg.consistency.max_pending = (uint32_t)l;
            break;
        case OPT_LR_STALENESS:
            if (strcmp(a, "none") == 0)
                cfg.consistency.lr_scaling = ZPS_LR_SCALING_NONE;
            else if (strcmp(a, "inverse") == 0)
                cfg.consistency.lr_scaling = ZPS_LR_SCALING_INVERSE;
            else
                return bad_flag("--lr-staleness", a, "none or inverse");
            break;
        case OPT_DELAY_COMP:
            if (zps_parse_double(a, &d) || !(d >= 0 && d <= ZPS_DELAY_COMP_MAX))
                return bad_flag("--delay-compensation", a, "a number in [0, 1e6]");
            cfg.delay_comp = d;
            break;
        case OPT_WORKER_TIMEOUT:
            if (zps_parse_double(a, &d) || d < 0 || d > 86400)
                return bad_flag("--worker-timeout", a, "seconds in [0, 86400]");
            cfg.worker_timeout_ms = (uint64_t)(d * 1000.0 + 0.5);
            if (d > 0 && cfg.worker_timeout_ms == 0)
                cfg.worker_timeout_ms = 1;
            break;
        case OPT_BACKGROUND_STEP:
            if (zps_parse_u64(a, &u))
                return bad_flag("--background-step-bytes", a, "a number of bytes");
            cfg.background_step_bytes = u;
            break;
        case OPT_STEP_DELAY:
            if (zps_parse_long(a, 0, 3600000, &l))
                return bad_flag("--step-delay-ms", a, "milliseconds in [0, 3600000]");
            cfg.step_delay_ms = (uint32_t)l;
            break;
        case OPT_CHECK_DELAY:
            if (zps_parse_long(a, 0, 3600000, &l))
                return bad_flag("--check-delay-ms", a, "milliseconds in [0, 3600000]");
            cfg.check_delay_ms = (uint32_t)l;
            break;
        case OPT_CKPT_DIR:
            cfg.checkpoint_dir = a;
            break;
        case OPT_CKPT_EVERY:
            if (zps_parse_u64(a, &u) || u == 0)
                return bad_flag("--checkpoint-every", a, "a positive integer");
            cfg.checkpoint_every = u;
            break;
        case OPT_CKPT_KEEP:
            if (zps_parse_long(a, 1, 1000000, &l))
                return bad_flag("--checkpoint-keep", a, "an integer in [1, 1000000]");
            cfg.checkpoint_keep = (unsigned)l;
            break;
        case OPT_RESUME:
            cfg.resume = true;
            break;
        case OPT_RESUME_FROM:
            cfg.resume_from = a;
            break;
        case OPT_LOG_LEVEL: {
            enum zps_log_level lv;
            if (zps_log_parse_level(a, &lv))
                return bad_flag("--log-level", a, "debug, info, warn or error");
            zps_set_log_level(lv);
            break;
        }
        case OPT_MAX_CONNS:
            if (zps_parse_long(a, 1, 1000000, &l))
                return bad_flag("--max-connections", a, "an integer in [1, 1000000]");
            cfg.max_connections = (uint32_t)l;
            break;
        case OPT_MAX_CONNS_HOST:
            if (zps_parse_long(a, 0, 1000000, &l))
                return bad_flag("--max-connections-per-host", a, "an integer in [0, 1000000]");
            cfg.max_connections_per_host = l;
            break;
        case OPT_MAX_MESSAGE:
            if (zps_parse_u64(a, &u) || u < 4096 || u > (1ull << 40))
                return bad_flag("--max-message-bytes", a, "bytes in [4096, 2^40]");
            cfg.max_message_bytes = u;
            break;
        case OPT_METRICS_LISTEN: {
            char why[256];
            if (zps_metrics_http_check(a, why, sizeof(why)) != 0) {
                fprintf(stderr, "zps-server: --metrics-listen: %s\nTry 'zps-server --help'.\n",
                        why);
                return 2;
            }
            cfg.metrics_listen = a;
            break;
        }
        case OPT_HELP:
            usage(stdout);
            return 0;
        default:
            if (c >= ZPS_OPT_FLAG_FIRST && c < ZPS_OPT_FLAG_END) {
                char why[256];
                if (zps_opt_flag_apply(&optf, c, a, why, sizeof(why)) != 0) {
                    fprintf(stderr, "zps-server: %s\nTry 'zps-server --help'.\n", why);
                    return 2;
                }
                break;
            }
            fprintf(stderr, "Try 'zps-server --help'.\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "zps-server: unexpected argument '%s'\nTry 'zps-server --help'.\n",
                argv[optind]);
        return 2;
    }
    if (!have_workers) {
        fprintf(stderr, "zps-server: --workers is required\nTry 'zps-server --help'.\n");
        return 2;
    }
    char why[256];
    if (zps_opt_flags_finish(&optf, why, sizeof(why)) != 0) {
        fprintf(stderr, "zps-server: %s\nTry 'zps-server --help'.\n", why);
        return 2;
    }
    cfg.opt = optf.cfg;
    if (zps_consistency_check_config(&cfg.consistency, why, sizeof(why)) != 0) {
        fprintf(stderr, "zps-server: %s\n", why);
        return 2;
    }
    if (cfg.consistency.lr_scaling != ZPS_LR_SCALING_NONE && cfg.consistency.mode == ZPS_MODE_BSP) {
        fprintf(stderr, "zps-server: --lr-staleness applies to pushes applied on arrival "
                        "(--mode ssp or asp); BSP steps are never stale\n");
        return 2;
    }
    if (cfg.delay_comp > 0 && cfg.consistency.mode == ZPS_MODE_BSP) {
        fprintf(stderr, "zps-server: --delay-compensation applies to pushes applied on arrival "
                        "(--mode ssp or asp); a BSP step's gradients are never stale\n");
        return 2;
    }
    if (cfg.consistency.ssp_bound > 0 && cfg.consistency.mode != ZPS_MODE_SSP) {
        fprintf(stderr, "zps-server: --staleness applies to --mode ssp only\n");
        return 2;
    }
    if (cfg.consistency.mode == ZPS_MODE_SSP && cfg.consistency.ssp_bound == 0) {
        /* As zps launch: SSP(0) would be BSP without its barrier step. */
        fprintf(stderr, "zps-server: --mode ssp needs --staleness S (S >= 1); for S = 0 use "
                        "--mode bsp\n");
        return 2;
    }
    if ((cfg.checkpoint_every || cfg.resume) && !cfg.checkpoint_dir) {
        fprintf(stderr, "zps-server: --checkpoint-every and --resume need --checkpoint-dir\n");
        return 2;
    }
    if (cfg.resume && cfg.resume_from) {
        fprintf(stderr, "zps-server: give --resume or --resume-from, not both\n");
        return 2;
    }
    /* A directory that cannot take a checkpoint is found now, before the
     * shard listens and has state to lose. */
    char dir_why[1024];
    if (cfg.checkpoint_dir &&
        zps_ckpt_dir_prepare(cfg.checkpoint_dir, dir_why, sizeof(dir_why)) != 0) {
        fprintf(stderr, "zps-server: --checkpoint-dir %s cannot take checkpoints: %s\n",
                cfg.checkpoint_dir, dir_why);
        return 2;
    }
    if (!key_file != !cfg.authorized_keys) {
        fprintf(stderr, "zps-server: --key and --authorized-keys go together\n"
                        "Try 'zps-server --help'.\n");
        return 2;
    }
    if (!key_file && !cfg.insecure && insecure_from_env && !zps_endpoint_is_local(cfg.listen)) {
        fprintf(stderr,
                "zps-server: refusing to listen on %s without encryption: ZPS_INSECURE in the\n"
                "environment is not enough to accept unauthenticated peers from the network.\n"
                "Pass --insecure on the command line to do it anyway, or give --key and\n"
                "--authorized-keys (docs/security.md).\n",
                cfg.listen);
        return 2;
    }
    if (!key_file && !cfg.insecure && !zps_endpoint_is_local(cfg.listen)) {
        fprintf(stderr,
                "zps-server: refusing to listen on %s without encryption; it would accept\n"
                "unauthenticated peers from the network. Give --key and --authorized-keys\n"
                "(docs/security.md), or pass --insecure to do it anyway.\n",
                cfg.listen);
        return 2;
    }
    /* Keys are checked now, before the shard listens: a secret key others
     * can read, or a list with a mistake, is a usage error. */
    zps_keypair_t kp;
    char key_why[1024];
    if (key_file) {
        if (zps_keypair_load(key_file, &kp, key_why, sizeof(key_why)) != 0) {
            fprintf(stderr, "zps-server: --key: %s\n", key_why);
            return 2;
        }
        zps_authkeys_t *list;
        if (zps_authkeys_load(cfg.authorized_keys, cfg.consistency.workers, &list, key_why,
                              sizeof(key_why)) != 0) {
            zps_keypair_clear(&kp);
            fprintf(stderr, "zps-server: --authorized-keys: %s\n", key_why);
            return 2;
        }
        zps_authkeys_free(list);
        cfg.curve_key = &kp;
    }
    bool unsaved = false;
    if (env.used[0])
        zps_info("flags from the environment: %s", env.used);
    int rc = zps_server_run(&cfg, &unsaved);
    if (key_file)
        zps_keypair_clear(&kp);
    if (rc == 0)
        return 0;
    return unsaved ? 3 : 1;
}
