/*
 * test_keys.c - CURVE key files, the authorized keys list and the
 * authorization table (common/keys.h), and `zps keygen` (tool/keygen.c).
 *
 * The references are independent of the code under test: the published
 * CurveZMQ example key pairs (a secret and the public key it derives), the
 * formats and messages written out by hand, and the authorization rules as
 * a literal table. Every test works in its own temporary directory, removed
 * afterwards.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "keygen.h"
#include "keys.h"

/* The CurveZMQ example key pairs (libzmq's security tests, the zmq_curve man page). */
#define CLIENT_PUB "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
#define CLIENT_SEC "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"
#define SERVER_PUB "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
#define SERVER_SEC "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
/* Valid keys built by hand: full of '#' (inside groups), starting with '%'. */
#define HASH_KEY "0####0####0####0####0####0####0####0####"
#define PCT_KEY "%0000aaaaabbbbbcccccdddddeeeeefffffggggg"
#define ONES_KEY "1111111111111111111111111111111111111111"

static char dir[64]; /* /tmp/zps-test-keys-XXXXXX */
static mode_t saved_umask;

/* Each file test: a fresh directory, and the umask as it was afterwards
 * even when a test that changes it fails halfway. */
static int make_dir(void **state)
{
    (void)state;
    saved_umask = umask(022);
    umask(saved_umask);
    snprintf(dir, sizeof(dir), "/tmp/zps-test-keys-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int remove_dir(void **state)
{
    (void)state;
    umask(saved_umask);
    if (getuid() == 0 && geteuid() != 0 && seteuid(0) != 0) /* a test as another user failed */
        return -1;
    return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* dir/name into buf. */
static const char *in_dir(const char *name, char *buf)
{
    int n = snprintf(buf, PATH_MAX, "%s/%s", dir, name);
    assert_true(n > 0 && n < PATH_MAX);
    return buf;
}

static void write_file(const char *path, const char *text, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, mode), 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

static size_t read_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, size - 1);
    assert_true(n >= 0);
    buf[n] = '\0';
    close(fd);
    return (size_t)n;
}

static unsigned mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    return (unsigned)(st.st_mode & 07777);
}

static size_t dir_entries(void)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void key_of(const char *z85, uint8_t key[ZPS_KEY_BYTES])
{
    assert_int_equal(zps_key_decode(z85, strlen(z85), key, NULL, 0), 0);
}

/* ---- Z85 and derivation ---- */

