"""The relative-error model of floating-point quantization, checked on real grids (figure
``relative_error``).

The third reference (Tang, Li, Zou, arXiv 2510.21314) assumes ``|Q(x) - x| <= 2**-M |x|``
for a format with ``M`` mantissa bits. On a real grid this holds exactly in the *normal*
range ``smallest_normal <= |x| <= max``, with room to spare: round-to-nearest gives at most
half a step, ``2**-(M+1) |x|``, and stochastic rounding less than one step, ``< 2**-M |x|``
(``x`` lies in a binade ``[2**e, 2**(e+1))`` whose step is ``2**(e-M) <= 2**-M |x|``). It
fails below the normal range, where subnormals have a fixed absolute step (the relative error
grows to 1 as ``x`` flushes to zero), and above ``max``, where values saturate.

For each format this experiment draws ``x`` log-uniformly over a range that covers the
subnormals, the normal binades and an overflow margin (float64, random signs), rounds with
RTN and with SR (keyed bits), and records, in units of ``2**-M``: the histograms of
``|Q(x) - x| / |x|`` over the normal range, the maximum per binade of ``log2 |x|``, and the
fraction of samples violating each bound in each region (normal, subnormal, overflow).
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ..core import rng
from ..core.formats import custom
from ..core.formats import get as get_format
from ..core.rounding import quantize
from .base import (Config, ConfigError, at_least, distinct, experiment, nonempty, rng_key)

__all__ = ["RelativeErrorConfig", "format_of", "relative_errors"]


def format_of(name: str):
    """A catalogued format, or ``eEmM`` built with :func:`ecosim.core.formats.custom`."""
    if name.startswith("e") and "m" in name and name[1:].replace("m", "", 1).isdigit():
        e, m = name[1:].split("m")
        return custom(int(e), int(m))
    return get_format(name)


def relative_errors(x: np.ndarray, fmt, mode: str, key=None) -> np.ndarray:
    """``|Q(x) - x| / |x|`` in float64 (saturating; ``x`` nonzero)."""
    q = quantize(x, fmt, mode, key=key)
    return np.abs(q - x) / np.abs(x)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RelativeErrorConfig(Config):
    """Formats and sample sizes of the relative-error check."""

    formats: tuple[str, ...] = ("e8m23", "e8m10", "e8m7", "e8m5", "e8m3", "e8m2", "e8m1",
                                "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
    samples: int = 200_000
    bins: int = 60              # histogram of rel_err * 2**M over [0, 1]
    below: int = 12             # binades sampled below the smallest normal (and subnormal)
    above: int = 3              # binades sampled above max
    key: int = 0

    SMOKE: ClassVar[dict] = {"formats": ("e8m7", "e8m1", "float8_e4m3fn"), "samples": 4000,
                             "bins": 20}
    CHECKS: ClassVar[dict] = {
        "formats": (nonempty, distinct), "samples": at_least(100), "bins": at_least(2),
        "below": at_least(1), "above": at_least(1), "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        for name in self.formats:
            try:
                fmt = format_of(name)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"RelativeErrorConfig.formats: {exc}") from None
            if not fmt.is_float:
                raise ConfigError(f"RelativeErrorConfig.formats: {name} is not a float format")


def _units(cfg: RelativeErrorConfig) -> list[dict]:
    return [{"format": f} for f in cfg.formats]


def _combine(cfg: RelativeErrorConfig, units: list[dict], results: list[dict]) -> dict:
    """Scalars and histograms one row per format; per-binade maxima as one long table."""
    out: dict[str, np.ndarray] = {"format": np.array([str(r["name"]) for r in results])}
    for k in sorted(results[0]):
        if k in ("name", "binade", "hist_edges") or k.endswith("binade_max"):
            continue
        out[k] = np.stack([r[k] for r in results])
    out["hist_edges"] = results[0]["hist_edges"]
    out["binade"] = np.concatenate([r["binade"] for r in results])
    out["binade_format"] = np.concatenate([np.full(r["binade"].size, i, np.int64)
                                           for i, r in enumerate(results)])
    for mode in ("rtn", "sr"):
        out[f"{mode}_binade_max"] = np.concatenate([r[f"{mode}_binade_max"] for r in results])
    return out


@experiment("relative_error", RelativeErrorConfig, version="1", units=_units,
            combine=_combine)
def relative_error(cfg: RelativeErrorConfig, unit: dict) -> dict:
    """|Q(x)-x|/|x| per format, RTN and SR: the bound 2**-M holds exactly on normal values."""
    fmt = format_of(unit["format"])
    M = fmt.mantissa_bits
    lo = math.log2(fmt.smallest_subnormal) - cfg.below // 2
    lo = min(lo, math.log2(fmt.smallest_normal) - cfg.below)
    hi = math.log2(fmt.max) + cfg.above
    g = np.random.default_rng(rng.fold_in(cfg.key, "relative_error", unit["format"]) % 2**63)
    e = g.uniform(lo, hi, cfg.samples)
    x = np.exp2(e) * np.where(g.random(cfg.samples) < 0.5, -1.0, 1.0)
    a = np.abs(x)
    region = np.where(a < fmt.smallest_normal, 0, np.where(a <= fmt.max, 1, 2))
    unit_err = 2.0**-M
    out = {"mantissa": np.int64(M), "smallest_normal": np.float64(fmt.smallest_normal),
           "max": np.float64(fmt.max), "log2_lo": np.float64(lo), "log2_hi": np.float64(hi),
           "name": np.array(fmt.name)}
    edges = np.linspace(0.0, 1.0, cfg.bins + 1)
    out["hist_edges"] = edges
    binade = np.floor(np.log2(a)).astype(np.int64)
    b_lo, b_hi = int(math.floor(lo)), int(math.ceil(hi))
    out["binade"] = np.arange(b_lo, b_hi, dtype=np.int64)
    for mode, key in (("rtn", None), ("sr", (rng.fold_in(cfg.key, "relative_error/sr"), 0))):
        r = relative_errors(x, fmt, mode, key) / unit_err  # in units of 2**-M
        normal = region == 1
        out[f"{mode}_hist"] = np.histogram(np.minimum(r[normal], 1.0), bins=edges)[0]
        out[f"{mode}_max_normal"] = np.float64(r[normal].max(initial=0.0))
        out[f"{mode}_mean_normal"] = np.float64(r[normal].mean())
        bound = 0.5 if mode == "rtn" else 1.0  # the exact bound in the normal range
        for j, name in enumerate(("subnormal", "normal", "overflow")):
            sel = region == j
            out[f"{mode}_violate_{name}"] = np.float64(
                (r[sel] > bound).mean() if mode == "rtn" else (r[sel] >= bound).mean()
            ) if sel.any() else np.float64(np.nan)
            out[f"{mode}_violate_model_{name}"] = np.float64(
                (r[sel] > 1.0).mean()) if sel.any() else np.float64(np.nan)
        bmax = np.full(out["binade"].size, np.nan)
        idx = binade - b_lo
        ok = (idx >= 0) & (idx < bmax.size)
        np.fmax.at(bmax, idx[ok], r[ok])
        out[f"{mode}_binade_max"] = bmax
    out["n_normal"] = np.int64((region == 1).sum())
    out["n_subnormal"] = np.int64((region == 0).sum())
    out["n_overflow"] = np.int64((region == 2).sum())
    return out
