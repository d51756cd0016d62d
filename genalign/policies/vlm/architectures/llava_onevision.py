"""LLaVA-OneVision: "anyres" tiles per image, the number of tiles read back from the image sizes.

The processor returns ``pixel_values`` ``[K, P, 3, S, S]`` (image ``j``'s base view and its tiles, padded to the batch's
largest tile count ``P``), ``image_sizes`` ``[K, 2]`` (each image's ``(height, width)``) and ``batch_num_images`` (the
image count of every sample that has images). The model recomputes image ``j``'s tile count from its size and the
grid pinpoints (a sample with several images uses the base view only) and drops the padding tiles, so the padding
never reaches it. Each image is written as its run of ``<image>`` tokens (base view, tiles and row-end embeddings).
A sample keeps its images' ``[k_i, P, 3, S, S]`` stacks, sizes and count; a micro-batch pads the stacks to the largest
``P`` again. Native video: the video processor resizes every frame to ``S x S`` and returns ``pixel_values_videos``
``[V, F, 3, S, S]``; the model pools each frame's features 2 x 2 and writes the video as one run of ``<video>`` tokens.
A sample keeps its videos' ``[v_i, F, 3, S, S]`` rows; a micro-batch stacks them again, so every video of a
micro-batch has the same frame count ``F`` (clips with fewer frames than the others are refused, naming the fix). Positions are the 1-D ones ``generate`` derives from the attention mask.

Reading chosen: ``image_input_sizes`` gives the tile size ``(S, S)`` of each image (the view the model's features are
laid out in), not the anyres canvas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genalign.policies.vlm.architectures.base import SampleMedia, VLMArchitecture

KEYS = ("pixel_values", "image_sizes", "batch_num_images")
VIDEO_KEY = "pixel_values_videos"


def _same_frame_counts(counts: Sequence[int]) -> None:
    """The videos of one processor call or micro-batch are stacked: every one must have the same frame count."""
    if len(set(counts)) > 1:
        raise ValueError(
            f"LLaVA-OneVision stacks the videos of a batch, but they have {sorted(set(counts))} frames; give clips of "
            "at least policy.max_frames frames at policy.video_fps, or lower policy.max_frames so every clip has that "
            "many"
        )


@dataclass(frozen=True)
class LlavaOneVision(VLMArchitecture):
    """LLaVA-OneVision (module docstring)."""

    def split(
        self, encoded: Any, images_per_sample: Sequence[int], videos_per_sample: Sequence[int]
    ) -> list[SampleMedia]:
        videos = self._split_videos(encoded, videos_per_sample)
        if "pixel_values" not in encoded:
            empty = {"pixel_values": torch.zeros(0, 1, 3, 1, 1), "image_sizes": torch.zeros(0, 2, dtype=torch.long)}
            return [empty | {"batch_num_images": torch.zeros(0, dtype=torch.long)} | v for v in videos]
        counts = list(images_per_sample)
        pixels = torch.split(encoded["pixel_values"], counts)  # per sample [k_i, P, 3, S, S]
        sizes = torch.split(encoded["image_sizes"].long(), counts)  # per sample [k_i, 2]
        return [
            {"pixel_values": p, "image_sizes": s, "batch_num_images": torch.tensor([n] if n else [], dtype=torch.long)}
            | v
            for p, s, n, v in zip(pixels, sizes, counts, videos, strict=True)
        ]

    @staticmethod
    def _split_videos(encoded: Any, videos_per_sample: Sequence[int]) -> list[SampleMedia]:
        """Each sample's ``{VIDEO_KEY: [v_i, F, 3, S, S]}`` (``[0, 1, 3, 1, 1]`` without videos)."""
        if VIDEO_KEY not in encoded:
            return [{VIDEO_KEY: torch.zeros(0, 1, 3, 1, 1)} for _ in videos_per_sample]
        return [{VIDEO_KEY: block} for block in torch.split(encoded[VIDEO_KEY], list(videos_per_sample))]

    def concat(self, samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
        return self._concat_images(samples) | self._concat_videos(samples)

    def video_kwargs(self, videos: Sequence[Any], min_pixels: int, max_pixels: int) -> dict[str, Any]:
        _same_frame_counts([len(v.model_frames) for v in videos])
        return super().video_kwargs(videos, min_pixels, max_pixels)

    @staticmethod
    def _concat_videos(samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
        videos = [s[VIDEO_KEY] for s in samples if VIDEO_KEY in s and s[VIDEO_KEY].shape[0]]  # [v_i, F, 3, S, S]
        if not videos:
            return {}
        _same_frame_counts([int(v.shape[1]) for v in videos])
        return {VIDEO_KEY: torch.cat(videos)}

    @staticmethod
    def _concat_images(samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
        present = [s for s in samples if s["pixel_values"].shape[0]]
        if not present:
            return {}
        tiles = max(int(s["pixel_values"].shape[1]) for s in present)
        padded = [
            torch.nn.functional.pad(s["pixel_values"], (0, 0, 0, 0, 0, 0, 0, tiles - s["pixel_values"].shape[1]))
            for s in present
        ]  # [k_i, P, 3, S, S], the padding tiles zero
        return {
            "pixel_values": torch.cat(padded),
            "image_sizes": torch.cat([s["image_sizes"] for s in present]),
            "batch_num_images": torch.cat([s["batch_num_images"] for s in present]),
        }

    def image_input_sizes(self, media: SampleMedia, processor: Any) -> list[tuple[int, int]]:
        height, width = media["pixel_values"].shape[-2:]
        return [(int(width), int(height))] * int(media["pixel_values"].shape[0])

    def images_per_sample(self, samples: Sequence[SampleMedia]) -> list[int]:
        return [int(s["pixel_values"].shape[0]) for s in samples]

    def planned_image_tokens(self, model_config: Any, max_pixels: int, processor_config: Any = None) -> int:
        """A square image of ``max_pixels``: the base view's ``p^2`` features (``p = image_size / patch_size``), its
        ``n x n`` tiles' ``(n p)^2`` features (``n`` up to the largest grid pinpoint) and one row-end feature per
        feature row; beyond ``anyres_max_M`` (``M p^2`` tile features) the tile features are downsampled to that
        budget, as the model does."""
        side = model_config.vision_config.image_size
        per_side = side // model_config.vision_config.patch_size
        largest = max(max(pinpoint) for pinpoint in model_config.image_grid_pinpoints) // side
        tiles = min(max(math.ceil(math.sqrt(max_pixels) / side), 1), largest)
        rows = tiles * per_side
        budget = int(model_config.vision_aspect_ratio.removeprefix("anyres_max_") or 0) * per_side**2
        if budget and rows * rows > budget:
            rows = int(math.sqrt(budget))
        return per_side**2 + rows * rows + rows


LLAVA_ONEVISION = LlavaOneVision(
    name="llava-onevision",
    model_types=("llava_onevision",),
    image_keys=KEYS,
    video_keys=(VIDEO_KEY,),
    placeholder_attributes=("image_token_index", "video_token_index", "image_token_id", "video_token_id"),
)

#: the tiny LLaVA-OneVision's special tokens, in the order of their ids
LLAVA_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]


def build_tiny(model_type: str, folder: Path) -> Path:
    """A tiny random LLaVA-OneVision with its processor, in ``folder``
    (:mod:`genalign.policies.vlm.architectures.tiny`): a SigLIP tower on 32 x 32 views in 8-pixel patches (16 tokens
    per view), anyres pinpoints up to 64 x 64 (2 x 2 tiles), a Qwen2 language model."""
    import transformers as tf

    from genalign.policies.vlm.architectures.tiny import TEXT_WIDTH, chat_template, save_tiny, tiny_tokenizer

    tokenizer = tiny_tokenizer(LLAVA_SPECIAL_TOKENS, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in LLAVA_SPECIAL_TOKENS}
    pinpoints = [[32, 32], [32, 64], [64, 32], [64, 64]]
    processor = tf.LlavaOnevisionProcessor(
        image_processor=tf.LlavaOnevisionImageProcessor(
            size={"height": 32, "width": 32}, image_grid_pinpoints=pinpoints
        ),
        video_processor=tf.LlavaOnevisionVideoProcessor(size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
        num_image_tokens=16,
        vision_feature_select_strategy="full",
        chat_template=chat_template("<|im_start|>", "<|im_end|>", {"image": "<image>", "video": "<video>"}),
    )
    config = tf.LlavaOnevisionConfig(
        text_config={
            "model_type": "qwen2", "vocab_size": len(tokenizer), "hidden_size": TEXT_WIDTH, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "pad_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"], "bos_token_id": None,
        },
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        image_token_index=ids["<image>"],
        video_token_index=ids["<video>"],
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_grid_pinpoints=pinpoints,
    )  # fmt: skip
    model = tf.LlavaOnevisionForConditionalGeneration(config)
    return save_tiny(folder, model, processor, ids["<|im_end|>"], ids["<|endoftext|>"])


__all__ = ["LLAVA_ONEVISION", "LLAVA_SPECIAL_TOKENS", "LlavaOneVision", "build_tiny"]
