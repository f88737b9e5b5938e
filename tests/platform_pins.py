"""The platform that pinned digests were computed on (imported as ``from platform_pins import
...`` by tests that pin sha256 digests of results).

A digest of floating-point results holds where the arithmetic is the same: BLAS products may
sum in another order under another kernel, and NumPy's transcendental functions (exp, tanh,
cos, log) take other vector paths on other CPUs (AVX-512 against AVX2). Element-wise IEEE
operations (+, *, /, sqrt) are the same everywhere. A test whose digests go through the former
checks them only where :func:`platform_probe` equals :data:`PINNED_PLATFORM` and skips
elsewhere, naming both (:func:`skip_unless_pinned_platform`).
"""
import functools
import hashlib

import numpy as np
import pytest

from ecosim.experiments.provenance import blas_fingerprint

#: :func:`platform_probe` of the machine the digests were pinned on (x86-64 with AVX2, the
#: locked NumPy and its OpenBLAS with Haswell kernels)
PINNED_PLATFORM = ("d5ef2f766d382443", "e09a5f9cd1efe783")


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


def skip_unless_pinned_platform() -> None:
    """Skip the calling test unless this machine computes as the pinning one did."""
    here = platform_probe()
    if here != PINNED_PLATFORM:
        pytest.skip(f"digests pinned on platform probe {PINNED_PLATFORM}, this machine gives "
                    f"{here} (another BLAS kernel or vector math path)")


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
