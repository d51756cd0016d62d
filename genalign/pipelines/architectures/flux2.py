"""FLUX.2: ``Flux2Transformer2DModel`` (double- and single-stream blocks), VAE latents patchified 2x2 into ``4C``
channels, normalised by the VAE's batch-norm statistics and flattened into tokens ``[B, h/2 * w/2, 4C]`` with 4-axis
position ids ``(t, row, col, l)``, timestep ``sigma``, prompt embeddings made of three hidden layers of a chat LLM
stacked along the channels, and a mu-shifted schedule whose ``mu`` depends on the token count *and* the step count
(diffusers' ``compute_empirical_mu``).

* ``flux2`` (FLUX.2 [dev], ``Flux2Pipeline``): Mistral-Small-3.1 text encoder (layers 10, 20, 30, with FLUX.2's system
  message), guidance *embedded* (guidance-distilled: no unconditional branch);
* ``flux2_klein`` (FLUX.2 [klein], ``Flux2KleinPipeline``): Qwen3 text encoder (layers 9, 18, 27), no guidance
  embedding, true classifier-free guidance with the empty negative prompt; the step-distilled Klein checkpoints
  (``is_distilled``) sample without guidance, whatever the guidance scale, as diffusers does.
"""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import (
    FLOW_ARCHITECTURES,
    FlowArchitecture,
    config_value,
    model_dtype,
    vae_scale_factor,
)
from genalign.pipelines.architectures.token_grid import TokenGrid


def empirical_mu(image_seq_len: int, num_steps: int) -> float:
    """FLUX.2's schedule shift: above 4300 tokens ``mu = 0.00016927 n + 0.45666666``; below, linear in the step count
    between that line (reached at 200 steps) and ``8.73809524e-05 n + 1.89833333`` (at 10 steps)."""
    at_200 = 0.00016927 * image_seq_len + 0.45666666
    if image_seq_len > 4300:
        return float(at_200)
    at_10 = 8.73809524e-05 * image_seq_len + 1.89833333
    slope = (at_200 - at_10) / 190.0
    return float(at_200 + slope * (num_steps - 200))


