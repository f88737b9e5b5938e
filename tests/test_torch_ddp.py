"""Two processes under DDP (gloo, CPU) train bit-identically to one process that accumulates.

``torchrun --standalone --nproc_per_node 2`` runs ``python -m ecosim.torch.lm`` with
``grad_accum=1``; the reference is one process with ``grad_accum=2`` and the same global batch.
Process ``r`` draws micro-batch ``j = r`` of each step, which the single process draws at
accumulation step ``a = j``; it scales each micro-batch loss by 1/2 where DDP divides the
summed gradient by 2, and both are exact (powers of two), so the final weights, the optimizer
states and every logged loss must be *equal*, not close.
"""

import json

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from ecosim.torch import lm  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


COMMON = dict(preset="tiny", method="fp8_eco_sr", steps=4, batch=4, seq=32, eval_every=2,
              eval_batches=3, log_every=1)


def _cli(corpus, **kw):
    return [a for k, v in {**COMMON, "data": corpus, **kw}.items()
            for a in (f"--{k.replace('_', '-')}", str(v))] + ["--quiet"]


@pytest.fixture(scope="module")
def one(corpus, tmp_path_factory):
    """The one-process reference: grad_accum=2, same global batch; record and checkpoint."""
    out = tmp_path_factory.mktemp("one")
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count: same kernels, same sums
    try:
        rec = lm.train(lm.LMConfig(grad_accum=2, out=str(out), data=corpus, quiet=True,
                                      **COMMON))
    finally:
        torch.set_num_threads(n)
    return rec, torch.load(out / lm.CHECKPOINT, weights_only=True)


def _assert_same_state(a, b):
    assert a["model"].keys() == b["model"].keys()
    for k in b["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for oa, ob in zip(a["optimizers"], b["optimizers"], strict=True):
        for i, st in ob["state"].items():
            for k, v in st.items():
                if torch.is_tensor(v):
                    assert torch.equal(oa["state"][i][k], v), (i, k)


def test_two_processes_equal_one_with_accumulation(corpus, tmp_path, one, torchrun):
    rec1, ck1 = one
    torchrun(["-m", "ecosim.torch.lm",
              *_cli(corpus, out=tmp_path / "ddp", results=tmp_path / "ddp.jsonl")], tmp_path)
    lines = (tmp_path / "ddp.jsonl").read_text().splitlines()
    assert len(lines) == 1  # only rank 0 writes
    two = json.loads(lines[0])
    assert (two["world_size"], two["grad_accum"]) == (2, 1)
    assert (rec1["world_size"], rec1["grad_accum"]) == (1, 2)
    assert two["global_batch"] == rec1["global_batch"] == 8
    assert two["tokens"] == rec1["tokens"]
    assert two["curve"] == rec1["curve"]  # every training and validation loss, exactly
    assert two["final_train_loss"] == rec1["final_train_loss"]
    _assert_same_state(torch.load(tmp_path / "ddp" / lm.CHECKPOINT, weights_only=True), ck1)


@pytest.mark.slow  # a torchrun launch of its own; covered by default tests: the DDP run's
# checkpoint equals the one-process run's (above), a one-process resume is bit-exact
# (test_torch_lm), and an FSDP run stopped halfway finishes in one process
# (test_fsdp_checkpoint_resumes_unsharded)
def test_ddp_checkpoint_resumes_in_one_process(corpus, tmp_path, one, torchrun):
    """Stop a 2-process run halfway, finish it in one process with grad_accum=2: the same run."""
    rec1, ck1 = one
    torchrun(["-m", "ecosim.torch.lm", *_cli(corpus, out=tmp_path / "ck", stop_after=2)], tmp_path)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rec = lm.train(lm.LMConfig(grad_accum=2, out=str(tmp_path / "ck"), resume=True,
                                      data=corpus, quiet=True, **COMMON))
    finally:
        torch.set_num_threads(n)
    assert rec["curve"] == rec1["curve"] and rec["segments"] == 2
    _assert_same_state(torch.load(tmp_path / "ck" / lm.CHECKPOINT, weights_only=True), ck1)
