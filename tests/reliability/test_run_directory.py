"""A new run never destroys an earlier one, a failed start writes nothing, and a resume continues only its own run."""

from __future__ import annotations

import pytest
import yaml

from genalign.trainer import train
from genalign.trainer.run_directory import RunDirectoryError
from tests.reliability.conftest import metrics, toy_config


def test_a_second_run_into_the_same_folder_is_refused_and_loses_nothing(tmp_path):
    train(toy_config(tmp_path))
    run_dir = tmp_path / "run"
    before = (run_dir / "metrics.jsonl").read_text(), (run_dir / "config.yaml").read_text()
    steps = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    with pytest.raises(RunDirectoryError, match=r"holds a previous run.*run\.resume=latest.*run\.output_dir"):
        train(toy_config(tmp_path, run={"max_steps": 3, "save_every": 1}))
    assert ((run_dir / "metrics.jsonl").read_text(), (run_dir / "config.yaml").read_text()) == before
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == steps


def test_overwrite_moves_the_previous_run_aside(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2}))
    train(toy_config(tmp_path, run={"max_steps": 3, "overwrite": True}))
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(aside) == 1 and [r["step"] for r in metrics(aside[0])] == [1, 2]
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2, 3]


def test_a_failed_resume_writes_nothing(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2}))
    config_text = (tmp_path / "run" / "config.yaml").read_text()
    with pytest.raises(RunDirectoryError, match=r"algorithm\.group_size = 4, this run has algorithm\.group_size = 8"):
        train(toy_config(tmp_path, algorithm={"group_size": 8}, run={"resume": "latest", "max_steps": 4}))
    assert (tmp_path / "run" / "config.yaml").read_text() == config_text
    # a deliberate change is allowed when named
    changed = toy_config(tmp_path, algorithm={"group_size": 8}, run={"resume": "latest", "max_steps": 3,
                                                                     "resume_changes": ["algorithm.group_size"]})  # fmt: skip
    train(changed)
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2, 3]
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["algorithm"]["group_size"] == 8


def test_resuming_at_or_past_max_steps_is_an_error_that_says_how_to_continue(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2}))
    with pytest.raises(RunDirectoryError, match=r"at step 2 and run\.max_steps = 2.*Raise run\.max_steps"):
        train(toy_config(tmp_path, run={"resume": "latest", "max_steps": 2}))


def test_bad_data_fails_before_the_model_is_built_or_anything_is_written(tmp_path, monkeypatch):
    import genalign.trainer.recipe as recipe

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not be built when the data cannot be read")

    monkeypatch.setattr(recipe, "build_policy", no_model)
    config = toy_config(tmp_path)
    config.data.train.source = str(tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl"):
        train(config)
    assert not (tmp_path / "run").exists()
