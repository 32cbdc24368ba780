/*
 * test_bsp_matrix.c - a BSP cluster and `zps-worker --local --workers W` end
 * with the same parameters BIT FOR BIT, over the whole product of
 *
 *   6 optimizers (sgd, momentum, nesterov, adam, adamw, adagrad)
 *   x 12 schedules (constant, step, cosine; each with and without a linear
 *     warm-up, and with and without weight decay)
 *   x 1, 2 and 3 shards x 1 and 4 workers          = 432 cluster runs.
 *
 * Both sides compute each worker's gradient on its own batch with the cpu
 * backend, take the servers' example-weighted mean in rank order and apply
 * the servers' optimizer code, so the same float operations happen in the
 * same order: anything but equal bits is a bug (a one-step schedule offset,
 * a different mean, a different summation order). A tolerance would hide
 * the last kind until a ReLU flips and training amplifies it.
 *
 * The data are a synthetic classification set (worker/data.c) and the model
 * mlp:16-8-4: 172 parameters, a multiple of neither 3 nor 16, so the shard
 * ranges are uneven. n = 42 examples cut for 4 workers give pieces of 10 and
 * 11 examples, 4 steps per epoch and last batches of 1 or 2 examples, so the
 * mean's weights differ and 12 clocks cross two epoch boundaries. The step
 * schedule halves lr every 4 steps, the cosine one reaches its floor
 * (lr / 10) after 10 of the 12 steps, warm-up lasts 3 steps.
 *
 * The --local reference does not depend on the shard count: it runs once per
 * (optimizer, schedule, W) and is compared with the three cluster runs.
 * Several such jobs run at once (threads, each driving its own processes on
 * free ports). Every mismatch is listed with its flags, the relative
 * difference max|a-b| / max|a| and the first differing index.
 *
 * Negative controls prove the comparison has power: for a few configurations
 * --local runs again with the schedule shifted by one step and with one
 * clock fewer, and each of those must differ from the cluster by more than
 * 1e-6 relative, so such a slip would be caught even by a tolerance check.
 * And no two of the 72 configurations may end with the same parameters: a
 * flag that changed nothing would leave part of the matrix untested.
 *
 * ZPS_MATRIX_QUICK=1 (the sanitizer build, where 432 cluster runs take four
 * minutes) runs every sixth configuration and those with controls: 15 of
 * the 72, 90 cluster runs, every optimizer and schedule among them.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "harness.h"
#include "timeutil.h"

#ifndef ZPS_WORKER_BIN
#error "ZPS_WORKER_BIN must name the zps-worker binary"
#endif

#define DATA "synthetic:n=42,test=30,dim=16,classes=4"
#define MODEL "mlp:16-8-4"
#define NPARAMS 172 /* 16*8 + 8 + 8*4 + 4 */
#define BATCH "3"
#define CLOCKS 12
#define STEP_EVERY 4
#define COSINE_STEPS 10
#define WARMUP 3
#define WEIGHT_DECAY "0.01"
#define CONTROL_TOL 1e-6 /* a control must differ by more than this, relative */

#define NOPT 6
#define NSCHED 12
#define NSHARDS 3 /* 1, 2 and 3 shards */
#define NWORKERS 2
#define MAXW 4
static const int worker_counts[NWORKERS] = {1, MAXW};

enum { SGD, MOMENTUM, NESTEROV, ADAM, ADAMW, ADAGRAD }; /* indices into optimizers */

static const struct optimizer {
    const char *name;
    const char *flags; /* without --lr */
    double lr;
} optimizers[NOPT] = {
    {"sgd", "--optimizer sgd", 0.1},
    {"momentum", "--optimizer momentum --momentum 0.9", 0.05},
    {"nesterov", "--optimizer nesterov --momentum 0.9", 0.05},
    {"adam", "--optimizer adam", 0.01},
    {"adamw", "--optimizer adamw", 0.01},
    {"adagrad", "--optimizer adagrad", 0.05},
};

