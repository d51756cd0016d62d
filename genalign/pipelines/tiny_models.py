"""Shared pieces of the tiny flow pipelines built from configs, for tests, benchmarks and smoke runs (no download).

Each architecture builds its own tiny pipeline (``FlowArchitecture.tiny_pipeline`` in
:mod:`genalign.pipelines.architectures`) from these pieces: CLIP / T5 / UMT5 text encoders and an image
``AutoencoderKL`` with random weights, at sizes close to diffusers' own fast-test configurations, and word-level
``PreTrainedTokenizerFast`` tokenizers built in memory, so nothing is fetched from a hub.
"""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import AutoencoderKL
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTextModelWithProjection,
    PreTrainedTokenizerFast,
    T5Config,
    T5EncoderModel,
    UMT5Config,
    UMT5EncoderModel,
)

_WORDS = [
    "a",
    "an",
    "the",
    "one",
    "two",
    "three",
    "four",
    "red",
    "green",
    "blue",
    "yellow",
    "white",
    "black",
    "circle",
    "circles",
    "square",
    "squares",
    "triangle",
    "triangles",
    "left",
    "right",
    "top",
    "bottom",
    "of",
    "and",
    "on",
    "in",
    "with",
    "above",
    "below",
    "small",
    "big",
    "photo",
    "cat",
    "dog",
]


def word_tokenizer(*, max_length: int = 16, extra_words: list[str] | None = None) -> PreTrainedTokenizerFast:
    """A word-level tokenizer (ids: 0 ``<s>``, 1 ``<pad>``, 2 ``</s>``, 3 ``<unk>``, then words) built in memory."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for word in [*_WORDS, *(extra_words or [])]:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=max_length,
    )


def tiny_clip(hidden: int, *, projection: bool, seed: int) -> CLIPTextModel:
    """A CLIP text encoder of width ``hidden`` (with the pooled projection: ``CLIPTextModelWithProjection``)."""
    config = CLIPTextConfig(
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
        hidden_size=hidden,
        intermediate_size=37,
        num_attention_heads=4,
        num_hidden_layers=2,
        vocab_size=64,
        max_position_embeddings=32,
        hidden_act="gelu",
        projection_dim=hidden,
    )
    torch.manual_seed(seed)
    return CLIPTextModelWithProjection(config) if projection else CLIPTextModel(config)


def tiny_t5(d_model: int, *, umt5: bool, seed: int) -> T5EncoderModel:
    """A T5 (or UMT5) encoder of width ``d_model``."""
    kwargs = dict(vocab_size=64, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4, pad_token_id=1)
    torch.manual_seed(seed)
    return UMT5EncoderModel(UMT5Config(**kwargs)) if umt5 else T5EncoderModel(T5Config(**kwargs))


def tiny_image_vae(latent_channels: int, *, seed: int) -> AutoencoderKL:
    """An image ``AutoencoderKL`` with one level (latent = image size) and SD3's scaling and shift factors."""
    torch.manual_seed(seed)
    return AutoencoderKL(
        sample_size=32,
        in_channels=3,
        out_channels=3,
        block_out_channels=(4,),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=1,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )


def save_tiny_pipeline(architecture: str, directory: str | Path, *, seed: int = 0) -> Path:
    """Build the tiny pipeline of the registered ``architecture`` and write it as a diffusers folder; returns the
    folder."""
    from genalign.pipelines.architectures import FLOW_ARCHITECTURES

    pipe = FLOW_ARCHITECTURES.get(architecture).tiny_pipeline(seed)
    directory = Path(directory)
    pipe.save_pretrained(directory)
    return directory