static void test_z85(void **state)
{
    (void)state;
    uint8_t k[ZPS_KEY_BYTES];
    char z[ZPS_KEY_Z85_CHARS + 1], why[256];
    const char *good[] = {CLIENT_PUB, CLIENT_SEC, HASH_KEY, PCT_KEY, ONES_KEY};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_int_equal(zps_key_decode(good[i], 40, k, why, sizeof(why)), 0);
        zps_key_encode(k, z);
        assert_string_equal(z, good[i]);
    }

    static const struct {
        const char *z85;
        const char *why;
    } bad[] = {
        {"", "expected 40 Z85 characters, found 0"},
        {CLIENT_PUB "x", "expected 40 Z85 characters, found 41"},
        {"Yne@ w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "character 5 (' ') is not a Z85 character"},
        {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hI~", "character 40 ('~') is not a Z85 character"},
        {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hI\"", "character 40 ('\"') is not a Z85 character"},
        /* '%%%%%' is 82 * (85^4 + ... + 1) > 2^32 - 1 */
        {"%%%%%w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "not a Z85 encoding of 32 bytes"},
        /* No group may start with '#' (84 * 85^4 > 2^32 - 1), nor '$' (83). */
        {"#0000w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "not a Z85 encoding of 32 bytes"},
        {"Yne@$$0000fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "not a Z85 encoding of 32 bytes"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(k, 0xaa, sizeof(k));
        why[0] = '\0';
        assert_int_equal(zps_key_decode(bad[i].z85, strlen(bad[i].z85), k, why, sizeof(why)),
                         ZPS_EINVAL);
        assert_string_equal(why, bad[i].why);
        for (size_t j = 0; j < sizeof(k); j++)
            assert_int_equal(k[j], 0xaa);
    }
}

static void test_derive_public(void **state)
{
    (void)state;
    const char *pairs[][2] = {{CLIENT_SEC, CLIENT_PUB}, {SERVER_SEC, SERVER_PUB}};
    for (size_t i = 0; i < 2; i++) {
        uint8_t sec[ZPS_KEY_BYTES], pub[ZPS_KEY_BYTES];
        key_of(pairs[i][0], sec);
        key_of(pairs[i][1], pub);
        zps_keypair_t kp;
        assert_int_equal(zps_keypair_from_secret(sec, &kp, NULL, 0), 0);
        assert_memory_equal(kp.secret_key, sec, ZPS_KEY_BYTES);
        assert_memory_equal(kp.public_key, pub, ZPS_KEY_BYTES);
        zps_keypair_clear(&kp);
        for (size_t j = 0; j < sizeof(kp); j++)
            assert_int_equal(((uint8_t *)&kp)[j], 0);
    }
}

/* ---- writing key pairs ---- */

static void test_keygen_round_trip(void **state)
{
    (void)state;
    mode_t old = umask(0);
    char prefix[PATH_MAX], kpath[PATH_MAX], ppath[PATH_MAX], why[512], text[256];
    zps_keypair_t kp, back;
    assert_int_equal(zps_keypair_generate(&kp, why, sizeof(why)), 0);
    assert_int_equal(zps_keypair_write(in_dir("node", prefix), &kp, false, why, sizeof(why)), 0);
    in_dir("node.key", kpath);
    in_dir("node.pub", ppath);
    assert_int_equal(mode_of(kpath), 0600);
    assert_int_equal(mode_of(ppath), 0644);
    assert_int_equal(dir_entries(), 2); /* no temporary file left */

    /* The formats, byte for byte. */
    char pub[41], sec[41], expect[256];
    zps_key_encode(kp.public_key, pub);
    zps_key_encode(kp.secret_key, sec);
    snprintf(expect, sizeof(expect), "# zps secret key; its public key is %s\n%s\n", pub, sec);
    assert_int_equal(read_file(kpath, text, sizeof(text)), 36 + 40 + 1 + 40 + 1);
    assert_string_equal(text, expect);
    snprintf(expect, sizeof(expect), "%s\n", pub);
    assert_int_equal(read_file(ppath, text, sizeof(text)), 41);
    assert_string_equal(text, expect);

    /* The .key loads, and the public key it derives is the .pub's. */
    memset(&back, 0, sizeof(back));
    assert_int_equal(zps_keypair_load(kpath, &back, why, sizeof(why)), 0);
    assert_memory_equal(back.secret_key, kp.secret_key, ZPS_KEY_BYTES);
    assert_memory_equal(back.public_key, kp.public_key, ZPS_KEY_BYTES);
    uint8_t pk[ZPS_KEY_BYTES];
    assert_int_equal(zps_pubkey_load(ppath, pk, why, sizeof(why)), 0);
    assert_memory_equal(pk, back.public_key, ZPS_KEY_BYTES);

    /* A second pair is another pair. */
    zps_keypair_t kp2;
    assert_int_equal(zps_keypair_generate(&kp2, why, sizeof(why)), 0);
    assert_memory_not_equal(kp2.secret_key, kp.secret_key, ZPS_KEY_BYTES);
    assert_memory_not_equal(kp2.public_key, kp.public_key, ZPS_KEY_BYTES);

    /* Exactly 0600 and 0644 whatever the umask: permissive or strict, even
     * one that takes the owner's own bits. */
    const mode_t masks[] = {0, 002, 022, 077, 0277, 0377, 0777};
    for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
        char name[32];
        umask(masks[i]);
        snprintf(name, sizeof(name), "m%zu", i);
        assert_int_equal(zps_keypair_write(in_dir(name, prefix), &kp2, false, why, sizeof(why)), 0);
        snprintf(name, sizeof(name), "m%zu.key", i);
        assert_int_equal(mode_of(in_dir(name, kpath)), 0600);
        snprintf(name, sizeof(name), "m%zu.pub", i);
        assert_int_equal(mode_of(in_dir(name, ppath)), 0644);
    }
    umask(old);
    assert_int_equal(dir_entries(), 2 + 2 * sizeof(masks) / sizeof(masks[0]));
}

static void test_keygen_no_overwrite(void **state)
{
    (void)state;
    char prefix[PATH_MAX], kpath[PATH_MAX], ppath[PATH_MAX], why[512], before[256], after[256];
    zps_keypair_t kp1, kp2, back;
    assert_int_equal(zps_keypair_generate(&kp1, NULL, 0), 0);
    assert_int_equal(zps_keypair_generate(&kp2, NULL, 0), 0);
    in_dir("a", prefix);
    in_dir("a.key", kpath);
    in_dir("a.pub", ppath);
    assert_int_equal(zps_keypair_write(prefix, &kp1, false, why, sizeof(why)), 0);
    read_file(kpath, before, sizeof(before));

    /* Both exist: refused, nothing changed, nothing left. */
    char expect[3 * PATH_MAX];
    assert_int_equal(zps_keypair_write(prefix, &kp2, false, why, sizeof(why)), ZPS_EINVAL);
    snprintf(expect, sizeof(expect), "%s and %s exist; use --force to replace them", kpath, ppath);
    assert_string_equal(why, expect);
    read_file(kpath, after, sizeof(after));
    assert_string_equal(after, before);
    assert_int_equal(dir_entries(), 2);

    /* With force, replaced. */
    assert_int_equal(zps_keypair_write(prefix, &kp2, true, why, sizeof(why)), 0);
    assert_int_equal(zps_keypair_load(kpath, &back, why, sizeof(why)), 0);
    assert_memory_equal(back.secret_key, kp2.secret_key, ZPS_KEY_BYTES);
    assert_int_equal(mode_of(kpath), 0600);
    assert_int_equal(dir_entries(), 2);

    /* Only the .pub exists: refused, and no .key appears. */
    char bp[PATH_MAX], bk[PATH_MAX];
    write_file(in_dir("b.pub", bp), "x\n", 2, 0644);
    assert_int_equal(zps_keypair_write(in_dir("b", prefix), &kp1, false, why, sizeof(why)),
                     ZPS_EINVAL);
    snprintf(expect, sizeof(expect), "%s exists; use --force to replace it", bp);
    assert_string_equal(why, expect);
    assert_int_equal(access(in_dir("b.key", bk), F_OK), -1);

    /* A dangling symbolic link counts as existing. */
    char cp[PATH_MAX];
    assert_int_equal(symlink("/nonexistent/zps-target", in_dir("c.key", cp)), 0);
    assert_int_equal(zps_keypair_write(in_dir("c", prefix), &kp1, false, why, sizeof(why)),
                     ZPS_EINVAL);
    snprintf(expect, sizeof(expect), "%s exists; use --force to replace it", cp);
    assert_string_equal(why, expect);

    /* With force, a link planted at PREFIX.key is replaced, never written through. */
    char victim[PATH_MAX], dp[PATH_MAX];
    write_file(in_dir("victim", victim), "precious\n", 9, 0644);
    assert_int_equal(symlink(victim, in_dir("d.key", dp)), 0);
    assert_int_equal(zps_keypair_write(in_dir("d", prefix), &kp1, true, why, sizeof(why)), 0);
    assert_int_equal(mode_of(dp), 0600); /* a regular file now */
    read_file(victim, after, sizeof(after));
    assert_string_equal(after, "precious\n");
    assert_int_equal(mode_of(victim), 0644);

    /* Unusable prefixes and places. */
    assert_int_equal(zps_keypair_write("", &kp1, false, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "bad prefix '': expected a file name without .key or .pub");
    assert_int_equal(zps_keypair_write(NULL, &kp1, false, why, sizeof(why)), ZPS_EINVAL);
    assert_int_equal(zps_keypair_write(in_dir("sub/", prefix), &kp1, false, why, sizeof(why)),
                     ZPS_EINVAL);
    size_t n = dir_entries();
    assert_int_equal(zps_keypair_write(in_dir("missing/e", prefix), &kp1, false, why, sizeof(why)),
                     ZPS_EIO);
    snprintf(expect, sizeof(expect), "cannot create %s.key.tmp.%ld.0: No such file or directory",
             prefix, (long)getpid());
    assert_string_equal(why, expect);
    assert_int_equal(dir_entries(), n);
}

static int run_keygen(const char *a1, const char *a2, const char *a3)
{
    char *argv[] = {"keygen", (char *)a1, (char *)a2, (char *)a3, NULL};
    int argc = 1 + (a1 != NULL) + (a2 != NULL) + (a3 != NULL);
    return zps_cmd_keygen(argc, argv);
}

static void test_keygen_command(void **state)
{
    (void)state;
    char prefix[PATH_MAX], kpath[PATH_MAX], first[256], second[256], why[256];
    in_dir("cmd", prefix);
    in_dir("cmd.key", kpath);
    assert_int_equal(run_keygen(prefix, NULL, NULL), 0);
    read_file(kpath, first, sizeof(first));
    zps_keypair_t kp;
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), 0);
    assert_int_equal(run_keygen(prefix, NULL, NULL), 2); /* exists */
    read_file(kpath, second, sizeof(second));
    assert_string_equal(first, second);
    assert_int_equal(run_keygen(prefix, "--force", NULL), 0);
    read_file(kpath, second, sizeof(second));
    assert_string_not_equal(first, second);
    assert_int_equal(run_keygen("--force", prefix, NULL), 0);
    assert_int_equal(run_keygen(NULL, NULL, NULL), 2);                        /* no prefix */
    assert_int_equal(run_keygen(prefix, "other", NULL), 2);                   /* two prefixes */
    assert_int_equal(run_keygen("--bogus", prefix, NULL), 2);                 /* unknown option */
    assert_int_equal(run_keygen("--help", NULL, NULL), 0);                    /* usage */
    assert_int_equal(run_keygen(in_dir("x/", prefix), NULL, NULL), 2);        /* bad prefix */
    assert_int_equal(run_keygen(in_dir("missing/k", prefix), NULL, NULL), 1); /* cannot write */
    assert_int_equal(dir_entries(), 2);
}

/* ---- loading key files ---- */

static void test_load_loose_modes(void **state)
{
    (void)state;
    char kpath[PATH_MAX], why[1024], expect[3 * PATH_MAX];
    in_dir("s.key", kpath);
    write_file(kpath, CLIENT_SEC "\n", 41, 0600);
    const mode_t loose[] = {0640, 0604, 0660, 0620, 0602, 0610, 0601, 0606, 0644, 0666, 0777};
    for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
        assert_int_equal(chmod(kpath, loose[i]), 0);
        zps_keypair_t kp;
        memset(&kp, 0x55, sizeof(kp));
        assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), ZPS_EINVAL);
        snprintf(expect, sizeof(expect),
                 "secret key file %s has mode %04o, which lets group or others use it; make it "
                 "private with: chmod 600 %s",
                 kpath, (unsigned)loose[i], kpath);
        assert_string_equal(why, expect);
        for (size_t j = 0; j < sizeof(kp); j++)
            assert_int_equal(((uint8_t *)&kp)[j], 0x55);
    }
    uint8_t pub[ZPS_KEY_BYTES];
    key_of(CLIENT_PUB, pub);
    const mode_t tight[] = {0600, 0400, 0700, 0200};
    for (size_t i = 0; i < sizeof(tight) / sizeof(tight[0]); i++) {
        assert_int_equal(chmod(kpath, tight[i]), 0);
        zps_keypair_t kp;
        /* 0200: the owner may not read, unless the test runs as root. */
        int rc = zps_keypair_load(kpath, &kp, why, sizeof(why));
        if (tight[i] == 0200 && geteuid() != 0) {
            assert_int_equal(rc, ZPS_EIO);
            continue;
        }
        assert_int_equal(rc, 0);
        assert_memory_equal(kp.public_key, pub, ZPS_KEY_BYTES);
    }
}

