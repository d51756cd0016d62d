"""The shared group-relative optimisation backend: pure torch functions, one registry per family.

One iteration of the trainer reads (shapes: ``N`` samples, ``K`` reward functions, ``T`` actions)::

    combined, stats = REWARD_COMBINERS.get(combiner)(rewards_nk, group_ids, weights)          # [N]
    advantages = compute_advantages(estimator, combined, group_ids, clip=None, **estimator_hp)  # [N]
    weights = CREDIT_WEIGHTS.get(credit)(advantages, mask, entropy, logp=behaviour_logp, progress=p)  # [N, T]
    normalizer = sum(loss_normalizer(mb_mask, mode, advantages=mb_adv) for each micro-batch)    # all-reduce SUM
    for each micro-batch:
        loss, metrics = policy_loss(logp, old_logp, adv[:, None] * w, mask, ratio_level=..., clip=..., **clip_hp)
        loss = loss + beta * kl_penalty(logp, ref_logp, "k3")                                    # [n, T]
        aggregate(loss, mask, mode, normalizer, advantages=adv).backward()

Options that need more than log-probs take it explicitly: ``policy_loss(..., context=ObjectiveContext(entropy=...,
rollout_logp=..., segment_ids=..., group_reward_std=..., progress=...))``; per-action regularisers
(:data:`REGULARIZERS`) read a :class:`RegularizerInputs` (vocabulary options get their per-action value from the
policy's chunked log-prob pass through :func:`bind_vocab_term`); estimators that use earlier steps get their
statistics as float hyper-parameters from :func:`make_advantage_state` (``genalign/algorithms/state.py``).

Formulas: ``shared/reference/formulas.md``; table of every option: ``docs/algorithms.md``
(regenerate with ``python -m genalign.algorithms.docs``).
"""

from genalign.algorithms import advantage_catalogue as _advantage_catalogue  # noqa: F401  (registers estimators)
from genalign.algorithms import flow_credit as _flow_credit  # noqa: F401  (registers the 'chunk' ratio level)
from genalign.algorithms import ratio_levels as _ratio_levels  # noqa: F401  (registers more RATIO_LEVELS)
from genalign.algorithms import reward_weighting as _reward_weighting  # noqa: F401  (registers combiners)
from genalign.algorithms import trust_regions as _trust_regions  # noqa: F401  (registers more CLIP_FORMS)
from genalign.algorithms._validation import HyperparameterError, accepted_hyperparameters, check_hyperparameters
from genalign.algorithms.advantages import ADVANTAGE_ESTIMATORS, compute_advantages
from genalign.algorithms.aggregation import AGGREGATIONS, Aggregation, AggregationMode, aggregate, loss_normalizer
from genalign.algorithms.context import ObjectiveContext
from genalign.algorithms.credit import CREDIT_WEIGHTS
from genalign.algorithms.filters import (
    DynamicSamplingResult,
    dynamic_sampling,
    frac_reward_zero_std,
    group_reward_std,
    zero_std_mask,
)
from genalign.algorithms.objectives import (
    CLIP_FORMS,
    RATIO_LEVELS,
    ClipFormName,
    ClippedLogRatio,
    LevelOutput,
    RatioLevelName,
    check_objective_hyperparameters,
    policy_loss,
    split_objective_hyperparameters,
)
from genalign.algorithms.regularizer_catalogue import (
    REGULARIZERS,
    RegularizerInputs,
    bind_vocab_term,
    future_kl_advantages,
)
from genalign.algorithms.regularizers import (
    KL_ESTIMATORS,
    entropy_bonus,
    entropy_from_logits,
    kl_in_reward,
    kl_penalty,
    sequence_kl,
)
from genalign.algorithms.reward_combination import REWARD_COMBINERS, reward_statistics
from genalign.algorithms.state import AdvantageState, make_advantage_state
from genalign.algorithms.weighted_likelihood import LIKELIHOOD_OBJECTIVES, group_softmax

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "CLIP_FORMS",
    "CREDIT_WEIGHTS",
    "KL_ESTIMATORS",
    "LIKELIHOOD_OBJECTIVES",
    "RATIO_LEVELS",
    "REGULARIZERS",
    "REWARD_COMBINERS",
    "AdvantageState",
    "Aggregation",
    "AggregationMode",
    "ClipFormName",
    "ClippedLogRatio",
    "DynamicSamplingResult",
    "HyperparameterError",
    "LevelOutput",
    "ObjectiveContext",
    "RatioLevelName",
    "RegularizerInputs",
    "accepted_hyperparameters",
    "aggregate",
    "bind_vocab_term",
    "check_hyperparameters",
    "check_objective_hyperparameters",
    "compute_advantages",
    "dynamic_sampling",
    "entropy_bonus",
    "entropy_from_logits",
    "frac_reward_zero_std",
    "future_kl_advantages",
    "group_reward_std",
    "group_softmax",
    "kl_in_reward",
    "kl_penalty",
    "loss_normalizer",
    "make_advantage_state",
    "policy_loss",
    "reward_statistics",
    "sequence_kl",
    "split_objective_hyperparameters",
    "zero_std_mask",
]
