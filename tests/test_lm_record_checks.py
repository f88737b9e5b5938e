"""The LM runner keeps every record and refuses to mix two: the results and checkpoint paths
are checked before any training, a finished run resumed with a new results file writes its
record there, a resume that changes what the curve means is refused, and the divergence
threshold must be a loss.
"""

import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from ecosim.torch import lm  # noqa: E402


def _args(corpus, *more):
    return ["--preset", "tiny", "--method", "fp8_eco_sr", "--steps", "4", "--batch", "4",
            "--seq", "32", "--data", corpus, "--eval-every", "2", "--eval-batches", "2",
            "--quiet", *more]


def _cfg(corpus, **kw):
    base = dict(preset="tiny", steps=4, batch=4, seq=32, data=corpus, eval_every=2,
                eval_batches=2, quiet=True)
    return lm.LMConfig(**{**base, **kw})


def test_results_folder_is_refused_before_training(corpus, tmp_path, capsys):
    ck = tmp_path / "ck"
    assert lm.main(_args(corpus, "--results", str(tmp_path), "--out", str(ck))) == 2
    assert "is a folder" in capsys.readouterr().err
    assert not ck.exists()  # nothing trained, nothing checkpointed
    f = tmp_path / "file"
    f.write_text("")
    assert lm.main(_args(corpus, "--results", str(f / "r.jsonl"))) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_out_that_is_a_file_is_a_clear_error(corpus, tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("")
    assert lm.main(_args(corpus, "--out", str(f))) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert lm.main(_args(corpus, "--out", str(f / "sub"))) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_finished_run_resumed_writes_its_record_to_new_results(corpus, tmp_path):
    ck, a, b = tmp_path / "ck", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert lm.main(_args(corpus, "--out", str(ck), "--results", str(a))) == 0
    assert lm.main(_args(corpus, "--out", str(ck), "--results", str(b), "--resume")) == 0
    assert b.read_text() == a.read_text() and len(a.read_text().splitlines()) == 1
    # the results file it already wrote to is not given the record twice
    assert lm.main(_args(corpus, "--out", str(ck), "--results", str(a), "--resume")) == 0
    assert len(a.read_text().splitlines()) == 1


@pytest.mark.parametrize("change", [{"eval_batches": 3}, {"eval_every": 1},
                                    {"diagnostics": True}])
def test_resume_refuses_a_changed_curve(corpus, tmp_path, change):
    lm.train(_cfg(corpus, out=str(tmp_path), stop_after=2))
    field = next(iter(change))
    with pytest.raises(ValueError, match=f"different run.*{field}"):
        lm.train(_cfg(corpus, out=str(tmp_path), resume=True, **change))
    # log and I/O options may change
    r = lm.train(_cfg(corpus, out=str(tmp_path), resume=True, log_every=1))
    assert r["steps_done"] == 4 and r["eval_batches"] == 2


@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan"), float("inf")])
def test_diverge_loss_must_be_a_finite_positive_loss(bad):
    with pytest.raises(ValueError, match="diverge_loss must be a finite loss > 0"):
        lm.LMConfig(diverge_loss=bad)


def test_diverge_loss_is_in_the_record(corpus):
    r = lm.train(_cfg(corpus, steps=2, diverge_loss=50.0))
    assert r["diverge_loss"] == 50.0 and r["diverged"] is False
    assert json.loads(json.dumps(r))["diverge_loss"] == 50.0


def test_help_shows_every_default_and_no_options_prints_it(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        lm.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for piece in ("(default: tiny)", "(default: fp8_eco_sr)", "(default: 200)",
                  "(default: the preset's)", "(default: 0.1)", "(default: codes)",
                  "(default: steps // 10)", "(default: not written)"):
        assert piece in text, piece
    assert lm.main([]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m ecosim.torch.lm")
    assert list(tmp_path.iterdir()) == []  # nothing trained, nothing written
