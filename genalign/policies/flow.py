"""Flow-matching policy (SD3 / SD3.5, FLUX.1, Wan2.1) for Flow-GRPO [319], DanceGRPO and MixGRPO.

The action axis ``T`` is the denoising steps of a training rollout. ``rollout`` samples with the SDE dynamics of the
config at the stochastic steps and stores every latent ``x_0 .. x_S``, the cached prompt embeddings and the per-step
noise levels; ``score`` re-runs the transformer on the stored latents of the trained steps and evaluates the same
:meth:`FlowSDEScheduler.step` with ``prev_sample`` given, so ``Rollout.old_logp`` is exact
(``rollout_logp_is_exact = True``; the first ratio is 1 bit for bit when the trainer's micro-batches equal the
rollout's sampling chunks, ``sample_batch_size``; other splits agree to float rounding, ~1e-6).

Training pieces: LoRA on the attention projections (peft) with the reference policy = adapters disabled, KL in mean
space, classifier-free guidance recomputed in training with the unconditional branch detached (or guidance 1 /
FLUX's embedded guidance), EMA of the trainable weights for evaluation, gradient checkpointing, fp32 / bf16 / fp16
weights with float32 latents and log-probabilities. LoRA weights are saved in the format of diffusers'
``load_lora_weights``.

Options beyond independent SDE rollouts (issue 7):

* ``tree``: each group is the leaves of one trajectory tree (BranchGRPO [170], TempFlow-GRPO [168], G2RPO-style
  single split; :mod:`genalign.policies.flow_tree`); leaves are stored and scored like independent trajectories, and
  ``Rollout.info["nfe_per_sample"]`` reports the network evaluations per leaf. Trainer hook
  ``per_action_advantages(rollout, advantages [N]) -> [N, T]`` gives the per-depth credit.
* ``step_weighting="noise_aware"``: TempFlow-GRPO per-step weights in ``per_sample["action_weights"]``.
* ``step_rewards="dense"``: DenseGRPO [148] step advantages from the trainer hook
  ``dense_step_advantages(rollout, reward_fn) -> [N, T] | None``.
* ``likelihood_free``: DiffusionNFT / V-GRPO [10] (:mod:`genalign.policies.flow_likelihood_free`; ``build_policy``
  returns that subclass).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from genalign.algorithms import flow_credit
from genalign.assets import model_location
from genalign.pipelines.flow import (
    FlowLogProbPipeline,
    FlowTrajectory,
    adapters_disabled,
    concat_trajectories,
    denoise,
    denoise_tree,
    ode_complete,
    score_transitions,
)
from genalign.pipelines.flow_models import PromptEmbeddings
from genalign.policies.base import Rollout, ScoreOutput
from genalign.policies.flow_tree import TREE_PLAN_KEY, TreeRolloutConfig, plan_for_iteration, tree_step_advantages
from genalign.policies.flow_tree import trained_steps as tree_trained_steps
from genalign.schedulers.branching import noise_aware_step_weights
from genalign.schedulers.sde_dynamics import SDE_DYNAMICS
from genalign.schedulers.train_steps import StepMasks, TrainStepsConfig, select_train_steps

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Names accepted by ``score(kl_estimator=...)``. A flow step is Gaussian with a shared std, so every name gives the
#: closed-form KL in mean space, ``|mean - mean_ref|^2 / (2 std^2)`` (the exact KL the k1/k2/k3 estimators estimate).
KL_ESTIMATORS = ("mean_space", "k1", "k2", "k3")
COND, UNCOND = "cond.", "uncond."  # per_sample key prefixes of the cached prompt embeddings


@dataclass
class LikelihoodFreeConfig:
    """Objectives without the SDE likelihood (:mod:`genalign.policies.flow_likelihood_free`)."""

    method: Literal["none", "nft", "elbo"] = field(
        default="none",
        metadata={"help": "none: SDE log-probs (Flow-GRPO); nft: DiffusionNFT; elbo: V-GRPO ELBO-surrogate ratio."},
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
    nft_beta: float = field(default=1.0, metadata={"help": "DiffusionNFT guidance strength beta of v+ / v-."})
    nft_advantage_clip: float = field(
        default=1.0, metadata={"help": "DiffusionNFT optimality r = 0.5 + 0.5 clip(A / this, -1, 1)."}
    )
    old_decay: float = field(
        default=0.9, metadata={"help": "DiffusionNFT old model: old <- decay old + (1 - decay) theta per update."}
    )
    elbo_scale: float = field(
        default=1.0, metadata={"help": "V-GRPO: log-likelihood proxy = -elbo_scale * flow-matching error."}
    )

    def validate(self) -> None:
        if self.num_timesteps < 1:
            raise ValueError(f"policy.likelihood_free.num_timesteps={self.num_timesteps} must be >= 1.")
        if self.nft_beta <= 0:
            raise ValueError(f"policy.likelihood_free.nft_beta={self.nft_beta} must be > 0.")
        if self.nft_advantage_clip <= 0:
            raise ValueError(f"policy.likelihood_free.nft_advantage_clip={self.nft_advantage_clip} must be > 0.")
        if not 0 <= self.old_decay < 1:
            raise ValueError(f"policy.likelihood_free.old_decay={self.old_decay} must be in [0, 1).")
        if self.elbo_scale <= 0:
            raise ValueError(f"policy.likelihood_free.elbo_scale={self.elbo_scale} must be > 0.")


@dataclass
class FlowPolicyConfig:
    """Flow-matching text-to-image / text-to-video policy."""

    family: Literal["flow"] = field(default="flow", metadata={"help": "Policy family (selects this schema)."})
    model: str = field(
        default="", metadata={"help": "Local diffusers folder (model_index.json) of an SD3/FLUX/Wan pipeline."}
    )
    architecture: Literal["auto", "sd3", "flux", "wan"] = field(
        default="auto", metadata={"help": "Model family; 'auto' reads it from the pipeline class."}
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(
        default="float32", metadata={"help": "Weights dtype; latents and log-probs stay float32."}
    )
    height: int = field(default=512, metadata={"help": "Output height in pixels."})
    width: int = field(default=512, metadata={"help": "Output width in pixels."})
    num_frames: int = field(default=1, metadata={"help": "Video frames (Wan: 1 + multiple of 4); 1 for images."})
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
    ode_solver: Literal["euler", "ab2"] = field(
        default="euler",
        metadata={"help": "Solver of ODE steps after the last SDE step (ab2 = 2nd order, MixGRPO-Flash)."},
    )
    train_steps: TrainStepsConfig = field(
        default_factory=TrainStepsConfig, metadata={"help": "Stochastic/trained steps."}
    )
    tree: TreeRolloutConfig = field(
        default_factory=TreeRolloutConfig, metadata={"help": "Branch/tree rollouts (BranchGRPO, TempFlow, G2RPO)."}
    )
    step_rewards: Literal["terminal", "dense"] = field(
        default="terminal",
        metadata={"help": "dense: per-step advantages from reward gains of ODE-completed predictions (DenseGRPO)."},
    )
    step_weighting: Literal["none", "noise_aware"] = field(
        default="none",
        metadata={"help": "Per-step advantage weights: noise_aware = proportional to the step's std (TempFlow-GRPO)."},
    )
    likelihood_free: LikelihoodFreeConfig = field(
        default_factory=LikelihoodFreeConfig,
        metadata={"help": "Likelihood-free objectives (DiffusionNFT, V-GRPO) instead of SDE log-probs."},
    )
    lora_rank: int = field(default=32, metadata={"help": "LoRA rank on attention projections; 0 trains all weights."})
    lora_alpha: float = field(default=64.0, metadata={"help": "LoRA alpha."})
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "Module names for LoRA (None = the architecture's attention projections)."}
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
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in backward."})
    seed: int = field(default=0, metadata={"help": "Seed of initial noise, SDE noise and random step choices."})

    def validate(self) -> None:
        if not self.model:
            raise ValueError("policy.model is empty; set it to a local diffusers folder of an SD3/FLUX/Wan pipeline.")
        SDE_DYNAMICS.get(self.dynamics)
        positive = (
            "height",
            "width",
            "num_frames",
            "num_steps",
            "eval_num_steps",
            "max_sequence_length",
            "prompt_cache_size",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"policy.{name}={getattr(self, name)} must be >= 1.")
        if self.sample_batch_size < 0:
            raise ValueError(f"policy.sample_batch_size={self.sample_batch_size} must be >= 0 (0 = whole batch).")
        if self.noise_level < 0:
            raise ValueError(f"policy.noise_level={self.noise_level} must be >= 0.")
        if self.lora_rank < 0:
            raise ValueError(f"policy.lora_rank={self.lora_rank} must be >= 0 (0 = full fine-tuning).")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"policy.ema_decay={self.ema_decay} must be in [0, 1) (0 disables EMA).")
        if self.dtype == "float16" and self.lora_rank == 0:
            raise ValueError("policy.dtype='float16' with lora_rank=0 trains float16 weights; use bfloat16 or LoRA.")
        self.train_steps.validate()
        self.tree.validate(self.num_steps)
        self.likelihood_free.validate()
        if self.tree.enabled and self.likelihood_free.method != "none":
            raise ValueError(
                f"policy.tree.enabled with policy.likelihood_free.method={self.likelihood_free.method!r}: tree "
                "rollouts need SDE log-probs; disable one of them."
            )


class FlowPolicy:
    """The :class:`~genalign.policies.base.Policy` of flow-matching models. Build it with :func:`build_policy`."""

    family = "flow"
    rollout_logp_is_exact = True

    def __init__(self, config: FlowPolicyConfig, device: str | torch.device = "cpu") -> None:
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device).manual_seed(config.seed)
        self.mask_generator = torch.Generator().manual_seed(config.seed + 1)
        self.iteration = 0
        dtype = DTYPES[config.dtype]
        self.sampler = FlowLogProbPipeline.from_pretrained(
            model_location(config.model),
            torch_dtype=dtype,
            device=self.device,
            architecture=config.architecture,
            dynamics=config.dynamics,
            noise_level=config.noise_level,
            log_prob_reduction=config.log_prob_reduction,
        )
        self.transformer: nn.Module = self.sampler.pipe.transformer
        if dtype == torch.float16:  # fp16 VAEs overflow; decoding in float32 costs little
            self.sampler.pipe.vae.to(torch.float32)
        for module in self.sampler.pipe.components.values():
            if isinstance(module, nn.Module):
                module.requires_grad_(False)
                module.eval()
        self._add_trainable_weights()
        if config.gradient_checkpointing:
            self.transformer.enable_gradient_checkpointing()
        self._ema: list[Tensor] | None = None
        if config.ema_decay > 0:
            self._ema = [p.detach().float().clone() for p in self.trainable_parameters()]
        self._embedding_cache: OrderedDict[str, tuple[PromptEmbeddings, PromptEmbeddings | None]] = OrderedDict()

    # ------------------------------------------------------------------------------------------- weights
    def _add_trainable_weights(self) -> None:
        if self.config.lora_rank == 0:
            self.transformer.requires_grad_(True)
            return
        from diffusers.training_utils import cast_training_params
        from peft import LoraConfig

        targets = self.config.lora_target_modules or list(self.sampler.arch.lora_target_modules)
        self.transformer.add_adapter(
            LoraConfig(
                r=self.config.lora_rank,
                lora_alpha=self.config.lora_alpha,
                target_modules=targets,
                init_lora_weights=True,
            )
        )
        cast_training_params(self.transformer, dtype=torch.float32)  # LoRA weights train in float32

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.transformer.parameters() if p.requires_grad]

    def modules_to_train(self) -> list[nn.Module]:
        return [self.transformer]

    def set_step(self, step: int) -> None:
        """Training iteration, used by the sliding-window strategy (MixGRPO)."""
        self.iteration = step

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Update the EMA of the trainable weights (no-op when ``ema_decay`` is 0)."""
        if self._ema is None:
            return
        decay = self.config.ema_decay
        for average, param in zip(self._ema, self.trainable_parameters(), strict=True):
            average.mul_(decay).add_(param.detach().float(), alpha=1 - decay)

    def state_dict_extra(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "ema": self._ema}

    def load_state_dict_extra(self, state: dict[str, Any]) -> None:
        self.iteration = int(state.get("iteration", 0))
        if state.get("ema") is not None:
            self._ema = [t.float().clone() for t in state["ema"]]

    def _swap_ema(self) -> None:
        """Exchange the live trainable weights with their EMA (called twice around an evaluation rollout)."""
        assert self._ema is not None
        for index, param in enumerate(self.trainable_parameters()):
            live = param.detach().float().clone()
            param.data.copy_(self._ema[index].to(param.dtype))
            self._ema[index] = live

    # --------------------------------------------------------------------------------------------- text
    def _embeddings(self, prompts: list[str]) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        """Embeddings ``[N, ...]`` of ``prompts``; each distinct prompt is encoded once and kept in an LRU cache of
        ``prompt_cache_size`` prompts (SD3.5 embeddings are a few MB each)."""
        distinct = list(dict.fromkeys(prompts))
        missing = [p for p in distinct if p not in self._embedding_cache]
        if missing:
            cond, uncond = self.sampler.encode(
                missing,
                negative_prompt=self.config.negative_prompt,
                max_sequence_length=self.config.max_sequence_length,
            )
            for i, prompt in enumerate(missing):
                self._embedding_cache[prompt] = (
                    {k: v[i : i + 1] for k, v in cond.items()},
                    None if uncond is None else {k: v[i : i + 1] for k, v in uncond.items()},
                )
        for prompt in distinct:
            self._embedding_cache.move_to_end(prompt)
        pairs = [self._embedding_cache[p] for p in prompts]
        cond = {k: torch.cat([c[k] for c, _ in pairs]) for k in pairs[0][0]}
        uncond = None if pairs[0][1] is None else {k: torch.cat([u[k] for _, u in pairs]) for k in pairs[0][1]}
        while len(self._embedding_cache) > max(self.config.prompt_cache_size, len(distinct)):
            self._embedding_cache.popitem(last=False)
        return cond, uncond

    # ------------------------------------------------------------------------------------------ rollout
    @torch.no_grad()
    def rollout(
        self, rows: list[dict[str, Any]], group_size: int, *, mode: Literal["train", "eval"] = "train"
    ) -> Rollout:
        """Sample ``group_size`` outputs per row. ``eval``: ODE sampling with ``eval_num_steps`` (and EMA weights)."""
        self._check_rows(rows, group_size)
        cfg = self.config
        training = mode == "train"
        if training and cfg.tree.enabled:
            return self._tree_rollout(rows, group_size)
        expanded = [row for row in rows for _ in range(group_size)]
        prompts = [row["prompt"] for row in expanded]
        n = len(expanded)
        num_steps = cfg.num_steps if training else cfg.eval_num_steps
        guidance = cfg.guidance_scale if training or cfg.eval_guidance_scale is None else cfg.eval_guidance_scale
        if training:
            masks = select_train_steps(
                cfg.train_steps,
                num_steps=num_steps,
                num_samples=n,
                iteration=self.iteration,
                generator=self.mask_generator,
            )
        else:
            no_steps = torch.zeros(n, num_steps, dtype=torch.bool)
            masks = StepMasks(sde=no_steps, trained=no_steps.clone())  # evaluation: deterministic ODE sampling
        use_ema = not training and self._ema is not None
        if use_ema:
            self._swap_ema()
        try:
            trajectory, outputs, cond, uncond = self._sample(
                prompts,
                masks.sde,
                num_steps=num_steps,
                guidance=guidance,
                record_latents=training,
                group_size=group_size if training else 1,
            )
        finally:
            if use_ema:
                self._swap_ema()
        action_mask = (masks.trained.to(trajectory.stochastic.device) & trajectory.stochastic).float()  # [N, T]
        per_sample: dict[str, Tensor | list[Any]] = {}
        if training:
            per_sample["latents"] = trajectory.latents  # [N, T + 1, ...]
            per_sample["noise_level"] = masks.sde.float().to(self.device) * cfg.noise_level  # [N, T]
            per_sample |= {COND + k: v for k, v in cond.items()}
            per_sample |= {UNCOND + k: v for k, v in (uncond or {}).items()}
            if cfg.step_weighting == "noise_aware":
                per_sample["action_weights"] = self._noise_aware_weights(action_mask)  # [N, T]
        cfg_passes = 1 if uncond is None else 2
        return Rollout(
            rows=expanded,
            outputs=outputs,
            group_ids=torch.arange(len(rows)).repeat_interleave(group_size),
            old_logp=trajectory.log_probs * action_mask,  # [N, T] on the policy's device, like score()
            action_mask=action_mask,
            per_sample=per_sample,
            info={"nfe_per_sample": num_steps * cfg_passes, "num_steps": num_steps, "guidance_scale": guidance},
        )

    @staticmethod
    def _check_rows(rows: list[dict[str, Any]], group_size: int) -> None:
        """Every row needs a string ``prompt``; ``group_size >= 1``."""
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1.")
        for index, row in enumerate(rows):
            if not isinstance(row.get("prompt"), str):
                raise ValueError(
                    f"row {index} has no string 'prompt' field (keys: {sorted(row)}); flow policies need one."
                )

    def _sample(
        self,
        prompts: list[str],
        sde_mask: Tensor,
        *,
        num_steps: int,
        guidance: float,
        record_latents: bool,
        group_size: int = 1,
    ) -> tuple[FlowTrajectory, list[Any], PromptEmbeddings, PromptEmbeddings | None]:
        """Denoise one sample per prompt (``sde_mask`` ``[N, S]``) in chunks of ``sample_batch_size``.

        With ``group_initial_noise: shared`` and ``group_size > 1`` every run of ``group_size`` consecutive samples
        starts from one ``x_T``. Returns the trajectory, the decoded outputs and the conditional / unconditional
        (``None`` when CFG-free) prompt embeddings.
        """
        cfg = self.config
        n = len(prompts)
        cond, uncond = self._embeddings(prompts)
        if not self.sampler.arch.uses_true_cfg or guidance == 1.0:
            uncond = None  # CFG-free (or FLUX's embedded guidance): no unconditional branch to run or store
        share = group_size > 1 and cfg.group_initial_noise == "shared"
        latents = self.sampler.prepare(
            n // group_size if share else n,
            height=cfg.height,
            width=cfg.width,
            num_frames=cfg.num_frames,
            num_inference_steps=num_steps,
            generator=self.generator,
        )  # [n, ...] or one per group
        if share:
            latents = latents.repeat_interleave(group_size, dim=0)  # [n, ...]: one x_T per group
        chunk = cfg.sample_batch_size or n
        pieces, outputs = [], []
        for start in range(0, n, chunk):
            part = slice(start, min(start + chunk, n))
            piece = denoise(
                self.sampler.arch,
                self.transformer,
                self.sampler.scheduler,
                latents[part],
                {k: v[part] for k, v in cond.items()},
                None if uncond is None else {k: v[part] for k, v in uncond.items()},
                guidance_scale=guidance,
                sde_mask=sde_mask[part],
                noise_level=cfg.noise_level,
                generator=self.generator,
                record_latents=record_latents,
                ode_solver=cfg.ode_solver,
                prompts=prompts[part],
            )
            pieces.append(piece)
            outputs += self.sampler.decode(piece.final, height=cfg.height, width=cfg.width)
        return concat_trajectories(pieces), outputs, cond, uncond

    def _tree_rollout(self, rows: list[dict[str, Any]], group_size: int) -> Rollout:
        """Training rollout as trajectory trees: one tree per row whose ``group_size`` leaves are the group."""
        cfg = self.config
        plan = plan_for_iteration(cfg.tree, num_steps=cfg.num_steps, iteration=self.iteration)
        if group_size != plan.num_leaves:
            raise ValueError(
                f"group_size={group_size} but the tree has {plan.num_leaves} leaves (branching={plan.branching} ** "
                f"{plan.depth} splits); set algorithm.group_size={plan.num_leaves} or change policy.tree."
            )
        expanded = [row for row in rows for _ in range(group_size)]
        n, num_steps = len(expanded), cfg.num_steps
        tree_prompts = [row["prompt"] for row in rows]
        cond, uncond = self._embeddings(tree_prompts)
        if not self.sampler.arch.uses_true_cfg or cfg.guidance_scale == 1.0:
            uncond = None
        roots = self.sampler.prepare(
            len(rows),
            height=cfg.height,
            width=cfg.width,
            num_frames=cfg.num_frames,
            num_inference_steps=num_steps,
            generator=self.generator,
        )
        trees_per_chunk = max(1, (cfg.sample_batch_size or n) // plan.num_leaves)
        pieces, outputs = [], []
        for start in range(0, len(rows), trees_per_chunk):
            part = slice(start, min(start + trees_per_chunk, len(rows)))
            piece = denoise_tree(
                self.sampler.arch,
                self.transformer,
                self.sampler.scheduler,
                roots[part],
                {k: v[part] for k, v in cond.items()},
                None if uncond is None else {k: v[part] for k, v in uncond.items()},
                plan=plan,
                guidance_scale=cfg.guidance_scale,
                noise_level=cfg.noise_level,
                generator=self.generator,
                record_latents=True,
                prompts=tree_prompts[part],
            )
            pieces.append(piece)
            outputs += self.sampler.decode(piece.final, height=cfg.height, width=cfg.width)
        trajectory = concat_trajectories(pieces)
        stochastic = plan.stochastic_steps().to(self.device).expand(n, num_steps)  # [N, T]
        trained = tree_trained_steps(cfg.tree, plan).to(self.device).expand(n, num_steps)  # [N, T]
        action_mask = (trained & trajectory.stochastic).float()  # [N, T]
        per_sample: dict[str, Tensor | list[Any]] = {
            "latents": trajectory.latents,  # [N, T + 1, ...]
            "noise_level": stochastic.float() * cfg.noise_level,  # [N, T]
            "tree_leaf": torch.arange(plan.num_leaves).repeat(len(rows)),  # [N]
        }
        per_sample |= {COND + k: v.repeat_interleave(group_size, dim=0) for k, v in cond.items()}
        per_sample |= {UNCOND + k: v.repeat_interleave(group_size, dim=0) for k, v in (uncond or {}).items()}
        if cfg.step_weighting == "noise_aware":
            per_sample["action_weights"] = self._noise_aware_weights(action_mask)  # [N, T]
        cfg_passes = 1 if uncond is None else 2
        evaluations = sum(piece.network_evaluations for piece in pieces) * cfg_passes
        return Rollout(
            rows=expanded,
            outputs=outputs,
            group_ids=torch.arange(len(rows)).repeat_interleave(group_size),
            old_logp=trajectory.log_probs * action_mask,  # [N, T]
            action_mask=action_mask,
            per_sample=per_sample,
            info={
                "nfe_per_sample": evaluations / n,
                "nfe_per_sample_independent": num_steps * cfg_passes,
                "num_steps": num_steps,
                "guidance_scale": cfg.guidance_scale,
                "tree_leaves": plan.num_leaves,
                TREE_PLAN_KEY: plan,
            },
        )

    def _noise_aware_weights(self, action_mask: Tensor) -> Tensor:
        """TempFlow-GRPO [168] weights ``[N, T]``: each trained step's transition std at the configured noise level,
        normalised to mean 1 over the trained steps (schedule of the current rollout)."""
        sigmas = self.sampler.scheduler.sigmas.float()  # [T + 1]
        steps = action_mask.shape[1]
        unit = torch.zeros(steps, 1)
        _, std = SDE_DYNAMICS.get(self.config.dynamics)(
            unit,
            unit,
            sigmas[:steps].cpu(),
            sigmas[1 : steps + 1].cpu(),
            noise_level=self.config.noise_level,
            sigma_max=float(sigmas[1]) if len(sigmas) > 1 else 1.0,
        )  # std: [T, 1]
        return noise_aware_step_weights(std[:, 0], action_mask.cpu() > 0).to(action_mask.device)  # [N, T]

    def per_action_advantages(self, rollout: Rollout, advantages: Tensor) -> Tensor:
        """Trainer hook: per-step advantages ``[N, T]`` of a tree rollout (per-depth BranchGRPO credit, width
        pruning) from the per-leaf advantages ``[N]`` of the WHOLE rollout; other rollouts, or advantages that are
        already per action, are returned unchanged."""
        plan = rollout.info.get(TREE_PLAN_KEY)
        if plan is None or advantages.dim() != 1:
            return advantages
        logp = rollout.old_logp if self.config.tree.node_reward == "probability_weighted" else None
        steps = tree_step_advantages(self.config.tree, plan, advantages.cpu(), None if logp is None else logp.cpu())
        return steps.to(advantages.device)  # [N, T]

    @torch.no_grad()
    def dense_step_advantages(
        self, rollout: Rollout, reward_fn: Callable[[list[dict[str, Any]], list[Any]], Tensor]
    ) -> Tensor | None:
        """Trainer hook (DenseGRPO [148]): per-step advantages ``[N, T]`` from the reward gain of each trained step,
        ``R(ODE completion of x_{t+1}) - R(ODE completion of x_t)``, normalised per step within each group; None when
        ``step_rewards`` is ``"terminal"`` (the trainer then keeps its usual advantages).

        Args:
            reward_fn: ``(rows [n], outputs [n]) -> [n]`` combined reward of decoded outputs (the trainer's rewards).
        """
        if self.config.step_rewards != "dense":
            return None
        data = rollout.per_sample
        if "latents" not in data:
            raise ValueError("dense step rewards need a training rollout with stored latents.")
        latents = data["latents"].to(self.device)  # [N, T + 1, ...]
        cond = {k[len(COND) :]: v.to(self.device) for k, v in data.items() if k.startswith(COND)}
        uncond = {k[len(UNCOND) :]: v.to(self.device) for k, v in data.items() if k.startswith(UNCOND)} or None
        guidance = float(rollout.info.get("guidance_scale", self.config.guidance_scale))
        num_steps = rollout.num_actions
        self.sampler.set_schedule(num_steps, latents[:, 0])
        trained = rollout.action_mask.bool()  # [N, T]
        needed = sorted({t for step in trained.any(0).nonzero().flatten().tolist() for t in (step, step + 1)})
        step_rewards = torch.full((len(rollout), num_steps + 1), float("nan"))  # [N, T + 1]
        chunk = self.config.sample_batch_size or len(rollout)
        for state in needed:
            for start in range(0, len(rollout), chunk):
                part = slice(start, min(start + chunk, len(rollout)))
                final = ode_complete(
                    self.sampler.arch,
                    self.transformer,
                    self.sampler.scheduler,
                    latents[part, state],
                    state,
                    {k: v[part] for k, v in cond.items()},
                    None if uncond is None else {k: v[part] for k, v in uncond.items()},
                    guidance_scale=guidance,
                )
                images = self.sampler.decode(final, height=self.config.height, width=self.config.width)
                step_rewards[part, state] = reward_fn(rollout.rows[part], images).float().cpu()
        advantages = flow_credit.dense_step_advantages(step_rewards, rollout.group_ids.cpu()).nan_to_num(0.0)  # [N, T]
        return (advantages * trained.cpu().float()).to(rollout.action_mask.device)

    # -------------------------------------------------------------------------------------------- score
    def score(self, rollout: Rollout, *, entropy: bool = False, kl_estimator: str | None = None) -> ScoreOutput:
        """Log-probs ``[n, T]`` of the stored transitions (grad only through trained steps); entropy / KL on request.

        The entropy of a step is that of its Gaussian (fixed by the schedule, no gradient); the KL is the closed form
        in mean space against the reference (LoRA adapters disabled) for every name in :data:`KL_ESTIMATORS`.
        """
        if kl_estimator is not None and kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"kl_estimator={kl_estimator!r} is not supported by the flow policy; use one of {KL_ESTIMATORS}."
            )
        if kl_estimator is not None and self.config.lora_rank == 0:
            raise ValueError(
                "KL needs a reference policy; with lora_rank=0 there is none. Use LoRA or set the KL weight to 0."
            )
        data = rollout.per_sample
        if "latents" not in data:
            raise ValueError(
                "this rollout has no stored latents (an evaluation rollout?); score only training rollouts."
            )
        latents = data["latents"].to(self.device)  # [n, T + 1, ...]
        cond = {k[len(COND) :]: v.to(self.device) for k, v in data.items() if k.startswith(COND)}
        uncond = {k[len(UNCOND) :]: v.to(self.device) for k, v in data.items() if k.startswith(UNCOND)} or None
        self.sampler.set_schedule(rollout.num_actions, latents[:, 0])  # the rollout's schedule, even after an eval
        scores = score_transitions(
            self.sampler.arch,
            self.transformer,
            self.sampler.scheduler,
            latents,
            rollout.action_mask.bool().to(self.device),
            cond,
            uncond,
            guidance_scale=float(rollout.info.get("guidance_scale", self.config.guidance_scale)),
            noise_level=data["noise_level"].to(self.device),
            reference_context=(lambda: adapters_disabled(self.transformer)) if kl_estimator else None,
        )
        return ScoreOutput(logp=scores.log_probs, entropy=scores.entropy if entropy else None, kl=scores.kl)

    # ---------------------------------------------------------------------------------------- save/load
    def save(self, directory: Path) -> None:
        """LoRA: ``pytorch_lora_weights.safetensors`` readable by ``pipe.load_lora_weights(directory)``;
        full fine-tuning: the transformer as a diffusers folder ``directory/transformer``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.config.lora_rank == 0:
            self.transformer.save_pretrained(directory / "transformer")
            return
        from peft.utils import get_peft_model_state_dict

        layers = get_peft_model_state_dict(self.transformer)
        type(self.sampler.pipe).save_lora_weights(directory, transformer_lora_layers=layers)

    def load(self, directory: Path) -> None:
        """Load weights written by :meth:`save` into the current adapter (or the full transformer)."""
        directory = Path(directory)
        if self.config.lora_rank == 0:
            loaded = type(self.transformer).from_pretrained(directory / "transformer")
            self.transformer.load_state_dict(loaded.state_dict())
            return
        from peft.utils import set_peft_model_state_dict

        state = self.sampler.pipe.lora_state_dict(directory)
        state = state[0] if isinstance(state, tuple) else state
        prefix = "transformer."
        adapter_state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        if not adapter_state:
            raise ValueError(
                f"no transformer LoRA weights found in {str(directory)!r}; was it written by FlowPolicy.save?"
            )
        result = set_peft_model_state_dict(self.transformer, adapter_state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(
                f"LoRA weights in {str(directory)!r} do not fit this model: unexpected keys {unexpected[:5]}."
            )


def build_policy(config: FlowPolicyConfig, device: str | torch.device = "cpu") -> FlowPolicy:
    """Build the flow-matching policy of ``config`` on ``device`` (the likelihood-free subclass when
    ``config.likelihood_free.method`` is not ``"none"``)."""
    if config.likelihood_free.method != "none":
        from genalign.policies.flow_likelihood_free import DiffusionNFTFlowPolicy, LikelihoodFreeFlowPolicy

        policy_class = DiffusionNFTFlowPolicy if config.likelihood_free.method == "nft" else LikelihoodFreeFlowPolicy
        return policy_class(config, device)
    return FlowPolicy(config, device)


CONFIG_CLASS = FlowPolicyConfig
