"""Idefics3 and SmolVLM: a padded stack of sub-images per sample, with their pixel masks.

The processor cuts each image into tiles plus a global view (``do_image_splitting``; one view without it), pads every
view of the batch to the batch's largest one, and returns ``pixel_values`` ``[B, N, 3, H, W]`` and
``pixel_attention_mask`` ``[B, N, H, W]`` (``N`` the largest number of views of a sample; missing views are all
zero). Each image is written as ``<fake_token_around_image>`` + row/column tags or ``<global-img>`` + ``image_seq_len``
× ``<image>`` per view. A sample keeps its real views (``[n_i, 3, H, W]``, those with a non-empty mask); a micro-batch
pads them again to ``[n, max n_i, 3, max H, max W]`` with zeros, as the processor does: the model drops all-zero
views, so the padding never reaches it. Positions are the 1-D ones ``generate`` derives from the attention mask.

Reading chosen: ``image_input_sizes`` lists the size of every view the model saw (tiles and the global view), and
the blank image of ``logp_without_image`` is 0 everywhere but one value (1e-6) per view, because the model takes an
all-zero view for padding and would drop it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genalign.policies.vlm.architectures.base import SampleMedia, VLMArchitecture

#: tiles per side of the published Idefics3 and SmolVLM processors (longest edge 4 x the tile side)
PUBLISHED_TILES_PER_SIDE = 4

#: the row / column tags of image tiles (up to 6 x 6 tiles), the global-view tag and the image boundary token
TILE_TOKENS = (
    "<fake_token_around_image>",
    "<global-img>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
)


@dataclass(frozen=True)
class Idefics3(VLMArchitecture):
    """Idefics3 / SmolVLM (module docstring)."""

    def split(
        self, encoded: Any, images_per_sample: Sequence[int], videos_per_sample: Sequence[int]
    ) -> list[SampleMedia]:
        if "pixel_values" not in encoded:
            return [
                {
                    "pixel_values": torch.zeros(0, 3, 1, 1),
                    "pixel_attention_mask": torch.zeros(0, 1, 1, dtype=torch.bool),
                }
                for _ in images_per_sample
            ]
        pixels, masks = encoded["pixel_values"], encoded["pixel_attention_mask"].bool()  # [B, N, 3, H, W], [B, N, H, W]
        real = masks.flatten(2).any(-1)  # [B, N] views that hold an image
        return [
            {"pixel_values": pixels[i][real[i]], "pixel_attention_mask": masks[i][real[i]]} for i in range(len(real))
        ]

    def concat(self, samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
        views = max(int(s["pixel_values"].shape[0]) for s in samples)
        if views == 0:
            return {}
        height = max(int(s["pixel_values"].shape[-2]) for s in samples if s["pixel_values"].shape[0])
        width = max(int(s["pixel_values"].shape[-1]) for s in samples if s["pixel_values"].shape[0])
        pixels = torch.zeros(len(samples), views, 3, height, width, dtype=_dtype(samples))
        masks = torch.zeros(len(samples), views, height, width, dtype=torch.bool)
        for i, sample in enumerate(samples):
            count, (h, w) = sample["pixel_values"].shape[0], sample["pixel_values"].shape[-2:]
            if count:
                pixels[i, :count, :, :h, :w] = sample["pixel_values"]
                masks[i, :count, :h, :w] = sample["pixel_attention_mask"]
        return {"pixel_values": pixels, "pixel_attention_mask": masks}

    def image_input_sizes(self, media: SampleMedia, processor: Any) -> list[tuple[int, int]]:
        masks = media["pixel_attention_mask"]  # [n, H, W]
        return [(int(m.any(0).sum()), int(m.any(1).sum())) for m in masks]

    def images_per_sample(self, samples: Sequence[SampleMedia]) -> list[int]:
        return [int(s["pixel_values"].shape[0]) for s in samples]

    def planned_image_tokens(self, model_config: Any, max_pixels: int, processor_config: Any = None) -> int:
        """The processor resizes every image to its ``size.longest_edge`` whatever ``max_pixels`` is, and cuts a
        square image into ``t x t`` tiles of ``max_image_size.longest_edge`` (``t`` from ``processor_config``, a
        preprocessor config dict; without one the published processors' ``t = 4``) plus the global view: each tile
        is its boundary and row/column tags and ``image_seq_len = (side / patch)^2 / scale_factor^2`` image tokens,
        each tile row ends in a newline, and the global view is a newline, its two tags, the image tokens and a
        closing boundary."""
        vision = model_config.vision_config
        per_view = (vision.image_size // vision.patch_size) ** 2 // model_config.scale_factor**2
        tiles = PUBLISHED_TILES_PER_SIDE
        if processor_config is not None:
            tiles = processor_config["size"]["longest_edge"] // processor_config["max_image_size"]["longest_edge"]
        if tiles <= 1:
            return per_view + 3
        return tiles * tiles * (per_view + 2) + tiles + per_view + 4

    def blank_images(self, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        pixels = inputs["pixel_values"]  # [B, N, 3, H, W]
        real = (pixels != 0).flatten(2).any(-1)  # [B, N]
        blank = torch.zeros_like(pixels)
        blank[..., 0, 0, 0] = torch.where(real, 1.0e-6, 0.0).to(pixels.dtype)
        return {**inputs, "pixel_values": blank}


def _dtype(samples: Sequence[SampleMedia]) -> torch.dtype:
    return next(s["pixel_values"].dtype for s in samples if s["pixel_values"].shape[0])


IDEFICS3 = Idefics3(
    name="idefics3",
    model_types=("idefics3", "smolvlm"),
    image_keys=("pixel_values", "pixel_attention_mask"),
    placeholder_attributes=("image_token_id",),
    placeholder_tokens=TILE_TOKENS,
)


def build_tiny(model_type: str, folder: Path) -> Path:
    """A tiny random Idefics3 (SmolVLM's architecture) with its processor, in ``folder``
    (:mod:`genalign.policies.vlm.architectures.tiny`): images resized to a longest edge of 64 and split into 32 x 32
    tiles plus a global view, a SigLIP tower in 8-pixel patches, pixel shuffle by 2 (4 tokens per view), a Llama
    language model."""
    import transformers as tf

    from genalign.policies.vlm.architectures.tiny import TEXT_WIDTH, chat_template, save_tiny, tiny_tokenizer

    special = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<image>", *TILE_TOKENS]
    tokenizer = tiny_tokenizer(special, eos_token="<end_of_utterance>", pad_token="<|endoftext|>")
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in special}
    template = chat_template(
        "<|im_start|>", "<end_of_utterance>", {"image": "<image>"}, roles={"user": "User:", "assistant": "Assistant:"}
    )
    image_processor = tf.Idefics3ImageProcessor(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True
    )
    processor = tf.Idefics3Processor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=template, image_seq_len=4
    )
    config = tf.Idefics3Config(
        text_config={
            "model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": TEXT_WIDTH, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "pad_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<end_of_utterance>"], "bos_token_id": None,
        },
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        image_token_id=ids["<image>"],
        scale_factor=2,
        pad_token_id=ids["<|endoftext|>"],
    )  # fmt: skip
    model = tf.Idefics3ForConditionalGeneration(config)
    return save_tiny(folder, model, processor, ids["<end_of_utterance>"], ids["<|endoftext|>"])


__all__ = ["IDEFICS3", "TILE_TOKENS", "Idefics3", "build_tiny"]
