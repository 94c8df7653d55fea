"""`sgh-eval`: score saved codes (`codes=FILE`) or re-score a finished run (`run=DIR`).

Codes from any method can be scored, as long as the file follows the `codes.npz` contract
(`sgh.artifacts.codes_file`). The same `sgh.metrics.scoring.score` serves `sgh-train`. No
TensorFlow here.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from sgh.artifacts.atomic import write_json
from sgh.artifacts.codes_file import load_codes
from sgh.artifacts.run_directory import RunDirectory
from sgh.cli.boundary import exit_on_user_error
from sgh.cli.schemas import CONFIG_PATH, register_configs
from sgh.config import EvalCommandConfig, validate_eval
from sgh.errors import UserInputError
from sgh.metrics.conventions import RESULT_CONVENTIONS
from sgh.metrics.scoring import score
from sgh.reports.results_table import results_table

register_configs()


def evaluate_codes(config: EvalCommandConfig) -> dict:
    """Score the configured codes, write the JSON (if any), print the table; return metrics."""
    if (config.codes is None) == (config.run is None):
        raise UserInputError("give exactly one of codes=FILE (a codes.npz) or run=DIR "
                             "(an sgh-train run directory)")
    validate_eval(config.eval)
    if config.run is not None:
        run = RunDirectory(config.run, create=False)
        if not run.codes.is_file():
            raise UserInputError(f"run={run.path}: no {run.codes.name} there; expected an "
                                 "sgh-train run directory")
        codes_path, out = run.codes, config.out or run.eval_file
    else:
        codes_path, out = Path(config.codes), config.out
    codes = load_codes(codes_path)
    metrics = {"codes": str(codes_path), "bits": codes.bits,
               **score(codes.database, codes.query, codes.bits, config.eval,
                       codes.database_labels, codes.query_labels, codes.groundtruth),
               **RESULT_CONVENTIONS}
    if out is not None:
        write_json(Path(out), metrics)
    print(results_table(metrics, f"{codes_path} ({codes.bits} bits)", config.eval))
    if out is not None:
        print(f"[sgh] wrote {out}")
    return metrics


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="evaluate")
def _hydra_main(cfg: DictConfig) -> None:
    with exit_on_user_error("sgh-eval"):
        evaluate_codes(OmegaConf.to_object(cfg))


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
