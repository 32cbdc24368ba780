/*
 * test_malloc_tune.c - what zps_wire_tune_malloc promises (wire.h): after
 * it, the frames of large messages received together over TCP, held, and
 * freed together, leave their memory in the heap for the next such burst
 * instead of giving it back to the kernel. A server holding W pushes until
 * its step does exactly this every clock; when glibc unmapped the I/O
 * thread's emptied heaps, every clock faulted the pages in again.
 *
 * Its own process: the setting must come before ZeroMQ's threads exist.
 * Under AddressSanitizer, whose allocator ignores mallopt, it is skipped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <zmq.h>

#include <cmocka.h>

#include "wire.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* One shard of a 1 GiB model over 4 shards with 4 workers: a BSP server
 * holds the 4 pushes of a clock, 256 MiB each, until its step. Below about
 * 1 GiB held, glibc's per-thread heaps happened to stay mapped; from there
 * on, a third or more of the pages faulted in again every round. */
enum {
    PUSHES = 4,
    PUSH_FLOATS = 64 << 20,               /* 256 MiB each: 256 frames */
    ROUNDS = 3,                           /* the first is the warm-up */
    PAGES_PER_ROUND = PUSHES * 256 * 256, /* 4 KiB pages received a round */
};

/* The payload is sent without a copy and stays the test's. */
static void kept(void *data, void *hint)
{
    (void)data;
    (void)hint;
}

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static void frames_memory_is_kept(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, timeout = 20000;
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
    char endpoint[64];
    size_t len = sizeof(endpoint);
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len);
    assert_int_equal(zmq_connect(dealer, endpoint), 0);

    float *grad = malloc((size_t)PUSH_FLOATS * sizeof(float));
    assert_non_null(grad);
    for (size_t i = 0; i < PUSH_FLOATS; i++)
        grad[i] = (float)(i % 101) * 0.5f;

    long after_warmup = 0;
    for (int round = 0; round < ROUNDS; round++) {
        zps_message_t held[PUSHES];
        for (int k = 0; k < PUSHES; k++) {
            zps_header_t h;
            zps_header_init(&h, ZPS_MSG_PUSH);
            h.clock = (uint64_t)round;
            assert_int_equal(zps_wire_send(dealer, NULL, &h, grad, PUSH_FLOATS, kept, NULL, 0), 0);
        }
        for (int k = 0; k < PUSHES; k++) {
            assert_int_equal(zps_wire_recv(router, 0, true, &held[k]), 0);
            assert_int_equal(held[k].hdr.length, PUSH_FLOATS);
        }
        for (int k = 0; k < PUSHES; k++)
            zps_message_close(&held[k]);
        if (round == 0)
            after_warmup = minor_faults();
    }
    long faults = minor_faults() - after_warmup;
    long pages = (long)PAGES_PER_ROUND * (ROUNDS - 1);
    print_message("%ld minor faults over %d rounds of %d held %d MiB pushes (%ld pages)\n", faults,
                  ROUNDS - 1, PUSHES, (int)(PUSH_FLOATS * sizeof(float) >> 20), pages);
    /* A tenth of the pages leaves room for whatever else the process
     * touches meanwhile. */
    assert_true(faults < pages / 10);

    free(grad);
    zmq_close(dealer);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(frames_memory_is_kept),
    };
#ifdef UNDER_ASAN
    (void)tests;
    printf("test_malloc_tune: skipped (AddressSanitizer's allocator ignores mallopt)\n");
    return 77;
#else
    zps_wire_tune_malloc();
    return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
