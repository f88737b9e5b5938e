"""The data of figure 1: number grids, the SR rounding probability, RTN vs SR errors.

Three small computations, all from :mod:`ecosim.core.formats` and :func:`ecosim.quantize`:

* the finite values of a few formats (FP8 E4M3/E5M2, FP4 E2M1, INT4, ternary);
* the probability that a value between two neighbours ``lo < hi`` of a grid rounds up, as a
  function of its position ``p = (x - lo)/(hi - lo)``: RTN (a step at 1/2, ties to even), SR
  with 32 random bits (``floor(p * 2**32) / 2**32``, the count rule of docs/theory.md §2.2),
  SR with few bits by enumerating every bit pattern (exact, no sampling), and the measured
  frequency of keyed SR at a few positions (sampling, with its binomial standard error);
* histograms of the rounding error ``q(x) - x`` in units of the local grid step, for
  ``x ~ N(0, 1)`` scaled by absmax onto a format (as the ECO paper scales weights onto E4M3),
  for RTN and SR, beside their laws for a position uniform in the step (uniform on
  [-1/2, 1/2] for RTN; triangular on [-1, 1] for SR).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..core import formats, rng
from ..core.rounding import quantize
from .base import (Config, ConfigError, at_least, experiment, interval, non_negative, nonempty,
                   rng_key)

__all__ = ["GridsConfig", "grids"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GridsConfig(Config):
    """Config of the ``grids`` experiment (defaults: the full-size figure)."""

    formats: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "int4",
                                "ternary")
    sr_format: str = "float8_e4m3fn"
    sr_lo: float = 1.0          # lower neighbour; hi is the next value of sr_format
    sr_grid: int = 256          # positions k/sr_grid, k = 0..sr_grid, for the exact curves
    sr_nbits: int = 2           # few-bit SR whose staircase is enumerated exactly
    sr_points: int = 9          # positions (k+1)/(sr_points+1) where SR is sampled
    sr_samples: int = 100_000   # keyed SR draws per sampled position
    error_format: str = "float8_e4m3fn"
    error_samples: int = 1_000_000
    error_bins: int = 80        # over [-1, 1]; a multiple of 4 puts edges at +-1/2
    key: int = 0

    SMOKE: ClassVar[dict] = {"sr_grid": 64, "sr_samples": 2_000, "error_samples": 20_000,
                             "error_bins": 40}
    CHECKS: ClassVar[dict] = {
        "formats": nonempty, "sr_grid": at_least(2), "sr_points": at_least(1),
        "sr_samples": at_least(1), "error_samples": at_least(2), "sr_nbits": interval("[1, 16]"),
        "error_bins": at_least(4), "sr_lo": non_negative, "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        # canonical names (aliases accepted), so that equal configs hash equal
        object.__setattr__(self, "formats", tuple(_canonical_format(n) for n in self.formats))
        object.__setattr__(self, "sr_format", _canonical_format(self.sr_format))
        object.__setattr__(self, "error_format", _canonical_format(self.error_format))
        if self.error_bins % 4:
            raise ConfigError(f"GridsConfig.error_bins: expected a multiple of 4, got "
                              f"{self.error_bins}")
        values = formats.get(self.sr_format).values()
        if self.sr_lo not in values or self.sr_lo >= values[-1] or self.sr_lo < 0:
            raise ConfigError(f"GridsConfig.sr_lo={self.sr_lo} must be a non-negative value of "
                              f"{self.sr_format} below its max")


def _canonical_format(name: str) -> str:
    try:
        fmt = formats.get(name)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"GridsConfig: {exc}") from None
    if fmt.storage_bits > 16:
        raise ConfigError(f"GridsConfig: {fmt.name} is too wide to enumerate")
    return fmt.name


def _neighbours(fmt, lo: float) -> tuple[float, float]:
    values = fmt.values()
    i = int(np.searchsorted(values, lo))
    return float(values[i]), float(values[i + 1])


@experiment("grids", GridsConfig, version="1")
def grids(cfg: GridsConfig) -> dict[str, np.ndarray]:
    """Format grids, SR probability between neighbours, RTN vs SR error histograms."""
    out: dict[str, np.ndarray] = {}

    # 1. the grids, one long table (value, format index, subnormal?)
    vals, idx, sub, count, vmax = [], [], [], [], []
    for i, name in enumerate(cfg.formats):
        fmt = formats.get(name)
        v = fmt.values()
        vals.append(v)
        idx.append(np.full(v.size, i, np.int64))
        tiny = fmt.smallest_normal if fmt.is_float else 1.0
        sub.append((v != 0) & (np.abs(v) < tiny))
        count.append(v.size)
        vmax.append(v[-1])
    out["format_names"] = np.array([formats.get(n).name for n in cfg.formats])
    out["format_count"] = np.array(count, np.int64)
    out["format_max"] = np.array(vmax, np.float64)
    out["values"] = np.concatenate(vals)
    out["values_format"] = np.concatenate(idx)
    out["values_subnormal"] = np.concatenate(sub)

    # 2. P(round up) between two neighbours, exactly, on a grid of positions
    fmt = formats.get(cfg.sr_format)
    lo, hi = _neighbours(fmt, cfg.sr_lo)
    p = np.arange(cfg.sr_grid + 1, dtype=np.float64) / cfg.sr_grid
    x = lo + p * (hi - lo)  # exact: p is dyadic and (hi - lo) a power of two
    out["sr_lo"], out["sr_hi"] = np.float64(lo), np.float64(hi)
    out["sr_p"] = p
    out["sr_rtn_up"] = (quantize(x, fmt, "rtn") == hi).astype(np.float64)
    out["sr_exact_up"] = np.floor(p * 2.0**32) / 2.0**32  # nbits=32: the count rule
    n_patterns = 2**cfg.sr_nbits
    patterns = np.arange(n_patterns, dtype=np.uint32)
    xs = np.repeat(x, n_patterns)
    bits = np.tile(patterns, x.size)
    up = quantize(xs, fmt, "sr", rbits=bits, nbits=cfg.sr_nbits) == hi
    out["sr_fewbits_up"] = up.reshape(x.size, n_patterns).mean(axis=1)
    out["sr_nbits"] = np.int64(cfg.sr_nbits)

    # keyed SR, sampled at a few positions (positions need not be dyadic: p is measured)
    target = np.arange(1, cfg.sr_points + 1, dtype=np.float64) / (cfg.sr_points + 1)
    xe = lo + target * (hi - lo)
    pe = (xe - lo) / (hi - lo)
    draws = np.repeat(xe[:, None], cfg.sr_samples, axis=1)
    q = quantize(draws, fmt, "sr", key=(rng.fold_in(cfg.key, "grids/sr"), 0))
    freq = (q == hi).mean(axis=1)
    out["emp_p"] = pe
    out["emp_freq"] = freq
    out["emp_n"] = np.full(pe.size, cfg.sr_samples, np.int64)
    out["emp_se"] = np.sqrt(pe * (1 - pe) / cfg.sr_samples)

    # 3. error histograms in units of the local step, N(0,1) scaled by absmax onto the grid
    efmt = formats.get(cfg.error_format)
    g = np.random.default_rng(rng.fold_in(cfg.key, "grids/normals"))
    z = g.standard_normal(cfg.error_samples)
    y = (z * (efmt.max / np.max(np.abs(z)))).astype(np.float32)
    pos = efmt.values()[efmt.values() >= 0]
    a = np.abs(y.astype(np.float64))
    j = np.clip(np.searchsorted(pos, a, side="right"), 1, pos.size - 1)
    step = pos[j] - pos[j - 1]
    edges = np.linspace(-1.0, 1.0, cfg.error_bins + 1)
    out["err_edges"] = edges
    for mode, key in (("rtn", None), ("sr", (rng.fold_in(cfg.key, "grids/error_sr"), 0))):
        qy = quantize(y, efmt, mode, key=key).astype(np.float64)
        e = (qy - y.astype(np.float64)) / step
        out[f"err_{mode}_density"] = np.histogram(e, bins=edges, density=True)[0]
        out[f"err_{mode}_mean"] = np.float64(e.mean())
        out[f"err_{mode}_std"] = np.float64(e.std())
        out[f"err_{mode}_absmax"] = np.float64(np.abs(e).max())
    t = np.linspace(-1.0, 1.0, 401)
    out["err_theory_x"] = t
    out["err_theory_rtn"] = np.where(np.abs(t) <= 0.5, 1.0, 0.0)
    out["err_theory_sr"] = 1.0 - np.abs(t)
    out["err_samples"] = np.int64(cfg.error_samples)
    out["err_format"] = np.array(efmt.name)
    out["sr_format"] = np.array(fmt.name)
    return out
