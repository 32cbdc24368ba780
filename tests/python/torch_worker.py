"""One Python worker of test_torch.py's cluster: a small convolutional model
trained through zps.torch on a fixed random data set.

    torch_worker.py RANK WORKERS ENDPOINTS CLOCKS OUT.npy [--accumulate]
"""

import sys

import numpy as np
import torch

import zps
import zps.torch
from zps.torch.data import Partition

N, BATCH, SEED = 64, 8, 3


def model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 10))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (N,), generator=g)
    return model, x, y


def main():
    rank, workers, endpoints, clocks, out = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                             int(sys.argv[4]), sys.argv[5])
    accumulate = "--accumulate" in sys.argv
    model, x, y = model_and_data()
    loss_fn = torch.nn.CrossEntropyLoss()
    part = Partition(N, rank, workers, seed=SEED, batch_size=BATCH)
    steps = part.steps()
    with zps.Client(endpoints, rank=rank, workers=workers, timeout=60) as c:
        opt = zps.torch.ParameterServerOptimizer(model, c, accumulate=2 if accumulate else 1,
                                                 steps_per_epoch=steps)
        clock = 0
        while clock < clocks:
            part.set_epoch(clock // steps)
            for idx in part.batches():
                if clock == clocks:
                    break
                if accumulate:
                    opt.zero_grad()  # micro-batches: one exchange after the k-th
                else:
                    opt.zero_grad(batch_size=len(idx))  # known early: the exchange overlaps
                if rank == 1:
                    # Gradients set to None: backward makes new tensors, which the
                    # optimizer copies into its buffer as each one is complete.
                    model.zero_grad(set_to_none=True)
                idx = torch.tensor(idx)
                if accumulate:
                    for half in (idx[: len(idx) // 2], idx[len(idx) // 2:]):
                        loss = loss_fn(model(x[half]), y[half])
                        loss.backward()
                        opt.step(batch_size=len(half), loss=loss)
                else:
                    loss = loss_fn(model(x[idx]), y[idx])
                    loss.backward()
                    opt.step(loss=loss)
                clock += 1
        if rank == 0:
            with torch.no_grad():
                acc = (model(x).argmax(1) == y).float().mean().item()
            opt.log_eval(accuracy=acc, loss=0.0, examples=N, final=True)
        opt.finish()
        opt.close()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        np.save(out, flat.numpy())
        # The parameters are views of the optimizer's flat buffer.
        assert flat.data_ptr() != opt.params.data_ptr()
        assert next(model.parameters()).data_ptr() == opt.params.data_ptr()


if __name__ == "__main__":
    main()
