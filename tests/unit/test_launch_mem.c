/*
 * test_launch_mem.c - zps launch's memory estimate (tool/launch_mem.c) for
 * tiny plans worked out by hand in the comments, the plan it reads from a
 * launch's flags, and the readers of /proc/meminfo, /proc/self/cgroup, the
 * cgroup files and /proc/vmstat on texts written here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "launch_mem.h"

#define MIB (1024ull * 1024ull)

static void test_estimate_by_hand(void **state)
{
    (void)state;
    /* mlp:4-3-2: P = 4*3 + 3 + 3*2 + 2 = 23, A = 4 + 3 + 2 = 9; two shards of
     * 12 and 11, momentum (k = 1), three workers, batch 5, shared memory;
     * Fashion-like data of 10 training and 6 test examples of 4 features. */
    zps_mem_plan_t p = {.params = 23,
                        .shard_max = 12,
                        .width_sum = 9,
                        .opt_state = 1,
                        .servers = 2,
                        .workers = 3,
                        .batch = 5,
                        .shm = true,
                        .data = {.n_train = 10, .n_test = 6, .dim = 4, .classes = 2}};
    zps_mem_estimate_t e;
    zps_mem_estimate(&p, &e);
    /* server: 6.5 MiB + 4*12*(3+1+3) = 336, + 4*12*2*3 = 288 with shared memory */
    assert_int_equal(e.server, 6 * MIB + MIB / 2 + 336 + 288);
    /* worker: 16 MiB + 4*3*23 = 276, + the training bytes 10*(4+4) = 80,
     * + activations 4*2*5*9 = 360 */
    assert_int_equal(e.worker, 16 * MIB + 276 + 80 + 360);
    /* evaluator: 16 MiB + 4*4*23 = 368, + the float test set 6*(16+4) = 120,
     * + activations at its chunk of 1024 rows, 4*2*1024*9 = 73728 */
    assert_int_equal(e.evaluator, 16 * MIB + 368 + 120 + 73728);
    assert_int_equal(e.total, 2 * e.server + 3 * e.worker + e.evaluator);

    /* Without shared memory the segments go; with SGD the state does. */
    p.shm = false;
    p.opt_state = 0;
    zps_mem_estimate(&p, &e);
    assert_int_equal(e.server, 6 * MIB + MIB / 2 + 4 * 12 * (3 + 0 + 3));

    /* A synthetic set is generated whole, in float32, by every process:
     * 4*((10+6)*(4+1) + 2*4) = 352, and the evaluator's batch is the larger
     * of b and its chunk. */
    p.data.synthetic = true;
    p.batch = 2000;
    zps_mem_estimate(&p, &e);
    assert_int_equal(e.worker, 16 * MIB + 276 + 352 + 4 * 2 * 2000 * 9);
    assert_int_equal(e.evaluator, 16 * MIB + 368 + 352 + 4 * 2 * 2000 * 9);
}

static void test_estimate_issue_model(void **state)
{
    (void)state;
    /* The issue's mlp:784-60000-60000-10 on Fashion-MNIST, 2 servers and 4
     * workers with the recipe's momentum: P = 784*60000 + 60000 +
     * 60000*60000 + 60000 + 60000*10 + 10 = 3,647,760,010. Each server
     * holds half (1,823,880,005) in 3 + 1 + 4 + 2*4 = 16 floats: 108.7 GiB. */
    zps_mem_plan_t p = {.params = 3647760010ull,
                        .shard_max = 1823880005ull,
                        .width_sum = 784 + 60000 + 60000 + 10,
                        .opt_state = 1,
                        .servers = 2,
                        .workers = 4,
                        .batch = 32,
                        .shm = true,
                        .data = {.n_train = 60000, .n_test = 10000, .dim = 784, .classes = 10}};
    zps_mem_estimate_t e;
    zps_mem_estimate(&p, &e);
    assert_true(e.server > 108ull * 1024 * MIB && e.server < 109ull * 1024 * MIB);
    assert_true(e.total > 400ull * 1024 * MIB); /* far beyond any one host here */
}

