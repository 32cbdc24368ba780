/*
 * top.c - `zps top`; see top.h.
 *
 * Each refresh asks every shard for its STATS (one after the other, each
 * within --timeout-ms), keeps what it needs across refreshes (the previous
 * version and when it last moved, for the step rate and how long a barrier
 * has held), and writes one frame at once. Workers are shown across shards:
 * a worker's clock is the smallest any answering shard has from it, its last
 * heard the most recent any has heard, and it is evicted if any shard
 * evicted it.
 */
#include "top.h"

#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "barrier.h"
#include "zps/zps.h"
#include "error.h"
#include "json.h"
#include "parse.h"
#include "runstats.h"
#include "strbuf.h"
#include "timeutil.h"

#define EXIT_NOANSWER 1
#define EXIT_USAGE 2
#define DEFAULT_TIMEOUT_MS 2000
#define MAX_INTERVAL_S 3600.0

static void usage(FILE *f)
{
    fprintf(f, "usage: zps top (--servers E1[,E2...] | --run DIR) [--interval SEC] [--once]\n"
               "               [--timeout-ms MS] [--key PREFIX.key --server-key SERVER.pub]\n"
               "\n"
               "A live view of a running cluster from its servers' STATS, redrawn every\n"
               "interval (ANSI: clear screen, cursor home): per shard the version, step rate\n"
               "(versions per second), min clock, pushes applied/buffered/dropped and errors;\n"
               "per worker its clock, lag behind the fastest worker (clocks), live or\n"
               "evicted, and when a shard last heard from it; and when a BSP or SSP barrier\n"
               "holds the others, whom it waits for:\n"
               "  shard 0: clock 812: waiting for worker 3, last heard 14 s ago; held 12 s\n"
               "\n"
               "  --servers LIST   server endpoints in shard order, comma-separated\n"
               "  --interval SEC   seconds between refreshes (default 1)\n"
               "  --once           print one frame without escape codes and exit (STATS\n"
               "                   sampled twice, a second apart, for the step rates)\n"
               "  --timeout-ms MS  how long to wait for each server's answer (default 2000)\n"
               "  --run DIR        a zps launch run folder: add each worker's step time split\n"
               "                   (compute / pull wait / push, mean ms) from its metrics;\n"
               "                   without --servers, its servers too (server-I.endpoint)\n"
               "                   and, with keys/, its keys (keys/launch.key, server.pub)\n"
               "  --key PREFIX.key --server-key SERVER.pub\n"
               "                   for servers started with --key: this client's secret key\n"
               "                   (any listed role may read STATS) and the servers' public\n"
               "                   key (docs/security.md)\n"
               "\n"
               "Exit status: 0 done (Ctrl-C; --once: every server answered); 1 no server\n"
               "answered (--once: some server did not); 2 bad usage.\n");
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zps top: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'zps top --help'.\n");
    return EXIT_USAGE;
}

typedef struct top_args {
    const char *servers;
    double interval_s;
    bool once;
    long timeout_ms;
    const char *run_dir;
    const char *key;        /* --key PREFIX.key */
    const char *server_key; /* --server-key SERVER.pub */
} top_args_t;

static int parse_args(int argc, char **argv, top_args_t *a)
{
    memset(a, 0, sizeof(*a));
    a->interval_s = 1.0;
    a->timeout_ms = DEFAULT_TIMEOUT_MS;
    enum { O_SERVERS = 256, O_INTERVAL, O_ONCE, O_TIMEOUT, O_RUN, O_KEY, O_SERVER_KEY, O_HELP };
    static const struct option opts[] = {
        {"servers", required_argument, NULL, O_SERVERS},
        {"interval", required_argument, NULL, O_INTERVAL},
        {"once", no_argument, NULL, O_ONCE},
        {"timeout-ms", required_argument, NULL, O_TIMEOUT},
        {"run", required_argument, NULL, O_RUN},
        {"key", required_argument, NULL, O_KEY},
        {"server-key", required_argument, NULL, O_SERVER_KEY},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case O_SERVERS:
            a->servers = optarg;
            break;
        case O_INTERVAL:
            if (zps_parse_double(optarg, &a->interval_s) || !(a->interval_s >= 0.1) ||
                a->interval_s > MAX_INTERVAL_S)
                return usage_error("invalid --interval '%s': expected seconds in [0.1, 3600]",
                                   optarg);
            break;
        case O_ONCE:
            a->once = true;
            break;
        case O_TIMEOUT:
            if (zps_parse_long(optarg, 1, 3600000, &a->timeout_ms))
                return usage_error("invalid --timeout-ms '%s': expected an integer in [1, 3600000]",
                                   optarg);
            break;
        case O_RUN:
            a->run_dir = optarg;
            break;
        case O_KEY:
            a->key = optarg;
            break;
        case O_SERVER_KEY:
            a->server_key = optarg;
            break;
        case O_HELP:
            usage(stdout);
            return -1;
        default:
            return usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!a->servers && !a->run_dir)
        return usage_error("--servers (or --run DIR) is required");
    if (!a->key != !a->server_key)
        return usage_error("--key and --server-key go together");
    return 0;
}

