"""Wan image-to-video (``WanImageToVideoPipeline``, Wan2.1 I2V and Wan2.2 I2V without ``expand_timesteps``): the
transformer takes ``[noisy latents, mask, first-frame latents]`` concatenated on the channel axis (``16 + 4 + 16`` in
channels). The condition video is the source image as frame 0 and zeros after it, encoded by the Wan VAE's mode and
normalised by its per-channel mean and std; the mask is 1 on the first frame's ``scale_factor_temporal`` sub-frames
and 0 after, folded to ``[B, 4, F', h, w]``. A transformer with ``image_dim`` (Wan2.1 I2V) also gets the image
encoder's penultimate hidden states (``encoder_hidden_states_image``); Wan2.2 I2V has none."""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, config_value, model_dtype
from genalign.pipelines.architectures.wan import WanArchitecture

#: The conditioning keys: ``[B, 4 + C, F', h, w]`` mask and first-frame latents, ``[B, L, D]`` image-encoder states.
SOURCE_CONDITION, IMAGE_EMBEDS = "source_condition", "source_image_embeds"


def first_frame_mask(batch: int, num_frames: int, temporal: int, height: int, width: int) -> torch.Tensor:
    """diffusers' I2V mask ``[B, temporal, F', h, w]``: the first frame repeated ``temporal`` times, then one entry per
    frame, folded by ``temporal`` into channels; 1 on the given (first) frame, 0 elsewhere."""
    mask = torch.ones(batch, 1, num_frames, height, width)
    mask[:, :, 1:] = 0
    first = torch.repeat_interleave(mask[:, :, 0:1], dim=2, repeats=temporal)
    mask = torch.cat([first, mask[:, :, 1:]], dim=2)  # [B, 1, F + temporal - 1, h, w]
    return mask.view(batch, -1, temporal, height, width).transpose(1, 2)  # [B, temporal, F', h, w]


@FLOW_ARCHITECTURES.register(
    "wan_i2v",
    summary="Wan image-to-video (WanImageToVideoPipeline): first-frame latents and mask concatenated on the channels.",
)
class WanI2VArchitecture(WanArchitecture):
    name = "wan_i2v"
    pipeline_classes = ("WanImageToVideoPipeline",)
    source_role = "first_frame"

    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        batch_, _, frames, h, w = super().latent_shape(
            transformer_config, vae_config, height=height, width=width, num_frames=num_frames, batch=batch
        )
        return (batch_, config_value(transformer_config, "out_channels"), frames, h, w)  # in_channels holds the rest

    @classmethod
    def source_shapes(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        batch_, channels, frames, h, w = cls.latent_shape(
            transformer_config, vae_config, height=height, width=width, num_frames=num_frames, batch=batch
        )
        condition = config_value(transformer_config, "in_channels") - channels
        shapes = {SOURCE_CONDITION: (batch_, condition, frames, h, w)}
        if config_value(transformer_config, "image_dim") is not None:  # CLIP ViT-H/14 penultimate states: 257 tokens
            shapes[IMAGE_EMBEDS] = (batch_, 257, config_value(transformer_config, "image_dim"))
        return shapes

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """The tiny Wan2.1 pipeline with a transformer of ``16 + 4 + 16`` input channels, no image encoder (as Wan2.2
        I2V), in a ``WanImageToVideoPipeline`` (16 px, 5 or 9 frames)."""
        from diffusers import WanImageToVideoPipeline, WanTransformer3DModel

        base = WanArchitecture.tiny_pipeline(seed).components
        torch.manual_seed(seed)
        config = dict(base["transformer"].config) | {"in_channels": 36, "out_channels": 16}
        transformer = WanTransformer3DModel.from_config(config)
        return WanImageToVideoPipeline(
            tokenizer=base["tokenizer"], text_encoder=base["text_encoder"], vae=base["vae"],
            scheduler=base["scheduler"], transformer=transformer,
        )  # fmt: skip

    def encode_sources(self, pipe, images, *, height, width, num_frames, device):
        vae = pipe.vae
        temporal = vae.config.scale_factor_temporal
        frames = pipe.video_processor.preprocess(images, height=height, width=width).float()  # [B, 3, H, W]
        video = torch.cat([frames.unsqueeze(2), frames.new_zeros(frames.shape[0], 3, num_frames - 1, height, width)], 2)
        vae_device = next(vae.parameters()).device
        with torch.no_grad():
            latents = vae.encode(video.to(device=vae_device, dtype=vae.dtype)).latent_dist.mode().float()
        z_dim = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(latents.device)
        std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(latents.device)
        latents = (latents - mean) * std  # [B, C, F', h, w]
        mask = first_frame_mask(len(images), num_frames, temporal, *latents.shape[-2:]).to(latents.device)
        sources = {SOURCE_CONDITION: torch.cat([mask, latents], dim=1).to(device)}  # [B, 4 + C, F', h, w]
        if pipe.transformer.config.image_dim is not None:
            if pipe.image_encoder is None:
                raise ValueError("the Wan transformer has image_dim set but the pipeline has no image_encoder.")
            with torch.no_grad():
                sources[IMAGE_EMBEDS] = pipe.encode_image(images, device).float()  # [B, L, D]
        return sources

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        if SOURCE_CONDITION not in embeds:
            raise ValueError(
                "wan_i2v animates a first frame; the rows have none (set policy.source_column to the column holding "
                "the images)."
            )
        dtype = model_dtype(transformer)
        image_embeds = embeds.get(IMAGE_EMBEDS)
        out = transformer(
            hidden_states=torch.cat([latents, embeds[SOURCE_CONDITION]], dim=1).to(dtype),
            timestep=timestep,
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            encoder_hidden_states_image=None if image_embeds is None else image_embeds.to(dtype),
            return_dict=False,
        )[0]
        return out.float()