enum { SCHED_CONSTANT, SCHED_STEP, SCHED_COSINE };
static const char *const sched_names[] = {"constant", "step", "cosine"};

/* One optimizer configuration, as the servers and --local take it. */
typedef struct config {
    int opt;   /* index into optimizers */
    int sched; /* SCHED_* */
    bool warmup, decay;
    /* The schedule's periods; a control shifts one of them. */
    int step_every, cosine_steps, warmup_steps;
} config_t;

/* Index of a configuration in the matrix: optimizer-major. */
static int config_index(int opt, int sched, bool warmup, bool decay)
{
    return ((opt * 3 + sched) * 2 + warmup) * 2 + decay;
}

static config_t config_at(int index)
{
    config_t c = {.decay = index % 2,
                  .warmup = index / 2 % 2,
                  .sched = index / 4 % 3,
                  .opt = index / 12,
                  .step_every = STEP_EVERY,
                  .cosine_steps = COSINE_STEPS,
                  .warmup_steps = WARMUP};
    return c;
}

/* "momentum cosine+warmup+wd" */
static void config_name(const config_t *c, char *out, size_t size)
{
    snprintf(out, size, "%s %s%s%s", optimizers[c->opt].name, sched_names[c->sched],
             c->warmup ? "+warmup" : "", c->decay ? "+wd" : "");
}

/* The optimizer flags, space separated: what a reader pastes to reproduce. */
static void config_flags(const config_t *c, char *out, size_t size)
{
    const struct optimizer *o = &optimizers[c->opt];
    int n = snprintf(out, size, "%s --lr %g", o->flags, o->lr);
    if (c->sched == SCHED_STEP)
        n += snprintf(out + n, size - n, " --schedule step --step-every %d --gamma 0.5",
                      c->step_every);
    else if (c->sched == SCHED_COSINE)
        n += snprintf(out + n, size - n, " --schedule cosine --cosine-steps %d --lr-min %g",
                      c->cosine_steps, o->lr / 10);
    if (c->warmup)
        n += snprintf(out + n, size - n, " --warmup %d", c->warmup_steps);
    if (c->decay)
        snprintf(out + n, size - n, " --weight-decay %s", WEIGHT_DECAY);
}

/* Splits `text` in place at spaces and appends the words to argv[*n]. */
static void append_words(char *text, const char **argv, int *n, int max)
{
    char *save = NULL;
    for (char *w = strtok_r(text, " ", &save); w && *n < max; w = strtok_r(NULL, " ", &save))
        argv[(*n)++] = w;
}

/* ---- results ---- */

typedef struct diff {
    bool identical; /* every bit equal */
    double rel;     /* max|ref - got| / max|ref|; INFINITY when non-finite */
    size_t first;   /* first index whose bits differ */
    float ref_first, got_first;
} diff_t;

static void compare(const float *ref, const float *got, size_t n, diff_t *d)
{
    double max_abs = 0, max_diff = 0;
    bool finite = true;
    d->first = n;
    for (size_t i = 0; i < n; i++) {
        if (d->first == n && memcmp(&ref[i], &got[i], sizeof(float)) != 0)
            d->first = i;
        if (!isfinite(ref[i]) || !isfinite(got[i]))
            finite = false;
        double a = fabs((double)ref[i]), e = fabs((double)ref[i] - (double)got[i]);
        max_abs = a > max_abs ? a : max_abs;
        max_diff = e > max_diff ? e : max_diff;
    }
    d->identical = d->first == n;
    d->rel = !finite ? INFINITY : max_abs > 0 ? max_diff / max_abs : max_diff > 0 ? INFINITY : 0;
    if (!d->identical) {
        d->ref_first = ref[d->first];
        d->got_first = got[d->first];
    }
}

/* One cluster run against its --local reference. */
typedef struct outcome {
    bool done;
    char error[512]; /* a process that failed, and why; empty when all ran */
    diff_t diff;
} outcome_t;

