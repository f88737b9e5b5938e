"""Verdicts: the claims of the papers and of docs/theory.md judged on the runs.

Figures only draw; what a number means (an outcome, a paired gap, whether a claim holds) is
decided here, by criteria fixed as module constants, so a verdict changes only when a run does.

* :mod:`.stats`: Student-t intervals of paired differences (:func:`t_interval`) and the sign
  verdict read off one (:func:`~.stats.sign_verdict`);
* :mod:`.table`: a claim as a table row (:class:`Claim`) and the markdown table of several;
* :mod:`.theory`: docs/theory.md §5's nine claims on the theory experiments (:func:`evaluate`,
  :func:`claims_markdown`; figure ``claims``);
* :mod:`.lm`: Table 1 on the language model: outcomes, cells and the paper's orderings
  (:func:`lm_outcomes`, :func:`lm_cells`, :func:`lm_orderings`; figures ``lm_table``,
  ``lm_pareto``);
* :mod:`.lm_moe`: the ECO paper's Figure 3 (the MoE model) on the LM (figure ``lm_moe``);
* :mod:`.lm_switches`: the paper's bf16 autocast and E4M3 activations on the LM protocol:
  paired effects and Table 1 with both on (figure ``lm_switches``; imported on demand);
* :mod:`.mlp`: the shape of Table 1 on the MLP (figure ``mlp_table``);
* :mod:`.dqt`: DQT's four claims on the MLP (figures ``dqt``, ``dqt_claims``);
* :mod:`.dqt_lm`: DQT's claims (1) and (2) on the LM (figure ``dqt_lm``);
* :mod:`.horizon`: precision against horizon (figure ``precision_horizon``);
* :mod:`.sr_bits`: few-bit stochastic rounding (figure ``sr_bits``);
* :mod:`.eco_adam`: outcome counts and the approximations' paired gaps (figure
  ``eco_adam_breakdown``; imported on demand: it reads the experiment's outcome names).

The names below are those of the theory and LM verdicts; the others are reached through their
module (``ecosim.claims.dqt.evaluate``; ``lm_moe`` and ``dqt_lm`` are imported on demand).
"""
from __future__ import annotations

from . import dqt, horizon, lm, mlp, sr_bits, stats, table, theory  # noqa: F401
from .lm import (EQUIV_MARGIN, LM_BASE, LM_LEVEL, LM_ORDERINGS, STALL_FROM, STALL_MIN_DROP,
                 STALL_RATIO, check_protocol, gap_change, lm_cells, lm_gaps, lm_orderings, lm_outcomes,
                 runs_of_seeds)
from .stats import t_interval
from .table import Claim
from .theory import (HEADER, TOL_CLOSED_FORM, TOL_ETA_LAW, TOL_FP8_PARTLY, TOL_GROWTH_ECO,
                     TOL_GROWTH_NAIVE, claims_markdown, evaluate)

__all__ = ["HEADER", "TOL_CLOSED_FORM", "TOL_ETA_LAW", "TOL_FP8_PARTLY", "TOL_GROWTH_ECO",
           "TOL_GROWTH_NAIVE", "Claim", "claims_markdown", "evaluate",
           "EQUIV_MARGIN", "LM_BASE", "LM_LEVEL", "LM_ORDERINGS", "STALL_FROM",
           "STALL_MIN_DROP", "STALL_RATIO", "check_protocol", "gap_change", "lm_cells", "lm_gaps",
           "lm_orderings", "lm_outcomes", "runs_of_seeds", "t_interval"]
