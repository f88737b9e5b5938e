"""The platforms that pinned digests were computed on (imported as ``from platform_pins import
...`` by tests that pin sha256 digests of results).

A digest of floating-point results holds where the arithmetic is the same: BLAS products may
sum in another order under another kernel, NumPy's transcendental functions (exp, tanh, cos,
log) take other vector paths on other CPUs (AVX-512 against AVX2), and torch's CPU ops dispatch
to kernels built for the CPU's vector width. Element-wise IEEE operations (+, *, /, sqrt) are
the same everywhere. So a test pins its digests per platform of :data:`PLATFORMS` and checks
those of the platform this machine computes as (:func:`pinned_platform`); elsewhere it skips,
naming the probes.
"""
import functools
import hashlib
from typing import NamedTuple

import numpy as np
import pytest

from ecosim.experiments.provenance import blas_fingerprint


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


@functools.lru_cache(maxsize=1)
def platform_probe() -> tuple[str, str]:
    """(BLAS probe, ufunc probe): hashes of fixed float32 products
    (:func:`~ecosim.experiments.provenance.blas_fingerprint`) and of NumPy's exp, tanh, log1p,
    expm1, sin, cos, log, sum and cumsum on fixed float32 and float64 inputs."""
    x = (np.arange(1, 4097, dtype=np.float64) * 0.6180339887498949 % 1.0 - 0.5) * 8
    h = hashlib.sha256()
    for dt in (np.float32, np.float64):
        v = x.astype(dt)
        for f in (np.exp, np.tanh, np.log1p, np.expm1, np.sin, np.cos):
            h.update(f(v if f is not np.log1p else np.abs(v)).tobytes())
        h.update(np.log(np.abs(v) + 1).tobytes())
        h.update(np.sum(v).tobytes())
        h.update(np.cumsum(v).tobytes())
    return blas_fingerprint()["probe"], h.hexdigest()[:16]


def pinned_platform(torch: bool = False) -> str:
    """The name in :data:`PLATFORMS` of the platform this machine computes as, by
    :func:`platform_probe`; skips the calling test where none matches, naming the probes.

    With ``torch=True`` (digests of torch runs) a platform is the BLAS probe and torch's CPU
    capability (which kernels torch's CPU ops ran) instead: a torch run does not go through
    NumPy's vector math, so an AVX-512 machine running torch's AVX2 kernels
    (``ATEN_CPU_CAPABILITY=avx2``, which the Makefile sets) computes as ``avx2`` (measured:
    the code the LM digests were pinned from gives the ``avx2`` digests there)."""
    here = platform_probe()
    pinned = {name: p.probe for name, p in PLATFORMS.items()}
    if torch:
        import torch as _torch

        here = (here[0], _torch.backends.cpu.get_cpu_capability())
        pinned = {name: (p.probe[0], p.torch_cpu) for name, p in PLATFORMS.items()}
    for name, probe in pinned.items():
        if probe == here:
            return name
    pytest.skip(f"digests pinned on platform probes {sorted(pinned.values())}, this machine "
                f"gives {here} (another BLAS kernel or vector math path)")


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
