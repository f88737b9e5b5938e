"""The round-to-nearest stall (figure 5): naive removal freezes, ECO's momentum accumulates.

With round-to-nearest and a weight on a grid of step ``h``, the write ``q(w - u)`` returns ``w``
whenever ``|u| < h/2`` (:func:`ecosim.theory.rtn_stall_threshold`). Naive removal then drops the
whole update, and once both its update ``u = lr*m'`` and the update its frozen gradient would
settle to, ``lr*g(w)``, are below ``h/2``, no later step can move it: the momentum only moves
between those two values (``m' <- beta*m' + (1-beta)*g``). ECO instead gets the whole update
back as error, ``e = -u``, and injects ``alpha*e``, which turns the stored momentum into an
accumulator: while stuck, ``m <- m + (1-beta)*g/beta``, so ``lr*m'`` grows linearly until it
crosses ``h/2`` and the weight moves (ECO's virtual iterate ``w - (lr*beta/(1-beta))*m`` moves
by exactly ``-lr*g`` every step, stuck or not).

Each unit runs one scheme (fp, master, naive or eco; RTN on a fixed uniform grid) on the
separable quadratic ``f = L/2 ||x - x*||^2`` with ``1 + d`` coordinates: coordinate 0 is the
showcase (``x0 = x* + showcase_offset``), the other ``d`` start at ``x* + N(0, spread^2)``. It
records every step's stored weights and update ``lr*m'`` (a callback of
:func:`ecosim.train.train` keeps each update's weights and momentum), and checks two predictions:

* naive: the stall step, predicted as the first step ``t`` with ``|lr*m'_t| < h/2`` and
  ``|lr*g(w_t)| < h/2``, against the observed one (the step after the last move);
* eco: every stuck phase's release step, predicted from the state at the phase's first step
  ``s`` by the accumulator law, ``r = s + ceil((h/(2 lr) - sgn(b)*a) / |b|) - 1`` with
  ``a = beta*m_s`` and ``b = (1-beta)*g(w_s)``, against the observed move.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..core import rng
from .. import theory
from ..optim import sgdm
from ..problems import Quadratic
from ..core.quantizer import Quantizer
from ..train import initial_point, train
from .base import (Config, at_least, experiment, finite, interval, non_negative, positive, rng_key,
                   stack_units)
from .floor import check_stable

__all__ = ["RtnStallConfig", "naive_stall_steps", "eco_release_steps"]

_SCHEMES = ("fp", "master", "naive", "eco")


def naive_stall_steps(u: np.ndarray, lr_g: np.ndarray, moved: np.ndarray, threshold: float):
    """Predicted and observed stall steps of naive+RTN, per coordinate.

    Args:
        u: ``(T, n)`` updates ``lr*m'`` of each step.
        lr_g: ``(T, n)`` ``lr * grad`` at each step's stored weights.
        moved: ``(T, n)`` whether step t changed the stored weight.
        threshold: ``h/2``.

    Returns:
        ``(predicted, observed)`` int arrays ``(n,)``; ``T`` where there is none within the run.
    """
    T, n = u.shape
    frozen = (np.abs(u) < threshold) & (np.abs(lr_g) < threshold)
    predicted = np.where(frozen.any(axis=0), np.argmax(frozen, axis=0), T)
    last = np.where(moved.any(axis=0), T - 1 - np.argmax(moved[::-1], axis=0), -1)
    observed = last + 1
    return predicted.astype(np.int64), observed.astype(np.int64)


def eco_release_steps(m_before: np.ndarray, grad: np.ndarray, moved: np.ndarray, lr: float,
                      beta: float, threshold: float):
    """Predicted and observed release steps of every stuck phase of eco+RTN.

    A stuck phase starts at a step ``s`` that does not move the weight (and either ``s = 0`` or
    step ``s-1`` moved it). From ``a = beta*m_s`` (``m_s`` the stored momentum before step
    ``s``) and ``b = (1-beta)*g_s`` the update of stuck step ``s+k`` is ``lr*(a + (k+1)*b)``,
    so the release is at ``s + ceil((threshold/lr - sgn(b)*a)/|b|) - 1``.

    Returns:
        ``coord, onset, predicted, observed`` int arrays, one entry per phase that ends within
        the run (``observed`` is the first move after the onset), and the number of phases
        still stuck at the end whose predicted release lies beyond the run (``censored_ok``)
        out of all censored phases (``censored``).
    """
    T, n = moved.shape
    coord, onset, pred, obs = [], [], [], []
    censored = censored_ok = 0
    for j in range(n):
        mv = moved[:, j]
        starts = np.flatnonzero(~mv & np.concatenate([[True], mv[:-1]]))
        for s in starts:
            a = beta * m_before[s, j]
            b = (1.0 - beta) * grad[s, j]
            if b == 0.0:
                continue
            k = int(np.ceil((threshold / lr - np.sign(b) * a) / abs(b))) - 1
            nxt = np.flatnonzero(mv[s:])
            if nxt.size == 0:
                censored += 1
                censored_ok += int(s + k >= T)
                continue
            coord.append(j)
            onset.append(s)
            pred.append(s + k)
            obs.append(s + int(nxt[0]))
    as_int = lambda v: np.array(v, np.int64)  # noqa: E731
    return as_int(coord), as_int(onset), as_int(pred), as_int(obs), censored, censored_ok


@dataclasses.dataclass(frozen=True, kw_only=True)
class RtnStallConfig(Config):
    """RTN stall on a fixed grid: naive freezes, eco accumulates and releases."""

    lr: float = 0.05
    beta: float = 0.9
    step: float = 2.0**-4       # grid spacing h (int8 codes, fixed scale)
    L: float = 1.0
    steps: int = 1000
    d: int = 64                 # ensemble coordinates besides the showcase
    spread: float = 1.0         # std of the ensemble's initial offsets from x*
    showcase_offset: float = 1.3
    key: int = 0
    SMOKE: ClassVar[dict] = {"steps": 400, "d": 16}
    CHECKS: ClassVar[dict] = {
        "lr": positive, "beta": interval("(0, 1)"), "step": positive, "L": positive,
        "steps": at_least(2), "d": at_least(1), "spread": non_negative,
        "showcase_offset": finite, "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        check_stable(self, self.lr, (self.beta,), self.L)


def _units(cfg: RtnStallConfig):
    return [{"scheme": s} for s in _SCHEMES]


def _combine(cfg: RtnStallConfig, units, results):
    out = stack_units(cfg, units, results)
    idx = {u["scheme"]: i for i, u in enumerate(units)}
    thr = theory.rtn_stall_threshold(cfg.step)
    out["threshold"] = np.float64(thr)
    out["lr"] = np.float64(cfg.lr)
    out["dead_zone"] = np.float64(thr / (cfg.lr * cfg.L))  # |w - x*| below which naive stalls
    if "naive" in idx:
        r = results[idx["naive"]]
        pred, obs = naive_stall_steps(r["u"], cfg.lr * r["grad"], r["moved"], thr)
        out["naive_predicted"], out["naive_observed"] = pred, obs
    if "eco" in idx:
        r = results[idx["eco"]]
        c, s, p, o, cens, cens_ok = eco_release_steps(r["m_before"], r["grad"], r["moved"],
                                                       cfg.lr, cfg.beta, thr)
        out["eco_coord"], out["eco_onset"] = c, s
        out["eco_predicted"], out["eco_observed"] = p, o
        out["eco_censored"], out["eco_censored_ok"] = np.int64(cens), np.int64(cens_ok)
    return out


@experiment("rtn_stall", RtnStallConfig, version="1", units=_units, combine=_combine)
def rtn_stall(cfg: RtnStallConfig, unit: dict) -> dict:
    """Naive+RTN freezes below half a grid step; eco's momentum accumulates and releases."""
    scheme = unit["scheme"]
    n = cfg.d + 1
    prob = Quadratic(n, L=cfg.L, key=rng.fold_in(cfg.key, "problem") % 2**63)
    xstar = np.asarray(prob.optimum, np.float64)
    z = np.random.default_rng(rng.fold_in(cfg.key, "init")).standard_normal(n) * cfg.spread
    z[0] = cfg.showcase_offset
    q = None if scheme == "fp" else Quantizer("int8", "rtn", scale=cfg.step)
    opt = sgdm(cfg.lr, cfg.beta, scheme=scheme, weights=q)
    T = cfg.steps
    x, virtual, m = np.empty((T + 1, n)), np.empty(T + 1), np.empty((T + 1, n))
    x[0], state = initial_point(prob, opt, cfg.key, xstar + z)
    m[0], virtual[0] = state.m, opt.virtual(x[0], state)[0]

    def record(t, w, st, rec):  # the stored weights and momentum after update t
        x[t + 1], m[t + 1], virtual[t + 1] = w, st.m, opt.virtual(w, st)[0]

    h = train(prob, opt, T, key=cfg.key, params=xstar + z, callbacks=[record])
    if h.outcome != "completed":
        raise RuntimeError(f"rtn_stall: expected the {scheme} run to complete every step, it "
                           f"{h.outcome} after {h.stopped_at} steps")
    grad = np.stack([prob.grad(w) for w in x[:-1]])  # the gradient each update used
    m_before = m[:-1]
    u = cfg.lr * (cfg.beta * m_before + (1.0 - cfg.beta) * grad)  # the update lr*m'
    return {"x": x, "u": u, "grad": grad, "m_before": m_before, "moved": x[1:] != x[:-1],
            "xstar": xstar, "virtual": virtual}
