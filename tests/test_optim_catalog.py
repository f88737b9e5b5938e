"""The optimizer table (ecosim.optim.catalog) is what the optimizers, the memory formula,
the schemes and the torch twins read."""

import re

import pytest

from ecosim import memory
from ecosim.optim import catalog
from ecosim.optim.schemes import REGISTRY, names_for
from ecosim.optim.policies import SCHEMES


@pytest.mark.parametrize("spec", catalog.optimizers(), ids=lambda s: s.name)
def test_each_row_is_the_optimizer_it_names(spec):
    opt = spec.make(0.01, scheme="fp")
    assert opt.name == spec.name and opt._moment_names == spec.moments
    fp = memory.bytes_per_param(spec.name, "fp")
    assert fp.total == 4.0 * (1 + len(spec.moments))  # float32 weights and moments
    through_momentum = {n for n in SCHEMES if REGISTRY[n].after == "inject"
                        or REGISTRY[n].exact == "momentum"}
    offered = set(SCHEMES) if spec.injects else set(SCHEMES) - through_momentum
    assert set(names_for(spec.name)) >= offered
    if not spec.injects:
        assert not set(names_for(spec.name)) & through_momentum
    if spec.torch is not None:
        pytest.importorskip("torch")
        assert spec.torch_twin()._twin == spec.name
    if spec.others is not None:
        assert spec.others in catalog.names()


def test_the_schemes_every_injecting_optimizer_runs():
    injecting = [o.name for o in catalog.optimizers() if o.injects]
    assert SCHEMES == tuple(n for n in REGISTRY if all(n in names_for(o) for o in injecting))
    assert "eco" in SCHEMES and "eco_momentum_exact" not in SCHEMES
    assert {"sgdm", "adamw", "muon"} <= set(injecting)


def test_unknown_optimizer_names_are_refused_with_the_list():
    with pytest.raises(KeyError, match=r"unknown optimizer 'adam' \(did you mean 'adamw'\?\)"):
        catalog.get("adam")
    with pytest.raises(ValueError, match=re.escape(f"optimizer must be one of "
                                                   f"{catalog.names()}, got 'adam'")):
        memory.bytes_per_param("adam")
