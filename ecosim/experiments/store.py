"""Results storage: validation, byte-deterministic ``.npz`` files, atomic writes, the Cache.

Cache: ``<root>/<experiment>/<digest>.npz`` where ``digest`` is the experiment's cache key
(:meth:`~ecosim.experiments.registry.Experiment.digest`); a shared unit's
(:class:`~ecosim.experiments.shared.SharedUnit`) is ``<root>/shared.<module>.<function>/
<digest>.npz``, keyed by its computation, not by the experiments asking. Each entry's
``.json`` beside it records the key and the provenance of the code that computed it (git
revision, dirty flag, source hash; for a shared unit also the experiments that asked for it);
its content (the ``.npz``'s SHA-256 and each array's shape and dtype) is recorded there too, and
an entry that does not match its record, is recorded under another key or cannot be read is
recomputed with a one-line notice, never served. Files are written
byte-deterministic (:func:`save_results`: stored zip members with a fixed timestamp,
``.npy`` payloads) to a temporary file in the same directory and moved into place with
:func:`os.replace`, so a file that exists is complete, and a rerun writes the very same bytes.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import socket
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import provenance as _provenance
from .shared import SharedUnit

if TYPE_CHECKING:
    from .config import Config
    from .registry import Experiment

__all__ = ["Cache", "EntryProblem", "Results", "as_results", "atomic_write", "load_results",
           "results_bytes", "save_results"]


Results = dict[str, np.ndarray]
"""What a compute function returns: named NumPy arrays (no object dtype)."""

DEFAULT_CACHE = ".ecosim_cache"
CACHE_ENV = "ECOSIM_CACHE"
_RESULT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest zip timestamp: fixed, so bytes are stable


# -- results: validation and byte-stable storage ------------------------------------------------

def as_results(raw: Mapping[str, Any], where: str = "results") -> Results:
    """Validate and normalise a compute function's output to ``{str: ndarray}``."""
    if not isinstance(raw, Mapping):
        raise TypeError(f"{where}: a compute function returns a dict of arrays, "
                        f"got {type(raw).__name__}")
    out = {}
    for key in sorted(raw):
        if not isinstance(key, str) or not _RESULT_KEY.match(key):
            raise ValueError(f"{where}: result name {key!r} must match {_RESULT_KEY.pattern}")
        arr = np.asarray(raw[key])
        if arr.dtype.hasobject or arr.dtype.kind not in "biufcUSM":
            raise TypeError(f"{where}: result {key!r} has dtype {arr.dtype}; use numeric, "
                            "bool or fixed-width string arrays")
        arr = np.array(arr, order="C", copy=True)  # a private copy (0-d stays 0-d)
        arr.setflags(write=False)
        out[key] = arr
    return out


def results_bytes(results: Mapping[str, np.ndarray]) -> bytes:
    """The byte-deterministic ``.npz`` image of ``results``: sorted, stored, fixed timestamps."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for key in sorted(results):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(results[key], order="C"),
                                      allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.create_system = 3  # unix, whatever the platform
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def save_results(path: str | os.PathLike, results: Mapping[str, Any]) -> Path:
    """Write ``results`` to ``path`` (``.npz``) atomically and byte-deterministically."""
    path = Path(path)
    atomic_write(path, results_bytes(as_results(results, str(path))))
    return path


def load_results(path: str | os.PathLike) -> Results:
    """Read a ``.npz`` written by :func:`save_results` (no pickles)."""
    # from bytes: np.load leaves its file open when the archive is corrupt
    return _results_from_bytes(Path(path).read_bytes(), str(path))


def atomic_write(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``.

    Returns False (and leaves the file and its mtime alone) when it already holds ``data``.
    """
    path = Path(path)
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


# -- cache --------------------------------------------------------------------------------------

