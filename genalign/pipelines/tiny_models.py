"""Tiny SD3 / FLUX / Wan pipelines built from configs, for tests, benchmarks and smoke runs (no download).

The models have random weights and the real diffusers architectures (``SD3Transformer2DModel``,
``FluxTransformer2DModel``, ``WanTransformer3DModel`` with CLIP / T5 / UMT5 text encoders and ``AutoencoderKL`` /
``AutoencoderKLWan``), at sizes close to diffusers' own fast-test configurations. Tokenizers are word-level
``PreTrainedTokenizerFast`` objects built in memory, so nothing is fetched from a hub.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from diffusers import (
    AutoencoderKL,
    AutoencoderKLWan,
    FlowMatchEulerDiscreteScheduler,
    FluxPipeline,
    FluxTransformer2DModel,
    StableDiffusion3Pipeline,
    WanPipeline,
    WanTransformer3DModel,
)
from diffusers.pipelines.pipeline_utils import DiffusionPipeline
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

TinyArchitecture = Literal["sd3", "flux", "wan"]

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


def _clip(hidden: int, *, projection: bool, seed: int) -> CLIPTextModel:
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


def _t5(d_model: int, *, umt5: bool, seed: int) -> T5EncoderModel:
    kwargs = dict(vocab_size=64, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4, pad_token_id=1)
    torch.manual_seed(seed)
    return UMT5EncoderModel(UMT5Config(**kwargs)) if umt5 else T5EncoderModel(T5Config(**kwargs))


def _image_vae(latent_channels: int, *, seed: int) -> AutoencoderKL:
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


def tiny_sd3_pipeline(seed: int = 0) -> StableDiffusion3Pipeline:
    """SD3 with one transformer layer, two tiny CLIP encoders and a tiny T5 (images 8-32 px, latent = image size)."""
    torch.manual_seed(seed)
    from diffusers import SD3Transformer2DModel

    transformer = SD3Transformer2DModel(
        sample_size=32,
        patch_size=1,
        in_channels=4,
        num_layers=1,
        attention_head_dim=8,
        num_attention_heads=4,
        caption_projection_dim=32,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        out_channels=4,
    )
    return StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_image_vae(4, seed=seed),
        text_encoder=_clip(16, projection=True, seed=seed + 1),
        tokenizer=word_tokenizer(),
        text_encoder_2=_clip(16, projection=True, seed=seed + 2),
        tokenizer_2=word_tokenizer(),
        text_encoder_3=_t5(32, umt5=False, seed=seed + 3),
        tokenizer_3=word_tokenizer(),
    )


def tiny_flux_pipeline(seed: int = 0) -> FluxPipeline:
    """FLUX.1 with one double and one single block, guidance embedding, CLIP + T5 (packed 2x2 latents)."""
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        guidance_embeds=True,
        axes_dims_rope=(4, 4, 8),
    )
    return FluxPipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=_image_vae(1, seed=seed),
        text_encoder=_clip(32, projection=False, seed=seed + 1),
        tokenizer=word_tokenizer(),
        text_encoder_2=_t5(32, umt5=False, seed=seed + 2),
        tokenizer_2=word_tokenizer(),
    )


def tiny_wan_pipeline(seed: int = 0) -> WanPipeline:
    """Wan2.1 text-to-video with two transformer layers, a tiny UMT5 and a tiny 3D VAE (16 px, 5 or 9 frames)."""
    torch.manual_seed(seed)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=16,
        out_channels=16,
        text_dim=32,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
    )
    torch.manual_seed(seed)
    vae = AutoencoderKLWan(
        base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )
    return WanPipeline(
        transformer=transformer,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        text_encoder=_t5(32, umt5=True, seed=seed + 1),
        tokenizer=word_tokenizer(),
    )


TINY_BUILDERS = {"sd3": tiny_sd3_pipeline, "flux": tiny_flux_pipeline, "wan": tiny_wan_pipeline}


def save_tiny_pipeline(architecture: TinyArchitecture, directory: str | Path, *, seed: int = 0) -> Path:
    """Build the tiny pipeline of ``architecture`` and write it as a diffusers folder; returns the folder."""
    if architecture not in TINY_BUILDERS:
        raise ValueError(f"architecture={architecture!r} has no tiny builder; use one of {sorted(TINY_BUILDERS)}.")
    pipe: DiffusionPipeline = TINY_BUILDERS[architecture](seed)
    directory = Path(directory)
    pipe.save_pretrained(directory)
    return directory
