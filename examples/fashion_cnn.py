#!/usr/bin/env python3
"""A convolutional network on Fashion-MNIST, trained through zps.

    zps launch --servers 2 --workers 2 --optimizer adam --lr 0.001 \\
        -- /usr/bin/python3 examples/fashion_cnn.py

Every rank is one worker: it trains on its part of each epoch (the C
worker's data order rule, zps.torch.data.Partition) and exchanges each
step's gradient with the servers, which take the optimizer's step (the
flags given to zps launch). Rank 0 initialises the model and evaluates
it on the test set after every epoch; its last evaluation is the run's
final test accuracy.

The same model and recipe without zps, for comparison:

    /usr/bin/python3 examples/fashion_cnn.py --local --batch 128    # one process, the union batch
    /usr/bin/python3 examples/fashion_cnn.py --ddp 2                # DistributedDataParallel, gloo

Each mode prints one RESULT line: mode, test accuracy, training seconds
and, with --target, the training seconds until the test accuracy first
reached the target (evaluations not counted).
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


def read_idx(path):
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    # Scaled to [0, 1] as zps-worker does, then standardised with the training
    # set's mean and deviation of a pixel.
    x = (torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1) - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    """Two convolutions, two dense layers: 225,034 parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def evaluate(model, x, y):
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            out = model(x[i:i + 1000])
            loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return correct / len(x), loss / len(x)


class Clock:
    """Training time: wall time less the evaluations."""

    def __init__(self):
        self.start, self.paused = time.monotonic(), 0.0
        self.reached = None

    def train_s(self):
        return time.monotonic() - self.start - self.paused


def report(mode, args, acc, clock, extra=""):
    reached = "%.1f" % clock.reached if clock.reached is not None else "null"
    print("RESULT mode=%s epochs=%d batch=%d test_accuracy=%.4f train_s=%.1f target=%.2f "
          "time_to_target_s=%s%s" % (mode, args.epochs, args.batch, acc, clock.train_s(),
                                     args.target, reached, extra), flush=True)


def after_epoch(model, x_test, y_test, clock, args, log):
    t0 = time.monotonic()
    acc, loss = evaluate(model, x_test, y_test)
    clock.paused += time.monotonic() - t0
    if clock.reached is None and acc >= args.target:
        clock.reached = clock.train_s()
    log(acc, loss, time.monotonic() - t0)
    return acc, loss


def run_zps(args, x, y, x_test, y_test):
    import zps
    import zps.torch
    from zps.torch.data import Partition

    # ZPS_SERVERS, ZPS_RANK, ZPS_WORKERS; rank 0 evaluating for seconds is a wait, not news
    client = zps.Client(timeout=args.timeout, wait_log=10)
    rank, workers = client.rank, client.workers or 1
    torch.manual_seed(args.seed)  # the same initial model in every rank; rank 0's is sent
    model = Net()
    part = Partition(len(x), rank, workers, seed=args.seed, batch_size=args.batch)
    steps = part.steps()
    opt = zps.torch.ParameterServerOptimizer(
        model, client, steps_per_epoch=steps, clocks=steps * args.epochs, seed=args.seed,
        batch=args.batch, data="fashion-mnist", overlap=not args.no_overlap)
    if rank == 0:
        st = client.stats(0)
        print("fashion_cnn: %d workers, %d servers (%s, optimizer %s); %d steps per epoch of "
              "%d examples each" % (workers, len(client.servers), st.get("mode"),
                                    st.get("optimizer"), steps, args.batch), flush=True)
    clock = Clock()
    acc = None
    for epoch in range(args.epochs):
        part.set_epoch(epoch)
        for idx in part.batches():
            idx = torch.tensor(idx)
            opt.zero_grad(batch_size=len(idx))
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step(loss=loss)
        if rank == 0:
            last = epoch + 1 == args.epochs

            def log(a, l, took, last=last):
                opt.log_eval(accuracy=a, loss=l, examples=len(x_test), final=last,
                             eval_ms=took * 1e3)
                print_epoch(epoch, a, l, clock)
            acc, _ = after_epoch(model, x_test, y_test, clock, args, log)
    opt.finish()
    opt.close()
    client.close()
    if rank == 0:
        report("zps", args, acc, clock, " workers=%d servers=%d overlap=%d"
               % (workers, len(client.servers), int(opt.overlap)))