def channels_to_patches(latents: torch.Tensor) -> torch.Tensor:
    """``[B, 4C, h, w]`` -> ``[B, C, 2h, 2w]``: the channels of each token back into its 2x2 patch (the VAE encoder's
    latents are patchified channel-major, then patch row, then patch column)."""
    batch, channels, h, w = latents.shape
    patches = latents.reshape(batch, channels // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
    return patches.reshape(batch, channels // 4, 2 * h, 2 * w)


def position_ids(rows: int, cols: int, tokens: int, batch: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Image ids ``[B, rows * cols, 4]`` = ``(0, row, col, 0)`` and text ids ``[B, tokens, 4]`` = ``(0, 0, 0, l)``."""
    image = torch.zeros(rows, cols, 4, device=device)
    image[..., 1] = torch.arange(rows, device=device)[:, None]
    image[..., 2] = torch.arange(cols, device=device)[None, :]
    text = torch.zeros(tokens, 4, device=device)
    text[:, 3] = torch.arange(tokens, device=device)
    return image.reshape(1, rows * cols, 4).expand(batch, -1, -1), text.expand(batch, -1, -1)


@FLOW_ARCHITECTURES.register(
    "flux2",
    summary="FLUX.2 [dev] (Flux2Pipeline): 2x2-patchified batch-normalised latent tokens, Mistral-3 prompt embeddings "
    "of three layers, guidance embedded (no unconditional branch).",
)
class Flux2Architecture(FlowArchitecture):
    name = "flux2"
    pipeline_classes = ("Flux2Pipeline",)
    transformer_class = "Flux2Transformer2DModel"
    block_config_keys = {"double": "num_layers", "single": "num_single_layers"}
    uses_true_cfg = False
    linear_sigmas = True
    #: text-encoder hidden states stacked into the prompt embeddings (diffusers' ``text_encoder_out_layers``)
    text_layers: tuple[int, ...] = (10, 20, 30)
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj",
                           "to_add_out", "to_qkv_mlp_proj")  # fmt: skip

    def __init__(self) -> None:
        self.grid = TokenGrid()

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def noise_shape(cls, transformer_config, vae_config, *, height, width, batch) -> tuple[int, int, int, int]:
        """Noise ``[B, 4C, h/2, w/2]`` as diffusers draws it (already patchified)."""
        scale = vae_scale_factor(vae_config) * 2
        return (batch, config_value(transformer_config, "in_channels"), height // scale, width // scale)

    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        _, channels, rows, cols = cls.noise_shape(transformer_config, vae_config, height=height, width=width,
                                                  batch=batch)  # fmt: skip
        return (batch, rows * cols, channels)

    @classmethod
    def text_embedding_shapes(cls, transformer_config, encoder_configs, *, max_sequence_length, batch):
        """Padded to ``max_sequence_length`` tokens (the tokenizer pads to it)."""
        width = config_value(transformer_config, "joint_attention_dim")
        return {"encoder_hidden_states": (batch, max_sequence_length, width)}

    @classmethod
    def latents_for_decode(cls, latents, vae_config, *, height, width):
        """``[B, C, h, w]``: tokens back to the patchified grid, then to the VAE's channels (the batch-norm
        de-normalisation, elementwise in between, is left to :meth:`decode`)."""
        batch, _, channels = latents.shape
        scale = vae_scale_factor(vae_config) * 2
        grid = latents.transpose(1, 2).reshape(batch, channels, height // scale, width // scale)
        return channels_to_patches(grid)

    @classmethod
    def tiny_transformer(cls, *, guidance_embeds: bool, seed: int):
        """One double and one single block over 4-channel latents (16 patchified channels), text width 3 x 16."""
        from diffusers import Flux2Transformer2DModel

        torch.manual_seed(seed)
        return Flux2Transformer2DModel(
            patch_size=1,
            in_channels=16,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=16 * len(cls.text_layers),
            timestep_guidance_channels=32,
            axes_dims_rope=(4, 4, 4, 4),
            guidance_embeds=guidance_embeds,
        )

    @classmethod
    def tiny_vae(cls, seed: int):
        """A two-level ``AutoencoderKLFlux2`` with 4 latent channels (16 px images: 8x8 latents, 16 tokens) and
        batch-norm statistics away from 0 / 1, so that the de-normalisation shows."""
        from diffusers import AutoencoderKLFlux2

        torch.manual_seed(seed)
        vae = AutoencoderKLFlux2(
            block_out_channels=(4, 4),
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            layers_per_block=1,
            latent_channels=4,
            norm_num_groups=1,
            use_quant_conv=False,
            use_post_quant_conv=False,
            sample_size=32,
        )
        vae.bn.running_mean.copy_(torch.linspace(-0.5, 0.5, 16))
        vae.bn.running_var.copy_(torch.linspace(0.5, 2.0, 16))
        return vae

    @classmethod
    def tiny_scheduler(cls):
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, time_shift_type="exponential")

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """FLUX.2 [dev] with a 31-layer Mistral-3 of width 16 (the published layers 10, 20, 30 exist; its vision
        tower, unused by text-to-image, one block deep)."""
        from diffusers import Flux2Pipeline
        from transformers import Mistral3Config, Mistral3ForConditionalGeneration

        from genalign.pipelines.tiny_models import CHAT_TEMPLATE, chat_word_tokenizer

        tokenizer = chat_word_tokenizer(chat_template=CHAT_TEMPLATE)
        text = dict(model_type="mistral", hidden_size=16, intermediate_size=32, num_hidden_layers=31,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=8, vocab_size=len(tokenizer),
                    bos_token_id=0, eos_token_id=2, pad_token_id=1)  # fmt: skip
        vision = dict(model_type="pixtral", hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, head_dim=8, image_size=32, patch_size=16)  # fmt: skip
        torch.manual_seed(seed + 1)
        text_encoder = Mistral3ForConditionalGeneration(
            Mistral3Config(text_config=text, vision_config=vision, image_token_index=3, spatial_merge_size=1)
        ).eval()
        return Flux2Pipeline(
            transformer=cls.tiny_transformer(guidance_embeds=True, seed=seed),
            vae=cls.tiny_vae(seed),
            scheduler=cls.tiny_scheduler(),
            text_encoder=text_encoder,
            tokenizer=tokenizer,
        )

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    def _embeddings(self, pipe, prompts, *, max_sequence_length, device) -> dict[str, torch.Tensor]:
        embeds, _text_ids = pipe.encode_prompt(prompt=list(prompts), device=device,
                                               max_sequence_length=max_sequence_length,
                                               text_encoder_out_layers=self.text_layers)  # fmt: skip
        return {"encoder_hidden_states": embeds}

    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        return self._embeddings(pipe, prompts, max_sequence_length=max_sequence_length, device=device), None

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        shape = self.noise_shape(pipe.transformer.config, pipe.vae.config, height=height, width=width, batch=batch_size)
        self.grid.set(shape[2], shape[3])
        noise = torch.randn(shape, generator=generator, device=generator.device)  # [B, 4C, h/2, w/2]
        return noise.flatten(2).transpose(1, 2)  # [B, h/2 * w/2, 4C], row-major tokens

    def schedule_mu(self, pipe, latents, *, num_steps):
        if not pipe.scheduler.config.get("use_dynamic_shifting", False):
            return None
        return empirical_mu(latents.shape[1], num_steps)

    def image_seq_len(self, pipe, latents):
        return latents.shape[1]

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        batch, tokens, _ = latents.shape
        rows, cols = self.grid.of(tokens, "FLUX.2")
        text = embeds["encoder_hidden_states"]
        image_ids, text_ids = position_ids(rows, cols, text.shape[1], batch, latents.device)
        guidance_input = None
        if transformer.config.guidance_embeds:
            guidance_input = torch.full((batch,), guidance, device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=(timestep / 1000).to(dtype),
            guidance=guidance_input,
            encoder_hidden_states=text.to(dtype),
            txt_ids=text_ids,
            img_ids=image_ids,
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        batch, _, channels = latents.shape
        scale = vae_scale_factor(vae.config) * 2
        grid = latents.transpose(1, 2).reshape(batch, channels, height // scale, width // scale)  # [B, 4C, h, w]
        mean = vae.bn.running_mean.view(1, -1, 1, 1).to(grid)
        std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(grid)
        images = vae.decode(channels_to_patches(grid * std + mean).to(vae.dtype), return_dict=False)[0]
        return pipe.image_processor.postprocess(images.float(), output_type="pil")


@FLOW_ARCHITECTURES.register(
    "flux2_klein",
    summary="FLUX.2 [klein] (Flux2KleinPipeline): FLUX.2's latents and schedule, Qwen3 prompt embeddings of three "
    "layers, true classifier-free guidance.",
)
class Flux2KleinArchitecture(Flux2Architecture):
    name = "flux2_klein"
    pipeline_classes = ("Flux2KleinPipeline",)
    uses_true_cfg = True
    text_layers = (9, 18, 27)

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """FLUX.2 [klein] with a 28-layer Qwen3 of width 16 (the published layers 9, 18, 27 exist)."""
        from diffusers import Flux2KleinPipeline
        from transformers import Qwen3Config, Qwen3ForCausalLM

        from genalign.pipelines.tiny_models import CHAT_TEMPLATE, chat_word_tokenizer

        tokenizer = chat_word_tokenizer(chat_template=CHAT_TEMPLATE)
        torch.manual_seed(seed + 1)
        text_encoder = Qwen3ForCausalLM(
            Qwen3Config(
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=28,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=8,
                vocab_size=len(tokenizer),
                bos_token_id=0,
                eos_token_id=2,
                pad_token_id=1,
                tie_word_embeddings=True,
            )
        ).eval()
        return Flux2KleinPipeline(
            transformer=cls.tiny_transformer(guidance_embeds=False, seed=seed),
            vae=cls.tiny_vae(seed),
            scheduler=cls.tiny_scheduler(),
            text_encoder=text_encoder,
            tokenizer=tokenizer,
        )

    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        """Klein's pipeline uses the empty negative prompt; ``negative_prompt`` replaces it. A step-distilled
        checkpoint (``is_distilled`` in its pipeline config) has no unconditional branch, as in diffusers."""
        cond = self._embeddings(pipe, prompts, max_sequence_length=max_sequence_length, device=device)
        if pipe.config.get("is_distilled", False):
            return cond, None
        uncond = self._embeddings(pipe, [negative_prompt] * len(prompts), max_sequence_length=max_sequence_length,
                                  device=device)  # fmt: skip
        return cond, uncond
