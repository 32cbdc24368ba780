/*
 * keys.c - CURVE key files, the authorized keys list and the authorization
 * query; see keys.h for the formats and the rules.
 */
#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "error.h"
#include "fileutil.h"

#define KEY_FILE_MAX 4096 /* bytes: more than any key file needs */
#define SHOW_MAX 48       /* characters of a bad field quoted in a message */

static const char z85_alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/* Zeros memory that held a secret; the volatile stores are not optimised away. */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

static bool is_z85(char c)
{
    return c != '\0' && strchr(z85_alphabet, c) != NULL;
}

/* Copies s[0..n) into buf for a message: non-printable bytes as '?', long ones cut with "...". */
static const char *show(const char *s, size_t n, char buf[SHOW_MAX + 4])
{
    size_t k = n < SHOW_MAX ? n : SHOW_MAX;
    for (size_t i = 0; i < k; i++)
        buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (n > SHOW_MAX)
        memcpy(buf + k, "...", 4);
    else
        buf[k] = '\0';
    return buf;
}

/* ---- keys ---- */

int zps_key_decode(const char *z85, size_t len, uint8_t key[ZPS_KEY_BYTES], char *why,
                   size_t why_size)
{
    if (len != ZPS_KEY_Z85_CHARS) {
        zps_set_reason(why, why_size, "expected %d Z85 characters, found %zu", ZPS_KEY_Z85_CHARS,
                       len);
        return ZPS_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        if (!is_z85(z85[i])) {
            char c[SHOW_MAX + 4];
            zps_set_reason(why, why_size, "character %zu ('%s') is not a Z85 character", i + 1,
                           show(z85 + i, 1, c));
            return ZPS_EINVAL;
        }
    }
    char text[ZPS_KEY_Z85_CHARS + 1];
    uint8_t bytes[ZPS_KEY_BYTES];
    memcpy(text, z85, ZPS_KEY_Z85_CHARS);
    text[ZPS_KEY_Z85_CHARS] = '\0';
    int rc = 0;
    /* Every character is in the alphabet, so a refusal means a group of
     * five characters whose value does not fit 32 bits. */
    if (zmq_z85_decode(bytes, text) == NULL) {
        zps_set_reason(why, why_size, "not a Z85 encoding of 32 bytes");
        rc = ZPS_EINVAL;
    } else {
        memcpy(key, bytes, ZPS_KEY_BYTES);
    }
    wipe(text, sizeof(text));
    wipe(bytes, sizeof(bytes));
    return rc;
}

void zps_key_encode(const uint8_t key[ZPS_KEY_BYTES], char z85[ZPS_KEY_Z85_CHARS + 1])
{
    /* 32 is a multiple of 4, the only way zmq_z85_encode can fail. */
    char *s = zmq_z85_encode(z85, key, ZPS_KEY_BYTES);
    ZPS_ASSERT(s != NULL);
}

int zps_keypair_generate(zps_keypair_t *kp, char *why, size_t why_size)
{
    char pub[ZPS_KEY_Z85_CHARS + 1], sec[ZPS_KEY_Z85_CHARS + 1];
    int rc = ZPS_EIO;
    if (zmq_curve_keypair(pub, sec) != 0) {
        zps_set_reason(why, why_size, "libzmq cannot make a CURVE key pair: %s",
                       zmq_strerror(errno));
        goto done;
    }
    zps_keypair_t k;
    if (zps_key_decode(pub, ZPS_KEY_Z85_CHARS, k.public_key, NULL, 0) != 0 ||
        zps_key_decode(sec, ZPS_KEY_Z85_CHARS, k.secret_key, NULL, 0) != 0) {
        zps_set_reason(why, why_size, "libzmq made a key that is not Z85");
        zps_keypair_clear(&k);
        goto done;
    }
    *kp = k;
    zps_keypair_clear(&k);
    rc = 0;
done:
    wipe(sec, sizeof(sec));
    return rc;
}

