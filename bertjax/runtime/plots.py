"""Training curves as PNG files, from the metrics.jsonl that every run writes.

    python -m bertjax.runtime.plots WORKDIR [LABEL=WORKDIR ...] --output=curves.png [--metrics=loss,eval_accuracy]

A sweep's WORKDIR stands for its runs, each drawn as LABEL/<run>.

One panel per metric (or per group of metrics), one line per run and metric (steps on the
x axis); evaluation metrics (`eval_*`) and short runs are drawn with markers.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import warnings

from bertjax.runtime import fileio


def read_metrics(workdir: str) -> list[dict]:
    """The records of `workdir`/metrics.jsonl by step. Of records with the same step and keys
    (a training record, an evaluation record), the last wins: workdirs written before
    MetricsWriter dropped a resumed run's repeated steps still hold them."""
    by_step: dict[tuple[int, frozenset], dict] = {}
    path = fileio.join(workdir, "metrics.jsonl")
    with fileio.open_file(path) as f:
        lines = [(number, line) for number, line in enumerate(f, start=1) if line.strip()]
    for index, (number, line) in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError as e:
            if index == len(lines) - 1:  # a half-written last line (a killed run, a full disk): left out
                break
            raise ValueError(f"{path}:{number}: not a JSON record ({e})") from None
        if not isinstance(record, dict) or isinstance(record.get("step"), bool) or not isinstance(
                record.get("step"), int):
            raise ValueError(f"{path}:{number}: expected a record with an integer \"step\", got {line.strip()}"[:300])
        by_step[(record["step"], frozenset(record))] = record
    return sorted(by_step.values(), key=lambda r: r["step"])


def plot_runs(runs: dict[str, str], panels: dict[str, list[str]], output: str, title: str = "") -> str:
    """Draws `panels` ({panel title: metric names}) for every run ({label: workdir}) into the PNG
    `output`; returns its path. A panel no run has a metric of is left out with a warning (an
    unevaluated run's eval_loss); ValueError when none is left."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    # Metric names carry the task's labels (eval_人名_f1): fonts with other scripts, where
    # installed, fill in the glyphs the user's fonts lack (matplotlib falls back along the list).
    installed = {font.name for font in font_manager.fontManager.ttflist}
    fonts = [*plt.rcParams["font.family"], *(name for name in _FALLBACK_FONTS if name in installed)]

    records = {label: read_metrics(workdir) for label, workdir in runs.items()}
    present = {metric for run in records.values() for record in run for metric in record} - {"step"}
    empty = [panel for panel, metrics in panels.items() if not present & set(metrics)]
    if empty:
        said = f"no run has {', '.join(empty)} (they have {', '.join(sorted(present)) or 'no metrics'})"
        if len(empty) == len(panels):
            raise ValueError(f"nothing to plot: {said}")
        logging.getLogger(__name__).warning("%s: left out", said)
        panels = {panel: metrics for panel, metrics in panels.items() if panel not in empty}
    missing = set()
    show = warnings.showwarning

    def collect(message, *args, **kwargs):  # matplotlib warns once per character: said once, below
        glyph = re.match(r"Glyph (\d+) ", str(message))
        if glyph:
            missing.add(chr(int(glyph.group(1))))
        else:  # (other warnings as the filters in force let them through)
            show(message, *args, **kwargs)

    with plt.rc_context({"font.family": fonts}), warnings.catch_warnings():
        warnings.filterwarnings("always", message=r"Glyph \d+ ")
        warnings.showwarning = collect
        _draw(plt, records, panels, output, title)
    if missing:
        logging.getLogger(__name__).warning(
            "%s: %d characters of the labels (%s) have no glyph in the fonts installed and are drawn as boxes; a "
            "font with them (Noto Sans CJK, say) draws them", output, len(missing), "".join(sorted(missing)[:20]))
    return output


_FALLBACK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK KR", "Noto Sans", "Arial Unicode MS",
                   "Droid Sans Fallback")


def _draw(plt, records: dict[str, list[dict]], panels: dict[str, list[str]], output: str, title: str) -> None:
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for axis, (panel, metrics) in zip(axes.flat, panels.items()):
        for label, run in records.items():
            for metric in metrics:
                points = [(r["step"], r[metric]) for r in run if metric in r]
                if not points:
                    continue
                steps, values = zip(*points)
                name = " ".join(part for part in (label if len(records) > 1 else "", metric) if part)
                # A diverged run's NaN or inf draws as nothing: the legend says where the line ends.
                broken = next((step for step, value in points if not _finite(value)), None)
                if broken is not None:
                    name += f" (not finite from step {broken})"
                few = len(points) < 30 or metric.startswith("eval_")
                axis.plot(steps, values, label=name, linewidth=1.3, marker="o" if few else None, markersize=4)
        axis.set_title(panel)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    fileio.makedirs(fileio.parent(output))
    fileio.write_with(output, lambda f: figure.savefig(f, format="png", dpi=110))  # whole or not at all
    plt.close(figure)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _labelled_runs(arguments: list[str]) -> dict[str, str]:
    """{label: workdir} from WORKDIR or LABEL=WORKDIR arguments: an existing folder is a WORKDIR
    even with '=' in its name (a sweep's lr=1e-4); a sweep's workdir is its runs, each labelled
    LABEL/<run>, " (failed)" after it for a run its sweep_results.json records as failed; a label
    given twice is an error."""
    runs = {}
    for argument in arguments:
        label, workdir = (argument.split("=", 1) if "=" in argument and not fileio.isdir(argument)
                          else (argument, argument))
        swept = sorted(fileio.glob(fileio.join(fileio.escape(workdir), "sweep", "*", "metrics.jsonl")))
        if swept and not fileio.exists(fileio.join(workdir, "metrics.jsonl")):
            folders = [fileio.parent(path) for path in swept]
            results = fileio.join(workdir, "sweep_results.json")
            failed = {row.get("run") for row in (fileio.read_json(results) if fileio.exists(results) else [])
                      if row.get("error")}
            named = {}
            for folder in folders:
                run = folder.rstrip("/").rsplit("/", 1)[-1]
                named[f"{label}/{run}" + (" (failed)" if run in failed else "")] = folder
        else:
            named = {label: workdir}
        for label, workdir in named.items():
            if label in runs:
                raise ValueError(f"two runs are labelled {label!r} ({runs[label]} and {workdir}): "
                                 "give each its own label")
            runs[label] = workdir
    return runs


def main(argv: list[str] | None = None) -> int:
    from bertjax.runtime import cli

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="WORKDIR or LABEL=WORKDIR")
    parser.add_argument("--output", required=True, help="the PNG to write")
    parser.add_argument("--metrics", default="loss,eval_loss", help="comma-separated metric names")
    args = parser.parse_args(argv)
    try:
        if not args.output.lower().endswith(".png") or fileio.isdir(args.output):
            raise ValueError(f"--output={args.output}: give the name of a .png file to write")
        panels = {metric: [metric] for metric in args.metrics.split(",")}
        print(plot_runs(_labelled_runs(args.runs), panels, args.output))
    except Exception as e:  # noqa: BLE001 (expected_failure keeps a bug's traceback)
        line = cli.error_line(e) if isinstance(e, (OSError, ValueError)) else cli.expected_failure(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return cli.EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
