"""Finding and loading libzps with ctypes, and its C types.

Nothing here is compiled: the structs below mirror include/zps/zps.h for
ABI version 1, and the library's own answers (zps_abi_version, the size
zps_client_opts_default writes) are checked against them when it is
loaded, so a library of another ABI is refused with a clear message
instead of being called with the wrong layout.

Where the library is looked for, first match wins:

1. ``ZPS_LIBRARY``: a path to libzps.so (or libzps.so.1);
2. a build folder of the source tree this package lies in
   (``<tree>/build*/client/libzps.so.1``, newest first), so that
   ``PYTHONPATH=python`` works right after a build;
3. the prefix this package is installed in (``<prefix>/lib``,
   ``<prefix>/lib/<multiarch>``), and the user's (``~/.local/lib``, where
   ``cmake --install build/release --prefix ~/.local`` puts it);
4. the dynamic loader's own search (``LD_LIBRARY_PATH``, ld.so.cache);
5. ``/usr/local/lib`` and ``/usr/lib``.
"""

import ctypes
import glob
import os
import sys
import sysconfig

ABI_VERSION = 1
MAX_LEASES = 8
_SONAME = "libzps.so.%d" % ABI_VERSION


class LibraryNotFound(ImportError):
    """libzps could not be found or is not one this package can use."""

    name = "ZPS_ENOLIB"


class ClientOpts(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("worker", ctypes.c_int),
        ("observe", ctypes.c_bool),
        ("observe_pushes", ctypes.c_bool),
        ("timeout_ms", ctypes.c_int),
        ("retry_ms", ctypes.c_int),
        ("heartbeat_ms", ctypes.c_int),
        ("wait_log_ms", ctypes.c_int),
        ("fail_on_refused", ctypes.c_bool),
        ("fail_not_initialised", ctypes.c_bool),
        ("curve", ctypes.c_bool),
        ("no_seal", ctypes.c_bool),
        ("wire_bf16", ctypes.c_bool),
        ("shm", ctypes.c_bool),
        ("keep_malloc", ctypes.c_bool),
        ("curve_public_key", ctypes.c_uint8 * 32),
        ("curve_secret_key", ctypes.c_uint8 * 32),
        ("curve_server_key", ctypes.c_uint8 * 32),
    ]


class ReplyInfo(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("min_version", ctypes.c_uint64),
        ("max_version", ctypes.c_uint64),
        ("min_clock", ctypes.c_uint64),
        ("update_staleness", ctypes.c_uint64),
        ("next_clock", ctypes.c_uint64),
        ("retried", ctypes.c_bool),
        ("dropped", ctypes.c_bool),
        ("buffered", ctypes.c_bool),
        ("rejoined", ctypes.c_bool),
        ("waited_us", ctypes.c_uint64),
        ("leased", ctypes.c_bool),
        ("exhausted", ctypes.c_bool),
        ("nleases", ctypes.c_uint32),
        ("leases", ctypes.c_uint64 * MAX_LEASES),
    ]


class LeaseReq(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("examples", ctypes.c_uint64),
        ("batch", ctypes.c_uint32),
        ("epochs", ctypes.c_uint32),
        ("want", ctypes.c_uint32),
        ("nhave", ctypes.c_uint32),
        ("have", ctypes.c_uint64 * MAX_LEASES),
        ("done", ctypes.c_uint64),
    ]


def _tree_candidates():
    """libzps.so.1 under the build folders of the source tree we lie in."""
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.dirname(os.path.dirname(here))  # python/zps -> python -> tree
    if not os.path.isfile(os.path.join(tree, "include", "zps", "zps.h")):
        return []
    found = glob.glob(os.path.join(tree, "build*", "client", _SONAME))
    found += glob.glob(os.path.join(tree, "build*", "*", "client", _SONAME))
    found.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    return found


def _prefix_candidates():
    import site
    out = []
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, site.getuserbase()]):
        for lib in ("lib", os.path.join("lib", multiarch) if multiarch else None, "lib64"):
            if lib:
                out.append(os.path.join(prefix, lib, _SONAME))
    return out


def candidates():
    """Every place the library is looked for, in order (for error messages too)."""
    env = os.environ.get("ZPS_LIBRARY")
    if env:
        return [env]
    out = _tree_candidates() + _prefix_candidates()
    out.append(_SONAME)  # the loader's own search
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for d in ("/usr/local/lib", "/usr/lib", os.path.join("/usr/lib", multiarch)):
        out.append(os.path.join(d, _SONAME))
    return list(dict.fromkeys(out))


