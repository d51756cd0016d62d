"""Wan2.2 text-to-video, two layouts of diffusers' ``WanPipeline`` (the Wan2.1 class, told apart by its config):

* ``wan22``, Wan2.2-T2V-A14B: two ``WanTransformer3DModel`` experts switched by timestep, ``transformer`` (high noise)
  for timesteps ``>= boundary_ratio * num_train_timesteps`` and ``transformer_2`` (low noise) below. genalign samples,
  scores and trains both through :class:`~genalign.pipelines.timestep_experts.TimestepExperts`, so each stored step is
  re-scored by the expert that sampled it; LoRA adapters train on both (saved as ``transformer`` and
  ``transformer_2``). Reading chosen for guidance: both experts use ``policy.guidance_scale`` (diffusers'
  ``guidance_scale_2`` for the low-noise expert is not a setting here).
* ``wan22_ti2v``, Wan2.2-TI2V-5B in its text-to-video mode: one transformer, the Wan2.2 VAE (48 latent channels,
  16 x 16 pixels per latent with its own 2 x 2 patching), and ``expand_timesteps``: the timestep is given per latent
  token (``[B, F' h' w' / p^2]``, every token at the step's timestep in text-to-video), as diffusers passes it.

Both share Wan2.1's latents ``[B, C, F', h, w]``, UMT5 prompt embeddings, per-channel VAE mean and std and ``flow_shift``
(:mod:`genalign.pipelines.architectures.wan`). Frames per second: 16 (A14B), 24 (TI2V-5B); ``policy.fps``.
"""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, model_dtype
from genalign.pipelines.architectures.wan import WanArchitecture, has_component, wan22_layout
from genalign.pipelines.timestep_experts import TimestepExperts


def _tiny_transformer(in_channels: int, seed: int):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=in_channels,
        out_channels=in_channels,
        text_dim=32,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
    )


@FLOW_ARCHITECTURES.register(
    "wan22",
    summary="Wan2.2 T2V A14B (WanPipeline with transformer_2): two experts switched by timestep, LoRA on both.",
)
class Wan22Architecture(WanArchitecture):
    name = "wan22"
    pipeline_classes = ("WanPipeline",)
    transformer_class = "WanTransformer3DModel"

    def __init__(self) -> None:
        #: the switching timestep (``boundary_ratio * num_train_timesteps``); None: one transformer
        self.boundary_ratio: float | None = None

    @classmethod
    def serves(cls, pipeline_class, pipeline_config):
        return pipeline_class in cls.pipeline_classes and wan22_layout(pipeline_config) == "wan22"

    def configure(self, pipeline_config):
        if wan22_layout(pipeline_config) != "wan22":
            raise ValueError(
                "policy.architecture=wan22 needs a Wan2.2 A14B pipeline (model_index.json with transformer_2 and "
                "boundary_ratio); this one has neither: use policy.architecture: wan (Wan2.1) or wan22_ti2v (TI2V-5B)."
            )
        self.boundary_ratio = pipeline_config.get("boundary_ratio")
        if self.boundary_ratio is None or not has_component(pipeline_config, "transformer_2"):
            raise ValueError(
                f"a Wan2.2 A14B pipeline needs both transformer_2 and boundary_ratio in model_index.json; got "
                f"transformer_2={pipeline_config.get('transformer_2')!r}, boundary_ratio={self.boundary_ratio!r}."
            )
        return self

    def denoiser(self, pipe):
        boundary = self.boundary_ratio * pipe.scheduler.config.num_train_timesteps
        return TimestepExperts(pipe.transformer, pipe.transformer_2, boundary)

    def trained_components(self, denoiser):
        return dict(denoiser.experts)

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """Two tiny experts (two layers each, different weights) switched at ``boundary_ratio = 0.9``: with the tiny
        schedule's shift 7, a 4-step rollout runs the high-noise expert on its first two steps and the low-noise one
        on the last two; Wan2.1's tiny UMT5 and 3D VAE (16 px, 5 or 9 frames)."""
        from diffusers import WanPipeline

        base = WanArchitecture.tiny_pipeline(seed)
        return WanPipeline(
            transformer=base.transformer,
            transformer_2=_tiny_transformer(16, seed + 7),
            boundary_ratio=0.9,
            vae=base.vae,
            scheduler=base.scheduler,
            text_encoder=base.text_encoder,
            tokenizer=base.tokenizer,
        )


@FLOW_ARCHITECTURES.register(
    "wan22_ti2v",
    summary="Wan2.2 TI2V-5B text-to-video (WanPipeline, expand_timesteps): Wan2.2 VAE, per-token timesteps.",
)
class Wan22TI2VArchitecture(WanArchitecture):
    name = "wan22_ti2v"
    pipeline_classes = ("WanPipeline",)
    transformer_class = "WanTransformer3DModel"

    @classmethod
    def serves(cls, pipeline_class, pipeline_config):
        return pipeline_class in cls.pipeline_classes and wan22_layout(pipeline_config) == "wan22_ti2v"

    def configure(self, pipeline_config):
        if wan22_layout(pipeline_config) != "wan22_ti2v":
            raise ValueError(
                "policy.architecture=wan22_ti2v needs a Wan2.2 TI2V-5B pipeline (model_index.json with "
                "expand_timesteps: true and no transformer_2); use policy.architecture: auto to pick by the config."
            )
        return self

    @staticmethod
    def token_timesteps(transformer_config, latents: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        """``[B, L]``: each sample's timestep ``[B]`` repeated over its ``L = F'/p_t * h/p_h * w/p_w`` latent tokens
        (text-to-video: no token is a clean conditioning frame)."""
        _, _, frames, height, width = latents.shape
        p_t, p_h, p_w = transformer_config.patch_size
        tokens = (frames // p_t) * (height // p_h) * (width // p_w)
        return timestep[:, None].expand(-1, tokens)

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=self.token_timesteps(transformer.config, latents, timestep),
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """The TI2V-5B layout at tiny size: a two-layer transformer on 48 latent channels and a Wan2.2-style VAE
        (residual, 2 x 2 patching, 16 px per latent: 32 px frames give 2 x 2 latents), 5 or 9 frames."""
        from diffusers import AutoencoderKLWan, WanPipeline

        base = WanArchitecture.tiny_pipeline(seed)
        torch.manual_seed(seed)
        vae = AutoencoderKLWan(
            base_dim=12,
            z_dim=48,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
            is_residual=True,
            in_channels=12,
            out_channels=12,
            patch_size=2,
            scale_factor_spatial=16,
            scale_factor_temporal=4,
            latents_mean=[0.0] * 48,
            latents_std=[1.0] * 48,
        )
        return WanPipeline(
            transformer=_tiny_transformer(48, seed),
            vae=vae,
            scheduler=base.scheduler,
            text_encoder=base.text_encoder,
            tokenizer=base.tokenizer,
            expand_timesteps=True,
        )
