/*
 * zps.c - the operator's tool: talk to zps servers by hand, like redis-cli.
 *
 *   zps init  --servers E1[,E2...] (--values V1[,V2...] | --file F)
 *   zps push  --servers ... --worker R --clock T --batch N --values G1[,G2...]
 *   zps pull  --servers ... [--worker R] [--clock T] [--timeout-ms MS] [--verbose]
 *   zps stats --servers ...
 *   zps top --servers ... [--interval SEC] [--once] [--run DIR]
 *   zps checkpoint --servers ...
 *   zps reload-keys --servers ... --key ADMIN.key --server-key SERVER.pub
 *   zps checkpoint inspect FILE
 *   zps keygen PREFIX [--force]
 *
 * Every command that talks to servers takes --key PREFIX.key --server-key
 * SERVER.pub for servers started with --key (docs/security.md).
 *
 * Exit status: 0 success, 1 a server refused (its reason on stderr), the
 * model is not initialised yet, a connection was refused or a server did
 * not answer within the deadline, 2 bad usage, 3 a pull that timed out: its
 * servers were connected but held it back (the clock is not reached yet).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_inspect.h"
#include "zps/zps.h"
#include "error.h"
#include "keygen.h"
#include "launch.h"
#include "log.h"
#include "parse.h"
#include "plot.h"
#include "top.h"
#include "version.h"

#define EXIT_REFUSED 1
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3
#define DEFAULT_TIMEOUT_MS 10000

static const char *command = ""; /* "stats": names the command in error messages */

static void usage(FILE *f)
{
    fprintf(f, "usage: zps COMMAND --servers E1[,E2...] [options]\n"
               "       zps keygen PREFIX | zps checkpoint inspect FILE | zps launch [options]\n"
               "\n"
               "Commands:\n"
               "  init    set the initial model: --values V1,V2,... or --file F (raw\n"
               "          little-endian float32)\n"
               "  push    push a gradient: --worker R --clock T --batch N --values G1,G2,...\n"
               "  pull    print the parameters for a clock, one per line, each the shortest\n"
               "          decimal that reads back as the same float32: [--worker R] [--clock T]\n"
               "          (without --worker: an observer's view, answered at once)\n"
               "  stats   print each server's statistics as one JSON line\n"
               "  top     a live view of the cluster from its STATS: versions, step rates,\n"
               "          workers' clocks and lag, and whom a barrier waits for:\n"
               "          [--interval SEC] [--once] [--run DIR]: zps top --help\n"
               "  plot    one figure of several run folders: zps plot RUN_DIR... [-o F.png]\n"
               "  checkpoint\n"
               "          have every server write a checkpoint now (needs --checkpoint-dir on\n"
               "          the servers); prints each one's version and file\n"
               "  checkpoint inspect FILE\n"
               "          print a checkpoint's header and verify every section's checksum\n"
               "          (exit 0 valid, 1 invalid, 2 unreadable)\n"
               "  reload-keys\n"
               "          have every server read its --authorized-keys file again, as SIGHUP\n"
               "          does (an admin key's request); prints each one's key count\n"
               "  launch  start a whole local cluster (servers and workers) and train; it has\n"
               "          its own flags: zps launch --help\n"
               "  keygen PREFIX [--force]\n"
               "          write a new CURVE key pair: PREFIX.key (secret, mode 0600) and\n"
               "          PREFIX.pub (public): zps keygen --help, docs/security.md\n"
               "\n"
               "Options:\n"
               "  --servers LIST     server endpoints in shard order, comma-separated\n"
               "  --timeout-ms MS    give up after MS milliseconds (default 10000; -1: never)\n"
               "  --retry-ms MS      resend an unanswered request after MS ms (default 1000)\n"
               "  --key PREFIX.key   this client's CURVE secret key (servers with --key)\n"
               "  --server-key SERVER.pub\n"
               "                     the servers' public key (with --key)\n"
               "  --no-seal          with --key: every byte over CURVE, no sealed session\n"
               "  --verbose          pull: print model versions and min_clock on stderr\n"
               "  --help             this text (zps COMMAND --help: that command's flags)\n"
               "  --version          print the version and exit\n"
               "\n"
               "Exit status: 0 success; 1 a server refused (its reason on stderr: with keys,\n"
               "\"authentication failed for ENDPOINT\" or the role the key lacks), the model\n"
               "is not initialised yet (said at once), a connection was refused (\"ENDPOINT:\n"
               "connection refused\", within about a second), or a server did not answer\n"
               "within the deadline; 2 bad usage (an endpoint not tcp://HOST:PORT or\n"
               "ipc://PATH included); 3 a pull that timed out: the servers are there but hold\n"
               "it back because its clock is not reached yet.\n");
}