/* ---- a run folder's servers and keys ---- */

/*
 * The endpoints of a zps launch run folder, from its server-I.endpoint
 * files (I = 0, 1, ... until one is missing), comma-separated into a
 * malloc'd *out. Returns 0, or ZPS_EINVAL (no server-0.endpoint, an empty
 * one) or ZPS_ENOMEM, saying why on stderr.
 */
static int run_servers(const char *dir, char **out)
{
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    unsigned i = 0;
    for (;; i++) {
        char path[4096], line[512];
        snprintf(path, sizeof(path), "%s/server-%u.endpoint", dir, i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        bool ok = fgets(line, sizeof(line), f) != NULL;
        fclose(f);
        line[strcspn(line, "\r\n")] = '\0';
        if (!ok || !line[0]) {
            fprintf(stderr, "zps top: %s is empty (is the server still starting?)\n", path);
            zps_strbuf_fini(&b);
            return ZPS_EINVAL;
        }
        zps_strbuf_printf(&b, "%s%s", i ? "," : "", line);
    }
    if (i == 0) {
        fprintf(stderr, "zps top: no %s/server-0.endpoint: not a zps launch run folder?\n", dir);
        zps_strbuf_fini(&b);
        return ZPS_EINVAL;
    }
    if (!b.data)
        return ZPS_ENOMEM;
    *out = b.data;
    return 0;
}

/* ---- what is kept per shard across refreshes ---- */

typedef struct shard_view {
    bool answered;     /* this refresh */
    char why[256];     /* when not: the client's reason */
    zps_json_t *stats; /* the latest answer, NULL before the first */
    zps_barrier_shard_t b;
    bool have_b;
    bool have_prev;
    uint64_t prev_version, prev_ns;
    double rate;       /* versions per second between the last two answers */
    bool have_rate;    /* two answers so far */
    uint64_t moved_ns; /* when the version was first seen at its current value */
    bool moved_known;  /* moved_ns is a real change, not the first sighting */
    bool still;        /* the version did not move since the previous answer */
} shard_view_t;

/* ---- a run folder's metrics: each worker's step time split ---- */

typedef struct split {
    long offset; /* bytes of worker-R.jsonl read so far */
    uint64_t steps;
    double step_ms, compute_ms, pull_ms, push_ms; /* means over the last refresh's steps */
    bool have;
} split_t;

static double num0(const zps_json_t *o, const char *key)
{
    return zps_json_number(zps_json_get(o, key), 0.0);
}

/* Reads what worker `rank` appended since the last call; the means are over
 * the new step lines (unchanged when there are none). */
static void split_read(split_t *s, const char *dir, uint32_t rank)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/worker-%u.jsonl", dir, rank);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fseek(f, s->offset, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    double n = 0, step = 0, compute = 0, pull = 0, push = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n')
            break; /* being written: read it whole next time */
        s->offset += (long)len;
        zps_json_t *o = NULL;
        if (zps_json_parse(line, &o, NULL, 0) != 0)
            continue;
        const char *type = zps_json_string(zps_json_get(o, "type"));
        if (type && strcmp(type, "step") == 0) {
            n++;
            step += num0(o, "step_ms");
            compute += zps_runstats_compute_ms(o) + num0(o, "pad_ms") + num0(o, "delay_ms");
            pull += num0(o, "pull_ms");
            push += num0(o, "push_ms");
        }
        zps_json_free(o);
    }
    free(line);
    fclose(f);
    if (n > 0) {
        s->steps += (uint64_t)n;
        s->step_ms = step / n;
        s->compute_ms = compute / n;
        s->pull_ms = pull / n;
        s->push_ms = push / n;
        s->have = true;
    }
}

/* ---- one refresh ---- */

