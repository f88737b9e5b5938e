"""INT4 fine-tuning from a checkpoint (``LMConfig.init_from``, the ``int4_*`` methods, a
schedule annealed to zero) and the ``lm_finetune`` experiment's checks.

Every run is preset ``micro`` for a few steps of 4 x 32 bytes on one CPU thread (seconds in
all): a 6-step BF16-with-master pretraining run on the standard-library slice of
``conftest.corpus``, fine-tuned on a small text file.
"""

import json
import math
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ecosim import recipes  # noqa: E402
from ecosim.experiments.base import ConfigError  # noqa: E402
from ecosim.experiments.lm import train_record  # noqa: E402
from ecosim.experiments.lm_finetune import BASE, FINETUNE_METHODS, LMFinetuneConfig  # noqa: E402
from ecosim.torch import ECOAdamW, Quantizer  # noqa: E402
from ecosim.torch import data as lmdata  # noqa: E402
from ecosim.torch import lm  # noqa: E402
from ecosim.torch.lm.checkpoint import init_weights  # noqa: E402
from ecosim.torch.model import Transformer, get_preset, quantized_names  # noqa: E402
from ecosim.torch.nn import stored  # noqa: E402

SHAPE = dict(preset="micro", batch=4, seq=32, eval_batches=2)


def train(**config) -> dict:
    """A run on one CPU thread (``train_record``: the experiments' call)."""
    return train_record("tests", **config)


@pytest.fixture(scope="module")
def pretrained(corpus, tmp_path_factory):
    """The out folder of a finished 6-step BF16-with-master run of ``micro``."""
    out = tmp_path_factory.mktemp("pretrained")
    train(method="bf16_master", steps=6, eval_every=3, data=corpus, out=str(out), **SHAPE)
    return str(out)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """A fine-tuning corpus unlike the sources: ~150 kB of English-like text."""
    words = ("the of and to in is was for on that with as by at from it an be this are "
             "which or his had not but were have they one all their has been").split()
    lines = [" ".join(words[(7 * i + 3 * j) % len(words)] for j in range(12)).capitalize()
             + "." for i in range(3000)]
    path = tmp_path_factory.mktemp("text") / "prose.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _ft(pretrained, text, **kw):
    base = dict(method="int4_eco_sr", steps=8, lr=3e-3, eval_every=4, log_every=1,
                weight_decay=0.0, final_lr=0.0, data=text, init_from=pretrained, **SHAPE)
    return {**base, **kw}


def test_int4_methods_are_table1_rows_with_tensor_wise_int4():
    assert tuple(lm.INT4_METHODS) == FINETUNE_METHODS
    assert FINETUNE_METHODS == ("int4_master_rtn", "int4_master_sr", "int4_naive_rtn",
                                "int4_naive_sr", "int4_eco_rtn", "int4_eco_sr")
    for name, m in lm.INT4_METHODS.items():
        w, row = recipes.parse_run_name(name)
        assert w == "int4" and (m.scheme, m.mode) == (row.scheme, row.mode)
        assert m.quantizer() == Quantizer("int4", row.mode, granularity="tensor")
    assert not set(lm.INT4_METHODS) & set(lm.METHODS)


def test_init_from_loads_the_checkpoints_bf16_weights(pretrained, text):
    """The weights are the checkpoint's: its linears are its bfloat16 stored values (the RTN
    cast of its FP32 master copy, which is not read), everything else its FP32 tensors. The
    INT4 run's initial write is q(those weights) and a master scheme keeps them in FP32."""
    ck = torch.load(f"{pretrained}/{lm.CHECKPOINT}", weights_only=True)
    cfg = lm.LMConfig(**_ft(pretrained, text, method="int4_master_rtn")).resolved()
    sd, info = init_weights(cfg)
    assert info["method"] == "bf16_master" and info["steps"] == 6 and info["preset"] == "micro"
    model = Transformer(get_preset("micro").model, torch.Generator().manual_seed(1))
    qn = quantized_names(model)
    assert set(sd) == set(model.state_dict())
    masters = ck["optimizers"][0]["state"]
    for i, name in enumerate(qn):  # ECOAdamW's parameters, in this order
        w = sd[name]
        assert w.dtype == torch.float32
        assert torch.equal(w, masters[i]["master"].to(torch.bfloat16).to(torch.float32)), name
    for name, v in ck["model"].items():
        if name in sd:  # the embedding, head and norm gains, as they were
            assert torch.equal(sd[name], v), name
    model.load_state_dict(sd)
    opt = lm.build_optimizers(model, cfg)[0]
    q = Quantizer("int4", "rtn", granularity="tensor")
    for name in qn:
        layer = stored(dict(model.named_parameters())[name])
        assert torch.equal(layer.read(), q(sd[name])), name
        assert torch.equal(opt.state_values(name, "master"), sd[name]), name


def test_int4_finetune_resumes_bit_exactly_and_its_lr0_step_writes_nothing(pretrained, text,
                                                                            tmp_path):
    """A fine-tuning run stopped at step 4 and resumed equals the uninterrupted run bit for
    bit; with the schedule annealed to zero the last step (lr 0) leaves every weight as the
    step before left it."""
    annealed = lm.LMConfig(steps=8, warmup=0.1, final_lr=0.0).schedule
    assert annealed(7) == 0.0 and annealed(6) > 0.0
    full = train(**_ft(pretrained, text, out=str(tmp_path / "full")))
    assert train(**_ft(pretrained, text, out=str(tmp_path / "half"), stop_after=4))["step"] == 4
    rest = train(**_ft(pretrained, text, out=str(tmp_path / "half"), resume=True))
    assert rest["curve"] == full["curve"] and rest["segments"] == 2
    assert rest["init"] == full["init"]  # measured once, kept by the checkpoint
    train(**_ft(pretrained, text, out=str(tmp_path / "seven"), stop_after=7))
    a, b, c = (torch.load(tmp_path / d / lm.CHECKPOINT, weights_only=True)["model"]
               for d in ("full", "half", "seven"))
    assert a.keys() == b.keys() == c.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
        assert torch.equal(a[k], c[k]), k  # step 8 ran at lr 0: nothing written
        assert a[k].is_floating_point() is False or bool(torch.isfinite(a[k]).all()), k
    assert not full["diverged"] and math.isfinite(full["val_loss"])
    assert full["init"]["base_val_loss"] != full["init"]["start_val_loss"]  # the INT4 write