static outcome_t outcomes[NOPT * NSCHED][NWORKERS][NSHARDS];

/* The --local references, kept to prove every flag of the matrix has an effect. */
static float refs[NOPT * NSCHED][NWORKERS][NPARAMS];
static bool have_refs[NOPT * NSCHED][NWORKERS];
static bool quick; /* ZPS_MATRIX_QUICK: a subset of the configurations (selected()) */

/* A negative control: --local with a shifted schedule or a clock fewer. */
typedef struct control {
    int opt, sched;
    bool warmup;
    int shift; /* SHIFT_* */
    /* filled in by the run */
    bool done;
    char error[512];
    diff_t diff;
} control_t;

enum { SHIFT_SCHEDULE, SHIFT_CLOCK };

/*
 * Each control shifts its configuration's schedule by one step
 * (--cosine-steps 11, --step-every 5 or --warmup 4) or runs one clock fewer
 * (--clocks 11), with 4 workers, and is compared with that configuration's
 * cluster.
 */
#define CONTROL_WORKERS 1 /* index into worker_counts: 4 workers */
static control_t controls[] = {
    {.opt = SGD, .sched = SCHED_COSINE, .shift = SHIFT_SCHEDULE},
    {.opt = SGD, .sched = SCHED_COSINE, .shift = SHIFT_CLOCK},
    {.opt = MOMENTUM, .sched = SCHED_STEP, .shift = SHIFT_SCHEDULE},
    {.opt = MOMENTUM, .sched = SCHED_STEP, .shift = SHIFT_CLOCK},
    {.opt = ADAM, .sched = SCHED_CONSTANT, .warmup = true, .shift = SHIFT_SCHEDULE},
    {.opt = ADAM, .sched = SCHED_CONSTANT, .warmup = true, .shift = SHIFT_CLOCK},
};
#define NCONTROLS (sizeof(controls) / sizeof(controls[0]))

/* The flags a control changes, for messages. */
static void control_what(const control_t *k, char *out, size_t size)
{
    if (k->shift == SHIFT_CLOCK)
        snprintf(out, size, "--clocks %d instead of %d", CLOCKS - 1, CLOCKS);
    else if (k->sched == SCHED_COSINE)
        snprintf(out, size, "--cosine-steps %d instead of %d", COSINE_STEPS + 1, COSINE_STEPS);
    else if (k->sched == SCHED_STEP)
        snprintf(out, size, "--step-every %d instead of %d", STEP_EVERY + 1, STEP_EVERY);
    else
        snprintf(out, size, "--warmup %d instead of %d", WARMUP + 1, WARMUP);
}

/* ---- processes ---- */

/* The last non-empty line of a log file, for a failure message. */
static void last_line(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        size_t len = strlen(line);
        if (len == 0)
            continue;
        len = len < size ? len : size - 1; /* a long line is cut */
        memcpy(out, line, len);
        out[len] = '\0';
    }
    fclose(f);
}

