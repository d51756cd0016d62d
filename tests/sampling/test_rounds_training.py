"""Extra sampling rounds inside the training recipe, on the toy policy: DARS draws more samples for the prompts with
low accuracy in the first rollout, and a run with DARS and AERO killed after a checkpoint and resumed logs the same
metrics as the uninterrupted one (the rules' state and the rounds are reproduced)."""

from __future__ import annotations

import json

import torch
import yaml

import tests.sampling.truncating_toy  # noqa: F401  (registers the toy families)
from genalign.trainer import recipe
from tests.sampling.test_training import toy_config
from tests.trainer.test_recipe import metrics, run_cli, train_in_process, without_times, write_config


def letter_match(output: str, answer: str = "abc") -> float:
    return sum(a == b for a, b in zip(output, answer)) / len(answer)


def test_dars_gives_low_accuracy_prompts_more_samples(tmp_path):
    config = toy_config(tmp_path, sample_sources=[{"name": "dars", "max_extra": 3}])
    run, _ = recipe.start_run(config)
    record, rollout, _ = recipe.training_step(run, 1)
    first = 4 * 4  # round 0: 4 prompts x group_size 4, first in the joined rollout
    rewards = torch.tensor([letter_match(o) for o in rollout.outputs])  # [N]
    positions = rollout.group_ids[:first].unique().tolist()
    accuracy = {p: float(rewards[:first][rollout.group_ids[:first] == p].mean()) for p in positions}
    extra = {p: int((rollout.group_ids[first:] == p).sum()) for p in positions}
    assert set(rollout.group_ids[first:].tolist()) <= set(positions)
    for p in positions:  # equal treatment with n = 4: a = 0 -> 3 (the cap), a = 1/4 or 1/3 -> 1, a >= 1/2 -> 0
        expected = run.sources.rules[0][1].extra(accuracy[p], 4)
        assert extra[p] == expected, (p, accuracy[p], extra)
    assert any(extra.values()), "the untrained toy policy should have hard prompts"
    assert all(accuracy[p] < 0.5 for p in positions if extra[p]) and all(accuracy[p] >= 0.5 for p in positions
                                                                        if not extra[p])  # fmt: skip
    assert record["sampling/extra_samples"] == sum(extra.values())
    assert record["num_samples"] == first + sum(extra.values()) == len(rollout)
    assert record["sampling/rounds"] == 2.0
    assert record["sampling/dars/prompts_extended"] == sum(1 for p in positions if extra[p])


SOURCES = {
    "sample_sources": [
        {"name": "dars", "max_extra": 4},
        {"name": "aero", "max_extra": 3, "max_rounds": 3, "skip_above": 0.7},
    ],
}


def rounds_config(directory, output_dir):
    """The toy run with DARS and AERO, trained on a 0/1 reward (exact match; the letter-match reward, weight 0, is
    there to crash on demand) so that AERO meets all-equal groups; extra samples of a prompt differ from its first
    ones (``layout_free_sampling`` off)."""
    path = write_config(directory, run={"save_every": 2, "max_steps": 6, "output_dir": str(output_dir)},
                        algorithm=SOURCES, policy={"layout_free_sampling": False})  # fmt: skip
    config = yaml.safe_load(path.read_text())
    config["rewards"] = [{"fn": "toy_letter_match", "name": "match", "weight": 0.0},
                         {"fn": "exact_match", "name": "exact"}]  # fmt: skip
    config["optim"]["lr"] = 2.0
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_killed_run_with_extra_rounds_resumes_exactly(tmp_path, monkeypatch):
    """The crash in its own process; the uninterrupted run and the resume in this one."""
    straight_dir, crashed_dir = tmp_path / "a" / "run", tmp_path / "b" / "run"
    straight = rounds_config(tmp_path / "a", straight_dir)
    train_in_process(monkeypatch, straight)
    expected = without_times(metrics(straight_dir))
    assert sum(record["sampling/extra_samples"] for record in expected) > 0, "no extra round was sampled"
    assert any(record["sampling/rounds"] == 3.0 for record in expected), "AERO never asked for a third round"
    # reward calls: the eval at step 0, then one per sampling round; crash on the first call of step 5
    crash_call = 1 + sum(int(record["sampling/rounds"]) for record in expected[:4]) + 1
    crashing = rounds_config(tmp_path / "b", crashed_dir)
    proc = run_cli("train", str(crashing), f"rewards.0.args={{crash_on_call: {crash_call}}}", check=False)
    assert proc.returncode == 17
    assert len(metrics(crashed_dir)) == 4
    train_in_process(monkeypatch, crashing, "run.resume=latest")
    assert without_times(metrics(crashed_dir)) == expected
    state = json.loads((crashed_dir / "checkpoints" / "step-6" / "trainer_state.json").read_text())
    assert set(state["extra"]["components"]["sample_sources"]) == {"dars", "aero"}
    assert state["extra"]["components"]["sample_sources"]["aero"]["alpha"], "the AERO posterior was not checkpointed"
