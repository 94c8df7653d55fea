"""The comparison of a sweep's runs (`sgh-compare`): one table, plots and TensorBoard images.

Reads every `metrics.json` below SWEEP_DIR, groups the runs by (dataset, method, ranking, bits)
and reports mean ± population std (ddof=0) over seeds; runs that differ in any other setting are
rows of their own (`sgh.reports.sweep_runs`). Writes `comparison.csv`, `comparison.md`, the PNG
plots and `tensorboard_compare/` into SWEEP_DIR (or out=), without TensorFlow. It replaces only
its own earlier output: `comparison.record.json` lists each file it wrote with a hash of its
bytes (`written_by_compare`), so a file of the user's by one of those names, or one edited
since, is refused; every output is checked before the first is written.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import re
import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np

from sgh.artifacts import tensorboard_events
from sgh.artifacts.atomic import DirectoryKind, FileKind, refuse_to_replace, write_bytes
from sgh.artifacts.codes_file import SavedCodes, load_codes
from sgh.artifacts.run_directory import CODES_FILE, METRICS_FILE
from sgh.artifacts.run_outputs import refuse_a_run_file
from sgh.errors import UserInputError
from sgh.methods import METHODS
from sgh.metrics.conventions import LABELS, SUMMARIES
from sgh.reports.sweep_runs import collect, ranking_label

logger = logging.getLogger(__name__)

TENSORBOARD_COMPARE = "tensorboard_compare"  # the figures as TensorBoard images
TENSORBOARD_IMAGES = DirectoryKind(
    "sgh-compare's TensorBoard images (event files)", required=frozenset(),
    optional_patterns=("events.out.tfevents.*", tensorboard_events.STAGED_EVENT_FILES))
# The record of what `compare` wrote into a directory: {"files": {name: [sha256 hex, ...]}}.
RECORD_FILE = "comparison.record.json"
_ELSEWHERE = "choose another out=DIR"


def _read_record(path: Path) -> dict | None:
    """The record at `path`, if it is one `compare` wrote (its `written_by`); else None."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("written_by") != "sgh-compare" \
            or not isinstance(record.get("files"), dict):
        return None
    return record


def _record(directory: Path) -> dict[str, list[str]]:
    """The hashes of what `compare` wrote into `directory`, by name (empty without a record)."""
    record = _read_record(directory / RECORD_FILE) or {"files": {}}
    return {name: hashes for name, hashes in record["files"].items()
            if isinstance(name, str) and isinstance(hashes, list)}


def _recorded_as_written(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() in _record(path.parent).get(path.name, [])


# A file `compare` may replace: one its record lists with these very bytes.
COMPARISON_FILE = FileKind(f"a file sgh-compare wrote (its {RECORD_FILE} does not list it with "
                           "these bytes: it is yours, or was edited since)",
                           recognises=_recorded_as_written)


def _is_record(path: Path) -> bool:
    return path.name == RECORD_FILE and path.is_file() and _read_record(path) is not None


_RECORD = FileKind(f"sgh-compare's record ({RECORD_FILE})", recognises=_is_record)


def written_by_compare(path: str | os.PathLike) -> bool:
    """Whether `path` is `compare`'s own output, which a later comparison may replace: its
    record, a file the record lists with the bytes it has now, or its TensorBoard images."""
    path = Path(path)
    if path.is_symlink():
        return False
    if path.name == RECORD_FILE:
        return _is_record(path)
    if path.name == TENSORBOARD_COMPARE and path.is_dir():
        return TENSORBOARD_IMAGES.holds(path)
    return path.is_file() and _recorded_as_written(path)


METHOD_ORDER = tuple(METHODS)  # the registry's: tables and legends read the same
RECALL_KEY = re.compile(r"^recall(\d+)@(\d+)$")  # tie-aware recall only; *_stable is not compared
MAP_TEXT = SUMMARIES["map"]
RECALL_TEXT = SUMMARIES["recall"].format(k=10, n="{n}")  # the table's Recall10@N
SPREAD_TEXT = "mean ± std over {n} (population std, ddof=0)"
TABLE_METRICS = (("map", "mAP@all", MAP_TEXT),
                 ("recall10@100", "Recall10@100", RECALL_TEXT.format(n=100)))
# Figure titles and TensorBoard descriptions: every plotted number with its convention.
ERROR_BARS = "error bars: " + SPREAD_TEXT.format(n="seeds")
DESCRIPTION = {
    "map_vs_bits": f"{MAP_TEXT}\n{ERROR_BARS}",
    "recall_curves": f"{RECALL_TEXT.format(n='N')}\n{ERROR_BARS}",
    "pr_curves": f"Precision-recall of {SUMMARIES['pr_curve']}",
    "shortlist_curves": "Two-stage search (eval.ranking=two_stage): Recall K@N of the top N "
                        "after rescoring the encoder score's top-S shortlist, against S (first "
                        "seed)",
    "recall_vs_queries_per_second": "Two-stage search: Recall K@N against queries/s (one point "
                                    "per shortlist size S; this machine, default threads; "
                                    "first seed)"}


def _method_rank(label: str) -> tuple:
    """Registry order of the method, then the ranking (Hamming first), then the variant."""
    method, _, ranking = label.partition(" [")[0].partition(" (")
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method,
            ranking != "", ranking, label)


