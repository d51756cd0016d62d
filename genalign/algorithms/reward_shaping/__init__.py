"""Reward shaping: the reward-shaper registry (:data:`REWARD_SHAPERS`, a stage between the reward combiner and the
advantage estimator), OTC-PO's tool-call efficiency [302] (:mod:`genalign.algorithms.reward_shaping.tool_calls`)
(DRA's diversity adjustment [167] is in the experimental tier,
:mod:`genalign.experimental.shaping.diversity`), and PAPO's outcome + process combiner [320] (registered in
:data:`~genalign.algorithms.reward_combiners.REWARD_COMBINERS`).

The action-level shapers of the same catalogue item, Miner's intrinsic reward on all-correct groups [28] and OREAL's
positive / negative reshaping [147], are credit rules (:mod:`genalign.algorithms.credit.shaping`), because they
produce per-action advantages.
"""

from genalign.algorithms.reward_shaping import tool_calls  # noqa: F401  (registers otc)
from genalign.algorithms.reward_shaping.base import (
    REWARD_SHAPERS,
    apply_reward_shaping,
    shaper_needs,
)

__all__ = ["REWARD_SHAPERS", "apply_reward_shaping", "shaper_needs"]
