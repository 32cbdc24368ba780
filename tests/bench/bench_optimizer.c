/*
 * bench_optimizer.c - optimizer step throughput against memory bandwidth.
 *
 * On a large shard an optimizer step is one pass over a few arrays, so the
 * fastest it can go is the speed at which the machine moves those bytes.
 * This program measures, in the same run and interleaved, each optimizer's
 * step and a trivial loop with exactly the same memory traffic
 * (the same number of arrays read and written, in place), and prints the
 * ratio. A ratio near 1 means the optimizer runs at memory bandwidth; the
 * project's target is >= 0.8.
 *
 * The bandwidth loops, per element (all float32, all arrays [n]):
 *   triad  a = b + s*c                   2 reads, 1 write  (STREAM's triad)
 *   2r1w   a = a + s*b                   2 reads, 1 write  (SGD's traffic)
 *   3r2w   a = a + s*b; c = c + s*b      3 reads, 2 writes (momentum, AdaGrad)
 *   4r3w   a,c,d += s*b                  4 reads, 3 writes (Adam, AdamW)
 * "Bytes" counts what the loop must move (4 bytes per array read or
 * written); STREAM's triad also pays a write-allocate read of `a` that is
 * not counted, as in STREAM itself.
 *
 * The step is the server's: zps_optimizer_step_bounded, with max|g| known
 * (the server finds it in the receive scan it already makes of every
 * payload) and bounds on the arrays kept from step to step, so the exact
 * overflow check runs only when the bounds cannot rule an overflow out
 * (never here: the values stay small).
 *
 * A second table times the server's whole BSP step (server/store.h: the
 * mean of two gradients, the optimizer, the copy and CRC32C of the new
 * parameters for the replies) on the calling thread alone and on the
 * process's helper threads (common/pool.h), interleaved in the same run.
 *
 * It is not a test: ctest never runs it. tests/bench/optimizer.sh does.
 * The first table runs on one thread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "optimizer.h"
#include "pool.h"
#include "store.h"
#include "timeutil.h"

#define BENCH_ALIGN 64

/* ---- the bandwidth loops -------------------------------------------------- */

/*
 * noinline: each is timed as a call, like zps_optimizer_step. The loops get
 * the same instruction-set versions as the optimizer's (optimizer/optimizer.c),
 * so that both sides of a ratio use the same vector width.
 */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define BENCH_CLONES __attribute__((target_clones("default", "avx2")))
#endif
#endif
#ifndef BENCH_CLONES
#define BENCH_CLONES
#endif
#define BENCH_NOINLINE BENCH_CLONES __attribute__((noinline))

/* a, b, c: [n] */
static BENCH_NOINLINE void loop_triad(size_t n, float *restrict a, const float *restrict b,
                                      const float *restrict c, float s)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

/* a, b: [n] */
static BENCH_NOINLINE void loop_2r1w(size_t n, float *restrict a, const float *restrict b, float s)
{
    for (size_t i = 0; i < n; i++)
        a[i] = a[i] + s * b[i];
}

/* a, b, c: [n] */
static BENCH_NOINLINE void loop_3r2w(size_t n, float *restrict a, const float *restrict b,
                                     float *restrict c, float s)
{
    for (size_t i = 0; i < n; i++) {
        float x = b[i];
        a[i] = a[i] + s * x;
        c[i] = c[i] + s * x;
    }
}

/* a, b, c, d: [n] */
static BENCH_NOINLINE void loop_4r3w(size_t n, float *restrict a, const float *restrict b,
                                     float *restrict c, float *restrict d, float s)
{
    for (size_t i = 0; i < n; i++) {
        float x = b[i];
        a[i] = a[i] + s * x;
        c[i] = c[i] + s * x;
        d[i] = d[i] + s * x;
    }
}

/* ---- the rows of the table -------------------------------------------------- */

enum { ROW_LOOP, ROW_OPT };

