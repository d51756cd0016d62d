"""Per-action credit rules, one registry (:data:`CREDIT_RULES`): token weights, trees, denoising steps.

See :mod:`genalign.algorithms.credit.base` for the signature and the order rule.
"""

from genalign.algorithms.credit import steps, token_weights, trees  # noqa: F401  (register the rules)
from genalign.algorithms.credit.base import CREDIT_RULES, CreditInputs, apply_credit, check_rule_order, rule_needs
from genalign.algorithms.credit.steps import dense_step_advantages, noise_aware_step_weights

__all__ = [
    "CREDIT_RULES",
    "CreditInputs",
    "apply_credit",
    "check_rule_order",
    "dense_step_advantages",
    "noise_aware_step_weights",
    "rule_needs",
]
