"""Configuration of the flow-matching policy: the model, sampling, tree rollouts and likelihood-free training (read
without torch or diffusers: the registries it names are read through :mod:`genalign.catalog.registries`).

Which credit a step gets (per-depth tree advantages, noise-aware weights, dense step gains) and which objective trains
the policy are algorithm choices (``algorithm.credit``, ``algorithm.objective``); this section says how the policy
samples and scores. :meth:`FlowPolicyConfig.capabilities` declares what its rollouts and scoring can supply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from genalign.catalog.registries import options
from genalign.policies.capabilities import REFERENCE_FEATURES, FamilyTraits, PolicyCapabilities
from genalign.policies.lora import LoRAConfig, LoRARules
from genalign.registry import did_you_mean
from genalign.schedulers.options import OdeSolverName, TrainStepsConfig

#: ``policy.lora`` of the flow family where the config does not set an option (the other options: LoRAConfig's).
FLOW_LORA_DEFAULTS = {"rank": 32, "alpha": 64.0, "target_modules": None}


def flow_lora(**options) -> LoRAConfig:
    """``policy.lora`` of the flow family: ``options`` over :data:`FLOW_LORA_DEFAULTS` (e.g. ``flow_lora(rank=8)``)."""
    return LoRAConfig(**(FLOW_LORA_DEFAULTS | options))


#: What the flow family accepts of ``policy.lora``. PiSSA / OLoRA initialisation and trained biases are left out: the
#: KL reference (and DiffusionNFT's old model) is the transformer with its adapters disabled; no dropout, so that
#: rollout and re-scoring run the same function; the adapters are saved in diffusers' LoRA format (no
#: modules_to_save).
FLOW_LORA = LoRARules(
    inits=(True, False, "gaussian", "orthogonal"),
    unsupported=("dropout", "bias", "modules_to_save"),
    unsupported_reason="the flow family trains adapters without dropout, on a base model its adapters-off reference "
    "keeps intact, saved in diffusers' LoRA format",
    null_targets="the architecture's attention projections",
)

#: Names accepted by ``ScoreRequest.kl_estimator``. A flow step is Gaussian with a shared std, so every name gives the
#: closed-form KL in mean space, ``|mean - mean_ref|^2 / (2 std^2)`` (the exact KL the k1/k2/k3 estimators estimate).
KL_ESTIMATORS = ("mean_space", "k1", "k2", "k3")


@dataclass
class TreeRolloutConfig:
    """Branch/tree rollouts (BranchGRPO [170]); ``group_size`` must equal ``branching ** len(split_steps)``. The
    per-depth credit of the leaves is the algorithm's credit rule ``tree``."""

    enabled: bool = field(default=False, metadata={"help": "Sample each group as the leaves of one trajectory tree."})
    split_steps: list[int] = field(
        default_factory=lambda: [0, 3, 6, 9], metadata={"help": "Steps where every node splits (SDE); ODE elsewhere."}
    )
    branching: int = field(default=2, metadata={"help": "Children per split (k); leaves = k ** len(split_steps)."})
    sde_steps: list[int] = field(
        default_factory=list, metadata={"help": "Extra stochastic steps that do not split (one child each)."}
    )
    slide_every: int = field(
        default=0, metadata={"help": "Move the splits slide_stride steps later every this many iterations (0 = fixed)."}
    )
    slide_stride: int = field(default=1, metadata={"help": "Steps the splits move each time (BranchGRPO-Mix)."})
    slide_mode: Literal["clamp", "cycle"] = field(
        default="clamp", metadata={"help": "At the last step: stay there ('clamp') or start again at 0 ('cycle')."}
    )
    trained_depths: list[int] | None = field(
        default=None, metadata={"help": "Depth pruning: depths (1 = children of the first split) that get gradient."}
    )
    train_sde_steps: bool = field(default=True, metadata={"help": "Also train the extra non-splitting SDE steps."})

    def validate(self, num_steps: int | None = None) -> None:
        if not self.enabled:
            return
        if self.branching < 2:
            raise ValueError(f"policy.tree.branching={self.branching} must be >= 2.")
        if not self.split_steps or self.split_steps != sorted(set(self.split_steps)) or min(self.split_steps) < 0:
            raise ValueError(f"policy.tree.split_steps={self.split_steps} must be non-empty, sorted, distinct, >= 0.")
        if num_steps is not None and max(self.split_steps + self.sde_steps) >= num_steps:
            raise ValueError(
                f"policy.tree.split_steps={self.split_steps} / sde_steps={self.sde_steps} must be < "
                f"policy.num_steps={num_steps}."
            )
        if self.slide_every < 0 or self.slide_stride < 1:
            raise ValueError(
                f"policy.tree.slide_every={self.slide_every} must be >= 0 and slide_stride={self.slide_stride} >= 1."
            )
        depth = len(self.split_steps)
        if self.trained_depths is not None and (
            not self.trained_depths or any(not 1 <= d <= depth for d in self.trained_depths)
        ):
            raise ValueError(
                f"policy.tree.trained_depths={self.trained_depths} must be a non-empty subset of 1..{depth}."
            )

    @property
    def num_leaves(self) -> int:
        return self.branching ** len(self.split_steps)


