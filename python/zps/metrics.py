"""The metrics stream a zps worker writes: JSON lines, as docs/worker.md's
"Metrics" section defines them for the C worker, so that ``zps launch``'s
progress line, run folder and summary.json read a Python worker's lines
the same way. ``zps launch ... -- COMMAND`` gives every rank its file in
``ZPS_METRICS``.
"""

import json
import math
import os
import time


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


class Metrics:
    """Appends records to ``path`` (default ``ZPS_METRICS``; None: nowhere),
    one line each, flushed before the call returns."""

    def __init__(self, path=None):
        if path is None:
            path = os.environ.get("ZPS_METRICS") or None
        self.path = path
        self._f = open(path, "a", buffering=1) if path else None
        self.started = time.time()

    def _write(self, rec):
        if self._f is None:
            return
        self._f.write(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n")
        self._f.flush()

    def run(self, **fields):
        rec = {"type": "run", "mode": "distributed"}
        rec.update(fields)
        rec["wall"] = time.time()
        self._write(rec)

    def step(self, rank, clock, epoch, step, loss, batch, version, clock_lag, forward_ms,
             backward_ms, pull_ms, push_ms, step_ms, dropped=False, batch_id=None):
        now = time.time()
        rec = {
            "type": "step", "rank": rank, "clock": clock, "epoch": epoch, "step": step,
            "wall": now, "elapsed": now - self.started, "loss": _num(loss), "batch": batch,
            "version": version, "clock_lag": clock_lag, "data_ms": 0.0,
            "forward_ms": _num(forward_ms), "backward_ms": _num(backward_ms), "copy_ms": 0.0,
            "pull_ms": _num(pull_ms), "push_ms": _num(push_ms), "update_ms": 0.0,
            "pad_ms": 0.0, "delay_ms": 0.0, "slowdown_ms": 0.0, "intermittent_ms": 0.0,
            "fixed_delay_ms": 0.0, "random_delay_ms": 0.0, "pause_ms": 0.0,
            "dropped": bool(dropped), "step_ms": _num(step_ms),
        }
        if batch_id is not None:
            rec["batch_id"] = batch_id
        self._write(rec)

    def eval(self, rank, clock, epoch, loss, accuracy, examples, eval_ms, final, started):
        self._write({
            "type": "eval", "rank": rank, "clock": clock, "epoch": _num(epoch),
            "wall": started, "elapsed": started - self.started, "test_loss": _num(loss),
            "test_accuracy": _num(accuracy), "examples": examples, "eval_ms": _num(eval_ms),
            "final": bool(final),
        })

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None
