"""Inputs are checked wherever they are read again: `sgh-eval run=` against the run's record."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from sgh.cli.evaluate import evaluate_codes
from sgh.config import EvalCommandConfig, EvalConfig
from sgh.data.synthetic import gaussian_clusters
from sgh.errors import UserInputError
from sgh.pipeline import run
from tests.helpers import QUICK, compose_config


def _write(path, seed):
    x_train, y_train, x_test, y_test = gaussian_clusters(600, 200, 16, 4, seed)
    np.savez(path, X_train=x_train, y_train=y_train, X_test=x_test, y_test=y_test)


@pytest.mark.filterwarnings("ignore:two-stage search")  # ITQ's one score
def test_a_rescore_on_a_changed_dataset_file_is_refused_naming_it(tmp_path):
    data = tmp_path / "clusters.npz"
    _write(data, 0)
    run_dir = tmp_path / "run"
    run(compose_config(*QUICK[1:], "dataset=file", f"dataset.path={data}",
                       "dataset.n_queries=50", "model=itq"), run_dir)
    rescored = EvalConfig(ranking="two_stage", shortlist=50)  # reads the query features
    before = evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=rescored))
    _write(data, 1)  # other vectors of the same shape: only the record tells
    with pytest.raises(UserInputError, match=rf"run={run_dir} was trained on other data \("
                                             rf"{data.resolve()} \(dataset.path\)"):
        evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=rescored))
    # The Hamming ranking reads no features: the codes alone are scored, as before.
    hamming = evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=EvalConfig()))
    assert hamming["n_queries"] == before["n_queries"] == 50


def test_an_hdf5_file_whose_neighbours_are_not_the_nearest_is_refused(tmp_path):
    import h5py

    from sgh.data.neighbours import exact_neighbours

    rng = np.random.default_rng(0)
    train = rng.normal(size=(500, 8)).astype(np.float32)
    test = rng.normal(size=(40, 8)).astype(np.float32)
    nearest = exact_neighbours(test, train, 20)
    farthest = np.argsort(-((test[:, None] - train[None]) ** 2).sum(-1), axis=1)[:, :20]
    for name, neighbours in (("right", nearest), ("wrong", farthest)):
        with h5py.File(tmp_path / f"{name}.hdf5", "w") as file:
            file.create_dataset("train", data=train)
            file.create_dataset("test", data=test)
            file.create_dataset("neighbors", data=neighbours)
            # The distances claim the nearest, whatever the ids say.
            file.create_dataset("distances", data=np.sort(np.sqrt(
                ((test[:, None] - train[None]) ** 2).sum(-1)), axis=1)[:, :20])
            file.attrs["distance"] = "euclidean"
    config = compose_config(*QUICK[1:], "dataset=file", "model=lsh",
                            f"dataset.path={tmp_path / 'right.hdf5'}")
    run(config, tmp_path / "run")
    with pytest.raises(UserInputError, match=r"wrong.hdf5: key 'neighbors': the neighbours of "
                                             "query 0 are not its 10 nearest 'train' items"):
        run(compose_config(*QUICK[1:], "dataset=file", "model=lsh",
                           f"dataset.path={tmp_path / 'wrong.hdf5'}"), tmp_path / "run2")
    assert not (tmp_path / "run2" / "codes.npz").exists()


@pytest.mark.filterwarnings("ignore:two-stage search")  # ITQ's one score
def test_a_run_trained_with_a_relative_dataset_path_is_rescored_from_another_directory(
        tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    _write(tmp_path / "data" / "clusters.npz", 0)
    monkeypatch.chdir(tmp_path / "data")
    config = compose_config(*QUICK[1:], "dataset=file", "dataset.path=clusters.npz",
                            "dataset.n_queries=50", "model=itq")
    run(config, tmp_path / "run")
    recorded = OmegaConf.load(tmp_path / "run" / "config.yaml").dataset.path
    assert recorded == str(tmp_path / "data" / "clusters.npz")  # absolute, as read
    rescored = EvalConfig(ranking="two_stage", shortlist=50)  # reads the query features
    here = evaluate_codes(EvalCommandConfig(run=str(tmp_path / "run"), eval=rescored))
    monkeypatch.chdir(tmp_path / "elsewhere")  # no clusters.npz here: the record finds it
    there = evaluate_codes(EvalCommandConfig(run="../run", eval=rescored))
    assert there["recall10@100"] == here["recall10@100"] and there["n_queries"] == 50
    # The same command, from the same directory, is the same run (its results, nothing new).
    monkeypatch.chdir(tmp_path / "data")
    assert run(config, tmp_path / "run")["recall10@100"] == run(config, tmp_path / "run")[
        "recall10@100"]


def test_a_run_that_recorded_a_relative_path_still_resumes_from_its_directory(tmp_path,
                                                                            monkeypatch):
    _write(tmp_path / "clusters.npz", 0)
    monkeypatch.chdir(tmp_path)
    config = compose_config(*QUICK[1:], "dataset=file", "dataset.path=clusters.npz",
                            "dataset.n_queries=50", "model=itq")
    run(config, tmp_path / "run")
    record = tmp_path / "run" / "config.yaml"
    record.write_text(record.read_text().replace(str(tmp_path / "clusters.npz"), "clusters.npz"))
    (tmp_path / "run" / "metrics.json").unlink()  # as if it had stopped before the end
    assert run(config, tmp_path / "run")["n_queries"] == 50  # not "another configuration"
