/*
 * launch_mem.h - zps launch's memory check: what the processes of a local run
 * will hold, estimated from the plan before any of them starts, against what
 * this host has available; and, after a child was killed by SIGKILL, whether
 * the kernel's out-of-memory killer did it.
 *
 * The estimate (docs/launch.md, "Memory") counts, in bytes, with P the
 * model's parameters, P_s the largest shard's, k the optimizer's state
 * vectors (zps_opt_kind_state_count), W the training workers, b the batch
 * and A the sum of the layer widths (inputs included):
 *
 *   server     6.5 MiB + 4 P_s (3 + k + W), and 4 P_s 2W more with shared
 *              memory (the workers' segments: a parameter and a gradient
 *              region each)
 *   worker     16 MiB + 4 * 3P + its training data + 4 * 2 b A
 *   evaluator  16 MiB + 4 * 4P + the test set + 4 * 2 max(b, 1024) A
 *
 * Fashion-MNIST's training set is kept as bytes (n dim + 4 n for the labels),
 * its test set as float32; a synthetic set is generated whole in float32 by
 * every process. The coefficients were measured (proportional set size of
 * each process at its peak, one server and two workers), and fall within 7%
 * of the sum of the measured peaks.
 *
 * Nothing here starts a process; the readers of /proc and /sys take the text
 * of those files apart with the pure functions below, which the tests drive.
 */
#ifndef ZPS_LAUNCH_MEM_H
#define ZPS_LAUNCH_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "launch_opts.h"

typedef struct zps_mem_plan {
    uint64_t params;    /* P */
    uint64_t shard_max; /* P_s */
    uint64_t width_sum; /* A */
    uint32_t opt_state; /* k */
    uint32_t servers;   /* S */
    uint32_t workers;   /* W */
    uint64_t batch;     /* b */
    bool shm;           /* shared-memory sessions (the default on one host) */
    bool delay_comp;    /* --delay-compensation: a copy per worker and one more */
    zps_data_shape_t data;
} zps_mem_plan_t;

typedef struct zps_mem_estimate {
    uint64_t server, worker, evaluator; /* one process of each, bytes */
    uint64_t total;                     /* S servers, W workers and the evaluator */
} zps_mem_estimate_t;

/* The estimate above; pure arithmetic. */
void zps_mem_estimate(const zps_mem_plan_t *plan, zps_mem_estimate_t *out);

/* MemAvailable of /proc/meminfo's text, in bytes; false when absent. */
bool zps_meminfo_available(const char *text, uint64_t *bytes);

/*
 * The memory cgroup of /proc/self/cgroup's text: the path of the cgroup v2
 * line ("0::/PATH") into v2, of the v1 memory controller's line
 * ("N:...memory...:/PATH") into v1; either is "" when the text has none.
 */
void zps_cgroup_paths(const char *text, char *v2, size_t v2_size, char *v1, size_t v1_size);

/* A cgroup file's number: "max" (and v1's huge "unlimited" values) is
 * UINT64_MAX; false when the text is not a number. */
bool zps_cgroup_number(const char *text, uint64_t *out);

/* "KEY N" in a file of such lines (/proc/vmstat, memory.events,
 * memory.oom_control); false when KEY is absent. */
bool zps_keyed_number(const char *text, const char *key, uint64_t *out);

/*
 * What this host has available to a new process, in bytes: the smaller of
 * MemAvailable and the headroom (limit - usage) of this process's memory
 * cgroup and of each cgroup above it. `how` gets a few words on which bound
 * it is ("MemAvailable", "the cgroup's limit"). False when neither can be
 * read (then nothing is checked).
 */
bool zps_mem_available(uint64_t *bytes, char *how, size_t how_size);

/*
 * The plan of a parsed and planned local run (zps_launch_plan done): the
 * model (--model, else the trainer's default for the data), the optimizer
 * (the last --optimizer the servers get, else SGD), the shards, the batch
 * and whether shared memory is off (--no-shm for workers or servers).
 * Returns 0, or ZPS_EINVAL with a reason in why.
 */
int zps_mem_plan_of(const zps_launch_opts_t *o, zps_mem_plan_t *plan, char *why, size_t why_size);

/*
 * zps launch's check: 0 when the run fits, or nothing could be read;
 * otherwise prints "zps launch: needs about X GiB on this host (...), Y GiB
 * available: not started" and a hint, and returns ZPS_LAUNCH_EXIT_USAGE.
 */
int zps_launch_mem_check(const zps_launch_opts_t *o);

/* The out-of-memory kills counted so far: the host's (/proc/vmstat) and this
 * process's memory cgroup's; a counter that cannot be read stays 0. */
typedef struct zps_oom_counts {
    uint64_t host, cgroup;
} zps_oom_counts_t;

void zps_oom_counts_read(zps_oom_counts_t *out);

/* Whether either counter has risen since `before`. */
bool zps_oom_rose(const zps_oom_counts_t *before);

#endif
