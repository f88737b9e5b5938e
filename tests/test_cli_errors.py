"""Bad input at the command line: each is one line on stderr and exit status 2, before any
computation starts (``ecosim run/figures --set``, ``python -m ecosim.torch.lm``)."""

import dataclasses

import pytest

import ecosim.experiments as E
from ecosim.tooling.cli import main
from ecosim.experiments.base import Check, at_least, interval, one_of


def _one_line_error(capsys, prefix: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix), err
    assert "Traceback" not in err
    return lines[0]


# -- ecosim run / figures --set: ranges checked when the config is built ------------------------

@pytest.mark.parametrize("exp, item, expected", [
    ("beta_factor", "betas=1.0", "BetaFactorConfig.betas[0]: expected a value in (0, 1), got 1.0"),
    ("beta_factor", "d=0", "BetaFactorConfig.d: expected a value >= 1, got 0"),
    ("beta_factor", "lrs=0.01,-0.1", "BetaFactorConfig.lrs[1]: expected a value > 0, got -0.1"),
    ("floor", "betas=1.0", "FloorConfig.betas[0]: expected a value in (0, 1), got 1.0"),
    ("floor", "d=0", "FloorConfig.d: expected a value >= 1, got 0"),
    ("floor", "lrs=-0.1", "FloorConfig.lrs[0]: expected a value > 0, got -0.1"),
    ("floor", "lrs=0.1,0.1", "FloorConfig.lrs: expected distinct entries, got (0.1, 0.1)"),
    ("floor", "grids=uniform,hex", "FloorConfig.grids[1]: expected one of 'uniform', 'e4m3', "
                                   "got 'hex'"),
    ("floor_additive", "key=-1", "FloorAdditiveConfig.key: expected an integer key in "
                                 "[0, 2**64), got -1"),
    ("rtn_stall", "key=18446744073709551616", "RtnStallConfig.key: expected an integer key in "
                                              "[0, 2**64), got 18446744073709551616"),
    ("naive_decay", "grad_noises=", "NaiveDecayConfig.grad_noises: expected at least one "
                                    "entry, got ()"),
    ("rtn_stall", "step=nan", "RtnStallConfig.step: expected a value > 0, got nan"),
    ("error_similarity", "b2=1", "ErrorSimilarityConfig.b2: expected a value in [0, 1), "
                                 "got 1.0"),
    ("mlp_methods", "stop_factor=1", "MLPMethodsConfig.stop_factor: expected a value > 1, "
                                     "got 1.0"),
    ("mlp_states", "n_val=0", "MLPStatesConfig.n_val: expected a value >= 1, got 0"),
    ("mantissa_sweep", "mantissas=7,24", "MantissaSweepConfig.mantissas[1]: expected a value "
                                         "in [1, 23], got 24"),
    ("compressed_states", "seeds=0,-1", "CompressedStatesConfig.seeds[1]: expected a value "
                                        ">= 0, got -1"),
    ("relative_error", "samples=10", "RelativeErrorConfig.samples: expected a value >= 100, "
                                     "got 10"),
    ("grids", "sr_nbits=17", "GridsConfig.sr_nbits: expected a value in [1, 16], got 17"),
    ("lm", "batch=0", "LMTableConfig.batch: expected a value >= 1, got 0"),
])
def test_run_out_of_range_is_one_line_exit_2(capsys, tmp_path, exp, item, expected):
    assert main(["run", exp, "--set", item, "--cache", str(tmp_path), "--no-progress"]) == 2
    line = _one_line_error(capsys, "ecosim run: error: ")
    assert line == f"ecosim run: error: {expected}"
    assert not (tmp_path / exp).exists()  # nothing was computed or cached


def test_figures_set_out_of_range_is_one_line_exit_2(capsys, tmp_path):
    assert main(["figures", "--only", "noise_floor", "--set", "floor.d=0", "--out", str(tmp_path),
                 "--cache", str(tmp_path / "cache"), "--no-progress"]) == 2
    line = _one_line_error(capsys, "ecosim figures: error: ")
    assert line.endswith("FloorConfig.d: expected a value >= 1, got 0")
    assert not (tmp_path / "cache").exists()


def test_figures_smoke_needs_an_out_directory(capsys, tmp_path, monkeypatch):
    """The default --out is figures/, which holds the committed figures: a smoke build must
    not overwrite them."""
    monkeypatch.chdir(tmp_path)
    assert main(["figures", "--smoke", "--only", "grids", "--cache", "c", "--no-progress"]) == 2
    line = _one_line_error(capsys, "ecosim figures: error: ")
    assert "--smoke writes shrunken figures: give --out DIR" in line
    assert not (tmp_path / "figures").exists() and not (tmp_path / "c").exists()


