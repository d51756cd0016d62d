"""Tiny causal LMs of real architectures (Qwen2, Llama, Qwen3, Qwen3-MoE, Gemma3) with a word-level tokenizer, built
from the architectures' own transformers config classes.

Used by tests and benchmarks: nothing is downloaded, a model folder is written in a fraction of a second and loads with
``AutoModelForCausalLM`` / ``AutoTokenizer`` like any Hugging Face checkpoint. Each architecture keeps what makes it
itself at tiny size (:data:`TINY_ARCHITECTURES`): Qwen3's per-head q/k norms, Qwen3-MoE's routed experts (4 experts,
2 per token), Gemma3's local sliding-window layers (a 4-token window, so the window binds in a test) next to global
ones, its scaled embedding and sandwich norms.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
#: The mask token of a masked diffusion LM's tokenizer (:func:`build_tiny_tokenizer` with ``mask_token=True``).
MASK_TOKEN = "<mask>"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} ; {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)

TinyArchitecture = Literal["qwen2", "llama", "qwen3", "qwen3_moe", "gemma3"]


def tiny_vocabulary(size: int, *, mask_token: bool = False) -> list[str]:
    """Special tokens, digits, letters, a few symbols and words, then ``w<i>`` fillers up to ``size`` entries (the
    last one :data:`MASK_TOKEN` with ``mask_token``)."""
    words = [*SPECIAL_TOKENS, *"0123456789", *"abcdefghijklmnopqrstuvwxyz", *"+-*/=?.,:;()"]
    words += ["user", "assistant", "system", "answer", "is", "the", "what", "STOP"]
    fixed = len(words) + int(mask_token)
    if size < fixed:
        raise ValueError(f"vocab_size={size} is below the {fixed} fixed tokens of the tiny vocabulary.")
    return words + [f"w{i}" for i in range(size - fixed)] + ([MASK_TOKEN] if mask_token else [])


def build_tiny_tokenizer(vocab_size: int = 128, *, mask_token: bool = False):
    """A whitespace word-level ``PreTrainedTokenizerFast`` with ``<pad>``, ``<eos>``, ``<bos>`` and a chat template
    (and ``<mask>`` as its mask token with ``mask_token``)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(tiny_vocabulary(vocab_size, mask_token=mask_token))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    specials = {"mask_token": MASK_TOKEN} if mask_token else {}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>", **specials
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _shared(sizes: dict[str, int]) -> dict[str, Any]:
    """The config fields every architecture names alike."""
    return {
        "vocab_size": sizes["vocab_size"],
        "hidden_size": sizes["hidden_size"],
        "intermediate_size": sizes["intermediate_size"],
        "num_hidden_layers": sizes["num_layers"],
        "num_attention_heads": sizes["num_heads"],
        "num_key_value_heads": sizes["num_kv_heads"],
        "max_position_embeddings": 4096,
    }


def _qwen2(sizes: dict[str, int]):
    from transformers import Qwen2Config

    return Qwen2Config(**_shared(sizes), tie_word_embeddings=True)


def _llama(sizes: dict[str, int]):
    from transformers import LlamaConfig

    return LlamaConfig(**_shared(sizes), tie_word_embeddings=False)


def _qwen3(sizes: dict[str, int]):
    from transformers import Qwen3Config

    return Qwen3Config(**_shared(sizes), head_dim=sizes["hidden_size"] // sizes["num_heads"], tie_word_embeddings=True)


def _qwen3_moe(sizes: dict[str, int]):
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        **_shared(sizes),
        head_dim=sizes["hidden_size"] // sizes["num_heads"],
        moe_intermediate_size=sizes["intermediate_size"] // 4,
        num_experts=4,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        tie_word_embeddings=False,
    )


def _gemma3(sizes: dict[str, int]):
    from transformers import Gemma3TextConfig

    head_dim = sizes["hidden_size"] // sizes["num_heads"]
    local_then_global = ["sliding_attention"] * (sizes["num_layers"] - 1) + ["full_attention"]
    return Gemma3TextConfig(
        **_shared(sizes),
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        sliding_window=4,
        layer_types=local_then_global,
        tie_word_embeddings=True,
    )


#: architecture -> the tiny config of its real transformers config class, from the shared sizes.
TINY_ARCHITECTURES: dict[str, Callable[[dict[str, int]], Any]] = {
    "qwen2": _qwen2,
    "llama": _llama,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gemma3": _gemma3,
}


def tiny_config(architecture: TinyArchitecture, tokenizer, **sizes: int):
    """The transformers config of a tiny ``architecture`` model with ``tokenizer``'s special tokens."""
    if architecture not in TINY_ARCHITECTURES:
        raise ValueError(f"architecture={architecture!r} is not one of {sorted(TINY_ARCHITECTURES)}.")
    config = TINY_ARCHITECTURES[architecture](sizes)
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    return config


def build_tiny_causal_lm(
    directory: Path,
    *,
    architecture: TinyArchitecture = "qwen2",
    vocab_size: int = 128,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 64,
    seed: int = 0,
    tokenizer=None,
    config_overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a randomly initialised model (and ``tokenizer``, default :func:`build_tiny_tokenizer`) to ``directory``;
    ``config_overrides`` set config fields after the architecture's own (e.g. ``final_logit_softcapping``)."""
    from transformers import AutoModelForCausalLM

    tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer(vocab_size)
    config = tiny_config(
        architecture,
        tokenizer,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
    )
    for name, value in (config_overrides or {}).items():
        setattr(config, name, value)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    directory = Path(directory)
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory
