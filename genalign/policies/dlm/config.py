"""Configuration of the masked diffusion LM family (:mod:`genalign.policies.dlm.policy`): the model, its sampler,
its likelihood proxy and the optional trainable decoding policy (:mod:`genalign.policies.dlm`). Read without torch: the
registries it names are read through :mod:`genalign.catalog.registries`, and only a decoding policy's own checks
(building one) import its module."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

from genalign.catalog.registries import implementations, options
from genalign.policies.capabilities import FamilyTraits, PolicyCapabilities
from genalign.policies.lm.options import AttnImplementation, LoRAConfig, lora_reference_mode, token_capabilities
from genalign.registry import Option, check_hyperparameters
from genalign.schedulers.options import check_generation_args


@dataclass
class DiffusionLMPolicyConfig:
    """A masked diffusion LM, its sampler and its likelihood proxy."""

    #: no checkpointing suggestion: the diffusion-LM presets are planned without it (planning/depth.py)
    traits: ClassVar[FamilyTraits] = FamilyTraits(
        workload="masked_diffusion",
        suggested_lora_rank=128,
        suggest_checkpointing=False,
        action_unit="completion length (tokens)",
    )

    family: Literal["diffusion_lm"] = field(default="diffusion_lm", metadata={"help": "Policy family."})
    model: str = field(
        default="builtin:arith-dlm",
        metadata={"help": "Local model folder or 'builtin:<name>' (never downloaded).", "path": True, "hub_id": True},
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "Tokenizer folder; None uses the model folder.", "path": True, "hub_id": True},
    )
    architecture: Literal["masked_lm", "remote_code", "bidirectional_causal_lm"] = field(
        default="masked_lm",
        metadata={
            "help": "How to load the model: 'masked_lm' (AutoModelForMaskedLM: BERT, ModernBERT, the demo), "
            "'remote_code' (LLaDA / Dream checkpoints with their own code, trust_remote_code, local folder only), "
            "'bidirectional_causal_lm' (a Llama/Qwen body given a full, non-causal attention mask)."
        },
    )
    shifted_logits: bool = field(
        default=False,
        metadata={"help": "Logits at position j predict token j+1 (Dream, DiffuCoder); False for LLaDA and BERT."},
    )
    mask_token_id: int | None = field(
        default=None, metadata={"help": "Mask token id; None takes tokenizer.mask_token_id (LLaDA: 126336)."}
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(default="float32", metadata={"help": "Weight dtype."})
    attn_implementation: AttnImplementation | None = field(
        default=None,
        metadata={
            "help": "Attention kernel passed to transformers; null keeps transformers' choice (sdpa if supported)."
        },
    )
    use_chat_template: bool = field(default=False, metadata={"help": "Render prompts with the chat template."})
    system_prompt: str | None = field(default=None, metadata={"help": "System message (chat template only)."})
    max_prompt_tokens: int | None = field(default=512, metadata={"help": "Longest prompt in tokens; None = no limit."})
    on_long_prompt: Literal["error", "truncate_left", "skip"] = field(
        default="error", metadata={"help": "What to do with a prompt longer than max_prompt_tokens."}
    )
    gen_length: int = field(default=4, metadata={"help": "Answer length in tokens (LLaDA recipes: 256)."})
    block_length: int = field(
        default=4, metadata={"help": "Tokens per block, decoded left to right; divides gen_length."}
    )
    steps: int = field(default=4, metadata={"help": "Denoising steps in all; divisible by gen_length / block_length."})
    temperature: float = field(default=1.0, metadata={"help": "Gumbel-max temperature of training rollouts."})
    eval_temperature: float = field(default=0.0, metadata={"help": "Temperature of evaluation rollouts (0 = greedy)."})
    remasking: Literal["low_confidence", "random", "threshold"] = field(
        default="low_confidence", metadata={"help": "Which drawn tokens are committed at each step."}
    )
    confidence_threshold: float = field(
        default=0.9, metadata={"help": "For remasking='threshold': commit every token above this confidence."}
    )
    likelihood_proxy: Option = field(
        default_factory=lambda: Option("one_step"),
        metadata={
            "help": "Name in LIKELIHOOD_PROXIES: one_step (d1), mc_elbo, coupled (coupled-GRPO/ESPO), spg, trace, "
            "gdpo_quadrature (GDPO [36]), left_to_right (JustGRPO [35]); or {name, **hyper-parameters}, e.g. "
            "{name: mc_elbo, num_samples: 2, level: sequence}.",
            "replaces": "proxy_args",
        },
    )
    mask_seeds: Literal["per_inner_epoch", "per_rollout"] = field(
        default="per_inner_epoch",
        metadata={"help": "Re-draw the proxy's masks for every inner epoch (d1) or keep the rollout's masks."},
    )
    action_mask: Literal["through_first_eos", "all"] = field(
        default="through_first_eos",
        metadata={"help": "Trained answer tokens: up to and including the first EOS, or all gen_length tokens."},
    )
    decoding_policy: Option | None = field(
        default=None,
        metadata={
            "help": "Trainable decoding policy (genalign.policies.dlm.DECODING_POLICIES): 'count_schedule' (Co-GRPO "
            "[179], tokens per step) or 'order_head' (SAS [118], which positions), or {name, **hyper-parameters}, e.g. "
            "{name: count_schedule, init_logit: 3.0}; None = the heuristic sampler.",
            "replaces": "decoding_policy_args",
        },
    )
    decoding_policy_eval: Literal["argmax", "sample"] = field(
        default="argmax", metadata={"help": "Evaluation rollouts take the decoding policy's most likely decision."}
    )
    freeze_denoiser: bool = field(
        default=False,
        metadata={
            "help": "Train the decoding policy alone against the frozen model (SAS); checkpoints then hold the "
            "decoding policy and the tokenizer, the model is loaded from policy.model."
        },
    )
    lora: LoRAConfig = field(default_factory=LoRAConfig, metadata={"help": "LoRA adapters."})
    reference: Literal["auto", "lora_disabled", "frozen_copy", "none"] = field(
        default="auto",
        metadata={"help": "Reference policy for KL: base weights under disabled LoRA, a frozen copy, or none."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the sampler and of the mask seeds."})

    def __post_init__(self) -> None:  # options given in Python as names or mappings
        self.likelihood_proxy = Option.parse(self.likelihood_proxy, "policy.likelihood_proxy")
        if self.decoding_policy is not None:
            self.decoding_policy = Option.parse(self.decoding_policy, "policy.decoding_policy")

    def validate(self) -> None:
        proxy = self.likelihood_proxy
        check_hyperparameters(options("proxies"), proxy.name, proxy.args)  # unknown name or keyword
        reserved = {"mask_id", "seeds", "prompt_attention_mask", "decode_step"} & set(proxy.args)
        if reserved:
            raise ValueError(
                f"policy.likelihood_proxy sets {sorted(reserved)}, which the policy supplies itself; remove them."
            )
        check_generation_args(gen_length=self.gen_length, block_length=self.block_length, steps=self.steps, mask_id=0)
        checks: list[tuple[bool, str]] = [
            (self.temperature >= 0, f"policy.temperature={self.temperature} must be >= 0 (0 is greedy)."),
            (self.eval_temperature >= 0, f"policy.eval_temperature={self.eval_temperature} must be >= 0."),
            (
                0 < self.confidence_threshold <= 1,
                f"policy.confidence_threshold={self.confidence_threshold} must be in (0, 1] (e.g. 0.9).",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        lora_reference_mode(self.lora, self.reference)  # the LoRA options, and the reference they allow
        self._validate_decoding_policy()

    def _validate_decoding_policy(self) -> None:
        decoding = self.decoding_policy
        if decoding is None:
            if self.freeze_denoiser:
                raise ValueError(
                    "policy.freeze_denoiser needs policy.decoding_policy "
                    f"({', '.join(options('decoding_policies').names())}); set it or remove policy.freeze_denoiser."
                )
            return
        check_hyperparameters(options("decoding_policies"), decoding.name, decoding.args)
        if self.likelihood_proxy.name == "spg" and not self.freeze_denoiser:
            raise ValueError(
                "policy.likelihood_proxy='spg' gives two bound columns per answer that the SPG objective reads by "
                "position, so decoding actions cannot be appended; use another proxy or policy.freeze_denoiser=true."
            )
        steps_per_block = self.steps // (self.gen_length // self.block_length)
        implementations("decoding_policies").get(decoding.name)(  # its own checks (remasking), on a throwaway one
            self.block_length, steps_per_block, remasking=self.remasking, **decoding.args
        )

    def lora_task_type(self) -> str | None:
        """peft's ``task_type`` for the adapters: ``CAUSAL_LM`` for a causal body, none for a masked LM."""
        return "CAUSAL_LM" if self.architecture == "bidirectional_causal_lm" else None

    def capabilities(self) -> PolicyCapabilities:
        """The KL unless ``reference='none'``; no token features; the rollout structure ``path_logp`` with a decoding
        policy (module docstring)."""
        structure = frozenset({"path_logp"}) if self.decoding_policy is not None else frozenset()
        capabilities = token_capabilities(self.reference, features=frozenset(), structure=structure)
        return replace(capabilities, teacher_limits=DLM_TEACHER_LIMITS)


#: Why a masked diffusion LM hosts no teacher (the config-load error says it).
DLM_TEACHER_LIMITS = (
    "a masked diffusion LM scores its actions with a likelihood proxy (ELBO terms over masked positions, or one per "
    "sequence), not the left-to-right conditionals log π(o_t | x, o_<t) that a teacher's per-token log-probs are "
    "compared with, so a per-token distillation term would compare a proxy with a conditional"
)


CONFIG_CLASS = DiffusionLMPolicyConfig

__all__ = ["CONFIG_CLASS", "DiffusionLMPolicyConfig"]
