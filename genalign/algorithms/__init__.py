"""The shared group-relative optimisation backend: pure torch functions, one registry per family.

One iteration of the trainer reads (shapes: ``N`` samples, ``K`` reward functions, ``T`` actions)::

    combined, stats = REWARD_COMBINERS.get(combiner)(rewards_nk, group_ids, weights)          # [N]
    combined, more = apply_reward_shaping([(shaper, shaper_hp), ...], combined, ShapingInputs(...))  # [N]
    advantages = compute_advantages(estimator, combined, group_ids, clip=None, **estimator_hp)  # [N]
    per_action = apply_credit([(rule, rule_hp), ...], advantages, CreditInputs(...))           # [N] or [N, T]
    normalizer = sum(loss_normalizer(mb_mask, mode, advantages=mb_adv) for each micro-batch)    # all-reduce SUM
    for each micro-batch:
        score = policy.score(batch, ScoreRequest(...))                                           # ScoreOutput
        loss, metrics = OBJECTIVES.get(name)(score, per_action[mb], context, **objective_hp)     # [n, T]
        loss = loss + beta * score.kl                                                            # [n, T]
        aggregate(loss, mask, mode, normalizer, advantages=adv).backward()

Every registry has one signature (its module docstring). Objectives get the batch through an
:class:`ObjectiveContext` (old and behaviour log-probs, mask, groups, entropy, sentence ids, group reward std,
progress); credit rules through :class:`CreditInputs` (sample advantages, token features of a scoring pass before the
update, and the rollout's declared :class:`RolloutStructure`); per-action regularisers (:data:`REGULARIZERS`) read a
:class:`RegularizerInputs` (vocabulary options get their per-action value from the policy's chunked log-prob pass
through :func:`bind_vocab_term`); estimators that use earlier steps get their statistics as float hyper-parameters
from :func:`make_advantage_state` (``genalign/algorithms/advantages/state.py``), reward combiners from
:func:`make_combiner_state` (Self-Paced GRPO's running competence). Registry meta ``needs`` names the score features
(:data:`SCORE_FEATURES`) and structure fields (:data:`STRUCTURE_FIELDS`) an option reads.

Formulas: ``shared/reference/formulas.md``; table of every option: ``docs/algorithms.md``
(regenerate with ``python -m genalign.algorithms.docs``).
"""

from genalign.algorithms import reward_combiners_paced, reward_combiners_views  # noqa: F401  (register)
from genalign.algorithms._validation import HyperparameterError, accepted_hyperparameters, check_hyperparameters
from genalign.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageState,
    compute_advantages,
    make_advantage_state,
)
from genalign.algorithms.aggregation import AGGREGATIONS, Aggregation, aggregate, loss_normalizer
from genalign.algorithms.clip_forms import CLIP_FORMS, ClippedLogRatio
from genalign.algorithms.context import ObjectiveContext
from genalign.algorithms.credit import CREDIT_RULES, CreditInputs, apply_credit, check_rule_order, rule_needs
from genalign.algorithms.group_filters import frac_reward_zero_std, group_reward_std, informative_groups, zero_std_mask
from genalign.algorithms.kl import KL_ESTIMATORS, kl_in_reward, kl_penalty, sequence_kl
from genalign.algorithms.objectives import OBJECTIVES, objective_hyperparameters
from genalign.algorithms.policy_loss import (
    check_objective_hyperparameters,
    policy_loss,
    split_objective_hyperparameters,
)
from genalign.algorithms.ratio_levels import RATIO_LEVELS, LevelOutput
from genalign.algorithms.regularizers import (
    REGULARIZERS,
    RegularizerInputs,
    bind_vocab_term,
    entropy_bonus,
    entropy_from_logits,
)
from genalign.algorithms.reward_combiners import REWARD_COMBINERS, reward_statistics
from genalign.algorithms.reward_combiners_paced import CompetenceState, make_combiner_state
from genalign.algorithms.reward_shaping import REWARD_SHAPERS, ShapingInputs, apply_reward_shaping, shaper_needs
from genalign.algorithms.scores import SCORE_FEATURES, ScoreOutput, ScoreRequest, VelocityPredictions, VocabTerm
from genalign.algorithms.structure import STRUCTURE_FIELDS, PrefixTree, RolloutStructure

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "CLIP_FORMS",
    "CREDIT_RULES",
    "KL_ESTIMATORS",
    "OBJECTIVES",
    "RATIO_LEVELS",
    "REGULARIZERS",
    "REWARD_COMBINERS",
    "REWARD_SHAPERS",
    "SCORE_FEATURES",
    "STRUCTURE_FIELDS",
    "AdvantageState",
    "Aggregation",
    "ClippedLogRatio",
    "CompetenceState",
    "CreditInputs",
    "HyperparameterError",
    "LevelOutput",
    "ObjectiveContext",
    "PrefixTree",
    "RegularizerInputs",
    "RolloutStructure",
    "ScoreOutput",
    "ScoreRequest",
    "ShapingInputs",
    "VelocityPredictions",
    "VocabTerm",
    "accepted_hyperparameters",
    "aggregate",
    "apply_credit",
    "apply_reward_shaping",
    "bind_vocab_term",
    "check_hyperparameters",
    "check_objective_hyperparameters",
    "check_rule_order",
    "compute_advantages",
    "entropy_bonus",
    "entropy_from_logits",
    "frac_reward_zero_std",
    "group_reward_std",
    "informative_groups",
    "kl_in_reward",
    "kl_penalty",
    "loss_normalizer",
    "make_advantage_state",
    "make_combiner_state",
    "objective_hyperparameters",
    "policy_loss",
    "reward_statistics",
    "rule_needs",
    "sequence_kl",
    "shaper_needs",
    "split_objective_hyperparameters",
    "zero_std_mask",
]