static void test_load_not_regular(void **state)
{
    (void)state;
    /* Opening a FIFO for reading waits for a writer unless done without
     * blocking: a test that hangs is killed here rather than at ctest's timeout. */
    alarm(20);
    char kpath[PATH_MAX], link_path[PATH_MAX], fifo[PATH_MAX], sub[PATH_MAX], why[1024];
    char expect[2 * PATH_MAX], ppath[PATH_MAX], plink[PATH_MAX];
    write_file(in_dir("real.key", kpath), CLIENT_SEC "\n", 41, 0600);
    assert_int_equal(symlink(kpath, in_dir("link.key", link_path)), 0);
    assert_int_equal(mkfifo(in_dir("fifo", fifo), 0600), 0);
    assert_int_equal(mkdir(in_dir("sub", sub), 0700), 0);
    zps_keypair_t kp;

    assert_int_equal(zps_keypair_load(link_path, &kp, why, sizeof(why)), ZPS_EIO);
    snprintf(expect, sizeof(expect), "%s is a symbolic link; give the key file itself", link_path);
    assert_string_equal(why, expect);
    assert_int_equal(zps_keypair_load(fifo, &kp, why, sizeof(why)), ZPS_EIO);
    snprintf(expect, sizeof(expect), "%s is a FIFO, not a regular file", fifo);
    assert_string_equal(why, expect);
    assert_int_equal(zps_keypair_load(sub, &kp, why, sizeof(why)), ZPS_EIO);
    snprintf(expect, sizeof(expect), "%s is a directory, not a regular file", sub);
    assert_string_equal(why, expect);
    char missing[PATH_MAX];
    assert_int_equal(zps_keypair_load(in_dir("none.key", missing), &kp, why, sizeof(why)), ZPS_EIO);
    snprintf(expect, sizeof(expect), "cannot open %s: No such file or directory", missing);
    assert_string_equal(why, expect);
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), 0);

    /* Public keys and authorized keys: a FIFO refused without waiting, a
     * symbolic link followed (they are not secret). */
    uint8_t pk[ZPS_KEY_BYTES];
    zps_authkeys_t *list = NULL;
    assert_int_equal(zps_pubkey_load(fifo, pk, why, sizeof(why)), ZPS_EIO);
    snprintf(expect, sizeof(expect), "%s is a FIFO, not a regular file", fifo);
    assert_string_equal(why, expect);
    assert_int_equal(zps_authkeys_load(fifo, 0, &list, why, sizeof(why)), ZPS_EIO);
    assert_string_equal(why, expect);
    assert_null(list);
    write_file(in_dir("real.pub", ppath), CLIENT_PUB "\n", 41, 0644);
    assert_int_equal(symlink(ppath, in_dir("link.pub", plink)), 0);
    assert_int_equal(zps_pubkey_load(plink, pk, why, sizeof(why)), 0);
    uint8_t expect_pk[ZPS_KEY_BYTES];
    key_of(CLIENT_PUB, expect_pk);
    assert_memory_equal(pk, expect_pk, ZPS_KEY_BYTES);
    alarm(0);
}

static void test_load_malformed(void **state)
{
    (void)state;
    char kpath[PATH_MAX], why[1024], expect[2 * PATH_MAX];
    in_dir("bad.key", kpath);
    static const struct {
        const char *text;
        const char *why; /* after "PATH: " */
    } bad[] = {
        {"", "bad secret key: expected 40 Z85 characters, found 0"},
        {"\n", "bad secret key: expected 40 Z85 characters, found 0"},
        {"D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%c\n",
         "bad secret key: expected 40 Z85 characters, found 39"},
        {CLIENT_SEC "x\n", "bad secret key: expected 40 Z85 characters, found 41"},
        {CLIENT_SEC "\r\n", "bad secret key: expected 40 Z85 characters, found 41"},
        {" " CLIENT_SEC "\n", "bad secret key: expected 40 Z85 characters, found 41"},
        {"D:~Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs\n",
         "bad secret key: character 3 ('~') is not a Z85 character"},
        {"%%%%%IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs\n",
         "bad secret key: not a Z85 encoding of 32 bytes"},
        {"# comment only\n", "no secret key after the comment line"},
        {"#", "no secret key after the comment line"},
        {CLIENT_SEC "\n\n", "expected the secret key on one line, after at most one comment line "
                            "starting with '#'"},
        {"# a\n# b\n" CLIENT_SEC "\n", "expected the secret key on one line, after at most one "
                                       "comment line starting with '#'"},
        {"comment\n" CLIENT_SEC "\n", "expected the secret key on one line, after at most one "
                                      "comment line starting with '#'"},
        {CLIENT_SEC "\n" CLIENT_SEC "\n", "expected the secret key on one line, after at most one "
                                          "comment line starting with '#'"},
        {"# a\n" CLIENT_SEC "\nx", "expected the secret key on one line, after at most one "
                                   "comment line starting with '#'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(kpath, bad[i].text, strlen(bad[i].text), 0600);
        zps_keypair_t kp;
        memset(&kp, 0x55, sizeof(kp));
        assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), ZPS_EINVAL);
        snprintf(expect, sizeof(expect), "%s: %s", kpath, bad[i].why);
        assert_string_equal(why, expect);
        for (size_t j = 0; j < sizeof(kp); j++)
            assert_int_equal(((uint8_t *)&kp)[j], 0x55);
    }
    /* Larger than any key file: refused before parsing. */
    char big[5000];
    memset(big, '#', sizeof(big));
    write_file(kpath, big, sizeof(big), 0600);
    zps_keypair_t kp;
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), ZPS_EINVAL);
    snprintf(expect, sizeof(expect), "%s is larger than 4096 bytes", kpath);
    assert_string_equal(why, expect);

    const char *good[] = {CLIENT_SEC, CLIENT_SEC "\n", "# c\n" CLIENT_SEC, "#\n" CLIENT_SEC "\n",
                          "# zps secret key; its public key is " CLIENT_PUB "\n" CLIENT_SEC "\n"};
    uint8_t pub[ZPS_KEY_BYTES], sec[ZPS_KEY_BYTES];
    key_of(CLIENT_PUB, pub);
    key_of(CLIENT_SEC, sec);
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        write_file(kpath, good[i], strlen(good[i]), 0600);
        assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), 0);
        assert_memory_equal(kp.public_key, pub, ZPS_KEY_BYTES);
        assert_memory_equal(kp.secret_key, sec, ZPS_KEY_BYTES);
    }

    /* Public key files. */
    char ppath[PATH_MAX];
    in_dir("k.pub", ppath);
    static const struct {
        const char *text;
        const char *why;
    } badpub[] = {
        {"", "bad public key: expected 40 Z85 characters, found 0"},
        {"# " CLIENT_PUB "\n", "bad public key: expected 40 Z85 characters, found 42"},
        {CLIENT_PUB " \n", "bad public key: expected 40 Z85 characters, found 41"},
        {CLIENT_PUB "\n" CLIENT_PUB "\n", "expected the public key on one line, found more"},
        {CLIENT_PUB "\n\n", "expected the public key on one line, found more"},
        {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{h,D\n",
         "bad public key: character 39 (',') is not a Z85 character"},
    };
    for (size_t i = 0; i < sizeof(badpub) / sizeof(badpub[0]); i++) {
        write_file(ppath, badpub[i].text, strlen(badpub[i].text), 0644);
        uint8_t k[ZPS_KEY_BYTES];
        memset(k, 0x55, sizeof(k));
        assert_int_equal(zps_pubkey_load(ppath, k, why, sizeof(why)), ZPS_EINVAL);
        snprintf(expect, sizeof(expect), "%s: %s", ppath, badpub[i].why);
        assert_string_equal(why, expect);
        for (size_t j = 0; j < sizeof(k); j++)
            assert_int_equal(k[j], 0x55);
    }
    const char *goodpub[] = {CLIENT_PUB, CLIENT_PUB "\n"};
    for (size_t i = 0; i < 2; i++) {
        write_file(ppath, goodpub[i], strlen(goodpub[i]), 0644);
        uint8_t k[ZPS_KEY_BYTES];
        assert_int_equal(zps_pubkey_load(ppath, k, why, sizeof(why)), 0);
        assert_memory_equal(k, pub, ZPS_KEY_BYTES);
    }
}

