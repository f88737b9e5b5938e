"""Per-step diagnostics of the torch optimizers (``ECOSGD``/``ECOAdamW(diagnostics=True)``).

The stalling test uses a least-squares problem trained with AdamW at lr 1e-2 on row-wise E4M3
weights for 100 steps. AdamW's update is about ``lr`` whatever the gradient's size, while
E4M3's half grid step is 2^-4 of a weight's magnitude: under round-to-nearest, naive never
moves a weight with ``|w| > ~0.16`` (its update rounds away every step), ECO carries the
rounding error in the momentum until it crosses the grid, and stochastic rounding moves
every weight with a nonzero update with some probability. Measured: never-changed 0.357
(naive RTN), 0.025 (ECO RTN), 0.014 (both SR); the asserted thresholds leave wide margins.
"""

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ecosim  # noqa: E402
import ecosim.torch as et  # noqa: E402
from ecosim.optim import adamw, sgdm  # noqa: E402
from ecosim.torch import store_weights  # noqa: E402
from ecosim.torch.optim import ECOAdamW, ECOSGD  # noqa: E402

KEY = 3


def _regression(scheme, mode, steps, diagnostics=True, lr=1e-2):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(256, 32, generator=g)
    Y = X @ torch.randn(32, 16, generator=g)
    W = torch.nn.Parameter(torch.randn(32, 16, generator=torch.Generator().manual_seed(1)) * 0.5)
    opt = ECOAdamW([("W", W)], lr, scheme=scheme, key=KEY, diagnostics=diagnostics,
                   weights=et.Quantizer("e4m3", mode, granularity="row"))
    for _ in range(steps):
        opt.zero_grad()
        ((X @ W - Y) ** 2).mean().backward()
        opt.step()
    return W.detach().clone(), opt


def test_rtn_stalls_naive_more_than_eco_and_sr_moves_nearly_everything():
    never = {(s, m): _regression(s, m, 100)[1].diagnostics()["never_changed_frac"]
             for s in ("naive", "eco") for m in ("rtn", "sr")}
    assert never[("naive", "rtn")] > 0.25
    assert never[("naive", "rtn")] > never[("eco", "rtn")] + 0.2
    assert never[("eco", "rtn")] < 0.1
    assert never[("naive", "sr")] < 0.05 and never[("eco", "sr")] < 0.05


def test_never_changed_mask_is_consistent():
    _, opt = _regression("naive", "rtn", 20)
    mask = opt.never_changed("W")
    d = opt.diagnostics()
    assert mask.dtype == torch.bool and mask.numel() == 32 * 16
    assert d["never_changed_frac"] == int(mask.sum()) / mask.numel()
    assert d["params"]["W"]["never_changed_frac"] == d["never_changed_frac"]
    assert d["step"] == 19


@pytest.mark.parametrize("cls", [ECOSGD, ECOAdamW])
@pytest.mark.parametrize("scheme,mode,states", [
    ("eco", "rtn", None), ("eco", "sr", {"m": "bf16"}), ("naive", "rtn", None),
    ("master", "sr", None), ("kahan", "rtn", None), ("eco_exact", "rtn", None)])
def test_diagnostics_change_no_result(cls, scheme, mode, states):
    rs = np.random.default_rng(4)
    P = {"a": rs.standard_normal((8, 16)).astype(np.float32),
         "b": rs.standard_normal((16,)).astype(np.float32)}
    G = [{k: rs.standard_normal(v.shape).astype(np.float32) for k, v in P.items()}
         for _ in range(6)]
    runs = []
    for diag in (False, True):
        tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
        q = et.Quantizer("e4m3", mode, granularity="row")
        opt = cls(tp, 0.05, scheme=scheme, weights={"a": q, "b": None}, key=KEY,
                  states=states, diagnostics=diag)
        for grads in G:
            for k, p in tp:
                p.grad = torch.from_numpy(grads[k].copy())
            opt.step()
        runs.append((tp, opt))
    (tp0, o0), (tp1, o1) = runs
    assert o0.diagnostics() is None and o1.diagnostics() is not None
    assert set(o1.diagnostics()["params"]) == {"a"}  # the full-precision one is left out
    for (k, p0), (_, p1) in zip(tp0, tp1):
        assert torch.equal(p0.detach(), p1.detach()), k
        assert torch.equal(o0.state_values(p0, "m"), o1.state_values(p1, "m")), k


def test_changed_frac_is_the_hand_diff_of_stored_codes():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.Linear(40, 8))
    q = et.Quantizer("e4m3", "rtn", granularity="row")
    store_weights(model, q, key=KEY)
    named = list(model.named_parameters())
    opt = ECOAdamW(named, 3e-3, scheme="eco", diagnostics=True)
    layers = {m.name: m for m in model.modules() if hasattr(m, "codes")}
    assert len(layers) == 2
    x = torch.randn(64, 24)
    seen_partial = False
    for _ in range(5):
        before = {n: lay.codes.clone() for n, lay in layers.items()}
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        d = opt.diagnostics()
        total = n_all = 0
        for n, lay in layers.items():
            diff = int((lay.codes.view(torch.uint8) != before[n].view(torch.uint8)).sum())
            assert d["params"][n]["changed_frac"] == diff / lay.codes.numel()
            total, n_all = total + diff, n_all + lay.codes.numel()
            seen_partial |= 0 < diff < lay.codes.numel()
        assert d["changed_frac"] == total / n_all
    assert seen_partial  # the comparison saw codes both changing and staying


