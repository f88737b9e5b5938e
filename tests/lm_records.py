"""Run records of ``python -m ecosim.torch.lm`` made by hand, for the LM protocol tests
(imported as ``from lm_records import ...``; NumPy only)."""
from ecosim.experiments.lm import method_parts


def linear_curve(steps, start, mid, end):
    """Validation every steps/10: linear from start to mid over the first half, then from mid
    to end over the second (train loss = validation loss)."""
    out = []
    for s in range(0, steps + 1, steps // 10):
        h = steps / 2
        v = start + (mid - start) * s / h if s <= h else mid + (end - mid) * (s - h) / h
        out.append([s, v, v])
    return out


def run_record(method, seed, val, *, steps=100, curve=None, diverged=False, preset="micro"):
    """A finished run's record (as ``python -m ecosim.torch.lm --results`` appends it) with
    final validation loss ``val`` (a diverged run keeps the first 3 curve points)."""
    w, scheme, _ = method_parts(method)
    bytes_ = {"master": 12.0, "naive": 9.0, "eco": 9.0, "fp": 16.0}[scheme]
    curve = curve or linear_curve(steps, 3.0, val + 0.3, val)
    return {"preset": preset, "method": method, "seed": seed, "steps": steps,
            "tokens": 1024 * steps, "val_loss": None if diverged else val,
            "final_train_loss": None if diverged else val, "diverged": diverged,
            "curve": curve[:3] if diverged else curve,
            "n_params": {"total": 49312, "non_embedding": 32928, "quantized": 32768},
            "bytes_per_param": {"formula": bytes_, "measured": bytes_ + 0.01},
            "peak_memory_bytes": 1, "tokens_per_s": 1.0}


class RunLike:
    """What a figure function receives for an experiment: a run, its columns in ``results``
    (and, where given, its ``config``)."""

    def __init__(self, results, config=None):
        self.results = results
        self.config = config
