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
 * With --curve it also measures what encryption (docs/security.md) costs,
 * in the same run: the exchange through a second zps-server started with
 * --key and --authorized-keys (keys made for the run in a temporary folder,
 * removed at exit) and a client with those keys, once with every byte over
 * CURVE (--no-seal) and once in a sealed session (the default: CURVE
 * authenticates, the bytes go AEAD-sealed over a plain connection), and a
 * raw ZeroMQ echo (X bytes up, the same X bytes back: one message each way)
 * over a CURVE DEALER/ROUTER pair, so that ZeroMQ's own share shows.
 *
 * Besides the tables, one machine-readable line per measured row (issue 15):
 *
 *   RESULT kind=KIND size=BYTES rtt_us=MEDIAN gbps=GBPS
 *
 * KIND is pushpull (zps push(t) + pull(t+1)), pushpull-raw (the raw
 * two-round-trip baseline above), exchange (zps's one exchange per clock:
 * the gradient of t and the pull of t+1 in one message each way), echo (raw
 * ZeroMQ, one message each way: the floor for an exchange), echo-step (that
 * echo, where the server applies an SGD step to parameters of its own with
 * each received gradient, in place in the received frames, and sends them
 * back: the least arithmetic a parameter server does per exchange, with no
 * checks), exchange-shm (the exchange through a shared-memory session, as a
 * worker on the server's host makes it), memcpy (a plain memcpy of the
 * same bytes each way in this process), shm-floor (the least any exchange
 * through shared memory between two processes moves: X copied into a
 * shared region, the other process, woken by a futex, copies it to a
 * second region, and X copied back out; no check, no arithmetic), and with
 * --curve also exchange-curve (the exchange, every byte over CURVE),
 * exchange-sealed (the exchange in a sealed session) and echo-curve (the
 * echo over CURVE), and with --bf16 exchange-bf16 (the exchange with
 * bfloat16 on the wire, zps-worker --wire-bf16: X/2 bytes each way, the
 * client's rounding with error feedback and the server's widening
 * included). gbps counts the 2X payload bytes of float32, whatever the wire
 * carried.
 *
 *   bench_pushpull [--sizes 4K,1M,16M,64M] [--seconds S] [--curve] [--bf16]
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "checksum.h"
#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "keys.h"
#include "shard.h"
#include "timeutil.h"
#include "wire.h"

typedef struct result {
    double seconds; /* per round trip, median */
    int rounds;
    /* --model: minor page faults per timed clock, the client process's and
     * all servers' together */
    double faults_client, faults_servers;
} result_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of rounds timings t[rounds] (sorted in place, then freed). */
static result_t median_of(double *t, int rounds)
{
    qsort(t, (size_t)rounds, sizeof(double), cmp_double);
    result_t res = {.seconds = t[rounds / 2], .rounds = rounds};
    free(t);
    return res;
}

/*
 * Rounds to run for a payload: enough for ~`seconds` of work, at least 5.
 * bytes_per_s is a rough first guess of the speed each way.
 */
static int rounds_for(size_t bytes, double seconds, double bytes_per_s)
{
    double est = 2.0 * (double)bytes / bytes_per_s + 60e-6;
    int r = (int)(seconds / est);
    return r < 5 ? 5 : r > 20000 ? 20000 : r;
}

/* ---- the raw ZeroMQ servers, each in a child process ---- */

typedef enum raw_kind {
    RAW_PUSHPULL,  /* X bytes up and an empty ack, then 'G' + uint64 X and X bytes back */
    RAW_ECHO,      /* X bytes up, the same message back */
    RAW_ECHO_STEP, /* X bytes of gradient up, an SGD step, the X bytes of parameters back */
} raw_kind_t;

/* The learning rate of the echo-step server (and of the zps servers): the
 * values barely move, the arithmetic is all done. */
#define RAW_STEP_LR 1e-9f

/*
 * The echo-step server's update of one frame: the gradient g[n] for
 * parameters p[n] (from the payload's offset on), p -= lr * g, and the new
 * parameters written over the gradient, so that the frame goes back as it
 * came (one pass: read both, write both; no copy, no check).
 */
static void raw_step(float *restrict p, float *restrict g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p[i] -= RAW_STEP_LR * g[i];
        g[i] = p[i];
    }
}

/* A raw server: its endpoint, its process, and its CURVE public key (Z85) if any. */
typedef struct raw_server {
    char endpoint[256];
    pid_t pid;
    bool curve;
    char server_public[41];
} raw_server_t;

/* Child: serves `kind` on a ROUTER until killed; a CURVE server when secret is given. */
static void raw_serve(int port_fd, raw_kind_t kind, size_t max_bytes, const char *secret)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    if (secret) {
        /* No ZAP handler: libzmq lets every client that knows the server key in. */
        int on = 1;
        if (zmq_setsockopt(s, ZMQ_CURVE_SERVER, &on, sizeof(on)) != 0 ||
            zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret, 40) != 0)
            _exit(1);
    }
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
        if (kind == RAW_ECHO || kind == RAW_ECHO_STEP) {
            /* The same message back, frame by frame: no copy on this side;
             * echo-step updates each frame in place first. */
            size_t off = 0;
            for (;;) {
                size_t n = zmq_msg_size(&body);
                if (kind == RAW_ECHO_STEP && off + n <= max_bytes && n % sizeof(float) == 0)
                    raw_step((float *)(data + off), zmq_msg_data(&body), n / sizeof(float));
                off += n;
                if (!zmq_msg_more(&body))
                    break;
                zmq_msg_send(&body, s, ZMQ_SNDMORE);
                zmq_msg_init(&body);
                if (zmq_msg_recv(&body, s, 0) < 0)
                    _exit(1);
            }
            zmq_msg_send(&body, s, 0);
        } else if (zmq_msg_size(&body) == sizeof(uint64_t) + 1 &&
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

/*
 * Forks a raw server (before this process has any ZeroMQ threads) and waits
 * for its endpoint. With curve, makes it a CURVE server with a fresh key pair.
 * Returns 0 or -1 with a message on stderr.
 */
static int raw_start(raw_server_t *rs, raw_kind_t kind, size_t max_bytes, bool curve)
{
    char secret[41] = {0};
    memset(rs, 0, sizeof(*rs));
    rs->curve = curve;
    if (curve && zmq_curve_keypair(rs->server_public, secret) != 0) {
        fprintf(stderr, "zmq_curve_keypair: %s (libzmq without CURVE?)\n", zmq_strerror(errno));
        return -1;
    }
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(fds[0]);
        raw_serve(fds[1], kind, max_bytes, curve ? secret : NULL);
    }
    close(fds[1]);
    memset(secret, 0, sizeof(secret));
    ssize_t n = read(fds[0], rs->endpoint, sizeof(rs->endpoint) - 1);
    close(fds[0]);
    if (n <= 0) {
        fprintf(stderr, "raw server did not start\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    rs->pid = pid;
    return 0;
}

static void raw_stop(raw_server_t *rs)
{
    if (rs->pid > 0) {
        kill(rs->pid, SIGKILL);
        waitpid(rs->pid, NULL, 0);
        rs->pid = 0;
    }
}

/* A DEALER connected to rs, a CURVE client with a fresh key pair when rs is CURVE. */
static void *raw_connect(void *ctx, const raw_server_t *rs)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    if (rs->curve) {
        char pub[41], sec[41];
        if (zmq_curve_keypair(pub, sec) != 0 ||
            zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, rs->server_public, 40) != 0 ||
            zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40) != 0 ||
            zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40) != 0) {
            fprintf(stderr, "raw CURVE client: %s\n", zmq_strerror(errno));
            exit(1);
        }
    }
    zmq_connect(s, rs->endpoint);
    return s;
}

