"""Precision against horizon, as the theorems state it (figure ``horizon_theorem``).

Tang, Li and Zou (arXiv 2510.21314; :mod:`ecosim.theory.horizon`) bound the average squared gradient
norm of quantized Adam and Muon after ``T`` steps, with each buffer ``X`` stored with relative
error ``q_X = 2^-M_X``: the full-precision rate is kept when ``q_X = O(T^-a_X)`` (Adam:
``a = 2`` for the weights and ``v``, ``1`` for ``g`` and ``m``; Muon: ``1/2``), for the
optimizers *as analysed*: Adam with ``b2 = 1 - 1/T`` and ``lr = c/sqrt(T)``, Muon with
``lr = c/sqrt(T)``, both constant over the run. ``precision_horizon`` asks a different
question (the smallest width keeping the final loss within 20% at a fixed lr and b2); this
experiment measures the theorems' own quantity under their own schedules.

Problem: 8x8 matrix regression with a Cauchy loss, ``f(W) = (1/n) sum_ij log(1 + R_ij^2)``,
``R = W X - Y``, ``Y = W* X``: ``X`` (8 x ``samples``) is shared by every seed (key
``fold_in(key, "design")``), ``W*`` is drawn per seed (``fold_in(key, "seed", s, "target")``),
entries standard normal; ``W_0 = 0``. The stochastic gradient is ``grad f(W) + noise * Z`` with
``Z`` standard normal, drawn per (seed, horizon) from ``fold_in(key, "seed", s, "noise", T)``
and shared by every lane of that seed, so a quantized run and its reference see the same noise.

Optimizers (per step ``t``, ``n = t + 1``, ``g`` the stochastic gradient at the stored ``W``):

* Adam (ecosim's AdamW update, no weight decay): ``m = b1 m + (1 - b1) g``,
  ``v = b2 v + (1 - b2) g^2``, ``W = W - lr/(1 - b1^n) * m / (sqrt(v/(1 - b2^n)) + eps)``,
  with ``b2 = 1 - 1/T`` and ``lr = adam_c / sqrt(T)``;
* Muon (:mod:`ecosim.optim.muon`: EMA momentum, Nesterov, the quintic Newton-Schulz map
  :func:`~ecosim.optim.muon.newton_schulz` with its coefficients and ``eps``, ``s = 1`` for a
  square matrix): ``m = beta m + (1 - beta) g``, ``u = NS5(beta m + (1 - beta) g)``,
  ``W = W - lr u`` with ``lr = muon_c / sqrt(T)``.

Quantization: round to nearest (ties to even) onto ``M`` mantissa bits with float64's
exponent range (``ecosim.core.formats.custom(11, M)``, mode ``"rtn"``), one buffer at a time: ``W``
(stored quantized, no master copy), ``g`` (on entry to the step), ``m`` and ``v`` (as stored
after their update; Muon has no ``v``). Every ``M`` from ``m_min`` to ``m_max`` is run. The
rounding is :func:`round_mantissa`, a per-element-width version of that format's RTN on
float64 bits (one call rounds every width at once); ``tests/test_horizon_theorem.py`` checks it
bit for bit against :func:`ecosim.core.rounding.quantize` for every width.

Quantity: ``G = (1/T) sum_{t<T} ||grad f(W_t)||^2`` (the noise-free gradient at the stored
iterates), per seed, and its ratio to the unquantized run (float64 arithmetic) of the same
seed and noise. Non-finite runs get ``inf``.

Vectorised: one unit per (optimizer, T) runs every seed and every (buffer, M) lane at once, as
arrays ``(lanes, seeds, 8, 8)`` (lane 0 the reference). The default config (7 horizons, 5
seeds, M = 1..30) is what ``make figures`` runs.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..core import rng
from ..optim.muon import NS_COEFFICIENTS
from .base import (Config, ConfigError, at_least, distinct, experiment, interval, non_negative,
                   nonempty, one_of, positive, rng_key)

__all__ = ["HorizonTheoremConfig", "BUFFERS", "OPTIMIZERS", "round_mantissa", "buffers_of",
           "simulate"]

BUFFERS = ("weights", "g", "m", "v")
OPTIMIZERS = ("adam", "muon")
_NS_EPS = 1e-7  # newton_schulz's default eps


def buffers_of(optimizer: str) -> tuple[str, ...]:
    """The quantized buffers of ``optimizer`` (Muon has no second moment)."""
    return BUFFERS if optimizer == "adam" else BUFFERS[:3]


def _round_words(mantissa) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(shift, half - 1, mask)`` uint64 words for RTN to ``mantissa`` bits on float64."""
    m = np.asarray(mantissa, np.int64)
    if m.size and (m.min() < 1 or m.max() > 51):
        raise ValueError(f"round_mantissa: expected widths in 1..51, got {m.min()}..{m.max()}")
    shift = (52 - m).astype(np.uint64)
    one = np.uint64(1)
    return shift, (one << (shift - one)) - one, ~((one << shift) - one)