/* Waits for `pid`; 0 when it exited with status 0, else a reason in err. */
static int wait_ok(pid_t pid, const char *who, const char *log, char *err, size_t size)
{
    int status;
    pid_t r;
    while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    if (r != pid) {
        snprintf(err, size, "%s: waitpid: %s", who, strerror(errno));
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    char tail[256];
    last_line(log, tail, sizeof(tail));
    if (WIFEXITED(status))
        snprintf(err, size, "%s exited with status %d: %s", who, WEXITSTATUS(status), tail);
    else
        snprintf(err, size, "%s killed by signal %d: %s", who, WTERMSIG(status), tail);
    return -1;
}

/*
 * Waits for the n processes pids[] (their logs in logs[]). The first to fail
 * ends the others at once: the rest of a BSP cluster would otherwise wait
 * for its pushes until --timeout. 0 when all exited with status 0.
 */
static int wait_all(const pid_t *pids, char (*logs)[320], int n, char *err, size_t size)
{
    bool running[MAXW];
    int left = n, rc = 0;
    for (int r = 0; r < n; r++)
        running[r] = true;
    while (left > 0) {
        bool reaped = false;
        for (int r = 0; r < n; r++) {
            int status;
            if (!running[r] || waitpid(pids[r], &status, WNOHANG) != pids[r])
                continue;
            running[r] = false;
            left--;
            reaped = true;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                continue;
            if (rc == 0) {
                char tail[256];
                last_line(logs[r], tail, sizeof(tail));
                if (WIFEXITED(status))
                    snprintf(err, size, "cluster worker %d exited with status %d: %s", r,
                             WEXITSTATUS(status), tail);
                else
                    snprintf(err, size, "cluster worker %d killed by signal %d: %s", r,
                             WTERMSIG(status), tail);
                rc = -1;
            }
            for (int q = 0; q < n; q++)
                if (running[q])
                    kill(pids[q], SIGKILL);
        }
        if (!reaped && left > 0)
            zps_sleep_ms(2);
    }
    return rc;
}

/* Reads exactly n float32 values from path; 0 or -1 with a reason. */
static int load(const char *path, float *v, size_t n, char *err, size_t size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, size, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    size_t got = fread(v, sizeof(float), n + 1, f);
    fclose(f);
    if (got != n) {
        snprintf(err, size, "%s holds %zu%s values, expected %zu", path, got,
                 got > n ? " or more" : "", n);
        return -1;
    }
    return 0;
}

/* What every worker, cluster or local, is told about the training. */
static int training_args(const char **argv, int n, int clocks, char *clocks_buf)
{
    snprintf(clocks_buf, 16, "%d", clocks);
    static const char *const common[] = {"--data",        DATA,          "--model",   MODEL,
                                         "--batch",       BATCH,         "--backend", "cpu",
                                         "--no-progress", "--log-level", "warn"};
    for (size_t k = 0; k < sizeof(common) / sizeof(common[0]); k++)
        argv[n++] = common[k];
    argv[n++] = "--clocks";
    argv[n++] = clocks_buf;
    return n;
}

/* zps-worker --local with the configuration's flags; params to `out`. */
static int run_local(const config_t *c, int workers, int clocks, const char *dir, const char *out,
                     char *err, size_t size)
{
    char flags[256], wn[16], cl[16], log[320];
    config_flags(c, flags, sizeof(flags));
    snprintf(wn, sizeof(wn), "%d", workers);
    snprintf(log, sizeof(log), "%s/local.log", dir);
    const char *argv[64] = {ZPS_WORKER_BIN, "--local", "--workers", wn, "--save-params", out};
    int n = training_args(argv, 6, clocks, cl);
    append_words(flags, argv, &n, 62);
    argv[n] = NULL;
    pid_t pid = harness_spawn(argv, "/dev/null", log);
    if (pid < 0) {
        snprintf(err, size, "cannot start zps-worker --local");
        return -1;
    }
    int rc = wait_ok(pid, "zps-worker --local", log, err, size);
    unlink(log);
    return rc;
}

/*
 * A cluster of `shards` zps-server processes with the configuration's flags
 * and `workers` zps-worker processes; rank 0 saves the parameters to `out`.
 */
static int run_cluster(const config_t *c, int workers, int shards, const char *dir, const char *out,
                       char *err, size_t size)
{
    harness_server_t srv[NSHARDS];
    char servers[NSHARDS * 260] = "";
    char wn[16], rank[MAXW][16], logs[MAXW][320], cl[16];
    int started = 0, rc = -1;
    pid_t pids[MAXW];
    int spawned = 0;
    ZPS_ASSERT(shards <= NSHARDS && workers <= MAXW);
    snprintf(wn, sizeof(wn), "%d", workers);
    for (int r = 0; r < workers; r++)
        snprintf(logs[r], sizeof(logs[r]), "%s/worker%d.log", dir, r);

    for (; started < shards; started++) {
        char flags[256], shard[32];
        config_flags(c, flags, sizeof(flags));
        snprintf(shard, sizeof(shard), "%d/%d", started, shards);
        const char *args[48] = {"--workers", wn, "--shard", shard, "--log-level", "warn"};
        int n = 6;
        append_words(flags, args, &n, 46);
        args[n] = NULL;
        if (harness_start(&srv[started], args) != 0) {
            snprintf(err, size, "zps-server %s did not start", shard);
            goto done;
        }
        size_t len = strlen(servers);
        snprintf(servers + len, sizeof(servers) - len, "%s%s", started ? "," : "",
                 srv[started].endpoint);
    }

    for (int r = 0; r < workers; r++) {
        snprintf(rank[r], sizeof(rank[r]), "%d", r);
        /* A pull or push that waits 30 s means a hung cluster: fail, not hang. */
        const char *argv[48] = {ZPS_WORKER_BIN, "--servers", servers,     "--rank", rank[r],
                                "--workers",    wn,          "--timeout", "30000"};
        int n = training_args(argv, 9, CLOCKS, cl);
        if (r == 0) {
            argv[n++] = "--save-params";
            argv[n++] = out;
        }
        argv[n] = NULL;
        pids[spawned] = harness_spawn(argv, "/dev/null", logs[r]);
        if (pids[spawned] < 0) {
            snprintf(err, size, "cannot start zps-worker rank %d", r);
            goto done;
        }
        spawned++;
    }
    rc = wait_all(pids, logs, spawned, err, size);
    spawned = 0;

done:
    for (int r = 0; r < spawned; r++) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], NULL, 0);
    }
    for (int s = 0; s < started; s++) {
        int status = harness_stop(&srv[s]);
        if (status != 0 && rc == 0) {
            snprintf(err, size, "zps-server %d/%d exited with status %d", s, shards, status);
            rc = -1;
        }
    }
    for (int r = 0; r < workers; r++)
        unlink(logs[r]);
    return rc;
}

