/*
 * bench_pushpull.c - push+pull round trips through a real zps-server,
 * side by side with raw ZeroMQ carrying the same bytes in the same pattern,
 * measured in the same run.
 *
 * One zps round trip is push(t) of X bytes (the server verifies the checksum,
 * takes a BSP step with W = 1: the weighted mean and an SGD update) and
 * pull(t+1) of X bytes (the server copies and checksums its parameters).
 * The baseline is the same two exchanges over a DEALER/ROUTER pair with no
 * header, checksum or arithmetic: X bytes up and an empty acknowledgement,
 * then a small request and X bytes back. GB/s counts the 2X payload bytes.
 *
 *   bench_pushpull [--sizes 4K,1M,16M,64M] [--seconds S]
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "checksum.h"
#include "client.h"
#include "error.h"
#include "harness.h"
#include "timeutil.h"

typedef struct result {
    double seconds; /* per round trip, median */
    int rounds;
} result_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Rounds to run for a payload: enough for ~`seconds` of work, at least 5. */
static int rounds_for(size_t bytes, double seconds)
{
    double est = 2.0 * (double)bytes / 1.5e9 + 60e-6; /* a rough first guess */
    int r = (int)(seconds / est);
    return r < 5 ? 5 : r > 20000 ? 20000 : r;
}

/* ---- the raw ZeroMQ server, in a child process ---- */

static void raw_server(int port_fd, size_t max_bytes)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    if (zmq_bind(s, "tcp://127.0.0.1:*") != 0)
        _exit(1);
    char ep[256];
    size_t len = sizeof(ep);
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len);
    if (write(port_fd, ep, strlen(ep) + 1) < 0)
        _exit(1);
    close(port_fd);
    char *data = calloc(1, max_bytes ? max_bytes : 1);
    for (;;) {
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0)
            break;
        zmq_msg_send(&id, s, ZMQ_SNDMORE);
        if (zmq_msg_size(&body) == sizeof(uint64_t) + 1 &&
            ((char *)zmq_msg_data(&body))[0] == 'G') {
            uint64_t want;
            memcpy(&want, (char *)zmq_msg_data(&body) + 1, sizeof(want));
            zmq_msg_t out;
            /* The most favourable raw case: no copy at all. */
            zmq_msg_init_data(&out, data, want, NULL, NULL);
            zmq_msg_send(&out, s, 0);
        } else {
            zmq_send(s, "", 0, 0);
        }
        zmq_msg_close(&body);
    }
    _exit(0);
}

static result_t bench_raw(const char *endpoint, size_t bytes, int rounds)
{
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_connect(s, endpoint);
    char *up = malloc(bytes);
    char *down = malloc(bytes);
    memset(up, 1, bytes);
    char req[1 + sizeof(uint64_t)] = {'G'};
    uint64_t want = bytes;
    memcpy(req + 1, &want, sizeof(want));
    double *t = malloc(sizeof(double) * (size_t)(rounds + 2));
    for (int r = -2; r < rounds; r++) { /* two warm-up rounds */
        uint64_t t0 = zps_now_ns();
        /* Up: X bytes sent from the caller's buffer without copying, like a zps push. */
        zmq_msg_t m;
        zmq_msg_init_data(&m, up, bytes, NULL, NULL);
        zmq_msg_send(&m, s, 0);
        zmq_recv(s, down, 0, 0);
        /* Down: X bytes received into the caller's buffer, like a zps pull. */
        zmq_send(s, req, sizeof(req), 0);
        zmq_msg_init(&m);
        zmq_msg_recv(&m, s, 0);
        memcpy(down, zmq_msg_data(&m), zmq_msg_size(&m));
        zmq_msg_close(&m);
        if (r >= 0)
            t[r] = (double)(zps_now_ns() - t0) / 1e9;
    }
    qsort(t, (size_t)rounds, sizeof(double), cmp_double);
    result_t res = {t[rounds / 2], rounds};
    free(t);
    free(up);
    free(down);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return res;
}

