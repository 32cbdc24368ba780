/*
 * backend_module.h - finding and loading a backend that is built as its own
 * shared library (the cuda backend, libzps_backend_cuda.so), so that the
 * executables link no GPU library and a run that does not ask for one never
 * maps it.
 *
 * A module file is looked for in these directories, and loaded from the
 * first one that has it:
 *
 *   1. $ZPS_BACKEND_DIR, when set and not empty; then nowhere else.
 *   2. The directory of the running executable (/proc/self/exe): the build
 *      tree, where the module is built beside zps-worker.
 *   3. ZPS_BACKEND_RELDIR relative to that directory (../lib/zps in a usual
 *      install): an installed tree, wherever its prefix was put.
 *   4. ZPS_BACKEND_LIBDIR, the install directory configured at build time.
 *
 * Not here: which backends exist and how "auto" chooses (backend.c); the
 * ABI contract between a module and its loader (backend.h).
 */
#ifndef ZPS_BACKEND_MODULE_H
#define ZPS_BACKEND_MODULE_H

#include <stddef.h>

#include "backend.h"

/*
 * Loads module `file` (a file name without a directory) from the first
 * directory above that holds it, resolving every symbol at once, and checks
 * its ABI. Writes its ops table to *ops on success. The library stays loaded
 * for the life of the process. Blocks for the module's start-up (for the
 * cuda module, loading cuBLAS: about 0.2 s). Returns 0, or ZPS_ENODEV with
 * the reason in err[err_size]: no directory holds the file, dlopen failed
 * (dlerror's message), no entry symbol, or another ABI. Thread-safe; it
 * does no caching, so callers load a module once.
 */
int zps_backend_module_load(const char *file, const zps_backend_ops_t **ops, char *err,
                            size_t err_size);

#endif
