"""DenseGRPO [148] reward-aware calibration of the exploration noise: one SDE noise level per timestep, moved after
every training rollout so that the spread of the dense step rewards each timestep induces meets a target.

DenseGRPO measures the reward gain of every denoising step (``structure.step_rewards``, :mod:`.dense`) and observes
that one noise level for all timesteps explores too much at some and too little at others. The calibrator keeps the
levels ``[S]`` (state of the policy, checkpointed); the SDE sampling strategy samples the next rollouts with them and
stores them per sample, so the scorer re-scores each transition at the level it was drawn with.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from genalign.policies.flow.config import NoiseCalibrationConfig


def step_gain_spread(step_rewards: Tensor, group_ids: Tensor, trained: Tensor) -> Tensor:
    """``[S]`` spread of each step's reward gain: the mean over groups of the within-group population std of
    ``g_it = V_i,t+1 − V_i,t`` over the samples that train step ``t`` (NaN where no group has two such samples).

    Args:
        step_rewards: ``[N, S + 1]`` ODE-completion rewards of the states (NaN where not probed).
        group_ids: ``[N]``; trained: ``[N, S]`` bool.
    """
    gains = step_rewards[:, 1:].double() - step_rewards[:, :-1].double()  # [N, S]
    valid = trained & ~torch.isnan(gains)  # [N, S]
    _, index = group_ids.unique(return_inverse=True)  # [N]
    one_hot = torch.nn.functional.one_hot(index).double()  # [N, G]
    count = one_hot.T @ valid.double()  # [G, S]
    filled = torch.where(valid, gains, 0.0)
    mean = (one_hot.T @ filled) / count.clamp_min(1)  # [G, S]
    centred = torch.where(valid, gains - one_hot @ mean, 0.0)  # [N, S]
    std = ((one_hot.T @ centred**2) / count.clamp_min(1)).sqrt()  # [G, S]
    usable = count >= 2  # [G, S]
    groups = usable.double().sum(0)  # [S]
    spread = torch.where(usable, std, 0.0).sum(0) / groups.clamp_min(1)  # [S]
    return torch.where(groups > 0, spread, torch.nan).float()


class NoiseCalibrator:
    """Per-timestep noise levels ``[S]`` starting at ``noise_level`` and updated from measured step rewards.

    After a rollout, each timestep ``t`` with a measured spread ``s_t`` (:func:`step_gain_spread`) moves
    ``level_t ← clip(level_t · clip((target / s_t)^rate, 1/max_factor, max_factor), min_level, max_level)``; a step
    whose gains do not vary at all gets the largest increase. ``target`` is ``target_spread``, or (None) the mean of
    the measured spreads: the timesteps are then driven toward equal exploration, the scale being left to
    ``noise_level``.

    Reading chosen: the abstract says DenseGRPO "adaptively adjust[s] a timestep-specific stochasticity injection in
    the SDE sampler" from the dense rewards; genalign matches the within-group spread of each step's reward gain to a
    target with a damped multiplicative rule. ``rate = 0.5``, ``max_factor = 1.5`` and the level bounds are genalign's
    defaults. Under data parallelism each process calibrates from its own rollouts.
    """

    def __init__(self, config: NoiseCalibrationConfig, *, noise_level: float, num_steps: int) -> None:
        self.config = config
        self.levels = torch.full((num_steps,), float(noise_level))  # [S]
        self.last_spread = torch.full((num_steps,), float("nan"))  # [S]

    def update(self, step_rewards: Tensor, group_ids: Tensor, trained: Tensor) -> None:
        """Move the levels from one rollout's ``step_rewards`` ``[N, S + 1]``, ``group_ids`` ``[N]`` and trained
        steps ``trained`` ``[N, S]``."""
        cfg = self.config
        spread = step_gain_spread(step_rewards.cpu(), group_ids.cpu(), trained.cpu().bool())  # [S]
        if spread.shape != self.levels.shape:
            raise ValueError(
                f"step_rewards cover {spread.shape[0]} steps but the calibrator holds {self.levels.shape[0]} levels "
                "(policy.num_steps); noise calibration needs the training rollouts of this policy."
            )
        self.last_spread = spread
        measured = ~torch.isnan(spread)
        if not bool(measured.any()):
            return
        target = cfg.target_spread if cfg.target_spread is not None else float(spread[measured].mean())
        if target <= 0:  # no step varies: raise every measured level
            factor = torch.full_like(spread, cfg.max_factor)
        else:
            ratio = target / spread.clamp_min(1e-12)  # [S]
            factor = ratio.pow(cfg.rate).clamp(1 / cfg.max_factor, cfg.max_factor)
        updated = (self.levels * factor).clamp(cfg.min_level, cfg.max_level)
        self.levels = torch.where(measured, updated, self.levels)

    def metrics(self) -> dict[str, float]:
        """``noise_level/step_<t>`` and ``gain_spread/step_<t>`` for logging."""
        values = {f"noise_level/step_{t}": float(v) for t, v in enumerate(self.levels)}
        return values | {f"gain_spread/step_{t}": float(v) for t, v in enumerate(self.last_spread)}

    def state_dict(self) -> dict[str, Any]:
        return {"levels": self.levels.clone(), "last_spread": self.last_spread.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        levels = torch.as_tensor(state["levels"]).float()
        if levels.shape != self.levels.shape:
            raise ValueError(
                f"the saved noise calibration has {levels.shape[0]} levels; this policy has {self.levels.shape[0]} "
                "steps (policy.num_steps differs from the run that wrote it)."
            )
        self.levels = levels.clone()
        self.last_spread = torch.as_tensor(state["last_spread"]).float().clone()
