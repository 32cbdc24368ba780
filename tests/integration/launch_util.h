/*
 * launch_util.h - running `zps launch` from integration tests: start it with
 * its output in files, wait for it with a deadline, read its run folder, and
 * check that nothing it started is still alive.
 *
 * A test that gives up on a launch kills it; the launcher's children die
 * with it (PR_SET_PDEATHSIG), so no process outlives the test.
 */
#ifndef ZPS_LAUNCH_UTIL_H
#define ZPS_LAUNCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "json.h"

/* The zps tool under test (ZPS_BIN from the build, or $ZPS_BIN). */
const char *lu_zps_bin(void);

/* True when the Fashion-MNIST files are installed. */
bool lu_have_fashion(void);

/* A fresh temporary directory (mkdtemp) in buf; aborts the test on failure. */
void lu_tmpdir(char *buf, size_t size);
/* Removes a directory tree made by the test (rm -rf). */
void lu_rmtree(const char *dir);

/*
 * Starts `zps launch ARGS...` (args NULL-terminated, without "launch") with
 * stdout and stderr in OUT_DIR/stdout and OUT_DIR/stderr. Returns its pid.
 */
pid_t lu_start(const char *out_dir, const char *const *args);

/*
 * Waits for pid up to timeout_s; on timeout sends SIGTERM, then SIGKILL, and
 * returns -1. Otherwise returns the exit status, or 128 + signal.
 */
int lu_wait(pid_t pid, double timeout_s);

/* lu_start + lu_wait. */
int lu_run(const char *out_dir, const char *const *args, double timeout_s);

/* The whole file as a malloc'd string, or NULL. */
char *lu_read(const char *path);

/* Parses a JSON file; NULL if missing or invalid (the reason on stderr). */
zps_json_t *lu_read_json(const char *path);

/*
 * Over the "step" lines of a metrics file: the mean of `key` (from clock
 * `first` on), and the number of lines used in *n. NaN if none.
 */
double lu_step_mean(const char *path, const char *key, unsigned first, size_t *n);

/* Calls fn(line, arg) for each parsed "step" line of a metrics file; returns the count. */
size_t lu_each_step(const char *path, void (*fn)(const zps_json_t *step, void *arg), void *arg);

/* The pid of `name` ("worker-1") from RUN_DIR/processes.tsv, or -1. */
pid_t lu_pid_of(const char *run_dir, const char *name);

/* True if no process listed in RUN_DIR/processes.tsv is alive (zombies count as gone). */
bool lu_all_gone(const char *run_dir);

/* Polls until path exists and holds `needle` (or any content for NULL), up to timeout_s. */
bool lu_wait_for(const char *path, const char *needle, double timeout_s);

#endif
