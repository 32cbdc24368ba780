"""zps.torch against one PyTorch process, and Partition's exactly-once rule.

BSP through two Python worker processes, the servers running SGD with
momentum, must equal one PyTorch process that takes torch.optim.SGD's steps
on the union of the two workers' batches (docs/python.md): the reference
below uses no zps code beyond Partition's index lists, which are checked
on their own against values the C worker's rule produces.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, need_modules  # noqa: E402

need_modules("numpy", "torch")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import zps.torch  # noqa: E402,F401
from zps.torch.data import Partition, permutation  # noqa: E402

import torch_worker  # noqa: E402

LR, MU = 0.05, 0.9
HERE = os.path.dirname(os.path.abspath(__file__))


class PartitionTest(unittest.TestCase):
    def test_same_order_as_the_c_worker(self):
        # Values from worker/data.c's zps_partition_permute (seed 7): the C
        # worker's first five positions of epochs 0 and 1.
        self.assertEqual(permutation(10, 7, 0)[:5], [4, 6, 2, 8, 3])
        self.assertEqual(permutation(10, 7, 1)[:5], [2, 5, 0, 9, 7])
        self.assertEqual(permutation(1000, 7, 0)[:5], [882, 853, 707, 809, 467])
        self.assertEqual(permutation(1000, 7, 1)[:5], [473, 592, 650, 390, 183])

    def test_exactly_once_per_epoch(self):
        cases = 0
        for n in (1, 2, 3, 7, 10, 31, 64, 97, 200):
            for w in range(1, 6):
                if w > n:
                    continue
                for b in (1, 2, 3, 5, 8, 64):
                    steps = None
                    for epoch in (0, 1):
                        seen = []
                        for r in range(w):
                            p = Partition(n, r, w, seed=11, batch_size=b)
                            p.set_epoch(epoch)
                            batches = list(p)
                            steps = steps or len(batches)
                            self.assertEqual(len(batches), steps)  # the same S for all
                            self.assertEqual(steps, (n // w + b - 1) // b)
                            for bt in batches:
                                self.assertTrue(1 <= len(bt) <= b + 1 or steps == 1)
                            seen += [i for bt in batches for i in bt]
                        self.assertEqual(sorted(seen), list(range(n)), (n, w, b, epoch))
                    cases += 1
        self.assertGreater(cases, 150)
        # The docs' example: N=10, W=3, b=2: batches of 2+1, 2+1, 2+2.
        sizes = [[len(bt) for bt in Partition(10, r, 3, batch_size=2)] for r in range(3)]
        self.assertEqual(sizes, [[2, 1], [2, 1], [2, 2]])
        a, b = Partition(100, 0, 2, seed=1), Partition(100, 0, 2, seed=1)
        b.set_epoch(1)
        self.assertNotEqual(list(a), list(b))


def reference(clocks, workers):
    """One PyTorch process: SGD with momentum on the union of the workers' batches."""
    model, x, y = torch_worker.model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MU)
    loss_fn = torch.nn.CrossEntropyLoss()
    parts = [Partition(torch_worker.N, r, workers, seed=torch_worker.SEED,
                       batch_size=torch_worker.BATCH) for r in range(workers)]
    steps = parts[0].steps()
    for clock in range(clocks):
        union = []
        for p in parts:
            p.set_epoch(clock // steps)
            union += list(p.batches())[clock % steps]
        opt.zero_grad()
        idx = torch.tensor(union)
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


class OptimizerTest(unittest.TestCase):
    def run_cluster(self, clocks, extra0=()):
        workers = 2
        with Cluster(shards=2, workers=workers,
                     args=["--optimizer", "momentum", "--momentum", str(MU), "--lr", str(LR)]
                     ) as cl, tempfile.TemporaryDirectory() as d:
            procs, outs = [], []
            for r in range(workers):
                out = os.path.join(d, "w%d.npy" % r)
                env = dict(os.environ, ZPS_METRICS=os.path.join(d, "w%d.jsonl" % r))
                cmd = [sys.executable, os.path.join(HERE, "torch_worker.py"), str(r),
                       str(workers), ",".join(cl.endpoints), str(clocks), out]
                if r == 0:
                    cmd += list(extra0)
                procs.append(subprocess.Popen(cmd, env=env))
                outs.append(out)
            for p in procs:
                self.assertEqual(p.wait(timeout=240), 0)
            lines = []
            for r in range(workers):
                with open(os.path.join(d, "w%d.jsonl" % r)) as f:
                    lines.append([json.loads(s) for s in f])
            return [np.load(o) for o in outs], lines

    def check(self, got, clocks):
        want = reference(clocks, 2)
        for g in got:
            self.assertEqual(g.shape, want.shape)
            rel = np.linalg.norm(g - want) / np.linalg.norm(want)
            print("relative difference to one process: %.3g" % rel)
            self.assertLess(rel, 1e-5)
        # A wrong rule would be far off: the steps moved the model by much more.
        start = torch.cat([p.detach().reshape(-1)
                           for p in torch_worker.model_and_data()[0].parameters()]).numpy()
        self.assertGreater(np.linalg.norm(want - start) / np.linalg.norm(want), 1e-3)

    def test_bsp_equals_one_process(self):
        clocks = 6  # 4 steps per epoch: crosses into epoch 1
        got, lines = self.run_cluster(clocks)
        self.check(got, clocks)
        for r, recs in enumerate(lines):
            self.assertEqual(recs[0]["type"], "run")
            steps = [x for x in recs if x["type"] == "step"]
            self.assertEqual([x["clock"] for x in steps], list(range(clocks)))
            self.assertEqual([x["epoch"] for x in steps], [0, 0, 0, 0, 1, 1])
            self.assertTrue(all(x["rank"] == r and x["batch"] == 8 for x in steps))
            self.assertTrue(all(x["loss"] > 0 for x in steps))
        evals = [x for x in lines[0] if x["type"] == "eval"]
        self.assertEqual(len(evals), 1)
        self.assertTrue(evals[0]["final"])
        self.assertEqual(evals[0]["clock"], clocks)

    def test_accumulated_micro_batches(self):
        clocks = 3
        got, lines = self.run_cluster(clocks, ["--accumulate"])
        self.check(got, clocks)
        steps = [x for x in lines[0] if x["type"] == "step"]
        self.assertEqual([x["batch"] for x in steps], [8] * clocks)


class _Probe(torch.autograd.Function):
    """The identity; its backward (which runs once every later layer's has) calls back."""

    @staticmethod
    def forward(ctx, x, fn):
        ctx.fn = fn
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        ctx.fn()
        return g, None


class OverlapTest(unittest.TestCase):
    def test_last_shard_leaves_during_backward(self):
        # Model vector: conv1 [0, 40), conv2 [40, 188), linear [188, 838); shard 1
        # of 2 is [419, 838), inside the linear layer's parameters. While the
        # backward pass is between conv2 and conv1, shard 1 must already have
        # this clock's push and shard 0 (which holds conv1) must not.
        seen = []
        torch.manual_seed(0)
        conv1, conv2 = torch.nn.Conv2d(1, 4, 3), torch.nn.Conv2d(4, 4, 3)
        lin = torch.nn.Linear(64, 10)
        params = list(conv1.parameters()) + list(conv2.parameters()) + list(lin.parameters())
        start = [p.detach().clone() for p in params]
        g = torch.Generator().manual_seed(5)
        x, y = torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
        with Cluster(shards=2, workers=1, args=["--lr", str(LR)]) as cl, \
                zps.Client(cl.endpoints, rank=0, workers=1) as c, \
                zps.Client(cl.endpoints, timeout=5) as obs:
            opt = zps.torch.ParameterServerOptimizer(params, c)
            self.assertTrue(opt.overlap)
            clock = [0]

            def probe():
                import time
                deadline = time.monotonic() + 10
                while True:
                    on1 = obs.stats(1)["clocks"][0]
                    if on1 == clock[0] + 1 or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
                seen.append((on1, obs.stats(0)["clocks"][0]))

            def forward(x):
                h = torch.relu(conv1(x))
                h = _Probe.apply(h, probe)
                return lin(torch.relu(conv2(h)).flatten(1))
            for t in range(3):
                clock[0] = t
                opt.zero_grad(batch_size=len(x))
                loss = torch.nn.functional.cross_entropy(forward(x), y)
                loss.backward()
                opt.step(loss=loss)
            got = torch.cat([p.detach().reshape(-1) for p in params])
            opt.close()
        self.assertEqual(seen, [(t + 1, t) for t in range(3)])
        # The same three steps in one process, plain SGD.
        with torch.no_grad():
            for p, s0 in zip(params, start):
                p.copy_(s0)
        ref = torch.optim.SGD(params, lr=LR)
        for t in range(3):
            ref.zero_grad()
            h = torch.relu(conv2(torch.relu(conv1(x))))
            torch.nn.functional.cross_entropy(lin(h.flatten(1)), y).backward()
            ref.step()
        want = torch.cat([p.detach().reshape(-1) for p in params])
        rel = (torch.norm(got - want) / torch.norm(want)).item()
        self.assertLess(rel, 1e-5)


class SharedTest(unittest.TestCase):
    def test_every_batch_once_fast_worker_more(self):
        # ASP, 2 shards, 2 workers, one 4x slower: 60 examples, batch 5, 2 epochs
        # are 24 batches, each trained once, most by the fast worker; shard 0's
        # audit counts every epoch's examples once.
        import threading
        import time
        from zps.torch.data import Shared
        from test_client import run_workers
        ids = [[], []]
        g = torch.Generator().manual_seed(2)
        x = torch.randn(60, 4, generator=g)
        y = (x[:, 0] > 0).long()
        with Cluster(shards=2, workers=2, args=["--mode", "asp", "--lr", "0.1"]) as cl:
            go = threading.Barrier(2)

            def worker(r):
                torch.manual_seed(0)
                model = torch.nn.Linear(4, 2)
                with zps.Client(cl.endpoints, rank=r, workers=2, timeout=30) as c:
                    shared = Shared(60, 5, 2, seed=3)
                    opt = zps.torch.ParameterServerOptimizer(model, c, assignment=shared)
                    go.wait(timeout=30)
                    for idx in shared:
                        self.assertEqual(shared.indices(shared.current), idx)
                        ids[r].append(shared.current)
                        idx = torch.tensor(idx)
                        opt.zero_grad(batch_size=len(idx))
                        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
                        loss.backward()
                        if r == 1:
                            time.sleep(0.06)
                        else:
                            time.sleep(0.015)
                        opt.step(loss=loss)
                    opt.finish()
                    opt.close()
            run_workers([lambda: worker(0), lambda: worker(1)])
            with zps.Client(cl.endpoints) as c:
                audit = c.stats(0)["assignment"]
        self.assertEqual(sorted(ids[0] + ids[1]), list(range(24)))
        print("batches trained by the fast worker: %d, the slow one: %d" % (len(ids[0]), len(ids[1])))
        self.assertGreater(len(ids[0]), len(ids[1]))
        self.assertEqual(audit["examples_per_epoch"], [60, 60])
        self.assertEqual(audit["batches_per_epoch_done"], [12, 12])
        # Epoch 1's permutation differs from epoch 0's: batch 12 is not batch 0.
        s = Shared(60, 5, 2, seed=3)
        self.assertNotEqual(s.indices(0), s.indices(12))
        self.assertEqual(sorted(i for b in range(12) for i in s.indices(b)), list(range(60)))

    def test_refused_under_bsp(self):
        from zps.torch.data import Shared
        with Cluster(shards=1, workers=1) as cl, zps.Client(cl.endpoints, rank=0,
                                                             workers=1) as c:
            with self.assertRaises(ValueError):
                zps.torch.ParameterServerOptimizer(torch.nn.Linear(2, 2), c,
                                                   assignment=Shared(10, 2, 1))


class MisuseTest(unittest.TestCase):
    def test_refusals(self):
        with self.assertRaises(TypeError):
            zps.torch.ParameterServerOptimizer(torch.nn.Linear(2, 2), object())
        with Cluster(shards=1, workers=1) as cl, zps.Client(cl.endpoints, rank=0,
                                                             workers=1) as c:
            with self.assertRaises(TypeError):
                zps.torch.ParameterServerOptimizer(torch.nn.Linear(2, 2).double(), c)
            with self.assertRaises(ValueError):
                zps.torch.ParameterServerOptimizer(torch.nn.Linear(2, 2).requires_grad_(False),
                                                   c)
            m = torch.nn.Linear(3, 2)
            opt = zps.torch.ParameterServerOptimizer(m, c)
            # A model of another size against the same servers.
            with self.assertRaises(zps.Error) as cm:
                zps.torch.ParameterServerOptimizer(torch.nn.Linear(4, 2), c)
            self.assertEqual(cm.exception.name, "ZPS_ESIZE")
            opt.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
