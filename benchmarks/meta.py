"""Where a benchmark's numbers go: ``benchmarks/results/<name>.md`` (its tables, as printed) and
``benchmarks/results/<name>.json`` (the metadata a reader needs to weigh them: when, on which
machine, with which kernels, under what load, with which package versions and command).

Measurements live here, beside the metadata that makes them readable, and nowhere in the source:
the documentation's Benchmarks page is generated from these files. A benchmark script calls
:func:`write` once at the end of a run with the markdown it printed::

    from meta import write  # benchmarks/meta.py, next to the script
    write("torch_lm", markdown, argv=sys.argv)
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

#: the packages whose versions decide the numbers
PACKAGES = ("numpy", "scipy", "ml_dtypes", "torch", "gfloat", "pychop")

#: the environment settings that pick kernels and threads
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return sorted(f for f in ("avx2", "fma", "avx512f") if f in have)
    except OSError:
        pass
    return []


def _revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True,
                               cwd=Path(__file__).resolve().parent).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _torch_kernels() -> dict:
    if "torch" not in sys.modules:
        return {}
    torch = sys.modules["torch"]
    return {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads()}


def metadata_now(argv=None) -> dict:
    """This run's metadata: UTC time, machine, kernels, load, versions, revision, command."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpu": _cpu_model(), "cpu_flags": _cpu_flags(),
                    "cores": os.cpu_count(), "arch": platform.machine(),
                    "python": platform.python_version()},
        "kernels": {**{k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
                    **_torch_kernels()},
        "load_1_5_15": [round(x, 2) for x in load],
        "versions": _versions(),
        "revision": _revision(),
        "command": " ".join(["python", *(argv if argv is not None else sys.argv)]),
    }


def write(name: str, markdown: str, argv=None, extra: dict | None = None) -> Path:
    """Write ``results/<name>.md`` (``markdown``) and ``results/<name>.json`` (the metadata,
    with ``extra`` under ``"extra"``); returns the markdown file's path."""
    RESULTS.mkdir(exist_ok=True)
    meta = metadata_now(argv)
    if extra:
        meta["extra"] = extra
    md = RESULTS / f"{name}.md"
    md.write_text(markdown.rstrip("\n") + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps({"benchmark": name, **meta}, indent=1)
                                          + "\n")
    return md
