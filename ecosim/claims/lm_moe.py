"""The ECO paper's Figure 3 (a sparse MoE with FP8 expert weights) judged on the ``lm_moe``
runs: the reference method, the paper's numbers and its observations as orderings.

Used by the figure ``lm_moe`` (:mod:`ecosim.figures.lm_moe`), which only draws. The outcomes,
paired gaps and verdicts are those of the LM table (:mod:`.lm`: :func:`~.lm.lm_cells`,
:func:`~.lm.lm_orderings`) with FP8 master + SR, the paper's reference in its Figure 3, as the
base of the paired gaps and of the stall test.

The paper (ECO, arXiv 2601.22101) shows Figure 3 as a bar chart without printed values. The
numbers of :data:`PAPER_FIG3` come from a secondary summary of the paper, not from its text or
from reading the bars here, so they are approximate. For the SMoE that summary gives two values
for naive master-weight removal, 2.9144 and 3.0997, without saying which is RTN and which SR;
the first is below FP8 master + SR's 2.9177. Neither is labelled here, and no ordering quotes
them as one rounding's.
"""
from __future__ import annotations

import math

from .lm import lm_cells, lm_orderings

__all__ = ["MOE_BASE", "MOE_ORDERINGS", "PAPER_FIG3", "moe_cells", "moe_orderings",
           "paper_gap", "paper_loss"]

MOE_BASE = "fp8_master_sr"  # gaps are paired to FP8 with master weights + SR, as in Figure 3

#: The paper's Figure 3 as a secondary summary gives it (approximate): ``(model, method label,
#: validation loss, the runner's method name or None)``; None: a value whose method is not
#: stated.
PAPER_FIG3 = (
    ("SMoE 2.1B, LM1B", "FP8 w/ MW + SR", 2.9177, "fp8_master_sr"),
    ("SMoE 2.1B, LM1B", "FP8 w/o MW ECO + SR", 2.9232, "fp8_eco_sr"),
    ("SMoE 2.1B, LM1B", "naive removal (rounding not stated; 1 of 2)", 2.9144, None),
    ("SMoE 2.1B, LM1B", "naive removal (rounding not stated; 2 of 2)", 3.0997, None),
    ("Gemma-3 1B, C4", "FP8 w/ MW + SR", 2.7554, "fp8_master_sr"),
    ("Gemma-3 1B, C4", "FP8 w/o MW ECO + SR", 2.7615, "fp8_eco_sr"),
    ("Gemma-3 1B, C4", "FP8 w/o MW naive + SR", 2.7671, "fp8_naive_sr"),
)

#: The paper's Figure 3 observations as orderings (:data:`.lm.LM_ORDERINGS`' form:
#: ``(A, relation, B, what the paper measured)``).
MOE_ORDERINGS = (
    ("fp8_eco_sr", "~", "fp8_master_sr", "SMoE +0.0055, Gemma +0.0061"),
    ("fp8_eco_sr", "<", "fp8_naive_sr", "Gemma -0.0056 (SMoE: naive's rounding not stated)"),
    ("fp8_master_sr", "<", "fp8_naive_sr", "Gemma -0.0117"),
    ("fp8_naive_sr", "<", "fp8_naive_rtn", "not stated (the SMoE's naive values are unlabelled)"),
)


def paper_loss(model: str, method: str) -> float:
    """The paper's loss of ``method`` for the model whose name starts with ``model``
    (``"SMoE"``, ``"Gemma"``); NaN where its figure has no such bar.

    >>> paper_loss("SMoE", "fp8_eco_sr"), math.isnan(paper_loss("SMoE", "fp8_naive_sr"))
    (2.9232, True)
    """
    return next((v for m, _, v, name in PAPER_FIG3 if m.startswith(model) and name == method),
                math.nan)


def paper_gap(model: str, method: str) -> float:
    """The paper's loss of ``method`` minus its FP8 master + SR (NaN where either is missing)."""
    return paper_loss(model, method) - paper_loss(model, MOE_BASE)


def moe_cells(r, group=None) -> dict:
    """:func:`~.lm.lm_cells` with gaps (and stalls) relative to :data:`MOE_BASE`."""
    return lm_cells(r, group, MOE_BASE)


def moe_orderings(r, group=None) -> list[dict]:
    """:func:`~.lm.lm_orderings` of :data:`MOE_ORDERINGS` relative to :data:`MOE_BASE`."""
    return lm_orderings(r, group, orderings=MOE_ORDERINGS, base=MOE_BASE)
