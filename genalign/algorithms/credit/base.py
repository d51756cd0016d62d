"""Per-action credit: the registry :data:`CREDIT_RULES`, its inputs, and :func:`apply_credit`.

A credit rule maps advantages to per-action advantages with one fixed signature::

    rule(advantages [N, T], inputs: CreditInputs, **hp) -> advantages [N, T]

``advantages`` are what the previous rule of the configured list produced (the sample advantages broadcast to every
action for the first rule); :class:`CreditInputs` holds everything else a rule may read: the sample advantages
``[N]``, the action mask, groups, behaviour log-probs, token features of a scoring pass before the update (entropy,
per-action KL) and the rollout's declared structure (prefix tree, step noise, segments, step rewards). A rule names
what it reads in its registry meta ``needs`` (feature names of :class:`~genalign.algorithms.scores.ScoreRequest`,
field names of :class:`~genalign.algorithms.structure.RolloutStructure`), so a config is checked against the policy
family at load time. Rules with meta ``replaces=True`` derive their result from the sample advantages and the
structure alone (tree and dense step credit); they must come first in a list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from genalign.algorithms._validation import check_group_ids, check_shape, expand_advantages
from genalign.algorithms.structure import RolloutStructure
from genalign.registry import Registry

CreditRule = Callable[..., Tensor]

#: name -> ``rule(advantages [N, T], inputs: CreditInputs, **hp) -> [N, T]``
CREDIT_RULES: Registry[CreditRule] = Registry("credit rule")


@dataclass(frozen=True)
class CreditInputs:
    """What a credit rule may read besides the incoming advantages; tensors are constants (detached).

    Attributes:
        sample_advantages: ``[N]`` group-relative advantage of each sample.
        mask: ``[N, T]`` 1 where an action is trained.
        group_ids: ``[N]`` group of each sample.
        behaviour_logp: ``[N, T]`` log-probs of the sampled actions recorded by the sampler (``Rollout.old_logp``).
        entropy: ``[N, T]`` per-action entropy from a scoring pass before the update (rules needing ``entropy``).
        kl: ``[N, T]`` per-action ``k1`` KL to the reference from that pass (rules needing ``kl``).
        structure: the rollout's declared structure.
        progress: ``step / max_steps`` in ``[0, 1]``.
        rewards: ``[N, K]`` the raw rewards of each reward function (NaN = not applicable), in config order.
        logit_stats: ``[N, T, 2]`` raw-logit statistics from the scoring pass before the update (rules needing
            ``logit_stats``; channels in :data:`genalign.algorithms.scores.SELF_CERTAINTY` / ``RAW_LOGIT``).
        hidden: ``[N, T, H]`` the last hidden state predicting each action, from that pass (rules needing ``hidden``).
        logp_without_image: ``[N, T]`` log-probs of the actions with the images blanked out, from that pass (rules
            needing ``logp_without_image``; families with images).
        visual_similarity: ``[N, T]`` similarity of each action's hidden states to the image tokens', from that pass
            (rules needing ``visual_similarity``; families with images).
        logp_frames_shuffled: ``[N, T]`` log-probs of the actions with each sample's frames reordered, from that pass
            (rules needing ``logp_frames_shuffled``; families with images).
    """

    sample_advantages: Tensor
    mask: Tensor
    group_ids: Tensor
    behaviour_logp: Tensor | None = None
    entropy: Tensor | None = None
    kl: Tensor | None = None
    structure: RolloutStructure = field(default_factory=RolloutStructure)
    progress: float | None = None
    rewards: Tensor | None = None
    logit_stats: Tensor | None = None
    hidden: Tensor | None = None
    logp_without_image: Tensor | None = None
    visual_similarity: Tensor | None = None
    logp_frames_shuffled: Tensor | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mask, Tensor) or self.mask.ndim != 2:
            raise ValueError("CreditInputs.mask must be a tensor of shape [N, T]")
        n, t = self.mask.shape
        check_shape(self.sample_advantages, "sample_advantages", (n,), "[N]")
        check_group_ids(self.group_ids, n)
        for name in (
            "behaviour_logp",
            "entropy",
            "kl",
            "logp_without_image",
            "visual_similarity",
            "logp_frames_shuffled",
        ):
            value = getattr(self, name)
            if value is not None:
                check_shape(value, name, (n, t), "[N, T]")
        if self.rewards is not None and (self.rewards.ndim != 2 or self.rewards.shape[0] != n):
            raise ValueError(f"CreditInputs.rewards must have shape [N, K] with N={n}, got {tuple(self.rewards.shape)}")
        if self.logit_stats is not None and tuple(self.logit_stats.shape) != (n, t, 2):
            raise ValueError(f"CreditInputs.logit_stats must have shape [N, T, 2], got {tuple(self.logit_stats.shape)}")
        if self.hidden is not None and (self.hidden.ndim != 3 or tuple(self.hidden.shape[:2]) != (n, t)):
            raise ValueError(f"CreditInputs.hidden must have shape [N, T, H], got {tuple(self.hidden.shape)}")

    def require(self, name: str, rule: str) -> Any:
        """The field ``name`` (``entropy``, ``kl``, ``behaviour_logp``, ``progress``, ``rewards``, ``logit_stats``) or a
        ``ValueError`` that says how to provide it."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(
                f"credit rule {rule!r} needs CreditInputs.{name}, which is None; the trainer provides it when the "
                f"rule's registry meta lists it in 'needs' (pass CreditInputs({name}=...) when calling it yourself)."
            )
        return value


def apply_credit(
    rules: Sequence[tuple[str, Mapping[str, Any]]], sample_advantages: Tensor, inputs: CreditInputs
) -> Tensor:
    """Apply ``rules`` (``(name, hyper-parameters)`` pairs) in order; with no rule, the sample advantages ``[N]``
    are returned unchanged, else ``[N, T]`` per-action advantages."""
    if not rules:
        return sample_advantages
    advantages = expand_advantages(sample_advantages, tuple(inputs.mask.shape))  # [N, T]
    for name, hp in rules:
        advantages = CREDIT_RULES.get(name)(advantages, inputs, **hp)  # [N, T]
    return advantages


def rule_needs(names: Sequence[str]) -> frozenset[str]:
    """The union of the ``needs`` meta of credit rules ``names``."""
    return frozenset(need for name in names for need in CREDIT_RULES.meta(name).get("needs", ()))


def check_rule_order(names: Sequence[str]) -> None:
    """A rule with ``replaces=True`` ignores the advantages it receives, so it must come first."""
    for position, name in enumerate(names):
        if position > 0 and CREDIT_RULES.meta(name).get("replaces", False):
            raise ValueError(
                f"credit rule {name!r} computes per-action advantages from the sample advantages and the rollout "
                f"structure, discarding what {names[position - 1]!r} produced; put it first in the credit list."
            )
