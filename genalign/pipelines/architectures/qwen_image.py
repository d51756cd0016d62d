"""Qwen-Image text-to-image: ``QwenImageTransformer2DModel`` (a dual-stream MMDiT), latents of the 3D
``AutoencoderKLQwenImage`` (one frame) packed 2x2 into tokens ``[B, h/2 * w/2, 4C]`` with the token grid as
``img_shapes`` for the rotary embedding, timestep ``sigma``, Qwen2.5-VL prompt embeddings (last hidden state after the
34-token system prefix) with a padding mask, mu-shifted schedule linear in the token count, and *norm-preserving* true
classifier-free guidance (diffusers' ``QwenImagePipeline``)."""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, FlowArchitecture, config_value, model_dtype
from genalign.pipelines.architectures.token_grid import TokenGrid


def qwen_vae_scale_factor(vae_config) -> int:
    """Pixels per latent of ``AutoencoderKLQwenImage``: ``2 ** len(temperal_downsample)`` (one halving per level)."""
    return 2 ** len(config_value(vae_config, "temperal_downsample"))


def norm_preserving_guidance(v_cond: torch.Tensor, v_uncond: torch.Tensor, guidance_scale: float) -> torch.Tensor:
    """Qwen-Image's true CFG: ``g = v_u + w (v_c - v_u)`` rescaled per token to the norm of ``v_c`` over the channel
    axis, ``g * |v_c| / |g|`` (``[B, tokens, channels]``)."""
    guided = v_uncond + guidance_scale * (v_cond - v_uncond)
    return guided * (v_cond.norm(dim=-1, keepdim=True) / guided.norm(dim=-1, keepdim=True))


def padded_prompt_embeddings(embeds: torch.Tensor, mask: torch.Tensor | None, length: int) -> dict[str, torch.Tensor]:
    """Prompt embeddings ``[B, L, D]`` and their mask ``[B, L]`` (None: every token valid) padded with zeros to
    ``length`` tokens, as the transformer's keywords ``encoder_hidden_states`` / ``encoder_hidden_states_mask``."""
    batch, tokens, width = embeds.shape
    if mask is None:
        mask = torch.ones(batch, tokens, dtype=torch.long, device=embeds.device)
    full = embeds.new_zeros(batch, length, width)
    full[:, :tokens] = embeds
    full_mask = mask.new_zeros(batch, length)
    full_mask[:, :tokens] = mask
    return {"encoder_hidden_states": full, "encoder_hidden_states_mask": full_mask}


