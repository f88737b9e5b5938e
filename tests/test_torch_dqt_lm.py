"""DQT and BitNet b1.58 as methods of the language-model runner (``dqt8_sr``,
``dqt_ternary_sr``, ``bitnet_b158``): registered, and a DQT run resumes bit-exactly.

CPU, one thread, the ``tiny`` preset at smoke size.
"""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from ecosim.torch import lm  # noqa: E402
from ecosim.torch.dqt import dqt_quantizers  # noqa: E402


def test_lm_methods_are_registered():
    m = lm.METHODS
    assert m["dqt8_sr"].quantizer() == dqt_quantizers(8)[0]
    assert m["dqt_ternary_sr"].quantizer() == dqt_quantizers("ternary")[0]
    assert m["bitnet_b158"].quantizer() is None and m["bitnet_b158"].scheme is None
    assert not {"dqt8_sr", "dqt_ternary_sr", "bitnet_b158"} & set(lm.TABLE1_METHODS)
    with pytest.raises(ValueError, match="fsdp is for Table 1"):
        lm.LMConfig(method="dqt8_sr", fsdp=True, storage="param")


@pytest.mark.parametrize("method", ["int4_eco_sr", "int4_master_rtn", "bitnet_b158"])
def test_fsdp_refuses_methods_without_row_wise_scales(method):
    """INT4's one scale per tensor (like DQT's) cannot be computed from a shard of rows: the
    config refuses it in one line, before torchrun starts anything; row-wise methods pass."""
    with pytest.raises(ValueError, match=f"^fsdp is for Table 1's methods .*{method!r}[^\n]*$"):
        lm.LMConfig(method=method, fsdp=True, storage="param")
    for ok in ("fp32", "bf16_master", "fp8_eco_sr"):
        lm.fsdp_check(ok)


def test_dqt_lm_resume_is_bit_exact(corpus, tmp_path):
    """A DQT ternary run stopped at step 3 and resumed equals the uninterrupted run: curve,
    losses, the stored codes and scales and the optimizer states (smoke size)."""
    kw = dict(preset="tiny", method="dqt_ternary_sr", steps=6, batch=4, seq=32, data=corpus,
              eval_every=3, eval_batches=2, log_every=1, quiet=True)
    full = lm.train(lm.LMConfig(out=str(tmp_path / "full"), **kw))
    lm.train(lm.LMConfig(out=str(tmp_path / "half"), stop_after=3, **kw))
    rest = lm.train(lm.LMConfig(out=str(tmp_path / "half"), resume=True, **kw))
    assert rest["curve"] == full["curve"] and not full["diverged"]
    assert rest["bytes_per_param"]["formula"] == pytest.approx(8.25, abs=1e-3)
    a = torch.load(tmp_path / "full" / lm.CHECKPOINT, weights_only=True)
    b = torch.load(tmp_path / "half" / lm.CHECKPOINT, weights_only=True)
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for oa, ob in zip(a["optimizers"], b["optimizers"]):
        for i in oa["state"]:
            for k, v in oa["state"][i].items():
                assert torch.equal(v, ob["state"][i][k]) if torch.is_tensor(v) else \
                    v == ob["state"][i][k]
