"""The trainer's reward-shaping stage (between the combiner and the estimator) and the reward-reading credit rules on a
causal LM: sequence embeddings from the scoring pass before the update reach DRA [167]; Miner [28] reads the reward
table."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from genalign import algorithms as alg
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.data import load_rows
from genalign.experimental.shaping.diversity import graph_cut_smi
from genalign.trainer.recipe import build_policy
from genalign.trainer.rewards import RewardSet
from tests.step_batches import step_batch

torch.set_num_threads(1)


def _setup(**algorithm):
    config = from_dict(
        TrainConfig,
        {
            "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 6, "temperature": 1.5},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8, "digits": 1}}},
            "rewards": [{"fn": "exact_match"}],
            "algorithm": {"group_size": 4, "micro_batch_size": 4, **algorithm},
        },
    )
    torch.manual_seed(0)
    policy = build_policy(config, torch.device("cpu"))
    rollout = policy.rollout(load_rows(config.data.train)[:3], config.algorithm.group_size)
    rewards = RewardSet(config.rewards)
    table, _ = rewards(rollout.rows, rollout.outputs)
    return config, policy, rollout, table, rewards.weights


def test_diversity_shaping_reads_embeddings_from_the_scoring_pass_before_the_update():
    config, policy, rollout, table, weights = _setup(reward_shaping=["submodular_diversity"])
    request = config.algorithm.advantage_stage().prepass()
    assert request is not None and "hidden" in request and "entropy" not in request
    batch, stats = step_batch(policy, rollout, table, weights, config.algorithm)
    weight_mean = stats["reward_shaping/diversity_weight_mean"]
    assert 1 / config.algorithm.group_size <= weight_mean <= 1.0  # 1 / (1 + SMI) with SMI in [0, G − 1]
    # the same embeddings by hand: mean hidden state over each completion, then the graph-cut SMI of its group
    with torch.no_grad():
        hidden = policy.score(rollout, alg.ScoreRequest.of("hidden"))["hidden"]
    mask = rollout.action_mask[..., None]
    embeddings = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1)
    smi = graph_cut_smi(embeddings, rollout.group_ids)
    shaped = table[:, 0] / (1 + smi + 1e-6)
    expected = alg.compute_advantages("grpo", shaped, rollout.group_ids)
    torch.testing.assert_close(batch["sample_advantages"], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batch["combined_reward"], shaped, atol=1e-6, rtol=1e-6)


def test_without_shapers_the_stage_changes_nothing():
    config, policy, rollout, table, weights = _setup()
    assert config.algorithm.advantage_stage().prepass() is None
    plain, _ = step_batch(policy, rollout, table, weights, config.algorithm)
    expected = alg.compute_advantages("grpo", table[:, 0], rollout.group_ids)
    torch.testing.assert_close(plain["sample_advantages"], expected)


def test_intrinsic_mastery_gives_all_correct_groups_a_signal():
    config, policy, rollout, table, weights = _setup(credit=[{"name": "intrinsic_mastery", "calibration": 0.0}])
    table = torch.tensor([[1.0]] * 4 + [[1.0], [0.0], [1.0], [0.0]] + [[0.0]] * 4)  # all correct, mixed, all wrong
    batch, _ = step_batch(policy, rollout, table, weights, config.algorithm)
    mask = rollout.action_mask
    assert torch.all(batch["sample_advantages"][:4] == 0)  # GRPO has nothing to say about the mastered prompt ...
    assert (batch["advantages"][:4] * mask[:4]).abs().sum() > 0  # ... Miner does
    assert torch.all(batch["advantages"][:4] >= 0)  # reinforce less confident correct answers, never penalise
    assert torch.all(batch["advantages"][8:] == 0)
