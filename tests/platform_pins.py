"""The platforms that pinned digests were computed on (imported as ``from platform_pins import
...`` by tests that pin sha256 digests of results).

A digest of floating-point results holds where the arithmetic is the same: BLAS products may
sum in another order under another kernel, NumPy's transcendental functions (exp, tanh, cos,
log) take other vector paths on other CPUs (AVX-512 against AVX2), and torch's CPU ops dispatch
to kernels built for the CPU's vector width. Element-wise IEEE operations (+, *, /, sqrt) are
the same everywhere. So a test pins its digests per platform of :data:`PLATFORMS` and checks
those of the platform this machine computes as (:func:`pinned_platform`).

A guard that skips on an unknown machine is a guard that is off, so a machine that matches no
platform fails the pinned tests wherever the pinned kernels can run (an x86-64 with the
x86-64-v3 instructions, AVX2 and FMA among them: OpenBLAS's Haswell kernels, NumPy's X86_V3
kernels and torch's AVX2 kernels, which the Makefile selects with ``OPENBLAS_CORETYPE=Haswell``,
``NPY_ENABLE_CPU_FEATURES=X86_V3`` and ``ATEN_CPU_CAPABILITY=avx2``), and skips, saying why, only
where they cannot (ARM, an older x86-64). A new platform that can run them but still computes
other bits (another vector-math path in NumPy, say) is pinned by adding it to
:data:`PLATFORMS` with the digests the tests print, computed from the code the digests were
pinned from.
"""
import hashlib
import platform
from typing import NamedTuple

import numpy as np
import pytest

from ecosim.experiments.provenance import blas_fingerprint, ufunc_fingerprint


class Platform(NamedTuple):
    probe: tuple[str, str]  #: :func:`platform_probe` there
    torch_cpu: str  #: torch.backends.cpu.get_cpu_capability() there
    about: str


#: the platforms digests are pinned on, by the name the tests key their digests with
PLATFORMS = {
    "avx2": Platform(("d5ef2f766d382443", "e09a5f9cd1efe783"), "AVX2",
                     "x86-64 with AVX2: the locked NumPy, its OpenBLAS with Haswell kernels"),
    "avx512": Platform(("d5ef2f766d382443", "42d8757c8e628fdc"), "AVX512",
                       "x86-64 with AVX-512 (AMD EPYC): the same BLAS products, NumPy's AVX-512 "
                       "vector math"),
}


def platform_probe() -> tuple[str, str]:
    """(BLAS probe, ufunc probe): hashes of fixed float32 products
    (:func:`~ecosim.experiments.provenance.blas_fingerprint`) and of NumPy's element-wise math
    on fixed inputs (:func:`~ecosim.experiments.provenance.ufunc_fingerprint`), the two probes
    every NumPy experiment's cache key holds."""
    return blas_fingerprint()["probe"], ufunc_fingerprint()["probe"]


def pinned_platform(torch: bool = False) -> str:
    """The name in :data:`PLATFORMS` of the platform this machine computes as, by
    :func:`platform_probe`.

    With ``torch=True`` (digests of torch runs) a platform is the BLAS probe and torch's CPU
    capability (which kernels torch's CPU ops ran) instead: a torch run does not go through
    NumPy's vector math, so an AVX-512 machine running torch's AVX2 kernels
    (``ATEN_CPU_CAPABILITY=avx2``, which the Makefile sets) computes as ``avx2``: there the
    code the LM digests were pinned from gives the ``avx2`` digests.

    Where no platform matches: fails if this machine can run the pinned kernels
    (:func:`can_run_pinned_kernels`: the environment did not select them, or the CPU computes
    other bits), skips only where it cannot."""
    here = platform_probe()
    pinned = {name: p.probe for name, p in PLATFORMS.items()}
    if torch:
        import torch as _torch

        here = (here[0], _torch.backends.cpu.get_cpu_capability())
        pinned = {name: (p.probe[0], p.torch_cpu) for name, p in PLATFORMS.items()}
    for name, probe in pinned.items():
        if probe == here:
            return name
    why = (f"digests pinned on platform probes {sorted(pinned.values())}, this machine gives "
           f"{here}")
    if not can_run_pinned_kernels():
        pytest.skip(f"{why}: the pinned AVX2 kernels cannot run on this machine "
                    f"({platform.machine()} without {' '.join(_V3_FLAGS)})")
    pytest.fail(f"{why}, though it can run the pinned AVX2 kernels: run the tests with "
                "OPENBLAS_CORETYPE=Haswell NPY_ENABLE_CPU_FEATURES=X86_V3 ATEN_CPU_CAPABILITY=avx2 "
                "(make test sets all three); if "
                "the probes still match no platform, this CPU computes other bits: pin it in "
                "tests/platform_pins.PLATFORMS", pytrace=False)


#: the x86-64-v3 instructions as /proc/cpuinfo names them (LZCNT is ``abm``): what OpenBLAS's
#: Haswell kernels, NumPy's X86_V3 kernels and torch's AVX2 kernels need (the Makefile pins them
#: where a CPU has all of these)
_V3_FLAGS = ("avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe")


def can_run_pinned_kernels() -> bool:
    """Whether this machine can run the kernels the digests were pinned with: an x86-64 whose
    CPU has the x86-64-v3 instructions (:data:`_V3_FLAGS`)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:  # not Linux: ask torch, which knows its CPU's capability
        try:
            import torch as _torch
        except ImportError:
            return False
        return _torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    return all(flag in flags for flag in _V3_FLAGS)


def digest_arrays(arrays: dict) -> str:
    """sha256 over named arrays: name, dtype, shape and bytes, names sorted (the digest the
    pinned tests compare)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        for part in (name, str(a.dtype), repr(a.shape)):
            h.update(part.encode())
        h.update(a.tobytes())
    return h.hexdigest()
