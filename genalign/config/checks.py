"""Cross-field checks of a training config: registry options with their hyper-parameters, objective-specific fields,
the policy family's capabilities against what the configured methods need, reward arguments. Each error names the
field, the value and the fix.

The checks read registries and signal declarations through :mod:`genalign.catalog.registries`: the live ones, or
inside ``genalign validate`` the generated catalogue, which answers the same without importing torch. Only a check
that runs an option's own code (a bound form that checks its values, the sample-source rules, a reward given by
import path) imports the options' modules there."""

from __future__ import annotations

from typing import Any, Literal

from genalign.catalog.registries import catalogued, declared_signals, options, signals_by
from genalign.catalog.signatures import reward_arguments
from genalign.config.core import ConfigError
from genalign.option_rules import check_rule_order, objective_hyperparameters
from genalign.registry import Option, check_hyperparameters, did_you_mean

# The checked objects are the schema's AlgorithmConfig and RewardSpec (typed Any: the schema imports this module).
AlgorithmConfig = RewardSpec = Any


def configured_options(cfg: AlgorithmConfig) -> list[tuple[str, str, Option]]:
    """``(config section, registry key, option)`` of every registry option of the loss and the advantages that
    ``cfg`` names (the ratio level and clip form only with a ratio objective). The sample-source rules (objects the
    trainer builds, with state) and the update schedule (its pass count is the trainer's) are checked apart."""
    chosen = [
        ("advantage", "advantages", cfg.advantage),
        ("reward_combination", "combiners", cfg.reward_combination),
        ("aggregation", "aggregations", cfg.aggregation),
    ]
    chosen += [("credit", "credit", rule) for rule in cfg.credit]
    chosen += [("reward_shaping", "shapers", shaper) for shaper in cfg.reward_shaping]
    if cfg.regularizer is not None:
        chosen.append(("regularizer", "regularizers", cfg.regularizer))
    chosen.append(("objective", "objectives", cfg.objective))
    if _is_ratio_objective(cfg):
        chosen += [("ratio_level", "ratio_levels", cfg.ratio_level), ("clip", "clips", cfg.clip)]
    return chosen


def check_group_free(cfg: AlgorithmConfig) -> None:
    """``algorithm.group_size = 1`` (one sample per prompt, e.g. POISE's probe baseline [257]) is accepted only when
    every option of the advantage stage (estimator, combiner, shapers, credit rules) and the objective declares that
    it needs no group: registry meta ``group_free`` True, or the name of a keyword that must be true (e.g.
    ``probe_baseline``'s ``single_rollout``). The error names the first option that needs a group and the fix."""
    if cfg.dynamic_sampling.enabled or cfg.drop_zero_std_groups:
        raise ConfigError(f"algorithm.group_size = {cfg.group_size}: a group of one sample has no reward spread, so "
                          "algorithm.drop_zero_std_groups / dynamic_sampling would drop every sample; turn them off or "
                          "set algorithm.group_size >= 2.")  # fmt: skip
    chosen = [("advantage", "advantages", cfg.advantage), ("reward_combination", "combiners", cfg.reward_combination)]
    chosen += [("reward_shaping", "shapers", shaper) for shaper in cfg.reward_shaping]
    chosen += [("credit", "credit", rule) for rule in cfg.credit]
    chosen.append(("objective", "objectives", cfg.objective))
    for section, key, option in chosen:
        free = options(key).meta(option.name).get("group_free", False)
        if free is True or (isinstance(free, str) and option.args.get(free) is True):
            continue
        fix = f"set {free}: true on it, or " if isinstance(free, str) else ""
        raise ConfigError(
            f"algorithm.group_size = {cfg.group_size}: algorithm.{section} {option.name!r} compares the samples of a "
            f"group and needs at least 2 per prompt; {fix}set algorithm.group_size >= 2 (one sample per prompt "
            "takes options that declare they need no group, e.g. advantage: reinforce with reward_shaping: "
            "[{name: probe_baseline, single_rollout: true}])."
        )


