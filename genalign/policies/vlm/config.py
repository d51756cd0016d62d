"""Configuration of the vision-language policy (``policy.family: vlm``) and its declared capabilities."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

from genalign.policies.capabilities import FamilyTraits, PolicyCapabilities
from genalign.policies.lm.multi_turn_options import MULTI_TURN_STRUCTURE, MultiTurnOptions
from genalign.policies.lm.options import (
    AUTOREGRESSIVE_FEATURES,
    AUTOREGRESSIVE_STRUCTURE,
    AttnImplementation,
    LoRAConfig,
    TokenJudgeOptions,
    lora_reference_mode,
    token_capabilities,
)

LoraScope = Literal["language_model", "language_model_and_vision_tower"]
#: Score features only a family with images computes (:mod:`genalign.policies.vlm.perception`, :mod:`~genalign.policies.vlm.attention`).
VISION_FEATURES = frozenset({"logp_without_image", "visual_similarity", "logp_frames_shuffled", "modality_attention"})
#: The perception features of multi-turn rollouts: images blanked out (all of them, the observations' too). Not
#: offered there: ``visual_similarity`` (its image tokens would include observations a turn has not seen yet) and
#: ``logp_frames_shuffled`` (a trajectory's images are a prompt and its crops, not the frames of a video).
MULTI_TURN_VISION_FEATURES = frozenset({"logp_without_image"})


@dataclass
class VLMPolicyConfig:
    """Configuration of the vision-language policy (``policy.family: vlm``)."""

    traits: ClassVar[FamilyTraits] = FamilyTraits(
        workload="vision_token",
        image_inputs=True,
        sample_batch_field="rollout_batch_size",
        action_unit="completion length (tokens)",
    )

    family: Literal["vlm"] = field(default="vlm", metadata={"help": "Model family; selects this adapter."})
    model: str = field(
        default="builtin:shapes-vlm",
        metadata={
            "help": "Model folder (or 'builtin:<name>') of an image-text-to-text model (Qwen2-VL, Qwen2.5-VL, "
            "Qwen3-VL, Gemma 3, Idefics3 / SmolVLM).",
            "path": True,
            "hub_id": True,
        },
    )
    processor: str | None = field(
        default=None,
        metadata={
            "help": "Processor folder (or 'builtin:<name>'); None uses the model folder.",
            "path": True,
            "hub_id": True,
        },
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(
        default="float32", metadata={"help": "Parameter dtype of the model."}
    )
    attn_implementation: AttnImplementation = field(
        default="sdpa", metadata={"help": "Attention kernel passed to transformers."}
    )
    image_column: str = field(default="image", metadata={"help": "Row column holding the image(s) of the prompt."})
    image_root: str | None = field(
        default=None, metadata={"help": "Directory that relative image paths are resolved against.", "path": True}
    )
    video_column: str = field(
        default="video",
        metadata={
            "help": "Row column holding the video(s) of the prompt (a file path, a list of frames, an array "
            "[F, H, W, 3]); architectures with native video only (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA-OneVision)."
        },
    )
    video_fps: float = field(
        default=2.0, metadata={"help": "Frames per second sampled from a video (at most max_frames), > 0."}
    )
    max_frames: int = field(default=16, metadata={"help": "Most frames sampled from one video, >= 1."})
    min_pixels: int = field(default=56 * 56, metadata={"help": "Images smaller than this area are upscaled."})
    max_pixels: int = field(default=1280 * 28 * 28, metadata={"help": "Images larger than this area are downscaled."})
    system_prompt: str | None = field(default=None, metadata={"help": "System message prepended to every chat."})
    max_new_tokens: int = field(default=256, metadata={"help": "Maximum completion length in tokens."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of training rollouts (> 0)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus mass of training rollouts, in (0, 1]."})
    top_k: int = field(default=0, metadata={"help": "Top-k of training rollouts; 0 disables it."})
    eval_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of evaluation rollouts."})
    stop: list[str] = field(default_factory=list, metadata={"help": "Strings that end a completion."})
    rollout_batch_size: int = field(
        default=16, metadata={"help": "Samples per `generate` call (memory knob; does not change the samples' law)."}
    )
    freeze_vision_tower: bool = field(
        default=False, metadata={"help": "Keep the vision encoder (and its merger) frozen."}
    )
    lora: LoRAConfig = field(
        default_factory=LoRAConfig, metadata={"help": "LoRA adapters (rank 0 trains every trainable weight)."}
    )
    lora_scope: LoraScope = field(
        default="language_model",
        metadata={"help": "Where LoRA goes: the language model only, or the vision tower too."},
    )
    reference: Literal["auto", "lora_disabled", "frozen_copy", "none"] = field(
        default="auto",
        metadata={
            "help": "Reference policy of the KL term: 'lora_disabled' (same model, adapters off), 'frozen_copy' (the "
            "original weights loaded again, lazily), 'auto' (the first with LoRA, else the second), 'none'."
        },
    )
    logprob_chunk_size: int = field(
        default=1024, metadata={"help": "Completion tokens sent through the output head at once when scoring."}
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in backward."})
    block_markers: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Strings that open the 2nd, 3rd, ... text block of a completion, found in order (rollout "
            "structure block_ids, e.g. ['<answer>']), for role-specific segment advantages (credit rule "
            "role_segments); [] = no blocks."
        },
    )
    token_judge: TokenJudgeOptions = field(
        default_factory=TokenJudgeOptions,
        metadata={
            "help": "Token judge whose judged spans of each completion become the token_judgement rollout signal "
            "(e.g. {judge: counted_claims}: claims against the row's annotated counts); off without a judge."
        },
    )
    multi_turn: MultiTurnOptions = field(
        default_factory=MultiTurnOptions,
        metadata={
            "help": "Multi-turn rollouts: environments and tools (image observations flow into the next turn), turn "
            "and token limits (unset: one turn)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the rollout sampler."})

    def validate(self) -> None:
        if not 1 <= self.min_pixels <= self.max_pixels:
            raise ValueError(
                f"policy.min_pixels={self.min_pixels} and policy.max_pixels={self.max_pixels} must satisfy "
                "1 <= min_pixels <= max_pixels"
            )
        if self.video_fps <= 0:
            raise ValueError(f"policy.video_fps={self.video_fps} must be > 0 (frames per second sampled from a video)")
        if self.max_frames < 1:
            raise ValueError(f"policy.max_frames={self.max_frames} must be >= 1 (frames sampled from one video)")
        for name in ("temperature", "eval_temperature"):
            if getattr(self, name) <= 0:
                raise ValueError(f"policy.{name}={getattr(self, name)} must be > 0 (sampling only)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"policy.top_p={self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError(f"policy.top_k={self.top_k} must be >= 0 (0 disables top-k)")
        if self.max_new_tokens < 1:
            raise ValueError(f"policy.max_new_tokens={self.max_new_tokens} must be >= 1")
        if self.logprob_chunk_size < 1:
            raise ValueError(f"policy.logprob_chunk_size={self.logprob_chunk_size} must be >= 1")
        if self.rollout_batch_size < 1:
            raise ValueError(f"policy.rollout_batch_size={self.rollout_batch_size} must be >= 1")
        lora_reference_mode(self.lora, self.reference)  # the LoRA options, and the reference they allow
        if not all(self.stop):
            raise ValueError(f"policy.stop={self.stop} contains an empty string; remove it")
        if not all(isinstance(marker, str) and marker for marker in self.block_markers):
            raise ValueError(f"policy.block_markers={self.block_markers} must hold non-empty strings")
        self.token_judge.validate("policy.token_judge")
        self.multi_turn.validate()
        self.multi_turn.check_lengths(max_new_tokens=self.max_new_tokens)

    def capabilities(self) -> PolicyCapabilities:
        """The token features and completion structure of causal LMs (KL unless ``reference='none'``), plus the
        perception features ``logp_without_image``, ``visual_similarity`` and ``logp_frames_shuffled`` and, with ``block_markers``, the text
        blocks ``block_ids`` (with a ``token_judge``, ``token_judgement``). With ``multi_turn``: the structure of multi-turn rollouts and
        :data:`MULTI_TURN_VISION_FEATURES` (text blocks assume one turn)."""
        kinds = {"model", "self"} | ({"reference"} if self.reference != "none" else set())
        teachers = {"teachers": frozenset(kinds), "teacher_limits": VLM_TEACHER_LIMITS}
        if self.multi_turn.enabled:
            features = AUTOREGRESSIVE_FEATURES | MULTI_TURN_VISION_FEATURES
            capabilities = token_capabilities(
                self.reference, features=features, structure=MULTI_TURN_STRUCTURE, group_size=self.multi_turn.group_size
            )
            return replace(capabilities, **teachers)
        blocks = frozenset({"block_ids"}) if self.block_markers else frozenset()
        blocks |= frozenset({"token_judgement"}) if self.token_judge.judge is not None else frozenset()
        capabilities = token_capabilities(
            self.reference,
            features=AUTOREGRESSIVE_FEATURES | VISION_FEATURES,
            structure=AUTOREGRESSIVE_STRUCTURE | blocks,
        )
        return replace(capabilities, **teachers)


#: Why a VLM hosts only model and self teachers (the config-load error says it): both score the stored processor
#: outputs (images included) through the family's own pass.
VLM_TEACHER_LIMITS = (
    "a teacher that sees privileged context would need each prompt re-rendered and its images run through the "
    "processor again, and a remote teacher would need the images sent with the token ids; neither is implemented "
    "(a teacher VLM with the same processor, or the policy's own base weights, score the stored inputs as they are); "
    "the full-distribution pass (vocabulary KLs, logit extrapolation) applies no VLM output head to hidden states "
    "(its head suppresses the vision tokens inside the scoring pass)"
)


CONFIG_CLASS = VLMPolicyConfig

__all__ = ["CONFIG_CLASS", "MULTI_TURN_VISION_FEATURES", "VISION_FEATURES", "LoraScope", "VLMPolicyConfig"]