def _file(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    return f


@pytest.mark.parametrize("case, words", [
    ("cache_is_file", "--cache {f}: is a file; expected a directory"),
    ("env_cache_is_file", "$ECOSIM_CACHE {f}: is a file; expected a directory"),
    ("cache_empty", "--cache: Cache: root must be a non-empty path, got ''"),
    ("experiment_folder_is_file", "folder of 'grids'"),
    ("out_is_file", "--out {f}: is a file; expected a directory"),
])
def test_figures_bad_paths_are_one_line_exit_2_before_work(capsys, tmp_path, monkeypatch,
                                                           case, words):
    f = _file(tmp_path)
    cache, out = tmp_path / "cache", tmp_path / "out"
    argv = ["figures", "--smoke", "--only", "grids", "--no-progress"]
    if case == "cache_is_file":
        argv += ["--cache", str(f), "--out", str(out)]
    elif case == "env_cache_is_file":
        monkeypatch.setenv("ECOSIM_CACHE", str(f))
        argv += ["--out", str(out)]
    elif case == "cache_empty":
        argv += ["--cache", "", "--out", str(out)]
    elif case == "experiment_folder_is_file":
        cache.mkdir()
        (cache / "grids").write_text("x")
        argv += ["--cache", str(cache), "--out", str(out)]
    else:
        argv += ["--cache", str(cache), "--out", str(f)]
    assert main(argv) == 2
    line = _one_line_error(capsys, "ecosim figures: error: ")
    assert words.format(f=f) in line
    assert not out.exists()


def test_run_bad_save_and_cache_paths_are_one_line_exit_2(capsys, tmp_path):
    f = _file(tmp_path)
    for argv, words in [
            (["--save", str(tmp_path)], "is a directory; give a file name ending in .npz"),
            (["--save", str(tmp_path / "no" / "such" / "x.npz")], "does not exist"),
            (["--cache", str(f)], "is a file; expected a directory")]:
        cache = [] if "--cache" in argv else ["--cache", str(tmp_path / "cache")]
        assert main(["run", "grids", "--smoke", "--no-progress", *cache, *argv]) == 2
        assert words in _one_line_error(capsys, "ecosim run: error: ")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "no").exists()


def test_stability_limit_is_checked_before_running(capsys, tmp_path):
    assert main(["run", "floor", "--set", "lrs=10", "--cache", str(tmp_path)]) == 2
    assert "unstable at beta=0.5" in _one_line_error(capsys, "ecosim run: error: ")


def test_every_default_and_smoke_config_passes_its_checks():
    for exp in E.experiments().values():
        exp.default_config()
        exp.default_config(smoke=True)


def test_checks_are_declarative_and_inherited():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Base(E.Config):
        lr: float = 0.1
        widths: tuple[int, ...] = (4, 8)
        CHECKS = {"lr": interval("(0, 1]"), "widths": at_least(1)}

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Child(Base):
        mode: str = "a"
        CHECKS = {"mode": one_of("a", "b"),
                  "widths": (Check("two widths", lambda t: len(t) == 2, each=False),)}

    assert Child(lr=1, widths=(0, 3)).lr == 1.0  # the child's widths rule replaces the base's
    with pytest.raises(E.ConfigError, match=r"^Child.lr: expected a value in \(0, 1\], got 1.5$"):
        Child(lr=1.5)
    with pytest.raises(E.ConfigError, match=r"^Child.mode: expected one of 'a', 'b', got 'c'$"):
        Child(mode="c")
    with pytest.raises(E.ConfigError, match=r"^Child.widths: expected two widths"):
        Child(widths=(1,))
    with pytest.raises(E.ConfigError, match=r"^Base.widths\[0\]: expected a value >= 1, got 0$"):
        Base(widths=(0, 3))
    with pytest.raises(E.ConfigError, match=r"^Base.lr: expected a value in \(0, 1\], got inf$"):
        Base(lr=float("inf"))

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Typo(E.Config):
        n: int = 1
        CHECKS = {"m": at_least(1)}

    with pytest.raises(TypeError, match="names 'm', which is not a field"):
        Typo()
    with pytest.raises(ValueError, match="interval"):
        interval("0..1")


# -- python -m ecosim.torch.lm: the corpus and the checkpoint -----------------------------------