typedef struct top {
    const top_args_t *a;
    zps_client_t *client;
    size_t nshards;
    shard_view_t *shard;
    split_t *split; /* [nsplit] with --run */
    uint32_t nsplit;
} top_t;

static void refresh(top_t *t)
{
    for (size_t i = 0; i < t->nshards; i++) {
        shard_view_t *v = &t->shard[i];
        char *json = NULL;
        int rc = zps_client_stats(t->client, i, &json);
        uint64_t now = zps_now_ns();
        v->answered = false;
        if (rc) {
            const char *why = zps_client_last_error(t->client);
            snprintf(v->why, sizeof(v->why), "%s", why && *why ? why : zps_strerror(rc));
            continue;
        }
        zps_json_t *o = NULL;
        zps_barrier_shard_t b;
        if (zps_json_parse(json, &o, NULL, 0) != 0 || zps_barrier_shard_parse(o, &b) != 0) {
            snprintf(v->why, sizeof(v->why), "shard %zu: its STATS reply is not one zps top reads",
                     i);
            zps_json_free(o);
            free(json);
            continue;
        }
        free(json);
        v->answered = true;
        zps_json_free(v->stats);
        v->stats = o;
        if (v->have_b)
            zps_barrier_shard_fini(&v->b);
        v->b = b;
        v->have_b = true;
        v->still = true;
        if (!v->have_prev) {
            v->moved_ns = now;
        } else {
            double dt = (double)(now - v->prev_ns) / 1e9;
            v->have_rate = true;
            v->rate = dt > 0 && b.version >= v->prev_version
                          ? (double)(b.version - v->prev_version) / dt
                          : 0;
            if (b.version != v->prev_version) {
                v->moved_ns = now;
                v->moved_known = true;
                v->still = false;
            }
        }
        v->have_prev = true;
        v->prev_version = b.version;
        v->prev_ns = now;
    }
    for (uint32_t r = 0; r < t->nsplit; r++)
        split_read(&t->split[r], t->a->run_dir, r);
}

/* ---- drawing ---- */

static void draw_workers(const top_t *t, zps_strbuf_t *b, uint32_t workers)
{
    uint64_t *clock = calloc(workers, sizeof(*clock));
    bool *have = calloc(workers, sizeof(*have));
    bool *evicted = calloc(workers, sizeof(*evicted));
    double *heard = calloc(workers, sizeof(*heard));
    if (!clock || !have || !evicted || !heard) {
        zps_strbuf_printf(b, "(out of memory)\n");
        goto done;
    }
    uint64_t fastest = 0;
    for (size_t i = 0; i < t->nshards; i++) {
        const shard_view_t *v = &t->shard[i];
        if (!v->answered || v->b.workers != workers)
            continue;
        for (uint32_t w = 0; w < workers; w++) {
            if (!have[w] || v->b.clocks[w] < clock[w])
                clock[w] = v->b.clocks[w];
            if (!have[w] || v->b.silent_ms[w] < heard[w])
                heard[w] = v->b.silent_ms[w];
            if (!v->b.live[w])
                evicted[w] = true;
            have[w] = true;
        }
    }
    for (uint32_t w = 0; w < workers; w++)
        if (have[w] && clock[w] > fastest)
            fastest = clock[w];
    zps_strbuf_printf(b, "\n%-7s %10s %6s %-8s %11s", "worker", "clock", "lag", "state",
                      "last heard");
    if (t->nsplit)
        zps_strbuf_printf(b, " %8s %10s %8s %8s %7s", "step ms", "compute ms", "pull ms", "push ms",
                          "steps");
    zps_strbuf_printf(b, "\n");
    for (uint32_t w = 0; w < workers; w++) {
        if (!have[w])
            continue;
        char heard_s[32];
        snprintf(heard_s, sizeof(heard_s), "%.1f s", heard[w] / 1e3);
        zps_strbuf_printf(b, "%-7u %10llu %6llu %-8s %11s", w, (unsigned long long)clock[w],
                          (unsigned long long)(fastest - clock[w]), evicted[w] ? "evicted" : "live",
                          heard_s);
        if (w < t->nsplit && t->split[w].have) {
            const split_t *s = &t->split[w];
            zps_strbuf_printf(b, " %8.1f %10.1f %8.1f %8.1f %7llu", s->step_ms, s->compute_ms,
                              s->pull_ms, s->push_ms, (unsigned long long)s->steps);
        }
        zps_strbuf_printf(b, "\n");
    }
done:
    free(clock);
    free(have);
    free(evicted);
    free(heard);
}