static result_t bench_raw(const raw_server_t *rs, size_t bytes, int rounds)
{
    void *ctx = zmq_ctx_new();
    void *s = raw_connect(ctx, rs);
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
    result_t res = median_of(t, rounds);
    free(up);
    free(down);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return res;
}

/*
 * The floor of the shared-memory exchange: a plain memcpy of the same bytes
 * each way (X into a buffer, X back out), in this process, warm buffers.
 */
static result_t bench_memcpy(size_t bytes, int rounds)
{
    char *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    memset(c, 3, bytes);
    double *t = malloc(sizeof(double) * (size_t)(rounds + 2));
    for (int r = -2; r < rounds; r++) {
        uint64_t t0 = zps_now_ns();
        memcpy(b, a, bytes);
        memcpy(c, b, bytes);
        /* Keeps the copies from being optimised away. */
        __asm__ volatile("" : : "r"(c) : "memory");
        if (r >= 0)
            t[r] = (double)(zps_now_ns() - t0) / 1e9;
    }
    result_t res = median_of(t, rounds);
    free(a);
    free(b);
    free(c);
    return res;
}

/* ---- the floor of an exchange through shared memory, between two processes ---- */

/*
 * The least a shared-memory exchange between two processes does: the
 * worker's side copies X bytes into a shared region and wakes the other
 * process, which copies them into a second shared region (a server must at
 * least write the X bytes the worker then reads) and wakes it back; the
 * worker's side copies them out. Each side waits by spinning for up to
 * FLOOR_SPIN_NS, then on a futex, as a tuned implementation would. No
 * header, no check, no arithmetic, no ZeroMQ.
 */
#define FLOOR_SPIN_NS 50000ull

typedef struct floor_ctl {
    _Atomic uint32_t req;  /* bumped by the worker's side: the slot holds `bytes` */
    _Atomic uint32_t rep;  /* bumped by the other side: the buffer holds them */
    _Atomic uint32_t stop; /* the other side exits at its next request */
    uint64_t bytes;
} floor_ctl_t;

typedef struct shm_floor {
    floor_ctl_t *ctl;
    char *slot, *buf; /* [max] each, page aligned, in one shared mapping */
    size_t map_bytes;
    pid_t pid;
} shm_floor_t;

/* Waits until *w is no longer `seen`: spinning first, then on the futex. */
static void floor_wait(_Atomic uint32_t *w, uint32_t seen)
{
    uint64_t until = zps_now_ns() + FLOOR_SPIN_NS;
    while (atomic_load_explicit(w, memory_order_acquire) == seen) {
        if (zps_now_ns() < until)
            continue;
        /* A shared (not process-private) futex: the other process is woken. */
        syscall(SYS_futex, w, FUTEX_WAIT, seen, NULL, NULL, 0);
    }
}

static void floor_post(_Atomic uint32_t *w)
{
    atomic_fetch_add_explicit(w, 1, memory_order_release);
    syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/*
 * Maps the regions for payloads of up to `max` bytes and forks the other
 * side (before this process has any ZeroMQ threads). Returns 0 or -1.
 */
static int floor_start(shm_floor_t *f, size_t max)
{
    size_t page = 4096, region = (max + page - 1) / page * page;
    memset(f, 0, sizeof(*f));
    f->map_bytes = page + 2 * region;
    void *base =
        mmap(NULL, f->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return -1;
    }
    memset(base, 0, f->map_bytes); /* every page present in both processes */
    f->ctl = base;
    f->slot = (char *)base + page;
    f->buf = f->slot + region;
    pid_t pid = fork();
    if (pid < 0) {
        munmap(base, f->map_bytes);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        uint32_t seen = 0;
        for (;;) {
            floor_wait(&f->ctl->req, seen);
            seen = atomic_load_explicit(&f->ctl->req, memory_order_acquire);
            if (atomic_load(&f->ctl->stop))
                _exit(0);
            memcpy(f->buf, f->slot, f->ctl->bytes);
            floor_post(&f->ctl->rep);
        }
    }
    f->pid = pid;
    return 0;
}

static void floor_stop(shm_floor_t *f)
{
    if (f->pid > 0) {
        atomic_store(&f->ctl->stop, 1);
        floor_post(&f->ctl->req);
        waitpid(f->pid, NULL, 0);
        f->pid = 0;
    }
    if (f->ctl)
        munmap(f->ctl, f->map_bytes);
    f->ctl = NULL;
}

static result_t bench_shm_floor(shm_floor_t *f, size_t bytes, int rounds)
{
    char *up = malloc(bytes), *down = malloc(bytes);
    memset(up, 1, bytes);
    memset(down, 2, bytes);
    f->ctl->bytes = bytes;
    uint32_t seen = atomic_load(&f->ctl->rep);
    double *t = malloc(sizeof(double) * (size_t)(rounds + 2));
    for (int r = -2; r < rounds; r++) {
        uint64_t t0 = zps_now_ns();
        memcpy(f->slot, up, bytes);
        floor_post(&f->ctl->req);
        floor_wait(&f->ctl->rep, seen);
        seen = atomic_load_explicit(&f->ctl->rep, memory_order_acquire);
        memcpy(down, f->buf, bytes);
        __asm__ volatile("" : : "r"(down) : "memory");
        if (r >= 0)
            t[r] = (double)(zps_now_ns() - t0) / 1e9;
    }
    result_t res = median_of(t, rounds);
    free(up);
    free(down);
    return res;
}

/* Sends `bytes` of `up` as one message, in frames of at most `frame` bytes (zero-copy). */
static void echo_send(void *s, const char *up, size_t bytes, size_t frame)
{
    size_t off = 0;
    do {
        size_t n = bytes - off < frame ? bytes - off : frame;
        zmq_msg_t m;
        zmq_msg_init_data(&m, (void *)(up + off), n, NULL, NULL);
        zmq_msg_send(&m, s, off + n < bytes ? ZMQ_SNDMORE : 0);
        off += n;
    } while (off < bytes);
}

/* Receives one message of `bytes`, in any number of frames, into `down`. Returns 0 or -1. */
static int echo_recv(void *s, char *down, size_t bytes)
{
    size_t got = 0;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0 || got + zmq_msg_size(&m) > bytes) {
            zmq_msg_close(&m);
            return -1;
        }
        memcpy(down + got, zmq_msg_data(&m), zmq_msg_size(&m));
        got += zmq_msg_size(&m);
        int more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        if (!more)
            return got == bytes ? 0 : -1;
    }
}