@dataclass
class LikelihoodFreeConfig:
    """Training without the SDE likelihood: the rollout keeps each sample's clean latent and ``K`` flow-matching
    points; the scorer returns the ELBO proxy as log-probs (V-GRPO [10], for the ratio objective) and, for
    DiffusionNFT (``algorithm.objective: nft``), the current / old / target velocities."""

    method: Literal["none", "nft", "elbo"] = field(
        default="none",
        metadata={
            "help": "none: SDE log-probs (Flow-GRPO); elbo: V-GRPO's ELBO proxy (ratio objective); nft: DiffusionNFT "
            "(keeps the old model; pair with algorithm.objective: nft)."
        },
    )
    num_timesteps: int = field(
        default=2, metadata={"help": "Flow-matching points (sigma, noise) per sample; each is one action."}
    )
    timestep_sampling: Literal["uniform", "logit_normal"] = field(
        default="uniform", metadata={"help": "Distribution of the training sigmas in (0, 1)."}
    )
    deterministic_rollout: bool = field(
        default=True, metadata={"help": "Sample training rollouts with the ODE (any solver works for these methods)."}
    )
    old_decay: float = field(
        default=0.9, metadata={"help": "DiffusionNFT old model: old <- decay old + (1 - decay) theta per update."}
    )
    elbo_scale: float = field(
        default=1.0, metadata={"help": "Log-likelihood proxy = -elbo_scale * flow-matching error."}
    )

    def validate(self) -> None:
        if self.num_timesteps < 1:
            raise ValueError(f"policy.likelihood_free.num_timesteps={self.num_timesteps} must be >= 1.")
        if not 0 <= self.old_decay < 1:
            raise ValueError(f"policy.likelihood_free.old_decay={self.old_decay} must be in [0, 1).")
        if self.elbo_scale <= 0:
            raise ValueError(f"policy.likelihood_free.elbo_scale={self.elbo_scale} must be > 0.")


@dataclass
class NoiseCalibrationConfig:
    """DenseGRPO [148] reward-aware exploration: a noise level per timestep, adjusted after every rollout so that the
    spread of the dense step rewards it induces meets a target (:mod:`genalign.policies.flow.noise_calibration`).
    Needs the rollout's ``step_rewards`` (credit rule ``dense_step_gains`` or ``vgpo_values``)."""

    enabled: bool = field(default=False, metadata={"help": "Calibrate the SDE noise level of each timestep."})
    target_spread: float | None = field(
        default=None,
        metadata={
            "help": "Target within-group std of each step's reward gain; None = the mean over the trained steps "
            "(equalise exploration across timesteps)."
        },
    )
    rate: float = field(default=0.5, metadata={"help": "level <- level * (target / spread) ** rate per rollout."})
    max_factor: float = field(default=1.5, metadata={"help": "Bound on the change of a level per rollout (>= 1)."})
    min_level: float = field(default=0.05, metadata={"help": "Smallest calibrated noise level."})
    max_level: float = field(default=1.5, metadata={"help": "Largest calibrated noise level."})

    def validate(self) -> None:
        if not self.enabled:
            return
        if self.target_spread is not None and not self.target_spread > 0:
            raise ValueError(f"policy.noise_calibration.target_spread={self.target_spread} must be > 0 or null.")
        if not (self.rate > 0 and self.max_factor >= 1):
            raise ValueError(
                f"policy.noise_calibration.rate={self.rate} must be > 0 and max_factor={self.max_factor} >= 1."
            )
        if not 0 < self.min_level <= self.max_level:
            raise ValueError(
                f"policy.noise_calibration needs 0 < min_level={self.min_level} <= max_level={self.max_level}."
            )


