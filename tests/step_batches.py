"""The step batch of one rollout under an algorithm config, as the trainer builds it (for tests of the stages)."""

from __future__ import annotations

from genalign import algorithms as alg
from genalign.config.schema import AlgorithmConfig
from genalign.trainer.step_batch import build_step_batch


def step_batch(policy, rollout, reward_table, weights, cfg: AlgorithmConfig, *, progress: float = 0.0):
    """``(batch, stats)``: :func:`genalign.trainer.step_batch.build_step_batch` with the config's stage and plan."""
    batch, stats = build_step_batch(
        policy, rollout, reward_table, weights, cfg.advantage_stage(), cfg.loss_plan(), progress,
        micro_batch_size=cfg.micro_batch_size, on_policy=cfg.fully_on_policy, asynchronous=cfg.async_rollout.enabled,
    )  # fmt: skip
    return batch, stats


def rescores_old_logp(cfg: AlgorithmConfig, policy) -> bool:
    """Whether the trainer re-scores the old log-probs before the update under ``cfg``."""
    from genalign.trainer.step_batch import needs_rescored_old_logp

    plan: alg.LossPlan = cfg.loss_plan()
    return needs_rescored_old_logp(plan, policy, on_policy=cfg.fully_on_policy, asynchronous=cfg.async_rollout.enabled)
