/*
 * version.h - the one version string of zps, printed by `--version` of zps,
 * zps-server and zps-worker: the project's version (CMakeLists.txt's
 * project(VERSION)) and, when built from a git checkout, `git describe
 * --always --dirty` taken at build time. Not a protocol version (that is
 * common/wire.h's).
 */
#ifndef ZPS_VERSION_H
#define ZPS_VERSION_H

/* "0.1.0 (git v0.1.0-12-gabcdef0-dirty)", or "0.1.0" built without git.
 * Static storage; never fails. */
const char *zps_version(void);

/* Prints "PROGRAM VERSION\n" (zps_version) on stdout. */
void zps_version_print(const char *program);

#endif
