#!/usr/bin/env python3
"""The Python client's exchange against the C client's, through the same
libzps.so and the same kind of server, measured in the same run.

Each measurement starts a fresh zps-server (--workers 1, BSP), initialises
the model and times exchanges (clock after clock, one worker); the C side
is tests/bench/bench_client_loop, the Python side zps.Client.exchange with
a NumPy gradient and output buffer. Rounds alternate C and Python, and
the table gives the medians' median and their ratio (Python / C): a copy
added on the Python side would show as a ratio well above 1 at 16 MiB.

    /usr/bin/python3 tests/bench/python_exchange.py [BUILD_DIR] [--sizes 1M,16M]
        [--iters 60] [--rounds 3]

One line per size: RESULT kind=python-exchange size=BYTES c_us=... py_us=... ratio=...
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))


def size_of(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


class Server:
    def __init__(self, binary, d):
        ep = os.path.join(d, "ep")
        if os.path.exists(ep):
            os.unlink(ep)
        self.log = open(os.path.join(d, "server.log"), "ab")
        self.p = subprocess.Popen([binary, "--workers", "1", "--listen", "tcp://127.0.0.1:*",
                                   "--endpoint-file", ep, "--log-level", "warn"],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            if os.path.exists(ep):
                with open(ep) as f:
                    self.endpoint = f.read().strip()
                if self.endpoint:
                    break
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("zps-server did not start")
            time.sleep(0.02)

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=20)
        self.log.close()


def python_loop(endpoint, n, iters):
    import numpy as np
    import zps
    w = np.zeros(n, np.float32)
    g = np.zeros(n, np.float32)
    times = []
    with zps.Client([endpoint], rank=0, workers=1) as c:
        c.init(w)
        for clock in range(5 + iters):
            t0 = time.perf_counter()
            c.exchange(clock, g, 1, out=w)
            if clock >= 5:
                times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(TREE, "build", "release"))
    ap.add_argument("--sizes", default="1M,16M")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    server_bin = os.path.join(args.build, "bin", "zps-server")
    loop_bin = os.path.join(args.build, "tests", "bench", "bench_client_loop")
    lib = os.path.join(args.build, "client", "libzps.so.1")
    for f in (server_bin, loop_bin, lib):
        if not os.path.exists(f):
            sys.exit("no %s: build first (cmake --build %s)" % (f, args.build))
    os.environ["ZPS_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(TREE, "python"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="zps-pybench-") as d:
        for text in args.sizes.split(","):
            nbytes = size_of(text)
            n = nbytes // 4
            c_med, py_med = [], []
            for _ in range(args.rounds):
                s = Server(server_bin, d)
                try:
                    out = subprocess.run([loop_bin, s.endpoint, str(n), str(args.iters)],
                                         capture_output=True, text=True, timeout=600, check=True)
                    c_med.append(float(out.stdout.split()[1]))
                finally:
                    s.stop()
                s = Server(server_bin, d)
                try:
                    py_med.append(python_loop(s.endpoint, n, args.iters))
                finally:
                    s.stop()
            rows.append((text, nbytes, statistics.median(c_med), statistics.median(py_med)))
    print("%-6s %12s %12s %8s" % ("size", "C us", "Python us", "Py/C"))
    for text, nbytes, cu, pu in rows:
        print("%-6s %12.1f %12.1f %8.3f" % (text, cu, pu, pu / cu))
    for text, nbytes, cu, pu in rows:
        print("RESULT kind=python-exchange size=%d c_us=%.1f py_us=%.1f ratio=%.3f"
              % (nbytes, cu, pu, pu / cu))


if __name__ == "__main__":
    main()
