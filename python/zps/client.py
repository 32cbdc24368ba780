"""zps.Client: one worker's (or a tool's) connection to the shards of a model.

A thin layer over libzps (include/zps/zps.h): every call is one C call, made
with the GIL released, reading and writing the caller's own buffer (a
float32 NumPy array or a contiguous float32 CPU tensor) without a copy.
"""

import ctypes
import json
import logging
import os
import threading
import time

from . import _lib

log = logging.getLogger("zps")

_NAMES = {}

# The codes this module tests for by value (include/zps/errors.h; on the wire,
# so never renumbered).
EREMOTE, ECONFIG, EPARTIAL = -18, -29, -30


def _errname(code):
    if not _NAMES:
        lib = _lib.load()
        for c in range(0, -128, -1):
            name = lib.zps_errname(c).decode()
            if name != "ZPS_E?":
                _NAMES[c] = name
    return _NAMES.get(code, "ZPS_E?")


class Error(Exception):
    """A libzps call failed.

    ``name`` and ``code``: what went wrong, as a ZPS_E* name ("ZPS_ECLOCK")
    and value; when a server refused the request, the server's own code
    (``remote`` is then True), else the library's. ``status``: what the
    library call returned (ZPS_EREMOTE when a server refused; ZPS_EPARTIAL
    when some shards took a push and others did not, ``name`` staying
    ZPS_EPARTIAL). ``reason``: the library's one-line explanation, naming
    the server. ``verb``: the call ("pull", "exchange", ...).
    """

    def __init__(self, status, reason, remote_code=None, verb=None):
        self.status = status
        self.remote = bool(remote_code) and status == EREMOTE
        self.code = remote_code if self.remote else status
        self.remote_code = remote_code or None
        self.name = _errname(self.code)
        self.reason = reason
        self.verb = verb
        what = "%s: " % verb if verb else ""
        text = "%s%s: %s" % (what, self.name, reason)
        super().__init__(text)


Error.__module__ = "zps"


class Info:
    """What the servers' replies said (zps_reply_info_t), as attributes."""

    __slots__ = ("min_version", "max_version", "min_clock", "update_staleness", "next_clock",
                 "retried", "dropped", "buffered", "rejoined", "waited_us", "leases", "exhausted")

    def __init__(self, ri):
        for f in self.__slots__[:10]:
            setattr(self, f, getattr(ri, f))
        self.leases = list(ri.leases[:ri.nleases]) if ri.leased else None
        self.exhausted = bool(ri.exhausted)

    def __repr__(self):
        return "Info(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f in self.__slots__)


def _as_buffer(obj, writable, what):
    """(pointer, element count, keep-alive) of a float32 buffer, without copying."""
    mod = type(obj).__module__
    if mod.startswith("torch"):
        if str(obj.dtype) != "torch.float32":
            raise TypeError("%s: a float32 tensor, not %s" % (what, obj.dtype))
        if obj.device.type != "cpu":
            raise TypeError("%s: a CPU tensor, not one on %s (zps.torch stages device "
                            "tensors through host memory; or pass tensor.cpu())"
                            % (what, obj.device))
        if not obj.is_contiguous():
            raise TypeError("%s: a contiguous tensor (call .contiguous())" % what)
        return obj.data_ptr(), obj.numel(), obj
    if mod == "numpy":
        import numpy as np
        if not isinstance(obj, np.ndarray):
            raise TypeError("%s: a float32 array, not a NumPy %s" % (what, type(obj).__name__))
        if obj.dtype != np.float32:
            raise TypeError("%s: a float32 array, not %s (use .astype(numpy.float32))"
                            % (what, obj.dtype))
        if not obj.flags.c_contiguous:
            raise TypeError("%s: a C-contiguous array (numpy.ascontiguousarray)" % what)
        if writable and not obj.flags.writeable:
            raise TypeError("%s: a writeable array" % what)
        return obj.ctypes.data, obj.size, obj
    if writable:
        raise TypeError("%s: a float32 NumPy array or CPU tensor, not %s"
                        % (what, type(obj).__name__))
    import numpy as np
    arr = np.ascontiguousarray(obj, dtype=np.float32)  # a list or the like: copied once
    return arr.ctypes.data, arr.size, arr


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, v)) from None


