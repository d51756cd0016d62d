"""What the VLM family needs to know about one image-text-to-text architecture (:class:`VLMArchitecture`).

An architecture says which processor outputs carry a sample's images (and videos), how the processor's batch output
is cut per sample and joined again for a micro-batch, which token types the model reads, which placeholder tokens are
never sampled and how positions are given when scoring. The policy reads only this object, never the model class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

#: The media of one sample: processor outputs (``pixel_values``, ``image_grid_thw``, ...) restricted to its images.
SampleMedia = dict[str, Tensor]


@dataclass(frozen=True)
class VLMArchitecture(ABC):
    """The declared facts of one architecture; subclasses give ``split`` / ``concat`` and the geometry.

    Attributes:
        name: the family of ``model_type``\\ s it serves, for messages (``"qwen-vl"``).
        model_types: the ``model_type`` values of ``config.json`` it serves.
        image_keys: processor outputs holding a sample's images, stored per sample in ``Rollout.per_sample``.
        video_keys: processor outputs holding a sample's videos (``()``: the architecture takes no native video).
        token_type_key: the forward argument of the token types (``mm_token_type_ids``: 0 text, 1 image, 2 video;
            ``token_type_ids``: 1 at image tokens), or None when the model reads none.
        placeholder_attributes: model-config attributes naming placeholder tokens that are never sampled.
        placeholder_tokens: tokenizer strings of more placeholder tokens never sampled (row / column tags).
        positions: ``"model"`` when the model derives positions from the attention mask itself (Qwen's 3-D rotary
            positions), ``"from_mask"`` when scoring passes ``position_ids = cumsum(mask) - 1`` as ``generate`` does.
        multi_turn: whether multi-turn rollouts (observations encoded as a suffix) are supported.
    """

    name: str
    model_types: tuple[str, ...]
    image_keys: tuple[str, ...]
    video_keys: tuple[str, ...] = ()
    token_type_key: str | None = None
    placeholder_attributes: tuple[str, ...] = ()
    placeholder_tokens: tuple[str, ...] = ()
    positions: Literal["model", "from_mask"] = "from_mask"
    multi_turn: bool = False

    @property
    def media_keys(self) -> tuple[str, ...]:
        """Every per-sample media key, images first."""
        return self.image_keys + self.video_keys

    @abstractmethod
    def split(
        self, encoded: Any, images_per_sample: Sequence[int], videos_per_sample: Sequence[int]
    ) -> list[SampleMedia]:
        """The processor's batch output ``encoded`` cut into each sample's media (every key of :attr:`media_keys`,
        an empty tensor for a sample without any)."""

    @abstractmethod
    def concat(self, samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
        """The forward inputs of ``samples``' media in sample order; ``{}`` when no sample has any."""

    def image_kwargs(self, min_pixels: int, max_pixels: int) -> dict[str, Any]:
        """Processor arguments that bound the images' pixels (``policy.min_pixels`` / ``max_pixels``); ``{}`` for an
        architecture whose processor resizes images to its own fixed sizes."""
        return {}

    def video_kwargs(self, videos: Sequence[Any], min_pixels: int, max_pixels: int) -> dict[str, Any]:
        """Processor arguments for ``videos`` (every row's :class:`~genalign.policies.vlm.video.RowVideo`, in order),
        frames already sampled and resized: the frames themselves and no resampling by the processor."""
        return {"videos": [v.model_frames for v in videos], "do_sample_frames": False}

    def image_factor(self, processor: Any) -> int:
        """Images are resized to sides multiple of this before the processor sees them."""
        return 1

    @abstractmethod
    def image_input_sizes(self, media: SampleMedia, processor: Any) -> list[tuple[int, int]]:
        """``(width, height)`` the model saw of each image of one sample."""

    @abstractmethod
    def images_per_sample(self, samples: Sequence[SampleMedia]) -> list[int]:
        """The number of images of each sample."""

    @abstractmethod
    def planned_image_tokens(self, model_config: Any, max_pixels: int, processor_config: Any = None) -> int:
        """Prompt tokens (placeholders, tags and separators) of one square image of ``max_pixels`` pixels as the
        processor writes it: the planner's image budget (``genalign plan``), from the model config and, where the
        processor's own resizing decides, its preprocessor config (``None``: the published processor's defaults)."""

    def blank_images(self, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The forward inputs with every image and video replaced by a blank one of the processor's mean colour
        (normalised pixels 0)."""
        pixels = [key for key in self.media_keys if key.startswith("pixel_values") and key in inputs]
        return {**inputs, **{key: torch.zeros_like(inputs[key]) for key in pixels}}

    def placeholder_ids(self, model_config: Any, tokenizer: Any) -> tuple[int, ...]:
        """The ids of every placeholder token of this architecture (sorted): never sampled, masked when scoring."""
        ids = {getattr(model_config, name, None) for name in self.placeholder_attributes}
        unknown = getattr(tokenizer, "unk_token_id", None)
        for token in self.placeholder_tokens:
            token_id = tokenizer.convert_tokens_to_ids(token)
            if token_id is not None and token_id != unknown:
                ids.add(token_id)
        return tuple(sorted(int(i) for i in ids if i is not None))


def stacked_concat(keys: Sequence[str], samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
    """``{key: [sum n_i, ...]}``: each key's per-sample ``[n_i, ...]`` tensors concatenated in sample order (samples
    without media add no row); ``{}`` when none has any."""
    if not any(sample[keys[0]].shape[0] for sample in samples):
        return {}
    return {key: torch.cat([s[key] for s in samples if s[keys[0]].shape[0]], dim=0) for key in keys}


__all__ = ["SampleMedia", "VLMArchitecture", "stacked_concat"]
