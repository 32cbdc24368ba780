/*
 * test_worker_cluster.c - zps-worker processes training through real
 * zps-server processes:
 *
 *   - a synthetic linear regression (2 servers, 3 workers, BSP) converges to
 *     the weights that generated the data, within 1e-3;
 *   - a BSP cluster of W workers with batch b ends with the same parameters,
 *     within float tolerance, as `zps-worker --local --workers W` with the
 *     same batch flag (one process, the union batch of W*b, same data order),
 *     for a linear model and for an MLP on Fashion-MNIST;
 *   - a short Fashion-MNIST cluster run reaches at least 80% test accuracy.
 *
 * The cluster's workers compute with the backend ZPS_TEST_BACKEND names
 * (default cpu); --local, the reference, always computes with cpu. The
 * twin test_worker_cluster_cuda (label gpu) sets it to cuda: the same cases
 * with every cluster worker on the GPU, where the tolerances against the
 * cpu reference are ten times wider (cuBLAS sums in another order, so each
 * gradient differs from the cpu one by about 1e-7 relative, and 40-60
 * clocks carry that forward). Without a usable GPU that twin prints
 * "skipped" with the reason and exits 77 before it starts anything.
 *
 * The known weights come from the synthetic generator itself (worker/data.c);
 * the parameters from --save-params files. The Fashion-MNIST cases read the
 * files from $ZPS_FASHION_MNIST_DIR (default /usr/share/datasets/fashion-mnist)
 * and are skipped when they are not there; the others still run, and the
 * program then exits 77, which ctest reports as skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "data.h"
#include "error.h"
#include "harness.h"
#include "model.h"

#ifndef ZPS_WORKER_BIN
#error "ZPS_WORKER_BIN must name the zps-worker binary"
#endif

#define MAXS 2

/* Where the workers read Fashion-MNIST, and how many cases skipped without it. */
static const char *fashion_dir = "/usr/share/datasets/fashion-mnist";
static int skipped;
/* The cluster workers' --backend (ZPS_TEST_BACKEND), and how much wider the
 * tolerances against the cpu reference are for it. */
static const char *backend = "cpu";
static double tol_scale = 1.0;

/* Skips the calling case (counted) when the Fashion-MNIST files are missing. */
static void skip_without_fashion(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", fashion_dir);
    if (access(path, R_OK) != 0) {
        printf("skipped: %s is not installed\n", path);
        skipped++;
        skip(); /* does not return: cmocka ends the case here */
    }
}

typedef struct cluster {
    harness_server_t srv[MAXS];
    int shards;
    char servers[600]; /* E1,E2 */
    char dir[64];
} cluster_t;

static void start(cluster_t *c, int shards, int workers, const char *const *opt)
{
    memset(c, 0, sizeof(*c));
    c->shards = shards;
    snprintf(c->dir, sizeof(c->dir), "/tmp/zps-wc-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    char w[16];
    snprintf(w, sizeof(w), "%d", workers);
    for (int s = 0; s < shards; s++) {
        char shard[32];
        snprintf(shard, sizeof(shard), "%d/%d", s, shards);
        const char *args[32] = {"--workers", w, "--shard", shard, "--log-level", "warn"};
        int n = 6;
        for (int k = 0; opt[k]; k++)
            args[n++] = opt[k];
        args[n] = NULL;
        assert_int_equal(harness_start(&c->srv[s], args), 0);
        size_t len = strlen(c->servers);
        snprintf(c->servers + len, sizeof(c->servers) - len, "%s%s", s ? "," : "",
                 c->srv[s].endpoint);
    }
}

static void stop(cluster_t *c)
{
    for (int s = 0; s < c->shards; s++)
        assert_int_equal(harness_stop(&c->srv[s]), 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
    assert_int_equal(system(cmd), 0);
}

/* Starts zps-worker with `args` (NULL-terminated), stdout to `out` (may be NULL). */
static pid_t spawn(const char *const *args, const char *out)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = ZPS_WORKER_BIN;
    for (int k = 0; args[k] && n < 62; k++)
        argv[n++] = args[k];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0)
            dup2(fd, STDOUT_FILENO);
        if (!getenv("ZPS_TEST_VERBOSE")) {
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0)
                dup2(null, STDERR_FILENO);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void wait_ok(pid_t pid, const char *who)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s failed (status %d)", who, status);
}

