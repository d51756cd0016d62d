"""FLUX.1 Kontext editing (``FluxKontextPipeline``): the FLUX.1 transformer (``FluxTransformer2DModel``) sees the
source image's packed latents as extra sequence tokens after the noisy ones, with image position ids whose first
coordinate is 1 instead of 0; its velocity is read off the first (noisy) tokens only. The source is resized to the
output size (diffusers' ``_auto_resize=False``) and encoded through the VAE's mode (``sample_mode="argmax"``), as the
pipeline does, so the conditioning is a fixed tensor per source image."""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, encode_images, model_dtype
from genalign.pipelines.architectures.flux import FluxArchitecture

#: The conditioning key of the packed source latents ``[B, h/2 * w/2, 4C]``.
SOURCE_TOKENS = "source_tokens"


def image_ids(rows: int, cols: int, *, first: float, device: torch.device) -> torch.Tensor:
    """FLUX image position ids ``[rows * cols, 3]``: ``(first, row, col)`` of each packed token in reading order."""
    ids = torch.zeros(rows, cols, 3, device=device)
    ids[..., 0] = first
    ids[..., 1] += torch.arange(rows, device=device)[:, None]
    ids[..., 2] += torch.arange(cols, device=device)[None, :]
    return ids.reshape(rows * cols, 3)


@FLOW_ARCHITECTURES.register(
    "flux_kontext",
    summary="FLUX.1 Kontext editing (FluxKontextPipeline): source latents as extra tokens with offset position ids.",
)
class FluxKontextArchitecture(FluxArchitecture):
    name = "flux_kontext"
    pipeline_classes = ("FluxKontextPipeline",)
    source_role = "tokens"

    @classmethod
    def source_shapes(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        shape = cls.latent_shape(
            transformer_config, vae_config, height=height, width=width, num_frames=num_frames, batch=batch
        )
        return {SOURCE_TOKENS: shape}  # the source is resized to the output size: as many tokens as the latents

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """The tiny FLUX.1 pipeline's components in a ``FluxKontextPipeline``, with FLUX.1 Kontext [dev]'s dynamic
        shifting (diffusers' FLUX pipelines always pass the sigmas ``1 .. 1/S``, which genalign does only with it)."""
        from diffusers import FlowMatchEulerDiscreteScheduler, FluxKontextPipeline

        components = FluxArchitecture.tiny_pipeline(seed).components
        components["scheduler"] = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
        return FluxKontextPipeline(**components)

    def encode_sources(self, pipe, images, *, height, width, num_frames, device):
        h, w = self.latent_hw(pipe.vae.config, height=height, width=width)
        scale = 2 ** (len(pipe.vae.config.block_out_channels) - 1)
        with torch.no_grad():
            latents = encode_images(pipe, images, height=h * scale, width=w * scale)  # [B, C, h, w]
        batch, channels = latents.shape[:2]
        return {SOURCE_TOKENS: pipe._pack_latents(latents, batch, channels, h, w).to(device)}  # [B, h/2 * w/2, 4C]

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        batch, tokens, _ = latents.shape
        rows, cols = self._grid if self._grid[0] * self._grid[1] == tokens else (round(tokens**0.5),) * 2
        if rows * cols != tokens:
            raise ValueError(f"FLUX latents with {tokens} tokens do not match the last image grid; sample them first.")
        if SOURCE_TOKENS not in embeds:
            raise ValueError(
                "flux_kontext edits a source image; the rows have none (set policy.source_column to the column holding "
                "them)."
            )
        source = embeds[SOURCE_TOKENS]
        if source.shape[1] != tokens:
            raise ValueError(f"source tokens {tuple(source.shape)} do not match the latents' {tokens} tokens.")
        ids = torch.cat([image_ids(rows, cols, first=0.0, device=latents.device),
                         image_ids(rows, cols, first=1.0, device=latents.device)])  # fmt: skip
        text = embeds["encoder_hidden_states"]
        guidance_input = None
        if transformer.config.guidance_embeds:
            guidance_input = torch.full((batch,), guidance, device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=torch.cat([latents, source], dim=1).to(dtype),
            timestep=(timestep / 1000).to(dtype),
            guidance=guidance_input,
            pooled_projections=embeds["pooled_projections"].to(dtype),
            encoder_hidden_states=text.to(dtype),
            txt_ids=torch.zeros(text.shape[1], 3, device=latents.device, dtype=dtype),
            img_ids=ids.to(dtype),
            return_dict=False,
        )[0]
        return out[:, :tokens].float()  # [B, tokens, 4C]: the noisy tokens' velocity
