"""The model side of the vision-language policy: loading, the vision tower and its LoRA scope, the vision placeholder
tokens that are never sampled, the output head that masks them when scoring, and the wrapper that binds a batch's
images to ``generate``."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from genalign.policies.lm.core import DTYPES
from genalign.policies.lora import ALL_LINEAR
from genalign.policies.vlm.architectures.qwen import VISION_TOKEN_ATTRIBUTES
from genalign.policies.vlm.config import LoraScope, VLMPolicyConfig

#: Logit offset of suppressed tokens when scoring: exp(-1e4) is 0 in float32 and bfloat16, and, unlike -inf, it keeps
#: ``p * log p`` (entropy) finite.
SUPPRESSED_LOGIT = -1.0e4


def load_model(config: VLMPolicyConfig, path: str, device: torch.device) -> nn.Module:
    """The image-text-to-text model saved in ``path``, in ``config.dtype`` with ``config.attn_implementation``."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(
        path, dtype=DTYPES[config.dtype], attn_implementation=config.attn_implementation
    )
    return model.to(device)


class ImageBoundModel(nn.Module):
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
    """The ids of the Qwen-VL vision placeholder tokens declared in ``model_config`` (those of
    :data:`VISION_TOKEN_ATTRIBUTES` that are set), sorted; a policy must never generate them (every architecture's
    own list: :meth:`~genalign.policies.vlm.architectures.base.VLMArchitecture.placeholder_ids`)."""
    ids = {getattr(model_config, name, None) for name in VISION_TOKEN_ATTRIBUTES}
    return tuple(sorted(int(i) for i in ids if i is not None))


def vision_tower(model: nn.Module) -> nn.Module:
    """The vision encoder (with its patch merger) of a Qwen2-VL-style model: ``model.model.visual``."""
    inner = getattr(model, "model", model)
    for name in ("visual", "vision_tower", "vision_model"):
        if hasattr(inner, name):
            return getattr(inner, name)
    raise ValueError(f"cannot find the vision tower of {type(model).__name__} (looked for model.visual)")


def lora_module_names(model: nn.Module, target_modules: list[str], scope: LoraScope) -> list[str]:
    """Full names of the linear layers that get LoRA: those named in ``target_modules`` (``[all-linear]``: every
    linear layer but the output head, as peft reads it), inside the language model only (``scope="language_model"``)
    or anywhere (``"language_model_and_vision_tower"``)."""
    tower = vision_tower(model)
    tower_params = {id(m) for m in tower.modules()}
    every_linear = list(target_modules) == [ALL_LINEAR]
    head = model.get_output_embeddings()
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if (module is head) if every_linear else (name.rsplit(".", 1)[-1] not in target_modules):
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


__all__ = [
    "SUPPRESSED_LOGIT",
    "VISION_TOKEN_ATTRIBUTES",
    "ImageBoundModel",
    "load_model",
    "lora_module_names",
    "suppressed_head",
    "vision_token_ids",
    "vision_tower",
]