/*
 * Runs W workers of the cluster with the common `train` flags; rank 0 saves
 * the final parameters to `params` and prints its summary to `out`.
 */
static void run_cluster(cluster_t *c, int workers, const char *const *train, const char *params,
                        const char *out)
{
    pid_t pids[8];
    char rank[8][16], wn[16];
    snprintf(wn, sizeof(wn), "%d", workers);
    for (int r = 0; r < workers; r++) {
        snprintf(rank[r], sizeof(rank[r]), "%d", r);
        const char *args[48] = {"--servers", c->servers,   "--rank",        rank[r],
                                "--workers", wn,           "--no-progress", "--backend",
                                backend,     "--data-dir", fashion_dir};
        int n = 11;
        for (int k = 0; train[k]; k++)
            args[n++] = train[k];
        if (r == 0) {
            args[n++] = "--save-params";
            args[n++] = params;
        }
        args[n] = NULL;
        pids[r] = spawn(args, r == 0 ? out : NULL);
    }
    for (int r = 0; r < workers; r++)
        wait_ok(pids[r], "a cluster worker");
}

static void run_local(int workers, const char *const *train, const char *const *opt,
                      const char *params)
{
    char wn[16];
    snprintf(wn, sizeof(wn), "%d", workers);
    const char *args[48] = {"--local", "--workers",  wn,          "--no-progress", "--backend",
                            "cpu",     "--data-dir", fashion_dir, "--save-params", params};
    int n = 10;
    for (int k = 0; train[k]; k++)
        args[n++] = train[k];
    for (int k = 0; opt[k]; k++)
        args[n++] = opt[k];
    args[n] = NULL;
    wait_ok(spawn(args, NULL), "zps-worker --local");
}

/* Reads a raw float32 file of exactly n values. */
static void load(const char *path, float *v, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    assert_int_equal(fread(v, sizeof(float), n + 1, f), n);
    fclose(f);
}

#define SYNTH "synthetic:n=3000,test=500,dim=8"

static void test_regression_finds_the_weights(void **state)
{
    (void)state;
    const char *opt[] = {"--optimizer", "sgd", "--lr", "0.1", NULL};
    cluster_t c;
    start(&c, 2, 3, opt);
    const char *train[] = {"--data", SYNTH,    "--batch", "25", "--clocks",
                           "400",    "--seed", "3",       NULL};
    char path[128];
    snprintf(path, sizeof(path), "%s/cluster.f32", c.dir);
    run_cluster(&c, 3, train, path, NULL);

    /* The generator's own weights for the same spec and seed. */
    zps_dataset_t tr, te;
    char err[256];
    assert_int_equal(zps_dataset_open(SYNTH, NULL, 3, &tr, &te, err, sizeof(err)), 0);
    float got[9];
    load(path, got, 9); /* linear:8 is w[8] then b */
    for (int i = 0; i < 8; i++)
        if (fabs(got[i] - tr.true_w[i]) > 1e-3)
            fail_msg("w[%d] = %.6f, the data were made with %.6f", i, (double)got[i],
                     (double)tr.true_w[i]);
    assert_true(fabs(got[8] - tr.true_b) <= 1e-3);
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);
    stop(&c);
}

/* Max |a-b| / (1 + |b|) over n values. */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        if (d > m)
            m = d;
    }
    return m;
}

