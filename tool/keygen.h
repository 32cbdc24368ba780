/*
 * keygen.h - `zps keygen PREFIX [--force]`: a CURVE key pair written as
 * PREFIX.key (the secret key, mode 0600) and PREFIX.pub (the public key,
 * one line), for the authentication of issue 13.
 *
 * Not here: the key files' formats, their writing and loading
 * (common/keys.h); using the keys (servers and clients do not yet).
 */
#ifndef ZPS_KEYGEN_H
#define ZPS_KEYGEN_H

/*
 * Runs `zps keygen` with argv[0] = "keygen" and its arguments. Blocks while
 * it writes and syncs the two files. Returns the exit status: 0 written,
 * 1 the files cannot be written (the reason on stderr), 2 bad usage or the
 * files exist (without --force). "--help" or "-h" prints the usage on
 * stdout and returns 0.
 */
int zps_cmd_keygen(int argc, char **argv);

#endif