/* The flags every command that talks to servers shares, for its --help. */
static const char common_flags[] =
    "  --servers LIST     server endpoints in shard order, comma-separated, each\n"
    "                     tcp://HOST:PORT or ipc://PATH\n"
    "  --timeout-ms MS    give up after MS milliseconds (default 10000; -1: never)\n"
    "  --retry-ms MS      resend an unanswered request after MS ms (default 1000)\n"
    "  --key PREFIX.key   this client's CURVE secret key (servers with --key)\n"
    "  --server-key SERVER.pub\n"
    "                     the servers' public key (with --key)\n"
    "  --no-seal          with --key: every byte over CURVE, no sealed session\n"
    "  --help             this text\n";

/* `zps COMMAND --help`: the command's own flags. */
static void command_usage(FILE *f)
{
    static const struct {
        const char *name, *text;
    } help[] = {
        {"init", "usage: zps init --servers LIST (--values V1,V2,... | --file F) [options]\n"
                 "\n"
                 "Sets the initial model on every shard, split by the range rule.\n"
                 "\n"
                 "  --values LIST      the parameters, comma-separated finite numbers\n"
                 "  --file F           the parameters as raw little-endian float32 (what\n"
                 "                     zps pull --file writes)\n"},
        {"push", "usage: zps push --servers LIST --worker R --clock T --batch N\n"
                 "                (--values G1,G2,... | --file F) [--verbose] [options]\n"
                 "\n"
                 "Pushes a gradient computed by worker R at clock T on N examples.\n"
                 "\n"
                 "  --worker R         the pushing worker's rank (R >= 0)\n"
                 "  --clock T          the clock of the push\n"
                 "  --batch N          the examples the gradient was computed on\n"
                 "  --values LIST      the gradient, comma-separated finite numbers\n"
                 "  --file F           the gradient as raw little-endian float32\n"
                 "  --verbose          print versions, min_clock and what became of the push\n"
                 "                     on stderr\n"},
        {"pull", "usage: zps pull --servers LIST [--worker R] [--clock T] [--file F] [--verbose]\n"
                 "                [options]\n"
                 "\n"
                 "Prints the parameters for a clock, one per line, each the shortest decimal\n"
                 "that reads back as the same float32. Without --worker: an observer's view,\n"
                 "answered at once. Before the model is initialised: exit 1 at once.\n"
                 "\n"
                 "  --worker R         pull as worker R (its consistency rule applies)\n"
                 "  --clock T          the clock to pull for (default 0)\n"
                 "  --file F           write the parameters to F as raw little-endian float32\n"
                 "                     (what zps init --file reads), print nothing\n"
                 "  --verbose          print model versions and min_clock on stderr\n"},
        {"stats", "usage: zps stats --servers LIST [options]\n"
                  "\n"
                  "Prints each server's statistics as one JSON line (docs/protocol.md, STATS).\n"},
        {"checkpoint", "usage: zps checkpoint --servers LIST [options]\n"
                       "       zps checkpoint inspect FILE\n"
                       "\n"
                       "Has every server write a checkpoint now (needs --checkpoint-dir on the\n"
                       "servers) and prints each one's version and file. `inspect` prints a\n"
                       "checkpoint file's header and verifies every section's checksum (exit 0\n"
                       "valid, 1 invalid, 2 unreadable).\n"},
        {"reload-keys", "usage: zps reload-keys --servers LIST --key ADMIN.key --server-key "
                        "SERVER.pub [options]\n"
                        "\n"
                        "Has every server read its --authorized-keys file again, as SIGHUP does (an\n"
                        "admin key's request); prints each one's key count.\n"},
    };
    for (size_t i = 0; i < sizeof(help) / sizeof(help[0]); i++) {
        if (strcmp(command, help[i].name) == 0) {
            fprintf(f, "%s\nOptions:\n%s\nExit status: zps --help.\n", help[i].text,
                    common_flags);
            return;
        }
    }
    usage(f);
}

