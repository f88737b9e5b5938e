"""DQT on the language model: FP32, BitNet b1.58, DQT INT8 and DQT ternary under Table 1's protocol.

The LM rows of DQT's claims (figure ``dqt_lm`` of :mod:`ecosim.figures.dqt`; verdicts in
:mod:`ecosim.claims.dqt_lm`): the runs of the ``lm`` experiment (:mod:`ecosim.experiments.lm`:
same preset ``micro``, 650 steps of 16 x 64 bytes, AdamW (0.9, 0.98), eps 1e-9, wd 0.1, clip
1.0, warmup + cosine, 3 seeds paired by seed, validation on 16 batches every 65 steps, one CPU
thread) with the methods of :mod:`ecosim.torch.lm` that are not Table 1's:

* ``fp32``: plain AdamW (the reference of every gap; the ``lm`` experiment's FP32 run again);
* ``bitnet_b158``: FP32 master weights under AdamW, each block-internal linear's forward on
  absmean-ternary weights and INT8 per-token absmax activations, straight-through gradients
  (:class:`ecosim.torch.bitnet.BitLinear`);
* ``dqt8_sr`` and ``dqt_ternary_sr``: DQT (:class:`ecosim.torch.dqt.DQTAdamW`): no master
  copy, the block linears stored as INT8 (1 byte per weight) or ternary (4 codes per byte)
  codes with one scale per tensor, the previous step's (the reference code's signed-max
  rule), every update written with stochastic rounding.

Each unit is one :func:`ecosim.torch.lm.train` run, exactly as the ``lm`` experiment makes it
(its unit function and result columns), declared as the shared unit
:func:`ecosim.experiments.lm.train_run` of its run config: the FP32 runs are the ``lm``
experiment's own, one cache entry each, trained once when a build runs both. Cost: 12 runs
on one thread each; a DQT ternary run costs more than twice an FP32 run (its SR writes onto
packed codes), and a build that runs ``lm`` too trains only the 9 runs that are not FP32 (the
time table of ``ecosim figures`` gives each experiment's CPU time).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from .base import ConfigError, experiment
from .lm import OTHER_METHODS, LMTableConfig, combine_runs, run_units, shared_run
from .lm import lm as _lm_unit

__all__ = ["DQTLMConfig", "DQT_LM_METHODS"]

#: the methods of the experiment, FP32 first (the reference)
DQT_LM_METHODS = ("fp32", "bitnet_b158", "dqt8_sr", "dqt_ternary_sr")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQTLMConfig(LMTableConfig):
    """The ``lm`` experiment's protocol with DQT's methods (see the module docstring)."""

    methods: tuple[str, ...] = DQT_LM_METHODS
    seeds: tuple[int, ...] = (3,)  # the lm experiment's first 3 (it runs 5)

    ONLY: ClassVar[tuple[str, ...]] = ("fp32", *OTHER_METHODS)
    SMOKE: ClassVar[dict] = {**LMTableConfig.SMOKE, "methods": DQT_LM_METHODS, "seeds": (2,)}

    def __post_init__(self):
        super().__post_init__()
        if "fp32" not in self.methods:
            raise ConfigError("DQTLMConfig.methods: expected 'fp32' (the reference), got "
                              f"{self.methods}")


@experiment("dqt_lm", DQTLMConfig, version="1", units=run_units, combine=combine_runs,
            requires=("torch",), share=shared_run)
def dqt_lm(cfg: DQTLMConfig, unit: dict) -> dict:
    """DQT and BitNet b1.58 on the LM under Table 1's protocol (torch backend)."""
    return _lm_unit(cfg, unit)
