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
 * servers' final STATS, stop the servers, write the summary. With --keys,
 * the run's keys are made in RUN/keys (launch_keys.c) before anything
 * starts, and every command line, launch's own client too, gets the path of
 * its own secret key and the servers' public key.
 *
 * With `-- COMMAND` the workers are the user's command, once per rank, with
 * the flags a worker would get (servers, rank, metrics file, key files) as
 * ZPS_* variables of its environment instead, and there is no evaluator:
 * the run ends when every rank has exited, all with 0 for success.
 *
 * With --hosts every child runs on its host over ssh (launch_hosts.h): the
 * same child_t, its command line wrapped in ssh and the far side's
 * supervisor (launch_remote.h), its log arriving on ssh's stderr and its
 * endpoint or metrics file on ssh's stdout, written to the run folder where
 * a local child would have written them, so the rest of this file does not
 * care where a child runs. Stopping one writes "TERM" or "KILL" to its
 * ssh's stdin; ssh itself is killed only when its host does not answer.
 *
 * Not here: reading and checking the flags (launch_opts.c), the default
 * recipe (launch_plan.c), command-line vectors (launch_argv.c), the figures
 * (runstats.c), the hosts and the far side (launch_hosts.c,
 * launch_remote.c). All the run's state is one launch_t, passed to every
 * callback through its handle's data.
 */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
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

#include "barrier.h"
#include "zps/zps.h"
#include "error.h"
#include "fileutil.h"
#include "json.h"
#include "launch_argv.h"
#include "launch_hosts.h"
#include "launch_keys.h"
#include "launch_mem.h"
#include "launch_opts.h"
#include "launch_plan.h"
#include "launch_remote.h"
#include "launch_rundir.h"
#include "metrics.h"
#include "parse.h"
#include "plot.h"
#include "runstats.h"
#include "timeutil.h"

extern char **environ;

#define TICK_MS 100
/* Until every server listens: the workers start at the first tick after. */
#define STARTUP_TICK_MS 5
#define STARTUP_TIMEOUT_S 30.0
#define STOP_GRACE_S 5.0       /* SIGTERM, then SIGKILL after this long */
#define FINISH_GRACE_S 5.0     /* after the final evaluation, the workers get this long */
#define EVALUATOR_GRACE_S 60.0 /* after the last worker, the evaluator gets this long */
#define STATS_EVERY_S 1.0
#define STALL_S 5.0 /* a clock still this long: the progress line says whom it waits for */

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
    zps_argv_t argv; /* the command line, argv[0] the binary */
    zps_argv_t env;  /* -- COMMAND: its ZPS_SERVERS=..., ZPS_RANK=... (NAME=VALUE); else empty */
    char log_path[PATH_MAX + 64]; /* the paths, for the child's command line and messages */
    char endpoint_path[PATH_MAX + 64];
    char metrics_path[PATH_MAX + 64];
    char log_name[48]; /* the same files' names in the run folder, for launch's own opens */
    char endpoint_name[48];
    char metrics_name[48];
    char endpoint[300];
    /* --hosts: where it runs, and the files it writes there */
    const zps_launch_host_t *host;
    char far_endpoint[PATH_MAX + 64];
    char far_metrics[PATH_MAX + 64];
    uv_pipe_t ctl; /* its ssh's stdin: the far side's words (launch_remote.h) */
    bool ctl_open;
    bool far_killed;  /* "KILL" was sent */
    uint64_t kill_ns; /* when, until ssh itself was killed (then 0) */
    uv_process_t proc;
    bool spawned, running, stopped_by_us, killed;
    uint64_t term_ns; /* when we sent SIGTERM */
    int pid;
    int64_t exit_status;
    int term_signal;
    tail_t log, metrics;
} child_t;

typedef struct launch {
    zps_launch_opts_t *o;
    char self[PATH_MAX];
    char server_bin[PATH_MAX], worker_bin[PATH_MAX];
    char command[PATH_MAX]; /* -- COMMAND: its program, as it is started (command_path) */
    char dir[PATH_MAX]; /* the run folder, absolute */
    int dirfd;          /* the run folder (launch_rundir.h): every file launch writes is made in it */
    FILE *cmds;         /* commands.txt, open from the start until the last child has started */
    FILE *procs;        /* processes.tsv, the same */
    char name[256];
    zps_argv_t own_argv;      /* the launcher's own command line */
    zps_launch_keys_t *keys;  /* --keys: the run's key files; NULL without */
    zps_launch_hosts_t hosts; /* --hosts: the hosts (hosts.n == 0 without) */

    uv_loop_t loop;
    uv_timer_t tick;
    uv_signal_t sig[3];
    uv_work_t work;
    bool closing;

    zps_argv_t env;              /* the ZPS_* variables of our environment, NAME=VALUE */
    zps_oom_counts_t oom_before; /* the out-of-memory kills counted before any child */

    child_t *servers;
    child_t *workers;   /* [W + 1]: the W workers, then the evaluator */
    child_t *evaluator; /* &workers[W]; NULL with a command (-- COMMAND), which has none */
    phase_t phase;
    uint64_t start_ns, phase_ns, last_stats_ns, finish_ns;
    bool training_done;       /* the evaluator exited 0: the final model is evaluated */
    uint64_t workers_done_ns; /* when the last worker exited (0: not yet) */
    bool finish_stopped;      /* the remaining workers were asked to stop after it */
    bool stopped_at_target;   /* --stop-at: the evaluator saw the target, training was stopped */

    zps_runstats_t *rs;
    zps_client_t *client;
    bool stats_busy;
    bool stats_final;  /* the fetch in flight started after every worker had exited */
    char **stats_json; /* [S], filled on the threadpool */
    int *stats_rc;
    FILE *stats_file;
    char waiting[256]; /* the latest STATS' "waiting for" line (barrier.h), "" when none holds */

    zps_progress_t progress;
    uint64_t shown_min, shown_max; /* the progress line's clocks, and when they last moved */
    uint64_t clock_moved_ns;
    const char *status; /* "ok", "failed", "interrupted", "timeout" */
    int exit_code;
    char failed[32];
    char why[512];
} launch_t;

static double secs_since(uint64_t t0)
{
    return (double)(zps_now_ns() - t0) / 1e9;
}

