"""The word shims of ecosim.core.bitops (NumPy) and ecosim.torch.bitops (torch): each primitive
against its definition in Python ints, and the shared mixer through both shims."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim import rng

from ecosim.core import bitops

torch = pytest.importorskip("torch")

from ecosim.torch.bitops import TORCH_WORDS, signed_word  # noqa: E402

pytestmark = pytest.mark.torch

# Edge words (0, 1, the sign bit, all ones) and random ones.
WORDS = np.concatenate([np.array([0, 1, 2**31 - 1, 2**31, 2**32 - 1], np.uint64),
                        np.random.default_rng(0).integers(0, 2**32, 59, np.uint64)])


def as_torch(words: np.ndarray, dtype) -> torch.Tensor:
    """uint32 values as torch words of ``dtype`` (int32: the two's complement)."""
    if dtype == torch.int32:
        return torch.from_numpy(words.astype(np.uint32).view(np.int32).copy())
    return torch.from_numpy(words.astype(np.int64))


def low32(t: torch.Tensor) -> np.ndarray:
    return (t.to(torch.int64) & 0xFFFFFFFF).numpy().astype(np.uint64)


@pytest.mark.parametrize("lo, n", [(0, 32), (0, 3), (9, 23), (31, 1), (16, 16), (0, 1)])
@pytest.mark.parametrize("wdtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("odtype", [torch.int32, torch.int64])
def test_field_is_the_bits_and_leaves_its_input(lo, n, wdtype, odtype):
    want = (WORDS >> np.uint64(lo)) & np.uint64((1 << n) - 1)
    w = as_torch(WORDS, wdtype)
    before = w.clone()
    out = torch.empty(WORDS.size, dtype=odtype)
    TORCH_WORDS.field(w, lo, n, out)
    assert_array_equal(low32(out), want)
    assert torch.equal(w, before)
    for wd, od in ((np.uint32, np.uint32), (np.uint32, np.uint64), (np.int64, np.uint32)):
        words = WORDS.astype(wd)
        np_out = np.empty(WORDS.size, od)
        bitops.NUMPY_WORDS.field(words, lo, n, np_out)
        assert_array_equal(np_out.astype(np.uint64), want)
        assert_array_equal(words, WORDS.astype(wd))


@pytest.mark.parametrize("s", [0, 1, 15, 16, 31])
def test_shr_is_logical(s):
    want = WORDS >> np.uint64(s)
    out = torch.empty(WORDS.size, dtype=torch.int32)
    TORCH_WORDS.shr(as_torch(WORDS, torch.int32), s, out)
    assert_array_equal(low32(out), want)
    np_out = np.empty(WORDS.size, np.uint32)
    bitops.NUMPY_WORDS.shr(WORDS.astype(np.uint32), s, np_out)
    assert_array_equal(np_out, want)


def test_word_and_add_wrap_modulo_the_width():
    assert signed_word(2**32 - 1) == -1 and signed_word(2**31) == -2**31
    assert signed_word(2**31 - 1) == 2**31 - 1 and signed_word(2**64 - 1, 64) == -1
    v = 0x9E3779B9
    out = torch.empty(WORDS.size, dtype=torch.int32)
    TORCH_WORDS.add(as_torch(WORDS, torch.int32), v, out)
    assert_array_equal(low32(out), (WORDS + np.uint64(v)) & np.uint64(2**32 - 1))


def test_mix32_through_both_shims_is_mix32_int():
    want = np.array([rng.mix32_int(int(w)) for w in WORDS], np.uint64)
    x = WORDS.astype(np.uint32)
    bitops.mix32(x, np.empty_like(x), bitops.NUMPY_WORDS)
    assert_array_equal(x, want)
    t = as_torch(WORDS, torch.int32)
    bitops.mix32(t, torch.empty_like(t), TORCH_WORDS)
    assert_array_equal(low32(t), want)