typedef struct row {
    const char *name;
    const char *what; /* one-line description */
    int type;
    int reads, writes; /* arrays of n floats */
    int baseline;      /* index of the loop row to compare with, or -1 */
    const char *opt;   /* ROW_OPT: optimizer name for zps_opt_parse */
    zps_optimizer_t *optimizer;
    double *ns;              /* [reps] */
    zps_opt_bounds_t bounds; /* the state arrays' (bounds.p: see arrays_t) */
} row_t;

typedef struct arrays {
    size_t n;
    float *a, *b, *c, *d; /* bandwidth loops */
    float *p, *g;         /* parameters and gradient for the optimizers */
    double p_max;         /* bound on max|p|: every optimizer row steps the same p */
    double g_max;         /* max|g| */
} arrays_t;

static float *bench_alloc(size_t n, float value)
{
    size_t bytes = (n * sizeof(float) + BENCH_ALIGN - 1) / BENCH_ALIGN * BENCH_ALIGN;
    float *x = aligned_alloc(BENCH_ALIGN, bytes);
    if (x == NULL)
        return NULL;
    /* Touch every page now so no run pays for the first faults. */
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    return x;
}

static void run_row(row_t *r, arrays_t *m, int loop_kind)
{
    size_t n = m->n;
    if (r->type == ROW_OPT) {
        r->bounds.p = m->p_max;
        zps_optimizer_step_bounded(r->optimizer, m->p, m->g, 1.0, m->g_max, &r->bounds);
        m->p_max = r->bounds.p;
        return;
    }
    switch (loop_kind) {
    case 0:
        loop_triad(n, m->a, m->b, m->c, 1e-6f);
        break;
    case 1:
        loop_2r1w(n, m->a, m->b, 1e-6f);
        break;
    case 2:
        loop_3r2w(n, m->a, m->b, m->c, 1e-6f);
        break;
    default:
        loop_4r3w(n, m->a, m->b, m->c, m->d, 1e-6f);
        break;
    }
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/*
 * The server's BSP step of two gradients with its reply copy, SGD and Adam,
 * on one lane and on every lane the pool has, interleaved: best of reps.
 * Returns 0, or 1 when memory runs out.
 */
static int bench_store_steps(const arrays_t *m, int reps)
{
    const char *opts[] = {"sgd", "adam"};
    const uint32_t batches[2] = {16, 16};
    const float *grads[2] = {m->g, m->b};
    unsigned lanes = zps_pool_lanes();
    printf("\nthe server's BSP step (server/store.h: the mean of 2 gradients, the optimizer, the\n"
           "copy and CRC32C for the replies), on 1 thread and on the %u of the process's pool\n\n",
           lanes);
    printf("%-10s %12s %12s %10s\n", "optimizer", "1 lane ms", "pool ms", "speed-up");
    float *copy = bench_alloc(m->n, 0.0f);
    if (!copy)
        return 1;
    for (size_t o = 0; o < sizeof(opts) / sizeof(opts[0]); o++) {
        zps_opt_config_t cfg;
        zps_opt_config_default(&cfg);
        cfg.lr = 1e-6;
        if (zps_opt_parse(opts[o], &cfg) != 0) {
            free(copy);
            return 1;
        }
        zps_store_t st;
        zps_store_init(&st);
        zps_range_t r = {0, m->n};
        if (zps_store_set(&st, m->n, r, m->p, &cfg) != 0) {
            free(copy);
            return 1;
        }
        double best[2] = {1e30, 1e30};
        for (int k = -1; k < reps; k++) {
            for (int way = 0; way < 2; way++) {
                zps_pool_cap(way == 0 ? 1 : ZPS_POOL_LANES_MAX);
                uint64_t t0 = zps_now_ns();
                (void)zps_store_step_mean_bounded(&st, grads, batches, 2, 1.0, copy);
                double t = (double)(zps_now_ns() - t0);
                if (k >= 0 && t < best[way])
                    best[way] = t;
            }
        }
        printf("%-10s %12.2f %12.2f %10.2f\n", opts[o], best[0] * 1e-6, best[1] * 1e-6,
               best[0] / best[1]);
        zps_store_fini(&st);
    }
    zps_pool_cap(ZPS_POOL_LANES_MAX);
    free(copy);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_optimizer [--n FLOATS] [--reps R]\n"
               "  --n     parameters in the shard (default 16777216: 64 MiB of float32)\n"
               "  --reps  timed repetitions per row after one warm-up (default 20)\n");
}

