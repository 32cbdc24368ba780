/*
 * launch_hosts.h - `zps launch --hosts FILE`: a cluster over ssh. The hosts
 * file, where each server and worker runs, the ssh command line that starts
 * one of them, and the set-up of each host before anything starts (its run
 * folder and the secret keys of the processes it will run, nothing else).
 *
 * The hosts file has one host per line, `HOST [servers=N] [workers=M]`, '#'
 * starting a comment. When no line gives a count, --servers and --workers
 * are spread over the hosts in order (server i on host i mod H, worker r on
 * host r mod H); when any line does, every line says what it runs (an
 * omitted count is 0) and the totals come from the file. Shards and ranks
 * are numbered in file order. The evaluator runs beside worker 0.
 *
 * On every host the processes run from the same absolute paths as on the
 * launcher's machine (zps must be installed at the same path everywhere) in
 * the host's run folder RUN/hosts/HOST (that absolute path, created there),
 * which holds the keys the host's processes need and the files they write.
 * Each process is started as
 *
 *     SSH... HOST -- ZPS launch --exec-remote HOSTDIR FILE BIN ARGS...
 *
 * (launch_remote.h): its output comes back on ssh's stderr, FILE (a server's
 * endpoint file, a worker's metrics) on ssh's stdout, and ssh's stdin is the
 * launcher's line to it ("TERM", "KILL"; end of input stops the process).
 *
 * Not here: running the processes (launch.c), the far side
 * (launch_remote.h). Blocks on ssh during set-up; main thread of zps launch.
 */
#ifndef ZPS_LAUNCH_HOSTS_H
#define ZPS_LAUNCH_HOSTS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "launch_argv.h"

#define ZPS_LAUNCH_MAX_HOSTS 1024

typedef struct zps_launch_host {
    char name[256];         /* as in the file: a hostname or an address */
    uint32_t servers;       /* shards it runs: first_server, first_server + 1, ... */
    uint32_t workers;       /* ranks it runs: first_worker, first_worker + 1, ... */
    uint32_t first_server;  /* valid when servers > 0 */
    uint32_t first_worker;  /* valid when workers > 0 */
    char dir[PATH_MAX + 8]; /* RUN/hosts/NAME, the same path on the host */
} zps_launch_host_t;

typedef struct zps_launch_hosts {
    zps_launch_host_t *v;
    size_t n;
    uint32_t servers, workers; /* the totals */
    zps_argv_t ssh;            /* the ssh command's words, defaults appended */
    uint32_t port;             /* a host's servers listen on port, port + 1, ... */
} zps_launch_hosts_t;

/*
 * Reads the hosts file `path`. When no line gives a count, `servers` and
 * `workers` are spread over the hosts; when one does, servers_flag and
 * workers_flag (--servers and --workers as given, 0 when not) must equal
 * the file's totals. Returns 0, or ZPS_EINVAL with the reason (file and
 * line) in why; ZPS_EIO when the file cannot be read; ZPS_ENOMEM.
 */
int zps_launch_hosts_read(const char *path, uint32_t servers_flag, uint32_t workers_flag,
                          uint32_t servers, uint32_t workers, zps_launch_hosts_t *h, char *why,
                          size_t why_size);

/* Splits `ssh` ("ssh -F conf", words separated by blanks, no quoting) into
 * h->ssh and appends -T and BatchMode/ConnectTimeout options (the user's
 * own -o come first, and ssh takes the first value of each). 0 or ZPS_ENOMEM. */
int zps_launch_hosts_set_ssh(zps_launch_hosts_t *h, const char *ssh);

/* Sets every host's dir to run_dir/hosts/NAME. */
void zps_launch_hosts_set_dir(zps_launch_hosts_t *h, const char *run_dir);

/* The host that runs server `shard`, worker `rank` (the evaluator: rank = workers). */
const zps_launch_host_t *zps_launch_hosts_server(const zps_launch_hosts_t *h, uint32_t shard);
const zps_launch_host_t *zps_launch_hosts_worker(const zps_launch_hosts_t *h, uint32_t rank);

/* The port of server `shard` on its host. */
uint32_t zps_launch_hosts_port(const zps_launch_hosts_t *h, uint32_t shard);

/*
 * The command line that runs `cmd` (argv[0] the binary) on host `on` through
 * `zps` (the zps binary, launch --exec-remote), with the host's folder as
 * its working directory and `forward` (a path on the host) sent back on
 * stdout. 0 or ZPS_ENOMEM.
 */
int zps_launch_hosts_command(const zps_launch_hosts_t *h, const zps_launch_host_t *on,
                             const char *zps, const char *forward, const zps_argv_t *cmd,
                             zps_argv_t *out);

/*
 * Prepares every host, one after the other: over ssh, creates its folder
 * and its keys folder (0700), writes the key files its processes need from
 * keys_dir (secret keys 0600), and checks that `need` (the binaries it will
 * run, by absolute path) are there. Waits at most about 30 s per host. On
 * failure returns ZPS_EIO with "HOST: reason" (ssh's own message when ssh
 * failed) in why; what was written on the hosts before stays there.
 * ssh's stderr for each host is kept in log_dir/setup-HOST.log, a new file
 * made in log_fd (log_dir's descriptor) with O_EXCL|O_NOFOLLOW.
 */
int zps_launch_hosts_prepare(const zps_launch_hosts_t *h, const char *zps, const char *keys_dir,
                             const char *server_bin, const char *worker_bin, int log_fd,
                             const char *log_dir, char *why, size_t why_size);

void zps_launch_hosts_free(zps_launch_hosts_t *h);

#endif