def test_resume_follows_the_init_weights_not_the_path(pretrained, corpus, text, tmp_path):
    """A fine-tuning run resumes from a moved copy of the checkpoint it started from (same
    weights, another path) and refuses one whose file now holds other weights."""
    src = Path(pretrained) / lm.CHECKPOINT
    first, moved = tmp_path / "first", tmp_path / "moved"
    first.mkdir()
    moved.mkdir()
    shutil.copy(src, first / lm.CHECKPOINT)
    kw = _ft(pretrained, text, steps=4, out=str(tmp_path / "ft"))
    assert train(**{**kw, "init_from": str(first), "stop_after": 2})["step"] == 2
    other = tmp_path / "other"
    train(method="bf16_master", steps=2, eval_every=2, data=corpus, out=str(other), **SHAPE)
    shutil.copy(other / lm.CHECKPOINT, first / lm.CHECKPOINT)  # same path, other weights
    with pytest.raises(lm.CheckpointError, match="init_from weights_sha256"):
        train(**{**kw, "init_from": str(first), "resume": True})
    shutil.copy(src, moved / lm.CHECKPOINT)  # the same weights elsewhere
    rest = train(**{**kw, "init_from": str(moved / lm.CHECKPOINT), "resume": True})
    assert rest["segments"] == 2 and rest["steps_done"] == 4 and not rest["diverged"]


def test_eco_step_at_lr_zero_writes_nothing_and_keeps_the_injection():
    """ECOAdamW at lr 0 (ECO, INT4 per tensor): no write (codes and values unchanged), no
    error and nothing injected (the injection divides by lr only after a write); the moments
    still take the gradient."""
    p = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 24).reshape(4, 6))
    opt = ECOAdamW([p], 1e-2, betas=(0.9, 0.98), scheme="eco",
                   weights=Quantizer("int4", "sr", granularity="tensor"), key=3)
    g = torch.linspace(0.3, -0.2, 24).reshape(4, 6)
    p.grad = g.clone()
    opt.step()
    w1, m1 = p.detach().clone(), opt.state_values(p, "m").clone()
    opt.param_groups[0]["lr"] = 0.0
    p.grad = g.clone()
    opt.step()
    assert torch.equal(p.detach(), w1)
    m2 = opt.state_values(p, "m")
    assert torch.equal(m2, m1 * 0.9 + g * (1.0 - 0.9))  # b1 m + (1 - b1) g, no injection
    assert bool(torch.isfinite(m2).all()) and bool(torch.isfinite(p.detach()).all())


def test_bad_init_from_is_a_one_line_error(pretrained, text, corpus, tmp_path, capsys):
    args = ["--preset", "tiny", "--steps", "2", "--batch", "4", "--seq", "32", "--data", text,
            "--quiet", "--method", "int4_eco_sr"]
    cases = [(["--init-from", str(tmp_path / "missing")], "no checkpoint at"),
             (["--init-from", pretrained], "holds a model of preset 'micro', this run is "
                                           "preset 'tiny'")]
    stopped = tmp_path / "stopped"
    train(method="bf16_master", steps=4, stop_after=2, data=corpus, out=str(stopped), **SHAPE)
    cases.append((["--preset", "micro", "--init-from", str(stopped)], "stopped at step 2"))
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    cases.append((["--preset", "micro", "--init-from", str(garbage)], "unreadable"))
    for extra, msg in cases:
        assert lm.main(args + extra) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1, err


def test_finetune_record_and_stdlib_slice(pretrained, text):
    r = train(**_ft(pretrained, text, method="int4_naive_rtn", steps=2, eval_every=2))
    json.dumps(r, allow_nan=False)
    assert r["weights"]["granularity"] == "tensor" and r["weights"]["format"] == "int4"
    assert r["weight_decay"] == 0.0 and r["schedule"]["final_lr"] == 0.0
    assert set(r["init"]) == {"checkpoint", "preset", "method", "steps", "seed",
                              "corpus_sha256", "weights_sha256", "base_val_loss",
                              "start_val_loss"}
    files = lmdata.corpus_files(lmdata.default_corpus_path(), (".txt",))
    c = lmdata.load_corpus("stdlib:.txt")
    assert c.files == len(files) and c.nbytes == sum(f.stat().st_size for f in files)
    with pytest.raises(lmdata.CorpusError, match="names no suffixes"):
        lmdata.load_corpus("stdlib:")


def test_finetune_config_checks():
    assert LMFinetuneConfig().methods == FINETUNE_METHODS
    with pytest.raises(ConfigError, match="must include"):
        LMFinetuneConfig(methods=("int4_eco_sr",))
    with pytest.raises(ConfigError, match="not an INT4 method"):
        LMFinetuneConfig(methods=(BASE, "fp8_eco_sr"))
    with pytest.raises(ValueError, match="final_lr must be in"):
        lm.LMConfig(final_lr=-0.1)
    assert lm.LMConfig(final_lr=0.0).final_lr == 0.0
