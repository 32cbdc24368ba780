"""`zps launch -- /usr/bin/python3 SCRIPT`: Python workers started by the
launcher, the cluster taken from the environment, their metrics read back
into the run folder's summary; a worker that fails is named."""

import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import need_modules, skip  # noqa: E402

need_modules("numpy", "torch")

HERE = os.path.dirname(os.path.abspath(__file__))
ZPS = os.environ.get("ZPS_BIN")
if not ZPS:
    skip("ZPS_BIN (the zps tool) is not set")


def launch(d, *extra):
    env = dict(os.environ)
    for k in ("ZPS_SERVERS", "ZPS_RANK", "ZPS_WORKERS", "ZPS_METRICS"):
        env.pop(k, None)
    cmd = [ZPS, "launch", "--servers", "2", "--workers", "2", "--optimizer", "momentum",
           "--lr", "0.1", "--", sys.executable, os.path.join(HERE, "launch_worker.py")]
    cmd += list(extra)
    return subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=240)


class LaunchTest(unittest.TestCase):
    def test_python_workers(self):
        with tempfile.TemporaryDirectory() as d:
            r = launch(d)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            acc = [line.split()[-1] for line in (r.stdout + r.stderr).splitlines()
                   if "ACCURACY" in line]
            self.assertEqual(len(acc), 1, r.stdout + r.stderr)
            runs = glob.glob(os.path.join(d, "runs", "*", "summary.json"))
            self.assertEqual(len(runs), 1)
            with open(runs[0]) as f:
                summary = json.load(f)
            self.assertAlmostEqual(summary["final_test_accuracy"], float(acc[0]), places=5)
            self.assertEqual(summary["final_clock"], 8)  # 2 epochs of 4 steps (20 examples, b 5)
            self.assertIn("final test accuracy %.4f" % float(acc[0]), r.stdout)
            with open(os.path.join(os.path.dirname(runs[0]), "commands.txt")) as f:
                commands = f.read()
            self.assertIn("ZPS_RANK=1", commands)
            self.assertIn("launch_worker.py", commands)

    def test_wrong_model_size_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            r = launch(d, "--wrong-size")
            out = r.stdout + r.stderr
            self.assertNotEqual(r.returncode, 0, out)
            self.assertIn("worker 1", out)
            self.assertIn("ZPS_ESIZE", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
