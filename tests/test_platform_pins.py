"""The pinned-digest guard itself: a machine that matches no pinned platform fails where the
pinned kernels can run and skips only where they cannot (a guard that skips on a new CPU is a
guard that is off), and the Makefile's pins make this machine compute as the platform the
committed figures were made on."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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


_PINS = ("OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY", "NPY_ENABLE_CPU_FEATURES",
         "NPY_DISABLE_CPU_FEATURES")
_ROOT = Path(__file__).resolve().parents[1]
_PROBE = ("import json, torch, platform_pins; "
          "print(json.dumps([*platform_pins.platform_probe(), "
          "torch.backends.cpu.get_cpu_capability()]))")


def _unpinned_env(**pins) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _PINS}
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), str(_ROOT / "tests")])
    return env | pins


def _probe_with(env) -> list:
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _makefile_pins(tmp_path) -> dict:
    """The pins `make` exports on this machine when the environment sets none."""
    show = tmp_path / "show.mk"
    show.write_text("_show_pins:\n\t@" + " ".join(f"echo {k}=$${k};" for k in _PINS) + "\n")
    # an outer `make VAR=...` passes its command-line variables down in MAKEFLAGS
    env = {k: v for k, v in _unpinned_env().items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL")}
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(_ROOT), "-f",
                          "Makefile", "-f", str(show), "_show_pins"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    pins = dict(line.split("=", 1) for line in out.stdout.splitlines())
    return {k: v for k, v in pins.items() if v}


def test_the_makefiles_pins_compute_as_the_committed_platform(tmp_path):
    """The committed figures were made on the ``avx2`` platform: wherever the pinned kernels
    can run, the environment `make figures` runs in must compute exactly as it does (BLAS
    products, NumPy's vector math, torch's kernels), whatever wider kernels the CPU has."""
    pytest.importorskip("torch")
    if shutil.which("make") is None:
        pytest.skip("no make on this machine: the Makefile's pins cannot be read")
    pins = _makefile_pins(tmp_path)
    if not platform_pins.can_run_pinned_kernels():
        assert pins == {}, f"the Makefile pins kernels this CPU cannot run: {pins}"
        pytest.skip("the pinned AVX2 kernels cannot run on this machine")
    assert pins == {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2",
                    "NPY_ENABLE_CPU_FEATURES": "X86_V3"}
    assert _probe_with(_unpinned_env(**pins)) == [*PLATFORMS["avx2"].probe, "AVX2"]


def test_the_ufunc_probe_sees_another_numpy_kernel():
    """The negative control of the probe the cache keys and the platforms hold: NumPy's
    SSE4.2-level kernels (X86_V2) round some exp/tanh/log results otherwise than its AVX2-level
    ones, and the probe says so."""
    pytest.importorskip("torch")
    from ecosim.experiments.provenance import ufunc_fingerprint

    targets = ufunc_fingerprint()["targets"] or []
    if not platform_pins.can_run_pinned_kernels() or "X86_V3" not in targets:
        pytest.skip(f"this NumPy or CPU has no X86_V3 kernels to compare with ({targets})")
    v2 = _probe_with(_unpinned_env(NPY_ENABLE_CPU_FEATURES="X86_V2"))
    v3 = _probe_with(_unpinned_env(NPY_ENABLE_CPU_FEATURES="X86_V3"))
    assert v2[0] == v3[0]  # the BLAS is not NumPy's dispatch
    assert v2[1] != v3[1]
