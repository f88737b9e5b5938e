"""The language-model runner (ecosim.torch.lm): presets, data, every Table 1 method, resume,
the results record and input checks.

Every run here is the ``tiny`` preset on a ~400 kB slice of the standard library's sources,
on the CPU with one thread, so that the whole file stays cheap enough for the default run.
"""

import hashlib
import json
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from ecosim.optim import WarmupCosine  # noqa: E402
from ecosim.torch import data as lmdata  # noqa: E402
from ecosim.torch import lm  # noqa: E402
from ecosim.experiments.lm import run_setting  # noqa: E402
from ecosim.torch import store_weights  # noqa: E402
from ecosim.torch.nn import QuantizedLinear  # noqa: E402
from ecosim.torch.model import (PRESETS, ModelConfig, Transformer, ffn_dim,  # noqa: E402
                                param_counts, quantized_names)
from lm_checks import assert_same_checkpoint  # noqa: E402

PAPER = {"30m": 30e6, "50m": 50e6, "100m": 100e6, "200m": 200e6, "430m": 430e6, "800m": 800e6}
STEPS = 40


def _cfg(corpus, **kw):
    base = dict(preset="tiny", steps=STEPS, batch=8, data=corpus, eval_every=20,
                eval_batches=2, quiet=True)
    return lm.LMConfig(**{**base, **kw})


# -- presets and model ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(PAPER))
def test_paper_presets_shapes_and_counts(name):
    m = PRESETS[name].model
    c = param_counts(name)  # built on the meta device: nothing allocated
    assert m.head_dim == 128
    assert m.d_ff == ffn_dim(m.d_model) and m.d_ff % 64 == 0
    assert abs(m.d_ff - 8 * m.d_model / 3) < 64
    assert c["quantized"] == m.n_layers * (4 * m.d_model**2 + 3 * m.d_model * m.d_ff)
    assert c["non_embedding"] == c["quantized"] + (2 * m.n_layers + 1) * m.d_model  # + norms
    assert c["embedding"] == 2 * 256 * m.d_model  # untied embedding and head, byte vocab
    # The preset names count non-embedding parameters: within 1.5% (d_ff rounding).
    assert abs(c["non_embedding"] / PAPER[name] - 1) < 0.015


def test_paper_lrs():
    assert {k: PRESETS[k].lr for k in PAPER} == {"30m": 1.2e-3, "50m": 1.2e-3, "100m": 6e-4,
                                                 "200m": 3e-4, "430m": 1.5e-4, "800m": 7.5e-5}


def test_cpu_presets_are_small():
    # micro (make figures' Table 1 protocol): 2 blocks of 4 d^2 + 3 d d_ff weights, d = 32,
    # d_ff = 128, plus 5 norm gains of 32: its 650 steps of 16 x 64 bytes are 20.2 tokens per
    # non-embedding parameter
    assert param_counts("micro")["non_embedding"] == 2 * (4 * 32**2 + 3 * 32 * 128) + 5 * 32
    assert param_counts("micro")["non_embedding"] == 32_928
    assert param_counts("tiny")["total"] < 200_000
    assert 1e6 < param_counts("small")["total"] < 5e6


def test_model_forward_and_quantized_layers():
    cfg = ModelConfig(64, 2, 2)
    m = Transformer(cfg, torch.Generator().manual_seed(0))
    x = torch.randint(0, 256, (3, 10), generator=torch.Generator().manual_seed(1))
    assert m(x).shape == (3, 10, 256)
    assert abs(m(x, x).item() - math.log(256)) < 0.3  # small init: near-uniform predictions
    q = quantized_names(m)
    assert len(q) == 7 * cfg.n_layers
    assert all(torch.is_tensor(p) for p in m.parameters())
    assert not any(n.startswith(("embed", "head", "norm")) or "norm" in n for n in q)
    # No biases anywhere; causal: the logits at t do not depend on tokens after t.
    assert all(n.endswith("weight") for n, _ in m.named_parameters())
    y = x.clone()
    y[:, 5:] = 0
    assert torch.equal(m(x)[:, :5], m(y)[:, :5])


