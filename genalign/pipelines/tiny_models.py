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


#: Chat markers of the Qwen tokenizers (Qwen2.5-VL, Qwen3), kept whole by :func:`chat_word_tokenizer`.
QWEN_CHAT_MARKERS = ("<|im_start|>", "<|im_end|>")


#: Vision markers of the Qwen2.5-VL tokenizer, kept whole by ``chat_word_tokenizer(vision_markers=True)`` (the
#: processor expands ``<|image_pad|>`` into one token per merged image patch).
QWEN_VISION_MARKERS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>")
#: Pixels per vision patch side and patches merged per side of the tiny Qwen2.5-VL with vision (8 x 8 px per token).
TINY_VISION_PATCH, TINY_VISION_MERGE = 4, 2


#: A chat template in Qwen's markers for :func:`chat_word_tokenizer`; a message's content is a string or a list of
#: ``{"type": "text", "text": ...}`` parts (Mistral-3 processors' form).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}{{ part['text'] }}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


#: Qwen2's pre-tokenization pattern (its ``tokenizer.json``): words with their leading space, single digits, runs of
#: punctuation, line breaks and runs of spaces are pieces of their own.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def chat_word_tokenizer(
    *,
    chat_template: str | None = None,
    max_length: int = 1024,
    padding_side: str = "right",
    vision_markers: bool = False,
    qwen_pieces: bool = False,
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer of the chat-templated text encoders (Qwen2.5-VL, Qwen3, Mistral): the chat markers
    :data:`QWEN_CHAT_MARKERS` are single special tokens, every line break is a token, no BOS / EOS is added, and
    unknown words become ``<unk>`` (one token each), so a template prefix has the token count it has with the real
    tokenizer when the real one gives one token per word, punctuation mark and line break (Qwen-Image's 34-token
    system prefix does; its pipeline drops exactly those 34 tokens). ``vision_markers``: the
    :data:`QWEN_VISION_MARKERS` too, as special tokens after the vocabulary (Qwen-Image-Edit's processor).

    ``qwen_pieces``: split as Qwen2's tokenizer pre-tokenizes (:data:`QWEN_SPLIT_PATTERN`: runs of spaces and single
    digits are pieces too, a word keeps its leading space), one token per piece; the real tokenizer gives one token
    per piece of common English text, so HunyuanVideo 1.5's system prefix takes the 108 tokens its pipeline drops."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    words = [*_WORDS, *(f" {word}" for word in _WORDS)] if qwen_pieces else _WORDS
    for word in [*QWEN_CHAT_MARKERS, "\n", "system", "user", "assistant", *words]:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    if qwen_pieces:
        backend.pre_tokenizer = pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated")
    else:  # every match is a piece, the rest (spaces) is dropped: words, runs of punctuation, single line breaks
        backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"\w+|[^\w\s]+|\n"), behavior="removed", invert=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=[*QWEN_CHAT_MARKERS, *(QWEN_VISION_MARKERS if vision_markers else ())],
        model_max_length=max_length,
        padding_side=padding_side,
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


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


def tiny_t5(d_model: int, *, umt5: bool, seed: int, vocab_size: int = 64) -> T5EncoderModel:
    """A T5 (or UMT5) encoder of width ``d_model`` (``vocab_size`` 384: ByT5's bytes and special tokens)."""
    kwargs = dict(vocab_size=vocab_size, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4, pad_token_id=1)
    torch.manual_seed(seed)
    return UMT5EncoderModel(UMT5Config(**kwargs)) if umt5 else T5EncoderModel(T5Config(**kwargs))


def tiny_qwen25_vl(hidden: int, *, seed: int):
    """A Qwen2.5-VL (``Qwen2_5_VLForConditionalGeneration``) of width ``hidden`` with two text layers and a one-block
    vision tower, over the vocabulary of :func:`chat_word_tokenizer` (Qwen-Image's text encoder)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    vocab = len(chat_word_tokenizer())
    text = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, vocab_size=vocab, rope_theta=1e6, bos_token_id=0, eos_token_id=2,
                pad_token_id=1, rope_scaling={"type": "default", "rope_type": "default",
                                              "mrope_section": [1, 1, hidden // 4 - 2]})  # fmt: skip
    vision = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=hidden)
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, vocab_size=vocab, bos_token_id=0,
                              eos_token_id=2, pad_token_id=1)  # fmt: skip
    torch.manual_seed(seed)
    return Qwen2_5_VLForConditionalGeneration(config).eval()


def tiny_qwen25_vl_with_vision(hidden: int, *, seed: int):
    """A Qwen2.5-VL of width ``hidden`` that reads images, with its tokenizer and processor: two text layers, a
    one-block vision tower of :data:`TINY_VISION_PATCH`-pixel patches merged :data:`TINY_VISION_MERGE` x
    :data:`TINY_VISION_MERGE` (a 16 x 16 px image is 4 tokens), over ``chat_word_tokenizer(vision_markers=True)``
    (Qwen-Image-Edit's text encoder). Returns ``(text_encoder, tokenizer, processor)``."""
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = chat_word_tokenizer(vision_markers=True)
    ids = {marker: tokenizer.convert_tokens_to_ids(marker) for marker in QWEN_VISION_MARKERS}
    patches = {"patch_size": TINY_VISION_PATCH, "temporal_patch_size": 2}
    text = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, vocab_size=len(tokenizer), rope_theta=1e6, bos_token_id=0, eos_token_id=2,
                pad_token_id=1, rope_scaling={"type": "default", "rope_type": "default",
                                              "mrope_section": [1, 1, hidden // 4 - 2]})  # fmt: skip
    vision = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=hidden,
                  spatial_merge_size=TINY_VISION_MERGE, **patches)  # fmt: skip
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, vocab_size=len(tokenizer), bos_token_id=0, eos_token_id=2,
        pad_token_id=1, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )  # fmt: skip
    torch.manual_seed(seed)
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    side = TINY_VISION_PATCH * TINY_VISION_MERGE
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            min_pixels=side * side, max_pixels=64 * 64, merge_size=TINY_VISION_MERGE, **patches
        ),
        video_processor=Qwen2VLVideoProcessor(merge_size=TINY_VISION_MERGE, **patches),
        tokenizer=tokenizer,
    )
    return text_encoder, tokenizer, processor


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
