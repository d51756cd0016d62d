"""Gemma 3 (image-text): one fixed-size image tensor per image, bidirectional attention inside each image.

The processor resizes every image to the vision tower's square input and returns ``pixel_values`` ``[K, 3, S, S]``
(one row per image of the batch, in sample order; pan-and-scan off), and writes each image as
``<start_of_image>`` + ``mm_tokens_per_image`` × ``<image_soft_token>`` + ``<end_of_image>``. ``token_type_ids``
(1 at the soft tokens) makes the attention bidirectional inside each image, in the prompt pass of ``generate`` and in
the scoring pass alike. Positions are the 1-D ones ``generate`` derives from the attention mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genalign.policies.vlm.architectures.base import SampleMedia, VLMArchitecture, stacked_concat


@dataclass(frozen=True)
class Gemma3(VLMArchitecture):
    """Gemma 3 image-text-to-text (module docstring)."""

    def split(
        self, encoded: Any, images_per_sample: Sequence[int], videos_per_sample: Sequence[int]
    ) -> list[SampleMedia]:
        if "pixel_values" not in encoded:
            return [{"pixel_values": torch.zeros(0, 3, 1, 1)} for _ in images_per_sample]
        pixels = encoded["pixel_values"]  # [K, 3, S, S]
        if pixels.shape[0] != sum(images_per_sample):
            raise ValueError(
                f"the processor returned {pixels.shape[0]} images for {sum(images_per_sample)} (pan-and-scan crops "
                "are not supported: set do_pan_and_scan to false in the processor config)"
            )
        return [{"pixel_values": block} for block in torch.split(pixels, list(images_per_sample))]

    def concat(self, samples: Sequence[SampleMedia]) -> dict[str, Tensor]:
        return stacked_concat(self.image_keys, samples)

    def image_input_sizes(self, media: SampleMedia, processor: Any) -> list[tuple[int, int]]:
        height, width = media["pixel_values"].shape[-2:]
        return [(int(width), int(height))] * int(media["pixel_values"].shape[0])

    def images_per_sample(self, samples: Sequence[SampleMedia]) -> list[int]:
        return [int(s["pixel_values"].shape[0]) for s in samples]

    def planned_image_tokens(self, model_config: Any, max_pixels: int, processor_config: Any = None) -> int:
        """Every image is resized to the tower's square input whatever ``max_pixels`` is, and written as
        ``"\\n\\n" <start_of_image> mm_tokens_per_image x <image_soft_token> <end_of_image> "\\n\\n"``: the soft
        tokens, the two boundaries and at most four newline tokens (two where the tokenizer has a ``"\\n\\n"`` token)."""
        return int(model_config.mm_tokens_per_image) + 6


GEMMA3 = Gemma3(
    name="gemma3",
    model_types=("gemma3",),
    image_keys=("pixel_values",),
    token_type_key="token_type_ids",
    placeholder_attributes=("boi_token_index", "eoi_token_index", "image_token_index"),
)


#: the tiny Gemma 3's special tokens, in the order of their ids
GEMMA3_SPECIAL_TOKENS = [
    "<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
    "<image_soft_token>",
]  # fmt: skip


def build_tiny(model_type: str, folder: Path) -> Path:
    """A tiny random Gemma 3 with its processor, in ``folder`` (:mod:`genalign.policies.vlm.architectures.tiny`): a
    SigLIP tower on 32 x 32 images in 8-pixel patches, pooled to 4 soft tokens per image; sliding-window and global
    layers alternate as in the real model (window 16)."""
    import transformers as tf

    from genalign.policies.vlm.architectures.tiny import TEXT_WIDTH, chat_template, save_tiny, tiny_tokenizer

    image_tokens = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    tokenizer = tiny_tokenizer(
        GEMMA3_SPECIAL_TOKENS, pad_token="<pad>", eos_token="<end_of_turn>", bos_token="<bos>",
        extra_special_tokens=image_tokens,
    )  # fmt: skip
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in GEMMA3_SPECIAL_TOKENS}
    template = chat_template(
        "<start_of_turn>", "<end_of_turn>", {"image": "<start_of_image>"}, roles={"assistant": "model"},
        prefix="{{ bos_token }}",
    )  # fmt: skip
    processor = tf.Gemma3Processor(
        image_processor=tf.Gemma3ImageProcessor(size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
        chat_template=template,
        image_seq_length=4,
    )
    config = tf.Gemma3Config(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": TEXT_WIDTH, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16,
            "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"],
            "max_position_embeddings": 512, "pad_token_id": ids["<pad>"], "eos_token_id": ids["<end_of_turn>"],
            "bos_token_id": ids["<bos>"],
        },
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        mm_tokens_per_image=4,
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
    )  # fmt: skip
    model = tf.Gemma3ForConditionalGeneration(config)
    return save_tiny(folder, model, processor, ids["<end_of_turn>"], ids["<pad>"])


__all__ = ["GEMMA3", "GEMMA3_SPECIAL_TOKENS", "Gemma3", "build_tiny"]