def round_mantissa(x: np.ndarray, mantissa, *, _words=None) -> np.ndarray:
    """Round float64 ``x`` to nearest, ties to even, onto ``mantissa`` bits (1..51).

    The grid of ``custom(11, M)`` (float64's exponent range, subnormals), as
    ``ecosim.core.rounding.quantize(x, custom(11, M), "rtn")`` gives it for finite ``x`` below its
    largest value: the low ``52 - M`` bits of the float64 word are dropped with a carry that
    rounds to nearest and ties to the even code (a carry into the exponent is the next
    binade). ``mantissa`` broadcasts against ``x`` (one width per lane). +-0, +-inf stay as
    they are; values past ``custom(11, M)``'s largest become inf (unsaturated: never reached
    here). Returns a new array; ``x`` is not modified.
    """
    x = np.ascontiguousarray(x, np.float64)
    shift, half, mask = _round_words(mantissa) if _words is None else _words
    u = x.view(np.uint64)
    lsb = (u >> shift) & np.uint64(1)
    return ((u + half + lsb) & mask).view(np.float64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HorizonTheoremConfig(Config):
    """Horizons x optimizers; every seed and (buffer, M) lane of a unit run at once."""

    optimizers: tuple[str, ...] = OPTIMIZERS
    horizons: tuple[int, ...] = (250, 500, 1000, 2000, 4000, 8000, 16000)
    seeds: int = 5
    key: int = 0
    m_min: int = 1
    m_max: int = 30
    size: int = 8                   # W is size x size
    samples: int = 8                # columns of the design X
    noise: float = 0.5              # std of the additive gradient noise, per entry
    adam_c: float = 0.5             # Adam: lr = adam_c / sqrt(T)
    b1: float = 0.9                 # Adam; b2 = 1 - 1/T
    eps: float = 1e-12
    muon_c: float = 0.5             # Muon: lr = muon_c / sqrt(T)
    muon_beta: float = 0.9
    nesterov: bool = True
    ns_steps: int = 5

    SMOKE: ClassVar[dict] = {"horizons": (16, 32, 64), "seeds": 2, "m_max": 6, "size": 4,
                             "samples": 4}
    CHECKS: ClassVar[dict] = {
        "optimizers": (nonempty, distinct, one_of(OPTIMIZERS)),
        "horizons": (nonempty, distinct, at_least(2)),
        "seeds": at_least(1), "key": rng_key,
        # rounding on float64 words: 1 <= M <= 51
        "m_min": interval("[1, 51]"), "m_max": interval("[1, 51]"),
        "size": at_least(1), "samples": at_least(1), "noise": non_negative,
        "adam_c": positive, "b1": interval("[0, 1)"), "eps": positive, "muon_c": positive,
        "muon_beta": interval("[0, 1)"), "ns_steps": at_least(0)}

    def __post_init__(self):
        super().__post_init__()
        if self.m_min > self.m_max:
            raise ConfigError(f"HorizonTheoremConfig.m_min: expected at most m_max "
                              f"({self.m_max}), got {self.m_min}")

    @property
    def mantissas(self) -> np.ndarray:
        return np.arange(self.m_min, self.m_max + 1)


def _problem(cfg: HorizonTheoremConfig) -> tuple[np.ndarray, np.ndarray]:
    """The shared design ``X`` (size x samples) and the targets ``Y = W* X`` per seed."""
    X = np.random.default_rng(rng.fold_in(cfg.key, "design")).standard_normal(
        (cfg.size, cfg.samples))
    Ws = np.stack([np.random.default_rng(rng.fold_in(cfg.key, "seed", s, "target"))
                   .standard_normal((cfg.size, cfg.size)) for s in range(cfg.seeds)])
    return X, Ws @ X


def _noise(cfg: HorizonTheoremConfig, T: int) -> np.ndarray:
    """``(T, seeds, size, size)`` gradient noise, one stream per (seed, horizon)."""
    z = np.stack([np.random.default_rng(rng.fold_in(cfg.key, "seed", s, "noise", T))
                  .standard_normal((T, cfg.size, cfg.size)) for s in range(cfg.seeds)], axis=1)
    return cfg.noise * z


def _newton_schulz(x: np.ndarray, steps: int) -> np.ndarray:
    """:func:`ecosim.optim.muon.newton_schulz` on a stack of square matrices ``(..., k, k)``."""
    a, b, c = NS_COEFFICIENTS
    shape = x.shape
    x = x.reshape((-1,) + shape[-2:])
    x = x / (np.sqrt(np.einsum("nij,nij->n", x, x))[:, None, None] + _NS_EPS)
    for _ in range(steps):
        # matmul on contiguous operands is about twice as fast as on a transposed view
        A = np.matmul(x, np.ascontiguousarray(x.transpose(0, 2, 1)))
        B = np.matmul(A, A)
        B *= c
        B += b * A
        y = np.matmul(B, x)
        y += a * x
        x = y
    return x.reshape(shape)


def simulate(cfg: HorizonTheoremConfig, optimizer: str, T: int) -> dict:
    """Run the reference and every (buffer, M) lane of ``optimizer`` at horizon ``T``.

    Returns:
        ``{"avg_sq_grad": (buffers, mantissas, seeds), "reference": (seeds,)}``: the mean over
        ``t < T`` of ``||grad f(W_t)||^2`` (inf where a run went non-finite); Muon's ``v`` row
        is NaN.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"simulate: optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    ms = cfg.mantissas
    nM, S, k = ms.size, cfg.seeds, cfg.size
    bufs = buffers_of(optimizer)
    L = 1 + len(bufs) * nM
    sl = {b: slice(1 + i * nM, 1 + (i + 1) * nM) for i, b in enumerate(bufs)}
    words = _round_words(ms.reshape(nM, 1, 1, 1))
    X, Y = _problem(cfg)
    Xt = X.T.copy()
    Z = _noise(cfg, T)
    inv_n = 1.0 / cfg.samples

    W = np.zeros((L, S, k, k))
    m = np.zeros_like(W)
    v = np.zeros_like(W) if optimizer == "adam" else None
    acc = np.zeros((L, S))
    if optimizer == "adam":
        b1, b2 = cfg.b1, 1.0 - 1.0 / T
        lr = cfg.adam_c / np.sqrt(T)
    else:
        beta = cfg.muon_beta
        lr = cfg.muon_c / np.sqrt(T)

    def q(a: np.ndarray, b: str) -> None:  # round buffer b's own lanes in place
        if b in sl:
            a[sl[b]] = round_mantissa(a[sl[b]], None, _words=words)

    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(T):
            # one GEMM each way: the rows of every lane's W against the shared design
            R = (W.reshape(-1, k) @ X).reshape(L, S, k, -1) - Y   # (L, S, k, samples)
            grad = (((2.0 * inv_n) * (R / (1.0 + R * R))).reshape(-1, X.shape[1])
                    @ Xt).reshape(L, S, k, k)
            acc += np.einsum("lsij,lsij->ls", grad, grad)
            g = grad + Z[t]
            q(g, "g")
            if optimizer == "adam":
                n = t + 1
                m *= b1
                m += (1.0 - b1) * g
                q(m, "m")
                v *= b2
                v += (1.0 - b2) * (g * g)
                q(v, "v")
                d = np.sqrt(v / (1.0 - b2 ** n)) + cfg.eps
                W -= (lr / (1.0 - b1 ** n)) * (m / d)
            else:
                m *= beta
                m += (1.0 - beta) * g
                q(m, "m")
                u = beta * m + (1.0 - beta) * g if cfg.nesterov else m
                W -= lr * _newton_schulz(u, cfg.ns_steps)
            q(W, "weights")
    avg = acc / T
    avg[~np.isfinite(avg)] = np.inf
    out = np.full((len(BUFFERS), nM, S), np.nan)
    for i, b in enumerate(bufs):
        out[i] = avg[sl[b]]
    return {"avg_sq_grad": out, "reference": avg[0]}


def _units(cfg: HorizonTheoremConfig) -> list[dict]:
    return [{"optimizer": o, "horizon": int(T)} for o in cfg.optimizers for T in cfg.horizons]


def _combine(cfg: HorizonTheoremConfig, units: list[dict], results: list[dict]) -> dict:
    """Arrays indexed ``(optimizer, horizon, buffer, M, seed)``; ``ratio`` over the reference
    of the same seed, ``geo_ratio`` its geometric mean over seeds."""
    T = np.array(sorted(set(cfg.horizons)), np.int64)
    O = list(cfg.optimizers)
    shape = (len(O), T.size, len(BUFFERS), cfg.mantissas.size, cfg.seeds)
    avg = np.full(shape, np.nan)
    ref = np.full((len(O), T.size, cfg.seeds), np.nan)
    for u, r in zip(units, results):
        i, j = O.index(u["optimizer"]), int(np.flatnonzero(T == u["horizon"])[0])
        avg[i, j], ref[i, j] = r["avg_sq_grad"], r["reference"]
    ratio = avg / ref[:, :, None, None, :]
    with np.errstate(divide="ignore"):
        geo = np.exp(np.mean(np.log(ratio), axis=-1))
    return {"optimizer": np.array(O), "horizon": T, "buffer": np.array(BUFFERS),
            "mantissa": cfg.mantissas.astype(np.int64), "seed": np.arange(cfg.seeds),
            "avg_sq_grad": avg, "reference": ref, "ratio": ratio, "geo_ratio": geo}


@experiment("horizon_theorem", HorizonTheoremConfig, version="1", units=_units,
            combine=_combine)
def horizon_theorem(cfg: HorizonTheoremConfig, unit: dict) -> dict:
    """Average squared gradient norm per (buffer, M, seed) and its FP reference, at one T."""
    return simulate(cfg, unit["optimizer"], unit["horizon"])