def check_algorithm_options(cfg: AlgorithmConfig) -> None:
    """Every registry option of ``cfg`` exists and takes its hyper-parameters; the combination is consistent.

    The options are bound once, as the trainer binds them (their bound forms check their values), except inside
    ``genalign validate`` (:func:`genalign.catalog.registries.catalogued_checks`) when every option's binding checks
    only keyword names (:meth:`genalign.registry.Registry.binding`): then the same checks read the catalogue and no
    option module (nor torch) is imported."""
    chosen = configured_options(cfg)
    for section, key, option in chosen:
        if key == "objectives":
            continue  # with its ratio level and clip form, below
        try:
            check_hyperparameters(options(key), option.name, option.args)
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"algorithm.{section}: {err}") from None
    keywords_only = all(options(key).binding(option.name) == "keywords" for _, key, option in chosen)
    if catalogued() and keywords_only and not cfg.sample_sources:
        _check_keywords_of_the_loss(cfg)
    else:
        _check_by_binding(cfg)
    _check_objective_fields(cfg)
    check_declared_aggregation(cfg)


def _is_ratio_objective(cfg: AlgorithmConfig) -> bool:
    try:
        return cfg.is_ratio_objective()
    except KeyError as err:
        raise ConfigError(f"algorithm.objective: {err}") from None


def _check_by_binding(cfg: AlgorithmConfig) -> None:
    """Bind every option as the trainer does (imports the options' modules): the bound forms check their values."""
    from genalign import algorithms as alg

    check_sample_sources(cfg)
    _check_credit_order(cfg)
    if cfg.regularizer is not None and "vocab_term" in alg.REGULARIZERS.meta(cfg.regularizer.name).get("needs", ()):
        try:
            alg.bind_vocab_term(cfg.regularizer.name, **cfg.regularizer.args)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"algorithm.regularizer: {err}") from None
    try:
        cfg.loss_plan()
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{_objective_fields(cfg)}: {err}") from None
    try:
        cfg.advantage_stage()
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"algorithm: {err}") from None


def _check_keywords_of_the_loss(cfg: AlgorithmConfig) -> None:
    """What binding checks of options whose binding checks only keyword names, read from the catalogue: the order of
    the credit rules, and the keywords of the objective (with its ratio level and clip form)."""
    _check_credit_order(cfg)
    try:
        objective_hyperparameters(
            cfg.objective, ratio_level=cfg.ratio_level, clip=cfg.clip, objectives=options("objectives"),
            ratio_levels=options("ratio_levels"), clip_forms=options("clips"),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{_objective_fields(cfg)}: {err}") from None


def _objective_fields(cfg: AlgorithmConfig) -> str:
    return "algorithm.objective/ratio_level/clip" if _is_ratio_objective(cfg) else "algorithm.objective"


def _check_credit_order(cfg: AlgorithmConfig) -> None:
    try:
        check_rule_order([rule.name for rule in cfg.credit], options("credit"))
    except ValueError as err:
        raise ConfigError(f"algorithm.credit: {err}") from None


def declared_aggregation(objective: str) -> str | None:
    """The aggregation mode ``objective`` declares for its published form (registry meta ``aggregation``); None when
    it declares none or is not registered (validation reports an unknown objective)."""
    objectives = options("objectives")
    return objectives.meta(objective).get("aggregation") if objective in objectives else None


def check_declared_aggregation(cfg: AlgorithmConfig) -> None:
    """``algorithm.aggregation`` agrees with the mode the objective declares (the default follows it, so only an
    explicit contradicting choice fails)."""
    declared = declared_aggregation(cfg.objective.name)
    mode = cfg.aggregation.name
    if declared is None or mode == declared:
        return
    describe = lambda mode: options("aggregations").meta(mode)["summary"].rstrip(".").lower()  # noqa: E731
    raise ConfigError(
        f"algorithm.aggregation = {mode!r} contradicts algorithm.objective = {cfg.objective.name!r}, whose "
        f"published form needs aggregation {declared!r} ({describe(declared)}; {mode!r}: "
        f"{describe(mode)}, which changes how its samples are weighed). Remove algorithm.aggregation (the "
        f"default follows the objective) or set it to {declared!r}."
    )


def check_sample_sources(cfg: AlgorithmConfig) -> None:
    """``algorithm.sample_sources`` names registered rules, each once, with hyper-parameters they take and accept;
    the rules fit together and the group size; every ``source`` signal an option reads is provided by one of them."""
    if not cfg.sample_sources:
        _check_source_signals(cfg, [])
        return
    from genalign.sampling import SampleSourceStage, build_rules
    from genalign.sampling.base import check_off_policy_sources

    names = [rule.name for rule in cfg.sample_sources]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"algorithm.sample_sources = {names} lists {repeated} more than once; list each rule once.")
    for rule in cfg.sample_sources:
        try:
            check_hyperparameters(options("sample_sources"), rule.name, rule.args)
            build_rules([rule])
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"algorithm.sample_sources rule {rule.name!r}: {err}") from None
    try:
        SampleSourceStage(build_rules(cfg.sample_sources), seed=0, group_size=cfg.group_size)
        check_off_policy_sources(cfg)
    except ValueError as err:
        raise ConfigError(f"algorithm.sample_sources: {err}") from None
    _check_source_signals(cfg, names)


