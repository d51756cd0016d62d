"""Seed methods implemented outside the registries, declared in one place for the coverage table (docs/coverage.md).

A registered option names the seed it implements in its ``source`` (``[n]``). Two kinds of implementation have no
such row and are declared here instead:

* :class:`Feature`: code outside the registries that implements (part of) a seed: a rollout mode, a sampler, a
  scoring pass, a trainer mode. ``target`` is the implementing object as ``"module:attribute"`` (the table's
  generator reads the target's module and fails when it no longer defines the attribute); ``switch`` is how a
  config turns it on.
* :class:`Recipe`: a seed that is a combination of registered options and settings, with nothing of its own to
  build (e.g. REINFORCE with group-relative advantages = the ``grpo`` estimator without a clip). Its options are
  ``(registry kind, option name)`` pairs; the generator fails when one is not registered.

The coverage table counts a seed as covered by a feature or recipe exactly as by an option; what one leaves out of
its seed goes in the ``partial`` section of reasons.yaml. Only strings live here: this module imports nothing, so
declaring a feature adds no import edge between packages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    """Code outside the registries that implements seed methods.

    Args:
        name: what the table shows.
        cites: the seed abstract numbers it implements (in part or whole).
        target: the implementing object, ``"package.module:attribute"``.
        switch: the config key (and value) that turns it on.
        test_terms: words a mechanism test of it names (default: the target's attribute name).
    """

    name: str
    cites: tuple[int, ...]
    target: str
    switch: str
    test_terms: tuple[str, ...] = ()

    @property
    def terms(self) -> tuple[str, ...]:
        return self.test_terms or (self.target.rpartition(":")[2],)


@dataclass(frozen=True)
class Recipe:
    """A seed expressed by registered options and settings alone.

    Args:
        cites: the seed abstract number.
        options: ``(registry kind, option name)`` of every option the recipe combines.
        settings: the config lines besides the options, e.g. ``"algorithm.group_size: 2"``.
    """

    cites: int
    options: tuple[tuple[str, str], ...]
    settings: str = ""


FEATURES: tuple[Feature, ...] = (
    Feature("likelihood-free flow scoring (ELBO proxy)", (10,), "genalign.policies.flow.scoring:FlowMatchingScorer",
            "policy.likelihood_free.method: elbo (flow)", ("FlowMatchingScorer", "likelihood_free")),
    Feature("initial-noise search", (152,), "genalign.policies.flow.noise_search:NoiseSearch",
            "policy.noise_search.enabled (flow)", ("NoiseSearch", "noise_search")),
    Feature("reward-aware SDE noise calibration", (148,), "genalign.policies.flow.noise_calibration:NoiseCalibrator",
            "policy.noise_calibration.enabled (flow)"),
    Feature("trajectory-tree rollouts", (170, 168), "genalign.schedulers.branching:TreePlan",
            "policy.tree.enabled (flow)"),
    Feature("trained-step strategies (SDE windows, weighted chunks)", (319, 70),
            "genalign.schedulers.train_steps:select_train_steps", "policy.train_steps (flow)"),
    Feature("moving KL anchor", (76,), "genalign.policies.flow.model:FlowModel", "policy.anchor_every (flow)",
            ("anchor_every",)),
    Feature("shared-prefix tree rollouts", (165, 173, 41, 255), "genalign.policies.lm.engines.tree:TreeCacheEngine",
            "policy.tree.enabled (causal_lm)"),
    Feature("privileged-context teacher pass", (132,), "genalign.policies.lm.probes:teacher_logprobs",
            "read by credit self_distill_magnitude (causal_lm)"),
    Feature("answer probes at segment boundaries", (193, 194), "genalign.policies.lm.probes:answer_probe",
            "read by credit step_potential, belief_progress (causal_lm)"),
    Feature("Monte-Carlo segment values", (41,), "genalign.policies.lm.probes:segment_values",
            "read by credit segment_mc (causal_lm)"),
    Feature("image-ablated scoring pass", (329,), "genalign.policies.vlm.perception:logp_without_image",
            "read by credit visual_dependency (vlm)"),
    Feature("visual-similarity prior", (129,), "genalign.policies.vlm.perception:visual_similarity",
            "read by credit perception_prior (vlm)"),
    Feature("frame-shuffled scoring pass", (230,), "genalign.policies.vlm.perception:logp_frames_shuffled",
            "read by credit video_key_tokens (vlm)"),
    Feature("caption-view rewards", (63,), "genalign.rewards.caption_views:CaptionView", "rewards: [caption_view]",
            ("caption_view",)),
    Feature("asynchronous off-policy rollouts", (323,), "genalign.trainer.async_rollout:AsyncRollout",
            "algorithm.async_rollout.enabled", ("AsyncRollout", "async_rollout", "rollout_version")),
    Feature("multi-turn rollouts with environments and tools", (94,),
            "genalign.policies.lm.multi_turn:multi_turn_rollout", "policy.multi_turn (causal_lm, vlm)",
            ("multi_turn",)),
    Feature("rewards of list prefixes (segment states)", (104,), "genalign.policies.lm.probes:prefix_rewards",
            "read by credit rank_causal (causal_lm)"),
    Feature("counterfactual-prompt re-scoring", (275,), "genalign.policies.lm.probes:counterfactual_logprobs",
            "policy.probes.counterfactual_column; read by credit rubric_contrast (causal_lm)"),
    Feature("tree rollouts branching at turn boundaries", (165,), "genalign.policies.lm.turn_trees:TurnTree",
            "policy.multi_turn.tree.enabled (causal_lm, vlm)", ("turn_prefix_tree", "tree_policy")),
    Feature("thinking intervention and turn resampling", (171,),
            "genalign.policies.lm.turn_control:intervention_point",
            "policy.multi_turn.thinking_intervention, policy.multi_turn.resample_turns",
            ("intervention_point", "without_progress")),
    Feature("segment judges of each turn's role", (8,), "genalign.environments.judges:tool_outcomes",
            "policy.multi_turn.segment_judge; read by credit triage", ("segment_judge",)),
    Feature("the LLM segment judge, bounded by the environment's record", (8,),
            "genalign.environments.llm_judge:llm_roles", "policy.multi_turn.segment_judge: {name: llm_roles, ...}",
            ("llm_roles",)),
    Feature("per-tool-call evidence rewards", (9,), "genalign.environments.evidence:EvidenceZoom",
            "policy.multi_turn.environments: evidence_zoom (vlm), credit turn_reward_to_go", ("EvidenceZoom",)),
    Feature("shared-prefix scoring (each group's prompt encoded once)", (58, 50),
            "genalign.policies.lm.shared_prefix:shared_prefix_hidden_states", "policy.shared_prefix_scoring (causal_lm)",
            ("shared_prefix",)),
    Feature("ranked-list rewards (order-invariant coverage, NDCG utility)", (303,),
            "genalign.rewards.ranking:RankingUtility", "rewards: [list_coverage, ranking_utility]",
            ("list_coverage", "ranking_utility")),
    Feature("Routing Replay (the rollout's MoE expert choices replayed in every scoring pass)", (294,),
            "genalign.policies.lm.routing_replay:replaying", "policy.routing_replay (causal_lm, Qwen3-MoE)",
            ("routing_replay",)),
    Feature("comparative group judging (a group's samples scored jointly, win rates per criterion)", (163, 186),
            "genalign.rewards.comparative:ComparativeJudge", "rewards: [{fn: comparative_judge, args: {judge: rules | llm}}]",
            ("comparative_judge", "win_rates")),
    Feature("rubric rewards (each row's checklist, one judge question per criterion)", (285,),
            "genalign.rewards.rubric:RubricJudge", "rewards: [{fn: rubric_judge, args: {column: rubric}}]",
            ("rubric_judge", "rubric_score")),
    Feature("validation-anchored policy reset (VAPR)", (18,), "genalign.trainer.validation_anchor:ValidationAnchor",
            "eval.reset_to_best_every (causal_lm, vlm; full fine-tuning)", ("ValidationAnchor", "reset_to_best_every")),
    Feature("test-time self-reward reranking (LaSeR's last-token score)", (208,),
            "genalign.pipelines.self_reward:self_reward_scores",
            "python: best_of_n(self_reward_scores(model, ...), n) (causal_lm inference)"),
    Feature("scoring pass restricted to the trained tokens (prefix cut, head on the kept subset)", (220, 312),
            "genalign.trainer.trained_scoring:score_trained",
            "algorithm.score_only_trained: true, with credit token_subsample (causal_lm)",
            ("score_trained", "score_only_trained")),
    Feature("soft multi-choice reward (partial credit for a correct subset of the options)", (156,),
            "genalign.rewards.multiple_choice:MultiChoiceCredit", "rewards: [multi_choice_credit]",
            ("multi_choice_credit",)),
    Feature("test-time extrapolation along Δlog p", (266,), "genalign.pipelines.extrapolation:extrapolated_generate",
            "python: extrapolated_generate(trained, base, ..., alpha) (causal_lm inference)"),
    Feature("domain-expert teachers routed per prompt", (317,), "genalign.teachers.routed:RoutedTeacher",
            "algorithm.teacher.routing (causal_lm); read by credit opd", ("RoutedTeacher",)),
    Feature("hindsight teacher context (the sample's own output and reward)", (43,),
            "genalign.teachers.context:with_sample_fields",
            "algorithm.teacher.context: '... {sample.reward} {sample.completion}' (causal_lm); read by credit opd",
            ("with_sample_fields",)),
)  # fmt: skip

RECIPES: tuple[Recipe, ...] = (
    Recipe(71, (("advantage estimator", "grpo"),), "algorithm.group_size: 2"),
    Recipe(161, (("advantage estimator", "grpo"), ("clip form", "none")), "algorithm.inner_epochs: 1"),
    Recipe(198, (("advantage estimator", "grpo"),), "algorithm.group_size in the hundreds"),
    Recipe(218, (("clip form", "truncated_is"),), "a rollout engine that reports its log-probs; icepop for masked IS"),
    Recipe(294, (("clip form", "truncated_is"),), "a rollout engine that reports its log-probs (behaviour_logp)"),
    Recipe(304, (("clip form", "off_policy"), ("aggregation mode", "seq_mean_token_sum_norm")),
           "algorithm.async_rollout.enabled"),
    Recipe(321, (("clip form", "ppo"), ("update schedule", "standard")),
           "algorithm.inner_epochs > 1, algorithm.minibatches > 1"),
    Recipe(284, (("credit rule", "role_segments"),),
           "policy.probes.block_markers: [the marker opening the execution phase]; role_rewards: [[exploration "
           "rewards], [execution rewards]] (Dual-Track GRPO's masked advantages, one group z-score per track)"),
    Recipe(286, (("credit rule", "distinct_pairs"), ("sample source", "gcpo")), "a reference solution column"),
    Recipe(215, (("credit rule", "grpo_ma"), ("credit rule", "progressive_prefix")),
           "policy.tree: {split_positions: [p], branching: [M]}: each p-token prefix continued M times is credited "
           "with the mean outcome of its continuations (Continuation Accumulated Reward), the loss on the retained "
           "prefix (credit: [grpo_ma, progressive_prefix])"),
)  # fmt: skip
