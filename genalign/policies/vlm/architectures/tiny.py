"""Tiny random models of the VLM architectures, built offline from their real transformers classes (for tests).

:func:`~genalign.policies.vlm.architectures.build_tiny_model` writes a folder that ``policy.model`` can name: a
model of the architecture's own config class at tiny sizes (2 text layers of width 64, a 2-block vision tower of
width 32), random weights from a fixed seed, and its own processor class around a byte-level BPE tokenizer trained
here on the shapes-world task text with the architecture's special tokens, and a chat template in the architecture's
format. Nothing is downloaded. This module holds the helpers the architectures' ``build_tiny`` share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Text the tiny tokenizers' merges are trained on: the questions and answer formats of the shapes tasks.
CORPUS = (
    "How many red green blue circles squares triangles are there? In how many frames does the shape appear? "
    "Which way does the circle move? left right up down <think>count the frames</think><answer>0 1 2 3 4 5 6 7 8 9"
    "</answer> user assistant model system seconds 0.5 1.5"
)
#: width of the tiny language models (the vision towers project to it)
TEXT_WIDTH = 64


def tiny_tokenizer(special_tokens: list[str], **kwargs: Any):
    """A byte-level BPE tokenizer (vocabulary 320) trained on :data:`CORPUS` with ``special_tokens``; ``kwargs`` go
    to ``PreTrainedTokenizerFast`` (``eos_token``, ``pad_token``, ``extra_special_tokens``, ...)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([CORPUS] * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, padding_side="left", **kwargs)


def chat_template(turn_start: str, turn_end: str, blocks: dict[str, str], *, roles: dict[str, str] | None = None,
                  prefix: str = "") -> str:  # fmt: skip
    """A chat template writing each message as ``turn_start + role + newline + content + turn_end + newline``, a
    content block of type ``t`` as ``blocks[t]`` (text blocks as their text), ``roles`` renaming roles (Gemma's
    ``model``), and ``prefix`` first (a BOS token)."""
    renames = "".join(
        f"{{% if role == '{a}' %}}{{% set role = '{b}' %}}{{% endif %}}" for a, b in (roles or {}).items()
    )
    parts = "".join(f"{{% elif part['type'] == '{kind}' %}}{text}" for kind, text in blocks.items())
    generation_role = (roles or {}).get("assistant", "assistant")
    return (
        f"{prefix}{{% for message in messages %}}{{% set role = message['role'] %}}{renames}"
        f"{turn_start}{{{{ role }}}}\n"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        f"{{% if part['type'] == 'text' %}}{{{{ part['text'] }}}}{parts}{{% endif %}}"
        f"{{% endfor %}}{{% endif %}}{turn_end}\n{{% endfor %}}"
        f"{{% if add_generation_prompt %}}{turn_start}{generation_role}\n{{% endif %}}"
    )


def save_tiny(folder: Path, model: Any, processor: Any, eos_token_id: int, pad_token_id: int) -> Path:
    """Save ``model`` (its generation config ending at ``eos_token_id``) and ``processor`` in ``folder``."""
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.bos_token_id = None
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


__all__ = ["CORPUS", "TEXT_WIDTH", "chat_template", "save_tiny", "tiny_tokenizer"]
