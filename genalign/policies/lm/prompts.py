"""Turn dataset rows into a left-padded batch of prompt token ids, applying the long-prompt policy.

A row's guidance (``row[GUIDANCE_KEY]``, :mod:`genalign.policies.lm.guidance`) is rendered here: its ``hint`` is
added to the user prompt before the chat template, its ``prefix`` is tokenized on its own and appended after the
rendered prompt, so both are conditioning (prompt ids), never actions. ``self_hint`` and ``temperature`` are the
sampler's business (the causal-LM family resolves a self-hint into a ``hint`` before calling :func:`encode_prompts`).

``policy.max_prompt_tokens`` limits the prompt as the data gives it: the guidance tokens a sample source adds (hint
and prefix, whose length the user cannot foresee, e.g. AdaPrefix's growing reference prefix) come on top of it, and
``truncate_left`` cuts the data's prompt, never the guidance.

A prompt is measured in characters before it is tokenized: one longer than ``max_prompt_tokens`` ×
:func:`chars_per_token_bound` characters (twice the tokenizer's longest token) holds more tokens than the limit
whatever it says, so it is refused or skipped without being tokenized, or cut on the left to that many characters
before the exact cut in tokens (a 20-million-character prompt costs a slice, not gigabytes of token ids). Errors name
the row by where it was read (``data.jsonl, line 7``: :func:`genalign.data.errors.row_location`).
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from genalign.data.errors import DataError, row_location
from genalign.policies.base import GUIDANCE_KEY
from genalign.policies.lm.guidance import append_to_prompt, read_guidance

#: the bound for tokenizers without a vocabulary to measure (characters per token)
DEFAULT_CHARS_PER_TOKEN = 64
_BOUNDS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


@dataclass
class EncodedPrompts:
    """Prompts of the rows that were kept.

    Attributes:
        kept: indices (into the input rows) of the prompts that were encoded.
        ids: ``[R, P]`` long, left-padded with the pad id. ``mask``: ``[R, P]`` long, 1 for prompt tokens.
        skipped: indices of rows dropped because their prompt was too long (``on_long_prompt="skip"``).
        truncated: indices of rows whose prompt was cut on the left (``on_long_prompt="truncate_left"``).
        prefixes: for each kept row, the token ids of its guidance ``prefix`` (the last ids of its prompt; empty
            without one).
    """

    kept: list[int]
    ids: Tensor
    mask: Tensor
    skipped: list[int] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)
    prefixes: list[list[int]] = field(default_factory=list)


def prompt_text(
    row: dict[str, Any], index: int, tokenizer, *, use_chat_template: bool, system_prompt: str | None
) -> str:
    """The text fed to the model for ``row["prompt"]`` (a string, or a list of ``{"role", "content"}`` messages), with
    the row's guidance ``hint`` added to the user prompt."""
    if "prompt" not in row:
        raise KeyError(
            f"row {index} has no 'prompt' column (columns: {sorted(row)}); map one with the data column mapping."
        )
    prompt = append_to_prompt(row["prompt"], read_guidance(row, index).hint)
    if not use_chat_template:
        if not isinstance(prompt, str):
            raise TypeError(
                f"row {index}: prompt is a {type(prompt).__name__} (chat messages?) but policy.use_chat_template is false; "
                "set policy.use_chat_template=true or give plain strings."
            )
        return prompt
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list) and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in prompt):
        messages = list(prompt)
    else:
        raise TypeError(
            f"row {index}: prompt must be a string or a list of {{'role', 'content'}} dicts, got {prompt!r:.80}"
        )
    if system_prompt is not None and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": system_prompt}, *messages]
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("policy.use_chat_template is true but the tokenizer has no chat template; set it to false.")
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def chars_per_token_bound(tokenizer) -> int:
    """Twice the most characters one token of ``tokenizer`` covers (its longest vocabulary entry; byte-level entries
    count bytes, at least the characters they cover): a prompt of more than ``max_prompt_tokens`` × this many
    characters has more than ``max_prompt_tokens`` tokens, for any text the tokenizer does not normalise away or fold
    into one unknown token. Measured once per tokenizer."""
    try:
        return _BOUNDS[tokenizer]
    except (KeyError, TypeError):
        pass
    vocabulary = tokenizer.get_vocab() if callable(getattr(tokenizer, "get_vocab", None)) else None
    longest = max((len(entry) for entry in vocabulary), default=0) if vocabulary else 0
    bound = 2 * longest if longest else DEFAULT_CHARS_PER_TOKEN
    with contextlib.suppress(TypeError):  # not weakly referenceable: measured again next time
        _BOUNDS[tokenizer] = bound
    return bound


def _prompt_chars(row: dict[str, Any]) -> int:
    """Characters of the data's prompt (a string, or the contents of chat messages)."""
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list):
        return sum(len(m["content"]) for m in prompt if isinstance(m, dict) and isinstance(m.get("content"), str))
    return 0