def test_the_run_schedule():
    f = [lm.LMConfig(steps=100).schedule(s) for s in range(100)]
    assert f[:10] == [(s + 1) / 10 for s in range(10)]
    assert max(f) == 1.0 and all(0.1 <= v <= 1.0 for v in f)
    assert all(a >= b for a, b in zip(f[9:], f[10:]))  # monotone cosine after warmup
    assert f[10] == 1.0 and f[99] == 0.1  # cosine from the peak to 0.1x, exact at both ends
    assert lm.LMConfig(steps=100).schedule(150) == f[99]


def _scalar_warmup_cosine(step, steps, warmup, final):
    """The language-model runs' schedule as a scalar loop computes it (the rule their records
    were trained with): warmup (step + 1) / n, then final + (1 - final) (1 + cos(pi p)) / 2."""
    n = round(warmup * steps)
    if step < n:
        return (step + 1) / n
    progress = min(1.0, (step - n) / max(1, steps - n - 1))
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


@pytest.mark.parametrize("steps", [2, 8, 40, 100, 1000, 4801])
@pytest.mark.parametrize("warmup, final", [(0.1, 0.1), (0.0, 0.1), (0.1, 0.0), (0.25, 0.05),
                                           (0.1, 1 / 3)])
def test_the_run_schedule_is_the_scalar_rule_bit_for_bit(steps, warmup, final):
    """LambdaLR multiplies lr by the one WarmupCosine object: the same floats as the scalar
    rule, at every step and past the end. Negative control: the NumPy experiments' warmup
    (``warmup_offset=0``, from ``init_frac``) differs during the warmup."""
    cfg = lm.LMConfig(steps=steps, warmup=warmup, final_lr=final)
    sched, ts = cfg.schedule, range(steps + 3)
    assert [sched(t) for t in ts] == [_scalar_warmup_cosine(t, steps, warmup, final) for t in ts]
    if round(warmup * steps) > 1:
        other = WarmupCosine(1.0, steps, warmup_frac=warmup, init_frac=0.0, final_frac=final)
        assert other(0) != sched(0)


# -- data ----------------------------------------------------------------------------------------

def test_split_and_batches_are_deterministic(corpus):
    c1 = lmdata.load_corpus(corpus)
    assert lmdata.load_corpus(corpus) is c1  # cached in memory, read once
    assert c1.tokens.dtype == torch.uint8 and c1.nbytes > 400_000
    tr, va = lmdata.split(c1.tokens)
    tr2, va2 = lmdata.split(c1.tokens.clone())
    assert torch.equal(tr, tr2) and torch.equal(va, va2)
    assert tr.numel() + va.numel() == c1.nbytes
    # Every 20th 4096-byte block is validation.
    blk = lmdata.SPLIT_BLOCK
    assert torch.equal(va[:blk], c1.tokens[19 * blk:20 * blk])
    x1, y1 = lmdata.get_batch(tr, 4, 32, key=5)
    x2, y2 = lmdata.get_batch(tr, 4, 32, key=5)
    x3, _ = lmdata.get_batch(tr, 4, 32, key=6)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    assert torch.equal(x1[:, 1:], y1[:, :-1]) and x1.dtype == torch.int64


