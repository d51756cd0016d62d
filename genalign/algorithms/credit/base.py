"""Per-action credit: the registry :data:`CREDIT_RULES` and :func:`apply_credit`.

A credit rule maps advantages to per-action advantages with one fixed signature::

    rule(advantages [N, T], batch: StepBatch, **hp) -> advantages [N, T]

``advantages`` are what the previous rule of the configured list produced (the sample advantages broadcast to every
action for the first rule); ``batch`` is this process's step batch (:class:`~genalign.algorithms.batch.StepBatch`):
``sample_advantages`` ``[N]``, ``mask``, ``group_ids``, ``behaviour_logp``, ``rewards`` ``[N, K]``, ``progress``,
the rollout's structure (prefix tree, step noise, segments, step rewards, ...) and the features of a scoring pass
before the update (entropy, per-action KL, hidden states, ...). A rule names the signals it reads in its registry meta
``needs`` (:mod:`genalign.algorithms.signals`), so a config is checked against the policy family at load time and the
trainer computes exactly those. Rules with meta ``replaces=True`` derive their result from the sample advantages and
the structure alone (tree and dense step credit); they must come first in a list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from torch import Tensor

from genalign import option_rules
from genalign.algorithms._validation import expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.registry import Option, Registry

CreditRule = Callable[..., Tensor]

#: name -> ``rule(advantages [N, T], batch: StepBatch, **hp) -> [N, T]``
CREDIT_RULES: Registry[CreditRule] = Registry("credit rule", catalogue="genalign.experimental.credit")


def apply_credit(
    rules: Sequence[Option] | Sequence[tuple[str, Mapping[str, Any]]] | Sequence[Callable[..., Tensor]],
    sample_advantages: Tensor,
    batch: StepBatch,
) -> Tensor:
    """Apply ``rules`` in order to ``sample_advantages`` ``[N]``: options (or ``(name, hyper-parameters)`` pairs), or
    rules with their hyper-parameters bound (:func:`genalign.algorithms.bind_option`). ``batch`` is what the rules read (it
    gets ``sample_advantages`` when it lacks them). With no rule the sample advantages are returned unchanged, else
    ``[N, T]`` per-action advantages."""
    if not rules:
        return sample_advantages
    if "sample_advantages" not in batch:
        batch = batch.with_values(sample_advantages=sample_advantages)
    advantages = expand_advantages(sample_advantages, tuple(batch.mask.shape))  # [N, T]
    for rule in rules:
        if isinstance(rule, tuple):
            rule = Option(*rule)
        if isinstance(rule, Option):
            rule = partial(CREDIT_RULES.get(rule.name), **rule.args)
        advantages = rule(advantages, batch)  # [N, T]
    return advantages


def rule_needs(names: Sequence[str]) -> frozenset[str]:
    """The union of the ``needs`` meta of credit rules ``names``."""
    return frozenset(need for name in names for need in CREDIT_RULES.meta(name).get("needs", ()))


def check_rule_order(names: Sequence[str]) -> None:
    """A rule with ``replaces=True`` ignores the advantages it receives, so it must come first
    (:func:`genalign.option_rules.check_rule_order`)."""
    option_rules.check_rule_order(names, CREDIT_RULES)
