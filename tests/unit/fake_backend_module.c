/*
 * fake_backend_module.c - a backend module that computes nothing, for
 * test_backend_module: built twice, once for this loader's ABI
 * (libzps_fake_ok.so) and once for an older one (libzps_fake_stale.so),
 * with FAKE_ABI set by the build.
 */
#include <stdint.h>

#include "backend.h"

static const zps_backend_ops_t fake_ops = {.name = "fake"};

zps_backend_entry_fn zps_backend_module;

const zps_backend_ops_t *zps_backend_module(uint32_t *abi)
{
    *abi = FAKE_ABI;
    return &fake_ops;
}