typedef struct args {
    const char *servers;
    const char *values;
    const char *file;
    long worker;
    bool have_worker;
    uint64_t clock;
    bool have_clock;
    long batch;
    bool have_batch;
    long timeout_ms;
    long retry_ms;
    bool verbose;
    const char *key;        /* --key PREFIX.key */
    const char *server_key; /* --server-key SERVER.pub */
    bool no_seal;           /* --no-seal */
} args_t;

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zps: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'zps %s%s--help'.\n", command, *command ? " " : "");
    va_end(ap);
    return EXIT_USAGE;
}

static int parse_args(int argc, char **argv, args_t *a)
{
    enum {
        O_SERVERS = 256,
        O_VALUES,
        O_FILE,
        O_WORKER,
        O_CLOCK,
        O_BATCH,
        O_TIMEOUT,
        O_RETRY,
        O_VERBOSE,
        O_KEY,
        O_SERVER_KEY,
        O_NO_SEAL,
        O_HELP
    };
    static const struct option opts[] = {
        {"servers", required_argument, NULL, O_SERVERS},
        {"values", required_argument, NULL, O_VALUES},
        {"file", required_argument, NULL, O_FILE},
        {"worker", required_argument, NULL, O_WORKER},
        {"clock", required_argument, NULL, O_CLOCK},
        {"batch", required_argument, NULL, O_BATCH},
        {"timeout-ms", required_argument, NULL, O_TIMEOUT},
        {"retry-ms", required_argument, NULL, O_RETRY},
        {"verbose", no_argument, NULL, O_VERBOSE},
        {"key", required_argument, NULL, O_KEY},
        {"server-key", required_argument, NULL, O_SERVER_KEY},
        {"no-seal", no_argument, NULL, O_NO_SEAL},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof(*a));
    a->worker = -1;
    a->timeout_ms = DEFAULT_TIMEOUT_MS;
    a->retry_ms = 1000;
    int c;
    optind = 2; /* after the command */
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_SERVERS:
            a->servers = optarg;
            break;
        case O_VALUES:
            a->values = optarg;
            break;
        case O_FILE:
            a->file = optarg;
            break;
        case O_WORKER:
            if (zps_parse_long(optarg, -1, 65535, &a->worker))
                return usage_error("invalid --worker '%s': expected an integer in [-1, 65535]",
                                   optarg);
            a->have_worker = true;
            break;
        case O_CLOCK:
            if (zps_parse_u64(optarg, &a->clock))
                return usage_error("invalid --clock '%s': expected a non-negative integer", optarg);
            a->have_clock = true;
            break;
        case O_BATCH:
            if (zps_parse_long(optarg, 0, 0x7fffffff, &a->batch))
                return usage_error("invalid --batch '%s': expected a non-negative integer", optarg);
            a->have_batch = true;
            break;
        case O_TIMEOUT:
            if (zps_parse_long(optarg, -1, 0x7fffffff, &a->timeout_ms))
                return usage_error("invalid --timeout-ms '%s'", optarg);
            break;
        case O_RETRY:
            if (zps_parse_long(optarg, 0, 0x7fffffff, &a->retry_ms))
                return usage_error("invalid --retry-ms '%s'", optarg);
            break;
        case O_VERBOSE:
            a->verbose = true;
            break;
        case O_KEY:
            a->key = optarg;
            break;
        case O_SERVER_KEY:
            a->server_key = optarg;
            break;
        case O_NO_SEAL:
            a->no_seal = true;
            break;
        case O_HELP:
            command_usage(stdout);
            exit(0);
        default:
            fprintf(stderr, "Try 'zps %s%s--help'.\n", command, *command ? " " : "");
            return EXIT_USAGE;
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!a->servers)
        return usage_error("--servers is required");
    if (!a->key != !a->server_key)
        return usage_error("--key and --server-key go together");
    return 0;
}

