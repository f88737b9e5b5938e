"""The ECO paper's Table 1 on a language model (figures ``lm_table`` and ``lm_pareto``).

Each unit trains one Llama-style decoder with :func:`ecosim.torch.lm.train` (the torch
backend: ``make torch``) on the default corpus, the Python standard library's own sources
read byte by byte, under one method of the paper's Table 1 (FP8 E4M3 row-wise weights in the
block-internal linear layers; AdamW (0.9, 0.98), eps 1e-9, wd 0.1, clip 1.0, warmup 10% then
cosine to 0.1x).

The default is the Table 1 protocol that ``make figures`` runs: preset ``micro`` (32,928
non-embedding parameters, counted as :func:`ecosim.torch.model.param_counts` does), 650 steps
of 16 sequences of 64 bytes (665,600 training tokens: 20.2 per non-embedding parameter), every
Table 1 method and FP32, 5 seeds paired by seed (seed ``s`` fixes the init, the data order and
the SR keys of every method alike), validation on 16 batches every 65 steps: 40 runs on one
thread each, small enough for ``make figures`` (the time table of ``ecosim figures`` gives
their CPU time). Five seeds rather than three: with 3 seeds one of the paper's orderings and
one gap's interval were resolved on torch's AVX2 kernels and not on its AVX-512 ones, the last
bits of the float sums being all that differed. Larger presets run with
``python -m ecosim.torch.lm`` (see the README's LM section for ``tiny`` at 2100 steps) and
are plotted from their results file with
``ecosim figures --only lm_table lm_pareto --set lm.results_file=FILE``.

With ``results_file`` set the experiment trains nothing: its single unit is the SHA-256 of the
file (so the cache follows the file's contents) and it reads the records (JSON lines, one per
finished run, as ``python -m ecosim.torch.lm --results FILE`` appends them).

Results (one row per run): ``preset``, ``method``, ``seed``, ``steps``, ``tokens``,
``val_loss`` and ``final_train_loss`` (NaN when diverged), ``diverged``, ``n_nonembed``,
``n_quantized``, ``bytes_formula`` and ``bytes_measured`` (static bytes per parameter of the
quantized linear layers: weights plus optimizer states), ``peak_memory`` (bytes), the
curves ``curve_step``, ``curve_train``, ``curve_val`` (rows padded with NaN), the run's
``seq``, ``global_batch``, ``lr``, ``storage`` and ``corpus`` (SHA-256), and ``setting``
(:func:`run_setting`: what besides preset, method and seed defines the run).

Comparable runs: two records are runs of the same experiment (and their seeds may be averaged)
only when preset, method and :func:`run_setting` agree: the model's shape, steps, sequence
length, global batch, peak lr and schedule, AdamW's betas, eps and weight decay, clipping,
validation batches, weight storage, corpus (SHA-256) and train/validation split. How a global
batch is cut into micro-batches or processes, FSDP, device and versions are not part of it.
A results file holds one run per seed of each such identity: :func:`unique_runs` keeps one of
repeated runs with identical outcomes (a notice) and refuses repeats that differ.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np

from .. import recipes
from .base import Config, ConfigError, at_least, distinct, experiment
from .shared import SharedUnit

__all__ = ["LMTableConfig", "METHODS", "OTHER_METHODS", "method_parts", "records_to_results",
           "read_records", "run_setting", "describe_setting", "unique_runs",
           "train_record", "train_run", "shared_run", "run_units", "combine_runs",
           "SWITCH_FLAGS"]

#: Table 1's seven methods, in the paper's order (names of ``python -m ecosim.torch.lm``).
METHODS = tuple(m.name for m in recipes.TABLE1)


#: the runner's methods beyond Table 1 (DQT and BitNet b1.58): ``(weights, scheme, mode)``
OTHER_METHODS = {n: m.parts for n, m in recipes.LM_METHODS.items()
                 if m.kind in ("dqt", "bitnet")}


def method_parts(method: str) -> tuple[str, str, str]:
    """``(weights, scheme, mode)`` of a method name of :data:`ecosim.recipes.LM_METHODS`, e.g.
    ``fp8_eco_sr -> (e4m3, eco, sr)``, ``dqt8_sr -> (int8, dqt, sr)``; ValueError (listing
    every accepted name) for any other."""
    return recipes.lm_method(method).parts


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMTableConfig(Config):
    """Which language-model runs to make (or which results file to read).

    Attributes:
        presets: model presets of :mod:`ecosim.torch.lm` (``micro`` by default).
        methods: Table 1's methods and ``fp32`` (all eight by default).
        seeds: number of seeds per preset (runs with seeds ``0 .. n-1``; the model init,
            data order and SR keys all follow the seed; every method sees the same seeds).
        steps: optimizer steps per run, one entry per preset.
        batch, seq: sequences per step and tokens per sequence.
        eval_every, eval_batches: validation cadence and size.
        results_file: read these JSON-lines records instead of training (see module doc).
    """

    presets: tuple[str, ...] = ("micro",)
    methods: tuple[str, ...] = ("fp32",) + METHODS
    seeds: tuple[int, ...] = (5,)
    steps: tuple[int, ...] = (650,)
    batch: int = 16
    seq: int = 64
    eval_every: int = 65
    eval_batches: int = 16
    results_file: str = ""

    #: a subclass's accepted methods (None: every method of the runner)
    ONLY: ClassVar[tuple[str, ...] | None] = None
    SMOKE: ClassVar[dict] = {"presets": ("tiny",), "methods": ("bf16_master", "fp8_eco_sr"),
                             "steps": (8,), "seeds": (1,), "batch": 4, "seq": 32, "eval_every": 4,
                             "eval_batches": 2}
    CHECKS: ClassVar[dict] = {
        "presets": distinct, "methods": distinct, "seeds": at_least(1), "steps": at_least(1),
        "batch": at_least(1), "seq": at_least(1), "eval_every": at_least(1),
        "eval_batches": at_least(1)}

    def __post_init__(self):
        super().__post_init__()
        for m in self.methods:
            try:
                method_parts(m)
            except ValueError as exc:
                raise ConfigError(f"LMTableConfig.methods: {exc}") from None
        other = [m for m in self.methods if self.ONLY is not None and m not in self.ONLY]
        if other:
            raise ConfigError(f"{type(self).__name__}.methods: expected names among "
                              f"{list(self.ONLY)}, got {other}")
        if not self.results_file and (len(self.steps) != len(self.presets)
                                      or min(self.steps, default=0) < 1):
            raise ConfigError(f"steps needs one positive entry per preset ({self.presets}), "
                              f"got {self.steps}")
        if self.results_file and not Path(self.results_file).is_file():
            raise ConfigError(f"results_file {self.results_file!r} is not a file")
        if self.results_file:  # refuse a file that repeats a run with another outcome now
            try:
                unique_runs(read_records(self.results_file), source=self.results_file)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if not self.results_file and not (self.presets and self.methods):
            raise ConfigError("presets and methods must not be empty")
        if not self.results_file:  # a name the runner knows, before any unit starts
            from ..torch.model import PRESETS  # torch: only for configs that train
            unknown = [p for p in self.presets if p not in PRESETS]
            if unknown:
                raise ConfigError(f"{type(self).__name__}.presets: expected names among "
                                  f"{sorted(PRESETS)}, got {unknown}")
        if not self.results_file and (len(self.seeds) != len(self.presets)
                                      or min(self.seeds, default=0) < 1):
            raise ConfigError(f"seeds needs one positive count per preset ({self.presets}), "
                              f"got {self.seeds}")


def run_units(cfg: LMTableConfig) -> list[dict]:
    """The units of an LM table experiment: one per (preset, seed, method), or the results
    file's SHA-256 when ``results_file`` is set."""
    if cfg.results_file:
        path = Path(cfg.results_file)
        return [{"file_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}]
    return [{"preset": p, "method": m, "seed": s, "steps": n}
            for p, n, k in zip(cfg.presets, cfg.steps, cfg.seeds) for s in range(k)
            for m in cfg.methods]


def read_records(path: str | Path) -> list[dict]:
    """The run records of a results file (JSON lines; blank lines skipped)."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{i}: not a JSON record ({exc.msg})") from None
    if not out:
        raise ValueError(f"{path} holds no records")
    return out


def _num(x) -> float:
    return math.nan if x is None else float(x)


#: Outcome fields of a record: repeated runs of one seed and identity must agree on all.
_OUTCOME = ("steps_done", "tokens", "final_train_loss", "val_loss", "diverged",
            "diverged_at_step", "curve", "bytes_per_param", "n_params")


#: the runner's switches of the paper's protocol (``--bf16-autocast``, ``--act-fp8``) as a
#: record names them: part of a run's setting when on
SWITCH_FLAGS = ("autocast", "act_fp8")


def run_setting(record: dict) -> str:
    """What besides preset, method and seed defines a run, as canonical JSON.

    Runs are comparable (their seeds averaged, their losses paired) only when preset and
    setting agree. Fields a record lacks (older or hand-written records) are null.

    >>> s = json.loads(run_setting({"steps": 40, "corpus": {"sha256": "ab", "files": 3}}))
    >>> s["steps"], s["corpus"], s["seq"]
    (40, 'ab', None)
    """
    corpus = record.get("corpus")
    split = record.get("split")
    setting = {
        "model": record.get("model"), "steps": record.get("steps"), "seq": record.get("seq"),
        "global_batch": record.get("global_batch", record.get("batch")),
        "lr": record.get("lr"), "schedule": record.get("schedule"),
        "betas": record.get("betas"), "eps": record.get("eps"),
        "weight_decay": record.get("weight_decay"), "clip": record.get("clip"),
        "eval_batches": record.get("eval_batches"), "storage": record.get("storage"),
        "corpus": corpus.get("sha256") if isinstance(corpus, dict) else corpus,
        "split": ({k: split.get(k) for k in ("block", "val_every")}
                  if isinstance(split, dict) else split)}
    for flag in SWITCH_FLAGS:  # on only (absent or false: as older records)
        if record.get(flag):
            setting[flag] = True
    init = record.get("init")
    if isinstance(init, dict):  # a fine-tuning run: the weights it started from
        setting["init"] = init.get("weights_sha256")
    return json.dumps(setting, sort_keys=True, separators=(", ", ": "))


_SHORT = {"steps": "{} steps", "seq": "seq {}", "global_batch": "batch {}", "lr": "lr {:g}",
          "storage": "storage {}", "corpus": "corpus {:.8}"}


def describe_setting(setting: str, keys=None) -> str:
    """A short text of a :func:`run_setting` (its ``keys`` only, default: the main ones).

    >>> describe_setting(run_setting({"steps": 40, "seq": 64, "lr": 0.003}))
    '40 steps, seq 64, lr 0.003'
    """
    d = json.loads(setting)
    keys = list(_SHORT) if keys is None else keys
    out = []
    for k in keys:
        v = d.get(k)
        if v is None:
            continue
        try:
            out.append(_SHORT[k].format(v) if k in _SHORT else f"{k} {json.dumps(v)}")
        except (TypeError, ValueError):
            out.append(f"{k} {json.dumps(v)}")
    return ", ".join(out) if out else "no recorded setting"


def unique_runs(records: list[dict], source: str = "records") -> tuple[list[dict], list[str]]:
    """One record per (preset, method, :func:`run_setting`, seed), and notices of repeats.

    A seed repeated within one identity with the same outcome (every field of ``_OUTCOME``;
    timings, device and versions may differ) is kept once, with a one-line notice. The input
    list is not modified.

    Raises:
        ValueError: a repeated seed whose outcomes differ (which identity, which seed, how
            to fix it), or a record without ``preset``, ``method`` or ``seed``.
    """
    first: dict[tuple, int] = {}
    repeats: dict[tuple, list[int]] = {}
    kept = []
    for i, r in enumerate(records):
        try:
            key = (str(r["preset"]), str(r["method"]), run_setting(r), int(r["seed"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{source}: record {i} is not a run record of ecosim.torch.lm "
                             f"(needs preset, method and seed): {exc!r}") from None
        if key not in first:
            first[key] = i
            kept.append(r)
            continue
        j = first[key]
        diff = next((f for f in _OUTCOME if r.get(f) != records[j].get(f)), None)
        if diff is not None:
            raise ValueError(
                f"{source}: seed {key[3]} of {key[0]} {key[1]} ({describe_setting(key[2])}) "
                f"appears in records {j} and {i} with different {diff} "
                f"({records[j].get(diff)!r:.40} vs {r.get(diff)!r:.40}); a results file must "
                "hold one run per seed and setting: write repeats to separate results files "
                "and plot each with its own --out")
        repeats.setdefault(key, [j]).append(i)
    notices = [f"{source}: seed {k[3]} of {k[0]} {k[1]} ({describe_setting(k[2])}) appears "
               f"{len(v)} times (records {', '.join(map(str, v))}) with identical results: "
               "counted once" for k, v in repeats.items()]
    return kept, notices


def records_to_results(records: list[dict]) -> dict[str, np.ndarray]:
    """Run records (as ``ecosim.torch.lm.train`` returns them) as result columns."""
    if not records:
        raise ValueError("no records")
    n_curve = max(len(r.get("curve") or []) for r in records)
    curves = np.full((3, len(records), max(n_curve, 1)), np.nan)
    cols: dict[str, list] = {k: [] for k in (
        "preset", "method", "seed", "steps", "tokens", "val_loss", "final_train_loss",
        "diverged", "n_nonembed", "n_quantized", "bytes_formula", "bytes_measured",
        "peak_memory", "seq", "global_batch", "lr", "storage", "corpus", "setting")}
    for i, r in enumerate(records):
        try:
            method_parts(r["method"])
            diverged = bool(r["diverged"])
            cols["preset"].append(str(r["preset"]))
            cols["method"].append(str(r["method"]))
            cols["seed"].append(int(r["seed"]))
            cols["steps"].append(int(r["steps"]))
            cols["tokens"].append(int(r["tokens"]))
            cols["val_loss"].append(math.nan if diverged else _num(r["val_loss"]))
            cols["final_train_loss"].append(math.nan if diverged
                                            else _num(r["final_train_loss"]))
            cols["diverged"].append(diverged)
            cols["n_nonembed"].append(int(r["n_params"]["non_embedding"]))
            cols["n_quantized"].append(int(r["n_params"]["quantized"]))
            cols["bytes_formula"].append(_num(r["bytes_per_param"]["formula"]))
            cols["bytes_measured"].append(_num(r["bytes_per_param"]["measured"]))
            cols["peak_memory"].append(int(r["peak_memory_bytes"]))
            setting = run_setting(r)
            d = json.loads(setting)
            cols["seq"].append(-1 if d["seq"] is None else int(d["seq"]))
            cols["global_batch"].append(-1 if d["global_batch"] is None
                                        else int(d["global_batch"]))
            cols["lr"].append(_num(d["lr"]))
            cols["storage"].append(str(d["storage"] or ""))
            cols["corpus"].append(str(d["corpus"] or ""))
            cols["setting"].append(setting)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"record {i} ({r.get('preset')!r}, {r.get('method')!r}) is not a "
                             f"run record of ecosim.torch.lm: {exc!r}") from None
        for j, point in enumerate(r.get("curve") or []):
            curves[:, i, j] = [_num(v) for v in point[:3]]
    out = {k: np.array(v) for k, v in cols.items()}
    out["curve_step"], out["curve_train"], out["curve_val"] = curves
    return out


def combine_runs(cfg, units: list[dict], results: list) -> dict:
    """The units' result columns one after the other; curve columns (2-D) padded with NaN to
    the longest (a run that diverged early has fewer curve points)."""
    width = max(r["curve_step"].shape[1] for r in results)  # curves: pad rows with NaN

    def pad(a):
        if a.ndim == 2 and a.shape[1] < width:
            return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=np.nan)
        return a
    return {k: np.concatenate([pad(r[k]) for r in results]) for k in results[0]}


def train_run(**run) -> dict:
    """The result columns of one training run (:func:`train_record` with ``run`` as its
    config): the shared unit (:class:`~ecosim.experiments.shared.SharedUnit`) of every
    experiment that trains runs of the ``lm`` experiment's protocol, so that a run two
    experiments ask for (``lm``'s FP32 runs are ``dqt_lm``'s) is trained once."""
    return records_to_results([train_record("lm", **run)])


def shared_run(cfg: LMTableConfig, unit: dict) -> SharedUnit | None:
    """A unit of :func:`run_units` as the shared unit :func:`train_run` of its run config
    (None with ``results_file``: reading a file is the experiment's own unit). The key holds
    the run's config, not the experiment's: equal runs of two experiments are one entry."""
    if cfg.results_file:
        return None
    return SharedUnit(train_run, {
        "preset": unit["preset"], "method": unit["method"], "seed": unit["seed"],
        "steps": unit["steps"], "batch": cfg.batch, "seq": cfg.seq,
        "eval_every": cfg.eval_every, "eval_batches": cfg.eval_batches})


@experiment("lm", LMTableConfig, version="2", units=run_units, combine=combine_runs,
            requires=("torch",), share=shared_run)
def lm(cfg: LMTableConfig, unit: dict) -> dict:
    """Table 1 on a Llama-style decoder: FP8 weights without master copies (torch backend)."""
    if cfg.results_file:
        records, notices = unique_runs(read_records(cfg.results_file), source=cfg.results_file)
        for line in notices:
            print(f"lm: {line}", file=sys.stderr)
        return records_to_results(records)
    return shared_run(cfg, unit).compute()


def train_record(experiment: str, **config) -> dict:
    """One run of :func:`ecosim.torch.lm.train` (``LMConfig(**config, quiet=True)``) on one
    CPU thread (the same float sums, and bytes, on every machine); its record.

    Raises:
        RuntimeError: torch is not installed (``experiment`` names who needed it).
    """
    try:
        from ..torch import lm as tlm
    except ImportError as exc:  # torch missing
        raise RuntimeError(f"experiment {experiment!r} trains with the torch backend: run "
                           "`make torch` (or pip install -e '.[torch]')") from exc
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return tlm.train(tlm.LMConfig(quiet=True, **config))
    finally:
        torch.set_num_threads(threads)