def test_changed_frac_of_a_plain_parameter_with_a_fixed_grid():
    q = et.Quantizer("int8", "rtn", scale=2.0**-6)
    rs = np.random.default_rng(1)
    p = torch.nn.Parameter(torch.from_numpy(rs.standard_normal((10, 12)).astype(np.float32)))
    opt = ECOSGD([p], 0.1, 0.5, scheme="naive", weights=q, diagnostics=True)
    for _ in range(4):
        before = torch.round(p.detach() / 2.0**-6)  # the int8 codes, by hand
        p.grad = torch.from_numpy(rs.standard_normal((10, 12)).astype(np.float32))
        opt.step()
        diff = int((torch.round(p.detach() / 2.0**-6) != before).sum())
        assert 0 < diff < 120
        assert opt.diagnostics()["changed_frac"] == diff / 120


@pytest.mark.parametrize("kind,states", [("adamw", None), ("sgd", None),
                                         ("adamw", {"m": ("bf16", "sr")}),
                                         ("sgd", {"m": "e4m3"})])
def test_inject_kept_mirrors_numpy(kind, states):
    rs = np.random.default_rng(2)
    P = {"w1": rs.standard_normal((8, 16)).astype(np.float32),
         "w2": rs.standard_normal((4, 5)).astype(np.float32) * 0.1}
    G = [{k: rs.standard_normal(v.shape).astype(np.float32) for k, v in P.items()}
         for _ in range(5)]
    cfg = dict(fmt="e4m3", mode="rtn", granularity="row")
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    if kind == "sgd":
        no = sgdm(0.05, 0.9, scheme="eco", weights=ecosim.Quantizer(**cfg), states=states)
        to = ECOSGD(tp, 0.05, 0.9, scheme="eco", weights=et.Quantizer(**cfg), key=KEY,
                    states=states, diagnostics=True, heavy_ball=False)
    else:
        no = adamw(1e-2, scheme="eco", weights=ecosim.Quantizer(**cfg), states=states)
        to = ECOAdamW(tp, 1e-2, scheme="eco", weights=et.Quantizer(**cfg), key=KEY,
                      states=states, diagnostics=True)
    w, s = no.init(P, key=KEY)
    for grads in G:
        w, s, nd = no.step(w, grads, s, diagnostics=True)
        for k, p in tp:
            p.grad = torch.from_numpy(grads[k].copy())
        to.step()
        td = to.diagnostics()
        # (NumPy's changed_frac compares values, which a moving row scale changes all of;
        # the torch diagnostic compares codes, so they differ by design)
        for key in ("inject_kept", "inject_lost"):
            assert math.isclose(td[key], nd[key], rel_tol=1e-12, abs_tol=0), key
        if states is None:
            assert math.isclose(td["inject_kept"], 1.0, rel_tol=1e-6)
    if states is not None:
        assert td["inject_kept"] != 1.0  # a low-precision momentum swallows part of it


def test_m_over_g_and_no_injection():
    p = torch.nn.Parameter(torch.ones(3, 4))
    opt = ECOSGD([p], 0.1, 0.5, scheme="naive", weights=et.Quantizer("int8", scale=2.0**-4),
                 diagnostics=True, heavy_ball=False)
    p.grad = torch.full((3, 4), 2.0)
    opt.step()
    d = opt.diagnostics()
    assert d["m_over_g"] == 0.5  # m = (1 - 0.5) g
    assert math.isnan(d["inject_kept"]) and math.isnan(d["inject_lost"])
    with pytest.raises(KeyError):
        ECOSGD([torch.nn.Parameter(torch.ones(2))], 0.1, weights=et.Quantizer("int8", scale=1.0),
               scheme="naive").never_changed("0")


def test_lm_cli_logs_and_records_diagnostics_without_changing_the_run(corpus, tmp_path, capsys):
    from ecosim.torch import lm
    res = tmp_path / "r.jsonl"
    args = ["--preset", "tiny", "--method", "fp8_eco_rtn", "--steps", "4", "--batch", "2",
            "--seq", "32", "--data", corpus, "--eval-every", "4", "--eval-batches", "1",
            "--log-every", "2", "--results", str(res)]
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert lm.main(args + ["--quiet"]) == 0
        assert lm.main(args + ["--diagnostics"]) == 0
    finally:
        torch.set_num_threads(n)
    out = capsys.readouterr().out
    assert "never changed" in out and "inject kept" in out
    off, on = (json.loads(line) for line in res.read_text().splitlines())
    assert off["diagnostics"] is None
    assert [d["step"] for d in on["diagnostics"]] == [2, 4]
    for d in on["diagnostics"]:
        assert 0 < d["changed_frac"] <= 1 and 0 <= d["never_changed_frac"] < 1
        assert d["m_over_g"] > 0 and d["inject_kept"] == pytest.approx(1.0, rel=1e-6)
    assert on["diagnostics"][1]["never_changed_frac"] <= on["diagnostics"][0]["never_changed_frac"]
    assert on["curve"] == off["curve"] and on["final_train_loss"] == off["final_train_loss"]
