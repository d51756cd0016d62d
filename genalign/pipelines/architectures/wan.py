"""Wan2.1 text-to-video: ``WanTransformer3DModel``, video latents ``[B, C, F', h, w]`` (``F' = (F - 1) / 4 + 1``),
timestep ``sigma * 1000``, UMT5 prompt embeddings, decoded by ``AutoencoderKLWan`` with per-channel mean and std."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from genalign.pipelines.architectures.base import (
    FLOW_ARCHITECTURES,
    FlowArchitecture,
    config_value,
    model_dtype,
    video_clips,
)


def has_component(pipeline_config: Mapping[str, Any], name: str) -> bool:
    """Whether ``model_index.json`` (or a loaded pipeline's config) names a class for component ``name``."""
    entry = pipeline_config.get(name)
    return isinstance(entry, list | tuple) and len(entry) == 2 and entry[1] is not None


def wan22_layout(pipeline_config: Mapping[str, Any]) -> str | None:
    """The Wan2.2 architecture a ``WanPipeline`` config is (``wan22``: two experts; ``wan22_ti2v``: per-token
    timesteps), None for Wan2.1 (:mod:`genalign.pipelines.architectures.wan22`)."""
    if has_component(pipeline_config, "transformer_2") or pipeline_config.get("boundary_ratio") is not None:
        return "wan22"
    return "wan22_ti2v" if pipeline_config.get("expand_timesteps") else None


@FLOW_ARCHITECTURES.register(
    "wan", summary="Wan2.1 text-to-video (WanPipeline): video latents, UMT5 prompt embeddings."
)
class WanArchitecture(FlowArchitecture):
    name = "wan"
    pipeline_classes = ("WanPipeline",)
    transformer_class = "WanTransformer3DModel"
    block_config_keys = {"blocks": "num_layers"}

    @classmethod
    def serves(cls, pipeline_class, pipeline_config):
        return pipeline_class in cls.pipeline_classes and wan22_layout(pipeline_config) is None

    def configure(self, pipeline_config):
        layout = wan22_layout(pipeline_config)
        if layout is not None:
            raise ValueError(
                f"this WanPipeline is a Wan2.2 model (model_index.json: transformer_2 / boundary_ratio / "
                f"expand_timesteps); policy.architecture=wan would drive it as Wan2.1. Use policy.architecture: "
                f"{layout} (or auto)."
            )
        return self

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        temporal, spatial = (
            config_value(vae_config, "scale_factor_temporal"),
            config_value(vae_config, "scale_factor_spatial"),
        )
        frames = (num_frames - 1) // temporal + 1
        return (batch, config_value(transformer_config, "in_channels"), frames, height // spatial, width // spatial)

    @classmethod
    def text_embedding_shapes(cls, transformer_config, encoder_configs, *, max_sequence_length, batch):
        return {"encoder_hidden_states": (batch, max_sequence_length, config_value(transformer_config, "text_dim"))}

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """Wan2.1 text-to-video with two transformer layers, a tiny UMT5 and a tiny 3D VAE (16 px, 5 or 9 frames)."""
        from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel

        from genalign.pipelines.tiny_models import tiny_t5, word_tokenizer

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
            text_encoder=tiny_t5(32, umt5=True, seed=seed + 1),
            tokenizer=word_tokenizer(),
        )

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        cond, uncond = pipe.encode_prompt(
            prompt=prompts,
            negative_prompt=[negative_prompt] * len(prompts),
            do_classifier_free_guidance=True,
            max_sequence_length=max_sequence_length,
            device=device,
        )
        return {"encoder_hidden_states": cond}, {"encoder_hidden_states": uncond}

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        temporal = pipe.vae.config.scale_factor_temporal
        if (num_frames - 1) % temporal != 0:
            raise ValueError(
                f"num_frames={num_frames} must be 1 + a multiple of {temporal} for Wan; "
                f"use e.g. {1 + temporal * max(1, num_frames // temporal)}."
            )
        return super().initial_latents(
            pipe, batch_size, height=height, width=width, num_frames=num_frames, generator=generator
        )

    def image_seq_len(self, pipe, latents):
        _, _, frames, h, w = latents.shape
        patch = pipe.transformer.config.patch_size
        return (frames // patch[0]) * (h // patch[1]) * (w // patch[2])

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=timestep,
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        z_dim = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(latents.device)
        std = torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(latents.device)
        return video_clips(vae.decode((latents * std + mean).to(vae.dtype), return_dict=False)[0])

    def scheduler_config(self, pipe):
        config = dict(pipe.scheduler.config)
        if "flow_shift" in config:  # Wan ships UniPC with ``flow_shift``; the flow sigma schedule calls it ``shift``
            config["shift"] = config["flow_shift"]
        return config
