/*
 * harness.h - real zps-server processes for integration tests.
 *
 * Each server is started with --listen tcp://127.0.0.1:* (the kernel picks a
 * free port) and --endpoint-file, and the harness waits for that file. The
 * child dies with the test (PR_SET_PDEATHSIG), and harness_stop sends
 * SIGTERM, then SIGKILL after a grace period, so no process is left behind.
 *
 * ZPS_TEST_SECURE=1 runs a test with keys, as a cluster off loopback runs:
 * harness_start gives every server --key and --authorized-keys (a server
 * key pair and an admin client key, made once per test process in a
 * private folder removed at exit), ZPS_KEY and ZPS_SERVER_KEY are exported
 * for the zps-worker processes the test starts, `zps launch` gets --keys
 * (launch_util.h), and every zps_client_new of the test gets the client
 * key (harness_secure.c). Clients then work in sealed sessions, as they do
 * by default with keys. CTest runs the suite's client-level tests both
 * ways (the `secure` label).
 */
#ifndef ZPS_HARNESS_H
#define ZPS_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct harness_server {
    pid_t pid;
    char endpoint[256];
    char dir[256]; /* private temporary directory */
} harness_server_t;

/*
 * Starts zps-server with `args` (NULL-terminated, without --listen and
 * --endpoint-file). Returns 0, or -1 with a message on stderr.
 */
int harness_start(harness_server_t *s, const char *const *args);

/* SIGTERM, wait up to 5 s, then SIGKILL. Returns the exit status (or -1). */
int harness_stop(harness_server_t *s);

/* Sends `sig` (e.g. SIGSTOP, SIGCONT, SIGKILL) without waiting. */
void harness_signal(harness_server_t *s, int sig);

/* True while the process has not exited. */
bool harness_alive(harness_server_t *s);

/*
 * Starts argv[0] with argv in a child that dies with the test
 * (PR_SET_PDEATHSIG). Its stdout goes to out_path when given (else it is
 * the test's); its stderr to err_path when given, else to /dev/null unless
 * ZPS_TEST_VERBOSE is set. Returns the pid, or -1 with a message on stderr.
 */
pid_t harness_spawn(const char *const *argv, const char *out_path, const char *err_path);

/* The process's resident set size in kB (VmRSS in /proc/PID/status), or -1. */
long harness_rss_kb(pid_t pid);

/* Its peak resident set size in kB (VmHWM), or -1. */
long harness_peak_rss_kb(pid_t pid);

/* The minor page faults the process has taken (minflt in /proc/PID/stat), or -1. */
long harness_minor_faults(pid_t pid);

/* Whether ZPS_TEST_SECURE asks for keys. */
bool harness_secure(void);

/* Whether ZPS_TEST_SHM asks every worker client (worker >= 0) to use
 * shared-memory sessions (zps_client_opts_t.shm; the suite's `_shm` twins). */
bool harness_shm(void);

/* Makes the secure suite's keys once (0, or -1 with a message on stderr). */
int harness_secure_keys(void);

/* The admin client's secret key file and the servers' public key file. */
const char *harness_client_key(void);
const char *harness_server_pub(void);

/* In the secure suite, makes a raw ZeroMQ socket a CURVE client with those
 * keys (before it connects); otherwise does nothing. Returns 0 or -1. */
int harness_secure_socket(void *sock);

/* Path of the zps-server binary under test. */
const char *harness_server_bin(void);

#endif
