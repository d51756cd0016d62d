"""SPO's group-free advantage [324]: each sample's reward minus its prompt's tracked value, normalised over the batch
(a reward shaper of :data:`REWARD_SHAPERS`, read with the sample source ``spo``, whose persistent Beta tracker gives
each sample its prompt's value before the visit; pair it with the ``reinforce`` estimator, which adds no baseline).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.algorithms.signals import declare_signal

PROMPT_VALUE = "prompt_value"
declare_signal(PROMPT_VALUE, ("N",), "source",
               "The sample's prompt's tracked success probability v̂ before this visit (0.5 for a prompt never seen).",
               source="[324] SPO (sample source spo)")  # fmt: skip


@REWARD_SHAPERS.register(
    "tracked_baseline",
    needs=(PROMPT_VALUE,),
    group_free=True,
    formula="r̃_i = (r_i − v̂_x(i)) / (std_batch(r − v̂) + eps), v̂ the prompt's tracked value before the visit "
    "(sample source spo); normalise: false gives r_i − v̂_x(i); pair with advantage: reinforce",
    source="[324] SPO (single-stream policy optimization: the tracker's value as the baseline, batch-normalised)",
    summary="A group-free advantage: each sample's reward minus its prompt's persistent tracked value, normalised over "
    "the whole batch, so one sample per prompt suffices (algorithm.group_size: 1).",
)
def tracked_baseline(
    rewards: Tensor, batch: StepBatch, *, normalize: bool = True, eps: float = 1e-6
) -> tuple[Tensor, dict[str, float]]:
    """SPO [324]: group-free policy optimisation with a persistent value tracker as the baseline, ``A = r − v̂``,
    normalised across the batch rather than within a group, one sample per prompt.

    Reading chosen: the baseline is the ``spo`` sample source's Beta tracker value of the prompt before this visit
    (so a sample's baseline never includes its own reward); the normalisation divides by the batch's standard
    deviation of ``r − v̂`` without re-centring (the tracker is the centre). A missing (NaN) reward stays missing.

    Args:
        rewards: ``[N]`` combined rewards (rewards in ``[0, 1]`` match the tracker's success scale).
        batch: reads ``prompt_value`` ``[N]``.
        normalize: divide by the batch's std of ``r − v̂``.
        eps: added to that std.
    Returns:
        ``[N]`` shaped rewards and the batch's mean tracked value and spread of ``r − v̂`` (for logging).
    """
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    if not eps >= 0:
        raise ValueError(f"tracked_baseline: eps={eps!r} must be >= 0.")
    value = batch.require(PROMPT_VALUE, "reward shaper 'tracked_baseline'").to(rewards.device, rewards.dtype)  # [N]
    centred = rewards - value  # [N]
    valid = ~torch.isnan(centred)
    spread = centred[valid].std(unbiased=False) if int(valid.sum()) > 1 else centred.new_tensor(0.0)
    stats = {"reward_shaping/tracked_value_mean": float(value.mean()), "reward_shaping/tracked_spread": float(spread)}
    return (centred / (spread + eps) if normalize else centred), stats
