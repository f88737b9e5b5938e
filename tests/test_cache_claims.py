"""Builds sharing one cache compute each unit once: a unit is claimed before it is computed,
another build waits for the claimed unit's entry and serves it as cached, and a claim whose
build stopped (process gone, or not refreshed) is taken over.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np

from ecosim import experiments as E
from ecosim.experiments import store
from ecosim.experiments.store import results_bytes
from tests.test_experiments import TOY, ToyConfig

ROOT = Path(__file__).resolve().parents[1]

# A toy experiment whose units take a while and log each computation (O_APPEND lines).
SCRIPT = textwrap.dedent('''
    import dataclasses, os, sys, time
    import numpy as np
    from ecosim import experiments as E

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class SlowConfig(E.Config):
        units: int = 6

    def units(cfg):
        return [{"i": i} for i in range(cfg.units)]

    def compute(cfg, unit):
        with open(os.environ["LOG"], "a") as f:
            f.write(f"{os.getpid()} {unit['i']}\\n")
        time.sleep(0.4)
        return {"x": np.full(3, unit["i"], np.float64)}

    SLOW = E.Experiment(name="slow", config=SlowConfig, compute=compute, version="1",
                        units=units)
    run = E.run(SLOW, SlowConfig(), cache=sys.argv[1])
    print(run.stats.computed, run.stats.cached, flush=True)
    np.save(sys.argv[2], run.results["x"])
''')


def test_two_builds_on_one_cache_compute_each_unit_once(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(SCRIPT)
    log = tmp_path / "log"
    env = dict(os.environ, LOG=str(log), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "cache"),
                               str(tmp_path / f"r{k}.npy")], env=env, stdout=subprocess.PIPE,
                              text=True) for k in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    lines = log.read_text().splitlines()
    assert sorted(int(line.split()[1]) for line in lines) == list(range(6)), lines
    counts = [tuple(map(int, o.split())) for o in outs]
    assert sum(c for c, _ in counts) == 6 and all(c + k == 6 for c, k in counts), counts
    assert len({line.split()[0] for line in lines}) == 2  # both took part
    a, b = (np.load(tmp_path / f"r{k}.npy") for k in range(2))
    assert np.array_equal(a, b) and np.array_equal(a[:, 0], np.arange(6))
    assert not list((tmp_path / "cache").rglob("*.claim"))  # every claim released


def _claim_held_by(cache, cfg, unit, holder="another-host 1") -> Path:
    """The claim file of ``unit``, written as ``holder`` (host and pid) would write it; by
    default a live build on another host (a fresh mtime)."""
    claim = cache.path(TOY, cfg, unit).with_suffix(".claim")
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(f"{holder}\n")
    return claim


def test_a_unit_claimed_by_another_build_waits_then_is_computed_when_released(tmp_path):
    cfg = ToyConfig().smoke()
    cache = E.Cache(tmp_path / "c")
    claim = _claim_held_by(cache, cfg, TOY.unit_list(cfg)[0])
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("run", E.run(TOY, cfg, cache=cache)))
    t.start()
    time.sleep(1.5)
    assert t.is_alive()  # waiting for the claimed unit, the others computed
    claim.unlink()  # that build stopped without writing the entry
    t.join(timeout=30)
    run = done["run"]
    assert run.stats.computed == len(TOY.unit_list(cfg))
    assert results_bytes(run.results) == results_bytes(E.run(TOY, cfg, cache=tmp_path / "d")
                                                        .results)


def test_stale_claims_are_taken_over(tmp_path):
    cfg = ToyConfig().smoke()
    cache = E.Cache(tmp_path / "c")
    units = TOY.unit_list(cfg)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    _claim_held_by(cache, cfg, units[0], f"{socket.gethostname()} {dead}")  # process gone
    old = time.time() - 2 * store.CLAIM_STALE_S
    os.utime(_claim_held_by(cache, cfg, units[1]), (old, old))  # not refreshed
    assert not cache.claimed(TOY, cfg, units[0]) and not cache.claimed(TOY, cfg, units[1])
    run = E.run(TOY, cfg, cache=cache)
    assert run.stats.computed == len(units)
    assert not list((tmp_path / "c").rglob("*.claim"))


def test_a_live_foreign_claim_is_held(tmp_path):
    cfg = ToyConfig().smoke()
    cache = E.Cache(tmp_path / "c")
    u = TOY.unit_list(cfg)[0]
    p = _claim_held_by(cache, cfg, u)
    assert cache.claimed(TOY, cfg, u) and not cache.claim(TOY, cfg, u)
    p.unlink()
    assert cache.claim(TOY, cfg, u) and not cache.claimed(TOY, cfg, u)
    assert p.read_text().split()[1] == str(os.getpid())
    cache.release(TOY, cfg, u)
    assert not p.exists()


def test_verify_reports_and_clean_removes_a_stopped_builds_claim(tmp_path):
    cfg = ToyConfig().smoke()
    E.run(TOY, cfg, cache=tmp_path / "c")
    cache = E.Cache(tmp_path / "c")
    p = _claim_held_by(cache, cfg, TOY.unit_list(cfg)[0])
    assert cache.verify() == []  # a live claim: a build at work
    old = time.time() - 2 * store.CLAIM_STALE_S
    os.utime(p, (old, old))
    assert [(q.path, q.problem) for q in cache.verify()] == [
        (p, "is the claim of a build that stopped")]
    cache.clean()
    assert not p.exists() and cache.verify() == []
    assert E.run(TOY, cfg, cache=cache).stats.computed == 0
