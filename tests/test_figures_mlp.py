"""Figures 7-10 (the MLP experiments): robust facts of their smoke-mode results.

``tests/test_figures.py`` builds every figure's files; here the experiments' results and the
figures' tables are checked for what they claim: memory equal to :mod:`ecosim.memory`'s, runs
that train, the markdown table, divergence recorded rather than raised, consistent seeds.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim import experiments as E
from ecosim import memory
from ecosim.experiments.mlp_methods import (
    METHODS,
    MLPMethodsConfig,
    make_problem,
    method_label,
    run_training,
    weight_quantizer,
)
from ecosim.experiments.mlp_states import (
    MLPStatesConfig,
    build_optimizer,
    parse_variant,
    variant_label,
)
from ecosim.figures import mlp_methods, mlp_states
from ecosim.figures import style
from ecosim.optim import adamw, warmup_cosine


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("mlp_cache")
    m, s = E.run_many([("mlp_methods", MLPMethodsConfig().smoke()),
                       ("mlp_states", MLPStatesConfig().smoke())], cache=cache)
    return m, s


def _unit(r, i, fields):
    return {f: r[f"unit_{f}"][i].item() for f in fields}


def test_memory_is_ecosim_memory(runs):
    """Formula and measured bytes agree buffer by buffer, and equal ecosim.memory's on the
    optimizer rebuilt from the unit; the headline numbers are the paper's."""
    m, s = runs
    for r in (m, s):
        assert_array_equal(r["mem_formula"], r["mem_measured"])
    cfg = m.config
    for i in range(len(m["unit_seed"])):
        u = _unit(m, i, ("weights", "scheme", "mode", "width"))
        prob = make_problem(cfg, u["width"])
        q = weight_quantizer(u["weights"], u["mode"])
        opt = adamw(1e-3, scheme=u["scheme"], weights={n: q for n in
                                                       prob.quantized_names("matrices")})
        params, state = opt.init(prob.init(0), key=0)
        assert tuple(m["mem_measured"][i]) == tuple(memory.measured_bytes(opt, params, state))
        assert m["n_params"][i] == prob.num_params
        head = m["mem_headline"][i].sum()
        expected = {"master": 12.0, "naive": 9.0, "eco": 9.0}[u["scheme"]]
        if u["weights"] == "int4" and u["scheme"] != "master":
            expected = 8.5  # two codes per byte
        assert head == expected, u
    scfg = s.config
    prob = make_problem(scfg, scfg.width)
    for i in range(len(s["unit_seed"])):
        v = s["unit_variant"][i]
        opt, _ = build_optimizer(scfg, v, prob)
        params, state = opt.init(prob.init(0), key=0)
        assert tuple(s["mem_measured"][i]) == tuple(memory.measured_bytes(opt, params, state))
    heads = {str(v): float(s["mem_headline"][i].sum()) for i, v in enumerate(s["unit_variant"])}
    assert heads["adamw:fp:fp32:fp32"] == heads["adamw:master_sr:fp32:fp32"] == 12.0
    assert heads["adamw:eco_sr:fp32:fp32"] == 9.0
    assert heads["adamw:eco_sr:bf16_rtn:bf16_rtn"] == 5.0
    assert heads["adamw:eco_sr:e4m3_sr:e4m3_sr"] == 3.0
    assert heads["sgdm:master_sr:fp32"] == 8.0 and heads["sgdm:eco_sr:fp32"] == 5.0
    assert heads["sgdm:eco_sr:e4m3_rtn"] == 2.0


def test_figure_tables_report_ecosim_memory(runs):
    m, s = runs
    _, t9 = mlp_states.memory_pareto(m, s)
    sweep = t9["width_sweep"]
    for label, width, measured, formula in zip(sweep["method"], sweep["width"],
                                               sweep["bytes_measured"], sweep["bytes_formula"]):
        rows = [i for i in range(len(m["unit_seed"])) if m["unit_width"][i] == width and
                method_label(*(_unit(m, i, ("weights", "scheme", "mode")).values())) == label]
        assert rows
        assert measured == formula == m["mem_measured"][rows[0]].sum()
    _, t10 = mlp_states.adam_vs_sgdm(s)
    summ = t10["summary"]
    for v, per_param in zip(summ["variant"], summ["bytes_per_param"]):
        i = list(s["unit_variant"]).index(v)
        assert per_param == s["mem_measured"][i].sum() / s["n_params"][i]


def test_runs_train(runs):
    """fp / master / ECO runs (both optimizers) reduce the validation loss, on every seed."""
    m, s = runs
    for i in range(len(m["unit_seed"])):
        u = _unit(m, i, ("weights", "scheme", "mode"))
        if u["scheme"] == "master" or (u["scheme"] == "eco" and u["mode"] == "sr"):
            assert not m["diverged"][i]
            assert m["final_val_loss"][i] < 0.7 * m["init_val_loss"][i], u
    for i, v in enumerate(s["unit_variant"]):
        _, scheme, mode, states = parse_variant(v)
        if scheme in ("fp", "master") or (scheme == "eco" and "e4m3" not in states.get("v", "")):
            assert s["final_val_loss"][i] < 0.7 * s["init_val_loss"][i], v
    # the curves start at the stored initial weights and end at the final loss
    ok = ~m["diverged"]
    assert_array_equal(m["val_loss"][:, 0], m["init_val_loss"])
    assert_array_equal(m["val_loss"][ok, -1], m["final_val_loss"][ok])
    assert (m["step"][:, -1] == m.config.steps).all()