/* ---- jobs: one (configuration, worker count) each ---- */

typedef struct job {
    int config;
    int wi; /* index into worker_counts */
} job_t;

static job_t jobs[NOPT * NSCHED * NWORKERS];
static size_t njobs, next_job;
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;

static void run_job(const job_t *j)
{
    config_t c = config_at(j->config);
    int workers = worker_counts[j->wi];
    char dir[64] = "/tmp/zps-matrix-XXXXXX";
    if (!mkdtemp(dir)) {
        for (int s = 0; s < NSHARDS; s++) {
            outcome_t *o = &outcomes[j->config][j->wi][s];
            snprintf(o->error, sizeof(o->error), "mkdtemp: %s", strerror(errno));
            o->done = true;
        }
        return;
    }
    char local_path[128], cluster_path[128], err[512] = "";
    snprintf(local_path, sizeof(local_path), "%s/local.f32", dir);
    snprintf(cluster_path, sizeof(cluster_path), "%s/cluster.f32", dir);

    float ref[NPARAMS], got[NPARAMS], first_cluster[NPARAMS];
    bool have_ref = run_local(&c, workers, CLOCKS, dir, local_path, err, sizeof(err)) == 0 &&
                    load(local_path, ref, NPARAMS, err, sizeof(err)) == 0;
    if (have_ref) {
        memcpy(refs[j->config][j->wi], ref, sizeof(ref));
        have_refs[j->config][j->wi] = true;
    }
    bool have_cluster = false;
    for (int s = 0; s < NSHARDS; s++) {
        outcome_t *o = &outcomes[j->config][j->wi][s];
        char why[512] = "";
        unlink(cluster_path);
        if (run_cluster(&c, workers, s + 1, dir, cluster_path, why, sizeof(why)) == 0 &&
            load(cluster_path, got, NPARAMS, why, sizeof(why)) == 0) {
            if (!have_cluster)
                memcpy(first_cluster, got, sizeof(got));
            have_cluster = true;
            if (have_ref)
                compare(ref, got, NPARAMS, &o->diff);
            else
                snprintf(o->error, sizeof(o->error), "%s", err);
        } else {
            snprintf(o->error, sizeof(o->error), "%s", why);
        }
        o->done = true;
    }

    /* The controls of this configuration: the same cluster, a shifted --local. */
    for (size_t k = 0; k < NCONTROLS; k++) {
        control_t *ctl = &controls[k];
        if (j->wi != CONTROL_WORKERS ||
            config_index(ctl->opt, ctl->sched, ctl->warmup, false) != j->config)
            continue;
        config_t shifted = c;
        int clocks = CLOCKS;
        if (ctl->shift == SHIFT_CLOCK)
            clocks--;
        else if (c.sched == SCHED_COSINE)
            shifted.cosine_steps++;
        else if (c.sched == SCHED_STEP)
            shifted.step_every++;
        else
            shifted.warmup_steps++;
        char why[512] = "no cluster run to compare with";
        unlink(local_path);
        if (have_cluster &&
            run_local(&shifted, workers, clocks, dir, local_path, why, sizeof(why)) == 0 &&
            load(local_path, ref, NPARAMS, why, sizeof(why)) == 0)
            compare(first_cluster, ref, NPARAMS, &ctl->diff);
        else
            snprintf(ctl->error, sizeof(ctl->error), "%s", why);
        ctl->done = true;
    }
    unlink(local_path);
    unlink(cluster_path);
    rmdir(dir);
}