@FLOW_ARCHITECTURES.register(
    "qwen_image",
    summary="Qwen-Image (QwenImagePipeline): packed 2x2 latents of a 3D VAE, Qwen2.5-VL prompt embeddings with a mask, "
    "norm-preserving true CFG.",
)
class QwenImageArchitecture(FlowArchitecture):
    name = "qwen_image"
    pipeline_classes = ("QwenImagePipeline",)
    transformer_class = "QwenImageTransformer2DModel"
    block_config_keys = {"blocks": "num_layers"}
    linear_sigmas = True
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")

    def __init__(self) -> None:
        self.grid = TokenGrid()

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def noise_shape(cls, transformer_config, vae_config, *, height, width, batch) -> tuple[int, int, int, int, int]:
        """Noise ``[B, 1, C, h, w]`` as diffusers draws it (one frame), ``h, w`` even for the 2x2 patches."""
        scale = qwen_vae_scale_factor(vae_config) * 2
        channels = config_value(transformer_config, "in_channels") // 4
        return (batch, 1, channels, 2 * (height // scale), 2 * (width // scale))

    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        _, _, channels, h, w = cls.noise_shape(transformer_config, vae_config, height=height, width=width, batch=batch)
        return (batch, (h // 2) * (w // 2), 4 * channels)  # packed 2x2: [B, h/2 * w/2, 4C]

    @classmethod
    def text_embedding_shapes(cls, transformer_config, encoder_configs, *, max_sequence_length, batch):
        """Padded to ``max_sequence_length`` tokens (at most the prompt's tokens after the system prefix are valid)."""
        return {
            "encoder_hidden_states": (
                batch, max_sequence_length, config_value(transformer_config, "joint_attention_dim"),
            ),
            "encoder_hidden_states_mask": (batch, max_sequence_length),
        }  # fmt: skip

    @classmethod
    def latents_for_decode(cls, latents, vae_config, *, height, width):
        """``[B, C, 1, h, w]``: the packed tokens unpacked into one-frame video latents."""
        batch, _, packed = latents.shape
        scale = qwen_vae_scale_factor(vae_config) * 2
        h, w = 2 * (height // scale), 2 * (width // scale)
        patches = latents.reshape(batch, h // 2, w // 2, packed // 4, 2, 2)
        return patches.permute(0, 3, 1, 4, 2, 5).reshape(batch, packed // 4, 1, h, w)

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """Qwen-Image with two transformer blocks, a two-layer Qwen2.5-VL (its vision tower one block deep, unused by
        text-to-image) and a one-level 3D VAE (16 px images: 8x8 latents, 16 tokens)."""
        from diffusers import (
            AutoencoderKLQwenImage,
            FlowMatchEulerDiscreteScheduler,
            QwenImagePipeline,
            QwenImageTransformer2DModel,
        )

        from genalign.pipelines.tiny_models import chat_word_tokenizer, tiny_qwen25_vl

        torch.manual_seed(seed)
        transformer = QwenImageTransformer2DModel(
            patch_size=2,
            in_channels=16,
            out_channels=4,
            num_layers=2,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=16,
            guidance_embeds=False,
            axes_dims_rope=(8, 4, 4),
        )
        torch.manual_seed(seed)
        vae = AutoencoderKLQwenImage(
            base_dim=4, z_dim=4, dim_mult=[1, 1], num_res_blocks=1, temperal_downsample=[False],
            latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[1.5, 0.8, 1.2, 1.0],
        )  # fmt: skip
        scheduler = FlowMatchEulerDiscreteScheduler(  # the schedule settings of Qwen/Qwen-Image's scheduler_config.json
            use_dynamic_shifting=True,
            base_shift=0.5,
            max_shift=0.9,
            base_image_seq_len=256,
            max_image_seq_len=8192,
            shift_terminal=0.02,
            time_shift_type="exponential",
        )
        return QwenImagePipeline(
            transformer=transformer,
            vae=vae,
            scheduler=scheduler,
            text_encoder=tiny_qwen25_vl(16, seed=seed + 1),
            tokenizer=chat_word_tokenizer(),
        )

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        """Embeddings padded with zeros to ``max_sequence_length`` tokens and their mask (diffusers pads to the
        longest prompt of the batch; a fixed length lets genalign cache and batch the prompts of any step)."""

        def padded(texts: list[str]) -> dict[str, torch.Tensor]:
            embeds, mask = pipe.encode_prompt(prompt=texts, device=device, max_sequence_length=max_sequence_length)
            return padded_prompt_embeddings(embeds, mask, max_sequence_length)

        return padded(list(prompts)), padded([negative_prompt] * len(prompts))

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        shape = self.noise_shape(pipe.transformer.config, pipe.vae.config, height=height, width=width, batch=batch_size)
        _, _, channels, h, w = shape
        self.grid.set(h // 2, w // 2)
        noise = torch.randn(shape, generator=generator, device=generator.device)  # diffusers' draw order
        return pipe._pack_latents(noise, batch_size, channels, h, w)  # [B, h/2 * w/2, 4C]

    def image_seq_len(self, pipe, latents):
        return latents.shape[1]

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        batch, tokens, _ = latents.shape
        rows, cols = self.grid.of(tokens, "Qwen-Image")
        guidance_input = None
        if transformer.config.guidance_embeds:
            guidance_input = torch.full((batch,), guidance, device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=(timestep / 1000).to(dtype),
            guidance=guidance_input,
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            encoder_hidden_states_mask=embeds["encoder_hidden_states_mask"],
            img_shapes=[[(1, rows, cols)]] * batch,
            return_dict=False,
        )[0]
        return out.float()

    def combine_guidance(self, v_cond, v_uncond, guidance_scale):
        return norm_preserving_guidance(v_cond, v_uncond, guidance_scale)

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        video = self.latents_for_decode(latents, vae.config, height=height, width=width)  # [B, C, 1, h, w]
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean).view(shape).to(video.device)
        std = torch.tensor(vae.config.latents_std).view(shape).to(video.device)
        images = vae.decode((video * std + mean).to(vae.dtype), return_dict=False)[0][:, :, 0]  # [B, 3, H, W]
        return pipe.image_processor.postprocess(images.float(), output_type="pil")
