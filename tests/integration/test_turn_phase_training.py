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


def train_one_step(model, output_dir, monkeypatch, environment, rewards, credit, **options) -> tuple:
    """One step of the multi-turn run (``options``: more ``policy.multi_turn`` options, ``group_size``); returns
    ``(d loss / d logp [n, T], micro-batch)`` of its update."""
    group_size = options.pop("group_size", 2)
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
        "policy": {"family": "causal_lm", "model": str(model), "max_new_tokens": 4, "max_prompt_tokens": 128,
                   "use_chat_template": True, "multi_turn": {"environments": environment, "max_turns": 2, **options}},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "seed": 0, "digits": 1}}},
        "rewards": rewards,
        "algorithm": {"group_size": group_size, "prompts_per_step": 4, "micro_batch_size": 4 * group_size,
                      "credit": [credit]},
        "optim": {"lr": 1.0e-3},
        "eval": {"at_start": False, "num_prompts": 2, "batch_size": 2},
        "run": {"output_dir": str(output_dir), "max_steps": 1, "save_every": 0, "sample_every": 0,
                "num_threads": 1, "progress_bar": False},
    })  # fmt: skip
    train(config)
    metrics = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1 and math.isfinite(metrics[0]["loss"])
    return records[0]


def expected_gradient(batch, explore: torch.Tensor, execute: torch.Tensor) -> torch.Tensor:
    """``−A·m/L`` with the execution track's advantage on each sample's last turn, the exploration track's before."""
    mask, turns = batch.mask.double().cpu(), batch["turn_ids"].cpu()
    last = torch.where(mask > 0, turns, -1).amax(1, keepdim=True)  # [N, 1]
    per_action = torch.where(turns == last, execute[:, None], explore[:, None])  # [N, T]
    return -per_action * mask / mask.sum()


def test_each_phase_of_the_episode_gets_its_tracks_advantage(model_path, tmp_path, monkeypatch):  # noqa: F811
    rewards = [{"fn": "environment", "name": "execution"},
               {"fn": "length_penalty", "name": "exploration", "args": {"unit": "chars"}}]  # fmt: skip
    credit = {"name": "turn_phase_tracks", "track_rewards": [[1], [0]], "scale_by_std": False}
    grad, batch = train_one_step(model_path, tmp_path, monkeypatch, TurnScored, rewards, credit)
    table, groups = batch["rewards"].double().cpu(), batch.group_ids.tolist()
    explore, execute = centred(table[:, 1], groups), centred(table[:, 0], groups)  # [N] each
    torch.testing.assert_close(grad, expected_gradient(batch, explore, execute), rtol=1e-5, atol=1e-9)
    assert bool((explore != execute).any())  # both tracks were trained


def test_grpo_verif_trains_the_solution_and_its_separately_sampled_verification(model_path, tmp_path, monkeypatch):  # noqa: F811
    """GRPO-Verif [288]: ``verify_solution`` scores the solution turn and the verification turn; the verification
    track is weighted by 0.5. The tiny model writes no arithmetic, so the solution reward here is its length (a
    short solution counts as correct) and the verdicts are letter classes, which its random text does hit."""
    environment = {"name": "verify_solution", "question": "Check it.", "solution_reward": "length_penalty",
                   "solution_args": {"max_length": 16, "unit": "chars"}, "correct_above": -0.5,
                   "correct_pattern": "[a-m]", "incorrect_pattern": "[n-z0-9]"}  # fmt: skip
    credit = {"name": "turn_phase_tracks", "track_source": "turn_rewards", "track_weights": [1.0, 0.5],
              "scale_by_std": False}  # fmt: skip
    grad, batch = train_one_step(model_path, tmp_path, monkeypatch, environment, [{"fn": "environment"}], credit)
    earned, groups = batch["turn_rewards"].double().cpu(), batch.group_ids.tolist()
    assert earned.shape[1] == 2 and not bool(earned.isnan().any())  # two scored turns per episode
    solution, verification = centred(earned[:, 0], groups), 0.5 * centred(earned[:, 1], groups)
    torch.testing.assert_close(grad, expected_gradient(batch, solution, verification), rtol=1e-5, atol=1e-9)
    assert bool(solution.abs().gt(0).any()) and bool(verification.abs().gt(0).any())  # both tracks carry a signal