/* The worker processes, the evaluator included (a command's run has none). */
static uint32_t kids(const launch_t *L)
{
    return L->o->workers + (L->o->command ? 0 : 1);
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

/*
 * A new file `name` of the run folder, for writing: made in the folder's
 * descriptor with O_EXCL|O_NOFOLLOW, so a name someone planted there (a
 * link to a file of ours) fails the open instead of being written through.
 */
static FILE *create_in_run(launch_t *L, const char *name)
{
    FILE *f = zps_file_fcreate_at(L->dirfd, name);
    if (!f)
        say(L, "cannot create %s/%s: %s", L->dir, name, strerror(errno));
    return f;
}

/* File `name` of the run folder for reading, never through a link; NULL when missing. */
static FILE *read_in_run(const launch_t *L, const char *name)
{
    int fd = openat(L->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    return f;
}

/* ---- stopping ---- */

/* Sends a word to a far child's supervisor (launch_remote.h). */
static void tell_far(child_t *c, const char *word)
{
    if (!c->ctl_open)
        return;
    uv_buf_t b = uv_buf_init((char *)word, (unsigned)strlen(word));
    uv_try_write((uv_stream_t *)&c->ctl, &b, 1); /* a few bytes into an empty pipe */
}

static void signal_child(child_t *c, int sig)
{
    if (!c->running || c->pid <= 0)
        return;
    if (c->host && (sig == SIGTERM || sig == SIGKILL)) {
        /* The far side signals the process; ssh stays to bring back its
         * last words and status. If the host does not answer, kill_late
         * ends ssh itself. */
        if (sig == SIGTERM) {
            tell_far(c, "TERM\n");
            return;
        }
        if (!c->far_killed) {
            tell_far(c, "KILL\n");
            c->far_killed = true;
            c->kill_ns = zps_now_ns();
            return;
        }
    }
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
            } else if (c->running && c->kill_ns && (now || secs_since(c->kill_ns) > STOP_GRACE_S)) {
                /* A far child whose host has not answered "KILL": end its
                 * ssh; the far side stops it when its input ends. */
                c->kill_ns = 0;
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
static void tail_lines(tail_t *t, const char *name, void (*fn)(child_t *, char *), child_t *c,
                       bool flush_partial)
{
    if (!t->f) {
        t->f = read_in_run(c->L, name);
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

/* Whether a metrics line is an "eval" line. */
static bool is_eval_line(const char *line)
{
    zps_json_t *o = NULL;
    if (zps_json_parse(line, &o, NULL, 0) != 0)
        return false;
    const char *type = zps_json_string(zps_json_get(o, "type"));
    bool eval = type && strcmp(type, "eval") == 0;
    zps_json_free(o);
    return eval;
}

static void metrics_line(child_t *c, char *line)
{
    if (!*line)
        return;
    /* A command's evaluations are rank 0's (docs/launch.md): another rank's
     * eval lines stay in its file and are not the run's. */
    if (c->L->o->command && c->index != 0 && is_eval_line(line))
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
            tail_lines(&L->servers[i].log, L->servers[i].log_name, echo_line, &L->servers[i],
                       final);
    for (uint32_t i = 0; i < kids(L); i++) {
        child_t *c = &L->workers[i];
        if (!c->spawned)
            continue;
        tail_lines(&c->log, c->log_name, echo_line, c, final);
        /* A partial metrics line is still being written: never flush it. */
        tail_lines(&c->metrics, c->metrics_name, metrics_line, c, false);
    }
}

/* ---- progress ---- */

static void show_progress(launch_t *L, bool force)
{
    if (!L->o->progress || L->phase == PH_SERVERS)
        return;
    zps_runstats_live_t lv;
    zps_runstats_live(L->rs, zps_wall_seconds(), &lv);
    char line[768];
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
        PUT("starting: %s | %.1f s",
            L->o->command ? "no rank has reported a step yet" : "workers loading data",
            secs_since(L->start_ns));
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
    /* A clock that has not moved for a while says whom it waits for. */
    if (lv.clock_min != L->shown_min || lv.clock_max != L->shown_max || !L->clock_moved_ns) {
        L->shown_min = lv.clock_min;
        L->shown_max = lv.clock_max;
        L->clock_moved_ns = zps_now_ns();
    } else if (secs_since(L->clock_moved_ns) > STALL_S && L->waiting[0]) {
        PUT(" | %s", L->waiting);
    }
#undef PUT
    zps_progress_show(&L->progress, line, force);
}

/* ---- server statistics, on the threadpool ---- */

/* The "waiting for" line of one shard's STATS reply into buf ("" when its
 * barrier holds nobody, or the reply is not one barrier.h reads). */
static void waiting_line(const char *json, char *buf, size_t size)
{
    buf[0] = '\0';
    zps_json_t *o = NULL;
    zps_barrier_shard_t b;
    if (zps_json_parse(json, &o, NULL, 0) != 0 || zps_barrier_shard_parse(o, &b) != 0) {
        zps_json_free(o);
        return;
    }
    zps_barrier_wait_t w;
    zps_barrier_wait(&b, &w);
    zps_barrier_line(&b, &w, -1, buf, size);
    zps_barrier_shard_fini(&b);
    zps_json_free(o);
}

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
    /* Final: a fetch that started once every worker had exited (a periodic
     * one still in flight then is recorded as periodic, and fetched again). */
    bool final = L->phase == PH_STATS && L->stats_final;
    double wall = zps_wall_seconds();
    L->waiting[0] = '\0';
    for (uint32_t i = 0; i < L->o->servers; i++) {
        if (L->stats_rc[i] == 0 && L->stats_json[i]) {
            zps_runstats_add_server(L->rs, i, L->stats_json[i]);
            if (!L->waiting[0])
                waiting_line(L->stats_json[i], L->waiting, sizeof(L->waiting));
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

static void close_ctl(child_t *c)
{
    if (c->ctl_open) {
        c->ctl_open = false;
        uv_close((uv_handle_t *)&c->ctl, on_handle_closed);
    }
}

/* The path of `name` (a path already when it has a '/'), looked up in PATH. */
static int find_in_path(const char *name, char *out, size_t size)
{
    if (strchr(name, '/')) {
        snprintf(out, size, "%s", name);
        return access(out, X_OK) == 0 ? 0 : ZPS_EINVAL;
    }
    const char *pathenv = getenv("PATH");
    char *copy = strdup(pathenv ? pathenv : "/usr/bin:/bin");
    char *save = NULL;
    int rc = ZPS_EINVAL;
    for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d && rc;
         d = strtok_r(NULL, ":", &save))
        if (snprintf(out, size, "%s/%s", d, name) < (int)size && access(out, X_OK) == 0)
            rc = 0;
    free(copy);
    return rc;
}

static void on_child_exit(uv_process_t *p, int64_t exit_status, int term_signal);

static int spawn(launch_t *L, child_t *c)
{
    /* New files of the run folder, made in its descriptor (create_in_run). */
    int fd = zps_file_create_at(L->dirfd, c->log_name, O_APPEND, 0644);
    if (fd < 0) {
        say(L, "cannot create %s: %s", c->log_path, strerror(errno));
        return ZPS_EIO;
    }
    /* A far child's forwarded file (its endpoint or its metrics) arrives
     * on ssh's stdout and is written where a local child would write it. */
    const char *local = c->server ? c->endpoint_path : c->metrics_path;
    int out = c->host ? zps_file_create_at(L->dirfd, c->server ? c->endpoint_name : c->metrics_name,
                                           O_APPEND, 0644)
                      : fd;
    if (out < 0) {
        say(L, "cannot create %s: %s", local, strerror(errno));
        close(fd);
        return ZPS_EIO;
    }
    /* zps launch --exec-child PPID BIN ARGS...: see the file comment. With
     * --hosts, BIN is ssh and the command runs on the child's host. */
    zps_argv_t args = {0};
    int rc = zps_argv_push(&args, L->self) || zps_argv_push(&args, "launch") ||
                     zps_argv_push(&args, "--exec-child") ||
                     zps_argv_pushf(&args, "%d", (int)getpid())
                 ? ZPS_ENOMEM
                 : 0;
    if (rc == 0 && c->host) {
        /* ssh carries no environment: the far command sets the ZPS_*
         * variables a local child inherits, through env(1). */
        zps_argv_t far = {0};
        if (L->env.n || c->env.n)
            rc = zps_argv_push(&far, "/usr/bin/env") || zps_argv_extend(&far, &L->env) ||
                         zps_argv_extend(&far, &c->env)
                     ? ZPS_ENOMEM
                     : 0;
        rc = rc || zps_argv_extend(&far, &c->argv) ? ZPS_ENOMEM : 0;
        if (rc == 0)
            rc =
                zps_launch_hosts_command(&L->hosts, c->host, L->self,
                                         c->server ? c->far_endpoint : c->far_metrics, &far, &args);
        zps_argv_free(&far);
    } else if (rc == 0)
        rc = zps_argv_extend(&args, &c->argv) ? ZPS_ENOMEM : 0;
    if (rc == 0 && c->host) {
        /* ssh is looked up in PATH here; --exec-child wants a path. */
        char path[PATH_MAX];
        if (find_in_path(args.v[4], path, sizeof(path)) != 0) {
            say(L, "cannot find %s in PATH (give --ssh)", args.v[4]);
            rc = ZPS_EINVAL;
        } else {
            free(args.v[4]);
            args.v[4] = strdup(path);
            rc = args.v[4] ? 0 : ZPS_ENOMEM;
        }
    }
    /* A command's cluster variables, after the environment it inherits
     * (which holds none of them: zps_launch_opts_env refuses them there). */
    char **env = NULL;
    if (rc == 0 && c->env.n && !c->host) {
        size_t n = 0;
        while (environ[n])
            n++;
        env = calloc(n + c->env.n + 1, sizeof(char *));
        if (!env)
            rc = ZPS_ENOMEM;
        for (size_t i = 0; env && i < n; i++)
            env[i] = environ[i];
        for (size_t i = 0; env && i < c->env.n; i++)
            env[n + i] = c->env.v[i];
    }
    if (rc == 0) {
        uv_stdio_container_t stdio[3];
        stdio[0].flags = UV_IGNORE;
        if (c->host) {
            uv_pipe_init(&L->loop, &c->ctl, 0);
            c->ctl_open = true;
            stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
            stdio[0].data.stream = (uv_stream_t *)&c->ctl;
        }
        stdio[1].flags = UV_INHERIT_FD;
        stdio[1].data.fd = out;
        stdio[2].flags = UV_INHERIT_FD;
        stdio[2].data.fd = fd;
        uv_process_options_t po;
        memset(&po, 0, sizeof(po));
        po.file = L->self;
        po.args = args.v;
        po.exit_cb = on_child_exit;
        po.env = env;
        po.flags = UV_PROCESS_DETACHED;
        po.stdio_count = 3;
        po.stdio = stdio;
        c->proc.data = c;
        int uvrc = uv_spawn(&L->loop, &c->proc, &po);
        if (uvrc != 0) {
            say(L, "cannot start %s (%s): %s", c->name, c->argv.v[0], uv_strerror(uvrc));
            /* uv_spawn initialised the handle even on failure; it must be closed. */
            uv_close((uv_handle_t *)&c->proc, on_handle_closed);
            close_ctl(c);
            rc = ZPS_EIO;
        } else {
            c->spawned = true;
            c->running = true;
            c->pid = c->proc.pid;
            if (L->procs) {
                fprintf(L->procs, "%s\t%s\t%d\n", c->file, c->name, c->pid);
                fflush(L->procs);
            }
        }
    }
    free(env);
    zps_argv_free(&args);
    if (out != fd)
        close(out);
    close(fd);
    return rc;
}

/*
 * Starts child c with the command line in c->argv, first writing it to cmds
 * (commands.txt, when open). `bad` says that building the command line ran
 * out of memory. False when the run has been aborted.
 */
/*
 * The files a run writes belong in its folder: a relative output path a
 * user hands on (--worker-arg=--save-params=final.bin) is taken relative to
 * the run folder on the child's host, and a relative input path relative to
 * the directory zps launch was started in, so that commands.txt runs from
 * anywhere. Launch's own paths are absolute already.
 */
static const char *const output_flags[] = {"save-params", "checkpoint-dir"};
static const char *const input_flags[] = {"data-dir", "resume-from", "key", "server-key",
                                          "authorized-keys"};

/* The value of flag `name` at a->v[i] ("--name=V" or "--name" "V"), as a
 * pointer into a and the index of the item holding it, or NULL. */
static char *flag_value_at(zps_argv_t *a, size_t i, const char *name, size_t *item)
{
    size_t len = strlen(name);
    const char *w = a->v[i];
    if (strncmp(w, "--", 2) != 0 || strncmp(w + 2, name, len) != 0)
        return NULL;
    if (w[2 + len] == '=') {
        *item = i;
        return a->v[i] + 2 + len + 1;
    }
    if (w[2 + len] == '\0' && i + 1 < a->n) {
        *item = i + 1;
        return a->v[i + 1];
    }
    return NULL;
}

/* Rewrites relative values of `flags` in a to base/value. 0 or ZPS_ENOMEM. */
static int rebase_paths(zps_argv_t *a, const char *const *flags, size_t nflags, const char *base)
{
    for (size_t i = 0; i < a->n; i++)
        for (size_t f = 0; f < nflags; f++) {
            size_t item;
            char *v = flag_value_at(a, i, flags[f], &item);
            if (!v || !*v || *v == '/')
                continue;
            char *w = NULL;
            if (item == i ? asprintf(&w, "--%s=%s/%s", flags[f], base, v) < 0
                          : asprintf(&w, "%s/%s", base, v) < 0)
                return ZPS_ENOMEM;
            free(a->v[item]);
            a->v[item] = w;
            i = item;
            break;
        }
    return 0;
}

/* Says once where each relative output path of the user's flags goes. */
static void say_output_paths(launch_t *L)
{
    const zps_argv_t *lists[2] = {&L->o->worker_args, &L->o->server_args};
    for (int k = 0; k < 2; k++) {
        zps_argv_t *a = (zps_argv_t *)lists[k];
        for (size_t i = 0; i < a->n; i++)
            for (size_t f = 0; f < sizeof(output_flags) / sizeof(output_flags[0]); f++) {
                size_t item;
                const char *v = flag_value_at(a, i, output_flags[f], &item);
                if (v && *v && *v != '/' && L->hosts.n)
                    fprintf(stderr, "zps launch: --%s %s: in the run folder on its host\n",
                            output_flags[f], v);
                else if (v && *v && *v != '/')
                    fprintf(stderr, "zps launch: --%s %s: written to %s/%s/%s\n", output_flags[f],
                            v, L->o->runs_dir, L->name, v);
            }
    }
}

static bool start_child(launch_t *L, child_t *c, FILE *cmds, int bad)
{
    char cwd[PATH_MAX];
    /* A command's words are its own: launch knows none of its flags. */
    bool ours = c->server || !L->o->command;
    bad = bad || (ours && rebase_paths(&c->argv, output_flags,
                                       sizeof(output_flags) / sizeof(output_flags[0]),
                                       c->host ? c->host->dir : L->dir));
    if (!bad && ours && !c->host && getcwd(cwd, sizeof(cwd)))
        bad =
            rebase_paths(&c->argv, input_flags, sizeof(input_flags) / sizeof(input_flags[0]), cwd);
    if (bad) {
        abort_run(L, "failed", NULL, "out of memory");
        return false;
    }
    if (cmds) {
        /* A command's line starts with its variables, NAME=VALUE, as a
         * shell would run it (the run's environment is above, once). */
        zps_argv_t line = {0};
        fprintf(cmds, "# %s\n", c->name);
        if (zps_argv_extend(&line, &c->env) == 0 && zps_argv_extend(&line, &c->argv) == 0)
            zps_argv_write(cmds, &line);
        zps_argv_free(&line);
        fflush(cmds);
    }
    if (spawn(L, c) != 0) {
        abort_run(L, "failed", c, "%s could not be started", c->name);
        return false;
    }
    return true;
}

/* The path of the run's key file `name` as child c sees it: RUN/keys, or its host's copy. */
static const char *key_path(const launch_t *L, const child_t *c, const char *name, char *buf,
                            size_t size)
{
    snprintf(buf, size, "%s/keys/%s", c->host ? c->host->dir : L->dir, name);
    return buf;
}

/*
 * -- COMMAND: the command once per rank, in place of zps-worker, the cluster
 * in its environment (docs/launch.md, "Your own command"): the same
 * endpoints, metrics file and key files a worker of that rank would get as
 * flags. `list` is the endpoints in shard order, comma-separated.
 */
static void start_commands(launch_t *L, const char *list)
{
    const zps_launch_opts_t *o = L->o;
    for (uint32_t r = 0; r < o->workers; r++) {
        child_t *c = &L->workers[r];
        zps_argv_t *e = &c->env;
        int bad = zps_argv_push(&c->argv, L->command);
        for (size_t i = 1; i < o->command_n; i++)
            bad = bad || zps_argv_push(&c->argv, o->command[i]);
        bad = bad || zps_argv_pushf(e, "ZPS_SERVERS=%s", list) ||
              zps_argv_pushf(e, "ZPS_RANK=%u", r) ||
              zps_argv_pushf(e, "ZPS_WORKERS=%u", o->workers) ||
              zps_argv_pushf(e, "ZPS_METRICS=%s", c->host ? c->far_metrics : c->metrics_path);
        if (L->keys) {
            char name[64], key[PATH_MAX + 128], pub[PATH_MAX + 128];
            snprintf(name, sizeof(name), "worker-%u.key", r);
            bad = bad || zps_argv_pushf(e, "ZPS_KEY=%s", key_path(L, c, name, key, sizeof(key))) ||
                  zps_argv_pushf(e, "ZPS_SERVER_KEY=%s",
                                 key_path(L, c, "server.pub", pub, sizeof(pub)));
        }
        if (!start_child(L, c, L->cmds, bad))
            break;
    }
}

static void start_workers(launch_t *L)
{
    zps_argv_t eps = {0};
    char list[8192];
    size_t n = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < L->o->servers; i++) {
        int k = snprintf(list + n, sizeof(list) - n, "%s%s", i ? "," : "", L->servers[i].endpoint);
        if (k > 0)
            n += (size_t)k;
        zps_argv_push(&eps, L->servers[i].endpoint);
    }
    zps_client_opts_t co;
    zps_client_opts_default(&co);
    co.worker = -1;
    co.timeout_ms = 2000;
    co.retry_ms = 500;
    char why[512];
    if (L->keys && zps_client_opts_set_keys(&co, L->keys->launch, L->keys->server_pub, why,
                                            sizeof(why)) != 0) {
        say(L, "no live statistics: %s", why);
    } else if (zps_client_new((const char *const *)eps.v, eps.n, &co, &L->client) != 0) {
        L->client = NULL; /* no live statistics; the run goes on */
    }
    zps_client_opts_clear(&co);
    zps_argv_free(&eps);
    if (L->o->command) {
        start_commands(L, list);
        return;
    }

    FILE *cmds = L->cmds;
    /* The evaluator first, so that its pull for the first evaluation clock
     * is parked before the workers get there. It gets the workers' flags
     * (model, data, clocks, --save-params...), not their stragglers. */
    child_t *e = L->evaluator;
    int ebad = zps_argv_push(&e->argv, L->worker_bin) || zps_argv_push(&e->argv, "--servers") ||
               zps_argv_push(&e->argv, list) || zps_argv_push(&e->argv, "--evaluator") ||
               zps_argv_push(&e->argv, "--workers") ||
               zps_argv_pushf(&e->argv, "%u", L->o->workers) ||
               zps_argv_push(&e->argv, "--metrics") ||
               zps_argv_push(&e->argv, e->host ? e->far_metrics : e->metrics_path) ||
               zps_argv_push(&e->argv, "--no-progress");
    /* With --keys each process gets the path of its own secret key, never the key. */
    char key[PATH_MAX + 128], pub[PATH_MAX + 128];
    if (L->keys)
        ebad = ebad || zps_argv_push(&e->argv, "--key") ||
               zps_argv_push(&e->argv, key_path(L, e, "evaluator.key", key, sizeof(key))) ||
               zps_argv_push(&e->argv, "--server-key") ||
               zps_argv_push(&e->argv, key_path(L, e, "server.pub", pub, sizeof(pub)));
    ebad = ebad || zps_argv_extend(&e->argv, &L->o->worker_args);
    if (!start_child(L, e, cmds, ebad))
        return;
    for (uint32_t r = 0; r < L->o->workers; r++) {
        child_t *c = &L->workers[r];
        zps_argv_t *a = &c->argv;
        int bad = zps_argv_push(a, L->worker_bin) || zps_argv_push(a, "--servers") ||
                  zps_argv_push(a, list) || zps_argv_push(a, "--rank") ||
                  zps_argv_pushf(a, "%u", r) || zps_argv_push(a, "--workers") ||
                  zps_argv_pushf(a, "%u", L->o->workers) || zps_argv_push(a, "--metrics") ||
                  zps_argv_push(a, c->host ? c->far_metrics : c->metrics_path) ||
                  zps_argv_push(a, "--no-progress");
        /* The evaluator evaluates: no training worker stops for it. */
        if (r == 0)
            bad = bad || zps_argv_push(a, "--no-eval");
        if (L->keys) {
            char name[64];
            snprintf(name, sizeof(name), "worker-%u.key", r);
            bad = bad || zps_argv_push(a, "--key") ||
                  zps_argv_push(a, key_path(L, c, name, key, sizeof(key))) ||
                  zps_argv_push(a, "--server-key") ||
                  zps_argv_push(a, key_path(L, c, "server.pub", pub, sizeof(pub)));
        }
        bad = bad || zps_argv_extend(a, &L->o->worker_args);
        for (size_t s = 0; s < L->o->spec_count; s++)
            if (zps_rank_set_has(&L->o->specs[s].ranks, r))
                bad = bad || zps_argv_extend(a, &L->o->specs[s].flags);
        if (!start_child(L, c, cmds, bad))
            break;
    }
}

static void start_servers(launch_t *L)
{
    FILE *cmds = L->cmds;
    for (uint32_t i = 0; i < L->o->servers; i++) {
        child_t *c = &L->servers[i];
        zps_argv_t *a = &c->argv;
        /* Over ssh: the address of its host as the hosts file names it, and
         * a known port, so that every worker can be told it in advance. */
        int bad = zps_argv_push(a, L->server_bin) || zps_argv_push(a, "--listen") ||
                  (c->host ? zps_argv_pushf(a, "tcp://%s:%u", c->host->name,
                                            zps_launch_hosts_port(&L->hosts, i))
                           : zps_argv_push(a, "tcp://127.0.0.1:*")) ||
                  zps_argv_push(a, "--endpoint-file") ||
                  zps_argv_push(a, c->host ? c->far_endpoint : c->endpoint_path) ||
                  zps_argv_push(a, "--shard") || zps_argv_pushf(a, "%u/%u", i, L->o->servers) ||
                  zps_argv_push(a, "--workers") || zps_argv_pushf(a, "%u", L->o->workers) ||
                  zps_argv_push(a, "--mode") || zps_argv_push(a, L->o->mode);
        if (strcmp(L->o->mode, "ssp") == 0)
            bad =
                bad || zps_argv_push(a, "--staleness") || zps_argv_pushf(a, "%u", L->o->ssp_bound);
        if (L->o->backup)
            bad = bad || zps_argv_push(a, "--backup-workers") ||
                  zps_argv_pushf(a, "%u", L->o->backup);
        if (L->o->lr_staleness)
            bad = bad || zps_argv_push(a, "--lr-staleness") || zps_argv_push(a, L->o->lr_staleness);
        if (L->o->delay_comp)
            bad = bad || zps_argv_push(a, "--delay-compensation") ||
                  zps_argv_push(a, L->o->delay_comp);
        char key[PATH_MAX + 128], auth[PATH_MAX + 128];
        if (L->keys)
            bad = bad || zps_argv_push(a, "--key") ||
                  zps_argv_push(a, key_path(L, c, "server.key", key, sizeof(key))) ||
                  zps_argv_push(a, "--authorized-keys") ||
                  zps_argv_push(a, key_path(L, c, "authorized_keys", auth, sizeof(auth)));
        bad = bad || zps_argv_extend(a, &L->o->server_args);
        if (!start_child(L, c, cmds, bad))
            break;
    }
}

/*
 * A far server has bound what its host's name resolves to there: a loopback
 * address (Debian maps a machine's own name to 127.0.1.1) cannot be reached
 * from the other hosts. Aborts the run when so. Then the endpoint workers
 * are given is the host's name as the hosts file has it.
 */
static bool far_endpoint_ok(launch_t *L, child_t *c)
{
    const char *addr = c->endpoint + (strncmp(c->endpoint, "tcp://", 6) == 0 ? 6 : 0);
    bool loopback = strncmp(addr, "127.", 4) == 0 || strncmp(addr, "[::1]", 5) == 0;
    bool named_loopback = strncmp(c->host->name, "127.", 4) == 0 ||
                          strcmp(c->host->name, "localhost") == 0 ||
                          strcmp(c->host->name, "::1") == 0;
    if (loopback && !named_loopback) {
        abort_run(L, "failed", c,
                  "%s on %s listens on %s: the name %s resolves to a loopback address on "
                  "that host, which no other host can reach; give its address in the hosts file",
                  c->name, c->host->name, c->endpoint, c->host->name);
        return false;
    }
    snprintf(c->endpoint, sizeof(c->endpoint), "tcp://%s:%u", c->host->name,
             zps_launch_hosts_port(&L->hosts, c->index));
    return true;
}

/* True once every server has written its endpoint file. */
static bool servers_listening(launch_t *L)
{
    for (uint32_t i = 0; i < L->o->servers; i++) {
        child_t *c = &L->servers[i];
        if (c->endpoint[0])
            continue;
        FILE *f = read_in_run(L, c->endpoint_name);
        if (!f)
            return false;
        bool ok = fgets(c->endpoint, sizeof(c->endpoint), f) != NULL;
        fclose(f);
        c->endpoint[strcspn(c->endpoint, "\r\n")] = '\0';
        if (!ok || !c->endpoint[0]) {
            c->endpoint[0] = '\0';
            return false;
        }
        if (c->host && !far_endpoint_ok(L, c))
            return false;
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
    /* A far child's status is ssh's: the far side's (launch_remote.h), or
     * 255 when ssh itself failed or lost the connection. */
    int st = (int)c->exit_status;
    if (c->host && !c->term_signal && st == 255)
        snprintf(buf, size, "lost its ssh connection to %s (ssh exited with status 255)",
                 c->host->name);
    else if (c->host && !c->term_signal && st == 127)
        snprintf(buf, size, "could not be started on %s (status 127)", c->host->name);
    else if (c->host && !c->term_signal && st > 128 && st < 128 + 65)
        snprintf(buf, size, "was killed by signal %d (%s) on %s", st - 128, strsignal(st - 128),
                 c->host->name);
    else if (c->host && !c->term_signal)
        snprintf(buf, size, "exited with status %d on %s", st, c->host->name);
    else if (c->term_signal == SIGKILL && !c->killed && zps_oom_rose(&c->L->oom_before))
        snprintf(buf, size,
                 "was killed by the kernel's out-of-memory killer (signal 9; the out-of-memory "
                 "kill count rose during the run)");
    else if (c->term_signal)
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
    close_ctl(c);
    bool clean = exit_status == 0 && term_signal == 0;
    char how[400];
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
        else if (!clean && !c->killed && exit_status == 3 && term_signal == 0)
            say(L,
                "%s (pid %d) exited with status 3 while shutting down: it could not save its "
                "state to its --checkpoint-dir (its log says why)",
                c->name, c->pid);
        else if (!clean && !c->killed)
            say(L, "%s (pid %d) %s while shutting down", c->name, c->pid, how);
    } else if (!clean && !(c->stopped_by_us && L->training_done)) {
        abort_run(L, "failed", c, "%s (pid %d) %s", c->name, c->pid, how);
    } else {
        if (c->evaluator && clean) {
            L->training_done = true;
            L->finish_ns = zps_now_ns();
        }
        if (c->stopped_by_us && L->stopped_at_target)
            say(L, "%s stopped: the target accuracy was reached", c->name);
        else if (c->stopped_by_us && L->training_done)
            say(L, "%s stopped after training ended (its remaining pushes would be dropped)",
                c->name);
        bool workers_done = true;
        for (uint32_t i = 0; i < L->o->workers; i++)
            if (L->workers[i].running || !L->workers[i].spawned)
                workers_done = false;
        if (workers_done && !L->workers_done_ns)
            L->workers_done_ns = zps_now_ns();
        /* A command's run has no evaluator: it ends with its ranks. */
        bool all_done =
            workers_done && (!L->evaluator || (!L->evaluator->running && L->evaluator->spawned));
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
            uv_timer_set_repeat(t, TICK_MS);
            start_workers(L);
        } else if (secs_since(L->phase_ns) > STARTUP_TIMEOUT_S && L->phase != PH_ABORT) {
            /* Name them, and where they run. */
            char who[256] = "";
            size_t n = 0;
            for (uint32_t i = 0; i < L->o->servers && n < sizeof(who) - 1; i++) {
                const child_t *c = &L->servers[i];
                if (c->endpoint[0])
                    continue;
                int k = snprintf(who + n, sizeof(who) - n, "%s%s%s%s", n ? ", " : "", c->name,
                                 c->host ? " on " : "", c->host ? c->host->name : "");
                n += k > 0 ? (size_t)k : 0;
            }
            abort_run(L, "failed", NULL, "not listening after %.0f s: %s (their logs say why)",
                      STARTUP_TIMEOUT_S, who);
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
        if (L->workers_done_ns && L->evaluator && L->evaluator->running &&
            secs_since(L->workers_done_ns) > EVALUATOR_GRACE_S)
            abort_run(L, "failed", L->evaluator,
                      "the evaluator has not evaluated the final model %.0f s after the last "
                      "worker ended",
                      EVALUATOR_GRACE_S);
    }
    /* --stop-at: the evaluator has seen the target before the final model;
     * the run ends as a finished one, its workers stopped as after the
     * final evaluation. */
    double reached_s;
    uint64_t reached_clock;
    if (L->phase == PH_TRAINING && L->o->stop_at > 0 && !L->stopped_at_target &&
        !L->training_done &&
        zps_runstats_target(L->rs, L->o->stop_at, &reached_s, &reached_clock)) {
        L->stopped_at_target = true;
        L->training_done = true;
        L->finish_ns = zps_now_ns();
        L->finish_stopped = true;
        say(L, "test accuracy %g reached at clock %llu (%.2f s): stopping training (--stop-at)",
            L->o->stop_at, (unsigned long long)reached_clock, reached_s);
        stop_children(L, false, true);
    }
    if (L->o->time_limit_s > 0 && now_s > L->o->time_limit_s && L->phase != PH_ABORT &&
        L->phase != PH_SHUTDOWN)
        abort_run(L, "timeout", NULL, "the time limit of %g s has passed (stopping at %.2f s)",
                  L->o->time_limit_s, now_s);
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
              signum == SIGINT    ? "SIGINT"
              : signum == SIGTERM ? "SIGTERM"
              : signum == SIGHUP  ? "SIGHUP"
                                  : strsignal(signum));
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
    if (find_in_path(name, path, sizeof(path)) == 0 && realpath(path, out))
        return 0;
    return ZPS_EINVAL;
}

/*
 * Creates the run folder, in a runs directory no other user can change
 * (launch_rundir.h), and opens it as L->dirfd; a default name gets -2,
 * -3... when taken. An unsafe runs directory is refused (exit 2) before
 * anything is made in it.
 */
static int make_run_dir(launch_t *L)
{
    const zps_launch_opts_t *o = L->o;
    char why[PATH_MAX * 2 + 512];
    char runs[PATH_MAX];
    int runs_fd = -1;
    int rc = zps_launch_runs_open(o->runs_dir, &runs_fd, runs, sizeof(runs), why, sizeof(why));
    if (rc != 0) {
        fprintf(stderr, "zps launch: %s; not started\n", why);
        return rc == ZPS_EDENIED ? ZPS_LAUNCH_EXIT_USAGE : ZPS_LAUNCH_EXIT_FAILED;
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
            snprintf(base, sizeof(base), "ssp%u-%s", o->ssp_bound, stamp);
        else if (o->backup)
            snprintf(base, sizeof(base), "bsp-b%u-%s", o->backup, stamp);
        else
            snprintf(base, sizeof(base), "%s-%s", o->mode, stamp);
    }
    /* A name that is taken, whatever it is (a folder, a link someone
     * planted), is never entered: mkdirat must make the folder. */
    char path[PATH_MAX];
    rc = ZPS_EINVAL;
    for (int k = 1; k < 1000 && rc == ZPS_EINVAL; k++) {
        if (k == 1)
            snprintf(L->name, sizeof(L->name), "%s", base);
        else
            snprintf(L->name, sizeof(L->name), "%s-%d", base, k);
        snprintf(path, sizeof(path), "%s/%s", o->runs_dir, L->name);
        rc = zps_launch_rundir_make(runs_fd, L->name, path, &L->dirfd, why, sizeof(why));
        if (rc == ZPS_EINVAL && o->name)
            break;
    }
    close(runs_fd);
    if (rc == ZPS_EINVAL) {
        fprintf(stderr, "zps launch: %s (choose another --name)\n", why);
        return ZPS_LAUNCH_EXIT_USAGE;
    }
    if (rc != 0) {
        fprintf(stderr, "zps launch: %s\n", why);
        return rc == ZPS_EDENIED ? ZPS_LAUNCH_EXIT_USAGE : ZPS_LAUNCH_EXIT_FAILED;
    }
    /* Its real path: every directory on the way is checked, none a link. */
    if ((size_t)snprintf(L->dir, sizeof(L->dir), "%s%s%s", runs, strcmp(runs, "/") ? "/" : "",
                         L->name) >= sizeof(L->dir)) {
        fprintf(stderr, "zps launch: %s: %s\n", path, strerror(ENAMETOOLONG));
        return ZPS_LAUNCH_EXIT_FAILED;
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
    snprintf(c->log_name, sizeof(c->log_name), "%s.log", c->file);
    snprintf(c->endpoint_name, sizeof(c->endpoint_name), "%s.endpoint", c->file);
    snprintf(c->metrics_name, sizeof(c->metrics_name), "%s.jsonl", c->file);
    snprintf(c->log_path, sizeof(c->log_path), "%s/%s", L->dir, c->log_name);
    snprintf(c->endpoint_path, sizeof(c->endpoint_path), "%s/%s", L->dir, c->endpoint_name);
    snprintf(c->metrics_path, sizeof(c->metrics_path), "%s/%s", L->dir, c->metrics_name);
    if (L->hosts.n) {
        c->host = server ? zps_launch_hosts_server(&L->hosts, index)
                         : zps_launch_hosts_worker(&L->hosts, index);
        snprintf(c->far_endpoint, sizeof(c->far_endpoint), "%s/%s.endpoint", c->host->dir, c->file);
        snprintf(c->far_metrics, sizeof(c->far_metrics), "%s/%s.jsonl", c->host->dir, c->file);
    }
}

/* ---- the end ---- */

static void print_tail_of_log(const child_t *c)
{
    FILE *f = read_in_run(c->L, c->log_name);
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
    const zps_launch_opts_t *o = L->o;
    double wall = secs_since(L->start_ns);
    const char *status = L->status ? L->status : "ok";

    zps_run_info_t info;
    memset(&info, 0, sizeof(info));
    info.name = L->name;
    info.mode = o->mode;
    info.staleness_bound = o->ssp_bound;
    info.backup_workers = o->backup;
    info.lr_staleness = o->lr_staleness;
    info.delay_comp = o->delay_comp ? strtod(o->delay_comp, NULL) : 0.0;
    info.stop_at = o->stop_at;
    info.stop_reason = L->stopped_at_target ? "target" : NULL;
    info.shared = zps_launch_shared(o);
    info.targets = o->targets;
    info.target_count = o->target_count;
    info.wall_seconds = wall;
    info.status = status;
    info.failed = L->failed[0] ? L->failed : NULL;
    info.server_args = (const char *const *)o->server_args.v;
    info.server_arg_count = o->server_args.n;
    info.environment = (const char *const *)L->env.v;
    info.environment_count = L->env.n;
    /* summary.json through a temporary renamed into place: a reader never
     * sees half of it, and a name planted there is replaced, not followed. */
    char *summary = zps_runstats_summary(L->rs, &info);
    bool wrote =
        summary && zps_file_replace_at(L->dirfd, "summary.json", summary, strlen(summary), 0644) == 0;
    if (!wrote)
        say(L, "cannot write %s/summary.json: %s", L->dir, summary ? strerror(errno) : "no memory");
    free(summary);
    if (zps_runstats_write_tables(L->rs, &info, L->dirfd) != 0)
        say(L, "cannot write the tables in %s", L->dir);
    zps_plot_run_figures(L->dirfd, L->dir); /* accuracy.png, loss.png; interrupted runs too */

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
        return L->exit_code ? L->exit_code : ZPS_LAUNCH_EXIT_FAILED;
    }
    zps_runstats_result_t res;
    zps_runstats_result(L->rs, &res);
    if (isfinite(res.final_accuracy))
        printf("final test accuracy %.4f (loss %.4f) after %llu clocks: %s, %u server%s x %u "
               "worker%s, %.1f s training, %.0f examples/s; run folder %s\n",
               res.final_accuracy, res.final_loss, (unsigned long long)res.final_clock, o->mode,
               o->servers, o->servers == 1 ? "" : "s", o->workers, o->workers == 1 ? "" : "s",
               res.train_seconds, res.examples_per_second, rel);
    else if (isfinite(res.final_loss))
        printf("final test loss %.6g after %llu clocks: %s, %u server%s x %u worker%s, %.1f s "
               "training; run folder %s\n",
               res.final_loss, (unsigned long long)res.final_clock, o->mode, o->servers,
               o->servers == 1 ? "" : "s", o->workers, o->workers == 1 ? "" : "s",
               res.train_seconds, rel);
    else if (L->stopped_at_target) {
        double sec = NAN;
        uint64_t clock = 0;
        zps_runstats_target(L->rs, o->stop_at, &sec, &clock);
        printf("test accuracy %g reached after %.1f s of training (clock %llu): stopped there "
               "(--stop-at): %s, %u server%s x %u worker%s, %.0f examples/s; run folder %s\n",
               o->stop_at, sec, (unsigned long long)clock, o->mode, o->servers,
               o->servers == 1 ? "" : "s", o->workers, o->workers == 1 ? "" : "s",
               res.examples_per_second, rel);
    } else if (o->command)
        printf("every command exited 0; no final test accuracy was reported (rank 0's metrics "
               "have no eval line with \"final\": true): %s, %u server%s x %u worker%s; run "
               "folder %s\n",
               o->mode, o->servers, o->servers == 1 ? "" : "s", o->workers,
               o->workers == 1 ? "" : "s", rel);
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

/* "3" or "3-5" for count numbers from first. */
static void span(char *buf, size_t size, uint32_t first, uint32_t count)
{
    if (count == 1)
        snprintf(buf, size, "%u", first);
    else
        snprintf(buf, size, "%u-%u", first, first + count - 1);
}

/*
 * The program of -- COMMAND as it is started, into out[size]. Here: a name
 * without '/' looked up in PATH, a path as it is (relative to the folder
 * launch runs in, where the command runs too); it must be an executable
 * file. With --hosts the command runs on other hosts in their run folders:
 * a path is made absolute against this folder, a name is left to
 * /usr/bin/env's PATH there. 0 or ZPS_EINVAL.
 */
static int command_path(const zps_launch_opts_t *o, bool far, char *out, size_t size)
{
    const char *cmd = o->command[0];
    if (!*cmd)
        return ZPS_EINVAL;
    if (!far)
        return find_in_path(cmd, out, size);
    char cwd[PATH_MAX];
    if (!strchr(cmd, '/') || cmd[0] == '/')
        return snprintf(out, size, "%s", cmd) < (int)size ? 0 : ZPS_EINVAL;
    while (strncmp(cmd, "./", 2) == 0)
        cmd += 2;
    if (!getcwd(cwd, sizeof(cwd)) || snprintf(out, size, "%s/%s", cwd, cmd) >= (int)size)
        return ZPS_EINVAL;
    return 0;
}

/* --hosts: each host's folder and keys, and a line per host saying what runs there. */
static int prepare_hosts(launch_t *L)
{
    zps_launch_hosts_set_dir(&L->hosts, L->dir);
    char hosts_dir[PATH_MAX + 16];
    snprintf(hosts_dir, sizeof(hosts_dir), "%s/hosts", L->dir);
    int hosts_fd = -1;
    if (mkdirat(L->dirfd, "hosts", 0755) != 0 ||
        (hosts_fd = openat(L->dirfd, "hosts", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
            0) {
        fprintf(stderr, "zps launch: cannot create %s: %s\n", hosts_dir, strerror(errno));
        return ZPS_EIO;
    }
    for (size_t i = 0; i < L->hosts.n; i++) {
        const zps_launch_host_t *h = &L->hosts.v[i];
        char sv[64], sp[64], wk[64];
        span(sv, sizeof(sv), h->first_server, h->servers);
        span(sp, sizeof(sp), L->hosts.port, h->servers);
        span(wk, sizeof(wk), h->first_worker, h->workers);
        fprintf(stderr, "zps launch: on %s: ", h->name);
        if (h->servers)
            fprintf(stderr, "server%s %s (port%s %s)", h->servers > 1 ? "s" : "", sv,
                    h->servers > 1 ? "s" : "", sp);
        if (h->workers)
            fprintf(stderr, "%sworker%s %s%s", h->servers ? ", " : "", h->workers > 1 ? "s" : "",
                    wk,
                    !L->o->command && zps_launch_hosts_worker(&L->hosts, L->o->workers) == h
                        ? ", the evaluator"
                        : "");
        fprintf(stderr, "%s\n", h->servers || h->workers ? "" : "nothing");
    }
    char why[600];
    /* What starts a worker there: zps-worker, or the command's program
     * (env(1) when PATH finds it there, command_path). */
    const char *wbin = !L->o->command            ? L->worker_bin
                       : strchr(L->command, '/') ? L->command
                                                 : "/usr/bin/env";
    int rc = zps_launch_hosts_prepare(&L->hosts, L->self, L->keys->dir, L->server_bin, wbin,
                                      hosts_fd, hosts_dir, why, sizeof(why));
    close(hosts_fd);
    if (rc != 0) {
        fprintf(stderr, "zps launch: cannot set up host %s\n", why);
        return ZPS_EIO;
    }
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
    if (argc >= 2 && strcmp(argv[1], "--exec-remote") == 0)
        return zps_launch_exec_remote(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "--exec-prepare") == 0)
        return zps_launch_exec_prepare(argc, argv);

    zps_launch_opts_t o;
    zps_launch_hosts_t hosts;
    memset(&hosts, 0, sizeof(hosts));
    int ex = zps_launch_opts_parse(argc, argv, &o);
    if (ex == 0 && o.hosts) {
        /* The hosts file decides the counts; the checks that need them come after. */
        char why[512];
        int rc = zps_launch_hosts_read(o.hosts, o.servers_set ? o.servers : 0,
                                       o.workers_set ? o.workers : 0, o.servers, o.workers, &hosts,
                                       why, sizeof(why));
        if (rc == 0)
            rc = zps_launch_hosts_set_ssh(&hosts, o.ssh);
        if (rc == ZPS_ENOMEM) {
            ex = ZPS_LAUNCH_EXIT_FAILED;
        } else if (rc) {
            fprintf(stderr, "zps launch: %s\n", why);
            ex = ZPS_LAUNCH_EXIT_USAGE;
        } else {
            hosts.port = o.port;
            o.servers = hosts.servers;
            o.workers = hosts.workers;
            ex = zps_launch_opts_check_counts(&o);
        }
    }
    char cmd_path[PATH_MAX] = "";
    if (ex == 0 && o.command && command_path(&o, o.hosts != NULL, cmd_path, sizeof(cmd_path))) {
        fprintf(stderr, "zps launch: cannot find the command '%s': not an executable file%s\n",
                o.command[0], strchr(o.command[0], '/') ? "" : " in PATH");
        ex = ZPS_LAUNCH_EXIT_USAGE;
    }
    if (ex == 0)
        ex = zps_launch_opts_env(&o, environ);
    if (ex == 0)
        ex = zps_launch_opts_check(&o);
    if (ex == 0)
        ex = zps_launch_plan(&o);
    /* Over ssh every host has its own memory; this host holds none of it. A
     * command's model is its own: launch has nothing to estimate. */
    if (ex == 0 && !o.hosts && !o.no_memory_check && !o.command)
        ex = zps_launch_mem_check(&o);
    if (ex) {
        zps_launch_hosts_free(&hosts);
        zps_launch_opts_free(&o);
        return ex < 0 ? 0 : ex;
    }

    launch_t *L = calloc(1, sizeof(*L));
    if (!L) {
        zps_launch_hosts_free(&hosts);
        zps_launch_opts_free(&o);
        return ZPS_LAUNCH_EXIT_FAILED;
    }
    L->o = &o;
    L->dirfd = -1;
    zps_oom_counts_read(&L->oom_before);
    L->hosts = hosts;
    ex = ZPS_LAUNCH_EXIT_FAILED;
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
        ex = ZPS_LAUNCH_EXIT_USAGE;
        goto out;
    }
    snprintf(L->command, sizeof(L->command), "%s", cmd_path);
    if (!o.command && find_binary(o.worker_bin, "ZPS_WORKER_BIN", self_dir, wrel, "zps-worker",
                                  L->worker_bin, sizeof(L->worker_bin))) {
        fprintf(stderr, "zps launch: cannot find zps-worker %s (give --worker-bin)\n",
                o.worker_bin ? o.worker_bin : "beside this zps or in PATH");
        ex = ZPS_LAUNCH_EXIT_USAGE;
        goto out;
    }
    if ((ex = make_run_dir(L)) != 0)
        goto out;
    say_output_paths(L);
    ex = ZPS_LAUNCH_EXIT_FAILED;
    if (o.keys) {
        char why[512];
        L->keys = calloc(1, sizeof(*L->keys));
        if (!L->keys)
            goto out;
        if (zps_launch_keys_make(L->dirfd, L->dir, L->name, o.workers, L->keys, why,
                                 sizeof(why)) != 0) {
            fprintf(stderr, "zps launch: cannot make the run's keys: %s\n", why);
            goto out;
        }
    }
    if (L->hosts.n && prepare_hosts(L) != 0)
        goto out;
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
    L->evaluator = o.command ? NULL : &L->workers[o.workers];

    /* Every ZPS_* variable changes what some process does (the servers',
     * the workers', the test harness's switches): each is named here, passed
     * on by inheritance, and recorded in commands.txt and summary.json. The
     * key variables that --keys replaces are named, recorded in commands.txt
     * and taken out of the environment the children inherit. */
    for (size_t i = 0; i < o.env_set_aside.n; i++) {
        char var[64];
        snprintf(var, sizeof(var), "%.*s", (int)strcspn(o.env_set_aside.v[i], "="),
                 o.env_set_aside.v[i]);
        unsetenv(var);
    }
    if (o.env_set_aside.n) {
        fprintf(stderr, "zps launch: the run's own keys replace");
        for (size_t i = 0; i < o.env_set_aside.n; i++)
            fprintf(stderr, " %s", o.env_set_aside.v[i]);
        fprintf(stderr, " (--keys): not passed on\n");
    }
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "ZPS_", 4) == 0)
            zps_argv_push(&L->env, *e);
    if (L->env.n) {
        fprintf(stderr, "zps launch: the environment changes this run:");
        for (size_t i = 0; i < L->env.n; i++)
            fprintf(stderr, " %s", L->env.v[i]);
        fprintf(stderr, L->hosts.n ? " (passed on to every process, over ssh through env(1))\n"
                                   : " (passed on to every process)\n");
    }

    /* The run's own files, each new in the folder: nothing has started yet,
     * so one that cannot be made ends the run here. */
    FILE *cmds = L->cmds = create_in_run(L, "commands.txt");
    L->procs = create_in_run(L, "processes.tsv");
    L->stats_file = create_in_run(L, "stats.jsonl");
    if (!L->cmds || !L->procs || !L->stats_file)
        goto out;
    {
        fprintf(cmds, "# zps launch, run from %s\n",
                getcwd(self_dir, sizeof(self_dir)) ? self_dir : "?");
        zps_argv_t me = {0};
        zps_argv_push(&me, L->self);
        for (int i = 0; i < argc; i++)
            zps_argv_push(&me, argv[i]);
        zps_argv_write(cmds, &me);
        zps_argv_free(&me);
        for (size_t i = 0; i < L->env.n; i++)
            fprintf(cmds, "# environment, passed on to every process: %s\n", L->env.v[i]);
        for (size_t i = 0; i < o.env_set_aside.n; i++)
            fprintf(cmds, "# environment, not passed on (--keys: the run's own keys): %s\n",
                    o.env_set_aside.v[i]);
        fflush(cmds);
    }

    zps_progress_init(&L->progress, stderr, o.progress, o.progress_every_s);
    if (L->hosts.n)
        fprintf(stderr,
                "zps launch: %s, %u server%s, %u worker%s on %zu host%s over ssh; run folder "
                "%s/%s\n",
                o.mode, o.servers, o.servers == 1 ? "" : "s", o.workers, o.workers == 1 ? "" : "s",
                L->hosts.n, L->hosts.n == 1 ? "" : "s", o.runs_dir, L->name);
    else
        fprintf(stderr, "zps launch: %s, %u server%s, %u worker%s; run folder %s/%s\n", o.mode,
                o.servers, o.servers == 1 ? "" : "s", o.workers, o.workers == 1 ? "" : "s",
                o.runs_dir, L->name);
    if (L->keys)
        fprintf(stderr,
                "zps launch: CURVE on every connection; keys in %s/%s/keys (docs/security.md)\n",
                o.runs_dir, L->name);

    uv_loop_init(&L->loop);
    uv_timer_init(&L->loop, &L->tick);
    L->tick.data = L;
    /* A reader of our stdout that goes away (`zps launch | head -1`) must not
     * kill the launcher before it stops the cluster and writes the summary:
     * a write to it then fails with EPIPE, which the output ignores. The
     * children get their default dispositions back (uv_spawn resets them). */
    signal(SIGPIPE, SIG_IGN);
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&L->loop, &L->sig[i]);
        L->sig[i].data = L;
        uv_signal_start(&L->sig[i], on_signal, sigs[i]);
    }
    L->start_ns = L->phase_ns = zps_now_ns();
    L->phase = PH_SERVERS;
    start_servers(L);
    uv_timer_start(&L->tick, on_tick, STARTUP_TICK_MS, STARTUP_TICK_MS);
    maybe_finish(L);
    uv_run(&L->loop, UV_RUN_DEFAULT);
    uv_loop_close(&L->loop);
    ex = finish(L);

out:
    if (L->stats_file)
        fclose(L->stats_file);
    if (L->cmds)
        fclose(L->cmds);
    if (L->procs)
        fclose(L->procs);
    if (L->dirfd >= 0)
        close(L->dirfd);
    zps_client_free(L->client);
    for (uint32_t i = 0; L->servers && i < o.servers; i++) {
        zps_argv_free(&L->servers[i].argv);
        tail_close(&L->servers[i].log);
    }
    for (uint32_t i = 0; L->workers && i < kids(L); i++) {
        zps_argv_free(&L->workers[i].argv);
        zps_argv_free(&L->workers[i].env);
        tail_close(&L->workers[i].log);
        tail_close(&L->workers[i].metrics);
    }
    free(L->servers);
    free(L->workers);
    free(L->stats_json);
    free(L->stats_rc);
    free(L->keys);
    zps_launch_hosts_free(&L->hosts);
    zps_runstats_free(L->rs);
    zps_argv_free(&L->env);
    free(L);
    zps_launch_opts_free(&o);
    return ex;
}