def _recall_order(key: str) -> tuple[int, int]:
    return tuple(int(part) for part in RECALL_KEY.match(key).groups())  # (K, N)


def _number(run: dict, key: str) -> float:
    # metrics.json writes NaN as null; keep it NaN so that a mean over it is visibly NaN.
    value = run[key]
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UserInputError(f"{run['run_dir']}/metrics.json: {key!r} is {value!r}; expected a "
                             "number")
    return float("nan") if value is None else float(value)


def aggregate(rows: list[dict]) -> list[dict]:
    """One dict per (dataset, method label, bits): n_seeds, seeds, <metric>_mean/_std, first_run.
    The label (``itq``, ``itq (scan)``, ``sgh [trainer.steps=400]``) is `ranking_label` plus the
    `variant` (`sgh.reports.sweep_runs`): runs of different labels are never averaged together."""
    groups = defaultdict(list)
    for row in rows:
        label = ranking_label(row) + row.get("variant", "")
        groups[(row["dataset"], label, int(row["bits"]))].append(row)
    result = []
    for (dataset, method, bits), runs in groups.items():
        # The smallest seed's run supplies codes.npz for the PR curve: not a directory name's.
        runs = sorted(runs, key=lambda run: (run.get("seed") is None, run.get("seed") or 0))
        seeds = [run.get("seed") for run in runs]
        if len(set(seeds)) < len(seeds):
            logger.warning("%s %s %s bits: seeds %s repeat, so the same run is counted more "
                           "than once (%s)", dataset, method, bits, seeds,
                           ", ".join(run["run_dir"] for run in runs))
        entry = {"dataset": dataset, "method": method, "bits": bits, "n_seeds": len(runs),
                 "seeds": seeds, "first_run": runs[0]["run_dir"]}
        if "shortlist_curve" in runs[0]:  # the first seed's, as the PR curve
            entry["shortlist_curve"] = runs[0]["shortlist_curve"]
        recall = {key for run in runs for key in run if RECALL_KEY.match(key)}
        for key in ["map", "map_stable", *recall, "distinct_database_codes", "train_seconds"]:
            values = [_number(run, key) for run in runs if key in run]
            if values:  # absent (e.g. no labels): no column, not a zero
                entry[f"{key}_mean"] = float(np.mean(values))
                entry[f"{key}_std"] = float(np.std(values, ddof=0))
        result.append(entry)
    return sorted(result, key=lambda e: (e["dataset"], _method_rank(e["method"]), e["bits"]))


def recall_cutoffs(aggregated: list[dict]) -> list[str]:
    """The `recallK@N` keys present, ordered by K then N."""
    keys = {key[:-5] for entry in aggregated for key in entry
            if key.endswith("_mean") and RECALL_KEY.match(key[:-5])}
    return sorted(keys, key=_recall_order)