static void test_plan_of_flags(void **state)
{
    (void)state;
    zps_launch_opts_t o;
    memset(&o, 0, sizeof(o));
    o.servers = 3;
    o.workers = 2;
    o.batch = 8;
    o.data_shape = (zps_data_shape_t){.n_train = 100, .n_test = 10, .dim = 5, .classes = 3};
    char why[256];
    zps_mem_plan_t p;
    /* No --model: the trainer's default for the data, mlp:5-256-128-3:
     * P = 5*256 + 256 + 256*128 + 128 + 128*3 + 3 = 34819, shards of
     * 11607, 11606, 11606; no --optimizer: SGD. */
    assert_int_equal(zps_mem_plan_of(&o, &p, why, sizeof(why)), 0);
    assert_int_equal(p.params, 34819);
    assert_int_equal(p.shard_max, 11607);
    assert_int_equal(p.width_sum, 5 + 256 + 128 + 3);
    assert_int_equal(p.opt_state, 0);
    assert_true(p.shm);
    assert_int_equal(p.batch, 8);

    /* The command line's --model wins over the environment's; the servers'
     * last --optimizer counts; --no-shm anywhere turns the segments off. */
    zps_argv_push(&o.env_worker_args, "--model");
    zps_argv_push(&o.env_worker_args, "mlp:5-7-3");
    zps_argv_push(&o.worker_args, "--model");
    zps_argv_push(&o.worker_args, "mlp:5-2");
    zps_argv_push(&o.server_args, "--optimizer");
    zps_argv_push(&o.server_args, "momentum");
    zps_argv_push(&o.server_args, "--optimizer");
    zps_argv_push(&o.server_args, "adam");
    zps_argv_push(&o.env_server_args, "--no-shm");
    assert_int_equal(zps_mem_plan_of(&o, &p, why, sizeof(why)), 0);
    assert_int_equal(p.params, 5 * 2 + 2);
    assert_int_equal(p.shard_max, 4);
    assert_int_equal(p.opt_state, 2);
    assert_false(p.shm);

    zps_argv_push(&o.worker_args, "--model");
    zps_argv_push(&o.worker_args, "resnet18");
    assert_int_not_equal(zps_mem_plan_of(&o, &p, why, sizeof(why)), 0);
    zps_argv_free(&o.worker_args);
    zps_argv_free(&o.server_args);
    zps_argv_free(&o.env_worker_args);
    zps_argv_free(&o.env_server_args);
}

static void test_meminfo(void **state)
{
    (void)state;
    uint64_t b = 0;
    assert_true(zps_meminfo_available("MemTotal:       24684032 kB\n"
                                      "MemFree:        24041148 kB\n"
                                      "MemAvailable:   24339892 kB\n"
                                      "Buffers:           4096 kB\n",
                                      &b));
    assert_int_equal(b, 24339892ull * 1024);
    /* MemAvailableX is another key; a kernel before 3.14 has none */
    assert_false(zps_meminfo_available("MemTotal: 1 kB\nMemAvailableX: 5 kB\n", &b));
}

static void test_cgroup_paths(void **state)
{
    (void)state;
    char v2[64], v1[64];
    /* hybrid: a v1 memory controller beside the unified line */
    zps_cgroup_paths("9:name=systemd:/\n4:memory:/process_api/ab12\n2:cpu,cpuacct:/\n0::/\n", v2,
                     sizeof(v2), v1, sizeof(v1));
    assert_string_equal(v1, "/process_api/ab12");
    assert_string_equal(v2, "/");
    /* pure v2 */
    zps_cgroup_paths("0::/user.slice/user-1000.slice/session-3.scope\n", v2, sizeof(v2), v1,
                     sizeof(v1));
    assert_string_equal(v2, "/user.slice/user-1000.slice/session-3.scope");
    assert_string_equal(v1, "");
    /* memory among several v1 controllers; "memoryx" is not it */
    zps_cgroup_paths("3:memoryx:/no\n5:cpu,memory:/job7", v2, sizeof(v2), v1, sizeof(v1));
    assert_string_equal(v1, "/job7");
    assert_string_equal(v2, "");
}

static void test_cgroup_numbers(void **state)
{
    (void)state;
    uint64_t n = 0;
    assert_true(zps_cgroup_number("max\n", &n));
    assert_true(n == UINT64_MAX);
    assert_true(zps_cgroup_number("9223372036854771712\n", &n)); /* v1's "no limit" */
    assert_true(n == UINT64_MAX);
    assert_true(zps_cgroup_number("268435456\n", &n));
    assert_int_equal(n, 268435456);
    assert_false(zps_cgroup_number("", &n));
    assert_false(zps_cgroup_number("-1", &n));

    const char *vmstat = "pgfault 100\noom_kill_disable 0\noom_kill 3\n";
    assert_true(zps_keyed_number(vmstat, "oom_kill", &n));
    assert_int_equal(n, 3);
    assert_false(zps_keyed_number("oom_kill_disable 0\n", "oom_kill", &n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_by_hand), cmocka_unit_test(test_estimate_issue_model),
        cmocka_unit_test(test_plan_of_flags),    cmocka_unit_test(test_meminfo),
        cmocka_unit_test(test_cgroup_paths),     cmocka_unit_test(test_cgroup_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
