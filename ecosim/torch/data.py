"""Byte-level text corpora for the language-model runs of :mod:`ecosim.torch.lm`.

A corpus is one text file or every file under a folder (recursively, in sorted order of the
relative POSIX paths, hidden entries and ``__pycache__`` skipped), concatenated as raw bytes.
Tokens are bytes (vocabulary 256): no tokenizer, nothing to download. The default corpus is
the ``.py`` sources of the running Python's standard library (``sysconfig``'s ``stdlib`` path,
without ``site-packages``/``dist-packages``), which every machine has; its bytes differ
between Python versions, so the fingerprint (file count, bytes, sha256) goes into every
results record. ``"stdlib:SUFFIXES"`` names another slice of the same folder: its files ending
in the comma-separated suffixes (``"stdlib:.txt"``: the test data, change logs and licences,
about 0.4 MB with CPython 3.11: a distribution shift from the sources, used by the
fine-tuning experiment :mod:`ecosim.experiments.lm_finetune`).

Splits and batches are pure functions:

* the split cuts the byte stream into blocks of :data:`SPLIT_BLOCK` bytes and sends every
  :data:`VAL_EVERY`-th block (indices ``VAL_EVERY-1, 2*VAL_EVERY-1, ...``) to validation, the
  rest to training (interleaved, so validation covers the whole corpus, and independent of
  any seed);
* a batch is ``batch`` windows of ``seq + 1`` bytes at offsets drawn from the counter-based
  generator of :mod:`ecosim.core.rng` under a key (``fold_in(seed, "train", step, micro)`` in
  training), so the data position of a run is just its step: nothing to save, and any process
  can draw any micro-batch.

The loaded corpus is cached in memory (one uint8 tensor per path) for the life of the process.
A corpus that cannot be trained on (empty, unreadable, a binary file: one holding a NUL byte,
which no text file does) raises :class:`CorpusError`, a ``ValueError`` whose message names the
file and says what to pass instead.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ..core import rng

__all__ = ["Corpus", "CorpusError", "SPLIT_BLOCK", "STDLIB", "VAL_EVERY", "corpus_files",
           "default_corpus_path", "get_batch", "load_corpus", "split"]

SPLIT_BLOCK = 4096  # bytes per split block
VAL_EVERY = 20  # one block in 20 (5%) is validation
STDLIB = "stdlib:"  # "stdlib:.txt": the standard library's files with these suffixes
_SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages"}


class CorpusError(ValueError):
    """A corpus that cannot be trained on: empty, unreadable, binary or too short."""


@dataclass(frozen=True)
class Corpus:
    """A byte corpus held in memory.

    Attributes:
        tokens: uint8 tensor of every byte, files concatenated in order.
        source: the path it was read from (resolved).
        files: number of files read.
        sha256: hex digest of the concatenated bytes.
    """

    tokens: torch.Tensor
    source: str
    files: int
    sha256: str

    @property
    def nbytes(self) -> int:
        """Bytes (= tokens) in the corpus."""
        return int(self.tokens.numel())

    def fingerprint(self) -> dict:
        """What identifies the corpus in a results record."""
        return {"source": self.source, "files": self.files, "bytes": self.nbytes,
                "sha256": self.sha256}


def default_corpus_path() -> Path:
    """The running Python's standard-library folder (its ``.py`` files are the default corpus)."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(path: str | os.PathLike, suffixes: tuple[str, ...] = ()) -> list[Path]:
    """The files a corpus at ``path`` is made of, in corpus order.

    Args:
        path: a file (the corpus is that file) or a folder (searched recursively; hidden files
            and folders, ``__pycache__``, ``site-packages`` and ``dist-packages`` are skipped).
        suffixes: keep only names ending in one of these (e.g. ``(".py",)``); empty keeps all.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CorpusError: a folder without a matching file.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"data path {str(p)!r} does not exist")
    if p.is_file():
        return [p]
    found = []
    for root, dirs, files in os.walk(p):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
        for f in files:
            if f.startswith(".") or (suffixes and not f.endswith(suffixes)):
                continue
            fp = Path(root, f)
            if fp.is_file():
                found.append(fp)
    if not found:
        which = f" ending in {'/'.join(suffixes)}" if suffixes else ""
        raise CorpusError(f"no files{which} under {str(p)!r}: pass a text file or a folder "
                          "of text files")
    # Sorted by the relative POSIX path: the same order on every OS and file system.
    return sorted(found, key=lambda f: f.relative_to(p).as_posix())


def load_corpus(path: str | os.PathLike | None = None) -> Corpus:
    """Read (once per process) the corpus at ``path``; None is the standard library's ``.py``,
    ``"stdlib:.txt,.rst"`` its files ending in those suffixes.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CorpusError: the corpus is empty, a file cannot be read, or a file is binary (holds a
            NUL byte); a ``stdlib:`` name without suffixes.
    """
    if path is None:
        return _load(str(default_corpus_path().resolve()), (".py",))
    if isinstance(path, str) and path.startswith(STDLIB):
        suffixes = tuple(s for s in path[len(STDLIB):].split(",") if s)
        if not suffixes:
            raise CorpusError(f"{path!r} names no suffixes: pass e.g. 'stdlib:.txt'")
        return _load(str(default_corpus_path().resolve()), suffixes)
    return _load(str(Path(path).resolve()), ())


@lru_cache(maxsize=4)
def _load(path: str, suffixes: tuple[str, ...]) -> Corpus:
    files = corpus_files(path, suffixes)
    h = hashlib.sha256()
    parts = []
    for f in files:
        try:
            b = f.read_bytes()
        except OSError as exc:
            raise CorpusError(f"cannot read corpus file {str(f)!r} ({exc.strerror or exc}): "
                              "check its permissions or pass another file") from None
        if b"\0" in b:
            raise CorpusError(f"corpus file {str(f)!r} looks binary (it holds NUL bytes): "
                              "the corpus must be text; pass a text file or folder")
        h.update(b)
        parts.append(b)
    data = b"".join(parts)
    if not data:
        raise CorpusError(f"the corpus at {path!r} is empty: pass a text file or folder "
                          "with some data")
    tokens = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())
    return Corpus(tokens=tokens, source=path, files=len(files), sha256=h.hexdigest())


def split(tokens: torch.Tensor, *, block: int = SPLIT_BLOCK,
          every: int = VAL_EVERY) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic (train, validation) split: every ``every``-th block of ``block`` bytes
    is validation.

    Args:
        tokens: 1-D uint8 tensor.
        block: bytes per block.
        every: one block in ``every`` goes to validation.

    Returns:
        Two 1-D uint8 tensors (copies): the training blocks and the validation blocks, each in
        corpus order.

    Example:
        >>> tr, va = split(torch.arange(100, dtype=torch.uint8), block=10, every=4)
        >>> va.tolist()[:3], va.numel(), tr.numel()
        ([30, 31, 32], 20, 80)
    """
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}")
    if block < 1 or every < 2:
        raise ValueError(f"need block >= 1 and every >= 2, got block={block}, every={every}")
    n_full = tokens.numel() // block
    full = tokens[:n_full * block].view(n_full, block)
    is_val = (torch.arange(n_full) % every) == every - 1
    train, val = [full[~is_val].reshape(-1)], [full[is_val].reshape(-1)]
    tail = tokens[n_full * block:]  # a last, partial block
    (val if n_full % every == every - 1 else train).append(tail)
    return torch.cat(train), torch.cat(val)


