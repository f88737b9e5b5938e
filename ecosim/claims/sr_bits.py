"""What the ``sr_bits`` experiment shows: how few random bits stochastic rounding can use.

:func:`summarise` reads the runs of :mod:`ecosim.experiments.sr_bits` into the tables the
figure ``sr_bits`` (:mod:`ecosim.figures.sr_bits`) draws: per quadratic setting the stationary
error relative to 32-bit SR and the fewest bits within :data:`FLOOR_TOLERANCE` of it; per MLP
setting the final losses over seeds and whether ECO+SR ends below naive+SR, judged on the
seed-paired gaps.
"""
from __future__ import annotations

import numpy as np

from .stats import sign_verdict, t_interval

__all__ = ["FLOOR_TOLERANCE", "summarise"]

#: a quadratic floor "has not changed" at n bits while it is at most this factor of the
#: 32-bit floor (the batch-means standard errors are below 1%, so the margin is the criterion)
FLOOR_TOLERANCE = 1.10


def summarise(r) -> dict:
    """Tables of the sr_bits experiment: quadratic floors relative to 32 bits, the fewest bits
    within :data:`FLOOR_TOLERANCE`, and the MLP's per-setting losses and ECO-vs-naive gaps.

    Returns:
        ``{"quadratic": [...], "mlp": [...], "order": [...]}``: lists of row dicts (see the
        keys written below), 32-bit rows included as references.
    """
    part = r["unit_part"]
    quad, mlp, order = [], [], []
    q = np.flatnonzero(part == "quadratic")
    for lr in sorted(set(r["unit_lr"][q].tolist()), reverse=True):
        for scheme in dict.fromkeys(r["unit_scheme"][q].tolist()):
            sel = q[(r["unit_lr"][q] == lr) & (r["unit_scheme"][q] == scheme)]
            ref = sel[r["unit_nbits"][sel] == 32]
            if ref.size != 1:
                continue
            e32 = float(r["ex2"][ref[0]])
            for rule in dict.fromkeys(r["unit_rule"][sel].tolist()):
                rows = sel[(r["unit_rule"][sel] == rule) & (r["unit_nbits"][sel] != 32)]
                rows = rows[np.argsort(r["unit_nbits"][rows])]
                bits = [int(b) for b in r["unit_nbits"][rows]]
                ratio = [float(r["ex2"][i]) / e32 for i in rows]
                fewest = None  # the smallest n from which every larger n stays within tolerance
                for b, x in zip(reversed(bits), reversed(ratio)):
                    if x > FLOOR_TOLERANCE:
                        break
                    fewest = b
                quad.append({"lr": float(lr), "scheme": str(scheme), "rule": str(rule),
                             "nbits": bits, "ratio": ratio, "ex2_32": e32,
                             "fewest_bits": fewest})
    m = np.flatnonzero(part == "mlp")
    finals = {}
    for i in m:
        k = (str(r["unit_scheme"][i]), int(r["unit_nbits"][i]), str(r["unit_rule"][i]))
        v = float(r["final_val_loss"][i])
        finals.setdefault(k, {})[int(r["unit_seed"][i])] = (
            np.nan if bool(r["diverged"][i]) else v)
    for (scheme, n, rule), by_seed in finals.items():
        vals = np.array(list(by_seed.values()))
        ok = vals[np.isfinite(vals)]
        mlp.append({"scheme": scheme, "nbits": n, "rule": rule, "diverged": int((~np.isfinite(
            vals)).sum()), **t_interval(ok)})
    for (scheme, n, rule), by_seed in finals.items():
        if scheme != "eco" or ("naive", n, rule) not in finals:
            continue
        other = finals[("naive", n, rule)]
        gap = [other[s] - by_seed[s] for s in sorted(by_seed) if s in other
               and np.isfinite(other[s]) and np.isfinite(by_seed[s])]
        ti = t_interval(np.array(gap))
        order.append({"nbits": n, "rule": rule, "verdict": sign_verdict(ti, ">"), **ti})
    return {"quadratic": quad, "mlp": mlp, "order": order}
