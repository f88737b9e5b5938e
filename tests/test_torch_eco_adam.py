"""ECO's Adam approximations on torch (issue 12, part 4): ``ECOAdamW`` with scheme
``eco_momentum_exact`` and ``schedule_guard=True`` equals the NumPy optimizer bit for bit, resumes
bit-exactly, is counted by the memory accounting, and the guard bounds the tiny-lr warm-up
hazard on a small torch model.

CPU, float32. Every parity comparison is exact (``torch.equal``), as in test_torch_optim.
"""

import io
import math

import pytest

torch = pytest.importorskip("torch")

import ecosim  # noqa: E402
import ecosim.torch as et  # noqa: E402
from ecosim.memory import bytes_per_param  # noqa: E402
from ecosim.optim import WarmupCosine, adamw, schedule_guard_lr  # noqa: E402
from ecosim.torch import store_weights  # noqa: E402
from ecosim.torch.memory import measured_memory  # noqa: E402
from ecosim.torch.nn import QuantizedLinear  # noqa: E402
from ecosim.torch.optim import ECOAdamW  # noqa: E402
from torch_parity import linear_model, random_problem, step_both  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KEY = 7
SHAPES = {"a.weight": (8, 16), "b.weight": (4, 8)}
HP = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)


def _schedule(init_frac=0.01):
    """10 of 12 warmup-cosine steps: a rising warmup (3 steps) and a cosine; lr(0) = 0 with
    ``init_frac=0`` (eco_momentum_exact's error stays pending over that step)."""
    return WarmupCosine(1e-2, 12, warmup_frac=0.25, init_frac=init_frac)


def _problem(steps=10, seed=3):
    return random_problem(SHAPES, steps, seed)


def _torch_side(P, storage, mode, lr=1e-2, **kw):
    """``(optimizer, name -> slot)``: float32 parameters, or codes held by QuantizedLinear."""
    qt = et.Quantizer("e4m3", mode, granularity="row")
    model = linear_model(P)
    if storage == "codes":
        store_weights(model, qt, key=KEY)
        opt = ECOAdamW(model.named_parameters(), lr, key=KEY, **HP, **kw)
    else:
        opt = ECOAdamW(model.named_parameters(), lr, weights=qt, key=KEY, **HP, **kw)
    return opt, model


def _weights(model):
    out = {}
    for k in SHAPES:
        mod = getattr(model, k.split(".")[0])
        out[k] = mod.read() if isinstance(mod, QuantizedLinear) else mod.weight.detach()
    return out


def _check(opt, model, w, s):
    got = _weights(model)
    for k in SHAPES:
        assert torch.equal(got[k], torch.from_numpy(w[k])), k
        for b in ("m", "v", "e_prev"):
            ref = getattr(s, b)
            if ref is not None:
                assert torch.equal(opt.state_values(k, b), torch.from_numpy(ref[k])), (k, b)


CASES = [("eco_momentum_exact", {}, 0.01), ("eco_momentum_exact", {}, 0.0),
         ("eco", dict(schedule_guard=True), 0.01),
         ("eco", dict(schedule_guard=True, wd_corrected_injection=True), 0.01),
         ("eco_wd", dict(schedule_guard=True), 0.0)]


@pytest.mark.parametrize("storage", ["params", "codes"])
@pytest.mark.parametrize("mode", ["rtn", "sr"])
@pytest.mark.parametrize("scheme,kw,init_frac", CASES)
def test_parity_with_numpy_under_a_schedule(scheme, kw, init_frac, mode, storage):
    """10 steps of a warmup-cosine schedule driven by torch's LambdaLR (base lr 1, so the
    documented rule ``lr_schedule = base_lr * lr_lambda`` is the schedule itself); weights, m,
    v and e_prev equal NumPy's at every step, and so does the pending flag."""
    sched = _schedule(init_frac)
    P, G = _problem()
    qn = ecosim.Quantizer("e4m3", mode, granularity="row")
    no = adamw(sched, 0.9, 0.999, 1e-8, 0.1, scheme=scheme, weights=qn, **kw)
    w, s = no.init(P, key=KEY)
    guard = kw.get("schedule_guard", False)
    opt, model = _torch_side(P, storage, mode, lr=1.0, scheme=scheme,
                             lr_schedule=sched if guard else None, **kw)
    lam = torch.optim.lr_scheduler.LambdaLR(opt, sched)
    _check(opt, model, w, s)
    slots = dict(model.named_parameters())
    for t in range(10):
        w, s = step_both(no, w, s, opt, slots, G[t])
        lam.step()
        _check(opt, model, w, s)
        if scheme == "eco_momentum_exact":
            assert all(opt.state[p]["pending"] == s.pending for p in slots.values())
    assert not s.pending  # the pending error was handed to the momentum