def _ms(seconds, what, none_ms):
    if seconds is None:
        return none_ms
    if seconds < 0:
        raise ValueError("%s: %r is negative" % (what, seconds))
    return int(round(seconds * 1000))


class Client:
    """A client of the S servers of one model.

    ``servers``: endpoints in shard order, a list or a comma-separated
    string (endpoint i is the server started with --shard i/S); default
    ``ZPS_SERVERS``. ``rank``: this worker's rank, or -1 for a tool;
    default ``ZPS_RANK``, else -1. ``workers``: the cluster's worker count;
    default ``ZPS_WORKERS``; when known, the servers' --workers is checked
    against it before the first request. ``key``/``server_key``: this
    process's secret key file (PREFIX.key) and the servers' public key
    (SERVER.pub) for CURVE; default ``ZPS_KEY``/``ZPS_SERVER_KEY``.

    ``timeout``: every call gives up after this many seconds (None: never)
    with ZPS_ETIMEDOUT, or ZPS_EUNREACHABLE when a server could not be
    connected to; ``retry``: resend an unanswered request after this long;
    ``heartbeat``: a worker's liveness period; ``wait_log``: a call still
    waiting after this long says what it waits for (which servers, the
    model's initialisation, which ranks' pushes), then every 3 times as
    long; 0 or None: never. ``bf16``, ``shm``, ``no_seal``, ``observe``:
    as zps_client_opts_t's wire_bf16, shm, no_seal, observe.

    One thread uses a client at a time (calls are serialised by a lock).
    """

    def __init__(self, servers=None, rank=None, workers=None, *, timeout=30.0, retry=1.0,
                 heartbeat=1.0, wait_log=3.0, key=None, server_key=None, bf16=False,
                 shm=False, no_seal=False, observe=False, fail_fast=False):
        self._c = None
        self._staged = self._watch = self._opts_template = None
        self._lib = lib = _lib.load()
        if servers is None:
            servers = os.environ.get("ZPS_SERVERS")
            if not servers:
                raise ValueError("zps.Client: no servers given and ZPS_SERVERS is not set "
                                 "(zps launch ... -- COMMAND sets it)")
        if isinstance(servers, str):
            servers = [s.strip() for s in servers.split(",") if s.strip()]
        servers = [str(s) for s in servers]
        if not servers:
            raise ValueError("zps.Client: an empty list of servers")
        why = ctypes.create_string_buffer(256)
        for ep in servers:
            if lib.zps_client_check_endpoint(ep.encode(), why, len(why)) != 0:
                raise ValueError("zps.Client: " + why.value.decode())
        if rank is None:
            rank = _env_int("ZPS_RANK")
            rank = -1 if rank is None else rank
        if workers is None:
            workers = _env_int("ZPS_WORKERS")
        if workers is not None and workers < 1:
            raise ValueError("zps.Client: workers=%d; at least 1" % workers)
        if rank < -1 or (workers is not None and rank >= workers):
            raise ValueError("zps.Client: rank %d is not one of %s workers' ranks"
                             % (rank, workers if workers is not None else "the"))
        if key is None and server_key is None:
            key, server_key = os.environ.get("ZPS_KEY"), os.environ.get("ZPS_SERVER_KEY")
        if bool(key) != bool(server_key):
            raise ValueError("zps.Client: CURVE needs both key (PREFIX.key, ZPS_KEY) and "
                             "server_key (SERVER.pub, ZPS_SERVER_KEY)")
        self.servers = servers
        self.rank = rank
        self.workers = workers
        self.size = None  # the model's element count, once known
        self.last_info = None
        self._wait_log = wait_log or 0
        self._lock = threading.RLock()
        self._checked = workers is None
        self._call = None  # (verb, clock, started) of the call in progress, for the watch

        opts = _lib.ClientOpts()
        lib.zps_client_opts_default(ctypes.byref(opts))
        opts.size = ctypes.sizeof(_lib.ClientOpts)
        opts.worker = rank
        opts.timeout_ms = _ms(timeout, "timeout", -1)
        opts.retry_ms = _ms(retry, "retry", 0)
        opts.heartbeat_ms = _ms(heartbeat, "heartbeat", 0) if rank >= 0 else 0
        opts.wait_log_ms = _ms(wait_log, "wait_log", 0)
        opts.wire_bf16, opts.shm, opts.no_seal = bf16, shm, no_seal
        opts.observe = observe
        opts.fail_on_refused = fail_fast
        opts.fail_not_initialised = fail_fast
        try:
            if key:
                rc = lib.zps_client_opts_set_keys(ctypes.byref(opts), os.fsencode(key),
                                                  os.fsencode(server_key), why, len(why))
                if rc != 0:
                    raise Error(rc, why.value.decode(), verb="keys")
            arr = (ctypes.c_char_p * len(servers))(*[s.encode() for s in servers])
            handle = ctypes.c_void_p()
            rc = lib.zps_client_new(arr, len(servers), ctypes.byref(opts), ctypes.byref(handle))
            if rc != 0:
                raise Error(rc, lib.zps_strerror(rc).decode(), verb="connect")
            self._c = handle
            if key and self._wait_log:
                # The watch's observer client needs the keys too; keep a copy
                # (cleared in close()).
                self._opts_template = _lib.ClientOpts.from_buffer_copy(opts)
                self._opts_template.worker = -1
                self._opts_template.heartbeat_ms = 0
        finally:
            lib.zps_client_opts_clear(ctypes.byref(opts))

    # -- plumbing ---------------------------------------------------------

    def _handle(self):
        if self._c is None:
            raise ValueError("zps.Client: closed")
        return self._c

    def _fail(self, rc, verb):
        lib = self._lib
        reason = (lib.zps_client_last_error(self._c) or b"").decode(errors="replace")
        remote = lib.zps_client_last_remote_status(self._c) if rc in (EREMOTE, EPARTIAL) else 0
        raise Error(rc, reason or lib.zps_strerror(rc).decode(), remote or None, verb)

    def _begin(self, verb, clock):
        if self._wait_log and self._watch is None:
            self._watch = _Watch(self)
        self._call = (verb, clock, time.monotonic())

    def _check_workers(self):
        if self._checked:
            return
        st = self._stats_one(0, "connect")
        if st.get("workers") != self.workers:
            raise Error(ECONFIG, "%s runs --workers %s; this client was given workers=%d"
                        % (self.servers[0], st.get("workers"), self.workers), verb="connect")
        if st.get("shards") != len(self.servers):
            raise Error(ECONFIG, "%s is a shard of %s; this client was given %d servers"
                        % (self.servers[0], st.get("shards"), len(self.servers)), verb="connect")
        self._checked = True

    def _stats_one(self, index, verb):
        out = ctypes.c_void_p()
        rc = self._lib.zps_client_stats(self._c, index, ctypes.byref(out))
        if rc != 0:
            self._fail(rc, verb)
        try:
            return json.loads(ctypes.string_at(out.value).decode())
        finally:
            _lib.free(out.value)

    def _run(self, verb, clock, fn):
        with self._lock:
            self._handle()
            self._check_workers()
            self._begin(verb, clock)
            try:
                return fn()
            finally:
                self._call = None

    # -- the verbs --------------------------------------------------------

    def init(self, values):
        """Sets the initial model (idempotent: a repeat of the same values is a no-op)."""
        ptr, n, keep = _as_buffer(values, False, "init")

        def call():
            rc = self._lib.zps_client_init(self._c, ptr, n)
            if rc != 0:
                self._fail(rc, "init")
            self.size = n
        self._run("init", None, call)
        del keep

    def pull(self, clock, out=None):
        """The parameters for ``clock``: into ``out`` (returned), or a new float32 array."""
        info = _lib.ReplyInfo(size=ctypes.sizeof(_lib.ReplyInfo))
        if out is None and self.size is None:
            def call_alloc():
                p, n = ctypes.c_void_p(), ctypes.c_uint64()
                rc = self._lib.zps_client_pull_alloc(self._c, clock, ctypes.byref(p),
                                                     ctypes.byref(n), ctypes.byref(info))
                if rc != 0:
                    self._fail(rc, "pull")
                import numpy as np
                try:
                    arr = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)),
                                                (n.value,)).copy()
                finally:
                    _lib.free(p.value)
                self.size = n.value
                return arr
            arr = self._run("pull", clock, call_alloc)
            self.last_info = Info(info)
            return arr
        if out is None:
            import numpy as np
            out = np.empty(self.size, dtype=np.float32)
        ptr, n, keep = _as_buffer(out, True, "pull out")

        def call():
            rc = self._lib.zps_client_pull(self._c, clock, ptr, n, ctypes.byref(info))
            if rc != 0:
                self._fail(rc, "pull")
            self.size = n
        self._run("pull", clock, call)
        self.last_info = Info(info)
        del keep
        return out

    def push(self, clock, grad, batch):
        """Pushes a gradient of ``batch`` examples at ``clock``; returns an Info."""
        ptr, n, keep = _as_buffer(grad, False, "push")
        info = _lib.ReplyInfo(size=ctypes.sizeof(_lib.ReplyInfo))

        def call():
            rc = self._lib.zps_client_push(self._c, clock, ptr, n, batch, ctypes.byref(info))
            if rc != 0:
                self._fail(rc, "push")
        self._run("push", clock, call)
        del keep
        self.last_info = Info(info)
        return self.last_info

    def exchange(self, clock, grad, batch, out=None):
        """Pushes ``grad`` for ``clock`` and pulls the parameters for clock + 1, one
        message each way per shard; returns ``out`` (or a new array)."""
        gptr, n, gkeep = _as_buffer(grad, False, "exchange grad")
        if out is None:
            import numpy as np
            out = np.empty(n, dtype=np.float32)
        optr, on, okeep = _as_buffer(out, True, "exchange out")
        if on != n:
            raise ValueError("exchange: out has %d elements, grad %d" % (on, n))
        if optr < gptr + 4 * n and gptr < optr + 4 * n:
            raise ValueError("exchange: out overlaps grad")
        info = _lib.ReplyInfo(size=ctypes.sizeof(_lib.ReplyInfo))

        def call():
            rc = self._lib.zps_client_exchange(self._c, clock, gptr, n, batch, optr,
                                               ctypes.byref(info))
            if rc != 0:
                self._fail(rc, "exchange")
            self.size = n
        self._run("exchange", clock, call)
        del gkeep, okeep
        self.last_info = Info(info)
        return out

    @property
    def can_stage(self):
        """Whether the library has the staged exchange (libzps ZPS_1.1)."""
        return hasattr(self._lib, "zps_client_exchange_end")

    def exchange_begin(self, clock, grad, batch, out):
        """Begins a staged exchange (zps_client_exchange_begin): nothing is sent
        until ``exchange_ready`` declares a shard's slice of ``grad`` final; the
        client is held for this thread until ``exchange_end``."""
        gptr, n, gkeep = _as_buffer(grad, False, "exchange grad")
        optr, on, okeep = _as_buffer(out, True, "exchange out")
        if on != n:
            raise ValueError("exchange_begin: out has %d elements, grad %d" % (on, n))
        if optr < gptr + 4 * n and gptr < optr + 4 * n:
            raise ValueError("exchange_begin: out overlaps grad")
        self._lock.acquire()
        try:
            self._handle()
            self._check_workers()
            rc = self._lib.zps_client_exchange_begin(self._c, clock, gptr, n, batch, optr)
            if rc != 0:
                self._fail(rc, "exchange")
        except BaseException:
            self._lock.release()
            raise
        self._staged = (clock, out, n, gkeep, okeep)

    def exchange_ready(self, lo, hi):
        """grad[lo:hi] is final: each shard whose whole slice now is leaves at once.
        A refused slice (non-finite) raises here; exchange_end must still follow."""
        rc = self._lib.zps_client_exchange_ready(self._c, lo, hi)
        if rc != 0:
            self._fail(rc, "exchange")

    def exchange_end(self):
        """Sends what was not declared, waits for the replies; returns ``out``."""
        if self._staged is None:
            raise ValueError("exchange_end: no staged exchange was begun")
        clock, out, n, gkeep, okeep = self._staged
        self._staged = None
        info = _lib.ReplyInfo(size=ctypes.sizeof(_lib.ReplyInfo))
        try:
            self._begin("exchange", clock)
            rc = self._lib.zps_client_exchange_end(self._c, ctypes.byref(info))
            self._call = None
            if rc != 0:
                self._fail(rc, "exchange")
            self.size = n
        finally:
            self._call = None
            self._lock.release()
        del gkeep, okeep
        self.last_info = Info(info)
        return out

    def set_lease(self, examples, batch, epochs, want, have=(), done=0):
        """A shared data assignment's request (docs/worker.md), carried to shard 0
        by the next pull, push or exchange: the plan (N examples, ``batch``,
        ``epochs``), the leases to hold after the answer (``want``), the ones
        this worker ``have`` not pushed yet, and ``done`` = g + 1 of the batch
        that call's gradient is of (0: none). The answer is that call's
        ``last_info.leases`` (None: the call carried none) and
        ``last_info.exhausted``."""
        have = list(have)
        if len(have) > _lib.MAX_LEASES or want > _lib.MAX_LEASES:
            raise ValueError("set_lease: at most %d leases" % _lib.MAX_LEASES)
        req = _lib.LeaseReq(size=ctypes.sizeof(_lib.LeaseReq), examples=examples, batch=batch,
                            epochs=epochs, want=want, nhave=len(have), done=done)
        for i, g in enumerate(have):
            req.have[i] = g
        with self._lock:
            rc = self._lib.zps_client_set_lease(self._handle(), ctypes.byref(req))
            if rc != 0:
                self._fail(rc, "set_lease")

    def finish(self):
        """Tells every shard this worker has no batch left."""
        def call():
            rc = self._lib.zps_client_finish(self._c)
            if rc != 0:
                self._fail(rc, "finish")
        self._run("finish", None, call)

    def stats(self, index=None):
        """Server ``index``'s statistics as a dict, or a list of every server's."""
        with self._lock:
            self._handle()
            if index is not None:
                if not 0 <= index < len(self.servers):
                    raise IndexError("stats: server %d of %d" % (index, len(self.servers)))
                return self._stats_one(index, "stats")
            return [self._stats_one(i, "stats") for i in range(len(self.servers))]

    def checkpoint(self):
        """Asks every shard for a checkpoint; returns each shard's answer (dicts)."""
        with self._lock:
            out = ctypes.c_void_p()
            rc = self._lib.zps_client_checkpoint(self._handle(), ctypes.byref(out))
            if rc != 0:
                self._fail(rc, "checkpoint")
            try:
                text = ctypes.string_at(out.value).decode()
            finally:
                _lib.free(out.value)
            return [json.loads(line) for line in text.splitlines() if line.strip()]

    def close(self):
        """Stops the heartbeat, closes the sockets. Idempotent."""
        if self._staged is not None:
            try:  # a staged exchange left open (its caller raised): its shards are told
                self.exchange_end()
            except Error:
                pass
        w, self._watch = self._watch, None
        if w is not None:
            w.stop()
        with self._lock:
            if self._c is not None:
                self._lib.zps_client_free(self._c)
                self._c = None
        if self._opts_template is not None:
            self._lib.zps_client_opts_clear(ctypes.byref(self._opts_template))
            self._opts_template = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "zps.Client(%r, rank=%d, workers=%r)" % (self.servers, self.rank, self.workers)