static void equivalence(const char *const *train, const char *const *opt, size_t nparams,
                        int workers, double tol)
{
    cluster_t c;
    start(&c, 2, workers, opt);
    char pc[128], pl[128];
    snprintf(pc, sizeof(pc), "%s/cluster.f32", c.dir);
    snprintf(pl, sizeof(pl), "%s/local.f32", c.dir);
    run_cluster(&c, workers, train, pc, NULL);
    run_local(workers, train, opt, pl);
    float *a = malloc(nparams * sizeof(float)), *b = malloc(nparams * sizeof(float));
    load(pc, a, nparams);
    load(pl, b, nparams);
    double d = max_rel_diff(a, b, nparams);
    tol *= tol_scale;
    printf("cluster (%s) vs --local (cpu): max relative difference %.3g over %zu parameters\n",
           backend, d, nparams);
    if (!(d <= tol))
        fail_msg("the cluster's parameters differ from --local's by %.3g (tolerance %.1g)", d, tol);
    free(a);
    free(b);
    stop(&c);
}

static void test_bsp_equals_local_linear(void **state)
{
    (void)state;
    const char *opt[] = {"--optimizer", "momentum", "--momentum", "0.9", "--lr", "0.02", NULL};
    const char *train[] = {"--data", SYNTH, "--batch", "7", "--clocks", "60", NULL};
    equivalence(train, opt, 9, 3, 1e-5);
}

static void test_bsp_equals_local_mlp(void **state)
{
    (void)state;
    skip_without_fashion();
    const char *opt[] = {"--optimizer", "sgd", "--lr", "0.05", NULL};
    const char *train[] = {"--model", "mlp:784-32-10", "--batch", "10", "--clocks", "40", NULL};
    /* 784*32 + 32 + 32*10 + 10 parameters */
    equivalence(train, opt, 25450, 4, 1e-4);
}

static void test_fashion_cluster_reaches_80(void **state)
{
    (void)state;
    skip_without_fashion();
    const char *opt[] = {"--optimizer", "momentum", "--momentum", "0.9", "--lr", "0.05", NULL};
    cluster_t c;
    start(&c, 2, 4, opt);
    const char *train[] = {"--batch", "16", "--clocks", "500", NULL};
    char params[128], out[128];
    snprintf(params, sizeof(params), "%s/params.f32", c.dir);
    snprintf(out, sizeof(out), "%s/stdout", c.dir);
    run_cluster(&c, 4, train, params, out);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[512];
    double acc = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "final test accuracy %lf", &acc) == 1)
            break;
    fclose(f);
    printf("2 servers, 4 workers (%s), 500 clocks: test accuracy %.4f\n", backend, acc);
    assert_true(acc >= 0.80);
    stop(&c);
}

/*
 * Whether `name` can compute here: 0, or 77 after printing "skipped" when
 * the backend reports no usable device (ZPS_ENODEV: no driver, no GPU, no
 * module), or 1 for any other failure, which is the test's to report.
 */
static int backend_usable(const char *name)
{
    zps_model_t m;
    zps_backend_opts_t o;
    zps_backend_t *be = NULL;
    char err[512] = "";
    ZPS_ASSERT(zps_model_parse("mlp:4-3", &m, NULL, 0) == 0);
    zps_backend_opts_default(&o);
    int rc = zps_backend_new(name, &m, &o, &be, err, sizeof(err));
    if (rc == ZPS_ENODEV) {
        printf("test_worker_cluster: skipped: backend %s: %s\n", name, err);
        return 77;
    }
    if (rc != 0) {
        printf("test_worker_cluster: backend %s: %s (%s)\n", name, err, zps_errname(rc));
        return 1;
    }
    printf("test_worker_cluster: cluster workers on %s\n", zps_backend_describe(be));
    zps_backend_free(be);
    return 0;
}

int main(void)
{
    const char *dir = getenv("ZPS_FASHION_MNIST_DIR");
    if (dir && *dir)
        fashion_dir = dir;
    const char *be = getenv("ZPS_TEST_BACKEND");
    if (be && *be && strcmp(be, "cpu") != 0) {
        backend = be;
        tol_scale = 10.0;
        int usable = backend_usable(backend);
        if (usable != 0)
            return usable;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regression_finds_the_weights),
        cmocka_unit_test(test_bsp_equals_local_linear),
        cmocka_unit_test(test_bsp_equals_local_mlp),
        cmocka_unit_test(test_fashion_cluster_reaches_80),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    /* A failure wins over a skip: 77 only when everything that ran passed. */
    return failed ? failed : skipped ? 77 : 0;
}
