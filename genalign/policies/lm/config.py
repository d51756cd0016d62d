"""The causal-LM family's config (``policy.family: causal_lm``) and its declared capabilities, importable without
torch (the policy itself: :mod:`genalign.policies.lm.causal`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

from genalign.policies.capabilities import FamilyTraits, PolicyCapabilities
from genalign.policies.lm.engines.vllm.options import VLLMOptions
from genalign.policies.lm.multi_turn_options import MULTI_TURN_GUIDANCE, MULTI_TURN_STRUCTURE, MultiTurnOptions
from genalign.policies.lm.options import (
    AUTOREGRESSIVE_FEATURES,
    AUTOREGRESSIVE_STRUCTURE,
    GUIDANCE_KEYS,
    AttnImplementation,
    LMTreeConfig,
    LoRAConfig,
    ProbeOptions,
    lora_reference_mode,
    token_capabilities,
)


@dataclass
class CausalLMPolicyConfig:
    """A causal LM policy: model, prompt rendering, sampling, scoring, LoRA and reference model."""

    traits: ClassVar[FamilyTraits] = FamilyTraits(workload="token", action_unit="completion length (tokens)")

    family: Literal["causal_lm"] = field(default="causal_lm", metadata={"help": "Policy family."})
    model: str = field(
        default="builtin:arith-lm",
        metadata={"help": "Model folder, or 'builtin:<name>' for a bundled model.", "path": True, "hub_id": True},
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "Tokenizer folder; None uses the model folder.", "path": True, "hub_id": True},
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(default="float32", metadata={"help": "Weight dtype."})
    attn_implementation: AttnImplementation | None = field(
        default=None,
        metadata={
            "help": "Attention kernel passed to transformers; null keeps transformers' choice (sdpa if supported)."
        },
    )
    use_chat_template: bool = field(
        default=False, metadata={"help": "Render prompts with the tokenizer's chat template."}
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message prepended (chat template only)."})
    chat_template: str | None = field(
        default=None, metadata={"help": "A Jinja chat template that replaces the tokenizer's (null keeps it)."}
    )
    max_prompt_tokens: int | None = field(default=512, metadata={"help": "Longest prompt in tokens; None = no limit."})
    on_long_prompt: Literal["error", "truncate_left", "skip"] = field(
        default="error",
        metadata={"help": "What to do with a prompt longer than max_prompt_tokens (skips are counted)."},
    )
    max_new_tokens: int = field(default=256, metadata={"help": "Longest completion in tokens."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature; log-probs are taken at it too."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]; 1 disables."})
    top_k: int = field(default=0, metadata={"help": "Sample among the k most likely tokens; 0 disables."})
    stop: list[str] = field(default_factory=list, metadata={"help": "Stop strings (cut from the decoded text)."})
    eval_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature for evaluation rollouts."})
    engine: Literal["hf", "static", "vllm"] = field(
        default="static", metadata={"help": "Rollout back-end: hf (generate), static (own KV-cache loop), vllm (GPU)."}
    )
    vllm: VLLMOptions = field(
        default_factory=VLLMOptions,
        metadata={
            "help": "engine: vllm only: server or colocated, tensor parallelism, prefix caching, GPU memory, LoRA."
        },
    )
    logprob_chunk_size: int = field(
        default=256, metadata={"help": "Tokens per chunk of the log-prob head (memory ~ 2 x chunk x vocab floats)."}
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in backward."})
    shared_prefix_scoring: bool = field(
        default=False,
        metadata={
            "help": "Score: encode each distinct prompt of a micro-batch once and run its group's completions against "
            "its K/V (same log-probs and gradients, less prompt work; not with gradient_checkpointing)."
        },
    )
    lora: LoRAConfig = field(default_factory=LoRAConfig, metadata={"help": "LoRA adapters."})
    probes: ProbeOptions = field(
        default_factory=ProbeOptions,
        metadata={"help": "Rollout-time probes some credit rules read (reference answer, MC values, blocks)."},
    )
    reference: Literal["auto", "lora_disabled", "frozen_copy", "none"] = field(
        default="auto",
        metadata={
            "help": "Reference model for KL: adapters disabled, a frozen copy, or none; auto picks; loaded lazily."
        },
    )
    tree: LMTreeConfig = field(
        default_factory=LMTreeConfig,
        metadata={"help": "Shared-prefix tree rollouts (static engine): split positions, branching, entropy splits."},
    )
    multi_turn: MultiTurnOptions = field(
        default_factory=MultiTurnOptions,
        metadata={"help": "Multi-turn rollouts: environments and tools, turn and token limits (unset: one turn)."},
    )
    routing_replay: bool = field(
        default=False,
        metadata={
            "help": "Mixture-of-experts models: record each token's experts when its rollout is scored and route it "
            "to them in every later scoring pass (Routing Replay [294]; docs/lm_architectures.md)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the rollout sampler's random generator."})

    def validate(self) -> None:
        checks: list[tuple[bool, str]] = [
            (self.temperature > 0, f"policy.temperature={self.temperature} must be > 0 (e.g. 1.0)."),
            (self.eval_temperature > 0, f"policy.eval_temperature={self.eval_temperature} must be > 0 (e.g. 1.0)."),
            (0 < self.top_p <= 1, f"policy.top_p={self.top_p} must be in (0, 1]; use 1.0 to disable."),
            (self.top_k >= 0, f"policy.top_k={self.top_k} must be >= 0; use 0 to disable."),
            (self.max_new_tokens >= 1, f"policy.max_new_tokens={self.max_new_tokens} must be >= 1."),
            (
                self.logprob_chunk_size >= 1,
                f"policy.logprob_chunk_size={self.logprob_chunk_size} must be >= 1 (e.g. 256).",
            ),
            (
                self.max_prompt_tokens is None or self.max_prompt_tokens >= 1,
                f"policy.max_prompt_tokens={self.max_prompt_tokens} must be >= 1 or null.",
            ),
            (all(self.stop), f"policy.stop={self.stop} contains an empty string; remove it."),
            (
                not (self.shared_prefix_scoring and self.gradient_checkpointing),
                "policy.shared_prefix_scoring=true reuses the prompt's KV cache, which gradient checkpointing drops; "
                "set one of policy.shared_prefix_scoring, policy.gradient_checkpointing to false.",
            ),
            (
                self.system_prompt is None or self.use_chat_template,
                "policy.system_prompt needs policy.use_chat_template=true (plain prompts have no system role).",
            ),
            (
                not (self.routing_replay and self.gradient_checkpointing),
                "policy.routing_replay=true with policy.gradient_checkpointing=true: the recomputed forward of the "
                "backward pass would route afresh; turn one of them off.",
            ),
            (
                not (self.routing_replay and self.multi_turn.enabled),
                "policy.routing_replay=true records the routes of one-turn rollouts; remove policy.multi_turn or set "
                "policy.routing_replay=false.",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        lora_reference_mode(self.lora, self.reference)  # the LoRA options, and the reference they allow
        self.probes.validate()
        self.tree.validate(max_new_tokens=self.max_new_tokens, engine=self.engine)
        self.vllm.check_policy(engine=self.engine, top_k=self.top_k, top_p=self.top_p)
        self.multi_turn.validate()
        self.multi_turn.check_lengths(max_new_tokens=self.max_new_tokens)
        if self.multi_turn.enabled:
            self._check_multi_turn()

    def _check_multi_turn(self) -> None:
        """The options a multi-turn rollout does not combine with."""
        checks = [
            (self.use_chat_template, "policy.multi_turn renders turns with the chat template; set "
             "policy.use_chat_template=true (and policy.chat_template when the tokenizer has none)."),
            (not self.tree.enabled, "policy.tree (shared-prefix trees) samples one turn; set policy.tree.enabled=false "
             "or remove policy.multi_turn."),
            (self.on_long_prompt != "skip", "policy.on_long_prompt='skip' would drop members of a multi-turn group; "
             "use 'error' or 'truncate_left'."),
        ]  # fmt: skip
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def capabilities(self) -> PolicyCapabilities:
        """Entropy, vocabulary terms, top-k log-probs, hidden states and raw-logit statistics from the chunked head
        pass; KL unless ``reference='none'``; truncation flags, segment ids, action ids, the token prefix tree, and the
        rollout-time probes of :mod:`genalign.policies.lm.probes` (``block_ids`` with ``probes.block_markers``);
        rollouts of given completions (``force``) and the guidance keys of :mod:`genalign.policies.lm.guidance`; every
        kind of teacher, writing ones too (model and self teachers only with multi-turn rollouts, :data:`MULTI_TURN_TEACHERS`, which honour
        the guidance ``hint`` only)."""
        if self.multi_turn.enabled:  # no forcing, single-turn trees or probes, and of guidance the hint only
            capabilities = token_capabilities(self.reference, features=AUTOREGRESSIVE_FEATURES | {"logit_stats"},
                                              structure=MULTI_TURN_STRUCTURE,
                                              group_size=self.multi_turn.group_size)  # fmt: skip
            teachers = self._teachers({"model", "self", "distribution"})
            return replace(capabilities, teachers=teachers, teacher_limits=MULTI_TURN_TEACHERS,
                           guidance=MULTI_TURN_GUIDANCE)  # fmt: skip
        capabilities = token_capabilities(
            self.reference,
            features=AUTOREGRESSIVE_FEATURES | {"logit_stats"},
            structure=AUTOREGRESSIVE_STRUCTURE | self.probes.structure(),
            group_size=self.tree.group_size if self.tree.enabled else None,
        )
        teachers = self._teachers({"model", "self", "context", "remote", "generate", "distribution"})
        if self.reference != "none":  # the reference's full next-token distribution, compared in the head pass
            capabilities = replace(capabilities, signals=capabilities.signals | {"ref_forward_kl", "ref_vocab_term"})
        return replace(capabilities, forced_completions=True, guidance=GUIDANCE_KEYS, teachers=teachers,
                       teacher_limits="", trained_action_scoring=True)  # fmt: skip

    def _teachers(self, kinds: set[str]) -> frozenset[str]:
        """``kinds``, and ``reference`` (a self-teacher with the base weights) unless ``reference='none'``."""
        return frozenset(kinds | ({"reference"} if self.reference != "none" else set()))


#: Why a multi-turn causal LM hosts only model and self teachers (the config-load error says it).
MULTI_TURN_TEACHERS = (
    "multi-turn rollouts interleave the environment's tokens with the model's turns: a prompt re-rendered with "
    "privileged context would lose the chat turns after it, and a remote teacher given the sampled token ids alone "
    "would miss the environment's tokens between them; a teacher model of the family (or the policy's own weights) "
    "scores the whole trajectory through the family's pass"
)


CONFIG_CLASS = CausalLMPolicyConfig

__all__ = ["CONFIG_CLASS", "MULTI_TURN_TEACHERS", "CausalLMPolicyConfig"]