/* One frame into *b. */
static void draw(const top_t *t, zps_strbuf_t *b)
{
    const shard_view_t *first = NULL;
    for (size_t i = 0; i < t->nshards && !first; i++)
        if (t->shard[i].answered)
            first = &t->shard[i];
    time_t now = time(NULL);
    struct tm tm;
    char when[32] = "";
    if (localtime_r(&now, &tm))
        strftime(when, sizeof(when), "%H:%M:%S", &tm);
    zps_strbuf_printf(b, "zps top | %zu shard%s", t->nshards, t->nshards == 1 ? "" : "s");
    if (first) {
        zps_strbuf_printf(b, " | %s", zps_mode_name(first->b.mode));
        if (first->b.mode == ZPS_MODE_SSP)
            zps_strbuf_printf(b, " %u", first->b.staleness_bound);
        if (first->b.backup_workers)
            zps_strbuf_printf(b, " +%u backup", first->b.backup_workers);
        zps_strbuf_printf(b, ", %u workers", first->b.workers);
    }
    zps_strbuf_printf(b, " | %s", when);
    if (!t->a->once)
        zps_strbuf_printf(b, " | every %g s", t->a->interval_s);
    zps_strbuf_printf(b, "\n\n%-6s %10s %8s %10s %10s %10s %8s %7s\n", "shard", "version",
                      "steps/s", "min clock", "applied", "buffered", "dropped", "errors");
    for (size_t i = 0; i < t->nshards; i++) {
        const shard_view_t *v = &t->shard[i];
        if (!v->answered) {
            zps_strbuf_printf(b, "%-6zu no answer: %s\n", i, v->why);
            continue;
        }
        const zps_json_t *c = zps_json_get(v->stats, "counts");
        char rate[32] = "-";
        if (v->have_rate)
            snprintf(rate, sizeof(rate), "%.1f", v->rate);
        zps_strbuf_printf(b, "%-6zu %10llu %8s %10llu %10.0f %10.0f %8.0f %7.0f\n", i,
                          (unsigned long long)v->b.version, rate,
                          (unsigned long long)v->b.min_clock, num0(c, "applied"),
                          num0(c, "buffered"), num0(c, "dropped"), num0(c, "errors"));
    }
    /* The barriers: one line per shard that holds, nothing when none does.
     * A live view names only barriers that held through a whole interval
     * (the version did not move): a BSP step waits a moment for its last
     * push every clock, and a line flickering for that would be noise. */
    uint64_t now_ns = zps_now_ns();
    bool any = false;
    for (size_t i = 0; i < t->nshards; i++) {
        const shard_view_t *v = &t->shard[i];
        if (!v->answered || (!t->a->once && !v->still))
            continue;
        zps_barrier_wait_t w;
        zps_barrier_wait(&v->b, &w);
        if (!w.holding)
            continue;
        char line[512];
        double held = v->moved_known ? (double)(now_ns - v->moved_ns) / 1e9 : -1;
        zps_barrier_line(&v->b, &w, held, line, sizeof(line));
        zps_strbuf_printf(b, "%sshard %zu: %s\n", any ? "" : "\n", i, line);
        any = true;
    }
    if (first)
        draw_workers(t, b, first->b.workers);
}

/* ---- the loop ---- */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

/* Sleeps `sec` seconds in short slices, returning early on SIGINT or SIGTERM. */
static void nap(double sec)
{
    uint64_t end = zps_now_ns() + (uint64_t)(sec * 1e9);
    while (!stop_signal) {
        uint64_t now = zps_now_ns();
        if (now >= end)
            return;
        uint64_t left = end - now;
        uint64_t slice = left < 100000000ull ? left : 100000000ull;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice};
        nanosleep(&ts, NULL);
    }
}

static bool any_answered(const top_t *t)
{
    for (size_t i = 0; i < t->nshards; i++)
        if (t->shard[i].answered)
            return true;
    return false;
}

