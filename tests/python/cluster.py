"""Real zps-server processes on 127.0.0.1 for the Python tests.

Each server binds tcp://127.0.0.1:* and writes its endpoint to a file;
Cluster waits (bounded) for every file and stops exactly the processes
it started, by PID, at exit. ZPS_SERVER_BIN names the server binary.
"""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77  # ctest's SKIP_RETURN_CODE
PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None).prctl  # looked up here: the child between fork and exec only calls


def _die_with_parent():
    """In the child before exec: the kernel ends it when the test process dies,
    however it dies (a crash leaves no server behind)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def skip(why):
    print("skipped: " + why)
    sys.exit(SKIP)


def need_modules(*names):
    for name in names:
        try:
            __import__(name)
        except ImportError as e:
            skip("%s cannot be imported (%s); scripts/setup installs python3-%s"
                 % (name, e, "torch" if name == "torch" else name))


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


class Cluster:
    def __init__(self, shards=2, workers=2, args=(), env=None):
        self.bin = os.environ.get("ZPS_SERVER_BIN")
        if not self.bin:
            raise RuntimeError("ZPS_SERVER_BIN is not set (ctest sets it)")
        self.dir = tempfile.mkdtemp(prefix="zps-pytest-")
        self.procs = []
        self.endpoints = []
        for i in range(shards):
            ep_file = os.path.join(self.dir, "ep%d" % i)
            cmd = [self.bin, "--workers", str(workers), "--shard", "%d/%d" % (i, shards),
                   "--listen", "tcp://127.0.0.1:*", "--endpoint-file", ep_file] + list(args)
            with open(os.path.join(self.dir, "server%d.log" % i), "wb") as log:
                self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                   env=env, preexec_fn=_die_with_parent))
        deadline = time.monotonic() + 30
        for i in range(shards):
            ep_file = os.path.join(self.dir, "ep%d" % i)
            while not _read(ep_file):
                if self.procs[i].poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("server %d did not start: %s" % (i, self.log(i)))
                time.sleep(0.02)
            self.endpoints.append(_read(ep_file))

    def log(self, i):
        with open(os.path.join(self.dir, "server%d.log" % i), "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    def kill(self, i):
        p = self.procs[i]
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def dead_endpoint():
    """A tcp:// endpoint on 127.0.0.1 where nothing listens (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "tcp://127.0.0.1:%d" % port
