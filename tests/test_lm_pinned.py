"""The language model's runs keep their results and final weights bit for bit.

Pins the sha256 of smoke-size runs of :func:`ecosim.torch.lm.train` (preset ``tiny``, 8 steps
of 4 sequences of 32 bytes, validation on 2 batches every 4 steps, seed 0, one CPU thread, as
the ``lm`` and ``dqt_lm`` experiments run them): of the run's result columns
(:func:`ecosim.experiments.lm.records_to_results`: losses, curves, byte counts) and of the
final checkpoint's model and optimizer tensors (names sorted). The methods cover FP32 (torch's
AdamW alone), FP8 master weights with RTN, ECO with RTN and with SR (keyed random bits) and
DQT ternary with SR; the runs are smoke-sized so that the file stays cheap. The digests pin
what a training step computes, not how fast: they must hold after any change that only makes
a step cheaper.

Like ``test_results_pinned``, the digests hold per platform (``platform_pins``): matmuls and
transcendental functions may round their last bits otherwise, and torch's CPU ops run kernels
built for the CPU's vector width, so the platform includes torch's CPU capability
(``pinned_platform(torch=True)``). The ``avx2`` digests come from torch's AVX2 kernels, the
``avx512`` ones from the same code on an AVX-512 x86-64 with torch's AVX512 kernels; on that
CPU the same code under ``ATEN_CPU_CAPABILITY=avx2`` gives the ``avx2`` digests, so the
platform is the kernels torch runs, not the CPU alone.
"""
from __future__ import annotations

import pytest

from platform_pins import PLATFORMS, digest_arrays, pinned_platform

torch = pytest.importorskip("torch")

from ecosim.experiments.lm import records_to_results  # noqa: E402
from ecosim.torch import lm as tlm  # noqa: E402

#: the smoke protocol of the ``lm`` experiment (LMTableConfig.SMOKE), seed 0
SMOKE = dict(preset="tiny", steps=8, batch=4, seq=32, eval_every=4, eval_batches=2, seed=0)

# platform (platform_pins.PLATFORMS) -> method -> (sha256 of the result columns, sha256 of
# the final model and optimizer tensors)
PINNED = {
    "avx2": {
        "fp8_eco_sr": ("931a1e41a79f91518625cd013a67ece0c52bd28183a0c9c5cd141027b902f0a0",
                       "4058e5f68dcea778d81adfd3057ba43239d46758d068c366b0a948ffd82b472f"),
        "fp32": ("b4fb3adb91d3968641d5e5c1c8a259b4e67d941e7a033fe219c3b35e4e869358",
                 "90c96185c634726fb8ed41fb6656538f80e8409b82b696dd34069894d8cfa420"),
        "fp8_master_rtn": ("2b4bacdced59399dc5559c648f5c22f12324913c9bc38dd02cf20ca7b39669fe",
                           "f9ac08e25aec97da460309c4f7d6f18990bf5582a6b091d7d52777aff7364c55"),
        "fp8_eco_rtn": ("453fae564250bb41e6e3523aa04dc435008206e416e5c94a8b5ce20952d92cf8",
                        "f53a402dfa2a5b01dcb5f1b7d001a49d79c2a5fcb520d16b01e51442632d0796"),
        "dqt_ternary_sr": ("7acfd3fff55eb4b07eaa42af97b15403b93fdfb4f0da7f1ca8687e4935312807",
                           "214129125bb0cd584a2829caad694b6ab9bb5fd695debaab7df69caafb7732a9"),
    },
    "avx512": {
        "fp8_eco_sr": ("31457e95f8aefc7c8bc7b34314fa95209bb33a3da98bee19153f6b662249a13d",
                       "8a5a2592ea8c98352c85cff5c56ded6caa7f6b65b213f9ccfa2c4306c5fea577"),
        "fp32": ("b4fb3adb91d3968641d5e5c1c8a259b4e67d941e7a033fe219c3b35e4e869358",
                 "506e8574d5eb70a543e9c16c54f9d0ba788356ae5072e0046b6364653c450b94"),
        "fp8_master_rtn": ("8efb4f5a69d97717dbec6b0df98ff523aded469eaa047ecf479c5a8ef46e8865",
                           "7cbfb4295b63aee34c905feb95d132d974dee0906ceaacc011a3e9e8c4cdbda3"),
        "fp8_eco_rtn": ("24ee444badefd901884e067fc85338bdb20e2f738d0b0230dffb9d955d7f8a69",
                        "0834c65a55fb25b7f253e968d5251d0197a57b8f1ea4e9b90018994481956368"),
        "dqt_ternary_sr": ("8dafba11edc1a598560f35d7c41062a93de43c1613e17184d1eb5f7d47cae7b8",
                           "fded9d0dbfb96fc70b194dc6c963d99a87435380976c69ceb4cfabb0ad6dfa04"),
    },
}


def tensors_of(tree, prefix: str = "") -> dict:
    """Every tensor in a nested dict/list of a checkpoint, keyed by its path, as NumPy bytes
    (viewed as unsigned integers of the same width: bfloat16 and float8 have no NumPy dtype)."""
    out = {}
    if isinstance(tree, torch.Tensor):
        t = tree.detach().cpu().contiguous()
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
        out[f"{prefix}:{t.dtype}"] = t.view(view).numpy()
    elif isinstance(tree, dict):
        for k, v in tree.items():
            out.update(tensors_of(v, f"{prefix}/{k}"))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(tensors_of(v, f"{prefix}/{i}"))
    return out


def run_digests(method: str, out) -> tuple[str, str]:
    """(results digest, final tensors digest) of the smoke run of ``method``, one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rec = tlm.train(tlm.LMConfig(method=method, quiet=True, out=str(out), **SMOKE))
    finally:
        torch.set_num_threads(threads)
    ck = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    final = tensors_of({"model": ck["model"], "optimizers": ck["optimizers"]})
    return digest_arrays(records_to_results([rec])), digest_arrays(final)


def test_every_platform_pins_every_method():
    assert set(PINNED) == set(PLATFORMS)
    assert all(list(digests) == list(PINNED["avx2"]) for digests in PINNED.values())


@pytest.mark.parametrize("method", list(PINNED["avx2"]))
def test_smoke_lm_runs_are_pinned(method, tmp_path):
    want = PINNED[pinned_platform(torch=True)][method]
    assert run_digests(method, tmp_path) == want