static void *job_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&job_lock);
        size_t i = next_job < njobs ? next_job++ : njobs;
        pthread_mutex_unlock(&job_lock);
        if (i == njobs)
            return NULL;
        run_job(&jobs[i]);
    }
}

/* Concurrent jobs: ZPS_MATRIX_JOBS, else 4 per CPU (they mostly wait), at most 16. */
static int job_threads(void)
{
    const char *env = getenv("ZPS_MATRIX_JOBS");
    if (env && atoi(env) > 0)
        return atoi(env) > 32 ? 32 : atoi(env);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cpus > 0 ? 4 * cpus : 8;
    return (int)(t > 16 ? 16 : t);
}

/* Whether configuration i runs: all of them, or with ZPS_MATRIX_QUICK every
 * sixth and those with controls. */
static bool selected(int i)
{
    if (!quick || i % 6 == 0)
        return true;
    for (size_t k = 0; k < NCONTROLS; k++)
        if (config_index(controls[k].opt, controls[k].sched, controls[k].warmup, false) == i)
            return true;
    return false;
}

static void test_matrix(void **state)
{
    (void)state;
    const char *q = getenv("ZPS_MATRIX_QUICK");
    quick = q && *q && strcmp(q, "0") != 0;
    /* The 4-worker jobs take longest: start them first. */
    for (int wi = NWORKERS - 1; wi >= 0; wi--)
        for (int i = 0; i < NOPT * NSCHED; i++)
            if (selected(i))
                jobs[njobs++] = (job_t){.config = i, .wi = wi};

    double t0 = zps_wall_seconds();
    int nthreads = job_threads();
    pthread_t threads[32];
    for (int t = 0; t < nthreads; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, job_thread, NULL), 0);
    for (int t = 0; t < nthreads; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
    double seconds = zps_wall_seconds() - t0;

    int total = 0, identical = 0, differ = 0, failed = 0;
    double max_rel = 0;
    for (int i = 0; i < NOPT * NSCHED; i++) {
        if (!selected(i))
            continue;
        config_t c = config_at(i);
        char name[96], flags[256];
        config_name(&c, name, sizeof(name));
        config_flags(&c, flags, sizeof(flags));
        for (int wi = 0; wi < NWORKERS; wi++) {
            for (int s = 0; s < NSHARDS; s++) {
                const outcome_t *o = &outcomes[i][wi][s];
                total++;
                ZPS_ASSERT(o->done);
                if (o->error[0]) {
                    failed++;
                    printf("FAILED RUN %s, %d workers, %d shards: %s\n  flags: %s\n", name,
                           worker_counts[wi], s + 1, o->error, flags);
                    continue;
                }
                if (o->diff.rel > max_rel)
                    max_rel = o->diff.rel;
                if (o->diff.identical) {
                    identical++;
                    continue;
                }
                differ++;
                printf("MISMATCH %s, %d workers, %d shards: max rel diff %.3g, first difference "
                       "at [%zu]: local %.9g cluster %.9g\n  flags: %s\n",
                       name, worker_counts[wi], s + 1, o->diff.rel, o->diff.first,
                       (double)o->diff.ref_first, (double)o->diff.got_first, flags);
            }
        }
    }

    /* Two configurations that end with the same bits would mean a flag that
     * changes nothing, and a matrix that tests less than it says. The one
     * pair that may: adam and adamw without weight decay, the same method. */
    int same = 0;
    for (int wi = 0; wi < NWORKERS; wi++)
        for (int a = 0; a < NOPT * NSCHED; a++)
            for (int b = a + 1; b < NOPT * NSCHED; b++) {
                config_t ca = config_at(a), cb = config_at(b);
                if (ca.opt == ADAM && cb.opt == ADAMW && !ca.decay && !cb.decay &&
                    ca.sched == cb.sched && ca.warmup == cb.warmup)
                    continue;
                if (!have_refs[a][wi] || !have_refs[b][wi] ||
                    memcmp(refs[a][wi], refs[b][wi], sizeof(refs[a][wi])) != 0)
                    continue;
                char na[96], nb[96];
                config_name(&ca, na, sizeof(na));
                config_name(&cb, nb, sizeof(nb));
                printf("NO EFFECT: %s and %s end with the same parameters (%d workers)\n", na, nb,
                       worker_counts[wi]);
                same++;
            }

    int detected = 0;
    for (size_t k = 0; k < NCONTROLS; k++) {
        const control_t *ctl = &controls[k];
        config_t c = config_at(config_index(ctl->opt, ctl->sched, ctl->warmup, false));
        char name[96], what[64];
        config_name(&c, name, sizeof(name));
        control_what(ctl, what, sizeof(what));
        ZPS_ASSERT(ctl->done);
        if (ctl->error[0]) {
            printf("CONTROL NOT RUN %s, %d workers, %s: %s\n", name, worker_counts[CONTROL_WORKERS],
                   what, ctl->error);
        } else if (ctl->diff.rel > CONTROL_TOL) {
            detected++;
            printf("control %s, %d workers, %s: max rel diff %.3g from the cluster\n", name,
                   worker_counts[CONTROL_WORKERS], what, ctl->diff.rel);
        } else {
            printf("CONTROL NOT DETECTED %s, %d workers, %s: max rel diff %.3g <= %g\n", name,
                   worker_counts[CONTROL_WORKERS], what, ctl->diff.rel, CONTROL_TOL);
        }
    }

    printf("matrix%s: %d configurations, %d bit-identical, max rel diff %.3g (local vs cluster); "
           "shift controls: %d/%zu detected\n",
           quick ? " (quick)" : "", total, identical, max_rel, detected, NCONTROLS);
    printf("matrix: %zu --local references, %d cluster runs, %zu controls in %.1f s with %d "
           "concurrent jobs\n",
           njobs, total, NCONTROLS, seconds, nthreads);
    fflush(stdout); /* the list before cmocka's verdict, which goes to stderr */
    if (differ || failed)
        fail_msg("of %d configurations, %d differ from --local and %d could not be compared "
                 "(listed above)",
                 total, differ, failed);
    if (same)
        fail_msg("%d pairs of configurations end with the same parameters (listed above)", same);
    if (detected != (int)NCONTROLS)
        fail_msg("only %d of %zu shift controls differ from the cluster by more than %g", detected,
                 NCONTROLS, CONTROL_TOL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
