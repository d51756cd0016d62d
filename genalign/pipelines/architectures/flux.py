"""FLUX.1: ``FluxTransformer2DModel`` (double- and single-stream blocks), latents packed 2x2 into tokens
``[B, h/2 * w/2, 4C]`` with image position ids, timestep ``sigma``, guidance *embedded* (FLUX.1-dev is
guidance-distilled: no unconditional branch), CLIP-L pooled + T5 prompt embeddings."""

from __future__ import annotations

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
    "flux", summary="FLUX.1 (FluxPipeline): packed 2x2 latent patches, guidance embedded (no unconditional branch)."
)
class FluxArchitecture(FlowArchitecture):
    name = "flux"
    pipeline_classes = ("FluxPipeline",)
    transformer_class = "FluxTransformer2DModel"
    block_config_keys = {"double": "num_layers", "single": "num_single_layers"}
    uses_true_cfg = False
    linear_sigmas = True
    _grid: tuple[int, int] = (0, 0)
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def latent_hw(cls, vae_config, *, height: int, width: int) -> tuple[int, int]:
        """Height and width of the unpacked latents: even, for the 2x2 patches of the tokens."""
        scale = vae_scale_factor(vae_config) * 2
        return 2 * (height // scale), 2 * (width // scale)

    @classmethod
    def noise_shape(cls, transformer_config, vae_config, *, height, width, batch) -> tuple[int, int, int, int]:
        """Latents ``[B, C, h, w]`` before packing."""
        h, w = cls.latent_hw(vae_config, height=height, width=width)
        return (batch, config_value(transformer_config, "in_channels") // 4, h, w)

    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        _, channels, h, w = cls.noise_shape(transformer_config, vae_config, height=height, width=width, batch=batch)
        return (batch, (h // 2) * (w // 2), 4 * channels)  # packed 2x2: [B, h/2 * w/2, 4C]

    @classmethod
    def text_embedding_shapes(cls, transformer_config, encoder_configs, *, max_sequence_length, batch):
        return {
            "encoder_hidden_states": (
                batch, max_sequence_length, config_value(transformer_config, "joint_attention_dim"),
            ),
            "pooled_projections": (batch, config_value(transformer_config, "pooled_projection_dim")),
        }  # fmt: skip

    @classmethod
    def latents_for_decode(cls, latents, vae_config, *, height, width):
        from diffusers import FluxPipeline

        scale = vae_scale_factor(vae_config)
        h, w = cls.latent_hw(vae_config, height=height, width=width)
        return FluxPipeline._unpack_latents(latents, h * scale, w * scale, scale)  # [B, C, h, w]

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """FLUX.1 with one double and one single block, guidance embedding, CLIP + T5 (packed 2x2 latents)."""
        from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

        from genalign.pipelines.tiny_models import tiny_clip, tiny_image_vae, tiny_t5, word_tokenizer

        torch.manual_seed(seed)
        transformer = FluxTransformer2DModel(
            patch_size=1,
            in_channels=4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            pooled_projection_dim=32,
            guidance_embeds=True,
            axes_dims_rope=(4, 4, 8),
        )
        return FluxPipeline(
            transformer=transformer,
            scheduler=FlowMatchEulerDiscreteScheduler(),
            vae=tiny_image_vae(1, seed=seed),
            text_encoder=tiny_clip(32, projection=False, seed=seed + 1),
            tokenizer=word_tokenizer(),
            text_encoder_2=tiny_t5(32, umt5=False, seed=seed + 2),
            tokenizer_2=word_tokenizer(),
        )

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        cond, pooled, _text_ids = pipe.encode_prompt(
            prompt=prompts, prompt_2=None, device=device, max_sequence_length=max_sequence_length
        )
        return {"encoder_hidden_states": cond, "pooled_projections": pooled}, None

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        shape = self.noise_shape(pipe.transformer.config, pipe.vae.config, height=height, width=width, batch=batch_size)
        _, channels, h, w = shape
        self._grid = (h // 2, w // 2)  # token grid of the packed latents, for the image position ids
        noise = torch.randn(shape, generator=generator, device=generator.device)
        return pipe._pack_latents(noise, batch_size, channels, h, w)  # [B, h/2 * w/2, 4C]

    def image_seq_len(self, pipe, latents):
        return latents.shape[1]

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        batch, tokens, _ = latents.shape
        rows, cols = self._grid if self._grid[0] * self._grid[1] == tokens else (round(tokens**0.5),) * 2
        if rows * cols != tokens:
            raise ValueError(f"FLUX latents with {tokens} tokens do not match the last image grid; sample them first.")
        image_ids = torch.zeros(rows, cols, 3, device=latents.device)
        image_ids[..., 1] += torch.arange(rows, device=latents.device)[:, None]
        image_ids[..., 2] += torch.arange(cols, device=latents.device)[None, :]
        text = embeds["encoder_hidden_states"]
        guidance_input = None
        if transformer.config.guidance_embeds:
            guidance_input = torch.full((batch,), guidance, device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=(timestep / 1000).to(dtype),
            guidance=guidance_input,
            pooled_projections=embeds["pooled_projections"].to(dtype),
            encoder_hidden_states=text.to(dtype),
            txt_ids=torch.zeros(text.shape[1], 3, device=latents.device, dtype=dtype),
            img_ids=image_ids.reshape(tokens, 3).to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        return decode_images(pipe, self.latents_for_decode(latents, pipe.vae.config, height=height, width=width))