int zps_keypair_from_secret(const uint8_t secret[ZPS_KEY_BYTES], zps_keypair_t *kp, char *why,
                            size_t why_size)
{
    char pub[ZPS_KEY_Z85_CHARS + 1], sec[ZPS_KEY_Z85_CHARS + 1];
    zps_key_encode(secret, sec);
    int rc = 0;
    if (zmq_curve_public(pub, sec) != 0) {
        zps_set_reason(why, why_size, "libzmq cannot derive a CURVE public key: %s",
                       zmq_strerror(errno));
        rc = ZPS_EIO;
    } else {
        /* libzmq's own Z85 always decodes. */
        uint8_t pk[ZPS_KEY_BYTES];
        int ok = zps_key_decode(pub, ZPS_KEY_Z85_CHARS, pk, NULL, 0);
        ZPS_ASSERT(ok == 0);
        memmove(kp->secret_key, secret, ZPS_KEY_BYTES); /* secret may be kp->secret_key */
        memcpy(kp->public_key, pk, ZPS_KEY_BYTES);
    }
    wipe(sec, sizeof(sec));
    return rc;
}

void zps_keypair_clear(zps_keypair_t *kp)
{
    wipe(kp, sizeof(*kp));
}

/* ---- writing ---- */

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/*
 * Writes text to a fresh temporary file beside `final` with exactly `mode`,
 * synced and closed; its name goes to tmp. Returns 0, or ZPS_EIO with no
 * temporary file left.
 */
static int write_temp(const char *final, mode_t mode, const char *text, size_t len, char *tmp,
                      size_t tmp_size, char *why, size_t why_size)
{
    /* O_EXCL never reuses a file someone else made (or a crashed writer
     * left), O_NOFOLLOW never writes through a planted link, and the mode
     * is given at creation so the file is never more open than `mode`. */
    int fd = -1;
    for (int attempt = 0; attempt < 64 && fd < 0; attempt++) {
        int n = snprintf(tmp, tmp_size, "%s.tmp.%ld.%d", final, (long)getpid(), attempt);
        if (n < 0 || (size_t)n >= tmp_size) {
            zps_set_reason(why, why_size, "path too long: %s.tmp...", final);
            return ZPS_EIO;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST) {
            zps_set_reason(why, why_size, "cannot create %s: %s", tmp, strerror(errno));
            return ZPS_EIO;
        }
    }
    if (fd < 0) {
        zps_set_reason(why, why_size, "cannot create %s: %s", tmp, strerror(EEXIST));
        return ZPS_EIO;
    }
    /* The umask can only have taken bits away: this gives back the owner's
     * bits (and the public file's read bits), never more than `mode`. */
    const char *step = "set the mode of";
    int err = 0;
    if (fchmod(fd, mode) != 0)
        goto fail;
    step = "write";
    if (write_all(fd, text, len) != 0)
        goto fail;
    step = "sync";
    if (fsync(fd) != 0)
        goto fail;
    step = "close";
    int closed = close(fd);
    fd = -1;
    if (closed != 0)
        goto fail;
    return 0;
fail:
    err = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    zps_set_reason(why, why_size, "cannot %s %s: %s", step, tmp, strerror(err));
    return ZPS_EIO;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/*
 * Puts tmp in place as final. With force, a rename replaces what is there;
 * without it, a hard link never does (EEXIST), and where the file system
 * has no hard links, a rename after a last check. Removes tmp either way.
 * Returns 0, ZPS_EINVAL (final exists) or ZPS_EIO.
 */
static int install(const char *tmp, const char *final, bool force, char *why, size_t why_size)
{
    if (force) {
        if (rename(tmp, final) == 0)
            return 0;
        zps_set_reason(why, why_size, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        unlink(tmp);
        return ZPS_EIO;
    }
    int rc = 0;
    if (link(tmp, final) != 0) {
        int err = errno;
        if (err == EEXIST) {
            zps_set_reason(why, why_size, "%s exists; use --force to replace it", final);
            rc = ZPS_EINVAL;
        } else if (err == EPERM || err == ENOTSUP || err == EOPNOTSUPP) {
            if (exists(final)) {
                zps_set_reason(why, why_size, "%s exists; use --force to replace it", final);
                rc = ZPS_EINVAL;
            } else if (rename(tmp, final) == 0) {
                return 0;
            } else {
                zps_set_reason(why, why_size, "cannot rename %s to %s: %s", tmp, final,
                               strerror(errno));
                rc = ZPS_EIO;
            }
        } else {
            zps_set_reason(why, why_size, "cannot link %s to %s: %s", tmp, final, strerror(err));
            rc = ZPS_EIO;
        }
    }
    /* After a link the file has both names; the temporary one goes. */
    unlink(tmp);
    return rc;
}

int zps_keypair_write(const char *prefix, const zps_keypair_t *kp, bool force, char *why,
                      size_t why_size)
{
    size_t plen = prefix ? strlen(prefix) : 0;
    if (plen == 0 || prefix[plen - 1] == '/') {
        zps_set_reason(why, why_size, "bad prefix '%s': expected a file name without .key or .pub",
                       prefix ? prefix : "");
        return ZPS_EINVAL;
    }
    char key_path[PATH_MAX], pub_path[PATH_MAX], dir[PATH_MAX];
    /* Room for the temporary names' suffix too. */
    if (plen + 4 + 32 >= PATH_MAX) {
        zps_set_reason(why, why_size, "prefix too long: %s", prefix);
        return ZPS_EINVAL;
    }
    snprintf(key_path, sizeof(key_path), "%s.key", prefix);
    snprintf(pub_path, sizeof(pub_path), "%s.pub", prefix);
    const char *slash = strrchr(prefix, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == prefix)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - prefix), prefix);

    if (!force) {
        bool k = exists(key_path), p = exists(pub_path);
        if (k && p) {
            zps_set_reason(why, why_size, "%s and %s exist; use --force to replace them", key_path,
                           pub_path);
            return ZPS_EINVAL;
        }
        if (k || p) {
            zps_set_reason(why, why_size, "%s exists; use --force to replace it",
                           k ? key_path : pub_path);
            return ZPS_EINVAL;
        }
    }

    char pub[ZPS_KEY_Z85_CHARS + 1], sec[ZPS_KEY_Z85_CHARS + 1];
    char key_text[128], pub_text[ZPS_KEY_Z85_CHARS + 2];
    char key_tmp[PATH_MAX], pub_tmp[PATH_MAX];
    zps_key_encode(kp->public_key, pub);
    zps_key_encode(kp->secret_key, sec);
    int key_len = snprintf(key_text, sizeof(key_text),
                           "# zps secret key; its public key is %s\n%s\n", pub, sec);
    int pub_len = snprintf(pub_text, sizeof(pub_text), "%s\n", pub);
    ZPS_ASSERT(key_len > 0 && (size_t)key_len < sizeof(key_text));
    ZPS_ASSERT(pub_len > 0 && (size_t)pub_len < sizeof(pub_text));

    int rc = write_temp(key_path, 0600, key_text, (size_t)key_len, key_tmp, sizeof(key_tmp), why,
                        why_size);
    if (rc != 0)
        goto done;
    rc = write_temp(pub_path, 0644, pub_text, (size_t)pub_len, pub_tmp, sizeof(pub_tmp), why,
                    why_size);
    if (rc != 0) {
        unlink(key_tmp);
        goto done;
    }
    rc = install(key_tmp, key_path, force, why, why_size);
    if (rc != 0) {
        unlink(pub_tmp);
        goto done;
    }
    rc = install(pub_tmp, pub_path, force, why, why_size);
    if (rc != 0) {
        if (!force) {
            /* The .key under its name is the link made above: ours to take back. */
            unlink(key_path);
        } else {
            size_t n = why ? strlen(why) : 0;
            if (n < why_size)
                zps_set_reason(why + n, why_size - n, " (%s was replaced, %s was not)", key_path,
                               pub_path);
        }
        goto done;
    }
    if (zps_sync_dir(dir) != 0) {
        zps_set_reason(why, why_size,
                       "cannot sync directory %s: %s (%s and %s are complete but may not "
                       "survive a crash)",
                       dir, strerror(errno), key_path, pub_path);
        rc = ZPS_EIO;
    }
done:
    wipe(sec, sizeof(sec));
    wipe(key_text, sizeof(key_text));
    return rc;
}

