"""FLUX.2 with a reference image (``Flux2Pipeline`` / ``Flux2KleinPipeline`` called with ``image``): the FLUX.2
transformer sees the reference's tokens after the noisy ones. The reference goes through the VAE's mode, is
patchified 2x2 and normalised by the VAE's batch-norm statistics like the noisy latents
(:mod:`genalign.pipelines.architectures.flux2`), and its position ids ``(t, row, col, 0)`` carry the time coordinate
``t = 10`` (diffusers' ``_prepare_image_ids``: ``10 + 10 i`` for the ``i``-th reference; genalign takes one per row)
where the noisy tokens have ``t = 0``; the velocity is read off the noisy tokens only.

* ``flux2_edit``: FLUX.2 [dev] (guidance embedded), the same pipeline class as ``flux2``;
* ``flux2_klein_edit``: FLUX.2 [klein] (true CFG: the reference conditions both branches, as in diffusers).

Both serve the text-to-image pipeline classes, so ``policy.architecture: auto`` keeps picking the text-only ``flux2`` /
``flux2_klein``; name these to condition on the rows' ``policy.source_column``.

Reading chosen: the reference is resized to the output size ``policy.height`` x ``policy.width`` (rounded down to the
16-px patch grid) so that every row has the same token count and rollouts batch; diffusers keeps the reference's own
size (at most one megapixel, cropped to a multiple of 16 px). The two agree when the reference has the output size.
"""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, model_dtype, vae_scale_factor
from genalign.pipelines.architectures.flux2 import Flux2Architecture, Flux2KleinArchitecture, position_ids

#: The conditioning key of the reference's tokens ``[B, h/2 * w/2, 4C]``.
SOURCE_TOKENS = "source_tokens"
#: Time coordinate of the (first) reference image's position ids (diffusers' ``_prepare_image_ids`` ``scale``).
REFERENCE_TIME = 10.0


class Flux2ReferenceImage:
    """The reference-image conditioning shared by FLUX.2 [dev] and [klein] (module docstring); mixed in before the
    text-to-image architecture it extends."""

    source_role = "tokens"

    @classmethod
    def source_shapes(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        shape = cls.latent_shape(
            transformer_config, vae_config, height=height, width=width, num_frames=num_frames, batch=batch
        )
        return {SOURCE_TOKENS: shape}  # resized to the output size: as many tokens as the noisy latents

    def encode_sources(self, pipe, images, *, height, width, num_frames, device):
        vae = pipe.vae
        multiple = vae_scale_factor(vae.config) * 2
        size = (height // multiple * multiple, width // multiple * multiple)
        pixels = pipe.image_processor.preprocess(images, *size)  # [B, 3, H, W] in [-1, 1]
        vae_device = next(vae.parameters()).device
        with torch.no_grad():
            latents = vae.encode(pixels.to(device=vae_device, dtype=vae.dtype)).latent_dist.mode()
        grid = pipe._patchify_latents(latents).float()  # [B, 4C, H / 16, W / 16]
        mean = vae.bn.running_mean.view(1, -1, 1, 1).to(grid)
        std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(grid)
        tokens = ((grid - mean) / std).flatten(2).transpose(1, 2)  # [B, h/2 * w/2, 4C], row-major
        return {SOURCE_TOKENS: tokens.to(device)}

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        if SOURCE_TOKENS not in embeds:
            raise ValueError(
                f"{self.name} conditions on a reference image; the rows have none (set policy.source_column to the "
                "column holding them, or use the text-to-image architecture without _edit)."
            )
        dtype = model_dtype(transformer)
        batch, tokens, _ = latents.shape
        rows, cols = self.grid.of(tokens, "FLUX.2")
        reference = embeds[SOURCE_TOKENS]
        if reference.shape[1] != tokens:
            raise ValueError(f"reference tokens {tuple(reference.shape)} do not match the latents' {tokens} tokens.")
        text = embeds["encoder_hidden_states"]
        image_ids, text_ids = position_ids(rows, cols, text.shape[1], batch, latents.device)
        reference_ids = image_ids.clone()
        reference_ids[..., 0] = REFERENCE_TIME
        guidance_input = None
        if transformer.config.guidance_embeds:
            guidance_input = torch.full((batch,), guidance, device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=torch.cat([latents, reference], dim=1).to(dtype),
            timestep=(timestep / 1000).to(dtype),
            guidance=guidance_input,
            encoder_hidden_states=text.to(dtype),
            txt_ids=text_ids,
            img_ids=torch.cat([image_ids, reference_ids], dim=1),
            return_dict=False,
        )[0]
        return out[:, :tokens].float()  # [B, tokens, 4C]: the noisy tokens' velocity


@FLOW_ARCHITECTURES.register(
    "flux2_edit",
    summary="FLUX.2 [dev] with a reference image (Flux2Pipeline's image): reference tokens after the noisy ones, "
    "position ids at time 10.",
)
class Flux2EditArchitecture(Flux2ReferenceImage, Flux2Architecture):
    name = "flux2_edit"

    @classmethod
    def serves(cls, pipeline_class, pipeline_config):
        return False  # the pipeline of text-to-image flux2: named, never picked by ``auto``


@FLOW_ARCHITECTURES.register(
    "flux2_klein_edit",
    summary="FLUX.2 [klein] with a reference image (Flux2KleinPipeline's image): reference tokens after the noisy "
    "ones, position ids at time 10, true CFG.",
)
class Flux2KleinEditArchitecture(Flux2ReferenceImage, Flux2KleinArchitecture):
    name = "flux2_klein_edit"

    @classmethod
    def serves(cls, pipeline_class, pipeline_config):
        return False  # the pipeline of text-to-image flux2_klein: named, never picked by ``auto``
