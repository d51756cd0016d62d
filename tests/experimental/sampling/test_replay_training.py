"""RePO [233] inside the training recipe on the embedded arithmetic LM (``builtin:arith-lm``): stored completions come
back into later groups of their prompts as forced samples (trained with the off-policy clip [323]), and a run killed
after a checkpoint and resumed logs the same metrics as the uninterrupted one (the replay buffer is checkpointed)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.sampling import SampleSourceStage
from genalign.trainer import recipe

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Killed(RuntimeError):
    """The simulated crash."""


def train_killed_in_step(monkeypatch, config: TrainConfig, step: int = 5) -> None:
    """Train ``config`` until the start of ``step`` (after the checkpoint of the step before), where it is killed."""
    real_step = recipe.training_step

    def crash_in_step(run, at):
        if at == step:
            raise Killed(f"killed after the checkpoint of step {step - 1}")
        return real_step(run, at)

    monkeypatch.setattr(recipe, "training_step", crash_in_step)
    with pytest.raises(Killed):
        recipe.train(config)
    monkeypatch.setattr(recipe, "training_step", real_step)


def config(out, **run) -> TrainConfig:
    """Four prompts of an eight-row data set per step, so every prompt comes back after two steps."""
    return from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False,
                   "max_prompt_tokens": 16, "max_new_tokens": 6, "temperature": 1.0},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8, "seed": 0, "digits": 3}}},
        "rewards": [{"fn": "exact_match", "name": "accuracy"}],
        "algorithm": {
            "group_size": 4, "prompts_per_step": 4, "micro_batch_size": 32,
            "clip": {"name": "off_policy", "eps_low": 0.2, "eps_high": 0.28},
            "sample_sources": [{"name": "repo", "replays": 2, "strategy": "recent", "per_prompt": 8, "min_stored": 4}],
        },
        "optim": {"lr": 3.0e-4},
        "eval": {"at_start": False, "every": 0},
        "run": {"output_dir": str(out), "seed": 0, "max_steps": 6, "save_every": 2, "progress_bar": False,
                "num_threads": 1, **run},
    })  # fmt: skip


def records(out) -> list[str]:
    """Each step's metrics without timings, as JSON text (NaN statistics compare equal)."""
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.dumps({k: v for k, v in json.loads(line).items() if not k.startswith("time/")}, sort_keys=True)
            for line in lines]  # fmt: skip


def test_repo_replays_into_training_and_resumes_exactly(tmp_path, monkeypatch):
    forced, updated = {}, {}
    real_forced, real_update = SampleSourceStage.forced_samples, recipe.run_update

    def spy_forced(stage, outcome):
        forced[outcome.step] = real_forced(stage, outcome)
        return forced[outcome.step]

    def spy_update(policy, rollout, *args, **kwargs):
        updated[len(updated) + 1] = rollout
        return real_update(policy, rollout, *args, **kwargs)

    monkeypatch.setattr(SampleSourceStage, "forced_samples", spy_forced)
    monkeypatch.setattr(recipe, "run_update", spy_update)
    straight = tmp_path / "straight"
    recipe.train(config(straight))
    monkeypatch.undo()
    expected = records(straight)
    steps = [json.loads(r) for r in expected]
    assert len(steps) == 6
    assert [s.get("sampling/forced_replay", 0.0) for s in steps[:2]] == [0.0, 0.0]  # nothing stored yet
    assert steps[0]["sampling/repo/staleness_mean"] is None  # NaN: nothing replayed
    # from step 3 every prompt is a revisit with >= min_stored completions: 2 replays each, at least a step old
    assert all(s["sampling/forced_replay"] == 4 * 2 and s["sampling/repo/replayed"] == 8.0 for s in steps[2:])
    assert all(s["sampling/repo/staleness_mean"] >= 1.0 for s in steps[2:])
    assert all(s["num_samples"] == 4 * 4 + 8 for s in steps[2:])  # the replayed samples join their groups
    assert steps[-1]["sampling/repo/buffer_size"] == 8 * 8.0  # 8 prompts × per_prompt
    # the update trains each replayed completion with its stored behaviour log-probs as old_logp
    rollout, replays = updated[3], forced[3]
    tail = rollout.select(torch.arange(len(rollout) - len(replays), len(rollout)))
    for i, item in enumerate(replays):
        length = item.tokens.shape[0]
        assert int(tail.action_mask[i].sum()) == length and int(tail.group_ids[i]) == item.position
        assert torch.equal(tail.structure.get("action_ids")[i, :length], item.tokens)
        assert torch.equal(tail.old_logp[i, :length], item.behaviour_logp)

    crashed = tmp_path / "crashed"
    train_killed_in_step(monkeypatch, config(crashed))
    assert len(records(crashed)) == 4
    resumed = config(crashed)
    recipe.train(dataclasses.replace(resumed, run=dataclasses.replace(resumed.run, resume="latest")))
    assert records(crashed) == expected
    state = json.loads((crashed / "checkpoints" / "step-6" / "trainer_state.json").read_text())
    assert set(state["extra"]["components"]["sample_sources"]["repo"]["buffer"]) >= {"tokens", "behaviour_logp", "step"}


@pytest.mark.parametrize(
    ("name", "args"), [("ar3po", {"stages": 3, "stage_samples": 2}), ("eframe", {"extra_samples": 4})]
)
def test_extra_rounds_and_replays_join_the_update(name, args, tmp_path):
    base = config(tmp_path / name)
    algorithm = dataclasses.replace(base.algorithm, sample_sources=[{"name": name, **args}])
    recipe.train(dataclasses.replace(base, algorithm=algorithm))
    steps = [json.loads(r) for r in records(tmp_path / name)]
    for s in steps:  # every extra and replayed sample is in the step's batch; the filter decides what is trained
        assert s["num_samples"] == 4 * 4 + s["sampling/extra_samples"] + s.get("sampling/forced_replay", 0.0)
        assert s["num_trained_samples"] == round(s["sampling/frac_trained"] * s["num_samples"])
    assert sum(s["sampling/extra_samples"] for s in steps) > 0, "no prompt was sampled again"
    assert sum(s.get("sampling/forced_replay", 0.0) for s in steps) > 0, "nothing was replayed"
