/*
 * launch_keys.c - the keys of a `zps launch --keys` run; see launch_keys.h.
 *
 * Every key pair is generated and written by common/keys.h (the secret file
 * created 0600 under a temporary name, synced, renamed), so this file only
 * chooses names and roles and writes the allow-list.
 */
#include "launch_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "keys.h"
#include "strbuf.h"

/* Generates a key pair, writes DIR/BASE.key and .pub, and appends its public key to z85. */
static int make_pair(const char *dir, const char *base, char z85[ZPS_KEY_Z85_CHARS + 1], char *why,
                     size_t why_size)
{
    zps_keypair_t kp;
    int rc = zps_keypair_generate(&kp, why, why_size);
    if (rc == 0) {
        char prefix[PATH_MAX + 64];
        snprintf(prefix, sizeof(prefix), "%s/%s", dir, base);
        rc = zps_keypair_write(prefix, &kp, false, why, why_size);
        zps_key_encode(kp.public_key, z85);
    }
    zps_keypair_clear(&kp);
    return rc;
}

/* Writes text to a new file `path` with mode 0644, synced. */
static int write_new_file(const char *path, const char *text, size_t len, char *why,
                          size_t why_size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        zps_set_reason(why, why_size, "cannot create %s: %s", path, strerror(errno));
        return ZPS_EIO;
    }
    int rc = 0;
    size_t off = 0;
    while (rc == 0 && off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = ZPS_EIO;
        else
            off += (size_t)n;
    }
    /* Whatever the umask: the servers read it, and it holds no secret. */
    if (rc == 0 && (fchmod(fd, 0644) != 0 || fsync(fd) != 0))
        rc = ZPS_EIO;
    if (close(fd) != 0)
        rc = ZPS_EIO;
    if (rc)
        zps_set_reason(why, why_size, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

int zps_launch_keys_make(int run_fd, const char *run_dir, const char *name, uint32_t workers,
                         zps_launch_keys_t *k, char *why, size_t why_size)
{
    memset(k, 0, sizeof(*k));
    snprintf(k->dir, sizeof(k->dir), "%s/keys", run_dir);
    /* mkdirat honours the umask, which may only take bits away; fchmod
     * makes it exactly 0700 before any key is written into it, on the
     * folder just made (O_NOFOLLOW), never through a link. */
    int fd = -1;
    if (mkdirat(run_fd, "keys", 0700) != 0 ||
        (fd = openat(run_fd, "keys", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
        fchmod(fd, 0700) != 0) {
        zps_set_reason(why, why_size, "cannot create %s: %s", k->dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return ZPS_EIO;
    }
    close(fd);
    snprintf(k->server_key, sizeof(k->server_key), "%s/server.key", k->dir);
    snprintf(k->server_pub, sizeof(k->server_pub), "%s/server.pub", k->dir);
    snprintf(k->authorized, sizeof(k->authorized), "%s/authorized_keys", k->dir);
    snprintf(k->evaluator, sizeof(k->evaluator), "%s/evaluator.key", k->dir);
    snprintf(k->launch, sizeof(k->launch), "%s/launch.key", k->dir);

    char z85[ZPS_KEY_Z85_CHARS + 1];
    zps_strbuf_t list;
    zps_strbuf_init(&list);
    zps_strbuf_printf(&list,
                      "# zps launch --keys: run %s\n"
                      "# worker 0 initialises the model, so it holds an admin key; every\n"
                      "# other worker may act only as its own rank.\n",
                      name);
    int rc = make_pair(k->dir, "server", z85, why, why_size);
    char base[32];
    for (uint32_t r = 0; rc == 0 && r < workers; r++) {
        snprintf(base, sizeof(base), "worker-%u", r);
        rc = make_pair(k->dir, base, z85, why, why_size);
        if (rc == 0 && r == 0)
            zps_strbuf_printf(&list, "%s admin  # worker 0\n", z85);
        else if (rc == 0)
            zps_strbuf_printf(&list, "%s worker %u  # worker %u\n", z85, r, r);
    }
    if (rc == 0 && (rc = make_pair(k->dir, "evaluator", z85, why, why_size)) == 0)
        zps_strbuf_printf(&list, "%s reader  # the evaluator\n", z85);
    if (rc == 0 && (rc = make_pair(k->dir, "launch", z85, why, why_size)) == 0)
        zps_strbuf_printf(&list, "%s reader  # zps launch (STATS)\n", z85);
    if (rc == 0 && list.failed) {
        zps_set_reason(why, why_size, "out of memory");
        rc = ZPS_ENOMEM;
    }
    if (rc == 0)
        rc = write_new_file(k->authorized, list.data, list.len, why, why_size);
    zps_strbuf_fini(&list);
    return rc;
}
