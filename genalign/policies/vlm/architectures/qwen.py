"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: flat patches split by their grids, 3-D rotary positions, native video.

The processor returns every image's patches flattened into ``pixel_values`` ``[sum_j t_j h_j w_j, D]`` with
``image_grid_thw`` ``[K, 3]`` (image ``j`` owns ``t_j * h_j * w_j`` rows), and videos the same way in
``pixel_values_videos`` / ``video_grid_thw``. A sample keeps its own rows and grids; a micro-batch concatenates them
back in sample order. ``mm_token_type_ids`` (0 text, 1 image, 2 video) tells the model where each image's and video's
tokens are; the model computes its 3-D rotary positions (``get_rope_index``) from them and the attention mask.
Qwen3-VL writes each video frame pair as ``<t seconds><|vision_start|>...<|vision_end|>`` (the processor needs the
frames' timestamps: the policy passes the sampled frame indices and rate as video metadata).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genalign.policies.vlm.architectures.base import SampleMedia, VLMArchitecture

#: Config attributes of Qwen-VL models naming the vision placeholder tokens.
VISION_TOKEN_ATTRIBUTES = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


def split_by_grid(pixel_values: Tensor, grid_thw: Tensor, items_per_sample: Sequence[int]) -> list[Tensor]:
    """Split flat ``pixel_values`` ``[sum_j t_j h_j w_j, D]`` into per-sample blocks using the grid sizes.

    Args:
        grid_thw: ``[K, 3]`` grid of every image (or video), in sample order.
        items_per_sample: number of images (videos) of each sample (sums to ``K``).
    Returns:
        per sample ``[sum over its items of t h w, D]``.
    """
    if sum(items_per_sample) != grid_thw.shape[0]:
        raise ValueError(
            f"images_per_sample sums to {sum(items_per_sample)} but image_grid_thw has {grid_thw.shape[0]} rows"
        )
    patches_per_item = grid_thw.prod(dim=1).tolist()  # [K]
    if sum(patches_per_item) != pixel_values.shape[0]:
        raise ValueError(
            f"image_grid_thw covers {sum(patches_per_item)} patches but pixel_values has {pixel_values.shape[0]} rows"
        )
    out, start, item = [], 0, 0
    for count in items_per_sample:
        size = sum(patches_per_item[item : item + count])
        out.append(pixel_values[start : start + size])
        start, item = start + size, item + count
    return out


def concat_by_grid(pixel_values: Sequence[Tensor], grids: Sequence[Tensor], keys: tuple[str, str]) -> dict[str, Tensor]:
    """``{keys[0]: [sum p_i, D], keys[1]: [sum k_i, 3]}`` of per-sample ``[p_i, D]`` patches and ``[k_i, 3]`` grids
    in sample order (samples without items add no row); ``{}`` when no sample has any."""
    if sum(int(g.shape[0]) for g in grids) == 0:
        return {}
    pixels = [p for p, g in zip(pixel_values, grids, strict=True) if g.shape[0]]
    return {keys[0]: torch.cat(pixels, dim=0), keys[1]: torch.cat(list(grids), dim=0)}


def _per_sample(encoded: Any, keys: tuple[str, str], counts: Sequence[int]) -> tuple[list[Tensor], list[Tensor]]:
    if keys[1] not in encoded or not sum(counts):
        return [torch.zeros(0, 0)] * len(counts), [torch.zeros(0, 3, dtype=torch.long)] * len(counts)
    grid = encoded[keys[1]].long()  # [K, 3]
    return split_by_grid(encoded[keys[0]], grid, counts), list(torch.split(grid, list(counts)))


@dataclass(frozen=True)
class QwenVL(VLMArchitecture):
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL (module docstring)."""

    IMAGES = ("pixel_values", "image_grid_thw")
    VIDEOS = ("pixel_values_videos", "video_grid_thw")

    def split(
        self, encoded: Any, images_per_sample: Sequence[int], videos_per_sample: Sequence[int]
    ) -> list[SampleMedia]:
        pixels, grids = _per_sample(encoded, self.IMAGES, images_per_sample)
        video_pixels, video_grids = _per_sample(encoded, self.VIDEOS, videos_per_sample)
        return [
            dict(zip(self.IMAGES + self.VIDEOS, media, strict=True))
            for media in zip(pixels, grids, video_pixels, video_grids, strict=True)
        ]

    def concat(self, samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
        out = {}
        for keys in (self.IMAGES, self.VIDEOS):
            if keys[0] in samples[0]:
                out |= concat_by_grid([s[keys[0]] for s in samples], [s[keys[1]] for s in samples], keys)
        return out

    def image_kwargs(self, min_pixels: int, max_pixels: int) -> dict[str, Any]:
        return {"images_kwargs": {"size": {"shortest_edge": min_pixels, "longest_edge": max_pixels}}}

    def video_kwargs(self, videos: Sequence[Any], min_pixels: int, max_pixels: int) -> dict[str, Any]:
        """The frames, a pixel budget that keeps every frame's size, and the frames' indices and rate (Qwen3-VL writes
        their timestamps into the prompt)."""
        from transformers.video_utils import VideoMetadata

        longest = max(len(v.indices) + len(v.indices) % 2 for v in videos) * max_pixels
        return super().video_kwargs(videos, min_pixels, max_pixels) | {
            "videos_kwargs": {
                "size": {"shortest_edge": min_pixels, "longest_edge": longest},
                "video_metadata": [
                    VideoMetadata(
                        total_num_frames=len(v.indices), fps=v.fps, frames_indices=list(range(len(v.indices)))
                    )
                    for v in videos
                ],
            },
        }

    def image_factor(self, processor: Any) -> int:
        return int(processor.image_processor.patch_size) * int(processor.image_processor.merge_size)

    def planned_image_tokens(self, model_config: Any, max_pixels: int, processor_config: Any = None) -> int:
        """One token per merged patch: ``max_pixels / (patch_size * spatial_merge_size)^2``, plus the two boundary
        tokens."""
        vision = model_config.vision_config
        return max_pixels // (vision.patch_size * vision.spatial_merge_size) ** 2 + 2

    def image_input_sizes(self, media: SampleMedia, processor: Any) -> list[tuple[int, int]]:
        patch = int(processor.image_processor.patch_size)
        return [(int(w) * patch, int(h) * patch) for _, h, w in media["image_grid_thw"].tolist()]

    def images_per_sample(self, samples: Sequence[SampleMedia]) -> list[int]:
        return [int(s["image_grid_thw"].shape[0]) for s in samples]


QWEN_VL = QwenVL(
    name="qwen-vl",
    model_types=("qwen2_vl", "qwen2_5_vl", "qwen3_vl"),
    image_keys=QwenVL.IMAGES,
    video_keys=QwenVL.VIDEOS,
    token_type_key="mm_token_type_ids",
    placeholder_attributes=VISION_TOKEN_ATTRIBUTES,
    positions="model",
    multi_turn=True,
)


#: Qwen-VL's special tokens, in the order of their ids
QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def build_tiny(model_type: str, folder: Path) -> Path:
    """A tiny random Qwen2-VL / Qwen2.5-VL / Qwen3-VL (``model_type``) with its processor, in ``folder``
    (:mod:`genalign.policies.vlm.architectures.tiny`): 6-pixel patches merged 2 x 2 (a 48 x 48 image or frame pair
    is 16 tokens), M-RoPE sections 2/3/3 of a head of 16."""
    import transformers as tf

    from genalign.policies.vlm.architectures.tiny import TEXT_WIDTH, chat_template, save_tiny, tiny_tokenizer

    tokenizer = tiny_tokenizer(QWEN_SPECIAL_TOKENS, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_SPECIAL_TOKENS}
    patches = {"patch_size": 6, "merge_size": 2, "temporal_patch_size": 2}
    vision_blocks = {
        "image": "<|vision_start|><|image_pad|><|vision_end|>",
        "video": "<|vision_start|><|video_pad|><|vision_end|>",
    }
    template = chat_template("<|im_start|>", "<|im_end|>", vision_blocks)
    rope = {"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3]}
    text = {
        "vocab_size": len(tokenizer), "hidden_size": TEXT_WIDTH, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512, "rope_parameters": rope,
        "pad_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"], "bos_token_id": None,
    }  # fmt: skip
    vision_patches = {"patch_size": 6, "spatial_merge_size": 2, "temporal_patch_size": 2}
    tokens = {
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
    }  # fmt: skip
    image_processor = tf.Qwen2VLImageProcessor(min_pixels=256, max_pixels=48 * 48, **patches)
    if model_type == "qwen3_vl":
        config = tf.Qwen3VLConfig(
            text_config=text | {"head_dim": 16, "rope_parameters": rope | {"mrope_interleaved": True}},
            vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                           "out_hidden_size": TEXT_WIDTH, "num_position_embeddings": 36,
                           "deepstack_visual_indexes": [0], **vision_patches},
            tie_word_embeddings=True, **tokens,
        )  # fmt: skip
        video_processor = tf.Qwen3VLVideoProcessor(
            size={"shortest_edge": 256, "longest_edge": 48 * 48 * 16}, do_sample_frames=False,
            cap_pixels_per_frame=False, **patches,
        )  # fmt: skip
        processor_class, model_class = tf.Qwen3VLProcessor, tf.Qwen3VLForConditionalGeneration
    elif model_type == "qwen2_5_vl":
        config = tf.Qwen2_5_VLConfig(
            text_config=text,
            vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                           "out_hidden_size": TEXT_WIDTH, "window_size": 32, "fullatt_block_indexes": [1],
                           **vision_patches},
            tie_word_embeddings=True, **tokens,
        )  # fmt: skip
        video_processor = tf.Qwen2VLVideoProcessor(do_sample_frames=False, cap_pixels_per_frame=False, **patches)
        processor_class, model_class = tf.Qwen2_5_VLProcessor, tf.Qwen2_5_VLForConditionalGeneration
    else:
        config = tf.Qwen2VLConfig(
            text_config=text,
            vision_config={"depth": 2, "embed_dim": 32, "hidden_size": TEXT_WIDTH, "num_heads": 2, "mlp_ratio": 2,
                           **vision_patches},
            tie_word_embeddings=True, **tokens,
        )  # fmt: skip
        video_processor = tf.Qwen2VLVideoProcessor(do_sample_frames=False, cap_pixels_per_frame=False, **patches)
        processor_class, model_class = tf.Qwen2VLProcessor, tf.Qwen2VLForConditionalGeneration
    processor = processor_class(
        image_processor=image_processor, video_processor=video_processor, tokenizer=tokenizer, chat_template=template
    )
    model = model_class(config)
    return save_tiny(folder, model, processor, ids["<|im_end|>"], ids["<|endoftext|>"])


__all__ = [
    "QWEN_SPECIAL_TOKENS",
    "QWEN_VL",
    "VISION_TOKEN_ATTRIBUTES",
    "QwenVL",
    "build_tiny",
    "concat_by_grid",
    "split_by_grid",
]
