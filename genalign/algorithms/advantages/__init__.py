"""Advantage estimators, one registry (:data:`ADVANTAGE_ESTIMATORS`): group baselines, reshaped distributions,
difficulty- and history-aware estimators (the latter stateful: :mod:`genalign.algorithms.advantages.state`)."""

from genalign.algorithms.advantages import difficulty, group_baselines, no_baseline, shaped  # noqa: F401
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, compute_advantages

__all__ = ["ADVANTAGE_ESTIMATORS", "compute_advantages"]
