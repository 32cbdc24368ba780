/*
 * keygen.c - `zps keygen PREFIX [--force]`; see keygen.h.
 *
 * Only the command line: the key pair, its files and their modes are
 * common/keys.c's.
 */
#include "keygen.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "keys.h"

#define EXIT_WRITE 1
#define EXIT_USAGE 2

static void usage(FILE *f)
{
    fprintf(f, "usage: zps keygen PREFIX [--force]\n"
               "\n"
               "Writes a new CURVE key pair: PREFIX.key, the secret key (mode 0600; keep it\n"
               "private), and PREFIX.pub, the public key (40 Z85 characters on one line, mode\n"
               "0644; share it). Existing files are left alone unless --force is given.\n"
               "A server uses its pair with zps-server --key PREFIX.key, and admits the\n"
               "clients' public keys listed, each with its role (admin, worker, reader), in\n"
               "its --authorized-keys file; a client (zps, zps-worker) gives its own secret\n"
               "key with --key and the server's public key with --server-key: every\n"
               "connection is then authenticated and encrypted (docs/security.md).\n"
               "\n"
               "Exit status: 0 written; 1 the files cannot be written; 2 bad usage or the\n"
               "files exist.\n");
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "zps keygen: %s%s%s\nTry 'zps keygen --help'.\n", msg, arg ? arg : "",
            arg ? "'" : "");
    return EXIT_USAGE;
}

int zps_cmd_keygen(int argc, char **argv)
{
    const char *prefix = NULL;
    bool force = false;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options_done && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            usage(stdout);
            return 0;
        }
        if (!options_done && strcmp(a, "--force") == 0) {
            force = true;
        } else if (!options_done && strcmp(a, "--") == 0) {
            options_done = true;
        } else if (!options_done && a[0] == '-') {
            return usage_error("unknown option '", a);
        } else if (prefix == NULL) {
            prefix = a;
        } else {
            return usage_error("unexpected argument '", a);
        }
    }
    if (prefix == NULL)
        return usage_error("missing PREFIX", NULL);

    char why[512];
    zps_keypair_t kp;
    int rc = zps_keypair_generate(&kp, why, sizeof(why));
    if (rc == 0) {
        rc = zps_keypair_write(prefix, &kp, force, why, sizeof(why));
        if (rc == 0) {
            char pub[ZPS_KEY_Z85_CHARS + 1];
            zps_key_encode(kp.public_key, pub);
            printf("%s.key: secret key (mode 0600)\n%s.pub: public key %s\n", prefix, prefix, pub);
        }
    }
    zps_keypair_clear(&kp);
    if (rc == 0)
        return 0;
    fprintf(stderr, "zps keygen: %s\n", why);
    return rc == ZPS_EINVAL ? EXIT_USAGE : EXIT_WRITE;
}
