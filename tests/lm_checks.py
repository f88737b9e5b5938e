"""Checks shared by the language-model tests (imported as ``from lm_checks import ...``)."""

import torch


def assert_same_checkpoint(a, b) -> None:
    """The checkpoints at paths ``a`` and ``b`` hold equal model tensors and optimizer states,
    bit for bit (a resumed run against an uninterrupted one)."""
    ca = torch.load(a, weights_only=True)
    cb = torch.load(b, weights_only=True)
    assert ca["model"].keys() == cb["model"].keys()
    for k in ca["model"]:
        assert torch.equal(ca["model"][k], cb["model"][k]), k
    for oa, ob in zip(ca["optimizers"], cb["optimizers"], strict=True):
        for i in oa["state"]:
            for k, v in oa["state"][i].items():
                w = ob["state"][i][k]
                assert torch.equal(v, w) if torch.is_tensor(v) else v == w, (i, k)