/* Reads a raw little-endian float32 file. */
static int read_floats(const char *path, float **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "zps: cannot open %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    size_t cap = 1024, len = 0;
    float *v = malloc(cap * sizeof(float));
    size_t got;
    while (v && (got = fread(v + len, sizeof(float), cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            float *w = realloc(v, 2 * cap * sizeof(float));
            if (!w) {
                free(v);
                v = NULL;
            }
            v = w;
            cap *= 2;
        }
    }
    long pos = ftell(f);
    bool err = ferror(f);
    fclose(f);
    if (!v || err || pos < 0 || (size_t)pos != len * sizeof(float) || len == 0) {
        fprintf(stderr, "zps: %s: %s\n", path,
                !v         ? "out of memory"
                : err      ? "read error"
                : len == 0 ? "empty file"
                           : "size is not a multiple of 4 bytes (float32)");
        free(v);
        return EXIT_USAGE;
    }
    *out = v;
    *n = len;
    return 0;
}

/* Writes v[n] as raw little-endian float32, what read_floats reads. */
static int write_floats(const char *path, const float *v, uint64_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "zps pull: cannot create %s: %s\n", path, strerror(errno));
        return EXIT_REFUSED;
    }
    bool ok = true;
    for (uint64_t i = 0; i < n && ok; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof(u));
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        ok = fwrite(b, 1, sizeof(b), f) == sizeof(b);
    }
    if (fclose(f) != 0)
        ok = false;
    if (!ok) {
        fprintf(stderr, "zps pull: cannot write %s: %s\n", path, strerror(errno));
        return EXIT_REFUSED;
    }
    return 0;
}

static int get_values(const args_t *a, float **v, size_t *n)
{
    if (!!a->values == !!a->file)
        return usage_error("give exactly one of --values and --file");
    if (a->file)
        return read_floats(a->file, v, n);
    if (zps_parse_float_list(a->values, v, n))
        return usage_error("invalid --values '%s': expected finite numbers separated by commas",
                           a->values);
    return 0;
}

/*
 * Maps a failed call to the exit status, saying why on stderr. Only a pull
 * that connected servers held back is "timed out" (3); silence from a server
 * that is not there, or from one that does not answer stats, init, push or
 * checkpoint, is a failure to reach it (1).
 */
static int fail(zps_client_t *c, int rc)
{
    const char *text = zps_client_last_error(c);
    if (rc == ZPS_EREMOTE && zps_client_last_remote_status(c) == ZPS_ENOTINIT) {
        fprintf(stderr,
                "zps %s: the model is not initialised yet (zps init, or a worker of rank 0, "
                "sets it)\n",
                command);
        return EXIT_REFUSED;
    }
    bool held_back = rc == ZPS_ETIMEDOUT && strcmp(command, "pull") == 0;
    fprintf(stderr, "zps %s: %s%s\n", command, held_back ? "timed out: " : "",
            text && *text ? text : zps_strerror(rc));
    return held_back ? EXIT_TIMEOUT : EXIT_REFUSED;
}

static int cmd_init(zps_client_t *c, const args_t *a)
{
    float *v;
    size_t n;
    int ex = get_values(a, &v, &n);
    if (ex)
        return ex;
    int rc = zps_client_init(c, v, n);
    free(v);
    return rc ? fail(c, rc) : 0;
}

static int cmd_push(zps_client_t *c, const args_t *a)
{
    if (!a->have_worker || a->worker < 0)
        return usage_error("push needs --worker R (R >= 0)");
    if (!a->have_clock)
        return usage_error("push needs --clock T");
    if (!a->have_batch)
        return usage_error("push needs --batch N");
    float *v;
    size_t n;
    int ex = get_values(a, &v, &n);
    if (ex)
        return ex;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    int rc = zps_client_push(c, a->clock, v, n, (uint32_t)a->batch, &info);
    free(v);
    if (rc)
        return fail(c, rc);
    if (a->verbose)
        fprintf(stderr, "version %llu..%llu min_clock %llu%s%s%s\n",
                (unsigned long long)info.min_version, (unsigned long long)info.max_version,
                (unsigned long long)info.min_clock,
                info.retried ? " retry (not applied again)" : "",
                info.dropped ? " dropped (too late)" : "", info.buffered ? " buffered" : "");
    return 0;
}

