"""The shared group-relative optimisation backend: pure torch functions, one registry per kind of option.

One iteration of the trainer reads (shapes: ``N`` samples, ``K`` reward functions, ``T`` actions)::

    stage = AdvantageStage.build(combiner=Option("weighted_sum"), estimator=Option("grpo"), credit=[...])  # once
    loss = LossPlan.build(objective=Option("clipped_ratio"), clip=Option("ppo", {"eps_high": 0.28}))     # once
    values, stats = stage.sample_advantages(StepBatch(rewards=r, group_ids=g), weights)  # [N] advantages, groups
    advantages = stage.credit_advantages(batch.with_values(values))                      # [N] or [N, T]
    normalizer = sum(loss.normalizer(mb_mask, mb_adv) for each micro-batch)             # all-reduce SUM
    for each micro-batch:
        score = policy.score(mb_rollout, loss.score_request(capabilities))              # ScoreOutput
        loss(score, batch.select(mb), normalizer)[0].backward()

Every registry has one signature (its module docstring) and reads what it declares in its registry meta ``needs``
from the step batch (:class:`StepBatch`): declared signals (:mod:`genalign.algorithms.signals`), never fields of a
core type. Options are bound once with their hyper-parameters (:func:`bind_option`); an option that keeps statistics
of earlier steps is a class with the state protocol (:class:`Stateful`), checkpointed by the trainer.

Formulas: ``shared/reference/formulas.md``; table of every option: ``docs/algorithms.md``
(regenerate with ``python -m genalign.docs``).
"""

from genalign.algorithms.advantage_stage import AdvantageStage
from genalign.algorithms.advantages import ADVANTAGE_ESTIMATORS, compute_advantages
from genalign.algorithms.aggregation import AGGREGATIONS, Aggregation, aggregate, loss_normalizer
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms import CLIP_FORMS, ClippedLogRatio
from genalign.algorithms.credit import CREDIT_RULES, apply_credit, check_rule_order, rule_needs
from genalign.algorithms.group_filters import frac_reward_zero_std, group_reward_std, informative_groups, zero_std_mask
from genalign.algorithms.kl import KL_ESTIMATORS, kl_in_reward, kl_penalty, sequence_kl
from genalign.algorithms.loss import LossPlan
from genalign.algorithms.objectives import OBJECTIVES, objective_hyperparameters
from genalign.algorithms.options import (
    HyperparameterError,
    Option,
    Stateful,
    accepted_hyperparameters,
    bind_option,
    check_hyperparameters,
)
from genalign.algorithms.policy_loss import (
    bind_policy_loss,
    check_objective_hyperparameters,
    policy_loss,
    split_objective_hyperparameters,
)
from genalign.algorithms.ratio_levels import RATIO_LEVELS, LevelOutput
from genalign.algorithms.regularizers import REGULARIZERS, bind_vocab_term, entropy_bonus, entropy_from_logits
from genalign.algorithms.reward_combiners import REWARD_COMBINERS, reward_statistics
from genalign.algorithms.reward_shaping import REWARD_SHAPERS, apply_reward_shaping, shaper_needs
from genalign.algorithms.scores import ScoreOutput, ScoreRequest, VelocityPredictions, VocabTerm
from genalign.algorithms.signals import SIGNALS, Signal, declare_signal, names_by
from genalign.algorithms.structure import PrefixTree

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
    "SIGNALS",
    "AdvantageStage",
    "Aggregation",
    "ClippedLogRatio",
    "HyperparameterError",
    "LevelOutput",
    "LossPlan",
    "Option",
    "PrefixTree",
    "ScoreOutput",
    "ScoreRequest",
    "Signal",
    "Stateful",
    "StepBatch",
    "VelocityPredictions",
    "VocabTerm",
    "accepted_hyperparameters",
    "aggregate",
    "apply_credit",
    "apply_reward_shaping",
    "bind_option",
    "bind_policy_loss",
    "bind_vocab_term",
    "check_hyperparameters",
    "check_objective_hyperparameters",
    "check_rule_order",
    "compute_advantages",
    "declare_signal",
    "entropy_bonus",
    "entropy_from_logits",
    "frac_reward_zero_std",
    "group_reward_std",
    "informative_groups",
    "kl_in_reward",
    "kl_penalty",
    "loss_normalizer",
    "names_by",
    "objective_hyperparameters",
    "policy_loss",
    "reward_statistics",
    "rule_needs",
    "sequence_kl",
    "shaper_needs",
    "split_objective_hyperparameters",
    "zero_std_mask",
]