def test_guard_changes_eco_under_the_warmup_and_not_at_constant_lr():
    """The parity above is not vacuous: the guard moves the weights during a warmup; at a
    constant rate it is ECO bit for bit (L(t) = lr(t) returned as is)."""
    P, G = _problem()

    def run(guard, sched):
        opt, model = _torch_side(P, "params", "sr", scheme="eco", schedule_guard=guard,
                                 lr_schedule=sched)
        slots = dict(model.named_parameters())
        for t in range(6):
            for g in opt.param_groups:
                g["lr"] = sched(t)
            for k in SHAPES:
                slots[k].grad = torch.from_numpy(G[t][k].copy())
            opt.step()
        return _weights(model)

    warm, const = _schedule(), (lambda t: 1e-2)
    assert any(not torch.equal(a, b) for a, b in zip(run(False, warm).values(),
                                                     run(True, warm).values()))
    assert all(torch.equal(a, b) for a, b in zip(run(False, const).values(),
                                                 run(True, const).values()))
    assert schedule_guard_lr(1e-2, const, 3, 0.9) == 1e-2


@pytest.mark.parametrize("scheme,kw,split", [
    ("eco_momentum_exact", {}, 1),  # saved while the error is pending (lr(0) = 0)
    ("eco_momentum_exact", {}, 5),
    ("eco", dict(schedule_guard=True), 5)])