def _check_source_signals(cfg: AlgorithmConfig, names: list[str]) -> None:
    """Every signal of producer ``source`` the configured options read is provided by a configured sample source
    (registry meta ``provides``)."""
    sources = options("sample_sources")
    wanted = cfg.needs()
    provided = {signal for name in names for signal in sources.meta(name).get("provides", ())}
    for need in sorted(signals_by("source", wanted) - provided):
        providers = [rule for rule in sources.names() if need in sources.meta(rule).get("provides", ())]
        raise ConfigError(
            f"{', '.join(wanted[need])} needs {need!r}, which a sample source provides about the samples it draws, "
            f"but algorithm.sample_sources = {names} provides none of it; add "
            f"{' or '.join(repr(r) for r in providers) or 'a rule that provides it'} to algorithm.sample_sources, or "
            "remove the option."
        )


def _check_objective_fields(cfg: AlgorithmConfig) -> None:
    """``ratio_level`` / ``clip`` only mean something for ratio objectives; group-weighted objectives and
    regularisers (registry meta ``whole_groups``) need whole groups in every micro-batch."""
    if not cfg.is_ratio_objective():
        from genalign.config.migrate import yaml_text

        defaults = type(cfg)()
        changed = [name for name in ("ratio_level", "clip") if getattr(cfg, name) != getattr(defaults, name)]
        if changed:
            name, default = changed[0], getattr(defaults, changed[0]).name
            raise ConfigError(
                f"algorithm.{name} = {yaml_text(getattr(cfg, name).to_config())} has no effect with "
                f"algorithm.objective = {cfg.objective.name!r}, which is not a ratio objective; remove it (or reset "
                f"it with algorithm.{name}={default} when a preset sets it). The objective's own hyper-parameters go "
                f"with it: algorithm.objective: {{name: {cfg.objective.name}, KEYWORD: VALUE}}."
            )
    grouped = [("objective", "objectives", cfg.objective), ("regularizer", "regularizers", cfg.regularizer)]
    for field, key, option in grouped:
        if option is None or not options(key).meta(option.name).get("whole_groups", False):
            continue
        if cfg.micro_batch_size % cfg.group_size:
            raise ConfigError(
                f"algorithm.{field} = {option.name!r} weighs samples within their group, so every micro-batch must "
                f"hold whole groups: micro_batch_size = {cfg.micro_batch_size} is not a multiple of group_size = "
                f"{cfg.group_size}."
            )