int zps_cmd_top(int argc, char **argv)
{
    top_args_t a;
    int ex = parse_args(argc, argv, &a);
    if (ex)
        return ex < 0 ? 0 : ex;
    /* --run without --servers: the run folder's servers, and its keys when
     * it has them (launch's own reader key, which may read STATS). */
    char *run_list = NULL;
    char run_key[4200], run_pub[4200];
    if (!a.servers) {
        if (run_servers(a.run_dir, &run_list) != 0)
            return EXIT_USAGE;
        a.servers = run_list;
        snprintf(run_key, sizeof(run_key), "%s/keys/launch.key", a.run_dir);
        snprintf(run_pub, sizeof(run_pub), "%s/keys/server.pub", a.run_dir);
        if (!a.key && access(run_key, F_OK) == 0) {
            a.key = run_key;
            a.server_key = run_pub;
        }
    }
    char **servers;
    size_t nservers;
    if (zps_parse_list(a.servers, &servers, &nservers)) {
        ex = usage_error("invalid --servers '%s': expected E1[,E2...]", a.servers);
        free(run_list);
        return ex;
    }
    for (size_t i = 0; i < nservers; i++) {
        char why[512];
        if (zps_client_check_endpoint(servers[i], why, sizeof(why)) != 0) {
            free(servers);
            ex = usage_error("--servers: %s", why);
            free(run_list);
            return ex;
        }
    }

    top_t t;
    memset(&t, 0, sizeof(t));
    t.a = &a;
    zps_client_opts_t opts;
    zps_client_opts_default(&opts);
    opts.worker = -1;
    opts.timeout_ms = (int)a.timeout_ms;
    opts.retry_ms = a.timeout_ms > 500 ? 500 : 0;
    opts.heartbeat_ms = 0; /* an observer: nothing to keep alive */
    opts.wait_log_ms = 0;  /* the frame says who did not answer */
    opts.fail_on_refused = true;
    if (a.key) {
        char why[1024];
        if (zps_client_opts_set_keys(&opts, a.key, a.server_key, why, sizeof(why)) != 0) {
            fprintf(stderr, "zps top: %s\n", why);
            free(servers);
            free(run_list);
            return EXIT_USAGE;
        }
    }
    int rc = zps_client_new((const char *const *)servers, nservers, &opts, &t.client);
    zps_client_opts_clear(&opts);
    if (rc) {
        fprintf(stderr, "zps top: cannot use --servers '%s': %s\n", a.servers, zps_strerror(rc));
        free(servers);
        free(run_list);
        return EXIT_USAGE;
    }
    t.nshards = nservers;
    t.shard = calloc(nservers, sizeof(*t.shard));
    if (!t.shard) {
        fprintf(stderr, "zps top: out of memory\n");
        ex = EXIT_NOANSWER;
        goto done;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    for (bool first = true; !stop_signal; first = false) {
        refresh(&t);
        /* One frame has rates too: a second sample, a second later. */
        if (a.once && any_answered(&t)) {
            nap(1.0);
            refresh(&t);
        }
        if (first && !any_answered(&t)) {
            for (size_t i = 0; i < t.nshards; i++)
                fprintf(stderr, "zps top: %s\n", t.shard[i].why);
            ex = EXIT_NOANSWER;
            break;
        }
        /* The run folder's workers are known once a shard has said how many. */
        if (a.run_dir && !t.split && any_answered(&t)) {
            for (size_t i = 0; i < t.nshards; i++) {
                if (t.shard[i].answered) {
                    t.nsplit = t.shard[i].b.workers;
                    break;
                }
            }
            t.split = calloc(t.nsplit, sizeof(*t.split));
            if (!t.split)
                t.nsplit = 0;
            for (uint32_t r = 0; r < t.nsplit; r++)
                split_read(&t.split[r], a.run_dir, r);
        }
        zps_strbuf_t b;
        zps_strbuf_init(&b);
        if (!a.once)
            zps_strbuf_printf(&b, "\033[H\033[2J");
        draw(&t, &b);
        if (b.data)
            fputs(b.data, stdout);
        fflush(stdout);
        zps_strbuf_fini(&b);
        if (a.once) {
            for (size_t i = 0; i < t.nshards; i++) {
                if (!t.shard[i].answered) {
                    fprintf(stderr, "zps top: %s\n", t.shard[i].why);
                    ex = EXIT_NOANSWER;
                }
            }
            break;
        }
        nap(a.interval_s);
    }

done:
    for (size_t i = 0; t.shard && i < t.nshards; i++) {
        zps_json_free(t.shard[i].stats);
        if (t.shard[i].have_b)
            zps_barrier_shard_fini(&t.shard[i].b);
    }
    free(t.split);
    free(t.shard);
    zps_client_free(t.client);
    free(servers);
    free(run_list);
    return ex;
}
