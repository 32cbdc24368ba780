"""zps.torch: train a PyTorch model through zps.

    client = zps.Client()                      # from zps launch's environment
    opt = zps.torch.ParameterServerOptimizer(model, client)
    for x, y in loader:
        opt.zero_grad(batch_size=len(x))      # the batch known now: overlap
        loss = loss_fn(model(x), y)           # a mean over the batch
        loss.backward()                       # each shard's gradient leaves when done
        opt.step(loss=loss)
    opt.finish()

The optimizer is the servers' (zps-server --optimizer, --lr, --momentum,
...): the client sends each step's gradient and receives the parameters
of the next clock. Nothing here is compiled; it runs on any torch that has
``Tensor.data_ptr`` and in-place gradient accumulation (1.13 onwards).
"""

import time

import torch

from ..client import Client, Error  # noqa: F401 (re-exported for convenience)
from ..metrics import Metrics
from . import data  # noqa: F401

__all__ = ["ParameterServerOptimizer", "data"]


def _unique_params(model):
    params = model.parameters() if isinstance(model, torch.nn.Module) else model
    out, seen = [], set()
    for p in params:
        if not isinstance(p, torch.Tensor):
            raise TypeError("ParameterServerOptimizer: %r is not a tensor" % type(p).__name__)
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        out.append(p)
    if not out:
        raise ValueError("ParameterServerOptimizer: the model has no trainable parameters")
    return out