def test_corpus_fingerprint_and_files(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.txt").write_bytes(b"zz")
    (tmp_path / "a.txt").write_bytes(b"aa")
    (tmp_path / ".hidden").write_bytes(b"no")
    files = lmdata.corpus_files(tmp_path)
    assert [f.name for f in files] == ["a.txt", "z.txt"]
    c = lmdata.load_corpus(tmp_path)
    fp = c.fingerprint()
    assert fp["files"] == 2 and fp["bytes"] == 4
    assert fp["sha256"] == hashlib.sha256(b"aazz").hexdigest()  # the concatenation, in order
    with pytest.raises(FileNotFoundError, match="does not exist"):
        lmdata.load_corpus(tmp_path / "missing")
    with pytest.raises(ValueError, match="no files ending in .py"):
        lmdata.corpus_files(tmp_path, (".py",))


# -- every method trains ---------------------------------------------------------------------------

# ECO's variants for AdamW (fp8_ecomx_*, fp8_ecowd_*, fp8_ecoguard_*) with one rounding each:
# the other differs only in the quantizer's mode, which every Table 1 pair covers
RUN_METHODS = [m for m in lm.METHODS
               if m not in ("fp8_ecomx_rtn", "fp8_ecowd_sr", "fp8_ecoguard_rtn")]


@pytest.fixture(scope="module")
def runs(corpus):
    """One short run per method (shared by the assertions below)."""
    return {m: lm.train(_cfg(corpus, method=m)) for m in RUN_METHODS}


@pytest.mark.parametrize("method", RUN_METHODS)
def test_every_method_runs(runs, method):
    r = runs[method]
    if method != "fp8_naive_rtn":  # the paper's naive+RTN diverges; the others must not
        assert not r["diverged"]
    if not r["diverged"]:
        assert r["steps_done"] == STEPS
        assert math.isfinite(r["final_train_loss"]) and math.isfinite(r["val_loss"])


@pytest.mark.parametrize("method", ["fp32", "bf16_master", "fp8_master_rtn", "fp8_master_sr",
                                    "fp8_eco_rtn", "fp8_eco_sr"])
def test_loss_falls(runs, method):
    r = runs[method]
    first = r["curve"][0][1]
    # Step 1 sees the near-uniform initial model: loss ~ ln 256 = 5.55 nats. The byte
    # unigram entropy of this corpus is about 3.1 nats, so a model that has merely learned byte
    # frequencies is 2.4 nats lower; 40 steps of these methods reach ~3.0-3.3 on the CPU
    # (fp32 and master ~3.0, ECO ~3.1). A 1.5-nat drop leaves ~0.8 nat of slack and
    # still fails a run that only learns part of the unigram statistics.
    assert first > 5.3
    assert r["final_train_loss"] < first - 1.5
    assert r["val_loss"] < first - 1.5


# -- resume --------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["fp8_eco_sr", "fp8_master_rtn", "fp8_ecomx_sr"])
def test_resume_is_bit_exact(corpus, tmp_path, method):
    kw = dict(method=method, steps=12, eval_every=4, log_every=1)
    full = lm.train(_cfg(corpus, out=str(tmp_path / "full"), **kw))
    half = lm.train(_cfg(corpus, out=str(tmp_path / "half"), stop_after=6, **kw))
    assert half == {"finished": False, "step": 6,
                    "checkpoint": str(tmp_path / "half" / lm.CHECKPOINT)}
    with pytest.raises(FileExistsError, match="--resume"):
        lm.train(_cfg(corpus, out=str(tmp_path / "half"), **kw))
    rest = lm.train(_cfg(corpus, out=str(tmp_path / "half"), resume=True, **kw))
    assert rest["curve"] == full["curve"]
    assert rest["final_train_loss"] == full["final_train_loss"]
    assert rest["segments"] == 2 and full["segments"] == 1
    assert_same_checkpoint(tmp_path / "full" / lm.CHECKPOINT, tmp_path / "half" / lm.CHECKPOINT)
    # Resuming a finished run returns its record and trains nothing.
    again = lm.train(_cfg(corpus, out=str(tmp_path / "half"), resume=True, **kw))
    assert again == rest


@pytest.mark.parametrize("method", ["fp8_eco_sr", "fp8_naive_rtn", "fp8_master_rtn",
                                    "fp8_master_sr"])
def test_code_storage_equals_fp32_parameters(corpus, tmp_path, method):
    """Weights held as FP8 codes + row scales train exactly as dequantized FP32 parameters:
    same losses, and the parameters of the "param" run are the decoded codes, bit for bit."""
    kw = dict(method=method, steps=8, eval_every=4, log_every=1)
    a = lm.train(_cfg(corpus, storage="codes", out=str(tmp_path / "c"), **kw))
    b = lm.train(_cfg(corpus, storage="param", out=str(tmp_path / "p"), **kw))
    assert a["curve"] == b["curve"] and a["val_loss"] == b["val_loss"]
    assert a["bytes_per_param"]["measured"] == b["bytes_per_param"]["measured"]
    if "master" in method:  # codes (1) + master (4) + m, v (8) against FP32 values (4) + 12
        assert a["bytes_per_param"]["held"] < 13.1 < 16 < b["bytes_per_param"]["held"]
    else:
        assert a["bytes_per_param"]["held"] < 9.1 < 12 < b["bytes_per_param"]["held"]
    ca = torch.load(tmp_path / "c" / lm.CHECKPOINT, weights_only=True)["model"]
    pb = torch.load(tmp_path / "p" / lm.CHECKPOINT, weights_only=True)["model"]
    model = Transformer(PRESETS["tiny"].model)
    qn = set(quantized_names(model))
    store_weights(model, lm.METHODS[method].quantizer(),
                  predicate=lambda name, mod: name + ".weight" in qn)
    model.load_state_dict(ca)
    n = 0
    for name, mod in model.named_modules():
        if isinstance(mod, QuantizedLinear):
            assert mod.codes.dtype == torch.uint8 and mod.encoded().codes.dtype == \
                torch.float8_e4m3fn
            assert torch.equal(mod.read(), pb[name + ".weight"]), name
            n += 1
    assert n == 7 * PRESETS["tiny"].model.n_layers


def test_resume_refuses_another_run(corpus, tmp_path):
    lm.train(_cfg(corpus, steps=4, out=str(tmp_path), stop_after=2))
    with pytest.raises(ValueError, match="different run.*lr"):
        lm.train(_cfg(corpus, steps=4, out=str(tmp_path), resume=True, lr=1e-3))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        lm.train(_cfg(corpus, steps=4, out=str(tmp_path / "none"), resume=True))


# -- the record ----------------------------------------------------------------------------------

RECORD_KEYS = {
    "preset", "method", "scheme", "weights", "model", "n_params", "steps", "steps_done",
    "batch", "seq", "grad_accum", "world_size", "global_batch", "lr", "seed", "schedule",
    "betas", "eps", "weight_decay", "clip", "tokens", "final_train_loss", "val_loss",
    "diverged", "diverged_at_step", "curve", "bytes_per_param", "peak_memory_bytes",
    "peak_memory_kind", "tokens_per_s", "wall_s", "train_s", "eval_s", "segments", "storage",
    "fsdp", "device", "device_name", "torch", "python", "threads", "corpus", "split",
    "eval_every", "eval_batches", "diverge_loss", "diagnostics", "autocast", "act_fp8"}


def test_record_schema_via_cli(corpus, tmp_path, capsys):
    res = tmp_path / "r.jsonl"
    args = ["--preset", "tiny", "--method", "fp8_eco_sr", "--steps", "6", "--batch", "4",
            "--seq", "32", "--grad-accum", "2", "--data", corpus, "--eval-every", "3",
            "--eval-batches", "2", "--results", str(res)]
    assert lm.main(args) == 0
    assert lm.main(args + ["--method", "fp32", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "val" in out and '"method": "fp8_eco_sr"' in out
    lines = res.read_text().splitlines()
    assert len(lines) == 2  # one JSON record per finished run, appended
    r = json.loads(lines[0])
    assert set(r) == RECORD_KEYS
    assert (r["batch"], r["seq"], r["grad_accum"], r["world_size"], r["global_batch"]) == \
        (4, 32, 2, 1, 8)
    assert r["tokens"] == 6 * 8 * 32
    assert r["n_params"] == param_counts("tiny")
    assert r["lr"] == PRESETS["tiny"].lr and r["betas"] == [0.9, 0.98] and r["eps"] == 1e-9
    assert [p[0] for p in r["curve"]] == [1, 2, 3, 4, 5, 6]
    assert [p[2] is not None for p in r["curve"]] == [False, False, True, False, False, True]
    assert r["val_loss"] == r["curve"][-1][2]
    assert r["diverged"] is False and r["diverged_at_step"] is None
    assert r["corpus"]["bytes"] == lmdata.load_corpus(corpus).nbytes
    assert len(r["corpus"]["sha256"]) == 64
    assert r["tokens_per_s"] > 0 and r["wall_s"] > 0 and r["peak_memory_bytes"] > 0
    assert r["weights"] == {"format": "float8_e4m3fn", "mode": "sr", "granularity": "row",
                            "scale": "absmax"}
    # Static bytes per parameter of the quantized linears: 1-byte codes + a float32 scale per
    # row (4 / fan_in per weight) + FP32 m and v, by formula and by measured nbytes.
    bpp = r["bytes_per_param"]
    m = PRESETS["tiny"].model
    L, d, f = m.n_layers, m.d_model, m.d_ff
    n = L * (4 * d * d + 3 * d * f)
    rows = L * (4 * d + 2 * f + d)  # output rows of wq, wk, wv, wo, w_gate, w_up, w_down
    assert bpp["n"] == n
    assert bpp["formula"] == pytest.approx(9 + 4 * rows / n, rel=1e-12)
    assert bpp["measured"] == pytest.approx(bpp["formula"], rel=1e-12)
    # held: what the process really holds (codes + scales, a 4-byte gradient slot per layer,
    # m, v): the measured bytes plus the slots, to round-off
    slots = 4 * 7 * L / n
    assert bpp["held"] == pytest.approx(bpp["measured"] + slots, rel=1e-12)
    ref = json.loads(lines[1])
    assert ref["method"] == "fp32" and ref["bytes_per_param"]["formula"] == 12.0
    assert ref["bytes_per_param"]["measured"] == 12.0


def test_master_bytes_per_param(runs):
    assert runs["fp8_master_sr"]["bytes_per_param"]["formula"] == 12.0
    assert runs["bf16_master"]["bytes_per_param"]["measured"] == 12.0
    assert runs["fp8_eco_rtn"]["bytes_per_param"]["formula"] < 9.1
    # eco_momentum_exact's float32 e_prev: 4 bytes per weight more than ECO, counted by the
    # formula, the live states and the held tensors alike
    mx, eco = runs["fp8_ecomx_sr"]["bytes_per_param"], runs["fp8_eco_sr"]["bytes_per_param"]
    for k in ("formula", "measured", "held"):
        assert mx[k] == pytest.approx(eco[k] + 4.0, abs=1e-12), k
    assert mx["measured_buffers"]["e_prev"] == 4.0


def test_divergence_is_recorded_not_raised(corpus, tmp_path):
    r = lm.train(_cfg(corpus, steps=5, diverge_loss=1.0, results=str(tmp_path / "r.jsonl")))
    assert r["diverged"] is True and r["diverged_at_step"] == 1 and r["curve"][0][0] == 1
    assert r["val_loss"] is None and r["steps_done"] == 0
    assert json.loads((tmp_path / "r.jsonl").read_text())["diverged"] is True


# -- bad input -----------------------------------------------------------------------------------

def test_bad_input_is_a_clear_error(corpus, tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        lm.LMConfig(preset="huge")
    with pytest.raises(ValueError, match="unknown method 'fp4'"):
        lm.LMConfig(method="fp4")
    with pytest.raises(ValueError, match="not divisible"):
        lm.LMConfig(global_batch=10, grad_accum=4).resolved()
    with pytest.raises(ValueError, match="!= global_batch"):
        lm.LMConfig(global_batch=8, batch=2, grad_accum=2).resolved()
    assert lm.LMConfig(global_batch=8, grad_accum=2).resolved(world_size=2).batch == 2
    with pytest.raises(FileNotFoundError, match="does not exist"):
        lm.LMConfig(data=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        lm.LMConfig(steps=0)
    with pytest.raises(ValueError, match="need an out folder"):
        lm.LMConfig(resume=True)
    with pytest.raises(ValueError, match="storage"):
        lm.LMConfig(storage="fp16")
    with pytest.raises(ValueError, match="fsdp needs storage='param'"):
        lm.LMConfig(fsdp=True)  # the default storage, codes, cannot be sharded
    with pytest.raises(ValueError, match="too few"):
        lm.train(_cfg(corpus, seq=100_000, steps=1))
    with pytest.raises(TypeError, match="LMConfig"):
        lm.train({"preset": "tiny"})
    with pytest.raises(SystemExit):
        lm.main(["--preset", "huge"])


# -- bfloat16 matmuls (--bf16-autocast) ------------------------------------------------------------

def _matmul_input_dtypes(fn) -> set:
    """The dtypes of the inputs of every matmul that ``fn()`` dispatches."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}
    seen = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in ops:
                seen.update(a.dtype for a in args if isinstance(a, torch.Tensor))
            return func(*args, **(kwargs or {}))
    with Record():
        fn()
    return seen


def test_bf16_autocast_matmuls(corpus):
    """--bf16-autocast: every matmul of a training run (forward, backward, validation) takes
    bfloat16 inputs; without it every one takes FP32."""
    for method in ("bf16_master", "fp8_eco_sr"):
        recs = {}
        for flag in (True, False):
            dtypes = _matmul_input_dtypes(lambda: recs.__setitem__(flag, lm.train(
                _cfg(corpus, method=method, steps=2, eval_every=2, autocast=flag))))
            assert dtypes == ({torch.bfloat16} if flag else {torch.float32})
        assert recs[True]["autocast"] is True and recs[False]["autocast"] is False
        assert math.isfinite(recs[True]["val_loss"])
        assert recs[True]["val_loss"] != recs[False]["val_loss"]  # other numbers
        assert run_setting(recs[True]) != run_setting(recs[False])  # not averaged together
    with pytest.raises(ValueError, match="autocast must be a bool"):
        lm.LMConfig(autocast=1)


# -- FP8 activations (--act-fp8) ------------------------------------------------------------------

def test_act_fp8_equals_the_quantizer_on_each_token():
    from ecosim.torch import Quantizer
    from ecosim.torch.lm.activations import quantize_activations, quantize_input

    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1)) * torch.logspace(
        -3, 3, 5).reshape(1, 5, 1)  # tokens of very different sizes: one scale each
    x.requires_grad_(True)
    x0 = x.detach().clone()
    y = quantize_input(x)
    want = Quantizer("e4m3", "rtn", granularity="row")(x0.reshape(10, 16)).reshape(2, 5, 16)
    assert torch.equal(y.detach(), want) and torch.equal(x.detach(), x0)
    assert not torch.equal(want, x0)  # it rounds
    y.backward(torch.arange(160.0).reshape(2, 5, 16))
    assert torch.equal(x.grad, torch.arange(160.0).reshape(2, 5, 16))  # straight through
    # the hooks: each block-internal linear sees the quantized input, nothing else does
    model = Transformer(PRESETS["tiny"].model, torch.Generator().manual_seed(0))
    handles = quantize_activations(model)
    assert len(handles) == 7 * PRESETS["tiny"].model.n_layers
    seen = {}  # what each linear receives (these hooks run after the quantizing ones)
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(
                lambda m, a, name=name: seen.__setitem__(name, a[0].detach().clone()))
    tok = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(2))
    model(tok, tok)
    q = Quantizer("e4m3", "rtn", granularity="row")
    assert len(seen) == 7 * PRESETS["tiny"].model.n_layers + 1  # and the head
    for name, inp in seen.items():  # quantized rows are fixed points of q; others are not
        rows = inp.reshape(-1, inp.shape[-1])
        assert torch.equal(q(rows), rows) == name.startswith("blocks."), name


def test_act_fp8_runs(corpus):
    recs = {flag: lm.train(_cfg(corpus, method="fp8_eco_sr", steps=2, eval_every=2,
                                act_fp8=flag)) for flag in (True, False)}
    assert recs[True]["act_fp8"] is True and math.isfinite(recs[True]["val_loss"])
    assert recs[True]["val_loss"] != recs[False]["val_loss"]
    assert run_setting(recs[True]) != run_setting(recs[False])
    # BF16 with master ignores the flag (the setting's baseline): the same numbers
    b = [lm.train(_cfg(corpus, method="bf16_master", steps=2, eval_every=2, act_fp8=f))
         for f in (True, False)]
    assert b[0]["val_loss"] == b[1]["val_loss"] and b[0]["act_fp8"] is True
    with pytest.raises(ValueError, match="act_fp8 must be a bool"):
        lm.LMConfig(act_fp8="yes")