static result_t bench_zps(size_t bytes, int rounds)
{
    harness_server_t srv;
    /* lr tiny: the values barely move, the arithmetic is all done. */
    const char *args[] = {"--workers", "1", "--lr", "1e-9", "--log-level", "warn", NULL};
    if (harness_start(&srv, args) != 0) {
        fprintf(stderr, "cannot start zps-server\n");
        exit(1);
    }
    const char *eps[1] = {srv.endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = 0;
    o.timeout_ms = 60000;
    o.retry_ms = 0;
    zps_client_t *c;
    zps_client_new(eps, 1, &o, &c);
    uint64_t n = bytes / sizeof(float);
    float *params = calloc(n, sizeof(float));
    float *grad = malloc(n * sizeof(float));
    for (uint64_t i = 0; i < n; i++)
        grad[i] = (float)(i % 97) * 0.01f;
    if (zps_client_init(c, params, n) != 0) {
        fprintf(stderr, "init: %s\n", zps_client_last_error(c));
        exit(1);
    }
    double *t = malloc(sizeof(double) * (size_t)(rounds + 2));
    uint64_t clock = 0;
    for (int r = -2; r < rounds; r++) {
        uint64_t t0 = zps_now_ns();
        int rc = zps_client_push(c, clock, grad, n, 32, NULL);
        if (rc == 0)
            rc = zps_client_pull(c, clock + 1, params, n, NULL);
        if (rc) {
            fprintf(stderr, "zps: %s\n", zps_client_last_error(c));
            exit(1);
        }
        clock++;
        if (r >= 0)
            t[r] = (double)(zps_now_ns() - t0) / 1e9;
    }
    qsort(t, (size_t)rounds, sizeof(double), cmp_double);
    result_t res = {t[rounds / 2], rounds};
    free(t);
    free(params);
    free(grad);
    zps_client_free(c);
    harness_stop(&srv);
    return res;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return (size_t)v / 4 * 4;
}

int main(int argc, char **argv)
{
    const char *sizes = "4K,1M,16M,64M";
    double seconds = 2.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            sizes = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_pushpull [--sizes 4K,1M,16M,64M] [--seconds S]\n");
            return 2;
        }
    }
    size_t list[16], count = 0, max = 0;
    char *copy = strdup(sizes);
    for (char *tok = strtok(copy, ","); tok && count < 16; tok = strtok(NULL, ",")) {
        list[count] = parse_size(tok);
        if (list[count] > max)
            max = list[count];
        count++;
    }
    free(copy);

    /* Fork the raw server before this process creates any ZeroMQ threads. */
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    pid_t raw = fork();
    if (raw == 0) {
        close(fds[0]);
        raw_server(fds[1], max);
    }
    close(fds[1]);
    char raw_ep[256] = {0};
    if (read(fds[0], raw_ep, sizeof(raw_ep) - 1) <= 0) {
        fprintf(stderr, "raw server did not start\n");
        return 1;
    }
    close(fds[0]);

    printf("push+pull round trips, one client, one server, 127.0.0.1 (median of N rounds)\n");
    printf("payload checksums: CRC32C, %s\n\n", zps_crc32c_kernel());
    printf("%9s %7s | %12s %9s | %12s %9s | %8s %8s\n", "payload", "rounds", "zps RTT", "zps GB/s",
           "raw RTT", "raw GB/s", "GB/s", "RTT");
    printf("%9s %7s | %12s %9s | %12s %9s | %8s %8s\n", "", "", "", "", "", "", "zps/raw",
           "zps/raw");
    for (size_t k = 0; k < count; k++) {
        size_t b = list[k];
        int rounds = rounds_for(b, seconds);
        result_t raw_r = bench_raw(raw_ep, b, rounds);
        result_t zps_r = bench_zps(b, rounds);
        double zgbs = 2.0 * (double)b / zps_r.seconds / 1e9;
        double rgbs = 2.0 * (double)b / raw_r.seconds / 1e9;
        char label[32];
        if (b >= 1024 * 1024)
            snprintf(label, sizeof(label), "%zu MiB", b / (1024 * 1024));
        else
            snprintf(label, sizeof(label), "%zu KiB", b / 1024);
        printf("%9s %7d | %9.1f us %9.2f | %9.1f us %9.2f | %8.2f %8.2f\n", label, rounds,
               zps_r.seconds * 1e6, zgbs, raw_r.seconds * 1e6, rgbs, zgbs / rgbs,
               zps_r.seconds / raw_r.seconds);
        fflush(stdout);
    }
    kill(raw, SIGKILL);
    waitpid(raw, NULL, 0);
    return 0;
}
