"""Stable Diffusion 3 / 3.5: ``SD3Transformer2DModel`` (joint and dual-attention MMDiT blocks), latents
``[B, C, h, w]``, timestep ``sigma * 1000``, CLIP-L + CLIP-G + T5 prompt embeddings with pooled CLIP projections."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch

from genalign.pipelines.architectures.base import (
    FLOW_ARCHITECTURES,
    FlowArchitecture,
    config_value,
    decode_images,
    model_dtype,
    vae_scale_factor,
)


@FLOW_ARCHITECTURES.register(
    "sd3", summary="Stable Diffusion 3 / 3.5 (StableDiffusion3Pipeline): MMDiT transformer, classifier-free guidance."
)
class SD3Architecture(FlowArchitecture):
    name = "sd3"
    pipeline_classes = ("StableDiffusion3Pipeline",)
    transformer_class = "SD3Transformer2DModel"
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        scale = vae_scale_factor(vae_config)
        return (batch, config_value(transformer_config, "in_channels"), height // scale, width // scale)

    @classmethod
    def text_embedding_shapes(cls, transformer_config, encoder_configs, *, max_sequence_length, batch):
        clip_tokens = config_value(encoder_configs["text_encoder"], "max_position_embeddings")
        seq = clip_tokens + max_sequence_length  # CLIP tokens (77, its tokenizer's length), then T5 (zeros without T5)
        return {
            "encoder_hidden_states": (batch, seq, config_value(transformer_config, "joint_attention_dim")),
            "pooled_projections": (batch, config_value(transformer_config, "pooled_projection_dim")),
        }

    @classmethod
    def block_counts(cls, config):
        dual = len(config.get("dual_attention_layers") or ())
        return {"dual": dual, "joint": config["num_layers"] - dual}

    @classmethod
    def with_block_counts(cls, config, counts):
        config = copy.deepcopy(config)
        config["num_layers"] = counts["dual"] + counts["joint"]
        config["dual_attention_layers"] = list(range(counts["dual"]))
        return config

    #: transformer config of the tiny pipeline beyond SD3's (SD3.5 adds dual-attention layers and qk-norm)
    tiny_transformer_extra: ClassVar[dict[str, Any]] = {"num_layers": 1}

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """SD3 with one transformer layer, two tiny CLIP encoders and a tiny T5 (images 8-32 px, latent = image size)."""
        from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

        from genalign.pipelines.tiny_models import tiny_clip, tiny_image_vae, tiny_t5, word_tokenizer

        torch.manual_seed(seed)
        transformer = SD3Transformer2DModel(
            sample_size=32,
            patch_size=1,
            in_channels=4,
            attention_head_dim=8,
            num_attention_heads=4,
            caption_projection_dim=32,
            joint_attention_dim=32,
            pooled_projection_dim=32,
            out_channels=4,
            **cls.tiny_transformer_extra,
        )
        return StableDiffusion3Pipeline(
            transformer=transformer,
            scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
            vae=tiny_image_vae(4, seed=seed),
            text_encoder=tiny_clip(16, projection=True, seed=seed + 1),
            tokenizer=word_tokenizer(),
            text_encoder_2=tiny_clip(16, projection=True, seed=seed + 2),
            tokenizer_2=word_tokenizer(),
            text_encoder_3=tiny_t5(32, umt5=False, seed=seed + 3),
            tokenizer_3=word_tokenizer(),
        )

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        cond, uncond, pooled, uncond_pooled = pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=device,
            do_classifier_free_guidance=True,
            negative_prompt=[negative_prompt] * len(prompts),
            max_sequence_length=max_sequence_length,
        )
        return (
            {"encoder_hidden_states": cond, "pooled_projections": pooled},
            {"encoder_hidden_states": uncond, "pooled_projections": uncond_pooled},
        )

    def image_seq_len(self, pipe, latents):
        patch = pipe.transformer.config.patch_size
        return (latents.shape[-2] // patch) * (latents.shape[-1] // patch)

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=timestep.to(dtype),
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            pooled_projections=embeds["pooled_projections"].to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        return decode_images(pipe, latents)


@FLOW_ARCHITECTURES.register(
    "sd35",
    summary="Stable Diffusion 3.5 (StableDiffusion3Pipeline): SD3's code; a name for SD3.5's tiny pipeline (dual-"
    "attention MMDiT-X blocks, qk RMS-norm, T5 present). policy.architecture auto resolves SD3.5 folders to sd3.",
)
class SD35Architecture(SD3Architecture):
    """SD3.5 is the SD3 pipeline and transformer class with other config values (``dual_attention_layers``,
    ``qk_norm: rms_norm``), which :class:`SD3Architecture` already reads; this name only gives it its own tiny
    pipeline for the architecture matrix. Auto-detection picks ``sd3`` (same behaviour), so no pipeline class here."""

    name = "sd35"
    pipeline_classes = ()
    tiny_transformer_extra = {"num_layers": 2, "dual_attention_layers": (0,), "qk_norm": "rms_norm"}