def get_batch(tokens: torch.Tensor, batch: int, seq: int, key: int,
              device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` windows of ``seq`` inputs and their next-byte targets, drawn under ``key``.

    Offsets are uniform over ``[0, n - seq - 1]`` (``n`` the split's length), each from two
    32-bit words of :func:`ecosim.core.rng.random_bits` (a 64-bit draw, so the modulo bias is below
    ``n / 2**64``): the batch is a pure function of ``(tokens, batch, seq, key)``.

    Returns:
        ``(x, y)``: int64 tensors of shape ``(batch, seq)`` on ``device``; ``y`` is ``x``
        shifted by one byte.

    Raises:
        ValueError: the split is shorter than ``seq + 1`` bytes.
    """
    n = tokens.numel()
    span = n - seq  # number of valid start offsets (window of seq + 1 bytes)
    if span < 1:
        raise ValueError(f"a split of {n} bytes is too short for sequences of {seq} (+1) "
                         "bytes; use more data or a shorter --seq")
    w = rng.random_bits(key, 0, 2 * batch).astype(np.uint64)
    draws = (w[0::2] << np.uint64(32)) | w[1::2]
    off = torch.from_numpy((draws % np.uint64(span)).astype(np.int64))
    win = tokens[off[:, None] + torch.arange(seq + 1)].to(torch.int64)
    win = win.to(device)
    return win[:, :-1], win[:, 1:]
