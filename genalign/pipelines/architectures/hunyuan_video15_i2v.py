"""HunyuanVideo 1.5 image-to-video (diffusers' ``HunyuanVideo15ImageToVideoPipeline``): the text-to-video model's
conventions (:mod:`genalign.pipelines.architectures.hunyuan_video15`) with the first frame given, as that pipeline
conditions on it:

* the source image is resized to the sampled size by centre crop, encoded by the VAE's mode and scaled by its
  ``scaling_factor``; its latents fill latent frame 0 of the ``C`` condition channels (zeros after) and the mask
  channel is 1 on frame 0, 0 after: ``[B, C + 1, F', h, w]`` beside the noisy latents;
* its SigLIP last hidden state (``image_encoder`` on the ``feature_extractor``'s pixels of the resized image,
  ``[B, 729, 1152]`` for the published model) becomes the image tokens the transformer attends to.

Both are computed once per source (deterministic) and stored with the trajectory. Reading chosen: genalign samples the
configured ``policy.height`` x ``policy.width``, where the pipeline picks the size of its bucket closest to the image's
aspect ratio (the same size for an image of the configured aspect ratio). The distilled checkpoints' MeanFlow timestep
(``use_meanflow``) is refused.
"""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, config_value
from genalign.pipelines.architectures.hunyuan_video15 import (
    IMAGE_EMBEDS,
    IMAGE_TOKENS,
    SOURCE_CONDITION,
    HunyuanVideo15Architecture,
)


@FLOW_ARCHITECTURES.register(
    "hunyuan_video15_i2v",
    summary="HunyuanVideo 1.5 image-to-video (HunyuanVideo15ImageToVideoPipeline): first-frame latents and mask on "
    "the channels, SigLIP image tokens.",
)
class HunyuanVideo15I2VArchitecture(HunyuanVideo15Architecture):
    name = "hunyuan_video15_i2v"
    pipeline_classes = ("HunyuanVideo15ImageToVideoPipeline",)
    source_role = "first_frame"

    @classmethod
    def source_shapes(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        batch_, channels, frames, h, w = cls.latent_shape(
            transformer_config, vae_config, height=height, width=width, num_frames=num_frames, batch=batch
        )
        return {
            SOURCE_CONDITION: (batch_, channels + 1, frames, h, w),
            IMAGE_EMBEDS: (batch_, IMAGE_TOKENS, config_value(transformer_config, "image_embed_dim")),
        }

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """The tiny text-to-video pipeline with a one-layer SigLIP vision tower of width 12 that makes the published
        tower's 729 tokens (27 px images in 1 px patches) and its image processor, in a
        ``HunyuanVideo15ImageToVideoPipeline``."""
        from diffusers import HunyuanVideo15ImageToVideoPipeline
        from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

        base = HunyuanVideo15Architecture.tiny_pipeline(seed).components
        vision = SiglipVisionConfig(hidden_size=12, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                                    image_size=27, patch_size=1)  # fmt: skip
        torch.manual_seed(seed + 3)
        return HunyuanVideo15ImageToVideoPipeline(
            **base,
            image_encoder=SiglipVisionModel(vision).eval(),
            feature_extractor=SiglipImageProcessor(size={"height": 27, "width": 27}),
        )

    def encode_sources(self, pipe, images, *, height, width, num_frames, device):
        if pipe.transformer.config.use_meanflow:
            raise ValueError(
                "this HunyuanVideo 1.5 transformer uses MeanFlow timesteps (a distilled checkpoint); genalign trains "
                "the non-distilled image-to-video models only."
            )
        processor = pipe.video_processor
        resized = [processor.resize(image.convert("RGB"), height=height, width=width, resize_mode="crop")
                   for image in images]  # fmt: skip
        vae = pipe.vae
        vae_device = next(vae.parameters()).device
        with torch.no_grad():  # one image per VAE call, as it decodes (decode_batch: its attention mask)
            latents = torch.cat([pipe._get_image_latents(vae, processor, [image], height, width, vae_device)
                                 for image in resized])  # fmt: skip
            embeds = pipe._get_image_embeds(pipe.image_encoder, pipe.feature_extractor, resized, device)
        batch, channels, _, h, w = latents.shape  # [B, C, 1, h, w], scaled
        frames = (num_frames - 1) // vae.config.temporal_compression_ratio + 1
        condition = latents.new_zeros(batch, channels + 1, frames, h, w).float()
        condition[:, :channels, :1] = latents.float()
        condition[:, channels, 0] = 1.0
        return {SOURCE_CONDITION: condition.to(device), IMAGE_EMBEDS: embeds.float()}  # [B, C+1, F', h, w], [B, L, D]
