"""Training-curve PNGs from metrics.jsonl: resumed runs read once per step, files written, errors in one line."""

import json
import re

import pytest

from bertjax.runtime import plots


def _write_metrics(workdir, records):
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_resumed_run_keeps_the_last_record_of_each_step(tmp_path):
    _write_metrics(tmp_path, [
        {"step": 1, "loss": 4.0}, {"step": 2, "loss": 3.0}, {"step": 2, "eval_loss": 3.5}, {"step": 3, "loss": 2.9},
        {"step": 3, "loss": 2.5}, {"step": 4, "loss": 2.0},  # resumed after step 2: step 3 logged again
    ])
    records = plots.read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [1, 2, 2, 3, 4]
    assert [r["loss"] for r in records if "loss" in r] == [4.0, 3.0, 2.5, 2.0]
    assert [r["eval_loss"] for r in records if "eval_loss" in r] == [3.5]


def test_plot_runs_writes_a_png_per_call(tmp_path):
    for name, scale in (("pretrained", 1.0), ("scratch", 2.0)):
        _write_metrics(tmp_path / name, [{"step": s, "loss": scale / s, "eval_accuracy": 0.5 + s / 100}
                                         for s in range(1, 50)])
    output = tmp_path / "plots" / "curves.png"
    path = plots.plot_runs({"a": str(tmp_path / "pretrained"), "b": str(tmp_path / "scratch")},
                           {"loss": ["loss"], "dev accuracy": ["eval_accuracy"]}, str(output), title="t")
    assert path == str(output)
    data = output.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_characters_no_installed_font_has_are_said_once(tmp_path, caplog, monkeypatch):
    """A tagger's metric names carry its labels (eval_人名_f1): matplotlib warned once per missing
    character on the console (a walkthrough). They come from fonts that have them where installed
    (the fallback list), else one warning names them; other warnings still pass."""
    import warnings

    from matplotlib import font_manager

    _write_metrics(tmp_path / "run", [{"step": s, "loss": 1 / s, "eval_\u4eba\u540d_f1": s / 10} for s in range(1, 5)])
    monkeypatch.setattr(font_manager.fontManager, "ttflist",  # a machine with DejaVu alone
                        [font for font in font_manager.fontManager.ttflist if font.name.startswith("DejaVu")])
    with warnings.catch_warnings(record=True) as passed, caplog.at_level("WARNING"):
        warnings.simplefilter("always")
        plots.plot_runs({"run": str(tmp_path / "run")}, {"f1": ["eval_\u4eba\u540d_f1"]}, str(tmp_path / "c.png"))
    assert not [w for w in passed if "Glyph" in str(w.message)]
    assert [record.getMessage() for record in caplog.records] == [
        f"{tmp_path}/c.png: 2 characters of the labels (\u4eba\u540d) have no glyph in the fonts installed "
        "and are drawn as boxes; a font with them (Noto Sans CJK, say) draws them"]


def test_the_command_names_a_missing_run_in_one_line(tmp_path, capsys):
    assert plots.main([str(tmp_path / "nothere"), f"--output={tmp_path}/x.png"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nothere/metrics.jsonl" in lines[0]
    assert not (tmp_path / "x.png").exists()


def test_a_metric_no_run_has_is_named_and_left_out(tmp_path, capsys, caplog):
    """A misspelt metric drew an empty panel and exited 0 (a review): a panel no run has is left
    out with a warning naming what the runs have; nothing left to plot is an error."""
    _write_metrics(tmp_path / "run", [{"step": 1, "loss": 4.0}, {"step": 2, "loss": 3.0}])
    assert plots.main([str(tmp_path / "run"), f"--output={tmp_path}/x.png", "--metrics=nosuch"]) == 2
    assert capsys.readouterr().err.strip() == "error: nothing to plot: no run has nosuch (they have loss)"
    assert not (tmp_path / "x.png").exists()
    with caplog.at_level("WARNING"):
        assert plots.main([str(tmp_path / "run"), f"--output={tmp_path}/x.png"]) == 0  # loss,eval_loss
    assert "no run has eval_loss (they have loss): left out" in caplog.text
    assert (tmp_path / "x.png").read_bytes().startswith(b"\x89PNG")


def test_a_half_written_last_line_is_left_out_and_a_bad_one_named(tmp_path, capsys):
    """A killed run (or a full disk) leaves a half-written last line, which MetricsWriter drops
    on resume; plotting failed on it with json's message alone (a review)."""
    _write_metrics(tmp_path / "run", [{"step": 1, "loss": 4.0}, {"step": 2, "loss": 3.0}])
    with open(tmp_path / "run" / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "lo')
    assert [r["step"] for r in plots.read_metrics(str(tmp_path / "run"))] == [1, 2]
    with open(tmp_path / "run" / "metrics.jsonl", "a") as f:
        f.write('\n{"step": 4, "loss": 1.0}\n')
    assert plots.main([str(tmp_path / "run"), f"--output={tmp_path}/x.png"]) == 2
    assert "run/metrics.jsonl:3: not a JSON record (" in capsys.readouterr().err


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    import pytest

    from bertjax.runtime import fileio

    def fail(f):
        f.write(b"half")
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        fileio.write_with(str(tmp_path / "out.json"), fail)
    assert list(tmp_path.iterdir()) == []


def test_a_plot_that_fails_leaves_the_last_one_and_files_reach_the_disk_before_their_name(tmp_path, monkeypatch):
    """The PNG was written in place: a failed write left a cut-off file that looked whole (a
    review). Files written whole (fileio.write_with) are synced, then the folder's rename, so a
    machine that stops leaves the old file or the new one, never an empty one under the name."""
    import os

    import matplotlib.figure

    from bertjax.runtime import fileio

    _write_metrics(tmp_path / "run", [{"step": s, "loss": 1.0 / s} for s in range(1, 5)])
    output = tmp_path / "curves.png"
    plots.plot_runs({"a": str(tmp_path / "run")}, {"loss": ["loss"]}, str(output))
    before = output.read_bytes()

    def failing(figure, file, **kwargs):
        file.write(b"\x89PNG half")
        raise OSError("No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(matplotlib.figure.Figure, "savefig", failing)
        with pytest.raises(OSError, match="No space left"):
            plots.plot_runs({"a": str(tmp_path / "run")}, {"loss": ["loss"]}, str(output))
    assert output.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["curves.png", "run"]

    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    fileio.write_json(str(tmp_path / "row.json"), {"a": 1})
    first = synced[0]
    assert len(synced) == 2 and synced[1] == str(tmp_path)
    assert re.fullmatch(rf"{tmp_path}/row\.json\.tmp-{os.getpid()}-[0-9a-f]{{8}}", synced[0])
    # Unique per write, not per process: hosts of a run (pid 1 in containers) can write one file.
    synced.clear()
    fileio.write_json(str(tmp_path / "row.json"), {"a": 1})
    assert synced[0].startswith(f"{tmp_path}/row.json.tmp-{os.getpid()}") and synced[0] != first


def test_a_record_without_a_step_is_named_by_its_line(tmp_path, capsys):
    """A record without "step", or a line that is not an object, gave a traceback; blank lines
    made the line numbers of errors wrong (a review)."""
    (tmp_path / "run").mkdir()
    metrics = tmp_path / "run" / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 2}\n\n\n{"loss": 1}\n{"step": 3, "loss": 0.5}\n')
    assert plots.main([str(tmp_path / "run"), f"--output={tmp_path}/x.png"]) == 2
    assert 'run/metrics.jsonl:4: expected a record with an integer "step", got {"loss": 1}' in capsys.readouterr().err
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1, "loss": 2}\n\n[1, 2]\n{"step": 3, "loss": 0.5}\n')
    assert plots.main([str(tmp_path / "run"), f"--output={tmp_path}/x.png"]) == 2
    assert "run/metrics.jsonl:3: expected a record" in capsys.readouterr().err
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1, "loss": 2}\n\n\n{"step": 2, "lo\n{"step": 3}\n')
    assert plots.main([str(tmp_path / "run"), f"--output={tmp_path}/x.png"]) == 2
    assert "run/metrics.jsonl:4: not a JSON record (" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_a_diverged_run_says_where_its_line_ends(tmp_path, monkeypatch):
    """matplotlib draws NaN and inf as nothing: a diverged loss just stopped, with no word."""
    import matplotlib.axes

    _write_metrics(tmp_path / "run", [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0},
                                      {"step": 3, "loss": float("nan")}, {"step": 4, "loss": float("inf")}])
    labels = []
    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, *a, **k: labels.append(k["label"]) or plot(
        self, *a, **k))
    plots.plot_runs({"run": str(tmp_path / "run")}, {"loss": ["loss"]}, str(tmp_path / "x.png"))
    assert labels == ["loss (not finite from step 3)"]


def test_folders_with_equals_signs_and_repeated_labels(tmp_path, capsys):
    """A sweep's folder 'lr=1e-4' was split into the label 'lr' and the folder '1e-4'; a label
    given twice kept only the last run."""
    _write_metrics(tmp_path / "lr=1e-4", [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}])
    _write_metrics(tmp_path / "other", [{"step": 1, "loss": 3.5}, {"step": 2, "loss": 2.5}])
    assert plots.main([str(tmp_path / "lr=1e-4"), f"--output={tmp_path}/x.png"]) == 0
    assert (tmp_path / "x.png").exists()
    assert plots.main([f"a={tmp_path}/other", f"a={tmp_path}/lr=1e-4", f"--output={tmp_path}/y.png"]) == 2
    assert "two runs are labelled 'a'" in capsys.readouterr().err
    assert not (tmp_path / "y.png").exists()


def test_a_sweeps_workdir_plots_its_runs_and_the_output_is_a_png_file(tmp_path, capsys, monkeypatch):
    """A sweep's workdir was 'No such file: metrics.jsonl'; a .jpg output held PNG bytes, and a
    folder as the output named an internal temporary file (a walkthrough)."""
    for run in ("lr0.001_batch16_epochs1", "lr0.0001_batch16_epochs1"):
        _write_metrics(tmp_path / "sw" / "sweep" / run, [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}])
    drawn = []
    monkeypatch.setattr(plots, "plot_runs", lambda runs, panels, output: drawn.append(runs) or output)
    assert plots.main([f"grid={tmp_path}/sw", f"--output={tmp_path}/x.png"]) == 0
    assert drawn == [{f"grid/{run}": str(tmp_path / "sw" / "sweep" / run)
                      for run in ("lr0.0001_batch16_epochs1", "lr0.001_batch16_epochs1")}]
    # A run the sweep records as failed is said so in the legend (a review: its lines looked like
    # any other's).
    (tmp_path / "sw" / "sweep_results.json").write_text(json.dumps(
        [{"run": "lr0.0001_batch16_epochs1", "eval_accuracy": 0.5},
         {"run": "lr0.001_batch16_epochs1", "error": "diverged", "best_step": None}]))
    drawn.clear()
    assert plots.main([f"grid={tmp_path}/sw", f"--output={tmp_path}/x.png"]) == 0
    assert list(drawn[0]) == ["grid/lr0.0001_batch16_epochs1", "grid/lr0.001_batch16_epochs1 (failed)"]
    for output in (f"{tmp_path}/x.jpg", str(tmp_path)):
        assert plots.main([f"{tmp_path}/sw", f"--output={output}"]) == 2
        assert f"--output={output}: give the name of a .png file to write" in capsys.readouterr().err
