"""Attention features of the VLM scoring pass: how each generated token splits its attention between the image and
the text, and how its attention moves within each modality (DyCo [199]).

``modality_attention`` ``[n, T, 3]`` (detached), from a second backbone pass with the eager attention kernel (which
returns the attention maps; the model's own kernel is restored after): the attention of the position predicting each
action, averaged over heads and layers, read as

* channel 0: the share of it on the image tokens (0 for a sample without images);
* channel 1: its within-image shift, the Fisher-Rao geodesic distance ``2·arccos(Σ_k √(p_t(k)·p_{t−1}(k)))`` between
  the action's attention over the image tokens (renormalised) and the previous action's (0 for the first action);
* channel 2: the same within the text tokens (every attended token that is not an image token).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from genalign.policies.lm.internals import eager_attention
from genalign.policies.lm.logprobs import backbone_output

#: channels of ``modality_attention``
VISUAL_SHARE, IMAGE_SHIFT, TEXT_SHIFT = 0, 1, 2


def fisher_rao(p: Tensor, q: Tensor) -> Tensor:
    """``[...]`` the Fisher-Rao geodesic distance ``2·arccos(Σ √(p·q))`` between distributions ``p``, ``q``
    ``[..., K]`` (0 where either has no mass)."""
    overlap = torch.sqrt((p * q).clamp_min(0.0)).sum(-1).clamp(0.0, 1.0)
    present = (p.sum(-1) > 0) & (q.sum(-1) > 0)
    return torch.where(present, 2.0 * torch.arccos(overlap), 0.0)


def modality_readings(attention: Tensor, image: Tensor, valid_keys: Tensor) -> Tensor:
    """``[n, T, 3]`` the channels of the module docstring from the predicting positions' attention ``[n, T, L]``
    (rows over the keys), the image tokens ``image`` ``[n, L]`` bool and the attended keys ``valid_keys`` ``[n, L]``."""
    image = (image & valid_keys)[:, None].float()  # [n, 1, L]
    text = (~image.bool() & valid_keys[:, None]).float()  # [n, 1, L]
    total = attention.sum(-1).clamp_min(1e-12)  # [n, T]
    on_image, on_text = attention * image, attention * text  # [n, T, L]
    share = on_image.sum(-1) / total  # [n, T]

    def shift(part: Tensor) -> Tensor:
        p = part / part.sum(-1, keepdim=True).clamp_min(1e-12)  # [n, T, L] renormalised within the modality
        moved = fisher_rao(p[:, 1:], p[:, :-1])  # [n, T − 1]
        return torch.cat([torch.zeros_like(moved[:, :1]), moved], 1)  # [n, T]

    return torch.stack([share, shift(on_image), shift(on_text)], -1)


@torch.no_grad()
def modality_attention(
    module: nn.Module, inputs: dict[str, Any], image_token_id: int, *, width: int, mask: Tensor
) -> Tensor:
    """``[n, T, 3]`` the modality readings of the stored actions (module docstring), 0 on padding.

    Args:
        module: the policy's model; inputs: its forward inputs on the ``[prompt | completion]`` grid.
        image_token_id: the image placeholder's id (-1: none); width: ``P``; mask: ``[n, T]`` real actions.
    """
    with eager_attention(module):
        output = backbone_output(module, output_attentions=True, **inputs)
    maps = output.attentions
    mean = sum(layer.float().mean(1) for layer in maps) / len(maps)  # [n, L, L]
    actions = mask.shape[1]
    attention = mean[:, width - 1 : width - 1 + actions]  # [n, T, L] of the positions predicting the actions
    readings = modality_readings(attention, inputs["input_ids"] == image_token_id, inputs["attention_mask"] > 0)
    return torch.where(mask.to(readings.device)[..., None] > 0, readings, 0.0)


__all__ = ["IMAGE_SHIFT", "TEXT_SHIFT", "VISUAL_SHARE", "fisher_rao", "modality_attention", "modality_readings"]