class _Watch:
    """Says what a long call waits for, from the servers' own statistics.

    The library already logs which server has not answered (and why a
    connection failed, at once). This thread adds what only the servers
    know: that the model is not initialised, or which ranks' pushes a
    clock waits for. It uses an observer client of its own (no heartbeat,
    never the caller's sockets) and wakes twice a second while calls are
    short.
    """

    def __init__(self, client):
        self._client = client
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="zps-watch", daemon=True)
        self._t.start()

    def stop(self):
        self._stop.set()
        self._t.join(timeout=5)

    def _observer(self):
        c = self._client
        lib = c._lib
        opts = _lib.ClientOpts()
        if c._opts_template is not None:
            ctypes.memmove(ctypes.byref(opts), ctypes.byref(c._opts_template),
                           ctypes.sizeof(opts))
        else:
            lib.zps_client_opts_default(ctypes.byref(opts))
            opts.size = ctypes.sizeof(_lib.ClientOpts)
        opts.worker, opts.heartbeat_ms, opts.wait_log_ms = -1, 0, 0
        opts.timeout_ms, opts.retry_ms = 2000, 500
        arr = (ctypes.c_char_p * len(c.servers))(*[s.encode() for s in c.servers])
        h = ctypes.c_void_p()
        rc = lib.zps_client_new(arr, len(c.servers), ctypes.byref(opts), ctypes.byref(h))
        lib.zps_client_opts_clear(ctypes.byref(opts))
        return h if rc == 0 else None

    def _loop(self):
        obs = None
        reported = None  # the call we last reported on, and when to report again
        next_at = 0.0
        first = self._client._wait_log
        try:
            while not self._stop.wait(0.5):
                call = self._client._call
                if call is None:
                    reported = None
                    continue
                verb, clock, started = call
                now = time.monotonic()
                if reported != call:
                    reported, next_at, period = call, started + first, first * 3
                if now < next_at:
                    continue
                if obs is None:
                    obs = self._observer()
                if obs is not None:
                    text = self._explain(obs, verb, clock, now - started)
                    if text:
                        log.warning("%s", text)
                next_at, period = now + period, period * 3
        finally:
            if obs is not None:
                self._client._lib.zps_client_free(obs)

    def _explain(self, obs, verb, clock, waited):
        c = self._client
        lib = c._lib
        what = "%s%s" % (verb, "" if clock is None else " for clock %d" % clock)
        parts = []
        for i, ep in enumerate(c.servers):
            if self._stop.is_set():
                return None
            out = ctypes.c_void_p()
            rc = lib.zps_client_stats(obs, i, ctypes.byref(out))
            if rc != 0:
                parts.append("server %d at %s does not answer (%s)" % (i, ep, _errname(rc)))
                continue
            try:
                st = json.loads(ctypes.string_at(out.value).decode())
            finally:
                _lib.free(out.value)
            if not st.get("initialized"):
                parts.append("server %d at %s: the model is not initialised yet (rank 0's "
                             "init)" % (i, ep))
                continue
            clocks, live = st.get("clocks") or [], st.get("live") or []
            if clock is not None and verb in ("pull", "exchange"):
                need = clock if verb == "pull" else clock + 1
                mode = st.get("mode")
                if mode == "bsp":
                    behind = [w for w, k in enumerate(clocks) if k < need and w != c.rank]
                elif mode == "ssp":
                    bound = st.get("staleness_bound", 0)
                    behind = [w for w, k in enumerate(clocks)
                              if k + bound < need and w != c.rank]
                else:
                    behind = []
                if behind:
                    gone = [w for w in behind if w < len(live) and not live[w]]
                    text = "server %d at %s (%s): ranks %s have not pushed clock %d yet" % (
                        i, ep, mode, ", ".join(map(str, behind)), need - 1)
                    if gone:
                        text += " (evicted: %s)" % ", ".join(map(str, gone))
                    parts.append(text)
        if not parts:
            return "zps: %s still waiting after %.0f s" % (what, waited)
        return "zps: %s waiting for %.0f s: %s" % (what, waited, "; ".join(parts))
