/*
 * backend_module.c - finds a backend module on disk, loads it with dlopen
 * and checks that it was built for this loader (backend_module.h has the
 * search order). Knows nothing about any particular backend.
 */
#include "backend_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "log.h"

/* Both set by the build from the install layout; these are its defaults. */
#ifndef ZPS_BACKEND_RELDIR
#define ZPS_BACKEND_RELDIR "../lib/zps"
#endif
#ifndef ZPS_BACKEND_LIBDIR
#define ZPS_BACKEND_LIBDIR "/usr/local/lib/zps"
#endif

#define MAX_DIRS 3

/* Writes the directory of the running executable to dir[size]; 0 or -1. */
static int exe_dir(char *dir, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", dir, size - 1);
    if (n <= 0 || (size_t)n >= size - 1)
        return -1;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash)
        return -1;
    slash[slash == dir ? 1 : 0] = '\0'; /* "/zps-worker" lives in "/" */
    return 0;
}

/* The directories to search, in order; returns how many (0..MAX_DIRS).
 * *from_env tells whether ZPS_BACKEND_DIR chose them. */
static size_t search_dirs(char dirs[MAX_DIRS][PATH_MAX], bool *from_env)
{
    size_t n = 0;
    const char *env = getenv("ZPS_BACKEND_DIR");
    *from_env = env && *env;
    if (*from_env) {
        /* An explicit choice: a test or a packager pins the one module meant. */
        if ((size_t)snprintf(dirs[n], PATH_MAX, "%s", env) < PATH_MAX)
            n++;
        return n;
    }
    char here[PATH_MAX];
    if (exe_dir(here, sizeof(here)) == 0) {
        memcpy(dirs[n++], here, sizeof(here));
        if ((size_t)snprintf(dirs[n], PATH_MAX, "%s/%s", here, ZPS_BACKEND_RELDIR) < PATH_MAX)
            n++;
    }
    snprintf(dirs[n++], PATH_MAX, "%s", ZPS_BACKEND_LIBDIR);
    return n;
}

/* dlopen's result for `path`, entry symbol and ABI checked; 0 or ZPS_ENODEV. */
static int load_from(const char *path, const zps_backend_ops_t **ops, char *err, size_t err_size)
{
    /* RTLD_NOW: a module that needs a symbol this executable lacks fails
     * here, with dlerror's message, rather than at its first call. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        zps_set_reason(err, err_size, "cannot load %s: %s", path, dlerror());
        return ZPS_ENODEV;
    }
    zps_backend_entry_fn *entry = (zps_backend_entry_fn *)dlsym(h, ZPS_BACKEND_ENTRY);
    if (!entry) {
        zps_set_reason(err, err_size, "%s is not a zps backend module (no %s)", path,
                       ZPS_BACKEND_ENTRY);
        dlclose(h);
        return ZPS_ENODEV;
    }
    uint32_t abi = 0;
    const zps_backend_ops_t *table = entry(&abi);
    if (abi != ZPS_BACKEND_ABI || !table) {
        zps_set_reason(err, err_size,
                       "%s was built for backend ABI %u, this program needs ABI %u "
                       "(a stale module: rebuild or reinstall it with this program)",
                       path, (unsigned)abi, (unsigned)ZPS_BACKEND_ABI);
        dlclose(h);
        return ZPS_ENODEV;
    }
    zps_debug("backend module %s: loaded %s", table->name, path);
    *ops = table;
    return 0;
}

int zps_backend_module_load(const char *file, const zps_backend_ops_t **ops, char *err,
                            size_t err_size)
{
    char dirs[MAX_DIRS][PATH_MAX];
    bool from_env;
    size_t n = search_dirs(dirs, &from_env);
    char path[PATH_MAX];
    for (size_t i = 0; i < n; i++) {
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dirs[i], file) >= sizeof(path))
            continue;
        /* The first file found is the one meant; a broken one is reported,
         * not passed over for an older copy further down the list. */
        if (access(path, F_OK) == 0)
            return load_from(path, ops, err, err_size);
    }
    char looked[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < n && used < sizeof(looked); i++)
        used +=
            (size_t)snprintf(looked + used, sizeof(looked) - used, "%s%s", i ? ", " : "", dirs[i]);
    zps_set_reason(err, err_size, "%s not found (looked in %s%s)", file, looked,
                   from_env ? ", as ZPS_BACKEND_DIR says" : "; ZPS_BACKEND_DIR sets another place");
    return ZPS_ENODEV;
}