/* ---- authorized keys ---- */

static zps_authkeys_t *parse_ok(const char *text, uint32_t workers)
{
    zps_authkeys_t *list = NULL;
    char why[512] = "";
    int rc = zps_authkeys_parse("keys", text, strlen(text), workers, &list, why, sizeof(why));
    if (rc != 0)
        fail_msg("unexpected parse error %d: %s", rc, why);
    assert_non_null(list);
    return list;
}

static void expect_role(const zps_authkeys_t *list, const char *z85, int role)
{
    uint8_t k[ZPS_KEY_BYTES];
    key_of(z85, k);
    zps_role_t r = (zps_role_t)77;
    if (role < 0) {
        assert_false(zps_authkeys_lookup(list, k, &r));
        assert_int_equal(r, 77);
    } else {
        assert_true(zps_authkeys_lookup(list, k, &r));
        assert_int_equal(r, role);
    }
}

static void test_authkeys_valid(void **state)
{
    (void)state;
    const char *text = "# zps authorized keys\n"
                       "\n"
                       "   # an indented comment\n" CLIENT_PUB " worker 0,2-3\n"
                       "\t" SERVER_PUB "\tadmin\t# the operator\n"
                       "  " HASH_KEY "  reader#dashboard\r\n"
                       "#" ONES_KEY " admin\n"  /* commented out */
                       "# " ONES_KEY " admin\n" /* commented out */
                       "\r\n" PCT_KEY " worker 7 # node 7";
    zps_authkeys_t *list = parse_ok(text, 8);
    assert_int_equal(zps_authkeys_count(list), 4);
    expect_role(list, CLIENT_PUB, ZPS_ROLE_WORKER);
    expect_role(list, SERVER_PUB, ZPS_ROLE_ADMIN);
    expect_role(list, HASH_KEY, ZPS_ROLE_READER);
    expect_role(list, PCT_KEY, ZPS_ROLE_WORKER);
    expect_role(list, ONES_KEY, -1);
    uint8_t k[ZPS_KEY_BYTES];
    key_of(CLIENT_PUB, k);
    assert_true(zps_authkeys_lookup(list, k, NULL));
    zps_authkeys_free(list);
    assert_string_equal(zps_role_name(ZPS_ROLE_WORKER), "worker");
    assert_string_equal(zps_role_name(ZPS_ROLE_ADMIN), "admin");
    assert_string_equal(zps_role_name(ZPS_ROLE_READER), "reader");
    assert_string_equal(zps_role_name((zps_role_t)9), "?");

    /* Empty lists are valid and list nothing. */
    const char *empty[] = {"", "\n\n", "# nothing yet\n", "  \t\r\n"};
    for (size_t i = 0; i < 4; i++) {
        list = parse_ok(empty[i], 0);
        assert_int_equal(zps_authkeys_count(list), 0);
        expect_role(list, CLIENT_PUB, -1);
        zps_authkeys_free(list);
    }
    list = NULL;
    assert_int_equal(zps_authkeys_parse("keys", NULL, 0, 0, &list, NULL, 0), 0);
    assert_int_equal(zps_authkeys_count(list), 0);
    zps_authkeys_free(list);
    zps_authkeys_free(NULL);
    assert_int_equal(zps_authkeys_count(NULL), 0);
    assert_false(zps_authkeys_lookup(NULL, k, NULL));

    /* The highest rank, without and with a worker count. */
    list = parse_ok(CLIENT_PUB " worker 65535\n", 0);
    zps_authkeys_free(list);
    list = parse_ok(CLIENT_PUB " worker 0-65535\n", 65536);
    zps_authkeys_free(list);
    list = parse_ok(CLIENT_PUB " worker 3\n", 4);
    zps_authkeys_free(list);

    /* Not NUL-terminated: only len bytes are read. */
    char buf[64];
    memcpy(buf, SERVER_PUB " admin", 46);
    memcpy(buf + 46, " extra", 6);
    zps_authkeys_t *l2 = NULL;
    assert_int_equal(zps_authkeys_parse("keys", buf, 46, 0, &l2, NULL, 0), 0);
    expect_role(l2, SERVER_PUB, ZPS_ROLE_ADMIN);
    zps_authkeys_free(l2);
}