class ParameterServerOptimizer:
    """Stands in for a ``torch.optim`` optimizer; the servers take the steps.

    ``model``: an ``nn.Module`` or an iterable of parameters (its trainable
    ones, each once, in order: the order is the model vector's layout and
    must be the same in every worker). At construction every parameter
    becomes a view into one flat float32 buffer (``self.params``) and every
    gradient a view into another (``self.grads``): PyTorch's backward pass
    accumulates into them in place, and ``step`` hands both to libzps
    without a copy. ``init`` (default: rank 0, or a client of rank -1)
    sends the model's current values as the initial model; every worker
    then pulls clock ``clock``, so all start from the servers' model.

    ``overlap`` (default True): when the step's batch size is known before
    the backward pass (``zero_grad(batch_size=n)``), each shard's slice of
    the gradient is sent as soon as the backward pass has accumulated every
    parameter in it (a post-accumulation hook per parameter), so its
    transfer overlaps the backward pass of the layers before it; ``step``
    then sends what is left and waits. The buckets are the shards' slices
    of the model vector (the range rule): S servers, S buckets, the last
    layers' first. Without a batch size before backward, or with
    ``accumulate`` > 1, ``step`` exchanges the whole gradient at once.
    With overlap, a step has one backward pass: a parameter's gradient is
    final, and may have left, once it has been accumulated; a second
    backward pass in the same step is refused (``step`` raises
    ``zps.Error`` ZPS_EINVAL, "declared twice"). Several backward passes
    per step (several losses): pass the batch size to ``step`` instead.

    ``accumulate=k``: ``step`` exchanges every k-th call, with the mean
    of the k micro-batches' gradients and their examples together.

    ``metrics``: a path for the metrics stream (default ``ZPS_METRICS``,
    which ``zps launch ... -- COMMAND`` sets): the run, step and eval lines
    of docs/worker.md. ``steps_per_epoch`` numbers the step lines' epoch
    and step (default: epoch 0, step = clock); ``clocks`` (the run's
    planned clocks), ``batch``, ``data`` and ``seed`` go into the run line
    (``zps launch``'s progress line counts clocks against ``clocks``).

    ``assignment``: a ``zps.torch.data.Shared``, whose batches shard 0 hands
    out: every pull and exchange then carries its lease request, and the
    step lines name the batch (``batch_id``, its epoch and step). SSP and
    ASP only.

    Parameters must be float32 CPU tensors (CUDA tensors are not staged
    yet: ``TypeError``).
    """

    def __init__(self, model, client, *, clock=0, init=None, accumulate=1, metrics=None,
                 steps_per_epoch=None, clocks=None, seed=None, batch=None, data=None,
                 overlap=True, assignment=None):
        if not isinstance(client, Client):
            raise TypeError("ParameterServerOptimizer: client is a zps.Client, not %s"
                            % type(client).__name__)
        if accumulate < 1:
            raise ValueError("ParameterServerOptimizer: accumulate=%d" % accumulate)
        self.client = client
        self.clock = int(clock)
        self.accumulate = int(accumulate)
        self.steps_per_epoch = steps_per_epoch
        self._params = _unique_params(model)
        for p in self._params:
            if p.dtype != torch.float32:
                raise TypeError("ParameterServerOptimizer: parameters are float32; one is %s"
                                % p.dtype)
            if p.device.type != "cpu":
                raise TypeError("ParameterServerOptimizer: parameters on %s are not supported "
                                "yet (CPU tensors only)" % p.device)
        if assignment is not None and client.stats(0).get("mode") == "bsp":
            raise ValueError("ParameterServerOptimizer: a shared assignment is for SSP and ASP; "
                             "under BSP every rank trains its own batch of each clock "
                             "(zps.torch.data.Partition)")
        total = sum(p.numel() for p in self._params)
        self.params = torch.empty(total, dtype=torch.float32)
        self.grads = torch.zeros(total, dtype=torch.float32)
        self._slices = []
        off = 0
        with torch.no_grad():
            for p in self._params:
                k = p.numel()
                self.params[off:off + k].copy_(p.detach().reshape(-1))
                self._slices.append((off, k))
                off += k
        self._link()
        self._micro = 0
        self._micro_batch = 0
        self._backward_at = None
        self._last_end = time.monotonic()
        self.overlap = bool(overlap) and client.can_stage and self.accumulate == 1
        self._batch_next = None  # zero_grad(batch_size=n): this step's batch, known early
        self._staging = False    # a staged exchange is open (its first hook began it)
        self._hook_error = None
        self._hooks, self._accs = [], []
        for i, p in enumerate(self._params):
            if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda _p, i=i: self._accumulated(i)))
            else:  # the parameter's gradient accumulator node (torch 1.13 onwards)
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._accs.append(acc)  # kept: the node lives as long as we hold it
                self._hooks.append(acc.register_hook(lambda *_, i=i: self._accumulated(i)))
        self.metrics = Metrics(metrics)
        self.assignment = assignment
        if assignment is not None:
            assignment._opt = self
            steps_per_epoch = self.steps_per_epoch = assignment.batches_per_epoch
        if init is None:
            init = client.rank <= 0
        try:
            if init:
                client.init(self.params)
            self._refill()
        except BaseException:
            self.close()  # the hooks off the model, the metrics file closed
            raise
        self.metrics.run(rank=client.rank, workers=client.workers,
                         model=type(model).__name__ if isinstance(model, torch.nn.Module)
                         else "parameters", params=total, data=data, batch=batch,
                         steps_per_epoch=steps_per_epoch, clocks=clocks, seed=seed,
                         backend="pytorch %s cpu" % torch.__version__,
                         servers=len(client.servers), client="python")

    # -- the flat buffers -------------------------------------------------

    def _link(self):
        for p, (off, k) in zip(self._params, self._slices):
            p.data = self.params[off:off + k].view_as(p)
            p.grad = self.grads[off:off + k].view_as(p)

    def _relink(self):
        """Puts back any gradient PyTorch (or the user) replaced: model.zero_grad()
        of torch 2 sets them to None, and a None gradient is a new tensor after
        backward. One copy each, only then."""
        base = self.grads.data_ptr()
        for p, (off, k) in zip(self._params, self._slices):
            g = p.grad
            view = self.grads[off:off + k]
            if g is None:
                view.zero_()
            elif g.data_ptr() != base + 4 * off or not g.is_contiguous():
                view.copy_(g.detach().reshape(-1))
            else:
                continue
            p.grad = view.view_as(p)
        pbase = self.params.data_ptr()
        for p, (off, k) in zip(self._params, self._slices):
            if p.data.data_ptr() != pbase + 4 * off:
                self.params[off:off + k].copy_(p.detach().reshape(-1))
                p.data = self.params[off:off + k].view_as(p)

    def _refill(self):
        """Pulls the current clock's parameters (asking for leases, with an assignment)."""
        if self.assignment is not None:
            self.assignment.request(self.client, pushing=False)
        self.client.pull(self.clock, out=self.params)
        if self.assignment is not None:
            self.assignment.answer(self.client.last_info, pushing=False)

    def _accumulated(self, i):
        """Parameter i's gradient is complete for this backward pass."""
        if self._backward_at is None:
            self._backward_at = time.monotonic()
        if not self.overlap or self._batch_next is None or self._hook_error is not None:
            return
        try:
            if not self._staging:
                if self.assignment is not None:
                    self.assignment.request(self.client, pushing=True)
                self.client.exchange_begin(self.clock, self.grads, self._batch_next,
                                           self.params)
                self._staging = True
            p, (off, k) = self._params[i], self._slices[i]
            view = self.grads[off:off + k]
            g = p.grad
            if g is None or g.data_ptr() != view.data_ptr():
                # model.zero_grad() set it to None; backward made a new tensor.
                view.copy_(g.detach().reshape(-1) if g is not None else 0)
                p.grad = view.view_as(p)
            self.client.exchange_ready(off, off + k)
        except Exception as e:  # raised by step(), not inside autograd's backward
            self._hook_error = e

    # -- what a training loop calls --------------------------------------

    def zero_grad(self, set_to_none=False, batch_size=None):
        """Zeros the gradients in place (they stay views: ``set_to_none`` is ignored).
        ``batch_size``: the examples of the coming step, which lets the exchange
        start during its backward pass (see ``overlap``)."""
        if self._staging:
            raise RuntimeError("zero_grad: the gradient of clock %d is being sent; "
                               "call step() first" % self.clock)
        self._relink()
        self.grads.zero_()
        if batch_size is not None and batch_size < 1:
            raise ValueError("zero_grad: batch_size %r" % batch_size)
        self._batch_next = batch_size

    def step(self, batch_size=None, loss=None):
        """One clock: pushes the gradient of ``batch_size`` examples (the loss a mean
        over them; default the ``zero_grad(batch_size=)`` of this step) and writes
        the next clock's parameters in place. With ``accumulate=k``, only every
        k-th call exchanges (then returns True)."""
        if batch_size is None:
            batch_size = self._batch_next
        if batch_size is None or batch_size < 1:
            self._abandon()
            raise ValueError("step: batch_size %r (give it here or to zero_grad)" % batch_size)
        if self._batch_next is not None and batch_size != self._batch_next:
            self._abandon()
            raise ValueError("step: batch_size %d, but zero_grad said %d"
                             % (batch_size, self._batch_next))
        start = time.monotonic()
        self._micro += 1
        self._micro_batch += int(batch_size)
        if self._micro < self.accumulate:
            return False
        batch = self._micro_batch
        self._micro, self._micro_batch = 0, 0
        clock = self.clock
        if self._staging:
            # Unused parameters (no hook fired) lie in slices not sent yet.
            self._relink()
            self._staging = False
            try:
                self.client.exchange_end()
            finally:
                err, self._hook_error = self._hook_error, None
            if err is not None:
                raise err
        else:
            self._relink()
            if self.accumulate > 1:
                self.grads.mul_(1.0 / self.accumulate)
            if self.assignment is not None:
                self.assignment.request(self.client, pushing=True)
            self.client.exchange(clock, self.grads, batch, out=self.params)
        self._batch_next = None
        info = self.client.last_info
        g = None
        if self.assignment is not None:
            g = self.assignment.current
            self.assignment.answer(info, pushing=True)
        end = time.monotonic()
        self.clock += 1
        waited = info.waited_us / 1000.0
        backward_at = self._backward_at or start
        spe = self.steps_per_epoch
        place = g if g is not None else clock  # a shared batch's place is its id
        self.metrics.step(
            rank=self.client.rank, clock=clock, epoch=place // spe if spe else 0,
            step=place % spe if spe else clock, batch_id=g,
            loss=float(loss) if loss is not None else None, batch=batch,
            version=info.min_version, clock_lag=max(0, clock + 1 - info.min_clock),
            forward_ms=(backward_at - self._last_end) * 1e3,
            backward_ms=(start - backward_at) * 1e3, pull_ms=waited,
            push_ms=max(0.0, (end - start) * 1e3 - waited),
            step_ms=(end - self._last_end) * 1e3, dropped=info.dropped)
        self._backward_at = None
        self._last_end = end
        return True

    def _abandon(self):
        """Ends a staged exchange that step() will not complete (its error is raised)."""
        if self._staging:
            self._staging = False
            try:
                self.client.exchange_end()
            except Exception:
                pass
        self._hook_error = None

    def log_eval(self, accuracy=None, loss=None, examples=None, final=False, started=None,
                 eval_ms=None):
        """Writes an eval line for the current parameters (the model after
        ``clock`` steps): what ``zps launch`` reports as test accuracy
        (``final=True`` on the last one)."""
        now = time.time()
        if started is None:
            started = now - (eval_ms or 0.0) / 1e3
        spe = self.steps_per_epoch
        self.metrics.eval(rank=self.client.rank, clock=self.clock,
                          epoch=self.clock / spe if spe else None, loss=loss, accuracy=accuracy,
                          examples=examples, eval_ms=eval_ms if eval_ms is not None
                          else (now - started) * 1e3, final=final, started=started)

    def finish(self):
        """This worker has no batch left (SSP's bound and observers stop waiting for it)."""
        self.client.finish()

    def close(self):
        self._abandon()
        for h in self._hooks:
            h.remove()
        self._hooks, self._accs = [], []
        self.metrics.close()

    def state_dict(self):
        return {"clock": self.clock}

    def load_state_dict(self, state):
        self.clock = int(state["clock"])
