"""Perception features of the VLM scoring pass: how much each generated token depends on the image.

* ``visual_similarity`` (PEPO [129]): for every hidden-state layer the model returns (the embeddings and each decoder
  layer), the mean cosine similarity between the hidden state *at* the action's token and the hidden states at the
  image tokens of the prompt, averaged over the layers; ``[n, T]``, 0 for a sample without images. Computed from the
  same backbone pass as the log-probs (``output_hidden_states=True`` changes no value).
* ``logp_without_image`` (VPPO [329]): the log-probabilities of the stored actions from a second backbone pass in which
  every image is replaced by a blank one, the processor's mean colour (``pixel_values`` 0 after normalisation), with
  the same tokens and positions, through the same suppressed head at the sampling temperature; ``[n, T]``, detached.
  Samples without images get their ordinary log-probs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genalign.policies.lm.logprobs import backbone_hidden_states, token_scores_from_hidden


def visual_similarity(
    layers: Sequence[Tensor], input_ids: Tensor, image_token_id: int, width: int, mask: Tensor
) -> Tensor:
    """``[n, T]`` float32 mean over ``layers`` of ``mean_j cos(h_t, h_j)``, ``j`` over the image tokens.

    Args:
        layers: hidden states ``[n, P + T, H]`` of every layer, on the ``[prompt | completion]`` grid.
        input_ids: ``[n, P + T]`` token ids of that grid.
        image_token_id: the id of the image placeholder token.
        width: ``P``, the prompt width; action ``t`` is the token at position ``P + t``.
        mask: ``[n, T]`` 1 for real actions (others get 0).
    """
    num_actions = mask.shape[1]
    image = (input_ids == image_token_id)[..., None].float()  # [n, P + T, 1]
    count = image.sum(1)  # [n, 1]
    total = torch.zeros(mask.shape, dtype=torch.float32, device=input_ids.device)  # [n, T]
    for hidden in layers:
        unit = F.normalize(hidden.float(), dim=-1)  # [n, P + T, H]
        image_mean = (unit * image).sum(1) / count.clamp_min(1.0)  # [n, H] mean of the unit image states
        actions = unit[:, width : width + num_actions]  # [n, T, H] states at the action tokens
        total += (actions * image_mean[:, None]).sum(-1)  # [n, T] mean cosine similarity to the image tokens
    similarity = total / max(len(layers), 1)
    return torch.where((mask.to(similarity.device) > 0) & (count > 0), similarity, 0.0)


def blank_images(inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """The forward inputs with every image patch set to 0 (a blank image of the processor's mean colour)."""
    return {**inputs, "pixel_values": torch.zeros_like(inputs["pixel_values"])}


@torch.no_grad()
def logp_without_image(
    module: nn.Module,
    inputs: dict[str, Any],
    head: nn.Module,
    *,
    width: int,
    targets: Tensor,
    mask: Tensor,
    temperature: float,
    chunk_size: int,
    logp: Tensor,
) -> Tensor:
    """``[n, T]`` log-probs of ``targets`` with the images blanked out (module docstring); ``logp`` (the ordinary
    log-probs) is returned detached when the batch has no image."""
    if "pixel_values" not in inputs:
        return logp.detach()
    hidden = backbone_hidden_states(module, **blank_images(inputs))  # [n, P + T, H]
    hidden = hidden[:, width - 1 : width - 1 + targets.shape[1]]  # [n, T, H] the states predicting the actions
    scores = token_scores_from_hidden(hidden, targets, mask, head, temperature=temperature, chunk_size=chunk_size)
    return scores.logp


__all__ = ["blank_images", "logp_without_image", "visual_similarity"]
