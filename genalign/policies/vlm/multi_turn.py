"""Multi-turn rollouts of the VLM family: the shared turn loop (:mod:`genalign.policies.lm.multi_turn`) with images.

:class:`ImageTurns` is the family's side of the loop:

* **Prompt.** The row's prompt becomes chat messages with image blocks (:func:`~genalign.policies.vlm.inputs.chat_messages`,
  the row's images loaded and resized as for single-turn rollouts); ``reset``'s first observation is appended to the
  last user message (its text, and its images as image blocks after the row's). The chat is rendered with the
  processor's template (the episode's tool schemas as ``tools=``) and encoded by the processor with every image.
* **A turn** is sampled for all active trajectories by the family's image-bound ``generate`` call
  (:meth:`~genalign.policies.vlm.policy.VLMPolicy.generate_with_images`, ``rollout_batch_size`` at a time): each
  context (prompt and completion so far, left-padded) goes with ``mm_token_type_ids`` (1 at every image token, of
  the prompt and of earlier observations) and all the trajectory's images in sequence order, so the model's 3-D rotary
  positions (``get_rope_index``) place each image where its tokens are.
* **An answer** of the environment is rendered as text with the chat template (the images as placeholders; the text
  the template adds after the model's turn, :meth:`~genalign.policies.lm.chat_turns.ChatRenderer.observation_text`)
  and encoded by the processor *on its own* with the answer's images (tool messages' images, then the observation's,
  loaded and resized like the prompt's): the suffix's ids, with each image placeholder expanded to the image's tokens,
  are appended to the trajectory and its images to the trajectory's images. Earlier turns are never encoded again. An
  image that cannot be read ends the trajectory, counted (``environment_errors/observation``).

What the backend sees is the causal-LM family's layout plus the family's inputs: ``mm_token_type_ids`` ``[N, P]`` of
the prompts, and per sample ``pixel_values`` ``[p_i, D]`` and ``image_grid_thw`` ``[k_i, 3]`` of *all* its images
(prompt first, then the observations in order). The scoring pass (:meth:`~genalign.policies.vlm.policy.VLMPolicy.model_inputs`)
runs the backbone over ``prompt + completion`` with the environment tokens attended (``completion_attention``), their
image tokens typed 1 and every image bound, so positions and image features are those the turns were sampled with.
Each row gains ``image_sizes`` and ``image_input_sizes`` of the row's images, as for single-turn rollouts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any

import torch
from torch import Tensor

from genalign.data.images import ImageLoadError
from genalign.environments import Episode, Observation
from genalign.policies.lm.chat_turns import Message
from genalign.policies.lm.engines.base import SamplingParams
from genalign.policies.lm.multi_turn import (
    ObservationError,
    ObservationTokens,
    SampledTurn,
    Trajectory,
    kept_turns,
    left_padded_contexts,
    turn_budgets,
)
from genalign.policies.vlm.inputs import EncodedText, chat_messages, encode_text, load_images, mm_token_types

#: A trajectory's images of one encoding (the prompt's, or one answer's): ``pixel_values`` ``[p, D]`` and
#: ``image_grid_thw`` ``[k, 3]``.
ImageBlock = tuple[Tensor, Tensor]


def image_blocks(messages: list[Message]) -> list[Any]:
    """The images of ``messages``' content blocks (``{"type": "image", "image": ...}``), in order."""
    return [
        block.get("image")
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, Mapping) and block.get("type") == "image"
    ]


