"""The lm_finetune figure's table and verdicts on hand-made runs (no training)."""

import numpy as np

from ecosim.experiments.lm_finetune import FINETUNE_METHODS
from ecosim.figures.lm_finetune import FINETUNE_ORDERINGS, finetune_markdown

# final validation loss per method and seed 0, 1, 2 (naive + RTN diverges on every seed)
FINAL = {"int4_master_rtn": (3.10, 3.12, 3.11), "int4_master_sr": (3.13, 3.12, 3.14),
         "int4_naive_rtn": (None, None, None), "int4_naive_sr": (3.20, 3.22, 3.19),
         "int4_eco_rtn": (3.11, 3.13, 3.12), "int4_eco_sr": (3.11, 3.14, 3.14)}


def _results() -> dict:
    rows = [(m, s, v) for m in FINETUNE_METHODS for s, v in enumerate(FINAL[m])]
    n = len(rows)
    steps = np.array([10.0, 20.0])
    val = np.array([[np.nan, np.nan] if v is None else [v + 0.3, v] for _, _, v in rows])
    return {"method": np.array([m for m, _, _ in rows]),
            "seed": np.array([s for _, s, _ in rows]),
            "val_loss": np.array([np.nan if v is None else v for _, _, v in rows]),
            "diverged": np.array([v is None for _, _, v in rows]),
            "steps": np.full(n, 20), "tokens": np.full(n, 20 * 1024),
            "preset": np.full(n, "micro"), "pretrain_tokens": np.full(n, 665_600),
            "curve_step": np.tile(steps, (n, 1)), "curve_val": val,
            "base_val_loss": np.array([4.25 + 0.01 * s for _, s, _ in rows]),
            "start_val_loss": np.full(n, 4.3)}


def test_markdown_gaps_outcomes_and_verdicts():
    md = finetune_markdown(_results())
    # ECO + SR minus master + RTN per seed: 0.01, 0.02, 0.03: mean 0.02, sd 0.01, se 0.01/sqrt 3,
    # t(0.975, 2 dof) = 4.302653: half-width 0.024841
    assert "+0.0200 [-0.0048, +0.0448]" in md
    # Base minus master + RTN per seed: 1.15, 1.14, 1.16 -> mean 1.15, same spread
    assert "+1.1500 [+1.1252, +1.1748]" in md
    assert ("| INT4 naive + RTN | 4.3000 ± 0.0000 | diverged 3 |  | 0 of 3 trained; diverged 3 "
            "| diverged (not reported) |  |") in md
    lines = {ln.split(" |")[0]: ln for ln in md.splitlines() if ln.startswith("| INT4 ECO")}
    assert "holds (by outcome: B stalled or diverged)" in lines["| INT4 ECO + RTN < INT4 naive + RTN"]
    # ECO + SR - naive + SR: -0.09, -0.08, -0.05: interval below 0
    assert lines["| INT4 ECO + SR < INT4 naive + SR"].split(" | ")[2].startswith("holds: -0.0733")
    assert "| Base (no fine-tune) | 47.53 | 73.06 | 16.15 | 77.34 | 80.36 | 37.64 | 55.35 |" in md
    # the paper's side: mean accuracy over Table 2's six benchmarks, ECO minus master
    # (335.89 - 333.67) / 6 = +0.37 with RTN, (334.47 - 334.08) / 6 = +0.065 with SR
    assert [o[3] for o in FINETUNE_ORDERINGS][::2] == ["+0.37 points",
                                                       "INT4 naive + RTN diverged"]
    assert FINETUNE_ORDERINGS[3][3] == "INT4 naive + SR diverged"


def test_base_table_pairs_each_seed_with_its_own_loss():
    """Rows out of seed order (seed 2 first): the base table's seeds ascend and each keeps its
    own pretrained loss (4.25 + 0.01 * seed), as does the markdown's Base row."""
    import matplotlib.pyplot as plt

    from ecosim.figures.lm_finetune import lm_finetune

    r = _results()
    order = np.argsort((r["seed"] + 1) % 3, kind="stable")  # seeds 2, 0, 1
    shuffled = {k: v[order] for k, v in r.items()}
    assert shuffled["seed"][0] == 2
    fig, tables, md = lm_finetune(shuffled)
    plt.close(fig)
    assert tables["base"]["seed"].tolist() == [0, 1, 2]
    assert tables["base"]["base_val_loss"].tolist() == [4.25, 4.26, 4.27]
    assert md == finetune_markdown(r)


def test_units_combine_pads_a_diverged_units_shorter_curves():
    """Seed 1's runs diverged early (2 curve points, seed 0's 3): the combined rows are padded
    with NaN, as the lm experiment's are, where concatenating them raised."""
    from ecosim import experiments as E

    def unit(width, seed):
        return {"seed": np.array([seed]), "base_val_loss": np.array([4.0]),
                "curve_step": np.arange(width, dtype=float)[None],
                "curve_val": np.full((1, width), 3.0)}
    exp = E.get("lm_finetune")
    out = exp.combine(None, [{"seed": 0}, {"seed": 1}], [unit(3, 0), unit(2, 1)])
    assert out["curve_step"].shape == (2, 3) and np.isnan(out["curve_val"][1, 2])
    assert out["curve_step"][1, :2].tolist() == [0.0, 1.0]
    assert out["seed"].tolist() == [0, 1] and out["base_val_loss"].shape == (2,)


def test_lr_and_warmup_are_settable_and_in_the_cache_key():
    from ecosim import experiments as E

    exp = E.get("lm_finetune")
    cfg = exp.config()
    changed = cfg.override(["lr=0.001", "warmup=0.2"])
    assert (changed.lr, changed.warmup) == (0.001, 0.2)
    assert exp.digest(changed) != exp.digest(cfg)
