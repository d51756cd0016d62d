"""The training config: one dataclass per YAML section.

The ``policy`` section's schema depends on ``policy.family`` (see :mod:`genalign.policies`); every other section is
shared by all model families. Every registry choice inside ``algorithm`` is an :class:`~genalign.registry.Option`,
written as its name or as ``{name: ..., **hyper-parameters}`` (:mod:`genalign.config.core`); names are checked against
the registries of :mod:`genalign.algorithms`, and hyper-parameters against the chosen function's keyword arguments,
at load time, and bound once (:meth:`AlgorithmConfig.advantage_stage`, :meth:`AlgorithmConfig.loss_plan`).
``genalign validate`` reads the same facts from the generated catalogue instead (:mod:`genalign.config.checks`).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from genalign.catalog.registries import options
from genalign.config.bounds import check_output_dir, check_seed, check_sizes
from genalign.config.checks import (
    check_algorithm_options,
    check_async_rollout,
    check_capabilities,
    check_group_free,
    check_reward_args,
    check_reward_count,
    check_score_only_trained,
    declared_aggregation,
    reward_arguments_of,
)
from genalign.config.core import ConfigError, convert_options
from genalign.config.scale import FSDPConfig, HardwareConfig
from genalign.config.validation_reset import check_validation_reset
from genalign.data.sources import DataSourceConfig
from genalign.registry import Option, check_hyperparameters
from genalign.teachers.config import TeacherConfig

#: experiment tracker -> the package it needs (the extra of the same name installs it)
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def _help(text: str, default: Any = None, factory: Any = None, replaces: str | None = None):
    """A field with help text; ``replaces``: the key of the older form this field took over (genalign.config.migrate)."""
    metadata = {"help": text} | ({"replaces": replaces} if replaces else {})
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _option(text: str, name: str | None, replaces: str | None = None):
    """An option field (a name or ``{name, **hyper-parameters}``) whose default is ``name`` without hyper-parameters."""
    if name is None:
        return _help(text, None, replaces=replaces)
    return _help(text, factory=lambda: Option(name), replaces=replaces)


@dataclass
class RunConfig:
    output_dir: str = field(
        default="runs/genalign",
        metadata={"help": "Directory for metrics, samples, checkpoints and plots.", "path": True},
    )
    seed: int = _help("Seed; the randomness of step s is a pure function of (seed, s, rank).", 0)
    max_steps: int = _help("Number of training steps (one rollout batch each).", 100)
    max_time_minutes: float | None = _help("Stop (and checkpoint) after this wall time; null = no limit.")
    deterministic: bool = _help("Use deterministic torch algorithms (CPU runs become bit-reproducible).", False)
    num_threads: int | None = _help("torch intra-op threads; null = torch default.")
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = _help(
        "Autocast precision of the update's forward passes; 'auto' takes accelerate launch --mixed_precision (or "
        "the accelerate config) and is 'no' without it.",
        "auto",
    )
    distributed: Literal["auto", "none", "ddp", "fsdp"] = _help(
        "Data parallelism across processes: 'ddp' replicates the trained modules and all-reduces gradients, 'fsdp' "
        "shards parameters, gradients and optimizer state (FSDP2); 'auto' is 'none' for one process, 'fsdp' when "
        "accelerate is configured for FSDP, else 'ddp'.",
        "auto",
    )
    fsdp: FSDPConfig = _help("FSDP2 options (run.distributed = fsdp).", factory=lambda: FSDPConfig())
    cpu: bool = _help("Force CPU even when an accelerator is present.", False)
    log_every: int = _help("Print a progress line every N steps (metrics.jsonl gets every step).", 1)
    save_every: int = _help("Checkpoint every N steps; 0 = only at the end.", 0)
    keep_last: int = _help("Checkpoints kept on disk (older ones are deleted after a new one is complete).", 2)
    sample_every: int = _help("Dump sample outputs every N steps; 0 = never.", 10)
    samples_per_dump: int = _help("How many outputs each dump keeps.", 4)
    resume: str | None = field(
        default=None,
        metadata={"help": "'latest', a checkpoint directory, or null to start fresh.", "path": True,
                  "not_paths": ("latest",)},
    )  # fmt: skip
    overwrite: bool = _help(
        "Start fresh in an output_dir that holds a previous run: the previous run is moved aside to "
        "'<output_dir>.old-<time>' (never deleted).",
        False,
    )
    resume_changes: list[str] = _help(
        "Config fields that deliberately differ from the checkpoint's when resuming (e.g. [algorithm.group_size]); "
        "other state-defining fields must match.",
        factory=list,
    )
    allow_pickle_checkpoints: bool = _help(
        "Load checkpoints of older genalign versions, whose pickled files can run code: only for checkpoints you trust.",
        False,
    )
    max_consecutive_skips: int = _help(
        "Stop the run when this many consecutive updates were skipped for non-finite gradients or optimizer state.", 3
    )
    trackers: list[str] = _help("accelerate trackers: 'tensorboard', 'wandb' (optional installs).", factory=list)
    progress_bar: bool = _help("Show a tqdm progress bar.", True)
    dashboard: bool | None = _help(
        "Redraw dashboard.png after each evaluation and at the end (about a second of CPU each); null = on unless "
        "the environment sets GENALIGN_DASHBOARD=0 (test suites, CI). `genalign report RUN` draws it at any time.",
        None,
    )

    def validate(self) -> None:
        self.fsdp.validate()
        check_output_dir(self.output_dir, overwrite=self.overwrite)
        check_seed("run.seed", self.seed)
        for name in ("max_steps", "log_every", "keep_last", "samples_per_dump", "max_consecutive_skips"):
            if getattr(self, name) < 1:
                raise ConfigError(f"run.{name} = {getattr(self, name)} must be >= 1.")
        if self.num_threads is not None and self.num_threads < 1:
            raise ConfigError(f"run.num_threads = {self.num_threads} must be >= 1, or null for torch's default.")
        for name in ("save_every", "sample_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"run.{name} = {getattr(self, name)} must be >= 0 (0 disables).")
        for name in self.trackers:
            if name not in TRACKER_PACKAGES:
                raise ConfigError(f"run.trackers: {name!r} is not supported; use one of {sorted(TRACKER_PACKAGES)}.")
            if importlib.util.find_spec(TRACKER_PACKAGES[name]) is None:
                raise ConfigError(
                    f"run.trackers asks for {name!r} but the {TRACKER_PACKAGES[name]!r} package is not installed; "
                    f"install it with pip install 'genalign[{name}]', or remove {name!r} from run.trackers."
                )


@dataclass
class DataConfig:
    train: DataSourceConfig = _help("Training prompts.", factory=lambda: DataSourceConfig(source=""))
    eval: DataSourceConfig | None = _help("Held-out prompts for `genalign eval` and periodic evaluation.")

    def validate(self) -> None:
        if not self.train.source:
            raise ConfigError(
                "data.train.source is empty; give a file path or 'procedural:<task>' (from Python: "
                "genalign.train(config, train_dataset=...))."
            )
        self.train.config_path = "data.train"  # named so in the errors of reading it
        if self.eval is not None:
            self.eval.config_path = "data.eval"


@dataclass
class RewardSpec:
    fn: Any = _help(
        "The reward: a registered name (genalign list rewards), an import path 'package.module:function' or "
        "'path/to/file.py:function' (relative to the config file), or, from Python, a callable.",
        "",
    )
    weight: float = _help("Weight in the combined reward.", 1.0)
    args: dict[str, Any] = _help("Keyword arguments for the reward factory.", factory=dict)
    name: str | None = _help("Name used in logs (default: fn).")
    on_error: Literal["raise", "zero"] = _help(
        "A reward that raises: stop with an error naming the sample, or score 0 and count it.", "raise"
    )

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return self.fn if isinstance(self.fn, str) else getattr(self.fn, "__name__", "reward")

    def validate(self) -> None:
        if not (isinstance(self.fn, str) and self.fn) and not callable(self.fn):
            raise ConfigError(f"fn = {self.fn!r}: give a registered reward name, an import path or a callable.")
        if isinstance(self.fn, str) and ".py:" in self.fn:  # record the file absolutely, so saved configs still work
            where, name = self.fn.rsplit(":", 1)
            self.fn = f"{Path(where).expanduser().resolve()}:{name}"


@dataclass
class DynamicSamplingConfig:
    """DAPO dynamic sampling, in one round: sample ``oversample`` × the prompts, keep informative groups up to the
    step's prompt count. (DAPO samples sequential rounds until the batch is full; one larger round is equivalent in
    expectation, batches better, and never needs rollouts of different lengths concatenated.)"""

    enabled: bool = _help("Keep only groups whose rewards differ (std > std_tol), from an oversampled rollout.", False)
    std_tol: float = _help("A group is informative when its reward std exceeds this.", 1e-6)
    oversample: float = _help("Prompts sampled per step = ceil(prompts_per_step × oversample).", 1.5)

    def validate(self) -> None:
        if self.oversample < 1:
            raise ConfigError(f"algorithm.dynamic_sampling.oversample = {self.oversample} must be >= 1.")


@dataclass
class AsyncRolloutConfig:
    """Asynchronous off-policy rollouts (genalign.trainer.async_rollout): a separate process samples the next steps
    while this step updates; the samples are up to ``max_staleness`` policy versions old and [323]'s off-policy clip
    corrects for it."""

    enabled: bool = _help(
        "Sample the next steps' rollouts in a separate process while this step updates. Needs algorithm.clip = "
        "'off_policy' ([323]: ratio to the behaviour policy, trust region around the current iterate).",
        False,
    )
    max_staleness: int = _help(
        "S: the most policy versions a trained sample may lag the weights it updates; rollouts run "
        "S - sync_every + 1 steps ahead of the update.",
        1,
    )
    sync_every: int = _help("E: send the trained weights to the rollout process every E steps (1 <= E <= S).", 1)
    worker_threads: int = _help("torch intra-op threads of the rollout process (set run.num_threads for the other).", 1)

    def validate(self) -> None:
        for name in ("max_staleness", "sync_every", "worker_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algorithm.async_rollout.{name} = {getattr(self, name)} must be >= 1.")
        if self.sync_every > self.max_staleness:
            raise ConfigError(
                f"algorithm.async_rollout.sync_every = {self.sync_every} > max_staleness = {self.max_staleness}: "
                "weights sent every E steps make samples up to E steps old; raise max_staleness or lower sync_every."
            )

    @property
    def lookahead(self) -> int:
        """How many steps the rollouts run ahead of the update (``S − E + 1``)."""
        return self.max_staleness - self.sync_every + 1


@dataclass
class AlgorithmConfig:
    group_size: int = _help("G: samples per prompt.", 8)
    prompts_per_step: int = _help("Prompts per training step (across all processes).", 16)
    advantage: Option = _option(
        "Advantage estimator (genalign.algorithms.ADVANTAGE_ESTIMATORS): a name or {name, **hyper-parameters}, e.g. "
        "{name: grpo, eps: 1.0e-6}.",
        "grpo",
        replaces="advantage_args",
    )
    advantage_clip: float | None = _help("Clip advantages to [-c, c] (flow models often use 5).")
    reward_combination: Option = _option(
        "How several rewards combine (REWARD_COMBINERS): a name or {name, **hyper-parameters}.",
        "weighted_sum",
        replaces="reward_combination_args",
    )
    reward_shaping: list[Option] = _help(
        "Reward shapers (REWARD_SHAPERS), in order, before the estimator; each a name or {name, **hyper-parameters}.",
        factory=list,
        replaces="reward_shaping_args",
    )
    objective: Option = _option(
        "Training objective (OBJECTIVES): 'clipped_ratio' (ratio_level × clip, the GRPO family), a likelihood-weighted "
        "one (wd1, spg) or a likelihood-free one (nft); its own hyper-parameters go with it, e.g. "
        "{name: nft, beta: 1.0} (those of the ratio level and the clip form go with ratio_level and clip).",
        "clipped_ratio",
        replaces="objective_args",
    )
    ratio_level: Option = _option(
        "Importance-ratio level (RATIO_LEVELS) of a ratio objective: token, sequence, ..., or {name, "
        "**hyper-parameters}, e.g. {name: chunk, chunk_boundaries: [0, 2, 5]}.",
        "token",
    )
    clip: Option = _option(
        "Clip form (CLIP_FORMS; see docs/algorithms.md) of a ratio objective: ppo, dual_clip, cispo, sapo, none, ..., "
        "or {name, **hyper-parameters}, e.g. {name: ppo, eps_low: 0.2, eps_high: 0.28}.",
        "ppo",
    )
    aggregation: Option | None = _help(
        "Loss aggregation (AGGREGATIONS): a name or {name, **hyper-parameters}, e.g. {name: seq_mean_token_sum_norm, "
        "max_len: 3000}; null = the mode the objective declares for its published form (registry meta "
        "'aggregation', e.g. seq_mean_token_mean for gvpo, disco, conspo, reg_grpo), else token_mean. Resolved when "
        "the config is built; a mode that contradicts the objective's is refused.",
        replaces="aggregation_args",
    )
    credit: list[Option] = _help(
        "Per-action credit rules (CREDIT_RULES), applied in order, each a name or {name, **hyper-parameters}, e.g. "
        "[{name: tree, width_keep_fraction: 0.5}, noise_aware_steps]; [] = every action gets its sample's advantage.",
        factory=list,
        replaces="credit_args",
    )
    teacher: TeacherConfig | None = _help(
        "The teacher of on-policy distillation (genalign.teachers): {source: model, model: PATH} (another model of "
        "the family, same tokenizer), {source: self, weights: base|current, context: TEMPLATE} (the policy's own "
        "weights with privileged context) or {source: remote, remote: {url: ...}}; read by the options whose needs "
        "name a teacher signal (e.g. algorithm.credit: [opd]). null: no teacher."
    )
    kl_coef: float = _help("β of the KL penalty to the reference policy; 0 = no reference model is loaded.", 0.0)
    kl_estimator: Literal["k1", "k2", "k3"] = _help("KL estimator.", "k3")
    kl_placement: Literal["loss", "reward"] = _help(
        "Add the KL to the loss per action, or subtract it from the reward.", "loss"
    )
    kl_importance_correction: Literal["none", "token", "sequence"] = _help(
        "Multiply the per-action KL term by the importance ratio πθ/π_old (token or sequence ratio): TRL's "
        "use_bias_correction_kl (on by default in TRL 1.16, with its importance_sampling_level); 'none' = TRL with it "
        "off. Needs kl_coef > 0 and kl_placement = 'loss'.",
        "none",
    )
    entropy_coef: float = _help("Entropy bonus coefficient c (loss −= c·H).", 0.0)
    regularizer: Option | None = _help(
        "Extra per-action regulariser (REGULARIZERS), added with regularizer_coef: a name or {name, "
        "**hyper-parameters}.",
        replaces="regularizer_args",
    )
    regularizer_coef: float = _help("Weight of the regulariser in the per-action loss.", 1.0)
    inner_epochs: int = _help("μ: passes over each rollout batch.", 1)
    update_schedule: Option = _option(
        "How the passes over a rollout batch are arranged (genalign.algorithms.update_schedules.UPDATE_SCHEDULES): 'standard' "
        "(inner_epochs passes) or SFPO ([222]: fast_steps passes, reposition θ0 + α(θK − θ0), one slow pass), e.g. "
        "{name: sfpo, fast_steps: 3, alpha: 0.8, optimizer_state: keep}.",
        "standard",
        replaces="update_schedule_args",
    )
    minibatches: int = _help("Optimizer steps per pass (the batch is split into this many optimisation batches).", 1)
    micro_batch_size: int = _help("Samples per forward/backward (gradient accumulation inside a minibatch).", 8)
    score_only_trained: bool = _help(
        "Score each sample in the update only up to its last trained action (non-zero advantage), and run the output "
        "head only on the trained actions: the untrained tokens that credit token_subsample drops (NAT [220], "
        "S-GRPO [312]) or a zero-advantage group cost no forward or backward. Needs a family with "
        "trained_action_scoring (single-turn causal_lm), objective clipped_ratio with a ratio level whose ratio of "
        "action t reads actions <= t (token, prefix_geometric, cumulative, min_prefix), and no loss term on "
        "untrained actions (kl_coef with kl_placement loss, entropy_coef, regularizer).",
        False,
    )
    sample_sources: list[Option] = _help(
        "Sample-source rules (genalign.sampling.SAMPLE_SOURCES), applied in order between the prompt stream and the "
        "rollout, each a name or {name, **hyper-parameters}, e.g. [depo, {name: gfpo, samples: 16}]: which prompts, "
        "how many samples each, which samples are trained on.",
        factory=list,
        replaces="sample_source_args",
    )
    drop_zero_std_groups: bool = _help("Leave groups whose rewards all agree out of the update.", False)
    dynamic_sampling: DynamicSamplingConfig = _help("DAPO dynamic sampling.", factory=DynamicSamplingConfig)
    async_rollout: AsyncRolloutConfig = _help(
        "Asynchronous off-policy rollouts overlapped with the update.", factory=AsyncRolloutConfig
    )

    def __post_init__(self) -> None:
        convert_options(self, "algorithm")  # options given in Python as names or mappings
        if self.aggregation is None:  # the default follows the objective; every reader sees a registered mode
            self.aggregation = Option(declared_aggregation(self.objective.name) or "token_mean")

    def prompts_to_sample(self) -> int:
        """Prompts drawn per step (all processes): more than ``prompts_per_step`` with dynamic sampling."""
        if not self.dynamic_sampling.enabled:
            return self.prompts_per_step
        return math.ceil(self.prompts_per_step * self.dynamic_sampling.oversample)

    def update_phases(self) -> int:
        """How many times the update runs its epochs × minibatches over a rollout batch (objective meta ``phases``)."""
        return int(options("objectives").meta(self.objective.name).get("phases", 1))

    def update_passes(self) -> int:
        """Passes over each rollout batch: ``inner_epochs``, or what ``update_schedule`` sets (SFPO: K + 1)."""
        from genalign.algorithms.update_schedules import schedule_passes

        return schedule_passes(self.update_schedule, inner_epochs=self.inner_epochs)

    def optimizer_steps_per_update(self) -> int:
        """Optimizer steps per rollout batch: phases × passes (inner epochs) × minibatches."""
        return self.update_phases() * self.update_passes() * self.minibatches

    def is_ratio_objective(self) -> bool:
        """The objective is a ratio level × a clip form (objective meta ``ratio``): ``ratio_level`` and ``clip`` apply."""
        return bool(options("objectives").meta(self.objective.name).get("ratio", False))

    def objective_kwargs(self) -> dict[str, Any]:
        """Keyword arguments the objective is bound with (ratio level and clip form included for ratio objectives)."""
        from genalign import algorithms as alg

        return alg.objective_hyperparameters(self.objective, ratio_level=self.ratio_level, clip=self.clip)

    def advantage_stage(self) -> Any:
        """The :class:`~genalign.algorithms.AdvantageStage` of these options: combiner, KL in the reward, shapers,
        estimator and credit rules, validated and bound (raises on a bad name or hyper-parameter)."""
        from genalign import algorithms as alg

        return alg.AdvantageStage.build(
            combiner=self.reward_combination,
            estimator=self.advantage,
            shapers=self.reward_shaping,
            credit=self.credit,
            advantage_clip=self.advantage_clip,
            kl_in_reward=self.kl_coef if self.kl_placement == "reward" else 0.0,
            kl_estimator=self.kl_estimator,
            zero_std_tol=self.dynamic_sampling.std_tol,
        )

    def loss_plan(self) -> Any:
        """The :class:`~genalign.algorithms.LossPlan` of these options: objective (with its ratio level and clip
        form), KL in the loss, regulariser, entropy bonus and aggregation, validated and bound."""
        from genalign import algorithms as alg

        return alg.LossPlan.build(
            objective=self.objective,
            ratio_level=self.ratio_level,
            clip=self.clip,
            regularizer=self.regularizer,
            regularizer_coef=self.regularizer_coef,
            kl_coef=self.kl_coef if self.kl_placement == "loss" else 0.0,
            kl_estimator=self.kl_estimator,
            kl_importance=self.kl_importance_correction,
            entropy_coef=self.entropy_coef,
            aggregation=self.aggregation,
        )

    def needs(self) -> dict[str, list[str]]:
        """The signals the configured methods read (:mod:`genalign.algorithms.signals`), each with the options that
        need it (those a family produces are checked against its capabilities at config load)."""
        wanted: dict[str, list[str]] = {}
        chosen = [(f"algorithm.credit rule {o.name!r}", "credit", o) for o in self.credit]
        chosen += [(f"algorithm.reward_shaping {o.name!r}", "shapers", o) for o in self.reward_shaping]
        chosen.append((f"algorithm.objective = {self.objective.name!r}", "objectives", self.objective))
        chosen += [(f"algorithm.sample_sources rule {o.name!r}", "sample_sources", o) for o in self.sample_sources]
        if self.regularizer is not None:
            chosen.append((f"algorithm.regularizer = {self.regularizer.name!r}", "regularizers", self.regularizer))
        if self.is_ratio_objective():  # the ratio level and clip form read inputs too
            chosen.append((f"algorithm.ratio_level = {self.ratio_level.name!r}", "ratio_levels", self.ratio_level))
            chosen.append((f"algorithm.clip = {self.clip.name!r}", "clips", self.clip))
        for label, key, option in chosen:
            for need in options(key).meta(option.name).get("needs", ()):
                wanted.setdefault(need, []).append(label)
        if self.kl_coef > 0:
            wanted.setdefault("kl", []).append(f"algorithm.kl_coef = {self.kl_coef}")
        if self.teacher is not None and self.teacher.source == "remote":  # the server scores the sampled token ids
            wanted.setdefault("action_ids", []).append("algorithm.teacher (source: remote)")
        if self.entropy_coef:
            wanted.setdefault("entropy", []).append(f"algorithm.entropy_coef = {self.entropy_coef}")
        return wanted

    def validate(self) -> None:
        for name in ("group_size", "prompts_per_step", "inner_epochs", "minibatches", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algorithm.{name} = {getattr(self, name)} must be >= 1.")
        if self.advantage_clip is not None and not self.advantage_clip > 0:
            raise ConfigError(
                f"algorithm.advantage_clip = {self.advantage_clip} must be > 0 (advantages are clipped to [-c, c]), "
                "or null for no clipping."
            )
        if self.kl_coef < 0:
            raise ConfigError(f"algorithm.kl_coef = {self.kl_coef} must be >= 0.")
        if self.kl_importance_correction != "none" and (self.kl_coef == 0 or self.kl_placement != "loss"):
            raise ConfigError(
                f"algorithm.kl_importance_correction = {self.kl_importance_correction!r} weights the KL term of the "
                f"loss, but kl_coef = {self.kl_coef} and kl_placement = {self.kl_placement!r}; set kl_coef > 0 with "
                "kl_placement = 'loss', or kl_importance_correction = 'none'."
            )
        check_algorithm_options(self)
        if self.group_size < 2:  # after the names are checked: reads each option's registry meta
            check_group_free(self)
        if self.score_only_trained:
            check_score_only_trained(self)
        self._check_update_schedule()
        if self.async_rollout.enabled:
            self.async_rollout.validate()
            check_async_rollout(self)

    def _check_update_schedule(self) -> None:
        """Its keywords (``inner_epochs`` is the trainer's), then, for a schedule whose pass count checks values
        (binding ``code``), the pass count itself."""
        schedules, schedule = options("update_schedules"), self.update_schedule
        try:
            check_hyperparameters(schedules, schedule.name, schedule.args, supplied=("inner_epochs",))
            if schedules.binding(schedule.name) == "code":
                self.update_passes()
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"algorithm.update_schedule: {err}") from None
        if self.update_schedule.name != "standard" and self.update_phases() > 1:
            raise ConfigError(
                f"algorithm.update_schedule = {self.update_schedule.name!r} with algorithm.objective = "
                f"{self.objective.name!r}, which updates in {self.update_phases()} phases; use "
                "update_schedule='standard' with it."
            )

    @property
    def fully_on_policy(self) -> bool:
        """One optimizer step per rollout batch: old log-probs equal the detached current ones."""
        return self.optimizer_steps_per_update() == 1


@dataclass
class OptimConfig:
    optimizer: Literal["adamw", "adamw_fused", "adafactor", "sgd", "adamw_8bit"] = _help(
        "torch AdamW; AdamW with the fused kernel; torch Adafactor (factored second moments, little memory); SGD "
        "(with momentum); 8-bit AdamW from bitsandbytes (GPU, pip install bitsandbytes).",
        "adamw",
    )
    lr: float = _help("Learning rate.", 1e-5)
    weight_decay: float = _help("Weight decay (decoupled for AdamW and Adafactor).", 0.0)
    betas: list[float] = _help("AdamW betas.", factory=lambda: [0.9, 0.999])
    eps: float = _help("AdamW epsilon.", 1e-8)
    momentum: float = _help("SGD momentum.", 0.0)
    schedule: Literal["constant", "linear", "cosine"] = _help("LR schedule after warm-up.", "constant")
    warmup_steps: int = _help("Linear warm-up optimizer steps.", 0)
    max_grad_norm: float | None = _help("Clip the global gradient norm; null = no clipping.", 1.0)
    lr_scale: dict[str, float] = _help(
        "Learning-rate factors by parameter name, {glob: factor} (first match wins, others 1), e.g. "
        "{'model.visual.*': 0.1}; names as in policy.modules_to_train()[k].named_parameters().",
        factory=dict,
    )

    def validate(self) -> None:
        if self.lr <= 0:
            raise ConfigError(f"optim.lr = {self.lr} must be > 0.")
        for pattern, factor in self.lr_scale.items():
            if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not factor > 0:
                raise ConfigError(
                    f"optim.lr_scale[{pattern!r}] = {factor!r} must be a number > 0 (freeze modules with the policy's "
                    "freezing options instead)."
                )
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"optim.betas = {self.betas} must be two numbers in [0, 1).")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"optim.momentum = {self.momentum} must be in [0, 1).")
        if self.optimizer == "adamw_8bit" and importlib.util.find_spec("bitsandbytes") is None:
            raise ConfigError(
                "optim.optimizer = 'adamw_8bit' needs the bitsandbytes package (GPU): pip install bitsandbytes, or "
                "use 'adamw'."
            )


@dataclass
class EvalConfig:
    every: int = _help("Evaluate on data.eval every N steps; 0 = only before and after training.", 0)
    num_prompts: int = _help("Held-out prompts per evaluation.", 64)
    batch_size: int = _help("Prompts per evaluation rollout call.", 32)
    accuracy_reward: str | None = _help("Reward label reported as accuracy (default: the first reward).")
    at_start: bool = _help("Evaluate before the first update.", True)
    seed: int = _help(
        "Seed of the evaluation's sampling noise, the same at every evaluation and for every run.seed, so evaluations "
        "differ only by the weights; the training generators are restored after each evaluation.",
        0,
    )
    reset_to_best_every: int = _help(
        "VAPR [18]: every N steps (a multiple of eval.every) reset the policy and its reference to the weights of the "
        "best held-out evaluation so far (causal LM / VLM with full fine-tuning and a frozen reference copy); 0 = off.",
        0,
    )

    def validate(self) -> None:
        if self.every < 0:
            raise ConfigError(f"eval.every = {self.every} must be >= 0.")
        if self.reset_to_best_every < 0 or (self.reset_to_best_every and (
                not self.every or self.reset_to_best_every % self.every)):  # fmt: skip
            raise ConfigError(f"eval.reset_to_best_every = {self.reset_to_best_every} must be 0 (off) or a positive "
                              f"multiple of eval.every = {self.every} (a reset follows an evaluation); set eval.every.")  # fmt: skip
        if self.seed < 0:
            raise ConfigError(f"eval.seed = {self.seed} must be >= 0.")
        check_seed("eval.seed", self.seed)
        for name in ("num_prompts", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"eval.{name} = {getattr(self, name)} must be >= 1.")


def _resolve_policy_config(value: Any, where: str) -> type:
    from genalign.policies import family_config_class, family_names

    if not isinstance(value, dict) or "family" not in value:
        raise ConfigError(f"{where}: needs 'family' (one of {', '.join(family_names())}).")
    try:
        return family_config_class(value["family"])
    except KeyError as err:
        raise ConfigError(f"{where}.family: {err}") from None


@dataclass
class TrainConfig:
    policy: Any = field(
        default=None,
        metadata={"help": "Model family, weights and sampling settings.", "resolve": _resolve_policy_config},
    )
    data: DataConfig = _help("Prompt sources.", factory=DataConfig)
    rewards: list[RewardSpec] = _help("Reward functions and weights.", factory=list)
    algorithm: AlgorithmConfig = _help("Group-relative optimisation options.", factory=AlgorithmConfig)
    optim: OptimConfig = _help("Optimizer and schedule.", factory=OptimConfig)
    eval: EvalConfig = _help("Held-out evaluation.", factory=EvalConfig)
    run: RunConfig = _help("Output, logging, checkpoints.", factory=RunConfig)
    hardware: HardwareConfig = _help(
        "The hardware this config is sized for; genalign plan and genalign validate check that it fits.",
        factory=lambda: HardwareConfig(),
    )

    def validate(self) -> None:
        if self.policy is None:
            raise ConfigError("policy: missing; give at least policy.family and the model path.")
        if not self.rewards:
            raise ConfigError(
                "rewards: empty; list at least one reward function (e.g. - fn: exact_match; from Python: "
                "genalign.train(config, rewards=[my_reward]))."
            )
        check_capabilities(self.algorithm, self.policy)
        check_validation_reset(self)
        check_sizes(self)
        check_reward_count(self.algorithm, self.rewards)
        labels = [r.label for r in self.rewards]
        for i, spec in enumerate(self.rewards):
            try:
                reward_arguments_of(spec.fn)  # the reward exists (a registered name, a callable, an importable path)
            except (KeyError, ValueError, TypeError, ImportError, OSError, AttributeError) as err:
                raise ConfigError(f"rewards[{i}].fn: {err}") from None
            check_reward_args(i, spec)
            if labels.count(spec.label) > 1:
                raise ConfigError(f"rewards[{i}]: label {spec.label!r} is used twice; set a distinct 'name'.")
        if self.eval.accuracy_reward is not None and self.eval.accuracy_reward not in labels:
            raise ConfigError(
                f"eval.accuracy_reward = {self.eval.accuracy_reward!r} is not a reward label; use one of {labels}."
            )