static void test_authkeys_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint32_t workers;
        const char *why;
    } cases[] = {
        /* keys */
        {"abc worker 0\n", 0, "keys:1: bad key 'abc': expected 40 Z85 characters, found 3"},
        {"\n\n" CLIENT_PUB "x admin\n", 0,
         "keys:3: bad key '" CLIENT_PUB "x': expected 40 Z85 characters, found 41"},
        {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{h~D admin\n", 0,
         "keys:1: bad key 'Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{h~D': character 39 ('~') is "
         "not a Z85 character"},
        {"%%%%%w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID admin\n", 0,
         "keys:1: bad key '%%%%%w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID': not a Z85 encoding of 32 "
         "bytes"},
        {CLIENT_PUB "#x admin\n", 0,
         "keys:1: bad key '" CLIENT_PUB "#x': expected 40 Z85 characters, found 42"},
        {"0123456789012345678901234567890123456789012345678901234567890123456789 admin\n", 0,
         "keys:1: bad key '012345678901234567890123456789012345678901234567...': expected 40 Z85 "
         "characters, found 70"},
        {"ab\x01 admin\n", 0, "keys:1: bad key 'ab?': expected 40 Z85 characters, found 3"},
        /* roles and fields */
        {"# one\n# two\n\n# four\n" SERVER_PUB " admin\n\n" CLIENT_PUB " writer\n", 0,
         "keys:7: unknown role 'writer': expected worker, admin or reader"},
        {CLIENT_PUB " Admin\n", 0,
         "keys:1: unknown role 'Admin': expected worker, admin or reader"},
        {CLIENT_PUB "\n", 0,
         "keys:1: missing role after the key: expected 'worker RANKS', 'admin' or 'reader'"},
        {CLIENT_PUB "   # admin\n", 0,
         "keys:1: missing role after the key: expected 'worker RANKS', 'admin' or 'reader'"},
        {CLIENT_PUB " worker\n", 0, "keys:1: worker needs a rank list, like 0 or 0,2-3"},
        {CLIENT_PUB " worker #0\n", 0, "keys:1: worker needs a rank list, like 0 or 0,2-3"},
        {CLIENT_PUB " admin now\n", 0, "keys:1: unexpected 'now' after admin"},
        {CLIENT_PUB " reader 0\n", 0, "keys:1: unexpected '0' after reader"},
        {CLIENT_PUB " worker 0 1\n", 0, "keys:1: unexpected '1' after the rank list"},
        {CLIENT_PUB " worker 0, 2\n", 0, "keys:1: empty item in rank list '0,'"},
        {CLIENT_PUB " admin\0\n", 0, "keys:1: NUL byte in the line"},
        /* rank lists */
        {CLIENT_PUB " worker ,1\n", 0, "keys:1: empty item in rank list ',1'"},
        {CLIENT_PUB " worker 1,\n", 0, "keys:1: empty item in rank list '1,'"},
        {CLIENT_PUB " worker 1,,2\n", 0, "keys:1: empty item in rank list '1,,2'"},
        {CLIENT_PUB " worker a\n", 0,
         "keys:1: bad item 'a' in rank list 'a': expected a rank like 2 or a range like 2-3"},
        {CLIENT_PUB " worker 0,-1\n", 0,
         "keys:1: bad item '-1' in rank list '0,-1': expected a rank like 2 or a range like 2-3"},
        {CLIENT_PUB " worker 1-\n", 0,
         "keys:1: bad item '1-' in rank list '1-': expected a rank like 2 or a range like 2-3"},
        {CLIENT_PUB " worker 1-2-3\n", 0,
         "keys:1: bad item '1-2-3' in rank list '1-2-3': expected a rank like 2 or a range like "
         "2-3"},
        {CLIENT_PUB " worker +1\n", 0,
         "keys:1: bad item '+1' in rank list '+1': expected a rank like 2 or a range like 2-3"},
        {CLIENT_PUB " worker 0x1\n", 0,
         "keys:1: bad item '0x1' in rank list '0x1': expected a rank like 2 or a range like 2-3"},
        {CLIENT_PUB " worker 3-1\n", 0, "keys:1: descending range 3-1 in rank list '3-1'"},
        {CLIENT_PUB " worker 0,5-4\n", 0, "keys:1: descending range 5-4 in rank list '0,5-4'"},
        {CLIENT_PUB " worker 65536\n", 0,
         "keys:1: rank out of range in '65536': the highest rank is 65535"},
        {CLIENT_PUB " worker 0-4294967296\n", 0,
         "keys:1: rank out of range in '0-4294967296': the highest rank is 65535"},
        {CLIENT_PUB " worker 99999999999999999999999\n", 0,
         "keys:1: rank out of range in '99999999999999999999999': the highest rank is 65535"},
        {CLIENT_PUB " worker 4\n", 4,
         "keys:1: rank 4 is not below the number of workers, 4 (the last rank is 3)"},
        {CLIENT_PUB " worker 0,2-5\n", 4,
         "keys:1: rank 5 is not below the number of workers, 4 (the last rank is 3)"},
        {CLIENT_PUB " worker 1\n", 1,
         "keys:1: rank 1 is not below the number of workers, 1 (the last rank is 0)"},
        {CLIENT_PUB " worker 1,1\n", 0, "keys:1: rank 1 is given twice in rank list '1,1'"},
        {CLIENT_PUB " worker 0-2,1\n", 0, "keys:1: rank 1 is given twice in rank list '0-2,1'"},
        {CLIENT_PUB " worker 5-9,0,3-5\n", 0,
         "keys:1: rank 5 is given twice in rank list '5-9,0,3-5'"},
        /* the same key twice, whatever the roles; the earliest second listing */
        {SERVER_PUB " admin\n" CLIENT_PUB " worker 0\n\n" HASH_KEY " reader\n" CLIENT_PUB
                    " reader\n" HASH_KEY " reader\n",
         0, "keys:5: key Yne@$w-v... is listed twice (first on line 2)"},
        {CLIENT_PUB " admin\n" CLIENT_PUB " admin # again\n" CLIENT_PUB " admin\n", 0,
         "keys:2: key Yne@$w-v... is listed twice (first on line 1)"},
        /* the first error of the file, line errors before a repeated key */
        {CLIENT_PUB " admin\n" CLIENT_PUB " admin\n" SERVER_PUB " root\n" SERVER_PUB " bad x\n", 0,
         "keys:3: unknown role 'root': expected worker, admin or reader"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* The NUL case's text runs past its NUL. */
        size_t len = strlen(cases[i].text);
        if (strstr(cases[i].why, "NUL") != NULL)
            len += 2;
        zps_authkeys_t *sentinel = (zps_authkeys_t *)&cases[i], *list = sentinel;
        char why[512] = "";
        int rc = zps_authkeys_parse("keys", cases[i].text, len, cases[i].workers, &list, why,
                                    sizeof(why));
        if (rc != ZPS_EINVAL || strcmp(why, cases[i].why) != 0)
            fail_msg("case %zu: rc %d, why \"%s\", expected \"%s\"", i, rc, why, cases[i].why);
        assert_ptr_equal(list, sentinel); /* all or nothing */
    }
    /* Without a name, messages say "authorized keys". */
    zps_authkeys_t *list = NULL;
    char why[256];
    assert_int_equal(zps_authkeys_parse(NULL, "x admin", 7, 0, &list, why, sizeof(why)),
                     ZPS_EINVAL);
    assert_string_equal(why, "authorized keys:1: bad key 'x': expected 40 Z85 characters, found 1");
}

enum { ADMIN, WORKER_IN, WORKER_OUT, READER, UNLISTED };

static void test_authorization_table(void **state)
{
    (void)state;
    /* What each kind of key may do, written out from the rules. */
    static const bool allowed[8][5] = {
        /*                         admin  w-in   w-out  reader unlisted */
        [ZPS_ACCESS_INIT] = {true, false, false, false, false},
        [ZPS_ACCESS_PUSH] = {true, true, false, false, false},
        [ZPS_ACCESS_PULL_WORKER] = {true, true, false, false, false},
        [ZPS_ACCESS_PULL_OBSERVER] = {true, true, true, true, false},
        [ZPS_ACCESS_STATS] = {true, true, true, true, false},
        [ZPS_ACCESS_HEARTBEAT] = {true, true, false, false, false},
        [ZPS_ACCESS_CHECKPOINT] = {true, false, false, false, false},
        [ZPS_ACCESS_RELOAD_KEYS] = {true, false, false, false, false},
    };
    zps_authkeys_t *list = parse_ok(SERVER_PUB " admin\n" CLIENT_PUB " worker 0,2-3\n" HASH_KEY
                                               " reader\n" PCT_KEY " worker 1,5-6,9\n",
                                    0);
    struct {
        const char *z85;
        int kind;          /* or -1: a worker, by rank */
        const char *ranks; /* a worker's ranks, as the list says them */
    } keys[] = {
        {SERVER_PUB, ADMIN, NULL}, {CLIENT_PUB, -1, "0,2-3"},  {PCT_KEY, -1, "1,5-6,9"},
        {HASH_KEY, READER, NULL},  {ONES_KEY, UNLISTED, NULL},
    };
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        uint8_t key[ZPS_KEY_BYTES];
        key_of(keys[k].z85, key);
        for (int what = 0; what < 8; what++) {
            for (long w = -2; w <= 11; w++) {
                int kind = keys[k].kind;
                if (kind < 0) {
                    /* The worker's ranks, from its line, by hand. */
                    bool in = k == 1 ? (w == 0 || w == 2 || w == 3)
                                     : (w == 1 || w == 5 || w == 6 || w == 9);
                    kind = in ? WORKER_IN : WORKER_OUT;
                }
                char why[256] = "untouched";
                bool ok = zps_authkeys_allows(list, key, (zps_access_t)what, w, why, sizeof(why));
                if (ok != allowed[what][kind])
                    fail_msg("key %zu, request %d, worker %ld: %d, expected %d", k, what, w, ok,
                             allowed[what][kind]);
                if (ok)
                    assert_string_equal(why, "untouched");
                else
                    assert_string_not_equal(why, "untouched");
            }
        }
    }

    /* The reasons, word for word. */
    static const struct {
        const char *z85;
        zps_access_t what;
        long worker;
        const char *why;
    } reasons[] = {
        {CLIENT_PUB, ZPS_ACCESS_PUSH, 1,
         "key Yne@$w-v... is a worker key for ranks 0,2-3; it may not push as worker 1"},
        {CLIENT_PUB, ZPS_ACCESS_PULL_WORKER, 4,
         "key Yne@$w-v... is a worker key for ranks 0,2-3; it may not pull as worker 4"},
        {CLIENT_PUB, ZPS_ACCESS_HEARTBEAT, -1,
         "key Yne@$w-v... is a worker key for ranks 0,2-3; it may not send heartbeats as "
         "worker -1"},
        {PCT_KEY, ZPS_ACCESS_INIT, 1,
         "key %0000aaa... is a worker key for ranks 1,5-6,9; a worker key may not initialise "
         "the model"},
        {CLIENT_PUB, ZPS_ACCESS_CHECKPOINT, 0,
         "key Yne@$w-v... is a worker key for ranks 0,2-3; a worker key may not ask for a "
         "checkpoint"},
        {HASH_KEY, ZPS_ACCESS_PUSH, 0,
         "key 0####0##... is a reader key; a reader key may not push"},
        {HASH_KEY, ZPS_ACCESS_PULL_WORKER, 0,
         "key 0####0##... is a reader key; a reader key may not pull as a worker"},
        {HASH_KEY, ZPS_ACCESS_HEARTBEAT, 0,
         "key 0####0##... is a reader key; a reader key may not send heartbeats"},
        {HASH_KEY, ZPS_ACCESS_INIT, 0,
         "key 0####0##... is a reader key; a reader key may not initialise the model"},
        {HASH_KEY, ZPS_ACCESS_CHECKPOINT, 0,
         "key 0####0##... is a reader key; a reader key may not ask for a checkpoint"},
        {HASH_KEY, ZPS_ACCESS_RELOAD_KEYS, 0,
         "key 0####0##... is a reader key; a reader key may not reload the authorized keys"},
        {CLIENT_PUB, ZPS_ACCESS_RELOAD_KEYS, 0,
         "key Yne@$w-v... is a worker key for ranks 0,2-3; a worker key may not reload the "
         "authorized keys"},
        {ONES_KEY, ZPS_ACCESS_STATS, 0, "key 11111111... is not an authorized key"},
        {SERVER_PUB, (zps_access_t)8, 0, "unknown request type 8"},
        {SERVER_PUB, (zps_access_t)-1, 0, "unknown request type -1"},
    };
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
        uint8_t key[ZPS_KEY_BYTES];
        key_of(reasons[i].z85, key);
        char why[256] = "";
        assert_false(
            zps_authkeys_allows(list, key, reasons[i].what, reasons[i].worker, why, sizeof(why)));
        assert_string_equal(why, reasons[i].why);
    }
    zps_authkeys_free(list);

    /* One rank says "rank"; no list allows nothing, not even an admin. */
    list = parse_ok(CLIENT_PUB " worker 2\n", 0);
    uint8_t key[ZPS_KEY_BYTES];
    key_of(CLIENT_PUB, key);
    char why[256];
    assert_false(zps_authkeys_allows(list, key, ZPS_ACCESS_PUSH, 3, why, sizeof(why)));
    assert_string_equal(why, "key Yne@$w-v... is a worker key for rank 2; it may not push as "
                             "worker 3");
    assert_true(zps_authkeys_allows(list, key, ZPS_ACCESS_PUSH, 2, NULL, 0));
    zps_authkeys_free(list);
    key_of(SERVER_PUB, key);
    assert_false(zps_authkeys_allows(NULL, key, ZPS_ACCESS_STATS, 0, why, sizeof(why)));
    assert_string_equal(why, "key rq:rM>}U... is not authorized: no authorized keys");

    /* A long rank list is cut in the reason, never overflowing it. */
    char text[4096];
    int n = snprintf(text, sizeof(text), "%s worker ", CLIENT_PUB);
    for (int r = 0; r < 200; r += 2)
        n += snprintf(text + n, sizeof(text) - (size_t)n, "%s%d", r ? "," : "", r);
    list = parse_ok(text, 0);
    key_of(CLIENT_PUB, key);
    assert_false(zps_authkeys_allows(list, key, ZPS_ACCESS_PUSH, 1, why, sizeof(why)));
    assert_non_null(strstr(why, "ranks 0,2,4,6,"));
    assert_non_null(strstr(why, "...; it may not push as worker 1"));
    for (long w = 0; w < 200; w++)
        assert_int_equal(zps_authkeys_allows(list, key, ZPS_ACCESS_PUSH, w, NULL, 0), w % 2 == 0);
    zps_authkeys_free(list);
}