static int cmd_pull(zps_client_t *c, const args_t *a)
{
    float *v;
    uint64_t n;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    int rc = zps_client_pull_alloc(c, a->clock, &v, &n, &info);
    if (rc)
        return fail(c, rc);
    if (a->file) {
        int ex = write_floats(a->file, v, n);
        free(v);
        if (ex)
            return ex;
    } else {
        char buf[48];
        for (uint64_t i = 0; i < n; i++)
            printf("%s\n", zps_format_float(v[i], buf, sizeof(buf)));
        free(v);
    }
    if (a->verbose)
        fprintf(stderr, "version %llu..%llu min_clock %llu%s\n",
                (unsigned long long)info.min_version, (unsigned long long)info.max_version,
                (unsigned long long)info.min_clock, info.rejoined ? " rejoined" : "");
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

static int cmd_checkpoint(zps_client_t *c, const args_t *a)
{
    (void)a;
    char *report;
    int rc = zps_client_checkpoint(c, &report);
    if (rc)
        return fail(c, rc);
    printf("%s", report);
    free(report);
    return 0;
}

static int cmd_reload_keys(zps_client_t *c, const args_t *a)
{
    (void)a;
    char *report;
    int rc = zps_client_reload_keys(c, &report);
    if (rc)
        return fail(c, rc);
    printf("%s", report);
    free(report);
    return 0;
}

static int cmd_stats(zps_client_t *c, const args_t *a)
{
    (void)a;
    int status = 0;
    for (size_t i = 0; i < zps_client_server_count(c); i++) {
        char *json;
        int rc = zps_client_stats(c, i, &json);
        if (rc) {
            status = fail(c, rc);
            continue;
        }
        printf("%s\n", json);
        free(json);
    }
    return status;
}

int main(int argc, char **argv)
{
    zps_log_set_tag("zps");
    zps_set_log_level(ZPS_LOG_WARN);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        zps_version_print("zps");
        return 0;
    }
    if (strcmp(argv[1], "launch") == 0)
        return zps_cmd_launch(argc - 1, argv + 1);
    if (strcmp(argv[1], "keygen") == 0)
        return zps_cmd_keygen(argc - 1, argv + 1);
    if (strcmp(argv[1], "top") == 0)
        return zps_cmd_top(argc - 1, argv + 1);
    if (strcmp(argv[1], "plot") == 0)
        return zps_cmd_plot(argc - 1, argv + 1);
    if (strcmp(argv[1], "checkpoint") == 0 && argc >= 3 && strcmp(argv[2], "inspect") == 0) {
        if (argc != 4)
            return usage_error("usage: zps checkpoint inspect FILE");
        return zps_cmd_checkpoint_inspect(argv[3]);
    }
    static const struct {
        const char *name;
        int (*fn)(zps_client_t *, const args_t *);
    } cmds[] = {{"init", cmd_init},
                {"push", cmd_push},
                {"pull", cmd_pull},
                {"stats", cmd_stats},
                {"checkpoint", cmd_checkpoint},
                {"reload-keys", cmd_reload_keys}};
    int (*fn)(zps_client_t *, const args_t *) = NULL;
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (strcmp(argv[1], cmds[i].name) == 0) {
            fn = cmds[i].fn;
            command = cmds[i].name;
        }
    }
    if (!fn)
        return usage_error("unknown command '%s'", argv[1]);

    args_t a;
    int ex = parse_args(argc, argv, &a);
    if (ex)
        return ex;
    char **servers;
    size_t nservers;
    if (zps_parse_list(a.servers, &servers, &nservers))
        return usage_error("invalid --servers '%s': expected E1[,E2...]", a.servers);
    for (size_t i = 0; i < nservers; i++) {
        char why[512];
        if (zps_client_check_endpoint(servers[i], why, sizeof(why)) != 0) {
            free(servers);
            return usage_error("--servers: %s", why);
        }
    }

    zps_client_opts_t opts;
    zps_client_opts_default(&opts);
    opts.worker = (int)a.worker;
    opts.timeout_ms = (int)a.timeout_ms;
    opts.retry_ms = (int)a.retry_ms;
    opts.heartbeat_ms = 0; /* one request, then gone: nothing to keep alive */
    opts.fail_on_refused = true;      /* nothing listens: say so now */
    opts.fail_not_initialised = true; /* no model yet: say so now */
    if (opts.timeout_ms >= 0)
        opts.wait_log_ms = 0; /* the deadline's message says it all */
    if (a.key) {
        char why[1024];
        if (zps_client_opts_set_keys(&opts, a.key, a.server_key, why, sizeof(why)) != 0) {
            fprintf(stderr, "zps: %s\n", why);
            free(servers);
            return EXIT_USAGE;
        }
        opts.no_seal = a.no_seal;
    }
    zps_client_t *c;
    int rc = zps_client_new((const char *const *)servers, nservers, &opts, &c);
    zps_client_opts_clear(&opts);
    if (rc) {
        fprintf(stderr, "zps: cannot use --servers '%s': %s\n", a.servers, zps_strerror(rc));
        free(servers);
        return EXIT_USAGE;
    }
    ex = fn(c, &a);
    zps_client_free(c);
    free(servers);
    return ex;
}
