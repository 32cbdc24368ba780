/*
 * bench_client_loop.c - the C side of tests/bench/python_exchange.py: one
 * worker's exchanges through libzps.so, the library the Python client
 * loads, so the two differ only in the caller.
 *
 *   bench_client_loop ENDPOINT FLOATS ITERS
 *
 * Against a fresh zps-server (--workers 1, BSP): initialises FLOATS
 * parameters, makes 5 warm-up exchanges, then ITERS timed ones (clock
 * after clock, each with a gradient of zeros: the server's work is the
 * same whatever the values), and prints one line: "median_us MEDIAN".
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zps/zps.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: bench_client_loop ENDPOINT FLOATS ITERS\n");
        return 2;
    }
    const char *ep = argv[1];
    uint64_t n = strtoull(argv[2], NULL, 10);
    int iters = atoi(argv[3]);
    if (n == 0 || iters <= 0)
        return 2;
    float *w = calloc(n, sizeof(float)), *g = calloc(n, sizeof(float));
    double *t = calloc((size_t)iters, sizeof(double));
    if (!w || !g || !t)
        return 1;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = 0;
    zps_client_t *c = NULL;
    int rc = zps_client_new(&ep, 1, &o, &c);
    if (rc == 0)
        rc = zps_client_init(c, w, n);
    uint64_t clock = 0;
    for (int i = 0; rc == 0 && i < 5 + iters; i++, clock++) {
        double t0 = now_us();
        rc = zps_client_exchange(c, clock, g, n, 1, w, NULL);
        if (i >= 5)
            t[i - 5] = now_us() - t0;
    }
    if (rc) {
        fprintf(stderr, "bench_client_loop: %s: %s\n", zps_errname(rc),
                c ? zps_client_last_error(c) : "");
        return 1;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp);
    printf("median_us %.1f\n", t[iters / 2]);
    zps_client_free(c);
    free(w);
    free(g);
    free(t);
    return 0;
}
