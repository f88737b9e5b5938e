"""The Hugging Face Trainer with ecosim's optimizer on a stored model (where transformers and
accelerate are installed): ``optimizers=(ECOAdamW, scheduler)`` trains the stored weights,
``ecosim.torch.save_pretrained`` writes what ``from_pretrained`` reloads, and the Trainer's
own checkpoints of a stored model are refused, naming what to use instead."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import ecosim.torch as et  # noqa: E402

pytestmark = pytest.mark.torch


def _setup(tmp_path, **args):
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2,
                                  n_head=2)
    model = transformers.GPT2LMHeadModel(cfg)
    report = et.quantize_model(model, et.Quantizer("e4m3", "sr", granularity="row"), key=0)
    opt = et.ECOAdamW(report.param_groups(), 3e-3, scheme="eco", key=0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 5))
    rows = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": r, "labels": r} for r in rows.repeat(64, 2)]  # learnable
    targs = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=30, per_device_train_batch_size=8,
        logging_steps=10, report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
        **{"save_strategy": "no", **args})
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=data,
                                   optimizers=(opt, sched))
    return model, opt, trainer, rows


def test_trainer_trains_stored_weights_and_the_model_reloads(tmp_path):
    model, opt, trainer, rows = _setup(tmp_path)
    layer = model.transformer.h[0].attn.c_attn
    assert isinstance(layer, et.QuantizedConv1D)
    codes0 = layer.codes.clone()
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and losses[-1] < 0.6 * losses[0]
    assert model.transformer.h[0].attn.c_attn is layer  # still stored, codes moved
    assert layer.codes.dtype == torch.uint8 and not torch.equal(layer.codes, codes0)
    assert opt.t == 30 and not any("master" in st for st in opt.state.values())
    et.save_pretrained(model, tmp_path / "saved")
    plain = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "saved")
    model.eval()
    with torch.no_grad():
        x = rows.repeat(2, 1)
        assert torch.equal(plain(x).logits, model(x).logits)


def test_trainer_checkpoints_of_a_stored_model_are_refused(tmp_path):
    _, _, trainer, _ = _setup(tmp_path, save_strategy="steps", save_steps=10)
    with pytest.raises(TypeError, match=r"stored as codes.*ecosim.torch.save_pretrained"):
        trainer.train()
