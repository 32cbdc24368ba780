/*
 * launch_util.c - see launch_util.h.
 */
#include "launch_util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "timeutil.h"

#ifndef ZPS_BIN
#error "ZPS_BIN must name the zps tool"
#endif

const char *lu_zps_bin(void)
{
    const char *env = getenv("ZPS_BIN");
    return env && *env ? env : ZPS_BIN;
}

bool lu_have_fashion(void)
{
    return access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) == 0;
}

void lu_tmpdir(char *buf, size_t size)
{
    snprintf(buf, size, "/tmp/zps-launch-test-XXXXXX");
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        abort();
    }
}

void lu_rmtree(const char *dir)
{
    if (strncmp(dir, "/tmp/zps-launch-test-", 21) != 0)
        return; /* only what lu_tmpdir made */
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

/* Seconds on the monotonic clock. */
static double now_s(void)
{
    return (double)zps_now_ns() / 1e9;
}

pid_t lu_start(const char *out_dir, const char *const *args)
{
    char out[512], err[512];
    snprintf(out, sizeof(out), "%s/stdout", out_dir);
    snprintf(err, sizeof(err), "%s/stderr", out_dir);
    const char *argv[128];
    int n = 0;
    argv[n++] = lu_zps_bin();
    argv[n++] = "launch";
    for (int i = 0; args[i] && n < 125; i++)
        argv[n++] = args[i];
    /* The secure suite (harness.h): the run's keys, made by launch. */
    if (harness_secure())
        argv[n++] = "--keys";
    argv[n] = NULL;
    /* The launcher dies with the test; its children die with it. */
    pid_t pid = harness_spawn(argv, out, err);
    if (pid < 0)
        abort();
    return pid;
}

int lu_wait(pid_t pid, double timeout_s)
{
    double t0 = now_s();
    int status;
    bool termed = false;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return -1;
        double el = now_s() - t0;
        if (el > timeout_s && !termed) {
            fprintf(stderr, "launch did not finish within %.0f s; stopping it\n", timeout_s);
            kill(pid, SIGTERM);
            termed = true;
        }
        if (el > timeout_s + 10)
            kill(pid, SIGKILL);
        zps_sleep_ms(20);
    }
    if (termed)
        return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

int lu_run(const char *out_dir, const char *const *args, double timeout_s)
{
    return lu_wait(lu_start(out_dir, args), timeout_s);
}

char *lu_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

zps_json_t *lu_read_json(const char *path)
{
    char *text = lu_read(path);
    if (!text) {
        fprintf(stderr, "%s: cannot read\n", path);
        return NULL;
    }
    zps_json_t *v = NULL;
    char err[256];
    if (zps_json_parse(text, &v, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: not valid JSON: %s\n", path, err);
        v = NULL;
    }
    free(text);
    return v;
}

size_t lu_each_step(const char *path, void (*fn)(const zps_json_t *step, void *arg), void *arg)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[8192];
    size_t n = 0;
    while (fgets(line, sizeof(line), f)) {
        zps_json_t *v = NULL;
        if (zps_json_parse(line, &v, NULL, 0) != 0)
            continue;
        const char *type = zps_json_string(zps_json_get(v, "type"));
        if (type && strcmp(type, "step") == 0) {
            fn(v, arg);
            n++;
        }
        zps_json_free(v);
    }
    fclose(f);
    return n;
}

typedef struct mean_acc {
    const char *key;
    unsigned first;
    double sum;
    size_t n;
} mean_acc_t;

static void add_mean(const zps_json_t *s, void *arg)
{
    mean_acc_t *m = arg;
    if (zps_json_number(zps_json_get(s, "clock"), 0) < m->first)
        return;
    double v = zps_json_number(zps_json_get(s, m->key), NAN);
    if (isfinite(v)) {
        m->sum += v;
        m->n++;
    }
}

double lu_step_mean(const char *path, const char *key, unsigned first, size_t *n)
{
    mean_acc_t m = {key, first, 0, 0};
    lu_each_step(path, add_mean, &m);
    if (n)
        *n = m.n;
    return m.n ? m.sum / (double)m.n : NAN;
}

pid_t lu_pid_of(const char *run_dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/processes.tsv", run_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    pid_t pid = -1;
    while (fgets(line, sizeof(line), f)) {
        char file[64], role[64];
        int p;
        if (sscanf(line, "%63[^\t]\t%63[^\t]\t%d", file, role, &p) == 3 && strcmp(file, name) == 0)
            pid = p;
    }
    fclose(f);
    return pid;
}

/* A process is gone when it does not exist or is a zombie nobody reaps yet. */
static bool gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return true;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    bool zombie = false;
    if (fgets(buf, sizeof(buf), f)) {
        const char *rp = strrchr(buf, ')');
        zombie = rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
    }
    fclose(f);
    return zombie;
}

bool lu_all_gone(const char *run_dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/processes.tsv", run_dir);
    /* Give the kernel a moment to finish killing the group. */
    for (int tries = 0; tries < 100; tries++) {
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        char line[256];
        bool all = true;
        while (fgets(line, sizeof(line), f)) {
            char file[64], role[64];
            int p;
            if (sscanf(line, "%63[^\t]\t%63[^\t]\t%d", file, role, &p) == 3 && !gone(p)) {
                if (tries == 99)
                    fprintf(stderr, "%s (pid %d) is still alive\n", role, p);
                all = false;
            }
        }
        fclose(f);
        if (all)
            return true;
        zps_sleep_ms(50);
    }
    return false;
}

bool lu_wait_for(const char *path, const char *needle, double timeout_s)
{
    double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        char *text = lu_read(path);
        bool ok = text && (needle ? strstr(text, needle) != NULL : *text != '\0');
        free(text);
        if (ok)
            return true;
        zps_sleep_ms(50);
    }
    return false;
}