def check_async_rollout(cfg: AlgorithmConfig) -> None:
    """Asynchronous rollouts train on samples of an older policy: the off-policy clip of [323] must correct for it;
    prompts are planned steps ahead (no sample-source rules) and rewards are computed after the rollout (no reward
    probe inside it)."""

    if not cfg.is_ratio_objective() or cfg.clip.name != "off_policy":
        raise ConfigError(
            f"algorithm.async_rollout.enabled trains on samples up to {cfg.async_rollout.max_staleness} policy "
            f"version(s) old, but algorithm.objective = {cfg.objective.name!r} with clip = {cfg.clip.name!r} does "
            "not correct "
            "for it; set algorithm.objective=clipped_ratio and algorithm.clip=off_policy ([323]: ratio to the "
            "behaviour policy, trust region around the current weights)."
        )
    if cfg.sample_sources:
        raise ConfigError(
            f"algorithm.sample_sources = {[rule.name for rule in cfg.sample_sources]} with "
            "algorithm.async_rollout.enabled: the rules choose "
            "each step's prompts and samples from the steps before it, but asynchronous rollouts plan their prompts "
            "steps ahead; remove the rules or set algorithm.async_rollout.enabled=false."
        )
    signals = declared_signals()
    probed = sorted(name for name in cfg.needs() if name in signals and signals[name].needs_rewards)
    if probed:
        raise ConfigError(
            f"{', '.join(cfg.needs()[probed[0]])} needs {probed[0]!r}, measured with the trainer's rewards during the "
            "rollout, which the rollout process cannot call; set algorithm.async_rollout.enabled=false."
        )


#: Ratio levels whose ratio of action ``t`` reads the log-probs of actions ``<= t`` only: the untrained actions after
#: the last trained one do not change the loss of the trained ones (``algorithm.score_only_trained``).
CAUSAL_RATIO_LEVELS = ("token", "prefix_geometric", "cumulative", "min_prefix")
#: Clip forms that read a whole-sequence mean of a current-pass feature (which the untrained actions would change).
SEQUENCE_CLIP_FORMS = ("entropy_adaptive",)


def check_score_only_trained(cfg: AlgorithmConfig) -> None:
    """``algorithm.score_only_trained`` drops the untrained actions from the scoring pass: exact only when the loss
    reads an action's log-prob through its own advantage-weighted term (and those of the actions after it)."""
    terms = {
        "kl_coef": cfg.kl_coef if cfg.kl_placement == "loss" else 0.0,
        "entropy_coef": cfg.entropy_coef,
        "regularizer": cfg.regularizer.name if cfg.regularizer is not None else None,
    }
    for name, value in terms.items():
        if value:
            raise ConfigError(
                f"algorithm.score_only_trained scores only the actions with a non-zero advantage, but "
                f"algorithm.{name} = {value!r} adds a loss term on every action; remove it (a KL can go in the "
                "reward: kl_placement=reward) or set score_only_trained=false."
            )
    if cfg.objective.name != "clipped_ratio" or cfg.ratio_level.name not in CAUSAL_RATIO_LEVELS:
        raise ConfigError(
            f"algorithm.score_only_trained needs objective 'clipped_ratio' with a ratio level in "
            f"{list(CAUSAL_RATIO_LEVELS)} (the ratio of an action reads no later action), got objective = "
            f"{cfg.objective.name!r}, ratio_level = {cfg.ratio_level.name!r}; change them or set "
            "score_only_trained=false."
        )
    if cfg.clip.name in SEQUENCE_CLIP_FORMS:
        raise ConfigError(
            f"algorithm.score_only_trained: clip = {cfg.clip.name!r} reads a whole-sequence mean of a feature of the "
            "scoring pass, which the untrained actions would change; choose another clip form or set "
            "score_only_trained=false."
        )