int main(int argc, char **argv)
{
    size_t n = (size_t)16 << 20;
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            unsigned long long v = strtoull(argv[++i], &end, 10);
            if (*end != '\0' || v < 1024 || v > ((size_t)1 << 32)) {
                fprintf(stderr, "bench_optimizer: --n must be in [1024, 2^32]\n");
                return 2;
            }
            n = (size_t)v;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end != '\0' || v < 1 || v > 1000) {
                fprintf(stderr, "bench_optimizer: --reps must be in [1, 1000]\n");
                return 2;
            }
            reps = (int)v;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }

    row_t rows[] = {
        {"triad", "STREAM triad a = b + s*c", ROW_LOOP, 2, 1, -1, NULL, NULL, NULL, {0, {0, 0}}},
        {"loop 2r1w", "a = a + s*b", ROW_LOOP, 2, 1, -1, NULL, NULL, NULL, {0, {0, 0}}},
        {"sgd", "p -= lr*g", ROW_OPT, 2, 1, 1, "sgd", NULL, NULL, {0, {0, 0}}},
        {"loop 3r2w", "a += s*b; c += s*b", ROW_LOOP, 3, 2, -1, NULL, NULL, NULL, {0, {0, 0}}},
        {"momentum", "heavy-ball, mu 0.9", ROW_OPT, 3, 2, 3, "momentum", NULL, NULL, {0, {0, 0}}},
        {"nesterov", "Nesterov, mu 0.9", ROW_OPT, 3, 2, 3, "nesterov", NULL, NULL, {0, {0, 0}}},
        {"adagrad", "AdaGrad", ROW_OPT, 3, 2, 3, "adagrad", NULL, NULL, {0, {0, 0}}},
        {"loop 4r3w", "a, c, d += s*b", ROW_LOOP, 4, 3, -1, NULL, NULL, NULL, {0, {0, 0}}},
        {"adam", "Adam, betas 0.9/0.999", ROW_OPT, 4, 3, 7, "adam", NULL, NULL, {0, {0, 0}}},
        {"adamw", "AdamW, weight decay 0.01", ROW_OPT, 4, 3, 7, "adamw", NULL, NULL, {0, {0, 0}}},
    };
    /* The loop shape of each loop row (index into run_row's switch). */
    const int loop_kind[] = {0, 1, -1, 2, -1, -1, -1, 3, -1, -1};
    const size_t nrows = sizeof(rows) / sizeof(rows[0]);
    int status = 1;

    arrays_t m = {.n = n};
    m.a = bench_alloc(n, 1.0f);
    m.b = bench_alloc(n, 0.5f);
    m.c = bench_alloc(n, 0.25f);
    m.d = bench_alloc(n, 0.125f);
    m.p = bench_alloc(n, 1.0f);
    m.g = bench_alloc(n, 0.5f);
    if (!m.a || !m.b || !m.c || !m.d || !m.p || !m.g) {
        fprintf(stderr, "bench_optimizer: out of memory for %zu floats per array\n", n);
        goto done;
    }
    /* Gradients of mixed sign and size, none subnormal. */
    for (size_t i = 0; i < n; i++)
        m.g[i] = (float)((int)(i % 17) - 8) * 0.0625f + 0.03125f;

    for (size_t r = 0; r < nrows; r++) {
        rows[r].ns = calloc((size_t)reps, sizeof(double));
        if (rows[r].ns == NULL)
            goto done;
        if (rows[r].type != ROW_OPT)
            continue;
        zps_opt_config_t cfg;
        zps_opt_config_default(&cfg);
        cfg.lr = 1e-3;
        if (zps_opt_parse(rows[r].opt, &cfg) != 0)
            goto done;
        if (cfg.kind == ZPS_OPT_ADAMW)
            cfg.weight_decay = 0.01;
        int rc = zps_optimizer_new(&cfg, n, &rows[r].optimizer);
        if (rc != 0) {
            fprintf(stderr, "bench_optimizer: %s: %s\n", rows[r].opt, zps_strerror(rc));
            goto done;
        }
        zps_optimizer_measure(rows[r].optimizer, m.p, &rows[r].bounds);
    }
    m.p_max = zps_abs_max(m.p, n);
    m.g_max = zps_abs_max(m.g, n);

    /* One warm-up pass over every row (first touch of the state arrays,
     * caches, frequency), then `reps` timed passes, rows interleaved so a
     * slow moment of the machine hits every row alike. */
    for (size_t r = 0; r < nrows; r++)
        run_row(&rows[r], &m, loop_kind[r]);
    for (int k = 0; k < reps; k++) {
        for (size_t r = 0; r < nrows; r++) {
            uint64_t t0 = zps_now_ns();
            run_row(&rows[r], &m, loop_kind[r]);
            rows[r].ns[k] = (double)(zps_now_ns() - t0);
        }
    }

    printf("zps optimizer benchmark: %zu parameters (%.1f MiB per float32 array), 1 thread,\n"
           "best of %d timed runs after one warm-up; GB = 1e9 bytes the loop must move.\n\n",
           n, (double)n * 4.0 / 1048576.0, reps);
    printf("%-10s %-26s %-7s %6s %9s %9s %10s %8s %8s\n", "kernel", "what", "traffic", "B/el",
           "best ms", "median ms", "Mparam/s", "GB/s", "vs loop");
    printf("%-10s %-26s %-7s %6s %9s %9s %10s %8s %8s\n", "----------",
           "--------------------------", "-------", "------", "---------", "---------",
           "----------", "--------", "--------");
    double best[sizeof(rows) / sizeof(rows[0])];
    double worst_ratio = 1e9;
    for (size_t r = 0; r < nrows; r++) {
        qsort(rows[r].ns, (size_t)reps, sizeof(double), cmp_double);
        best[r] = rows[r].ns[0];
        double median = reps % 2 ? rows[r].ns[reps / 2]
                                 : (rows[r].ns[reps / 2 - 1] + rows[r].ns[reps / 2]) / 2.0;
        int bytes = 4 * (rows[r].reads + rows[r].writes);
        double sec = best[r] * 1e-9;
        char traffic[16];
        snprintf(traffic, sizeof(traffic), "%dR+%dW", rows[r].reads, rows[r].writes);
        char ratio[16] = "";
        if (rows[r].baseline >= 0) {
            double x = best[rows[r].baseline] / best[r];
            snprintf(ratio, sizeof(ratio), "%.2f", x);
            if (x < worst_ratio)
                worst_ratio = x;
        }
        printf("%-10s %-26s %-7s %6d %9.2f %9.2f %10.1f %8.2f %8s\n", rows[r].name, rows[r].what,
               traffic, bytes, best[r] * 1e-6, median * 1e-6, (double)n / sec * 1e-6,
               (double)n * bytes / sec * 1e-9, ratio);
    }
    printf("\n\"vs loop\": the optimizer's throughput over its loop's with the same traffic\n"
           "(sgd: loop 2r1w; momentum, nesterov, adagrad: loop 3r2w; adam, adamw: loop 4r3w).\n"
           "Lowest ratio %.2f; target >= 0.80: %s.\n",
           worst_ratio, worst_ratio >= 0.8 ? "met" : "NOT met");
    status = bench_store_steps(&m, reps);

done:
    for (size_t r = 0; r < nrows; r++) {
        zps_optimizer_free(rows[r].optimizer);
        free(rows[r].ns);
    }
    free(m.a);
    free(m.b);
    free(m.c);
    free(m.d);
    free(m.p);
    free(m.g);
    return status;
}