static void test_authkeys_load_reload(void **state)
{
    (void)state;
    char path[PATH_MAX], link_path[PATH_MAX], why[512], expect[2 * PATH_MAX];
    in_dir("authorized_keys", path);
    const char *v1 = SERVER_PUB " admin\n" CLIENT_PUB " worker 0-1\n";
    write_file(path, v1, strlen(v1), 0644);
    zps_authkeys_t *cur = NULL;
    assert_int_equal(zps_authkeys_load(path, 2, &cur, why, sizeof(why)), 0);
    assert_int_equal(zps_authkeys_count(cur), 2);
    uint8_t worker[ZPS_KEY_BYTES];
    key_of(CLIENT_PUB, worker);

    /* A reload that fails leaves the list in force as it was. */
    const char *v2 = SERVER_PUB " admin\n" CLIENT_PUB " writer 0\n";
    write_file(path, v2, strlen(v2), 0644);
    zps_authkeys_t *before = cur;
    assert_int_equal(zps_authkeys_load(path, 2, &cur, why, sizeof(why)), ZPS_EINVAL);
    snprintf(expect, sizeof(expect),
             "%s:2: unknown role 'writer': expected worker, admin or reader", path);
    assert_string_equal(why, expect);
    assert_ptr_equal(cur, before);
    assert_true(zps_authkeys_allows(cur, worker, ZPS_ACCESS_PUSH, 1, NULL, 0));

    /* A rank checked against the worker count given at load. */
    write_file(path, v1, strlen(v1), 0644);
    assert_int_equal(zps_authkeys_load(path, 1, &cur, why, sizeof(why)), ZPS_EINVAL);
    snprintf(expect, sizeof(expect),
             "%s:2: rank 1 is not below the number of workers, 1 (the last rank is 0)", path);
    assert_string_equal(why, expect);
    assert_ptr_equal(cur, before);

    /* A reload that works revokes: the caller swaps. */
    const char *v3 = SERVER_PUB " admin\n";
    write_file(path, v3, strlen(v3), 0644);
    assert_int_equal(symlink(path, in_dir("link", link_path)), 0);
    zps_authkeys_t *next = NULL;
    assert_int_equal(zps_authkeys_load(link_path, 2, &next, why, sizeof(why)), 0);
    zps_authkeys_free(cur);
    cur = next;
    assert_false(zps_authkeys_allows(cur, worker, ZPS_ACCESS_PUSH, 1, NULL, 0));
    zps_authkeys_free(cur);

    /* Missing, too large. */
    char missing[PATH_MAX];
    next = NULL;
    assert_int_equal(zps_authkeys_load(in_dir("nope", missing), 0, &next, why, sizeof(why)),
                     ZPS_EIO);
    snprintf(expect, sizeof(expect), "cannot open %s: No such file or directory", missing);
    assert_string_equal(why, expect);
    char *big = malloc(ZPS_KEYS_FILE_MAX + 1);
    assert_non_null(big);
    memset(big, '\n', ZPS_KEYS_FILE_MAX + 1);
    write_file(path, big, ZPS_KEYS_FILE_MAX, 0644);
    assert_int_equal(zps_authkeys_load(path, 0, &next, why, sizeof(why)), 0); /* at the limit */
    assert_int_equal(zps_authkeys_count(next), 0);
    zps_authkeys_free(next);
    next = NULL;
    write_file(path, big, ZPS_KEYS_FILE_MAX + 1, 0644);
    assert_int_equal(zps_authkeys_load(path, 0, &next, why, sizeof(why)), ZPS_EINVAL);
    snprintf(expect, sizeof(expect), "%s is larger than %d bytes", path, ZPS_KEYS_FILE_MAX);
    assert_string_equal(why, expect);
    assert_null(next);
    free(big);
}

