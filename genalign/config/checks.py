"""Cross-field checks of a training config: registry options with their hyper-parameters, objective-specific fields,
the policy family's capabilities against what the configured methods need, reward arguments. Each error names the
field, the value and the fix."""

from __future__ import annotations

import typing
from typing import Any, Literal

from genalign.config.core import ConfigError

# The checked objects are the schema's AlgorithmConfig and RewardSpec (typed Any: the schema imports this module).
AlgorithmConfig = RewardSpec = Any


def check_algorithm_options(cfg: AlgorithmConfig) -> None:
    """Every registry option of ``cfg`` exists and takes its hyper-parameters; the combination is consistent."""
    from genalign import algorithms as alg

    checks = [
        ("advantage", alg.ADVANTAGE_ESTIMATORS, cfg.advantage),
        ("reward_combination", alg.REWARD_COMBINERS, cfg.reward_combination),
        ("aggregation", alg.AGGREGATIONS, cfg.aggregation),
    ]
    checks += [("credit", alg.CREDIT_RULES, rule) for rule in cfg.credit]
    checks += [("reward_shaping", alg.REWARD_SHAPERS, shaper) for shaper in cfg.reward_shaping]
    if cfg.regularizer is not None:
        checks.append(("regularizer", alg.REGULARIZERS, cfg.regularizer))
    try:
        ratio = cfg.is_ratio_objective()
    except KeyError as err:
        raise ConfigError(f"algorithm.objective: {err}") from None
    if ratio:
        checks += [("ratio_level", alg.RATIO_LEVELS, cfg.ratio_level), ("clip", alg.CLIP_FORMS, cfg.clip)]
    for section, registry, option in checks:
        try:
            alg.check_hyperparameters(registry, option.name, option.args)
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"algorithm.{section}: {err}") from None
    check_sample_sources(cfg)
    try:
        alg.check_rule_order([rule.name for rule in cfg.credit])
    except ValueError as err:
        raise ConfigError(f"algorithm.credit: {err}") from None
    if cfg.regularizer is not None and "vocab_term" in alg.REGULARIZERS.meta(cfg.regularizer.name).get("needs", ()):
        try:
            alg.bind_vocab_term(cfg.regularizer.name, **cfg.regularizer.args)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"algorithm.regularizer: {err}") from None
    try:
        cfg.loss_plan()
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(
            f"{'algorithm.objective/ratio_level/clip' if ratio else 'algorithm.objective'}: {err}"
        ) from None
    try:
        cfg.advantage_stage()
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"algorithm: {err}") from None
    _check_objective_fields(cfg)
    check_declared_aggregation(cfg)


def declared_aggregation(objective: str) -> str | None:
    """The aggregation mode ``objective`` declares for its published form (registry meta ``aggregation``); None when
    it declares none or is not registered (validation reports an unknown objective)."""
    from genalign import algorithms as alg

    return alg.OBJECTIVES.meta(objective).get("aggregation") if objective in alg.OBJECTIVES else None


def check_declared_aggregation(cfg: AlgorithmConfig) -> None:
    """``algorithm.aggregation`` agrees with the mode the objective declares (the default follows it, so only an
    explicit contradicting choice fails)."""
    from genalign import algorithms as alg

    declared = declared_aggregation(cfg.objective.name)
    mode = cfg.aggregation.name
    if declared is None or mode == declared:
        return
    describe = lambda mode: alg.AGGREGATIONS.meta(mode)["summary"].rstrip(".").lower()  # noqa: E731
    raise ConfigError(
        f"algorithm.aggregation = {mode!r} contradicts algorithm.objective = {cfg.objective.name!r}, whose "
        f"published form needs aggregation {declared!r} ({describe(declared)}; {mode!r}: "
        f"{describe(mode)}, which changes how its samples are weighed). Remove algorithm.aggregation (the "
        f"default follows the objective) or set it to {declared!r}."
    )


def check_sample_sources(cfg: AlgorithmConfig) -> None:
    """``algorithm.sample_sources`` names registered rules, each once, with hyper-parameters they take and accept;
    the rules fit together and the group size."""
    from genalign import algorithms as alg
    from genalign.sampling import SAMPLE_SOURCES, SampleSourceStage, build_rules
    from genalign.sampling.base import check_off_policy_sources

    names = [rule.name for rule in cfg.sample_sources]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"algorithm.sample_sources = {names} lists {repeated} more than once; list each rule once.")
    for rule in cfg.sample_sources:
        try:
            alg.check_hyperparameters(SAMPLE_SOURCES, rule.name, rule.args)
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
    from genalign.algorithms.signals import names_by
    from genalign.sampling import SAMPLE_SOURCES

    wanted = cfg.needs()
    provided = {signal for name in names for signal in SAMPLE_SOURCES.meta(name).get("provides", ())}
    for need in sorted(names_by("source", wanted) - provided):
        providers = [rule for rule in SAMPLE_SOURCES.names() if need in SAMPLE_SOURCES.meta(rule).get("provides", ())]
        raise ConfigError(
            f"{', '.join(wanted[need])} needs {need!r}, which a sample source provides about the samples it draws, "
            f"but algorithm.sample_sources = {names} provides none of it; add "
            f"{' or '.join(repr(r) for r in providers) or 'a rule that provides it'} to algorithm.sample_sources, or "
            "remove the option."
        )