class Cache:
    """Results on disk under ``root/<experiment>/<digest>.npz`` (plus a ``.json`` of the key).

    ``root`` defaults to ``$ECOSIM_CACHE`` or ``.ecosim_cache`` in the working directory.
    """

    def __init__(self, root: str | os.PathLike | None = None, *,
                 seed: str | os.PathLike | None = None):
        if root is None:
            root = os.environ.get(CACHE_ENV) or DEFAULT_CACHE
        if not isinstance(root, (str, os.PathLike)) or not os.fspath(root):
            raise ValueError(f"Cache: root must be a non-empty path, got {root!r}")
        if seed is not None and (not isinstance(seed, (str, os.PathLike))
                                 or not Path(seed).is_dir()):
            raise ValueError(f"Cache: seed must be an existing directory, got {seed!r}")
        self.root = Path(root)
        self.seed = None if seed is None else Path(seed)
        self.seeded = 0
        self._claims: set[Path] = set()

    def __repr__(self) -> str:
        seed = "" if self.seed is None else f", seed={str(self.seed)!r}"
        return f"Cache({str(self.root)!r}{seed})"

    def path(self, exp: Experiment | SharedUnit, cfg: Config | None = None,
             unit=None) -> Path:
        """The entry's ``.npz``: ``root/<experiment>/<digest>.npz``, or for a
        :class:`~.shared.SharedUnit` (``cfg`` and ``unit`` unused) ``root/<its name>/<digest>``."""
        if isinstance(exp, SharedUnit):
            return self.root / exp.name / f"{exp.digest()[:32]}.npz"
        return self.root / exp.name / f"{exp.digest(cfg, unit)[:32]}.npz"

    def load(self, exp: Experiment | SharedUnit, cfg: Config | None = None,
             unit=None, *, notice: bool = True) -> Results | None:
        """Cached results, or None when the entry is absent or cannot be trusted (then it is
        recomputed, and a one-line notice on stderr says why).

        An entry is served only when its ``.json`` names the very key asked for and the
        ``.npz`` holds the content that record names (its SHA-256 and every array's name,
        shape and dtype): an entry copied over another, edited, cut short or left without its
        record is recomputed, never served. Where ``root`` has no entry and the cache has a
        ``seed`` directory holding one that passes the same checks, both files are copied
        into ``root`` and served (counted in :attr:`seeded`). ``notice=False``: no notice
        (a second look at an entry already reported)."""
        path = self.path(exp, cfg, unit)
        if not path.exists():
            return self._from_seed(exp, cfg, unit, path)
        results, problem = _read_entry(path, exp, cfg, unit)
        if problem is not None and notice:
            print(f"ecosim: cache entry {path} {problem}; recomputing it", file=sys.stderr)
        return results

    def _from_seed(self, exp, cfg, unit, path: Path) -> Results | None:
        if self.seed is None:
            return None
        src = self.seed / path.relative_to(self.root)
        if not src.exists():  # another key: the code, packages or platform differ
            return None
        results, problem = _read_entry(src, exp, cfg, unit)
        if problem is not None:
            print(f"ecosim: seed entry {src} {problem}; computing it", file=sys.stderr)
            return None
        # the record last, as save() writes it
        atomic_write(path, src.read_bytes())
        atomic_write(path.with_suffix(".json"), src.with_suffix(".json").read_bytes())
        self.seeded += 1
        return results

    def provenance(self, exp: Experiment | SharedUnit, cfg: Config | None = None,
                   unit=None) -> dict[str, Any]:
        """Who computed an entry: ``{"git_revision", "git_dirty", "source_sha256"}`` from its
        ``.json`` (Nones where the file is missing or older than this record)."""
        try:
            doc = json.loads(self.path(exp, cfg, unit).with_suffix(".json").read_text())
            prov = doc.get("provenance") or {}
        except (OSError, ValueError, AttributeError):
            prov = {}
        return {k: prov.get(k) for k in ("git_revision", "git_dirty", "source_sha256")}

    def verify(self, *, stale: bool = False, now: float | None = None) -> list[EntryProblem]:
        """Check every entry of the cache on its own, as :meth:`load` would before serving it:
        a record that reads and hashes to the entry's name, and the content it names. Also
        reported: records without results, temporary files of killed writes (older than
        :data:`STALE_TMP_S`), claims of builds that stopped, and with ``stale`` entries
        computed by other code than this ecosim's (never served again; :meth:`clean` frees
        their space).

        Returns:
            The problems, sorted by path (empty: every entry can be served).
        """
        now = time.time() if now is None else now
        found: list[EntryProblem] = []
        if not self.root.is_dir():
            return found
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            code = _current_code(folder.name) if stale else None
            for f in sorted(folder.iterdir()):
                if f.suffix == ".npz" and not f.name.startswith("."):
                    doc, problem = _verify_entry(f)
                    if problem is None and code is not None:
                        if _json_image(doc.get("code")) != _json_image(code):
                            problem = "was computed by other code or packages (stale)"
                    if problem is not None:
                        found.append(EntryProblem(f, problem))
                elif f.suffix == ".json" and not f.with_suffix(".npz").exists():
                    found.append(EntryProblem(f, "is a record without results"))
                elif f.suffix == ".claim":
                    held = _claim_holder(f)
                    if held is None or _claim_is_stale(f, held):
                        found.append(EntryProblem(f, "is the claim of a build that stopped"))
                elif f.name.startswith(".") and f.suffix == ".tmp" and \
                        now - f.stat().st_mtime > STALE_TMP_S:
                    found.append(EntryProblem(f, "is a temporary file of a killed write"))
        return found

    def clean(self, problems: list[EntryProblem] | None = None, *,
              stale: bool = False) -> int:
        """Delete the entries (both files) of ``problems`` (default: :meth:`verify`'s, with
        ``stale``) and return the bytes freed. Only files under ``root`` are touched."""
        if problems is None:
            problems = self.verify(stale=stale)
        freed = 0
        root = self.root.resolve()
        for path, _ in problems:
            files = ([path] if path.suffix in (".tmp", ".claim")
                     else [path.with_suffix(".npz"), path.with_suffix(".json")])
            for f in files:
                if root not in f.resolve().parents:
                    raise ValueError(f"{f} is not under the cache root {self.root}")
                try:
                    size = f.stat().st_size
                    f.unlink()
                    freed += size
                except FileNotFoundError:
                    pass
        return freed

    # -- claims: one build computes a unit, the others wait for its entry -------------------
    def claim(self, exp: Experiment | SharedUnit, cfg: Config | None = None,
              unit=None) -> bool:
        """Claim the entry for this process to compute: True when it was free (or its claim
        stale, or this process's), False while another live build holds it.

        The claim is ``<entry>.claim``, created exclusively. It is stale when its process is
        gone (same host) or it has not been refreshed (:meth:`refresh_claims`) for
        :data:`CLAIM_STALE_S`, so a build killed mid-unit never blocks others for long."""
        path = self._claim_path(exp, cfg, unit)
        path.parent.mkdir(parents=True, exist_ok=True)
        mine = _claim_text()
        for _ in range(3):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                held = _claim_holder(path)
                if held == mine:
                    return True
                if held is not None and not _claim_is_stale(path, held):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # stale: taken over
                continue
            with os.fdopen(fd, "w") as f:
                f.write(mine)
            self._claims.add(path)
            return True
        return False

    def claimed(self, exp: Experiment | SharedUnit, cfg: Config | None = None,
                unit=None) -> bool:
        """Whether another live build holds the claim of this entry."""
        path = self._claim_path(exp, cfg, unit)
        held = _claim_holder(path)
        return held is not None and held != _claim_text() and not _claim_is_stale(path, held)

    def release(self, exp: Experiment | SharedUnit, cfg: Config | None = None,
                unit=None) -> None:
        """Give up this process's claim of the entry (nothing if it holds none)."""
        self._release(self._claim_path(exp, cfg, unit))

    def release_all(self) -> None:
        """Give up every claim this process holds in this cache."""
        for path in list(self._claims):
            self._release(path)

    def refresh_claims(self) -> None:
        """Mark this process's claims as alive (their mtime), so no build takes them over."""
        for path in list(self._claims):
            with contextlib.suppress(OSError):
                os.utime(path)

    def _claim_path(self, exp, cfg, unit) -> Path:
        return self.path(exp, cfg, unit).with_suffix(".claim")

    def _release(self, path: Path) -> None:
        if _claim_holder(path) == _claim_text():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._claims.discard(path)

    def save(self, exp: Experiment | SharedUnit, cfg: Config | None, unit,
             results: Results, *, asked_by: tuple[str, ...] = ()) -> Path:
        """Write an entry: the ``.npz`` and a ``.json`` of its key and provenance (for a
        shared unit also ``asked_by``: the experiments that asked for it when it was computed,
        the first of them the one it was computed for; not part of the key)."""
        path = self.path(exp, cfg, unit)
        doc = exp.key_doc() if isinstance(exp, SharedUnit) else exp.key_doc(cfg, unit)
        rev, dirty = _provenance.git_revision()
        doc["provenance"] = {"git_revision": rev, "git_dirty": dirty,
                             "source_sha256": doc["code"]["source_sha256"]}
        if isinstance(exp, SharedUnit):
            doc["provenance"]["asked_by"] = list(asked_by)
        data = results_bytes(results)
        doc["content"] = {"sha256": hashlib.sha256(data).hexdigest(),
                          "arrays": _array_record(results)}
        # the record last: an entry whose record is missing or older is never served
        atomic_write(path, data)
        atomic_write(path.with_suffix(".json"),
                     (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode())
        return path


#: a claim not refreshed for this long (seconds) belongs to a build that stopped
CLAIM_STALE_S = 300.0


def _claim_text() -> str:
    return f"{socket.gethostname()} {os.getpid()}\n"


def _claim_holder(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _claim_is_stale(path: Path, held: str) -> bool:
    host, _, pid = held.strip().rpartition(" ")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's
    try:
        return time.time() - path.stat().st_mtime > CLAIM_STALE_S
    except FileNotFoundError:
        return True


class EntryProblem(NamedTuple):
    """A file of a cache that :meth:`Cache.verify` found cannot be served (or is stale)."""

    path: Path
    problem: str


#: a temporary file older than this (seconds) was left by a killed write, not one in flight
STALE_TMP_S = 3600.0


def _record(npz: Path) -> tuple[dict | None, str | None]:
    """The entry's ``.json`` record, or None and why it cannot be read."""
    try:
        doc = json.loads(npz.with_suffix(".json").read_text())
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return None, f"has no readable record ({type(exc).__name__})"
    return doc, None


def _key_of(doc: dict) -> dict:
    """The part of a record that keys the entry (all but its provenance and content)."""
    return {k: v for k, v in doc.items() if k not in ("provenance", "content")}


def _content(npz: Path, doc: dict) -> tuple[Results | None, str | None]:
    """The ``.npz``'s results when they are the content ``doc`` names, or None and why not."""
    content = doc.get("content")
    if not isinstance(content, dict) or "sha256" not in content:
        return None, "has no content record"
    try:
        data = npz.read_bytes()
        if hashlib.sha256(data).hexdigest() != content["sha256"]:
            return None, "does not hold the content its record names"
        results = _results_from_bytes(data, str(npz))
    except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        return None, (f"is unreadable ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})")
    if _array_record(results) != content.get("arrays"):
        return None, "does not hold the arrays its record names"
    return results, None


def _verify_entry(npz: Path) -> tuple[dict | None, str | None]:
    """The record of entry ``npz`` and what is wrong with the entry judged on its own (no
    experiment asked; None: nothing): the record must read, hash to the entry's name, and
    name the ``.npz``'s content."""
    doc, why = _record(npz)
    if doc is None:
        return None, why
    digest = hashlib.sha256(json.dumps(_key_of(doc), sort_keys=True, separators=(",", ":"),
                                       ensure_ascii=True).encode()).hexdigest()
    if digest[:32] != npz.stem:
        return doc, "is recorded under another key (moved or copied from another entry)"
    return doc, _content(npz, doc)[1]


def _current_code(folder: str) -> dict | None:
    """The code fingerprint entries of cache folder ``folder`` would be keyed by now (None:
    not an experiment or shared unit of this ecosim)."""
    from .registry import experiments

    if folder.startswith("shared."):
        module = folder[len("shared."):].rsplit(".", 1)[0]
        try:
            return _provenance.code_fingerprint(module)
        except Exception:  # a module this ecosim no longer has
            return None
    exp = experiments().get(folder)
    return None if exp is None else exp.code()


def _read_entry(path: Path, exp, cfg, unit) -> tuple[Results | None, str | None]:
    """An entry's results and None, or None and what is wrong with it (see Cache.load)."""
    doc, why = _record(path)
    if doc is None:
        return None, why
    asked = exp.key_doc() if isinstance(exp, SharedUnit) else exp.key_doc(cfg, unit)
    if _key_of(doc) != _json_image(asked):
        return None, "is recorded under another key"
    return _content(path, doc)


def _json_image(doc: Any) -> Any:
    """``doc`` as it reads back from the ``.json`` record (tuples become lists, and so on)."""
    return json.loads(json.dumps(doc, sort_keys=True))


def _array_record(results: Mapping[str, np.ndarray]) -> dict[str, list]:
    """``{name: [shape, dtype]}``: what a content record says each array is."""
    return {k: [list(np.shape(v)), np.asarray(v).dtype.str] for k, v in sorted(results.items())}


def _results_from_bytes(data: bytes, where: str) -> Results:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return as_results({k: npz[k] for k in npz.files}, where)