@dataclass
class NoiseSearchConfig:
    """Smart-GRPO [152]: a cross-entropy search over each prompt's initial noise before the rollout
    (:mod:`genalign.policies.flow.noise_search`); the initial latent carries no log-probability, so the behaviour
    log-probs of the SDE steps stay exact."""

    enabled: bool = field(default=False, metadata={"help": "Search each prompt's initial noise toward high reward."})
    rounds: int = field(default=3, metadata={"help": "Refinement rounds (N)."})
    candidates: int = field(default=8, metadata={"help": "Candidate noises per prompt and round (K)."})
    elites: int = field(default=2, metadata={"help": "Top candidates that refit the distribution (T)."})
    smoothing: float = field(default=0.7, metadata={"help": "Weight of the elites' fit in each update (1 = CEM)."})
    init_std: float = field(default=1.0, metadata={"help": "Initial std of the search distribution N(0, s^2)."})
    min_std: float = field(default=0.05, metadata={"help": "Floor on the refined std."})
    group_start: Literal["mean", "distribution"] = field(
        default="mean",
        metadata={
            "help": "'mean': every group member starts at the refined mean (the paper's optimised noise; diversity "
            "from the SDE); 'distribution': each member draws from N(mean, std^2)."
        },
    )

    def validate(self) -> None:
        if not self.enabled:
            return
        if self.rounds < 1 or self.candidates < 2 or not 1 <= self.elites <= self.candidates:
            raise ValueError(
                f"policy.noise_search needs rounds >= 1, candidates >= 2 and 1 <= elites <= candidates; got "
                f"rounds={self.rounds}, candidates={self.candidates}, elites={self.elites}."
            )
        if not (0 < self.smoothing <= 1 and self.init_std > 0 and 0 <= self.min_std <= self.init_std):
            raise ValueError(
                f"policy.noise_search needs 0 < smoothing <= 1, init_std > 0 and 0 <= min_std <= init_std; got "
                f"smoothing={self.smoothing}, init_std={self.init_std}, min_std={self.min_std}."
            )