def test_state_dict_resume_is_bit_exact(scheme, kw, split):
    sched = _schedule(0.0)
    P, G = _problem()

    def build(key):
        opt, model = _torch_side(P, "codes", "sr", scheme=scheme,
                                 lr_schedule=sched if kw else None, **kw)
        opt.param_groups[0]["key"] = key  # the checkpoint's key must win
        return opt, model

    def steps(opt, model, ts):
        slots = dict(model.named_parameters())
        for t in ts:
            opt.param_groups[0]["lr"] = sched(t)
            for k in SHAPES:
                slots[k].grad = torch.from_numpy(G[t][k].copy())
            opt.step()

    ref, ref_m = build(KEY)
    steps(ref, ref_m, range(10))
    a, a_m = build(KEY)
    steps(a, a_m, range(split))
    buf = io.BytesIO()
    torch.save({"opt": a.state_dict(), "model": a_m.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf)  # weights_only: the pending flag is a plain bool
    if scheme == "eco_momentum_exact":
        assert all(st["pending"] == (split == 1) for st in saved["opt"]["state"].values())
    b, b_m = build(999)
    b_m.load_state_dict(saved["model"])
    with pytest.warns(UserWarning, match="SR key .* replaces this optimizer's key 999"):
        b.load_state_dict(saved["opt"])
    steps(b, b_m, range(split, 10))
    for k, v in _weights(ref_m).items():
        assert torch.equal(_weights(b_m)[k], v), k
        for buf_name in ("m", "v", "e_prev"):
            if buf_name in ref.state[ref._param_of(k)]:
                assert torch.equal(b.state_values(k, buf_name), ref.state_values(k, buf_name))


def test_bad_arguments():
    P, _ = _problem(1)
    with pytest.raises(ValueError, match="needs the later learning rates"):
        _torch_side(P, "params", "sr", scheme="eco", schedule_guard=True)
    with pytest.raises(ValueError, match="injecting scheme"):
        _torch_side(P, "params", "sr", scheme="eco_momentum_exact", schedule_guard=True,
                    lr_schedule=lambda t: 1e-2)
    with pytest.raises(TypeError, match="lr_schedule must be"):
        _torch_side(P, "params", "sr", scheme="eco", schedule_guard=True, lr_schedule=1e-2)
    with pytest.raises(TypeError, match="schedule_guard"):
        _torch_side(P, "params", "sr", scheme="eco", schedule_guard=1, lr_schedule=_schedule())
    # a group lr the schedule does not give (a scheduler that cannot be looked ahead, or one
    # out of step): refused before anything is written
    opt, model = _torch_side(P, "params", "sr", scheme="eco", schedule_guard=True,
                             lr_schedule=lambda t: 5e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    before = {k: v.clone() for k, v in _weights(model).items()}
    with pytest.raises(ValueError, match=r"lr_schedule\(0\) = 0.005"):
        opt.step()
    assert all(torch.equal(before[k], v) for k, v in _weights(model).items())
    opt2, _ = _torch_side(P, "params", "sr", scheme="eco", schedule_guard=True,
                          lr_schedule=[lambda t: 1e-2, lambda t: 1e-2])
    with pytest.raises(ValueError, match="one per group"):
        opt2.step()


def test_memory_counts_e_prev():
    """eco_momentum_exact keeps a float32 e_prev: 4 bytes per parameter more than ECO, in the
    formula (ecosim.memory) and in what the optimizer holds (measured_memory)."""
    q = et.Quantizer("e4m3", "sr", granularity="row")
    formula = bytes_per_param("adamw", "eco_momentum_exact", block=256)
    assert formula.e_prev == 4 and formula.total == bytes_per_param("adamw", "eco",
                                                                    block=256).total + 4
    net = torch.nn.Sequential(torch.nn.Linear(256, 128, bias=False))
    store_weights(net, q)
    per = measured_memory(net, ECOAdamW(net.parameters(), 1e-3,
                                        scheme="eco_momentum_exact")).per_param()
    assert per["e_prev"] == 4 and per["m"] + per["v"] == 8
    assert per["total"] - 4 / (256 * 128) == formula.total  # the slot's one float32 element


# -- the tiny-lr warm-up hazard ---------------------------------------------------------------

PEAK, TINY_STEPS, STEPS = 1e-2, 8, 16
B1, B2 = 0.9, 0.999


def _hazard_run(scheme, guard):
    """A 2-layer ReLU MLP (64 -> 256 -> 10, no biases, 18,944 weights), FP8 E4M3 row-wise SR,
    8 steps at 1e-3 x the peak lr then 8 at the peak (torch's LambdaLR); returns
    ``(max |W_0| before the initial write, the largest max |W| over the 16 steps)``."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 64, generator=g), torch.randint(0, 10, (256,), generator=g)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256, bias=False), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10, bias=False))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    m0 = max(float(p.detach().abs().max()) for p in net.parameters())
    factor = lambda t: 1e-3 if t < TINY_STEPS else 1.0  # noqa: E731
    opt = ECOAdamW(net.named_parameters(), PEAK, (B1, B2), scheme=scheme, key=0,
                   weights=et.Quantizer("e4m3", "sr", granularity="row"), schedule_guard=guard,
                   lr_schedule=(lambda t: PEAK * factor(t)) if guard else None)
    lam = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    largest = 0.0
    for t in range(STEPS):
        opt.zero_grad()
        batch = slice(32 * (t % 8), 32 * (t % 8) + 32)
        torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
        opt.step()
        lam.step()
        largest = max(largest, max(float(p.detach().abs().max()) for p in net.parameters()))
    return m0, largest


def _adam_ratio(n):
    """R_n >= |m_hat / sqrt(v_hat)| at step n for any gradients (Cauchy-Schwarz on
    m = (1-b1) sum b1^k g, v = (1-b2) sum b2^k g^2, bias-corrected)."""
    s = sum((B1 * B1 / B2) ** k for k in range(n))
    return (1 - B1) / (1 - B1**n) * math.sqrt((1 - B2**n) / (1 - B2)) * math.sqrt(s)


def _bounds(m0, lrs):
    """Bounds on max|W| of master (``m0 + P``) and of guarded ECO (``C``) after ``lrs``.

    Per element, with ``u_t = (lr_t / bc1_t) m_t / d_t`` the update and ``e_s`` the error of
    write ``s``, ``W_T = W_0 - sum_t u_t - sum_s e_s``. Split ``m`` into the gradients' Adam
    momentum and the injections ``k_s``: the first part moves W by at most
    ``P = sum_t lr_t R_{t+1}`` (:func:`_adam_ratio`; d >= sqrt(v_hat)); injection ``s`` gives
    back ``G_s e_s`` over the later steps, so ``W_T = W_0 - (gradient part) - sum_s (1 - G_s)
    e_s``. With the guard, ``G_s = ((1-b1)/b1)(bc1_s / L_s) sum_j b1^j lr_{s+j} (d_s / d_{s+j})
    / bc1_{s+j}`` and ``L_s`` the b1-weighted mean of those rates, so ``0 <= G_s <= A_s``:
    ``bc1`` only grows, and ``d_s / d_t <= A_s = max_t sqrt(bc2_t / (b2^(t-s) bc2_s))`` since
    ``v_t >= b2^(t-s) v_s`` (eps only helps). Hence ``|1 - G_s| <= c_s = max(1, A_s - 1)``.
    SR's error is below the grid spacing, at most 32 codes' scale on E4M3's top binade:
    ``absmax / 14`` (448 = 14 * 32), and the absmax of write ``s`` is at most ``C_s``. So
    ``C_t = m0 + P_t + sum_{s<t} c_s C_s / 14`` bounds every ``|theta_tilde_t|``, and the
    stored weights, rounded within the row's absmax, too. Unguarded, ``G_s`` carries
    ``lr_peak / lr_tiny = 1000`` more for an error made at the tiny rate: no such bound."""
    T = len(lrs)

    def bc2(n):
        return 1 - B2**n

    p, c = 0.0, []
    for t in range(T):
        p += lrs[t] * _adam_ratio(t + 1)
        a = [max([math.sqrt(bc2(u + 1) / (B2 ** (u - s) * bc2(s + 1))) for u in range(s + 1, T)]
                 or [1.0]) for s in range(t)]
        c.append(m0 + p + sum(max(1.0, a[s] - 1.0) * c[s] / 14 for s in range(t)))
    return m0 + p, c[-1]


def test_schedule_guard_bounds_the_tiny_lr_warmup_hazard():
    lrs = [PEAK * (1e-3 if t < TINY_STEPS else 1.0) for t in range(STEPS)]
    m0, master = _hazard_run("master", False)
    master_bound, guard_bound = _bounds(m0, lrs)
    assert guard_bound < 4 * m0  # (3.6 m0 + 0.3 here: a bound that can be broken)
    _, eco = _hazard_run("eco", False)
    _, guarded = _hazard_run("eco", True)
    assert master <= master_bound
    assert guarded <= guard_bound
    assert eco > guard_bound  # the hazard breaks the bound the guard guarantees
