"""A worker for test_launch.py: started by `zps launch -- COMMAND`, it takes
the cluster from the environment, trains a linear model through zps.torch
for 2 epochs of a fixed data set, and rank 0 reports a final accuracy.

    launch_worker.py [--wrong-size]
"""

import sys

import torch

import zps
import zps.torch
from zps.torch.data import Partition


def main():
    client = zps.Client(timeout=30)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3) if "--wrong-size" not in sys.argv or client.rank == 0 \
        else torch.nn.Linear(5, 3)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(40, 4, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    part = Partition(len(x), client.rank, client.workers, seed=4, batch_size=5)
    steps = part.steps()
    opt = zps.torch.ParameterServerOptimizer(model, client, steps_per_epoch=steps,
                                             clocks=2 * steps, batch=5, data="random")
    for epoch in range(2):
        part.set_epoch(epoch)
        for idx in part.batches():
            idx = torch.tensor(idx)
            opt.zero_grad(batch_size=len(idx))
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step(loss=loss)
    if client.rank == 0:
        with torch.no_grad():
            acc = (model(x).argmax(1) == y).float().mean().item()
        opt.log_eval(accuracy=acc, loss=0.5, examples=len(x), final=True)
        print("ACCURACY %.6f" % acc, flush=True)
    opt.finish()
    opt.close()
    client.close()


if __name__ == "__main__":
    main()