def _check_objective_fields(cfg: AlgorithmConfig) -> None:
    """``ratio_level`` / ``clip`` only mean something for ratio objectives; group-weighted objectives and
    regularisers (registry meta ``whole_groups``) need whole groups in every micro-batch."""
    from genalign import algorithms as alg

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
    grouped = [("objective", alg.OBJECTIVES, cfg.objective), ("regularizer", alg.REGULARIZERS, cfg.regularizer)]
    for field, registry, option in grouped:
        if option is None or not registry.meta(option.name).get("whole_groups", False):
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
    from genalign.algorithms.signals import declared

    probed = sorted(name for name in cfg.needs() if name in declared() and declared()[name].needs_rewards)
    if probed:
        raise ConfigError(
            f"{', '.join(cfg.needs()[probed[0]])} needs {probed[0]!r}, measured with the trainer's rewards during the "
            "rollout, which the rollout process cannot call; set algorithm.async_rollout.enabled=false."
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
    """The options that read teacher signals have a teacher that supplies them, a teacher has a reader, and the
    policy family hosts that kind of teacher (its ``capabilities.teachers``; the refusal gives its reason)."""
    from genalign.algorithms.signals import names_by

    needed = sorted(names_by("teacher", wanted))
    teacher = cfg.teacher
    if teacher is None:
        if needed:
            raise ConfigError(
                f"{', '.join(wanted[needed[0]])} needs {needed[0]!r}, which a teacher supplies; set algorithm.teacher "
                "(e.g. {source: model, model: PATH} with the policy's tokenizer, or {source: self, weights: current, "
                "context: '\\nReference answer: {answer}\\n'}; see genalign.teachers)."
            )
        return
    if not needed:
        raise ConfigError(
            f"algorithm.teacher (source {teacher.source!r}) is set, but no configured option reads a teacher signal, so "
            "it would score every sample for nothing; add a distillation credit rule (e.g. algorithm.credit: [opd]) "
            "or remove algorithm.teacher."
        )
    if teacher.family is not None and teacher.family != family:
        raise ConfigError(
            f"algorithm.teacher.family = {teacher.family!r} differs from policy.family = {family!r}: genalign scores "
            "a teacher through the student's own scoring pass (same tokenizer, same inputs), so it must be a model of "
            f"the policy's family; remove algorithm.teacher.family or give a {family} model."
        )
    kinds = teacher.kinds() | ({"reference"} if teacher.source == "self" and teacher.weights == "base" else set())
    unhosted = sorted(kinds - capabilities.teachers)
    if unhosted == ["reference"]:
        raise ConfigError(
            "algorithm.teacher: source 'self' with weights 'base' runs the policy's reference weights, but the policy "
            "has none (policy.reference = 'none'); set policy.reference to 'auto', or use weights 'current' with a "
            "context."
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
    from genalign.policies import family_names, load_family

    return [name for name in family_names() if not load_family(name).CONFIG_CLASS().capabilities().missing([need])]


def check_reward_args(index: int, spec: RewardSpec) -> None:
    """Reject ``args`` a reward does not take, and ``Literal`` values it does not accept, before any model loads."""
    import inspect

    from genalign.config.core import _convert
    from genalign.registry import did_you_mean
    from genalign.rewards import reward_factory

    factory = reward_factory(spec.fn)
    target = factory.__init__ if isinstance(factory, type) else inspect.unwrap(factory)
    params = inspect.signature(target).parameters
    accepted = [
        n for n, p in params.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and n not in ("self", "prompts", "completions")
    ]  # fmt: skip
    try:
        hints = typing.get_type_hints(inspect.unwrap(target))
    except Exception:  # annotations that cannot be resolved are simply not type-checked
        hints = {}
    for key, value in spec.args.items():
        if key not in accepted:
            raise ConfigError(
                f"rewards[{index}].args.{key}: reward {spec.fn!r} takes no argument {key!r}.{did_you_mean(key, accepted)} "
                f"Accepted: {', '.join(accepted) or 'none'}."
            )
        if typing.get_origin(hints.get(key)) is Literal:
            _convert(value, hints[key], f"rewards[{index}].args.{key}")


def check_reward_count(cfg: AlgorithmConfig, rewards: list) -> None:
    """A reward combiner that reads several reward columns (meta ``min_rewards``) gets at least that many."""
    from genalign import algorithms as alg

    need = alg.REWARD_COMBINERS.meta(cfg.reward_combination.name).get("min_rewards", 1)
    if len(rewards) < need:
        raise ConfigError(
            f"algorithm.reward_combination = {cfg.reward_combination.name!r} combines at least {need} reward columns, but "
            f"rewards lists {len(rewards)}; add the missing reward(s) (see its docs row) or choose another combiner."
        )


__all__ = [
    "check_algorithm_options",
    "check_capabilities",
    "check_reward_args",
    "check_reward_count",
    "check_sample_sources",
    "check_teacher",
]