def _declare(lib):
    c_int, c_size_t, c_uint64, c_uint32 = ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32
    vp, cp, fp = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
    opts_p, info_p = ctypes.POINTER(ClientOpts), ctypes.POINTER(ReplyInfo)
    sigs = {
        "zps_abi_version": (c_int, []),
        "zps_set_log_level": (None, [c_int]),
        "zps_strerror": (cp, [c_int]),
        "zps_errname": (cp, [c_int]),
        "zps_client_opts_default": (None, [vp]),
        "zps_client_opts_set_keys": (c_int, [opts_p, cp, cp, cp, c_size_t]),
        "zps_client_opts_clear": (None, [opts_p]),
        "zps_client_new": (c_int, [ctypes.POINTER(cp), c_size_t, opts_p, ctypes.POINTER(vp)]),
        "zps_client_free": (None, [vp]),
        "zps_client_server_count": (c_size_t, [vp]),
        "zps_client_init": (c_int, [vp, fp, c_uint64]),
        "zps_client_finish": (c_int, [vp]),
        "zps_client_set_lease": (c_int, [vp, ctypes.POINTER(LeaseReq)]),
        "zps_client_pull": (c_int, [vp, c_uint64, fp, c_uint64, info_p]),
        "zps_client_pull_alloc": (c_int, [vp, c_uint64, ctypes.POINTER(vp),
                                          ctypes.POINTER(c_uint64), info_p]),
        "zps_client_push": (c_int, [vp, c_uint64, fp, c_uint64, c_uint32, info_p]),
        "zps_client_exchange": (c_int, [vp, c_uint64, fp, c_uint64, c_uint32, fp, info_p]),
        "zps_client_push_taken": (ctypes.c_bool, [vp, c_size_t]),
        "zps_client_stats": (c_int, [vp, c_size_t, ctypes.POINTER(vp)]),
        "zps_client_checkpoint": (c_int, [vp, ctypes.POINTER(vp)]),
        "zps_client_last_error": (cp, [vp]),
        "zps_client_connect_error": (c_int, [vp, c_size_t]),
        "zps_client_check_endpoint": (c_int, [cp, cp, c_size_t]),
        "zps_client_last_remote_status": (c_int, [vp]),
    }
    # ZPS_1.1: the staged exchange (absent from a library of the first release).
    optional = {
        "zps_client_exchange_begin": (c_int, [vp, c_uint64, fp, c_uint64, c_uint32, fp]),
        "zps_client_exchange_ready": (c_int, [vp, c_uint64, c_uint64]),
        "zps_client_exchange_end": (c_int, [vp, info_p]),
    }
    for name, (res, args) in list(sigs.items()) + list(optional.items()):
        f = getattr(lib, name, None)
        if f is None and name in optional:
            continue
        f.restype = res
        f.argtypes = args


def _check(lib, path):
    abi = lib.zps_abi_version()
    if abi != ABI_VERSION:
        raise LibraryNotFound("%s is libzps ABI %d; this zps package speaks ABI %d"
                              % (path, abi, ABI_VERSION))
    # The library writes its own version's whole struct: give it room to spare.
    buf = ctypes.create_string_buffer(4096)
    lib.zps_client_opts_default(buf)
    size = ctypes.c_size_t.from_buffer(buf).value
    if size < ctypes.sizeof(ClientOpts) or size > len(buf):
        raise LibraryNotFound("%s: zps_client_opts_t is %d bytes there, %d here"
                              % (path, size, ctypes.sizeof(ClientOpts)))


_lib = None
_libc = None
_path = None


def load():
    """The loaded library (loaded once per process)."""
    global _lib, _libc, _path
    if _lib is not None:
        return _lib
    tried = []
    for path in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            lib = ctypes.CDLL(path)  # CDLL releases the GIL during every call
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _declare(lib)
        _check(lib, path)
        _lib, _path = lib, path
        # The process's own free (the global lookup): the one the library's
        # malloc pairs with, a preloaded allocator's (a sanitizer's) included.
        _libc = ctypes.CDLL(None)
        _libc.free.argtypes = [ctypes.c_void_p]
        _libc.free.restype = None
        return _lib
    raise LibraryNotFound("libzps not found; build zps (cmake --build build), install it, "
                          "or set ZPS_LIBRARY to libzps.so. Tried: " + "; ".join(tried))


def path():
    load()
    return _path


def free(ptr):
    """Frees what the library malloc'd and handed over (stats, pull_alloc)."""
    _libc.free(ptr)
