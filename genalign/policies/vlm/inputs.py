"""Inputs of the vision-language policy: chat messages with image and video blocks, each row's images and sampled
videos, processor outputs per row (split by the architecture), padding, and the Qwen-VL helpers that split flat
patches by their grids."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genalign.data.images import RowImages, load_row_images
from genalign.policies.vlm.architectures import SampleMedia, VLMArchitecture, native_video_model_types
from genalign.policies.vlm.architectures.qwen import concat_by_grid, split_by_grid
from genalign.policies.vlm.config import VLMPolicyConfig
from genalign.policies.vlm.video import RowVideo, load_row_videos

#: Marker of an image position inside a string prompt.
IMAGE_MARKER = "<image>"
#: Marker of a video position inside a string prompt.
VIDEO_MARKER = "<video>"
_MARKER_PATTERN = re.compile(f"({re.escape(IMAGE_MARKER)}|{re.escape(VIDEO_MARKER)})")


def _string_prompt_content(prompt: str, num_images: int, num_videos: int, row_index: int) -> list[dict[str, Any]]:
    """Content blocks of a string prompt: images and videos where the markers are, or all images then all videos
    first without markers."""
    pieces = _MARKER_PATTERN.split(prompt)  # text, marker, text, marker, ..., text
    markers = pieces[1::2]
    if not markers:
        return [{"type": "image"}] * num_images + [{"type": "video"}] * num_videos + [{"type": "text", "text": prompt}]
    for marker, count, what in ((IMAGE_MARKER, num_images, "image"), (VIDEO_MARKER, num_videos, "video")):
        if markers.count(marker) != count:
            raise ValueError(
                f"row {row_index}: the prompt has {markers.count(marker)} {marker!r} markers but the row has {count} "
                f"{what}(s); use one marker per {what}, or no marker at all to put images and videos before the text"
            )
    content: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if i % 2:
            content.append({"type": "image" if piece == IMAGE_MARKER else "video"})
        elif piece:
            content.append({"type": "text", "text": piece})
    return content


def _count_blocks(messages: list[dict[str, Any]], kind: str) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, dict) and part.get("type") == kind
    )


def chat_messages(
    prompt: str | list[dict[str, Any]],
    num_images: int,
    *,
    row_index: int,
    system_prompt: str | None,
    num_videos: int = 0,
):
    """Chat messages with ``{"type": "image"}`` and ``{"type": "video"}`` blocks for a row with ``num_images``
    images and ``num_videos`` videos.

    Raises ValueError (naming the row) when the prompt's markers or blocks do not match the row's images / videos.
    """
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": _string_prompt_content(prompt, num_images, num_videos, row_index)}]
    elif isinstance(prompt, list):
        messages = [dict(m) for m in prompt]
        for kind, count in (("image", num_images), ("video", num_videos)):
            blocks = _count_blocks(messages, kind)
            if blocks != count:
                raise ValueError(
                    f"row {row_index}: the chat prompt has {blocks} {kind} block(s) but the row has {count} "
                    f"{kind}(s); add one {{'type': '{kind}'}} block per {kind}"
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
        input_ids: ``[P_i]`` prompt tokens with the image and video placeholders expanded.
        mm_token_type_ids: ``[P_i]`` 0 for text, 1 for image tokens, 2 for video tokens.
        media: the row's share of the processor's image and video outputs (the architecture's keys, e.g.
            ``pixel_values`` ``[sum_k t_k h_k w_k, D]`` and ``image_grid_thw`` ``[K, 3]`` for Qwen-VL).
        image_sizes: ``(width, height)`` of each image as stored.
        image_input_sizes: ``(width, height)`` of each image as seen by the model.
        videos: the row's sampled videos (frames as stored, their rate).
    """

    input_ids: Tensor
    mm_token_type_ids: Tensor
    media: SampleMedia
    image_sizes: list[tuple[int, int]]
    image_input_sizes: list[tuple[int, int]]
    videos: list[RowVideo] = field(default_factory=list)


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
    """Concatenate per-sample Qwen-VL image tensors in sample order; empty when no sample has images.

    Args:
        pixel_values: per sample ``[p_i, D]``.
        grids: per sample ``[k_i, 3]``.
    Returns:
        ``{"pixel_values": [sum p_i, D], "image_grid_thw": [sum k_i, 3]}`` or ``{}``.
    """
    return concat_by_grid(pixel_values, grids, ("pixel_values", "image_grid_thw"))