/*
 * X bytes up from the caller's buffer without copying, the same X bytes back
 * into it: as one frame each way, or with `framed` in frames of
 * ZPS_WIRE_FRAME_BYTES, as zps sends a large payload. Against an echo-step
 * server what comes back is its parameters after the step.
 */
static result_t bench_echo(const raw_server_t *rs, size_t bytes, int rounds, bool framed)
{
    void *ctx = zmq_ctx_new();
    void *s = raw_connect(ctx, rs);
    char *up = malloc(bytes);
    char *down = malloc(bytes);
    /* zps's benchmark gradient (bench_zps): ordinary floats, so that the
     * echo-step server's arithmetic meets no subnormal numbers. */
    memset(up, 0, bytes);
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        ((float *)up)[i] = (float)(i % 97) * 0.01f;
    double *t = malloc(sizeof(double) * (size_t)(rounds + 2));
    for (int r = -2; r < rounds; r++) { /* two warm-up rounds (the CURVE handshake) */
        uint64_t t0 = zps_now_ns();
        echo_send(s, up, bytes, framed ? ZPS_WIRE_FRAME_BYTES : bytes);
        if (echo_recv(s, down, bytes) != 0) {
            fprintf(stderr, "echo: %s\n", zmq_strerror(errno));
            exit(1);
        }
        if (r >= 0)
            t[r] = (double)(zps_now_ns() - t0) / 1e9;
    }
    result_t res = median_of(t, rounds);
    free(up);
    free(down);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return res;
}

/* ---- keys for the CURVE zps-server, in a temporary folder ---- */

static char key_dir[64];

static void key_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", key_dir, name);
}

/* Removes the key folder and what is in it (atexit: no secret is left behind). */
static void keys_remove(void)
{
    static const char *const names[] = {"server.key", "server.pub", "client.key", "client.pub",
                                        "authorized_keys"};
    if (!key_dir[0])
        return;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char p[128];
        key_path(p, sizeof(p), names[i]);
        unlink(p);
    }
    rmdir(key_dir);
    key_dir[0] = '\0';
}

/*
 * Writes a server and a client key pair and an authorized keys file that
 * makes the client an admin (it initialises the model, then pushes and pulls
 * as worker 0), as `zps keygen` and a user would. Exits on failure.
 */
