"""Qwen-Image-Edit (``QwenImageEditPipeline``): Qwen-Image's transformer, VAE, schedule and norm-preserving true CFG
(:mod:`genalign.pipelines.architectures.qwen_image`), conditioned on a source image twice, as diffusers' pipeline does:

* the source's VAE latents (the posterior's mode, normalised by the VAE's per-channel mean and std), packed 2x2 like
  the noisy latents, are extra sequence tokens after the noisy ones, with a second entry ``(1, rows, cols)`` in
  ``img_shapes`` for the rotary embedding; the velocity is read off the noisy tokens only;
* the Qwen2.5-VL text encoder reads the source image with the instruction (the edit template's ``<|image_pad|>`` is
  expanded into one token per merged vision patch), for the negative prompt too, and the first 64 tokens of the
  template are dropped; so the prompt embeddings depend on the row's image and are made per row
  (``source_in_prompt``) and stored with the trajectory.

Reading chosen: the source is resized to the output size ``policy.height`` x ``policy.width`` (rounded down to the
packed-latent grid, as diffusers rounds its output size), where diffusers resizes it to about one megapixel at the
source's aspect ratio (``calculate_dimensions(1024 * 1024, ratio)``) whatever the output size; at a 1024 x 1024 output
and a square source the two agree. The source tokens then match the noisy tokens one for one, as in FLUX.1 Kontext
(:mod:`genalign.pipelines.architectures.flux_kontext`). The prompt embeddings are padded with zeros and a mask to
``policy.max_sequence_length`` plus the source's vision tokens (diffusers pads to the longest of the batch and never
truncates; a longer prompt is an error naming the setting).
"""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, config_value, model_dtype
from genalign.pipelines.architectures.qwen_image import QwenImageArchitecture, padded_prompt_embeddings

#: The conditioning key of the packed source latents ``[B, h/2 * w/2, 4C]``.
SOURCE_TOKENS = "source_tokens"


def vision_tokens(text_encoder_config, *, height: int, width: int) -> int:
    """Merged vision tokens Qwen2.5-VL's processor makes of a ``height`` x ``width`` image: each side rounded to a
    multiple of ``patch_size * spatial_merge_size`` (its ``smart_resize``; the processor's pixel bounds, which bind
    only below 56 x 56 px and above 12.8 MP with the published processor, are not applied), one token per merged
    patch."""
    vision = config_value(text_encoder_config, "vision_config")
    factor = config_value(vision, "patch_size") * config_value(vision, "spatial_merge_size")
    return max(1, round(height / factor)) * max(1, round(width / factor))