def check_capabilities(cfg: AlgorithmConfig, policy: Any) -> None:
    """Every score feature and structure field the algorithm needs is one the policy family supplies, and the group
    size is one its rollouts can produce."""
    capabilities = policy.capabilities()
    if capabilities.group_size is not None and cfg.group_size != capabilities.group_size:
        raise ConfigError(
            f"algorithm.group_size = {cfg.group_size}, but policy.family = {policy.family!r} with these options samples "
            f"groups of exactly {capabilities.group_size} (policy.tree: the leaves per prompt); set "
            f"algorithm.group_size={capabilities.group_size} or change policy.tree."
        )
    _check_sample_sources(cfg, policy.family, capabilities)
    if cfg.score_only_trained and not capabilities.trained_action_scoring:
        raise ConfigError(
            f"algorithm.score_only_trained: policy.family = {policy.family!r} with these options cannot restrict its "
            "scoring pass to the trained actions (single-turn causal_lm can); set score_only_trained=false."
        )
    if cfg.async_rollout.enabled and capabilities.rollout_calls_rewards:
        raise ConfigError(
            f"policy.family = {policy.family!r} with these options calls the trainer's rewards inside its rollouts "
            "(e.g. policy.noise_search ranks initial noises by reward), which the asynchronous rollout process cannot "
            "call; set algorithm.async_rollout.enabled=false or turn that policy option off."
        )
    undeclared = capabilities.undeclared()
    if undeclared:
        raise ConfigError(
            f"policy.family = {policy.family!r} declares capabilities {undeclared}, which no signal declaration knows; "
            "declare them (genalign.algorithms.declare_signal) in a module that is imported before the config loads."
        )
    wanted = cfg.needs()
    check_teacher(cfg, policy.family, capabilities, wanted)
    missing = capabilities.missing(wanted)
    if missing:
        need = missing[0]
        raise ConfigError(
            f"{', '.join(wanted[need])} needs {need!r}, which policy.family = {policy.family!r} with these policy "
            f"options does not supply (it supplies {sorted(capabilities.signals)}). Families whose default options "
            f"supply {need!r}: {', '.join(_families_supplying(need)) or 'none'}; some capabilities come with policy "
            "options (the table in docs/extending.md). Choose another option, or a family and options that supply it."
        )


