"""Inputs of the vision-language policy: chat messages with image blocks, processor outputs per row, padding, and the
ragged image tensors split per sample and concatenated back per batch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genalign.data.images import RowImages, load_row_images
from genalign.policies.vlm.config import VLMPolicyConfig

#: Marker of an image position inside a string prompt.
IMAGE_MARKER = "<image>"


def _string_prompt_content(prompt: str, num_images: int, row_index: int) -> list[dict[str, Any]]:
    """Content blocks of a string prompt: images where the markers are, or all images first without markers."""
    pieces = prompt.split(IMAGE_MARKER)
    markers = len(pieces) - 1
    if markers == 0:
        return [{"type": "image"}] * num_images + [{"type": "text", "text": prompt}]
    if markers != num_images:
        raise ValueError(
            f"row {row_index}: the prompt has {markers} {IMAGE_MARKER!r} markers but the row has {num_images} "
            f"image(s); use one marker per image, or none to put all images before the text"
        )
    content: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if i > 0:
            content.append({"type": "image"})
        if piece:
            content.append({"type": "text", "text": piece})
    return content


def chat_messages(prompt: str | list[dict[str, Any]], num_images: int, *, row_index: int, system_prompt: str | None):
    """Chat messages with ``{"type": "image"}`` blocks for a row with ``num_images`` images.

    Raises ValueError (naming the row) when the prompt's image markers do not match the number of images.
    """
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": _string_prompt_content(prompt, num_images, row_index)}]
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


def right_pad(x: Tensor, width: int, value: float) -> Tensor:
    """Pad ``x`` ``[B, C]`` on the right to ``[B, width]``."""
    return x if x.shape[1] == width else torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


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
    pixels = [p for p, g in zip(pixel_values, grids, strict=True) if g.shape[0]]  # samples without images add no row
    return {"pixel_values": torch.cat(pixels, dim=0), "image_grid_thw": torch.cat(grids, dim=0)}


def mm_token_types(input_ids: Tensor, image_token_id: int | None) -> Tensor:
    """``[..., L]`` long: 1 at the image placeholder tokens of ``input_ids`` ``[..., L]``, 0 elsewhere (the rule of
    transformers processors' ``mm_token_type_ids`` for images)."""
    if image_token_id is None:
        return torch.zeros_like(input_ids, dtype=torch.long)
    return (input_ids == image_token_id).long()


@dataclass
class EncodedText:
    """A rendered chat text and its images through the processor (unpadded).

    Attributes:
        input_ids: ``[L]`` tokens with the image placeholders expanded.
        pixel_values: ``[sum_k t_k h_k w_k, D]`` flat patches of the images (``[0, 0]`` without images).
        image_grid_thw: ``[K, 3]`` patch grid of each image (``[0, 3]`` without images).
    """

    input_ids: Tensor
    pixel_values: Tensor
    image_grid_thw: Tensor


def encode_text(processor, text: str, images: list[Any], config: VLMPolicyConfig) -> EncodedText:
    """``text`` (a rendered chat, or a piece of one) and its ``images`` (already at the pixel limits, one per image
    placeholder of the text, in order) through ``processor``, without special tokens added: a piece encodes to the
    ids it adds to the conversation (multi-turn observations are appended this way, never re-tokenizing what came
    before).

    Raises:
        ValueError: the text holds another number of image placeholders than ``images`` (a chat template that does
            not render image content blocks).
    """
    placeholders = text.count(processor.image_token)
    if placeholders != len(images):
        raise ValueError(
            f"the chat template rendered {placeholders} image placeholder(s) ({processor.image_token!r}) for "
            f"{len(images)} image(s); the template must render {{'type': 'image'}} content blocks of user and tool "
            "messages (fix: a processor chat template that does)."
        )
    encoded = processor(
        text=[text],
        images=images or None,
        size={"shortest_edge": config.min_pixels, "longest_edge": config.max_pixels},
        add_special_tokens=False,
        return_tensors="pt",
    )
    if not images:
        return EncodedText(encoded["input_ids"][0], torch.zeros(0, 0), torch.zeros(0, 3, dtype=torch.long))
    return EncodedText(encoded["input_ids"][0], encoded["pixel_values"], encoded["image_grid_thw"].long())


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


def load_images(value: Any, config: VLMPolicyConfig, image_factor: int, row_index: int, column: str) -> RowImages:
    """The images of ``value`` (one image or a list: paths, PIL images, ``{"bytes", "path"}`` dicts) loaded and
    resized to ``[policy.min_pixels, policy.max_pixels]`` with sides multiple of ``image_factor``; errors name the row
    and ``column``."""
    return load_row_images(
        value,
        row_index=row_index,
        column=column,
        min_pixels=config.min_pixels,
        max_pixels=config.max_pixels,
        factor=image_factor,
        base_dir=Path(config.image_root) if config.image_root else None,
    )


def _row_chats(
    rows: list[dict[str, Any]], processor, config: VLMPolicyConfig, image_factor: int
) -> tuple[list[str], list[RowImages]]:
    """The chat text of each row (images as placeholders) and its loaded, resized images."""
    texts, loaded = [], []
    for index, row in enumerate(rows):
        if "prompt" not in row:
            raise ValueError(f"row {index} has no 'prompt' column (columns: {sorted(row)})")
        row_images = load_images(row.get(config.image_column), config, image_factor, index, config.image_column)
        messages = chat_messages(
            row["prompt"], len(row_images.images), row_index=index, system_prompt=config.system_prompt
        )
        texts.append(processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        loaded.append(row_images)
    return texts, loaded


def encode_prompts(
    rows: list[dict[str, Any]], processor, config: VLMPolicyConfig, *, patch_size: int, image_factor: int
) -> list[EncodedPrompt]:
    """Load each row's images, build its chat, run ``processor`` once on the whole batch and split it per row."""
    texts, loaded = _row_chats(rows, processor, config, image_factor)
    images = [row_images.images for row_images in loaded]
    has_images = any(images)
    encoded = processor(
        text=texts,
        images=images if has_images else None,
        size={"shortest_edge": config.min_pixels, "longest_edge": config.max_pixels},
        padding=True,
        padding_side="left",
        return_tensors="pt",
    )
    mask = encoded["attention_mask"].bool()  # [R, P]
    if "mm_token_type_ids" in encoded:
        mm_types = encoded["mm_token_type_ids"].long()  # [R, P]
    else:
        mm_types = mm_token_types(encoded["input_ids"], processor.image_token_id)  # [R, P]
    counts = [len(imgs) for imgs in images]
    if has_images:
        grid = encoded["image_grid_thw"].long()  # [K, 3]
        pixel_blocks = split_images(encoded["pixel_values"], grid, counts)
        grids = list(torch.split(grid, counts))
    else:
        pixel_blocks = [torch.zeros(0, 0)] * len(rows)
        grids = [torch.zeros(0, 3, dtype=torch.long)] * len(rows)
    return [
        EncodedPrompt(
            input_ids=encoded["input_ids"][i][mask[i]],
            mm_token_type_ids=mm_types[i][mask[i]],
            pixel_values=pixel_blocks[i],
            image_grid_thw=grids[i],
            image_sizes=row_images.original_sizes,
            image_input_sizes=[(int(w) * patch_size, int(h) * patch_size) for _, h, w in grids[i].tolist()],
        )
        for i, row_images in enumerate(loaded)
    ]


__all__ = [
    "IMAGE_MARKER",
    "EncodedPrompt",
    "EncodedText",
    "chat_messages",
    "concat_images",
    "encode_prompts",
    "encode_text",
    "left_pad",
    "load_images",
    "mm_token_types",
    "right_pad",
    "split_images",
]