static void keys_make(void)
{
    char why[256], p[128];
    snprintf(key_dir, sizeof(key_dir), "/tmp/zps-bench-keys-XXXXXX");
    if (!mkdtemp(key_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    atexit(keys_remove);
    zps_keypair_t srv, cli;
    key_path(p, sizeof(p), "server");
    if (zps_keypair_generate(&srv, why, sizeof(why)) != 0 ||
        zps_keypair_write(p, &srv, false, why, sizeof(why)) != 0) {
        fprintf(stderr, "server keys: %s\n", why);
        exit(1);
    }
    key_path(p, sizeof(p), "client");
    if (zps_keypair_generate(&cli, why, sizeof(why)) != 0 ||
        zps_keypair_write(p, &cli, false, why, sizeof(why)) != 0) {
        fprintf(stderr, "client keys: %s\n", why);
        exit(1);
    }
    char z85[ZPS_KEY_Z85_CHARS + 1];
    zps_key_encode(cli.public_key, z85);
    zps_keypair_clear(&srv);
    zps_keypair_clear(&cli);
    key_path(p, sizeof(p), "authorized_keys");
    FILE *f = fopen(p, "w");
    if (!f || fprintf(f, "%s admin\n", z85) < 0 || fclose(f) != 0) {
        fprintf(stderr, "%s: %s\n", p, strerror(errno));
        exit(1);
    }
}

/* How a benchmark client talks to its server. */
typedef enum { SEC_PLAIN, SEC_CURVE, SEC_SEALED } security_t;

/*
 * zps round trips: push(t) + pull(t+1), or with `exchange` one
 * zps_client_exchange(t); with keys (keys_make first) all over CURVE, or in
 * a sealed session.
 */
static result_t bench_zps(size_t bytes, int rounds, security_t sec, bool exchange, bool bf16,
                          bool shm)
{
    bool curve = sec != SEC_PLAIN;
    harness_server_t srv;
    char server_key[128], authorized[128], client_key[128], server_pub[128];
    key_path(server_key, sizeof(server_key), "server.key");
    key_path(authorized, sizeof(authorized), "authorized_keys");
    key_path(client_key, sizeof(client_key), "client.key");
    key_path(server_pub, sizeof(server_pub), "server.pub");
    /* lr tiny: the values barely move, the arithmetic is all done. */
    const char *plain[] = {"--workers", "1", "--lr", "1e-9", "--log-level", "warn", NULL};
    const char *keyed[] = {"--workers",         "1",        "--lr",  "1e-9",
                           "--log-level",       "warn",     "--key", server_key,
                           "--authorized-keys", authorized, NULL};
    if (harness_start(&srv, curve ? keyed : plain) != 0) {
        fprintf(stderr, "cannot start zps-server\n");
        exit(1);
    }
    const char *eps[1] = {srv.endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = 0;
    o.timeout_ms = 60000;
    o.retry_ms = 0;
    char why[256];
    if (curve && zps_client_opts_set_keys(&o, client_key, server_pub, why, sizeof(why)) != 0) {
        fprintf(stderr, "client keys: %s\n", why);
        exit(1);
    }
    o.no_seal = sec == SEC_CURVE;
    o.wire_bf16 = bf16;
    o.shm = shm;
    zps_client_t *c;
    int made = zps_client_new(eps, 1, &o, &c);
    zps_client_opts_clear(&o);
    if (made != 0) {
        fprintf(stderr, "zps_client_new: %s\n", zps_strerror(made));
        exit(1);
    }
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
    /* Two warm-up rounds: the first is also the one that asks for a sealed session. */
    for (int r = -2; r < rounds; r++) {
        uint64_t t0 = zps_now_ns();
        int rc;
        if (exchange) {
            rc = zps_client_exchange(c, clock, grad, n, 32, params, NULL);
        } else {
            rc = zps_client_push(c, clock, grad, n, 32, NULL);
            if (rc == 0)
                rc = zps_client_pull(c, clock + 1, params, n, NULL);
        }
        if (rc) {
            fprintf(stderr, "zps: %s\n", zps_client_last_error(c));
            exit(1);
        }
        clock++;
        if (r >= 0)
            t[r] = (double)(zps_now_ns() - t0) / 1e9;
    }
    result_t res = median_of(t, rounds);
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

static void size_label(char *out, size_t size, size_t b)
{
    if (b >= 1024 * 1024)
        snprintf(out, size, "%zu MiB", b / (1024 * 1024));
    else
        snprintf(out, size, "%zu KiB", b / 1024);
}

static double gbps(size_t bytes, result_t r)
{
    return 2.0 * (double)bytes / r.seconds / 1e9;
}

/* The machine-readable line of issue 15: RESULT kind=KIND size=BYTES rtt_us=MEDIAN gbps=GBPS */
static void print_result(const char *kind, size_t bytes, result_t r)
{
    printf("RESULT kind=%s size=%zu rtt_us=%.1f gbps=%.3f\n", kind, bytes, r.seconds * 1e6,
           gbps(bytes, r));
}

/* What is measured for one payload (echo_curve, exchange_curve and
 * exchange_sealed only with --curve, exchange_bf16 only with --bf16). */
typedef struct row {
    size_t bytes;
    result_t zps_plain, raw, echo_plain, echo_frames, echo_step, echo_curve, exchange,
        exchange_curve, exchange_sealed;
    result_t exchange_bf16, exchange_shm, copy, shm_floor;
} row_t;

static void print_exchange_table(const row_t *rows, size_t count)
{
    printf("\none exchange per clock: zps_client_exchange against a raw ZeroMQ echo of the same "
           "bytes\n(one message each way, the floor) in one frame and in frames of %u KiB as zps "
           "sends\nthem, and against zps push + pull\n\n",
           ZPS_WIRE_FRAME_BYTES / 1024);
    printf("%9s %7s | %12s %7s | %12s %7s | %12s %7s | %12s | %9s %9s %10s\n", "payload", "rounds",
           "exchange", "GB/s", "echo RTT", "GB/s", "echo frames", "GB/s", "push+pull", "exchange/",
           "exchange/", "push+pull/");
    printf("%9s %7s | %12s %7s | %12s %7s | %12s %7s | %12s | %9s %9s %10s\n", "", "", "RTT", "",
           "", "", "RTT", "", "RTT", "echo", "frames", "exchange");
    for (size_t k = 0; k < count; k++) {
        const row_t *w = &rows[k];
        char label[32];
        size_label(label, sizeof(label), w->bytes);
        printf(
            "%9s %7d | %9.1f us %7.2f | %9.1f us %7.2f | %9.1f us %7.2f | %9.1f us | %9.2f %9.2f "
            "%10.2f\n",
            label, w->exchange.rounds, w->exchange.seconds * 1e6, gbps(w->bytes, w->exchange),
            w->echo_plain.seconds * 1e6, gbps(w->bytes, w->echo_plain),
            w->echo_frames.seconds * 1e6, gbps(w->bytes, w->echo_frames),
            w->zps_plain.seconds * 1e6, w->exchange.seconds / w->echo_plain.seconds,
            w->exchange.seconds / w->echo_frames.seconds,
            w->zps_plain.seconds / w->exchange.seconds);
    }
}

static void print_step_table(const row_t *rows, size_t count)
{
    printf("\nthe exchange against the least a parameter server does per exchange: the echo in\n"
           "frames, where the server applies an SGD step to its parameters with each gradient\n"
           "frame and sends the frame back holding them (no header, checksum or finite check)\n\n");
    printf("%9s %7s | %12s | %12s | %12s | %10s %10s\n", "payload", "rounds", "echo frames",
           "echo+step", "exchange", "echo+step/", "exchange/");
    printf("%9s %7s | %12s | %12s | %12s | %10s %10s\n", "", "", "RTT", "RTT", "RTT", "echo fr.",
           "echo+step");
    for (size_t k = 0; k < count; k++) {
        const row_t *w = &rows[k];
        char label[32];
        size_label(label, sizeof(label), w->bytes);
        printf("%9s %7d | %9.1f us | %9.1f us | %9.1f us | %10.2f %10.2f\n", label,
               w->echo_step.rounds, w->echo_frames.seconds * 1e6, w->echo_step.seconds * 1e6,
               w->exchange.seconds * 1e6, w->echo_step.seconds / w->echo_frames.seconds,
               w->exchange.seconds / w->echo_step.seconds);
    }
}

static void print_curve_table(const row_t *rows, size_t count)
{
    printf("\nencryption's cost: the exchange plain, over CURVE alone, and in a sealed session\n"
           "(CURVE authenticates; AEAD-sealed frames on a plain connection), and a raw ZeroMQ\n"
           "echo over CURVE; ratios of GB/s against the plain exchange\n\n");
    printf("%9s %7s | %12s | %12s %8s | %12s %8s | %12s %8s\n", "payload", "rounds", "plain",
           "CURVE", "CURVE/", "sealed", "sealed/", "echo CURVE", "/plain");
    printf("%9s %7s | %12s | %12s %8s | %12s %8s | %12s %8s\n", "", "", "RTT", "RTT", "plain",
           "RTT", "plain", "RTT", "echo");
    for (size_t k = 0; k < count; k++) {
        const row_t *w = &rows[k];
        char label[32];
        size_label(label, sizeof(label), w->bytes);
        printf("%9s %7d | %9.1f us | %9.1f us %8.2f | %9.1f us %8.2f | %9.1f us %8.2f\n", label,
               w->exchange_sealed.rounds, w->exchange.seconds * 1e6,
               w->exchange_curve.seconds * 1e6, w->exchange.seconds / w->exchange_curve.seconds,
               w->exchange_sealed.seconds * 1e6, w->exchange.seconds / w->exchange_sealed.seconds,
               w->echo_curve.seconds * 1e6, w->echo_plain.seconds / w->echo_curve.seconds);
    }
}

static void print_shm_table(const row_t *rows, size_t count)
{
    printf("\nshared memory: the exchange through a shared-memory session (the worker and the\n"
           "server on one host; headers over the socket), against the same exchange over the\n"
           "socket, a plain memcpy of the same bytes each way in one process, and the floor of\n"
           "any exchange between two processes through shared memory (X copied in, copied\n"
           "across by the other process woken by a futex, copied out; nothing checked)\n\n");
    printf("%9s %7s | %12s %9s | %12s %9s | %12s %9s | %12s | %10s %10s %10s\n", "payload",
           "rounds", "shm", "GB/s", "memcpy", "GB/s", "floor", "GB/s", "socket", "shm GB/s /",
           "floor GB/s", "shm RTT /");
    printf("%9s %7s | %12s %9s | %12s %9s | %12s %9s | %12s | %10s %10s %10s\n", "", "", "RTT", "",
           "", "", "RTT", "", "RTT", "memcpy", "/ memcpy", "floor RTT");
    for (size_t k = 0; k < count; k++) {
        const row_t *w = &rows[k];
        char label[32];
        size_label(label, sizeof(label), w->bytes);
        printf("%9s %7d | %9.1f us %9.2f | %9.1f us %9.2f | %9.1f us %9.2f | %9.1f us | %10.2f "
               "%10.2f %10.2f\n",
               label, w->exchange_shm.rounds, w->exchange_shm.seconds * 1e6,
               gbps(w->bytes, w->exchange_shm), w->copy.seconds * 1e6, gbps(w->bytes, w->copy),
               w->shm_floor.seconds * 1e6, gbps(w->bytes, w->shm_floor), w->exchange.seconds * 1e6,
               w->copy.seconds / w->exchange_shm.seconds, w->copy.seconds / w->shm_floor.seconds,
               w->exchange_shm.seconds / w->shm_floor.seconds);
    }
}

static void print_bf16_table(const row_t *rows, size_t count)
{
    printf("\nbfloat16 on the wire: the exchange with float32 values, and with bfloat16 ones\n"
           "(half the bytes each way, rounded on the client with error feedback and widened\n"
           "on the server, and back); the payload is the float32 size\n\n");
    printf("%9s %7s | %12s | %12s %8s\n", "payload", "rounds", "float32", "bfloat16", "f32 RTT/");
    printf("%9s %7s | %12s | %12s %8s\n", "", "", "RTT", "RTT", "bf16 RTT");
    for (size_t k = 0; k < count; k++) {
        const row_t *w = &rows[k];
        char label[32];
        size_label(label, sizeof(label), w->bytes);
        printf("%9s %7d | %9.1f us | %9.1f us %8.2f\n", label, w->exchange_bf16.rounds,
               w->exchange.seconds * 1e6, w->exchange_bf16.seconds * 1e6,
               w->exchange.seconds / w->exchange_bf16.seconds);
    }
}

/* ---- a model over several shards and workers (--model) ---- */

/* What one worker thread of the model benchmark does. */
typedef struct model_worker {
    int rank, workers, shards, rounds;
    const char *const *endpoints; /* zps: one per shard */
    const raw_server_t *echo;     /* echo: one per shard */
    size_t bytes;                 /* the whole model */
    const float *grad;            /* shared, read only */
    bool framed;                  /* echo: in frames as zps sends them */
    pthread_barrier_t *barrier;
    double *t; /* per round, this worker's */
    int failed;
    /* Rank 0 counts the minor page faults over the timed rounds: of this
     * process ([0]) and of each server ([1 + k], pid[k]). */
    const pid_t *pid;
    long *faults;
} model_worker_t;

/* Rank 0, after the warm-up round (sign -1) and after the last (+1): adds
 * sign times each process's fault count to w->faults. */
static void count_faults(const model_worker_t *w, int sign)
{
    if (w->rank != 0 || !w->pid || sign == 0)
        return;
    w->faults[0] += sign * harness_minor_faults(getpid());
    for (int k = 0; k < w->shards; k++)
        w->faults[1 + k] += sign * harness_minor_faults(w->pid[k]);
}

/* One worker of the zps cluster: an exchange per clock over all shards. */
static void *model_zps_worker(void *arg)
{
    model_worker_t *w = arg;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = w->rank;
    o.timeout_ms = 600000;
    o.retry_ms = 0;
    zps_client_t *c;
    if (zps_client_new(w->endpoints, (size_t)w->shards, &o, &c) != 0) {
        w->failed = 1;
        return NULL;
    }
    uint64_t n = w->bytes / sizeof(float);
    float *params = malloc(n * sizeof(float));
    for (int r = -1; r < w->rounds && params; r++) { /* a warm-up round */
        uint64_t t0 = zps_now_ns();
        if (zps_client_exchange(c, (uint64_t)(r + 1), w->grad, n, 32, params, NULL) != 0) {
            fprintf(stderr, "worker %d: %s\n", w->rank, zps_client_last_error(c));
            w->failed = 1;
            break;
        }
        if (r >= 0)
            w->t[r] = (double)(zps_now_ns() - t0) / 1e9;
        count_faults(w, r < 0 ? -1 : r == w->rounds - 1 ? 1 : 0);
    }
    free(params);
    zps_client_free(c);
    return NULL;
}

/* One worker of the raw baseline: each round its slice of the model to
 * every echo server and back, all shards at once; rounds in step with the
 * other workers, as BSP's clocks are. */
static void *model_echo_worker(void *arg)
{
    model_worker_t *w = arg;
    void *ctx = zmq_ctx_new();
    void **s = calloc((size_t)w->shards, sizeof(void *));
    char *down = malloc(w->bytes);
    for (int k = 0; k < w->shards; k++)
        s[k] = raw_connect(ctx, &w->echo[k]);
    for (int r = -1; r < w->rounds; r++) {
        pthread_barrier_wait(w->barrier);
        uint64_t t0 = zps_now_ns();
        size_t off[65];
        for (int k = 0; k <= w->shards; k++)
            off[k] = w->bytes / sizeof(float) * (size_t)k / (size_t)w->shards * sizeof(float);
        for (int k = 0; k < w->shards; k++)
            echo_send(s[k], (const char *)w->grad + off[k], off[k + 1] - off[k],
                      w->framed ? ZPS_WIRE_FRAME_BYTES : off[k + 1] - off[k]);
        for (int k = 0; k < w->shards; k++)
            if (echo_recv(s[k], down + off[k], off[k + 1] - off[k]) != 0)
                w->failed = 1;
        if (r >= 0)
            w->t[r] = (double)(zps_now_ns() - t0) / 1e9;
        count_faults(w, r < 0 ? -1 : r == w->rounds - 1 ? 1 : 0);
    }
    for (int k = 0; k < w->shards; k++)
        zmq_close(s[k]);
    free(s);
    free(down);
    zmq_ctx_term(ctx);
    return NULL;
}

/* Runs `workers` threads of `fn`; returns the median over workers and
 * rounds of the per-clock time. */
static result_t model_run(void *(*fn)(void *), model_worker_t *proto, int workers)
{
    pthread_t th[64];
    model_worker_t w[64];
    pthread_barrier_t barrier;
    long faults[65] = {0};
    pthread_barrier_init(&barrier, NULL, (unsigned)workers);
    for (int i = 0; i < workers; i++) {
        w[i] = *proto;
        w[i].rank = i;
        w[i].barrier = &barrier;
        w[i].faults = faults;
        w[i].t = calloc((size_t)proto->rounds, sizeof(double));
        pthread_create(&th[i], NULL, fn, &w[i]);
    }
    double *all = malloc(sizeof(double) * (size_t)(workers * proto->rounds));
    int failed = 0;
    for (int i = 0; i < workers; i++) {
        pthread_join(th[i], NULL);
        failed |= w[i].failed;
        memcpy(all + i * proto->rounds, w[i].t, sizeof(double) * (size_t)proto->rounds);
        free(w[i].t);
    }
    pthread_barrier_destroy(&barrier);
    if (failed) {
        fprintf(stderr, "model benchmark failed\n");
        exit(1);
    }
    result_t res = median_of(all, workers * proto->rounds);
    res.faults_client = (double)faults[0] / proto->rounds;
    for (int k = 0; k < proto->shards; k++)
        res.faults_servers += (double)faults[1 + k] / proto->rounds;
    return res;
}

/* A JSON number after `key` in text, or -1. */
static double json_after(const char *text, const char *key)
{
    const char *p = text ? strstr(text, key) : NULL;
    return p ? atof(p + strlen(key)) : -1;
}

/* STATS to one server every few ms while a run goes on: how long each waits for an answer. */
typedef struct prober {
    const char *endpoint;
    atomic_bool stop;
    double t[100000];
    int n;
} prober_t;

static void *prober_thread(void *p)
{
    prober_t *pr = p;
    const char *eps[1] = {pr->endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = 600000;
    o.retry_ms = 0;
    zps_client_t *c;
    if (zps_client_new(eps, 1, &o, &c) != 0)
        return NULL;
    while (!atomic_load(&pr->stop) && pr->n < (int)(sizeof(pr->t) / sizeof(pr->t[0]))) {
        char *json = NULL;
        uint64_t t0 = zps_now_ns();
        if (zps_client_stats(c, 0, &json) != 0)
            break;
        pr->t[pr->n++] = (double)(zps_now_ns() - t0) / 1e9;
        free(json);
        usleep(5000);
    }
    zps_client_free(c);
    return NULL;
}

/* One model run through zps-servers started with --background-step-bytes `background`. */
typedef struct model_zps {
    result_t clock;
    double stats_p50, stats_p99, stats_max; /* seconds */
    int probes;
} model_zps_t;

static model_zps_t model_zps(model_worker_t *proto, const char *background, bool report)
{
    int shards = proto->shards, workers = proto->workers;
    uint64_t n = proto->bytes / sizeof(float);
    harness_server_t srv[64];
    const char *eps[64];
    char wstr[16];
    snprintf(wstr, sizeof(wstr), "%d", workers);
    char shard[32];
    const char *args[] = {"--workers", wstr,          "--lr",
                          "1e-9",      "--log-level", "warn",
                          "--shard",   shard,         "--background-step-bytes",
                          background,  NULL};
    long base_kb[64];
    for (int k = 0; k < shards; k++) {
        snprintf(shard, sizeof(shard), "%d/%d", k, shards);
        if (harness_start(&srv[k], args) != 0) {
            fprintf(stderr, "cannot start zps-server\n");
            exit(1);
        }
        eps[k] = srv[k].endpoint;
        base_kb[k] = harness_rss_kb(srv[k].pid);
    }
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = 600000;
    o.retry_ms = 0; /* an INIT of this size takes seconds: never resent */
    zps_client_t *c;
    float *zero = calloc(n, sizeof(float));
    if (zps_client_new(eps, (size_t)shards, &o, &c) != 0) {
        fprintf(stderr, "cannot make a client\n");
        exit(1);
    }
    if (zps_client_init(c, zero, n) != 0) {
        fprintf(stderr, "init of the model: %s\n", zps_client_last_error(c));
        exit(1);
    }
    free(zero);
    proto->endpoints = eps;
    pid_t pid[64];
    for (int k = 0; k < shards; k++)
        pid[k] = srv[k].pid;
    proto->pid = pid;
    prober_t *pr = calloc(1, sizeof(*pr));
    pr->endpoint = eps[0];
    atomic_init(&pr->stop, false);
    pthread_t pt;
    pthread_create(&pt, NULL, prober_thread, pr);
    model_zps_t out = {.clock = model_run(model_zps_worker, proto, workers)};
    atomic_store(&pr->stop, true);
    pthread_join(pt, NULL);
    out.probes = pr->n;
    if (pr->n > 0) {
        qsort(pr->t, (size_t)pr->n, sizeof(double), cmp_double);
        out.stats_p50 = pr->t[pr->n / 2];
        out.stats_p99 = pr->t[(pr->n * 99) / 100];
        out.stats_max = pr->t[pr->n - 1];
    }
    free(pr);
    if (report) {
        /* The working set of an honest BSP shard over the socket
         * (docs/protocol.md, "What an honest run holds"; test_working_set):
         * its RSS before INIT, and P x ((1 + k) + W + 1) with k = 0 for
         * SGD: the parameters, the clock's W pushes in their frames, one
         * reply copy. */
        printf("%5s | %12s | %12s | %14s | %16s | %9s | %8s\n", "shard", "peak RSS MiB",
               "RSS now MiB", "working set MiB", "memory bound MiB", "peak/work", "peak/bound");
        double peak_mib[64], work_mib[64], bound_mib[64];
        for (int k = 0; k < shards; k++) {
            char *json = NULL;
            zps_client_stats(c, (size_t)k, &json);
            bound_mib[k] = json_after(json, "\"memory_bound_bytes\":") / 1048576.0;
            free(json);
            zps_range_t range;
            zps_shard_range(n, (uint32_t)k, (uint32_t)shards, &range);
            double p_mib = (double)zps_range_len(range) * sizeof(float) / 1048576.0;
            work_mib[k] = base_kb[k] / 1024.0 + p_mib * (1 + workers + 1);
            peak_mib[k] = harness_peak_rss_kb(srv[k].pid) / 1024.0;
            printf("%5d | %12.1f | %12.1f | %15.1f | %16.1f | %9.3f | %8.2f\n", k, peak_mib[k],
                   harness_rss_kb(srv[k].pid) / 1024.0, work_mib[k], bound_mib[k],
                   peak_mib[k] / work_mib[k], peak_mib[k] / bound_mib[k]);
        }
        for (int k = 0; k < shards; k++)
            printf("RESULT kind=shard-rss shard=%d peak_mib=%.1f working_set_mib=%.1f "
                   "bound_mib=%.1f\n",
                   k, peak_mib[k], work_mib[k], bound_mib[k]);
        printf("\n");
    }
    zps_client_free(c);
    for (int k = 0; k < shards; k++)
        harness_stop(&srv[k]);
    proto->pid = NULL;
    return out;
}

/*
 * --model: a model of `bytes` over `shards` zps-servers (BSP, W = workers,
 * SGD) and `workers` worker threads, each exchanging the whole model per
 * clock, against `workers` threads echoing the same slices through
 * `shards` raw ZeroMQ echo servers. The echo servers are forked by main
 * before any ZeroMQ thread exists. The zps run is made twice, with every
 * step on the servers' loop thread and with every step off it
 * (--background-step-bytes), while another client asks the first server for
 * STATS every 5 ms: what taking the step off the loop costs a clock, and
 * what it buys a request that does not touch the model. Each shard's peak
 * RSS is printed beside its working set (what an honest BSP shard holds,
 * docs/protocol.md) and its memory bound, with one line per shard:
 * RESULT kind=shard-rss shard=K peak_mib=... working_set_mib=... bound_mib=...
 */
static void bench_model(size_t bytes, int shards, int workers, int rounds, raw_server_t *echo)
{
    uint64_t n = bytes / sizeof(float);
    float *grad = malloc(n * sizeof(float));
    for (uint64_t i = 0; i < n; i++)
        grad[i] = (float)(i % 97) * 0.01f;
    model_worker_t proto = {.workers = workers,
                            .shards = shards,
                            .rounds = rounds,
                            .echo = echo,
                            .bytes = bytes,
                            .grad = grad};
    pid_t echo_pid[64];
    for (int k = 0; k < shards; k++)
        echo_pid[k] = echo[k].pid;
    proto.pid = echo_pid;
    result_t echo_r = model_run(model_echo_worker, &proto, workers);
    proto.framed = true;
    result_t frames_r = model_run(model_echo_worker, &proto, workers);
    /* Their memory back before the servers start (the heap keeps what the
     * largest messages took). */
    for (int k = 0; k < shards; k++)
        raw_stop(&echo[k]);

    printf("\na model of %zu MiB over %d shards and %d workers (BSP, SGD): one exchange per clock\n"
           "per worker, against a raw ZeroMQ echo of the same slices over as many connections\n"
           "(median over workers and %d rounds)\n\n",
           bytes >> 20, shards, workers, rounds);
    model_zps_t off = model_zps(&proto, "0", true);
    model_zps_t on = model_zps(&proto, "18446744073709551615", false);
    result_t zps_r = off.clock;
    printf("%12s | %12s | %12s | %10s %10s\n", "exchange", "echo", "echo frames", "exchange/",
           "exchange/");
    printf("%12s | %12s | %12s | %10s %10s\n", "per clock", "per clock", "per clock", "echo",
           "frames");
    printf("%9.1f ms | %9.1f ms | %9.1f ms | %10.2f %10.2f\n\n", zps_r.seconds * 1e3,
           echo_r.seconds * 1e3, frames_r.seconds * 1e3, zps_r.seconds / echo_r.seconds,
           zps_r.seconds / frames_r.seconds);
    printf("the same with each step on the servers' loop thread, and STATS asked of shard 0\n"
           "every 5 ms meanwhile (its answer's wait)\n\n");
    printf("%14s | %12s | %10s | %10s %10s %10s | %7s\n", "step", "per clock", "/ off loop",
           "STATS p50", "p99", "max", "probes");
    const model_zps_t *runs[2] = {&off, &on};
    const char *names[2] = {"off the loop", "on the loop"};
    for (int k = 0; k < 2; k++)
        printf("%14s | %9.1f ms | %10.2f | %7.2f ms %7.2f ms %7.2f ms | %7d\n", names[k],
               runs[k]->clock.seconds * 1e3, runs[k]->clock.seconds / off.clock.seconds,
               runs[k]->stats_p50 * 1e3, runs[k]->stats_p99 * 1e3, runs[k]->stats_max * 1e3,
               runs[k]->probes);
    printf("\nminor page faults per clock (after the warm-up round), the workers' process and\n"
           "all servers together\n\n");
    printf("%14s | %14s | %14s\n", "run", "workers", "servers");
    const struct {
        const char *name;
        const result_t *r;
    } rows[] = {{"echo", &echo_r},
                {"echo frames", &frames_r},
                {"zps off loop", &off.clock},
                {"zps on loop", &on.clock}};
    for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++)
        printf("%14s | %14.0f | %14.0f\n", rows[k].name, rows[k].r->faults_client,
               rows[k].r->faults_servers);
    printf("\n");
    print_result("exchange-model", bytes, zps_r);
    print_result("exchange-model-loop", bytes, on.clock);
    print_result("echo-model", bytes, echo_r);
    print_result("echo-model-frames", bytes, frames_r);
    free(grad);
}

int main(int argc, char **argv)
{
    zps_wire_tune_malloc();
    const char *sizes = "4K,1M,16M,64M";
    double seconds = 2.0;
    bool curve = false, bf16 = false;
    size_t model = 0;
    int shards = 4, workers = 4, model_rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            sizes = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--curve") == 0)
            curve = true;
        else if (strcmp(argv[i], "--bf16") == 0)
            bf16 = true;
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = parse_size(argv[++i]);
        else if (strcmp(argv[i], "--shards") == 0 && i + 1 < argc)
            shards = atoi(argv[++i]);
        else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
            workers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            model_rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_pushpull [--sizes 4K,1M,16M,64M] [--seconds S] [--curve] "
                            "[--bf16]\n"
                            "       bench_pushpull --model SIZE [--shards S] [--workers W] "
                            "[--rounds R]\n");
            return 2;
        }
    }
    if (model) {
        if (shards < 1 || shards > 64 || workers < 1 || workers > 64 || model_rounds < 1 ||
            model / sizeof(float) < (size_t)shards) {
            fprintf(stderr, "--model: 1 to 64 shards and workers, at least a value per shard\n");
            return 2;
        }
        raw_server_t echo[64];
        for (int k = 0; k < shards; k++)
            if (raw_start(&echo[k], RAW_ECHO, 0, false) != 0)
                return 1;
        bench_model(model, shards, workers, model_rounds, echo);
        for (int k = 0; k < shards; k++)
            raw_stop(&echo[k]);
        return 0;
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

    /* Fork the raw servers and the shared-memory floor's other side before
     * this process creates any ZeroMQ threads. */
    raw_server_t raw, echo, echo_step, echo_curve;
    shm_floor_t shm_floor;
    memset(&echo, 0, sizeof(echo));
    memset(&echo_step, 0, sizeof(echo_step));
    memset(&echo_curve, 0, sizeof(echo_curve));
    if (raw_start(&raw, RAW_PUSHPULL, max, false) != 0)
        return 1;
    if (raw_start(&echo, RAW_ECHO, max, false) != 0 ||
        raw_start(&echo_step, RAW_ECHO_STEP, max, false) != 0 ||
        floor_start(&shm_floor, max) != 0) {
        raw_stop(&raw);
        raw_stop(&echo);
        raw_stop(&echo_step);
        return 1;
    }
    if (curve) {
        if (raw_start(&echo_curve, RAW_ECHO, max, true) != 0) {
            raw_stop(&raw);
            raw_stop(&echo);
            return 1;
        }
        keys_make();
    }
    row_t rows[16];

    printf("push+pull round trips, one client, one server, 127.0.0.1 (median of N rounds)\n");
    printf("payload checksums: CRC32C, %s\n\n", zps_crc32c_kernel());
    printf("%9s %7s | %12s %9s | %12s %9s | %8s %8s\n", "payload", "rounds", "zps RTT", "zps GB/s",
           "raw RTT", "raw GB/s", "GB/s", "RTT");
    printf("%9s %7s | %12s %9s | %12s %9s | %8s %8s\n", "", "", "", "", "", "", "zps/raw",
           "zps/raw");
    for (size_t k = 0; k < count; k++) {
        size_t b = list[k];
        int rounds = rounds_for(b, seconds, 1.5e9);
        result_t raw_r = bench_raw(&raw, b, rounds);
        result_t zps_r = bench_zps(b, rounds, SEC_PLAIN, false, false, false);
        double zgbs = gbps(b, zps_r), rgbs = gbps(b, raw_r);
        char label[32];
        size_label(label, sizeof(label), b);
        printf("%9s %7d | %9.1f us %9.2f | %9.1f us %9.2f | %8.2f %8.2f\n", label, rounds,
               zps_r.seconds * 1e6, zgbs, raw_r.seconds * 1e6, rgbs, zgbs / rgbs,
               zps_r.seconds / raw_r.seconds);
        row_t *w = &rows[k];
        w->bytes = b;
        w->zps_plain = zps_r;
        w->raw = raw_r;
        w->echo_plain = bench_echo(&echo, b, rounds, false);
        w->echo_frames = bench_echo(&echo, b, rounds, true);
        w->echo_step = bench_echo(&echo_step, b, rounds, true);
        w->exchange = bench_zps(b, rounds, SEC_PLAIN, true, false, false);
        if (curve) {
            /* CURVE moves ~10x slower than plain TCP here: fewer rounds, about as long. */
            int crounds = rounds_for(b, seconds, 1.5e8);
            w->echo_curve = bench_echo(&echo_curve, b, crounds, false);
            w->exchange_curve = bench_zps(b, crounds, SEC_CURVE, true, false, false);
            w->exchange_sealed =
                bench_zps(b, rounds_for(b, seconds, 6e8), SEC_SEALED, true, false, false);
        }
        w->exchange_shm = bench_zps(b, rounds, SEC_PLAIN, true, false, true);
        w->copy = bench_memcpy(b, rounds_for(b, seconds, 5e9));
        w->shm_floor = bench_shm_floor(&shm_floor, b, rounds);
        if (bf16)
            w->exchange_bf16 = bench_zps(b, rounds, SEC_PLAIN, true, true, false);
        fflush(stdout);
    }
    print_exchange_table(rows, count);
    print_step_table(rows, count);
    print_shm_table(rows, count);
    if (bf16)
        print_bf16_table(rows, count);
    if (curve)
        print_curve_table(rows, count);
    printf("\n");
    for (size_t k = 0; k < count; k++) {
        const row_t *w = &rows[k];
        print_result("pushpull", w->bytes, w->zps_plain);
        print_result("pushpull-raw", w->bytes, w->raw);
        print_result("exchange", w->bytes, w->exchange);
        print_result("echo", w->bytes, w->echo_plain);
        print_result("echo-frames", w->bytes, w->echo_frames);
        print_result("echo-step", w->bytes, w->echo_step);
        print_result("exchange-shm", w->bytes, w->exchange_shm);
        print_result("memcpy", w->bytes, w->copy);
        print_result("shm-floor", w->bytes, w->shm_floor);
        if (curve) {
            print_result("exchange-curve", w->bytes, w->exchange_curve);
            print_result("exchange-sealed", w->bytes, w->exchange_sealed);
            print_result("echo-curve", w->bytes, w->echo_curve);
        }
        if (bf16)
            print_result("exchange-bf16", w->bytes, w->exchange_bf16);
    }
    raw_stop(&raw);
    raw_stop(&echo);
    raw_stop(&echo_step);
    raw_stop(&echo_curve);
    floor_stop(&shm_floor);
    return 0;
}