def test_same_seed_same_run_across_experiments(runs):
    """mlp_states' AdamW ECO+SR with FP32 states is mlp_methods' FP8 ECO+SR run, bit for bit
    (same config values, same keys): the experiments are comparable seed by seed."""
    m, s = runs
    assert s.config.width == m.config.curve_width and s.config.steps == m.config.steps
    for seed in range(s.config.seeds):
        i = [k for k in range(len(m["unit_seed"])) if m["unit_seed"][k] == seed and
             m["unit_width"][k] == m.config.curve_width and m["unit_weights"][k] == "fp8" and
             m["unit_scheme"][k] == "eco" and m["unit_mode"][k] == "sr"]
        j = [k for k in range(len(s["unit_seed"])) if s["unit_seed"][k] == seed and
             s["unit_variant"][k] == "adamw:eco_sr:fp32:fp32"]
        assert len(i) == len(j) == 1
        assert_array_equal(m["val_loss"][i[0]], s["val_loss"][j[0]])


def _parse_md_tables(text: str) -> list[list[list[str]]]:
    tables, cur = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cur.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    return tables


def test_markdown_table(runs):
    m, _ = runs
    text = mlp_methods.mlp_table_markdown(m)
    assert text == mlp_methods.mlp_table_markdown(m)  # deterministic
    tables = _parse_md_tables(text)
    assert len(tables) >= 2
    for t in tables:
        assert all(len(row) == len(t[0]) for row in t), t
        assert set("".join(t[1])) <= set("-")  # the separator row
    ours, paper = tables[0], tables[-1]
    widths = m.config.widths
    assert len(ours[0]) == 1 + len(widths)
    assert [r[0] for r in ours[2:]] == [method_label("bf16" if w == "bf16" else "fp8", s, mo)
                                        for w, s, mo in METHODS]
    num = re.compile(r"^(\d+\.\d+) ± (\d+\.\d+)(?: \(([+-]\d+\.\d+)\))?")
    for row in ours[2:]:
        for cell in row[1:]:
            hit = num.match(cell)
            assert hit or cell.startswith("diverged"), cell
    # the cell of ECO+SR at the first width is the experiment's mean over seeds
    rows = [i for i in range(len(m["unit_seed"])) if m["unit_width"][i] == widths[0]
            and m["unit_weights"][i] == "fp8" and m["unit_scheme"][i] == "eco"
            and m["unit_mode"][i] == "sr"]
    cell = dict((r[0], r[1]) for r in ours[2:])["FP8 ECO + SR"]
    assert float(num.match(cell).group(1)) == pytest.approx(
        m["final_val_loss"][rows].mean(), abs=6e-5)
    # the paper's table, with its numbers and its diverged row
    assert paper[0] == ["method", *mlp_methods.PAPER_SIZES]
    body = {r[0]: r[1:] for r in paper[2:]}
    assert body["BF16 w/ master"][0] == "3.3238" and body["FP8 ECO + SR"][-1].startswith("2.5399")
    assert body["FP8 naive + RTN"] == ["diverged"] * 6
    assert body["FP8 w/ master + SR"][-1] == "n/a"
    assert "## The shape, side by side" in text


def test_mlp_table_returns_its_markdown(runs):
    m, _ = runs
    with style.context():
        out = mlp_methods.mlp_table(m)
    assert len(out) == 3 and out[2] == mlp_methods.mlp_table_markdown(m)


def test_divergence_is_recorded_not_raised():
    """A run that blows up stops at the guard, is flagged, and leaves NaN behind it."""
    cfg = MLPMethodsConfig().smoke()
    prob = make_problem(cfg, 8)
    q = weight_quantizer("fp8", "sr")
    opt = adamw(warmup_cosine(30.0, 40), scheme="eco",
                weights={n: q for n in prob.quantized_names("matrices")})
    out = run_training(prob, opt, 40, key=0, batch_size=8, log_every=5, stop_factor=10.0)
    assert out["diverged"] and math.isnan(out["final_val_loss"])
    assert out["stopped_at"] < 40
    stop = int(np.flatnonzero(out["step"] == out["stopped_at"])[0])
    assert np.isfinite(out["val_loss"][:stop]).all()
    assert np.isnan(out["val_loss"][stop + 1:]).all()


def test_configs_are_checked():
    with pytest.raises(E.ConfigError, match="variants"):
        MLPStatesConfig(variants=("adamw:eco_sr:fp32",))
    with pytest.raises(E.ConfigError, match="variants"):
        MLPStatesConfig(variants=("sgdm:eco_xx:fp32",))
    with pytest.raises(E.ConfigError, match="curve_formats"):
        MLPMethodsConfig(curve_formats=("fp8", "fp8"))
    with pytest.raises(E.ConfigError, match="widths"):
        MLPMethodsConfig(widths=())
    assert variant_label("adamw:eco_sr:bf16_rtn:e4m3_sr") == "AdamW ECO+SR, m BF16 RTN, v E4M3 SR"
    assert variant_label("sgdm:master_sr:fp32") == "SGDM master+SR"
    assert parse_variant("adamw:fp:fp32:fp32") == ("adamw", "fp", "none",
                                                     {"m": "fp32", "v": "fp32"})
