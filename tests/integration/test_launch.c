/*
 * test_launch.c - `zps launch` end to end with real processes: a short run
 * exits 0 and leaves a complete run folder with a valid summary.json; a
 * worker killed mid-run makes launch exit 1 naming it; Ctrl-C (SIGINT) stops
 * the cluster with status 130; a server that cannot start is named; bad
 * usage exits 2, and a bad value for the servers or workers is refused in
 * one line before anything is created or started. After each run, no
 * process it started may be alive.
 *
 * Uses Fashion-MNIST when installed, else a synthetic regression set (then
 * there is no accuracy, and the accuracy checks are skipped).
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "launch_util.h"

/* Data flags: a small, fast model either way. */
static const char *data_flag(void)
{
    return lu_have_fashion() ? "--data=fashion-mnist" : "--data=synthetic:n=4000,test=500,dim=8";
}

static const char *model_flag(void)
{
    return lu_have_fashion() ? "--model=mlp:784-32-10" : "--model=linear:8";
}

static void assert_file(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (access(path, R_OK) != 0)
        fail_msg("the run folder lacks %s", name);
}

static bool contains(const char *path, const char *needle)
{
    char *text = lu_read(path);
    bool ok = text && strstr(text, needle);
    if (!ok)
        fprintf(stderr, "%s does not contain '%s'; it holds:\n%s\n", path, needle,
                text ? text : "(nothing)");
    free(text);
    return ok;
}

static double num(const zps_json_t *o, const char *key)
{
    const zps_json_t *v = zps_json_get(o, key);
    if (!v || v->type != ZPS_JSON_NUMBER)
        fail_msg("summary.json: '%s' is missing or not a number", key);
    return v->number;
}

static void count_steps(const zps_json_t *s, void *arg)
{
    (void)s;
    (*(int *)arg)++;
}