def csv_text(aggregated: list[dict]) -> str:
    columns = ["dataset", "method", "bits", "n_seeds", "seeds", "map_mean", "map_std"]
    columns += [f"{key}_{stat}" for key in recall_cutoffs(aggregated) for stat in ("mean", "std")]
    columns += ["distinct_database_codes_mean", "train_seconds_mean"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for entry in aggregated:
        writer.writerow({**entry, "seeds": " ".join(str(seed) for seed in entry["seeds"])})
    return buffer.getvalue()


def _cell(entry: dict | None, key: str, show_n: bool) -> str:
    if entry is None or f"{key}_mean" not in entry:
        return "—"
    text = f"{entry[f'{key}_mean']:.3f} ± {entry[f'{key}_std']:.3f}"
    return text + (f" (n={entry['n_seeds']})" if show_n else "")


def markdown(aggregated: list[dict]) -> str:
    """A Markdown table per dataset: rows = methods, columns = mAP@all and Recall10@100 per bits."""
    sections = []
    for dataset in sorted({entry["dataset"] for entry in aggregated}):
        entries = [entry for entry in aggregated if entry["dataset"] == dataset]
        by_cell = {(entry["method"], entry["bits"]): entry for entry in entries}
        bits = sorted({entry["bits"] for entry in entries})
        methods = sorted({entry["method"] for entry in entries}, key=_method_rank)
        metrics = [metric for metric in TABLE_METRICS  # only those measured, with their text
                   if any(f"{metric[0]}_mean" in entry for entry in entries)]
        counts = sorted({entry["n_seeds"] for entry in entries})
        # One seed count for the whole table goes in the caption; otherwise each cell says its n.
        over = (f"{counts[0]} seed{'s' * (counts[0] != 1)}" if len(counts) == 1
                else "n seeds (per cell)")
        caption = " ".join([f"**{dataset}** — {SPREAD_TEXT.format(n=over)}."]
                           + [f"{text}." for _, _, text in metrics])
        if any(" (" in method.partition(" [")[0] for method in methods):
            caption += (" A method named with a ranking in parentheses was ranked that way "
                        "instead (eval.ranking, an SGHIndex mode: scan, two_stage or bytes), "
                        "with ties by id.")
        if any(" [" in method for method in methods):
            caption += (" A method named with settings in brackets is one of its runs that "
                        "differ in more than the seed, each averaged over its own seeds only.")
        header = ["method"] + [f"{name} {b} bits" for b in bits for _, name, _ in metrics]
        lines = [caption, "", "| " + " | ".join(header) + " |",
                 "| " + " | ".join("---" for _ in header) + " |"]
        for method in methods:
            cells = [_cell(by_cell.get((method, b)), key, len(counts) > 1)
                     for b in bits for key, _, _ in metrics]
            lines.append("| " + " | ".join([method] + cells) + " |")
        sections.append("\n".join(lines))
    return "\n\n".join(sections) + "\n"


def pr_curve(codes: SavedCodes) -> tuple[np.ndarray, np.ndarray]:
    """Mean precision and recall of hash lookup at Hamming radius r = 0..bits."""
    if not codes.has_labels:
        raise ValueError(f"{codes.path}: no labels, so no label precision-recall curve")
    from sgh.metrics import pr_curve as lookup_curve  # one scan of per-distance histograms

    curve = lookup_curve(codes.query, codes.database, codes.bits, codes.query_labels,
                         codes.database_labels, no_relevant="skip")
    return np.asarray(curve["precision"]), np.asarray(curve["recall"])


def _grid(plt, panels: list[list]):
    """A row of axes per dataset; unused cells hidden. Returns the figure and (axis, panel)."""
    n_cols = max(len(row) for row in panels)
    figure, axes = plt.subplots(len(panels), n_cols, squeeze=False,
                                figsize=(4.6 * n_cols + 0.4, 3.6 * len(panels) + 1.0))
    for row, row_axes in zip(panels, axes, strict=True):
        for axis in row_axes[len(row):]:
            axis.set_visible(False)
    return figure, [(axes[i][j], panel) for i, row in enumerate(panels)
                    for j, panel in enumerate(row)]


def _by_dataset(pairs: set[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """(dataset, bits) pairs as panels: a row per dataset, both sorted."""
    return [[pair for pair in sorted(pairs) if pair[0] == dataset]
            for dataset in sorted({dataset for dataset, _ in pairs})]


def figures(aggregated: list[dict]) -> dict[str, bytes]:
    """PNG bytes by file stem, a key of DESCRIPTION (each figure only if it has data)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    datasets = sorted({entry["dataset"] for entry in aggregated})
    rows_of = {d: [e for e in aggregated if e["dataset"] == d] for d in datasets}
    bits_of = {d: sorted({e["bits"] for e in rows_of[d]}) for d in datasets}
    # A method keeps its colour in every panel and figure.
    methods = sorted({entry["method"] for entry in aggregated}, key=_method_rank)
    colour = {m: matplotlib.colormaps["tab10"](i % 10) for i, m in enumerate(methods)}
    out = {}

    def finish(name: str, figure) -> None:
        width = int(figure.get_figwidth() * 16)  # characters that fit across the figure
        figure.suptitle("\n".join(textwrap.fill(line, width)
                                  for line in DESCRIPTION[name].split("\n")), fontsize=8.5)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110)
        plt.close(figure)
        out[name] = buffer.getvalue()

    def draw(axis, method: str, x, y, yerr=None, **labels) -> None:
        axis.errorbar(x, y, yerr=yerr, marker="o" if yerr else ".", capsize=3, label=method,
                      color=colour[method])
        axis.set(**labels)
        axis.grid(alpha=0.3, which="both")
        axis.legend(fontsize=8)

    labelled = [d for d in datasets if any("map_mean" in e for e in rows_of[d])]
    if labelled:
        figure, panels = _grid(plt, [[d] for d in labelled])
        for axis, dataset in panels:
            for method in (m for m in methods if any(e["method"] == m for e in rows_of[dataset])):
                points = [e for e in rows_of[dataset] if e["method"] == method and "map_mean" in e]
                draw(axis, method, [e["bits"] for e in points], [e["map_mean"] for e in points],
                     [e["map_std"] for e in points], title=dataset, xlabel="code length (bits)",
                     ylabel=LABELS["map"].format(ties="tie-aware"), xscale="log")
            axis.set_xticks(bits_of[dataset], [str(b) for b in bits_of[dataset]], minor=False)
            axis.minorticks_off()
        finish("map_vs_bits", figure)

    cutoffs = recall_cutoffs(aggregated)
    if cutoffs:
        figure, panels = _grid(plt, _by_dataset({(e["dataset"], e["bits"]) for e in aggregated}))
        for axis, (dataset, bits) in panels:
            for entry in (e for e in rows_of[dataset] if e["bits"] == bits):
                keys = [k for k in cutoffs if f"{k}_mean" in entry]
                draw(axis, entry["method"], [_recall_order(k)[1] for k in keys],
                     [entry[f"{k}_mean"] for k in keys], [entry[f"{k}_std"] for k in keys],
                     title=f"{dataset}, {bits} bits", xlabel="N (cut-off in the Hamming ranking)",
                     ylabel=LABELS["recall"].format(k=10, n="N", similarity="Euclidean",
                                                   ties="tie-aware"), xscale="log",
                     ylim=(0, 1.02))
            cut = sorted({_recall_order(k)[1] for k in cutoffs})
            axis.set_xticks(cut, [str(n) for n in cut])
            axis.minorticks_off()
        finish("recall_curves", figure)

    searched = [e for e in aggregated if "shortlist_curve" in e]
    if searched:
        for name, x_key, x_label in (
                ("shortlist_curves", "shortlist", "shortlist size S (the encoder score's top S)"),
                ("recall_vs_queries_per_second", "queries_per_second", "queries per second")):
            figure, panels = _grid(plt, _by_dataset({(e["dataset"], e["bits"]) for e in searched}))
            for axis, (dataset, bits) in panels:
                for entry in (e for e in searched if (e["dataset"], e["bits"]) == (dataset, bits)):
                    curve = entry["shortlist_curve"]
                    recall_key = next(key for key in curve if key.startswith("recall"))
                    draw(axis, entry["method"], curve[x_key], curve[recall_key],
                         title=f"{dataset}, {bits} bits", xlabel=x_label,
                         ylabel=f"{recall_key.replace('recall', 'Recall')} after rescoring",
                         xscale="log", ylim=(0, 1.02))
            finish(name, figure)

    curves = {}
    # PR curves are of hash lookup, a Hamming notion: one per method, from its Hamming runs.
    for entry in (e for e in aggregated if e["dataset"] in labelled
                  and " (" not in e["method"].partition(" [")[0]):
        path = Path(entry["first_run"]) / CODES_FILE
        try:
            curves[entry["dataset"], entry["bits"], entry["method"]] = pr_curve(load_codes(path))
        except (UserInputError, ValueError) as error:  # the tables stand without this curve
            logger.warning("no PR curve for %s: %s", entry["method"], error)
    if curves:
        figure, panels = _grid(plt, _by_dataset({key[:2] for key in curves}))
        for axis, (dataset, bits) in panels:
            for method in (m for m in methods if (dataset, bits, m) in curves):
                precision, recall = curves[dataset, bits, method]
                draw(axis, method, recall, precision, title=f"{dataset}, {bits} bits (first seed)",
                     xlabel="recall (label relevance)", ylabel="precision (label relevance)",
                     xlim=(-0.02, 1.02), ylim=(0, 1.02))
        finish("pr_curves", figure)
    return out


def write_tensorboard(directory: Path, images: dict[str, bytes]) -> None:
    """The figures as image summaries (step 0), replacing an earlier tensorboard_compare/ only."""
    refuse_to_replace(directory, TENSORBOARD_IMAGES, elsewhere=_ELSEWHERE)
    with tensorboard_events.recording_as_the_only_file(directory):
        for name, png in images.items():
            tensorboard_events.encoded_image(name, png, step=0, description=DESCRIPTION[name])


def _write_recorded(out: Path, files: dict[str, bytes]) -> None:
    """Write `files` (name -> bytes) into `out`, each atomically, recorded as `compare`'s own.

    The record lists the new bytes beside the old before the first file is replaced, and only
    the new ones after the last: wherever the process is killed, the next comparison may replace
    every file there."""
    record = _record(out)
    new = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    during = {**record, **{name: [*record.get(name, []), digest] for name, digest in new.items()}}
    after = {**record, **{name: [digest] for name, digest in new.items()}}
    write_bytes(out / RECORD_FILE, _record_text(during), replaces=_RECORD)
    for name, data in files.items():
        write_bytes(out / name, data, replaces=COMPARISON_FILE)
    write_bytes(out / RECORD_FILE, _record_text(after), replaces=_RECORD)


def _record_text(files: dict[str, list[str]]) -> bytes:
    return (json.dumps({"written_by": "sgh-compare", "files": files}, indent=1) + "\n").encode()


def incompleteness(sweep_dir, n_finished: int, planned: int | None = None) -> str | None:
    """One line naming the jobs the comparison lacks and how to finish them, or None;
    ``planned``: how many jobs the sweep has, if known (`sgh.cli.compare` reads its record)."""
    # Job directories (Hydra's `.hydra/` in each) without a metrics.json.
    root = Path(sweep_dir)
    jobs = sorted(path.parent for path in root.rglob(".hydra")
                  if path.is_dir() and path.parent != root)
    unfinished = [job for job in jobs if not (job / METRICS_FILE).is_file()]
    missing = max(len(unfinished), (planned or 0) - n_finished)
    if missing == 0:
        return None
    total = planned if planned is not None else n_finished + missing
    named = ", ".join(str(job) for job in unfinished[:5]) + (", ..." if len(unfinished) > 5
                                                              else "")
    return (f"{missing} of {total} jobs of the sweep have no results (failed, interrupted or "
            f"not run{': ' + named if named else ''}), so the table covers {n_finished}; run the "
            f"sweep's command again with hydra.sweep.dir={sweep_dir} to finish them (finished "
            "jobs are not trained again)")


def compare(sweep_dir, out=None, tensorboard: bool = True,
            planned_jobs: int | None = None) -> tuple[str, list[Path]]:
    """Write the comparison of the sweep's runs into `out` (default: the sweep directory).

    Returns the Markdown table and the paths written. A sweep with jobs that have no results
    (of `planned_jobs`, if known) is compared as it stands, and warned about (in the table too).
    Raises UserInputError, writing nothing, when `out` is a file or inside a run, or an output's
    name there holds something not `compare`'s own (`written_by_compare`).
    """
    rows = collect(sweep_dir)
    aggregated = aggregate(rows)
    gap = incompleteness(sweep_dir, len(rows), planned_jobs)
    out = Path(out if out is not None else sweep_dir)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"out={out}: is a file; expected a directory")
    refuse_a_run_file("out", out, "comparison")  # a run's folders are the run's alone
    table = markdown(aggregated)
    if gap is not None:
        logger.warning("%s", gap)
        table = f"**Incomplete sweep**: {gap}.\n\n{table}"
    images = figures(aggregated)
    files = {"comparison.csv": csv_text(aggregated).encode(), "comparison.md": table.encode(),
             **{f"{name}.png": png for name, png in images.items()}}
    with_images = tensorboard and bool(images)
    refuse_to_replace(out / RECORD_FILE, _RECORD, elsewhere=_ELSEWHERE)
    for name in files:
        refuse_to_replace(out / name, COMPARISON_FILE, elsewhere=_ELSEWHERE)
    if with_images:
        refuse_to_replace(out / TENSORBOARD_COMPARE, TENSORBOARD_IMAGES, elsewhere=_ELSEWHERE)
    out.mkdir(parents=True, exist_ok=True)
    _write_recorded(out, files)
    paths = [out / name for name in files]
    if with_images:
        write_tensorboard(out / TENSORBOARD_COMPARE, images)
        paths.append(out / TENSORBOARD_COMPARE)
    return table, paths