/* ---- reading ---- */

static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    return "not a regular file";
}

/*
 * Opens path for reading without waiting (a FIFO would wait for a writer)
 * and without following a final symbolic link when nofollow is set, and
 * refuses what is not a regular file. Returns an fd, or -1 with why set.
 */
static int open_regular(const char *path, bool nofollow, struct stat *st, char *why,
                        size_t why_size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0) {
        int err = errno;
        struct stat lst;
        if (nofollow && err == ELOOP && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
            zps_set_reason(why, why_size, "%s is a symbolic link; give the key file itself", path);
        else
            zps_set_reason(why, why_size, "cannot open %s: %s", path, strerror(err));
        return -1;
    }
    if (fstat(fd, st) != 0) {
        zps_set_reason(why, why_size, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        zps_set_reason(why, why_size, "%s is %s, not a regular file", path, file_kind(st->st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        zps_set_reason(why, why_size, "cannot read %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * What a key file's owner and mode must be, checked on the opened file
 * (fstat, so a file swapped in after the check is never the one read; for
 * a file reached through a symbolic link, the file itself).
 */
typedef struct file_rule {
    const char *what;  /* "secret key file", in messages */
    bool owner;        /* owned by this process's user or root */
    mode_t forbidden;  /* mode bits refused */
    const char *loose; /* "which lets group or others use it; make it private with" */
    const char *chmod; /* the fix, "chmod 600" */
} file_rule_t;

static const file_rule_t secret_rule = {"secret key file", true, 077,
                                        "which lets group or others use it; make it private with",
                                        "chmod 600"};
/* Anyone who can write the list can add a key of their own, with any role. */
static const file_rule_t authkeys_rule = {
    "authorized keys file", true, 022,
    "which lets group or others write it, and so add a key of their own; make it writable by "
    "its owner only with",
    "chmod go-w"};
/* A client trusts whichever server holds the secret of this key: one that
 * others may write could be swapped for a key of theirs. Its owner is not
 * checked: a server's public key is handed out, often as a copy owned by
 * whoever distributes it. */
static const file_rule_t pubkey_rule = {
    "public key file", false, 022,
    "which lets group or others write it, and so put a key of their own in its place; make it "
    "writable by its owner only with",
    "chmod go-w"};

/* Returns 0, or ZPS_EINVAL with why naming the file, what is wrong and the fix. */
static int check_file(const file_rule_t *r, const char *path, const struct stat *st, char *why,
                      size_t why_size)
{
    bool loose = (st->st_mode & r->forbidden) != 0;
    uid_t me = geteuid();
    if (r->owner && st->st_uid != me && st->st_uid != 0) {
        /* Its owner may rewrite it (or chmod it) whatever its mode now. */
        zps_set_reason(why, why_size,
                       "%s %s is owned by uid %u, not by this process's user (uid %u) or root, "
                       "so that user can change it; make it this user's with: chown %u %s%s%s%s%s",
                       r->what, path, (unsigned)st->st_uid, (unsigned)me, (unsigned)me, path,
                       loose ? " && " : "", loose ? r->chmod : "", loose ? " " : "",
                       loose ? path : "");
        return ZPS_EINVAL;
    }
    if (loose) {
        zps_set_reason(why, why_size, "%s %s has mode %04o, %s: %s %s", r->what, path,
                       (unsigned)(st->st_mode & 07777), r->loose, r->chmod, path);
        return ZPS_EINVAL;
    }
    return 0;
}

/*
 * Reads the whole of fd, at most max bytes, into a malloc'd buffer (*out,
 * *len; the caller frees, after wiping when it held a secret). Returns 0,
 * ZPS_EIO, ZPS_EINVAL (longer than max) or ZPS_ENOMEM.
 */
static int read_all(int fd, const char *path, size_t max, char **out, size_t *len, char *why,
                    size_t why_size)
{
    size_t cap = max < 4096 ? max + 1 : 4096, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        return ZPS_ENOMEM;
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                zps_set_reason(why, why_size, "%s is larger than %zu bytes", path, max);
                wipe(buf, n);
                free(buf);
                return ZPS_EINVAL;
            }
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            char *nb = malloc(ncap);
            if (nb == NULL) {
                wipe(buf, n);
                free(buf);
                return ZPS_ENOMEM;
            }
            memcpy(nb, buf, n);
            wipe(buf, n);
            free(buf);
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            zps_set_reason(why, why_size, "cannot read %s: %s", path, strerror(errno));
            wipe(buf, n);
            free(buf);
            return ZPS_EIO;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *len = n;
    return 0;
}

int zps_keypair_load(const char *path, zps_keypair_t *kp, char *why, size_t why_size)
{
    struct stat st;
    int fd = open_regular(path, true, &st, why, why_size);
    if (fd < 0)
        return ZPS_EIO;
    /* Like ssh with its keys: a secret others may read is no longer a
     * secret, and one others may write (or own) is not ours. Refused
     * before a byte of it is read. */
    if (check_file(&secret_rule, path, &st, why, why_size) != 0) {
        close(fd);
        return ZPS_EINVAL;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = read_all(fd, path, KEY_FILE_MAX, &text, &len, why, why_size);
    close(fd);
    if (rc != 0)
        return rc;

    /* An optional '#' comment line, then the key on one line. A key never
     * starts with '#' (keys.h), so the first line says which it is. */
    size_t end = len > 0 && text[len - 1] == '\n' ? len - 1 : len;
    const char *line = text;
    if (end > 0 && text[0] == '#') {
        const char *nl = memchr(text, '\n', end);
        if (nl == NULL) {
            zps_set_reason(why, why_size, "%s: no secret key after the comment line", path);
            rc = ZPS_EINVAL;
            goto done;
        }
        line = nl + 1;
    }
    if (memchr(line, '\n', end - (size_t)(line - text)) != NULL) {
        zps_set_reason(why, why_size,
                       "%s: expected the secret key on one line, after at most one comment "
                       "line starting with '#'",
                       path);
        rc = ZPS_EINVAL;
        goto done;
    }
    size_t line_len = end - (size_t)(line - text);
    uint8_t secret[ZPS_KEY_BYTES];
    char reason[128];
    if (zps_key_decode(line, line_len, secret, reason, sizeof(reason)) != 0) {
        zps_set_reason(why, why_size, "%s: bad secret key: %s", path, reason);
        rc = ZPS_EINVAL;
        goto done;
    }
    zps_keypair_t k;
    rc = zps_keypair_from_secret(secret, &k, why, why_size);
    if (rc == 0)
        *kp = k;
    zps_keypair_clear(&k);
    wipe(secret, sizeof(secret));
done:
    wipe(text, len);
    free(text);
    return rc;
}

int zps_pubkey_load(const char *path, uint8_t key[ZPS_KEY_BYTES], char *why, size_t why_size)
{
    struct stat st;
    int fd = open_regular(path, false, &st, why, why_size);
    if (fd < 0)
        return ZPS_EIO;
    if (check_file(&pubkey_rule, path, &st, why, why_size) != 0) {
        close(fd);
        return ZPS_EINVAL;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = read_all(fd, path, KEY_FILE_MAX, &text, &len, why, why_size);
    close(fd);
    if (rc != 0)
        return rc;
    size_t end = len > 0 && text[len - 1] == '\n' ? len - 1 : len;
    char reason[128];
    uint8_t k[ZPS_KEY_BYTES];
    if (memchr(text, '\n', end) != NULL) {
        zps_set_reason(why, why_size, "%s: expected the public key on one line, found more", path);
        rc = ZPS_EINVAL;
    } else if (zps_key_decode(text, end, k, reason, sizeof(reason)) != 0) {
        zps_set_reason(why, why_size, "%s: bad public key: %s", path, reason);
        rc = ZPS_EINVAL;
    } else {
        memcpy(key, k, ZPS_KEY_BYTES);
    }
    free(text);
    return rc;
}

/* ---- authorized keys ---- */

typedef struct rank_range {
    uint32_t lo, hi; /* inclusive */
} rank_range_t;

typedef struct entry {
    uint8_t key[ZPS_KEY_BYTES];
    zps_role_t role;
    unsigned line;
    size_t first, count; /* worker: its ranges, list->ranges[first..first+count), sorted */
} entry_t;

struct zps_authkeys {
    entry_t *entries; /* sorted by key once parsed */
    size_t n, cap;
    rank_range_t *ranges;
    size_t nranges, rcap;
};

void zps_authkeys_free(zps_authkeys_t *list)
{
    if (list == NULL)
        return;
    free(list->entries);
    free(list->ranges);
    free(list);
}

size_t zps_authkeys_count(const zps_authkeys_t *list)
{
    return list ? list->n : 0;
}

const char *zps_role_name(zps_role_t role)
{
    switch (role) {
    case ZPS_ROLE_WORKER:
        return "worker";
    case ZPS_ROLE_ADMIN:
        return "admin";
    case ZPS_ROLE_READER:
        return "reader";
    }
    return "?";
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* The next blank-separated field of [*p, end): [*f, *f + *n); false at the end. */
static bool next_field(const char **p, const char *end, const char **f, size_t *n)
{
    const char *s = *p;
    while (s < end && is_blank(*s))
        s++;
    if (s == end)
        return false;
    const char *e = s;
    while (e < end && !is_blank(*e))
        e++;
    *f = s;
    *n = (size_t)(e - s);
    *p = e;
    return true;
}

static bool field_is(const char *f, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(f, word, n) == 0;
}

/* A parse in progress: where messages point. */
typedef struct parser {
    const char *name;
    unsigned line;
    char *why;
    size_t why_size;
} parser_t;

__attribute__((format(printf, 2, 3))) static int parse_error(parser_t *ps, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    zps_set_reason(ps->why, ps->why_size, "%s:%u: %s", ps->name, ps->line, msg);
    return ZPS_EINVAL;
}

/* Parses decimal digits [s, e) into *v. Returns 0, 1 (not a number) or 2 (above the highest rank).
 */
static int parse_rank(const char *s, const char *e, uint32_t *v)
{
    if (s == e)
        return 1;
    uint32_t x = 0;
    bool big = false;
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9')
            return 1;
        if (!big) {
            x = x * 10 + (uint32_t)(*p - '0');
            big = x > ZPS_KEYS_MAX_RANK;
        }
    }
    if (big)
        return 2;
    *v = x;
    return 0;
}

static int cmp_range(const void *a, const void *b)
{
    const rank_range_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Appends the ranges of rank list [s, s + n) to list and to e. Returns 0, ZPS_EINVAL or ZPS_ENOMEM.
 */
static int parse_ranks(parser_t *ps, const char *s, size_t n, uint32_t workers,
                       zps_authkeys_t *list, entry_t *e)
{
    char all[SHOW_MAX + 4], item[SHOW_MAX + 4];
    show(s, n, all);
    e->first = list->nranges;
    e->count = 0;
    const char *end = s + n;
    for (const char *p = s;; p++) {
        const char *q = memchr(p, ',', (size_t)(end - p));
        if (q == NULL)
            q = end;
        if (q == p)
            return parse_error(ps, "empty item in rank list '%s'", all);
        show(p, (size_t)(q - p), item);
        const char *dash = memchr(p, '-', (size_t)(q - p));
        uint32_t lo, hi;
        int r1 = parse_rank(p, dash ? dash : q, &lo);
        int r2 = dash ? parse_rank(dash + 1, q, &hi) : r1;
        if (r1 == 1 || r2 == 1)
            return parse_error(ps,
                               "bad item '%s' in rank list '%s': expected a rank like 2 or a range "
                               "like 2-3",
                               item, all);
        if (r1 == 2 || r2 == 2)
            return parse_error(ps, "rank out of range in '%s': the highest rank is %d", item,
                               ZPS_KEYS_MAX_RANK);
        if (!dash)
            hi = lo;
        if (hi < lo)
            return parse_error(ps, "descending range %u-%u in rank list '%s'", lo, hi, all);
        if (workers != 0 && hi >= workers)
            return parse_error(
                ps, "rank %u is not below the number of workers, %u (the last rank is %u)", hi,
                workers, workers - 1);
        if (list->nranges == list->rcap) {
            size_t ncap = list->rcap ? list->rcap * 2 : 16;
            rank_range_t *nr = realloc(list->ranges, ncap * sizeof(*nr));
            if (nr == NULL)
                return ZPS_ENOMEM;
            list->ranges = nr;
            list->rcap = ncap;
        }
        list->ranges[list->nranges++] = (rank_range_t){lo, hi};
        e->count++;
        if (q == end)
            break;
        p = q;
    }
    rank_range_t *r = list->ranges + e->first;
    qsort(r, e->count, sizeof(*r), cmp_range);
    for (size_t i = 1; i < e->count; i++) {
        if (r[i].lo <= r[i - 1].hi)
            return parse_error(ps, "rank %u is given twice in rank list '%s'", r[i].lo, all);
    }
    return 0;
}

/* Parses one line [p, end). Appends an entry to list for a key line. */
static int parse_line(parser_t *ps, const char *p, const char *end, uint32_t workers,
                      zps_authkeys_t *list)
{
    char shown[SHOW_MAX + 4], reason[128];
    if (memchr(p, '\0', (size_t)(end - p)) != NULL)
        return parse_error(ps, "NUL byte in the line");
    const char *f;
    size_t n;
    if (!next_field(&p, end, &f, &n))
        return 0; /* blank */
    if (f[0] == '#')
        return 0; /* a comment: no key starts with '#' (keys.h) */
    uint8_t key[ZPS_KEY_BYTES];
    if (zps_key_decode(f, n, key, reason, sizeof(reason)) != 0)
        return parse_error(ps, "bad key '%s': %s", show(f, n, shown), reason);
    /* After the key, '#' starts a comment (roles and ranks have none). */
    const char *hash = memchr(p, '#', (size_t)(end - p));
    if (hash != NULL)
        end = hash;

    if (list->n == list->cap) {
        size_t ncap = list->cap ? list->cap * 2 : 16;
        entry_t *ne = realloc(list->entries, ncap * sizeof(*ne));
        if (ne == NULL)
            return ZPS_ENOMEM;
        list->entries = ne;
        list->cap = ncap;
    }
    entry_t e = {.line = ps->line};
    memcpy(e.key, key, sizeof(key));
    if (!next_field(&p, end, &f, &n))
        return parse_error(ps, "missing role after the key: expected 'worker RANKS', 'admin' or "
                               "'reader'");
    const char *role = NULL;
    if (field_is(f, n, "worker")) {
        e.role = ZPS_ROLE_WORKER;
        if (!next_field(&p, end, &f, &n))
            return parse_error(ps, "worker needs a rank list, like 0 or 0,2-3");
        int rc = parse_ranks(ps, f, n, workers, list, &e);
        if (rc != 0)
            return rc;
        role = "the rank list";
    } else if (field_is(f, n, "admin")) {
        e.role = ZPS_ROLE_ADMIN;
        role = "admin";
    } else if (field_is(f, n, "reader")) {
        e.role = ZPS_ROLE_READER;
        role = "reader";
    } else {
        return parse_error(ps, "unknown role '%s': expected worker, admin or reader",
                           show(f, n, shown));
    }
    if (next_field(&p, end, &f, &n))
        return parse_error(ps, "unexpected '%s' after %s", show(f, n, shown), role);
    list->entries[list->n++] = e;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    int c = memcmp(x->key, y->key, ZPS_KEY_BYTES);
    if (c != 0)
        return c;
    return x->line < y->line ? -1 : x->line > y->line;
}

int zps_authkeys_parse(const char *name, const char *text, size_t len, uint32_t workers,
                       zps_authkeys_t **out, char *why, size_t why_size)
{
    zps_authkeys_t *list = calloc(1, sizeof(*list));
    if (list == NULL)
        return ZPS_ENOMEM;
    parser_t ps = {.name = name ? name : "authorized keys", .why = why, .why_size = why_size};
    int rc = 0;
    const char *p = text, *end = text ? text + len : text;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        ps.line++;
        if ((rc = parse_line(&ps, p, e, workers, list)) != 0)
            goto fail;
        p = nl ? nl + 1 : end;
    }

    /* Sorted by key (then line), for lookups and to find a key listed twice:
     * of all the second listings, the earliest in the file is reported. */
    if (list->n > 1)
        qsort(list->entries, list->n, sizeof(*list->entries), cmp_entry);
    const entry_t *dup = NULL, *orig = NULL;
    for (size_t i = 1; i < list->n; i++) {
        const entry_t *a = &list->entries[i - 1], *b = &list->entries[i];
        if (memcmp(a->key, b->key, ZPS_KEY_BYTES) == 0 && (dup == NULL || b->line < dup->line) &&
            (i < 2 || memcmp(list->entries[i - 2].key, a->key, ZPS_KEY_BYTES) != 0)) {
            dup = b;
            orig = a;
        }
    }
    if (dup != NULL) {
        char z[ZPS_KEY_Z85_CHARS + 1];
        zps_key_encode(dup->key, z);
        ps.line = dup->line;
        rc = parse_error(&ps, "key %.8s... is listed twice (first on line %u)", z, orig->line);
        goto fail;
    }
    *out = list;
    return 0;
fail:
    zps_authkeys_free(list);
    return rc;
}

int zps_authkeys_load(const char *path, uint32_t workers, zps_authkeys_t **out, char *why,
                      size_t why_size)
{
    struct stat st;
    int fd = open_regular(path, false, &st, why, why_size);
    if (fd < 0)
        return ZPS_EIO;
    if (check_file(&authkeys_rule, path, &st, why, why_size) != 0) {
        close(fd);
        return ZPS_EINVAL;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = read_all(fd, path, ZPS_KEYS_FILE_MAX, &text, &len, why, why_size);
    close(fd);
    if (rc != 0)
        return rc;
    rc = zps_authkeys_parse(path, text, len, workers, out, why, why_size);
    free(text);
    return rc;
}

static int cmp_key(const void *k, const void *e)
{
    return memcmp(k, ((const entry_t *)e)->key, ZPS_KEY_BYTES);
}

static const entry_t *find(const zps_authkeys_t *list, const uint8_t key[ZPS_KEY_BYTES])
{
    if (list == NULL || list->n == 0)
        return NULL;
    return bsearch(key, list->entries, list->n, sizeof(*list->entries), cmp_key);
}

bool zps_authkeys_lookup(const zps_authkeys_t *list, const uint8_t key[ZPS_KEY_BYTES],
                         zps_role_t *role)
{
    const entry_t *e = find(list, key);
    if (e != NULL && role != NULL)
        *role = e->role;
    return e != NULL;
}

static bool has_rank(const zps_authkeys_t *list, const entry_t *e, long worker)
{
    if (worker < 0 || worker > ZPS_KEYS_MAX_RANK)
        return false;
    const rank_range_t *r = list->ranges + e->first;
    size_t lo = 0, hi = e->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)worker < r[mid].lo)
            hi = mid;
        else if ((uint32_t)worker > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* "rank 2" or "ranks 0,2-3" into buf, cut with "..." when it does not fit. */
static void format_ranks(const zps_authkeys_t *list, const entry_t *e, char *buf, size_t size)
{
    const rank_range_t *r = list->ranges + e->first;
    bool one = e->count == 1 && r[0].lo == r[0].hi;
    size_t n = (size_t)snprintf(buf, size, "%s ", one ? "rank" : "ranks");
    for (size_t i = 0; i < e->count && n < size; i++) {
        int w = r[i].lo == r[i].hi
                    ? snprintf(buf + n, size - n, "%s%u", i ? "," : "", r[i].lo)
                    : snprintf(buf + n, size - n, "%s%u-%u", i ? "," : "", r[i].lo, r[i].hi);
        n += (size_t)w;
    }
    if (n >= size && size > 4)
        memcpy(buf + size - 4, "...", 4);
}

bool zps_authkeys_allows(const zps_authkeys_t *list, const uint8_t key[ZPS_KEY_BYTES],
                         zps_access_t what, long worker, char *why, size_t why_size)
{
    static const char *const actions[] = {
        [ZPS_ACCESS_INIT] = "initialise the model",
        [ZPS_ACCESS_PUSH] = "push",
        [ZPS_ACCESS_PULL_WORKER] = "pull as a worker",
        [ZPS_ACCESS_PULL_OBSERVER] = "pull as an observer",
        [ZPS_ACCESS_STATS] = "ask for stats",
        [ZPS_ACCESS_HEARTBEAT] = "send heartbeats",
        [ZPS_ACCESS_CHECKPOINT] = "ask for a checkpoint",
        [ZPS_ACCESS_RELOAD_KEYS] = "reload the authorized keys",
    };
    if ((unsigned)what >= sizeof(actions) / sizeof(actions[0])) {
        zps_set_reason(why, why_size, "unknown request type %d", (int)what);
        return false;
    }
    char z[ZPS_KEY_Z85_CHARS + 1];
    zps_key_encode(key, z);
    if (list == NULL) {
        zps_set_reason(why, why_size, "key %.8s... is not authorized: no authorized keys", z);
        return false;
    }
    const entry_t *e = find(list, key);
    if (e == NULL) {
        zps_set_reason(why, why_size, "key %.8s... is not an authorized key", z);
        return false;
    }
    bool ranked =
        what == ZPS_ACCESS_PUSH || what == ZPS_ACCESS_PULL_WORKER || what == ZPS_ACCESS_HEARTBEAT;
    switch (e->role) {
    case ZPS_ROLE_ADMIN:
        return true;
    case ZPS_ROLE_READER:
        if (what == ZPS_ACCESS_STATS || what == ZPS_ACCESS_PULL_OBSERVER)
            return true;
        zps_set_reason(why, why_size, "key %.8s... is a reader key; a reader key may not %s", z,
                       actions[what]);
        return false;
    case ZPS_ROLE_WORKER: {
        if (what == ZPS_ACCESS_STATS || what == ZPS_ACCESS_PULL_OBSERVER ||
            (ranked && has_rank(list, e, worker)))
            return true;
        char ranks[96];
        format_ranks(list, e, ranks, sizeof(ranks));
        if (ranked) {
            /* "pull as a worker" becomes "pull as worker 1". */
            const char *verb = what == ZPS_ACCESS_PUSH        ? "push"
                               : what == ZPS_ACCESS_HEARTBEAT ? "send heartbeats"
                                                              : "pull";
            zps_set_reason(why, why_size,
                           "key %.8s... is a worker key for %s; it may not %s as worker %ld", z,
                           ranks, verb, worker);
        } else {
            zps_set_reason(why, why_size,
                           "key %.8s... is a worker key for %s; a worker key may not %s", z, ranks,
                           actions[what]);
        }
        return false;
    }
    }
    zps_set_reason(why, why_size, "key %.8s... has an unknown role", z);
    return false;
}
