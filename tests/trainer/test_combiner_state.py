"""The reward combiner's state in the trainer: Self-Paced GRPO's [64] running competence is the EMA of the competence
reward's batch means of the earlier steps, and a run resumed from a checkpoint continues it exactly."""

from __future__ import annotations

import pytest
import yaml

from tests.trainer.test_recipe import metrics, train_in_process, without_times, write_config

MOMENTUM = 0.5


def _config(folder, steps: int):
    path = write_config(
        folder,
        algorithm={"reward_combination": {"name": "self_paced", "competence_momentum": MOMENTUM}},
        run={"max_steps": steps, "save_every": 2, "output_dir": str(folder / "run")},
    )
    config = yaml.safe_load(path.read_text())
    config["rewards"] = [{"fn": "toy_letter_match", "name": "match"}, {"fn": "toy_letter_match", "name": "again"}]
    path.write_text(yaml.safe_dump(config))
    return path


def test_self_paced_competence_is_the_ema_of_earlier_steps_and_resumes_exactly(tmp_path, monkeypatch):
    train_in_process(monkeypatch, _config(tmp_path / "straight", 4))
    records = metrics(tmp_path / "straight" / "run")
    means = [r["reward/match/mean"] for r in records]
    expected = [means[0]]  # the first step: its own batch mean (no earlier steps)
    for mean in means[:-1]:  # then c <- m·c + (1 − m)·mean, the first batch setting c
        expected.append(mean if len(expected) == 1 else MOMENTUM * expected[-1] + (1 - MOMENTUM) * mean)
    assert [r["self_paced/competence"] for r in records] == pytest.approx(expected, abs=1e-6)
    assert len(set(expected)) > 1  # the competence moved

    resumed = _config(tmp_path / "resumed", 2)
    train_in_process(monkeypatch, resumed)
    train_in_process(monkeypatch, resumed, "run.max_steps=4", "run.resume=latest")
    assert without_times(metrics(tmp_path / "resumed" / "run")) == without_times(records)
