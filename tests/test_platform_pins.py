"""The pinned-digest guard itself: a machine that matches no pinned platform fails where the
pinned kernels can run and skips only where they cannot (a guard that skips on a new CPU is a
guard that is off)."""
import pytest

import platform_pins
from platform_pins import PLATFORMS, pinned_platform


@pytest.fixture
def probe(monkeypatch):
    def set_probe(blas, ufuncs, can_run):
        monkeypatch.setattr(platform_pins, "platform_probe", lambda: (blas, ufuncs))
        monkeypatch.setattr(platform_pins, "can_run_pinned_kernels", lambda: can_run)
    return set_probe


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_a_pinned_probe_names_its_platform(probe, name):
    probe(*PLATFORMS[name].probe, can_run=True)
    assert pinned_platform() == name


def test_an_unknown_probe_fails_where_the_pinned_kernels_can_run(probe):
    probe("0" * 16, "1" * 16, can_run=True)
    with pytest.raises(pytest.fail.Exception, match="OPENBLAS_CORETYPE=Haswell"):
        pinned_platform()


def test_an_unknown_probe_skips_only_where_the_pinned_kernels_cannot_run(probe):
    probe("0" * 16, "1" * 16, can_run=False)
    with pytest.raises(pytest.skip.Exception, match="cannot run"):
        pinned_platform()


def test_torch_platforms_fail_on_an_unknown_capability(probe, monkeypatch):
    torch = pytest.importorskip("torch")
    blas = PLATFORMS["avx2"].probe[0]
    probe(blas, "1" * 16, can_run=True)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    with pytest.raises(pytest.fail.Exception, match="ATEN_CPU_CAPABILITY=avx2"):
        pinned_platform(torch=True)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert pinned_platform(torch=True) == "avx2"


def test_this_machine_is_pinned_or_cannot_run_the_kernels():
    """The suite's own machine: every pinned digest runs here unless the kernels cannot."""
    if platform_pins.can_run_pinned_kernels():
        assert pinned_platform() in PLATFORMS
