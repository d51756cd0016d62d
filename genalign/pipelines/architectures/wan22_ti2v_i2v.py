"""Wan2.2-TI2V-5B image-to-video (``WanImageToVideoPipeline`` with ``expand_timesteps``): the TI2V transformer and
Wan2.2 VAE of ``wan22_ti2v`` (:mod:`genalign.pipelines.architectures.wan22`), the source image as the video's first
frame. As diffusers' pipeline does, the image alone is encoded as one frame (the VAE's mode, normalised by its
per-channel mean and std), written into the first latent frame of every transformer input
(``(1 - m) c + m x`` with the first-frame mask ``m``: 0 on latent frame 0, 1 after) and its tokens get timestep 0 (the
per-token timesteps are ``m t``); the decoded video's first frame is the source's latents.

Reading chosen: the velocity on the first latent frame is set to 0. diffusers lets that frame of its latents drift
under the model's output there and overwrites it at every input and at the end, so it never reaches the output; here
the first frame's part of each step's log-probability then does not depend on the weights (it is the same number in
the rollout and in every re-score), where the model's output on a frame it cannot change would only add noise to the
policy gradient. The final latents get the source written into the first frame before decoding
(:meth:`Wan22TI2VImageArchitecture.output_latents`), as diffusers does; the other frames are diffusers' exactly.
"""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, config_value, model_dtype
from genalign.pipelines.architectures.wan import wan22_layout
from genalign.pipelines.architectures.wan22 import Wan22TI2VArchitecture

#: The conditioning key of the source's one-frame latents ``[B, C, 1, h, w]``.
SOURCE_LATENTS = "source_latents"


def first_frame_mask(latents: torch.Tensor) -> torch.Tensor:
    """``m`` ``[1, 1, F', h, w]`` for latents ``[B, C, F', h, w]``: 0 on the first latent frame, 1 on the others."""
    mask = torch.ones(1, 1, *latents.shape[2:], dtype=latents.dtype, device=latents.device)
    mask[:, :, 0] = 0
    return mask


@FLOW_ARCHITECTURES.register(
    "wan22_ti2v_i2v",
    summary="Wan2.2-TI2V-5B image-to-video (WanImageToVideoPipeline, expand_timesteps): the source's latents as the "
    "first latent frame, its tokens at timestep 0.",
)
class Wan22TI2VImageArchitecture(Wan22TI2VArchitecture):
    name = "wan22_ti2v_i2v"
    pipeline_classes = ("WanImageToVideoPipeline",)
    source_role = "first_frame"

    @classmethod
    def serves(cls, pipeline_class, pipeline_config):
        return pipeline_class in cls.pipeline_classes and wan22_layout(pipeline_config) == "wan22_ti2v"

    @classmethod
    def source_shapes(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        _, channels, _, h, w = cls.latent_shape(
            transformer_config, vae_config, height=height, width=width, num_frames=num_frames, batch=batch
        )
        return {SOURCE_LATENTS: (batch, channels, 1, h, w)}

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """The tiny TI2V-5B layout of ``wan22_ti2v`` (two layers on 48 channels, Wan2.2-style VAE, 32 px) in a
        ``WanImageToVideoPipeline`` with ``expand_timesteps`` and no image encoder (as TI2V-5B)."""
        from diffusers import WanImageToVideoPipeline

        base = Wan22TI2VArchitecture.tiny_pipeline(seed).components
        return WanImageToVideoPipeline(
            tokenizer=base["tokenizer"], text_encoder=base["text_encoder"], vae=base["vae"],
            scheduler=base["scheduler"], transformer=base["transformer"], expand_timesteps=True,
        )  # fmt: skip

    def encode_sources(self, pipe, images, *, height, width, num_frames, device):
        vae = pipe.vae
        frames = pipe.video_processor.preprocess(images, height=height, width=width).float()  # [B, 3, H, W]
        vae_device = next(vae.parameters()).device
        with torch.no_grad():
            latents = vae.encode(frames.unsqueeze(2).to(device=vae_device, dtype=vae.dtype)).latent_dist.mode()
        z_dim = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(latents.device)
        inverse_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(latents.device)
        return {SOURCE_LATENTS: ((latents.float() - mean) * inverse_std).to(device)}  # [B, C, 1, h, w]

    def output_latents(self, latents, conditioning):
        if conditioning is None or SOURCE_LATENTS not in conditioning:
            raise ValueError("wan22_ti2v_i2v decodes its latents with the source's first frame; none was given.")
        mask = first_frame_mask(latents)
        return (1 - mask) * conditioning[SOURCE_LATENTS].to(latents) + mask * latents

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        if SOURCE_LATENTS not in embeds:
            raise ValueError(
                "wan22_ti2v_i2v animates a first frame; the rows have none (set policy.source_column to the column "
                "holding the images, or use wan22_ti2v for text-to-video)."
            )
        dtype = model_dtype(transformer)
        mask = first_frame_mask(latents)  # [1, 1, F', h, w]
        hidden = (1 - mask) * embeds[SOURCE_LATENTS].to(latents) + mask * latents  # the source as latent frame 0
        _, p_h, p_w = config_value(transformer.config, "patch_size")
        per_token = mask[0, 0][:, ::p_h, ::p_w].flatten()  # [L]: 0 on the first frame's tokens
        out = transformer(
            hidden_states=hidden.to(dtype),
            timestep=per_token[None, :] * timestep[:, None],  # [B, L]
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            return_dict=False,
        )[0]
        return out.float() * mask  # [B, C, F', h, w], 0 on the first frame (module docstring)