@dataclass
class FlowPolicyConfig:
    """Flow-matching text-to-image / text-to-video policy."""

    traits: ClassVar[FamilyTraits] = FamilyTraits(
        workload="flow",
        media_samples=True,
        export_format="diffusers",
        suggested_lora_rank=32,
        sample_batch_field="sample_batch_size",
        action_unit="trained denoising steps per sample",
    )

    family: Literal["flow"] = field(default="flow", metadata={"help": "Policy family (selects this schema)."})
    model: str = field(
        default="",
        metadata={
            "help": "Local diffusers folder (model_index.json) of an SD3/FLUX/Wan pipeline.",
            "path": True,
            "hub_id": True,
        },
    )
    architecture: str = field(
        default="auto",
        metadata={
            "help": "Registered flow architecture (genalign.pipelines.architectures: sd3, flux, wan, ...); 'auto' "
            "reads it from the pipeline class."
        },
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(
        default="float32", metadata={"help": "Weights dtype; latents and log-probs stay float32."}
    )
    source_column: str = field(
        default="image",
        metadata={
            "help": "Row column of the source image (path, PIL image or {'bytes', 'path'}) for architectures that take "
            "one: image-to-image (sd3_img2img), editing (flux_kontext), image-to-video first frame (wan_i2v)."
        },
    )
    strength: float = field(
        default=1.0,
        metadata={
            "help": "Image-to-image (sd3_img2img): how far the source is noised, in (0, 1]; a schedule of num_steps "
            "skips its first num_steps - int(num_steps * strength) steps (diffusers' img2img). 1 = from pure noise."
        },
    )
    height: int = field(default=512, metadata={"help": "Output height in pixels."})
    width: int = field(default=512, metadata={"help": "Output width in pixels."})
    num_frames: int = field(default=1, metadata={"help": "Video frames (Wan: 1 + multiple of 4); 1 for images."})
    fps: int = field(
        default=16,
        metadata={"help": "Frames per second of videos (the model's own rate: Wan 16, Wan2.2 TI2V 24); rewards receive "
                  "it as the column fps, samples are written and logged at it."},
    )  # fmt: skip
    num_steps: int = field(default=10, metadata={"help": "Sampling steps of training rollouts (denoising reduction)."})
    eval_num_steps: int = field(default=40, metadata={"help": "Sampling steps of evaluation rollouts."})
    guidance_scale: float = field(
        default=4.5, metadata={"help": "CFG scale in rollouts and training (FLUX: embedded guidance); 1 = CFG-free."}
    )
    eval_guidance_scale: float | None = field(
        default=None, metadata={"help": "CFG scale for evaluation (None = same)."}
    )
    negative_prompt: str = field(default="", metadata={"help": "Negative prompt of the unconditional branch."})
    max_sequence_length: int = field(default=128, metadata={"help": "Text tokens for T5-style encoders."})
    dynamics: str = field(default="flow_sde", metadata={"help": "SDE dynamics: ode, flow_sde, dance_sde, cps."})
    noise_level: float = field(
        default=0.7, metadata={"help": "Dynamics strength (flow_sde a ~0.7, dance_sde eta ~0.3)."}
    )
    group_initial_noise: Literal["independent", "shared"] = field(
        default="independent",
        metadata={
            "help": "Training rollouts: 'shared' starts every sample of a group from the same x_T (DanceGRPO), so "
            "reward differences within a group come only from the SDE noise the trained steps are credited for."
        },
    )
    log_prob_reduction: Literal["mean", "sum"] = field(
        default="mean", metadata={"help": "Step log-prob over latent elements: mean (reference code) or sum."}
    )
    log_prob_form: Literal["gaussian", "squared_error"] = field(
        default="gaussian",
        metadata={
            "help": "Step log-prob: 'gaussian' (the Gaussian log-density) or 'squared_error' (Flow-GRPO's published "
            "CPS code: -(x' - mean)^2 with every constant, 1/(2 std^2) included, dropped). The published ratio is the "
            "Gaussian one raised to 2 std^2, so a CPS recipe's clip range means the same only with 'squared_error'."
        },
    )
    ode_solver: OdeSolverName = field(
        default="euler",
        metadata={
            "help": "Solver of the deterministic (ODE) steps of rollouts: euler, or ab2 (2nd-order Adams-Bashforth, "
            "one network call per step, MixGRPO-Flash); SDE steps and their log-probs are unchanged. Not for trees."
        },
    )
    eval_ode_solver: OdeSolverName | None = field(
        default=None,
        metadata={
            "help": "Solver of evaluation rollouts (None = ode_solver). Set it to compare recipes trained with "
            "different solvers under one evaluation protocol: the solver alone changes the images (and scores)."
        },
    )
    train_steps: TrainStepsConfig = field(
        default_factory=TrainStepsConfig, metadata={"help": "Stochastic/trained steps."}
    )
    tree: TreeRolloutConfig = field(
        default_factory=TreeRolloutConfig, metadata={"help": "Branch/tree rollouts (BranchGRPO, TempFlow, G2RPO)."}
    )
    likelihood_free: LikelihoodFreeConfig = field(
        default_factory=LikelihoodFreeConfig,
        metadata={"help": "Likelihood-free training (DiffusionNFT, V-GRPO) instead of SDE log-probs."},
    )
    noise_calibration: NoiseCalibrationConfig = field(
        default_factory=NoiseCalibrationConfig, metadata={"help": "DenseGRPO per-timestep noise calibration."}
    )
    noise_search: NoiseSearchConfig = field(
        default_factory=NoiseSearchConfig, metadata={"help": "Smart-GRPO search of the initial noise."}
    )
    lora: LoRAConfig = field(
        default_factory=lambda: flow_lora(),
        metadata={
            "help": "LoRA adapters of the transformer (rank 0 trains every weight); unset options keep the flow "
            "defaults: rank 32, alpha 64, target_modules null (the architecture's attention projections).",
            "absorbs": {
                "lora_rank": "rank",
                "lora_alpha": "alpha",
                "lora_target_modules": "target_modules",
                "lora_use_dora": "use_dora",
                "lora_use_rslora": "use_rslora",
                "lora_init_weights": "init_lora_weights",
            },
        },
    )
    sample_batch_size: int = field(
        default=0,
        metadata={
            "help": "Samples per denoising forward in rollouts (0 = all at once); set it to the trainer's "
            "micro_batch_size so that rollout and score see the same batches (bit-exact ratio). Tree rollouts "
            "sample max(1, sample_batch_size // leaves) trees at a time."
        },
    )
    prompt_cache_size: int = field(default=1024, metadata={"help": "Prompts whose embeddings are kept (LRU)."})
    ema_decay: float = field(default=0.0, metadata={"help": "EMA of trainable weights for evaluation (0 = off)."})
    cfg_batching: Literal["separate", "batched"] = field(
        default="separate",
        metadata={
            "help": "Classifier-free guidance branches: two calls (separate), or one call of twice the batch "
            "(batched, as diffusers; rollout and scoring alike, so re-scoring stays exact)."
        },
    )
    anchor_every: int = field(
        default=0,
        metadata={
            "help": "SAGE-GRPO's moving anchor [76]: the KL reference is a snapshot of the trained weights taken "
            "every this many steps (0 = the base model: LoRA adapters disabled)."
        },
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in backward."})
    seed: int = field(default=0, metadata={"help": "Seed of initial noise, SDE noise and random step choices."})

    def validate(self) -> None:
        if not self.model:
            raise ValueError("policy.model is empty; set it to a local diffusers folder of an SD3/FLUX/Wan pipeline.")
        self._validate_architecture()
        options("sde_dynamics").meta(self.dynamics)  # a registered name (else the valid ones, with a did-you-mean)
        options("ode_solvers").meta(self.ode_solver)
        if self.eval_ode_solver is not None:
            options("ode_solvers").meta(self.eval_ode_solver)
        if self.tree.enabled and self.ode_solver != "euler":
            raise ValueError(
                f"policy.ode_solver={self.ode_solver!r} with policy.tree.enabled: tree rollouts take Euler ODE steps; "
                "set policy.ode_solver: euler or disable the tree."
            )
        positive = ("height", "width", "num_frames", "fps", "num_steps", "eval_num_steps", "max_sequence_length")
        for name in (*positive, "prompt_cache_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"policy.{name}={getattr(self, name)} must be >= 1.")
        if self.sample_batch_size < 0:
            raise ValueError(f"policy.sample_batch_size={self.sample_batch_size} must be >= 0 (0 = whole batch).")
        if self.noise_level < 0:
            raise ValueError(f"policy.noise_level={self.noise_level} must be >= 0.")
        self._validate_sources()
        self.lora.validate(FLOW_LORA)
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"policy.ema_decay={self.ema_decay} must be in [0, 1) (0 disables EMA).")
        if not (isinstance(self.anchor_every, int) and self.anchor_every >= 0):
            raise ValueError(
                f"policy.anchor_every={self.anchor_every!r} must be an integer >= 0 (0 = no moving anchor)."
            )
        if self.dtype == "float16" and self.lora.rank == 0:
            raise ValueError("policy.dtype='float16' with lora.rank=0 trains float16 weights; use bfloat16 or LoRA.")
        self.train_steps.validate()
        self.tree.validate(self.num_steps)
        self.likelihood_free.validate()
        self._validate_exploration()
        if self.tree.enabled and self.likelihood_free.method != "none":
            raise ValueError(
                f"policy.tree.enabled with policy.likelihood_free.method={self.likelihood_free.method!r}: tree "
                "rollouts need SDE log-probs; disable one of them."
            )

    def _validate_sources(self) -> None:
        if not isinstance(self.source_column, str) or not self.source_column:
            raise ValueError(f"policy.source_column={self.source_column!r} must name a row column (default 'image').")
        if not 0.0 < self.strength <= 1.0:
            raise ValueError(f"policy.strength={self.strength} must be in (0, 1] (1 = start from pure noise).")
        if self.strength < 1.0 and (self.tree.enabled or self.noise_search.enabled or self.noise_calibration.enabled):
            raise ValueError(
                f"policy.strength={self.strength} (image-to-image) runs a shortened schedule from the noised source; "
                "tree rollouts, noise search and noise calibration plan the whole schedule from pure noise: disable "
                "policy.tree / policy.noise_search / policy.noise_calibration or set policy.strength: 1.0."
            )

    def _validate_architecture(self) -> None:
        choices = ["auto", *options("architectures").names()]
        if self.architecture not in choices:
            raise ValueError(
                f"policy.architecture={self.architecture!r} is not a registered flow architecture; use one of "
                f"{', '.join(choices)}.{did_you_mean(str(self.architecture), choices)}"
            )

    def _validate_exploration(self) -> None:
        """Noise calibration and noise search apply to independent SDE rollouts only."""
        calibration = self.noise_calibration
        calibration.validate()
        if calibration.enabled and not calibration.min_level <= self.noise_level <= calibration.max_level:
            raise ValueError(
                f"policy.noise_level={self.noise_level} must lie in [policy.noise_calibration.min_level, max_level] = "
                f"[{calibration.min_level}, {calibration.max_level}]: the calibration starts every step there."
            )
        self.noise_search.validate()
        if self.noise_search.enabled and self.group_initial_noise == "shared":
            raise ValueError(
                "policy.group_initial_noise='shared' has no effect with policy.noise_search.enabled (the search sets "
                "the initial noise; group_start: mean already shares it): use group_initial_noise: independent."
            )
        for name, option in (("noise_calibration", self.noise_calibration), ("noise_search", self.noise_search)):
            if option.enabled and (self.tree.enabled or self.likelihood_free.method != "none"):
                raise ValueError(
                    f"policy.{name}.enabled works with independent SDE rollouts only; disable policy.tree / "
                    "policy.likelihood_free or the option."
                )

    def capabilities(self) -> PolicyCapabilities:
        """SDE training: exact step log-probs (independent trajectories), Gaussian step entropy, mean-space KL and the
        reference's step log-probs (with LoRA: the reference is the model with adapters disabled), step noise levels,
        DenseGRPO step rewards and, for trees, the prefix tree. Likelihood-free training: the ELBO proxy as log-probs,
        the velocities of DiffusionNFT, KL and the reference's proxy with LoRA."""
        kl = set(REFERENCE_FEATURES) if self.lora.rank > 0 or self.anchor_every > 0 else set()
        search = self.noise_search.enabled  # Smart-GRPO [152] ranks initial noises with the trainer's reward
        method = self.likelihood_free.method
        common = {"rollout_calls_rewards": search, "teacher_limits": FLOW_TEACHER_LIMITS}
        if method == "elbo":  # the rollout records the proxy through the scorer's code path
            return PolicyCapabilities(rollout_logp_is_exact=True, signals=frozenset(kl), **common)
        if method == "nft":  # no log-probs are recorded: the objective reads velocities, never old log-probs
            return PolicyCapabilities(signals=frozenset(kl | {"velocity"}), **common)
        structure = {"step_std", "step_rewards"} | ({"prefix_tree"} if self.tree.enabled else set())
        # A tree runs the transformer on its nodes, not on the leaves the scorer re-runs: the batch composition differs,
        # so its recorded log-probs agree with the scores only to float rounding (~1e-6) and the trainer re-scores.
        return PolicyCapabilities(
            rollout_logp_is_exact=not self.tree.enabled,
            signals=frozenset({"entropy"} | kl | structure),
            group_size=self.tree.branching ** len(self.tree.split_steps) if self.tree.enabled else None,
            **common,
        )


#: Why a flow model hosts no teacher (the config-load error says it).
FLOW_TEACHER_LIMITS = (
    "a flow model's actions are denoising steps of latents, not tokens: there are no token ids for a teacher to "
    "score (distil a flow model with a reward model of the teacher's preferences instead)"
)


CONFIG_CLASS = FlowPolicyConfig
