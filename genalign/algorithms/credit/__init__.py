"""Per-action credit rules, one registry (:data:`CREDIT_RULES`): token weights, trees, denoising steps.

See :mod:`genalign.algorithms.credit.base` for the signature and the order rule.
"""

from genalign.algorithms.credit import (  # noqa: F401  (register the rules)
    entropy_dynamics,
    entropy_gates,
    probability_damping,
    shaping,
    steps,
    token_statistics,
    token_weights,
    trees,
    uncertainty,
    vision,
)
from genalign.algorithms.credit.base import CREDIT_RULES, apply_credit, check_rule_order, rule_needs
from genalign.algorithms.credit.steps import dense_step_advantages, noise_aware_step_weights

__all__ = [
    "CREDIT_RULES",
    "apply_credit",
    "check_rule_order",
    "dense_step_advantages",
    "noise_aware_step_weights",
    "rule_needs",
]