def torch_optimizer(args, params):
    """The servers' recipe in one process: zps-server's adam and momentum are
    torch.optim.Adam's and SGD's (docs/optimizers.md)."""
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)


def print_epoch(epoch, acc, loss, clock):
    print("epoch %d: test accuracy %.4f (loss %.4f), %.1f s of training"
          % (epoch + 1, acc, loss, clock.train_s()), flush=True)


def train_torch(args, model, part, x, y, x_test, y_test, evaluates):
    """A torch.optim loop over part's batches; returns the last test accuracy."""
    opt = torch_optimizer(args, model.parameters())
    clock = Clock()
    acc = None
    for epoch in range(args.epochs):
        part.set_epoch(epoch)
        for idx in part.batches():
            idx = torch.tensor(idx)
            opt.zero_grad()
            # Under DDP the ranks' gradients are averaged equally: the union
            # batch's mean while the ranks' batches are the same size, as here
            # but for an epoch's last step.
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
        if evaluates:
            net = getattr(model, "module", model)
            acc, _ = after_epoch(net, x_test, y_test, clock, args,
                                 lambda a, l, took: print_epoch(epoch, a, l, clock))
        if hasattr(model, "module"):
            import torch.distributed as dist
            dist.barrier()
    return acc, clock


def run_local(args, x, y, x_test, y_test):
    from zps.torch.data import Partition
    torch.manual_seed(args.seed)
    part = Partition(len(x), 0, 1, seed=args.seed, batch_size=args.batch)
    acc, clock = train_torch(args, Net(), part, x, y, x_test, y_test, True)
    report("local", args, acc, clock)


def ddp_rank(rank, world, port, args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from zps.torch.data import Partition
    torch.set_num_threads(args.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(Net())
    part = Partition(len(x), rank, world, seed=args.seed, batch_size=args.batch)
    acc, clock = train_torch(args, model, part, x, y, x_test, y_test, rank == 0)
    if rank == 0:
        report("ddp", args, acc, clock, " workers=%d" % world)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64, help="examples per worker per step")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per process (default: the cores shared among ranks)")
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--timeout", type=float, default=120.0, help="zps: each call's deadline")
    ap.add_argument("--no-overlap", action="store_true",
                    help="zps: one exchange after the backward pass")
    ap.add_argument("--local", action="store_true",
                    help="one PyTorch process, torch.optim.SGD (--lr, --momentum)")
    ap.add_argument("--ddp", type=int, default=0, metavar="N",
                    help="N processes under DistributedDataParallel (gloo)")
    ap.add_argument("--optimizer", choices=("adam", "momentum"), default="adam",
                    help="--local and --ddp only (under zps: the servers' flags)")
    ap.add_argument("--lr", type=float, default=0.001, help="--local and --ddp only")
    ap.add_argument("--momentum", type=float, default=0.9, help="--local and --ddp only")
    args = ap.parse_args()
    ranks = args.ddp or int(os.environ.get("ZPS_WORKERS", "1"))
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // max(1, ranks))
    torch.set_num_threads(args.threads)
    if args.ddp:
        import socket
        import torch.multiprocessing as mp
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        mp.spawn(ddp_rank, args=(args.ddp, port, args), nprocs=args.ddp)
        return
    x, y = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    if args.local:
        run_local(args, x, y, x_test, y_test)
    else:
        run_zps(args, x, y, x_test, y_test)


if __name__ == "__main__":
    main()