@FLOW_ARCHITECTURES.register(
    "qwen_image_edit",
    summary="Qwen-Image-Edit (QwenImageEditPipeline): source latents as extra tokens, the Qwen2.5-VL prompt encoder "
    "reads the source image with the instruction.",
)
class QwenImageEditArchitecture(QwenImageArchitecture):
    name = "qwen_image_edit"
    pipeline_classes = ("QwenImageEditPipeline",)
    source_role = "tokens"
    source_in_prompt = True

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def prompt_source_tokens(cls, encoder_configs, *, height, width):
        return vision_tokens(encoder_configs["text_encoder"], height=height, width=width)

    @classmethod
    def source_shapes(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        shape = cls.latent_shape(
            transformer_config, vae_config, height=height, width=width, num_frames=num_frames, batch=batch
        )
        return {SOURCE_TOKENS: shape}  # the source is resized to the output size: as many tokens as the latents

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """The tiny Qwen-Image pipeline's transformer, VAE and schedule with a two-layer Qwen2.5-VL that reads images
        (a one-block vision tower, 8 x 8 px per vision token) and its processor, in a ``QwenImageEditPipeline``."""
        from diffusers import QwenImageEditPipeline

        from genalign.pipelines.tiny_models import tiny_qwen25_vl_with_vision

        base = QwenImageArchitecture.tiny_pipeline(seed).components
        text_encoder, tokenizer, processor = tiny_qwen25_vl_with_vision(16, seed=seed + 1)
        return QwenImageEditPipeline(
            transformer=base["transformer"], vae=base["vae"], scheduler=base["scheduler"],
            text_encoder=text_encoder, tokenizer=tokenizer, processor=processor,
        )  # fmt: skip

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    @staticmethod
    def source_size(pipe, *, height: int, width: int) -> tuple[int, int]:
        """Pixels ``(H, W)`` the source is resized to: the output size rounded down to a multiple of the packed
        latents' ``2 x vae_scale_factor`` pixels (diffusers' rounding of its output size)."""
        multiple = pipe.vae_scale_factor * 2
        return height // multiple * multiple, width // multiple * multiple

    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        raise ValueError(
            "qwen_image_edit reads every prompt with its source image; give the rows one (policy.source_column) and "
            "encode them with encode_with_sources."
        )

    def encode_with_sources(self, pipe, prompts, images, *, negative_prompt, max_sequence_length, height, width,
                            device):  # fmt: skip
        size = self.source_size(pipe, height=height, width=width)
        shown = [pipe.image_processor.resize(image, *size) for image in images]  # the pipeline's ``prompt_image``
        length = max_sequence_length + vision_tokens(pipe.text_encoder.config, height=size[0], width=size[1])

        def padded(texts: list[str]) -> dict[str, torch.Tensor]:
            embeds, mask = pipe.encode_prompt(prompt=texts, image=shown, device=device)
            if embeds.shape[1] > length:
                raise ValueError(
                    f"a Qwen-Image-Edit prompt with its source image is {embeds.shape[1]} tokens, more than "
                    f"policy.max_sequence_length={max_sequence_length} plus the image's {length - max_sequence_length}"
                    f" vision tokens; raise policy.max_sequence_length to at least "
                    f"{embeds.shape[1] - length + max_sequence_length}."
                )
            return padded_prompt_embeddings(embeds, mask, length)

        return padded(list(prompts)), padded([negative_prompt] * len(prompts))

    def encode_sources(self, pipe, images, *, height, width, num_frames, device):
        vae = pipe.vae
        size = self.source_size(pipe, height=height, width=width)
        pixels = pipe.image_processor.preprocess(images, *size).unsqueeze(2)  # [B, 3, 1, H, W] in [-1, 1]
        vae_device = next(vae.parameters()).device
        with torch.no_grad():
            latents = vae.encode(pixels.to(device=vae_device, dtype=vae.dtype)).latent_dist.mode().float()
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean).view(shape).to(latents.device)
        std = torch.tensor(vae.config.latents_std).view(shape).to(latents.device)
        latents = (latents - mean) / std  # [B, C, 1, h, w]
        batch, channels, _, h, w = latents.shape
        return {SOURCE_TOKENS: pipe._pack_latents(latents, batch, channels, h, w).to(device)}  # [B, h/2 * w/2, 4C]

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        if SOURCE_TOKENS not in embeds:
            raise ValueError(
                "qwen_image_edit edits a source image; the rows have none (set policy.source_column to the column "
                "holding them)."
            )
        dtype = model_dtype(transformer)
        batch, tokens, _ = latents.shape
        rows, cols = self.grid.of(tokens, "Qwen-Image-Edit")
        source = embeds[SOURCE_TOKENS]
        if source.shape[1] != tokens:
            raise ValueError(f"source tokens {tuple(source.shape)} do not match the latents' {tokens} tokens.")
        guidance_input = None
        if transformer.config.guidance_embeds:
            guidance_input = torch.full((batch,), guidance, device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=torch.cat([latents, source], dim=1).to(dtype),
            timestep=(timestep / 1000).to(dtype),
            guidance=guidance_input,
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            encoder_hidden_states_mask=embeds["encoder_hidden_states_mask"],
            img_shapes=[[(1, rows, cols), (1, rows, cols)]] * batch,
            return_dict=False,
        )[0]
        return out[:, :tokens].float()  # [B, tokens, 4C]: the noisy tokens' velocity
