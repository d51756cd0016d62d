"""ICPO's annealed expert bonus [44]: a reward shaper for the guided off-policy samples that the sample source
``in_context_expert`` (:mod:`genalign.experimental.sampling.in_context`) adds to the groups."""

from __future__ import annotations

from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.algorithms.signals import declare_signal

EXPERT_GUIDED = "expert_guided"
declare_signal(EXPERT_GUIDED, ("N",), "source",
               "The sample was generated with in-context expert demonstrations and is trained as an answer to the "
               "plain prompt (ICPO's implicit expert forcing).", source="[44] ICPO", dtype="bool")  # fmt: skip


def annealed_bonus(progress: float, *, bonus: float, anneal_end: float) -> float:
    """``bonus · max(0, 1 − progress / anneal_end)``: the full bonus at the start, none from ``anneal_end`` on."""
    return bonus * max(0.0, 1.0 - progress / anneal_end)


@REWARD_SHAPERS.register(
    "expert_bonus",
    needs=(EXPERT_GUIDED, "progress"),
    formula="r̃_i = r_i + β(p)·1[i expert-guided], β(p) = bonus·max(0, 1 − p/anneal_end), p = step/max_steps",
    source="[44] ICPO (annealed expert-bonus reward shaping; with the sample source in_context_expert)",
    summary="Expert-guided samples that passed the rejection get an extra reward that fades linearly over training, "
    "so early learning follows the expert and later learning the policy's own successes.",
)
def expert_bonus(
    rewards: Tensor, batch: StepBatch, *, bonus: float = 0.5, anneal_end: float = 1.0
) -> tuple[Tensor, dict]:
    """ICPO's annealed expert-bonus reward shaping [44]: ``r̃ = r + β(p)`` for the samples that the sample source
    ``in_context_expert`` generated under in-context demonstrations (``expert_guided``), ``r`` otherwise.

    Reading chosen: the abstract names the bonus and its annealing, not their form; genalign adds a constant bonus to
    every accepted guided sample (they passed the expert-region rejection, so they are correct) and decays it
    linearly with training progress to 0 at ``anneal_end``.

    Args:
        rewards: ``[N]`` combined rewards (NaN stays NaN).
        batch: reads ``expert_guided`` ``[N]`` and ``progress``.
        bonus: the bonus at the start of training (>= 0).
        anneal_end: the training progress in (0, 1] at which the bonus reaches 0.
    Returns:
        ``(r̃ [N], {"reward_shaping/expert_bonus": β(p)})``.
    """
    if not (bonus >= 0.0 and 0.0 < anneal_end <= 1.0):
        raise ValueError(f"expert_bonus: need bonus >= 0 and anneal_end in (0, 1], got bonus = {bonus!r}, "
                         f"anneal_end = {anneal_end!r}")  # fmt: skip
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    guided = batch.require(EXPERT_GUIDED, "reward shaper 'expert_bonus'").to(rewards.device).bool()  # [N]
    weight = annealed_bonus(float(batch.require("progress", "reward shaper 'expert_bonus'")), bonus=bonus,
                            anneal_end=anneal_end)  # fmt: skip
    return rewards + weight * guided.to(rewards.dtype), {"reward_shaping/expert_bonus": weight}