def check_teacher(cfg: AlgorithmConfig, family: str, capabilities: Any, wanted: dict[str, list[str]]) -> None:
    """The options that read teacher signals have a teacher that supplies them, the sample sources that have the
    teacher write (``teacher_writes``) a local one, a teacher has a reader or a writer's use, and the policy family
    hosts that kind of teacher (its ``capabilities.teachers``, ``generate`` for a writing one; the refusal gives its
    reason)."""
    needed = sorted(signals_by("teacher", wanted))
    writers = _teacher_writers(cfg)
    teacher = cfg.teacher
    if teacher is None:
        if needed:
            raise ConfigError(
                f"{', '.join(wanted[needed[0]])} needs {needed[0]!r}, which a teacher supplies; set algorithm.teacher "
                "(e.g. {source: model, model: PATH} with the policy's tokenizer, or {source: self, weights: current, "
                "context: '\\nReference answer: {answer}\\n'}; see genalign.teachers)."
            )
        if writers:
            raise ConfigError(
                f"algorithm.sample_sources rule {writers[0]!r} adds samples the teacher writes, but algorithm.teacher "
                "is not set; set it to a model of the policy's family with its tokenizer ({source: model, model: "
                "PATH}) or to the policy's own weights with privileged context ({source: self, weights: current, "
                "context: '\\nReference answer: {answer}\\n'})."
            )
        return
    if writers and teacher.source == "remote":
        raise ConfigError(
            f"algorithm.sample_sources rule {writers[0]!r} adds samples the teacher writes, but a remote teacher only "
            "scores token ids (genalign.teachers.remote); use source model or self."
        )
    if not needed and not writers:
        raise ConfigError(
            f"algorithm.teacher (source {teacher.source!r}) is set, but no configured option reads a teacher signal, "
            "and no sample source has it write, so it would score every sample for nothing; add a distillation credit "
            "rule (e.g. algorithm.credit: [opd]) or remove algorithm.teacher."
        )
    if teacher.family is not None and teacher.family != family:
        raise ConfigError(
            f"algorithm.teacher.family = {teacher.family!r} differs from policy.family = {family!r}: genalign scores "
            "a teacher through the student's own scoring pass (same tokenizer, same inputs), so it must be a model of "
            f"the policy's family; remove algorithm.teacher.family or give a {family} model."
        )
    kinds = teacher.kinds() | ({"reference"} if teacher.source == "self" and teacher.weights == "base" else set())
    kinds |= {"generate"} if writers else set()
    kinds |= {"distribution"} if {"teacher_vocab_reverse_kl", "teacher_vocab_forward_kl"} & set(needed) else set()
    unhosted = sorted(kinds - capabilities.teachers)
    if unhosted == ["reference"]:
        who = ("distribution.anchor 'reference'" if teacher.distribution.anchor == "reference"
               else "source 'self' with weights 'base'")  # fmt: skip
        raise ConfigError(
            f"algorithm.teacher: {who} runs the policy's reference weights, but the policy has none "
            "(policy.reference = 'none'); set policy.reference to 'auto', or use weights 'current' with a context "
            "(an anchor: a model folder)."
        )
    if unhosted:
        hosted = sorted(capabilities.teachers - {"reference"})
        raise ConfigError(
            f"algorithm.teacher (source {teacher.source!r}{', with context' if 'context' in kinds else ''}) needs "
            f"policy.family = {family!r} to host {' and '.join(repr(k) for k in unhosted)} teachers, which it does "
            f"not with these options (it hosts {hosted or 'none'}): {capabilities.teacher_limits}."
        )
    if teacher.source == "remote":
        _check_remote_teacher_sees_the_prompts(cfg)
    unsupplied = [name for name in needed if name not in teacher.supplies()]
    if unsupplied:
        name = unsupplied[0]
        why = ("needs algorithm.teacher.contrast_context (the contrast pass's template)"
               if name == "teacher_contrast_logp" and teacher.source != "remote"
               else f"is not supplied by a {teacher.source!r} teacher (it supplies {sorted(teacher.supplies())})")  # fmt: skip
        raise ConfigError(f"{', '.join(wanted[name])} needs {name!r}, which {why}; choose another teacher or option.")


def _teacher_writers(cfg: AlgorithmConfig) -> list[str]:
    """The configured sample sources that add samples the teacher writes (``teacher_writes``)."""
    if not cfg.sample_sources:
        return []
    from genalign.sampling import build_rules

    return [name for name, rule in build_rules(cfg.sample_sources) if rule.teacher_writes]


def _check_remote_teacher_sees_the_prompts(cfg: AlgorithmConfig) -> None:
    """A remote teacher gets the dataset's prompts: a sample source that changes the prompt the student sees (a hint,
    a forced prefix) would have it score the completions after another prompt."""
    from genalign.sampling import build_rules

    for name, rule in build_rules(cfg.sample_sources):
        changes = sorted(set(rule.needs_guidance) - {"temperature"})  # a row's sampling temperature is no prompt
        if changes:
            raise ConfigError(
                f"algorithm.sample_sources rule {name!r} adds guidance {changes} to the prompts the "
                "student sees, but a remote teacher gets the dataset's prompts (genalign.teachers.remote), so it would "
                "score the completions after another prompt; use a local teacher (source model or self) or remove "
                "the rule."
            )


