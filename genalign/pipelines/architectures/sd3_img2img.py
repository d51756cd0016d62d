"""Stable Diffusion 3 / 3.5 image-to-image (``StableDiffusion3Img2ImgPipeline``): the SD3 transformer and text
encoders, trajectories that start from the source image's latents noised to ``policy.strength`` on a schedule that
starts there (SDEdit; diffusers' ``get_timesteps``: ``t_start = S - int(S * strength)``, the first ``t_start`` steps
skipped), so a rollout has ``S - t_start`` denoising steps.

Reading chosen: the source latents are the VAE posterior's *mode* (as diffusers' FLUX Kontext and Wan I2V pipelines
encode), where diffusers' SD3 img2img draws a *sample* from it with the call's generator; a fixed tensor per source
keeps the conditioning a function of the row. Given those latents as its ``image``, diffusers' pipeline reproduces
genalign's trajectory bit for bit (tests/pipelines/test_conditioning.py)."""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, config_value, encode_images, vae_scale_factor
from genalign.pipelines.architectures.sd3 import SD3Architecture

#: The conditioning key of the source latents ``[B, C, h, w]``.
SOURCE_LATENTS = "source_latents"


@FLOW_ARCHITECTURES.register(
    "sd3_img2img",
    summary="Stable Diffusion 3 / 3.5 image-to-image (StableDiffusion3Img2ImgPipeline): starts from the source image "
    "noised to policy.strength.",
)
class SD3Img2ImgArchitecture(SD3Architecture):
    name = "sd3_img2img"
    pipeline_classes = ("StableDiffusion3Img2ImgPipeline",)
    source_role = "initial_latents"

    @classmethod
    def source_shapes(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        scale = vae_scale_factor(vae_config)
        return {
            SOURCE_LATENTS: (batch, config_value(transformer_config, "in_channels"), height // scale, width // scale)
        }

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """The tiny SD3 pipeline's components in a ``StableDiffusion3Img2ImgPipeline``."""
        from diffusers import StableDiffusion3Img2ImgPipeline

        return StableDiffusion3Img2ImgPipeline(**SD3Architecture.tiny_pipeline(seed).components)

    def encode_sources(self, pipe, images, *, height, width, num_frames, device):
        with torch.no_grad():
            return {SOURCE_LATENTS: encode_images(pipe, images, height=height, width=width).to(device)}

    def start_latents(self, scheduler, noise, sources):
        """``sigma_0 * noise + (1 - sigma_0) * source`` at the first sigma of the (truncated) schedule."""
        if sources is None or SOURCE_LATENTS not in sources:
            raise ValueError(
                "sd3_img2img starts every trajectory from a source image; the rows have none (set policy.source_column "
                "to the column holding them)."
            )
        source = sources[SOURCE_LATENTS].to(noise.device)
        sigma = scheduler.sigmas[:1].to(noise.device).reshape(1, *([1] * (noise.dim() - 1)))  # [1, 1, 1, 1]
        return sigma * noise + (1.0 - sigma) * source  # [B, C, h, w], diffusers' scale_noise