/* ---- owners and modes of key files (keys.h, "Owners and modes") ---- */

#define OTHER_UID 12345 /* no such user is needed: root may chown a file to any uid */

static char expect_mode_msg[3 * PATH_MAX];

/* The refusal of a file group or others may write (authorized keys, public keys). */
static const char *writable_msg(const char *what, const char *and_so, const char *path,
                                unsigned mode)
{
    snprintf(expect_mode_msg, sizeof(expect_mode_msg),
             "%s %s has mode %04o, which lets group or others write it, and so %s; make it "
             "writable by its owner only with: chmod go-w %s",
             what, path, mode, and_so, path);
    return expect_mode_msg;
}

#define AK_AND_SO "add a key of their own"
#define PUB_AND_SO "put a key of their own in its place"

static void test_authkeys_loose_modes(void **state)
{
    (void)state;
    char path[PATH_MAX], link_path[PATH_MAX], why[1024];
    in_dir("authorized_keys", path);
    const char *v1 = SERVER_PUB " admin\n" CLIENT_PUB " worker 0-1\n";
    write_file(path, v1, strlen(v1), 0644);
    zps_authkeys_t *cur = NULL;
    assert_int_equal(zps_authkeys_load(path, 2, &cur, why, sizeof(why)), 0);
    zps_authkeys_t *const before = cur;
    uint8_t worker[ZPS_KEY_BYTES];
    key_of(CLIENT_PUB, worker);
    assert_int_equal(symlink(path, in_dir("link", link_path)), 0);

    /* Writable by group or others: refused at every load, a reload keeps
     * the list in force, and a link is judged by the file it names. */
    const char *v2 = SERVER_PUB " admin\n";
    write_file(path, v2, strlen(v2), 0644);
    const mode_t loose[] = {0664, 0646, 0666, 0777, 0620, 0602, 0622, 0670, 0607, 0664 | 01000};
    for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
        assert_int_equal(chmod(path, loose[i]), 0);
        assert_int_equal(zps_authkeys_load(path, 2, &cur, why, sizeof(why)), ZPS_EINVAL);
        assert_string_equal(
            why, writable_msg("authorized keys file", AK_AND_SO, path, (unsigned)loose[i]));
        assert_ptr_equal(cur, before);
        assert_int_equal(zps_authkeys_load(link_path, 2, &cur, why, sizeof(why)), ZPS_EINVAL);
        assert_string_equal(
            why, writable_msg("authorized keys file", AK_AND_SO, link_path, (unsigned)loose[i]));
        assert_ptr_equal(cur, before);
    }
    assert_true(zps_authkeys_allows(cur, worker, ZPS_ACCESS_PUSH, 1, NULL, 0));

    /* Readable by anyone is fine: the list holds no secret. */
    const mode_t fine[] = {0644, 0640, 0604, 0600, 0444, 0400, 0755};
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        assert_int_equal(chmod(path, fine[i]), 0);
        zps_authkeys_t *next = NULL;
        assert_int_equal(zps_authkeys_load(path, 2, &next, why, sizeof(why)), 0);
        assert_int_equal(zps_authkeys_count(next), 1);
        zps_authkeys_free(next);
    }
    zps_authkeys_free(cur);
}

static void test_pubkey_loose_modes(void **state)
{
    (void)state;
    char ppath[PATH_MAX], plink[PATH_MAX], why[1024];
    write_file(in_dir("s.pub", ppath), SERVER_PUB "\n", 41, 0644);
    assert_int_equal(symlink(ppath, in_dir("link.pub", plink)), 0);
    uint8_t want[ZPS_KEY_BYTES], k[ZPS_KEY_BYTES];
    key_of(SERVER_PUB, want);
    const mode_t loose[] = {0664, 0646, 0666, 0777, 0622, 0602, 0620};
    for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
        assert_int_equal(chmod(ppath, loose[i]), 0);
        memset(k, 0x55, sizeof(k));
        assert_int_equal(zps_pubkey_load(ppath, k, why, sizeof(why)), ZPS_EINVAL);
        assert_string_equal(why,
                            writable_msg("public key file", PUB_AND_SO, ppath, (unsigned)loose[i]));
        assert_int_equal(zps_pubkey_load(plink, k, why, sizeof(why)), ZPS_EINVAL);
        assert_string_equal(why,
                            writable_msg("public key file", PUB_AND_SO, plink, (unsigned)loose[i]));
        for (size_t j = 0; j < sizeof(k); j++)
            assert_int_equal(k[j], 0x55);
    }
    const mode_t fine[] = {0644, 0444, 0600, 0640, 0755};
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        assert_int_equal(chmod(ppath, fine[i]), 0);
        assert_int_equal(zps_pubkey_load(ppath, k, why, sizeof(why)), 0);
        assert_memory_equal(k, want, ZPS_KEY_BYTES);
    }
}

