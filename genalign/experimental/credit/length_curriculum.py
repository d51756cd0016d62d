"""The entropy-gated length curriculum of on-policy distillation ([93], experimental tier): the teacher's dense term
reaches only the first ``H`` actions of each sample, and ``H`` grows in stages while the student's entropy stays
healthy.

[93] finds that distilling over long horizons from the start collapses the student's entropy and inflates its length;
its curriculum starts short and lengthens the horizon, gated by the entropy. Here the horizon starts at
``length_start`` actions; every ``stage_steps`` steps it is multiplied by ``length_growth`` (capped at
``length_max``) if the student's mean token entropy over the step's actions (every process's) is at least
``entropy_floor``, and held otherwise. The state (``H``, steps in the stage) is kept with the run (the one state
protocol), so a resumed run continues the curriculum.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.distillation import TEACHER_NEEDS, opd
from genalign.experimental.credit.running_means import global_mean


def within_horizon(mask: Tensor, horizon: int) -> Tensor:
    """``[N, T]`` bool: the valid actions (``mask``) among the first ``horizon`` of each sample."""
    positions = torch.arange(mask.shape[1], device=mask.device)[None, :]
    return (mask > 0) & (positions < horizon)


def _check(
    *, length_start: int = 256, length_max: int | None = None, length_growth: float = 2.0, stage_steps: int = 10,
    entropy_floor: float = 0.3, coef: float = 1.0, reward_weight: float = 1.0, forward_weight: float = 0.0, **_,
) -> None:  # fmt: skip
    problems = [
        (isinstance(length_start, int) and length_start >= 1, f"length_start={length_start!r} must be an int >= 1"),
        (length_max is None or (isinstance(length_max, int) and length_max >= length_start),
         f"length_max={length_max!r} must be an int >= length_start, or null"),
        (length_growth >= 1, f"length_growth={length_growth!r} must be >= 1"),
        (isinstance(stage_steps, int) and stage_steps >= 1, f"stage_steps={stage_steps!r} must be an int >= 1"),
        (math.isfinite(entropy_floor) and entropy_floor >= 0, f"entropy_floor={entropy_floor!r} must be >= 0"),
        (coef >= 0 and reward_weight >= 0, f"coef={coef!r} and reward_weight={reward_weight!r} must be >= 0"),
        (0 <= forward_weight <= 1, f"forward_weight={forward_weight!r} must be in [0, 1]"),
    ]  # fmt: skip
    for ok, message in problems:
        if not ok:
            raise ValueError(f"length_curriculum_opd: {message}")


class LengthCurriculumOPD:
    """:func:`length_curriculum_opd` bound once, with its horizon and stage counter as state (module docstring)."""

    def __init__(self, **hp: Any) -> None:
        self.options = {**CREDIT_RULES.hyperparameters("length_curriculum_opd"), **hp}
        _check(**self.options)
        self.horizon = int(self.options["length_start"])
        self.steps_in_stage = 0

    def __call__(self, advantages: Tensor, batch: StepBatch) -> Tensor:
        o = self.options
        result = length_curriculum_opd(advantages, batch, **{**o, "length_start": self.horizon})
        entropy = batch.require("entropy", "credit rule 'length_curriculum_opd'").detach().float().cpu()  # [N, T]
        valid = batch.mask.cpu() > 0
        mean = float(global_mean(entropy[valid].reshape(-1, 1))[0]) if valid.any() else 0.0
        self.steps_in_stage += 1
        if self.steps_in_stage >= o["stage_steps"]:
            self.steps_in_stage = 0
            if mean >= o["entropy_floor"]:  # healthy: lengthen the horizon; collapsing: hold it
                grown = math.ceil(self.horizon * o["length_growth"])
                self.horizon = grown if o["length_max"] is None else min(grown, o["length_max"])
        return result

    def state_dict(self) -> dict[str, Any]:
        return {"horizon": self.horizon, "steps_in_stage": self.steps_in_stage}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.horizon, self.steps_in_stage = int(state["horizon"]), int(state["steps_in_stage"])


@CREDIT_RULES.register(
    "length_curriculum_opd",
    bind=LengthCurriculumOPD,
    needs=(*TEACHER_NEEDS, "progress", "rewards", "entropy"),
    formula="A_it = w_r·A_it + [t < H]·c·[(1 − α)·δ_it + α·F_it] (opd's term); every K steps H ← min(H_max, ⌈g·H⌉) "
    "if mean_t H^S_t ≥ h_min, else H held",
    source="[93] (entropy-gated length curriculum of OPD; its stage length, growth and gate: genalign's reading)",
    summary="On-policy distillation over a horizon that starts short and lengthens in stages while the student's "
    "entropy stays above a floor.",
)
def length_curriculum_opd(
    advantages: Tensor,
    batch: StepBatch,
    *,
    length_start: int = 256,
    length_max: int | None = None,
    length_growth: float = 2.0,
    stage_steps: int = 10,
    entropy_floor: float = 0.3,
    coef: float = 1.0,
    reward_weight: float = 1.0,
    forward_weight: float = 0.0,
) -> Tensor:
    """OPD's dense term (:func:`~genalign.experimental.credit.distillation.opd`, reverse KL mixed with
    ``forward_weight`` of the importance-weighted forward KL, [93]'s KL mixing) on the first ``H`` actions of each
    sample only; the group-relative term ``w_r·A`` applies everywhere. Called directly, ``H = length_start``; the
    bound rule (:class:`LengthCurriculumOPD`) grows ``H`` by ``length_growth`` every ``stage_steps`` steps while the
    student's mean token entropy is at least ``entropy_floor`` (module docstring).

    Reading chosen: the abstract names an entropy-gated length curriculum without its schedule; genalign's restricts
    the distillation term to a horizon (the samples keep the configured generation length), advances it in fixed
    stages by a factor, and gates each advance on the batch's mean token entropy (collapse: the horizon is held).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp``, ``teacher_scored``, ``behaviour_logp``, ``entropy``, ``mask``,
            ``progress``, ``rewards``.
        length_start: ``H`` (actions); length_max, length_growth, stage_steps, entropy_floor: the curriculum.
        coef, reward_weight, forward_weight: as in ``opd``.
    Returns:
        ``[N, T]`` advantages.
    """
    _check(length_start=length_start, length_max=length_max, length_growth=length_growth, stage_steps=stage_steps,
           entropy_floor=entropy_floor, coef=coef, reward_weight=reward_weight, forward_weight=forward_weight)  # fmt: skip
    base = reward_weight * advantages
    distilled = opd(advantages, batch, coef=coef, reward_weight=reward_weight, forward_weight=forward_weight)
    inside = within_horizon(batch.mask.to(advantages.device), length_start)  # [N, T]
    return base + torch.where(inside, distilled - base, 0.0)
