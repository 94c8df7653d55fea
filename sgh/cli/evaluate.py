"""`sgh-eval`: score saved codes (`codes=FILE`) or re-score a finished run (`run=DIR`).

Any file in the `codes.npz` contract (`sgh.artifacts.codes_file`) is scored as `sgh-train` scores.
`run=DIR eval.ranking=scan|two_stage|bytes` reads the run's dataset again (its config.yaml) and
its method's score (asymmetric.npz, plain arrays: no TensorFlow here), and ranks by the search
of `SGHIndex` in that mode (``bytes``: the byte decoder index at ``eval.encoding``).
"""

from __future__ import annotations

from pathlib import Path

from sgh.artifacts.atomic import write_json
from sgh.artifacts.codes_file import load_codes, refuse_another_models_scores
from sgh.artifacts.output_places import check_writable_place
from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_lock import refuse_a_run_being_written
from sgh.artifacts.run_outputs import refuse_a_run_file
from sgh.artifacts.run_split import recorded_split
from sgh.cli.out_file_command import run_out_file_command, writing_out
from sgh.config import EvalCommandConfig, EvalConfig, validate_eval
from sgh.errors import UserInputError
from sgh.metrics.conventions import RESULT_CONVENTIONS
from sgh.metrics.scoring import score
from sgh.reports.results_table import results_table
from sgh.scores.posterior_modes import check_encoding_setting
from sgh.scores.score_set import ScoreSet
from sgh.search.rankings import evaluation_ranking


def evaluate_codes(config: EvalCommandConfig) -> dict:
    """Score the configured codes, write the JSON (if any), print the table; return metrics."""
    _check_arguments(config)
    if config.run is not None:
        run = RunDirectory(config.run, create=False)
        if not run.codes.is_file():
            refuse_a_run_being_written(run.path, run.codes.name)
            raise UserInputError(f"run={run.path}: no {run.codes.name} there; expected an "
                                 "sgh-train run directory")
        codes_path, out = run.codes, config.out or run.eval_file
    else:
        codes_path, out = Path(config.codes), config.out
    if out is not None:  # before the scoring, which may take minutes
        _check_output(Path(out), codes_path, None if config.run is None else run.path)
    codes = load_codes(codes_path)
    ranking, similarity = None, None
    if config.eval.ranking != "hamming":
        if config.run is None:
            raise UserInputError(f"eval.ranking={config.eval.ranking} scores the query features, "
                                 "which a codes file does not hold; re-score a run with "
                                 "sgh-eval run=DIR instead of codes=FILE")
        ranking, similarity = _run_ranking(config.eval, run, codes)
    metrics = {"codes": str(codes_path), "bits": codes.bits,
               **score(codes.database, codes.query, codes.bits, config.eval,
                       codes.database_labels, codes.query_labels, codes.groundtruth, ranking),
               **({} if similarity is None else {"similarity": similarity}),
               **RESULT_CONVENTIONS}
    if out is not None:
        write_json(Path(out), metrics)
    print(results_table(metrics, f"{codes_path} ({codes.bits} bits)", config.eval))
    if out is not None:
        print(f"[sgh] wrote {out}")
    return metrics


def _check_arguments(config: EvalCommandConfig) -> None:
    if (config.codes is None) == (config.run is None):
        raise UserInputError("give exactly one of codes=FILE (a codes.npz) or run=DIR "
                             "(an sgh-train run directory)")
    validate_eval(config.eval)
    check_encoding_setting(config.eval.encoding)


def _check_output(out: Path, codes_path: Path, run_dir: Path | None) -> None:
    """`out` replaces nothing but a JSON file: not the codes file, nor a run's file (but the
    eval.json of `run_dir`, the run re-scored)."""
    if out.exists() and codes_path.exists() and out.resolve() == codes_path.resolve():
        raise UserInputError(f"out={out} is the codes file, which the JSON would overwrite; "
                             "accepted: another path, e.g. out=scores.json")
    refuse_a_run_file("out", out, "scores.json", runs=() if run_dir is None else (run_dir,),
                      eval_of=run_dir)
    check_writable_place("out", out, directory_wanted=False)
    if out.suffix != ".json":  # e.g. out=data.npz would replace a dataset with JSON
        raise UserInputError(f"out={out}: sgh-eval writes JSON; accepted: a path ending in "
                             ".json, e.g. out=scores.json")


def _run_ranking(config: EvalConfig, run: RunDirectory, codes):
    """The ranking of a finished run by `SGHIndex` in the mode eval.ranking names, and its
    similarity."""
    split = recorded_split(run, f"eval.ranking={config.ranking}",
                           {part: len(getattr(codes, part)) for part in ("query", "database")})
    previous = run.previous_config()
    scores, without = None, ""
    if run.asymmetric_score.is_file():
        try:
            scores = ScoreSet.load(run.asymmetric_score)
        except ValueError as error:
            raise UserInputError(str(error)) from None
        refuse_another_models_scores(codes, scores, run.asymmetric_score)
    else:
        without = (f"run={run.path} has no {run.asymmetric_score.name} (model="
                   f"{previous.get('model', {}).get('name')} has none, or the run predates it)")
    ranking = evaluation_ranking(config, codes.database, scores, split.query, split.database,
                                 without, split.train)
    return ranking, split.similarity


def _evaluate(config: EvalCommandConfig) -> None:
    out = _output_of(config)
    with writing_out("sgh-eval", out, out or "nothing"):
        evaluate_codes(config)


def _output_of(config: EvalCommandConfig) -> Path | None:
    """Where a job writes: `out`, else a re-scored run's eval.json."""
    if config.out is not None:
        return Path(config.out)
    return None if config.run is None else RunDirectory(config.run, create=False).eval_file


def main() -> None:
    run_out_file_command("sgh-eval", "evaluate", _evaluate, _check_arguments, _output_of)


if __name__ == "__main__":
    main()
