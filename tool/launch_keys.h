/*
 * launch_keys.h - the keys of a `zps launch --keys` run: one CURVE key pair
 * per process, written into RUN/keys (mode 0700) with common/keys.h, and the
 * authorized keys file that binds each to its role.
 *
 *     keys/server.key, server.pub        one pair shared by every server: a
 *                                        client has one --server-key for all
 *     keys/worker-R.key, worker-R.pub    worker R: worker 0 an admin key (it
 *                                        initialises the model), the others a
 *                                        worker key for their own rank only
 *     keys/evaluator.key, .pub           a reader key (observer pulls)
 *     keys/launch.key, launch.pub        a reader key for launch's own STATS
 *     keys/authorized_keys               the servers' allow-list, one line a
 *                                        key with its role and a comment
 *
 * Secret keys are 0600, public keys and authorized_keys 0644 (inside a 0700
 * folder). The secrets live only in their files: a process is handed the
 * path of its own secret key, never the key itself.
 *
 * Not here: handing the paths to the children (launch.c), the file formats
 * (common/keys.h). Blocks on the file system; main thread of zps launch.
 */
#ifndef ZPS_LAUNCH_KEYS_H
#define ZPS_LAUNCH_KEYS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zps_launch_keys {
    char dir[PATH_MAX];             /* RUN/keys */
    char server_key[PATH_MAX + 32]; /* RUN/keys/server.key */
    char server_pub[PATH_MAX + 32]; /* RUN/keys/server.pub */
    char authorized[PATH_MAX + 32]; /* RUN/keys/authorized_keys */
    char evaluator[PATH_MAX + 32];  /* RUN/keys/evaluator.key */
    char launch[PATH_MAX + 32];     /* RUN/keys/launch.key */
} zps_launch_keys_t;

/*
 * Creates keys in the run folder run_fd, whose path is run_dir (mode 0700,
 * made with mkdirat; refused if it exists), the key pairs of
 * the server, of `workers` workers, of the evaluator and of launch, and the
 * authorized keys file (`name` is the run's, in its first comment), and
 * fills *k with the paths. Returns 0, or ZPS_EIO / ZPS_EINVAL / ZPS_ENOMEM
 * with the reason in why; what was written stays (it is inside the run
 * folder, and holds no secret of any other run).
 */
int zps_launch_keys_make(int run_fd, const char *run_dir, const char *name, uint32_t workers,
                         zps_launch_keys_t *k, char *why, size_t why_size);

#endif