def _keep_last_chars(prompt: Any, count: int) -> Any:
    """``prompt`` cut on the left to its last ``count`` characters (for chat messages: of their contents, dropping the
    earliest messages, as the cut in tokens would)."""
    if isinstance(prompt, str):
        return prompt[-count:]
    kept: list[dict[str, Any]] = []
    for message in reversed(prompt):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str) or count <= 0:
            break
        kept.insert(0, {**message, "content": content[-count:]})
        count -= len(content)
    return kept


def _within_char_limit(row: dict[str, Any], index: int, max_tokens: int, per_token: int, on_long_prompt: str):
    """``row`` as it goes to the tokenizer: unchanged within ``max_tokens × per_token`` characters; beyond it an error,
    None (skip) or the row with its prompt cut on the left to that many characters (truncate_left)."""
    chars, limit = _prompt_chars(row), max_tokens * per_token
    if chars <= limit:
        return row
    if on_long_prompt == "error":
        raise DataError(
            f"{row_location(row, index)}: the prompt has {chars} characters, more than policy.max_prompt_tokens="
            f"{max_tokens} tokens can hold ({limit} characters, at most {per_token} per token for this tokenizer), so "
            "it was not tokenized; shorten the prompt, raise the limit or set policy.on_long_prompt to "
            "'truncate_left' or 'skip'."
        )
    if on_long_prompt == "skip":
        return None
    return {**row, "prompt": _keep_last_chars(row["prompt"], limit)}


def encode_prompts(
    rows: list[dict[str, Any]],
    tokenizer,
    *,
    use_chat_template: bool,
    system_prompt: str | None,
    max_prompt_tokens: int | None,
    on_long_prompt: Literal["error", "truncate_left", "skip"],
    pad_token_id: int,
) -> EncodedPrompts:
    """Tokenize, check lengths and left-pad ``rows``' prompts (with their guidance hint and prefix); prompts far
    beyond ``max_prompt_tokens`` in characters are refused, skipped or cut before the tokenizer sees them."""
    token_lists: list[list[int]] = []
    kept, skipped, truncated, prefixes = [], [], [], []
    per_token = chars_per_token_bound(tokenizer) if max_prompt_tokens is not None else 0
    for index, original in enumerate(rows):
        row = original
        if max_prompt_tokens is not None:
            row = _within_char_limit(original, index, max_prompt_tokens, per_token, on_long_prompt)
            if row is None:
                skipped.append(index)
                continue
        text = prompt_text(row, index, tokenizer, use_chat_template=use_chat_template, system_prompt=system_prompt)
        ids = tokenizer(text, add_special_tokens=not use_chat_template)["input_ids"]
        if not ids:
            raise DataError(
                f"{row_location(row, index)}: the prompt encodes to zero tokens ({text!r:.80}); give a non-empty prompt."
            )
        prefix = read_guidance(row, index).prefix
        prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []
        ids = list(ids) + list(prefix_ids)
        guidance_tokens = 0  # hint + prefix tokens, on top of the limit
        if row.get(GUIDANCE_KEY):
            plain = {key: value for key, value in row.items() if key != GUIDANCE_KEY}
            text = prompt_text(
                plain, index, tokenizer, use_chat_template=use_chat_template, system_prompt=system_prompt
            )
            guidance_tokens = max(
                0, len(ids) - len(tokenizer(text, add_special_tokens=not use_chat_template)["input_ids"])
            )
        if max_prompt_tokens is not None and len(ids) - guidance_tokens > max_prompt_tokens:
            if on_long_prompt == "error":
                raise DataError(
                    f"{row_location(row, index)}: prompt has {len(ids) - guidance_tokens} tokens, more than "
                    f"policy.max_prompt_tokens={max_prompt_tokens}; raise the limit or set policy.on_long_prompt to "
                    "'truncate_left' or 'skip'."
                )
            if on_long_prompt == "skip":
                skipped.append(index)
                continue
            ids = ids[-(max_prompt_tokens + guidance_tokens) :]
            truncated.append(index)
        elif row is not original:  # cut in characters, and then within the limit in tokens
            truncated.append(index)
        token_lists.append(ids)
        kept.append(index)
        prefixes.append(list(prefix_ids))
    width = max((len(ids) for ids in token_lists), default=0)
    prompt_ids = torch.full((len(token_lists), width), pad_token_id, dtype=torch.long)  # [R, P]
    prompt_mask = torch.zeros(len(token_lists), width, dtype=torch.long)  # [R, P]
    for row, ids in enumerate(token_lists):
        prompt_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        prompt_mask[row, width - len(ids) :] = 1
    return EncodedPrompts(
        kept=kept, ids=prompt_ids, mask=prompt_mask, skipped=skipped, truncated=truncated, prefixes=prefixes
    )