/* The refusal of a file owned by another user; chmod_fix is the mode's fix too, or NULL. */
static const char *owner_msg(const char *what, const char *path, unsigned owner, unsigned me,
                             const char *chmod_fix)
{
    char tail[PATH_MAX + 32] = "";
    if (chmod_fix)
        snprintf(tail, sizeof(tail), " && %s %s", chmod_fix, path);
    snprintf(expect_mode_msg, sizeof(expect_mode_msg),
             "%s %s is owned by uid %u, not by this process's user (uid %u) or root, so that "
             "user can change it; make it this user's with: chown %u %s%s",
             what, path, owner, me, me, path, tail);
    return expect_mode_msg;
}

static void test_load_owners(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        /* Only root may give a file away; the refusals are covered as root. */
        skip();
    }
    char kpath[PATH_MAX], apath[PATH_MAX], ppath[PATH_MAX], alink[PATH_MAX], why[1024];
    write_file(in_dir("s.key", kpath), CLIENT_SEC "\n", 41, 0600);
    const char *v1 = SERVER_PUB " admin\n" CLIENT_PUB " worker 0\n";
    write_file(in_dir("authorized_keys", apath), v1, strlen(v1), 0644);
    write_file(in_dir("s.pub", ppath), SERVER_PUB "\n", 41, 0644);
    assert_int_equal(symlink(apath, in_dir("link", alink)), 0);
    zps_authkeys_t *cur = NULL;
    assert_int_equal(zps_authkeys_load(apath, 1, &cur, why, sizeof(why)), 0);
    zps_authkeys_t *const before = cur;

    /* A 0600 secret key of another user: refused, with the chown. */
    assert_int_equal(chown(kpath, OTHER_UID, (gid_t)-1), 0);
    zps_keypair_t kp;
    memset(&kp, 0x55, sizeof(kp));
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, owner_msg("secret key file", kpath, OTHER_UID, 0, NULL));
    for (size_t j = 0; j < sizeof(kp); j++)
        assert_int_equal(((uint8_t *)&kp)[j], 0x55);
    /* ...and loose too: both fixes in one line. */
    assert_int_equal(chmod(kpath, 0644), 0);
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, owner_msg("secret key file", kpath, OTHER_UID, 0, "chmod 600"));
    /* The fixes, as named. */
    assert_int_equal(chown(kpath, 0, (gid_t)-1), 0);
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), ZPS_EINVAL);
    assert_int_equal(chmod(kpath, 0600), 0);
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), 0);
    /* The group does not matter. */
    assert_int_equal(chown(kpath, 0, OTHER_UID), 0);
    assert_int_equal(zps_keypair_load(kpath, &kp, why, sizeof(why)), 0);

    /* Authorized keys of another user: refused at a reload too (the list in
     * force stays), through a link as well. */
    assert_int_equal(chown(apath, OTHER_UID, (gid_t)-1), 0);
    assert_int_equal(zps_authkeys_load(apath, 1, &cur, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, owner_msg("authorized keys file", apath, OTHER_UID, 0, NULL));
    assert_ptr_equal(cur, before);
    assert_int_equal(zps_authkeys_load(alink, 1, &cur, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, owner_msg("authorized keys file", alink, OTHER_UID, 0, NULL));
    assert_int_equal(chmod(apath, 0666), 0);
    assert_int_equal(zps_authkeys_load(apath, 1, &cur, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, owner_msg("authorized keys file", apath, OTHER_UID, 0, "chmod go-w"));
    assert_ptr_equal(cur, before);
    assert_int_equal(chown(apath, 0, (gid_t)-1), 0);
    assert_int_equal(chmod(apath, 0644), 0);
    assert_int_equal(zps_authkeys_load(apath, 1, &cur, why, sizeof(why)), 0);
    zps_authkeys_free(before);

    /* A public key's owner is not checked (it is handed out), its mode is. */
    assert_int_equal(chown(ppath, OTHER_UID, OTHER_UID), 0);
    uint8_t k[ZPS_KEY_BYTES], want[ZPS_KEY_BYTES];
    key_of(SERVER_PUB, want);
    assert_int_equal(zps_pubkey_load(ppath, k, why, sizeof(why)), 0);
    assert_memory_equal(k, want, ZPS_KEY_BYTES);
    assert_int_equal(chmod(ppath, 0646), 0);
    assert_int_equal(zps_pubkey_load(ppath, k, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, writable_msg("public key file", PUB_AND_SO, ppath, 0646));

    /* As another user (the effective uid; the real one stays root, to come
     * back): its own files and root's are taken, a third user's are not. */
    assert_int_equal(chmod(dir, 0711), 0);
    assert_int_equal(chown(kpath, OTHER_UID, (gid_t)-1), 0);
    assert_int_equal(chown(apath, 0, (gid_t)-1), 0);
    char apath2[PATH_MAX];
    write_file(in_dir("ak2", apath2), v1, strlen(v1), 0644);
    assert_int_equal(chown(apath2, OTHER_UID + 1, (gid_t)-1), 0);
    assert_int_equal(seteuid(OTHER_UID), 0);
    int rc_key = zps_keypair_load(kpath, &kp, why, sizeof(why));
    zps_authkeys_t *as_root_file = NULL, *as_third = NULL;
    int rc_root = zps_authkeys_load(apath, 1, &as_root_file, why, sizeof(why));
    int rc_third = zps_authkeys_load(apath2, 1, &as_third, why, sizeof(why));
    assert_int_equal(seteuid(0), 0);
    assert_int_equal(rc_key, 0);
    assert_int_equal(rc_root, 0);
    assert_int_equal(zps_authkeys_count(as_root_file), 2);
    zps_authkeys_free(as_root_file);
    assert_int_equal(rc_third, ZPS_EINVAL);
    assert_null(as_third);
    assert_string_equal(why,
                        owner_msg("authorized keys file", apath2, OTHER_UID + 1, OTHER_UID, NULL));
    zps_authkeys_free(cur);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_z85),
        cmocka_unit_test(test_derive_public),
        cmocka_unit_test_setup_teardown(test_keygen_round_trip, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_keygen_no_overwrite, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_keygen_command, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_load_loose_modes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_load_not_regular, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_load_malformed, make_dir, remove_dir),
        cmocka_unit_test(test_authkeys_valid),
        cmocka_unit_test(test_authkeys_errors),
        cmocka_unit_test(test_authorization_table),
        cmocka_unit_test_setup_teardown(test_authkeys_load_reload, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_authkeys_loose_modes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_pubkey_loose_modes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_load_owners, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
