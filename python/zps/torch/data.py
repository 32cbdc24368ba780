"""zps.torch.data.Partition: the C worker's data order rule, for PyTorch.

The rule (docs/worker.md, "The data order rule"): epoch e is one
permutation of all N examples, Fisher-Yates driven by xoshiro256**
seeded from (seed, e) through splitmix64; it is cut into W contiguous
pieces, worker w owning positions [floor(w*N/W), floor((w+1)*N/W)); every
worker takes S = ceil(floor(N/W) / b) steps, step s taking piece[s*b,
(s+1)*b) and the last step the rest of the piece. Every example is used
exactly once per epoch, and a Python worker sees the very batches a C
worker of the same rank, seed and batch size would.
"""

import torch.utils.data

_M64 = (1 << 64) - 1
_ORDER_STREAM = 0x4F52444552000000  # "ORDER", plus the epoch (worker/data.c)


def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & _M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return state, z ^ (z >> 31)


def permutation(n, seed, epoch):
    """Epoch ``epoch``'s permutation of range(n), as worker/data.c makes it."""
    _, mix = _splitmix64(_ORDER_STREAM + epoch)
    state = (seed & _M64) ^ mix
    s = []
    for _ in range(4):
        state, v = _splitmix64(state)
        s.append(v)
    if not any(s):
        s[0] = 1
    s0, s1, s2, s3 = s
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        limit = _M64 - _M64 % bound
        while True:
            x = (s1 * 5) & _M64
            x = (((x << 7) | (x >> 57)) & _M64) * 9 & _M64
            t = (s1 << 17) & _M64
            s2 ^= s0
            s3 ^= s1
            s1 ^= s2
            s0 ^= s3
            s2 ^= t
            s3 = ((s3 << 45) | (s3 >> 19)) & _M64
            if x < limit:
                break
        j = x % bound
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Partition(torch.utils.data.Sampler):
    """Worker ``rank``'s share of ``dataset`` (or of N = an int) in each epoch.

    As a sampler it yields this worker's piece of the epoch's permutation;
    ``batches(b)`` (or ``batch_size=b`` here, then ``DataLoader(ds,
    batch_sampler=part)``) yields the C worker's batches: S steps, the last
    one taking the rest of the piece. ``set_epoch(e)`` picks the epoch, as
    DistributedSampler's does.
    """

    def __init__(self, dataset, rank, workers, seed=0, batch_size=None):
        n = dataset if isinstance(dataset, int) else len(dataset)
        if workers < 1 or not 0 <= rank < workers:
            raise ValueError("Partition: rank %d of %d workers" % (rank, workers))
        if n < workers:
            raise ValueError("Partition: %d examples for %d workers" % (n, workers))
        if n >= 1 << 32:
            raise ValueError("Partition: at most 2^32 - 1 examples")
        if batch_size is not None and batch_size < 1:
            raise ValueError("Partition: batch_size %d" % batch_size)
        self.n, self.rank, self.workers, self.seed = n, rank, workers, seed
        self.batch_size = batch_size
        self.epoch = 0
        self._perm_epoch, self._perm = None, None
        self.lo = rank * n // workers
        self.hi = (rank + 1) * n // workers

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def steps(self, batch_size=None):
        """S: the steps per epoch every worker takes with batches of ``batch_size``."""
        b = batch_size or self.batch_size
        if not b:
            raise ValueError("Partition.steps: no batch size")
        return (self.n // self.workers + b - 1) // b

    def _piece(self):
        if self._perm_epoch != self.epoch:
            self._perm = permutation(self.n, self.seed, self.epoch)
            self._perm_epoch = self.epoch
        return self._perm[self.lo:self.hi]

    def batches(self, batch_size=None):
        """This epoch's batches (lists of indices), step by step."""
        b = batch_size or self.batch_size
        piece = self._piece()
        steps = self.steps(b)
        for s in range(steps):
            yield piece[s * b:] if s + 1 == steps else piece[s * b:(s + 1) * b]

    def __iter__(self):
        if self.batch_size:
            return iter(self.batches())
        return iter(self._piece())

    def __len__(self):
        return self.steps() if self.batch_size else self.hi - self.lo


class Shared:
    """A shared data assignment (zps-worker --data-assignment shared): the
    batches are handed out by shard 0 as the workers ask for them, so a fast
    worker trains more of them than a slow one, and each is still trained
    exactly once per epoch (docs/worker.md, "Shared data assignment").

    Epoch e's permutation (the rule above) is cut into B = ceil(N / b)
    batches in order, the last holding the rest; batch g of the run is batch
    g % B of epoch g // B. Give it to the optimizer
    (``ParameterServerOptimizer(model, client, assignment=shared)``), whose
    pulls and exchanges carry the lease requests, then iterate it: it yields
    the indices of the batch this worker holds next, and ends when it holds
    none and shard 0 has none left. ``current`` is the batch id g being
    trained. For SSP and ASP (under BSP, Partition: BSP's clock t is every
    rank's batch t).
    """

    WANT = 3  # leases held: the batch computed and two ahead, as zps-worker

    def __init__(self, dataset, batch_size, epochs, seed=0):
        n = dataset if isinstance(dataset, int) else len(dataset)
        if n < 1 or batch_size < 1 or epochs < 1:
            raise ValueError("Shared: %d examples, batch %d, %d epochs" % (n, batch_size, epochs))
        self.n, self.batch_size, self.epochs, self.seed = n, batch_size, epochs, seed
        self.batches_per_epoch = (n + batch_size - 1) // batch_size
        self.queue = []  # the leases this worker holds, oldest first
        self.exhausted = False
        self.current = None
        self._answered = False
        self._opt = None
        self._perm_epoch, self._perm = None, None

    def indices(self, g):
        """Batch g's example indices."""
        epoch, j = divmod(g, self.batches_per_epoch)
        if self._perm_epoch != epoch:
            self._perm = permutation(self.n, self.seed, epoch)
            self._perm_epoch = epoch
        lo = j * self.batch_size
        return self._perm[lo:min(lo + self.batch_size, self.n)]

    def request(self, client, pushing):
        """Before a call: what it asks shard 0 (pushing: its gradient is of `current`)."""
        have = self.queue[1:] if pushing else self.queue
        client.set_lease(self.n, self.batch_size, self.epochs, self.WANT, have,
                         self.current + 1 if pushing else 0)

    def answer(self, info, pushing):
        """After the call: the leases shard 0 says this worker holds."""
        self._answered = info.leases is not None
        if self._answered:
            self.queue = list(info.leases)
            self.exhausted = info.exhausted
        elif pushing and self.queue:
            self.queue.pop(0)

    def __iter__(self):
        if self._opt is None:
            raise RuntimeError("Shared: give it to ParameterServerOptimizer(assignment=...) first")
        unanswered = 0
        while True:
            while not self.queue and not self._answered and unanswered < 3:
                unanswered += 1
                self._opt._refill()  # a pull that asks for leases
            if not self.queue:
                return
            unanswered = 0
            self.current = self.queue[0]
            yield self.indices(self.current)
