/*
 * version.c - the version string; see version.h. ZPS_VERSION comes from the
 * build, ZPS_GIT_DESCRIBE from the header the build generates
 * (cmake/git_describe.cmake).
 */
#include "version.h"

#include <stdio.h>

#include "zps_git.h"

const char *zps_version(void)
{
    return ZPS_GIT_DESCRIBE[0] ? ZPS_VERSION " (git " ZPS_GIT_DESCRIBE ")" : ZPS_VERSION;
}

void zps_version_print(const char *program)
{
    printf("%s %s\n", program, zps_version());
}
