"""Shared test configuration: deterministic hypothesis profiles; torch test fixtures; the
language-model figures built from a results file."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

try:  # a test extra: without it (e.g. on a GPU machine) the tests that need it fail to import
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - the test extras are installed in CI
    settings = None
if settings is not None:
    # CI: fixed seed (derandomize), bounded example counts, no deadline (shared noisy machines).
    settings.register_profile(
        "ci", derandomize=True, max_examples=60, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", max_examples=100, deadline=None)
    # Wide: for `pytest -m slow` explorations.
    settings.register_profile("wide", max_examples=2000, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# -- torch backend: one thread, a corpus slice, torchrun (tests/test_torch_*.py) ----------------

@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """The first ~400 kB of the standard library corpus (whole files, in corpus order) as one
    file: what the language-model tests train on."""
    from ecosim.torch import data as lmdata  # imports torch: only where a test asks for it

    out = bytearray()
    for f in lmdata.corpus_files(lmdata.default_corpus_path(), (".py",)):
        out += f.read_bytes()
        if len(out) > 400_000:
            break
    path = tmp_path_factory.mktemp("corpus") / "text.py"
    path.write_bytes(bytes(out))
    return str(path)


@pytest.fixture
def one_torch_thread():
    """torch on one CPU thread during the test, the previous count restored after (the torch
    test modules use it as ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``: the
    same kernels, hence the same sums, whatever the machine's core count)."""
    import torch  # only where a test asks for it

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def torchrun():
    """``torchrun(args, cwd)``: ``torchrun --standalone --nproc_per_node 2 ARGS`` with one
    thread per process and this checkout importable; asserts success, returns the process."""
    def run(args, cwd):
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", *map(str, args)]
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        return p
    return run


# -- the language-model figures from a results file (tests/test_figures_lm.py, test_lm_protocol) -

@pytest.fixture
def lm_figures(tmp_path, capsys):
    """``lm_figures(records, only=("lm_table", "lm_pareto"))``: writes the records as the
    results file ``runs.jsonl``, builds the figures from it through the CLI (``ecosim figures
    --set lm.results_file=...``, one cache per test), asserts success and returns the output
    folder. No torch needed: the figures only read the file."""
    from ecosim.tooling import cli

    results, out = tmp_path / "runs.jsonl", tmp_path / "out"

    def build(records, only=("lm_table", "lm_pareto")):
        results.write_text("".join(json.dumps(r) + "\n" for r in records))
        rc = cli.main(["figures", "--only", *only, "--out", str(out), "--cache",
                       str(tmp_path / "cache"), "--no-progress",
                       "--set", f"lm.results_file={results}"])
        assert rc == 0, capsys.readouterr().err
        return out
    return build