def _lm_args(data, out=None, *extra):
    args = ["--preset", "tiny", "--steps", "2", "--batch", "2", "--seq", "16",
            "--eval-batches", "1", "--quiet", "--data", str(data)]
    return args + (["--out", str(out)] if out else []) + list(extra)


@pytest.fixture
def lm():
    pytest.importorskip("torch")
    from ecosim.torch import lm

    return lm


@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"print('hello')\n", "too few for sequences of 16 bytes"),
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 400, "looks binary"),
])
def test_lm_bad_corpus_is_one_line_exit_2(lm, capsys, tmp_path, content, words):
    data = tmp_path / "corpus.txt"
    data.write_bytes(content)
    assert lm.main(_lm_args(data)) == 2
    line = _one_line_error(capsys, "python -m ecosim.torch.lm: error: ")
    assert words in line and str(data) in line


def test_lm_bad_option_is_one_line_exit_2(lm, capsys, tmp_path):
    assert lm.main(_lm_args(tmp_path / "nope.txt")) == 2
    assert "does not exist" in _one_line_error(capsys, "python -m ecosim.torch.lm: error: ")
    assert lm.main(["--betas", "0.9", "1.0", "--quiet"]) == 2
    assert "betas must lie in [0, 1)" in _one_line_error(capsys, "python -m ecosim.torch.lm")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "foreign"])
def test_lm_corrupt_checkpoint_is_one_line_and_does_not_block(lm, capsys, tmp_path, corpus,
                                                              damage):
    import torch

    out = tmp_path / "run"
    ck = out / lm.CHECKPOINT
    out.mkdir()
    if damage == "truncated":
        torch.save({"format": "ecosim.lm/1", "model": {"w": torch.zeros(1000)}}, ck)
        ck.write_bytes(ck.read_bytes()[:500])
    elif damage == "garbage":
        ck.write_bytes(b"not a checkpoint\n" * 10)
    else:
        torch.save({"format": "someone else's"}, ck)
    assert lm.main(_lm_args(corpus, out, "--resume")) == 2
    line = _one_line_error(capsys, "python -m ecosim.torch.lm: error: ")
    assert str(ck) in line and "delete it or pass --overwrite" in line
    assert ("unreadable" in line) == (damage != "foreign")
    # a fresh run is refused with a way out, which then works and replaces the file
    assert lm.main(_lm_args(corpus, out)) == 2
    assert "--overwrite" in _one_line_error(capsys, "python -m ecosim.torch.lm: error: ")
    assert lm.main(_lm_args(corpus, out, "--resume", "--overwrite")) == 2
    capsys.readouterr()
    if damage == "truncated":  # one full run is enough to show --overwrite
        assert lm.main(_lm_args(corpus, out, "--overwrite")) == 0
        assert torch.load(ck, weights_only=True)["format"] == "ecosim.lm/1"
        assert lm.main(_lm_args(corpus, out, "--resume")) == 0  # finished: reads the record


def test_lm_checkpoint_write_is_atomic(lm, tmp_path):
    import torch

    path = tmp_path / "ck" / "checkpoint.pt"
    lm._save(path, {"step": 1})
    with pytest.raises(Exception):
        lm._save(path, {"step": 2, "bad": lambda: 0})  # fails while writing
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]  # no temporary left


# -- names: experiments after --set, presets, figure names ---------------------------------------

def test_run_takes_the_experiment_after_set(capsys, tmp_path):
    save = tmp_path / "a.npz"
    assert main(["run", "--set", "steps=20", "rtn_stall", "--smoke", "--cache",
                 str(tmp_path / "c"), "--save", str(save), "--no-progress"]) == 0
    assert save.exists()
    capsys.readouterr()
    assert main(["run", "--set", "steps=20", "rtn_stall", "floor", "--cache",
                 str(tmp_path / "c")]) == 2
    assert "name one EXPERIMENT" in _one_line_error(capsys, "ecosim run: error:")


def test_lm_unknown_preset_is_a_config_error(capsys, tmp_path):
    pytest.importorskip("torch")
    assert main(["run", "lm", "--smoke", "--set", "presets=nano", "--cache",
                 str(tmp_path / "c")]) == 2
    line = _one_line_error(capsys, "ecosim run: error:")
    assert "LMTableConfig.presets: expected names among" in line and "'nano'" in line
    assert not (tmp_path / "c" / "lm").exists()  # refused before any unit


def test_figures_unknown_name_suggests_the_close_one(capsys, tmp_path):
    assert main(["figures", "--only", "rtn_stal", "--out", str(tmp_path)]) == 2
    assert "did you mean 'rtn_stall'?" in _one_line_error(capsys, "ecosim figures: error:")