def mm_token_types(input_ids: Tensor, image_token_id: int | None, video_token_id: int | None = None) -> Tensor:
    """``[..., L]`` long: 1 at the image placeholder tokens of ``input_ids`` ``[..., L]``, 2 at the video ones, 0
    elsewhere (the rule of transformers processors' ``mm_token_type_ids``)."""
    types = torch.zeros_like(input_ids, dtype=torch.long)
    if image_token_id is not None:
        types = types.masked_fill(input_ids == image_token_id, 1)
    if video_token_id is not None:
        types = types.masked_fill(input_ids == video_token_id, 2)
    return types


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
    """Split flat Qwen-VL ``pixel_values`` ``[sum_j t_j h_j w_j, D]`` into per-sample blocks using the grid sizes
    (:func:`genalign.policies.vlm.architectures.qwen.split_by_grid`)."""
    return split_by_grid(pixel_values, image_grid_thw, images_per_sample)


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


@dataclass
class RowMedia:
    """The loaded images and sampled videos of one row."""

    images: RowImages
    videos: list[RowVideo]


def load_media(row: dict[str, Any], index: int, config: VLMPolicyConfig, image_factor: int, video: bool) -> RowMedia:
    """The images of ``row``'s image column and, when the architecture takes native ``video``, the videos of its
    video column; a video on an architecture without native video is an error naming the fix."""
    images = load_images(row.get(config.image_column), config, image_factor, index, config.image_column)
    value = row.get(config.video_column)
    if value is not None and not video:
        raise ValueError(
            f"row {index} has a video in column {config.video_column!r} but this architecture takes no native video "
            f"(supported: {', '.join(native_video_model_types())}); give the frames as a list of images in "
            f"policy.image_column={config.image_column!r} instead"
        )
    videos = load_row_videos(
        value,
        row_index=index,
        column=config.video_column,
        video_fps=config.video_fps,
        max_frames=config.max_frames,
        min_pixels=config.min_pixels,
        max_pixels=config.max_pixels,
        factor=image_factor,
        base_dir=Path(config.image_root) if config.image_root else None,
    )
    return RowMedia(images, videos)


def _row_chats(
    rows: list[dict[str, Any]], processor, config: VLMPolicyConfig, image_factor: int, video: bool
) -> tuple[list[str], list[RowMedia]]:
    """The chat text of each row (images and videos as placeholders) and its loaded, resized images and videos."""
    texts, loaded = [], []
    for index, row in enumerate(rows):
        if "prompt" not in row:
            raise ValueError(f"row {index} has no 'prompt' column (columns: {sorted(row)})")
        media = load_media(row, index, config, image_factor, video)
        messages = chat_messages(
            row["prompt"],
            len(media.images.images),
            row_index=index,
            system_prompt=config.system_prompt,
            num_videos=len(media.videos),
        )
        texts.append(processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        loaded.append(media)
    return texts, loaded


def encode_prompts(
    rows: list[dict[str, Any]], processor, config: VLMPolicyConfig, architecture: VLMArchitecture
) -> list[EncodedPrompt]:
    """Load each row's images and videos, build its chat, run ``processor`` once on the whole batch and split it per
    row with ``architecture``."""
    factor = architecture.image_factor(processor)
    texts, loaded = _row_chats(rows, processor, config, factor, video=bool(architecture.video_keys))
    images = [media.images.images for media in loaded]
    videos = [video for media in loaded for video in media.videos]
    encoded = processor(
        text=texts,
        images=images if any(images) else None,
        **architecture.image_kwargs(config.min_pixels, config.max_pixels),
        padding=True,
        padding_side="left",
        return_tensors="pt",
        **(architecture.video_kwargs(videos, config.min_pixels, config.max_pixels) if videos else {}),
    )
    mask = encoded["attention_mask"].bool()  # [R, P]
    token_types = next((encoded[k] for k in ("mm_token_type_ids", "token_type_ids") if k in encoded), None)
    if token_types is not None:
        mm_types = token_types.long()  # [R, P]
    else:
        video_token_id = processor.video_token_id if architecture.video_keys else None
        mm_types = mm_token_types(encoded["input_ids"], processor.image_token_id, video_token_id)  # [R, P]
    media = architecture.split(encoded, [len(i) for i in images], [len(m.videos) for m in loaded])
    return [
        EncodedPrompt(
            input_ids=encoded["input_ids"][i][mask[i]],
            mm_token_type_ids=mm_types[i][mask[i]],
            media=media[i],
            image_sizes=row.images.original_sizes,
            image_input_sizes=architecture.image_input_sizes(media[i], processor) if row.images.images else [],
            videos=row.videos,
        )
        for i, row in enumerate(loaded)
    ]


__all__ = [
    "IMAGE_MARKER",
    "VIDEO_MARKER",
    "EncodedPrompt",
    "EncodedText",
    "RowMedia",
    "chat_messages",
    "concat_images",
    "encode_prompts",
    "encode_text",
    "left_pad",
    "load_images",
    "load_media",
    "mm_token_types",
    "right_pad",
    "split_images",
]
