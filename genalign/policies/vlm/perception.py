"""Perception features of the VLM scoring pass: how much each generated token depends on the image.

* ``visual_similarity`` (PEPO [129]): for every hidden-state layer the model returns (the embeddings and each decoder
  layer), the mean cosine similarity between the hidden state *at* the action's token and the hidden states at the
  image tokens of the prompt, averaged over the layers; ``[n, T]``, 0 for a sample without images. Computed from the
  same backbone pass as the log-probs (``output_hidden_states=True`` changes no value).
* ``logp_without_image`` (VPPO [329]): the log-probabilities of the stored actions from a second backbone pass in which
  every image and native video is replaced by a blank one, the processor's mean colour (``pixel_values`` and
  ``pixel_values_videos`` 0 after normalisation; the architecture's
  :meth:`~genalign.policies.vlm.architectures.base.VLMArchitecture.blank_images`), with the same tokens and positions,
  through the same suppressed head at the sampling temperature; ``[n, T]``, detached. Samples without images or
  videos get their ordinary log-probs.
* ``logp_frames_shuffled`` (Video-KTR [230]): the log-probabilities of the stored actions from a second backbone pass
  in which each sample's images, read as the frames of a video in prompt order, are put in reverse order (image ``k``
  of ``K`` gets the patches of image ``K − 1 − k`` when both have the same patch grid, so every token and position
  stays where it was); ``[n, T]``, detached. Qwen-VL architectures only (their patch grids locate every frame).
  Reading chosen: the frames are a row's images (one image per frame); a native video's frames are merged in pairs
  by its temporal patch inside ``pixel_values_videos`` and are not reordered. Video-KTR shuffles the frames, and the
  reversal is our deterministic shuffle (every frame moves except the middle one of an odd count; the same order in
  every micro-batch). A sample with fewer than two frames gets its ordinary log-probs (no temporal signal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    blank: Callable[[dict[str, Tensor]], dict[str, Tensor]] = blank_images,
) -> Tensor:
    """``[n, T]`` log-probs of ``targets`` with the images (and videos) blanked out by ``blank`` (the architecture's
    :meth:`~genalign.policies.vlm.architectures.base.VLMArchitecture.blank_images`; module docstring); ``logp`` (the
    ordinary log-probs) is returned detached when the batch has no image or video."""
    if not any(key.startswith("pixel_values") for key in inputs):
        return logp.detach()
    args = {"width": width, "targets": targets, "mask": mask, "temperature": temperature, "chunk_size": chunk_size}
    return _action_logp(module, blank(inputs), head, **args)


def _action_logp(
    module: nn.Module, inputs: dict[str, Any], head: nn.Module, *, width: int, targets: Tensor, mask: Tensor,
    temperature: float, chunk_size: int,
) -> Tensor:  # fmt: skip
    """``[n, T]`` log-probs of ``targets`` from one backbone pass on ``inputs`` (the states at ``width - 1 + t``)."""
    hidden = backbone_hidden_states(module, **inputs)  # [n, P + T, H]
    hidden = hidden[:, width - 1 : width - 1 + targets.shape[1]]  # [n, T, H] the states predicting the actions
    scores = token_scores_from_hidden(hidden, targets, mask, head, temperature=temperature, chunk_size=chunk_size)
    return scores.logp


def reversed_frame_patches(image_grid_thw: Tensor, images_per_sample: Sequence[int]) -> Tensor:
    """``[sum of patches]`` long: the row of ``pixel_values`` each patch row takes when every sample's images are put
    in reverse order (image ``k`` of ``K`` takes image ``K − 1 − k``'s patches where the two grids are equal).

    Args:
        image_grid_thw: ``[K_total, 3]`` patch grid of every image, in sample order.
        images_per_sample: number of images of each sample (sums to ``K_total``).
    """
    sizes = image_grid_thw.prod(dim=1).tolist()  # patches per image
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + int(size))
    index, first = [], 0
    for count in images_per_sample:
        for k in range(count):
            image, mirror = first + k, first + count - 1 - k
            source = mirror if torch.equal(image_grid_thw[mirror], image_grid_thw[image]) else image
            index.extend(range(starts[source], starts[source + 1]))
        first += count
    return torch.tensor(index, dtype=torch.long)


@torch.no_grad()
def logp_frames_shuffled(
    module: nn.Module,
    inputs: dict[str, Any],
    head: nn.Module,
    *,
    images_per_sample: Sequence[int],
    width: int,
    targets: Tensor,
    mask: Tensor,
    temperature: float,
    chunk_size: int,
    logp: Tensor,
) -> Tensor:
    """``[n, T]`` log-probs of ``targets`` with each sample's frames in reverse order (module docstring); ``logp``
    (the ordinary log-probs) is returned detached when no sample has two frames."""
    if "pixel_values" not in inputs or max(images_per_sample, default=0) < 2:
        return logp.detach()
    index = reversed_frame_patches(inputs["image_grid_thw"].cpu(), images_per_sample).to(inputs["pixel_values"].device)
    shuffled = {**inputs, "pixel_values": inputs["pixel_values"][index]}
    args = {"width": width, "targets": targets, "mask": mask, "temperature": temperature, "chunk_size": chunk_size}
    return _action_logp(module, shuffled, head, **args)


__all__ = ["blank_images", "logp_frames_shuffled", "logp_without_image", "reversed_frame_patches", "visual_similarity"]
