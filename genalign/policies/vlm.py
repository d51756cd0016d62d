"""Vision-language policy: Hugging Face image-text-to-text models (Qwen2-VL, Qwen2.5-VL) with image prompts.

The VLM path is the causal-LM path plus images carried correctly through generation, scoring and micro-batching
(R1-V / VLM-R1 / EasyR1-style group-relative training with verifiable rewards [65], [110], [129]):

1. **Prompts.** Each row's ``prompt`` (a string or a list of chat messages) becomes a chat with image blocks. The images
   come from the row's image column (one image or a list; paths, PIL images or ``{"bytes", "path"}`` dicts, see
   :mod:`genalign.data.images`) and are resized to ``[min_pixels, max_pixels]``. A string prompt may mark where images go
   with ``<image>``; without markers all images come first. Chat prompts mark them with ``{"type": "image"}`` blocks.
   The number of markers must equal the number of images, else a ``ValueError`` names the row.
2. **Processor outputs per sample.** The processor runs once on the batch of distinct prompts; its outputs are then
   cut per row: the prompt tokens, ``mm_token_type_ids`` (needed by recent transformers for Qwen2-VL's 3-D rotary
   positions), ``image_grid_thw`` (``[k, 3]``) and the flat ``pixel_values``, split with the grid sizes
   (:func:`split_images`: image ``j`` owns ``t_j * h_j * w_j`` rows). Each group member gets its row's tensors, and the
   ragged image tensors are stored per sample as lists in ``Rollout.per_sample``, so ``Rollout.select`` (micro-batches,
   filtering, group repetition) always keeps each sample's own patches; a batch concatenates them back in sample
   order (:func:`concat_images`).
3. **Fixed prompt width.** Prompts are left-padded to the longest prompt of the whole rollout and completions
   right-padded to ``T``; a micro-batch therefore feeds each sample the very same token grid as the whole batch, so
   its log-probs do not depend on how the batch is split (contract 2 of ``shared/ARCHITECTURE.md``).
4. **Scoring** runs the backbone once on ``prompt + completion`` with every processor output, then the output head on
   the hidden states of the real completion tokens only, in chunks, at the sampling temperature
   (:func:`genalign.policies.lm.logprobs.token_scores_from_hidden`, shared with the causal-LM adapter).
5. **Generation** goes through the causal-LM rollout engine (:class:`genalign.engines.hf.HFGenerateEngine`); the
   batch's image inputs are bound to ``generate`` by a thin wrapper, so behaviour log-probs, end tokens and stop
   strings are handled exactly as for text models. The wrapper also forbids the vision placeholder tokens
   (``<|image_pad|>``, ``<|vision_start|>`` ...): a sampled one would be taken for an image slot when the completion is
   re-scored. Scoring masks the same tokens (:func:`suppressed_head`), so re-scored log-probs are those of the law
   that was sampled.

The rollout adds two columns to each row, for grounding rewards: ``image_sizes`` (``(width, height)`` of each image as
stored) and ``image_input_sizes`` (``(width, height)`` the model saw, from ``image_grid_thw`` and the patch size).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from genalign.algorithms.regularizers import kl_penalty
from genalign.assets import model_location
from genalign.data.images import load_row_images
from genalign.engines.base import SamplingParams
from genalign.engines.hf import HFGenerateEngine
from genalign.policies.base import Rollout, ScoreOutput
from genalign.policies.causal_lm import LoRAConfig
from genalign.policies.lm.logprobs import TokenScores, VocabTerm, token_scores_from_hidden
from genalign.policies.lm.lora import add_lora, load_weights, save_weights
from genalign.policies.lm.reference import adapters_disabled, resolve_reference_mode

#: Marker of an image position inside a string prompt.
IMAGE_MARKER = "<image>"
LoraScope = Literal["language_model", "language_model_and_vision_tower"]


@dataclass
class VLMPolicyConfig:
    """Configuration of the vision-language policy (``policy.family: vlm``)."""

    family: Literal["vlm"] = field(default="vlm", metadata={"help": "Model family; selects this adapter."})
    model: str = field(
        default="builtin:shapes-vlm",
        metadata={"help": "Model folder (or 'builtin:<name>') of an image-text-to-text model (Qwen2-VL / Qwen2.5-VL)."},
    )
    processor: str | None = field(
        default=None, metadata={"help": "Processor folder (or 'builtin:<name>'); None uses the model folder."}
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(
        default="float32", metadata={"help": "Parameter dtype of the model."}
    )
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2"] = field(
        default="sdpa", metadata={"help": "Attention kernel passed to transformers."}
    )
    image_column: str = field(default="image", metadata={"help": "Row column holding the image(s) of the prompt."})
    image_root: str | None = field(
        default=None, metadata={"help": "Directory that relative image paths are resolved against."}
    )
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
    seed: int = field(default=0, metadata={"help": "Seed of the rollout sampler."})

    def validate(self) -> None:
        if not 1 <= self.min_pixels <= self.max_pixels:
            raise ValueError(
                f"policy.min_pixels={self.min_pixels} and policy.max_pixels={self.max_pixels} must satisfy "
                "1 <= min_pixels <= max_pixels"
            )
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
        if self.lora.rank < 0:
            raise ValueError(f"policy.lora.rank={self.lora.rank} must be >= 0 (0 disables LoRA)")
        if not 0 <= self.lora.dropout < 1:
            raise ValueError(f"policy.lora.dropout={self.lora.dropout} must be in [0, 1)")
        if self.lora.rank > 0 and not self.lora.target_modules:
            raise ValueError("policy.lora.target_modules is empty while lora.rank > 0; name the linear layers")
        if self.reference == "lora_disabled" and self.lora.rank == 0:
            raise ValueError("policy.reference='lora_disabled' needs policy.lora.rank > 0; use 'frozen_copy' or 'auto'")
        if not all(self.stop):
            raise ValueError(f"policy.stop={self.stop} contains an empty string; remove it")


CONFIG_CLASS = VLMPolicyConfig

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---------------------------------------------------------------------------------------------------------------------
# Prompts


def chat_messages(prompt: str | list[dict[str, Any]], num_images: int, *, row_index: int, system_prompt: str | None):
    """Chat messages with ``{"type": "image"}`` blocks for a row with ``num_images`` images.

    Raises ValueError (naming the row) when the prompt's image markers do not match the number of images.
    """
    if isinstance(prompt, str):
        pieces = prompt.split(IMAGE_MARKER)
        markers = len(pieces) - 1
        if markers == 0:
            content = [{"type": "image"}] * num_images + [{"type": "text", "text": prompt}]
        elif markers != num_images:
            raise ValueError(
                f"row {row_index}: the prompt has {markers} {IMAGE_MARKER!r} markers but the row has {num_images} "
                f"image(s); use one marker per image, or none to put all images before the text"
            )
        else:
            content = []
            for i, piece in enumerate(pieces):
                if i > 0:
                    content.append({"type": "image"})
                if piece:
                    content.append({"type": "text", "text": piece})
        messages = [{"role": "user", "content": content}]
    elif isinstance(prompt, list):
        messages = [dict(m) for m in prompt]
        blocks = sum(
            1
            for m in messages
            if isinstance(m.get("content"), list)
            for part in m["content"]
            if isinstance(part, dict) and part.get("type") == "image"
        )
        if blocks != num_images:
            raise ValueError(
                f"row {row_index}: the chat prompt has {blocks} image block(s) but the row has {num_images} "
                f"image(s); add one {{'type': 'image'}} block per image"
            )
    else:
        raise ValueError(f"row {row_index}: prompt must be a string or a list of chat messages, got {type(prompt)}")
    if system_prompt is not None and not (messages and messages[0].get("role") == "system"):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    return messages


@dataclass
class EncodedPrompt:
    """Processor outputs of one row (unpadded).

    Attributes:
        input_ids: ``[P_i]`` prompt tokens with the image placeholders expanded.
        mm_token_type_ids: ``[P_i]`` 0 for text, 1 for image tokens.
        pixel_values: ``[sum_k t_k h_k w_k, D]`` flat patches of the row's images (``[0, D]`` without images).
        image_grid_thw: ``[K, 3]`` patch grid of each image (``[0, 3]`` without images).
        image_sizes: ``(width, height)`` of each image as stored.
        image_input_sizes: ``(width, height)`` of each image as seen by the model.
    """

    input_ids: Tensor
    mm_token_type_ids: Tensor
    pixel_values: Tensor
    image_grid_thw: Tensor
    image_sizes: list[tuple[int, int]]
    image_input_sizes: list[tuple[int, int]]


def left_pad(sequences: list[Tensor], width: int, value: int) -> Tensor:
    """Stack 1-D tensors into ``[B, width]``, padding on the left with ``value``."""
    out = torch.full((len(sequences), width), value, dtype=sequences[0].dtype)
    for i, seq in enumerate(sequences):
        if seq.numel():
            out[i, width - seq.numel() :] = seq
    return out


def concat_images(pixel_values: list[Tensor], grids: list[Tensor]) -> dict[str, Tensor]:
    """Concatenate per-sample image tensors in sample order; empty when no sample has images.

    Args:
        pixel_values: per sample ``[p_i, D]``.
        grids: per sample ``[k_i, 3]``.
    Returns:
        ``{"pixel_values": [sum p_i, D], "image_grid_thw": [sum k_i, 3]}`` or ``{}``.
    """
    if sum(int(g.shape[0]) for g in grids) == 0:
        return {}
    return {"pixel_values": torch.cat(pixel_values, dim=0), "image_grid_thw": torch.cat(grids, dim=0)}


def split_images(pixel_values: Tensor, image_grid_thw: Tensor, images_per_sample: list[int]) -> list[Tensor]:
    """Split flat ``pixel_values`` ``[sum_j t_j h_j w_j, D]`` into per-sample blocks using the grid sizes.

    Args:
        image_grid_thw: ``[K, 3]`` grid of every image, in sample order.
        images_per_sample: number of images of each sample (sums to ``K``).
    Returns:
        per sample ``[sum over its images of t h w, D]``.
    """
    if sum(images_per_sample) != image_grid_thw.shape[0]:
        raise ValueError(
            f"images_per_sample sums to {sum(images_per_sample)} but image_grid_thw has {image_grid_thw.shape[0]} rows"
        )
    patches_per_image = image_grid_thw.prod(dim=1).tolist()  # [K]
    if sum(patches_per_image) != pixel_values.shape[0]:
        raise ValueError(
            f"image_grid_thw covers {sum(patches_per_image)} patches but pixel_values has {pixel_values.shape[0]} rows"
        )
    out, start, image = [], 0, 0
    for count in images_per_sample:
        size = sum(patches_per_image[image : image + count])
        out.append(pixel_values[start : start + size])
        start, image = start + size, image + count
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The policy


class _ImageBoundModel(nn.Module):
    """Presents ``model`` to a text-only rollout engine with one batch's image inputs bound to ``generate``.

    ``suppress_tokens`` (the vision placeholder tokens, :func:`vision_token_ids`) are never sampled: a completion
    holding an ``<|image_pad|>`` would be read as an image slot when the completion is scored, and the forward pass
    fails with "Image features and image tokens do not match". transformers applies the suppression before the
    engine's behaviour log-prob recorder, so the recorded log-probs are those of the law actually sampled.
    """

    def __init__(self, model: nn.Module, image_inputs: dict[str, Tensor], suppress_tokens: tuple[int, ...]) -> None:
        super().__init__()
        self.model = model
        self.image_inputs = image_inputs
        self.suppress_tokens = suppress_tokens

    def generate(self, **kwargs):
        if self.suppress_tokens:
            kwargs["suppress_tokens"] = list(self.suppress_tokens)
        return self.model.generate(**kwargs, **self.image_inputs)


#: Config attributes of Qwen2-VL-style models naming the vision placeholder tokens.
VISION_TOKEN_ATTRIBUTES = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


#: Logit offset of suppressed tokens when scoring: exp(-1e4) is 0 in float32 and bfloat16, and, unlike -inf, it keeps
#: ``p * log p`` (entropy) finite.
SUPPRESSED_LOGIT = -1.0e4


class _SuppressedHead(nn.Module):
    """``head(hidden) + offsets``: an output head whose suppressed tokens get :data:`SUPPRESSED_LOGIT`."""

    def __init__(self, head: nn.Module, offsets: Tensor) -> None:
        super().__init__()
        self.head = head
        self.register_buffer("offsets", offsets, persistent=False)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.head(hidden) + self.offsets.to(hidden.dtype)  # [..., V]


def suppressed_head(head: nn.Module, token_ids: tuple[int, ...]) -> nn.Module:
    """``head`` with the logits of ``token_ids`` pushed to :data:`SUPPRESSED_LOGIT`, sharing ``head``'s weights.

    Scoring with it gives the log-probs of the law generation samples from (which never draws ``token_ids``), so
    re-scored and behaviour log-probs agree. A bias-free ``nn.Linear`` head stays an ``nn.Linear`` (its weight
    shared, the offsets as a frozen bias) so the fused log-prob path of
    :func:`genalign.policies.lm.logprobs.token_scores_from_hidden` still applies.
    """
    if not token_ids:
        return head
    weight = head.weight if hasattr(head, "weight") else next(head.parameters())
    offsets = torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)  # [V]
    offsets[list(token_ids)] = SUPPRESSED_LOGIT
    if type(head) is nn.Linear and head.bias is None:
        masked = nn.Linear(head.in_features, head.out_features, bias=False, device="meta")
        masked.weight = head.weight  # the same Parameter: gradients reach the model
        masked.bias = nn.Parameter(offsets, requires_grad=False)
        return masked
    return _SuppressedHead(head, offsets)


def vision_token_ids(model_config: Any) -> tuple[int, ...]:
    """The ids of the vision placeholder tokens declared in ``model_config`` (those of
    :data:`VISION_TOKEN_ATTRIBUTES` that are set), sorted; a policy must never generate them."""
    ids = {getattr(model_config, name, None) for name in VISION_TOKEN_ATTRIBUTES}
    return tuple(sorted(int(i) for i in ids if i is not None))


def _right_pad(x: Tensor, width: int, value: float) -> Tensor:
    """Pad ``x`` ``[B, C]`` on the right to ``[B, width]``."""
    return x if x.shape[1] == width else torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


def vision_tower(model: nn.Module) -> nn.Module:
    """The vision encoder (with its patch merger) of a Qwen2-VL-style model: ``model.model.visual``."""
    inner = getattr(model, "model", model)
    for name in ("visual", "vision_tower", "vision_model"):
        if hasattr(inner, name):
            return getattr(inner, name)
    raise ValueError(f"cannot find the vision tower of {type(model).__name__} (looked for model.visual)")


def lora_module_names(model: nn.Module, target_modules: list[str], scope: LoraScope) -> list[str]:
    """Full names of the linear layers that get LoRA: those named in ``target_modules``, inside the language model
    only (``scope="language_model"``) or anywhere (``"language_model_and_vision_tower"``)."""
    tower = vision_tower(model)
    tower_params = {id(m) for m in tower.modules()}
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or name.rsplit(".", 1)[-1] not in target_modules:
            continue
        if scope == "language_model" and id(module) in tower_params:
            continue
        names.append(name)
    if not names:
        raise ValueError(
            f"policy.lora.target_modules={target_modules} matches no linear layer of {type(model).__name__} "
            f"(scope {scope!r}); use names such as 'q_proj', 'v_proj'"
        )
    return names


class VLMPolicy:
    """Group-relative training adapter for image-text-to-text models; see the module docstring for the data path."""

    family = "vlm"
    rollout_logp_is_exact = False

    def __init__(self, config: VLMPolicyConfig, device: str | torch.device) -> None:
        from transformers import AutoProcessor

        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.model_path = model_location(config.model)
        self.processor = AutoProcessor.from_pretrained(
            model_location(config.processor) if config.processor else self.model_path
        )
        self.tokenizer = self.processor.tokenizer
        image_processor = self.processor.image_processor
        self.patch_size = int(image_processor.patch_size)
        self.image_factor = self.patch_size * int(image_processor.merge_size)
        model = self._load_model()
        self.pad_token_id = self._pad_token_id()
        self.eos_token_ids = self._eos_token_ids(model)
        lora = config.lora
        self.reference_mode = resolve_reference_mode(config.reference, lora.rank > 0)
        self._frozen_reference: nn.Module | None = None  # loaded on the first KL request
        if lora.rank > 0:
            targets = lora_module_names(model, lora.target_modules, config.lora_scope)
            model = add_lora(model, rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, target_modules=targets)
        if config.freeze_vision_tower:
            vision_tower(self.hf_model_of(model)).requires_grad_(False)
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model = model
        self.suppressed_token_ids = vision_token_ids(self.hf_model_of(model).config)
        # transformers >= 5 computes Qwen2-VL's 3-D rotary positions from mm_token_type_ids; older versions reject it
        forward_args = inspect.signature(self.hf_model_of(model).forward).parameters
        self.needs_mm_token_type_ids = "mm_token_type_ids" in forward_args
        self.generator = torch.Generator().manual_seed(config.seed)

    # --- construction helpers -------------------------------------------------------------------------------------

    def _load_model(self) -> nn.Module:
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_pretrained(
            self.model_path, dtype=_DTYPES[self.config.dtype], attn_implementation=self.config.attn_implementation
        )
        return model.to(self.device)

    @staticmethod
    def hf_model_of(model: nn.Module) -> nn.Module:
        """The transformers ``*ForConditionalGeneration`` model inside a peft wrapper (or ``model`` itself)."""
        return model.get_base_model() if hasattr(model, "get_base_model") else model

    def _pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        if pad is None:
            raise ValueError(f"the tokenizer of {self.config.model!r} has neither a pad nor an eos token")
        return int(pad)

    def _eos_token_ids(self, model: nn.Module) -> tuple[int, ...]:
        ids = model.generation_config.eos_token_id if model.generation_config is not None else None
        if ids is None:
            ids = self.tokenizer.eos_token_id
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if not ids:
            raise ValueError(f"{self.config.model!r} defines no end-of-sequence token; set one in generation_config")
        return tuple(int(i) for i in ids)

    # --- rollout --------------------------------------------------------------------------------------------------

    def encode_prompts(self, rows: list[dict[str, Any]]) -> list[EncodedPrompt]:
        """Load each row's images, build its chat, run the processor on the whole batch and split it per row."""
        cfg = self.config
        texts, images, loaded = [], [], []
        for index, row in enumerate(rows):
            if "prompt" not in row:
                raise ValueError(f"row {index} has no 'prompt' column (columns: {sorted(row)})")
            row_images = load_row_images(
                row.get(cfg.image_column),
                row_index=index,
                column=cfg.image_column,
                min_pixels=cfg.min_pixels,
                max_pixels=cfg.max_pixels,
                factor=self.image_factor,
                base_dir=Path(cfg.image_root) if cfg.image_root else None,
            )
            messages = chat_messages(
                row["prompt"], len(row_images.images), row_index=index, system_prompt=cfg.system_prompt
            )
            texts.append(self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
            images.append(row_images.images)
            loaded.append(row_images)
        has_images = any(images)
        encoded = self.processor(
            text=texts,
            images=images if has_images else None,
            size={"shortest_edge": cfg.min_pixels, "longest_edge": cfg.max_pixels},
            padding=True,
            padding_side="left",
            return_tensors="pt",
        )
        mask = encoded["attention_mask"].bool()  # [R, P]
        if "mm_token_type_ids" in encoded:
            mm_types = encoded["mm_token_type_ids"].long()
        else:
            mm_types = (encoded["input_ids"] == self.processor.image_token_id).long()
        counts = [len(imgs) for imgs in images]
        if has_images:
            grid = encoded["image_grid_thw"].long()  # [K, 3]
            pixel_blocks = split_images(encoded["pixel_values"], grid, counts)
            grids = list(torch.split(grid, counts))
        else:
            pixel_blocks = [torch.zeros(0, 0)] * len(rows)
            grids = [torch.zeros(0, 3, dtype=torch.long)] * len(rows)
        out = []
        for i, row_images in enumerate(loaded):
            input_sizes = [(int(w) * self.patch_size, int(h) * self.patch_size) for _, h, w in grids[i].tolist()]
            out.append(
                EncodedPrompt(
                    input_ids=encoded["input_ids"][i][mask[i]],
                    mm_token_type_ids=mm_types[i][mask[i]],
                    pixel_values=pixel_blocks[i],
                    image_grid_thw=grids[i],
                    image_sizes=row_images.original_sizes,
                    image_input_sizes=input_sizes,
                )
            )
        return out

    def sampling_params(self, mode: Literal["train", "eval"]) -> SamplingParams:
        cfg = self.config
        return SamplingParams(
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature if mode == "train" else cfg.eval_temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            stop=tuple(cfg.stop),
        )

    @torch.no_grad()
    def rollout(
        self, rows: list[dict[str, Any]], group_size: int, *, mode: Literal["train", "eval"] = "train"
    ) -> Rollout:
        """Sample ``group_size`` completions per row; every sample carries its own image patches (module docstring)."""
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1")
        if not rows:
            raise ValueError("rollout() needs at least one row")
        encoded = self.encode_prompts(rows)
        picks = [i for i in range(len(rows)) for _ in range(group_size)]  # [N] row of each sample
        width = max(e.input_ids.numel() for e in encoded)
        prompt_ids = left_pad([encoded[i].input_ids for i in picks], width, self.pad_token_id)  # [N, P]
        prompt_mask = left_pad([torch.ones_like(encoded[i].input_ids) for i in picks], width, 0)  # [N, P]
        mm_types = left_pad([encoded[i].mm_token_type_ids for i in picks], width, 0)  # [N, P]
        pixel_values = [encoded[i].pixel_values for i in picks]
        grids = [encoded[i].image_grid_thw for i in picks]

        params = self.sampling_params(mode)
        was_training = self.model.training
        self.model.eval()
        generations = []
        for start in range(0, len(picks), self.config.rollout_batch_size):
            part = slice(start, start + self.config.rollout_batch_size)
            image_inputs = concat_images(pixel_values[part], grids[part])
            if image_inputs and self.needs_mm_token_type_ids:
                image_inputs["mm_token_type_ids"] = mm_types[part]
            image_inputs = {k: v.to(self.device) for k, v in image_inputs.items()}
            bound = _ImageBoundModel(self.model, image_inputs, self.suppressed_token_ids)
            engine = HFGenerateEngine(bound, self.tokenizer)
            ids, mask = prompt_ids[part].to(self.device), prompt_mask[part].to(self.device)
            generations.append(engine.generate(ids, mask, params, self.generator))
        self.model.train(was_training)

        num_actions = max(g.completion_ids.shape[1] for g in generations)
        completion_ids = torch.cat([_right_pad(g.completion_ids, num_actions, self.pad_token_id) for g in generations])
        action_mask = torch.cat([_right_pad(g.completion_mask, num_actions, 0) for g in generations])  # [N, T]
        old_logp = torch.cat([_right_pad(g.logp, num_actions, 0) for g in generations])  # [N, T]
        truncated = torch.cat([g.truncated for g in generations])  # [N]
        outputs = self.tokenizer.batch_decode(completion_ids.tolist(), skip_special_tokens=True)
        out_rows = [
            dict(rows[i], image_sizes=encoded[i].image_sizes, image_input_sizes=encoded[i].image_input_sizes)
            for i in picks
        ]
        return Rollout(
            rows=out_rows,
            outputs=outputs,
            group_ids=torch.tensor(picks, dtype=torch.long),
            old_logp=old_logp.cpu(),
            action_mask=action_mask.cpu(),
            per_sample={
                "prompt_ids": prompt_ids,
                "prompt_mask": prompt_mask,
                "mm_token_type_ids": mm_types,
                "completion_ids": completion_ids.cpu(),
                "pixel_values": pixel_values,
                "image_grid_thw": grids,
            },
            info={
                "completion_length": float(action_mask.sum(1).mean()),
                "frac_truncated": float(truncated.float().mean()),
                "images_per_prompt": sum(e.image_grid_thw.shape[0] for e in encoded) / len(encoded),
            },
        )

    # --- scoring --------------------------------------------------------------------------------------------------

    def model_inputs(self, rollout: Rollout) -> dict[str, Tensor]:
        """Forward inputs of ``prompt + completion`` for every sample of ``rollout``, on the policy's device.

        Returns ``input_ids`` / ``attention_mask`` ``[n, P + T]`` and, when a sample has images, ``mm_token_type_ids``
        ``[n, P + T]``, ``pixel_values`` ``[sum of patches, D]`` and ``image_grid_thw`` ``[K, 3]`` in sample order.
        """
        ps = rollout.per_sample
        completion_ids = ps["completion_ids"]  # [n, T]
        inputs = {
            "input_ids": torch.cat([ps["prompt_ids"], completion_ids], dim=1),
            "attention_mask": torch.cat([ps["prompt_mask"], rollout.action_mask.long()], dim=1),
        }
        images = concat_images(ps["pixel_values"], ps["image_grid_thw"])
        if images:
            inputs |= images
            if self.needs_mm_token_type_ids:
                inputs["mm_token_type_ids"] = torch.cat([ps["mm_token_type_ids"], torch.zeros_like(completion_ids)], 1)
        return {k: v.to(self.device) for k, v in inputs.items()}

    def _completion_logprobs(
        self,
        model: nn.Module,
        rollout: Rollout,
        inputs: dict[str, Tensor],
        entropy: bool,
        vocab_term: VocabTerm | None = None,
    ) -> TokenScores:
        """``logp`` ``[n, T]`` (entropy and vocabulary term ``[n, T]`` or None) of the stored completions."""
        hf_model = self.hf_model_of(model)
        hidden = hf_model.model(**inputs, use_cache=False).last_hidden_state  # [n, P + T, H]
        width = rollout.per_sample["prompt_ids"].shape[1]
        hidden = hidden[:, width - 1 : width - 1 + rollout.num_actions]  # [n, T, H] states predicting the actions
        return token_scores_from_hidden(
            hidden,
            inputs["input_ids"][:, width:],
            rollout.action_mask.to(hidden.device),
            suppressed_head(hf_model.get_output_embeddings(), self.suppressed_token_ids),
            temperature=self.config.temperature,
            chunk_size=self.config.logprob_chunk_size,
            with_entropy=entropy,
            vocab_term=vocab_term,
        )

    def score(
        self,
        rollout: Rollout,
        *,
        entropy: bool = False,
        kl_estimator: str | None = None,
        vocab_term: VocabTerm | None = None,
    ) -> ScoreOutput:
        """Re-score the stored completions under the current parameters (with grad in training mode);
        ``vocab_term`` is evaluated per token inside the chunked head pass (``ScoreOutput.vocab_term``)."""
        inputs = self.model_inputs(rollout)
        scores = self._completion_logprobs(self.model, rollout, inputs, entropy, vocab_term)  # [n, T] each
        kl = None
        if kl_estimator is not None:
            ref_logp = self.reference_logprobs(rollout, inputs)  # [n, T]
            kl = kl_penalty(scores.logp, ref_logp, kl_estimator) * rollout.action_mask.to(scores.logp.device)
        return ScoreOutput(logp=scores.logp, entropy=scores.entropy, kl=kl, vocab_term=scores.vocab_term)

    @torch.no_grad()
    def reference_logprobs(self, rollout: Rollout, inputs: dict[str, Tensor]) -> Tensor:
        """``[n, T]`` log-probs of the stored completions under the reference policy (``policy.reference``)."""
        if self.reference_mode == "none":
            raise ValueError("a KL term needs a reference policy; set policy.reference to 'auto' (or another mode)")
        if self.reference_mode == "frozen_copy":
            if self._frozen_reference is None:  # the original weights, never a copy of the trained ones
                self._frozen_reference = self._load_model().eval().requires_grad_(False)
            return self._completion_logprobs(self._frozen_reference, rollout, inputs, False)[0]
        with adapters_disabled(self.model):
            return self._completion_logprobs(self.model, rollout, inputs, False)[0]

    # --- parameters and checkpoints -------------------------------------------------------------------------------

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def modules_to_train(self) -> list[nn.Module]:
        return [self.model]

    def save(self, directory: Path) -> None:
        """LoRA adapters alone, or all weights, as safetensors (``genalign.policies.lm.lora.save_weights``)."""
        save_weights(self.model, Path(directory))

    def load(self, directory: Path) -> None:
        load_weights(self.model, Path(directory))


def build_policy(config: VLMPolicyConfig, device: str | torch.device) -> VLMPolicy:
    """Build the vision-language policy described by ``config`` on ``device``."""
    return VLMPolicy(config, device)


__all__ = [
    "IMAGE_MARKER",
    "VLMPolicy",
    "VLMPolicyConfig",
    "build_policy",
    "chat_messages",
    "concat_images",
    "left_pad",
    "lora_module_names",
    "split_images",
    "vision_tower",
]