def with_first_observation(messages: list[Message], observation: Observation, index: int) -> list[Message]:
    """``messages`` with ``reset``'s observation appended to the last user message (a new user message when there is
    none) after a blank line, as its content blocks: images, then text (the row's images must not follow that
    message: the observation's come after them)."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if not users:
        return [*messages, {"role": "user", "content": observation.content()}]
    last = users[-1]
    if observation.images and image_blocks(messages[last + 1 :]):
        raise ValueError(
            f"row {index}: the environment's first observation has images and the prompt has image blocks after its "
            "last user message; put the prompt's images in user messages (the observation's come after them)."
        )
    content = messages[last]["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if any(isinstance(b, Mapping) and b.get("type") == "text" and b.get("text") for b in blocks):
        blocks.append({"type": "text", "text": "\n\n"})
    added = observation.content()
    blocks += [{"type": "text", "text": added}] if isinstance(added, str) else added
    return [*messages[:last], {**messages[last], "content": blocks}, *messages[last + 1 :]]


class ImageTurns:
    """The VLM family's side of the shared turn loop (module docstring); ``policy`` is a
    :class:`~genalign.policies.vlm.policy.VLMPolicy` with environments."""

    left_padded: frozenset[str] = frozenset({"mm_token_type_ids"})

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def start(self, row: dict[str, Any], index: int, episode: Episode | None, counts: Counter) -> Trajectory:
        policy, config = self.policy, self.policy.config
        row_images = load_images(row.get(config.image_column), config, policy.image_factor, index, config.image_column)
        messages = chat_messages(
            row["prompt"], len(row_images.images), row_index=index, system_prompt=config.system_prompt
        )
        images = list(row_images.images)
        observation = episode.observation if episode is not None else None
        if observation:
            messages = with_first_observation(messages, observation, index)
            if observation.images:
                images += load_images(list(observation.images), config, policy.image_factor, index, "reset").images
        tools = episode.tool_schemas if episode is not None else []
        text = policy.chat_renderer.render(messages, tools, generation_prompt=True)
        encoded = encode_text(policy.processor, text, images, config)
        grids = encoded.image_grid_thw[: len(row_images.images)].tolist()
        sizes = {
            "image_sizes": row_images.original_sizes,
            "image_input_sizes": [(w * policy.patch_size, h * policy.patch_size) for _, h, w in grids],
        }
        prompt = encoded.input_ids.tolist()
        return Trajectory({**row, **sizes}, episode, messages, prompt, index=index, media=self._media(encoded))

    @staticmethod
    def _media(encoded: EncodedText) -> list[ImageBlock]:
        return [(encoded.pixel_values, encoded.image_grid_thw)] if encoded.image_grid_thw.shape[0] else []

    @staticmethod
    def images_of(trajectory: Trajectory) -> ImageBlock:
        """The trajectory's ``pixel_values`` ``[p, D]`` and ``image_grid_thw`` ``[k, 3]``, in sequence order."""
        if not trajectory.media:
            return torch.zeros(0, 0), torch.zeros(0, 3, dtype=torch.long)
        pixels, grids = zip(*trajectory.media, strict=True)
        return torch.cat(pixels), torch.cat(grids)

    def generate(self, active: list[Trajectory], params: SamplingParams, counts: Counter) -> list[SampledTurn]:
        policy = self.policy
        budgets, turn_params = turn_budgets(active, params, policy.config.multi_turn.max_total_tokens)
        ids, mask = left_padded_contexts(active, policy.pad_token_id)  # [B, L]
        types = mm_token_types(ids, policy.image_token_id)  # [B, L] the prompts' and the observations' image tokens
        media = [dict(zip(("pixel_values", "image_grid_thw"), self.images_of(t), strict=True)) for t in active]
        generations = policy.generate_with_images(ids, mask, types, media, turn_params)
        turns, start = [], 0
        for generation in generations:  # one per rollout_batch_size trajectories, in order
            size = generation.completion_ids.shape[0]
            turns += kept_turns(generation, budgets[start : start + size], counts)
            start += size
        return turns

    def observation(
        self, trajectory: Trajectory, ids: list[int], text: str, answer: list[Message]
    ) -> ObservationTokens:
        policy, config = self.policy, self.policy.config
        assistant = {"role": "assistant", "content": text}
        model_text = policy.tokenizer.decode(ids, skip_special_tokens=False)
        tools = trajectory.episode.tool_schemas  # an answer exists: the episode started
        suffix = policy.chat_renderer.observation_text(trajectory.messages, tools, assistant, model_text, answer)
        images = image_blocks(answer)
        try:
            images = load_images(images, config, policy.image_factor, trajectory.index, "environment answer").images
        except ImageLoadError as err:
            raise ObservationError(str(err)) from None
        encoded = encode_text(policy.processor, suffix, images, config)
        return ObservationTokens(encoded.input_ids.tolist(), [assistant, *answer], self._media(encoded))

    def fork(self, parents: list[Hashable], children: list[list[Hashable]]) -> None:
        """Nothing is held between turns (every turn re-encodes the conversation): a branch needs no copy."""

    def per_sample(self, trajectories: list[Trajectory], prompt_ids: Tensor, completion_ids: Tensor) -> dict[str, Any]:
        images = [self.images_of(t) for t in trajectories]
        return {
            "mm_token_type_ids": mm_token_types(prompt_ids, self.policy.image_token_id),  # [N, P]
            "pixel_values": [pixels for pixels, _ in images],
            "image_grid_thw": [grid for _, grid in images],
        }


__all__ = ["ImageTurns", "image_blocks", "with_first_observation"]
