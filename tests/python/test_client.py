"""zps.Client against real zps-server processes on 127.0.0.1.

Every expected value is computed here by hand from the servers' rule
(docs/optimizers.md: plain SGD, p - lr * g with g the example-weighted mean
of the workers' gradients under BSP), never by the code under test.
"""

import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, dead_endpoint, need_modules  # noqa: E402

need_modules("numpy")
import numpy as np  # noqa: E402

import zps  # noqa: E402

LR = 0.5


def run_workers(fns):
    """Runs fns[r]() on one thread each (a Client per thread); re-raises the first error."""
    errors, results = [], [None] * len(fns)

    def wrap(r):
        try:
            results[r] = fns[r]()
        except BaseException as e:  # noqa: B902 - reported to the main thread
            errors.append(e)
    ts = [threading.Thread(target=wrap, args=(r,)) for r in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
        if t.is_alive():
            raise RuntimeError("a worker thread did not finish in 120 s")
    if errors:
        raise errors[0]
    return results


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(shards=2, workers=2, args=["--lr", str(LR)])
        cls.eps = cls.cluster.endpoints

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def test_01_sgd_by_hand(self):
        n = 11  # odd: the shards' slices differ in length
        x0 = np.linspace(-1, 1, n).astype(np.float32)
        g = [np.arange(n, dtype=np.float32) * 0.25, np.full(n, -2.0, np.float32)]
        b = [1, 3]
        out = [np.zeros(n, np.float32), np.zeros(n, np.float32)]

        def worker(r):
            with zps.Client(",".join(self.eps), rank=r, workers=2) as c:
                if r == 0:
                    c.init(x0)
                p = c.pull(0)
                np.testing.assert_array_equal(p, x0)
                got = c.exchange(0, g[r], b[r], out=out[r])
                self.assertIs(got, out[r])  # filled in place, not a new array
                return c.last_info
        infos = run_workers([lambda: worker(0), lambda: worker(1)])
        mean = (b[0] * g[0].astype(np.float64) + b[1] * g[1]) / (b[0] + b[1])
        expect = x0.astype(np.float64) - LR * mean
        for r in range(2):
            np.testing.assert_allclose(out[r], expect, rtol=1e-6, atol=1e-7)
            self.assertEqual(infos[r].min_version, 1)
        # Clock 1 through push and pull separately, the gradient a torch-free list.
        g2 = [[1.0] * n, [3.0] * n]

        def worker2(r):
            with zps.Client(self.eps, rank=r, workers=2) as c:
                info = c.push(1, g2[r], 2)
                self.assertFalse(info.retried)
                again = c.push(1, g2[r], 2)  # the same push again: acknowledged, not applied
                self.assertTrue(again.retried)
                return c.pull(2)
        res = run_workers([lambda: worker2(0), lambda: worker2(1)])
        expect2 = expect - LR * 2.0
        for r in range(2):
            np.testing.assert_allclose(res[r], expect2, rtol=1e-6, atol=1e-6)
        self.__class__.model = expect2
        self.__class__.n = n

    def test_02_zero_copy_and_types(self):
        n = self.n
        with zps.Client(self.eps) as c:  # rank -1: a tool
            out = np.full(n, 7.0, np.float32)
            addr = out.ctypes.data
            got = c.pull(2, out=out)
            self.assertIs(got, out)
            self.assertEqual(out.ctypes.data, addr)
            np.testing.assert_allclose(out, self.model, rtol=1e-6, atol=1e-6)
            with self.assertRaises(TypeError):
                c.pull(2, out=np.zeros(n, np.float64))
            with self.assertRaises(TypeError):
                c.pull(2, out=np.zeros(2 * n, np.float32)[::2])
            ro = np.zeros(n, np.float32)
            ro.flags.writeable = False
            with self.assertRaises(TypeError):
                c.pull(2, out=ro)
            with self.assertRaises(TypeError):
                c.pull(2, out=[0.0] * n)
            st = c.stats()
            self.assertEqual([s["shard"] for s in st], [0, 1])
            self.assertEqual(sum(s["range"][1] - s["range"][0] for s in st), n)
            try:
                import torch
            except ImportError:
                return
            t = torch.zeros(n)
            ptr = t.data_ptr()
            c.pull(2, out=t)
            self.assertEqual(t.data_ptr(), ptr)
            np.testing.assert_allclose(t.numpy(), self.model, rtol=1e-6, atol=1e-6)
            with self.assertRaises(TypeError):
                c.pull(2, out=torch.zeros(n, dtype=torch.float64))
            with self.assertRaises(TypeError):
                c.pull(2, out=torch.zeros(n, 2).t())

    def test_03_environment(self):
        env = {"ZPS_SERVERS": ",".join(self.eps), "ZPS_RANK": "1", "ZPS_WORKERS": "2"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with zps.Client() as c:
                self.assertEqual((c.servers, c.rank, c.workers), (self.eps, 1, 2))
            os.environ["ZPS_WORKERS"] = "3"
            with self.assertRaises(ValueError):
                zps.Client(rank=5)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_04_errors(self):
        n = self.n
        with self.assertRaises(ValueError) as cm:
            zps.Client(["tcp://127.0.0.1"])  # no port
        self.assertIn("tcp://127.0.0.1", str(cm.exception))
        # The servers' --workers against the client's.
        with zps.Client(self.eps, rank=0, workers=3) as c:
            with self.assertRaises(zps.Error) as cm:
                c.pull(0)
            self.assertEqual(cm.exception.name, "ZPS_ECONFIG")
            self.assertIn("--workers 2", str(cm.exception))
        with zps.Client(self.eps, timeout=5) as c:
            # A model of another size than the servers'.
            with self.assertRaises(zps.Error) as cm:
                c.pull(2, out=np.zeros(n + 1, np.float32))
            self.assertEqual(cm.exception.name, "ZPS_ESIZE")
            with self.assertRaises(zps.Error) as cm:
                c.init(np.zeros(n + 3, np.float32))
            self.assertEqual(cm.exception.name, "ZPS_ESIZE")
            self.assertTrue(cm.exception.remote)
            self.assertEqual(cm.exception.status, -18)  # ZPS_EREMOTE
            # Non-finite: refused by the library, nothing sent.
            bad = np.zeros(n, np.float32)
            bad[3] = np.nan
            with self.assertRaises(zps.Error) as cm:
                c.init(bad)
            self.assertEqual(cm.exception.name, "ZPS_ENONFINITE")
        # A clock out of order: the server's own code, with its reason.
        with zps.Client(self.eps, rank=0, workers=2, timeout=5) as c:
            with self.assertRaises(zps.Error) as cm:
                c.push(9, np.zeros(n, np.float32), 1)
            e = cm.exception
            self.assertEqual(e.name, "ZPS_ECLOCK")
            self.assertTrue(e.remote)
            self.assertIn("tcp://127.0.0.1", e.reason)
        # Nothing listens there: ZPS_EUNREACHABLE at the deadline, not later.
        dead = dead_endpoint()
        with zps.Client([dead], timeout=2, wait_log=0) as c:
            t0 = time.monotonic()
            with self.assertRaises(zps.Error) as cm:
                c.pull(0, out=np.zeros(4, np.float32))
            took = time.monotonic() - t0
            self.assertEqual(cm.exception.name, "ZPS_EUNREACHABLE")
            self.assertIn(dead, str(cm.exception))
            self.assertLess(took, 2 + 10)
        # A one-shot caller fails at once on a refused connection.
        with zps.Client([dead], timeout=20, wait_log=0, fail_fast=True) as c:
            t0 = time.monotonic()
            with self.assertRaises(zps.Error) as cm:
                c.pull(0, out=np.zeros(4, np.float32))
            self.assertEqual(cm.exception.name, "ZPS_EUNREACHABLE")
            self.assertLess(time.monotonic() - t0, 15)
        c = zps.Client(self.eps)
        c.close()
        c.close()
        with self.assertRaises(ValueError):
            c.pull(0)

    def test_05_gil_released_and_deadline(self):
        # Clock 3 needs both workers' clock 2; only worker 0 pushes, so its
        # pull waits at the barrier, with the GIL released, until its deadline.
        n = self.n
        ticks = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1
        t = threading.Thread(target=spin)
        t.start()
        try:
            with zps.Client(self.eps, rank=0, workers=2, timeout=1.5, wait_log=0) as c:
                c.push(2, np.zeros(n, np.float32), 1)
                before = ticks[0]
                t0 = time.monotonic()
                with self.assertRaises(zps.Error) as cm:
                    c.pull(3)
                took = time.monotonic() - t0
                after = ticks[0]
        finally:
            stop.set()
            t.join()
        self.assertEqual(cm.exception.name, "ZPS_ETIMEDOUT")
        self.assertGreater(took, 1.0)
        self.assertLess(took, 1.5 + 10)
        self.assertGreater(after - before, 1000)  # the other thread ran meanwhile

    def test_06_watch_names_ranks(self):
        # Worker 0 pushed clock 2 (test 05); its pull of clock 3 waits for rank 1,
        # and the watch says so by name within seconds.
        records = []

        class H(logging.Handler):
            def emit(self, rec):
                records.append(rec.getMessage())
        h = H()
        logging.getLogger("zps").addHandler(h)
        try:
            with zps.Client(self.eps, rank=0, workers=2, timeout=4, wait_log=1) as c:
                with self.assertRaises(zps.Error):
                    c.pull(3)
        finally:
            logging.getLogger("zps").removeHandler(h)
        text = "\n".join(records)
        self.assertIn("ranks 1 have not pushed clock 2", text)

    def test_07_watch_not_initialised(self):
        records = []

        class H(logging.Handler):
            def emit(self, rec):
                records.append(rec.getMessage())
        h = H()
        logging.getLogger("zps").addHandler(h)
        with Cluster(shards=1, workers=1) as fresh:
            try:
                with zps.Client(fresh.endpoints, rank=0, workers=1, timeout=4,
                                wait_log=1) as c:
                    t0 = time.monotonic()
                    with self.assertRaises(zps.Error) as cm:
                        c.pull(0, out=np.zeros(3, np.float32))
                    self.assertLess(time.monotonic() - t0, 4 + 10)
            finally:
                logging.getLogger("zps").removeHandler(h)
        self.assertEqual(cm.exception.name, "ZPS_ETIMEDOUT")
        self.assertIn("not initialised", "\n".join(records))

    def test_08_dead_server(self):
        with Cluster(shards=2, workers=1, args=["--lr", "0.1"]) as cl:
            with zps.Client(cl.endpoints, rank=0, workers=1, timeout=3, wait_log=0) as c:
                c.init(np.ones(6, np.float32))
                c.exchange(0, np.ones(6, np.float32), 1)
                cl.kill(1)
                t0 = time.monotonic()
                with self.assertRaises(zps.Error) as cm:
                    c.exchange(1, np.ones(6, np.float32), 1)
                self.assertLess(time.monotonic() - t0, 3 + 10)
                # Shard 0 took the push, shard 1 is gone.
                self.assertEqual(cm.exception.name, "ZPS_EPARTIAL")
                self.assertIn(cl.endpoints[1], str(cm.exception))

    def test_09_missing_library(self):
        env = dict(os.environ, ZPS_LIBRARY="/nonexistent/libzps.so.1")
        env["PYTHONPATH"] = os.path.dirname(zps.__path__[0])
        code = ("import zps\n"
                "try:\n"
                "    zps.Client(['tcp://127.0.0.1:1'])\n"
                "except zps.LibraryNotFound as e:\n"
                "    print('NOLIB', e.name, e)\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertIn("NOLIB ZPS_ENOLIB", out.stdout, out.stderr)
        self.assertIn("/nonexistent/libzps.so.1", out.stdout)

    def test_10_pip_install_offline(self):
        src = os.path.dirname(zps.__path__[0])
        with tempfile.TemporaryDirectory() as d:
            venv = os.path.join(d, "venv")
            r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                self.skipTest("no venv module: " + r.stderr[-300:])
            py = os.path.join(venv, "bin", "python")
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env["PIP_NO_INDEX"] = "1"
            r = subprocess.run([py, "-m", "pip", "install", "--no-index", "-q", src],
                               capture_output=True, text=True, timeout=300, env=env, cwd=d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            code = ("import zps, zps.torch.data as zd\n"
                    "c = zps.Client(%r)\n"
                    "print(zps.__file__, len(c.pull(2)))\n" % (self.eps,))
            r = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60,
                               env=env, cwd=d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(os.path.join(venv, "lib"), r.stdout)
            self.assertIn(" %d" % self.n, r.stdout)
            self.assertFalse(os.path.exists(os.path.join(src, "build")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
