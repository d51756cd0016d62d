"""Tiny causal LMs of real architectures (Qwen2, Llama) with a word-level tokenizer, built from configs.

Used by tests and benchmarks: nothing is downloaded, a model folder is written in a fraction of a second and loads with
``AutoModelForCausalLM`` / ``AutoTokenizer`` like any Hugging Face checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} ; {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def tiny_vocabulary(size: int) -> list[str]:
    """Special tokens, digits, letters, a few symbols and words, then ``w<i>`` fillers up to ``size`` entries."""
    words = [*SPECIAL_TOKENS, *"0123456789", *"abcdefghijklmnopqrstuvwxyz", *"+-*/=?.,:;()"]
    words += ["user", "assistant", "system", "answer", "is", "the", "what", "STOP"]
    if size < len(words):
        raise ValueError(f"vocab_size={size} is below the {len(words)} fixed tokens of the tiny vocabulary.")
    return words + [f"w{i}" for i in range(size - len(words))]


def build_tiny_tokenizer(vocab_size: int = 128):
    """A whitespace word-level ``PreTrainedTokenizerFast`` with ``<pad>``, ``<eos>``, ``<bos>`` and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(tiny_vocabulary(vocab_size))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_causal_lm(
    directory: Path,
    *,
    architecture: Literal["qwen2", "llama"] = "qwen2",
    vocab_size: int = 128,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 64,
    seed: int = 0,
    tokenizer=None,
) -> Path:
    """Write a randomly initialised model (and ``tokenizer``, default :func:`build_tiny_tokenizer`) to ``directory``."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer(vocab_size)
    config_class = {"qwen2": Qwen2Config, "llama": LlamaConfig}[architecture]
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=architecture == "qwen2",
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    directory = Path(directory)
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory
