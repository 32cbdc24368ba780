/*
 * harness_secure.c - the integration suite with keys (harness.h,
 * ZPS_TEST_SECURE) or over shared memory (ZPS_TEST_SHM). With the first
 * set, every zps_client_new a test makes gets the run's admin key and the
 * servers' public key; with the second, every worker's client (worker >= 0)
 * asks for shared-memory sessions. The tests are linked with
 * -Wl,--wrap=zps_client_new, so their own code, and the trainer they may
 * link, call this instead. Without either, this passes everything on.
 */
#include <stdio.h>

#include "zps/zps.h"
#include "harness.h"

int __real_zps_client_new(const char *const *endpoints, size_t count, const zps_client_opts_t *opts,
                          zps_client_t **out);
int __wrap_zps_client_new(const char *const *endpoints, size_t count, const zps_client_opts_t *opts,
                          zps_client_t **out);

int __wrap_zps_client_new(const char *const *endpoints, size_t count, const zps_client_opts_t *opts,
                          zps_client_t **out)
{
    bool keys = harness_secure() && !(opts && opts->curve);
    bool shm = harness_shm() && opts && opts->worker >= 0 && !opts->shm;
    if (!keys && !shm)
        return __real_zps_client_new(endpoints, count, opts, out);
    zps_client_opts_t o;
    if (opts)
        o = *opts;
    else
        zps_client_opts_default(&o);
    o.shm = o.shm || shm;
    char why[512];
    if (keys && (harness_secure_keys() != 0 ||
                 zps_client_opts_set_keys(&o, harness_client_key(), harness_server_pub(), why,
                                          sizeof(why)) != 0)) {
        fprintf(stderr, "harness: the secure suite's client keys: %s\n", why);
        return -1;
    }
    int rc = __real_zps_client_new(endpoints, count, &o, out);
    zps_client_opts_clear(&o);
    return rc;
}
