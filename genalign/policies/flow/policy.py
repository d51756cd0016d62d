"""The flow-matching policy (SD3 / SD3.5, FLUX.1, Wan2.1), composed of a model, a sampling strategy, a scorer and
parameter averages.

* model (:class:`~genalign.policies.flow.model.FlowModel`): pipeline, trainable weights (LoRA by default), prompt cache,
  generators, save/load in diffusers' formats;
* sampling strategy (:mod:`genalign.policies.flow.sampling`): SDE trajectories, trajectory trees, or likelihood-free
  samples with flow-matching points; evaluation always samples deterministic ODE trajectories (with the EMA weights when
  ``ema_decay > 0``);
* scorer (:mod:`genalign.policies.flow.scoring`): SDE step log-probs, or the flow-matching ELBO proxy and velocities;
* parameter averages (:class:`~genalign.policies.flow.components.ParameterAverage`): the EMA of the weights for
  evaluation and DiffusionNFT's "old" model, both updated after every optimizer step.

The action axis ``T`` is the denoising steps of a training rollout (SDE, trees), or the ``K`` flow-matching points
(likelihood-free). Classifier-free guidance is recomputed in training with the unconditional branch detached (or
guidance 1 / FLUX's embedded guidance); latents and log-probabilities stay float32 for any weight dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from genalign.policies.base import Policy, Rollout, RolloutRequest, ScoreOutput, ScoreRequest
from genalign.policies.flow.components import ParameterAverage
from genalign.policies.flow.config import FlowPolicyConfig
from genalign.policies.flow.dense import step_rewards
from genalign.policies.flow.model import FlowModel
from genalign.policies.flow.noise_calibration import NoiseCalibrator
from genalign.policies.flow.noise_search import NoiseSearch
from genalign.policies.flow.sampling import (
    FlowMatchingSampling,
    SDESampling,
    TreeSampling,
    assemble_rollout,
)
from genalign.policies.flow.scoring import FlowMatchingScorer, SDEStepScorer


class FlowPolicy(Policy):
    """The :class:`~genalign.policies.base.Policy` of flow-matching models. Build it with :func:`build_policy`."""

    family = "flow"

    def __init__(self, config: FlowPolicyConfig, device: str | torch.device = "cpu") -> None:
        config.validate()
        self.config = config
        self.capabilities = config.capabilities()
        self.model = FlowModel(config, torch.device(device))
        self.iteration = 0
        transformer = self.model.transformer
        self.ema = ParameterAverage(transformer, config.ema_decay) if config.ema_decay > 0 else None
        method = config.likelihood_free.method
        self.old = ParameterAverage(transformer, config.likelihood_free.old_decay) if method == "nft" else None
        if config.anchor_every > 0:  # decay 0: update() takes a snapshot
            self.model.anchor = ParameterAverage(transformer, 0.0)
        self.evaluation = SDESampling(self.model, training=False)
        self.calibrator: NoiseCalibrator | None = None
        self.scorer: SDEStepScorer | FlowMatchingScorer
        self.sampling: SDESampling | TreeSampling | FlowMatchingSampling
        if method != "none":
            self.scorer = FlowMatchingScorer(self.model, self.old)
            self.sampling = FlowMatchingSampling(self.model, self.scorer)
        else:
            self.scorer = SDEStepScorer(self.model)
            self.sampling = TreeSampling(self.model) if config.tree.enabled else self._sde_sampling()

    def _sde_sampling(self) -> SDESampling:
        """Training SDE rollouts, with DenseGRPO's noise calibration and Smart-GRPO's noise search when enabled."""
        config = self.config
        self.calibrator = None
        if config.noise_calibration.enabled:
            self.calibrator = NoiseCalibrator(
                config.noise_calibration, noise_level=config.noise_level, num_steps=config.num_steps
            )
        search = NoiseSearch(self.model, config.noise_search) if config.noise_search.enabled else None
        return SDESampling(self.model, training=True, calibrator=self.calibrator, noise_search=search)

    # ------------------------------------------------------------------------------------------------ rollout
    def output_info(self) -> dict[str, Any]:
        """What describes the outputs (:attr:`Rollout.OUTPUT_INFO_KEYS`): ``fps`` of videos, nothing for images."""
        return {"fps": self.config.fps} if self.config.num_frames > 1 else {}

    @torch.no_grad()
    def rollout(
        self,
        rows: list[dict[str, Any]],
        group_size: int,
        *,
        mode: Literal["train", "eval"] = "train",
        request: RolloutRequest = RolloutRequest(),
    ) -> Rollout:
        """Sample ``group_size`` outputs per row. ``eval``: ODE sampling with ``eval_num_steps`` (under
        :meth:`evaluation_weights`, the EMA weights)."""
        _check_rows(rows, group_size)
        described = self.output_info()
        if mode == "eval":
            sampled = self.evaluation.sample(rows, group_size, self.iteration)
            return assemble_rollout(rows, group_size, sampled, described)
        probe = {"reward_probe": request.reward_probe} if self.capabilities.rollout_calls_rewards else {}
        sampled = self.sampling.sample(rows, group_size, self.iteration, **probe)
        rollout = assemble_rollout(rows, group_size, sampled, described)
        if "step_rewards" in request.structure:
            if request.reward_probe is None:
                raise ValueError("RolloutRequest asks for step_rewards without a reward_probe to measure them.")
            rewards = step_rewards(self.model, rollout, request.reward_probe)  # [N, T + 1]
            rollout.add_structure(step_rewards=rewards)
            if self.calibrator is not None:  # DenseGRPO: the next rollouts explore at the calibrated levels
                self.calibrator.update(rewards, rollout.group_ids, rollout.action_mask.bool())
        elif self.calibrator is not None:
            raise ValueError(
                "policy.noise_calibration needs the rollout's step_rewards; add a credit rule that reads them "
                "(algorithm.credit: [dense_step_gains] or [vgpo_values])."
            )
        return rollout

    def score(self, rollout: Rollout, request: ScoreRequest = ScoreRequest()) -> ScoreOutput:
        """Re-score a training rollout with the configured scorer (:mod:`genalign.policies.flow.scoring`)."""
        return self.scorer.score(rollout, request)

    # ------------------------------------------------------------------------------------------------ weights
    def trainable_parameters(self) -> list[nn.Parameter]:
        return self.model.trainable_parameters()

    def modules_to_train(self) -> list[nn.Module]:
        return [self.model.transformer]

    def prepare_sharding(self, wrap: Callable[[nn.Module], None]) -> None:
        """The transformer; the parameter averages restart from its (now sharded) parameters."""
        wrap(self.model.transformer)
        for average in (self.ema, self.old, self.model.anchor):
            if average is not None:
                average.reset()

    def evaluation_weights(self) -> AbstractContextManager:
        """The EMA of the weights when ``ema_decay > 0``."""
        return self.ema.applied() if self.ema is not None else nullcontext()

    def save(self, directory: Path) -> None:
        self.model.save(directory)

    def load(self, directory: Path) -> None:
        self.model.load(directory)

    # ---------------------------------------------------------------------------------------------- lifecycle
    def on_step(self, step: int) -> None:
        """The training iteration drives sliding windows (MixGRPO) and sliding tree splits (BranchGRPO-Mix); the
        moving anchor (SAGE-GRPO [76]) is moved to the current weights before steps ``1 + k·anchor_every``."""
        self.iteration = step
        anchor, every = self.model.anchor, self.config.anchor_every
        if anchor is not None and step > 1 and (step - 1) % every == 0:
            anchor.update()

    def after_optimizer_step(self) -> None:
        """Update the EMA of the weights and DiffusionNFT's old model."""
        for average in (self.ema, self.old):
            if average is not None:
                average.update()

    def random_generators(self) -> dict[str, torch.Generator]:
        return self.model.random_generators()

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"iteration": self.iteration, "model": self.model.state_dict()}
        state |= {"ema": self.ema.state_dict()} if self.ema is not None else {}
        state |= {"old": self.old.state_dict()} if self.old is not None else {}
        state |= {"anchor": self.model.anchor.state_dict()} if self.model.anchor is not None else {}
        state |= {"noise_calibration": self.calibrator.state_dict()} if self.calibrator is not None else {}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.model.load_state_dict(state["model"])
        for name, average in (("ema", self.ema), ("old", self.old), ("anchor", self.model.anchor)):
            if (average is None) != (name not in state):
                raise ValueError(
                    f"the checkpoint {'has' if name in state else 'has no'} {name!r} state but this policy "
                    f"{'keeps none' if average is None else 'keeps one'}: policy.ema_decay, policy.anchor_every or "
                    "policy.likelihood_free.method differs from the run that wrote it."
                )
            if average is not None:
                average.load_state_dict(state[name])
        if (self.calibrator is None) != ("noise_calibration" not in state):
            raise ValueError(
                "the checkpoint's noise calibration state does not match policy.noise_calibration.enabled of this "
                "config; resume with the setting of the run that wrote it."
            )
        if self.calibrator is not None:
            self.calibrator.load_state_dict(state["noise_calibration"])


def _check_rows(rows: list[dict[str, Any]], group_size: int) -> None:
    """Every row needs a string ``prompt``; ``group_size >= 1``."""
    if group_size < 1:
        raise ValueError(f"group_size={group_size} must be >= 1.")
    for index, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str):
            raise ValueError(f"row {index} has no string 'prompt' field (keys: {sorted(row)}); flow policies need one.")


def build_policy(config: FlowPolicyConfig, device: str | torch.device = "cpu") -> FlowPolicy:
    """Build the flow-matching policy of ``config`` on ``device``."""
    return FlowPolicy(config, device)