static void test_short_run(void **state)
{
    (void)state;
    char tmp[256], runs[320], run[400], path[512];
    lu_tmpdir(tmp, sizeof(tmp));
    snprintf(runs, sizeof(runs), "%s/runs", tmp);
    snprintf(run, sizeof(run), "%s/short", runs);
    const char *args[] = {"--runs-dir",
                          runs,
                          "--name",
                          "short",
                          "--servers",
                          "2",
                          "--workers",
                          "2",
                          "--mode",
                          "asp",
                          "--clocks",
                          "30",
                          "--batch",
                          "16",
                          "--backend",
                          "cpu",
                          "--eval-every",
                          "10",
                          "--optimizer",
                          "momentum",
                          "--lr",
                          "0.02",
                          "--targets",
                          "0.3,0.999",
                          data_flag(),
                          model_flag(),
                          "--quiet",
                          "--no-progress",
                          NULL};
    int rc = lu_run(tmp, args, 90);
    snprintf(path, sizeof(path), "%s/stderr", tmp);
    if (rc != 0) {
        char *err = lu_read(path);
        fail_msg("launch exited %d:\n%s", rc, err ? err : "");
    }
    assert_true(lu_all_gone(run));

    const char *files[] = {
        "summary.json",   "summary.tsv",  "commands.txt", "processes.tsv",        "stats.jsonl",
        "server-0.log",   "server-1.log", "worker-0.log", "worker-1.log",         "worker-0.jsonl",
        "worker-1.jsonl", "eval.tsv",     "loss.tsv",     "update_staleness.tsv", "workers.tsv"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        assert_file(run, files[i]);

    /* The exact command lines: the launcher's own, then two servers and two workers. */
    snprintf(path, sizeof(path), "%s/commands.txt", run);
    assert_true(contains(path, "launch --runs-dir"));
    assert_true(contains(path, "zps-server --listen 'tcp://127.0.0.1:*'"));
    assert_true(contains(path, "--shard 1/2 --workers 2 --mode asp"));
    assert_true(contains(path, "zps-worker --servers tcp://127.0.0.1:"));
    assert_true(contains(path, "--rank 1 --workers 2"));
    /* Each process's log: the servers' own lines. */
    snprintf(path, sizeof(path), "%s/server-1.log", run);
    assert_true(contains(path, "listening on tcp://127.0.0.1:"));

    /* Metrics: one step line per clock. */
    snprintf(path, sizeof(path), "%s/worker-1.jsonl", run);
    int steps = 0;
    lu_each_step(path, count_steps, &steps);
    assert_int_equal(steps, 30);

    snprintf(path, sizeof(path), "%s/summary.json", run);
    zps_json_t *s = lu_read_json(path);
    assert_non_null(s);
    assert_string_equal(zps_json_string(zps_json_get(s, "mode")), "asp");
    assert_string_equal(zps_json_string(zps_json_get(s, "status")), "ok");
    assert_true(num(s, "workers") == 2);
    assert_true(num(s, "servers") == 2);
    assert_true(num(s, "wall_seconds") > 0);
    assert_true(num(s, "train_seconds") > 0);
    assert_true(num(s, "train_seconds") <= num(s, "wall_seconds"));
    assert_true(num(s, "examples_per_second") > 0);
    const zps_json_t *to = zps_json_get(s, "seconds_to_target");
    assert_non_null(to);
    assert_int_equal(to->type, ZPS_JSON_OBJECT);
    assert_int_equal(to->count, 2);
    assert_non_null(zps_json_get(to, "0.3"));
    assert_int_equal(zps_json_get(to, "0.999")->type, ZPS_JSON_NULL);
    const zps_json_t *st = zps_json_get(s, "update_staleness");
    assert_non_null(st);
    assert_true(num(st, "p50") <= num(st, "p99"));
    assert_true(num(st, "p99") <= num(st, "max"));
    /* Two ASP workers, one shard's pushes counted at both shards. */
    assert_true(num(st, "count") == 2 * 2 * 30);
    /* The workers' clock lag, over their steps up to the training end. */
    const zps_json_t *lag = zps_json_get(s, "clock_lag");
    assert_non_null(lag);
    assert_true(num(lag, "count") > 0 && num(lag, "count") <= 2 * 30);
    assert_true(num(lag, "p50") <= num(lag, "max"));
    if (lu_have_fashion()) {
        double acc = num(s, "final_test_accuracy");
        assert_true(acc > 0.3 && acc <= 1.0);
        assert_true(num(to, "0.3") >= 0);
        snprintf(path, sizeof(path), "%s/stdout", tmp);
        assert_true(contains(path, "final test accuracy 0."));
    }
    zps_json_free(s);
    lu_rmtree(tmp);
}

/* Starts a long run and waits until worker 1 has trained a few steps. */
static pid_t start_long(const char *tmp, const char *runs, const char *run)
{
    const char *args[] = {"--runs-dir", runs,        "--name",     "long",     "--servers",
                          "2",          "--workers", "3",          "--clocks", "100000",
                          "--batch",    "16",        "--backend",  "cpu",      "--base-step-ms",
                          "5",          data_flag(), model_flag(), "--quiet",  "--no-progress",
                          NULL};
    pid_t pid = lu_start(tmp, args);
    char path[512];
    snprintf(path, sizeof(path), "%s/worker-1.jsonl", run);
    if (!lu_wait_for(path, "\"clock\":3,", 60)) {
        kill(pid, SIGKILL);
        lu_wait(pid, 10);
        fail_msg("worker 1 did not train within 60 s");
    }
    return pid;
}

static void test_worker_killed(void **state)
{
    (void)state;
    char tmp[256], runs[320], run[400], path[512], want[128];
    lu_tmpdir(tmp, sizeof(tmp));
    snprintf(runs, sizeof(runs), "%s/runs", tmp);
    snprintf(run, sizeof(run), "%s/long", runs);
    pid_t launch = start_long(tmp, runs, run);
    pid_t victim = lu_pid_of(run, "worker-1");
    assert_true(victim > 0);
    assert_int_equal(kill(victim, SIGKILL), 0);
    int rc = lu_wait(launch, 60);
    assert_int_equal(rc, 1);
    assert_true(lu_all_gone(run));
    snprintf(path, sizeof(path), "%s/stderr", tmp);
    snprintf(want, sizeof(want), "worker 1 (pid %d) was killed by signal 9", (int)victim);
    assert_true(contains(path, want));
    snprintf(path, sizeof(path), "%s/summary.json", run);
    zps_json_t *s = lu_read_json(path);
    assert_non_null(s);
    assert_string_equal(zps_json_string(zps_json_get(s, "status")), "failed");
    assert_string_equal(zps_json_string(zps_json_get(s, "failed_process")), "worker 1");
    zps_json_free(s);
    lu_rmtree(tmp);
}

static void test_interrupted(void **state)
{
    (void)state;
    char tmp[256], runs[320], run[400], path[512];
    lu_tmpdir(tmp, sizeof(tmp));
    snprintf(runs, sizeof(runs), "%s/runs", tmp);
    snprintf(run, sizeof(run), "%s/long", runs);
    pid_t launch = start_long(tmp, runs, run);
    assert_int_equal(kill(launch, SIGINT), 0);
    assert_int_equal(lu_wait(launch, 60), 130);
    assert_true(lu_all_gone(run));
    snprintf(path, sizeof(path), "%s/stderr", tmp);
    assert_true(contains(path, "SIGINT received; stopping the cluster"));
    lu_rmtree(tmp);
}

static void test_server_fails(void **state)
{
    (void)state;
    char tmp[256], runs[320], run[400], path[512];
    lu_tmpdir(tmp, sizeof(tmp));
    snprintf(runs, sizeof(runs), "%s/runs", tmp);
    snprintf(run, sizeof(run), "%s/bad", runs);
    /* Every server gets a flag it does not know (launch checks the values it
     * hands on, not zps-server's other flags) and exits 2 at once; the first
     * to exit is named. */
    const char *args[] = {"--runs-dir", runs, "--name",    "bad",     "--server-arg=--no-such-flag",
                          "--clocks",   "10", data_flag(), "--quiet", "--no-progress",
                          NULL};
    assert_int_equal(lu_run(tmp, args, 60), 1);
    assert_true(lu_all_gone(run));
    snprintf(path, sizeof(path), "%s/stderr", tmp);
    assert_true(contains(path, "exited with status 2 before it was listening"));
    assert_true(contains(path, "zps launch: failed: server "));
    lu_rmtree(tmp);
}

static void test_bad_usage(void **state)
{
    (void)state;
    char tmp[256];
    lu_tmpdir(tmp, sizeof(tmp));
    const char *cases[][4] = {
        {"--mode", "foo", NULL, NULL},
        {"--staleness", "1", NULL, NULL}, /* bsp */
        {"--backup-workers", "4", NULL, NULL},
        {"--straggler", "9:slowdown=4", NULL, NULL}, /* 4 workers */
        {"--straggler", "1:slowdown=0.5", NULL, NULL},
        {"--straggler", "1:bogus=1", NULL, NULL},
        {"--straggler", "slowdown=4", NULL, NULL},
        {"--targets", "0.5,1.5", NULL, NULL},
        {"--frobnicate", NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[8] = {"--runs-dir", tmp, NULL};
        int n = 2;
        for (int k = 0; k < 4 && cases[i][k]; k++)
            args[n++] = cases[i][k];
        args[n] = NULL;
        int rc = lu_run(tmp, args, 30);
        if (rc != 2)
            fail_msg("zps launch %s %s exited %d, expected 2", cases[i][0],
                     cases[i][1] ? cases[i][1] : "", rc);
    }
    const char *help[] = {"--help", NULL};
    assert_int_equal(lu_run(tmp, help, 30), 0);
    char path[512];
    snprintf(path, sizeof(path), "%s/stdout", tmp);
    assert_true(contains(path, "usage: zps launch"));
    lu_rmtree(tmp);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/*
 * --hosts files and flags that cannot work are refused before anything is
 * created (exit 2, the reason on stderr); a good file is placed as
 * documented, and a host whose ssh fails is named at set-up (exit 1) before
 * any process starts. The runs over real ssh are tests/multihost/ssh.sh.
 */
static void test_hosts_usage(void **state)
{
    (void)state;
    char tmp[256], hosts[320], runs[320], err[320];
    lu_tmpdir(tmp, sizeof(tmp));
    snprintf(hosts, sizeof(hosts), "%s/hosts", tmp);
    snprintf(runs, sizeof(runs), "%s/runs", tmp);
    snprintf(err, sizeof(err), "%s/stderr", tmp);
    static const struct {
        const char *file; /* NULL: no file */
        const char *flag, *value;
        const char *says;
    } cases[] = {
        {NULL, NULL, NULL, "cannot read the hosts file"},
        {"# nothing\n\n", NULL, NULL, "lists no host"},
        {"h1 gpus=2\n", NULL, NULL, "'gpus=2': expected servers=N"},
        {"h1 workers=2 workers=3\n", NULL, NULL, "each once"},
        {"h1\nh2 workers=1\nh1\n", NULL, NULL, ":3: host h1 is listed twice"},
        {"bad/name\n", NULL, NULL, "is not a host name"},
        {"h1 workers=4\n", NULL, NULL, "places 0 servers"},
        {"h1 servers=1 workers=2\n", "--workers", "3", "give counts in one place"},
        {"h1 servers=1 workers=2\n", "--straggler", "2:slowdown=2", "names rank 2"},
        {"h1\n", "--port", "0", "invalid --port"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unlink(hosts);
        if (cases[i].file)
            write_text(hosts, cases[i].file);
        const char *args[10] = {"--runs-dir", runs, "--hosts", hosts, NULL};
        int n = 4;
        if (cases[i].flag) {
            args[n++] = cases[i].flag;
            args[n++] = cases[i].value;
        }
        args[n] = NULL;
        int rc = lu_run(tmp, args, 30);
        if (rc != 2 || !contains(err, cases[i].says))
            fail_msg("hosts case %zu (%s) exited %d, expected 2 and '%s'", i,
                     cases[i].file ? cases[i].file : "no file", rc, cases[i].says);
        assert_int_equal(access(runs, F_OK), -1); /* nothing created */
    }
    const char *no_hosts[] = {"--runs-dir", runs, "--ssh", "ssh", NULL};
    assert_int_equal(lu_run(tmp, no_hosts, 30), 2);
    assert_true(contains(err, "--ssh applies to --hosts only"));

    /* Without counts, --servers and --workers are spread in order; `false`
     * as ssh fails the first host's set-up. */
    write_text(hosts, "h1\nh2  # a comment\n\nh3\n");
    const char *spread[] = {"--runs-dir", runs,        "--hosts", hosts,   "--servers",
                            "2",          "--workers", "5",       "--ssh", "false",
                            "--name",     "s",         NULL};
    assert_int_equal(lu_run(tmp, spread, 30), 1);
    assert_true(contains(err, "on h1: server 0 (port 7100), workers 0-1, the evaluator\n"));
    assert_true(contains(err, "on h2: server 1 (port 7100), workers 2-3\n"));
    assert_true(contains(err, "on h3: worker 4\n"));
    assert_true(contains(err, "cannot set up host h1: set-up failed (status 1)"));
    char log[400];
    snprintf(log, sizeof(log), "%s/s/server-0.log", runs);
    assert_int_equal(access(log, F_OK), -1); /* nothing started */
    lu_rmtree(tmp);
}

/* Counts the lines of a file; -1 when it cannot be read. */
static int count_lines(const char *path)
{
    char *text = lu_read(path);
    if (!text)
        return -1;
    int n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    free(text);
    return n;
}

/*
 * A bad value launch hands on to the workers or servers is refused before
 * anything happens: exit 2, one line on stderr, no run folder, and no
 * process started (the server and worker "binaries" here are scripts that
 * leave a mark when run).
 */
static void test_bad_child_values(void **state)
{
    (void)state;
    char tmp[256], runs[300], mark[300], fake[300], path[320];
    lu_tmpdir(tmp, sizeof(tmp));
    snprintf(runs, sizeof(runs), "%s/runs", tmp);
    snprintf(mark, sizeof(mark), "%s/started", tmp);
    snprintf(fake, sizeof(fake), "%s/fake-bin", tmp);
    FILE *f = fopen(fake, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\ntouch '%s'\n", mark);
    fclose(f);
    assert_int_equal(chmod(fake, 0755), 0);

    const char *cases[][4] = {
        {"--batch", "0", NULL, NULL},
        {"--backend", "gpu", NULL, NULL},
        {"--epochs", "1", "--clocks", "5"},
        {"--epochs", "-1", NULL, NULL},
        {"--epochs", "x", NULL, NULL},
        {"--clocks", "0", NULL, NULL},
        {"--eval-every", "x", NULL, NULL},
        {"--model", "mlp:784", NULL, NULL},
        {"--data", "mnist", NULL, NULL},
        {"--slowdown", "0.5", NULL, NULL},
        {"--random-delay", "exp", NULL, NULL},
        {"--pause-at", "5", NULL, NULL},
        {"--straggler-ranks", "x", NULL, NULL},
        {"--lr", "x", NULL, NULL},
        {"--optimizer", "sgd", "--nesterov", NULL},
        {"--worker-timeout", "-1", NULL, NULL},
        {"--worker-arg", "--timeout=0", NULL, NULL},
        {"--worker-arg", "--bogus", NULL, NULL},
        {"--lr-staleness", "inverse", NULL, NULL}, /* bsp */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[12] = {"--runs-dir", runs, "--server-bin", fake, "--worker-bin", fake};
        int n = 6;
        for (int k = 0; k < 4 && cases[i][k]; k++)
            args[n++] = cases[i][k];
        args[n] = NULL;
        int rc = lu_run(tmp, args, 30);
        snprintf(path, sizeof(path), "%s/stderr", tmp);
        int lines = count_lines(path);
        if (rc != 2 || lines != 1) {
            char *err = lu_read(path);
            fail_msg("zps launch %s %s: exit %d and %d lines on stderr, expected 2 and 1:\n%s",
                     cases[i][0], cases[i][1] ? cases[i][1] : "", rc, lines, err ? err : "");
        }
        if (access(runs, F_OK) == 0)
            fail_msg("zps launch %s %s created %s", cases[i][0], cases[i][1], runs);
        if (access(mark, F_OK) == 0)
            fail_msg("zps launch %s %s started a process", cases[i][0], cases[i][1]);
    }
    lu_rmtree(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_usage),     cmocka_unit_test(test_short_run),
        cmocka_unit_test(test_worker_killed), cmocka_unit_test(test_interrupted),
        cmocka_unit_test(test_server_fails),  cmocka_unit_test(test_bad_child_values),
        cmocka_unit_test(test_hosts_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
