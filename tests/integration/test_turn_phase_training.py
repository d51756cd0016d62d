"""TRUST-SQL's Dual-Track GRPO [284] in a real multi-turn run (the tiny model and two-turn environment of
tests/integration/test_turn_credit_training.py, in-process): with ``turn_phase_tracks`` the gradient with respect to
each action's log-probability is −A_track·m/L, the exploration track's advantage on turn 0 and the execution
track's on the last turn (recomputed here from the batch's two reward columns)."""

from __future__ import annotations

import json
import math
import os

import torch

from genalign.algorithms import LossPlan
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from tests.integration.test_turn_credit_training import TurnScored, model_path  # noqa: F401  (the fixture)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def centred(values: torch.Tensor, groups: list[int]) -> torch.Tensor:
    """``[N]`` each value minus its group's mean."""
    return torch.stack([values[i] - values[[j for j in range(len(groups)) if groups[j] == groups[i]]].mean()
                        for i in range(len(groups))])  # fmt: skip


def test_each_phase_of_the_episode_gets_its_tracks_advantage(model_path, tmp_path, monkeypatch):  # noqa: F811
    from genalign.trainer.recipe import train

    records = []
    original = LossPlan.__call__

    def recording(self, score, batch, normalizer):
        loss, metrics = original(self, score, batch, normalizer)
        (grad,) = torch.autograd.grad(loss, score.logp, retain_graph=True)
        records.append((grad.detach().double().cpu(), batch))
        return loss, metrics

    monkeypatch.setattr(LossPlan, "__call__", recording)
    config = from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": str(model_path), "max_new_tokens": 4, "max_prompt_tokens": 128,
                   "use_chat_template": True, "multi_turn": {"environments": TurnScored, "max_turns": 2}},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "seed": 0, "digits": 1}}},
        "rewards": [{"fn": "environment", "name": "execution"},
                    {"fn": "length_penalty", "name": "exploration", "args": {"unit": "chars"}}],
        "algorithm": {"group_size": 2, "prompts_per_step": 4, "micro_batch_size": 8,
                      "credit": [{"name": "turn_phase_tracks", "track_rewards": [[1], [0]], "scale_by_std": False}]},
        "optim": {"lr": 1.0e-3},
        "eval": {"at_start": False, "num_prompts": 2, "batch_size": 2},
        "run": {"output_dir": str(tmp_path), "max_steps": 1, "save_every": 0, "sample_every": 0,
                "num_threads": 1, "progress_bar": False},
    })  # fmt: skip
    train(config)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1 and math.isfinite(metrics[0]["loss"])
    grad, batch = records[0]
    mask, turns = batch.mask.double().cpu(), batch["turn_ids"].cpu()
    rewards, groups = batch["rewards"].double().cpu(), batch.group_ids.tolist()
    explore, execute = centred(rewards[:, 1], groups), centred(rewards[:, 0], groups)  # [N] each
    last = torch.where(mask > 0, turns, -1).amax(1, keepdim=True)  # [N, 1]
    per_action = torch.where(turns == last, execute[:, None], explore[:, None])  # [N, T]
    torch.testing.assert_close(grad, -per_action * mask / mask.sum(), rtol=1e-5, atol=1e-9)
    assert bool((turns[mask > 0] == 0).any()) and bool((explore != execute).any())  # both tracks were trained
