"""Advantage estimators, one registry (:data:`ADVANTAGE_ESTIMATORS`): group baselines, reshaped distributions,
difficulty- and history-aware estimators, and the state objects of the estimators that use earlier steps."""

from genalign.algorithms.advantages import difficulty, fusion, group_baselines, shaped, value_anchored  # noqa: F401
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, compute_advantages
from genalign.algorithms.advantages.state import AdvantageState, make_advantage_state

__all__ = ["ADVANTAGE_ESTIMATORS", "AdvantageState", "compute_advantages", "make_advantage_state"]
