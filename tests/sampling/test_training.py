"""The sample-source stage inside the training recipe, on the toy policy: a run killed after a checkpoint and resumed
logs the same metrics as the uninterrupted one (the rules' state is checkpointed), and overlong filtering keeps
truncated samples out of the update while their groups' advantages are unchanged."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import tests.sampling.truncating_toy  # noqa: F401  (registers the toy_truncating family)
from genalign.algorithms import StepBatch
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.trainer import recipe
from tests.trainer.test_recipe import metrics, run_cli, train_in_process, without_times, write_config

REAL_UPDATE = recipe.run_update
SOURCES = {
    "sample_sources": [
        {"name": "depo", "easy": 0.6, "hard": 0.2},
        "spo",
        {"name": "gfpo", "samples": 6, "metric": "token_efficiency"},
    ],
}


def test_a_killed_run_resumes_the_sample_sources_exactly(tmp_path, monkeypatch):
    """The crash in its own process; the uninterrupted run and the resume in this one."""
    straight_dir, crashed_dir = tmp_path / "a" / "run", tmp_path / "b" / "run"
    straight = write_config(tmp_path / "a", run={"save_every": 2, "output_dir": str(straight_dir)}, algorithm=SOURCES)
    train_in_process(monkeypatch, straight)
    crashing = write_config(tmp_path / "b", run={"save_every": 2, "output_dir": str(crashed_dir)}, algorithm=SOURCES)
    # One reward call per step plus the eval at step 0: call 6 is step 5, after the checkpoint of step 4.
    proc = run_cli("train", str(crashing), "rewards.0.args={crash_on_call: 6}", check=False)
    assert proc.returncode == 17
    train_in_process(monkeypatch, crashing, "run.resume=latest")
    expected = without_times(metrics(straight_dir))
    assert without_times(metrics(crashed_dir)) == expected
    assert sum(record["sampling/depo/skipped"] for record in expected) > 0, "the curriculum never acted"
    assert all(record["num_samples"] == 4 * 4 for record in expected)  # GFPO kept group_size = 4 of 6 per prompt
    state = json.loads((crashed_dir / "checkpoints" / "step-6" / "trainer_state.json").read_text())
    assert set(state["extra"]["components"]["sample_sources"]) == {"depo", "spo", "gfpo"}


def toy_config(tmp_path, **algorithm) -> TrainConfig:
    rows = [{"prompt": f"prompt {i}", "pid": i, "answer": "abc"} for i in range(4)]
    return from_dict(TrainConfig, {
        "policy": {"family": "toy_truncating", "num_prompts": 4},
        "data": {"train": {"source": str(_rows_file(tmp_path, rows))}},
        "rewards": [{"fn": "toy_letter_match", "name": "match"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 4, "micro_batch_size": 16, **algorithm},
        "optim": {"lr": 0.5, "max_grad_norm": None},
        "eval": {"at_start": False, "every": 0},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 1, "progress_bar": False, "overwrite": True},
    })  # fmt: skip


def _rows_file(tmp_path, rows):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_step_update(tmp_path, monkeypatch, **algorithm):
    """The rollout, advantages and parameters of the update of step 1."""
    seen = {}
    real = REAL_UPDATE

    def spy(policy, rollout, batch, *args, **kwargs):
        seen.update(rollout=rollout, advantages=batch["advantages"].clone())
        return real(policy, rollout, batch, *args, **kwargs)

    monkeypatch.setattr(recipe, "run_update", spy)
    run, _ = recipe.start_run(toy_config(tmp_path, **algorithm))
    record, full_rollout, _ = recipe.training_step(run, 1)
    return seen, full_rollout, record, run.policy.logits.detach().clone()


def test_overlong_filter_gives_truncated_samples_no_loss_weight(tmp_path, monkeypatch):
    base, full, _, _ = one_step_update(tmp_path / "base", monkeypatch)
    seen, _, record, _ = one_step_update(tmp_path / "filtered", monkeypatch, sample_sources=["overlong_filter"])
    truncated = full.structure.get("truncated")
    assert 0 < int(truncated.sum()) < len(full), "the toy rollout should hold truncated and complete samples"
    assert not bool(seen["rollout"].structure.get("truncated").any())  # no truncated sample reaches the loss
    assert record["num_trained_samples"] == int((~truncated).sum())
    assert record["sampling/overlong_filter/frac_truncated"] == pytest.approx(float(truncated.float().mean()))
    # the remaining samples keep the advantages of their whole group (truncated samples included in the statistics)
    torch.testing.assert_close(seen["advantages"], base["advantages"][~truncated], rtol=0, atol=0)


def test_overlong_filter_update_equals_the_update_without_the_truncated_samples(tmp_path, monkeypatch):
    """Zero gradient from truncated samples: the parameters after the filtered step equal those after an update on
    the complete samples only, given the same advantages."""
    seen, full, _, filtered_params = one_step_update(
        tmp_path / "filtered", monkeypatch, sample_sources=["overlong_filter"]
    )
    keep = (~full.structure.get("truncated")).nonzero().flatten()
    run, _ = recipe.start_run(toy_config(tmp_path / "manual"))
    rollout = copy.deepcopy(full.select(keep))
    batch = StepBatch(
        mask=rollout.action_mask, group_ids=rollout.group_ids, advantages=seen["advantages"],
        old_logp=rollout.old_logp, group_reward_std=torch.ones(len(keep)), group_mean_reward=torch.zeros(len(keep)),
        progress=1.0,
    )  # fmt: skip
    recipe.run_update(run.policy, rollout, batch, run.loss, run.config.algorithm, run.optimizer, run.scheduler,
                      run.parameters, None, run.accelerator.autocast)  # fmt: skip
    torch.testing.assert_close(run.policy.logits.detach(), filtered_params, rtol=0, atol=1e-7)