def _check_sample_sources(cfg: AlgorithmConfig, family: str, capabilities: Any) -> None:
    """Sample sources that add samples need joinable rollouts (no prefix tree); those that store or insert
    completions need ``forced_completions``; guidance keys must be ones the family honours."""
    if not cfg.sample_sources:
        return
    from genalign.sampling import build_rules

    for name, rule in build_rules(cfg.sample_sources):
        label = f"algorithm.sample_sources rule {name!r}"
        if (rule.rounds > 1 or rule.forces) and capabilities.group_size is not None:
            raise ConfigError(
                f"{label} adds samples to the step's groups, but policy.tree samples fixed-shape trees that cannot "
                "take extra samples; turn policy.tree off or remove the rule."
            )
        if (rule.needs_tokens or rule.forces) and not capabilities.forced_completions:
            raise ConfigError(
                f"{label} stores or inserts completions, which policy.family = {family!r} cannot rebuild (no "
                "forced_completions capability); use causal_lm or remove the rule."
            )
        unsupported = sorted(set(rule.needs_guidance) - set(capabilities.guidance))
        if unsupported:
            raise ConfigError(
                f"{label} attaches guidance {unsupported} to prompts, which policy.family = {family!r} does not "
                f"honour (it honours {sorted(capabilities.guidance)}); use causal_lm or remove the rule."
            )


def _families_supplying(need: str) -> list[str]:
    """Policy families whose default options supply ``need``."""
    from genalign.policies import family_config_class, family_names

    return [name for name in family_names() if not family_config_class(name)().capabilities().missing([need])]


def check_reward_args(index: int, spec: RewardSpec) -> None:
    """Reject ``args`` a reward does not take, and ``Literal`` values it does not accept, before any model loads. (An
    argument without a default is not required here: the presets leave local weight paths to the user, and the
    reward's factory names the missing one when the run builds it.)"""
    from genalign.config.core import _convert

    arguments = reward_arguments_of(spec.fn)
    accepted = [argument["name"] for argument in arguments]
    for key, value in spec.args.items():
        if key not in accepted:
            raise ConfigError(
                f"rewards[{index}].args.{key}: reward {spec.fn!r} takes no argument {key!r}.{did_you_mean(key, accepted)} "
                f"Accepted: {', '.join(accepted) or 'none'}."
            )
        choices = next(argument.get("choices") for argument in arguments if argument["name"] == key)
        if choices:
            _convert(value, Literal[tuple(choices)], f"rewards[{index}].args.{key}")


def reward_arguments_of(fn: Any) -> list[dict[str, Any]]:
    """What ``args`` the reward ``fn`` takes (:func:`genalign.catalog.signatures.reward_arguments`): from the catalogue
    for a registered name inside ``genalign validate``, else from its factory (which imports the reward's module: a
    reward file or module runs its imports). Raises for an unknown name or a path that cannot be imported."""
    if catalogued() and isinstance(fn, str) and fn in (registry := options("rewards")):
        return registry.arguments(fn)
    from genalign.rewards import reward_factory

    return reward_arguments(reward_factory(fn))


def check_reward_count(cfg: AlgorithmConfig, rewards: list) -> None:
    """A reward combiner that reads several reward columns (meta ``min_rewards``) gets at least that many."""
    need = options("combiners").meta(cfg.reward_combination.name).get("min_rewards", 1)
    if len(rewards) < need:
        raise ConfigError(
            f"algorithm.reward_combination = {cfg.reward_combination.name!r} combines at least {need} reward columns, but "
            f"rewards lists {len(rewards)}; add the missing reward(s) (see its docs row) or choose another combiner."
        )


__all__ = [
    "check_algorithm_options",
    "check_capabilities",
    "check_group_free",
    "check_reward_args",
    "check_reward_count",
    "check_sample_sources",
    "check_score_only_trained",
    "check_teacher",
    "configured_options",
    "reward_arguments_of",
]
